#!/usr/bin/env python3
"""The start-up budget: `dl-doctor run` against `python -m torch.utils.collect_env`, paired, on real torch envs.

Usage: .venv/bin/python benchmarks/startup.py [RUNS] [ENV_PYTHON ...]
Defaults: 11 pairs on each environment tests/setup_torch_envs.sh made (torch 2.13.0 CPU, torch 2.14.1 cu130).

Each pair runs the two commands back to back (in alternating order), so both see the same machine load; the
figure is the median of the pairs' ratios (dl-doctor's wall time / collect_env's). dl-doctor runs as a user would
run it on that environment: `dl-doctor run --no-env-scan --python ENV` (the whole host, plus that environment,
JSON and HTML reports written). The budget (README) is a median ratio of 0.15 or less. Nothing is asserted.
"""

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENVS = Path.home() / ".cache" / "dl-doctor-test-envs"
DEFAULT = [ENVS / "torch-2.13.0-cpu" / "bin" / "python", ENVS / "torch-2.14.1-cu130" / "bin" / "python"]


def seconds(argv):
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def paired(first, second, runs):
    """``runs`` pairs of the two commands back to back, in alternating order (both see the same machine load), after
    one warm-up run of each (the page cache): the first's times, the second's, and each pair's first/second."""
    seconds(first), seconds(second)
    a_times, b_times, ratios = [], [], []
    for i in range(runs):
        if i % 2:
            b, a = seconds(second), seconds(first)
        else:
            a, b = seconds(first), seconds(second)
        a_times.append(a), b_times.append(b), ratios.append(a / b)
    return a_times, b_times, ratios


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 11
    pythons = [Path(p) for p in sys.argv[2:]] or [p for p in DEFAULT if p.exists()]
    if not pythons:
        sys.exit("no torch environment; run tests/setup_torch_envs.sh or name ENV_PYTHON")
    exe = str(Path(sys.executable).parent / "dl-doctor")
    with tempfile.TemporaryDirectory() as tmp:
        for python in pythons:
            doctor = [exe, "run", "--no-env-scan", "--python", str(python), "--output-dir", tmp, "-q",
                      "--fail-on", "never"]
            peer = [str(python), "-m", "torch.utils.collect_env"]
            d_times, p_times, ratios = paired(doctor, peer, runs)
            name = python.parent.parent.name
            print(f"{name}: dl-doctor run median {statistics.median(d_times):.3f} s, collect_env median "
                  f"{statistics.median(p_times):.3f} s, median ratio {statistics.median(ratios):.3f} "
                  f"(min {min(ratios):.3f}, max {max(ratios):.3f}) over {runs} pairs")


if __name__ == "__main__":
    main()
