#!/usr/bin/env python3
"""dl-doctor against `python -m torch.utils.collect_env`, and 1 vs 10 Python environments.

Usage: .venv/bin/python benchmarks/python_envs.py [ENV_PYTHON] [RUNS]
ENV_PYTHON defaults to the torch 2.14.1 test environment (tests/setup_torch_envs.sh).
Prints medians of RUNS runs and their ratios; nothing is asserted.
"""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_ENV = Path.home() / ".cache" / "dl-doctor-test-envs" / "torch-2.14.1-cu130" / "bin" / "python"


def median_seconds(argv, runs, env=None):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def clone_envs(python: Path, n: int, where: Path):
    """n light venvs sharing the real environment's site-packages (what inspection reads)."""
    site = next((python.parent.parent / "lib").glob("python3*/site-packages"))
    out = []
    for i in range(n):
        d = where / f"env{i}"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(d)], check=True)
        target = next((d / "lib").glob("python3*"))
        shutil.rmtree(target / "site-packages")
        (target / "site-packages").symlink_to(site)
        out.append(d / "bin" / "python")
    return out


def main():
    python = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_ENV
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    if not python.exists():
        sys.exit(f"no environment at {python}; run tests/setup_torch_envs.sh or pass ENV_PYTHON")
    exe = str(Path(sys.executable).parent / "dl-doctor")
    with tempfile.TemporaryDirectory() as tmp:
        out = ["--output-dir", tmp, "-q", "--fail-on", "never"]
        doctor = median_seconds([exe, "run", "--no-env-scan", "--python", str(python), *out], runs)
        collect_env = median_seconds([str(python), "-m", "torch.utils.collect_env"], runs)
        print(f"dl-doctor run (whole host + this env):      median {doctor:.2f} s over {runs} runs")
        print(f"python -m torch.utils.collect_env:           median {collect_env:.2f} s over {runs} runs")
        print(f"ratio dl-doctor / collect_env:               {doctor / collect_env:.2f}")
        envs = clone_envs(python, 10, Path(tmp))
        one = median_seconds([exe, "collect", "-o", os.devnull, "--no-env-scan", "--python", str(envs[0])], runs)
        ten = median_seconds([exe, "collect", "-o", os.devnull, "--no-env-scan",
                              *[a for e in envs for a in ("--python", str(e))]], runs)
        print(f"collect, 1 environment:                      median {one:.2f} s")
        print(f"collect, 10 environments:                    median {ten:.2f} s")
        print(f"ratio 10 / 1 environments:                   {ten / one:.2f}")


if __name__ == "__main__":
    main()
