"""The layer rules (setup.cfg's import-linter contracts, docs/architecture.md) hold for the package as it installs.

The editable install maps four folders into ``dl_doctor`` through an import hook that import-linter cannot follow,
so the test lays the package out as a wheel installs it (a tree of symbolic links) and runs ``lint-imports`` on that.
CI also runs it on a real wheel in a fresh venv (tools/static_checks.sh).
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAPPED = {"checks": "checks", "reports": "reports", "compat_matrix": "compat_matrix"}


def _installed_layout(dest: Path) -> Path:
    """``dest/dl_doctor`` shaped as the wheel installs it: doctor/'s entries plus the mapped folders."""
    pkg = dest / "dl_doctor"
    pkg.mkdir(parents=True)
    for entry in (ROOT / "doctor").iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    for name, folder in MAPPED.items():
        (pkg / name).symlink_to(ROOT / folder)
    return dest


def _lint(tmp_path: Path, config: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "lint-imports"
    if not exe.exists():
        pytest.skip("import-linter is not installed (it is in the test extra)")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(_installed_layout(tmp_path / "site")),
           "LANG": "C.UTF-8", "HOME": str(tmp_path)}
    return subprocess.run([str(exe), "--config", str(config), "--no-cache"], capture_output=True, text=True,
                          env=env, cwd=str(tmp_path), timeout=300)


def test_the_installed_package_keeps_every_layer_rule(tmp_path):
    proc = _lint(tmp_path, ROOT / "setup.cfg")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_the_contracts_cover_every_layer_the_architecture_names():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    sources = {m.strip() for s in cfg.sections() if s.startswith("importlinter:contract:")
               for m in cfg[s].get("source_modules", "").split() if m.strip()}
    assert sources >= {"dl_doctor.host", "dl_doctor.probes", "dl_doctor.readers", "dl_doctor.checks",
                       "dl_doctor.judge", "dl_doctor.facts", "dl_doctor.reports", "dl_doctor.compat_matrix"}


def test_a_forbidden_import_inside_a_function_breaks_the_contract(tmp_path):
    """The rules are not decoration: a check that reaches the host from inside a function fails them."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "checks", src / "checks", ignore=shutil.ignore_patterns("__pycache__"))
    (src / "checks" / "zz_planted.py").write_text("def f():\n    from dl_doctor.host import Host\n    return Host\n")
    site = _installed_layout(tmp_path / "site")
    (site / "dl_doctor" / "checks").unlink()
    (site / "dl_doctor" / "checks").symlink_to(src / "checks")
    exe = Path(sys.executable).parent / "lint-imports"
    if not exe.exists():
        pytest.skip("import-linter is not installed (it is in the test extra)")
    proc = subprocess.run([str(exe), "--config", str(ROOT / "setup.cfg"), "--no-cache"], capture_output=True,
                          text=True, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(site),
                                          "HOME": str(tmp_path)}, cwd=str(tmp_path), timeout=300)
    assert proc.returncode != 0
    assert "dl_doctor.checks.zz_planted -> dl_doctor.host" in proc.stdout
