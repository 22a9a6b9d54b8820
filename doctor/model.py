"""The data model: check specs, results, findings, facts.

A *check* is a pure function of the facts (and, when it asks for it, the
compatibility matrix).  It returns a :class:`Result`; the engine turns that into
a :class:`Finding` by adding the check's ID, title and tags.  Statuses are a
fixed vocabulary, and ``pass`` is explicit so a report shows what was verified.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

FACTS_SCHEMA_VERSION = "1"
REPORT_SCHEMA_VERSION = "1"

ID_RE = re.compile(r"^[A-Z][A-Z0-9]*(?:-[A-Z0-9]+)+$")
KEY_RE = re.compile(r"^[A-Za-z0-9_.+-]+$")
SLUG_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
TAG_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")


class Status(str, Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    ERROR = "error"

    def __str__(self) -> str:  # pragma: no cover - convenience
        return self.value


# Order used to sort findings (worst first) and to apply --fail-on.
# ``error`` means dl-doctor could not evaluate a check; it counts as a failure
# for exit codes, because "could not verify" must not pass an image bake.
SEVERITY = {Status.PASS: 0, Status.SKIP: 0, Status.WARN: 1, Status.FAIL: 2, Status.ERROR: 2}
DISPLAY_ORDER = {Status.ERROR: 0, Status.FAIL: 1, Status.WARN: 2, Status.SKIP: 3, Status.PASS: 4}
FAIL_ON_LEVEL = {"warn": 1, "fail": 2, "never": None}


@dataclass(frozen=True)
class Fix:
    """What a person should do: one sentence and the steps to take.

    ``commands`` may hold typed steps (``dl_doctor.fixes``: write a file, install a package, reload a service...)
    and free text; each becomes a step, and ``commands`` becomes the steps rendered for the running machine. The
    engine renders them again for the machine the facts describe (an image, a node, a captured tree), passing the
    rendered lines beside the same ``steps``.
    """

    summary: str
    commands: Tuple[Any, ...] = ()
    steps: Tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        from dl_doctor.fixes import as_step, render_live

        if self.steps:
            object.__setattr__(self, "steps", tuple(as_step(s) for s in self.steps))
            if not self.commands:
                object.__setattr__(self, "commands", tuple(render_live(s) for s in self.steps))
            return
        steps = tuple(as_step(c) for c in self.commands)
        object.__setattr__(self, "steps", steps)
        object.__setattr__(self, "commands", tuple(render_live(s) for s in steps))

    def to_dict(self) -> Dict[str, Any]:
        return {"summary": self.summary, "commands": list(self.commands), "steps": [s.to_dict() for s in self.steps]}


@dataclass(frozen=True)
class Explanation:
    """The fixed sections ``dl-doctor explain`` prints."""

    what: str
    why: str
    fix: str

    SECTIONS = (("what", "What it checks"), ("why", "Why it matters"), ("fix", "How to fix"))

    def to_dict(self) -> Dict[str, str]:
        return {"what": self.what, "why": self.why, "fix": self.fix}


@dataclass
class Result:
    """What a check function returns."""

    status: Status
    message: str
    evidence: Dict[str, Any] = field(default_factory=dict)
    fix: Optional[Fix] = None
    # A check that judges several items (one per golden-stack expectation) returns a list of
    # Results, each with a key; the findings' IDs are then "ID:key".
    key: Optional[str] = None
    # The problem in a few words, for the heading of a problem card ("Xid 79 on GPU 0000:10:1c"); without it the
    # check's `problem` heading is used.
    headline: Optional[str] = None
    # What to do, when it differs from the check's default (an application Xid against a hardware one)
    remedy: Optional[str] = None
    drain: Optional[bool] = None


def _result(status: "Status", message: str, evidence: Optional[Mapping[str, Any]], fix: Optional[Fix],
            key: Optional[str], more: Mapping[str, Any], headline: Optional[str] = None,
            remedy: Optional[str] = None, drain: Optional[bool] = None) -> Result:
    merged = dict(evidence or {})
    merged.update(more)
    return Result(status, message, merged, fix, key, headline, remedy, drain)


# One calling convention for every helper: ``helper(message, evidence=None, fix=None, *, key=None, **more)``.
# Evidence may be a mapping (keys are fact paths, which may hold dots) and/or keywords; ``fix`` is a Fix; ``key``
# names the item when a check judges several (the finding's ID becomes ``ID:key``).

def passed(message: str, evidence: Optional[Mapping[str, Any]] = None, fix: Optional[Fix] = None, *,
           key: Optional[str] = None, headline: Optional[str] = None, remedy: Optional[str] = None,
         drain: Optional[bool] = None, **more: Any) -> Result:
    return _result(Status.PASS, message, evidence, fix, key, more, headline, remedy, drain)


def warn(message: str, evidence: Optional[Mapping[str, Any]] = None, fix: Optional[Fix] = None, *,
         key: Optional[str] = None, headline: Optional[str] = None, remedy: Optional[str] = None,
         drain: Optional[bool] = None, **more: Any) -> Result:
    return _result(Status.WARN, message, evidence, fix, key, more, headline, remedy, drain)


def fail(message: str, evidence: Optional[Mapping[str, Any]] = None, fix: Optional[Fix] = None, *,
         key: Optional[str] = None, headline: Optional[str] = None, remedy: Optional[str] = None,
         drain: Optional[bool] = None, **more: Any) -> Result:
    return _result(Status.FAIL, message, evidence, fix, key, more, headline, remedy, drain)


def skip(message: str, evidence: Optional[Mapping[str, Any]] = None, fix: Optional[Fix] = None, *,
         key: Optional[str] = None, headline: Optional[str] = None, remedy: Optional[str] = None,
         drain: Optional[bool] = None, **more: Any) -> Result:
    return _result(Status.SKIP, message, evidence, fix, key, more, headline, remedy, drain)


def error(message: str, evidence: Optional[Mapping[str, Any]] = None, fix: Optional[Fix] = None, *,
          key: Optional[str] = None, headline: Optional[str] = None, **more: Any) -> Result:
    """Something that stops dl-doctor itself from judging (a plugin that did not load)."""
    return _result(Status.ERROR, message, evidence, fix, key, more, headline)


@dataclass
class Finding:
    id: str
    slug: str
    title: str
    status: Status
    message: str
    evidence: Dict[str, Any]
    fix: Optional[Fix]
    tags: Tuple[str, ...]
    headline: Optional[str] = None  # the problem in a few words (warn, fail, error)
    remediation: Optional[Dict[str, Any]] = None  # {"action": one of REMEDIES, "drain": bool} (warn, fail, error)

    def to_dict(self) -> Dict[str, Any]:
        out = {
            "id": self.id,
            "slug": self.slug,
            "title": self.title,
            "status": self.status.value,
            "message": self.message,
            "evidence": self.evidence,
            "fix": self.fix.to_dict() if self.fix else None,
            "tags": list(self.tags),
        }
        if self.headline:
            out["headline"] = self.headline
        if self.remediation:
            out["remediation"] = dict(self.remediation)
        return out


# What to do about a failing or warning finding, for machines as well as people (docs/remediation.md). Ordered from the
# least to the most disruptive; the engine modes (Slurm, NHC, node-problem-detector) act on it.
REMEDIES = ("none", "restart-application", "fix-configuration", "repair-software", "reload-driver", "reset-gpu",
            "reboot", "replace-hardware")
REMEDIATION_VERSION = "1"

# A precondition returns None when the check applies, or the reason it does not.
Precondition = Callable[["Facts"], Optional[str]]


@dataclass(frozen=True)
class CheckSpec:
    id: str
    slug: str
    title: str
    tags: Tuple[str, ...]
    requires: Tuple[str, ...]
    explanation: Explanation
    func: Callable[..., Result]
    applies: Tuple[Precondition, ...] = ()
    module: str = ""
    problem: str = ""  # the title's problem form, the heading of a warn/fail card ("Xid errors in this boot")
    remedy: str = "none"  # what to do about a problem it finds (REMEDIES)
    drain: bool = False   # whether a failing finding takes the node out of service

    def __call__(self, *args: Any, **kwargs: Any) -> Result:
        return self.func(*args, **kwargs)

    def validate(self) -> List[str]:
        """Problems with this spec's metadata (empty when well-formed)."""
        problems = []
        if not ID_RE.match(self.id):
            problems.append(f"ID {self.id!r} is not of the form AREA-NNN (e.g. DLD-GPU-001)")
        if not SLUG_RE.match(self.slug):
            problems.append(f"slug {self.slug!r} must be lower-case words joined by '-'")
        if not self.title.strip():
            problems.append("title is empty")
        if not self.tags:
            problems.append("no tags")
        for tag in self.tags:
            if not TAG_RE.match(tag):
                problems.append(f"tag {tag!r} is not a lower-case word")
        for key, _ in Explanation.SECTIONS:
            if len(getattr(self.explanation, key).strip()) < 20:
                problems.append(f"explanation section {key!r} is missing or too short")
        return problems

    def matches(self, selector: str) -> bool:
        """``--only``/``--skip`` match by ID, slug or tag (case-insensitive)."""
        s = selector.strip().lower()
        return s in (self.id.lower(), self.slug) or s in self.tags


def check(*, id: str, slug: str, title: str, tags: Sequence[str], what: str, why: str, fix: str,
          requires: Sequence[str] = (), applies: Sequence[Precondition] = (),
          problem: str = "", remedy: str = "none", drain: bool = False) -> Callable[[Callable[..., Result]], CheckSpec]:
    """Declare a check.  The decorated function becomes a :class:`CheckSpec`.

    The function may take any of the keyword arguments ``facts`` and ``matrix``;
    the engine passes only those it names, so new arguments break nobody.
    """

    if remedy not in REMEDIES:
        raise ValueError(f"check {id}: remedy {remedy!r} is not one of {', '.join(REMEDIES)}")

    def wrap(func: Callable[..., Result]) -> CheckSpec:
        return CheckSpec(
            id=id, slug=slug, title=title, tags=tuple(tags), requires=tuple(requires),
            explanation=Explanation(_dedent(what), _dedent(why), _dedent(fix)), func=func,
            applies=tuple(applies), module=getattr(func, "__module__", ""), problem=problem,
            remedy=remedy, drain=bool(drain),
        )

    return wrap


def _dedent(text: str) -> str:
    return " ".join(text.split())


_MISSING = object()


class Facts:
    """Read-only access to a facts snapshot by dotted path (``"mounts.shm.size_bytes"``)."""

    def __init__(self, snapshot: Mapping[str, Any]):
        self.snapshot = snapshot
        self.data: Mapping[str, Any] = snapshot.get("facts", {}) or {}

    @property
    def mode(self) -> str:
        return self.snapshot.get("mode", "live")

    @property
    def live(self) -> bool:
        """Facts of a running machine: live, or through its root mounted into a container (--host-root)."""
        return self.mode in ("live", "host-root")

    def get(self, path: str, default: Any = None) -> Any:
        value = self._lookup(path)
        return default if value is _MISSING or value is None else value

    def has(self, path: str) -> bool:
        value = self._lookup(path)
        return value is not _MISSING and value is not None

    def _lookup(self, path: str) -> Any:
        node: Any = self.data
        for part in path.split("."):
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            else:
                return _MISSING
        return node

    def why_missing(self, path: str) -> str:
        """A human reason for a missing fact, from the probe that owns it."""
        probe = path.split(".", 1)[0]
        for err in self.snapshot.get("probe_errors", []) or []:
            if err.get("probe") == probe:
                return f"probe '{probe}' failed: {err.get('error')}"
        unavailable = (self.snapshot.get("unavailable") or {}).get(probe)
        if unavailable:
            return f"'{probe}' facts are not available: {unavailable}"
        if probe not in self.data:
            return f"'{probe}' facts were not collected"
        return f"fact '{path}' is not known"


def iter_statuses() -> Iterable[Status]:
    return (Status.PASS, Status.WARN, Status.FAIL, Status.SKIP, Status.ERROR)
