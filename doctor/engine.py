"""Run probes (concurrently, each under a timeout) and checks (pure) and build the report."""

from __future__ import annotations

import datetime as _dt
import inspect
import json
import os
import threading
import time
from types import MappingProxyType
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence

from dl_doctor import __version__
from dl_doctor.fixes import for_target, target_of
from dl_doctor.host import Host
from dl_doctor.util.text import printable
from dl_doctor.model import (DISPLAY_ORDER, FACTS_SCHEMA_VERSION, KEY_RE, REMEDIES, REPORT_SCHEMA_VERSION, CheckSpec, Facts,
                          Finding, Result, Status, iter_statuses)
from dl_doctor.probes import ProbeContext, ProbeSpec, Unavailable

DEFAULT_TIMEOUT = 5.0


def utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def iso(ts: _dt.datetime) -> str:
    return ts.astimezone(_dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _effective_uid() -> Optional[int]:
    return os.geteuid() if hasattr(os, "geteuid") else None


class _ProbeRun:
    def __init__(self, spec: ProbeSpec, ctx: ProbeContext):
        self.spec = spec
        self.ctx = ctx
        self.value: Any = None
        self.exc: Optional[BaseException] = None
        self.trace: str = ""
        self.duration: Optional[float] = None
        self.done = threading.Event()
        # Daemon threads: a probe stuck in a syscall (a wedged GPU in NVML) must
        # not keep dl-doctor from exiting after it has written its report.
        self.thread = threading.Thread(target=self._run, name=f"probe-{spec.name}", daemon=True)

    def _run(self) -> None:
        start = time.monotonic()
        try:
            self.value = self.spec.func(self.ctx)
        except BaseException as exc:  # noqa: BLE001 - a probe failure is data
            self.exc = exc
            self.trace = _where(exc)
        finally:
            self.duration = time.monotonic() - start
            self.done.set()


def _where(exc: BaseException) -> str:
    """Where ``exc`` was raised: the last frame of its traceback (what traceback.extract_tb's last entry says,
    without importing traceback for every probe that raises Unavailable)."""
    tb = exc.__traceback__
    if tb is None:
        return ""
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return f"{os.path.basename(code.co_filename)}:{tb.tb_lineno} in {code.co_name}"


def collect(probes: Sequence[ProbeSpec], host: Host, options: Optional[Mapping[str, Any]] = None,
            timeout: float = DEFAULT_TIMEOUT, matrix: Any = None,
            on_started: Optional[Callable[[], Any]] = None) -> Dict[str, Any]:
    """Run every probe concurrently and return a facts snapshot (a plain dict). ``matrix`` is the run's
    compatibility matrix, handed to every probe as ``ProbeContext.matrix``; ``on_started`` is called once every
    probe's thread has started (work of the caller's that can wait until the probes are under way)."""
    options = MappingProxyType(dict(options or {}))
    started = utc_now()
    t0 = time.monotonic()
    runs = [_ProbeRun(spec, ProbeContext(host=host, options=options, matrix=matrix)) for spec in probes]

    def limit_of(spec: ProbeSpec) -> float:
        own = options.get(spec.timeout_option) if spec.timeout_option else None
        return max(timeout, float(own)) if own else timeout

    # The probes allowed the longest (they run interpreters, sample the disks) start first: starting two dozen
    # threads while others hold the GIL takes a good part of a run, and the longest probe decides when it goes on.
    for run in sorted(runs, key=lambda r: -limit_of(r.spec)):
        run.thread.start()
    if on_started is not None:
        on_started()

    for run in runs:
        run.done.wait(max(0.0, t0 + limit_of(run.spec) - time.monotonic()))

    facts: Dict[str, Any] = {}
    status: Dict[str, Dict[str, Any]] = {}
    errors: List[Dict[str, Any]] = []
    unavailable: Dict[str, str] = {}
    limited: List[Dict[str, str]] = []
    for run in runs:
        name = run.spec.name
        if not run.done.is_set():
            elapsed = round(time.monotonic() - t0, 3)
            errors.append({"probe": name, "kind": "timeout",
                           "error": f"timed out after {limit_of(run.spec):g}s (still running; its facts are missing)",
                           "duration_s": elapsed})
            status[name] = {"status": "timeout", "duration_s": elapsed}
            continue
        duration = round(run.duration or 0.0, 3)
        for problem in run.ctx.input_errors:
            errors.append({"probe": name, "kind": "input", "error": problem, "duration_s": duration})
        for what in run.ctx.denials:
            limited.append({"probe": name, "would_add": what})
        exc = run.exc
        if exc is None:
            try:
                value = printable(json.loads(json.dumps(run.value, default=_not_serialisable, allow_nan=False)))
            except (TypeError, ValueError) as err:
                errors.append({"probe": name, "kind": "exception", "duration_s": duration,
                               "error": f"returned facts that are not JSON-serialisable: {err}"})
                status[name] = {"status": "error", "duration_s": duration}
                continue
            if not isinstance(value, dict):
                errors.append({"probe": name, "kind": "exception", "duration_s": duration,
                               "error": f"returned {type(run.value).__name__}, not a dictionary of facts"})
                status[name] = {"status": "error", "duration_s": duration}
                continue
            facts[name] = value
            status[name] = {"status": "denied" if run.ctx.denials else "ok", "duration_s": duration}
        elif isinstance(exc, Unavailable):
            unavailable[name] = str(exc)
            status[name] = {"status": "unavailable", "duration_s": duration}
        elif isinstance(exc, PermissionError):
            errors.append({"probe": name, "kind": "permission", "duration_s": duration,
                           "error": f"permission denied: {exc}"})
            limited.append({"probe": name, "would_add": run.spec.root_adds or run.spec.description})
            status[name] = {"status": "denied", "duration_s": duration}
        else:
            text = f"{type(exc).__name__}: {exc}"
            if run.trace:
                text += f" ({run.trace})"
            errors.append({"probe": name, "kind": "exception", "error": text, "duration_s": duration})
            status[name] = {"status": "error", "duration_s": duration}

    euid = _effective_uid()
    return {
        "schema_version": FACTS_SCHEMA_VERSION,
        "kind": "dl-doctor-facts",
        "tool": {"name": "dl-doctor", "version": __version__},
        "collected_at": iso(started),
        "duration_s": round(time.monotonic() - t0, 3),
        "mode": host.mode,
        "sysroot": host.sysroot,
        "timeout_s": timeout,
        "facts": facts,
        "probes": status,
        "probe_errors": errors,
        "unavailable": unavailable,
        "privilege": {"euid": euid, "is_root": euid == 0, "limited": limited},
        "commands": printable([vars(rec) for rec in list(host.commands)]),
    }


def _not_serialisable(obj: Any) -> Any:
    if isinstance(obj, (set, frozenset, tuple)):
        return sorted(obj) if isinstance(obj, (set, frozenset)) else list(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON-serialisable")


def _call(spec: CheckSpec, facts: Facts, matrix: Any, context: Optional[Mapping[str, Any]] = None) -> Any:
    available = {"facts": facts, "matrix": matrix, **dict(context or {})}
    params: Mapping[str, inspect.Parameter]
    try:
        params = inspect.signature(spec.func).parameters
    except (TypeError, ValueError):
        params = {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        kwargs = available
    else:
        kwargs = {k: v for k, v in available.items() if k in params}
    return spec.func(**kwargs)


def run_check(spec: CheckSpec, facts: Facts, matrix: Any = None,
              context: Optional[Mapping[str, Any]] = None) -> Finding:
    """The finding of a check that judges one thing (the first, for one that returns several)."""
    return run_check_all(spec, facts, matrix, context)[0]


def run_check_all(spec: CheckSpec, facts: Facts, matrix: Any = None,
                  context: Optional[Mapping[str, Any]] = None) -> List[Finding]:
    def finding(status: Status, message: str, evidence=None, fix=None, key: Optional[str] = None,
                headline: Optional[str] = None, remedy: Optional[str] = None,
                drain: Optional[bool] = None) -> Finding:
        fid = f"{spec.id}:{key}" if key else spec.id
        remediation = None
        if status in (Status.WARN, Status.FAIL):
            action = remedy if remedy in REMEDIES else spec.remedy
            # only a failure takes a node out of service; a warning is for the people who read it
            remediation = {"action": action,
                           "drain": bool(spec.drain if drain is None else drain) and status is Status.FAIL}
        elif status is Status.ERROR:
            remediation = {"action": "none", "drain": False}  # dl-doctor could not judge: nothing to act on
        if status in (Status.PASS, Status.SKIP):
            headline = None
        elif status is Status.ERROR:
            headline = headline or f"{spec.id} could not judge"
        else:
            # a plugin's check without a `problem` heading falls back to its title
            headline = (headline or spec.problem or spec.title).strip()[:200] or None
        return Finding(fid, spec.slug, spec.title, status, message, dict(evidence or {}), fix, spec.tags, headline,
                       remediation)

    # Preconditions first: "no NVIDIA GPU on this host" explains a skip better than the
    # missing facts that follow from it. A precondition answers None when it cannot tell.
    for precondition in spec.applies:
        try:
            reason = precondition(facts)
        except Exception as exc:  # noqa: BLE001
            return [finding(Status.ERROR, f"precondition raised {type(exc).__name__}: {exc}",
                            {"exception": f"{type(exc).__name__}: {exc}", "where": _where(exc)})]
        if reason:
            return [finding(Status.SKIP, reason)]
    missing = [path for path in spec.requires if not facts.has(path)]
    if missing:
        reasons = "; ".join(facts.why_missing(p) for p in missing)
        return [finding(Status.SKIP, f"not checked: {reasons}", {"missing_facts": missing})]
    try:
        result = _call(spec, facts, matrix, context)
    except Exception as exc:  # noqa: BLE001 - a crashing check is an error finding
        return [finding(Status.ERROR, f"the check raised {type(exc).__name__}: {exc}",
                        {"exception": f"{type(exc).__name__}: {exc}", "where": _where(exc)})]
    results = result if isinstance(result, list) and result else [result]
    out: List[Finding] = []
    for r in results:
        if not isinstance(r, Result) or not isinstance(r.status, Status):
            out.append(finding(Status.ERROR, f"the check returned {type(r).__name__}, not a Result"))
            continue
        if r.key is not None and not KEY_RE.match(r.key):
            out.append(finding(Status.ERROR, f"the check returned an invalid result key {r.key!r}"))
            continue
        try:
            evidence = json.loads(json.dumps(r.evidence))
        except (TypeError, ValueError) as exc:
            out.append(finding(Status.ERROR, f"the check returned evidence that is not JSON-serialisable: {exc}"))
            continue
        out.append(finding(r.status, r.message, evidence, r.fix, r.key,
                           r.headline if isinstance(r.headline, str) else None,
                           r.remedy if isinstance(r.remedy, str) else None,
                           r.drain if isinstance(r.drain, bool) else None))
    return out


def sort_findings(findings: Iterable[Finding]) -> List[Finding]:
    return sorted(findings, key=lambda f: (DISPLAY_ORDER[f.status], f.id))


def evaluate(snapshot: Mapping[str, Any], checks: Sequence[CheckSpec], matrix: Any = None,
             context: Optional[Mapping[str, Any]] = None) -> List[Finding]:
    """Every check's findings; ``context`` offers extra keyword arguments (``expectations``) to checks that name them."""
    facts = Facts(snapshot)
    findings = [f for spec in checks for f in run_check_all(spec, facts, matrix, context)]
    # A fix acts on the machine the facts describe: an image, a node through --host-root or a captured tree gets its
    # steps rendered for that machine, never as commands that would change the one running dl-doctor.
    target = target_of(snapshot)
    if not target.live:
        for f in findings:
            f.fix = for_target(f.fix, target)
    return sort_findings(findings)


def summarize(findings: Iterable[Finding]) -> Dict[str, int]:
    counts = {s.value: 0 for s in iter_statuses()}
    for f in findings:
        counts[f.status.value] += 1
    return counts


def host_summary(snapshot: Mapping[str, Any]) -> Dict[str, Any]:
    facts = Facts(snapshot)
    return {
        "hostname": facts.get("system.hostname"),
        "os": facts.get("os.pretty_name"),
        "kernel": facts.get("kernel.release"),
        "arch": facts.get("kernel.arch"),
        "container": facts.get("system.container.kind"),
        "nvidia_gpus": facts.get("gpu_pci.gpu_count"),
        "driver": facts.get("nvidia_driver.kernel_module.version"),
    }


def fleet_section(snapshot: Mapping[str, Any], findings: Sequence[Finding],
                  loading: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    from dl_doctor.facts.fleet_section import node_section

    return node_section(snapshot.get("facts") or {}, [f.to_dict() for f in findings], loading)


def build_report(snapshot: Mapping[str, Any], findings: Sequence[Finding], *, mode: str,
                 started_at: _dt.datetime, duration_s: float, options: Optional[Mapping[str, Any]] = None,
                 load_errors: Sequence[str] = (), loading: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    report = {
        "schema_version": REPORT_SCHEMA_VERSION,
        "tool": {"name": "dl-doctor", "version": __version__},
        "run": {
            "started_at": iso(started_at),
            "duration_s": round(duration_s, 3),
            "mode": mode,
            "sysroot": snapshot.get("sysroot"),
            "facts_collected_at": snapshot.get("collected_at"),
            "facts_mode": snapshot.get("mode"),
            "options": dict(options or {}),
            "load_errors": list(load_errors),
        },
        "host": host_summary(snapshot),
        "summary": summarize(findings),
        # what `dl-doctor fleet` compares across nodes, near the top so the merge reads only the head of the file
        "fleet_node": fleet_section(snapshot, findings, loading),
        "findings": [f.to_dict() for f in findings],
        "facts": snapshot.get("facts", {}),
        "probe_errors": list(snapshot.get("probe_errors", [])),
        "unavailable": dict(snapshot.get("unavailable", {})),
        "privilege": snapshot.get("privilege", {}),
    }
    if loading is not None:  # which file each CUDA consumer loads (dl_doctor.facts.loading): what the checks read
        report["loading"] = dict(loading)
    return report


def exit_code(findings: Iterable[Finding], fail_on: str) -> int:
    from dl_doctor.model import FAIL_ON_LEVEL, SEVERITY

    level = FAIL_ON_LEVEL[fail_on]
    if level is None:
        return 0
    return 1 if any(SEVERITY[f.status] >= level for f in findings) else 0
