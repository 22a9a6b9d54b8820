"""``dl-doctor plan``: the machine after an upgrade, as a what-if copy of its facts, judged with the same checks
(docs/plan.md).

``what_if`` applies the change options to a copy of a snapshot (pure: facts and the matrix only); the caller runs the
checks on both snapshots; ``transitions`` lists every finding whose status changes, ``steps`` what makes the change
safe, in order, and ``verdict`` the exit code."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from dl_doctor.judge.plan import cuda, driver, gpu, install
from dl_doctor.judge.plan.change import ORDER, Change, PlanInputError, WhatIf

__all__ = ["Change", "PlanInputError", "WhatIf", "KINDS", "what_if", "transitions", "steps", "verdict",
           "verified_only"]

Applier = Callable[[WhatIf, Any, Any, Mapping[str, Any]], Change]

# kind -> its applier, in the order the changes are applied: the kernel, the driver on it, the toolkit, the GPUs, the
# image and the packages last (what each judges rests on what came before)
KINDS: Dict[str, Applier] = {"kernel": None, "driver": driver.apply, "cuda": cuda.apply,  # type: ignore[dict-item]
                             "gpu": gpu.apply_gpu, "instance-type": gpu.apply_instance,
                             "image": None, "install": install.apply}  # type: ignore[dict-item]

try:  # the kernel and image changes live in their own modules
    from dl_doctor.judge.plan import kernel as _kernel

    KINDS["kernel"] = _kernel.apply
except ImportError:  # pragma: no cover - while they are being written
    pass
try:
    from dl_doctor.judge.plan import image as _image

    KINDS["image"] = _image.apply
except ImportError:  # pragma: no cover
    pass


def what_if(snapshot: Mapping[str, Any], requests: Sequence[Tuple[str, Any]], matrix: Any,
            options: Optional[Mapping[str, Any]] = None) -> Tuple[Dict[str, Any], List[Change]]:
    """The snapshot after the changes (``requests``: (kind, value) pairs as given), and each change's record. Bad
    input raises PlanInputError."""
    if not requests:
        raise PlanInputError("say what changes: --driver, --kernel, --cuda, --install ENV:REQ, --image, --gpu or "
                             "--instance-type")
    if any(kind == "gpu" for kind, _ in requests) and any(kind == "instance-type" for kind, _ in requests):
        raise PlanInputError("--gpu and --instance-type exclude each other (an instance type has its GPUs)")
    w = WhatIf(snapshot)
    order = list(KINDS)
    changes = []
    for kind, value in sorted(requests, key=lambda r: order.index(r[0])):
        applier = KINDS.get(kind)
        if applier is None:
            raise PlanInputError(f"--{kind} is not available in this build")
        changes.append(applier(w, value, matrix, dict(options or {})))
    for change in changes:  # what ran under the old stack says nothing about the new one
        if change.edits and change.kind in ("driver", "cuda", "kernel", "image", "gpu", "instance-type") \
                and isinstance(w.get("verify"), dict):
            w.drop(change, "verify", "the workloads ran on the machine before the change")
    return w.snapshot, changes


# -- what changes -----------------------------------------------------------------------------------------------------

_SEVERITY = {"pass": 0, "skip": 0, None: 0, "warn": 1, "fail": 2, "error": 2}
_LEVEL = {"warn": 1, "fail": 2, "never": None}


def _env_of(finding: Mapping[str, Any]) -> Optional[str]:
    ev: Mapping[str, Any] = finding["evidence"] if isinstance(finding.get("evidence"), Mapping) else {}
    for key in ("environment", "env", "prefix", "where"):
        value = ev.get(key)
        if isinstance(value, str) and value.startswith("/"):
            return value
    for row in ev.get("consumers") or [] if isinstance(ev.get("consumers"), list) else []:
        if isinstance(row, Mapping) and row.get("support") in ("none", "minor-compat") and row.get("where") \
                and row.get("kind") in ("framework", "consumer"):
            return str(row["where"])
    return None


def transitions(before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]],
                confirmed: Optional[Sequence[Mapping[str, Any]]] = None) -> List[Dict[str, Any]]:
    """Every finding whose status changes (``{id, key, env, from, to, reason, worse}``), worst first. A finding that
    appears or goes away (a keyed one) comes from or goes to none. ``confirmed``: the findings of the same what-if
    judged with the matrix's verified entries only; a worsening they do not show rests on unverified entries."""
    was = {str(f.get("id")): f for f in before}
    now = {str(f.get("id")): f for f in after}
    sure = {str(f.get("id")): f for f in confirmed} if confirmed is not None else None
    out = []
    for fid in list(dict.fromkeys(list(was) + list(now))):
        a, b = was.get(fid), now.get(fid)
        sa, sb = (a or {}).get("status"), (b or {}).get("status")
        if sa == sb:
            continue
        worse = _SEVERITY.get(sb, 0) > _SEVERITY.get(sa, 0)
        if worse:
            kind = "worse"
        elif _SEVERITY.get(sb, 0) < _SEVERITY.get(sa, 0):
            kind = "better"
        else:  # pass, skip or none on both sides: whether the check applies changed, not how the machine fares
            kind = "judged" if sb == "pass" else "not judged"
        verified = True
        if worse and sure is not None:
            sc = (sure.get(fid) or {}).get("status")
            verified = _SEVERITY.get(sc, 0) >= _SEVERITY.get(sb, 0)
        check, _, key = fid.partition(":")
        shown = b if b is not None else a
        out.append({"id": fid, "check": check, "key": key or None, "env": _env_of(shown or {}),
                    "from": sa, "to": sb, "worse": worse, "change": kind, "verified": verified,
                    "title": (shown or {}).get("title"),
                    "headline": (b or {}).get("headline") if b is not None else None,
                    "reason": str((b if b is not None else a or {}).get("message") or "")[:600]})
    out.sort(key=lambda t: (-_SEVERITY.get(str(t["to"]) if t["to"] else None, 0) if t["worse"] else 1, str(t["id"])))
    return out


def counts(transition: Mapping[str, Any], fail_on: str) -> bool:
    """A transition that makes the exit code 1: a worsening to at or above ``fail_on`` that rests on verified data."""
    level = _LEVEL.get(fail_on)
    return bool(level is not None and transition.get("worse") and transition.get("verified")
                and _SEVERITY.get(transition.get("to"), 0) >= level)


def verdict(changes: Sequence[Change], found: Sequence[Mapping[str, Any]], fail_on: str) -> int:
    level = _LEVEL.get(fail_on)
    if level is None:
        return 0
    if level <= 2 and any(c.blockers for c in changes):
        return 1
    return 1 if any(counts(t, fail_on) for t in found) else 0


def steps(changes: Sequence[Change], found: Sequence[Mapping[str, Any]],
          after: Sequence[Mapping[str, Any]], render: Callable[[Any], str]) -> List[Dict[str, Any]]:
    """What makes the change safe, in order: each change's own steps (the headers before the kernel, the driver before
    the wheel), then the fixes of the findings that get worse, each once."""
    out: List[Dict[str, Any]] = []
    seen = set()
    for change in changes:
        for s in change.steps:
            commands = [render(c) for c in s.get("commands") or []]
            out.append({"order": s["order"], "text": s["text"], "commands": commands, "for": [change.option]})
            seen.update(commands)
    by_id = {str(f.get("id")): f for f in after}
    planned = {p for change in changes for p in change.installs}
    for t in found:
        if not t["worse"]:
            continue
        fix = (by_id.get(t["id"]) or {}).get("fix")
        if not isinstance(fix, Mapping):
            continue
        given = [c for c in (fix.get("commands") or []) if isinstance(c, str)]
        commands = [c for c in given if c not in seen and not _installs_planned(c, planned)]
        text = str(fix.get("summary") or fix.get("text") or "")
        if (given and not commands) or (not commands and not text):
            continue  # the plan's own steps already do it
        seen.update(commands)
        layer = _layer(by_id.get(t["id"]) or {})
        # a fix in the layer a change itself makes (another driver, after --driver) answers that change: after it
        same = [s["order"] for c in changes for s in c.steps if abs(s["order"] - layer) <= 5]
        if same:
            layer = max(layer, max(same) + 1)
        out.append({"order": layer, "text": text or t["title"] or t["id"],
                    "commands": commands, "for": [t["id"]]})
    out.sort(key=lambda s: s["order"])
    return [{"step": n + 1, **{k: v for k, v in s.items() if k != "order"}} for n, s in enumerate(out)]


def _layer(finding: Mapping[str, Any]) -> int:
    """Where a finding's fix goes among the plan's steps: by the layer its check judges (its tags), so the kernel's
    and the driver's fixes come before the toolkit's and the packages' ("upgrade the driver before the wheel")."""
    tags = set(finding.get("tags") or [])
    if tags & {"kernel", "kmod", "secureboot"}:
        return ORDER["kmod"] + 1
    if "nvswitch" in tags:  # the fabric manager of the driver's version: after the driver
        return ORDER["driver"] + 1
    if "driver" in tags:  # what needs another driver: before the toolkit and the wheels
        return ORDER["driver"] - 1
    if "toolkit" in tags:
        return ORDER["cuda"] + 1
    return ORDER["after"]


def _installs_planned(command: str, planned: Any) -> bool:
    """A finding's fix that pip-installs a package the plan's own steps install (at the version planned): left out,
    the plan's step is the one to take."""
    import re

    m = re.search(r"\bpip install\b(.*)", command)
    if not m or not planned:
        return False
    names = re.findall(r"['\"\s]([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:==|>=|<=|~=|!=|<|>|\[|'|\"|\s|$)", " " + m.group(1))
    wanted = [n.lower().replace("_", "-") for n in names if not n.startswith("-")]
    return bool(wanted) and any(n in planned for n in wanted)


def verified_only(matrix: Any) -> Any:
    """The matrix without the entries marked ``verified = false`` and without the fields an entry names in
    ``unverified``: what a plan may exit 1 on."""
    import copy

    out = copy.copy(matrix)  # shallow: the same sources and overlays, tables of its own below
    out.sources = matrix.sources
    tables: Dict[str, Dict[Any, Any]] = {}
    for name, rows in matrix.tables.items():
        kept = {}
        for key, entry in rows.items():
            if not isinstance(entry, dict) or entry.get("verified", True) is False:
                continue
            clean = copy.deepcopy(entry)
            _strip(clean)
            kept[key] = clean
        tables[name] = kept
    out.tables = tables  # a Matrix holds its sources, tables and overlays only: every query reads the tables
    return out


def _strip(entry: Dict[str, Any]) -> None:
    for name in entry.get("unverified") or []:
        if isinstance(name, str) and name in entry and name not in ("version", "name", "source"):
            del entry[name]
    for value in entry.values():
        if isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    _strip(item)
