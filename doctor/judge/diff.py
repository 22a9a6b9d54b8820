"""Drift between two runs (``dl-doctor diff BASELINE CURRENT``): versions and findings, nothing else.

The versions are the flattened stack (``dl_doctor.facts.flat``): OS, kernel, driver, toolkits, GPUs, and per environment
Python, torch, cuDNN, NCCL and every installed distribution. Host names, addresses and timestamps are not part of
it, so two instances baked from the same image compare equal; ``--ignore`` patterns drop expected noise beyond that.
"""

from __future__ import annotations

import fnmatch
from typing import Any, Dict, List, Mapping, Sequence

from dl_doctor.model import Facts
from dl_doctor.facts.flat import flatten, stack

PROBLEMS = ("warn", "fail", "error")


def versions(snapshot: Mapping[str, Any]) -> Dict[str, Any]:
    flat = flatten(stack(Facts(snapshot)))
    return {k: (", ".join(map(str, v)) if isinstance(v, list) else v) for k, v in flat.items()}


def _ignored(key: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(key, p) for p in patterns)


def diff(baseline: Mapping[str, Any], current: Mapping[str, Any], base_findings: Sequence[Mapping[str, Any]],
         cur_findings: Sequence[Mapping[str, Any]], ignore: Sequence[str] = ()) -> Dict[str, Any]:
    """``{"versions": {"added", "removed", "changed"}, "findings": {"appeared", "cleared", "changed"}, "drift"}``."""
    return diff_versions(versions(baseline), versions(current), base_findings, cur_findings, ignore)


def diff_versions(old: Mapping[str, Any], new: Mapping[str, Any], base_findings: Sequence[Mapping[str, Any]],
                  cur_findings: Sequence[Mapping[str, Any]], ignore: Sequence[str] = ()) -> Dict[str, Any]:
    """:func:`diff` on versions already flattened (:func:`versions`): what `dl-doctor history` compares run to run."""
    keys = sorted(set(old) | set(new))
    added = {k: new[k] for k in keys if k not in old and not _ignored(k, ignore)}
    removed = {k: old[k] for k in keys if k not in new and not _ignored(k, ignore)}
    changed = {k: {"from": old[k], "to": new[k]} for k in keys
               if k in old and k in new and old[k] != new[k] and not _ignored(k, ignore)}

    was = {f["id"]: f for f in base_findings}
    now = {f["id"]: f for f in cur_findings}
    appeared: List[Dict[str, Any]] = []
    cleared: List[Dict[str, Any]] = []
    status_changed: List[Dict[str, Any]] = []
    for fid in sorted(set(was) | set(now)):
        if _ignored(fid, ignore):
            continue
        before = was.get(fid, {}).get("status")
        after = now.get(fid, {}).get("status")
        if after in PROBLEMS and before not in PROBLEMS:
            appeared.append({"id": fid, "status": after, "was": before, "message": now[fid].get("message", "")})
        elif before in PROBLEMS and after not in PROBLEMS:
            cleared.append({"id": fid, "status": after, "was": before, "message": was[fid].get("message", "")})
        elif before in PROBLEMS and after in PROBLEMS and before != after:
            status_changed.append({"id": fid, "status": after, "was": before, "message": now[fid].get("message", "")})
    drift = bool(added or removed or changed or appeared or cleared or status_changed)
    return {"versions": {"added": added, "removed": removed, "changed": changed},
            "findings": {"appeared": appeared, "cleared": cleared, "changed": status_changed},
            "ignore": list(ignore), "drift": drift}

