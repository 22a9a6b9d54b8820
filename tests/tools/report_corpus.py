"""The JSON reports of every tree and facts fixture, normalised, in one directory: run it before and after a change
that must not change behaviour, then compare the two directories (``--compare A B``).

What is written (one file each):
- ``case-<ID>-<n>.json``: the finding of every conformance fixture case (tests/fixtures/checks);
- ``snapshot-<name>.json``: ``dl-doctor check`` on every recorded machine (tests/fixtures/snapshots);
- ``tree-<name>.json``: ``dl-doctor run --sysroot`` on every tree builder (tests/trees.py, tests/machines.py).

The test suite adds the reports its CLI runner saw when ``DLD_REPORT_CORPUS`` names a directory (tests/conftest.py).
Normalised: the tool version, timings and the temporary directories' names are replaced by placeholders.

    python tests/tools/report_corpus.py OUTDIR
    python tests/tools/report_corpus.py --compare BEFORE AFTER
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

VOLATILE = {"duration_s", "collected_at", "generated_at", "started_at", "finished_at", "elapsed_s", "timeout_s",
            "wall_s", "took_s", "seconds", "facts_collected_at",
            # the filesystem holding a temporary tree changes between runs
            "free_bytes", "inodes_free", "used_pct", "free_pct"}


def normalise(doc: Any, key: str = "") -> Any:
    if isinstance(doc, dict):
        out = {}
        for k, v in doc.items():
            if k in VOLATILE:
                out[k] = "<volatile>"
            elif k == "tool" and isinstance(v, dict):
                out[k] = {**v, "version": "<version>"}
            elif k == "probes" and isinstance(v, dict):  # per-probe timings
                out[k] = sorted(v)
            else:
                out[k] = normalise(v, k)
        return out
    if isinstance(doc, list):
        return [normalise(v, key) for v in doc]
    if isinstance(doc, str):
        doc = re.sub(r"/[^\s\"']*/tests/fixtures/", "<repo>/tests/fixtures/", doc)  # the checkout's own path
        doc = re.sub(r"[\d.]+ ([KMGT]i?B) free", r"<n> \1 free", doc)  # the temporary tree's file system
        return re.sub(r"(/tmp|/var/tmp)/(pytest-of-[^/]+/pytest-\d+/|tmp[a-z0-9_]+/)?[^/\s\"']*", "<tmp>", doc)
    return doc


def write(outdir: Path, name: str, doc: Any) -> None:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:180]
    (outdir / f"{safe}.json").write_text(json.dumps(normalise(doc), indent=1, sort_keys=True, default=str))


def exe() -> str:
    candidate = Path(sys.executable).parent / "dl-doctor"
    return str(candidate) if candidate.exists() else "dl-doctor"


def cli_report(*args: str) -> Any:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "HOME": tempfile.gettempdir()}
    proc = subprocess.run([exe(), *args, "--json", "-", "--html", "/dev/null", "-q"], capture_output=True, text=True,
                          env=env, timeout=300, cwd="/")
    try:
        return json.loads(proc.stdout)
    except ValueError:
        return {"exit": proc.returncode, "stderr": proc.stderr[-2000:]}


def record(outdir: Path) -> None:
    from conftest import FIXTURES, build_tree
    import machines
    import trees
    from dl_doctor import compat_matrix, testing
    from dl_doctor.registry import load_registry

    outdir.mkdir(parents=True, exist_ok=True)
    registry = load_registry()
    matrix = compat_matrix.load(site=False)
    for spec in sorted(registry.checks, key=lambda s: s.id):
        path = FIXTURES / "checks" / f"{spec.id}.json"
        if not path.exists():
            continue
        for n, case in enumerate(testing.load_cases(path)):
            finding = testing.run_case(spec, case, matrix)
            write(outdir, f"case-{spec.id}-{n}", finding.to_dict() if hasattr(finding, "to_dict") else vars(finding))
    for snap in sorted((FIXTURES / "snapshots").glob("*.json")):
        write(outdir, f"snapshot-{snap.stem}", cli_report("check", str(snap)))
    builders = {n: getattr(trees, n) for n in ("g4dn_docker_64m", "rhel8_gpu_no_driver", "healthy_host")}
    builders.update({f"machine-{n}": b for n, b in machines.BUILDERS.items()})
    for name, build in builders.items():
        with tempfile.TemporaryDirectory() as tmp:
            root = build_tree(Path(tmp), build())
            write(outdir, f"tree-{name}", cli_report("run", "--sysroot", str(root)))


def _load(path: Path) -> Any:
    """A recorded report, normalised again (a recording made before a normalisation was added compares too). A report
    of the live machine the tests run on (mode ``live``) keeps only its findings' IDs and statuses: its facts (the
    kernel log, free memory, the test venv's packages) change between any two runs."""
    doc = normalise(json.loads(path.read_text()))
    if isinstance(doc, dict) and (doc.get("run") or {}).get("mode", doc.get("mode")) == "live":
        return {"live findings": sorted((f.get("id"), f.get("status")) for f in doc.get("findings") or [])}
    return doc


def compare(a: Path, b: Path) -> int:
    names = sorted({p.name for p in a.glob("*.json")} | {p.name for p in b.glob("*.json")})
    differ = [n for n in names if not (a / n).exists() or not (b / n).exists() or _load(a / n) != _load(b / n)]
    print(f"{len(names)} reports, {len(names) - len(differ)} identical, {len(differ)} differ")
    for n in differ:
        if not (a / n).exists() or not (b / n).exists():
            print(f"  {n}: only in {'the second' if (b / n).exists() else 'the first'}")
        else:
            print(f"  {n}: " + "; ".join(_paths(_load(a / n), _load(b / n))[:4]))
    return 1 if differ else 0


def _paths(x: Any, y: Any, at: str = "") -> list:
    """Where two documents differ, as dotted paths (a list's items by index)."""
    if isinstance(x, dict) and isinstance(y, dict):
        return [p for k in sorted(set(x) | set(y), key=str)
                for p in (_paths(x[k], y[k], f"{at}.{k}") if k in x and k in y
                          else [f"{at}.{k} ({'removed' if k in x else 'added'})"])]
    if isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        return [p for i, (u, v) in enumerate(zip(x, y)) for p in _paths(u, v, f"{at}[{i}]")]
    return [] if x == y else [at or "."]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--compare"]:
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    record(Path(sys.argv[1]))
