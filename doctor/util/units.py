"""Units shared by checks and renderers."""

from __future__ import annotations

from typing import Optional

GIB = 1024 ** 3
MIB = 1024 ** 2
# PCIe's usable bandwidth per lane and direction by generation, GB/s: the raw rate after line coding (8 GT/s with
# 128b/130b for gen 3, doubling each generation; gen 1 and 2 use 8b/10b)
PCIE_GBPS_PER_LANE = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


def human_bytes(n: Optional[float]) -> str:
    if n is None:
        return "unknown"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" or value >= 100 else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover
