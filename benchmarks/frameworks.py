#!/usr/bin/env python3
"""Many frameworks against torch alone: a `dl-doctor run` over environments holding torch + onnxruntime-gpu,
TensorFlow, JAX, CuPy and CTranslate2 (each its own environment, as they resolve), against the same run over the
torch environment alone. Paired runs in alternating order; the figure is the median of the pairs' ratios. The
budget (issue 10) is a ratio of 2.0 or less. Nothing is asserted.

Usage: .venv/bin/python benchmarks/frameworks.py [RUNS]
Environments: tests/setup_torch_envs.sh and tests/setup_framework_envs.sh make torch-2.14.1-cu130, torch-ort-cu130,
cupy-14.2.0-cu12, ct2-4.8.5, ort-1.22.0-cu12; tf-2.21.0 and jax-0.12 are made by hand (see the README's
benchmark section): those that exist are used.
"""

import statistics
import sys
import tempfile
from pathlib import Path

from startup import paired  # benchmarks/startup.py: paired timed runs, alternating order

ENVS = Path.home() / ".cache" / "dl-doctor-test-envs"
TORCH = ENVS / "torch-2.14.1-cu130" / "bin" / "python"
OTHERS = ["torch-ort-cu130", "tf-2.21.0", "jax-0.12", "cupy-14.2.0-cu12", "ct2-4.8.5", "ort-1.22.0-cu12"]


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 11
    if not TORCH.exists():
        sys.exit("no torch environment; run tests/setup_torch_envs.sh")
    others = [ENVS / n / "bin" / "python" for n in OTHERS if (ENVS / n / "bin" / "python").exists()]
    exe = str(Path(sys.executable).parent / "dl-doctor")
    with tempfile.TemporaryDirectory() as tmp:
        base = [exe, "run", "--no-env-scan", "--output-dir", tmp, "-q", "--fail-on", "never"]
        alone = base + ["--python", str(TORCH)]
        many = base + ["--python", str(TORCH)] + [a for p in others for a in ("--python", str(p))]
        m_t, a_t, ratios = paired(many, alone, runs)
        print(f"torch alone median {statistics.median(a_t):.3f} s; torch + {len(others)} framework environments "
              f"({', '.join(p.parent.parent.name for p in others)}) median {statistics.median(m_t):.3f} s; "
              f"median ratio {statistics.median(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f}) "
              f"over {runs} pairs")


if __name__ == "__main__":
    main()
