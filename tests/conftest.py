"""Shared test helpers: sysroot trees, snapshots, and the installed `dl-doctor` entry point."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

HERE = Path(__file__).parent
# The sample plugin is a separate package with its own tests; tests/e2e/test_plugins.py installs it and runs them.
collect_ignore = ["plugin_sample"]
FIXTURES = HERE / "fixtures"


def build_tree(root: Path, spec: Dict[str, Any]) -> Path:
    """Create a sysroot tree.

    ``spec`` maps in-tree paths to file contents (str/bytes), to ``{"symlink": target}``,
    or to ``{"dir": True}``.
    """
    for rel, content in spec.items():
        path = root / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, dict) and "symlink" in content:
            os.symlink(content["symlink"], path)
        elif isinstance(content, dict) and content.get("dir"):
            path.mkdir(parents=True, exist_ok=True)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


@pytest.fixture
def tree(tmp_path):
    def make(spec: Dict[str, Any], name: str = "root") -> Path:
        root = tmp_path / name
        root.mkdir(exist_ok=True)
        return build_tree(root, spec)
    return make


from dl_doctor.testing import snapshot  # noqa: E402,F401 - the one helper, shared with plugins


def dl_doctor_exe() -> str:
    """The installed console script (the one in this interpreter's bin directory)."""
    candidate = Path(sys.executable).parent / "dl-doctor"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("dl-doctor")
    if not found:
        pytest.fail("the dl-doctor console script is not installed; install with pip install -e '.[test]'")
    return found


def validate_report(doc: Dict[str, Any]) -> None:
    import jsonschema

    from dl_doctor.facts import schema as facts_schema
    from dl_doctor.reports import schema

    if doc.get("kind") == "dl-doctor-facts":
        jsonschema.validate(doc, facts_schema())
    else:
        jsonschema.validate(doc, schema())


class CliResult:
    def __init__(self, proc: subprocess.CompletedProcess, outdir: Path):
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.outdir = outdir

    def reports(self, ext: str) -> List[Path]:
        return sorted(self.outdir.glob(f"*.{ext}")) if self.outdir.exists() else []

    def json_report(self) -> Dict[str, Any]:
        files = self.reports("json")
        assert len(files) == 1, f"expected one JSON report in {self.outdir}, found {files}"
        return json.loads(files[0].read_text())


def _to_corpus(request, n: int, doc: Dict[str, Any]) -> None:
    """With DLD_REPORT_CORPUS set, keep each report for tests/tools/report_corpus.py --compare."""
    corpus = os.environ.get("DLD_REPORT_CORPUS")
    if not corpus:
        return
    sys.path.insert(0, str(HERE / "tools"))
    from report_corpus import write

    write(Path(corpus), f"cli-{Path(str(request.node.fspath)).stem}-{request.node.name}-{n}", doc)


@pytest.fixture
def run_cli(tmp_path, request):
    """Run the installed `dl-doctor` with a clean environment; validate every JSON report it writes."""
    counter = {"n": 0}

    def run(*args: str, env: Optional[Dict[str, str]] = None, cwd: Optional[Path] = None,
            timeout: float = 120, outdir: Optional[Path] = None) -> CliResult:
        counter["n"] += 1
        out = outdir or tmp_path / f"out{counter['n']}"
        base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path / "home"),
                    "LANG": "C.UTF-8"}
        base_env.update(env or {})
        argv = [dl_doctor_exe(), *args]
        wants_outdir = not args or args[0] in ("run", "check") or (
            args[0].startswith("-") and args[0] not in ("--version", "--help", "-h"))
        if wants_outdir and "--output-dir" not in args:
            argv += ["--output-dir", str(out)]
        proc = subprocess.run(argv, capture_output=True, text=True, env=base_env, cwd=str(cwd or tmp_path),
                              timeout=timeout)
        result = CliResult(proc, out)
        for path in result.reports("json"):
            validate_report(json.loads(path.read_text()))
            _to_corpus(request, counter["n"], json.loads(path.read_text()))
        if proc.stdout.lstrip().startswith("{"):
            doc = json.loads(proc.stdout)
            if ("findings" in doc and "schema_version" in doc) or doc.get("kind") == "dl-doctor-facts":
                validate_report(doc)
                _to_corpus(request, counter["n"], doc)
        return result

    (tmp_path / "home").mkdir(exist_ok=True)
    return run


def set_access_acl(path, user_uid: int, mask: int = 7) -> bool:
    """Give ``path`` a POSIX access ACL that grants ``user_uid`` rwx (with that ``mask``), as the kernel stores it:
    version 2, then (tag, perm, id) entries. False where the file system has no ACLs."""
    import struct

    entries = [(0x01, 7, 0xFFFFFFFF), (0x02, 7, user_uid), (0x04, 5, 0xFFFFFFFF), (0x10, mask, 0xFFFFFFFF),
               (0x20, 5, 0xFFFFFFFF)]
    raw = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)
    try:
        os.setxattr(str(path), "system.posix_acl_access", raw)
    except OSError:
        return False
    return True
