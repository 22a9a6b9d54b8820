"""``dl-doctor plan``: judge the facts of this machine (a mounted image, a saved report) before and after an upgrade,
with the same checks and the same resolution model, and say what the change breaks and what makes it safe.
Nothing on the host is touched or run: the change is applied to a what-if copy of the facts."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from dl_doctor import __version__
from dl_doctor.engine import evaluate, iso, utc_now
from dl_doctor.fixes import as_step, render, target_of
from dl_doctor.judge.plan import PlanInputError, counts, steps, transitions, verdict, verified_only, what_if
from dl_doctor.model import iter_statuses

PLAN_SCHEMA_VERSION = "1"


def _dicts(findings: Sequence[Any]) -> List[Dict[str, Any]]:
    return [f.to_dict() if hasattr(f, "to_dict") else dict(f) for f in findings]


def _problems(findings: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    return [{"id": f.get("id"), "status": f.get("status"), "headline": f.get("headline") or f.get("title"),
             "message": str(f.get("message") or "")[:400]}
            for f in findings if f.get("status") in ("fail", "warn", "error")]


def make_plan(snapshot: Mapping[str, Any], requests: Sequence[Tuple[str, Any]], checks: Sequence[Any], matrix: Any,
              *, fail_on: str = "fail", options: Optional[Mapping[str, Any]] = None,
              source: Optional[str] = None) -> Tuple[Dict[str, Any], int]:
    """The plan document and its exit code. Raises PlanInputError on a change option it cannot take."""
    started = utc_now()
    after_snapshot, changes = what_if(snapshot, requests, matrix, options)
    before = _dicts(evaluate(dict(snapshot), checks, matrix))
    after = _dicts(evaluate(after_snapshot, checks, matrix))
    # the same what-if judged on the matrix's verified entries alone: a worsening it does not show rests only on
    # entries marked unverified, and is reported without failing the plan
    strict = verified_only(matrix)
    try:
        strict_snapshot, _ = what_if(snapshot, requests, strict, options)
        confirmed: List[Dict[str, Any]] = _dicts(evaluate(strict_snapshot, checks, strict))
    except PlanInputError:  # the change itself needs an unverified entry (a toolkit known only from quotes)
        confirmed = before
    found = transitions(before, after, confirmed)
    target = target_of(snapshot)
    ordered = steps(changes, found, after, lambda c: render(as_step(c), target))
    code = verdict(changes, found, fail_on)
    changed = {t["id"] for t in found}
    kept = [f for f in before if f.get("id") not in changed]
    facts: Mapping[str, Any] = snapshot["facts"] if isinstance(snapshot.get("facts"), Mapping) else {}
    system: Mapping[str, Any] = facts["system"] if isinstance(facts.get("system"), Mapping) else {}
    doc = {
        "schema_version": PLAN_SCHEMA_VERSION,
        "kind": "dl-doctor-plan",
        "tool": {"name": "dl-doctor", "version": __version__},
        "planned_at": iso(started),
        "source": source or snapshot.get("mode"),
        "facts_collected_at": snapshot.get("collected_at"),
        "host": {"hostname": system.get("hostname"), "target": target.kind},
        "fail_on": fail_on,
        "changes": [c.to_dict() for c in changes],
        "transitions": found,
        "steps": ordered,
        "before": {"summary": summarize_dicts(before), "problems": _problems(before)},
        "after": {"summary": summarize_dicts(after), "problems": _problems(after)},
        "unchanged_problems": _problems(kept),
        "exit_code": code,
    }
    doc["verdict"] = _verdict_line(doc)
    return doc, code


def summarize_dicts(findings: Sequence[Mapping[str, Any]]) -> Dict[str, int]:
    out = {s.value: 0 for s in iter_statuses()}
    for f in findings:
        if f.get("status") in out:
            out[str(f["status"])] += 1
    return out


def _verdict_line(doc: Mapping[str, Any]) -> str:
    worse = [t for t in doc["transitions"] if t["worse"]]
    blockers = [b for c in doc["changes"] for b in c.get("blockers") or []]
    counted = [t for t in worse if counts(t, doc["fail_on"])]
    if doc["exit_code"]:
        parts = [f"{len(counted)} finding{'s get' if len(counted) != 1 else ' gets'} worse"] if counted else []
        if blockers:
            parts.append(f"{len(blockers)} change{'s' if len(blockers) != 1 else ''} cannot be made as asked")
        return "not safe: " + "; ".join(parts) + (f" (first: {counted[0]['id']} -> {counted[0]['to'].upper()})"
                                                  if counted else "")
    if worse:
        return (f"safe at --fail-on {doc['fail_on']}, with {len(worse)} finding{'s' if len(worse) != 1 else ''} "
                f"worse below that level or resting on unverified matrix entries")
    unknown = [c["option"] for c in doc["changes"] if c.get("unknown")]
    if unknown:
        return (f"nothing gets worse that dl-doctor can judge; what {', '.join(unknown)} does is partly unknown "
                f"(see its notes)")
    return "safe: no finding gets worse"
