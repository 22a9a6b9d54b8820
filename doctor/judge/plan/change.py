"""One planned change and the what-if copy of the facts it is applied to (``dl-doctor plan``).

A change is applied to a deep copy of a facts snapshot: every fact it sets or drops is recorded as an edit
(``{key, from, to}``), so the plan shows exactly what it assumed of the machine after the change. Nothing here reads
or touches a host: the copy is a dict, the matrix is knowledge."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

# The order in which the steps of a plan are taken (lowest first): the kernel and its headers before the module,
# the module before the user-space driver, the driver before the toolkit and the framework wheels that need it.
ORDER = {"kernel": 10, "kmod": 20, "driver": 30, "cuda": 40, "image": 45, "gpu": 50, "install": 60, "after": 90}

_MISSING = object()


class PlanInputError(ValueError):
    """A change option dl-doctor cannot take (unknown version, ambiguous environment...): one line, exit 2."""


@dataclass
class Change:
    kind: str                      # driver, kernel, cuda, install, image, gpu, instance-type
    option: str                    # the option as given: "--driver 550.90.07"
    summary: str = ""              # one line: "driver 535.104.05 -> 550.90.07 (CUDA 12.4)"
    edits: List[Dict[str, Any]] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)     # what was assumed, what stays unknown
    steps: List[Dict[str, Any]] = field(default_factory=list)
    verified: bool = True          # False: it rests on a matrix entry marked unverified
    sources: List[str] = field(default_factory=list)
    unknown: bool = False          # the change could not be modelled (a package the matrix does not know)
    blockers: List[str] = field(default_factory=list)  # why the change itself cannot be made as asked
    installs: List[str] = field(default_factory=list)  # the distributions its own steps install (pip names)

    def step(self, text: str, commands: Any = (), order: Optional[int] = None) -> None:
        """A step that makes this change safe (taken in ORDER, then as added). ``commands``: strings or typed fix steps
        (``dl_doctor.fixes``), rendered for the machine the facts describe when the plan is reported."""
        self.steps.append({"order": ORDER.get(self.kind, 70) if order is None else order, "text": text,
                           "commands": list(commands), "change": self.option})

    def to_dict(self) -> Dict[str, Any]:
        return {"kind": self.kind, "option": self.option, "summary": self.summary, "edits": list(self.edits),
                "notes": list(self.notes), "verified": self.verified, "sources": list(self.sources),
                "unknown": self.unknown, "blockers": list(self.blockers)}


def _split(key: str) -> List[str]:
    return [p for p in key.split(".") if p]


class WhatIf:
    """A deep copy of a facts snapshot that changes edit, with the edits recorded on the change that made them."""

    def __init__(self, snapshot: Mapping[str, Any]):
        self.snapshot: Dict[str, Any] = copy.deepcopy(dict(snapshot))
        facts = self.snapshot.get("facts")
        if not isinstance(facts, dict):
            facts = self.snapshot["facts"] = {}
        self.facts: Dict[str, Any] = facts

    def get(self, key: str, default: Any = None) -> Any:
        node: Any = self.facts
        for part in _split(key):
            if not isinstance(node, Mapping) or part not in node:
                return default
            node = node[part]
        return node

    def set(self, change: Change, key: str, value: Any, label: Optional[str] = None) -> None:
        """Set a fact (creating the objects above it); recorded unless the value is unchanged. ``label`` names the
        fact in the edit where ``key`` alone would not say which (an environment's entry)."""
        parts = _split(key)
        node = self.facts
        for part in parts[:-1]:
            nxt = node.get(part)
            if not isinstance(nxt, dict):
                nxt = node[part] = {}
            node = nxt
        old = node.get(parts[-1], _MISSING)
        if old is not _MISSING and old == value:
            return
        node[parts[-1]] = copy.deepcopy(value)
        change.edits.append({"key": label or key, "from": None if old is _MISSING else _short(old),
                             "to": _short(value)})

    def set_in(self, change: Change, obj: Dict[str, Any], field_name: str, value: Any, label: str) -> None:
        """Set a field of an object inside the facts (a list entry), recorded under ``label``."""
        old = obj.get(field_name, _MISSING)
        if old is not _MISSING and old == value:
            return
        obj[field_name] = copy.deepcopy(value)
        change.edits.append({"key": label, "from": None if old is _MISSING else _short(old), "to": _short(value)})

    def drop(self, change: Change, key: str, why: str) -> None:
        """Remove a fact the change makes stale (what ran under the old stack); the note says why."""
        parts = _split(key)
        node: Any = self.facts
        for part in parts[:-1]:
            if not isinstance(node, dict) or part not in node:
                return
            node = node[part]
        if isinstance(node, dict) and parts[-1] in node:
            del node[parts[-1]]
            change.edits.append({"key": key, "from": "(recorded)", "to": None, "why": why})

    def drop_in(self, change: Change, obj: Dict[str, Any], field_name: str, label: str, why: str) -> None:
        if field_name in obj:
            del obj[field_name]
            change.edits.append({"key": label, "from": "(recorded)", "to": None, "why": why})

    def environments(self) -> List[Dict[str, Any]]:
        envs = self.get("python_envs.environments")
        return [e for e in envs if isinstance(e, dict)] if isinstance(envs, list) else []


def _short(value: Any) -> Any:
    """An edit's value as the plan shows it: scalars as they are, objects and lists summarised."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, list):
        return f"({len(value)} entries)" if len(value) > 3 or any(isinstance(v, (dict, list)) for v in value) \
            else list(value)
    return "(object)"
