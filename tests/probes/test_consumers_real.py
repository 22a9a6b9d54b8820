"""The consumer model against the real dynamic loader, on real framework wheels from PyPI.

tests/setup_framework_envs.sh installs onnxruntime-gpu 1.22.0 (CUDA 12), cupy-cuda12x 14.2.0 and ctranslate2 4.8.5
into plain environments without their CUDA wheels, and onnxruntime-gpu 1.31.1 (CUDA 13) into a copy of the torch
2.14.1 cu130 environment. The ground truth is glibc itself: a fresh interpreter per object that calls
``ctypes.CDLL`` on it, with a stand-in ``libcuda.so.1`` built here from C (defining the driver entry points the
objects import) on LD_LIBRARY_PATH, so the absent GPU driver is not what fails. dl-doctor's prediction for the same
environment, with the same LD_LIBRARY_PATH, must name the library the loader could not find; an object the loader
loads must have no predicted missing library. Skips where the environments or a C compiler are not there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ENVS = Path(os.environ.get("DL_DOCTOR_TEST_ENVS", Path.home() / ".cache" / "dl-doctor-test-envs"))
REAL = {name: ENVS / name for name in ("ort-1.22.0-cu12", "cupy-14.2.0-cu12", "ct2-4.8.5", "torch-ort-cu130",
                                       "torch-ort12-cu130")}
NOT_FOUND = re.compile(r"([\w.+-]+\.so[\w.]*): cannot open shared object file")


def _present(name: str) -> bool:
    return (REAL[name] / ".complete").exists() and (REAL[name] / "bin" / "python").exists()


@pytest.fixture(scope="module")
def stub_dir(tmp_path_factory):
    """A directory holding a stand-in libcuda.so.1 that exports every driver entry point (cuXxx) the test objects
    import, built from C source."""
    if not shutil.which("gcc") or not shutil.which("nm"):
        pytest.skip("needs gcc and nm to build the stand-in libcuda.so.1")
    names = set()
    for name in REAL:
        if not _present(name):
            continue
        for so in REAL[name].rglob("*.so*"):
            if so.is_file() and not so.is_symlink() and "site-packages" in str(so):
                out = subprocess.run(["nm", "-D", "--undefined-only", str(so)], capture_output=True, text=True).stdout
                names |= set(re.findall(r"\bU (cu[A-Z]\w*)", out))
    d = tmp_path_factory.mktemp("stub-driver")
    src = d / "libcuda.c"
    # every entry point answers CUDA_ERROR_NO_DEVICE (100): initializers that probe the driver give up cleanly
    src.write_text("".join(f"int {n}(void) {{ return 100; }}\n" for n in sorted(names)) or "int cuInit(void) { return 100; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(d / "libcuda.so.1"), str(src)],
                   check=True)
    return d


def _env(stub_dir) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH")}
    env.update(_stub(stub_dir))
    return env


def _stub(stub_dir) -> dict:
    """What dl-doctor's clean environment (run_cli) gets: the stand-in libcuda.so.1 on the library path."""
    return {"LD_LIBRARY_PATH": str(stub_dir)}


def _truth(python: Path, stub_dir, target: str, first: str = "") -> str:
    """'' when the real loader loads ``target`` (a path or a soname) in a fresh process, else its error.

    An onnxruntime provider is loaded as onnxruntime loads it: after libonnxruntime_providers_shared.so, with
    RTLD_GLOBAL (the provider takes Provider_GetHost from it)."""
    shared = Path(target).parent / "libonnxruntime_providers_shared.so"
    if "/onnxruntime/capi/" in target and shared.exists():
        first += f"\nimport os\nctypes.CDLL({str(shared)!r}, mode=os.RTLD_GLOBAL)"
    code = f"import ctypes, sys\n{first}\nctypes.CDLL(sys.argv[1])\n"
    env = _env(stub_dir)
    env["LD_DEBUG"] = "files"  # the loader says when it has mapped and bound an object and starts its initializer
    r = subprocess.run([str(python), "-W", "ignore", "-c", code, target], capture_output=True, text=True, env=env,
                       timeout=120)
    if r.returncode == 0:
        return ""
    if "/" in target and re.search(r"calling init: " + re.escape(target) + r"\s*$", r.stderr, re.M):
        return ""  # every library found and every symbol bound; only its own initializer failed without a GPU
    error = next((line for line in reversed(r.stderr.splitlines()) if line.startswith("OSError")), "")
    return error or (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]


_facts_cache: dict = {}


def _consumers(run_cli, name: str, stub_dir) -> list:
    if name not in _facts_cache:
        out = Path(str(stub_dir)) / f"facts-{name}.json"
        r = run_cli("collect", "--no-env-scan", "--python", str(REAL[name] / "bin" / "python"), "-o", str(out),
                    env=_stub(stub_dir), timeout=300)
        assert r.returncode == 0, r.stderr
        facts = json.loads(out.read_text())["facts"]
        env = next(e for e in facts["python_envs"]["environments"] if e.get("role") == "requested")
        assert "consumers_error" not in env, env.get("consumers_error")
        _facts_cache[name] = _predicted(env)
    return _facts_cache[name]


def _predicted(env: dict) -> list:
    """The environment's consumers with the loading the one model predicts from the recorded loader inputs
    (dl_doctor.facts.loading), without --deep's truth."""
    from dl_doctor.compat_matrix import load
    from dl_doctor.facts.loading import env_consumers, model

    bare = {k: v for k, v in env.items() if k not in ("deep", "deep_consumers")}
    return env_consumers(model({"python_envs": {"environments": [bare]}}, load()), bare)


def _site(name: str) -> Path:
    return next(REAL[name].glob("lib/python3*/site-packages"))


def _objects(name: str, distribution: str) -> list:
    """The objects of ``distribution`` that need a CUDA library (what the model calls its CUDA objects)."""
    from dl_doctor.readers.consumers import is_cuda_library
    from dl_doctor.readers.elf import read_dynamic
    from dl_doctor.host import Host

    site = _site(name)
    dist_info = next(site.glob(f"{distribution.replace('-', '_')}-*.dist-info"))
    out = []
    for line in (dist_info / "RECORD").read_text().splitlines():
        rel = line.split(",", 1)[0]
        if re.search(r"\.so(\.[0-9.]+)?$", rel):
            dyn = read_dynamic(Host(), str(site / rel))
            if dyn and any(is_cuda_library(n) for n in dyn["needed"]):
                out.append(rel)
    return sorted(out)


CASES = [("ort-1.22.0-cu12", "onnxruntime-gpu"), ("cupy-14.2.0-cu12", "cupy-cuda12x"),
         ("torch-ort-cu130", "onnxruntime-gpu"), ("torch-ort12-cu130", "onnxruntime-gpu")]


@pytest.mark.parametrize("name,distribution", CASES)
def test_prediction_equals_the_real_loader_for_every_cuda_object(run_cli, name, distribution, stub_dir):
    if not _present(name):
        pytest.skip(f"{name} not set up (tests/setup_framework_envs.sh)")
    consumer = next(c for c in _consumers(run_cli, name, stub_dir) if c["distribution"] == distribution)
    objects = _objects(name, distribution)
    assert objects, "the wheel has objects that need CUDA libraries"
    assert consumer["cuda_objects"] == len(objects)
    python = REAL[name] / "bin" / "python"
    compared = 0
    for rel in objects:
        truth = _truth(python, stub_dir, str(_site(name) / rel))
        predicted = {m["soname"] for m in consumer["missing"] if m["needed_by"] == rel and m["how"] == "DT_NEEDED"}
        if truth:
            m = NOT_FOUND.search(truth)
            assert m, f"{rel}: the loader failed for another reason than a missing library: {truth}"
            assert m.group(1) in predicted, f"{rel}: loader cannot find {m.group(1)}; dl-doctor predicted {predicted}"
        else:
            assert not predicted, f"{rel}: the loader loads it; dl-doctor predicted missing {predicted}"
        compared += 1
    assert compared == len(objects)


def test_cupy_without_cuda_wheels_misses_cublas_and_optional_cutensor_is_marked(run_cli, stub_dir):
    if not _present("cupy-14.2.0-cu12"):
        pytest.skip("cupy env not set up")
    c = next(c for c in _consumers(run_cli, "cupy-14.2.0-cu12", stub_dir) if c["distribution"] == "cupy-cuda12x")
    assert c["cuda_major"] == 12 and c["cuda_major_from"] == "distribution name"
    by = {m["soname"]: m for m in c["missing"]}
    if "libcublas.so.12" in by:  # unless this machine has a CUDA 12 cuBLAS in ld.so.cache
        assert by["libcublas.so.12"]["optional"] is False
    assert by["libcutensor.so.2"]["optional"] is True


def test_dlopen_prediction_equals_the_loader_ctranslate2(run_cli, stub_dir):
    if not _present("ct2-4.8.5"):
        pytest.skip("ctranslate2 env not set up")
    c = next(c for c in _consumers(run_cli, "ct2-4.8.5", stub_dir) if c["distribution"] == "ctranslate2")
    assert c["dlopen"] == ["libcublas.so.12"] and c["cuda_major"] == 12
    predicted = {m["soname"] for m in c["missing"] if m["how"] == "dlopen"}
    truth = _truth(REAL["ct2-4.8.5"] / "bin" / "python", stub_dir, "libcublas.so.12")
    assert ("libcublas.so.12" in predicted) == bool(truth), truth


def test_onnxruntime_cuda13_beside_torch_cuda13_loads_after_import_torch(run_cli, stub_dir):
    """The documented remedy: torch of the same CUDA major preloads the wheels; the provider then loads."""
    if not _present("torch-ort-cu130"):
        pytest.skip("torch-ort-cu130 env not set up")
    c = next(c for c in _consumers(run_cli, "torch-ort-cu130", stub_dir) if c["distribution"] == "onnxruntime-gpu")
    provider = str(_site("torch-ort-cu130") / "onnxruntime/capi/libonnxruntime_providers_cuda.so")
    python = REAL["torch-ort-cu130"] / "bin" / "python"
    required = {m["soname"] for m in c["missing"] if not m["optional"]}
    alone = _truth(python, stub_dir, provider)
    assert bool(alone) == bool(required), (alone, required)
    assert _truth(python, stub_dir, provider, first="import torch") == ""
    # the model says the opt-in preload (or torch) finds every required library in the environment's wheels
    assert set(c["fixed_by_preload"] or []) == required
    assert all(m["in_wheels"] for m in c["missing"] if not m["optional"])


def _gpu_path_only_on_this_host(name: str) -> bool:
    """On a host with no NVIDIA GPU, DLD-PY-011 notes (not fails) the libraries only a build's GPU path loads: ONNX
    Runtime's CUDA provider, CTranslate2's cuBLAS (CuPy's import links its libraries: it still fails)."""
    from conftest import host_has_nvidia_gpu

    return name in ("ort-1.22.0-cu12", "ct2-4.8.5", "torch-ort-cu130", "torch-ort12-cu130") and \
        not host_has_nvidia_gpu()


@pytest.mark.parametrize("name,status,words", [
    ("ort-1.22.0-cu12", "fail", ["onnxruntime-gpu", "libcublas.so.12", "onnxruntime-gpu[cuda,cudnn]==1.22.0"]),
    ("cupy-14.2.0-cu12", "fail", ["cupy-cuda12x", "libcusolver.so.11", "cupy-cuda12x[ctk]==14.2.0"]),
    ("ct2-4.8.5", "fail", ["ctranslate2", "libcublas.so.12", "dlopen"]),
    ("torch-ort-cu130", "warn", ["onnxruntime-gpu", "preload_dlls()"]),
])
def test_cli_finding_per_framework(run_cli, name, status, words, stub_dir, tmp_path):
    if not _present(name):
        pytest.skip(f"{name} not set up")
    r = run_cli("run", "--no-env-scan", "--python", str(REAL[name] / "bin" / "python"), "--only", "DLD-PY-011",
                "--json", "-", "--fail-on", "never", env=_stub(tmp_path), timeout=300)
    assert r.returncode == 0, r.stderr
    finding = next(f for f in json.loads(r.stdout)["findings"] if f["id"] == "DLD-PY-011")
    text = json.dumps(finding)
    if status == "fail" and "ld.so.cache" in text and finding["status"] != "fail":
        pytest.skip("this machine's ld.so.cache provides the libraries")
    if _gpu_path_only_on_this_host(name):
        # no NVIDIA GPU here (CI): the build runs on the CPU, and libraries only its GPU path loads are a note
        assert finding["status"] == "pass" and "runs on the CPU here" in finding["message"], finding["message"]
        assert words[0] in finding["message"], finding["message"]
        return
    assert finding["status"] == status, finding["message"]
    for w in words:
        assert w in text, (w, finding["message"])


def test_deep_imports_each_framework_and_the_truth_matches_the_prediction(run_cli, stub_dir):
    """--deep loads every CUDA object of every consumer in a subprocess of the environment's own interpreter; the
    library the real loader could not find is one the static prediction named for that object."""
    if not _present("torch-ort-cu130"):
        pytest.skip("torch-ort-cu130 env not set up")
    out = Path(str(stub_dir)) / "deep.json"
    r = run_cli("collect", "--deep", "--no-env-scan", "--python", str(REAL["torch-ort-cu130"] / "bin" / "python"),
                "-o", str(out), env=_stub(stub_dir), timeout=600)
    assert r.returncode == 0, r.stderr
    env = next(e for e in json.loads(out.read_text())["facts"]["python_envs"]["environments"]
               if e.get("role") == "requested")
    deep = env["deep_consumers"]
    assert {"torch", "onnxruntime-gpu"} <= set(deep)
    assert next(s for s in deep["torch"]["steps"] if s["kind"] == "import")["error"] is None
    assert any("/nvidia/cu13/lib/libcudart.so.13" in p for p in deep["torch"]["mapped_cuda"])
    consumer = next(c for c in _predicted(env) if c["distribution"] == "onnxruntime-gpu")
    step = next(s for s in deep["onnxruntime-gpu"]["steps"]
                if s["name"] == "onnxruntime/capi/libonnxruntime_providers_cuda.so")
    predicted = {m["soname"] for m in consumer["missing"] if m["needed_by"] == step["name"]}
    assert step["missing"] in predicted, (step, predicted)


def test_cuda12_onnxruntime_beside_cuda13_torch_fails_where_0_1_passed(run_cli, stub_dir, tmp_path):
    """The issue's mixed environment: 0.1 passed 'the environment loads its own CUDA libraries' while the CUDA
    provider cannot load (it needs .so.12 sonames; the environment's wheels are CUDA 13)."""
    if not _present("torch-ort12-cu130"):
        pytest.skip("torch-ort12-cu130 env not set up")
    provider = str(_site("torch-ort12-cu130") / "onnxruntime/capi/libonnxruntime_providers_cuda.so")
    python = REAL["torch-ort12-cu130"] / "bin" / "python"
    assert "cannot open shared object file" in _truth(python, stub_dir, provider, first="import torch")
    r = run_cli("run", "--no-env-scan", "--python", str(python), "--only", "DLD-PY-004,DLD-PY-011,DLD-PY-012",
                "--json", "-", "--fail-on", "never", env=_stub(stub_dir), timeout=300)
    findings = {f["id"]: f for f in json.loads(r.stdout)["findings"]}
    if _gpu_path_only_on_this_host("torch-ort12-cu130"):  # no NVIDIA GPU here: the provider is never opened
        assert findings["DLD-PY-011"]["status"] == "pass"
        assert "onnxruntime-gpu (torch-ort12-cu130) runs on the CPU here" in findings["DLD-PY-011"]["message"]
        assert "libcublas.so.12" in findings["DLD-PY-011"]["message"]
    else:
        assert findings["DLD-PY-011"]["status"] == "fail"
        assert "onnxruntime-gpu 1.22.0 (CUDA 12)" in findings["DLD-PY-011"]["message"]
        assert "libcublas.so.12" in findings["DLD-PY-011"]["message"]
        assert any("onnxruntime-gpu[cuda,cudnn]==1.22.0" in c for c in findings["DLD-PY-011"]["fix"]["commands"])
    assert "onnxruntime-gpu (CUDA 12), torch (CUDA 13)" in json.dumps(findings["DLD-PY-012"])
