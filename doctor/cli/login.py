"""`install-login-hook` and `uninstall-login-hook`."""

from __future__ import annotations

import os
import sys

import click

from dl_doctor.app import InputProblem
from dl_doctor.cli.base import cli


def _dl_doctor_exe() -> str:
    """The dl-doctor the unit will run: beside this interpreter, else the one on the trusted search path (never the
    current directory through an empty PATH entry: the unit runs it as root)."""
    from dl_doctor.host import spawn

    here = os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "dl-doctor")
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    return here if os.path.exists(here) else (spawn.which("dl-doctor", os.environ.get("PATH"), as_root)
                                              or "/usr/local/bin/dl-doctor")


@cli.command("install-login-hook")
@click.option("--root", default="/", show_default=True, metavar="DIR",
              help="Install into this tree (a mounted image) instead of the running system.")
@click.option("--boot", "boot_only", is_flag=True, help="Refresh the cached result once per boot only (default: "
              "after boot and daily).")
@click.option("--no-systemd", is_flag=True, help="Only the login snippet; something else writes the status file.")
@click.option("--prometheus", "prom_path", metavar="PATH",
              help="Have each cached run also write node_exporter textfile metrics here.")
@click.option("--expect", "expect_file", metavar="EXPECT.toml", help="Have each cached run hold these expectations.")
@click.option("--exe", metavar="PATH", help="The dl-doctor the service runs (default: this one).")
def install_login_hook_cmd(root, boot_only, no_systemd, prom_path, expect_file, exe) -> int:
    """Show a one-line status at login from the last cached run (never runs dl-doctor at login)."""
    from dl_doctor.integrations.login_hook import STATUS_FILE, UnitValueError, install

    if not os.path.isdir(root):
        raise InputProblem(f"--root {root} is not a directory")
    extra = (["--prometheus", prom_path] if prom_path else []) + (["--expect", expect_file] if expect_file else [])
    exe = exe or _dl_doctor_exe()
    if not no_systemd and not os.path.exists(os.path.join(root, exe.lstrip("/"))):
        click.echo(f"dl-doctor: warning: {exe} does not exist under {root}; the service will fail until it does "
                   f"(--exe PATH names the one the system will have)", err=True)
    try:
        written = install(root, exe, systemd=not no_systemd, boot_only=boot_only, extra_args=extra,
                          writable=[os.path.dirname(os.path.abspath(prom_path))] if prom_path else [])
    except UnitValueError as exc:
        raise InputProblem(str(exc))
    except FileExistsError as exc:
        raise InputProblem(str(exc))
    except OSError as exc:
        raise InputProblem(f"cannot install the login hook: {exc.strerror or exc} ({exc.filename or root}); "
                           f"run as root, or use --root DIR for an image")
    for path in written:
        click.echo(f"installed {os.path.join(root, path.lstrip('/')) if root != '/' else path}")
    if not no_systemd and root == "/":
        click.echo("Fill the cache now:  sudo systemctl daemon-reload && sudo systemctl start dl-doctor.service")
    elif no_systemd:
        click.echo(f"The snippet prints {STATUS_FILE}; write it with: dl-doctor run --status-line {STATUS_FILE}")
    return 0


@cli.command("uninstall-login-hook")
@click.option("--root", default="/", show_default=True, metavar="DIR", help="Remove from this tree instead.")
def uninstall_login_hook_cmd(root) -> int:
    """Remove what install-login-hook put in place (files it did not write are left alone)."""
    from dl_doctor.integrations.login_hook import uninstall

    if not os.path.isdir(root):
        raise InputProblem(f"--root {root} is not a directory")
    try:
        removed = uninstall(root)
    except OSError as exc:
        raise InputProblem(f"cannot remove the login hook: {exc.strerror or exc}; run as root")
    for path in removed:
        click.echo(f"removed {path}")
    if not removed:
        click.echo("nothing to remove")
    return 0
