"""The consumer model on sysroot trees, end to end through the installed CLI (`dl-doctor run --sysroot`).

The ELF files are made by tests/elfkit.py with the dynamic sections the real wheels have: the TensorFlow 2.21.0 and
jax-cuda12-pjrt 0.12.0.1 layouts (RUNPATH/RPATH, build_info.py) were read from those wheels on PyPI on 2026-11-30
(too large to install in CI; see compat_matrix/data/sources.toml tf_wheel_2_21_0, jax_wheel_0_12). The DLAMI tree
is the issue's acceptance case: a conda environment with CUDA wheels, and /usr/local/cuda/lib64 on LD_LIBRARY_PATH
holding a newer patch of the same CUDA release (no failure) or an older cuDNN (a failure).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Dict, List

import pytest

from agreement import disagreements
from elfkit import SITE, dist_info, write_elf
from elfkit import conda_env as _conda_env, dlami as _dlami, torch_wheel as _torch, tree as _tree, wheels as _wheels

# TensorFlow 2.21.0: the nvidia entries of libtensorflow_framework.so.2's and libtensorflow_cc.so.2's RUNPATH
TF_FRAMEWORK_RUNPATH = [f"$ORIGIN/../nvidia/{d}/lib" for d in ("cublas", "cuda_cupti", "cuda_runtime", "cudnn", "cufft",
                                                               "cusparse", "nccl", "nvshmem")] + ["$ORIGIN/../tensorrt"]
TF_CC_RUNPATH = ["$ORIGIN/../nvidia/cusolver/lib"]
TF_BUILD_INFO = ("build_info = collections.OrderedDict([('cpu_compiler', 'clang'), ('cuda_compute_capabilities', "
                 "['sm_60', 'sm_70', 'sm_80', 'sm_89', 'compute_90']), ('cuda_version', '12.5.1'), ('cudnn_version', "
                 "'9'), ('is_cuda_build', True), ('is_rocm_build', False), ('is_tensorrt_build', False)])\n")
# jax-cuda12-pjrt 0.12.0.1: xla_cuda_plugin.so's RPATH (the ../../ twins left out)
JAX_RPATH = [f"$ORIGIN/../nvidia/{d}/lib" for d in ("cuda_cupti", "nvjitlink", "cublas", "cuda_runtime", "cudnn",
                                                    "cufft", "cusparse")] + ["$ORIGIN/../tensorrt", "$ORIGIN/../nvidia/nccl/lib"]


def _run(run_cli, root: Path, *extra: str) -> Dict[str, dict]:
    r = run_cli("run", "--sysroot", str(root), "--json", "-", "--fail-on", "never", *extra, timeout=300)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert disagreements(report) == []  # the checks of loading, the one model and the stack agree
    return {f["id"]: f for f in report["findings"]}


def test_dlami_newer_same_major_cuda_on_ld_library_path_has_no_failing_finding(run_cli, tmp_path):
    """A newer cuDNN of the same soname winning through LD_LIBRARY_PATH serves the build: no warning (issue 25: a
    healthy DLAMI is green), the note says which copy loads and why it serves."""
    findings = _run(run_cli, _dlami(tmp_path, "libcudnn.so.9.3.0"))
    problems = {i: f["message"] for i, f in findings.items() if f["status"] in ("fail", "error", "warn")
                and i.startswith("DLD-PY-")}
    assert problems == {}
    assert findings["DLD-PY-011"]["status"] == "pass", findings["DLD-PY-011"]["message"]
    assert findings["DLD-PY-012"]["status"] == "pass"
    assert findings["DLD-PY-004"]["status"] == "pass"
    assert "/usr/local/cuda-12.4/lib64/libcudnn.so.9" in findings["DLD-PY-004"]["message"]
    assert "newer (9.3.0)" in findings["DLD-PY-004"]["message"]


def test_dlami_with_an_older_cudnn_there_fails(run_cli, tmp_path):
    findings = _run(run_cli, _dlami(tmp_path, "libcudnn.so.9.0.0"))
    assert findings["DLD-PY-004"]["status"] == "fail", findings["DLD-PY-004"]["message"]
    assert "cuDNN 9.0.0 loads for a build made with cuDNN 9.1.0.70" in findings["DLD-PY-004"]["message"]
    assert findings["DLD-PY-012"]["status"] == "pass"  # the CUDA major is right: which copy wins is PY-004's
    # no fix suggests uninstalling a package that is not installed (there are no cu11 wheels here)
    commands = [c for f in findings.values() for c in (f.get("fix") or {}).get("commands") or []]
    assert commands and not [c for c in commands if "uninstall" in c]


def _tensorflow(site: Path) -> None:
    write_elf(site / "tensorflow/libtensorflow_framework.so.2", soname="libtensorflow_framework.so.2",
              needed=["libc.so.6", "libstdc++.so.6"], runpath=TF_FRAMEWORK_RUNPATH)
    write_elf(site / "tensorflow/libtensorflow_cc.so.2", soname="libtensorflow_cc.so.2",
              needed=["libtensorflow_framework.so.2", "libc.so.6"], runpath=TF_CC_RUNPATH + ["$ORIGIN"])
    (site / "tensorflow/python/platform").mkdir(parents=True)
    (site / "tensorflow/python/platform/build_info.py").write_text('"""Auto-generated."""\nimport collections\n\n'
                                                                   + TF_BUILD_INFO)
    dist_info(site, "tensorflow", "2.21.0", ["tensorflow/libtensorflow_framework.so.2",
                                             "tensorflow/libtensorflow_cc.so.2",
                                             "tensorflow/python/platform/build_info.py"])


def _venv_tree(tmp_path: Path, name: str) -> tuple:
    root = _tree(tmp_path / name, {"PATH": f"/home/u/{name}/bin:/usr/bin", "VIRTUAL_ENV": f"/home/u/{name}"})
    prefix = root / "home/u" / name
    (prefix).mkdir(parents=True)
    (prefix / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.11.9\n")
    write_elf(prefix / "bin/python3", needed=["libc.so.6"])
    (prefix / "bin/python").symlink_to("python3")
    return root, prefix / SITE


@pytest.mark.parametrize("with_wheels", [False, True])
def test_tensorflow_opens_its_cuda_libraries_from_its_runpath(run_cli, tmp_path, with_wheels):
    """tensorflow[and-cuda] works because its loader objects' RUNPATHs name the wheel directories; plain
    'pip install tensorflow' on a machine without CUDA 12 finds none of them."""
    root, site = _venv_tree(tmp_path, "tf")
    _tensorflow(site)
    if with_wheels:
        _wheels(site)
    findings = _run(run_cli, root, "--only", "DLD-PY-011,DLD-PY-012")
    f = findings["DLD-PY-011"]
    if with_wheels:
        assert f["status"] == "pass", f["message"]
        assert "tensorflow" in f["message"]
    else:
        assert f["status"] == "fail"
        for soname in ("libcudart.so.12", "libcublas.so.12", "libcudnn.so.9", "libcusolver.so.11"):
            assert soname in f["message"]
        assert "tensorflow 2.21.0 (CUDA 12)" in f["message"] and "opened with dlopen" in f["message"]
        assert any("tensorflow[and-cuda]==2.21.0" in c for c in f["fix"]["commands"])
        missing = {m["soname"]: m for m in f["evidence"]["missing"]}
        assert any("nvidia/cusolver/lib (RUNPATH)" in d for d in missing["libcusolver.so.11"]["looked_in"])


TF_DLOPEN_OVERLAY = """\
schema_version = 1
[sources.acme-tf]
url = "https://wiki.example.com/tensorflow"

[[consumer]]
name = "tensorflow"
package = "tensorflow"
build_info = "tensorflow/python/platform/build_info.py"
build_keys = { cuda = "cuda_version", cudnn = "cudnn_version" }
preload = "none"
dlopen_by = ["libtensorflow_framework.so.*", "libtensorflow_cc.so.*"]
dlopen = { "12" = ["libcudart.so.12", "libacme_collectives.so.3"] }
install = ["{python} -m pip install 'tensorflow[and-cuda]=={version}'"]
source = ["acme-tf"]
"""


def test_a_matrix_overlay_reaches_the_consumer_model(tmp_path, run_cli):
    """The probe models consumers with the run's matrix (ProbeContext.matrix), --matrix-overlay included: an
    overlay that changes TensorFlow's dlopen table changes what python_envs records."""
    root, site = _venv_tree(tmp_path, "tf")
    _tensorflow(site)
    _wheels(site)

    def recorded(*extra: str) -> dict:
        r = run_cli("run", "--sysroot", str(root), "--json", "-", "--html", "/dev/null", "--fail-on", "never",
                    "--only", "DLD-PY-011", *extra, timeout=300)
        assert r.returncode == 0, r.stderr
        report = json.loads(r.stdout)
        envs = report["facts"]["python_envs"]["environments"]
        facts = next(c for e in envs for c in e.get("consumers") or [] if c["distribution"] == "tensorflow")
        loads = next(c for e in report["loading"]["environments"] for c in e["consumers"]
                     if c["distribution"] == "tensorflow")
        return {**facts, **loads}

    builtin = recorded()
    assert builtin["dlopen"] == ["libcudart.so.12", "libcublas.so.12", "libcublasLt.so.12", "libcufft.so.11",
                                 "libcusolver.so.11", "libcusparse.so.12", "libcudnn.so.9"]
    overlay = tmp_path / "acme.toml"
    overlay.write_text(TF_DLOPEN_OVERLAY)
    overlaid = recorded("--matrix-overlay", str(overlay))
    assert overlaid["dlopen"] == ["libcudart.so.12", "libacme_collectives.so.3"]
    assert "libacme_collectives.so.3" in [m["soname"] for m in overlaid["missing"]]


@pytest.mark.parametrize("with_wheels", [False, True])
def test_jax_plugin_preloads_the_wheels(run_cli, tmp_path, with_wheels):
    root, site = _venv_tree(tmp_path, "jax")
    write_elf(site / "jax_plugins/xla_cuda12/xla_cuda_plugin.so", needed=["libc.so.6"], rpath=JAX_RPATH)
    dist_info(site, "jax-cuda12-pjrt", "0.12.0.1", ["jax_plugins/xla_cuda12/xla_cuda_plugin.so"])
    if with_wheels:
        _wheels(site)
    f = _run(run_cli, root, "--only", "DLD-PY-011")["DLD-PY-011"]
    if with_wheels:
        assert f["status"] == "pass", f["message"]
    else:
        assert f["status"] == "fail" and "jax-cuda12-pjrt 0.12.0.1 (CUDA 12)" in f["message"]
        assert any("jax[cuda12]" in c for c in f["fix"]["commands"])


def test_an_older_system_libstdcxx_that_lacks_a_needed_glibcxx_version_fails(run_cli, tmp_path):
    root = _dlami(tmp_path, "libcudnn.so.9.3.0")
    site = root / "opt/conda/envs/pytorch" / SITE
    _torch(site, verneed={"libstdc++.so.6": ["GLIBCXX_3.4.30", "CXXABI_1.3.9"]})
    # the environment's own, new enough; and an older one on LD_LIBRARY_PATH (/usr/local/lib) that wins
    write_elf(root / "opt/conda/envs/pytorch/lib/libstdc++.so.6", soname="libstdc++.so.6",
              verdef=["libstdc++.so.6", "GLIBCXX_3.4", "GLIBCXX_3.4.30", "CXXABI_1.3.9"])
    write_elf(root / "usr/local/lib/libstdc++.so.6", soname="libstdc++.so.6",
              verdef=["libstdc++.so.6", "GLIBCXX_3.4", "GLIBCXX_3.4.28", "CXXABI_1.3.9"])
    f = _run(run_cli, root, "--only", "DLD-PY-013")["DLD-PY-013"]
    assert f["status"] == "fail"
    assert "needs GLIBCXX_3.4.30 from libstdc++.so.6, which" in f["message"]
    assert "/usr/local/lib/libstdc++.so.6 does not define" in f["message"]
    (root / "usr/local/lib/libstdc++.so.6").unlink()  # the system's own copy in /lib has no version definitions
    assert _run(run_cli, root, "--only", "DLD-PY-013")["DLD-PY-013"]["status"] == "pass"


def test_grace_aarch64_skips_an_x86_64_copy_and_names_a_wrong_architecture_wheel(run_cli, tmp_path):
    root = _tree(tmp_path / "grace", {"PATH": "/opt/conda/envs/pytorch/bin:/usr/bin",
                                      "CONDA_PREFIX": "/opt/conda/envs/pytorch", "LD_LIBRARY_PATH": "/opt/x86"},
                 machine="aarch64")
    site = _conda_env(root, machine="aarch64")
    _wheels(site, machine="aarch64")
    _torch(site, machine="aarch64")
    # an x86_64 cuDNN first on LD_LIBRARY_PATH: ld.so skips a wrong-machine object and goes on searching
    write_elf(root / "opt/x86/libcudnn.so.9", soname="libcudnn.so.9", needed=["libc.so.6"])
    f = _run(run_cli, root, "--only", "DLD-PY-011,DLD-PY-012")
    assert f["DLD-PY-011"]["status"] == "pass", f["DLD-PY-011"]["message"]
    assert f["DLD-PY-012"]["status"] == "pass", f["DLD-PY-012"]["message"]
    # an x86_64 wheel of a framework installed on the Grace host
    write_elf(site / "cupy_backends/cuda/libs/cublas.cpython-311-x86_64-linux-gnu.so", needed=["libcublas.so.12"])
    dist_info(site, "cupy-cuda12x", "14.2.0", ["cupy_backends/cuda/libs/cublas.cpython-311-x86_64-linux-gnu.so"])
    f = _run(run_cli, root, "--only", "DLD-PY-011")["DLD-PY-011"]
    assert f["status"] == "fail" and "built for another architecture" in f["message"], f["message"]


def test_a_compiled_extension_built_for_another_torch_fails(run_cli, tmp_path):
    root = _dlami(tmp_path, "libcudnn.so.9.3.0")
    site = root / "opt/conda/envs/pytorch" / SITE
    write_elf(site / "libc10.so", soname="libc10.so")
    so = "flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so"
    write_elf(site / so, needed=["libc10.so", "libtorch_cuda.so", "libcudart.so.12", "libc.so.6"],
              runpath=["$ORIGIN/torch/lib", "$ORIGIN"])
    d = dist_info(site, "flash-attn", "2.6.3+cu123torch2.4cxx11abiFALSE", [so])
    (d / "WHEEL").write_text("Wheel-Version: 1.0\nTag: cp311-cp311-linux_x86_64\n")
    f = _run(run_cli, root, "--only", "DLD-PY-014")["DLD-PY-014"]
    assert f["status"] == "fail"
    assert "flash-attn 2.6.3+cu123torch2.4cxx11abiFALSE" in f["message"] and "was built for torch 2.4" in f["message"]
    assert "torch 2.5.1+cu124 is installed" in f["message"]
    (d / "METADATA").write_text("Metadata-Version: 2.1\nName: flash-attn\nVersion: 2.6.3\nRequires-Dist: torch\n")
    d.rename(site / "flash_attn-2.6.3.dist-info")
    assert _run(run_cli, root, "--only", "DLD-PY-014")["DLD-PY-014"]["status"] == "pass"


def test_a_torch_extension_that_needs_cudart_finds_the_wheels_torch_loaded(run_cli, tmp_path):
    """bitsandbytes-like: its library needs libcudart.so.12 with no RUNPATH; it is loaded after 'import torch',
    which has loaded the environment's wheel libraries by then: no false failure."""
    root = _dlami(tmp_path, "libcudnn.so.9.3.0")
    site = root / "opt/conda/envs/pytorch" / SITE
    (site / "torch/__init__.py").write_text(
        "def _load_global_deps():\n    _preload_cuda_deps(err)\n    try:\n        pass\n    except OSError:\n"
        "        pass\n\ndef _preload_cuda_deps(err=None):\n    cuda_libs = {'cublas': 'libcublas.so.*[0-9]', "
        "'cudnn': 'libcudnn.so.*[0-9]', 'cuda_runtime': 'libcudart.so.*[0-9]'}\n")
    so = "bitsandbytes/libbitsandbytes_cuda124.so"
    write_elf(site / so, needed=["libcudart.so.12", "libcublas.so.12", "libc.so.6"])
    d = dist_info(site, "bitsandbytes", "0.45.0", [so])
    (d / "METADATA").write_text("Metadata-Version: 2.1\nName: bitsandbytes\nVersion: 0.45.0\nRequires-Dist: torch<3,>=2.0\n")
    f = _run(run_cli, root, "--only", "DLD-PY-011,DLD-PY-014")
    assert f["DLD-PY-011"]["status"] == "pass", f["DLD-PY-011"]["message"]
    assert f["DLD-PY-014"]["status"] == "pass", f["DLD-PY-014"]["message"]


def test_hostile_build_info_record_and_objects_cost_only_themselves(run_cli, tmp_path):
    """1 MiB of '-a-a' as build information and RECORD lines, a FIFO and a symlink to /etc/shadow listed as
    objects, a name that is not UTF-8: the run completes, bounded, and judges the rest."""
    import os

    root, site = _venv_tree(tmp_path, "hostile")
    _tensorflow(site)
    bi = site / "tensorflow/python/platform/build_info.py"
    bi.write_text("-a" * (1 << 19) + "\n" + bi.read_text())
    d = next(site.glob("tensorflow-*.dist-info"))
    with open(d / "RECORD", "a") as fh:
        fh.write(("-a" * (1 << 19)) + ".so,x,1\n" + "tensorflow/fifo.so,x,1\ntensorflow/shadow.so,x,1\n")
    os.mkfifo(site / "tensorflow/fifo.so")
    (site / "tensorflow/shadow.so").symlink_to("/etc/shadow")
    (site / "tensorflow").joinpath(b"\xff\xfe.so".decode("utf-8", "surrogateescape")).write_bytes(b"\x7fELF")
    start = time.perf_counter()
    f = _run(run_cli, root, "--only", "DLD-PY-011")["DLD-PY-011"]
    assert time.perf_counter() - start < 120
    assert f["status"] == "fail" and "tensorflow 2.21.0" in f["message"]  # the real objects are still judged


def test_a_host_with_no_nvidia_gpu_runs_cuda_builds_on_the_cpu_without_their_gpu_libraries(run_cli, tmp_path):
    """A CPU-only host (tests/healthy.py cpu_only: no NVIDIA device on the bus) with TensorFlow's and ONNX Runtime's
    CUDA builds and none of their CUDA libraries: both run on the CPU (TensorFlow opens its libraries by name when it
    starts CUDA, ONNX Runtime opens its CUDA provider by dlopen), so nothing fails. (A library an import links is
    still a failure there: the fixture cases of DLD-PY-011.)"""
    import healthy
    from conftest import build_tree

    spec = healthy.cpu_only()
    site = next(p for p in spec if p.endswith("site-packages/torch/version.py")).rsplit("/torch/", 1)[0]
    healthy.tensorflow(spec, site)
    healthy.onnxruntime(spec, site)
    found = _run(run_cli, build_tree(tmp_path / "cpu", spec))
    assert found["DLD-PY-011"]["status"] == "pass", found["DLD-PY-011"]["message"]
    assert "runs on the CPU here" in found["DLD-PY-011"]["message"]
    assert "tensorflow" in found["DLD-PY-011"]["message"] and "onnxruntime-gpu" in found["DLD-PY-011"]["message"]
    assert found["DLD-LOAD-002"]["status"] == "skip" and "no NVIDIA GPU" in found["DLD-LOAD-002"]["message"]
