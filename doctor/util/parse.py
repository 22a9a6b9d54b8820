"""Small, strict parsers for numbers read from host files.

``str.isdigit()`` is true for ``"²"`` (which ``int()`` rejects) and Python refuses to convert integers of more than
4300 digits: a crafted file must cost at most the one value, never the probe.
"""

from __future__ import annotations

import re
from typing import Optional

MAX_DIGITS = 30
_INT = re.compile(r"[+-]?[0-9]{1,%d}" % MAX_DIGITS)


def isnum(text: str) -> bool:
    """True for a plain ASCII decimal number of at most MAX_DIGITS digits."""
    return bool(text) and text.isascii() and text.isdigit() and len(text) <= MAX_DIGITS


def ascii_int(text: Optional[str]) -> Optional[int]:
    """``int(text)`` for ASCII decimal text of at most MAX_DIGITS digits (surrounding spaces allowed), else None."""
    if text is None:
        return None
    text = text.strip()
    return int(text) if _INT.fullmatch(text) else None
