"""The facts contract in code: what a probe provides, each fact with its JSON type and a one-line meaning.

A probe declares its facts with ``provides=`` (``dl_doctor.probes.probe``) as one :class:`Fact`, the object stored
under its name::

    PROVIDES = obj("operating system and release",
                   id=string("ID from /etc/os-release"),
                   id_like=array(string(), "ID_LIKE, as a list"),
                   devices=array(obj("", index=integer("NVML's index", range=(0, 65536))), "one entry per GPU"),
                   env=map_of(string(), "NAME -> value"))

A fact is ``null`` when unknown (always allowed), an item of a list only with ``null=True``; a fact it does not name
is free (no type). From the declarations of the built-in probes come the facts schema
(``doctor/facts/facts-v1.json``, :func:`schema_of`) and docs/facts.md. Pure: nothing here touches the host.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from dl_doctor.facts.shape import MISSING as SHAPE_MISSING
from dl_doctor.facts.shape import cut, reading_schema

JSON_TYPES = ("string", "integer", "number", "boolean", "array", "object")
COUNT = (0, 65536)  # the range of a count (a facts file with gpu_count = 10**8 must not make a check build a list)


class Fact:
    """One fact: its JSON types (``"string"``, ``"integer|string"``; ``"map"`` is an object with any keys, each
    value ``values``; ``"any"`` is free), its meaning, and below it ``keys`` (an object's), ``items`` (a list's),
    ``values`` (a map's), ``range`` (a number's), ``null`` (may be null: default for a key or a map's value; an item
    of a list only with ``null=True``), ``since`` (the release that added it; default: its parent's) and
    ``enforce`` (False: the schema carries the shape below this fact, under ``x-shape``, without enforcing it; its
    readers :func:`conform` what they read, so a facts file whose part has another shape still loads)."""

    __slots__ = ("types", "meaning", "keys", "items", "values", "range", "null", "since", "enforce")

    def __init__(self, types: str, meaning: str = "", *, keys: Optional[Mapping[str, "Fact"]] = None,
                 items: Optional["Fact"] = None, values: Optional["Fact"] = None,
                 range: Optional[Tuple[float, float]] = None, null: Optional[bool] = None,
                 since: Optional[str] = None, enforce: bool = True):
        names = _PARSED.get(types) or _parse(types)
        if values is None and "map" in names:
            raise ValueError("a map needs values=")
        if items is not None and "array" not in names:
            raise ValueError("items= is for an array")
        if keys:
            if "object" not in names and "map" not in names:
                raise ValueError("keys= is for an object")
            for key, sub in keys.items():
                if not isinstance(sub, Fact):
                    raise TypeError(f"fact {key!r}: {sub!r} is not a Fact")
        self.types = names
        self.meaning = " ".join(meaning.split()) if "\n" in meaning or "  " in meaning else meaning
        self.keys: Dict[str, Fact] = dict(keys or {})
        self.items = items
        self.values = values
        self.range = range
        self.null = null
        self.since = since
        self.enforce = enforce

    def __repr__(self) -> str:
        return f"Fact({'|'.join(self.types) or 'any'!r}, {self.meaning!r})"

    def walk(self, path: str = "", since: str = "") -> Iterator[Tuple[str, "Fact", str]]:
        """(dotted path, fact, since) for this fact and every fact below it; ``[]`` is an item of a list, ``*`` a
        value of a map (an item or a value is not a fact of its own: its type is in its list's or map's)."""
        since = self.since or since
        yield path, self, since
        yield from self._below(path, since)

    def _below(self, path: str, since: str) -> Iterator[Tuple[str, "Fact", str]]:
        for key, sub in self.keys.items():
            yield from sub.walk(f"{path}.{key}" if path else key, since)
        if self.items is not None:
            yield from self.items._below(path + "[]", self.items.since or since)
        if self.values is not None:
            yield from self.values._below(f"{path}.*" if path else "*", self.values.since or since)

    def paths(self) -> Tuple[str, ...]:
        """The dotted paths below this fact (what ``provides=`` held before it was typed)."""
        return tuple(p for p, _, _ in self.walk() if p)

    def child(self, part: str) -> Optional["Fact"]:
        """The fact named ``part`` below this one (a key, a map's value), or None."""
        if part in self.keys:
            return self.keys[part]
        return self.values

    def type_text(self) -> str:
        """The type in words: ``string``, ``array of object``, ``map of integer``, ``integer (0–64)``."""
        words = []
        for name in self.types:
            if name == "array" and self.items is not None and self.items.types:
                words.append(f"array of {self.items.type_text()}" + (" or null" if self.items.null else ""))
            elif name == "map":
                words.append(f"map of {self.values.type_text() if self.values else 'any'}")
            else:
                words.append(name)
        text = " or ".join(words) or "any"
        if self.range is not None:
            text += f" ({_num(self.range[0])}–{_num(self.range[1])})"
        return text


_PARSED: Dict[str, Tuple[str, ...]] = {}


def _parse(types: str) -> Tuple[str, ...]:
    """``"integer|string"`` -> ("integer", "string"), checked (``any`` is no type); parsed once per spelling."""
    names = tuple(t.strip() for t in types.split("|") if t.strip())
    for name in names:
        if name not in JSON_TYPES + ("map", "any"):
            raise ValueError(f"unknown fact type {name!r} (one of {', '.join(JSON_TYPES)}, map, any)")
    _PARSED[types] = tuple(n for n in names if n != "any")
    return _PARSED[types]


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def string(meaning: str = "", **kw: Any) -> Fact:
    return Fact("string", meaning, **kw)


def integer(meaning: str = "", **kw: Any) -> Fact:
    return Fact("integer", meaning, **kw)


def number(meaning: str = "", **kw: Any) -> Fact:
    return Fact("number", meaning, **kw)


def count(meaning: str = "", **kw: Any) -> Fact:
    """A count: an integer from 0 to 65536."""
    return Fact(kw.pop("types", "integer"), meaning, range=COUNT, **kw)


def boolean(meaning: str = "", **kw: Any) -> Fact:
    return Fact("boolean", meaning, **kw)


def anything(meaning: str = "", **kw: Any) -> Fact:
    """A fact of any JSON type (free)."""
    return Fact("any", meaning, **kw)


def array(items: Fact, meaning: str = "", **kw: Any) -> Fact:
    return Fact(kw.pop("types", "array"), meaning, items=items, **kw)


def obj(meaning: str = "", keys: Optional[Mapping[str, Fact]] = None, *, types: str = "object",
        since: Optional[str] = None, null: Optional[bool] = None, values: Optional[Fact] = None,
        enforce: bool = True, **named: Fact) -> Fact:
    """An object with these keys (``keys=`` for names that are not Python identifiers, ``**named`` for the rest;
    ``types``, ``since``, ``null``, ``values``, ``enforce`` as for :class:`Fact`)."""
    return Fact(types, meaning, keys={**dict(keys or {}), **named}, since=since, null=null, values=values,
                enforce=enforce)


def map_of(values: Fact, meaning: str = "", **kw: Any) -> Fact:
    """An object whose keys are data (a name, an index) and whose every value is ``values``."""
    return Fact(kw.pop("types", "map"), meaning, values=values, **kw)


# -- the facts schema ----------------------------------------------------------------------------------------------

def schema_of(fact: Fact, item: bool = False, enforce: bool = True) -> Dict[str, Any]:
    """The JSON Schema of ``fact`` (the subset ``dl_doctor.facts.validate`` checks): its types (and null), its
    meaning as the description, the keys of an object, the items of a list, the values of a map, a range. Below a
    fact declared ``enforce=False`` only its own type is enforced; the rest is under ``x-shape``, for
    :func:`conform`."""
    if enforce and not fact.enforce:
        return _advisory(schema_of(fact, item, enforce=False))
    out: Dict[str, Any] = {}
    types = ["object" if t == "map" else t for t in fact.types]
    if types:
        nullable = fact.null if fact.null is not None else not item
        out["type"] = list(dict.fromkeys(types + (["null"] if nullable else [])))
    if fact.meaning:
        out["description"] = fact.meaning
    if fact.keys:
        out["properties"] = {k: schema_of(sub, enforce=enforce) for k, sub in fact.keys.items()}
    if fact.values is not None:
        out["additionalProperties"] = schema_of(fact.values, enforce=enforce)
    if fact.items is not None:
        out["items"] = schema_of(fact.items, item=True, enforce=enforce)
    if fact.range is not None:
        out["minimum"], out["maximum"] = fact.range
    return out


def _advisory(full: Dict[str, Any]) -> Dict[str, Any]:
    out = {k: v for k, v in full.items() if k in ("type", "description")}
    out["x-shape"] = full
    return out


def narrowed(old: Mapping[str, Any], new: Mapping[str, Any], path: str = "") -> List[str]:
    """Where the schema ``new`` accepts less than ``old`` did (a type dropped, a range shrunk, a fact that went
    away or became constrained where it was free): each as one line naming the fact. Empty: every document ``old``
    accepted, ``new`` accepts (within the subset of JSON Schema the facts schema uses)."""
    out: List[str] = []
    where = path or "facts"
    if not new or not old:
        # free now: accepts all; free before (a fact no recording had shown, or only as null, and so left untyped):
        # declaring it now adds it to the contract, it does not narrow a type the contract had
        return out
    old_t, new_t = set(_types(old)), set(_types(new))
    if new_t and (not old_t or not _covers(new_t, old_t)):
        out.append(f"{where}: type {sorted(old_t) or 'any'} narrowed to {sorted(new_t)}")
    for bound, better in (("minimum", min), ("maximum", max)):
        if bound in new and (bound not in old or better(old[bound], new[bound]) != new[bound]):
            out.append(f"{where}: {bound} {old.get(bound, 'none')} narrowed to {new[bound]}")
    for key in ("required", "enum", "const", "not", "allOf", "anyOf", "oneOf", "pattern", "maxLength"):
        if key in new and new.get(key) != old.get(key):
            out.append(f"{where}: adds {key}")
    if new.get("additionalProperties") is False:
        out.append(f"{where}: refuses keys it does not name")
    props_old, props_new = old.get("properties") or {}, new.get("properties") or {}
    extra_old, extra_new = old.get("additionalProperties"), new.get("additionalProperties")
    for key in sorted(set(props_old) | set(props_new)):
        sub_old = props_old.get(key, extra_old if isinstance(extra_old, dict) else {})
        sub_new = props_new.get(key, extra_new if isinstance(extra_new, dict) else {})
        if key in props_old and key not in props_new and not isinstance(extra_new, dict):
            out.append(f"{where}.{key}: no longer declared")  # free now, which accepts all, but gone from the contract
            continue
        out += narrowed(sub_old, sub_new, f"{where}.{key}")
    if isinstance(extra_new, dict):
        out += narrowed(extra_old if isinstance(extra_old, dict) else {}, extra_new, f"{where}.*")
    if isinstance(new.get("items"), dict):
        out += narrowed(old.get("items") or {}, new["items"], f"{where}[]")
    return out


def _types(node: Mapping[str, Any]) -> List[str]:
    t = node.get("type")
    return [] if t is None else [t] if isinstance(t, str) else list(t)


def _covers(new: set, old: set) -> bool:
    return all(t in new or (t == "integer" and "number" in new) for t in old)


# -- reading facts to a shape --------------------------------------------------------------------------------------

def conform(value: Any, node: Mapping[str, Any]) -> Any:
    """``value`` cut to the schema ``node`` (from :func:`schema_of`; its ``x-shape`` where it has one): what does not
    fit is left out, and so is ``null`` (the result at the top is ``MISSING``). For facts a check reads from an
    untrusted source (the verify workload runs someone's interpreter): a malformed part costs only itself. A number
    must also be finite and below 1e15 in size; an object keeps only the keys it names (a map: every key, as a
    string). The one shape validator's cut (``dl_doctor.facts.shape``) on the node's reading schema."""
    if "x-shape" in node:
        node = node["x-shape"]
    return cut(value, reading_schema(node))


MISSING = SHAPE_MISSING
