"""Input that dl-doctor did not just collect itself: facts files, reports and bundles given to ``check``, ``diff``,
``expect --from``, ``report``, ``why --report``, the reports ``fleet`` merges and the payloads preflight peers send.
Checked before any check runs, so that a malformed or hostile file is one clear line naming the field (exit 2),
never a crash, a hang, an 8 GB allocation or a report that cannot be written.

Three layers:

* before parsing (``prescan``): the document's size, the number of values it can hold (opening brackets, commas and
  colons outside strings: an upper bound on containers + keys + scalars), its nesting depth, and the memory its
  text takes once decoded. Python's parser spends about 70 bytes on each value and up to four bytes on each
  character, so these bounds, not the byte count alone, are what keep a 64 MiB document under 300 MiB of memory;
* generic limits on the parsed value: string length, integers of at most 64 bits, no ``NaN``/``Infinity`` (which
  are not JSON and would be written back into the report);
* the facts schema (``doctor/facts/facts-v1.json``): the shape of every fact the built-in probes write (an
  object stays an object, a list a list, a number a number; ``null`` is always allowed, and facts it does not name
  are allowed, for plugins), and ranges for counts.

Every walk over a parsed value is iterative with memory proportional to its depth, not its size.
"""

from __future__ import annotations

import codecs
import json
import math
import os
import re
import stat
from typing import IO, Any, BinaryIO, Dict, Iterator, List, Optional, Tuple

from dl_doctor.facts.shape import json_type, problem  # noqa: F401 - json_type re-exported

MAX_DEPTH = 64                    # nested containers
MAX_STRING = 16 << 20             # characters in one string
MAX_VALUES = 500_000              # containers, keys and scalars: a real report holds ~10,000; `check` on one at the
#                                  bound stays under 300 MiB at peak (tests/checks/test_inputs_hostile.py)
MAX_INT = 2 ** 63
MAX_DOCUMENT_BYTES = 64 << 20     # an input file, a bundle member, a fleet report
MAX_TEXT_BYTES = 128 << 20        # the decoded document plus its parsed strings, as Python holds them

# a JSON string, or an unterminated one running to the end: every attempt from a quote matches, so the scan is linear
_STRING = re.compile(rb'"[^"\\]*(?:\\[\s\S][^"\\]*)*(?:"|\Z)')
# what makes Python hold text in 2 or 4 bytes a character: a UTF-8 lead byte above U+00FF (U+FFFF), an escape above
# U+00FF (taken as 4: a surrogate pair is one)
_WIDE_2 = re.compile(rb"[\xc4-\xef]")
_WIDE_4 = re.compile(rb"[\xf0-\xf4]")
_WIDE_ESCAPE = re.compile(rb"\\u(?!00)[0-9a-fA-F]{4}")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_BRACKETS = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


class InputError(ValueError):
    """A malformed input file; the message names the file and the field."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def open_regular(path: str) -> BinaryIO:
    """``path`` opened for reading only if it is a regular file: opened non-blocking (a FIFO nobody writes cannot
    hang us) and checked on the descriptor, so a file swapped after a name check is still caught. InputError for
    anything else (a FIFO, socket, device or directory); OSError when it cannot be opened."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InputError(f"cannot read {path}: it is {_kind(mode)}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _too_big(what: str, size: int) -> InputError:
    return InputError(f"{what} is {size} bytes, over the {MAX_DOCUMENT_BYTES >> 20} MiB limit for an input")


def prescan(data: bytes, what: str) -> bool:
    """Refuse, before Python's parser allocates anything, a document that would need more than the bounds allow.

    Linear time and small memory: one pass of a regular expression over the strings (each one is a value, so the
    pass stops past MAX_VALUES of them), ``bytes.count`` between them, and the nesting depth from the brackets
    outside strings. Returns whether the document holds a surrogate escape (which the parsed value then needs
    repaired)."""
    if len(data) > MAX_DOCUMENT_BYTES:
        raise _too_big(what, len(data))
    wide = _width(data)
    escapes = _WIDE_ESCAPE.search(data) is not None
    text = len(data) * wide + len(data)  # the decoded document, and at most as much again in parsed strings
    values, strings, at = 1, 0, 0
    brackets = bytearray()
    for match in _STRING.finditer(data):
        start, end = match.span()
        values += _structure(data, at, start)
        strings += 1
        if values > MAX_VALUES or strings > MAX_VALUES:
            raise _too_many(what)
        brackets += data[at:start].translate(_BRACKETS, _NOT_BRACKETS)
        if wide > 1 or escapes:
            factor = 4 if escapes and _WIDE_ESCAPE.search(data, start, end) else wide
            text += (end - start) * (factor - 1)
        at = end
    values += _structure(data, at, len(data))
    if values > MAX_VALUES:
        raise _too_many(what)
    if text > MAX_TEXT_BYTES:
        raise InputError(f"{what} would take {text >> 20} MiB as text (it holds characters beyond Latin-1), over "
                         f"the {MAX_TEXT_BYTES >> 20} MiB limit")
    brackets += data[at:].translate(_BRACKETS, _NOT_BRACKETS)
    _check_depth(bytes(brackets), what)
    return _SURROGATE_ESCAPE.search(data) is not None


def _structure(data: bytes, start: int, end: int) -> int:
    """Opening brackets, commas and colons in ``data[start:end]``: one for each value that follows them."""
    return sum(data.count(c, start, end) for c in (b"[", b"{", b",", b":"))


def _too_many(what: str) -> InputError:
    return InputError(f"{what} holds more than {MAX_VALUES} values (containers, keys and scalars)")


def _width(data: bytes) -> int:
    """Bytes a character of the decoded document takes in Python (its widest character decides)."""
    return 4 if _WIDE_4.search(data) else 2 if _WIDE_2.search(data) else 1


def _check_depth(brackets: bytes, what: str) -> None:
    """Nesting depth from the brackets alone: each pass removes every innermost container (``[]`` once braces are
    brackets too), so a document nested deeper than MAX_DEPTH still has a pair after MAX_DEPTH passes."""
    for _ in range(MAX_DEPTH):
        if not brackets:
            return
        brackets = brackets.replace(b"[]", b"")
    if b"[]" in brackets:
        raise InputError(f"{what} is nested too deeply (more than {MAX_DEPTH} levels)")


def _decode(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} is not UTF-8 text: {exc.reason} at byte {exc.start}")


def _parse(text: str, surrogates: bool, what: str, head: bool = False) -> Any:
    """Parse ``text`` (with ``head``, only its first JSON value: what follows is ignored), repair lone surrogates
    and hold the value to the bounds."""
    try:
        if head:
            value, _ = json.JSONDecoder(parse_constant=_reject_constant).raw_decode(text)
        else:
            value = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:  # unbalanced brackets the depth pass cannot pair up
        raise InputError(f"{what} is nested too deeply")
    except ValueError as exc:
        raise InputError(f"{what} is not {'JSON' if head else 'a JSON file'}: {exc}")
    if surrogates:
        value = _repair_surrogates(value)
    check_limits(value, what)
    return value


def load_json_bytes(data: bytes, what: str) -> Any:
    """Parse JSON strictly and within the bounds above (UTF-8, no NaN/Infinity); errors are InputError naming
    ``what``. For a document already in memory; a file is read with :func:`read_json`, which frees the bytes
    before parsing."""
    surrogates = prescan(data, what)
    return _parse(_decode(data, what), surrogates, what)


def load_json_head(data: bytes, what: str) -> Any:
    """The first JSON value in ``data`` (a section at the head of a report; what follows it is ignored), under the
    same bounds as :func:`load_json_bytes`: the pre-scan counts the whole of ``data``, so ``data`` is the window the
    caller chose to read, not the whole file."""
    surrogates = prescan(data, what)
    try:
        # a window may cut a character in two at its end: that tail is left undecoded, a bad byte before it is not
        text = codecs.getincrementaldecoder("utf-8")().decode(data, final=False)
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} is not UTF-8 text: {exc.reason} at byte {exc.start}")
    return _parse(text, surrogates, what, head=True)


def read_json(fh: IO[bytes], what: str) -> Any:
    """The JSON document in the binary stream ``fh`` (a file, a tar member), read to at most MAX_DOCUMENT_BYTES and
    parsed like :func:`load_json_bytes`; the raw bytes are dropped once decoded, so they and the parsed value are
    never held together."""
    data = fh.read(MAX_DOCUMENT_BYTES + 1)
    surrogates = prescan(data, what)
    text = _decode(data, what)
    del data
    return _parse(text, surrogates, what)


def load_json_file(path: str, what: Optional[str] = None) -> Any:
    """The JSON document in the regular file ``path``: refused by its size before anything is read, then
    :func:`read_json`. InputError for a FIFO, device or directory; OSError when it cannot be opened."""
    with open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > MAX_DOCUMENT_BYTES:
            raise _too_big(what or path, size)
        return read_json(fh, what or path)


def _walk(value: Any) -> Iterator[Tuple[List[Any], Any]]:
    """Every (path, item) of a parsed value, depth first; ``path`` is one live list (copy it to keep it), and the
    walk's memory is its depth."""
    path: List[Any] = []
    yield path, value
    stack: List[Iterator[Tuple[Any, Any]]] = []
    if isinstance(value, (dict, list)):
        stack.append(iter(value.items()) if isinstance(value, dict) else enumerate(value))
    while stack:
        step = next(stack[-1], None)
        if step is None:
            stack.pop()
            if path:
                path.pop()
            continue
        key, item = step
        path.append(key)
        yield path, item
        if isinstance(item, dict):
            stack.append(iter(item.items()))
        elif isinstance(item, list):
            stack.append(enumerate(item))
        else:
            path.pop()


def _repair_surrogates(value: Any) -> Any:
    """Lone surrogates (legal as JSON escapes, not as UTF-8) as readable ``\\xNN`` text, as in collected facts;
    in place, container by container, so a large document is not copied whole."""
    from dl_doctor.util.text import printable

    if isinstance(value, str):
        return printable(value)
    pending = [value]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            if any(isinstance(k, str) and printable(k) != k for k in node):
                fixed = {printable(k): v for k, v in node.items()}
                node.clear()
                node.update(fixed)
            keys: Iterator[Any] = iter(list(node))
        else:
            keys = iter(range(len(node)))
        for k in keys:
            item = node[k]
            if isinstance(item, str):
                node[k] = printable(item)
            elif isinstance(item, (dict, list)):
                pending.append(item)
    return value


def _where(path: List[Any]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def check_limits(value: Any, what: str) -> None:
    """Generic limits on a parsed JSON value (iteratively: no recursion limit to hit, memory its depth)."""
    nodes = 0
    for path, item in _walk(value):
        nodes += 1
        if nodes > MAX_VALUES:
            raise _too_many(what)
        if isinstance(item, dict):
            if len(path) >= MAX_DEPTH:
                raise InputError(f"{what}: {_where(path)} is nested more than {MAX_DEPTH} levels deep")
            for k in item:
                if len(k) > 4096:
                    raise InputError(f"{what}: a key at {_where(path)} is longer than 4096 characters")
        elif isinstance(item, list):
            if len(path) >= MAX_DEPTH:
                raise InputError(f"{what}: {_where(path)} is nested more than {MAX_DEPTH} levels deep")
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


def _check_node(item: Any, sch: Dict[str, Any], where: List[Any], what: str) -> None:
    found = problem(item, sch)
    if found is not None:
        raise InputError(f"{what}: {_where(where + found[0])}{found[1]}")


def _schema_children(item: Any, sch: Dict[str, Any]) -> Optional[Iterator[Tuple[Any, Any, Dict[str, Any]]]]:
    """(key, child, the child's schema) for each child the schema says something about."""
    if isinstance(item, dict):
        props = sch.get("properties") or {}
        extra = sch.get("additionalProperties")
        extra_schema: Dict[str, Any] = extra if isinstance(extra, dict) else {}  # used only where it is a dict
        return ((k, v, props[k] if k in props else extra_schema) for k, v in item.items()
                if k in props or isinstance(extra, dict))
    if isinstance(item, list) and isinstance(sch.get("items"), dict):
        return ((i, v, sch["items"]) for i, v in enumerate(item))
    return None


def check_schema(value: Any, schema: Dict[str, Any], what: str, path: Optional[List[Any]] = None) -> None:
    """The document against a small JSON Schema subset (``dl_doctor.facts.shape``, the one shape validator: type,
    properties, required, additionalProperties (schema), items, minimum, maximum, enum); raises InputError naming
    the first field that does not fit. Depth first, memory its depth."""
    where = list(path or [])
    _check_node(value, schema, where, what)
    stack = [_schema_children(value, schema)]
    while stack:
        if stack[-1] is None:
            stack.pop()
            continue
        step = next(stack[-1], None)
        if step is None:
            stack.pop()
            if len(where) > len(path or []):
                where.pop()
            continue
        key, child, sch = step
        where.append(key)
        _check_node(child, sch, where, what)
        children = _schema_children(child, sch)
        if children is None:
            where.pop()
        else:
            stack.append(children)


def validate_snapshot(snapshot: Dict[str, Any], what: str) -> None:
    """Limits, then the facts schema; raises InputError naming the field."""
    from dl_doctor.facts import schema as facts_schema

    check_limits(snapshot, what)
    check_schema(snapshot, facts_schema(), what)
