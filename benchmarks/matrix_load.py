#!/usr/bin/env python3
"""How long loading and validating the whole compatibility matrix takes.

Prints the median of several cold loads (the in-process cache cleared each time), and
the median wall time of `dl-doctor matrix cuda 12.4` as a whole command for scale.
Run: .venv/bin/python benchmarks/matrix_load.py [RUNS]
"""

import statistics
import subprocess
import sys
import time
from pathlib import Path


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    from dl_doctor import compat_matrix

    loads = []
    for _ in range(runs):
        compat_matrix._CACHE.clear()
        t = time.perf_counter()
        m = compat_matrix.load(site=False)
        loads.append((time.perf_counter() - t) * 1000)
    entries = sum(len(rows) for rows in m.tables.values())
    print(f"matrix load+validate: median {statistics.median(loads):.1f} ms, min {min(loads):.1f} ms "
          f"({runs} runs, {entries} entries, {len(m.sources)} sources)")

    exe = str(Path(sys.executable).parent / "dl-doctor")
    walls = []
    for _ in range(max(3, runs // 3)):
        t = time.perf_counter()
        subprocess.run([exe, "matrix", "cuda", "12.4"], check=True, capture_output=True)
        walls.append((time.perf_counter() - t) * 1000)
    print(f"`dl-doctor matrix cuda 12.4` wall time: median {statistics.median(walls):.0f} ms")


if __name__ == "__main__":
    main()
