"""Text that came from the machine, made safe to encode: names that were not UTF-8, surrogate-escaped by the OS
layer, as readable ``\\xff`` text."""

from __future__ import annotations

import re
from typing import Any


def _unescape_surrogate(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def printable(obj: Any) -> Any:
    """Names that were not UTF-8 (``~/venv\\xff``, surrogate-escaped by the OS layer) as readable ``\\xff`` text.

    Without this, one such name anywhere in the facts makes every UTF-8 output fail to encode.
    """
    if isinstance(obj, str):
        return _SURROGATE.sub(lambda m: _unescape_surrogate(m.group(0)), obj) if _SURROGATE.search(obj) else obj
    if isinstance(obj, dict):
        return {printable(k): printable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [printable(v) for v in obj]
    return obj


_SURROGATE = re.compile("[\ud800-\udfff]")
