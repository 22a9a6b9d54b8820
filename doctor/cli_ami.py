"""Commands for image pipelines and support: ``dl-doctor expect --from``, ``diff`` and ``bundle``."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Dict, List, Mapping, Tuple

import click

from dl_doctor.cli import (UsageProblem, _build_report, _collect, _expectations, _matrix, _registry, _safe_name,
                        _select, _use_color, cli, collect_options, load_snapshot, matrix_overlay_option, read_document, write_or_refuse,
                        snapshot_of)
from dl_doctor.model import Facts


def _snapshot_and_findings(path: str) -> Tuple[Dict[str, Any], List[Mapping[str, Any]]]:
    """A report (or a bundle's report) brings its findings; a bare facts file gets today's checks run on it."""
    doc = read_document(path, bundle_member="report.json")
    snapshot = snapshot_of(path, doc)
    if isinstance(doc.get("findings"), list):
        from dl_doctor.model import Status

        statuses = {s.value for s in Status}
        for n, f in enumerate(doc["findings"]):
            if not isinstance(f, dict) or not all(isinstance(f.get(k), str) for k in ("id", "status", "message")) \
                    or f["status"] not in statuses:
                raise UsageProblem(f"{path}: findings[{n}] is not a finding (id, status and message strings, "
                                   f"status one of {', '.join(sorted(statuses))})")
        return snapshot, doc["findings"]
    from dl_doctor.engine import evaluate

    findings = evaluate(snapshot, _registry().checks, _matrix(()))
    return snapshot, [f.to_dict() for f in findings]


@cli.command("expect")
@click.option("--from", "source", required=True, metavar="REPORT.json",
              help="A known-good report (or facts file) to pin.")
@click.option("-o", "--output", metavar="EXPECT.toml", help="Write here instead of standard output.")
@click.option("--package", "packages", multiple=True, metavar="NAME",
              help="Also pin this distribution in each environment (repeatable; torch-adjacent ones are pinned "
                   "by default).")
def expect_cmd(source, output, packages) -> int:
    """Write golden-stack expectations (for --expect) from a known-good run."""
    from dl_doctor.expect import DEFAULT_PACKAGES, to_toml
    from dl_doctor.stack import stack
    snapshot = load_snapshot(source)
    text = to_toml(stack(Facts(snapshot)), sorted(set(DEFAULT_PACKAGES) | set(packages)))
    if output:
        write_or_refuse(output, text, private=False)
        click.echo(f"Expectations: {output}", err=True)
    else:
        sys.stdout.write(text)
    return 0


@cli.command("diff")
@click.argument("baseline", metavar="BASELINE.json")
@click.argument("current", metavar="CURRENT.json")
@click.option("--json", "as_json", is_flag=True, help="Print the drift as JSON.")
@click.option("--ignore", multiple=True, metavar="PATTERN",
              help="Leave out versions or findings whose key or ID matches this glob (repeatable), e.g. "
                   "'kernel', 'environments.*.packages.pip', 'DLD-DISK-*'.")
def diff_cmd(baseline, current, as_json, ignore) -> int:
    """Drift between two reports (or facts files): versions and findings. Exit 1 when anything drifted."""
    from dl_doctor.diff import diff, render_text

    base_snap, base_findings = _snapshot_and_findings(baseline)
    cur_snap, cur_findings = _snapshot_and_findings(current)
    patterns = [p for item in ignore for p in item.split(",") if p.strip()]
    result = diff(base_snap, cur_snap, base_findings, cur_findings, patterns)
    if as_json:
        click.echo(json.dumps({"baseline": baseline, "current": current, **result}, indent=2, sort_keys=False))
    else:
        click.echo(render_text(result, baseline, current), nl=False)
    return 1 if result["drift"] else 0


@cli.command("bundle")
@collect_options
@click.option("-o", "--output", required=True, metavar="FILE.tar.gz", help="Where to write the bundle.")
@click.option("--redact", is_flag=True, help="Also mask host names, IP/MAC addresses, user names and home paths.")
@click.option("--expect", "expect_file", metavar="EXPECT.toml", help="Golden-stack expectations, as for `run`.")
@click.option("-q", "--quiet", is_flag=True, help="Print only problems and the summary line.")
@click.option("--no-color", is_flag=True, help="No colour.")
@matrix_overlay_option
def bundle_cmd(sysroot, timeout, pythons, deep, run_as_owner, no_env_scan, env_limit, sample_seconds, ebs_types, output, redact,
               expect_file, quiet, no_color, overlays) -> int:
    """Run, then pack the reports, the facts and the raw probe outputs (redacted) for a support ticket."""
    from dl_doctor.bundle import Capture, build
    from dl_doctor.engine import exit_code, utc_now
    from dl_doctor.redact import redactor_for
    from dl_doctor.reports import html as html_report
    from dl_doctor.reports import terminal

    started, t0 = utc_now(), time.monotonic()
    registry = _registry()
    _select(registry, (), ())
    _matrix(overlays)
    _expectations(expect_file)
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise UsageProblem(f"cannot write {output}: {parent} is not a directory")
    capture = Capture()
    snapshot = _collect(registry, sysroot, timeout, pythons, deep, no_env_scan, env_limit, sample_seconds,
                        ebs_types, capture=capture, run_as_owner=run_as_owner)
    report, findings = _build_report(snapshot, registry, mode=snapshot["mode"], started=started, t0=t0,
                                     fail_on="fail", only=(), skip_=(), redact_more=redact, overlays=overlays,
                                     expect_file=expect_file, extra_options={"bundle": True})
    red = redactor_for(snapshot, redact)
    hostname = red.text(report.get("host", {}).get("hostname") or "")
    top = f"dl-doctor-bundle-{_safe_name(hostname)}-{started.strftime('%Y%m%dT%H%M%SZ')}"
    data, manifest = build(capture, snapshot, report, html_report.render, red, top)
    write_or_refuse(output, data, private=True)  # for the ticket, not for every user on the host
    rep = json.loads(json.dumps(red.value(report)))
    click.echo(terminal.render(rep, color=_use_color(no_color), quiet=quiet, paths=[]), nl=False)
    archived = sum(1 for f in manifest["files"] if f.get("archived_as"))
    click.echo(f"Bundle: {output} ({archived} files, {len(manifest['commands'])} commands, "
               f"{len(data) / 1024:.0f} KiB; {manifest['redaction']['redactions']} redactions"
               f"{', extended' if redact else ''})", err=quiet)
    return exit_code(findings, "fail")


def _dl_doctor_exe() -> str:
    import shutil

    here = os.path.join(os.path.dirname(sys.executable), "dl-doctor")
    return here if os.path.exists(here) else (shutil.which("dl-doctor") or "/usr/local/bin/dl-doctor")


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
    from dl_doctor.login_hook import STATUS_FILE, UnitValueError, install

    if not os.path.isdir(root):
        raise UsageProblem(f"--root {root} is not a directory")
    extra = (["--prometheus", prom_path] if prom_path else []) + (["--expect", expect_file] if expect_file else [])
    exe = exe or _dl_doctor_exe()
    if not no_systemd and not os.path.exists(os.path.join(root, exe.lstrip("/"))):
        click.echo(f"dl-doctor: warning: {exe} does not exist under {root}; the service will fail until it does "
                   f"(--exe PATH names the one the system will have)", err=True)
    try:
        written = install(root, exe, systemd=not no_systemd, boot_only=boot_only, extra_args=extra,
                          writable=[os.path.dirname(os.path.abspath(prom_path))] if prom_path else [])
    except UnitValueError as exc:
        raise UsageProblem(str(exc))
    except FileExistsError as exc:
        raise UsageProblem(str(exc))
    except OSError as exc:
        raise UsageProblem(f"cannot install the login hook: {exc.strerror or exc} ({exc.filename or root}); "
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
    from dl_doctor.login_hook import uninstall

    if not os.path.isdir(root):
        raise UsageProblem(f"--root {root} is not a directory")
    try:
        removed = uninstall(root)
    except OSError as exc:
        raise UsageProblem(f"cannot remove the login hook: {exc.strerror or exc}; run as root")
    for path in removed:
        click.echo(f"removed {path}")
    if not removed:
        click.echo("nothing to remove")
    return 0
