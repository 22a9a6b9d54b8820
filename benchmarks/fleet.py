#!/usr/bin/env python3
"""Merging many node reports: `dl-doctor fleet` against reading every report whole (json.load of each file, the
naive merge), on N copies of a real report with planted differences.

Usage: .venv/bin/python benchmarks/fleet.py [REPORT.json] [N] [RUNS]
REPORT defaults to a fresh report of the recorded p5.48xlarge tree with a DLAMI environment padded in, made for the
purpose; N defaults to 10,000 nodes; RUNS to 3. Each copy gets its own host name; every 1,000th node another driver,
every 997th another NCCL_SOCKET_IFNAME. Prints the report size, the medians and their ratio; nothing is asserted.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
DOCTOR = Path(sys.executable).parent / "dl-doctor"


def _sample_report(work: Path) -> Path:
    sys.path.insert(0, str(HERE / "tests"))
    import machines  # noqa: E402
    from conftest import build_tree  # noqa: E402
    from test_consumer_trees import _dlami  # noqa: E402
    import shutil

    root = build_tree(work / "p5", machines.p5_48xlarge())
    dlami = _dlami(work / "d", "libcudnn.so.9.1.0")
    shutil.copytree(dlami / "opt", root / "opt", dirs_exist_ok=True)
    out = work / "sample.json"
    subprocess.run([str(DOCTOR), "run", "--sysroot", str(root), "--json", str(out), "--html", "/dev/null",
                    "--fail-on", "never"], check=True, capture_output=True)
    return out


def _make(sample: Path, n: int, into: Path) -> None:
    text = sample.read_text()
    doc = json.loads(text)
    host = doc["fleet_node"]["identity"]["hostname"] or "node"
    driver = doc["fleet_node"]["compare"].get("driver") or "550.54.15"
    for i in range(n):
        t = text.replace(host, f"node-{i:05d}")
        if i % 1000 == 999:
            t = t.replace(f'"driver": "{driver}"', '"driver": "550.127.05"', 1)
        (into / f"node-{i:05d}.json").write_text(t)
    if True:  # one NCCL setting that differs, in the fleet section and the facts alike
        p = into / "node-00996.json"
        d = json.loads(p.read_text())
        d["fleet_node"]["compare"]["env.NCCL_SOCKET_IFNAME"] = "eth9"
        p.write_text(json.dumps(d, indent=2))


def _fleet(into: Path) -> float:
    t = time.perf_counter()
    r = subprocess.run([str(DOCTOR), "fleet", str(into), "--json", os.devnull], capture_output=True, text=True)
    elapsed = time.perf_counter() - t
    assert r.returncode == 1, r.stderr  # the planted differences are found
    return elapsed


def _naive(into: Path) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import json, os, sys\n"
                    "d = sys.argv[1]\n"
                    "docs = [json.load(open(os.path.join(d, n))) for n in sorted(os.listdir(d))]\n"
                    "print(len(docs))", str(into)], check=True, capture_output=True)
    return time.perf_counter() - t


def main() -> int:
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sample = Path(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1] != "-" else _sample_report(work)
        into = work / "reports"
        into.mkdir()
        _make(sample, n, into)
        size = sample.stat().st_size
        fleet_t, naive_t = [], []
        for i in range(runs):
            fleet_t.append(_fleet(into))
            naive_t.append(_naive(into))
        f, nv = statistics.median(fleet_t), statistics.median(naive_t)
        print(f"{n} node reports of {size / 1024:.0f} KiB ({n * size / 2**30:.2f} GiB in all)")
        print(f"dl-doctor fleet: median {f:.2f} s; json.load of every report: median {nv:.2f} s; "
              f"ratio {f / nv:.3f} over {runs} runs (page cache warm after the first)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
