"""The one shape validator: a value against a small JSON Schema subset (type, properties, required,
additionalProperties (a schema), items, minimum, maximum, exclusiveMinimum, exclusiveMaximum, enum), in two modes.

- :func:`problem` names the first thing at one node that does not fit; ``validate.check_schema`` walks a whole
  document with it and refuses the document (the facts contract: ``facts-v1.json``).
- :func:`cut` keeps what fits and leaves out the rest, so a malformed part of a value costs only itself (what the
  checks read from facts that come from someone's interpreter, such as the verify workloads').

:func:`schema_of` writes a compact Python shape as that subset: ``str``, ``int``, ``bool`` and ``NUM`` (a finite
number below 1e15 in size) are leaves, ``[shape]`` a list of it, ``{key: shape}`` a mapping with those keys and
``{"*": shape}`` a mapping with any string keys.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

NUM = float
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
    A mapping's keys come in the order of ``properties`` (or the value's own, for ``additionalProperties``); a key
    that is neither a string nor an integer is left out of an open mapping, an integer one becomes a string. Descends
    only where the schema does, so its depth is the schema's."""
    if problem(value, sch) is not None:
        return MISSING
    if isinstance(value, dict):
        props = sch.get("properties")
        extra = sch.get("additionalProperties")
        if props is not None:
            pairs = [(k, cut(value[k], sub)) for k, sub in props.items() if k in value]
        elif isinstance(extra, dict):
            pairs = [(str(k), cut(v, extra)) for k, v in value.items() if isinstance(k, (str, int))]
        else:
            return value
        return {k: v for k, v in pairs if v is not MISSING}
    if isinstance(value, list) and isinstance(sch.get("items"), dict):
        return [x for x in (cut(v, sch["items"]) for v in value) if x is not MISSING]
    return value


def schema_of(shape: Any) -> Dict[str, Any]:
    """The compact Python shape (module docstring) as the JSON Schema subset."""
    if isinstance(shape, dict):
        if "*" in shape:
            return {"type": "object", "additionalProperties": schema_of(shape["*"])}
        return {"type": "object", "properties": {k: schema_of(v) for k, v in shape.items()}}
    if isinstance(shape, list):
        return {"type": "array", "items": schema_of(shape[0])}
    if shape is NUM:
        return {"type": "number", "exclusiveMinimum": -NUM_LIMIT, "exclusiveMaximum": NUM_LIMIT}
    if shape in _LEAVES:
        return {"type": _LEAVES[shape]}
    raise ValueError(f"not a shape: {shape!r}")


def conform(value: Any, shape: Any) -> Any:
    """``value`` cut to the compact Python ``shape``: ``cut(value, schema_of(shape))``."""
    return cut(value, schema_of(shape))
