"""The application layer: what the commands do, without click.

Collecting facts, building a report, loading the matrix and expectations, reading a report / facts file / bundle,
writing the outputs. Every problem with the user's input is an :class:`InputProblem` (one line); the command line
maps it to exit 2 in one place (``dl_doctor.cli.main``). Options travel as small dataclasses, not twenty parameters.
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

DEFAULT_TIMEOUT = 5.0


class InputProblem(Exception):
    """Bad input: one line for the user, exit 2 on the command line."""


# -- options --------------------------------------------------------------------------------------------------------

@dataclass
class CollectOptions:
    """What `run`, `collect` and `bundle` collect, and how."""

    sysroot: Optional[str] = None
    host_root: Optional[str] = None  # the host's root mounted into a container; its kernel is this one
    timeout: float = DEFAULT_TIMEOUT
    pythons: Sequence[str] = ()
    deep: bool = False
    run_as_owner: bool = False
    no_env_scan: bool = False
    env_limit: int = 32
    sample_seconds: float = 1.0
    ebs_types: Sequence[str] = ()
    fast: bool = False  # --profile fast: every probe within seconds (a Slurm health check is killed after 60 s)
    verify: Optional[str] = None  # dl-doctor verify / run --verify: the workload level (quick, long)
    include_busy: bool = False  # verify also the GPUs that others' compute processes use
    framework: str = "auto"  # verify's framework: auto (the first of torch and jax the environment has), torch, jax
    dcgm_level: Optional[int] = None  # verify's dcgmi diag -r level (None: 1 with --quick, 2 with --long; 0: none)

    def probe_options(self) -> Dict[str, Any]:
        from dl_doctor.probes.verify.dcgm import DCGM_DIAG_SECONDS  # how long dcgmi diag may take, per level

        return {"timeout": self.timeout, "python": list(self.pythons), "deep": self.deep,
                "no_env_scan": self.no_env_scan, "env_limit": self.env_limit,
                "env_timeout": max(self.timeout, 10.0),
                "python_envs_timeout": 600.0 if self.deep else 20.0 if self.fast else max(self.timeout, 60.0),
                "sample_seconds": self.sample_seconds, "ebs_timeout": self.timeout + self.sample_seconds,
                "verify": bool(self.verify), "verify_level": self.verify,
                # the workload's own limit plus its start (90 s, 330 s), then dcgmi diag and dcgmi health (30 s)
                "verify_timeout": (330.0 if self.verify == "long" else 90.0) + 30.0 + DCGM_DIAG_SECONDS[
                    self.resolved_dcgm_level()],
                "verify_dcgm_level": self.resolved_dcgm_level(),
                "verify_include_busy": self.include_busy, "verify_framework": self.framework,
                "ebs_volume_types": list(self.ebs_types)}

    def resolved_dcgm_level(self) -> int:
        if self.dcgm_level is not None:
            return self.dcgm_level
        return 2 if self.verify == "long" else 1

    def report_options(self) -> Dict[str, Any]:
        return {"timeout": self.timeout, "python": list(self.pythons), "deep": self.deep,
                "env_scan": not self.no_env_scan, "env_limit": self.env_limit}


@dataclass
class JudgeOptions:
    """Which checks judge the facts, against what."""

    fail_on: str = "fail"
    only: Sequence[str] = ()
    skip: Sequence[str] = ()
    redact: bool = False
    overlays: Sequence[str] = ()
    expect_file: Optional[str] = None


@dataclass
class OutputOptions:
    """Where the report goes."""

    json_path: Optional[str] = None
    html_path: Optional[str] = None
    # where the reports not named go (run, verify, the login timer); None: only the named ones are written (check)
    output_dir: Optional[str] = "dl-doctor-reports"
    junit_path: Optional[str] = None
    prom_path: Optional[str] = None
    status_path: Optional[str] = None
    keep_reports: Optional[int] = None
    markdown_path: Optional[str] = None
    markdown_max_chars: int = 65536

    def validate(self) -> None:
        """Refuse, before anything runs, what could only fail at the end: two outputs on stdout, a named output in
        a directory that does not exist (none is created for it), an --output-dir that cannot hold the reports."""
        on_stdout = [flag for flag, path in (("--json", self.json_path), ("--markdown", self.markdown_path),
                                             ("--html", self.html_path)) if path == "-"]
        if len(on_stdout) > 1:
            raise InputProblem(f"{' and '.join(flag + ' -' for flag in on_stdout)} "
                               f"{'both' if len(on_stdout) == 2 else 'all'} want stdout alone: write all but one to "
                               "files")
        for path in (self.json_path, self.html_path, self.markdown_path, self.junit_path, self.prom_path,
                     self.status_path):
            if path and path != "-":
                check_output_path(path)
        if self.output_dir is not None and self.writes_defaults:
            check_output_dir(self.output_dir)

    @property
    def writes_defaults(self) -> bool:
        """Whether a report goes into --output-dir under its default name (one of JSON and HTML is not named)."""
        return self.output_dir is not None and (self.json_path is None or self.html_path is None)

    @property
    def stdout_kind(self) -> Optional[str]:
        return ("json" if self.json_path == "-" else "markdown" if self.markdown_path == "-"
                else "html" if self.html_path == "-" else None)


@dataclass
class Outcome:
    """A finished run: the (redacted) report, its findings, what was written and what could not be."""

    report: Dict[str, Any]
    findings: List[Any]
    json_text: str
    written: List[str] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)
    markdown_text: Optional[str] = None
    html_text: Optional[str] = None  # --html -: the page, for stdout


def check_output_path(path: str) -> None:
    """A named output's directory must exist: it is never created (``--json /no/such/dir/r.json`` is exit 2)."""
    from dl_doctor.host.output import missing_directory

    why = missing_directory(path)
    if why:
        raise InputProblem(f"cannot write {path}: {why}")


def check_output_dir(directory: str) -> None:
    """The report archive (--output-dir) can be used: created if missing (as documented), a directory this user may
    write into, held to the archive's rule as root. One line when not."""
    from dl_doctor.host.output import open_directory

    try:
        fd = open_directory(directory, create=True, guard=True)
    except OSError as exc:
        raise InputProblem(_archive_problem(directory, exc))
    try:
        if not os.access(directory, os.W_OK | os.X_OK):
            raise InputProblem(f"cannot write into {directory}: permission denied")
    finally:
        os.close(fd)


# -- loading --------------------------------------------------------------------------------------------------------

def split_selectors(values: Sequence[str]) -> List[str]:
    out: List[str] = []
    for value in values:
        out.extend(v.strip() for v in value.split(",") if v.strip())
    return out


def registry():
    from dl_doctor.registry import load_registry

    return load_registry()


def select_checks(reg, only: Sequence[str], skip: Sequence[str]):
    only_l, skip_l = split_selectors(only), split_selectors(skip)
    unknown = reg.unknown_selectors(only_l + skip_l)
    if unknown:
        hint = reg.closest_checks(unknown[0])
        raise InputProblem(f"unknown check or tag '{unknown[0]}'" + (f" (did you mean {', '.join(hint)}?)" if hint else "")
                           + "; see 'dl-doctor list'")
    return reg.select(only_l, skip_l)


def load_matrix(overlays: Sequence[str]):
    """The run's matrix (built-in, site overlays, ``overlays``), or InputProblem; validated before collection and
    used after it, loaded once (``compat_matrix.load`` holds the one cache, keyed by the files' identity)."""
    from dl_doctor import compat_matrix

    try:
        return compat_matrix.load(overlays=list(overlays))
    except compat_matrix.MatrixError as exc:
        more = f" ({len(exc.errors) - 1} more; run 'dl-doctor matrix validate FILE')" if len(exc.errors) > 1 else ""
        raise InputProblem(f"invalid compatibility matrix: {exc.errors[0]}{more}")


@functools.lru_cache(maxsize=4)  # validated before collection, used after it: read once
def load_expectations(path: Optional[str]) -> Optional[Dict[str, Any]]:
    if not path:
        return None
    from dl_doctor.judge.expect import ExpectationError, load

    try:
        return load(path)
    except ExpectationError as exc:
        raise InputProblem(str(exc))


def validate_inputs(reg, judge: JudgeOptions) -> None:
    """Reject bad input before spending time on probes."""
    select_checks(reg, judge.only, judge.skip)
    load_matrix(judge.overlays)
    load_expectations(judge.expect_file)


def read_document(path: str, bundle_member: str = "facts.json") -> Any:
    """The JSON document at ``path``, or the member ``bundle_member`` of a support bundle."""
    import tarfile
    import zlib

    from dl_doctor.integrations.bundle import BundleError, is_bundle, read_member
    from dl_doctor.facts.validate import InputError, load_json_file

    try:
        if is_bundle(path):
            return read_member(path, bundle_member)
        return load_json_file(path)
    except (InputError, BundleError) as exc:
        raise InputProblem(str(exc))
    except FileNotFoundError:
        raise InputProblem(f"cannot read {path}: no such file")
    except (EOFError, zlib.error, tarfile.TarError) as exc:  # click would report EOFError as "interrupted"
        raise InputProblem(f"{path} is not a readable dl-doctor bundle (truncated or corrupt?): {exc}")
    except OSError as exc:
        raise InputProblem(f"cannot read {path}: {exc.strerror or exc}")


def snapshot_of(path: str, data: Any) -> Dict[str, Any]:
    """The facts snapshot in a facts file or a report (``path`` names it in errors), validated."""
    from dl_doctor.model import FACTS_SCHEMA_VERSION
    from dl_doctor.facts.validate import InputError, validate_snapshot

    if not isinstance(data, dict):
        raise InputProblem(f"{path} is not a dl-doctor facts file or report")
    version = str(data.get("schema_version", ""))
    if data.get("kind") == "dl-doctor-facts":
        snapshot = data
    elif "findings" in data and isinstance(data.get("facts"), dict):
        run: Dict[str, Any] = data["run"] if isinstance(data.get("run"), dict) else {}
        tool: Dict[str, Any] = data["tool"] if isinstance(data.get("tool"), dict) else {}
        # a report's parts are rebuilt where they are missing (its tool too); its facts are held to the schema
        tool = {**tool, "name": tool.get("name") or "dl-doctor", "version": tool.get("version") or "unknown"}
        snapshot = {
            "schema_version": version, "kind": "dl-doctor-facts", "tool": tool,
            "collected_at": run.get("facts_collected_at") or run.get("started_at"),
            "mode": run.get("facts_mode") or ("sysroot" if run.get("mode") == "sysroot" else "live"),
            "sysroot": run.get("sysroot"), "facts": data["facts"],
            "probe_errors": data.get("probe_errors", []), "unavailable": data.get("unavailable", {}),
            "privilege": data.get("privilege", {}),
        }
    else:
        raise InputProblem(f"{path} is not a dl-doctor facts file or report (no 'kind' or 'facts')")
    if version.split(".")[0] != FACTS_SCHEMA_VERSION:
        raise InputProblem(f"{path} has schema_version {version!r}; this dl-doctor reads version "
                           f"{FACTS_SCHEMA_VERSION}")
    if not isinstance(snapshot.get("facts"), dict):
        raise InputProblem(f"{path} has no 'facts' object")
    try:
        validate_snapshot(snapshot, path)
    except InputError as exc:
        raise InputProblem(str(exc))
    return snapshot


def load_snapshot(path: str, bundle_member: str = "facts.json") -> Dict[str, Any]:
    """A facts snapshot from a facts file, a JSON report or a support bundle."""
    return snapshot_of(path, read_document(path, bundle_member))


def snapshot_and_findings(path: str, reg=None) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    """A report (or a bundle's report) brings its findings; a bare facts file gets today's checks run on it."""
    from dl_doctor.model import Status

    doc = read_document(path, bundle_member="report.json")
    snapshot = snapshot_of(path, doc)
    if isinstance(doc.get("findings"), list):
        statuses = {s.value for s in Status}
        for n, f in enumerate(doc["findings"]):
            if not isinstance(f, dict) or not all(isinstance(f.get(k), str) for k in ("id", "status", "message")) \
                    or f["status"] not in statuses:
                raise InputProblem(f"{path}: findings[{n}] is not a finding (id, status and message strings, "
                                   f"status one of {', '.join(sorted(statuses))})")
        return snapshot, doc["findings"]
    from dl_doctor.engine import evaluate

    findings = evaluate(snapshot, (reg or registry()).checks, load_matrix(()))
    return snapshot, [f.to_dict() for f in findings]


def _step(raw: Any) -> Optional[Dict[str, Any]]:
    """One ``fix.steps`` entry of a saved report, kept only in its shape (a kind, strings, flags, lists of strings)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("kind"), str):
        return None
    out: Dict[str, Any] = {}
    for key, value in list(raw.items())[:16]:
        if not isinstance(key, str):
            continue
        if isinstance(value, bool):
            out[key[:40]] = value
        elif isinstance(value, str):
            out[key[:40]] = _s(value, 4000)
        elif isinstance(value, list):
            out[key[:40]] = [_s(v, 400) for v in value[:50] if isinstance(v, str)]
    return out


def _steps(raw: List[Any]) -> List[Dict[str, Any]]:
    return [s for s in (_step(r) for r in raw[:50]) if s is not None]


def _s(value: Any, limit: int = 4000) -> str:
    return str(value)[:limit] if isinstance(value, (str, int, float)) and not isinstance(value, bool) else ""


def load_report(path: str) -> Dict[str, Any]:
    """A saved report (a JSON report, or the report in a support bundle), rebuilt from its validated parts so the
    renderers only ever see the shapes they expect, whatever the file holds."""
    from dl_doctor.model import Status
    from dl_doctor.facts.validate import InputError, check_limits

    doc = read_document(path, bundle_member="report.json")
    if not isinstance(doc, dict) or not isinstance(doc.get("findings"), list):
        raise InputProblem(f"{path} is not a dl-doctor report (no findings); a facts file is judged with "
                           f"`dl-doctor check {path}`")
    try:
        check_limits(doc, path)
    except InputError as exc:
        raise InputProblem(str(exc))
    snapshot = snapshot_of(path, doc)  # the facts, validated against the facts schema
    statuses = {s.value for s in Status}
    findings = []
    for n, f in enumerate(doc["findings"]):
        if not isinstance(f, dict) or not all(isinstance(f.get(k), str) for k in ("id", "status", "message")) \
                or f["status"] not in statuses:
            raise InputProblem(f"{path}: findings[{n}] is not a finding (id, status and message strings, status one "
                               f"of {', '.join(sorted(statuses))})")
        fix = f.get("fix") if isinstance(f.get("fix"), dict) else None
        findings.append({
            "id": _s(f["id"], 200), "slug": _s(f.get("slug"), 200), "title": _s(f.get("title"), 500) or _s(f["id"]),
            "status": f["status"], "message": _s(f["message"], 100_000),
            "evidence": f.get("evidence") if isinstance(f.get("evidence"), dict) else {},
            "fix": {"summary": _s(fix.get("summary"), 4000) or "See the finding.",
                    "commands": [_s(c, 4000) for c in fix.get("commands") or [] if isinstance(c, str)][:50],
                    **({"steps": _steps(fix["steps"])} if isinstance(fix.get("steps"), list) else {})}
            if fix else None,
            "tags": [_s(t, 100) for t in f.get("tags") or [] if isinstance(t, str)][:20],
            **({"headline": _s(f["headline"], 300)} if isinstance(f.get("headline"), str) and f["headline"] else {}),
        })
    summary = {k: sum(1 for f in findings if f["status"] == k) for k in sorted(statuses)}
    run: Dict[str, Any] = doc["run"] if isinstance(doc.get("run"), dict) else {}
    duration = run.get("duration_s")
    host: Dict[str, Any] = doc["host"] if isinstance(doc.get("host"), dict) else {}
    tool: Dict[str, Any] = doc["tool"] if isinstance(doc.get("tool"), dict) else {}
    privilege: Dict[str, Any] = doc["privilege"] if isinstance(doc.get("privilege"), dict) else {}
    limited = [{"probe": _s(i.get("probe"), 200), "would_add": _s(i.get("would_add"), 1000)}
               for i in privilege.get("limited") or [] if isinstance(i, dict)][:50]
    return {
        "schema_version": _s(doc.get("schema_version"), 20) or "1",
        "tool": {"name": "dl-doctor", "version": _s(tool.get("version"), 50)},
        "run": {"mode": _s(run.get("mode"), 20) or "facts", "started_at": _s(run.get("started_at"), 40),
                "duration_s": float(duration) if isinstance(duration, (int, float)) and not isinstance(duration, bool)
                and 0 <= duration < 1e7 else 0.0,
                "sysroot": _s(run.get("sysroot"), 4000) or None,
                "facts_collected_at": _s(run.get("facts_collected_at"), 40), "load_errors": []},
        "host": {k: (v if isinstance(v, (int, bool)) or v is None else _s(v, 500)) for k, v in host.items()
                 if isinstance(k, str) and k in ("hostname", "os", "kernel", "nvidia_gpus", "driver", "container")},
        "summary": summary, "findings": findings, "facts": snapshot["facts"],
        "probe_errors": [{"probe": _s(e.get("probe"), 200), "error": _s(e.get("error"), 2000),
                          "kind": _s(e.get("kind"), 50)} for e in doc.get("probe_errors") or [] if isinstance(e, dict)],
        "unavailable": doc.get("unavailable") if isinstance(doc.get("unavailable"), dict) else {},
        "privilege": {"limited": limited},
        "redaction": doc.get("redaction") if isinstance(doc.get("redaction"), dict) else {},
        # which file loads is recomputed from the validated facts, never taken from the file (it may be edited)
        "loading": _loading_of(snapshot),
    }


def _loading_of(snapshot: Dict[str, Any]) -> Dict[str, Any]:
    from dl_doctor.facts.loading import model as loading_model
    from dl_doctor.model import Facts

    try:
        matrix = load_matrix(())
    except InputProblem:
        matrix = None
    return loading_model(Facts(snapshot), matrix)


# -- collecting and judging -------------------------------------------------------------------------------------------

def prewarm(out: Optional[OutputOptions] = None) -> Any:
    """Work the report will need, done on a daemon thread while the probes mostly wait on the host (files,
    subprocesses): compile the HTML template, import the renderers and the redaction rules. Nothing is rendered."""
    import threading

    def work() -> None:
        try:
            from dl_doctor import redact  # noqa: F401 - compiles the redaction patterns
            from dl_doctor.reports import terminal  # noqa: F401

            if out is None or out.html_path != "/dev/null":
                from dl_doctor.reports import html

                html.template()
            if out is not None and out.junit_path:
                from dl_doctor.reports import junit  # noqa: F401
            if out is not None and out.prom_path:
                from dl_doctor.reports import prometheus  # noqa: F401
        except Exception:  # noqa: BLE001 - only a head start; rendering reports its own errors later
            pass

    thread = threading.Thread(target=work, name="prewarm", daemon=True)
    thread.start()
    return thread


def open_host(opts: CollectOptions, capture: Any = None) -> Any:
    """The Host that `run`, `collect`, `bundle`, `verify` and `why` collect from. A --sysroot that is not a root
    filesystem (an empty mount point, an image's /boot or EFI partition) is an InputProblem before any probe runs."""
    from dl_doctor.host import Host
    from dl_doctor.host.sysroot import problem

    try:
        host = Host(sysroot=opts.host_root or opts.sysroot, live_kernel=bool(opts.host_root),
                    command_timeout=opts.timeout, capture=capture, run_as_owner=opts.run_as_owner)
    except NotADirectoryError as exc:
        raise InputProblem(str(exc))
    trouble = problem(host, shown=opts.sysroot) if opts.sysroot and not opts.host_root else None
    if trouble:
        raise InputProblem(trouble)
    return host


def collect_facts(reg, opts: CollectOptions, capture: Any = None, overlays: Sequence[str] = (),
                  on_started: Any = None) -> Dict[str, Any]:
    """The facts snapshot; the probes that need knowledge get the run's matrix (the built-in data, the site overlays
    and ``overlays``: --matrix-overlay) through ProbeContext.matrix. ``on_started`` runs once every probe has started."""
    from dl_doctor.engine import collect

    host = open_host(opts, capture)
    return collect(reg.probes, host, opts.probe_options(), timeout=opts.timeout, matrix=load_matrix(overlays),
                   on_started=on_started)


def judge(snapshot: Dict[str, Any], reg, opts: JudgeOptions, *, mode: str, started: _dt.datetime, t0: float,
          extra_options: Optional[Dict[str, Any]] = None) -> Tuple[Dict[str, Any], List[Any]]:
    """The report (not yet redacted) and its findings."""
    from dl_doctor.engine import build_report, evaluate

    checks = select_checks(reg, opts.only, opts.skip)
    matrix = load_matrix(opts.overlays)
    findings = evaluate(snapshot, checks, matrix, {"expectations": load_expectations(opts.expect_file),
                                                   "load_errors": list(reg.load_errors)})
    options = {"fail_on": opts.fail_on, "only": split_selectors(opts.only), "skip": split_selectors(opts.skip),
               "redact": opts.redact, "expect": opts.expect_file}
    options.update(extra_options or {})
    from dl_doctor.facts.loading import model as loading_model
    from dl_doctor.model import Facts

    # the one resolution the checks judged from (computed once: cached per facts snapshot and matrix)
    loading = loading_model(Facts(snapshot), matrix)
    report = build_report(snapshot, findings, mode=mode, started_at=started, duration_s=time.monotonic() - t0,
                          options=options, load_errors=reg.load_errors, loading=loading)
    report["run"]["matrix"] = matrix.info()
    return report, findings


def safe_name(text: Optional[str]) -> str:
    if not text or "[" in text:
        return "redacted" if text else "unknown-host"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:80]


def write_outputs(snapshot: Dict[str, Any], reg, judge_opts: JudgeOptions, out: OutputOptions, *, mode: str,
                  started: _dt.datetime, t0: float, extra_options: Optional[Dict[str, Any]] = None) -> Outcome:
    """Judge, redact once, and write every output asked for (only those: nothing is rendered for nothing)."""
    from dl_doctor.host.output import OutputRefused, prune_reports, reserve_unique, write_file
    from dl_doctor.redact import redact
    from dl_doctor.reports import to_json

    report, findings = judge(snapshot, reg, judge_opts, mode=mode, started=started, t0=t0,
                             extra_options=extra_options)
    report = redact(report, extended=judge_opts.redact, snapshot=dict(snapshot))
    outcome = Outcome(report, findings, to_json(report))
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    archive_dir = out.output_dir or "."
    base = os.path.join(archive_dir, f"dl-doctor-{safe_name(report['host'].get('hostname'))}-{stamp}")
    defaults = out.writes_defaults
    if defaults:
        try:  # a name no other run in this directory has, even in the same second
            base = reserve_unique(base, ".json" if out.json_path is None else ".html")
        except OSError as exc:
            outcome.problems.append(_archive_problem(archive_dir, exc))
            defaults = False  # one line says why; nothing is written into (or pruned from) that directory
    # (path, renderer, private): reports carry the environment and stay private; the status line and the metrics
    # carry none and stay readable by the users and exporters that read them.
    targets: List[Tuple[str, Any, bool]] = []
    if out.json_path != "-" and (out.json_path or defaults):
        targets.append((out.json_path or base + ".json", lambda: outcome.json_text, True))
    if out.html_path == "/dev/null":
        outcome.written.append("/dev/null")  # asked for nothing: rendering it would only cost time
    elif out.html_path == "-":  # alone on stdout (emit writes it); the JSON still goes to --output-dir when asked
        outcome.html_text = _render("html", report, judge_opts.overlays)
    elif out.html_path or defaults:
        targets.append((out.html_path or base + ".html", lambda: _render("html", report, judge_opts.overlays), True))
    if out.junit_path:
        targets.append((out.junit_path, lambda: _render("junit", report), True))
    if out.prom_path:
        targets.append((out.prom_path, lambda: _render("prometheus", report), False))
    if out.status_path:  # "new since DATE" where the archive holds this host's previous run
        targets.append((out.status_path, lambda: _status(report, base + ".json" if defaults else None), False))
    if out.markdown_path:
        from dl_doctor.redact import for_public
        from dl_doctor.reports.markdown import render as markdown_render

        outcome.markdown_text = markdown_render(for_public(report, snapshot, judge_opts.redact),
                                               out.markdown_max_chars)
        if out.markdown_path != "-":
            targets.append((out.markdown_path, lambda: outcome.markdown_text, True))
    archive = {base + ".json", base + ".html"} if defaults else set()
    for path, render, private in targets:
        try:
            write_file(path, render(), private=private, guard_dir=path in archive)
            outcome.written.append(path)
        except OutputRefused as exc:
            outcome.problems.append(f"not writing {exc.filename}: it {exc.why}")
        except OSError as exc:
            outcome.problems.append(f"cannot write {path}: {exc.strerror or exc}")
    if out.keep_reports is not None and defaults:
        try:
            prune_reports(archive_dir, out.keep_reports, protect=outcome.written)
        except OSError as exc:
            outcome.problems.append(_archive_problem(archive_dir, exc))
    return outcome


def _archive_problem(directory: str, exc: OSError) -> str:
    """One line for an output directory that cannot be used: the path that decided it, and why."""
    from dl_doctor.host.output import OutputRefused

    if isinstance(exc, OutputRefused):
        what = "it" if os.path.normpath(exc.filename) == os.path.normpath(directory) else exc.filename
        return f"not writing into {directory}: {what} {exc.why} (name one only root controls with --output-dir)"
    return f"cannot write into {directory}: {exc.strerror or exc}"


def gpu_names(report: Dict[str, Any], overlays: Sequence[str] = ()) -> Dict[str, str]:
    """The GPU model for each PCI ID of the report's GPUs (``10de:20b0`` -> ``NVIDIA A100 SXM4 40GB``), from the
    run's matrix (with ``overlays``), for the renderers that name them (the HTML inventory): reports never load the
    matrix. An ID the matrix does not know is named by the driver's own model for a GPU of that ID
    (/proc/driver/nvidia/gpus/BDF/information: nvidia_driver.proc_gpus). Computed before rendering: the renderers
    look nothing up. Without the matrix, only the driver's names (a name is a nicety; the ID is the fact)."""
    from dl_doctor.reports.inventory import gpu_ids

    ids = gpu_ids(report)
    if not ids:
        return {}
    facts = report.get("facts") or {}
    devices = (facts.get("gpu_pci") or {}).get("devices") or []
    id_of = {str(d.get("bdf", "")).lower(): f"10de:{d.get('device_id')}" for d in devices if isinstance(d, dict)}
    own: Dict[str, str] = {}
    for g in (facts.get("nvidia_driver") or {}).get("proc_gpus") or []:
        pci = id_of.get(str(g.get("bdf", "")).lower()) if isinstance(g, dict) else None
        if pci and g.get("model") and pci not in own:
            own[pci] = str(g["model"])[:128]
    try:
        matrix = load_matrix(overlays)
    except InputProblem:
        return {pci: own[pci] for pci in ids if pci in own}
    entries = {pci: matrix.gpu_by_pci(pci) for pci in ids}
    return {pci: e["name"] if e else own[pci] for pci, e in entries.items() if e or pci in own}


def _status(report: Dict[str, Any], archived: Optional[str]) -> str:
    """The login status line; ``archived`` names this run's report in the archive, whose previous run it is held
    against."""
    from dl_doctor.integrations.login_hook import new_since
    from dl_doctor.reports.status import status_line

    return status_line(report, new_since(archived, report) if archived else None) + "\n"


def _render(kind: str, report: Dict[str, Any], overlays: Sequence[str] = ()) -> str:
    """Renderers are imported only when their output is asked for (jinja2 costs a noticeable part of a start)."""
    if kind == "html":
        from dl_doctor.reports import html

        return html.render(report, gpu_names=gpu_names(report, overlays))
    if kind == "junit":
        from dl_doctor.reports import junit

        return junit.render(report)
    if kind == "prometheus":
        from dl_doctor.reports import prometheus

        return prometheus.render(report)
    from dl_doctor.reports.status import status_line

    return status_line(report) + "\n"


def write_or_refuse(path: str, data: Any, private: bool = True) -> None:
    """One output file; a refused target or a failed write is an InputProblem."""
    from dl_doctor.host.output import OutputRefused, write_file

    try:
        write_file(path, data, private=private)
    except OutputRefused as exc:
        raise InputProblem(f"not writing {exc.filename}: it {exc.why}")
    except OSError as exc:
        raise InputProblem(f"cannot write {path}: {exc.strerror or exc}")


# -- why: an error message to its cause --------------------------------------------------------------------------------

def read_why_input(text: Optional[str], log: Optional[str]) -> str:
    """The error text: the argument, or a log file's end (``-`` is stdin), bounded; bad input is exit 2."""
    from dl_doctor.compat_matrix.signatures import MAX_TEXT

    if (text is None) == (log is None):
        raise InputProblem("give the error text, or --log FILE (- for stdin), not both")
    if text is not None:
        if not text.strip():
            raise InputProblem("the error text is empty")
        return text[-MAX_TEXT:]
    import sys as _sys

    assert log is not None  # exactly one of the two is given (checked above)
    gz = log.endswith(".gz")
    if log == "-":
        data = _sys.stdin.buffer.read(MAX_TEXT * 4)
    else:
        try:
            if not os.path.isfile(log):
                raise InputProblem(f"{log} is not a regular file")
            size = os.stat(log).st_size
            with open(log, "rb") as fh:
                head = fh.read(2)
                gz = gz or head == b"\x1f\x8b"
                if not gz and size > MAX_TEXT:  # plain text: its end, where the error is
                    fh.seek(size - MAX_TEXT)
                else:
                    fh.seek(0)
                data = fh.read(MAX_TEXT * 4)  # a compressed log from its start (its header), at most 64 MiB
        except OSError as exc:
            raise InputProblem(f"cannot read {log}: {exc.strerror or exc}")
    if gz or data[:2] == b"\x1f\x8b":
        import zlib

        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = bytearray()
        seen = 0
        try:
            chunk = data
            while chunk and seen < (1 << 30):  # a decompression bomb stops at 1 GiB of text (its first GiB is read)
                part = d.decompress(chunk, 1 << 20)
                seen += len(part)
                out += part
                chunk = d.unconsumed_tail
                if len(out) > MAX_TEXT:  # keep the end
                    del out[:len(out) - MAX_TEXT]
        except zlib.error as exc:
            raise InputProblem(f"{log}: not a readable gzip file ({exc})")
        data = bytes(out)
    data = data[-MAX_TEXT:]
    return data.decode("utf-8", "replace")


def why(text: str, *, report: Optional[str] = None, collect: Optional[CollectOptions] = None,
        evidence: bool = True, log: bool = False) -> Dict[str, Any]:
    """Match ``text`` against everything ``why`` knows (the signature base, the status-code catalogs, the Xid table),
    pull out the objects it names, and rank the candidate causes: from the text alone, or against a report someone
    sent (``report``), or against this machine or a tree (``collect``: the facts and every check). ``log``: the text
    is a whole log, read as one (every distinct match counted, ranked by severity, then recency). docs/why.md."""
    from dl_doctor.compat_matrix.signatures import Match, compile_pattern, match, rank
    from dl_doctor.judge import why as w

    matrix = load_matrix(())
    signatures, causes = w.base(matrix)
    events: List[Dict[str, Any]] = []
    if log:
        events = w.log_events(text, signatures, matrix)
        matches = [Match(e["_sig"], compile_pattern((e["_sig"].get("patterns") or ["xid"])[0]),
                         e["lines"][0]["text"].strip()) for e in events]
    else:
        matches = w.xid_matches(text, matrix) + w.narrow(match(text, signatures), text)
    for m in matches:
        xid = m.signature.get("xid")
        if xid:
            causes[f"xid-{xid['code']}"] = w.xid_cause(xid["code"], matrix.xid(xid["code"]))
    codes = [m.signature["code"] for m in matches if isinstance(m.signature.get("code"), dict)]
    # the objects: from the whole of a pasted text (a traceback names the library lines away from its error), from
    # the matched lines of a log (a log's other lines are someone else's business)
    scope = "\n".join(m.excerpt for m in matches) if log or len(text) > 65536 else text
    found = w.entities(scope, codes)
    out: Dict[str, Any] = {
        "matched": [{"signature": m.signature["id"], "pattern": m.pattern.text,
                     "line": m.excerpt, "meaning": m.signature["meaning"],
                     "severity": m.signature.get("severity"),
                     **({"code": m.signature["code"]} if m.signature.get("code") else {}),
                     **({"xid": m.signature["xid"]} if m.signature.get("xid") else {})} for m in matches],
        "entities": found, "machine": [], "evidence_from": None, "causes": [], "related": [], "nearest": []}
    if log:
        out["events"] = [w.public_event(e) for e in events]
    facts: Optional[Dict[str, Any]] = None
    found_findings: Optional[List[Dict[str, Any]]] = None
    if report:
        snapshot, found_findings = snapshot_and_findings(report)
        facts = snapshot.get("facts") if isinstance(snapshot.get("facts"), dict) else snapshot
        out["evidence_from"] = report
    elif evidence and collect is not None:
        from dl_doctor.engine import collect as run_probes
        from dl_doctor.engine import evaluate

        reg = registry()
        host = open_host(collect)
        # every probe and every check: a cause's deciding checks read facts beyond their requires=, and a text
        # that matches nothing is answered with the machine's own findings
        snapshot_obj = run_probes(list(reg.probes), host, collect.probe_options(), timeout=collect.timeout,
                                  matrix=matrix)
        found_findings = [f.to_dict() for f in evaluate(snapshot_obj, reg.checks, matrix)]
        facts = snapshot_obj.get("facts") if isinstance(snapshot_obj.get("facts"), dict) else None
        out["evidence_from"] = collect.sysroot or "this machine"
        out["checks_run"] = sorted(f["id"] for f in found_findings)
    findings = {f["id"]: f for f in found_findings} if found_findings is not None else None
    if facts is not None:
        from dl_doctor.facts.loading import model as loading_model

        try:
            loading = loading_model(facts, matrix)
        except Exception:  # noqa: BLE001 - a facts file the model cannot read costs the loading answers only
            loading = {}
        out["machine"] = w.ask(found, facts, loading, matrix)
    if matches:
        out["causes"] = rank(matches, causes, findings)
    elif found_findings is not None:
        out["related"] = w.related_findings(text, found, found_findings)
    else:
        out["nearest"] = w.nearest_signatures(text, signatures, causes)
    return out
