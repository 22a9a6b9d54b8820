"""Reported failures of plugins a host library opens by name (dlopen): NCCL's net and tuner plugins (aws-ofi-nccl on
libfabric/EFA), ONNX Runtime's execution providers, cuDNN 9's sub-libraries, TensorRT's builder resource, PJRT."""

from __future__ import annotations

import os
from typing import Dict, List, Sequence

import healthy
from cases import Machine, case
from healthy import Spec, elf, environ, so


def env_of(spec: Spec) -> Dict[str, str]:
    """The tree's session environment (proc/self/environ) as a dict."""
    raw = spec.get("proc/self/environ") or b""
    out: Dict[str, str] = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, v = item.decode().split("=", 1)
            out[k] = v
    return out


def set_env(spec: Spec, **changes: str) -> None:
    env = env_of(spec)
    for k, v in changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    spec["proc/self/environ"] = environ(env)


def fabric_versions(minor: int) -> List[str]:
    """The version nodes libfabric.so.1 defines (FABRIC_1.0 ... FABRIC_1.minor), as its linker map adds one a release
    series."""
    return ["libfabric.so.1"] + [f"FABRIC_1.{n}" for n in range(minor + 1)]


def libfabric(spec: Spec, directory: str, version: str, nodes: int, needed: Sequence[str] = ("libc.so.6",),
              verneed=None) -> None:
    """The EFA installer's libfabric (libfabric-aws) in /opt/amazon/efa/lib, with its version definitions."""
    for path in [p for p in spec if p.startswith(f"{directory.strip('/')}/libfabric.so")]:
        del spec[path]
    so(spec, directory, f"libfabric.so.1.{version.split('.')[1]}.0", "libfabric.so.1", links=["libfabric.so"],
       verdef=fabric_versions(nodes), needed=list(needed), verneed=verneed)


@case("prime-rl-3454-libfabric-needs-newer-libefa")
def prime_rl_3454(broken: bool) -> Machine:
    """A CUDA image that copied /opt/amazon out of an EFA-installer build stage: libfabric needs libefa.so.1's EFA_1.4
    (rdma-core 61, which the installer would have put in place), while the image keeps Ubuntu's rdma-core 50, whose
    libefa stops at EFA_1.3, so NCCL cannot load libnccl-net-ofi.so. The twin ran the installer in place."""
    spec = healthy.docker_pytorch_nvidia_runtime()
    libdir = healthy.LIBDIR["x86_64"]
    efa_nodes = ["libefa.so.1", "EFA_1.0", "EFA_1.1", "EFA_1.2", "EFA_1.3"] + ([] if broken else ["EFA_1.4"])
    rdma = "50.0" if broken else "61.0"
    so(spec, libdir, f"libefa.so.1.{rdma.split('.')[0]}.0" if broken else "libefa.so.1.3.61.0", "libefa.so.1",
       verdef=efa_nodes, needed=["libibverbs.so.1", "libc.so.6"])
    so(spec, libdir, f"libibverbs.so.1.14.{rdma.split('.')[0]}.0", "libibverbs.so.1")
    spec["var/lib/dpkg/status"] = healthy.dpkg_status([
        ("libc6", "2.35-0ubuntu3.8"), ("ibverbs-providers", f"{rdma}-2ubuntu0.2" if broken else f"{rdma}-1"),
        ("libibverbs1", f"{rdma}-2ubuntu0.2" if broken else f"{rdma}-1"),
        ("rdma-core", f"{rdma}-2ubuntu0.2" if broken else f"{rdma}-1")])
    libfabric(spec, "opt/amazon/efa/lib", "1.22.0", 9, needed=["libefa.so.1", "libibverbs.so.1", "libc.so.6"],
              verneed={"libefa.so.1": ["EFA_1.0", "EFA_1.4"]})
    so(spec, "opt/amazon/ofi-nccl/lib", "libnccl-net-ofi.so", "libnccl-net-ofi.so",
       needed=["libfabric.so.1", "libc.so.6"], runpath=["/opt/amazon/efa/lib"],
       verneed={"libfabric.so.1": ["FABRIC_1.0"]})
    spec["opt/amazon/efa_installed_packages"] = ("# EFA installer version: 1.43.1\n# Debug packages installed: no\n"
                                                 "# Packages installed:\nlibfabric-aws-bin_2.1.0amzn5.0_amd64\n"
                                                 "libfabric1-aws_2.1.0amzn5.0_amd64\nlibnccl-ofi_1.16.3-1_amd64\n")
    set_env(spec, LD_LIBRARY_PATH="/opt/amazon/ofi-nccl/lib:/opt/amazon/efa/lib:/usr/local/nvidia/lib:"
                                  "/usr/local/nvidia/lib64", NCCL_NET_PLUGIN="ofi", FI_PROVIDER="efa")
    return Machine(spec)


HALLO_SITE = "opt/conda/envs/pytorch/lib/python3.11/site-packages"


def ort_cuda12(spec: Spec, site: str, version: str, cudnn: str = "9.1") -> None:
    """onnxruntime-gpu's CUDA 12 build from PyPI (1.19 and later): the CUDA provider needs the .so.12 libraries and
    cuDNN 9; its RUNPATH is $ORIGIN only."""
    healthy.onnxruntime(spec, site)
    for path in [p for p in spec if p.startswith(f"{site}/onnxruntime_gpu-1.21.0.dist-info")]:
        del spec[path]
    files = {p[len(site) + 1:]: spec.pop(p) for p in [p for p in spec if p.startswith(f"{site}/onnxruntime/")]}
    files["onnxruntime/__init__.py"] = f"__version__ = '{version}'\n"
    files["onnxruntime/capi/build_and_package_info.py"] = (f"package_name = 'onnxruntime-gpu'\n__version__ = '{version}'\n"
                                                           f"cuda_version = '12.2'\ncudnn_version = '{cudnn}'\n")
    healthy.dist(spec, site, "onnxruntime-gpu", version, files)


def ort_cuda11(spec: Spec, site: str, version: str = "1.18.0") -> None:
    """onnxruntime-gpu from PyPI before 1.19: the CUDA 11.8 build (cuDNN 8), its CUDA provider needing the .so.11
    libraries."""
    for path in [p for p in spec if p.startswith((f"{site}/onnxruntime/", f"{site}/onnxruntime_gpu-"))]:
        del spec[path]
    healthy.dist(spec, site, "onnxruntime-gpu", version, {
        "onnxruntime/__init__.py": f"__version__ = '{version}'\n",
        "onnxruntime/capi/onnxruntime_pybind11_state.so": elf(None, needed=["libstdc++.so.6", "libc.so.6"],
                                                              runpath=["$ORIGIN"]),
        "onnxruntime/capi/libonnxruntime_providers_shared.so": elf("libonnxruntime_providers_shared.so"),
        "onnxruntime/capi/libonnxruntime_providers_cuda.so": elf(
            "libonnxruntime_providers_cuda.so", runpath=["$ORIGIN"],
            needed=["libonnxruntime_providers_shared.so", "libcublasLt.so.11", "libcublas.so.11", "libcudnn.so.8",
                    "libcurand.so.10", "libcufft.so.10", "libcudart.so.11.0", "libstdc++.so.6", "libc.so.6"]),
        "onnxruntime/capi/build_and_package_info.py": f"package_name = 'onnxruntime-gpu'\n__version__ = '{version}'\n"
                                                     "cuda_version = '11.8'\ncudnn_version = '8.9'\n"})


@case("hallo-203-onnxruntime-cuda11-build-on-cuda12")
def hallo_203(broken: bool) -> Machine:
    """requirements.txt pinned onnxruntime-gpu 1.18.0, PyPI's CUDA 11.8 build, into a CUDA 12 environment (torch
    2.5.1+cu124 and its nvidia-*-cu12 wheels): the CUDA provider needs libcublasLt.so.11, which nothing provides. The
    twin has onnxruntime-gpu 1.19.2, PyPI's CUDA 12 build."""
    spec = healthy.dlami_ubuntu2204_g5()
    if broken:
        ort_cuda11(spec, HALLO_SITE)
    else:
        ort_cuda12(spec, HALLO_SITE, "1.19.2")
    return Machine(spec)


@case("step-audio-editx-3-onnxruntime-1.17-cuda11-build")
def step_audio_3(broken: bool) -> Machine:
    """The project pinned onnxruntime-gpu 1.17.0 (PyPI's CUDA 11.8 build) into the pytorch/pytorch CUDA 12.4 image:
    'Failed to create CUDAExecutionProvider' because its provider needs libcublasLt.so.11. The twin has 1.23.2."""
    spec = healthy.docker_pytorch_nvidia_runtime()
    site = "opt/conda/lib/python3.11/site-packages"
    if broken:
        ort_cuda11(spec, site, "1.17.0")
    else:
        ort_cuda12(spec, site, "1.23.2")
    return Machine(spec)


@case("sd-webui-reactor-503-onnxruntime-1.16-cuda11-build")
def reactor_503(broken: bool) -> Machine:
    """The webui's venv got onnxruntime-gpu 1.16.3 from PyPI (the CUDA 11.8 build) on a CUDA 12.1 machine whose torch
    and nvidia-*-cu12 wheels are CUDA 12: the CUDA provider needs libcublasLt.so.11. The twin has a CUDA 12 build of
    onnxruntime-gpu (1.19.2, cuDNN 9 as torch's wheels)."""
    spec = healthy.dlami_ubuntu2204_g5()
    if broken:
        ort_cuda11(spec, HALLO_SITE, "1.16.3")
    else:
        ort_cuda12(spec, HALLO_SITE, "1.19.2")
    return Machine(spec)


@case("champ-95-onnxruntime-cuda11-build-dwpose")
def champ_95(broken: bool) -> Machine:
    """champ's DWPose preprocessing runs ONNX Runtime; the environment (torch 2.5.1+cu124, CUDA 12 wheels) has
    onnxruntime-gpu 1.17.1, PyPI's CUDA 11.8 build, whose CUDA provider needs libcublasLt.so.11. The twin installed
    the CUDA 12 build, as the maintainer advised."""
    spec = healthy.docker_pytorch_nvidia_runtime()
    site = "opt/conda/lib/python3.11/site-packages"
    if broken:
        ort_cuda11(spec, site, "1.17.1")
    else:
        ort_cuda12(spec, site, "1.20.1")
    return Machine(spec)


def tensorrt_tar(spec: Spec, root: str, version: str) -> None:
    """A TensorRT tar package unpacked (TensorRT-X.Y.Z.B/lib): libnvinfer and its builder resource, no RUNPATH
    (TensorRT 8.4.1 and later)."""
    lib = f"{root.strip('/')}/lib"
    short = ".".join(version.split(".")[:3])
    major = version.split(".")[0]
    needed = ["libdl.so.2", "libpthread.so.0", "librt.so.1", "libstdc++.so.6", "libm.so.6", "libgcc_s.so.1",
              "libc.so.6"]
    for name in ("libnvinfer", "libnvinfer_plugin", "libnvonnxparser", "libnvparsers"):
        so(spec, lib, f"{name}.so.{short}", f"{name}.so.{major}", links=[f"{name}.so"],
           needed=needed if name == "libnvinfer" else [f"libnvinfer.so.{major}"] + needed)
    spec[f"{lib}/libnvinfer_builder_resource.so.{short}"] = elf(f"libnvinfer_builder_resource.so.{short}")
    spec[f"{root.strip('/')}/include/NvInferVersion.h"] = (
        f"#define NV_TENSORRT_MAJOR {major}\n#define NV_TENSORRT_MINOR {version.split('.')[1]}\n"
        f"#define NV_TENSORRT_PATCH {version.split('.')[2]}\n#define NV_TENSORRT_BUILD {version.split('.')[3]}\n")


@case("tensorrt-pro-118-builder-resource-not-on-library-path")
def tensorrt_pro_118(broken: bool) -> Machine:
    """tensorRT_Pro built against the TensorRT 8.4.1.5 tar package finds libnvinfer through its executable's RPATH, but
    TensorRT 8.4.1 has no RUNPATH and dlopens libnvinfer_builder_resource.so.8.4.1 by name: without the package's
    lib/ on LD_LIBRARY_PATH the builder cannot be created. The twin has it on LD_LIBRARY_PATH (the maintainer's
    answer)."""
    spec = healthy.dlami_ubuntu2204_g5()
    trt = "home/ubuntu/TensorRT-8.4.1.5"
    tensorrt_tar(spec, trt, "8.4.1.5")
    spec["home/ubuntu/tensorRT_Pro/workspace/pro"] = elf(None, needed=["libnvinfer.so.8", "libnvinfer_plugin.so.8",
                                                                       "libnvonnxparser.so.8", "libstdc++.so.6",
                                                                       "libc.so.6"],
                                                         rpath=[f"/{trt}/lib", "/usr/local/cuda/lib64"])
    env = env_of(spec)
    if not broken:
        set_env(spec, LD_LIBRARY_PATH=f"/{trt}/lib:" + env.get("LD_LIBRARY_PATH", ""))
    return Machine(spec)


@case("tensorrtx-1205-builder-resource-sudo-drops-ld-library-path")
def tensorrtx_1205(broken: bool) -> Machine:
    """yolov5_det linked against /opt/TensorRT-8.4.1.5/lib was run with sudo, which drops LD_LIBRARY_PATH (set in
    ~/.bashrc): libnvinfer (no RUNPATH) cannot dlopen libnvinfer_builder_resource.so.8.4.1. The twin runs with
    LD_LIBRARY_PATH exported in the session."""
    spec = healthy.dlami_ubuntu2204_g5()
    trt = "opt/TensorRT-8.4.1.5"
    tensorrt_tar(spec, trt, "8.4.1.5")
    spec["home/ubuntu/tensorrtx/yolov5/build/yolov5_det"] = elf(
        None, needed=["libnvinfer.so.8", "libcudart.so.12", "libstdc++.so.6", "libc.so.6"],
        rpath=[f"/{trt}/lib", "/usr/local/cuda/lib64"])
    spec["home/ubuntu/.bashrc"] = f"# ~/.bashrc\nexport LD_LIBRARY_PATH=/{trt}/lib:$LD_LIBRARY_PATH\n"
    env = env_of(spec)
    if broken:  # sudo's env_reset: LD_LIBRARY_PATH is not passed on
        set_env(spec, LD_LIBRARY_PATH=None, SUDO_USER="ubuntu", SUDO_UID="1000", SUDO_GID="1000",
                SUDO_COMMAND="../yolov5_det -s best.wts best.engine s")
    else:
        set_env(spec, LD_LIBRARY_PATH=f"/{trt}/lib:" + env.get("LD_LIBRARY_PATH", ""))
    return Machine(spec)


def efa_in_image(spec: Spec, hwloc: bool) -> None:
    """The EFA installer's libfabric (2.x) and aws-ofi-nccl copied into a CUDA image; libnccl-net-ofi.so needs
    libhwloc.so.15, a distro package the installer's stage pulled in."""
    libdir = healthy.LIBDIR["x86_64"]
    so(spec, libdir, "libefa.so.1.3.61.0", "libefa.so.1", verdef=["libefa.so.1", "EFA_1.0", "EFA_1.1", "EFA_1.2",
                                                                  "EFA_1.3", "EFA_1.4"],
       needed=["libibverbs.so.1", "libc.so.6"])
    so(spec, libdir, "libibverbs.so.1.14.61.0", "libibverbs.so.1")
    if hwloc:
        so(spec, libdir, "libhwloc.so.15.6.4", "libhwloc.so.15", needed=["libudev.so.1", "libc.so.6"])
        so(spec, libdir, "libudev.so.1.7.2", "libudev.so.1")
    libfabric(spec, "opt/amazon/efa/lib", "1.22.0", 9, needed=["libefa.so.1", "libibverbs.so.1", "libc.so.6"],
              verneed={"libefa.so.1": ["EFA_1.0", "EFA_1.4"]})
    so(spec, "opt/amazon/ofi-nccl/lib", "libnccl-net-ofi.so", "libnccl-net-ofi.so",
       needed=["libfabric.so.1", "libhwloc.so.15", "libc.so.6"], runpath=["/opt/amazon/efa/lib"],
       verneed={"libfabric.so.1": ["FABRIC_1.0"]})
    spec["opt/amazon/efa_installed_packages"] = ("# EFA installer version: 1.43.1\n# Debug packages installed: no\n"
                                                 "# Packages installed:\nlibfabric-aws-bin_2.1.0amzn5.0_amd64\n"
                                                 "libfabric1-aws_2.1.0amzn5.0_amd64\nlibnccl-ofi_1.16.3-1_amd64\n")
    spec["var/lib/dpkg/status"] = healthy.dpkg_status([("libc6", "2.35-0ubuntu3.8"), ("rdma-core", "61.0-1"),
                                                       ("libibverbs1", "61.0-1")] +
                                                      ([("libhwloc15", "2.7.0-2ubuntu1")] if hwloc else []))
    set_env(spec, LD_LIBRARY_PATH="/opt/amazon/ofi-nccl/lib:/opt/amazon/efa/lib:/usr/local/nvidia/lib:"
                                  "/usr/local/nvidia/lib64", NCCL_NET_PLUGIN="ofi", FI_PROVIDER="efa")


@case("prime-rl-3452-ofi-nccl-needs-libhwloc")
def prime_rl_3452(broken: bool) -> Machine:
    """The runtime stage copied only /opt/amazon from the EFA-installer stage: NCCL finds libnccl-net-ofi.so
    (NCCL_NET_PLUGIN=ofi) but cannot load it, libhwloc.so.15 (the distro's libhwloc15) is missing, and falls back to
    sockets. The twin installs libhwloc15 in the runtime stage."""
    spec = healthy.docker_pytorch_nvidia_runtime()
    efa_in_image(spec, hwloc=not broken)
    return Machine(spec)


@case("onnxruntime-25609-cudnn-wheel-not-on-library-path")
def ort_25609(broken: bool) -> Machine:
    """onnxruntime-gpu 1.22.0 used alone (no torch) with nvidia-cudnn-cu12 and the other CUDA 12 wheels installed:
    the CUDA provider (RUNPATH $ORIGIN) needs libcudnn.so.9, which is in the wheels but not on the loader's path
    unless preload_dlls() runs first or LD_LIBRARY_PATH names them. The twin exports the wheels' directories."""
    spec = healthy.dlami_ubuntu2204_g5()
    prefix = "home/ubuntu/ort-venv"
    spec[f"{prefix}/pyvenv.cfg"] = "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.10.12\n"
    spec[f"{prefix}/bin/python3"] = {"symlink": "/usr/bin/python3.10"}
    spec[f"{prefix}/bin/python"] = {"symlink": "python3"}
    site = f"{prefix}/lib/python3.10/site-packages"
    pins = {k: v for k, v in healthy.TORCH_251_CU124.items()
            if k in ("nvidia-cuda-runtime-cu12", "nvidia-cublas-cu12", "nvidia-cudnn-cu12", "nvidia-cufft-cu12",
                     "nvidia-curand-cu12")}
    pins["nvidia-cudnn-cu12"] = "9.10.2.21"
    healthy.cu12_wheels(spec, site, pins)
    ort_cuda12(spec, site, "1.22.0")
    provider = f"{site}/onnxruntime/capi/libonnxruntime_providers_cuda.so"
    spec[provider] = elf("libonnxruntime_providers_cuda.so", runpath=["$ORIGIN"],
                         needed=["libonnxruntime_providers_shared.so", "libcublasLt.so.12", "libcublas.so.12",
                                 "libcudnn.so.9", "libcurand.so.10", "libcufft.so.11", "libcudart.so.12",
                                 "libstdc++.so.6", "libc.so.6"])
    record = f"{site}/onnxruntime_gpu-1.22.0.dist-info/RECORD"
    env = env_of(spec)
    set_env(spec, VIRTUAL_ENV=f"/{prefix}", PATH=f"/{prefix}/bin:" + env.get("PATH", ""),
            CONDA_PREFIX=None, CONDA_DEFAULT_ENV=None)
    if not broken:
        dirs = ":".join(f"/{site}/nvidia/{d}/lib" for d in ("cudnn", "cublas", "cuda_runtime", "cufft", "curand"))
        set_env(spec, LD_LIBRARY_PATH=dirs + ":" + env.get("LD_LIBRARY_PATH", ""))
    assert record in spec
    return Machine(spec)


@case("gr00t-195-tensorrt-10.7-builder-resource-missing")
def gr00t_195(broken: bool) -> Machine:
    """An aarch64 Ubuntu host with TensorRT 10.7's libnvinfer.so.10.7.0 in /usr/lib/aarch64-linux-gnu but without
    libnvinfer_builder_resource.so.10.7.0 (an incomplete TensorRT install; the corpus has no Jetson image, the
    fault is in TensorRT's files only): converting the policy ONNX to an engine cannot create a builder.
    Re-downloading TensorRT 10.7 (the twin: its builder resource beside libnvinfer) fixed it."""
    spec = healthy.grace_hopper()
    libdir = healthy.LIBDIR["aarch64"]
    needed = ["libdl.so.2", "libpthread.so.0", "librt.so.1", "libstdc++.so.6", "libm.so.6", "libgcc_s.so.1",
              "libc.so.6"]
    so(spec, libdir, "libnvinfer.so.10.7.0", "libnvinfer.so.10", links=["libnvinfer.so"], machine="aarch64",
       needed=needed)
    so(spec, libdir, "libnvonnxparser.so.10.7.0", "libnvonnxparser.so.10", machine="aarch64",
       needed=["libnvinfer.so.10"] + needed)
    if not broken:
        spec[f"{libdir}/libnvinfer_builder_resource.so.10.7.0"] = elf("libnvinfer_builder_resource.so.10.7.0",
                                                                      machine="aarch64")
    spec["usr/include/aarch64-linux-gnu/NvInferVersion.h"] = ("#define NV_TENSORRT_MAJOR 10\n#define NV_TENSORRT_MINOR 7\n"
                                                             "#define NV_TENSORRT_PATCH 0\n#define NV_TENSORRT_BUILD 23\n")
    return Machine(spec)


CUDNN9_SUBS = ("libcudnn_graph", "libcudnn_ops", "libcudnn_cnn", "libcudnn_adv", "libcudnn_engines_precompiled",
               "libcudnn_engines_runtime_compiled", "libcudnn_heuristic", "libcudnn_engines_tensor_ir")


def cudnn_cu13_wheel(spec: Spec, site: str, version: str, with_tensor_ir: bool) -> None:
    """nvidia-cudnn-cu13: libcudnn.so.9 and its sub-libraries in nvidia/cudnn/lib (RUNPATH $ORIGIN)."""
    files = {"nvidia/__init__.py": "", "nvidia/cudnn/__init__.py": "", "nvidia/cudnn/lib/__init__.py": ""}
    for name in ("libcudnn",) + CUDNN9_SUBS:
        if name == "libcudnn_engines_tensor_ir" and not with_tensor_ir:
            continue
        files[f"nvidia/cudnn/lib/{name}.so.9"] = elf(f"{name}.so.9", needed=["libc.so.6"], runpath=["$ORIGIN"])
    healthy.dist(spec, site, "nvidia-cudnn-cu13", version, files, tag="py3-none-manylinux_2_27_x86_64")


def torch_nightly_metadata(spec: Spec, site: str, version: str, cudnn: str, build_info: bool = True) -> None:
    """torch's distribution as pip recorded it (its pins); its objects are not what these cases are about."""
    files = {"torch/__init__.py": ""}
    if build_info:
        files["torch/version.py"] = f"__version__ = '{version}'\ncuda = '13.0'\n"
    healthy.dist(spec, site, "torch", version, files, requires=[f"nvidia-cudnn-cu13=={cudnn}"],
                 tag="cp310-cp310-manylinux_2_28_x86_64")


@case("pytorch-188892-cudnn-cu13-wheel-lacks-tensor-ir")
def pytorch_188892(broken: bool) -> Machine:
    """torch's cu130 build pins nvidia-cudnn-cu13 9.20.0.48, whose wheel lacks libcudnn_engines_tensor_ir.so.9:
    libcudnn.so.9 from the wheel then finds the system cuDNN's (9.21.0, libcudnn9-cuda-13 in
    /usr/lib/x86_64-linux-gnu) through ld.so.cache, another release: CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH. The
    twin's wheel carries its own tensor_ir sub-library."""
    spec = healthy.dlami_ubuntu2404_g6()
    libdir = healthy.LIBDIR["x86_64"]
    healthy.cudnn_system(spec, libdir, "9.21.0")
    so(spec, libdir, "libcudnn_engines_tensor_ir.so.9.21.0", "libcudnn_engines_tensor_ir.so.9")
    prefix = "home/ubuntu/nightly"
    spec[f"{prefix}/pyvenv.cfg"] = "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.12.3\n"
    spec[f"{prefix}/bin/python3"] = {"symlink": "/usr/bin/python3.12"}
    spec[f"{prefix}/bin/python"] = {"symlink": "python3"}
    site = f"{prefix}/lib/python3.12/site-packages"
    cudnn_cu13_wheel(spec, site, "9.20.0.48", with_tensor_ir=not broken)
    # (torch's own objects and build information are left out: the host's 550 driver is not this case)
    torch_nightly_metadata(spec, site, "2.13.0", "9.20.0.48", build_info=False)
    env = env_of(spec)
    set_env(spec, VIRTUAL_ENV=f"/{prefix}", PATH=f"/{prefix}/bin:" + env.get("PATH", ""), CONDA_PREFIX=None,
            CONDA_DEFAULT_ENV=None)
    return Machine(spec)


@case("pytorch-185512-cudnn-tensor-ir-from-wsl-system")
def pytorch_185512(broken: bool) -> Machine:
    """WSL2 Ubuntu with a system cuDNN (libcudnn9 9.21.0 in /lib/x86_64-linux-gnu) and a conda env with the cu130
    nightly's nvidia-cudnn-cu13: every sub-library loads from the wheel except libcudnn_engines_tensor_ir.so.9, which
    the wheel lacks and which comes from the system (LD_DEBUG=libs showed it): F.conv2d fails with
    CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH. The twin removed the system cuDNN (the reporter's workaround)."""
    spec = healthy.wsl2()
    libdir = "lib/x86_64-linux-gnu"
    if broken:
        healthy.cudnn_system(spec, libdir, "9.21.0")
        so(spec, libdir, "libcudnn_engines_tensor_ir.so.9.21.0", "libcudnn_engines_tensor_ir.so.9")
    prefix = "home/xyt19/miniconda3/envs/debug"
    site = healthy.conda_env(spec, "/" + prefix, python="3.10.14")
    cudnn_cu13_wheel(spec, site, "9.20.0.48", with_tensor_ir=False)
    torch_nightly_metadata(spec, site, "2.11.0.dev20260520+cu130", "9.20.0.48")
    env = env_of(spec)
    set_env(spec, CONDA_PREFIX=f"/{prefix}", CONDA_DEFAULT_ENV="debug", VIRTUAL_ENV=None,
            PATH=f"/{prefix}/bin:" + env.get("PATH", ""))
    return Machine(spec)


CU11_WHEELS = {  # (distribution, version, directory, sonames) of the CUDA 11 wheels torch 2.1.0+cu118 pulls
    "nvidia-cuda-runtime-cu11": ("11.8.89", "cuda_runtime", ["libcudart.so.11.0"]),
    "nvidia-cublas-cu11": ("11.11.3.6", "cublas", ["libcublas.so.11", "libcublasLt.so.11"]),
    "nvidia-cudnn-cu11": ("8.7.0.84", "cudnn", ["libcudnn.so.8", "libcudnn_ops_infer.so.8", "libcudnn_cnn_infer.so.8"]),
    "nvidia-cufft-cu11": ("10.9.0.58", "cufft", ["libcufft.so.10"]),
    "nvidia-curand-cu11": ("10.3.0.86", "curand", ["libcurand.so.10"]),
}


def cu11_wheels(spec: Spec, site: str) -> None:
    for name, (version, directory, sonames) in CU11_WHEELS.items():
        files = {"nvidia/__init__.py": "", f"nvidia/{directory}/__init__.py": "",
                 f"nvidia/{directory}/lib/__init__.py": ""}
        for soname in sonames:
            files[f"nvidia/{directory}/lib/{soname}"] = elf(soname, runpath=["$ORIGIN"])
        healthy.dist(spec, site, name, version, files, tag="py3-none-manylinux1_x86_64")


@case("deface-53-onnxruntime-tensorrt-ep-libnvinfer-off-path")
def deface_53(broken: bool) -> Machine:
    """A Colab-style environment with onnxruntime-gpu 1.16.2 and `pip install tensorrt==8.6.1.post1`: TensorRT's
    libraries land in site-packages/tensorrt_libs, which no search looks in, so the TensorRT provider cannot load
    libnvinfer.so.8 and ONNX Runtime falls back to CUDA. The twin puts tensorrt_libs on LD_LIBRARY_PATH (the fix in
    the thread)."""
    spec = healthy.dlami_ubuntu2204_g5()
    prefix = "home/ubuntu/deface"
    spec[f"{prefix}/pyvenv.cfg"] = "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.10.12\n"
    spec[f"{prefix}/bin/python3"] = {"symlink": "/usr/bin/python3.10"}
    spec[f"{prefix}/bin/python"] = {"symlink": "python3"}
    site = f"{prefix}/lib/python3.10/site-packages"
    cu11_wheels(spec, site)
    ort_cuda11(spec, site, "1.16.2")
    files = {p[len(site) + 1:]: spec.pop(p) for p in [p for p in spec if p.startswith(f"{site}/onnxruntime/")]}
    for path in [p for p in spec if p.startswith(f"{site}/onnxruntime_gpu-1.16.2.dist-info")]:
        del spec[path]
    files["onnxruntime/capi/libonnxruntime_providers_tensorrt.so"] = elf(
        "libonnxruntime_providers_tensorrt.so", runpath=["$ORIGIN"],
        needed=["libonnxruntime_providers_shared.so", "libnvinfer.so.8", "libnvinfer_plugin.so.8",
                "libnvonnxparser.so.8", "libcudart.so.11.0", "libstdc++.so.6", "libc.so.6"])
    healthy.dist(spec, site, "onnxruntime-gpu", "1.16.2", files)
    trt = {"tensorrt_libs/__init__.py": ""}
    for name in ("libnvinfer", "libnvinfer_plugin", "libnvonnxparser"):
        trt[f"tensorrt_libs/{name}.so.8"] = elf(f"{name}.so.8", needed=["libc.so.6"])
    trt["tensorrt_libs/libnvinfer_builder_resource.so.8.6.1"] = elf("libnvinfer_builder_resource.so.8.6.1")
    healthy.dist(spec, site, "tensorrt-libs", "8.6.1", trt, tag="py2.py3-none-manylinux_2_17_x86_64")
    healthy.dist(spec, site, "tensorrt", "8.6.1.post1", {"tensorrt/__init__.py": "__version__ = '8.6.1'\n"},
                 requires=["tensorrt-libs==8.6.1", "tensorrt-bindings==8.6.1"], tag="py3-none-any")
    env = env_of(spec)
    set_env(spec, VIRTUAL_ENV=f"/{prefix}", PATH=f"/{prefix}/bin:" + env.get("PATH", ""), CONDA_PREFIX=None,
            CONDA_DEFAULT_ENV=None)
    if not broken:
        set_env(spec, LD_LIBRARY_PATH=f"/{site}/tensorrt_libs:" + env.get("LD_LIBRARY_PATH", ""))
    return Machine(spec)


def tensorrt_wheels(spec: Spec, site: str, version: str, with_win: bool) -> None:
    """pip's tensorrt 10.x: tensorrt-cu12-libs puts libnvinfer.so.10 and its builder resources in tensorrt_libs/."""
    short = ".".join(version.split(".")[:3])
    libs = {"tensorrt_libs/__init__.py": ""}
    for name in ("libnvinfer", "libnvinfer_plugin", "libnvonnxparser", "libnvinfer_lean", "libnvinfer_dispatch"):
        libs[f"tensorrt_libs/{name}.so.10"] = elf(f"{name}.so.10", needed=["libc.so.6"])
    libs[f"tensorrt_libs/libnvinfer_builder_resource.so.{short}"] = elf(f"libnvinfer_builder_resource.so.{short}")
    if with_win:
        libs[f"tensorrt_libs/libnvinfer_builder_resource_win.so.{short}"] = elf(
            f"libnvinfer_builder_resource_win.so.{short}")
    healthy.dist(spec, site, "tensorrt-cu12-libs", version, libs, tag="py2.py3-none-manylinux_2_17_x86_64")
    healthy.dist(spec, site, "tensorrt-cu12-bindings", version, {
        "tensorrt_bindings/__init__.py": "", "tensorrt_bindings/tensorrt.so": elf(None, needed=["libc.so.6"])},
        tag="cp311-none-manylinux_2_17_x86_64")
    healthy.dist(spec, site, "tensorrt-cu12", version, {"tensorrt/__init__.py": f"__version__ = '{short}'\n"},
                 requires=[f"tensorrt-cu12-libs=={version}", f"tensorrt-cu12-bindings=={version}"], tag="py3-none-any")


@case("tensorrt-3983-10.2.0-wheel-lacks-builder-resource-win")
def tensorrt_3983(broken: bool) -> Machine:
    """`pip install tensorrt==10.2.0` on Ubuntu 22.04 with an RTX 4090: building an engine fails, the 10.2.0 wheel has
    no libnvinfer_builder_resource_win.so.10.2.0 (10.0 and 10.1 built fine). The twin has 10.2.0.post1, which ships
    it."""
    spec = healthy.dlami_ubuntu2204_g5()
    tensorrt_wheels(spec, HALLO_SITE, "10.2.0" if broken else "10.2.0.post1", with_win=not broken)
    return Machine(spec)


@case("cog-triton-51-tensorrt-10.2.0-builder-resource-win")
def cog_triton_51(broken: bool) -> Machine:
    """cog-triton's TRT-LLM 0.12 pre-release image built against TensorRT 10.2.0 from pip: its wheel lacks
    libnvinfer_builder_resource_win.so.10.2.0 and the engine build fails; the maintainer fixed it by upgrading to
    10.2.0.post1 (the twin)."""
    spec = healthy.docker_pytorch_nvidia_runtime()
    tensorrt_wheels(spec, "opt/conda/lib/python3.11/site-packages", "10.2.0" if broken else "10.2.0.post1",
                    with_win=not broken)
    return Machine(spec)


@case("torch-tensorrt-2986-tensorrt-10.2.0-builder-resource-win")
def torch_tensorrt_2986(broken: bool) -> Machine:
    """Torch-TensorRT 2.3.0 pulls tensorrt 10.2.0, whose wheel lacks libnvinfer_builder_resource_win.so.10.2.0: the
    dynamo compile's engine build fails on Ubuntu (triaged as not a Torch-TensorRT bug). The twin has the
    10.2.0.post1 wheels."""
    spec = healthy.dlami_ubuntu2204_g5()
    site = "opt/conda/envs/pytorch_p311_jupyter/lib/python3.11/site-packages"
    version = "10.2.0" if broken else "10.2.0.post1"
    tensorrt_wheels(spec, site, version, with_win=not broken)
    healthy.dist(spec, site, "torch-tensorrt", "2.3.0", {"torch_tensorrt/__init__.py": "__version__ = '2.3.0'\n"},
                 requires=["torch>=2.3.0,<2.4.0", "tensorrt==10.0.1"], tag="cp311-cp311-linux_x86_64")
    return Machine(spec)


@case("onnxruntime-20745-cuda12-feed-missing-py311-wheel")
def ort_20745(broken: bool) -> Machine:
    """`pip install onnxruntime-gpu --extra-index-url .../onnxruntime-cuda-12/...` on Python 3.11 when the CUDA 12 feed
    had 1.18.0 only for Python 3.9: pip took PyPI's 1.18.0 (the CUDA 11.8 build) into the CUDA 12 environment, whose
    provider needs libcublasLt.so.11. The twin has the CUDA 12 build once the feed published it for 3.11."""
    spec = healthy.dlami_ubuntu2204_g5()
    if broken:
        ort_cuda11(spec, HALLO_SITE, "1.18.0")
    else:  # the CUDA 12 build of 1.18 is a cuDNN 8 build (ONNX Runtime's CUDA EP requirements): libcudnn8 from the
        # CUDA repository serves it
        ort_cuda12(spec, HALLO_SITE, "1.18.0", cudnn="8.9")
        so(spec, healthy.LIBDIR["x86_64"], "libcudnn.so.8.9.7", "libcudnn.so.8")
    return Machine(spec)


def cuda11_runtime_libs(spec: Spec, libdir: str) -> None:
    """The CUDA 11 math libraries an onnxruntime-gpu CUDA 11.8 build's provider needs, installed system-wide."""
    for real, soname in (("libcublas.so.11.7.4.6", "libcublas.so.11"), ("libcublasLt.so.11.7.4.6", "libcublasLt.so.11"),
                         ("libcudart.so.11.5.117", "libcudart.so.11.0"), ("libcufft.so.10.6.0.107", "libcufft.so.10"),
                         ("libcurand.so.10.2.7.107", "libcurand.so.10")):
        so(spec, libdir, real, soname)


@case("facefusion-online-ports-10-colab-cuda11-libs-missing")
def facefusion_ports_10(broken: bool) -> Machine:
    """A Colab A100 runtime (CUDA 12 only, cuDNN 8 preinstalled) with PyPI's onnxruntime-gpu, the CUDA 11.8 build:
    its provider needs libcublasLt.so.11. The reporter's fix, the twin: Ubuntu's nvidia-cuda-toolkit (CUDA 11.5),
    whose libcublasLt.so.11 and friends land in /usr/lib/x86_64-linux-gnu."""
    spec = healthy.dlami_ubuntu2204_g5()
    libdir = healthy.LIBDIR["x86_64"]
    so(spec, libdir, "libcudnn.so.8.9.6", "libcudnn.so.8")
    ort_cuda11(spec, HALLO_SITE, "1.16.3")
    if not broken:
        cuda11_runtime_libs(spec, libdir)
        spec["var/lib/dpkg/status"] = spec.get("var/lib/dpkg/status", "") + healthy.dpkg_status([
            ("nvidia-cuda-toolkit", "11.5.1-1ubuntu1"), ("libcublaslt11", "11.7.4.6~11.5.1-1ubuntu1"),
            ("libcublas11", "11.7.4.6~11.5.1-1ubuntu1"), ("libcudart11.0", "11.5.117~11.5.1-1ubuntu1")])
    return Machine(spec)


@case("facefusion-colab-7-cuda11-toolkit-for-onnxruntime")
def facefusion_colab_7(broken: bool) -> Machine:
    """FaceFusion on Google Colab (CUDA 12.2, cuDNN 8) with onnxruntime-gpu's CUDA 11.8 build: the CUDA provider cannot
    load. The reporter's fix, the twin: the CUDA 11.8 toolkit's libraries in /usr/local/cuda-11.8/lib64, registered
    with the loader (ld.so.conf.d)."""
    spec = healthy.dlami_ubuntu2204_g5()
    so(spec, healthy.LIBDIR["x86_64"], "libcudnn.so.8.9.6", "libcudnn.so.8")
    ort_cuda11(spec, HALLO_SITE, "1.16.3")
    if not broken:
        cuda11_runtime_libs(spec, "usr/local/cuda-11.8/lib64")
        spec["usr/local/cuda-11.8/version.json"] = '{"cuda": {"name": "CUDA SDK", "version": "11.8.20220929"}}\n'
        spec["etc/ld.so.conf.d/cuda-11-8.conf"] = "/usr/local/cuda-11.8/lib64\n"
    return Machine(spec)
