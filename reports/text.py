"""The text sanitiser: every string from the machine escaped before a terminal, a diff, a page or the login line
shows it. Used by every renderer and by the integrations that print (fleet, preflight, the login hook)."""

from __future__ import annotations

import re
from typing import Any

# C0 and C1 control characters (but newline and tab), DEL, the bidirectional overrides that reorder what a terminal
# shows, the Unicode line and paragraph separators (a line break to Python's splitlines and to many editors), and lone
# surrogates (names that were not UTF-8): escaped, so nothing from the machine can move the cursor, retitle the
# window, hide text, start a line or smuggle an escape sequence into a terminal, a diff, a page or the login line.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                     "\ud800-\udfff]")


def _escape(m: "re.Match[str]") -> str:
    ch = m.group(0)
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe_text(text: str) -> str:
    """``text`` with every control character and invisible reordering mark escaped (``\\x1b``, ``\\u202e``)."""
    return _UNSAFE.sub(_escape, text)


def safe_line(value: Any) -> str:
    """``value`` as text for one line of a terminal: :func:`safe_text`, and newlines and tabs escaped too, so a value
    from the machine (a log line, a peer's host name, an error) cannot forge a line of its own."""
    return safe_text(str(value)).replace("\n", "\\n").replace("\t", "\\t")


def safe_value(obj: Any, one_line: bool = False) -> Any:
    """A copy of a report (or any JSON value) with :func:`safe_text` applied to every string, keys included;
    ``one_line`` applies :func:`safe_line` instead."""
    if isinstance(obj, dict):
        return {safe_value(k, one_line): safe_value(v, one_line) for k, v in obj.items()}
    if isinstance(obj, list):
        return [safe_value(v, one_line) for v in obj]
    if isinstance(obj, str):
        return safe_line(obj) if one_line else safe_text(obj)
    return obj


def short(text: Any, limit: int) -> str:
    """``text`` on one line (runs of whitespace made one space) in at most ``limit`` characters: cut at the last
    word boundary that leaves room for an ASCII ``...`` (never mid-word, unless a single word is longer than the
    room), with the punctuation the cut leaves dangling dropped. Used by every short form: the login status line, the
    cluster engines' lines (node-problem-detector's 80 characters, NHC, Slurm's drain reason) and the fleet's."""
    one = " ".join(str(text).split())
    if len(one) <= limit:
        return one
    if limit <= 3:
        return one[:limit]
    room = limit - 3
    cut = one[:room]
    if one[room] != " " and " " in cut:  # the cut falls inside a word: end before it
        cut = cut[:cut.rindex(" ")]
    cut = cut.rstrip(" ,;:-(/")
    return (cut or one[:room]) + "..."
