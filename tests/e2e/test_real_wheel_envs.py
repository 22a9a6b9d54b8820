"""The real-wheel environments as a gate (issue 25, item 5): each environment that tests/setup_torch_envs.sh and
tests/setup_framework_envs.sh build from PyPI (and the complete jax[cuda12] environment built once by hand) is held,
in a default run and in --deep, to the Python-environment findings listed for it here, with no other warn or fail
among the DLD-PY-* checks. The checks of other areas judge this machine (no GPU, no driver), not the environment.

Each environment is looked at alone: ``--no-env-scan --python ENV/bin/python`` (dl-doctor's own interpreter is
inspected as always; it has no CUDA consumer). Skips an environment that is not there (CI builds none of them; the
recorded trees of tests/e2e/test_recorded_env_trees.py stand in for some there).

The complete jax[cuda12] and tensorflow[and-cuda] environments are not built by the setup scripts (5-6 GB each):
    python3 -m venv ~/.cache/dl-doctor-test-envs/jax-cuda12
    ~/.cache/dl-doctor-test-envs/jax-cuda12/bin/pip install 'jax[cuda12]'
    touch ~/.cache/dl-doctor-test-envs/jax-cuda12/.complete
(tf-cuda12 likewise with 'tensorflow[and-cuda]'); tests/fixtures/envs holds both as recorded trees.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import host_has_nvidia_gpu
from dl_doctor.facts.loading import env_consumers

pytestmark = pytest.mark.slow  # about 30 s with every environment present (--deep imports each framework)

ENVS = Path(os.environ.get("DL_DOCTOR_TEST_ENVS", Path.home() / ".cache" / "dl-doctor-test-envs"))
CC = shutil.which("cc") or shutil.which("gcc")


def _ld_cache_has(soname: str) -> bool:
    """Whether this machine's ld.so.cache provides ``soname`` (a host CUDA toolkit registered with ldconfig)."""
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return any(line.strip().startswith(soname + " ") for line in out.splitlines())


# env -> {check id: status} for every DLD-PY-* check expected at warn or fail there, with why
EXPECTED = {
    "torch-2.14.1-cu130": {},
    "torch-2.13.0-cpu": {},
    "jax-0.10.2-cpu": {},
    "jax-cuda12": {},  # jax[cuda12] with every nvidia-* wheel it pulls in: healthy
    "tf-cuda12": {},  # tensorflow[and-cuda] 2.21.0, the same
    # --no-deps: the framework without its CUDA wheels, which rightly fails
    "ort-1.22.0-cu12": {"DLD-PY-011": "fail"},
    "cupy-14.2.0-cu12": {"DLD-PY-011": "fail"},
    "ct2-4.8.5": {"DLD-PY-011": "fail"},
    # onnxruntime-gpu 1.31.1 beside torch cu130: its CUDA provider finds the wheels' cuBLAS/cuDNN only after
    # onnxruntime.preload_dlls() or import torch (its RUNPATH is $ORIGIN): a warning someone acts on
    "torch-ort-cu130": {"DLD-PY-011": "warn"},
    # onnxruntime-gpu 1.22.0 (CUDA 12) beside torch cu130 (CUDA 13): its provider cannot load, and two CUDA majors
    "torch-ort12-cu130": {"DLD-PY-011": "fail", "DLD-PY-012": "warn"},
}
# On a host with no NVIDIA GPU (this machine and CI) a CUDA build runs on the CPU: the libraries only its GPU path
# loads (opened by name, or by a provider opened by dlopen) are a note of DLD-PY-011's pass there, not a failure
# (CuPy's import links its CUDA libraries: that still fails)
EXPECTED_WITHOUT_GPU = {"ort-1.22.0-cu12": {}, "ct2-4.8.5": {}, "torch-ort-cu130": {},
                        "torch-ort12-cu130": {"DLD-PY-012": "warn"}}


# Python-environment checks whose status here comes from this machine, not the environment
HOST = {"DLD-PY-002": "a CUDA build on a host with no NVIDIA driver (this container's; a GPU host passes)"}

# Findings held strictly as known false (none now: the fixes of issue 25 turned the last two green)
KNOWN: dict = {}


def _present(name: str) -> bool:
    prefix = ENVS / name
    return (prefix / "bin" / "python").exists() and (
        (prefix / ".complete").exists() or name.startswith("torch-2."))  # setup_torch_envs.sh writes no marker


def _python_findings(run_cli, name: str, deep: bool, env=None) -> dict:
    args = ["run", "--no-env-scan", "--python", str(ENVS / name / "bin" / "python"), "--json", "-",
            "--fail-on", "never"] + (["--deep"] if deep else [])
    r = run_cli(*args, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    mine = [e for e in report["facts"]["python_envs"]["environments"] if e.get("role") == "requested"]
    assert mine and not mine[0].get("error") and "consumers_error" not in mine[0], mine
    return {f["id"]: f for f in report["findings"] if f["id"].startswith("DLD-PY-")}


@pytest.mark.parametrize("deep", [False, True], ids=["default", "deep"])
@pytest.mark.parametrize("name", [pytest.param(n, marks=[KNOWN[n]] if n in KNOWN else []) for n in EXPECTED])
def test_a_real_wheel_environment_has_only_its_listed_findings(run_cli, name, deep):
    if not _present(name):
        pytest.skip(f"no {name} environment at {ENVS} (tests/setup_*_envs.sh builds it)")
    findings = _python_findings(run_cli, name, deep)
    got = {i: f["status"] for i, f in findings.items() if f["status"] in ("warn", "fail") and i not in HOST}
    expected = EXPECTED[name] if host_has_nvidia_gpu() else EXPECTED_WITHOUT_GPU.get(name, EXPECTED[name])
    assert got == expected, {i: findings[i]["message"] for i in set(got) | set(expected) if i in findings}
    if expected != EXPECTED[name]:
        assert "runs on the CPU here" in findings["DLD-PY-011"]["message"], findings["DLD-PY-011"]["message"]
    for i in HOST:  # this machine's finding names the machine, never the environment's libraries
        if i in findings and findings[i]["status"] in ("warn", "fail"):
            assert "no NVIDIA driver" in findings[i]["message"], findings[i]["message"]


@pytest.fixture(scope="module")
def older_nvjitlink(tmp_path_factory) -> Path:
    """A directory holding an older libnvJitLink.so.13 (13.0.39; the wheel's is 13.5.37), built from C, as an older
    CUDA 13 toolkit would put it on LD_LIBRARY_PATH."""
    if CC is None:
        pytest.skip("no C compiler for the older libnvJitLink")
    if not _present(T214):
        pytest.skip(f"no {T214} environment at {ENVS}")
    d = tmp_path_factory.mktemp("cuda-13.0-old") / "lib64"
    d.mkdir()
    src = d.parent / "nvjitlink.c"
    src.write_text("int nvJitLinkVersion(unsigned *major, unsigned *minor) { *major = 13; *minor = 0; return 0; }\n")
    subprocess.run([CC, "-shared", "-fPIC", "-Wl,-soname,libnvJitLink.so.13", "-o",
                    str(d / "libnvJitLink.so.13.0.39"), str(src)], check=True)
    (d / "libnvJitLink.so.13").symlink_to("libnvJitLink.so.13.0.39")
    return d


T214 = "torch-2.14.1-cu130"
_reports: dict = {}


def _with_older_nvjitlink(run_cli, old: Path, deep: bool) -> dict:
    if deep not in _reports:
        r = run_cli("run", "--no-env-scan", "--python", str(ENVS / T214 / "bin" / "python"), "--json", "-",
                    "--fail-on", "never", *(["--deep"] if deep else []), env={"LD_LIBRARY_PATH": str(old)},
                    timeout=600)
        assert r.returncode == 0, r.stderr
        _reports[deep] = json.loads(r.stdout)
    report = _reports[deep]
    env = next(e for e in report["facts"]["python_envs"]["environments"] if e.get("role") == "requested")
    loads = {c["distribution"]: {lib["soname"]: lib for lib in c["libraries"]}
             for c in env_consumers(report["loading"], env)}
    return {"env": env, "findings": {f["id"]: f for f in report["findings"]}, "loads": loads,
            "wheel": str(next((ENVS / T214).glob("lib/python3*/site-packages")) / "nvidia/cu13/lib/libnvJitLink.so.13")}


def test_an_older_nvjitlink_on_ld_library_path_is_not_what_loads(run_cli, older_nvjitlink):
    """Issue 25's torch 2.14.1 cu130 with an older libnvJitLink on LD_LIBRARY_PATH: torch preloads its own copy by
    absolute path (torch/__init__.py _preload_cuda_deps names nvjitlink), so the wheel's is what loads: --deep maps
    it, and the one resolution model (the report's loading, which every check reads) says so."""
    got = _with_older_nvjitlink(run_cli, older_nvjitlink, deep=True)
    mapped = got["env"]["deep"]["mapped"]
    assert got["wheel"] in mapped and not [m for m in mapped if m.startswith(str(older_nvjitlink))]
    assert got["loads"]["torch"]["libnvJitLink.so.13"]["path"] == got["wheel"]
    assert got["findings"]["DLD-PY-004"]["status"] == "pass"
    deep = got["env"]["deep_consumers"]["torch"]
    assert got["wheel"] in deep["mapped_cuda"] and not [m for m in deep["mapped_cuda"] if "cuda-13.0-old" in m]


@pytest.mark.parametrize("deep", [False, True], ids=["default", "deep"])
def test_an_older_nvjitlink_on_ld_library_path_is_no_py012_finding(run_cli, older_nvjitlink, deep):
    got = _with_older_nvjitlink(run_cli, older_nvjitlink, deep)
    assert got["loads"]["torch"]["libnvJitLink.so.13"]["path"] == got["wheel"]
    assert got["findings"]["DLD-PY-004"]["status"] == "pass", got["findings"]["DLD-PY-004"]["message"]
    assert got["findings"]["DLD-PY-012"]["status"] == "pass", got["findings"]["DLD-PY-012"]["message"]


def test_why_asks_the_environment_the_error_came_from_which_copy_of_the_library_loads(run_cli):
    """why --python ENV: the soname the error names, answered by the one resolution model on a real torch 2.14 env
    (its own cuDNN wheel, preloaded): the cause 'not installed where the loader looks' is argued against."""
    if not (ENVS / T214 / "bin" / "python").exists():
        pytest.skip(f"no {T214} environment at {ENVS}")
    r = run_cli("why", "--json", "-", "--python", str(ENVS / T214 / "bin" / "python"),
                "ImportError: libcudnn.so.9: cannot open shared object file: No such file or directory", timeout=300)
    assert r.returncode in (0, 1), r.stderr
    out = json.loads(r.stdout)
    (cudnn,) = [a for a in out["machine"] if a["entity"] == {"kind": "soname", "value": "libcudnn.so.9"}]
    mine = [x for x in cudnn["answers"] if x.startswith(f"{T214}: torch ")]
    assert mine and "site-packages/nvidia/cudnn/lib/libcudnn.so.9 (found via preloaded by torch" in mine[0], cudnn
    assert mine[0].endswith(": own")
    verdicts = {c["id"]: c["verdict"] for c in out["causes"]}
    assert verdicts["framework-library-missing"] == "unlikely", out["causes"]
