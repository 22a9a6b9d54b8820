"""Input that dl-doctor did not just collect itself: facts files, reports and bundles given to ``check``, ``diff``,
``expect --from``. Checked before any check runs, so that a malformed or hostile file is one clear line naming the
field (exit 2), never a crash, an 8 GB allocation or a report that cannot be written.

Two layers:

* generic limits on any JSON value: nesting depth, string length, list length, node count, integers of at most
  64 bits, no ``NaN``/``Infinity`` (which are not JSON and would be written back into the report);
* the facts schema (``reports/schema/facts-v1.json``): the shape of every fact the built-in probes write (an
  object stays an object, a list a list, a number a number; ``null`` is always allowed, and facts it does not name
  are allowed, for plugins), and ranges for counts.
"""

from __future__ import annotations

import json
import math
from typing import Any, Dict, List, Optional

MAX_DEPTH = 64
MAX_STRING = 16 << 20
MAX_LIST = 1_000_000
MAX_NODES = 20_000_000
MAX_INT = 2 ** 63
MAX_DOCUMENT_BYTES = 512 << 20


class InputError(ValueError):
    """A malformed input file; the message names the file and the field."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def load_json_bytes(data: bytes, what: str) -> Any:
    """Parse JSON strictly: UTF-8, no NaN/Infinity, bounded nesting; errors are InputError naming ``what``."""
    if len(data) > MAX_DOCUMENT_BYTES:
        raise InputError(f"{what} is larger than {MAX_DOCUMENT_BYTES >> 20} MiB")
    try:
        from dl_doctor.engine import printable

        text = data.decode("utf-8")
        # lone surrogates (legal as JSON escapes, not as UTF-8) become readable \\xNN text, as in collected facts
        return printable(json.loads(text, parse_constant=_reject_constant))
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} is not UTF-8 text: {exc.reason} at byte {exc.start}")
    except RecursionError:
        raise InputError(f"{what} is nested too deeply")
    except ValueError as exc:
        raise InputError(f"{what} is not a JSON file: {exc}")


def _where(path: List[Any]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def check_limits(value: Any, what: str) -> None:
    """Generic limits on a parsed JSON value (iteratively: no recursion limit to hit)."""
    stack: List[Any] = [(value, [], 0)]
    nodes = 0
    while stack:
        item, path, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise InputError(f"{what} has more than {MAX_NODES} values")
        if depth > MAX_DEPTH:
            raise InputError(f"{what}: {_where(path)} is nested more than {MAX_DEPTH} levels deep")
        if isinstance(item, dict):
            for k, v in item.items():
                if len(k) > 4096:
                    raise InputError(f"{what}: a key at {_where(path)} is longer than 4096 characters")
                stack.append((v, path + [k], depth + 1))
        elif isinstance(item, list):
            if len(item) > MAX_LIST:
                raise InputError(f"{what}: {_where(path)} has more than {MAX_LIST} items")
            stack.extend((v, path + [i], depth + 1) for i, v in enumerate(item))
        elif isinstance(item, str):
            if len(item) > MAX_STRING:
                raise InputError(f"{what}: {_where(path)} is longer than {MAX_STRING} characters")
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if not -MAX_INT <= item < MAX_INT:
                raise InputError(f"{what}: {_where(path)} = {str(item)[:30]}… is out of range")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise InputError(f"{what}: {_where(path)} is not a finite number")


_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _type_ok(value: Any, names: List[str]) -> bool:
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


def check_schema(value: Any, schema: Dict[str, Any], what: str, path: Optional[List[Any]] = None) -> None:
    """A small JSON Schema subset: type, properties, required, additionalProperties (schema), items, minimum,
    maximum, enum."""
    stack: List[Any] = [(value, schema, path or [])]
    while stack:
        item, sch, where = stack.pop()
        types = sch.get("type")
        if types is not None:
            names = [types] if isinstance(types, str) else list(types)
            if not _type_ok(item, names):
                raise InputError(f"{what}: {_where(where)} should be {' or '.join(names)}, "
                                 f"not {json_type(item)}")
        if "enum" in sch and item not in sch["enum"]:
            raise InputError(f"{what}: {_where(where)} should be one of {', '.join(map(str, sch['enum']))}")
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            if "minimum" in sch and item < sch["minimum"]:
                raise InputError(f"{what}: {_where(where)} = {item} is below {sch['minimum']}")
            if "maximum" in sch and item > sch["maximum"]:
                raise InputError(f"{what}: {_where(where)} = {item} is above {sch['maximum']}")
        if isinstance(item, dict):
            missing = [k for k in sch.get("required") or () if k not in item]
            if missing:
                raise InputError(f"{what}: {_where(where + [missing[0]])} is missing")
            props = sch.get("properties") or {}
            extra = sch.get("additionalProperties")
            for k, v in item.items():
                if k in props:
                    stack.append((v, props[k], where + [k]))
                elif isinstance(extra, dict):
                    stack.append((v, extra, where + [k]))
        elif isinstance(item, list) and isinstance(sch.get("items"), dict):
            stack.extend((v, sch["items"], where + [i]) for i, v in enumerate(item))


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


def validate_snapshot(snapshot: Dict[str, Any], what: str) -> None:
    """Limits, then the facts schema; raises InputError naming the field."""
    from dl_doctor.reports import facts_schema

    check_limits(snapshot, what)
    check_schema(snapshot, facts_schema(), what)
