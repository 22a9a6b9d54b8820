"""The one shape validator: a value against a small JSON Schema subset (type, properties, required,
additionalProperties (a schema), items, minimum, maximum, exclusiveMinimum, exclusiveMaximum, enum), in two modes.

- :func:`problem` names the first thing at one node that does not fit; ``validate.check_schema`` walks a whole
  document with it and refuses the document (the facts contract: ``facts-v1.json``).
- :func:`cut` keeps what fits and leaves out the rest, so a malformed part of a value costs only itself (what the
  checks read from facts that come from someone's interpreter, such as the verify workloads').

:func:`reading_schema` is the form of a declared fact (dl_doctor.facts.contract) a reader cuts to.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

MISSING: Any = object()  # what cut() returns for a value that does not fit at all
_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
_LEAVES = {str: "string", int: "integer", bool: "boolean"}
NUM_LIMIT = 1e15


def json_type(value: Any) -> str:
    """The JSON Schema type name of a parsed JSON value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def type_ok(value: Any, names: List[str]) -> bool:
    """Whether ``value`` is one of the JSON Schema types ``names`` (a boolean is not an integer or a number)."""
    for name in names:
        if name == "integer":
            if isinstance(value, int) and not isinstance(value, bool):
                return True
        elif name == "number":
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return True
        elif isinstance(value, _TYPES[name]):
            return True
    return False


def problem(item: Any, sch: Dict[str, Any]) -> Optional[Tuple[List[Any], str]]:
    """The first way ``item`` does not fit the node ``sch`` (its children are not looked at): the path below the
    item that it concerns and the words that follow the path (`` should be string, not array``), or None."""
    types = sch.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not type_ok(item, names):
            return [], f" should be {' or '.join(names)}, not {json_type(item)}"
    if "enum" in sch and item not in sch["enum"]:
        return [], f" should be one of {', '.join(map(str, sch['enum']))}"
    if isinstance(item, (int, float)) and not isinstance(item, bool):
        if "minimum" in sch and item < sch["minimum"]:
            return [], f" = {item} is below {sch['minimum']}"
        if "maximum" in sch and item > sch["maximum"]:
            return [], f" = {item} is above {sch['maximum']}"
        if "exclusiveMinimum" in sch and not item > sch["exclusiveMinimum"]:  # NaN is not above anything
            return [], f" = {item} is not above {sch['exclusiveMinimum']}"
        if "exclusiveMaximum" in sch and not item < sch["exclusiveMaximum"]:
            return [], f" = {item} is not below {sch['exclusiveMaximum']}"
    if isinstance(item, dict):
        missing = [k for k in sch.get("required") or () if k not in item]
        if missing:
            return [missing[0]], " is missing"
    return None


def cut(value: Any, sch: Dict[str, Any]) -> Any:
    """``value`` cut to the schema ``sch``: what does not fit is left out (MISSING when the value itself does not).
    A mapping's keys come in the order of ``properties`` (or, for a map with ``additionalProperties``, the value's
    own); a key that is neither a string nor an integer is left out of a map, an integer one becomes a string. Descends
    only where the schema does, so its depth is the schema's."""
    if problem(value, sch) is not None:
        return MISSING
    if isinstance(value, dict):
        props = sch.get("properties")
        extra = sch.get("additionalProperties")
        if isinstance(extra, dict):  # a map: every key, the named ones by their own schema
            pairs = [(str(k), cut(v, (props or {}).get(str(k), extra))) for k, v in value.items()
                     if isinstance(k, (str, int))]
        elif props is not None:
            pairs = [(k, cut(value[k], sub)) for k, sub in props.items() if k in value]
        else:
            return value
        return {k: v for k, v in pairs if v is not MISSING}
    if isinstance(value, list) and isinstance(sch.get("items"), dict):
        return [x for x in (cut(v, sch["items"]) for v in value) if x is not MISSING]
    return value


_ANY_VALUE = ["object", "array", "string", "integer", "number", "boolean"]
_READING: Dict[int, Tuple[Mapping[str, Any], Dict[str, Any]]] = {}


def reading_schema(node: Mapping[str, Any]) -> Dict[str, Any]:
    """The schema a reader cuts an untrusted fact to (``contract.conform``): only the types count (a range, an enum,
    ``required`` are the contract's to refuse, not the reader's to drop), ``null`` never fits, and a number that is
    not an integer must be finite and below 1e15 in size. Derived once per declared node."""
    hit = _READING.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    t = node.get("type")
    types = [t] if isinstance(t, str) else list(t) if t is not None else list(_ANY_VALUE)
    out: Dict[str, Any] = {"type": [x for x in types if x != "null"]}
    if "number" in types and "integer" not in types:
        out.update(exclusiveMinimum=-NUM_LIMIT, exclusiveMaximum=NUM_LIMIT)
    if t is not None and isinstance(node.get("properties"), dict):
        out["properties"] = {k: reading_schema(v) for k, v in node["properties"].items()}
    if t is not None and isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = reading_schema(node["additionalProperties"])
    if t is not None and isinstance(node.get("items"), dict):
        out["items"] = reading_schema(node["items"])
    if len(_READING) >= 4096:  # declarations are few; a caller handing in fresh schemas must not grow this forever
        _READING.clear()
    _READING[id(node)] = (node, out)
    return out
