"""Units shared by checks and renderers."""

from __future__ import annotations

from typing import Optional

GIB = 1024 ** 3
MIB = 1024 ** 2


def human_bytes(n: Optional[float]) -> str:
    if n is None:
        return "unknown"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" or value >= 100 else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover
