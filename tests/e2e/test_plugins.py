"""The plugin contract end to end: an out-of-tree package (tests/plugin_sample) installed beside dl-doctor, a broken
plugin and a typo in requires=, and one top-level package that no local `checks/` or `reports/` can shadow."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import FIXTURES

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "tests" / "plugin_sample"


def _pythonpath(paths) -> dict:
    """What run_cli adds to its clean environment for these directories on the module path."""
    return {"PYTHONPATH": os.pathsep.join(str(p) for p in paths)}


def _env(pythonpath=None, **more):
    """A clean environment for the commands that are not the entry point (pytest, python -m, a zipapp)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent", "LANG": "C.UTF-8", **more}
    if pythonpath:
        env.update(_pythonpath(pythonpath))
    return env


@pytest.fixture(scope="module")
def sample_plugin(tmp_path_factory):
    target = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "--target", str(target), str(SAMPLE)], capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0:
        pytest.skip(f"cannot build the sample plugin here: {proc.stderr.strip()[-300:]}")
    return target


def _dist(target: Path, name: str, entry_points: str, modules: dict) -> None:
    """A minimal installed distribution (dist-info + modules), as pip would leave it."""
    info = target / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)
    for mod, text in modules.items():
        (target / f"{mod}.py").write_text(text)


def test_an_out_of_tree_plugin_registers_runs_and_tests_itself(run_cli, sample_plugin, tmp_path):
    env = _env([sample_plugin])
    listed = run_cli("list", "--json", "-", env=_pythonpath([sample_plugin]), timeout=60)
    assert listed.returncode == 0 and "warning" not in listed.stderr, listed.stderr
    assert "ACME-TEMP-001" in {c["id"] for c in json.loads(listed.stdout)}

    root = tmp_path / "root"
    (root / "etc/acme").mkdir(parents=True)
    (root / "usr").mkdir()
    (root / "etc/acme/fleet.conf").write_text("max_temp_c = 85\n")
    r = run_cli("run", "--sysroot", str(root), "--json", "-", "--html", "/dev/null",
                "--only", "ACME-TEMP-001,DLD-PLUGIN-001", env=_pythonpath([sample_plugin]), timeout=120)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["facts"]["acme"] == {"max_temp_c": 85, "source": "/etc/acme/fleet.conf"}
    statuses = {f["id"]: f["status"] for f in report["findings"]}
    assert statuses == {"ACME-TEMP-001": "skip", "DLD-PLUGIN-001": "pass"}  # no NVML under a sysroot

    # the plugin's own tests run with dl-doctor's installed helpers
    t = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(SAMPLE / "tests")],
                       capture_output=True, text=True, env={**env, "PYTHONPATH": str(sample_plugin)}, timeout=120,
                       cwd=tmp_path)
    assert t.returncode == 0, t.stdout + t.stderr
    assert "5 passed" in t.stdout


def test_a_broken_plugin_or_a_typo_in_requires_fails_a_bake(run_cli, tmp_path):
    target = tmp_path / "site"
    target.mkdir()
    _dist(target, "broken_plugin", "[dl_doctor.checks]\nbroken = broken_mod\n",
          {"broken_mod": "import acme_lib_that_is_not_installed\n"})
    _dist(target, "typo_plugin", "[dl_doctor.checks]\ntypo = typo_mod\n", {"typo_mod": '''
from dl_doctor.model import check, passed

@check(id="TYPO-GPU-001", slug="typo-check", title="A check with a typo in requires", tags=("gpu",),
       requires=("gpu_pci.gpu_cuont",), what="what it checks, at length", why="why it matters, at length",
       fix="how to fix it, at length")
def typo_check(facts):
    return passed("never reached")
'''})
    listed = run_cli("list", env=_pythonpath([target]), timeout=60)
    assert "broken (broken_mod) failed to load: ModuleNotFoundError" in listed.stderr
    assert ("check TYPO-GPU-001 (typo_mod) requires 'gpu_pci.gpu_cuont', which no probe provides: probe 'gpu_pci' "
            "has no fact 'gpu_cuont' there (did you mean 'gpu_count'?)") in " ".join(listed.stderr.split())
    assert "TYPO-GPU-001" not in listed.stdout

    facts = FIXTURES / "snapshots" / "g5_ubuntu2204.json"
    r = run_cli("check", str(facts), "--json", "-", "--html", "/dev/null", "--fail-on", "fail",
                "--only", "DLD-PLUGIN-001", env=_pythonpath([target]), timeout=60)
    assert r.returncode == 1, r.stderr
    finding = json.loads(r.stdout)["findings"][0]
    assert finding["status"] == "error" and finding["message"].startswith("2 plugin problems")


def test_one_top_level_package_that_local_checks_and_reports_cannot_shadow(run_cli, tmp_path):
    for pkg in ("checks", "reports", "doctor", "compat_matrix"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("raise ImportError('the wrong package')\n")
    m = run_cli("list", exe=[sys.executable, "-m", "dl_doctor"], cwd=tmp_path, env=_pythonpath([tmp_path]), timeout=60)
    assert m.returncode == 0 and m.stderr == "", m.stderr
    assert len(m.stdout.splitlines()) >= 45
    r = run_cli("run", "--only", "DLD-SYS-001", "--json", "-", "--html", "/dev/null", "--no-env-scan",
                cwd=tmp_path, env=_pythonpath([tmp_path]), timeout=120)
    assert r.returncode in (0, 1) and json.loads(r.stdout)["findings"][0]["id"] == "DLD-SYS-001", r.stderr


def test_the_wheel_installs_one_top_level_package(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.skip(f"cannot build a wheel here: {proc.stderr.strip()[-300:]}")
    wheel = next(tmp_path.glob("dl_doctor-*.whl"))
    tops = {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist()}
    assert tops == {"dl_doctor", wheel.name.split("-py")[0].replace("dl_doctor-", "dl_doctor-") + ".dist-info"} \
        or tops - {t for t in tops if t.endswith(".dist-info")} == {"dl_doctor"}, tops
    names = zipfile.ZipFile(wheel).namelist()
    # every subpackage of the source tree is in the wheel (package_dir maps them; a missing one breaks `pip install .`)
    for base, pkg in (("doctor", "dl_doctor"), ("checks", "dl_doctor/checks"), ("reports", "dl_doctor/reports"),
                      ("compat_matrix", "dl_doctor/compat_matrix")):
        for init in (ROOT / base).rglob("__init__.py"):
            rel = init.relative_to(ROOT / base).as_posix()
            if base == "doctor" and rel.split("/")[0] in ("checks", "reports", "compat_matrix"):
                continue
            assert f"{pkg}/{rel}" in names, f"{pkg}/{rel} is not in the wheel"
    for data in ("dl_doctor/data/secrets.toml", "dl_doctor/reports/templates/report.html.j2",
                 "dl_doctor/facts/facts-v1.json", "dl_doctor/compat_matrix/data/torch.toml"):
        assert data in names


# -- the shape of the code --------------------------------------------------------------------------------------------

# The import graph (cycles, layers) is held by import-linter's contracts in setup.cfg: tests/e2e/test_layers.py.


def test_no_cli_function_takes_more_than_eight_parameters():
    for path in (ROOT / "doctor" / "cli").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                count = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
                assert count <= 8, f"{path.name}:{node.lineno} {node.name} takes {count} parameters"


PROBE_BANNED_MODULES = {"os", "subprocess", "socket", "ctypes", "shutil", "pathlib", "io", "urllib", "http", "glob",
                        "fcntl", "tarfile", "gzip"}


@pytest.mark.parametrize("path", sorted([*(ROOT / "doctor" / "probes").rglob("*.py"), *(ROOT / "doctor" / "readers").glob("*.py")]),
                         ids=lambda p: str(p.relative_to(ROOT / "doctor")))
def test_probes_read_the_host_only_through_host(path):
    """Everything a probe reads goes through Host (so --sysroot confinement, bundles and the trust rule hold):
    no os/subprocess/socket..., no open(). Scripts run in another interpreter are strings and do not count;
    device access that is not a file read lives in dl_doctor.host.devices."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                assert a.name.split(".")[0] not in PROBE_BANNED_MODULES, f"{path.name} imports {a.name}"
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.module.split(".")[0] not in PROBE_BANNED_MODULES, f"{path.name} imports from {node.module}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in ("open", "exec", "eval"), f"{path.name} calls {node.func.id}()"


@pytest.mark.slow
def test_the_zipapp_builds_reproducibly_and_runs(run_cli, tmp_path):
    """tools/build_zipapp.py: one file with its dependencies, the same bytes twice, runs on the box's Python. The
    second build runs in a new venv with pip alone (no wheel, no setuptools): any Python >= 3.9 with pip builds it,
    to the same bytes."""
    import hashlib
    import shutil

    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", str(bare)], check=True, timeout=300)
    builder = str(bare / "bin" / "python")
    subprocess.run([builder, "-m", "pip", "uninstall", "-q", "-y", "setuptools", "wheel"], capture_output=True,
                   timeout=300)
    gone = subprocess.run([builder, "-c", "import setuptools"], capture_output=True, timeout=60)
    assert gone.returncode != 0, "the bare venv still has setuptools"
    outs = []
    for name, python in (("a.pyz", sys.executable), ("b.pyz", builder)):
        proc = subprocess.run([python, str(ROOT / "tools" / "build_zipapp.py"), "-o", str(tmp_path / name)],
                              capture_output=True, text=True, timeout=600)
        assert "Traceback" not in proc.stderr, proc.stderr
        if proc.returncode != 0:
            assert "pip could not fetch the pinned dependencies" in proc.stderr, proc.stderr
            pytest.skip(f"cannot fetch the pinned wheels here: {proc.stderr.strip()[-300:]}")
        outs.append(hashlib.sha256((tmp_path / name).read_bytes()).hexdigest())
    assert outs[0] == outs[1]
    with zipfile.ZipFile(tmp_path / "a.pyz") as zf:
        names = zf.namelist()
    assert "__main__.py" in names and "dl_doctor/cli/__init__.py" in names and "click/__init__.py" in names
    assert not [n for n in names if n.endswith((".so", ".pyc"))]
    pythons = [p for p in (shutil.which("python3.9"), sys.executable) if p]
    r = run_cli("run", "--json", "-", "--html", "/dev/null", "--no-env-scan", "--only", "DLD-SYS-001,DLD-PLUGIN-001",
                exe=[pythons[0], str(tmp_path / "a.pyz")], env={"PYENV_VERSION": "3.9.18"}, timeout=120)
    assert r.returncode in (0, 1), r.stderr
    report = json.loads(r.stdout)
    assert {f["id"]: f["status"] for f in report["findings"]}["DLD-PLUGIN-001"] == "pass"


def test_the_facts_reference_is_current():
    """docs/facts.md is generated (tests/tools/make_facts_doc.py) from the built-in probes' provides=."""
    sys.path.insert(0, str(ROOT / "tests" / "tools"))
    try:
        import make_facts_doc
    finally:
        sys.path.pop(0)
    assert (ROOT / "docs" / "facts.md").read_text(encoding="utf-8") == make_facts_doc.render(), \
        "run: python tests/tools/make_facts_doc.py"


def test_a_planted_fifo_as_entry_points_txt_cannot_hang_the_start(run_cli, tmp_path):
    info = tmp_path / "planted-1.0.dist-info"
    info.mkdir()
    os.mkfifo(info / "entry_points.txt")
    r = run_cli("list", env=_pythonpath([tmp_path]), timeout=60)
    assert r.returncode == 0 and len(r.stdout.splitlines()) >= 45, r.stderr
