"""--deep does what the framework does before it opens its libraries (doctor/probes/python_envs/live.py _START),
and opens a library by name as the object that opens it would (its RPATH/RUNPATH: live.py _dlopen_dirs).

jax-cuda12-pjrt's import package is the namespace jax_plugins: jax imports jax_plugins.xla_cuda12 and calls its
initialize() -- which loads the nvidia-* wheel libraries by absolute path -- when its backends start, not at import.
In a clean real jax[cuda12] environment, 0.2's --deep imported jax_plugins alone and opened libcudart.so.12 by name
from the interpreter, which finds none of the wheels' libraries: a false DLD-PY-011 (issue 25). Here a stand-in
environment does what jax 0.10.2 does, with libraries built from C, so the test runs without the 5 GB environment
(tests/e2e/test_real_wheel_envs.py holds the real one where it is built).

TensorFlow 2.21 ([and-cuda]) opens cuBLAS, cuFFT, cuDNN ... with dlopen from libtensorflow_framework.so.2, whose
RUNPATH names the nvidia-* wheel directories, at its first GPU use (never on a host without a driver): opened by name
from the interpreter they are not found, the same false DLD-PY-011 under --deep in a clean tensorflow[and-cuda]
venv."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dl_doctor.facts.loading import env_consumers

from elfkit import dist_info, write_elf

CC = shutil.which("cc") or shutil.which("gcc")
LIBS = {"cuda_runtime": ["libcudart.so.12"], "cublas": ["libcublas.so.12", "libcublasLt.so.12"],
        "cufft": ["libcufft.so.11"], "cusolver": ["libcusolver.so.11"], "cusparse": ["libcusparse.so.12"],
        "cudnn": ["libcudnn.so.9"], "nvjitlink": ["libnvJitLink.so.12"]}

JAX_INIT = '''
import os
def devices():
    # jax._src.xla_bridge.discover_pjrt_plugins: each jax_plugins.* module's initialize(), then the backends
    if os.environ.get("JAX_PLATFORMS") != "cpu":
        raise RuntimeError("would make a GPU client: JAX_PLATFORMS=%r" % os.environ.get("JAX_PLATFORMS"))
    import jax_plugins.xla_cuda12 as plugin
    plugin.initialize()
    return ["CpuDevice(id=0)"]
'''
PLUGIN_INIT = '''
import ctypes, importlib, pathlib
def _load(module, libraries):
    m = importlib.import_module("nvidia." + module)
    for lib in libraries:
        ctypes.cdll.LoadLibrary(str(pathlib.Path(m.__path__[0]) / "lib" / lib))
def initialize():  # jax_plugins/xla_cuda12/__init__.py _load_nvidia_libraries(), by absolute path
    for module, libraries in %r.items():
        _load(module, libraries)
''' % (LIBS,)


def _venv_with_wheels(tmp_path: Path, name: str) -> Path:
    """A venv whose nvidia-* wheel directories hold LIBS, built from C (loadable: --deep loads them)."""
    prefix = tmp_path / name
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True)
    site = next(prefix.glob("lib/python3*/site-packages"))
    src = tmp_path / "stub.c"
    src.write_text("int dld_stub(void) { return 0; }\n")
    for module, sonames in LIBS.items():
        lib = site / "nvidia" / module / "lib"
        lib.mkdir(parents=True)
        (site / "nvidia" / module / "__init__.py").write_text("")
        for soname in sonames:
            subprocess.run([CC, "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(lib / soname), str(src)],
                           check=True)
    return prefix


def _jax_cuda12_env(tmp_path: Path) -> Path:
    prefix = _venv_with_wheels(tmp_path, "jax-cuda12")
    site = next(prefix.glob("lib/python3*/site-packages"))
    (site / "jax").mkdir()
    (site / "jax" / "__init__.py").write_text(JAX_INIT)
    plugin = site / "jax_plugins" / "xla_cuda12"
    plugin.mkdir(parents=True)
    (plugin / "__init__.py").write_text(PLUGIN_INIT)
    # the plugin itself needs no CUDA library (it opens them by name): an ELF object with its RPATH
    write_elf(plugin / "xla_cuda_plugin.so", needed=["libc.so.6"],
              rpath=[f"$ORIGIN/../../nvidia/{m}/lib" for m in LIBS])
    dist_info(site, "jax_cuda12_pjrt", "0.10.2", ["jax_plugins/xla_cuda12/__init__.py",
                                                 "jax_plugins/xla_cuda12/xla_cuda_plugin.so"])
    return prefix


@pytest.mark.skipif(CC is None, reason="no C compiler for the stand-in CUDA libraries")
def test_deep_starts_jax_so_its_plugin_preloads_the_wheels(run_cli, tmp_path):
    prefix = _jax_cuda12_env(tmp_path)
    python = prefix / "bin" / "python"
    for deep in (False, True):
        r = run_cli("run", "--no-env-scan", "--python", str(python), "--only", "DLD-PY-011", "--json", "-",
                    "--fail-on", "never", *(["--deep"] if deep else []), timeout=300)
        assert r.returncode == 0, r.stderr
        report = json.loads(r.stdout)
        env = next(e for e in report["facts"]["python_envs"]["environments"] if e.get("role") == "requested")
        consumer = next(c for c in env_consumers(report["loading"], env) if c["distribution"] == "jax-cuda12-pjrt")
        assert consumer["dlopen"] and not consumer["missing"]  # every library found in the wheels
        finding = next(f for f in report["findings"] if f["id"] == "DLD-PY-011")
        assert finding["status"] == "pass", finding["message"]
    steps = env["deep_consumers"]["jax-cuda12-pjrt"]["steps"]
    assert steps[0] == {"kind": "import", "name": "jax", "error": None, "missing": None}
    assert [s["name"] for s in steps if s["kind"] == "dlopen" and not s["error"]] == consumer["dlopen"]
    mapped = env["deep_consumers"]["jax-cuda12-pjrt"]["mapped_cuda"]
    assert any(m.endswith("/nvidia/cuda_runtime/lib/libcudart.so.12") for m in mapped), mapped


def _tensorflow_env(tmp_path: Path) -> Path:
    prefix = _venv_with_wheels(tmp_path, "tf-cuda12")
    site = next(prefix.glob("lib/python3*/site-packages"))
    (site / "tensorflow" / "python" / "platform").mkdir(parents=True)
    (site / "tensorflow" / "__init__.py").write_text("")  # a GPU is what makes it open its libraries: none here
    (site / "tensorflow" / "python" / "platform" / "build_info.py").write_text(
        "import collections\nbuild_info = collections.OrderedDict([('cuda_version', '12.5.1'), "
        "('cudnn_version', '9'), ('is_cuda_build', True)])\n")
    # the object that opens them (never loaded here: an ELF object with TensorFlow 2.21's RUNPATH)
    write_elf(site / "tensorflow" / "libtensorflow_framework.so.2", soname="libtensorflow_framework.so.2",
              needed=["libc.so.6"], runpath=[f"$ORIGIN/../nvidia/{m}/lib" for m in LIBS])
    dist_info(site, "tensorflow", "2.21.0", ["tensorflow/__init__.py", "tensorflow/libtensorflow_framework.so.2",
                                             "tensorflow/python/platform/build_info.py"])
    return prefix


@pytest.mark.skipif(CC is None, reason="no C compiler for the stand-in CUDA libraries")
def test_deep_opens_a_library_through_the_runpath_of_the_object_that_opens_it(run_cli, tmp_path):
    python = _tensorflow_env(tmp_path) / "bin" / "python"
    r = run_cli("run", "--no-env-scan", "--python", str(python), "--deep", "--only", "DLD-PY-011", "--json", "-",
                "--fail-on", "never", timeout=300)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    env = next(e for e in report["facts"]["python_envs"]["environments"] if e.get("role") == "requested")
    consumer = next(c for c in env_consumers(report["loading"], env) if c["distribution"] == "tensorflow")
    assert consumer["dlopen"] and not consumer["missing"]
    finding = next(f for f in report["findings"] if f["id"] == "DLD-PY-011")
    assert finding["status"] == "pass", finding["message"]
    deep = env["deep_consumers"]["tensorflow"]
    assert [s["name"] for s in deep["steps"] if s["kind"] == "dlopen" and not s["error"]] == consumer["dlopen"]
    assert any(m.endswith("/nvidia/cudnn/lib/libcudnn.so.9") for m in deep["mapped_cuda"]), deep["mapped_cuda"]


@pytest.mark.skipif(CC is None, reason="no C compiler for the stand-in CUDA libraries")
def test_deep_still_names_a_library_that_is_nowhere(run_cli, tmp_path):
    """The caller's directories are where the real loader is pointed, not a pass: a library that is not there
    stays missing in --deep."""
    prefix = _tensorflow_env(tmp_path)
    site = next(prefix.glob("lib/python3*/site-packages"))
    (site / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9").unlink()
    r = run_cli("run", "--no-env-scan", "--python", str(prefix / "bin" / "python"), "--deep", "--only",
                "DLD-PY-011", "--json", "-", "--fail-on", "never", timeout=300)
    report = json.loads(r.stdout)
    env = next(e for e in report["facts"]["python_envs"]["environments"] if e.get("role") == "requested")
    step = next(s for s in env["deep_consumers"]["tensorflow"]["steps"] if s["name"] == "libcudnn.so.9")
    assert step["missing"] == "libcudnn.so.9"
    finding = next(f for f in report["findings"] if f["id"] == "DLD-PY-011")
    assert "libcudnn.so.9" in finding["message"], finding["message"]
    assert [m["soname"] for m in finding["evidence"]["missing"]] == ["libcudnn.so.9"]
    # TensorFlow opens cuDNN by name when it starts CUDA: on a host with no NVIDIA GPU (this test machine, CI) it runs
    # on the CPU, a note; with a GPU the same missing library fails
    gpus = report["facts"]["gpu_pci"].get("gpu_count")
    assert finding["status"] == ("pass" if gpus == 0 else "fail"), finding["message"]
