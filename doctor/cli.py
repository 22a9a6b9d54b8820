"""The ``dl-doctor`` command line.

``dl-doctor`` alone is ``dl-doctor run``.  Exit codes: 0 nothing at or above
``--fail-on``; 1 findings at or above it; 2 usage error or dl-doctor itself could
not run (always a one-line message, never a traceback; set ``DL_DOCTOR_DEBUG=1``
to see one).
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import re
import sys
import time
import traceback
from typing import Any, Dict, List, Optional, Sequence, Tuple

import click

from dl_doctor import __version__
from dl_doctor.engine import (DEFAULT_TIMEOUT, build_report, collect, evaluate, exit_code, utc_now)
from dl_doctor.host import Host
from dl_doctor.model import FACTS_SCHEMA_VERSION, Explanation
from dl_doctor.redact import redact as redact_document
from dl_doctor.registry import Registry, load_registry


class UsageProblem(click.ClickException):
    """Bad input: a one-line message and exit code 2."""

    exit_code = 2


# -- command group that defaults to `run` -------------------------------------

class DefaultRunGroup(click.Group):
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


def _split(values: Sequence[str]) -> List[str]:
    out: List[str] = []
    for value in values:
        out.extend(v.strip() for v in value.split(",") if v.strip())
    return out


matrix_overlay_option = click.option(
    "--matrix-overlay", "overlays", multiple=True, type=click.Path(exists=True, dir_okay=False), metavar="FILE",
    help="Extra compatibility-matrix data (TOML) that adds or overrides entries (repeatable).")


def report_options(func):
    """Options shared by `run` and `check`."""
    opts = [
        click.option("--json", "json_path", metavar="PATH", help="Write the JSON report here ('-' = alone on stdout)."),
        click.option("--html", "html_path", metavar="PATH", help="Write the HTML report here."),
        click.option("--output-dir", default="dl-doctor-reports", show_default=True, metavar="DIR",
                     help="Where reports without an explicit path go."),
        click.option("--fail-on", type=click.Choice(["fail", "warn", "never"]), default="fail", show_default=True,
                     help="Exit 1 when a finding is at or above this level (error counts as fail)."),
        click.option("--only", multiple=True, metavar="ID|SLUG|TAG", help="Run only these checks (repeatable, comma-separated)."),
        click.option("--skip", "skip_", multiple=True, metavar="ID|SLUG|TAG", help="Do not run these checks."),
        click.option("--redact", is_flag=True, help="Also mask host names, IP/MAC addresses, user names and home paths."),
        click.option("-q", "--quiet", is_flag=True, help="Print only problems and the summary line."),
        click.option("--no-color", is_flag=True, help="No colour (also when NO_COLOR is set or output is not a TTY)."),
        matrix_overlay_option,
        click.option("--expect", "expect_file", metavar="EXPECT.toml",
                     help="Golden-stack expectations to hold the host to (see `dl-doctor expect --from`)."),
        click.option("--junit", "junit_path", metavar="PATH", help="Also write the findings as JUnit XML."),
        click.option("--prometheus", "prom_path", metavar="PATH",
                     help="Also write metrics in Prometheus text format (node_exporter textfile collector)."),
        click.option("--status-line", "status_path", metavar="PATH",
                     help="Also write a one-line status (what the login hook prints)."),
        click.option("--keep-reports", type=click.IntRange(1, 100000), metavar="N",
                     help="Keep only the newest N runs' reports in --output-dir (the login hook's timer keeps 30)."),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


def _check_ebs_types(ctx, param, values):
    from dl_doctor.probes.ebs import parse_volume_type_option

    for v in values:
        try:
            parse_volume_type_option(v)
        except ValueError as exc:
            raise click.BadParameter(str(exc))
    return values


def collect_options(func):
    opts = [
        click.option("--sysroot", type=click.Path(exists=True, file_okay=False, resolve_path=False), metavar="DIR",
                     help="Inspect a mounted image or a captured tree instead of the live host."),
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
                     help="At most this many Python environments."),
        click.option("--sample-seconds", type=click.FloatRange(0.1, 60.0), default=1.0, show_default=True,
                     metavar="SECONDS", help="How long to sample disk I/O (while the other probes run)."),
        click.option("--ebs-volume-type", "ebs_types", multiple=True, metavar="VOL=TYPE[:IOPS[:MBPS]]",
                     callback=_check_ebs_types, help="An EBS volume's type (and provisioned IOPS/throughput)."),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


# -- shared plumbing ----------------------------------------------------------

def _registry() -> Registry:
    return load_registry()


def _select(registry: Registry, only: Sequence[str], skip: Sequence[str]):
    only_l, skip_l = _split(only), _split(skip)
    unknown = registry.unknown_selectors(only_l + skip_l)
    if unknown:
        hint = registry.closest_checks(unknown[0])
        raise UsageProblem(f"unknown check or tag '{unknown[0]}'" + (f" (did you mean {', '.join(hint)}?)" if hint else "")
                           + "; see 'dl-doctor list'")
    return registry.select(only_l, skip_l)


def _matrix(overlays: Sequence[str]):
    from dl_doctor import compat_matrix

    try:
        return compat_matrix.load(overlays=list(overlays))
    except compat_matrix.MatrixError as exc:
        more = f" ({len(exc.errors) - 1} more; run 'dl-doctor matrix validate FILE')" if len(exc.errors) > 1 else ""
        raise UsageProblem(f"invalid compatibility matrix: {exc.errors[0]}{more}")


@functools.lru_cache(maxsize=4)  # validated before collection, used after it: read once
def _expectations(path: Optional[str]) -> Optional[Dict[str, Any]]:
    if not path:
        return None
    from dl_doctor.expect import ExpectationError, load

    try:
        return load(path)
    except ExpectationError as exc:
        raise UsageProblem(str(exc))


def _collect(registry: Registry, sysroot: Optional[str], timeout: float, pythons: Sequence[str], deep: bool = False,
             no_env_scan: bool = False, env_limit: int = 32, sample_seconds: float = 1.0,
             ebs_types: Sequence[str] = (), capture: Any = None, run_as_owner: bool = False) -> Dict[str, Any]:
    try:
        host = Host(sysroot=sysroot, command_timeout=timeout, capture=capture, run_as_owner=run_as_owner)
    except NotADirectoryError as exc:
        raise UsageProblem(str(exc))
    options = {"timeout": timeout, "python": list(pythons), "deep": deep, "no_env_scan": no_env_scan,
               "env_limit": env_limit, "env_timeout": max(timeout, 10.0),
               "python_envs_timeout": 600.0 if deep else max(timeout, 60.0),
               "sample_seconds": sample_seconds, "ebs_timeout": timeout + sample_seconds,
               "ebs_volume_types": list(ebs_types)}
    return collect(registry.probes, host, options, timeout=timeout)


def _safe_name(text: Optional[str]) -> str:
    if not text or "[" in text:
        return "redacted" if text else "unknown-host"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:80]


def _use_color(no_color: bool, stream=None) -> bool:
    stream = stream or sys.stdout
    if no_color or os.environ.get("NO_COLOR"):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _build_report(snapshot: Dict[str, Any], registry: Registry, *, mode: str, started: _dt.datetime, t0: float,
                  fail_on: str, only: Sequence[str], skip_: Sequence[str], redact_more: bool,
                  overlays: Sequence[str] = (), extra_options: Optional[Dict[str, Any]] = None,
                  expect_file: Optional[str] = None) -> Tuple[Dict[str, Any], List[Any]]:
    """The report (not yet redacted) and its findings."""
    checks = _select(registry, only, skip_)
    matrix = _matrix(overlays)
    expectations = _expectations(expect_file)
    findings = evaluate(snapshot, checks, matrix, {"expectations": expectations})
    options = {"fail_on": fail_on, "only": _split(only), "skip": _split(skip_), "redact": redact_more,
               "expect": expect_file}
    options.update(extra_options or {})
    report = build_report(snapshot, findings, mode=mode, started_at=started, duration_s=time.monotonic() - t0,
                          options=options, load_errors=registry.load_errors)
    report["run"]["matrix"] = matrix.info()
    return report, findings


def _emit_report(snapshot: Dict[str, Any], registry: Registry, *, mode: str, started: _dt.datetime, t0: float,
                 json_path: Optional[str], html_path: Optional[str], output_dir: str, fail_on: str,
                 only: Sequence[str], skip_: Sequence[str], redact_more: bool, quiet: bool, no_color: bool,
                 overlays: Sequence[str] = (), extra_options: Optional[Dict[str, Any]] = None,
                 expect_file: Optional[str] = None, junit_path: Optional[str] = None,
                 prom_path: Optional[str] = None, status_path: Optional[str] = None,
                 keep_reports: Optional[int] = None) -> int:
    from dl_doctor.reports import html as html_report
    from dl_doctor.output import OutputRefused, prune_reports, reserve_unique
    from dl_doctor.reports import junit, prometheus, terminal, to_json, write_atomic

    report, findings = _build_report(snapshot, registry, mode=mode, started=started, t0=t0, fail_on=fail_on,
                                     only=only, skip_=skip_, redact_more=redact_more, overlays=overlays,
                                     extra_options=extra_options, expect_file=expect_file)
    report = redact_document(report, extended=redact_more, snapshot=dict(snapshot))

    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    json_text = to_json(report)
    written: List[str] = []
    problems: List[str] = []
    base = os.path.join(output_dir, f"dl-doctor-{_safe_name(report['host'].get('hostname'))}-{stamp}")
    defaults = (json_path is None) or (html_path is None)
    if defaults:
        try:  # a name no other run in this directory has, even in the same second
            base = reserve_unique(base, ".json" if json_path is None else ".html")
        except OSError as exc:
            problems.append(f"cannot write into {output_dir}: {exc.strerror or exc}")
    # (path, text, private): reports carry the environment and stay private; the status line and the metrics
    # carry none and stay readable by the users and exporters that read them.
    targets: List[Tuple[str, str, bool]] = []
    if json_path != "-":
        targets.append((json_path or base + ".json", json_text, True))
    targets.append((html_path or base + ".html", html_report.render(report), True))
    if junit_path:
        targets.append((junit_path, junit.render(report), True))
    if prom_path:
        targets.append((prom_path, prometheus.render(report), False))
    if status_path:
        from dl_doctor.login_hook import status_line

        targets.append((status_path, status_line(report) + "\n", False))
    for path, text, private in targets:
        try:
            write_atomic(path, text, private=private)
            written.append(path)
        except OutputRefused as exc:
            problems.append(f"not writing {exc.filename}: it {exc.why}")
        except OSError as exc:
            problems.append(f"cannot write {path}: {exc.strerror or exc}")
    if keep_reports is not None and defaults:
        prune_reports(output_dir, keep_reports, protect=written)

    if json_path == "-":
        sys.stdout.write(json_text)
        sys.stdout.flush()
        if not quiet:
            for path in written:
                click.echo(f"Report: {path}", err=True)
    else:
        click.echo(terminal.render(report, color=_use_color(no_color), quiet=quiet, paths=[] if quiet else written),
                   nl=False)
    for problem in problems:
        click.echo(f"dl-doctor: error: {problem}", err=True)
    if problems:
        return 2
    return exit_code(findings, fail_on)


# -- commands -------------------------------------------------------------------

@cli.command("run")
@collect_options
@report_options
def run_cmd(sysroot, timeout, pythons, deep, run_as_owner, no_env_scan, env_limit, sample_seconds, ebs_types, json_path, html_path,
            output_dir, fail_on, only, skip_, redact, quiet, no_color, overlays, expect_file, junit_path,
            prom_path, status_path, keep_reports) -> int:
    """Collect facts from this host (or --sysroot), run every check and write the reports."""
    started, t0 = utc_now(), time.monotonic()
    registry = _registry()
    _select(registry, only, skip_)  # reject bad input before spending time on probes
    _matrix(overlays)
    _expectations(expect_file)
    snapshot = _collect(registry, sysroot, timeout, pythons, deep, no_env_scan, env_limit, sample_seconds, ebs_types,
                        run_as_owner=run_as_owner)
    return _emit_report(snapshot, registry, mode=snapshot["mode"], started=started, t0=t0, json_path=json_path,
                        html_path=html_path, output_dir=output_dir, fail_on=fail_on, only=only, skip_=skip_,
                        redact_more=redact, quiet=quiet, no_color=no_color, overlays=overlays,
                        expect_file=expect_file, junit_path=junit_path, prom_path=prom_path, status_path=status_path,
                        keep_reports=keep_reports,
                        extra_options={"timeout": timeout, "python": list(pythons), "deep": deep,
                                       "env_scan": not no_env_scan, "env_limit": env_limit})


@cli.command("collect")
@collect_options
@click.option("-o", "--output", required=True, metavar="FACTS.json", help="Where to write the facts ('-' = stdout).")
@click.option("--redact", is_flag=True, help="Also mask host names, IP/MAC addresses, user names and home paths.")
def collect_cmd(sysroot, timeout, pythons, deep, run_as_owner, no_env_scan, env_limit, sample_seconds, ebs_types, output,
                redact) -> int:
    """Collect facts only, for `dl-doctor check` later or elsewhere."""
    from dl_doctor.reports import to_json, write_atomic

    registry = _registry()
    snapshot = _collect(registry, sysroot, timeout, pythons, deep, no_env_scan, env_limit, sample_seconds, ebs_types,
                        run_as_owner=run_as_owner)
    text = to_json(redact_document(snapshot, extended=redact))
    if output == "-":
        sys.stdout.write(text)
    else:
        write_or_refuse(output, text, private=True)
        click.echo(f"Facts: {output} ({len(snapshot['facts'])} probes, {len(snapshot['probe_errors'])} errors)",
                   err=True)
    return 0


def write_or_refuse(path: str, data, private: bool = True) -> None:
    """One output file; a refused target or a failed write is exit 2 with one line."""
    from dl_doctor.output import OutputRefused, write_file

    try:
        write_file(path, data, private=private)
    except OutputRefused as exc:
        raise UsageProblem(f"not writing {exc.filename}: it {exc.why}")
    except OSError as exc:
        raise UsageProblem(f"cannot write {path}: {exc.strerror or exc}")


def load_snapshot(path: str, bundle_member: str = "facts.json") -> Dict[str, Any]:
    """Read a facts snapshot, the facts inside a JSON report, or those inside a support bundle, for `check`."""
    return snapshot_of(path, read_document(path, bundle_member))


def read_document(path: str, bundle_member: str = "facts.json") -> Any:
    """The JSON document at ``path``, or the member ``bundle_member`` of a support bundle; bad input is exit 2."""
    import tarfile

    from dl_doctor.bundle import BundleError, read_member

    import zlib

    from dl_doctor.validate import MAX_DOCUMENT_BYTES, InputError, load_json_bytes

    try:
        if os.path.isfile(path) and tarfile.is_tarfile(path):
            try:
                return read_member(path, bundle_member)
            except BundleError as exc:
                raise UsageProblem(str(exc))
        with open(path, "rb") as fh:
            data = fh.read(MAX_DOCUMENT_BYTES + 1)
        return load_json_bytes(data, path)
    except InputError as exc:
        raise UsageProblem(str(exc))
    except FileNotFoundError:
        raise UsageProblem(f"cannot read {path}: no such file")
    except IsADirectoryError:
        raise UsageProblem(f"cannot read {path}: it is a directory")
    except (EOFError, zlib.error, tarfile.TarError) as exc:  # click would report EOFError as "interrupted"
        raise UsageProblem(f"{path} is not a readable dl-doctor bundle (truncated or corrupt?): {exc}")
    except OSError as exc:
        raise UsageProblem(f"cannot read {path}: {exc.strerror or exc}")


def snapshot_of(path: str, data: Any) -> Dict[str, Any]:
    """The facts snapshot in a facts file or a report (``path`` names it in errors)."""
    if not isinstance(data, dict):
        raise UsageProblem(f"{path} is not a dl-doctor facts file or report")
    version = str(data.get("schema_version", ""))
    if data.get("kind") == "dl-doctor-facts":
        snapshot = data
    elif "findings" in data and isinstance(data.get("facts"), dict):
        run = data.get("run") or {}
        snapshot = {
            "schema_version": version, "kind": "dl-doctor-facts", "tool": data.get("tool", {}),
            "collected_at": run.get("facts_collected_at") or run.get("started_at"),
            "mode": run.get("facts_mode") or ("sysroot" if run.get("mode") == "sysroot" else "live"),
            "sysroot": run.get("sysroot"), "facts": data["facts"],
            "probe_errors": data.get("probe_errors", []), "unavailable": data.get("unavailable", {}),
            "privilege": data.get("privilege", {}),
        }
    else:
        raise UsageProblem(f"{path} is not a dl-doctor facts file or report (no 'kind' or 'facts')")
    if version.split(".")[0] != FACTS_SCHEMA_VERSION:
        raise UsageProblem(f"{path} has schema_version {version!r}; this dl-doctor reads version "
                           f"{FACTS_SCHEMA_VERSION}")
    if not isinstance(snapshot.get("facts"), dict):
        raise UsageProblem(f"{path} has no 'facts' object")
    from dl_doctor.validate import InputError, validate_snapshot

    try:
        validate_snapshot(snapshot, path)
    except InputError as exc:
        raise UsageProblem(str(exc))
    return snapshot


@cli.command("check")
@click.argument("facts_file", metavar="FACTS.json")
@report_options
def check_cmd(facts_file, json_path, html_path, output_dir, fail_on, only, skip_, redact, quiet, no_color,
              overlays, expect_file, junit_path, prom_path, status_path, keep_reports) -> int:
    """Run today's checks on facts collected earlier (a facts file or a JSON report)."""
    started, t0 = utc_now(), time.monotonic()
    registry = _registry()
    snapshot = load_snapshot(facts_file)
    return _emit_report(snapshot, registry, mode="facts", started=started, t0=t0, json_path=json_path,
                        html_path=html_path, output_dir=output_dir, fail_on=fail_on, only=only, skip_=skip_,
                        redact_more=redact, quiet=quiet, no_color=no_color, overlays=overlays,
                        expect_file=expect_file, junit_path=junit_path, prom_path=prom_path, status_path=status_path,
                        keep_reports=keep_reports, extra_options={"facts_file": facts_file})


@cli.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_cmd(as_json) -> int:
    """List every registered check: ID, slug, title, tags."""
    registry = _registry()
    checks = sorted(registry.checks, key=lambda s: s.id)
    if as_json:
        click.echo(json.dumps([{"id": s.id, "slug": s.slug, "title": s.title, "tags": list(s.tags),
                                "requires": list(s.requires), "module": s.module} for s in checks], indent=2))
        return 0
    for s in checks:
        click.echo(f"{s.id:<13} {s.slug:<28} {s.title}  [{', '.join(s.tags)}]")
    for err in registry.load_errors:
        click.echo(f"dl-doctor: warning: {err}", err=True)
    return 0


@cli.command("explain")
@click.argument("key", metavar="ID|SLUG")
def explain_cmd(key) -> int:
    """Explain a check: what it checks, why it matters, how to fix it."""
    registry = _registry()
    spec = registry.find_check(key)
    if spec is None:
        hint = registry.closest_checks(key)
        raise UsageProblem(f"unknown check '{key}'" + (f" (did you mean {', '.join(hint)}?)" if hint else "")
                           + "; see 'dl-doctor list'")
    click.echo(f"{spec.id} ({spec.slug}): {spec.title}")
    click.echo(f"tags: {', '.join(spec.tags)}" + (f"; needs facts: {', '.join(spec.requires)}" if spec.requires else ""))
    import textwrap

    for attr, heading in Explanation.SECTIONS:
        click.echo("")
        click.echo(heading)
        click.echo(textwrap.fill(getattr(spec.explanation, attr), width=88, initial_indent="  ",
                                 subsequent_indent="  "))
    return 0


# -- entry point ----------------------------------------------------------------

import dl_doctor.cli_matrix  # noqa: E402,F401 - registers `dl-doctor matrix`
import dl_doctor.cli_ami  # noqa: E402,F401 - registers expect, diff, bundle and the login-hook commands

def main(argv: Optional[Sequence[str]] = None) -> None:
    debug = bool(os.environ.get("DL_DOCTOR_DEBUG"))
    try:
        code = cli.main(args=list(argv) if argv is not None else None, prog_name="dl-doctor", standalone_mode=False)
    except click.exceptions.Exit as exc:  # pragma: no cover - click returns it in non-standalone mode
        code = exc.exit_code
    except click.ClickException as exc:
        message = " ".join(exc.format_message().split())
        if isinstance(exc, click.UsageError) and exc.ctx is not None and not isinstance(exc, UsageProblem):
            message += f" (see '{exc.ctx.command_path} --help')"
        # Bad input is exit 2; an answer of "no such entry" (dl-doctor matrix) is exit 1.
        code = getattr(exc, "dl_doctor_exit", 2)
        click.echo(f"dl-doctor: {'error: ' if code == 2 else ''}{message}", err=True)
    except click.exceptions.Abort:
        click.echo("dl-doctor: interrupted", err=True)
        code = 130
    except KeyboardInterrupt:
        click.echo("dl-doctor: interrupted", err=True)
        code = 130
    except BrokenPipeError:
        code = 0
    except Exception as exc:  # noqa: BLE001 - never a traceback for users
        if debug:
            traceback.print_exc()
        click.echo(f"dl-doctor: error: dl-doctor could not run: {type(exc).__name__}: {exc} "
                   f"(set DL_DOCTOR_DEBUG=1 for details)", err=True)
        code = 2
    sys.exit(code if isinstance(code, int) else 0)
