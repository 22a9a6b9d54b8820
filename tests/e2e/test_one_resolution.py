"""One truth of what loads (issue 25): every check that judges loading, and every view, reads the one resolution
model (dl_doctor.facts.loading, the report's ``loading``), computed from the raw loader inputs the probe recorded.

The trees are the issue's false failures, rebuilt with real ELF objects (tests/elfkit.py): a Deep Learning AMI whose
LD_LIBRARY_PATH puts the toolkit's libnvToolsExt.so.1.0.0 (NVTX's own numbering) before the wheel's (12.4.99); a
torch that preloads its own libnvJitLink by absolute path (2.14's _load_global_deps) while an older copy is on
LD_LIBRARY_PATH; and the same with a torch that preloads only on failure, where the older copy really loads and
cuSPARSE would fail on it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

from agreement import disagreements
from elfkit import dist_info, dlami, write_elf
from dl_doctor.reports import stack

# torch/__init__.py as 2.14 writes it (the parts dl-doctor reads): the wheels are preloaded after
# libtorch_global_deps whenever libcudart got loaded ("always"), or only when it fails to load ("on-failure").
TORCH_INIT_ALWAYS = '''
def _preload_cuda_deps(err=None, required=True):
    cuda_libs = [
        ("cublas", "libcublasLt.so.*[0-9]"),
        ("cublas", "libcublas.so.*[0-9]"),
        ("cudnn", "libcudnn.so.*[0-9]"),
        ("cuda_runtime", "libcudart.so.*[0-9]"),
        ("cufft", "libcufft.so.*[0-9]"),
        ("nvjitlink", "libnvJitLink.so.*[0-9]"),
        ("cusparse", "libcusparse.so.*[0-9]"),
        ("nccl", "libnccl.so.*[0-9]"),
    ]

def _load_global_deps():
    try:
        ctypes.CDLL(global_deps_lib_path, mode=ctypes.RTLD_GLOBAL)
        try:
            if "libcudart.so" not in _maps:
                return
            _preload_cuda_deps(required=False)
        except Exception:
            pass
    except OSError as err:
        _preload_cuda_deps(err)
        ctypes.CDLL(global_deps_lib_path, mode=ctypes.RTLD_GLOBAL)
'''
TORCH_INIT_ON_FAILURE = TORCH_INIT_ALWAYS.replace('''            _preload_cuda_deps(required=False)\n''', "            pass\n")

def _torch(site: Path, init: str) -> None:
    """A CUDA 12.4 torch whose libtorch_cuda needs cuSPARSE, which needs nvJitLink (no RUNPATH to it: the wheels'
    cuSPARSE has none, pytorch#138460)."""
    runpath = [f"$ORIGIN/../../nvidia/{d}/lib" for d in ("cuda_runtime", "cublas", "cudnn", "nccl", "cusparse")]
    write_elf(site / "torch/lib/libtorch_global_deps.so", soname="libtorch_global_deps.so", runpath=runpath,
              needed=["libcudart.so.12", "libc.so.6"])
    write_elf(site / "torch/lib/libtorch_cuda.so", soname="libtorch_cuda.so", runpath=runpath,
              needed=["libcudart.so.12", "libcublas.so.12", "libcudnn.so.9", "libnccl.so.2", "libcusparse.so.12",
                      "libnvToolsExt.so.1", "libc.so.6"])
    write_elf(site / "torch/_C.cpython-311-x86_64-linux-gnu.so", needed=["libtorch_cuda.so", "libc.so.6"],
              runpath=["$ORIGIN/lib"])
    (site / "torch/version.py").write_text("__version__ = '2.5.1+cu124'\ncuda: Optional[str] = '12.4'\n")
    (site / "torch/__init__.py").write_text(init)
    dist_info(site, "torch", "2.5.1+cu124", ["torch/lib/libtorch_global_deps.so", "torch/lib/libtorch_cuda.so",
                                             "torch/_C.cpython-311-x86_64-linux-gnu.so", "torch/version.py"])
    # the wheels' cuSPARSE needs nvJitLink by soname, with no RUNPATH to it
    write_elf(site / "nvidia/cusparse/lib/libcusparse.so.12", soname="libcusparse.so.12",
              needed=["libnvJitLink.so.12", "libc.so.6"])
    write_elf(site / "nvidia/nvtx/lib/libnvToolsExt.so.1", soname="libnvToolsExt.so.1", needed=["libc.so.6"])
    dist_info(site, "nvidia-nvtx-cu12", "12.4.99", ["nvidia/nvtx/lib/libnvToolsExt.so.1"])

def _machine(tmp_path: Path, init: str) -> Path:
    """A DLAMI: a conda env with CUDA 12 wheels, and the AMI's LD_LIBRARY_PATH with /usr/local/cuda/lib64 first,
    which holds NVTX's libnvToolsExt.so.1.0.0 and an older libnvJitLink (12.1)."""
    root = dlami(tmp_path, "libcudnn.so.9.1.0")
    site = root / "opt/conda/envs/pytorch/lib/python3.11/site-packages"
    for f in ("torch/lib/libtorch_cuda.so", "torch/_C.cpython-311-x86_64-linux-gnu.so", "torch/version.py"):
        (site / f).unlink()
    for d in site.glob("torch-*.dist-info"):
        for f in d.iterdir():
            f.unlink()
        d.rmdir()
    _torch(site, init)
    lib64 = root / "usr/local/cuda-12.4/lib64"
    write_elf(lib64 / "libnvToolsExt.so.1.0.0", soname="libnvToolsExt.so.1", needed=["libc.so.6"])
    (lib64 / "libnvToolsExt.so.1").symlink_to("libnvToolsExt.so.1.0.0")
    write_elf(lib64 / "libnvJitLink.so.12.1.105", soname="libnvJitLink.so.12", needed=["libc.so.6"])
    (lib64 / "libnvJitLink.so.12").symlink_to("libnvJitLink.so.12.1.105")
    return root

def _report(run_cli, root: Path) -> Dict[str, Any]:
    r = run_cli("run", "--sysroot", str(root), "--json", "-", "--html", "/dev/null", "--fail-on", "never",
                timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)

def _torch_loads(report: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    torch = next(c for e in report["loading"]["environments"] for c in e["consumers"] if c["distribution"] == "torch")
    return {lib["soname"]: lib for lib in torch["libraries"]}

def _findings(report: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    return {f["id"]: f for f in report["findings"]}

def test_a_dlami_with_nvtx_numbering_and_torch_preloading_its_own_nvjitlink_is_green(run_cli, tmp_path):
    """The issue's false failures on 995d55c: DLD-PY-012 compared libnvToolsExt.so.1.0.0 (NVTX's numbering) with the
    wheel's 12.4.99, and reported nvJitLink shadowed although torch preloads its own copy by absolute path."""
    report = _report(run_cli, _machine(tmp_path, TORCH_INIT_ALWAYS))
    findings = _findings(report)
    problems = {i: f["message"] for i, f in findings.items() if i.startswith("DLD-PY-") and
                f["status"] in ("warn", "fail", "error")}
    assert problems == {}
    loads = _torch_loads(report)
    site = "/opt/conda/envs/pytorch/lib/python3.11/site-packages"
    assert loads["libnvJitLink.so.12"]["path"] == f"{site}/nvidia/nvjitlink/lib/libnvJitLink.so.12"
    assert loads["libnvJitLink.so.12"]["via"] == "preloaded by torch (always)"
    nvtx = loads["libnvToolsExt.so.1"]
    assert nvtx["path"] == "/usr/local/cuda-12.4/lib64/libnvToolsExt.so.1.0.0"  # LD_LIBRARY_PATH wins, and serves
    assert nvtx["verdict"] == "serves" and "different numbering schemes" in nvtx["reason"]
    assert "libnvToolsExt.so.1" in findings["DLD-PY-004"]["message"]  # named in the passing note
    assert disagreements(report) == []

def test_an_older_nvjitlink_that_really_loads_fails_where_cusparse_needs_it(run_cli, tmp_path):
    """A torch that preloads only on failure: libtorch_global_deps loads, so nothing is preloaded, and cuSPARSE
    takes the older libnvJitLink from LD_LIBRARY_PATH: the one model says so, DLD-PY-004 fails, the stack marks it."""
    report = _report(run_cli, _machine(tmp_path, TORCH_INIT_ON_FAILURE))
    findings = _findings(report)
    loads = _torch_loads(report)
    jit = loads["libnvJitLink.so.12"]
    assert jit["path"] == "/usr/local/cuda-12.4/lib64/libnvJitLink.so.12.1.105" and jit["via"] == "LD_LIBRARY_PATH"
    assert jit["verdict"] == "fails" and jit["rule"] == "nvjitlink"
    assert "ld.so.cache" in jit["searched"] and "/usr/local/cuda/lib64 (LD_LIBRARY_PATH)" in jit["searched"]
    assert findings["DLD-PY-004"]["status"] == "fail", findings["DLD-PY-004"]["message"]
    assert "libcusparse in the same process needs the nvJitLink of its own CUDA minor" in \
        findings["DLD-PY-004"]["message"]
    assert findings["DLD-PY-012"]["status"] == "pass"  # the right CUDA major: one finding, not two
    rows = {r["path"]: r for e in stack.build(report)["environments"] for fw in e["frameworks"]
            for r in fw["libraries"] if r.get("path")}
    assert rows[jit["path"]]["state"] == "wrong" and rows[jit["path"]]["finding"] == "DLD-PY-004"
    assert disagreements(report) == []

def test_the_disagreement_check_catches_a_view_that_marks_a_named_file_fine(run_cli, tmp_path):
    """The guard above is not vacuous: a report whose model is edited to call the failing copy the environment's own
    (as a second, disagreeing model would) is caught."""
    report = _report(run_cli, _machine(tmp_path, TORCH_INIT_ON_FAILURE))
    for e in report["loading"]["environments"]:
        for c in e["consumers"]:
            for lib in c["libraries"]:
                if lib["soname"] == "libnvJitLink.so.12":
                    lib.update(verdict="own", reason="", rule=None)
    found = disagreements(report)
    assert any("which the model says serves" in d for d in found), found

def test_the_recorded_inputs_replay_to_the_same_resolution(run_cli, tmp_path):
    """`check` on the facts alone (no tree) replays the search from the recorded loader inputs: the same loading."""
    root = _machine(tmp_path, TORCH_INIT_ON_FAILURE)
    live = _report(run_cli, root)
    facts = tmp_path / "facts.json"
    r = run_cli("collect", "--sysroot", str(root), "-o", str(facts), timeout=300)
    assert r.returncode == 0, r.stderr
    import shutil

    shutil.rmtree(root)  # nothing on disk any more: only what the facts recorded
    r = run_cli("check", str(facts), "--json", "-", "--fail-on", "never", timeout=300)
    assert r.returncode == 0, r.stderr
    replayed = json.loads(r.stdout)

    def paths(report: Dict[str, Any]) -> Dict[str, Any]:
        return {(c["distribution"], lib["soname"]): (lib["path"], lib["via"], lib["verdict"])
                for e in report["loading"]["environments"] for c in e["consumers"] for lib in c["libraries"]}

    assert paths(replayed) == paths(live) and len(paths(live)) >= 6
    assert _findings(replayed)["DLD-PY-004"]["status"] == "fail"
