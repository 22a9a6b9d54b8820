"""Find probes and checks.

Built-in probes and checks are registered in ``setup.cfg`` under the entry-point
groups ``dl_doctor.probes`` and ``dl_doctor.checks``, exactly as a third-party
package registers its own.  An entry point names a module (every
:class:`~doctor.model.CheckSpec` / :class:`~doctor.probes.ProbeSpec` defined at
its top level is taken) or a single spec.  A plugin that fails to load costs only
itself: it is reported in ``load_errors``.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Type

from dl_doctor.host import open_regular
from dl_doctor.model import CheckSpec
from dl_doctor.probes import ProbeSpec

CHECK_GROUP = "dl_doctor.checks"
PROBE_GROUP = "dl_doctor.probes"


@dataclass
class Registry:
    checks: List[CheckSpec] = field(default_factory=list)
    probes: List[ProbeSpec] = field(default_factory=list)
    load_errors: List[str] = field(default_factory=list)

    def add_check(self, spec: CheckSpec, origin: str = "") -> None:
        problems = spec.validate()
        if problems:
            self.load_errors.append(f"check {spec.id} from {origin or spec.module}: " + "; ".join(problems))
            return
        for other in self.checks:
            if other.id == spec.id or other.slug == spec.slug:
                self.load_errors.append(
                    f"check {spec.id} ({spec.slug}) from {origin or spec.module} duplicates "
                    f"{other.id} ({other.slug}) from {other.module}; ignored")
                return
        self.checks.append(spec)

    def add_probe(self, spec: ProbeSpec, origin: str = "") -> None:
        for other in self.probes:
            if other.name == spec.name:
                self.load_errors.append(
                    f"probe {spec.name} from {origin or spec.module} duplicates the one from {other.module}; ignored")
                return
        self.probes.append(spec)

    def find_check(self, key: str) -> Optional[CheckSpec]:
        k = key.strip()
        for spec in self.checks:
            if spec.id.lower() == k.lower() or spec.slug == k.lower():
                return spec
        return None

    def closest_checks(self, key: str, n: int = 3) -> List[str]:
        names = [s.id for s in self.checks] + [s.slug for s in self.checks]
        import difflib  # suggestions only: not imported by a run that needs none
        return difflib.get_close_matches(key, names, n=n, cutoff=0.4)

    def select(self, only: Sequence[str] = (), skip: Sequence[str] = ()) -> List[CheckSpec]:
        chosen = [s for s in self.checks if not only or any(s.matches(o) for o in only)]
        return [s for s in chosen if not any(s.matches(x) for x in skip)]

    def unknown_selectors(self, selectors: Iterable[str]) -> List[str]:
        return [sel for sel in selectors if not any(s.matches(sel) for s in self.checks)]


def _specs_in(obj: Any, kind: Type) -> List[Any]:
    if isinstance(obj, kind):
        return [obj]
    if isinstance(obj, types.ModuleType):
        return [v for v in vars(obj).values() if isinstance(v, kind)]
    if isinstance(obj, (list, tuple)):
        return [v for v in obj if isinstance(v, kind)]
    if callable(obj):
        return _specs_in(obj(), kind)
    return []


class EntryPoint:
    """One ``name = module[:attr]`` line of a distribution's ``entry_points.txt``."""

    def __init__(self, name: str, value: str, dist: str):
        self.name, self.value, self.dist = name, value, dist

    def load(self) -> Any:
        import importlib

        module, _, attr = self.value.partition(":")
        obj = importlib.import_module(module.strip())
        for part in [p for p in attr.strip().split(".") if p]:
            obj = getattr(obj, part)
        return obj


def _parse_entry_points(text: str) -> Dict[str, List[Tuple[str, str]]]:
    groups: Dict[str, List[Tuple[str, str]]] = {}
    current: Optional[str] = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1].strip()
            continue
        if current is not None and "=" in line:
            name, _, value = line.partition("=")
            groups.setdefault(current, []).append((name.strip(), value.split("[", 1)[0].strip()))
    return groups


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


@functools.lru_cache(maxsize=1)
def _all_entry_points() -> Dict[str, List[EntryPoint]]:
    """Every distribution's entry points on sys.path, the first copy of a distribution winning, as
    importlib.metadata finds them — read directly from ``*.dist-info/entry_points.txt`` (and ``.egg-info``): this
    skips importlib.metadata's parse of every distribution's METADATA, a large part of dl-doctor's start."""
    seen = set()
    out: Dict[str, List[EntryPoint]] = {}
    for base in sys.path:
        directory = base or "."
        if os.path.isfile(directory):  # a zip on sys.path: the zipapp, or an egg
            for dist, text in _zip_entry_points(directory):
                if dist not in seen:
                    seen.add(dist)
                    for group, items in _parse_entry_points(text).items():
                        out.setdefault(group, []).extend(EntryPoint(n, v, dist) for n, v in items)
            continue
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for entry in names:
            if not entry.endswith((".dist-info", ".egg-info")):
                continue
            dist = _norm(entry.rsplit(".", 1)[0].split("-", 1)[0])
            if dist in seen:
                continue
            seen.add(dist)
            try:  # a regular file only (a planted FIFO cannot hang the start), and bounded
                with os.fdopen(open_regular(os.path.join(directory, entry, "entry_points.txt")), "rb") as fh:
                    text = fh.read(1 << 20).decode("utf-8", "replace")
            except OSError:
                continue
            for group, items in _parse_entry_points(text).items():
                out.setdefault(group, []).extend(EntryPoint(n, v, dist) for n, v in items)
    return out


def _zip_entry_points(path: str) -> List[Tuple[str, str]]:
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf:
            return [(_norm(n.split("/", 1)[0].rsplit(".", 1)[0].split("-", 1)[0]),
                     zf.open(n).read(1 << 20).decode("utf-8", "replace"))
                    for n in sorted(zf.namelist())[:100000]
                    if n.count("/") == 1 and n.endswith((".dist-info/entry_points.txt", ".egg-info/entry_points.txt"))]
    except (OSError, zipfile.BadZipFile, KeyError):
        return []


def _entry_points(group: str) -> List[EntryPoint]:
    unique: Dict[Tuple[str, str], EntryPoint] = {}
    for ep in _all_entry_points().get(group, []):
        unique.setdefault((ep.name, ep.value), ep)
    return sorted(unique.values(), key=lambda ep: (ep.name, ep.value))


def load_group(registry: Registry, group: str, kind: Type, add) -> None:
    for ep in _entry_points(group):
        origin = f"{group}:{ep.name} ({ep.value})"
        try:
            specs = _specs_in(ep.load(), kind)
        except Exception as exc:  # a broken plugin costs only itself
            registry.load_errors.append(f"{origin} failed to load: {type(exc).__name__}: {exc}")
            continue
        if not specs:
            registry.load_errors.append(f"{origin} defines no {kind.__name__}")
        for spec in sorted(specs, key=lambda s: getattr(s, "id", getattr(s, "name", ""))):
            add(spec, origin)


def _schema_facts() -> dict:
    """The facts schema's probes (what check_contract needs only for a probe that declares no provides=)."""
    from dl_doctor.facts import schema as facts_schema

    return (facts_schema().get("properties", {}).get("facts", {}) or {}).get("properties", {}) or {}


def unknown_fact(registry: Registry, path: str, schema: Optional[dict] = None) -> Optional[str]:
    """Why ``path`` names a fact no registered probe provides (None when some probe does)."""
    parts = path.split(".")
    probes = {p.name: p for p in registry.probes}
    spec = probes.get(parts[0])
    if spec is None:
        import difflib
        close = difflib.get_close_matches(parts[0], list(probes), n=1)
        return f"no probe is named {parts[0]!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
    rest = ".".join(parts[1:])
    if spec.facts is not None:
        return _unknown_below(spec, spec.facts, parts[1:])
    if spec.provides:
        if not rest or any(rest == p or rest.startswith(p + ".") or p.startswith(rest + ".") for p in spec.provides):
            return None
        return f"probe {spec.name!r} provides {', '.join(spec.provides)}"
    node = (schema if schema is not None else _schema_facts()).get(parts[0])
    for part in parts[1:]:
        props = (node or {}).get("properties") if isinstance(node, dict) else None
        if not props:
            return None  # nothing recorded below here: not known to be wrong
        if part not in props:
            import difflib
            close = difflib.get_close_matches(part, list(props), n=1)
            return (f"probe {spec.name!r} has no fact {part!r} there"
                    + (f" (did you mean {close[0]!r}?)" if close else ""))
        node = props[part]
    return None


def _unknown_below(spec: ProbeSpec, fact: Any, parts: Sequence[str]) -> Optional[str]:
    """Why the path ``parts`` below a typed declaration names no fact of it (a map's value stands for any key; below
    a list, or a fact that declares nothing below it, nothing is known to be wrong)."""
    for part in parts:
        if not fact.keys and fact.values is None:
            return None
        sub = fact.child(part)
        if sub is None:
            import difflib
            close = difflib.get_close_matches(part, list(fact.keys), n=1)
            return (f"probe {spec.name!r} has no fact {part!r} there"
                    + (f" (did you mean {close[0]!r}?)" if close else ""))
        fact = sub
    return None


def check_contract(registry: Registry) -> None:
    """Reject a check whose ``requires=`` names a fact no probe provides (a typo would skip it forever)."""
    schema: Optional[dict] = None  # the facts schema, read only if some check requires an untyped probe's facts
    probes = {p.name: p for p in registry.probes}
    for spec in list(registry.checks):
        for path in spec.requires:
            owner = probes.get(path.split(".")[0])
            if schema is None and owner is not None and owner.facts is None and not owner.provides:
                schema = _schema_facts()
            why = unknown_fact(registry, path, schema)
            if why:
                registry.checks.remove(spec)
                registry.load_errors.append(f"check {spec.id} ({spec.module}) requires {path!r}, which no probe "
                                            f"provides: {why}; the check is not loaded")
                break


def load_registry() -> Registry:
    registry = Registry()
    load_group(registry, PROBE_GROUP, ProbeSpec, registry.add_probe)
    load_group(registry, CHECK_GROUP, CheckSpec, registry.add_check)
    check_contract(registry)
    if not registry.checks:
        registry.load_errors.append(
            "no checks are registered: dl-doctor must be installed (pip install .) so that its "
            "entry points exist")
    return registry


def from_modules(modules: Iterable[types.ModuleType]) -> Registry:
    """A registry built from modules directly (tests and embedding)."""
    registry = Registry()
    for mod in modules:
        for spec in _specs_in(mod, ProbeSpec):
            registry.add_probe(spec, mod.__name__)
        for spec in _specs_in(mod, CheckSpec):
            registry.add_check(spec, mod.__name__)
    return registry

