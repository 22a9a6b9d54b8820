"""Versions, one way: every comparison of driver, CUDA, framework and library versions goes through here.

``parse`` is PEP 440 (packaging) with what real version strings carry (``2.4.0+cu124``, ``535.104.05``,
``12.4.131``) and ``None`` for anything else; ``kernel_key`` orders kernel releases (``5.15.0-1051-aws``), which are
not PEP 440.
"""

from __future__ import annotations

import re
from typing import Any, List, Optional, Tuple

from packaging.version import InvalidVersion, Version

_LEADING = re.compile(r"[0-9]{1,9}(?:\.[0-9]{1,9}){0,5}")


def parse(text: Any) -> Optional[Version]:
    """A comparable version, or None (``"2.4.0+cu124"`` keeps its local part; junk is None, never an error)."""
    if text is None:
        return None
    s = str(text).strip()
    if not s or len(s) > 128:
        return None
    try:
        return Version(s)
    except InvalidVersion:
        m = _LEADING.match(s)
        try:
            return Version(m.group(0)) if m else None
        except InvalidVersion:  # pragma: no cover - the pattern is always valid
            return None


def release(text: Any) -> Tuple[int, ...]:
    """The release numbers, for comparing numerically: ``"2.4.0+cu124"`` -> ``(2, 4, 0)``, ``"12.4"`` -> ``(12, 4)``,
    ``"5.15.0-1051-aws"`` -> ``(5, 15, 0)``; ``()`` for anything that is not a version (it sorts below every one)."""
    v = parse(text)
    return tuple(v.release) if v is not None else ()


def major(text: Any) -> Optional[int]:
    v = parse(text)
    return v.release[0] if v is not None and v.release else None


def major_minor(text: Any) -> Optional[str]:
    """``"12.4.131"`` -> ``"12.4"``; None when there is no MAJOR.MINOR."""
    v = parse(text)
    if v is None or len(v.release) < 2:
        return None
    return f"{v.release[0]}.{v.release[1]}"


def at_least(found: Any, wanted: Any) -> Optional[bool]:
    """``found >= wanted``, or None when either is not a version."""
    a, b = parse(found), parse(wanted)
    return None if a is None or b is None else a >= b


def kernel_key(release: str) -> List[Any]:
    """Sort key for kernel releases the way rpm/dpkg order them in practice (numbers numerically)."""
    from dl_doctor.util.parse import isnum

    return [(0, int(p)) if isnum(p) else (1, p) for p in re.split(r"[.\-_+~]", release) if p]
