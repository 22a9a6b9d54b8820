"""What each framework build needs of the GPU, the driver and CUDA, and what the schedulers give it (issue 27, helper
`build`): builds without code for the GPU's architecture, builds for a CUDA the driver or the libraries that load
cannot serve, nvcc against the framework's CUDA, Slurm's gres.conf, Ray's and Kubernetes' device lists."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import healthy
from cases import Machine, case
from elfkit import fatbin

SITE = "opt/conda/envs/pytorch/lib/python3.11/site-packages"
ENV = "/opt/conda/envs/pytorch"


def drop(spec, *prefixes: str) -> None:
    for path in [p for p in spec if p.startswith(prefixes)]:
        del spec[path]


def workstation(device: str, buses: Sequence[str], driver: str = "550.127.05", torch: bool = True) -> Dict:
    """An Ubuntu 22.04 GPU server of the lab's own (not a cloud instance): the DLAMI-like layout of tests/healthy.py
    (nvidia-driver-<branch>-server, CUDA 12.4 and 12.1 toolkits, /opt/conda/envs/pytorch with torch 2.5.1+cu124),
    its own GPUs and driver, DMI of a tower workstation."""
    spec = healthy._ubuntu_dlami("ubuntu2204", "workstation", device, buses, driver, "2.5.1+cu124",
                                 healthy.TORCH_251_CU124, "128G", second_env=False, extensions=False)
    drop(spec, "sys/class/dmi/id/")
    spec["sys/class/dmi/id/sys_vendor"] = "Dell Inc.\n"
    spec["sys/class/dmi/id/product_name"] = "Precision 7920 Tower\n"
    spec["sys/class/dmi/id/board_asset_tag"] = "\n"
    spec["sys/class/dmi/id/bios_vendor"] = "Dell Inc.\n"
    if not torch:
        drop(spec, f"{SITE}/torch/", f"{SITE}/torch-", f"{SITE}/torchvision", f"{SITE}/torchaudio")
    return spec


def sections(arch: str) -> bytes:
    """The .nv_fatbin of a CUDA library built for ``arch`` (TORCH_CUDA_ARCH_LIST style: 'sm_50;sm_60;compute_70'),
    three compilation units of it."""
    entries = [a for a in arch.split(";") if a]
    return fatbin(entries, entries, entries)


def torch_bundled(spec, site: str, version: str, cuda: str, arch: str) -> None:
    """A torch 1.x wheel of download.pytorch.org that bundles its CUDA runtime in torch/lib under hashed names
    (libcudart-<hash>.so.X), with libtorch_cuda.so's fatbin built for ``arch``."""
    drop(spec, f"{site}/torch/", f"{site}/torch-")
    major = cuda.split(".")[0]
    cudart = f"libcudart-{'a7b20f20' if major == '10' else 'e409450e'}.so.{cuda if major == '10' else '11.0'}"
    nvtx = "libnvToolsExt-3965bdd0.so.1"
    lib = "torch/lib"
    files = {
        f"{lib}/{cudart}": healthy.elf(cudart), f"{lib}/{nvtx}": healthy.elf(nvtx),
        f"{lib}/libc10.so": healthy.elf("libc10.so", needed=["libstdc++.so.6", "libc.so.6"]),
        f"{lib}/libc10_cuda.so": healthy.elf("libc10_cuda.so", runpath=["$ORIGIN"],
                                             needed=[cudart, "libc10.so", "libc.so.6"]),
        f"{lib}/libtorch_cpu.so": healthy.elf("libtorch_cpu.so", runpath=["$ORIGIN"],
                                              needed=["libc10.so", "libstdc++.so.6", "libc.so.6"]),
        f"{lib}/libtorch_cuda.so": healthy.elf("libtorch_cuda.so", runpath=["$ORIGIN"],
                                               needed=["libc10_cuda.so", cudart, nvtx, "libc10.so", "libtorch_cpu.so",
                                                       "libstdc++.so.6", "libc.so.6"], fatbin=sections(arch)),
        f"{lib}/libtorch.so": healthy.elf("libtorch.so", runpath=["$ORIGIN"],
                                          needed=["libtorch_cuda.so", "libtorch_cpu.so", "libc.so.6"]),
        f"{lib}/libtorch_python.so": healthy.elf("libtorch_python.so", runpath=["$ORIGIN"],
                                                 needed=["libtorch.so", "libc10.so", "libc.so.6"]),
        "torch/_C.cpython-39-x86_64-linux-gnu.so": healthy.elf(None, runpath=["$ORIGIN/lib"],
                                                               needed=["libtorch_python.so", "libc.so.6"]),
        "torch/__init__.py": "import os\nimport sys\nimport platform\nimport ctypes\n",
        "torch/version.py": f"__version__ = '{version}'\ndebug = False\ncuda = '{cuda}'\n"
                            "git_version = '67ece03c8cd632cce9523cd96efde6f2d1cc8121'\nhip = None\n"}
    healthy.dist(spec, site, "torch", version, files, requires=["typing-extensions"],
                 tag="cp39-cp39-linux_x86_64")


def with_fatbin(spec, site: str, arch: str) -> None:
    """Give the installed torch wheel's libtorch_cuda.so the .nv_fatbin of a build for ``arch`` (the wheel's own
    TORCH_CUDA_ARCH_LIST), keeping its dynamic section."""
    path = f"{site}/torch/lib/libtorch_cuda.so"
    spec[path] = healthy.elf(
        "libtorch_cuda.so", runpath=healthy.TORCH_RUNPATH,
        needed=["libc10_cuda.so", "libcudart.so.12", "libcublas.so.12", "libcublasLt.so.12", "libcudnn.so.9",
                "libnccl.so.2", "libcusparse.so.12", "libcufft.so.11", "libcurand.so.10", "libcusolver.so.11",
                "libnvToolsExt.so.1", "libc10.so", "libtorch_cpu.so", "libstdc++.so.6", "libgcc_s.so.1", "libc.so.6"],
        verneed={"libstdc++.so.6": ["GLIBCXX_3.4.19", "CXXABI_1.3.9"], "libc.so.6": ["GLIBC_2.17"]},
        fatbin=sections(arch))


def set_environ(spec, **changes: Optional[str]) -> None:
    env = dict(kv.split("=", 1) for kv in spec["proc/self/environ"].decode().split("\0") if kv)
    for k, v in changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    spec["proc/self/environ"] = healthy.environ(env)


# -- a build without code for the GPU (DLD-PY-003) -------------------------------------------------------------------

@case("pytorch-31285-rtx3090-torch-cu102")
def pytorch_31285(broken: bool) -> Machine:
    """torch 1.12.0+cu102 (sm_37..sm_70, no PTX) on an RTX 3090 (sm_86): no kernel image; the cu116 build has sm_86."""
    spec = workstation("2204", ("0000:01:00.0", "0000:02:00.0"), torch=False)
    site = "opt/conda/envs/pytorch/lib/python3.9/site-packages"
    drop(spec, "opt/conda/envs/pytorch/")
    site = healthy.conda_env(spec, ENV, python="3.9.13")
    if broken:
        torch_bundled(spec, site, "1.12.0+cu102", "10.2", "sm_37;sm_50;sm_60;sm_70")
    else:
        torch_bundled(spec, site, "1.12.0+cu116", "11.6", "sm_37;sm_50;sm_60;sm_70;sm_75;sm_80;sm_86")
    return Machine(spec)


# -- a driver too old for the build (DLD-CUDA-001) -------------------------------------------------------------------

@case("fooocus-1313-driver-470-torch-cu121")
def fooocus_1313(broken: bool) -> Machine:
    """Driver 470.86 (CUDA 11.4) under a torch CUDA 12 build: 'found version 11040'; 535 serves it."""
    spec = workstation("25a0", ("0000:01:00.0",), driver="470.86" if broken else "535.183.01")
    return Machine(spec)


# -- TensorFlow built for another CUDA than the libraries that load (DLD-PY-011) -------------------------------------

TF29_BUILD_INFO = ('"""Auto-generated module providing information about the build."""\nimport collections\n\n'
                   "build_info = collections.OrderedDict([('cpu_compiler', '/dt9/usr/bin/gcc'), "
                   "('cuda_compute_capabilities', ['sm_35', 'sm_50', 'sm_60', 'sm_70', 'sm_75', 'compute_80']), "
                   "('cuda_version', '11.2'), ('cudnn_version', '8'), ('is_cuda_build', True), "
                   "('is_rocm_build', False), ('is_tensorrt_build', True)])\n")


def tensorflow_cuda11(spec, site: str, version: str = "2.9.1") -> None:
    """tensorflow 2.9 from PyPI: a CUDA 11.2 / cuDNN 8 build that opens the CUDA libraries by name (dso_loader) and
    ships none of them; its objects' RUNPATHs name only its own directories."""
    healthy.dist(spec, site, "tensorflow", version, {
        "tensorflow/__init__.py": "",
        "tensorflow/libtensorflow_framework.so.2": healthy.elf(
            "libtensorflow_framework.so.2", needed=["libstdc++.so.6", "libc.so.6"], runpath=["$ORIGIN"]),
        "tensorflow/python/_pywrap_tensorflow_internal.so": healthy.elf(
            None, needed=["libtensorflow_framework.so.2", "libc.so.6"],
            runpath=["$ORIGIN/../../_solib_local/_U_S_Stensorflow_Spython_C_Upywrap_Utensorflow_Uinternal.so___Utensorflow",
                     "$ORIGIN/..", "$ORIGIN/../.."]),
        "tensorflow/python/platform/build_info.py": TF29_BUILD_INFO},
        requires=["absl-py>=1.0.0", "numpy>=1.20", "keras<2.10.0,>=2.9.0rc0"], tag="cp37-cp37m-manylinux2014_x86_64")
    healthy.pure(spec, site, "keras", "2.9.0")


def cuda11_libs(spec, root: str, cudnn: bool = True) -> None:
    """The CUDA 11.2 toolkit's lib64 (and cuDNN 8.1 copied into it, as the TensorFlow guide said)."""
    lib = f"{root}/targets/x86_64-linux/lib"
    for real, soname in (("libcudart.so.11.2.152", "libcudart.so.11.0"), ("libcublas.so.11.4.1.1043", "libcublas.so.11"),
                         ("libcublasLt.so.11.4.1.1043", "libcublasLt.so.11"), ("libcufft.so.10.4.0.135", "libcufft.so.10"),
                         ("libcurand.so.10.2.3.135", "libcurand.so.10"), ("libcusolver.so.11.1.0.135", "libcusolver.so.11"),
                         ("libcusparse.so.11.4.0.135", "libcusparse.so.11")) + \
            ((("libcudnn.so.8.1.1", "libcudnn.so.8"),) if cudnn else ()):
        healthy.so(spec, lib.strip("/"), real, soname, links=[soname.split(".so")[0] + ".so"])


@case("behaviormetrics-385-tf29-no-cudnn8")
def behaviormetrics_385(broken: bool) -> Machine:
    """tensorflow 2.9 (CUDA 11.2, cuDNN 8) in a container whose CUDA 11.2 runtime has no cuDNN 8 and no cusolver on
    the loader's path: 'Could not load dynamic library libcudnn.so.8' and 'Skipping registering GPU devices'."""
    spec = workstation("1eb8", ("0000:00:1e.0",), torch=False)
    site = healthy.site_of("/usr/local", "3.7").replace("usr/local/lib/python3.7/site-packages",
                                                        "usr/local/lib/python3.7/dist-packages")
    spec["usr/bin/python3.7"] = healthy.elf(None, needed=["libc.so.6"])
    spec["usr/local/bin/python3"] = {"symlink": "/usr/bin/python3.7"}
    tensorflow_cuda11(spec, site)
    root = healthy.cuda_toolkit(spec, "11.2.2", link=False)
    cuda11_libs(spec, root, cudnn=not broken)
    spec["etc/ld.so.conf.d/cuda-11-2.conf"] = f"{root}/targets/x86_64-linux/lib\n"
    set_environ(spec, LD_LIBRARY_PATH="/usr/local/lib/python3.7/dist-packages/cv2/../../lib64:/opt/ros/noetic/lib:"
                                      "/usr/local/nvidia/lib:/usr/local/nvidia/lib64")
    return Machine(spec)


# -- nvcc against the framework's CUDA (DLD-PY-008) ------------------------------------------------------------------

@case("vllm-1453-nvcc-118-torch-cu121")
def vllm_1453(broken: bool) -> Machine:
    """Building vLLM from source: nvcc of CUDA 11.8 first on PATH and in CUDA_HOME under torch 2.1.2+cu121 ('The
    detected CUDA version (11.8) mismatches ... (12.1)'); the twin points CUDA_HOME at the 12.1 toolkit."""
    spec = workstation("2237", ("0000:00:1e.0",))
    drop(spec, f"{SITE}/torch/", f"{SITE}/torch-", f"{SITE}/torchvision", f"{SITE}/torchaudio")
    healthy.torch(spec, SITE, "2.1.2+cu121", "12.1", healthy.TORCH_251_CU124)
    healthy.cuda_toolkit(spec, "11.8.0", libs=healthy.CUDA_118_LIBS, link=broken)
    if not broken:
        spec["usr/local/cuda"] = {"symlink": "/usr/local/cuda-12.1"}
    home = "/usr/local/cuda-11.8" if broken else "/usr/local/cuda-12.1"
    set_environ(spec, CUDA_HOME=home, PATH=f"/opt/conda/envs/pytorch/bin:{home}/bin:/usr/local/sbin:/usr/local/bin:"
                                          "/usr/sbin:/usr/bin:/sbin:/bin")
    return Machine(spec)


# -- Slurm (DLD-SCHED-*) ----------------------------------------------------------------------------------------------

SLURM_CONF = ("ClusterName=bibigrid\nSlurmctldHost=bibigrid-master\nProctrackType=proctrack/cgroup\n"
              "TaskPlugin=task/cgroup,task/affinity\nGresTypes=gpu\nSlurmdLogFile=/var/log/slurm/slurmd.log\n"
              "SelectType=select/cons_tres\n"
              "NodeName=bibigrid-worker-[0-3] CPUs=8 RealMemory=31000 {gres}State=UNKNOWN\n"
              "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n")


def slurm_node(spec, gres_conf: Optional[str], node_gres: str, log: str = "") -> None:
    spec["etc/slurm/slurm.conf"] = SLURM_CONF.format(gres=node_gres)
    if gres_conf is not None:
        spec["etc/slurm/gres.conf"] = gres_conf
    spec["etc/slurm/cgroup.conf"] = "ConstrainCores=yes\nConstrainRAMSpace=yes\nConstrainDevices=yes\n"
    spec["usr/sbin/slurmd"] = healthy.elf(None, needed=["libslurmfull.so", "libc.so.6"], runpath=["/usr/lib/x86_64-linux-gnu/slurm-wlm"])
    spec["usr/lib/x86_64-linux-gnu/slurm-wlm/gres_gpu.so"] = healthy.elf(None)
    spec["usr/lib/x86_64-linux-gnu/slurm-wlm/gpu_nvml.so"] = healthy.elf(None, needed=["libnvidia-ml.so.1", "libc.so.6"])
    spec["var/log/slurm/slurmd.log"] = log


@case("bibigrid-705-gres-file-without-gpu")
def bibigrid_705(broken: bool) -> Machine:
    """A worker without GPUs given the GPU nodes' gres.conf (File=/dev/nvidia0): slurmd waits for the file, then
    'fatal: can't stat gres.conf file /dev/nvidia0'. The twin keeps gres.conf off CPU-only workers."""
    spec = healthy.cpu_only()
    if broken:
        slurm_node(spec, "Name=gpu File=/dev/nvidia0\n", "Gres=gpu:1 ", log=(
            "[2026-02-02T09:51:48.112] error: Waiting for gres.conf file /dev/nvidia0\n"
            "[2026-02-02T09:52:07.120] fatal: can't stat gres.conf file /dev/nvidia0: No such file or directory\n"))
    else:
        slurm_node(spec, None, "", log="[2026-02-02T09:51:48.112] slurmd version 23.02.7 started\n"
                                       "[2026-02-02T09:51:48.120] slurmd started on Mon, 02 Feb 2026 09:51:48 +0000\n")
    return Machine(spec)


# -- Ray (DLD-SCHED-*) -------------------------------------------------------------------------------------------------

@case("ray-3265-task-without-num-gpus")
def ray_3265(broken: bool) -> Machine:
    """A Ray worker for a task scheduled without num_gpus: Ray sets CUDA_VISIBLE_DEVICES to the empty string for it,
    so torch sees no GPU ('no CUDA-capable device is detected'); with num_gpus=1 Ray gives it one GPU's index."""
    spec = workstation("1db4", ("0000:00:1b.0", "0000:00:1c.0"))
    set_environ(spec, CUDA_VISIBLE_DEVICES="" if broken else "0", RAY_RAYLET_PID="4107",
                RAY_JOB_ID="01000000", RAY_NODE_IP_ADDRESS="172.31.5.6", RAY_ADDRESS="172.31.5.6:6379")
    return Machine(spec)


# -- more blind cases: TensorFlow 2.4 on CUDA 11.1, Slurm's gres.conf ---------------------------------------------------

TF24_BUILD_INFO = ('"""Auto-generated module providing information about the build."""\nimport collections\n\n'
                   "build_info = collections.OrderedDict([('cuda_version', '11.0'), ('cudnn_version', '8'), "
                   "('is_cuda_build', True), ('is_rocm_build', False)])\n")


def cuda_libs(spec, root: str, libs) -> None:
    lib = f"{root}/targets/x86_64-linux/lib".strip("/")
    for real, soname in libs:
        healthy.so(spec, lib, real, soname, links=[soname.split(".so")[0] + ".so"])


CUDA_111_LIBS = [("libcudart.so.11.1.74", "libcudart.so.11.0"), ("libcublas.so.11.3.0.106", "libcublas.so.11"),
                 ("libcublasLt.so.11.3.0.106", "libcublasLt.so.11"), ("libcufft.so.10.3.0.74", "libcufft.so.10"),
                 ("libcurand.so.10.2.2.74", "libcurand.so.10"), ("libcusolver.so.11.0.0.74", "libcusolver.so.11"),
                 ("libcusparse.so.11.3.0.10", "libcusparse.so.11"), ("libcudnn.so.8.0.5", "libcudnn.so.8")]
CUDA_110_CUSOLVER = [("libcusolver.so.10.6.0.245", "libcusolver.so.10")]


def tf_cuda110(broken: bool, dist: str = "tensorflow", version: str = "2.4.0rc1", toolkit: str = "11.1.1",
               libs=None) -> Machine:
    """A CUDA 11.0 build of TensorFlow 2.4 (it opens libcusolver.so.10, CUDA 11.0's cuSOLVER soname) on a machine
    whose only CUDA is a later 11.x (libcusolver.so.11). The twin adds CUDA 11.0's cuSOLVER beside it (the 11.0
    toolkit's lib64 in ld.so.conf)."""
    spec = workstation("2204", ("0000:01:00.0",), driver="455.38" if toolkit.startswith("11.1") else "460.73.01",
                       torch=False)
    site = "usr/local/lib/python3.8/dist-packages"
    spec["usr/bin/python3.8"] = healthy.elf(None, needed=["libc.so.6"])
    healthy.dist(spec, site, dist, version, {
        "tensorflow/__init__.py": "",
        "tensorflow/libtensorflow_framework.so.2": healthy.elf(
            "libtensorflow_framework.so.2", needed=["libstdc++.so.6", "libc.so.6"], runpath=["$ORIGIN"]),
        "tensorflow/python/_pywrap_tensorflow_internal.so": healthy.elf(
            None, needed=["libtensorflow_framework.so.2", "libc.so.6"], runpath=["$ORIGIN/..", "$ORIGIN/../.."]),
        "tensorflow/python/platform/build_info.py": TF24_BUILD_INFO},
        requires=["numpy~=1.19.2", "absl-py~=0.10"], tag="cp38-cp38-manylinux2010_x86_64")
    drop(spec, "usr/local/cuda-12.4/", "usr/local/cuda-12.1/", "usr/local/cuda")
    root = healthy.cuda_toolkit(spec, toolkit)
    if libs is None:
        cuda_libs(spec, root, CUDA_111_LIBS)
    else:
        cuda11_libs(spec, root)
    conf = f"{root}/targets/x86_64-linux/lib\n"
    if not broken:
        old = healthy.cuda_toolkit(spec, "11.0.3", link=False)
        cuda_libs(spec, old, CUDA_110_CUSOLVER)
        conf += f"{old}/targets/x86_64-linux/lib\n"
    spec["etc/ld.so.conf.d/cuda.conf"] = conf
    mm = ".".join(toolkit.split(".")[:2])
    set_environ(spec, LD_LIBRARY_PATH=None, CUDA_HOME=f"/usr/local/cuda-{mm}",
                PATH=f"/usr/local/cuda-{mm}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    return Machine(spec)


@case("tensorflow-44753-tf24-cusolver10-on-cuda111")
def tensorflow_44753(broken: bool) -> Machine:
    """tensorflow 2.4.0rc1 (CUDA 11.0) on CUDA 11.1: 'Could not load dynamic library libcusolver.so.10'."""
    return tf_cuda110(broken)


@case("tensorflow-43947-tf-nightly-cusolver10-on-cuda111")
def tensorflow_43947(broken: bool) -> Machine:
    """tf-nightly of the 2.4 cycle (a CUDA 11.0 build) on CUDA 11.1: libcusolver.so.10 not found."""
    return tf_cuda110(broken, "tf-nightly", "2.4.0.dev20201023")


@case("tensorflow-48498-tf241-cusolver10-on-cuda112")
def tensorflow_48498(broken: bool) -> Machine:
    """tensorflow 2.4.1 (CUDA 11.0) with CUDA 11.2 installed: every other library is found, libcusolver.so.10 is
    not (CUDA 11.2 ships libcusolver.so.11)."""
    return tf_cuda110(broken, "tensorflow", "2.4.1", toolkit="11.2.2", libs="11.2")


GPU_BUSES = ("0000:18:00.0", "0000:3b:00.0", "0000:86:00.0", "0000:af:00.0")


@case("deepops-1214-autodetect-nvml-without-plugin")
def deepops_1214(broken: bool) -> Machine:
    """gres.conf says AutoDetect=nvml but this Slurm was configured without NVML (no gpu_nvml.so in its plugin
    directory): slurmd exits at start. The twin is Slurm rebuilt with NVML (the plugin present)."""
    spec = workstation("20b5", GPU_BUSES)
    slurm_node(spec, "AutoDetect=nvml\n", "Gres=gpu:4 ", log=(
        "[2022-08-23T15:24:51.120] error: We were configured to autodetect nvml functionality, but we weren't able "
        "to find that lib when Slurm was configured.\n[2022-08-23T15:24:51.120] fatal: We were configured to autodetect "
        "nvml functionality, but we weren't able to find that lib when Slurm was configured.\n") if broken else
        "[2022-08-23T15:24:51.390] gpu/nvml: _get_system_gpu_list_nvml: 4 GPU system device(s) detected\n")
    if broken:
        del spec["usr/lib/x86_64-linux-gnu/slurm-wlm/gpu_nvml.so"]
    return Machine(spec, nvml=healthy_nvml(GPU_BUSES, "NVIDIA A100 80GB PCIe", (8, 0), "550.127.05"))


@case("magic-castle-27-gres-duplicate-records")
def magic_castle_27(broken: bool) -> Machine:
    """A template wrote 'Name=gpu' once per GPU after AutoDetect=nvml: 'fatal: gres.conf duplicate records for gpu'.
    AutoDetect=nvml alone is the fix."""
    spec = workstation("1eb8", ("0000:00:1e.0", "0000:00:1f.0"))
    gres = ("###########################################################\n# Slurm's Generic Resource (GRES) "
            "configuration file\n# Use NVML to gather GPU configuration information\n# Information about all other "
            "GRES gathered from slurm.conf\n###########################################################\n"
            "AutoDetect=nvml\n") + ("Name=gpu\nName=gpu\n" if broken else "")
    slurm_node(spec, gres, "Gres=gpu:2 ", log="[2020-02-20T18:59:13.000] fatal: gres.conf duplicate records for gpu\n"
               if broken else "[2020-02-20T18:59:13.000] slurmd started on Thu, 20 Feb 2020 18:59:13 +0000\n")
    return Machine(spec, nvml=healthy_nvml(("0000:00:1e.0", "0000:00:1f.0"), "Tesla T4", (7, 5), "550.127.05"))


@case("ansible-role-cuda-3-slurmd-before-device-nodes")
def ansible_role_cuda_3(broken: bool) -> Machine:
    """slurmd started at boot before anything created /dev/nvidia0 (no persistence daemon, no nvidia-smi run yet):
    'fatal: can't stat gres.conf file /dev//nvidia0'. The twin has the device nodes."""
    spec = workstation("1db4", ("0000:00:1b.0", "0000:00:1c.0"))
    slurm_node(spec, "Name=gpu File=/dev/nvidia[0-1]\n", "Gres=gpu:2 ", log=(
        "[2016-07-08T15:11:04.000] error: Waiting for gres.conf file /dev//nvidia0\n"
        "[2016-07-08T15:11:23.000] fatal: can't stat gres.conf file /dev//nvidia0: No such file or directory\n")
        if broken else "[2016-07-08T15:11:04.000] slurmd started on Fri, 08 Jul 2016 15:11:04 +0000\n")
    nodes = ["nvidiactl", "nvidia-uvm"] if broken else ["nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1"]
    return Machine(spec, nvml=healthy_nvml(("0000:00:1b.0", "0000:00:1c.0"), "Tesla V100-PCIE-16GB", (7, 0), "550.127.05"), device_nodes=nodes)


def healthy_nvml(buses, name: str, cc, driver: str):
    """The g5 NVML recording with this host's GPUs (one per PCI bus address): their name, compute capability, the
    driver."""
    import copy

    from cases import nvml_fixture

    doc = nvml_fixture("g5_ubuntu", driver_version=driver)
    base = doc["devices"][0]
    doc["devices"] = []
    for i, bus in enumerate(buses):
        d = copy.deepcopy(base)
        d["name"], d["cc"] = name, list(cc)
        d["bus_id"] = "0000" + bus.upper()
        d["uuid"] = f"GPU-{i:08x}-aaaa-bbbb-cccc-{i:012x}"
        doc["devices"].append(d)
    return doc


# -- builds without code for the GPU, more (DLD-PY-003) ---------------------------------------------------------------

TORCH_270_CU126 = {"nvidia-cuda-runtime-cu12": "12.6.77", "nvidia-cuda-nvrtc-cu12": "12.6.77",
                   "nvidia-cuda-cupti-cu12": "12.6.80", "nvidia-cublas-cu12": "12.6.4.1",
                   "nvidia-cudnn-cu12": "9.5.1.17", "nvidia-cufft-cu12": "11.3.0.4", "nvidia-curand-cu12": "10.3.7.77",
                   "nvidia-cusolver-cu12": "11.7.1.2", "nvidia-cusparse-cu12": "12.5.4.2",
                   "nvidia-nccl-cu12": "2.26.2", "nvidia-nvjitlink-cu12": "12.6.85", "nvidia-nvtx-cu12": "12.6.77"}
ARCH_CU126 = "sm_50;sm_60;sm_70;sm_75;sm_80;sm_86;sm_90"
ARCH_CU128 = "sm_75;sm_80;sm_86;sm_90;sm_100;sm_120;compute_120"
ARCH_CU128_29 = "sm_70;sm_75;sm_80;sm_86;sm_90;sm_100;sm_120"


def retorch(spec, version: str, cuda: str, pins: Dict[str, str], arch: str) -> None:
    """Replace the env's torch (and its nvidia-* wheels, torchvision, torchaudio) by this build, its fatbin for
    ``arch`` (the wheel's TORCH_CUDA_ARCH_LIST)."""
    drop(spec, *(f"{SITE}/{p}" for p in ("torch/", "torch-", "nvidia/", "nvidia_", "torchvision", "torchaudio")))
    healthy.cu12_wheels(spec, SITE, pins)
    healthy.torch(spec, SITE, version, cuda, pins)
    with_fatbin(spec, SITE, arch)


def torch_extension(spec, name: str, version: str, module: str, arch: str, torch_pin: str) -> None:
    """A compiled torch extension wheel (vLLM's _C): its object links libtorch and libcudart.so.12 and carries the
    kernels of ``arch`` in its .nv_fatbin."""
    healthy.dist(spec, SITE, name, version, {
        f"{module}/__init__.py": f"__version__ = '{version}'\n",
        f"{module}/_C.abi3.so": healthy.elf(None, needed=["libc10.so", "libtorch.so", "libtorch_cpu.so", "libc10_cuda.so",
                                                         "libtorch_cuda.so", "libcudart.so.12", "libstdc++.so.6",
                                                         "libc.so.6"], fatbin=sections(arch))},
        requires=[f"torch=={torch_pin}", "transformers>=4.45", "numpy"], tag="cp38-abi3-manylinux1_x86_64")


@case("pytorch-167244-rtx5090-torch-cu124")
def pytorch_167244(broken: bool) -> Machine:
    """A torch nightly for CUDA 12.4 (sm_50..sm_90, no PTX) on two RTX 5090s (sm_120, driver 570.124.06); the cu128
    build carries sm_120."""
    spec = workstation("2b85", ("0000:01:00.0", "0000:02:00.0"), driver="570.124.06")
    spec["proc/driver/nvidia/version"] = healthy.nvrm("570.124.06", "open")  # Blackwell runs the open modules only
    if broken:
        retorch(spec, "2.7.0.dev20250310+cu124", "12.4", healthy.TORCH_251_CU124, ARCH_CU126)
    else:
        retorch(spec, "2.7.0+cu128", "12.8", healthy.TORCH_270_CU128, ARCH_CU128)
    return Machine(spec)


@case("vllm-19542-gtx1080ti-no-sm61")
def vllm_19542(broken: bool) -> Machine:
    """vLLM 0.9.1 from PyPI is built for 7.0 and newer; on a GTX 1080 Ti (sm_61) its kernels have no image although
    torch 2.7.0+cu126 (sm_60 SASS) runs. The twin is vLLM built from source with 6.1 in TORCH_CUDA_ARCH_LIST."""
    spec = workstation("1b06", ("0000:01:00.0",))
    retorch(spec, "2.7.0+cu126", "12.6", TORCH_270_CU126, ARCH_CU126)
    torch_extension(spec, "vllm", "0.9.1", "vllm", "sm_70;sm_75;sm_80;sm_86;sm_89;sm_90;compute_90" if broken else
                    "sm_61;sm_70;sm_75;sm_80;sm_86;sm_89;sm_90;compute_90", "2.7.0")
    return Machine(spec, nvml=healthy_nvml(("0000:01:00.0",), "NVIDIA GeForce GTX 1080 Ti", (6, 1), "550.127.05"))


@case("vllm-3785-p100-no-sm60")
def vllm_3785(broken: bool) -> Machine:
    """vLLM 0.4.0's wheels start at sm_70; Tesla P100s (sm_60) have no kernel image for its ops while torch 2.1.2
    (sm_60 SASS) runs. The twin runs a vLLM built with 6.0 added (the Pascal patch's build)."""
    spec = workstation("15f8", ("0000:00:1b.0", "0000:00:1c.0"))
    retorch(spec, "2.1.2+cu121", "12.1", healthy.TORCH_251_CU124, ARCH_CU126)
    torch_extension(spec, "vllm", "0.4.0.post1", "vllm", "sm_70;sm_75;sm_80;sm_86;sm_89;sm_90;compute_90" if broken
                    else "sm_60;sm_70;sm_75;sm_80;sm_86;sm_89;sm_90;compute_90", "2.1.2")
    return Machine(spec, nvml=healthy_nvml(("0000:00:1b.0", "0000:00:1c.0"), "Tesla P100-PCIE-16GB", (6, 0),
                                           "550.127.05"))


@case("comfyui-16438-cu128-torch29-on-pascal")
def comfyui_16438(broken: bool) -> Machine:
    """torch 2.9's cu128 build starts at sm_70 (cu126 keeps sm_50/sm_60): on a Tesla P40 (sm_61) the install works
    and the first kernel fails; the twin is the cu126 build."""
    spec = workstation("1b38", ("0000:3b:00.0",), driver="570.172.08")
    if broken:
        retorch(spec, "2.9.0+cu128", "12.8", healthy.TORCH_270_CU128, ARCH_CU128_29)
    else:
        retorch(spec, "2.9.0+cu126", "12.6", TORCH_270_CU126, ARCH_CU126)
    return Machine(spec, nvml=healthy_nvml(("0000:3b:00.0",), "Tesla P40", (6, 1), "570.172.08"))


# -- the driver against the build (DLD-CUDA-001) ---------------------------------------------------------------------

def driver_case(broken: bool, old: str, device: str = "2204") -> Machine:
    return Machine(workstation(device, ("0000:01:00.0",), driver=old if broken else "550.127.05"))


@case("gpt-sovits-83-driver-470-torch-cu12")
def gpt_sovits_83(broken: bool) -> Machine:
    """Driver 470 (CUDA 11.4) under a torch CUDA 12 build ('found version 11040'): the maintainers' answer, a newer
    driver (or a cu118 build)."""
    return driver_case(broken, "470.223.02")


@case("seqnet-36-driver-470-torch-cu12")
def seqnet_36(broken: bool) -> Machine:
    """The same driver floor under a training repository's torch: 'found version 11040' on driver 470.199.02."""
    return driver_case(broken, "470.199.02", device="1eb8")


@case("chatchat-2420-driver-510-torch-cu12")
def chatchat_2420(broken: bool) -> Machine:
    """An update pulled a torch CUDA 12 build onto a server whose driver 510 supports CUDA 11.6 ('found version
    11060')."""
    return driver_case(broken, "510.108.03", device="20b5")


@case("sglang-11395-cuda13-image-on-driver-550")
def sglang_11395(broken: bool) -> Machine:
    """An image built for CUDA 13 (NVIDIA_REQUIRE_CUDA cuda>=13.0) on hosts whose driver 550 supports CUDA 12.4
    ('found version 12040'); CUDA 13 needs R580."""
    spec = healthy.docker_pytorch_nvidia_runtime()
    if broken:
        set_environ(spec, NVIDIA_REQUIRE_CUDA="cuda>=13.0 brand=unknown,driver>=535,driver<536 brand=grid,driver>=535,"
                                              "driver<536", CUDA_VERSION="13.0.1")
    return Machine(spec)


# -- nvcc against torch's CUDA (DLD-PY-008) ----------------------------------------------------------------------------

def nvcc_case(broken: bool, nvcc: str, libs, torch_version: str, torch_cuda: str) -> Machine:
    spec = workstation("2204", ("0000:01:00.0",))
    if torch_version != "2.5.1+cu124":
        drop(spec, f"{SITE}/torch/", f"{SITE}/torch-", f"{SITE}/torchvision", f"{SITE}/torchaudio")
        healthy.torch(spec, SITE, torch_version, torch_cuda, healthy.TORCH_251_CU124)
    mm = ".".join(nvcc.split(".")[:2])
    healthy.cuda_toolkit(spec, nvcc, libs=libs, link=False)
    good = "/usr/local/cuda-" + ("12.4" if torch_cuda.startswith("12.4") else "12.1")
    home = f"/usr/local/cuda-{mm}" if broken else good
    spec["usr/local/cuda"] = {"symlink": home}
    set_environ(spec, CUDA_HOME=home, PATH=f"/opt/conda/envs/pytorch/bin:{home}/bin:/usr/local/sbin:/usr/local/bin:"
                                          "/usr/sbin:/usr/bin:/sbin:/bin")
    return Machine(spec)


@case("autoalign-25-nvcc-118-torch-cu124")
def autoalign_25(broken: bool) -> Machine:
    """Building the project's CUDA extension with the CUDA 11.8 toolkit under torch 2.5.1+cu124."""
    return nvcc_case(broken, "11.8.0", healthy.CUDA_118_LIBS, "2.5.1+cu124", "12.4")


@case("chamferdist-26-nvcc-118-torch-cu121")
def chamferdist_26(broken: bool) -> Machine:
    """chamferdist's build with CUDA 11.8's nvcc and a torch 2.2.2+cu121."""
    return nvcc_case(broken, "11.8.0", healthy.CUDA_118_LIBS, "2.2.2+cu121", "12.1")


@case("stable-fast-161-nvcc-118-torch-cu121")
def stable_fast_161(broken: bool) -> Machine:
    """stable-fast's source build on a CUDA 11.8 machine with torch 2.4.0+cu121."""
    return nvcc_case(broken, "11.8.0", healthy.CUDA_118_LIBS, "2.4.0+cu121", "12.1")


# -- TensorFlow against the CUDA libraries the loader finds (DLD-PY-011) ------------------------------------------------

TF23_BUILD_INFO = ('"""Auto-generated module providing information about the build."""\nimport collections\n\n'
                   "build_info = collections.OrderedDict([('cuda_version', '10.1'), ('cudnn_version', '7'), "
                   "('is_cuda_build', True), ('is_rocm_build', False)])\n")
CUDA_110_LIBS = [("libcudart.so.11.0.221", "libcudart.so.11.0"), ("libcublas.so.11.2.0.252", "libcublas.so.11"),
                 ("libcufft.so.10.2.1.245", "libcufft.so.10"), ("libcurand.so.10.2.1.245", "libcurand.so.10"),
                 ("libcusolver.so.10.6.0.245", "libcusolver.so.10"), ("libcusparse.so.11.1.1.245", "libcusparse.so.11")]
CUDA_101_LIBS = [("libcudart.so.10.1.243", "libcudart.so.10.1"), ("libcublas.so.10.2.1.243", "libcublas.so.10"),
                 ("libcufft.so.10.1.1.243", "libcufft.so.10"), ("libcurand.so.10.1.1.243", "libcurand.so.10"),
                 ("libcusolver.so.10.2.0.243", "libcusolver.so.10"), ("libcusparse.so.10.3.0.243", "libcusparse.so.10"),
                 ("libcudnn.so.7.6.5", "libcudnn.so.7")]


@case("tensorflow-42162-tf23-cuda101-on-cuda110")
def tensorflow_42162(broken: bool) -> Machine:
    """tensorflow 2.3 is a CUDA 10.1 build ('libcudart.so.10.1'); the machine has only CUDA 11.0 (libcudart.so.11.0),
    which it never loads. The twin has the CUDA 10.1 runtime and cuDNN 7 beside it."""
    spec = workstation("1e87", ("0000:01:00.0",), torch=False)
    site = "usr/local/lib/python3.8/dist-packages"
    spec["usr/bin/python3.8"] = healthy.elf(None, needed=["libc.so.6"])
    healthy.dist(spec, site, "tensorflow", "2.3.0", {
        "tensorflow/__init__.py": "",
        "tensorflow/libtensorflow_framework.so.2": healthy.elf(
            "libtensorflow_framework.so.2", needed=["libstdc++.so.6", "libc.so.6"], runpath=["$ORIGIN"]),
        "tensorflow/python/_pywrap_tensorflow_internal.so": healthy.elf(
            None, needed=["libtensorflow_framework.so.2", "libc.so.6"], runpath=["$ORIGIN/..", "$ORIGIN/../.."]),
        "tensorflow/python/platform/build_info.py": TF23_BUILD_INFO},
        requires=["numpy<1.19.0,>=1.16.0", "absl-py>=0.7.0"], tag="cp38-cp38-manylinux2010_x86_64")
    drop(spec, "usr/local/cuda-12.4/", "usr/local/cuda-12.1/", "usr/local/cuda")
    root = healthy.cuda_toolkit(spec, "11.0.3")
    cuda_libs(spec, root, CUDA_110_LIBS)
    conf = f"{root}/targets/x86_64-linux/lib\n"
    if not broken:
        old = healthy.cuda_toolkit(spec, "10.1.243", link=False)
        cuda_libs(spec, old, CUDA_101_LIBS)
        conf += f"{old}/targets/x86_64-linux/lib\n"
    spec["etc/ld.so.conf.d/cuda.conf"] = conf
    set_environ(spec, LD_LIBRARY_PATH=None, CUDA_HOME=None,
                PATH="/usr/local/cuda-11.0/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    return Machine(spec)


@case("tensorflow-56413-tf29-cudart-in-conda-lib")
def tensorflow_56413(broken: bool) -> Machine:
    """tensorflow 2.9 pip-installed into a conda env whose cudatoolkit 11.2 put libcudart.so.11.0 in $CONDA_PREFIX/lib:
    TensorFlow's loader never looks there (its RUNPATH is its own directory), so 'Could not load dynamic library
    libcudart.so.11.0'. The twin follows the install guide: LD_LIBRARY_PATH=$CONDA_PREFIX/lib."""
    spec = workstation("1eb8", ("0000:00:1e.0",), torch=False)
    prefix = "/opt/conda/envs/tf"
    site = healthy.conda_env(spec, prefix, python="3.9.12")
    tensorflow_cuda11(spec, site)
    lib = f"{prefix.strip('/')}/lib"
    for real, soname in (("libcudart.so.11.2.152", "libcudart.so.11.0"), ("libcublas.so.11.4.1.1043", "libcublas.so.11"),
                         ("libcublasLt.so.11.4.1.1043", "libcublasLt.so.11"), ("libcufft.so.10.4.0.135", "libcufft.so.10"),
                         ("libcurand.so.10.2.3.135", "libcurand.so.10"), ("libcusolver.so.11.1.0.135", "libcusolver.so.11"),
                         ("libcusparse.so.11.4.0.135", "libcusparse.so.11"), ("libcudnn.so.8.1.0", "libcudnn.so.8")):
        healthy.so(spec, lib, real, soname, links=[soname.split(".so")[0] + ".so"])
    healthy.conda_pkg(spec, prefix, "cudatoolkit", "11.2.2", "hbe64b41_10")
    healthy.conda_pkg(spec, prefix, "cudnn", "8.1.0.77", "h90431f1_0")
    set_environ(spec, CONDA_PREFIX=prefix, CONDA_DEFAULT_ENV="tf",
                PATH=f"{prefix}/bin:/opt/conda/condabin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                LD_LIBRARY_PATH=None if broken else f"{prefix}/lib/")
    return Machine(spec)


# -- Ray -----------------------------------------------------------------------------------------------------------------

@case("ray-9503-tune-trainable-without-gpu")
def ray_9503(broken: bool) -> Machine:
    """A Tune trainable started without a GPU in its resources (the trial's placement group had none): Ray set
    CUDA_VISIBLE_DEVICES='' in its worker and torch sees no GPU. With resources_per_trial={'gpu': 1} it gets one."""
    spec = workstation("1e07", ("0000:65:00.0",))
    set_environ(spec, CUDA_VISIBLE_DEVICES="" if broken else "0", RAY_RAYLET_PID="2231", RAY_JOB_ID="02000000",
                RAY_NODE_IP_ADDRESS="192.168.1.20", TUNE_ORIG_WORKING_DIR="/home/ubuntu/exp")
    return Machine(spec)


@case("leggedlab-26-rtx5090-torch-cu126")
def leggedlab_26(broken: bool) -> Machine:
    """A training stack's torch 2.7.0+cu126 (sm_50..sm_90) on an RTX 5090 (sm_120); the reporter's fix, a cu128
    build, carries sm_120."""
    spec = workstation("2b85", ("0000:01:00.0",), driver="575.57.08")
    spec["proc/driver/nvidia/version"] = healthy.nvrm("575.57.08", "open")
    if broken:
        retorch(spec, "2.7.0+cu126", "12.6", TORCH_270_CU126, ARCH_CU126)
    else:
        retorch(spec, "2.8.0.dev20250605+cu128", "12.8", healthy.TORCH_270_CU128, ARCH_CU128)
    return Machine(spec)


@case("flymyai-47-rtx5090-torch-cu124")
def flymyai_47(broken: bool) -> Machine:
    """The trainer's pinned torch 2.6.0+cu124 (sm_50..sm_90) on an RTX 5090: 'sm_120 is not compatible'."""
    spec = workstation("2b85", ("0000:41:00.0",), driver="570.172.08")
    spec["proc/driver/nvidia/version"] = healthy.nvrm("570.172.08", "open")
    if broken:
        retorch(spec, "2.6.0+cu124", "12.4", healthy.TORCH_251_CU124, ARCH_CU126)
    else:
        retorch(spec, "2.7.1+cu128", "12.8", healthy.TORCH_270_CU128, ARCH_CU128)
    return Machine(spec)


CUDA_116_LIBS = [("libcudart.so.11.6.55", "libcudart.so.11.0"), ("libnvToolsExt.so.1.0.0", "libnvToolsExt.so.1")]
CUDA_120_LIBS = [("libcudart.so.12.0.146", "libcudart.so.12"), ("libnvToolsExt.so.1.0.0", "libnvToolsExt.so.1")]
CUDA_123_LIBS = [("libcudart.so.12.3.101", "libcudart.so.12"), ("libnvToolsExt.so.1.0.0", "libnvToolsExt.so.1")]


def nvcc_bundled_case(broken: bool, nvcc: str, libs, good: str, good_libs, torch_version: str,
                      torch_cuda: str) -> Machine:
    """A torch wheel of download.pytorch.org that bundles its CUDA runtime (torch/lib), and the toolkit CUDA_HOME,
    the nvcc on PATH and /usr/local/cuda point at: the broken machine's is another CUDA major than torch's; the
    twin's is the toolkit of torch's CUDA."""
    spec = workstation("2204", ("0000:01:00.0",), torch=False)
    torch_bundled(spec, SITE, torch_version, torch_cuda, ARCH_CU126)
    for version, ls in ((nvcc, libs), (good, good_libs)):
        if not spec.get(f"usr/local/cuda-{'.'.join(version.split('.')[:2])}/version.json"):
            healthy.cuda_toolkit(spec, version, libs=ls, link=False)
    mm = ".".join((nvcc if broken else good).split(".")[:2])
    home = f"/usr/local/cuda-{mm}"
    spec["usr/local/cuda"] = {"symlink": home}
    set_environ(spec, CUDA_HOME=home, LD_LIBRARY_PATH=f"{home}/lib64",
                PATH=f"/opt/conda/envs/pytorch/bin:{home}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    return Machine(spec)


@case("dect-1-nvcc-121-torch-cu118")
def dect_1(broken: bool) -> Machine:
    """The CUDA 12.1 toolkit under torch 2.0.1+cu118: 'The detected CUDA version (12.1) mismatches ... (11.8)'."""
    return nvcc_bundled_case(broken, "12.1.1", healthy.CUDA_121_LIBS, "11.8.0", healthy.CUDA_118_LIBS,
                             "2.0.1+cu118", "11.8")


@case("hupor-2-nvcc-120-torch-cu116")
def hupor_2(broken: bool) -> Machine:
    """The CUDA 12.0 toolkit under torch 1.13.1+cu116."""
    return nvcc_bundled_case(broken, "12.0.1", CUDA_120_LIBS, "11.6.2", CUDA_116_LIBS, "1.13.1+cu116", "11.6")


@case("rational-kat-cu-4-nvcc-121-torch-cu118")
def rational_kat_cu_4(broken: bool) -> Machine:
    """Building the CUDA kernels with CUDA 12.1's nvcc after switching torch to cu118."""
    return nvcc_bundled_case(broken, "12.1.1", healthy.CUDA_121_LIBS, "11.8.0", healthy.CUDA_118_LIBS,
                             "2.1.2+cu118", "11.8")


@case("lettuce-144-nvcc-123-torch-cu118")
def lettuce_144(broken: bool) -> Machine:
    """The CUDA 12.3 toolkit under torch 2.1.0+cu118 when lettuce builds its native extension."""
    return nvcc_bundled_case(broken, "12.3.2", CUDA_123_LIBS, "11.8.0", healthy.CUDA_118_LIBS, "2.1.0+cu118", "11.8")


# -- PTX compiled at run time against the driver (DLD-CUDA-003) ---------------------------------------------------------

@case("colab-5667-numba-ptx-from-cuda125-on-driver-550")
def colab_5667(broken: bool) -> Machine:
    """numba.cuda compiles its kernels to PTX with the CUDA 12.5 toolkit (/usr/local/cuda) and the driver, 550.54.15
    (CUDA 12.4), refuses PTX ISA 8.5. The twin's /usr/local/cuda is the 12.4 toolkit."""
    spec = workstation("1eb8", ("0000:00:04.0",), driver="550.54.15")
    healthy.pure(spec, SITE, "numba", "0.60.0")
    healthy.pure(spec, SITE, "llvmlite", "0.43.0")
    healthy.cuda_toolkit(spec, "12.5.82", libs=[("libcudart.so.12.5.82", "libcudart.so.12")], link=False)
    spec["usr/local/cuda-12.5/nvvm/lib64/libnvvm.so.4.0.0"] = healthy.elf("libnvvm.so.4")
    spec["usr/local/cuda"] = {"symlink": "/usr/local/cuda-12.5" if broken else "/usr/local/cuda-12.4"}
    set_environ(spec, CUDA_HOME=None, CUDA_PATH=None, LD_LIBRARY_PATH="/usr/lib64-nvidia",
                PATH="/opt/conda/envs/pytorch/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                     "/usr/bin:/sbin:/bin")
    return Machine(spec)


# -- the toolkit that builds extensions against the GPU (DLD-CUDA-004) --------------------------------------------------

CUDA_115_LIBS = [("libcudart.so.11.5.117", "libcudart.so.11.0"), ("libnvToolsExt.so.1.0.0", "libnvToolsExt.so.1")]
CUDA_113_LIBS = [("libcudart.so.11.3.109", "libcudart.so.11.0"), ("libnvToolsExt.so.1.0.0", "libnvToolsExt.so.1")]


def old_nvcc_case(broken: bool, device: str, old: str, libs, torch_version: str, torch_cuda: str,
                  good: str = "11.8.0", good_libs=None) -> Machine:
    """A workstation whose CUDA_HOME, PATH and /usr/local/cuda point at a toolkit older than the GPU's architecture
    (the twin: a toolkit that compiles for it, of torch's CUDA major)."""
    spec = workstation(device, ("0000:01:00.0",), torch=False)
    torch_bundled(spec, SITE, torch_version, torch_cuda, "sm_37;sm_50;sm_60;sm_61;sm_70;sm_75;sm_80;sm_86")
    healthy.cuda_toolkit(spec, old, libs=libs, link=False)
    healthy.cuda_toolkit(spec, good, libs=good_libs or healthy.CUDA_118_LIBS, link=False)
    home = "/usr/local/cuda-" + ".".join((old if broken else good).split(".")[:2])
    spec["usr/local/cuda"] = {"symlink": home}
    set_environ(spec, CUDA_HOME=home, LD_LIBRARY_PATH=f"{home}/lib64",
                PATH=f"/opt/conda/envs/pytorch/bin:{home}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    return Machine(spec)


@case("3detr-59-nvcc-115-rtx4090")
def detr3_59(broken: bool) -> Machine:
    """Building pointnet2's CUDA ops with the CUDA 11.5 toolkit on an RTX 4090 (sm_89, first compiled by CUDA 11.8):
    'nvcc fatal : Unsupported gpu architecture compute_89'."""
    return old_nvcc_case(broken, "2684", "11.5.2", CUDA_115_LIBS, "1.12.1+cu113", "11.3")


@case("tiny-cuda-nn-239-nvcc-113-rtx4090")
def tiny_cuda_nn_239(broken: bool) -> Machine:
    """tiny-cuda-nn's torch bindings built with CUDA 11.3 (torch 1.10's) for an RTX 4090: compute_89 unknown to it."""
    return old_nvcc_case(broken, "2684", "11.3.1", CUDA_113_LIBS, "1.10.0+cu113", "11.3")


@case("nvbandwidth-25-nvcc-115-rtx4090")
def nvbandwidth_25(broken: bool) -> Machine:
    """nvbandwidth's CMake build for the native architecture of an RTX 4090 with the distribution's CUDA 11.5 nvcc
    first on PATH."""
    return old_nvcc_case(broken, "2684", "11.5.2", CUDA_115_LIBS, "1.12.1+cu113", "11.3", good="12.4.1",
                         good_libs=healthy.CUDA_124_LIBS)
