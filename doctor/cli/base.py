"""The click group and the options shared by the commands. Commands live in one module per family; what they do
lives in :mod:`dl_doctor.app`."""

from __future__ import annotations

import importlib
from typing import Any, Dict, List, Optional

import click

from dl_doctor import __version__, app
from dl_doctor.app import DEFAULT_TIMEOUT, CollectOptions, JudgeOptions, OutputOptions


class DefaultRunGroup(click.Group):
    """The top-level group. The core commands (``run``, ``check``... in :mod:`dl_doctor.cli.core`) are always on it;
    every other family's module is imported when one of its commands is asked for, or when all of them are (the
    help, a mistyped name's suggestions): a default run never imports the matrix, fleet, image or login commands.
    """

    # command name -> the module (under dl_doctor.cli) that registers it
    LAZY = {"bundle": "image", "diff": "image", "expect": "image", "fleet": "fleet", "history": "history",
            "install-login-hook": "login", "uninstall-login-hook": "login", "matrix": "matrix", "plan": "plan", "why": "why"}

    def get_command(self, ctx: click.Context, cmd_name: str) -> "click.Command | None":
        module = self.LAZY.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            importlib.import_module(f"dl_doctor.cli.{module}")
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> List[str]:
        return sorted(set(self.commands) | set(self.LAZY))

    def resolve_command(self, ctx: click.Context, args: List[str]):
        if args and args[0] not in self.commands and args[0] not in self.LAZY:
            self.load_all()  # "No such command": the suggestions come from every command
        return super().resolve_command(ctx, args)

    def load_all(self) -> None:
        for module in sorted(set(self.LAZY.values())):
            importlib.import_module(f"dl_doctor.cli.{module}")

    def parse_args(self, ctx: click.Context, args: List[str]) -> List[str]:
        # `dl-doctor` and `dl-doctor --json - ...` mean `dl-doctor run ...`; a word that is
        # not a command stays an error ("No such command").
        if not args or (args[0].startswith("-") and args[0] not in ("--help", "-h", "--version")):
            args = ["run"] + list(args)
        return super().parse_args(ctx, args)


@click.group(cls=DefaultRunGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="dl-doctor", message="%(prog)s %(version)s")
def cli() -> None:
    """Can this machine train? Checks the driver, GPUs, CUDA, Python environments,
    storage and networking of a deep-learning machine and says what to fix.

    Without a command, runs `dl-doctor run`.
    """


matrix_overlay_option = click.option(
    "--matrix-overlay", "overlays", multiple=True, type=click.Path(exists=True, dir_okay=False), metavar="FILE",
    help="Extra compatibility-matrix data (TOML) that adds or overrides entries (repeatable).")


def _output_path(ctx, param, value):
    """A report's PATH, or ``-`` for stdout. A value that is an option (``--json --html x``: the old flag form followed
    by another option) is refused, not taken for a file name (``./-x`` names such a file)."""
    if value is None or value == "-":
        return value
    if not value or value.startswith("-"):
        raise click.BadParameter(f"{param.opts[0]} takes a PATH, or - for stdout (got {value!r})")
    return value


def json_option(help_text: str = "Write the JSON here ('-' = alone on stdout).", dest: str = "json_path"):
    """``--json PATH|-``, the same on every command: a value is required; ``-`` is stdout. Written through
    :func:`write_output`."""
    return click.option("--json", dest, metavar="PATH|-", callback=_output_path, help=help_text)


def markdown_option(help_text: str = "Write a Markdown summary here to paste into a ticket ('-' = alone on stdout).",
                    dest: str = "markdown_path"):
    """``--markdown PATH|-``, like :func:`json_option`."""
    return click.option("--markdown", dest, metavar="PATH|-", callback=_output_path, help=help_text)


def html_option(help_text: str = "Write the HTML report here.", dest: str = "html_path"):
    return click.option("--html", dest, metavar="PATH", callback=_output_path, help=help_text)


def json_text(document: Any) -> str:
    """A command's JSON answer, as every command writes it."""
    import json

    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def write_output(path: str, text: str, *, private: bool = True) -> Optional[str]:
    """One output of a command: ``-`` is stdout, anything else the safe writer (a directory is never created for it;
    a refusal is one line, exit 2). Returns the path written, None for stdout."""
    import sys

    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return None
    app.write_or_refuse(path, text, private=private)
    return path


def check_outputs(*paths: Optional[str]) -> None:
    """Refuse, before any work, a named output whose directory does not exist, and two outputs on stdout."""
    named = [p for p in paths if p]
    if named.count("-") > 1:
        raise app.InputProblem("only one output can go to stdout ('-'): write the others to files")
    for path in named:
        if path != "-":
            app.check_output_path(path)


def _apply(func, opts):
    for opt in reversed(opts):
        func = opt(func)
    return func


def report_options(func):
    """Options shared by `run` and `check`."""
    return _apply(func, [
        json_option("Write the JSON report here ('-' = alone on stdout)."),
        html_option(),
        markdown_option("Also write a Markdown summary to paste into a ticket ('-' = alone on stdout); host names, "
                        "addresses and user names are always redacted there."),
        click.option("--max-chars", "markdown_max_chars", type=click.IntRange(2000, 10_000_000), default=65536,
                     show_default=True, metavar="N", help="The Markdown summary's size limit (GitHub's comment limit "
                                                          "by default)."),
        click.option("--output-dir", metavar="DIR",
                     help="Where the reports not named by --json/--html go, under default names; created (mode 0755 "
                          "less the umask) if missing. run: dl-doctor-reports by default; check: only when given."),
        click.option("--fail-on", type=click.Choice(["fail", "warn", "never"]), default="fail", show_default=True,
                     help="Exit 1 when a finding is at or above this level (error counts as fail)."),
        click.option("--only", multiple=True, metavar="ID|SLUG|TAG", help="Run only these checks (repeatable, comma-separated)."),
        click.option("--skip", "skip_", multiple=True, metavar="ID|SLUG|TAG", help="Do not run these checks."),
        click.option("--redact", is_flag=True, help="Also mask host names, IP/MAC addresses, user names and home paths."),
        click.option("-q", "--quiet", is_flag=True, help="Print only the problems and the last line."),
        click.option("-v", "--verbose", is_flag=True, help="Also list every check that passed or was skipped."),
        click.option("--no-color", is_flag=True, help="No colour (also when NO_COLOR is set or output is not a TTY)."),
        matrix_overlay_option,
        click.option("--expect", "expect_file", metavar="EXPECT.toml",
                     help="Golden-stack expectations to hold the host to (see `dl-doctor expect --from`)."),
        click.option("--junit", "junit_path", metavar="PATH", help="Also write the findings as JUnit XML."),
        click.option("--prometheus", "prom_path", metavar="PATH",
                     help="Also write metrics in Prometheus text format (node_exporter textfile collector)."),
        click.option("--status-line", "status_path", metavar="PATH",
                     help="Also write a one-line status (what the login hook prints)."),
        click.option("--engine", type=click.Choice(["slurm", "nhc", "npd"]), metavar="slurm|nhc|npd",
                     help="Answer a cluster engine in its own contract instead of the summary (docs/clusters.md): "
                          "slurm (HealthCheckProgram, Prolog, Epilog), nhc (the .nhc function), npd "
                          "(node-problem-detector's custom plugin). Reports are written only where asked for."),
        click.option("--drain", is_flag=True, help="With --engine slurm: drain this node through scontrol for a "
                     "failing finding that drains, and resume it when healthy, if dl-doctor drained it."),
        click.option("--node", "node_name", metavar="NAME", help="With --engine slurm: the node's Slurm name "
                     "(default: $SLURMD_NODENAME, else the short host name)."),
        click.option("--keep-reports", type=click.IntRange(1, 100000), metavar="N",
                     help="Keep only the newest N runs' reports in --output-dir (the login hook's timer keeps 30)."),
    ])


def _check_ebs_types(ctx, param, values):
    if not values:  # click calls this for every run: the probe's module is imported only to parse a value
        return values
    from dl_doctor.probes.ebs import parse_volume_type_option

    for v in values:
        try:
            parse_volume_type_option(v)
        except ValueError as exc:
            raise click.BadParameter(str(exc))
    return values


def collect_options(func):
    return _apply(func, [
        click.option("--sysroot", type=click.Path(exists=True, file_okay=False, resolve_path=False), metavar="DIR",
                     help="Inspect a mounted image or a captured tree instead of the live host."),
        click.option("--host-root", type=click.Path(exists=True, file_okay=False, resolve_path=False), metavar="DIR",
                     help="Inside a container (a DaemonSet, an NHC container): the host's root filesystem mounted at "
                          "DIR, while /proc, /sys, /dev and NVML are the running kernel's own."),
        click.option("--timeout", type=click.FloatRange(0.1, 600.0), default=DEFAULT_TIMEOUT, show_default=True,
                     metavar="SECONDS", help="Time limit of each probe (the Python-environment probe gets at least "
                     "60 s, 600 s with --deep; the EBS probe adds --sample-seconds)."),
        click.option("--python", "pythons", multiple=True, metavar="PATH", help="Another interpreter to inspect (repeatable)."),
        click.option("--deep", is_flag=True, help="Also import the frameworks (in a subprocess per environment) and "
                     "record what really loads."),
        click.option("--run-as-owner", is_flag=True, help="As root, run another user's interpreter as that user "
                     "(dropped privileges) instead of inspecting it from its files only."),
        click.option("--no-env-scan", is_flag=True, help="Inspect only dl-doctor's interpreter and each --python."),
        click.option("--env-limit", type=click.IntRange(1, 1000), default=32, show_default=True, metavar="N",
                     help="At most this many Python environments: root's and the system's first, then the "
                     "session's active ones, then other users' in turn."),
        click.option("--sample-seconds", type=click.FloatRange(0.1, 60.0), default=1.0, show_default=True,
                     metavar="SECONDS", help="How long to sample disk I/O (while the other probes run)."),
        click.option("--ebs-volume-type", "ebs_types", multiple=True, metavar="VOL=TYPE[:IOPS[:MBPS]]",
                     callback=_check_ebs_types, help="An EBS volume's type (and provisioned IOPS/throughput)."),
        click.option("--verify", "verify_workloads", is_flag=True,
                     help="Also run dl-doctor verify's quick workloads in the --python environment (DLD-VER-*)."),
        click.option("--profile", type=click.Choice(["full", "fast"]), default="full", show_default=True,
                     help="fast: the checks that finish in seconds (no environment scan, no --deep, a 0.2 s disk "
                          "sample, 3 s per probe), for Slurm Prologs and health checks."),
    ])


# click hands each option over as a keyword; these turn the keywords into the application's option objects.

def collect_opts(kw: Dict[str, Any]) -> CollectOptions:
    if kw.get("profile") == "fast":
        if kw.get("deep"):
            raise click.UsageError("--profile fast and --deep exclude each other")
        kw = dict(kw, no_env_scan=True, sample_seconds=min(0.2, kw.get("sample_seconds", 1.0)),
                  timeout=min(3.0, kw.get("timeout", DEFAULT_TIMEOUT)))
    if kw.get("host_root") and kw.get("sysroot"):
        raise click.UsageError("--host-root and --sysroot exclude each other (a running host's root, or an image)")
    return CollectOptions(sysroot=kw.get("sysroot"), host_root=kw.get("host_root"),
                          timeout=kw.get("timeout", DEFAULT_TIMEOUT),
                          pythons=tuple(kw.get("pythons") or ()), deep=bool(kw.get("deep")),
                          run_as_owner=bool(kw.get("run_as_owner")), no_env_scan=bool(kw.get("no_env_scan")),
                          env_limit=kw.get("env_limit", 32), sample_seconds=kw.get("sample_seconds", 1.0),
                          ebs_types=tuple(kw.get("ebs_types") or ()), fast=kw.get("profile") == "fast",
                          verify="quick" if kw.get("verify_workloads") else None)


def judge_opts(kw: Dict[str, Any]) -> JudgeOptions:
    return JudgeOptions(fail_on=kw.get("fail_on", "fail"), only=tuple(kw.get("only") or ()),
                        skip=tuple(kw.get("skip_") or ()), redact=bool(kw.get("redact")),
                        overlays=tuple(kw.get("overlays") or ()), expect_file=kw.get("expect_file"))


DEFAULT_OUTPUT_DIR = "dl-doctor-reports"


def output_opts(kw: Dict[str, Any], archive: bool = True) -> OutputOptions:
    """``archive``: the command writes its reports into --output-dir (default dl-doctor-reports) unless they are named
    (run, verify); else only when --output-dir is given (check)."""
    return OutputOptions(json_path=kw.get("json_path"), html_path=kw.get("html_path"),
                         output_dir=kw.get("output_dir") or (DEFAULT_OUTPUT_DIR if archive else None),
                         junit_path=kw.get("junit_path"),
                         prom_path=kw.get("prom_path"), status_path=kw.get("status_path"),
                         keep_reports=kw.get("keep_reports"), markdown_path=kw.get("markdown_path"),
                         markdown_max_chars=kw.get("markdown_max_chars") or 65536)


def use_color(no_color: bool, stream=None) -> bool:
    import os
    import sys

    stream = stream or sys.stdout
    if no_color or os.environ.get("NO_COLOR"):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
