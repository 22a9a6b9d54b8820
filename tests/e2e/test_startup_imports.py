"""What each command imports (issue 24, start-up): most of a start is imports, so a command imports only what it
uses. Checked through ``sys.modules`` in a fresh interpreter, never with a clock."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import List, Set

# The program, run the way the dl-doctor script runs it (main() reads sys.argv), printing sys.modules as it exits.
PROGRAM = r"""
import atexit, sys
atexit.register(lambda: sys.__stderr__.write("\nDLD-MODULES " + repr(sorted(sys.modules)) + "\n"))
sys.argv[0] = "dl-doctor"
from dl_doctor.cli import main
main()
"""

RENDERERS = {"dl_doctor.reports.html", "dl_doctor.reports.junit", "dl_doctor.reports.prometheus",
             "dl_doctor.reports.markdown"}
OTHER_FAMILIES = {"dl_doctor.cli.fleet", "dl_doctor.cli.image", "dl_doctor.cli.login", "dl_doctor.cli.matrix",
                  "dl_doctor.cli.why"}
# never in a start that does not use them: the NVML bindings, psutil, distro, the verify workload
NEVER = {"pynvml", "psutil", "distro", "dl_doctor.probes.verify.workload", "dl_doctor.probes.verify.gpuwatch"}


def _modules(tmp_path: Path, *args: str) -> Set[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path / "home"), "LANG": "C.UTF-8"}
    proc = subprocess.run([sys.executable, "-c", PROGRAM, *args], capture_output=True, text=True, env=env,
                          cwd=str(tmp_path), timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("DLD-MODULES ")]
    assert proc.returncode in (0, 1) and len(lines) == 1, (proc.returncode, proc.stderr[-2000:])
    return set(ast.literal_eval(lines[0][len("DLD-MODULES "):]))


def _present(modules: Set[str], names: Set[str]) -> List[str]:
    return sorted(m for m in modules if m in names or m.split(".")[0] in names)


def test_importing_the_command_line_imports_nothing_else(tmp_path):
    code = ("import sys; import dl_doctor.cli; "
            "print(repr(sorted(m for m in sys.modules if m.startswith(('dl_doctor', 'click', 'jinja2')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    assert ast.literal_eval(out.strip()) == ["dl_doctor", "dl_doctor.cli"]


def test_version_imports_no_probe_check_renderer_or_matrix(tmp_path):
    mods = _modules(tmp_path, "--version")
    assert "click" in mods and "dl_doctor.cli.core" in mods  # the program did run
    for prefix in ("dl_doctor.probes", "dl_doctor.checks", "dl_doctor.reports", "dl_doctor.compat_matrix",
                   "dl_doctor.engine", "dl_doctor.registry", "dl_doctor.redact", "jinja2", "packaging"):
        assert not [m for m in mods if m == prefix or m.startswith(prefix + ".")], prefix
    assert not _present(mods, OTHER_FAMILIES | NEVER)


def test_list_loads_checks_but_no_renderer_matrix_or_template(tmp_path):
    mods = _modules(tmp_path, "list")
    assert "dl_doctor.checks.driver" in mods and "dl_doctor.probes.system" in mods
    assert not _present(mods, RENDERERS | OTHER_FAMILIES | NEVER | {"jinja2", "markupsafe", "dl_doctor.compat_matrix",
                                                                    "dl_doctor.engine", "dl_doctor.redact"})


def test_run_without_html_does_not_import_jinja2(tmp_path):
    empty = tmp_path / "root"
    (empty / "usr").mkdir(parents=True)
    mods = _modules(tmp_path, "run", "--sysroot", str(empty), "--output-dir", str(tmp_path / "out"),
                    "--html", "/dev/null", "-q", "--fail-on", "never")
    assert "dl_doctor.engine" in mods and "dl_doctor.compat_matrix" in mods  # it did run
    assert list((tmp_path / "out").glob("*.json"))
    assert not _present(mods, RENDERERS | OTHER_FAMILIES | NEVER | {"jinja2", "markupsafe"})


def test_default_run_imports_only_the_html_renderer(tmp_path):
    empty = tmp_path / "root"
    (empty / "usr").mkdir(parents=True)
    mods = _modules(tmp_path, "run", "--sysroot", str(empty), "--output-dir", str(tmp_path / "out"), "-q",
                    "--fail-on", "never")
    assert "dl_doctor.reports.html" in mods and "jinja2" in mods
    assert not _present(mods, (RENDERERS - {"dl_doctor.reports.html"}) | OTHER_FAMILIES | NEVER)
    # version ranges are parsed only where a known issue, an expectation or a matrix file being validated has one
    assert "packaging.version" in mods and "packaging.specifiers" not in mods


def test_a_family_loads_when_its_command_is_asked_for(tmp_path):
    mods = _modules(tmp_path, "matrix", "cuda", "12.4")
    assert "dl_doctor.cli.matrix" in mods
    assert not _present(mods, (OTHER_FAMILIES - {"dl_doctor.cli.matrix"}) | RENDERERS | NEVER | {"jinja2"})


def test_every_lazy_command_is_registered_by_the_module_named_for_it():
    """The group's map of lazily imported commands matches what the modules register (a renamed or added command
    in one of them would otherwise vanish from the help)."""
    code = r"""
import importlib, sys
from dl_doctor.cli.base import DefaultRunGroup, cli
import dl_doctor.cli.core
core = set(cli.commands)
for name, module in sorted(DefaultRunGroup.LAZY.items()):
    before = set(cli.commands)
    importlib.import_module("dl_doctor.cli." + module)
    assert name in cli.commands, (name, module)
extra = set(cli.commands) - core - set(DefaultRunGroup.LAZY)
assert not extra, extra
assert not core & set(DefaultRunGroup.LAZY), core & set(DefaultRunGroup.LAZY)
print("ok", len(cli.commands))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("ok "), out.stderr[-2000:]


def test_the_program_sets_its_collector_pace_and_an_embedding_caller_keeps_its_own(tmp_path):
    """The dl-doctor program collects every 100k allocations and freezes the heap as it ends (no last full
    collection); main(argv) called by another program leaves the collector as that program set it."""
    code = r"""
import atexit, gc, sys
atexit.register(lambda: sys.__stderr__.write("\nDLD-GC %r %r\n" % (gc.get_threshold(), gc.get_freeze_count() > 0)))
sys.argv[0] = "dl-doctor"
from dl_doctor.cli import GC_THRESHOLD, main
assert GC_THRESHOLD[0] >= 10000
main()
"""
    proc = subprocess.run([sys.executable, "-c", code, "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "DLD-GC (100000, 10, 10) True" in proc.stderr, proc.stderr[-2000:]
    embedded = r"""
import gc, sys
gc.set_threshold(700, 10, 10)
from dl_doctor.cli import main
try:
    main(["--version"])
except SystemExit as exc:
    assert exc.code == 0, exc.code
print(gc.get_threshold(), gc.get_freeze_count())
"""
    out = subprocess.run([sys.executable, "-c", embedded], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip().endswith("(700, 10, 10) 0"), (out.stdout, out.stderr[-2000:])
