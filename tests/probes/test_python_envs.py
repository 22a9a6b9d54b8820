"""Python environments: discovery and static inspection on trees, the loader's answer for an old torch that did
not preload, isolation of a hanging interpreter, and real torch environments where this machine has them."""

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dl_doctor.engine import collect
from dl_doctor.facts.derive import torch_cpu_only
from dl_doctor.host import Host
from dl_doctor.probes import ProbeContext
from dl_doctor.probes.python_envs import discover, inspect, parse_version_py, python_envs_probe, torch_preload_model
from dl_doctor.registry import load_registry

CC = shutil.which("cc") or shutil.which("gcc")
ENVS = Path(os.environ.get("DL_DOCTOR_TEST_ENVS", Path.home() / ".cache" / "dl-doctor-test-envs"))
T213 = ENVS / "torch-2.13.0-cpu" / "bin" / "python"
T214 = ENVS / "torch-2.14.1-cu130" / "bin" / "python"

NEW_INIT = '''
def _preload_cuda_deps(err=None, required=True):
    cuda_libs = [
        ("cublas", "libcublas.so.*[0-9]"),
        ("nvjitlink", "libnvJitLink.so.*[0-9]"),
        ("cusparse", "libcusparse.so.*[0-9]"),
    ]

def _load_global_deps() -> None:
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

if USE_RTLD_GLOBAL_WITH_LIBTORCH:
    pass
'''
OLD_INIT = '''
def _load_global_deps() -> None:
    try:
        ctypes.CDLL(lib_path, mode=ctypes.RTLD_GLOBAL)
    except OSError as err:
        cuda_libs: Dict[str, str] = {
            'cublas': 'libcublas.so.*[0-9]',
            'nvjitlink': 'libnvJitLink.so.*[0-9]',
        }
        for lib_folder, lib_name in cuda_libs.items():
            _preload_cuda_deps(lib_folder, lib_name)
        ctypes.CDLL(lib_path, mode=ctypes.RTLD_GLOBAL)

if USE_RTLD_GLOBAL_WITH_LIBTORCH:
    pass
'''


def test_preload_model_read_from_torch_source():
    new = torch_preload_model(NEW_INIT)
    assert new["mode"] == "always"
    assert new["libraries"] == [["cublas", "libcublas.so.*[0-9]"], ["nvjitlink", "libnvJitLink.so.*[0-9]"],
                                ["cusparse", "libcusparse.so.*[0-9]"]]
    old = torch_preload_model(OLD_INIT)
    assert old["mode"] == "on-failure" and ["nvjitlink", "libnvJitLink.so.*[0-9]"] in old["libraries"]
    assert torch_preload_model("import os\n")["mode"] == "none"


def test_version_py():
    assert parse_version_py("__version__ = '2.4.1+cu124'\ndebug = False\ncuda: Optional[str] = '12.4'\n"
                            "git_version = 'ee1b6804381c57161c477caa380a840a84167676'\n") == \
        {"__version__": "2.4.1+cu124", "cuda": "12.4", "git_version": "ee1b6804381c57161c477caa380a840a84167676"}
    assert parse_version_py("__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n")["cuda"] is None


def _ctx(host, **options):
    return ProbeContext(host=host, options=options)


SP = "opt/conda/envs/pytorch/lib/python3.10/site-packages"


def env_tree():
    return {
        # a conda env with a CPU-only conda pytorch and numpy 2
        "opt/conda/conda-meta/conda-23.1.0-py310_0.json": "{}",
        "opt/conda/envs/pytorch/conda-meta/pytorch-2.1.2-py3.10_cpu_0.json": "{}",
        "opt/conda/envs/pytorch/conda-meta/pytorch-mutex-1.0-cpu.json": "{}",
        "opt/conda/envs/pytorch/conda-meta/cpuonly-2.0-0.json": "{}",
        f"{SP}/torch/version.py": "__version__ = '2.1.2'\ncuda = None\n",
        f"{SP}/torch/__init__.py": "",
        f"{SP}/numpy-2.0.1.dist-info/INSTALLER": "conda\n",
        # a venv in a home directory with a CUDA torch from pip and its wheels
        "home/alice/proj/.venv/pyvenv.cfg": "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.7\n",
        "home/alice/proj/.venv/lib/python3.11/site-packages/torch-2.4.1.dist-info/INSTALLER": "pip\n",
        "home/alice/proj/.venv/lib/python3.11/site-packages/torch/version.py": "__version__ = '2.4.1+cu124'\ncuda = '12.4'\n",
        "home/alice/proj/.venv/lib/python3.11/site-packages/nvidia_cudnn_cu12-9.1.0.70.dist-info/RECORD":
            "nvidia/cudnn/lib/libcudnn.so.9,sha256=x,1\n",
        "home/alice/proj/.venv/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9": "",
        "home/alice/.local/lib/python3.10/site-packages/requests-2.31.0.dist-info/INSTALLER": "pip\n",
        "home/bob/.conda/environments.txt": "/srv/envs/tf\n",
        "srv/envs/tf/conda-meta/tensorflow-2.15.0-cuda120py310_0.json": "{}",
        "usr/libexec/platform-python": "",
        "usr/lib/python3.6/site-packages/requests-2.20.0-py3.6.egg-info/PKG-INFO": "Name: requests\n",
        "usr/local/lib/python3.6/site-packages/requests-2.27.1.dist-info/INSTALLER": "pip\n",
    }


def test_discovery_and_static_inspection_on_a_tree(tree):
    host = Host(sysroot=str(tree(env_tree())))
    envs, truncated, _ = discover(_ctx(host), 32)
    kinds = {(e["prefix"], e["kind"]) for e in envs}
    assert ("/opt/conda", "conda") in kinds and ("/opt/conda/envs/pytorch", "conda") in kinds
    assert ("/home/alice/proj/.venv", "venv") in kinds
    assert ("/srv/envs/tf", "conda") in kinds  # from ~/.conda/environments.txt
    assert ("/usr", "system") in kinds and ("/home/alice/.local/lib/python3.10", "user-site") in kinds
    assert not truncated
    facts = python_envs_probe.func(_ctx(host))
    by = {e["prefix"]: e for e in facts["environments"]}
    conda = by["/opt/conda/envs/pytorch"]
    assert conda["frameworks"]["torch"] == {**conda["frameworks"]["torch"], "version": "2.1.2", "cuda": None}
    # the verdict is derived from the facts (cuda = None, conda's cpuonly and pytorch-mutex cpu), not recorded
    assert "cpu_only" not in conda["frameworks"]["torch"]
    assert torch_cpu_only(conda["frameworks"]["torch"], conda["conda_packages"]) is True
    assert torch_cpu_only(by["/home/alice/proj/.venv"]["frameworks"]["torch"]) is False
    assert conda["frameworks"]["numpy"]["version"] == "2.0.1" and conda["python_version"] == "3.10"
    venv = by["/home/alice/proj/.venv"]
    assert venv["frameworks"]["torch"]["cuda"] == "12.4" and venv["installers"]["torch"] == "pip"
    assert venv["python_version"] == "3.11.7"
    [cudnn] = venv["cuda_libraries"]["cudnn"]
    assert cudnn["version"] == "9.1.0.70" and cudnn["version_source"] == "wheel nvidia-cudnn-cu12"
    assert by["/srv/envs/tf"]["frameworks"]["tensorflow"]["version"] == "2.15.0"
    system = [e for e in facts["environments"] if e["kind"] == "system"]
    assert any("/usr/local/lib/python3.6/site-packages" in (e.get("site_distributions") or {}) for e in system)


def test_env_limit_and_no_scan(tree):
    host = Host(sysroot=str(tree(env_tree())))
    envs, truncated, _ = discover(_ctx(host), 2)
    assert len(envs) == 2 and truncated
    envs, _, _ = discover(_ctx(host, no_env_scan=True, python=["/opt/conda/envs/pytorch/bin/python"]), 32)
    assert [e["prefix"] for e in envs] == ["/opt/conda/envs/pytorch"]


# -- an old torch that did not preload: RUNPATH vs LD_LIBRARY_PATH, on real ELF files ---------------

def _so(path: Path, soname: str, needed=(), rpath=None, runpath=None, libdirs=()):
    path.parent.mkdir(parents=True, exist_ok=True)
    src = path.parent / (path.name + ".c")
    src.write_text(f"int sym_{abs(hash(str(path)))}(void){{return 0;}}\n")
    cmd = [CC, "-shared", "-fPIC", "-o", str(path), str(src), f"-Wl,-soname,{soname}"]
    cmd += [f"-L{d}" for d in libdirs] + ["-Wl,--no-as-needed"] + [f"-l:{n}" for n in needed]
    if rpath:
        cmd += ["-Wl,--disable-new-dtags", f"-Wl,-rpath,{rpath}"]
    if runpath:
        cmd += ["-Wl,--enable-new-dtags", f"-Wl,-rpath,{runpath}"]
    subprocess.run(cmd, check=True, capture_output=True)
    src.unlink()


def old_torch_tree(root: Path, init_text: str, ld_library_path: str, global_deps_needs_cusparse: bool = True):
    """A torch 2.x wheel layout: RPATHs into nvidia/*, libcusparse with only RUNPATH=$ORIGIN needing nvJitLink.

    Older releases' libtorch_global_deps pulled the CUDA libraries itself (cusparse among them); 2.14's pulls only
    libcudart."""
    sp = root / "opt/venv/lib/python3.10/site-packages"
    nv = sp / "nvidia"
    _so(nv / "nvjitlink/lib/libnvJitLink.so.12", "libnvJitLink.so.12")
    _so(nv / "cusparse/lib/libcusparse.so.12", "libcusparse.so.12", needed=["libnvJitLink.so.12"],
        runpath="$ORIGIN", libdirs=[nv / "nvjitlink/lib"])
    _so(nv / "cuda_runtime/lib/libcudart.so.12", "libcudart.so.12")
    _so(sp / "torch/lib/libtorch_global_deps.so", "libtorch_global_deps.so",
        needed=["libcudart.so.12"] + (["libcusparse.so.12"] if global_deps_needs_cusparse else []),
        rpath="$ORIGIN/../../nvidia/cuda_runtime/lib:$ORIGIN/../../nvidia/cusparse/lib:$ORIGIN/../../nvidia/nvjitlink/lib",
        libdirs=[nv / "cuda_runtime/lib", nv / "cusparse/lib"])
    _so(sp / "torch/lib/libtorch_cuda.so", "libtorch_cuda.so", needed=["libcusparse.so.12", "libcudart.so.12"],
        rpath="$ORIGIN/../../nvidia/cusparse/lib:$ORIGIN/../../nvidia/cuda_runtime/lib",
        libdirs=[nv / "cusparse/lib", nv / "cuda_runtime/lib"])
    _so(sp / "torch/_C.cpython-310-x86_64-linux-gnu.so", "_C.so", needed=["libtorch_cuda.so"], rpath="$ORIGIN/lib",
        libdirs=[sp / "torch/lib"])
    (sp / "torch/version.py").write_text("__version__ = '2.5.1+cu124'\ncuda = '12.4'\n")
    (sp / "torch/__init__.py").write_text(init_text)
    for name, ver in (("nvidia_nvjitlink_cu12", "12.4.127"), ("nvidia_cusparse_cu12", "12.3.1.170"),
                      ("nvidia_cuda_runtime_cu12", "12.4.127")):
        lib = {"nvidia_nvjitlink_cu12": "nvjitlink/lib/libnvJitLink.so.12",
               "nvidia_cusparse_cu12": "cusparse/lib/libcusparse.so.12",
               "nvidia_cuda_runtime_cu12": "cuda_runtime/lib/libcudart.so.12"}[name]
        d = sp / f"{name}-{ver}.dist-info"
        d.mkdir()
        (d / "RECORD").write_text(f"nvidia/{lib},sha256=x,1\n")
        (d / "INSTALLER").write_text("pip\n")
    (sp / "torch-2.5.1.dist-info").mkdir()
    (root / "opt/venv/pyvenv.cfg").write_text("version = 3.10.12\n")
    # the system toolkit's older nvJitLink, with a versioned file name
    _so(root / "usr/local/cuda-12.1/lib64/libnvJitLink.so.12.1.105", "libnvJitLink.so.12")
    os.symlink("libnvJitLink.so.12.1.105", root / "usr/local/cuda-12.1/lib64/libnvJitLink.so.12")
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/environ").write_bytes(f"PATH=/usr/bin\0LD_LIBRARY_PATH={ld_library_path}\0".encode())


WHEEL_JIT = "/opt/venv/lib/python3.10/site-packages/nvidia/nvjitlink/lib/libnvJitLink.so.12"
SYSTEM_JIT = "/usr/local/cuda-12.1/lib64/libnvJitLink.so.12.1.105"


@pytest.mark.skipif(CC is None, reason="no C compiler to build the test libraries")
@pytest.mark.parametrize("init,old_layout,ldpath,expect_from", [
    # old release: the system copy on LD_LIBRARY_PATH satisfies libcusparse (RUNPATH comes after it): shadowed
    (OLD_INIT, True, "/usr/local/cuda-12.1/lib64", SYSTEM_JIT),
    # old release, nothing on LD_LIBRARY_PATH: the load fails, torch preloads the wheels and retries
    (OLD_INIT, True, "", WHEEL_JIT),
    # 2.14-style: global deps pull only libcudart, then every wheel library is preloaded by absolute path
    (NEW_INIT, False, "/usr/local/cuda-12.1/lib64", WHEEL_JIT),
])
def test_runpath_shadowing_in_an_old_release_and_preloading_in_a_new_one(tmp_path, run_cli, init, old_layout, ldpath,
                                                                         expect_from):
    root = tmp_path / "root"
    old_torch_tree(root, init, ldpath, global_deps_needs_cusparse=old_layout)
    r = run_cli("run", "--sysroot", str(root), "--only", "DLD-PY-004", "--json", "-")
    report = json.loads(r.stdout)
    got = torch_loads(report, "/opt/venv")["libnvJitLink.so.12"]
    assert got["path"] == expect_from
    [finding] = report["findings"]
    if "cuda-12.1" in expect_from:
        assert got["via"] == "LD_LIBRARY_PATH" and got["version"] == "12.1.105"
        assert finding["status"] == "fail"
        assert ("libnvJitLink.so.12 loads from /usr/local/cuda-12.1/lib64/libnvJitLink.so.12.1.105 (found via "
                "LD_LIBRARY_PATH)") in finding["message"]
        assert "libcusparse in the same process needs the nvJitLink of its own CUDA minor" in finding["message"]
    else:
        assert got["verdict"] == "own" and got["wheel_version"] == "12.4.127"
        assert finding["status"] == "pass"  # a shadowing finding appears exactly when another copy would load


def torch_loads(report, prefix, truth=True):
    """The CUDA libraries torch loads in one environment, by soname, from the one resolution model (the report's
    ``loading``; ``truth=False``: the prediction from the recorded loader inputs alone, without --deep's)."""
    if truth:
        env = next(e for e in report["loading"]["environments"] if e["prefix"] == prefix)
    else:
        from dl_doctor.compat_matrix import load
        from dl_doctor.facts.loading import model

        facts = next(e for e in report["facts"]["python_envs"]["environments"] if e["prefix"] == prefix)
        bare = {k: v for k, v in facts.items() if k not in ("deep", "deep_consumers")}
        env = model({"python_envs": {"environments": [bare]}}, load())["environments"][0]
    torch = next(c for c in env["consumers"] if c["distribution"] == "torch")
    return {lib["soname"]: lib for lib in torch["libraries"]}


# -- isolation: one hanging or broken environment costs only itself ----------------------------------

def test_a_hanging_interpreter_costs_only_its_environment(tmp_path, run_cli):
    hang = tmp_path / "hang" / "bin" / "python"
    hang.parent.mkdir(parents=True)
    hang.write_text("#!/bin/sh\nsleep 60\n")
    hang.chmod(hang.stat().st_mode | stat.S_IEXEC)
    broken = tmp_path / "broken" / "bin" / "python"
    broken.parent.mkdir(parents=True)
    broken.write_text("#!/bin/sh\necho 'Traceback: boom' >&2; exit 3\n")
    broken.chmod(broken.stat().st_mode | stat.S_IEXEC)
    r = run_cli("run", "--no-env-scan", "--python", str(hang), "--python", str(broken), "--timeout", "2", "--json", "-",
                timeout=120)
    report = json.loads(r.stdout)
    envs = {e["python"]: e for e in report["facts"]["python_envs"]["environments"]}
    assert envs[str(hang)]["live"] == {"error": "timed out after 10s"}
    assert envs[str(broken)]["live"]["error"].startswith("exit 3: Traceback: boom")
    own = next(e for e in report["facts"]["python_envs"]["environments"] if e["role"] == "dl-doctor")
    assert own["live"]["version"] == "%d.%d.%d" % sys.version_info[:3]  # the others were inspected
    assert not [e for e in report["probe_errors"] if e["probe"] == "python_envs"]


# -- real environments (this kind of machine ships the wheels; tests/setup_torch_envs.sh builds them) ---

needs_t213 = pytest.mark.skipif(not T213.exists(), reason=f"no torch 2.13.0 CPU environment at {T213.parent.parent}")
needs_t214 = pytest.mark.skipif(not T214.exists(), reason=f"no torch 2.14.1 environment at {T214.parent.parent}")


@needs_t213
def test_real_cpu_build_is_reported(run_cli):
    r = run_cli("run", "--no-env-scan", "--python", str(T213), "--json", "-", "--only", "python")
    env = next(e for e in json.loads(r.stdout)["facts"]["python_envs"]["environments"] if e["python"] == str(T213))
    assert env["frameworks"]["torch"]["version"] == "2.13.0+cpu" and torch_cpu_only(env["frameworks"]["torch"])
    assert env.get("loader", {}).get("torch") is None  # a CPU build: no torch import sequence to model
    assert not [e for e in report_loading(r) if e["prefix"] == env["prefix"] and e["consumers"]]


def report_loading(r):
    return json.loads(r.stdout)["loading"]["environments"]


def _stub_nvjitlink(tmp_path) -> Path:
    """An 'older' libnvJitLink.so.13 with no real symbols: if anything loads it, the import breaks."""
    d = tmp_path / "old-nvjitlink"
    d.mkdir()
    src = d / "s.c"
    src.write_text("int old_nvjitlink_stub(void){return 0;}\n")
    subprocess.run([CC, "-shared", "-fPIC", "-o", str(d / "libnvJitLink.so.13"), str(src),
                    "-Wl,-soname,libnvJitLink.so.13"], check=True)
    return d


@needs_t214
@pytest.mark.skipif(CC is None, reason="no C compiler for the stub library")
@pytest.mark.parametrize("with_stub", [False, True])
def test_static_prediction_agrees_with_what_really_loads(tmp_path, run_cli, with_stub):
    env_vars = {"LD_LIBRARY_PATH": str(_stub_nvjitlink(tmp_path))} if with_stub else {}
    r = run_cli("run", "--no-env-scan", "--python", str(T214), "--deep", "--json", "-", "--only", "python",
                env=env_vars, timeout=600)
    report = json.loads(r.stdout)
    env = next(e for e in report["facts"]["python_envs"]["environments"] if e["python"] == str(T214))
    deep = env["deep"]
    assert deep["imported"] and deep["version"] == "2.14.1+cu130" and deep["cuda"] == "13.0"
    assert deep["cuda_available"] is False  # no NVIDIA driver on this machine
    predicted = torch_loads(report, env["prefix"], truth=False)  # from the recorded loader inputs alone
    checked = 0
    for soname, lib in predicted.items():
        truth = [m for m in deep["mapped"] if m.rsplit("/", 1)[-1].startswith(soname.split(".so")[0] + ".so")]
        if truth:
            assert truth == [lib["path"]], (soname, lib, truth)
            checked += 1
    assert checked >= 6
    # torch 2.14 preloads its wheel libraries by absolute path: the stub on LD_LIBRARY_PATH is never used
    assert "/old-nvjitlink/" not in " ".join(deep["mapped"])
    assert predicted["libnvJitLink.so.13"]["via"] == "preloaded by torch (always)"
    libs = torch_loads(report, env["prefix"])
    assert libs["libnvJitLink.so.13"]["verdict"] == "own"
    cudnn = next(lib for s, lib in predicted.items() if s.startswith("libcudnn.so"))
    nccl = predicted["libnccl.so.2"]
    assert (cudnn.get("wheel_version") or "").startswith("9.24.0") and nccl["wheel_version"] == "2.30.7"
    assert deep["cudnn"] == 92400 and deep["nccl"] == "2.30.7"
    assert deep["arch_list"] == ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    findings = {f["id"]: f for f in report["findings"]}
    assert findings["DLD-PY-004"]["status"] == "pass"
    assert findings["DLD-PY-002"]["status"] == "skip"  # a CUDA build on a GPU-less host: deliberate, nothing to do
    assert "no NVIDIA driver" in findings["DLD-PY-002"]["message"]
