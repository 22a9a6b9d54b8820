"""The healthy corpus (issue 25 item 5): realistic HEALTHY machines as sysroot trees, each full of benign look-alikes.

Every builder returns a build_tree() spec (paths -> text, bytes, {"symlink": ...}); ELF objects are real
(tests/elfkit.py: SONAME, NEEDED, RUNPATH/RPATH, verneed/verdef, the machine). ``HEALTHY`` names each machine, its
builder and, where the healthy state lives in NVML or device nodes (MIG, a pod's share of the GPUs, an NVSwitch
node), the recorded NVML (tests/fixtures/nvml) and device listing it is paired with. tests/e2e/test_healthy_corpus.py
holds each to `dl-doctor --fail-on warn`; tests/fixtures/healthy/NAME.json lists the warnings that are allowed there
(with the reason someone would act on them) and the false positives still pending (with their diagnosis).

Versions are the real ones of the releases named (torch 2.4.1+cu124 pins the nvidia-*-cu12 12.4.99 family, torch
2.5.1+cu124 the 12.4.127 one; CUDA 12.4.1's toolkit ships libcudart.so.12.4.127, libnvToolsExt.so.1.0.0 and CUPTI
2024.1.1), so look-alikes from different numbering schemes meet as they do on the machines.
"""

from __future__ import annotations

import copy
import json
import lzma
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import machines
from elfkit import elf_bytes
from trees import RHEL88_OS_RELEASE

Spec = Dict[str, Any]

# -- distributions ---------------------------------------------------------------------------------------------------

OS_RELEASE = {
    "rhel8": RHEL88_OS_RELEASE,
    "al2023": ('NAME="Amazon Linux"\nVERSION="2023"\nID="amzn"\nID_LIKE="fedora"\nVERSION_ID="2023"\n'
               'PLATFORM_ID="platform:al2023"\nPRETTY_NAME="Amazon Linux 2023.6.20241121"\nANSI_COLOR="0;33"\n'
               'CPE_NAME="cpe:2.3:o:amazon:amazon_linux:2023"\nHOME_URL="https://aws.amazon.com/linux/amazon-linux-2023/"\n'
               'SUPPORT_END="2029-06-30"\n'),
    "ubuntu2204": ('PRETTY_NAME="Ubuntu 22.04.5 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\n'
                   'VERSION="22.04.5 LTS (Jammy Jellyfish)"\nVERSION_CODENAME=jammy\nID=ubuntu\nID_LIKE=debian\n'
                   'HOME_URL="https://www.ubuntu.com/"\nUBUNTU_CODENAME=jammy\n'),
    "ubuntu2404": ('PRETTY_NAME="Ubuntu 24.04.1 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\n'
                   'VERSION="24.04.1 LTS (Noble Numbat)"\nVERSION_CODENAME=noble\nID=ubuntu\nID_LIKE=debian\n'
                   'HOME_URL="https://www.ubuntu.com/"\nUBUNTU_CODENAME=noble\nLOGO=ubuntu-logo\n'),
}
KERNEL = {"rhel8": "4.18.0-553.27.1.el8_10.x86_64", "al2023": "6.1.115-126.197.amzn2023.x86_64",
          "ubuntu2204": "6.8.0-1019-aws", "ubuntu2404": "6.8.0-1019-aws"}
HOST_MOUNTS = ("/dev/nvme0n1p1 / {fs} rw,noatime,attr2,inode64,logbufs=8,logbsize=32k,noquota 0 0\n"
               "devtmpfs /dev devtmpfs rw,nosuid,size=4096k,nr_inodes=131072,mode=755 0 0\n"
               "tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0\n"
               "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n"
               "sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0\n"
               "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate,memory_recursiveprot 0 0\n"
               "tmpfs /run tmpfs rw,nosuid,nodev,size=1024k,mode=755 0 0\n")


def _meminfo(total_kb: int, swap_kb: int = 0) -> str:
    return (f"MemTotal:       {total_kb} kB\nMemFree:        {total_kb * 97 // 100} kB\n"
            f"MemAvailable:   {total_kb * 98 // 100} kB\nSwapTotal:       {swap_kb} kB\nSwapFree:        {swap_kb} kB\n")


MEMINFO = {"1152G": _meminfo(1176957128), "2048G": _meminfo(2097152000), "96G": _meminfo(98273216),
           "128G": _meminfo(131072000, 2097148), "480G": _meminfo(503316480), "64G": _meminfo(65011712, 8388604)}
LIBDIR = {"x86_64": "usr/lib/x86_64-linux-gnu", "aarch64": "usr/lib/aarch64-linux-gnu"}


def environ(env: Dict[str, str]) -> bytes:
    return b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())


def elf(soname: Optional[str] = None, needed: Sequence[str] = ("libc.so.6",), machine: str = "x86_64",
        **kw: Any) -> bytes:
    return elf_bytes(soname=soname, needed=needed, machine=machine, **kw)


def so(spec: Spec, directory: str, real: str, soname: str, machine: str = "x86_64", links: Iterable[str] = (),
       **kw: Any) -> None:
    """A versioned shared object with its soname link (and any dev links), as packages install them."""
    directory = directory.strip("/")
    spec[f"{directory}/{real}"] = elf(soname, machine=machine, **kw)
    if soname != real:
        spec[f"{directory}/{soname}"] = {"symlink": real}
    for link in links:
        spec[f"{directory}/{link}"] = {"symlink": soname}


def glibc(spec: Spec, libdir: str, machine: str = "x86_64", glibcxx: str = "GLIBCXX_3.4.30") -> None:
    """libc, libm, libstdc++ (with its version definitions up to ``glibcxx``), libgcc_s, as the distro ships them."""
    for name in ("libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1"):
        spec[f"{libdir}/{name}"] = elf(name, needed=(), machine=machine, verdef=[name, "GLIBC_2.2.5", "GLIBC_2.17"])
    top = int(glibcxx.rsplit(".", 1)[1])
    defs = ["libstdc++.so.6", "GLIBCXX_3.4"] + [f"GLIBCXX_3.4.{n}" for n in range(1, top + 1)] + \
           ["CXXABI_1.3", "CXXABI_1.3.9", "CXXABI_1.3.13"]
    so(spec, libdir, "libstdc++.so.6.0." + str(top), "libstdc++.so.6", machine=machine, verdef=defs)
    spec[f"{libdir}/libgcc_s.so.1"] = elf("libgcc_s.so.1", machine=machine, verdef=["libgcc_s.so.1", "GCC_3.0"])


# -- the NVIDIA driver on a host --------------------------------------------------------------------------------------

def driver_userspace(spec: Spec, libdir: str, version: str, machine: str = "x86_64") -> None:
    libdir = libdir.strip("/")
    for lib, soname in (("libcuda", "libcuda.so.1"), ("libnvidia-ml", "libnvidia-ml.so.1"),
                        ("libnvidia-ptxjitcompiler", "libnvidia-ptxjitcompiler.so.1"),
                        ("libnvidia-nvvm", "libnvidia-nvvm.so.4"), ("libcudadebugger", "libcudadebugger.so.1")):
        so(spec, libdir, f"{lib}.so.{version}", soname, machine=machine,
           links=[f"{lib}.so"] if lib in ("libcuda", "libnvidia-ml") else ())
    spec[f"{libdir}/libnvidia-cfg.so.{version}"] = elf("libnvidia-cfg.so.1", machine=machine)


def nvrm(version: str, flavor: str, arch: str = "x86_64") -> str:
    if flavor == "open":
        return (f"NVRM version: NVIDIA UNIX Open Kernel Module for {arch}  {version}  Release Build  "
                f"(dvs-builder@U16-I3-D08-1-1)  Tue Oct  1 03:24:38 UTC 2024\nGCC version:  gcc version 11.4.0\n")
    return (f"NVRM version: NVIDIA UNIX {arch} Kernel Module  {version}  Wed Oct 30 19:24:57 UTC 2024\n"
            "GCC version:  gcc version 8.5.0 20210514 (Red Hat 8.5.0-22) (GCC)\n")


PROC_MODULES_NVIDIA = ("nvidia_uvm 4956160 4 - Live 0x0000000000000000 (POE)\n"
                       "nvidia_drm 77824 0 - Live 0x0000000000000000 (POE)\n"
                       "nvidia_modeset 1314816 1 nvidia_drm, Live 0x0000000000000000 (POE)\n"
                       "nvidia 56463360 108 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (POE)\n"
                       "drm_kms_helper 184320 1 nvidia_drm, Live 0x0000000000000000\n")


def kernel_host(spec: Spec, distro: str, driver: str, flavor: str = "proprietary", arch: str = "x86_64",
                kernel: Optional[str] = None, extra_modules: str = "") -> str:
    """A booted host's kernel side: the running kernel, the loaded nvidia module, its .ko for that kernel."""
    k = kernel or KERNEL[distro]
    spec["proc/sys/kernel/osrelease"] = k + "\n"
    spec["proc/version"] = f"Linux version {k} (mockbuild@builder) (gcc version 11.4.0) #1 SMP\n"
    spec["proc/driver/nvidia/version"] = nvrm(driver, flavor, arch)
    spec["proc/modules"] = PROC_MODULES_NVIDIA + extra_modules + "xfs 1556480 2 - Live 0x0000000000000000\n"
    spec["sys/module/nvidia/version"] = driver + "\n"
    spec[f"lib/modules/{k}/modules.dep"] = ""
    blob = machines.module_blob(driver, k)
    if distro.startswith("ubuntu"):
        pkg = "nvidia-" + driver.split(".")[0] + "srv" + ("-open" if flavor == "open" else "")
        spec[f"lib/modules/{k}/kernel/{pkg}/nvidia.ko"] = blob
        spec[f"lib/modules/{k}/kernel/{pkg}/nvidia-uvm.ko"] = blob
        spec[f"boot/vmlinuz-{k}"] = ""
        spec["boot/vmlinuz"] = {"symlink": f"vmlinuz-{k}"}
    else:
        spec[f"lib/modules/{k}/extra/nvidia.ko.xz"] = lzma.compress(blob)
        spec[f"lib/modules/{k}/extra/nvidia-uvm.ko.xz"] = lzma.compress(blob)
        spec[f"var/lib/dkms/nvidia/{driver}/{k}/{arch}/module/nvidia.ko.xz"] = ""
        spec[f"boot/vmlinuz-{k}"] = ""
        spec["boot/grub2/grubenv"] = f"# GRUB Environment Block\nsaved_entry=ec2abcdef-{k}\nkernelopts=root=UUID=1 ro\n"
        spec[f"boot/loader/entries/ec2abcdef-{k}.conf"] = f"title ({k})\nversion {k}\nlinux /vmlinuz-{k}\n"
    for fw in ("gsp_ga10x.bin", "gsp_tu10x.bin"):
        spec[f"lib/firmware/nvidia/{driver}/{fw}"] = b"\0"
    spec["etc/modprobe.d/nvidia.conf"] = "options nvidia NVreg_EnableGpuFirmware=1\n" if flavor == "open" else \
        "options nvidia NVreg_RestrictProfilingToAdminUsers=0\n"
    spec["usr/lib/modprobe.d/blacklist-nouveau.conf"] = "blacklist nouveau\noptions nouveau modeset=0\n"
    return k


def persistenced(spec: Spec) -> None:
    spec["usr/lib/systemd/system/nvidia-persistenced.service"] = (
        "[Unit]\nDescription=NVIDIA Persistence Daemon\nWants=syslog.target\n\n[Service]\nType=forking\n"
        "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced\n"
        "ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced\n\n[Install]\nWantedBy=multi-user.target\n")
    spec["etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service"] = {
        "symlink": "/usr/lib/systemd/system/nvidia-persistenced.service"}
    spec["usr/bin/nvidia-persistenced"] = elf(None)
    spec["usr/bin/nvidia-smi"] = elf(None)


def fabric_manager(spec: Spec, version: str) -> None:
    machines.fabric_manager(spec, version)
    spec["usr/bin/nv-fabricmanager"] = elf(None)
    spec["usr/share/nvidia/nvswitch/fabricmanager.cfg"] = ("LOG_LEVEL=4\nLOG_FILE_NAME=/var/log/fabricmanager.log\n"
                                                           "FABRIC_MODE=0\nFM_STAY_RESIDENT_ON_FAILURES=0\n")
    spec["var/log/fabricmanager.log"] = (
        f"[Nov 29 2024 10:00:12] [INFO] [tid 2391] Fabric Manager version {version} is running with the following "
        "configuration options\n[Nov 29 2024 10:00:20] [INFO] [tid 2391] Successfully configured all the available "
        "NVSwitches to route GPU NVLink traffic. NVLink Peer-to-Peer support will be enabled once GPUs are "
        "successfully registered with the NVLink fabric.\n")


def cuda_toolkit(spec: Spec, version: str, arch: str = "x86_64", link: bool = True,
                 libs: Sequence[Tuple[str, str]] = ()) -> str:
    """/usr/local/cuda-X.Y as the runfile/rpm installs it: version.json, nvcc, lib64 with its versioned files."""
    mm = ".".join(version.split(".")[:2])
    root = f"usr/local/cuda-{mm}"
    components = {"cuda": {"name": "CUDA SDK", "version": version},
                  "cuda_cudart": {"name": "CUDA Runtime (cudart)", "version": libs[0][0].split(".so.")[1] if libs else version},
                  "cuda_nvcc": {"name": "CUDA NVCC", "version": version}}
    spec[f"{root}/version.json"] = json.dumps(components, indent=3)
    spec[f"{root}/bin/nvcc"] = elf(None, machine=arch)
    target = "sbsa-linux" if arch == "aarch64" else "x86_64-linux"
    spec[f"{root}/lib64"] = {"symlink": f"targets/{target}/lib"}
    spec[f"{root}/include"] = {"symlink": f"targets/{target}/include"}
    lib = f"{root}/targets/{target}/lib"
    for real, soname in libs:
        so(spec, lib, real, soname, machine=arch, links=[soname.split(".so")[0] + ".so"])
    if link:
        spec["usr/local/cuda"] = {"symlink": f"/usr/local/cuda-{mm}"}
    return f"/{root}"


# CUDA 12.4.1's toolkit (runfile): the file versions of what it installs in lib64 and extras/CUPTI/lib64
CUDA_124_LIBS = [("libcudart.so.12.4.127", "libcudart.so.12"), ("libcublas.so.12.4.5.8", "libcublas.so.12"),
                 ("libcublasLt.so.12.4.5.8", "libcublasLt.so.12"), ("libcufft.so.11.2.1.3", "libcufft.so.11"),
                 ("libcurand.so.10.3.5.147", "libcurand.so.10"), ("libcusolver.so.11.6.1.9", "libcusolver.so.11"),
                 ("libcusparse.so.12.3.1.170", "libcusparse.so.12"), ("libnvJitLink.so.12.4.127", "libnvJitLink.so.12"),
                 ("libnvrtc.so.12.4.127", "libnvrtc.so.12"), ("libnvToolsExt.so.1.0.0", "libnvToolsExt.so.1")]
CUDA_121_LIBS = [("libcudart.so.12.1.105", "libcudart.so.12"), ("libcublas.so.12.1.3.1", "libcublas.so.12"),
                 ("libcublasLt.so.12.1.3.1", "libcublasLt.so.12"), ("libnvToolsExt.so.1.0.0", "libnvToolsExt.so.1")]
CUDA_118_LIBS = [("libcudart.so.11.8.89", "libcudart.so.11.0"), ("libcublas.so.11.11.3.6", "libcublas.so.11"),
                 ("libnvToolsExt.so.1.0.0", "libnvToolsExt.so.1")]


def cupti(spec: Spec, cuda_root: str, real: str = "libcupti.so.2024.1.1", arch: str = "x86_64") -> None:
    so(spec, f"{cuda_root.strip('/')}/extras/CUPTI/lib64", real, "libcupti.so.12", machine=arch, links=["libcupti.so"])


def cudnn_system(spec: Spec, libdir: str, version: str = "9.1.0", arch: str = "x86_64") -> None:
    for name in ("libcudnn", "libcudnn_graph", "libcudnn_ops", "libcudnn_cnn", "libcudnn_adv",
                 "libcudnn_engines_precompiled", "libcudnn_engines_runtime_compiled", "libcudnn_heuristic"):
        so(spec, libdir, f"{name}.so.{version}", f"{name}.so.9", machine=arch)


def nccl_system(spec: Spec, libdir: str, version: str = "2.21.5", arch: str = "x86_64") -> None:
    so(spec, libdir, f"libnccl.so.{version}", "libnccl.so.2", machine=arch, links=["libnccl.so"])


# -- Python: conda environments, wheels ------------------------------------------------------------------------------

def site_of(prefix: str, python: str = "3.11") -> str:
    return f"{prefix.strip('/')}/lib/python{python}/site-packages"


def dist(spec: Spec, site: str, name: str, version: str, files: Dict[str, Any], requires: Sequence[str] = (),
         tag: str = "cp311-cp311-manylinux_2_17_x86_64", installer: str = "pip") -> None:
    """A wheel installed by pip: its files, and .dist-info with METADATA, WHEEL, INSTALLER and a RECORD of them."""
    site = site.strip("/")
    for rel, content in files.items():
        spec[f"{site}/{rel}"] = content
    d = f"{name.replace('-', '_')}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    spec[f"{site}/{d}/METADATA"] = meta
    spec[f"{site}/{d}/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: bdist_wheel (0.43.0)\nRoot-Is-Purelib: false\nTag: {tag}\n"
    spec[f"{site}/{d}/INSTALLER"] = installer + "\n"
    record = "".join(f"{rel},sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,{len(c) if isinstance(c, (str, bytes)) else 0}\n"
                     for rel, c in files.items() if isinstance(c, (str, bytes)))
    spec[f"{site}/{d}/RECORD"] = record + f"{d}/METADATA,,\n{d}/WHEEL,,\n{d}/INSTALLER,,\n{d}/RECORD,,\n"


def conda_pkg(spec: Spec, prefix: str, name: str, version: str, build: str, channel: str = "conda-forge",
              files: Sequence[str] = ()) -> None:
    prefix = prefix.strip("/")
    spec[f"{prefix}/conda-meta/{name}-{version}-{build}.json"] = json.dumps({
        "name": name, "version": version, "build": build, "build_number": 0,
        "channel": f"https://conda.anaconda.org/{channel}", "subdir": "linux-64", "files": list(files),
        "requested_spec": name})


def conda_env(spec: Spec, prefix: str, python: str = "3.11.10", machine: str = "x86_64",
              build: str = "hc5c86c4_3_cpython") -> str:
    """A conda environment with its python (conda-forge's), libstdc++ from libstdcxx-ng, and conda-meta."""
    p = prefix.strip("/")
    mm = ".".join(python.split(".")[:2])
    spec[f"{p}/bin/python{mm}"] = elf(None, needed=("libpthread.so.0", "libc.so.6"), machine=machine,
                                      runpath=["$ORIGIN/../lib"])
    spec[f"{p}/bin/python3"] = {"symlink": f"python{mm}"}
    spec[f"{p}/bin/python"] = {"symlink": f"python{mm}"}
    spec[f"{p}/lib/python{mm}/os.py"] = "# conda python\n"
    conda_pkg(spec, p, "python", python, build, files=[f"bin/python{mm}"])
    conda_pkg(spec, p, "libstdcxx-ng", "14.2.0", "hc0a3c3a_1", files=["lib/libstdc++.so.6.0.33"])
    conda_pkg(spec, p, "libgcc-ng", "14.2.0", "h69a702a_1")
    conda_pkg(spec, p, "pip", "24.3.1", "pyh8b19718_0")
    so(spec, f"{p}/lib", "libstdc++.so.6.0.33", "libstdc++.so.6", machine=machine,
       verdef=["libstdc++.so.6", "GLIBCXX_3.4"] + [f"GLIBCXX_3.4.{n}" for n in range(1, 34)]
       + ["CXXABI_1.3", "CXXABI_1.3.9", "CXXABI_1.3.15"])
    spec[f"{p}/lib/libgcc_s.so.1"] = elf("libgcc_s.so.1", machine=machine, verdef=["libgcc_s.so.1", "GCC_3.0"])
    return site_of(prefix, mm)


def conda_root(spec: Spec, root: str = "/opt/conda") -> None:
    """The conda installation's base environment (its own python 3.12, conda, mamba), which the envs live beside."""
    r = root.strip("/")
    site = conda_env(spec, root, python="3.12.7", build="hc5c86c4_0_cpython")
    conda_pkg(spec, r, "conda", "24.9.2", "py312h7900ff3_0", files=["bin/conda"])
    conda_pkg(spec, r, "mamba", "1.5.10", "py312h9460a1c_0", files=["bin/mamba"])
    for name, ver in (("conda", "24.9.2"), ("requests", "2.32.3"), ("urllib3", "2.2.3")):
        dist(spec, site, name, ver, {f"{name}/__init__.py": ""}, tag="py3-none-any", installer="conda")
    spec[f"{r}/bin/conda"] = "#!/opt/conda/bin/python\n"
    spec[f"{r}/condarc"] = "channels:\n  - conda-forge\n"
    spec[f"{r}/envs/.conda_envs_dir_test"] = ""


# what each nvidia-*-cu12 wheel installs: distribution -> (directory, [(file, soname)])
CU12_LAYOUT = {
    "nvidia-cuda-runtime-cu12": ("cuda_runtime", ["libcudart.so.12"]),
    "nvidia-cuda-nvrtc-cu12": ("cuda_nvrtc", ["libnvrtc.so.12", "libnvrtc-builtins.so.12.4"]),
    "nvidia-cuda-cupti-cu12": ("cuda_cupti", ["libcupti.so.12", "libnvperf_host.so"]),
    "nvidia-cublas-cu12": ("cublas", ["libcublas.so.12", "libcublasLt.so.12", "libnvblas.so.12"]),
    "nvidia-cudnn-cu12": ("cudnn", ["libcudnn.so.9", "libcudnn_graph.so.9", "libcudnn_ops.so.9", "libcudnn_cnn.so.9",
                                    "libcudnn_adv.so.9", "libcudnn_engines_precompiled.so.9",
                                    "libcudnn_engines_runtime_compiled.so.9", "libcudnn_heuristic.so.9"]),
    "nvidia-cufft-cu12": ("cufft", ["libcufft.so.11", "libcufftw.so.11"]),
    "nvidia-curand-cu12": ("curand", ["libcurand.so.10"]),
    "nvidia-cusolver-cu12": ("cusolver", ["libcusolver.so.11", "libcusolverMg.so.11"]),
    "nvidia-cusparse-cu12": ("cusparse", ["libcusparse.so.12"]),
    "nvidia-nccl-cu12": ("nccl", ["libnccl.so.2"]),
    "nvidia-nvjitlink-cu12": ("nvjitlink", ["libnvJitLink.so.12"]),
    "nvidia-nvtx-cu12": ("nvtx", ["libnvToolsExt.so.1"]),
    "nvidia-cusparselt-cu12": ("cusparselt", ["libcusparseLt.so.0"]),
}
NEEDS = {"libcublas.so.12": ["libcublasLt.so.12"], "libcusolver.so.11": ["libcublas.so.12", "libcublasLt.so.12",
                                                                         "libcusparse.so.12", "libnvJitLink.so.12"],
         "libcusparse.so.12": ["libnvJitLink.so.12"], "libcufft.so.11": [], "libcudnn_graph.so.9": []}
# torch 2.4.1+cu124 (download.pytorch.org) pins these; torch 2.5.1+cu124 the second set
TORCH_241_CU124 = {"nvidia-cuda-runtime-cu12": "12.4.99", "nvidia-cuda-nvrtc-cu12": "12.4.99",
                   "nvidia-cuda-cupti-cu12": "12.4.99", "nvidia-cublas-cu12": "12.4.2.65",
                   "nvidia-cudnn-cu12": "9.1.0.70", "nvidia-cufft-cu12": "11.2.0.44", "nvidia-curand-cu12": "10.3.5.119",
                   "nvidia-cusolver-cu12": "11.6.0.99", "nvidia-cusparse-cu12": "12.3.0.142",
                   "nvidia-nccl-cu12": "2.20.5", "nvidia-nvjitlink-cu12": "12.4.99", "nvidia-nvtx-cu12": "12.4.99"}
TORCH_251_CU124 = {"nvidia-cuda-runtime-cu12": "12.4.127", "nvidia-cuda-nvrtc-cu12": "12.4.127",
                   "nvidia-cuda-cupti-cu12": "12.4.127", "nvidia-cublas-cu12": "12.4.5.8",
                   "nvidia-cudnn-cu12": "9.1.0.70", "nvidia-cufft-cu12": "11.2.1.3", "nvidia-curand-cu12": "10.3.5.147",
                   "nvidia-cusolver-cu12": "11.6.1.9", "nvidia-cusparse-cu12": "12.3.1.170",
                   "nvidia-nccl-cu12": "2.21.5", "nvidia-nvjitlink-cu12": "12.4.127", "nvidia-nvtx-cu12": "12.4.127"}


def cu12_wheels(spec: Spec, site: str, pins: Dict[str, str], machine: str = "x86_64") -> None:
    tag = "py3-none-manylinux2014_aarch64" if machine == "aarch64" else "py3-none-manylinux2014_x86_64"
    for name, version in pins.items():
        directory, files = CU12_LAYOUT[name]
        content = {"nvidia/__init__.py": "", f"nvidia/{directory}/__init__.py": "",
                   f"nvidia/{directory}/lib/__init__.py": ""}
        for soname in files:
            content[f"nvidia/{directory}/lib/{soname}"] = elf(
                soname, needed=NEEDS.get(soname, []) + ["libc.so.6"], machine=machine, runpath=["$ORIGIN"])
        dist(spec, site, name, version, content, tag=tag)


TORCH_INIT = '''
def _preload_cuda_deps(lib_folder, lib_name):
    """Preloads cuda deps if they could not be found otherwise."""
    # Should only be called on Linux if default path resolution have failed
    assert platform.system() == 'Linux', 'Should only be called on Linux'
    import glob
    lib_path = None
    for path in sys.path:
        nvidia_path = os.path.join(path, 'nvidia')
        if not os.path.exists(nvidia_path):
            continue
        candidate_lib_paths = glob.glob(os.path.join(nvidia_path, lib_folder, 'lib', lib_name))
        if candidate_lib_paths and not lib_path:
            lib_path = candidate_lib_paths[0]
        if lib_path:
            break
    if not lib_path:
        raise ValueError(f"{lib_name} not found in the system path {sys.path}")
    ctypes.CDLL(lib_path)


# See Note [Global dependencies]
def _load_global_deps() -> None:
    lib_name = 'libtorch_global_deps' + ('.dylib' if platform.system() == 'Darwin' else '.so')
    here = os.path.abspath(__file__)
    global_deps_lib_path = os.path.join(os.path.dirname(here), 'lib', lib_name)
    try:
        ctypes.CDLL(global_deps_lib_path, mode=ctypes.RTLD_GLOBAL)
    except OSError as err:
        # Can only happen for wheel with cuda libs as PYPI deps
        # As PyTorch is not purelib, but nvidia-*-cu12 is
        cuda_libs: Dict[str, str] = {
            'cublas': 'libcublas.so.*[0-9]',
            'cudnn': 'libcudnn.so.*[0-9]',
            'cuda_nvrtc': 'libnvrtc.so.*[0-9]',
            'cuda_runtime': 'libcudart.so.*[0-9]',
            'cuda_cupti': 'libcupti.so.*[0-9]',
            'cufft': 'libcufft.so.*[0-9]',
            'curand': 'libcurand.so.*[0-9]',
            'cusolver': 'libcusolver.so.*[0-9]',
            'cusparse': 'libcusparse.so.*[0-9]',
            'nccl': 'libnccl.so.*[0-9]',
            'nvtx': 'libnvToolsExt.so.*[0-9]',
        }
        is_cuda_lib_err = [lib for lib in cuda_libs.values() if lib.split('.')[0] in err.args[0]]
        if not is_cuda_lib_err:
            raise err
        for lib_folder, lib_name in cuda_libs.items():
            _preload_cuda_deps(lib_folder, lib_name)
        ctypes.CDLL(global_deps_lib_path, mode=ctypes.RTLD_GLOBAL)
'''
TORCH_RUNPATH = ["$ORIGIN/../../nvidia/cublas/lib", "$ORIGIN/../../nvidia/cuda_cupti/lib",
                 "$ORIGIN/../../nvidia/cuda_nvrtc/lib", "$ORIGIN/../../nvidia/cuda_runtime/lib",
                 "$ORIGIN/../../nvidia/cudnn/lib", "$ORIGIN/../../nvidia/cufft/lib", "$ORIGIN/../../nvidia/curand/lib",
                 "$ORIGIN/../../nvidia/cusolver/lib", "$ORIGIN/../../nvidia/cusparse/lib",
                 "$ORIGIN/../../nvidia/nccl/lib", "$ORIGIN/../../nvidia/nvtx/lib", "$ORIGIN"]
ARCH_LIST = {"12.4": "sm_50;sm_60;sm_70;sm_75;sm_80;sm_86;sm_90", "cpu": ""}


def torch(spec: Spec, site: str, version: str, cuda: Optional[str], pins: Optional[Dict[str, str]] = None,
          machine: str = "x86_64", python_tag: str = "311") -> None:
    """The torch wheel: libtorch_cuda.so with the wheels' RUNPATH, _C, version.py, the _load_global_deps preload."""
    files: Dict[str, Any] = {}
    lib = "torch/lib"
    if cuda:
        files[f"{lib}/libtorch_cuda.so"] = elf(
            "libtorch_cuda.so", machine=machine, runpath=TORCH_RUNPATH,
            needed=["libc10_cuda.so", "libcudart.so.12", "libcublas.so.12", "libcublasLt.so.12", "libcudnn.so.9",
                    "libnccl.so.2", "libcusparse.so.12", "libcufft.so.11", "libcurand.so.10", "libcusolver.so.11",
                    "libnvToolsExt.so.1", "libc10.so", "libtorch_cpu.so", "libstdc++.so.6", "libgcc_s.so.1",
                    "libc.so.6"],
            verneed={"libstdc++.so.6": ["GLIBCXX_3.4.19", "CXXABI_1.3.9"], "libc.so.6": ["GLIBC_2.17"]})
        files[f"{lib}/libc10_cuda.so"] = elf("libc10_cuda.so", machine=machine, runpath=TORCH_RUNPATH,
                                             needed=["libcudart.so.12", "libc10.so", "libc.so.6"])
        files[f"{lib}/libtorch_global_deps.so"] = elf(
            "libtorch_global_deps.so", machine=machine, runpath=TORCH_RUNPATH,
            needed=["libcudart.so.12", "libcublas.so.12", "libnvToolsExt.so.1", "libcudnn.so.9", "libnccl.so.2",
                    "libc.so.6"])
    files[f"{lib}/libc10.so"] = elf("libc10.so", machine=machine, needed=["libstdc++.so.6", "libc.so.6"])
    files[f"{lib}/libtorch_cpu.so"] = elf("libtorch_cpu.so", machine=machine, runpath=["$ORIGIN"],
                                          needed=["libc10.so", "libgomp-a34b3233.so.1", "libstdc++.so.6", "libc.so.6"],
                                          verneed={"libstdc++.so.6": ["GLIBCXX_3.4.19"]})
    files[f"{lib}/libgomp-a34b3233.so.1"] = elf("libgomp-a34b3233.so.1", machine=machine)
    files[f"{lib}/libtorch.so"] = elf("libtorch.so", machine=machine, runpath=["$ORIGIN"],
                                      needed=(["libtorch_cuda.so"] if cuda else []) + ["libtorch_cpu.so", "libc.so.6"])
    files[f"{lib}/libtorch_python.so"] = elf("libtorch_python.so", machine=machine, runpath=["$ORIGIN"],
                                             needed=["libtorch.so", "libc10.so", "libstdc++.so.6", "libc.so.6"])
    plat = "aarch64" if machine == "aarch64" else "x86_64"
    files[f"torch/_C.cpython-{python_tag}-{plat}-linux-gnu.so"] = elf(
        None, machine=machine, runpath=["$ORIGIN/lib"], needed=["libtorch_python.so", "libc.so.6"])
    files["torch/__init__.py"] = "import ctypes\nimport os\nimport platform\nimport sys\n" + TORCH_INIT
    files["torch/version.py"] = (
        "from typing import Optional\n\n__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip']\n"
        f"__version__ = '{version}'\ndebug = False\ncuda: Optional[str] = {cuda!r}\n"
        "git_version = 'ee1b6804381c57161c477caa380a840a84167676'\nhip: Optional[str] = None\n")
    requires = ["filelock", "typing-extensions>=4.8.0", "sympy", "networkx", "jinja2", "fsspec"]
    requires += [f"{n}=={v}; platform_system == \"Linux\" and platform_machine == \"x86_64\""
                 for n, v in (pins or {}).items()]
    tag = f"cp{python_tag}-cp{python_tag}-" + ("manylinux_2_28_aarch64" if machine == "aarch64" else "linux_x86_64")
    dist(spec, site, "torch", version, files, requires=requires, tag=tag)


def pure(spec: Spec, site: str, name: str, version: str, module: Optional[str] = None) -> None:
    module = module or name.replace("-", "_").lower()
    dist(spec, site, name, version, {f"{module}/__init__.py": f"__version__ = '{version}'\n"},
         tag="py3-none-any")


def numpy(spec: Spec, site: str, version: str = "1.26.4", machine: str = "x86_64") -> None:
    plat = "aarch64" if machine == "aarch64" else "x86_64"
    dist(spec, site, "numpy", version, {
        "numpy/__init__.py": "", "numpy/version.py": f"version = '{version}'\n",
        f"numpy/core/_multiarray_umath.cpython-311-{plat}-linux-gnu.so": elf(
            None, machine=machine, runpath=["$ORIGIN/../../numpy.libs"],
            needed=["libscipy_openblas64_-ff651d7f.so", "libc.so.6"]),
        "numpy.libs/libscipy_openblas64_-ff651d7f.so": elf("libscipy_openblas64_-ff651d7f.so", machine=machine)})


# torchvision/version.py as the wheel ships it: the CUDA version is asked of the extension at import, not written
VISION_VERSION = ("__version__ = '{}'\ngit_version = '3ac97aa9120137381ed1060f37237e44485ac2aa'\n"
                  "from torchvision.extension import _check_cuda_version\nif _check_cuda_version() > 0:\n"
                  "    cuda = _check_cuda_version()\n")


def torch_companions(spec: Spec, site: str, torch_version: str, machine: str = "x86_64") -> None:
    """torchvision/torchaudio of the same release, numpy, and the pure-Python packages a DLAMI env carries."""
    local = torch_version.split("+", 1)[1] if "+" in torch_version else ""
    tv = {"2.4.1": "0.19.1", "2.5.1": "0.20.1", "2.7.0": "0.22.0"}[torch_version.split("+")[0]]
    ta = torch_version.split("+")[0]
    plat = "aarch64" if machine == "aarch64" else "x86_64"
    for name, ver, mod in (("torchvision", tv, "torchvision"), ("torchaudio", ta, "torchaudio")):
        full = f"{ver}+{local}" if local else ver
        dist(spec, site, name, full, {
            f"{mod}/__init__.py": "", f"{mod}/version.py": VISION_VERSION.format(full) if name == "torchvision" else
            f"__version__ = '{full}'\ngit_version = '332b8fa9d0c4b5ad6a98c5b5e5fde2d29e3e0bd2'\n",
            f"{mod}/_C.so" if name == "torchvision" else f"{mod}/lib/libtorchaudio.so": elf(
                None, machine=machine, runpath=["$ORIGIN/../torch/lib", "$ORIGIN"] if name == "torchvision" else
                ["$ORIGIN/../../torch/lib", "$ORIGIN"], needed=["libc10.so", "libtorch_cpu.so", "libc.so.6"])},
             requires=[f"torch=={torch_version}"], tag=f"cp311-cp311-linux_{plat}")
    numpy(spec, site, machine=machine)
    for name, ver in (("filelock", "3.16.1"), ("typing_extensions", "4.12.2"), ("sympy", "1.13.1"),
                      ("networkx", "3.4.2"), ("Jinja2", "3.1.4"), ("fsspec", "2024.10.0"), ("triton", "3.0.0")):
        pure(spec, site, name, ver)


# -- TensorFlow, JAX, ONNX Runtime (the layouts of tests/e2e/test_consumer_trees.py, from the real wheels) -----------

TF_RUNPATH = [f"$ORIGIN/../nvidia/{d}/lib" for d in ("cublas", "cuda_cupti", "cuda_runtime", "cudnn", "cufft",
                                                     "cusparse", "nccl", "nvjitlink", "cusolver", "curand",
                                                     "cuda_nvcc", "cuda_nvrtc")] + ["$ORIGIN/../tensorrt", "$ORIGIN"]
TF_BUILD_INFO = ('"""Auto-generated module providing information about the build."""\nimport collections\n\n'
                 "build_info = collections.OrderedDict([('cpu_compiler', '/usr/lib/llvm-18/bin/clang'), "
                 "('cuda_compute_capabilities', ['sm_60', 'sm_70', 'sm_80', 'sm_89', 'compute_90']), "
                 "('cuda_version', '12.5.1'), ('cudnn_version', '9'), ('is_cuda_build', True), "
                 "('is_rocm_build', False), ('is_tensorrt_build', False)])\n")
JAX_RPATH = [f"$ORIGIN/../nvidia/{d}/lib" for d in ("cuda_cupti", "cuda_runtime", "cublas", "cufft", "cudnn",
                                                    "cusolver", "cusparse", "nccl", "nvjitlink")]


def tensorflow(spec: Spec, site: str) -> None:
    """tensorflow 2.18.0 [and-cuda]: its loader objects' RUNPATHs name the nvidia-* wheel directories."""
    dist(spec, site, "tensorflow", "2.18.0", {
        "tensorflow/__init__.py": "", "tensorflow/libtensorflow_framework.so.2": elf(
            "libtensorflow_framework.so.2", needed=["libstdc++.so.6", "libc.so.6"], runpath=TF_RUNPATH),
        "tensorflow/libtensorflow_cc.so.2": elf(
            "libtensorflow_cc.so.2", needed=["libtensorflow_framework.so.2", "libstdc++.so.6", "libc.so.6"],
            runpath=TF_RUNPATH),
        "tensorflow/python/_pywrap_tensorflow_internal.so": elf(
            None, needed=["libtensorflow_cc.so.2", "libtensorflow_framework.so.2", "libc.so.6"],
            runpath=["$ORIGIN/../", "$ORIGIN/../../nvidia/cudnn/lib"]),
        "tensorflow/python/platform/build_info.py": TF_BUILD_INFO},
        requires=["absl-py>=1.0.0", "numpy<2.1.0,>=1.26.0",
                  "nvidia-cublas-cu12==12.5.3.2; extra == \"and-cuda\""])
    pure(spec, site, "keras", "3.6.0")
    pure(spec, site, "absl-py", "2.1.0", "absl")


TF_218_PINS = {"nvidia-cuda-runtime-cu12": "12.5.82", "nvidia-cuda-nvrtc-cu12": "12.5.82",
               "nvidia-cuda-cupti-cu12": "12.5.82", "nvidia-cublas-cu12": "12.5.3.2", "nvidia-cudnn-cu12": "9.3.0.75",
               "nvidia-cufft-cu12": "11.2.3.61", "nvidia-curand-cu12": "10.3.6.82",
               "nvidia-cusolver-cu12": "11.6.3.83", "nvidia-cusparse-cu12": "12.5.1.3", "nvidia-nccl-cu12": "2.21.5",
               "nvidia-nvjitlink-cu12": "12.5.82"}
JAX_PINS = {"nvidia-cuda-runtime-cu12": "12.6.77", "nvidia-cuda-nvrtc-cu12": "12.6.85",
            "nvidia-cuda-cupti-cu12": "12.6.80", "nvidia-cublas-cu12": "12.6.4.1", "nvidia-cudnn-cu12": "9.5.1.17",
            "nvidia-cufft-cu12": "11.3.0.4", "nvidia-cusolver-cu12": "11.7.1.2", "nvidia-cusparse-cu12": "12.5.4.2",
            "nvidia-nccl-cu12": "2.23.4", "nvidia-nvjitlink-cu12": "12.6.85"}


def jax(spec: Spec, site: str) -> None:
    """jax[cuda12] 0.4.35: jax, jaxlib and the PJRT plugin whose RPATH names the nvidia-* wheel directories."""
    pure(spec, site, "jax", "0.4.35")
    dist(spec, site, "jaxlib", "0.4.35", {"jaxlib/__init__.py": "", "jaxlib/xla_extension.so": elf(
        None, needed=["libstdc++.so.6", "libc.so.6"], runpath=["$ORIGIN"])})
    dist(spec, site, "jax-cuda12-pjrt", "0.4.35", {"jax_plugins/xla_cuda12/xla_cuda_plugin.so": elf(
        None, needed=["libstdc++.so.6", "libc.so.6"], rpath=JAX_RPATH)}, tag="py3-none-manylinux2014_x86_64")
    dist(spec, site, "jax-cuda12-plugin", "0.4.35", {
        "jax_cuda12_plugin/__init__.py": "",
        "jax_cuda12_plugin/_cuda_plugin.so": elf(None, needed=["libstdc++.so.6", "libc.so.6"], rpath=JAX_RPATH)},
         requires=["jax-cuda12-pjrt==0.4.35"])


def onnxruntime(spec: Spec, site: str) -> None:
    """onnxruntime-gpu 1.21.0 (CUDA 12, cuDNN 9): the CUDA provider's RUNPATH is $ORIGIN only."""
    dist(spec, site, "onnxruntime-gpu", "1.21.0", {
        "onnxruntime/__init__.py": "__version__ = '1.21.0'\n",
        "onnxruntime/capi/onnxruntime_pybind11_state.so": elf(None, needed=["libstdc++.so.6", "libc.so.6"],
                                                              runpath=["$ORIGIN"]),
        "onnxruntime/capi/libonnxruntime_providers_shared.so": elf("libonnxruntime_providers_shared.so"),
        "onnxruntime/capi/libonnxruntime_providers_cuda.so": elf(
            "libonnxruntime_providers_cuda.so", runpath=["$ORIGIN"],
            needed=["libonnxruntime_providers_shared.so", "libcublasLt.so.12", "libcublas.so.12", "libcurand.so.10",
                    "libcufft.so.11", "libcudart.so.12", "libstdc++.so.6", "libc.so.6"]),
        "onnxruntime/capi/build_and_package_info.py": "package_name = 'onnxruntime-gpu'\n__version__ = '1.21.0'\n"
                                                     "cuda_version = '12.2'\ncudnn_version = '9.1'\n"})


# -- hosts -----------------------------------------------------------------------------------------------------------

def dmi(spec: Spec, instance_type: str, vendor: str = "Amazon EC2") -> None:
    spec["sys/class/dmi/id/sys_vendor"] = vendor + "\n"
    spec["sys/class/dmi/id/product_name"] = instance_type + "\n"
    spec["sys/class/dmi/id/board_asset_tag"] = "i-0a1b2c3d4e5f67890\n" if vendor == "Amazon EC2" else "\n"
    spec["sys/class/dmi/id/bios_vendor"] = "Amazon EC2\n" if vendor == "Amazon EC2" else "American Megatrends Inc.\n"


def gpus(spec: Spec, device: str, buses: Sequence[str]) -> None:
    for bus in buses:
        machines.pci(spec, bus, device)


def nvswitches(spec: Spec, device: str, n: int, base: int = 0x11) -> None:
    for i in range(n):
        machines.pci(spec, f"0000:{base + i:02x}:00.0", device, cls="0x068000", driver="")


def efa(spec: Spec, n: int, installer: str, el: str, plugin: str = "1.11.0", libfabric: str = "1.22.0") -> None:
    """EFA devices bound to the efa driver, the EFA installer's libfabric and aws-ofi-nccl (libnccl-ofi)."""
    for i in range(n):
        name = f"rdmap{16 + i * 16}s27"
        spec[f"sys/class/infiniband/{name}/device/driver"] = {"symlink": "../../../../bus/pci/drivers/efa"}
        spec[f"sys/class/infiniband/{name}/node_type"] = "1: CA\n"
        spec[f"sys/class/net/ens{32 + i}/address"] = f"0a:1b:2c:3d:4e:{i:02x}\n"
    spec["sys/class/net/ens5/address"] = "0a:1b:2c:3d:4e:ff\n"
    spec["sys/class/net/lo/address"] = "00:00:00:00:00:00\n"
    spec["sys/bus/pci/drivers/efa/.keep"] = ""
    arch = "x86_64" if "aarch64" not in el else "aarch64"
    pkgs = [f"efa-config-1.17-1.{el}.noarch", f"efa-profile-1.7-1.{el}.noarch", f"efa-2.10.0-1.{el}.{arch}",
            f"efa-nv-peermem-1.1.1-1.{el}.{arch}", f"ibacm-52.0-1.{el}.{arch}",
            f"libfabric-aws-{libfabric}-1.{el}.{arch}", f"libfabric-aws-devel-{libfabric}-1.{el}.{arch}",
            f"libibverbs-52.0-1.{el}.{arch}", f"libnccl-ofi-{plugin}-1.{el}.{arch}",
            f"openmpi40-aws-4.1.7-1.{arch}", f"openmpi50-aws-5.0.5-1.{arch}", f"rdma-core-52.0-1.{el}.{arch}"]
    spec["opt/amazon/efa_installed_packages"] = (f"# EFA installer version: {installer}\n"
                                                 "# Debug packages installed: no\n# Packages installed:\n"
                                                 + "\n".join(pkgs) + "\n")
    so(spec, "opt/amazon/efa/lib", f"libfabric.so.1.{libfabric.split('.')[1]}.0", "libfabric.so.1", machine=arch,
       links=["libfabric.so"])
    spec["opt/amazon/efa/lib/libfabric/libefa-fi.so"] = elf(None, machine=arch)
    spec["opt/amazon/efa/bin/fi_info"] = elf(None, needed=["libfabric.so.1", "libc.so.6"], machine=arch,
                                             runpath=["/opt/amazon/efa/lib"])
    plugin_dir = "opt/amazon/ofi-nccl/lib"
    so(spec, plugin_dir, "libnccl-net-ofi.so", "libnccl-net-ofi.so", machine=arch,
       needed=["libfabric.so.1", "libc.so.6"], runpath=["/opt/amazon/efa/lib"])
    spec[f"{plugin_dir}/libnccl-net.so"] = {"symlink": "libnccl-net-ofi.so"}
    spec[f"{plugin_dir}/libnccl-ofi-tuner.so"] = elf("libnccl-ofi-tuner.so", machine=arch)
    spec["etc/security/limits.d/efa.conf"] = "*    soft    memlock    unlimited\n*    hard    memlock    unlimited\n"
    spec["etc/ld.so.conf.d/efa.conf"] = "/opt/amazon/efa/lib\n"
    spec["etc/ld.so.conf.d/aws-ofi-nccl.conf"] = "/opt/amazon/ofi-nccl/lib\n"
    spec["etc/modules-load.d/efa.conf"] = "efa\n"


def kernel_log(spec: Spec, path: str, host: str, kernel: str, driver: str, extra: Sequence[str] = (),
               flavor: str = "proprietary") -> None:
    kind = "NVIDIA UNIX Open Kernel Module for x86_64" if flavor == "open" else "NVIDIA UNIX x86_64 Kernel Module"
    lines = [f"Nov 29 10:00:00 {host} kernel: Linux version {kernel} (mockbuild@builder) #1 SMP",
             f"Nov 29 10:00:00 {host} kernel: Command line: BOOT_IMAGE=(hd0,gpt2)/vmlinuz-{kernel} ro",
             f"Nov 29 10:00:04 {host} kernel: nvidia: loading out-of-tree module taints kernel.",
             f"Nov 29 10:00:04 {host} kernel: nvidia-nvlink: Nvlink Core is being initialized, major device number 511",
             f"Nov 29 10:00:05 {host} kernel: NVRM: loading {kind}  {driver}  Wed Oct 30 19:24:57 UTC 2024",
             f"Nov 29 10:00:05 {host} kernel: nvidia-uvm: Loaded the UVM driver, major device number 509.",
             f"Nov 29 10:00:06 {host} kernel: nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX "
             f"platforms  {driver}",
             f"Nov 29 10:00:06 {host} kernel: [drm] [nvidia-drm] [GPU ID 0x00001000] Loading driver",
             f"Nov 29 10:00:30 {host} systemd[1]: Started NVIDIA Persistence Daemon.",
             f"Nov 29 10:01:00 {host} kernel: ena 0000:00:05.0 eth0: Link is up",
             f"Nov 29 10:05:00 {host} kernel: EXT4-fs (nvme1n1): mounted filesystem with ordered data mode."]
    spec[path] = "\n".join(lines + list(extra)) + "\n"


def dlami_env(cuda: str, extra: Dict[str, str], conda: str = "/opt/conda", user: str = "ec2-user",
              efa_paths: bool = True) -> Dict[str, str]:
    """The environment of a login shell on a Deep Learning AMI (/etc/profile.d/dlami.sh, conda init)."""
    c = f"/usr/local/cuda-{cuda}"
    ld = [f"{c}/lib64", f"{c}/lib", f"{c}/extras/CUPTI/lib64", f"{c}/targets/x86_64-linux/lib"]
    if efa_paths:
        ld += ["/opt/amazon/efa/lib", "/opt/amazon/openmpi/lib", "/opt/amazon/ofi-nccl/lib"]
    ld += ["/usr/local/lib", "/usr/lib"]
    env = {"SHELL": "/bin/bash", "HISTCONTROL": "ignoredups", "HISTSIZE": "1000", "HOSTNAME": "ip-10-0-1-23",
           "USER": user, "LOGNAME": user, "HOME": f"/home/{user}", "LANG": "C.UTF-8", "TERM": "xterm-256color",
           "PATH": f"{conda}/bin:{conda}/condabin:{c}/bin:/opt/amazon/openmpi/bin:/opt/amazon/efa/bin:"
                   f"/usr/local/bin:/usr/bin:/usr/local/sbin:/usr/sbin",
           "LD_LIBRARY_PATH": ":".join(ld), "CUDA_HOME": c, "CUDA_PATH": c,
           "CONDA_EXE": f"{conda}/bin/conda", "CONDA_PYTHON_EXE": f"{conda}/bin/python", "CONDA_SHLVL": "1",
           "MAIL": f"/var/spool/mail/{user}", "SSH_CONNECTION": "10.0.0.5 51234 10.0.1.23 22", "SSH_TTY": "/dev/pts/0",
           "XDG_SESSION_ID": "3", "XDG_RUNTIME_DIR": "/run/user/1000", "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1000/bus",
           "LESSOPEN": "||/usr/bin/lesspipe.sh %s", "which_declare": "declare -f"}
    env.update(extra)
    return env


def rpm_host(spec: Spec, distro: str, hostname: str) -> None:
    spec["etc/os-release"] = OS_RELEASE[distro]
    if distro == "rhel8":
        spec["etc/redhat-release"] = "Red Hat Enterprise Linux release 8.10 (Ootpa)\n"
        spec["etc/os-release"] = RHEL88_OS_RELEASE.replace("8.8", "8.10")
    else:
        spec["etc/system-release"] = "Amazon Linux release 2023.6.20241121 (Amazon Linux)\n"
    spec["etc/hostname"] = hostname + "\n"
    spec["proc/sys/kernel/hostname"] = hostname + "\n"
    spec["etc/ld.so.conf"] = "include ld.so.conf.d/*.conf\n"
    spec["etc/ld.so.conf.d/dyninst-x86_64.conf" if distro == "rhel8" else "etc/ld.so.conf.d/bind-export-x86_64.conf"] = (
        "/usr/lib64/dyninst\n" if distro == "rhel8" else "/usr/lib64/bind9-export/\n")
    spec["etc/passwd"] = ("root:x:0:0:root:/root:/bin/bash\nec2-user:x:1000:1000:EC2 Default User:/home/ec2-user:/bin/bash\n"
                          "nvidia-persistenced:x:994:991:NVIDIA Persistence Daemon:/:/sbin/nologin\n")
    spec["etc/group"] = "root:x:0:\nwheel:x:10:ec2-user\ndocker:x:992:\nec2-user:x:1000:\n"
    spec["etc/ssh/sshd_config"] = ("Include /etc/ssh/sshd_config.d/*.conf\nPermitRootLogin no\n"
                                   "PasswordAuthentication no\nChallengeResponseAuthentication no\n"
                                   "UsePAM yes\nX11Forwarding yes\nSubsystem sftp /usr/libexec/openssh/sftp-server\n")
    spec["usr/sbin/sshd"] = elf(None)
    spec["etc/ssh/sshd_config.d/50-redhat.conf"] = "ChallengeResponseAuthentication no\nGSSAPIAuthentication yes\n"
    spec["home/ec2-user/.bashrc"] = "# .bashrc\n"
    spec["root/.bashrc"] = "# .bashrc\n"
    if distro == "rhel8":  # platform-python 3.6, which dnf runs on, with its RPM-installed packages (egg-info)
        spec["usr/libexec/platform-python3.6"] = elf(None, needed=("libpython3.6m.so.1.0", "libc.so.6"))
        spec["usr/libexec/platform-python"] = {"symlink": "platform-python3.6"}
        spec["usr/bin/python3.6"] = elf(None, needed=("libpython3.6m.so.1.0", "libc.so.6"))
        spec["etc/alternatives/python3"] = {"symlink": "/usr/bin/python3.6"}
        spec["usr/bin/python3"] = {"symlink": "/etc/alternatives/python3"}
        so(spec, "usr/lib64", "libpython3.6m.so.1.0", "libpython3.6m.so.1.0")
        spec["usr/lib64/python3.6/os.py"] = ""
        for d, pkg in (("usr/lib64/python3.6/site-packages", "rpm-4.14.3-py3.6.egg-info"),
                       ("usr/lib64/python3.6/site-packages", "libdnf-0.63.0-py3.6.egg-info"),
                       ("usr/lib/python3.6/site-packages", "dnf-4.7.0-py3.6.egg-info"),
                       ("usr/lib/python3.6/site-packages", "requests-2.20.0-py3.6.egg-info"),
                       ("usr/lib/python3.6/site-packages", "urllib3-1.24.2-py3.6.egg-info")):
            name, version = pkg.split("-")[:2]
            spec[f"{d}/{pkg}/PKG-INFO"] = f"Metadata-Version: 1.1\nName: {name}\nVersion: {version}\n"


def deb_host(spec: Spec, distro: str, hostname: str, user: str = "ubuntu") -> None:
    spec["etc/os-release"] = OS_RELEASE[distro]
    spec["etc/debian_version"] = "bookworm/sid\n" if distro == "ubuntu2204" else "trixie/sid\n"
    spec["etc/hostname"] = hostname + "\n"
    spec["proc/sys/kernel/hostname"] = hostname + "\n"
    spec["etc/ld.so.conf"] = "include /etc/ld.so.conf.d/*.conf\n\n"
    spec["etc/ld.so.conf.d/libc.conf"] = "# libc default configuration\n/usr/local/lib\n"
    spec["etc/ld.so.conf.d/x86_64-linux-gnu.conf"] = ("# Multiarch support\n/usr/local/lib/x86_64-linux-gnu\n"
                                                      "/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n")
    spec["etc/passwd"] = (f"root:x:0:0:root:/root:/bin/bash\n{user}:x:1000:1000:Ubuntu:/home/{user}:/bin/bash\n"
                          "nvidia-persistenced:x:114:121:NVIDIA Persistence Daemon,,,:/nonexistent:/usr/sbin/nologin\n")
    spec["etc/group"] = f"root:x:0:\nsudo:x:27:{user}\ndocker:x:999:\n{user}:x:1000:\n"
    spec["etc/ssh/sshd_config"] = ("Include /etc/ssh/sshd_config.d/*.conf\nKbdInteractiveAuthentication no\nUsePAM yes\n"
                                   "X11Forwarding yes\nPrintMotd no\nAcceptEnv LANG LC_*\n"
                                   "Subsystem sftp /usr/lib/openssh/sftp-server\n")
    spec["etc/ssh/sshd_config.d/60-cloudimg-settings.conf"] = "PasswordAuthentication no\n"
    spec["usr/sbin/sshd"] = elf(None)
    spec[f"home/{user}/.bashrc"] = "# ~/.bashrc\n"
    # the distro's python3 with apt's packages in dist-packages (egg-info/dist-info written by dpkg, INSTALLER-less)
    py = "3.10" if distro == "ubuntu2204" else "3.12"
    spec[f"usr/bin/python{py}"] = elf(None, needed=("libm.so.6", "libc.so.6"))
    spec["usr/bin/python3"] = {"symlink": f"python{py}"}
    spec[f"usr/lib/python{py}/os.py"] = "# the standard library\n"
    for name, version in (("six", "1.16.0"), ("distro", "1.7.0"), ("PyYAML", "6.0.1"), ("requests", "2.25.1"),
                          ("cloud_init", "24.1.3")):
        d = f"usr/lib/python3/dist-packages/{name}-{version}.egg-info"
        spec[f"{d}/PKG-INFO"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"


def dpkg_status(packages: Sequence[Tuple[str, str]], arch: str = "amd64") -> str:
    return "".join(f"Package: {name}\nStatus: install ok installed\nPriority: optional\nSection: libs\n"
                   f"Installed-Size: 1024\nMaintainer: Ubuntu Developers <ubuntu-devel-discuss@lists.ubuntu.com>\n"
                   f"Architecture: {arch}\nVersion: {version}\nDescription: {name}\n\n" for name, version in packages)


def dnf_rpm_log(packages: Sequence[str]) -> str:
    """What dnf logs in /var/log/dnf.rpm.log on EL8 (the rpmdb itself is Berkeley DB there)."""
    return "".join(f"2024-11-29T09:41:{i % 60:02d}+0000 SUBDEBUG Installed: {p}\n" for i, p in enumerate(packages))


def tunables(spec: Spec, numa_nodes: int, thp: str, numa_balancing: int = 1, governor: Optional[str] = None,
             scaling_driver: Optional[str] = None, cpus: int = 96) -> None:
    """What /sys and /proc say of the kernel's defaults: THP, NUMA balancing and nodes, the cpufreq governor (EC2
    virtual machines have no cpufreq driver at all)."""
    modes = ("always", "madvise", "never")
    spec["sys/kernel/mm/transparent_hugepage/enabled"] = " ".join(f"[{m}]" if m == thp else m for m in modes) + "\n"
    spec["proc/sys/kernel/numa_balancing"] = f"{numa_balancing}\n"
    per = cpus // numa_nodes
    for n in range(numa_nodes):
        spec[f"sys/devices/system/node/node{n}/cpulist"] = f"{n * per}-{(n + 1) * per - 1}\n"
    spec["sys/devices/system/node/possible"] = f"0-{numa_nodes - 1}\n" if numa_nodes > 1 else "0\n"
    if governor:
        spec["sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"] = governor + "\n"
        spec["sys/devices/system/cpu/cpu0/cpufreq/scaling_driver"] = (scaling_driver or "acpi-cpufreq") + "\n"
        spec["sys/devices/system/cpu/cpu0/cpufreq/scaling_available_governors"] = (
            "performance powersave\n" if scaling_driver == "intel_pstate" else "conservative ondemand userspace powersave performance schedutil\n")
    if scaling_driver == "intel_pstate":
        spec["sys/devices/system/cpu/intel_pstate/status"] = "active\n"
        spec["sys/devices/system/cpu/intel_pstate/hwp_dynamic_boost"] = "0\n"


def netdevs(spec: Spec, *names: str) -> None:
    for i, name in enumerate(("lo",) + names):
        spec[f"sys/class/net/{name}/address"] = "00:00:00:00:00:00\n" if name == "lo" else f"02:42:ac:11:00:{i:02x}\n"
        spec[f"sys/class/net/{name}/operstate"] = "unknown\n" if name == "lo" else "up\n"


def ebs_root(spec: Spec, volume: str = "vol0123456789abcdef0", sectors: int = 1048576000) -> None:
    spec["sys/block/nvme0n1/device/model"] = "Amazon Elastic Block Store\n"
    spec["sys/block/nvme0n1/device/serial"] = volume + "\n"
    spec["sys/block/nvme0n1/size"] = f"{sectors}\n"
    spec["sys/block/nvme0n1/nvme0n1p1/partition"] = "1\n"


def instance_store(spec: Spec, n: int, sectors: int, use: Optional[str] = "lvm", serial: str = "AWS") -> None:
    """The instance's NVMe instance-store SSDs. ``use``: "lvm" (the DLAMI's: one striped LV over all of them mounted
    at /opt/dlami/nvme), "md" (a RAID 0 at /scratch), or None (left unused)."""
    holder = {"lvm": "dm-0", "md": "md0"}.get(use or "")
    for i in range(1, n + 1):
        spec[f"sys/block/nvme{i}n1/device/model"] = "Amazon EC2 NVMe Instance Storage\n"
        spec[f"sys/block/nvme{i}n1/device/serial"] = f"{serial}{i:02d}A1B2C3D4E5F6\n"
        spec[f"sys/block/nvme{i}n1/size"] = f"{sectors}\n"
        if holder:
            spec[f"sys/block/nvme{i}n1/holders/{holder}"] = {"symlink": f"../../../../virtual/block/{holder}"}
    if use == "lvm":
        spec["sys/block/dm-0/dm/name"] = "vg.01-lv_ephemeral\n"
        spec["sys/block/dm-0/size"] = f"{sectors * n}\n"
        spec["proc/mounts"] = spec.get("proc/mounts", "") + \
            "/dev/mapper/vg.01-lv_ephemeral /opt/dlami/nvme ext4 rw,relatime,stripe=256 0 0\n"
    elif use == "md":
        spec["sys/block/md0/md/level"] = "raid0\n"
        spec["sys/block/md0/size"] = f"{sectors * n}\n"
        spec["proc/mounts"] = spec.get("proc/mounts", "") + "/dev/md0 /scratch xfs rw,noatime,sunit=1024,swidth=8192 0 0\n"
        spec["proc/mdstat"] = ("Personalities : [raid0]\nmd0 : active raid0 " +
                               " ".join(f"nvme{i}n1[{i - 1}]" for i in range(n, 0, -1)) +
                               f"\n      {sectors * n // 2} blocks super 1.2 512k chunks\n\nunused devices: <none>\n")


def zstd_raw(data: bytes) -> bytes:
    """A valid zstd frame holding ``data`` in one raw (stored) block, as a .ko.zst without a zstd library."""
    import struct

    header = struct.pack("<IB", 0xFD2FB528, 0xA0) + struct.pack("<I", len(data))  # single segment, 4-byte size
    block = (len(data) << 3) | 1  # last block, type 0 (raw)
    return header + struct.pack("<I", block)[:3] + data


def rpmdb_sqlite(packages: Sequence[str]) -> bytes:
    """An rpm >= 4.16 database (EL9, AL2023): /var/lib/rpm/rpmdb.sqlite with rpm's Packages and Name tables (the
    header blobs stand in for rpm's binary headers)."""
    import os
    import sqlite3
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".sqlite")
    os.close(fd)
    try:
        db = sqlite3.connect(path)
        db.executescript("CREATE TABLE Packages (hnum INTEGER PRIMARY KEY AUTOINCREMENT, blob BLOB NOT NULL);"
                         "CREATE TABLE Name (key TEXT NOT NULL, hnum INTEGER NOT NULL, idx INTEGER NOT NULL, "
                         "FOREIGN KEY (hnum) REFERENCES Packages(hnum));")
        for i, nvr in enumerate(packages, 1):
            db.execute("INSERT INTO Packages (hnum, blob) VALUES (?, ?)", (i, b"\x8e\xad\xe8\x01" + nvr.encode()))
            db.execute("INSERT INTO Name VALUES (?, ?, 0)", (nvr.rsplit("-", 2)[0] if nvr.count("-") > 1 else nvr, i))
        db.commit()
        db.close()
        with open(path, "rb") as fh:
            return fh.read()
    finally:
        os.unlink(path)


# -- the machines ----------------------------------------------------------------------------------------------------

P4D_BUSES = ("0000:10:1c.0", "0000:10:1d.0", "0000:20:1c.0", "0000:20:1d.0", "0000:90:1c.0", "0000:90:1d.0",
             "0000:a0:1c.0", "0000:a0:1d.0")
P5_BUSES = ("0000:53:00.0", "0000:64:00.0", "0000:75:00.0", "0000:86:00.0", "0000:97:00.0", "0000:a8:00.0",
            "0000:b9:00.0", "0000:ca:00.0")


def _dlami_pytorch_env(spec: Spec, prefix: str, torch_version: str, pins: Dict[str, str], extensions: bool = True) -> str:
    site = conda_env(spec, prefix)
    cu12_wheels(spec, site, pins)
    tag = torch_version.split("+cu")[1]  # cu124 -> 12.4, cu128 -> 12.8
    torch(spec, site, torch_version, f"{tag[:2]}.{tag[2:]}", pins)
    torch_companions(spec, site, torch_version)
    for name, ver in (("transformers", "4.46.3"), ("accelerate", "1.1.1"), ("deepspeed", "0.15.4"),
                      ("tensorboard", "2.18.0"), ("sagemaker", "2.235.2"), ("boto3", "1.35.71")):
        pure(spec, site, name, ver)
    if extensions:
        torch_extensions(spec, site, torch_version)
    return site


def torch_extensions(spec: Spec, site: str, torch_version: str, py: str = "311") -> None:
    """Compiled torch extensions built for the installed torch: flash-attn (pip's build fetched the prebuilt wheel
    for this torch; no RUNPATH, torch's libraries are loaded by 'import torch' first), xformers (pinned to it),
    bitsandbytes (any torch 2)."""
    base = torch_version.split("+")[0]
    torch_libs = ["libc10.so", "libtorch.so", "libtorch_cpu.so", "libtorch_python.so", "libc10_cuda.so",
                  "libtorch_cuda.so", "libcudart.so.12", "libstdc++.so.6", "libgcc_s.so.1", "libc.so.6"]
    so_name = f"flash_attn_2_cuda.cpython-{py}-x86_64-linux-gnu.so"
    fa = "2.7.4.post1" if base == "2.7.0" else "2.7.0.post2"
    dist(spec, site, "flash-attn", fa, {
        "flash_attn/__init__.py": f"__version__ = '{fa}'\n",
        so_name: elf(None, needed=torch_libs, verneed={"libstdc++.so.6": ["GLIBCXX_3.4.19", "CXXABI_1.3.9"]})},
        requires=["torch", "einops"], tag=f"cp{py}-cp{py}-linux_x86_64")
    xformers = {"2.4.1": "0.0.28.post1", "2.5.1": "0.0.28.post3", "2.7.0": "0.0.30"}[base]
    dist(spec, site, "xformers", xformers, {
        "xformers/__init__.py": "", "xformers/_C.so": elf(None, needed=torch_libs, runpath=["$ORIGIN"])},
        requires=["numpy", f"torch=={base}"], tag=f"cp{py}-cp{py}-manylinux_2_28_x86_64")
    dist(spec, site, "bitsandbytes", "0.45.0", {
        "bitsandbytes/__init__.py": "",
        "bitsandbytes/libbitsandbytes_cuda124.so": elf(None, needed=["libcudart.so.12", "libcublas.so.12",
                                                                      "libcublasLt.so.12", "libcusparse.so.12",
                                                                      "libc.so.6"])},
        requires=["torch<3,>=2.0", "numpy"], tag="py3-none-manylinux_2_24_x86_64")


def dlami_rhel8_p4d() -> Spec:
    """Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.4 (RHEL 8) on a p4d.24xlarge: 8x A100 40GB, 6 NVSwitches,
    fabric manager, 4 EFA, CUDA 11.8/12.1/12.4 toolkits with 12.4 current, and the AMI's LD_LIBRARY_PATH with
    /usr/local/cuda-12.4/lib64 first, ahead of the conda env's nvidia-*-cu12 wheels."""
    spec: Spec = {}
    host = "ip-10-0-1-23.ec2.internal"
    driver = "550.127.05"
    rpm_host(spec, "rhel8", host)
    k = kernel_host(spec, "rhel8", driver, extra_modules="efa 159744 0 - Live 0x0\nena 143360 0 - Live 0x0\n")
    spec["proc/mounts"] = HOST_MOUNTS.format(fs="xfs")
    spec["proc/meminfo"] = MEMINFO["1152G"]
    spec["proc/cmdline"] = f"BOOT_IMAGE=(hd0,gpt2)/vmlinuz-{k} root=UUID=949779ce ro console=ttyS0,115200n8 net.ifnames=0 nvme_core.io_timeout=4294967295\n"
    spec["sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"] = b"\x06\x00\x00\x00\x00"
    dmi(spec, "p4d.24xlarge")
    gpus(spec, "20b0", P4D_BUSES)
    nvswitches(spec, "1af1", 6)
    driver_userspace(spec, "usr/lib64", driver)
    glibc(spec, "usr/lib64", glibcxx="GLIBCXX_3.4.25")
    persistenced(spec)
    fabric_manager(spec, driver)
    spec["etc/dnf/modules.d/nvidia-driver.module"] = ("[nvidia-driver]\nname=nvidia-driver\nstream=550-dkms\n"
                                                      "profiles=\nstate=enabled\n")
    spec["var/log/dnf.rpm.log"] = dnf_rpm_log([
        f"kmod-nvidia-latest-dkms-3:{driver}-1.el8.x86_64", f"nvidia-driver-3:{driver}-1.el8.x86_64",
        f"nvidia-driver-cuda-libs-3:{driver}-1.el8.x86_64", f"nvidia-fabric-manager-{driver}-1.x86_64",
        f"nvidia-persistenced-3:{driver}-1.el8.x86_64", "cuda-toolkit-12-4-12.4.1-1.x86_64",
        "nvidia-container-toolkit-1.17.3-1.x86_64", "docker-ce-3:27.3.1-1.el8.x86_64"])
    for version, libs in (("11.8.0", CUDA_118_LIBS), ("12.1.1", CUDA_121_LIBS), ("12.4.1", CUDA_124_LIBS)):
        root = cuda_toolkit(spec, version, libs=libs, link=version.startswith("12.4"))
        if version.startswith("12.4"):
            cupti(spec, root)
    efa(spec, 4, "1.34.0", "el8")
    spec["usr/bin/dockerd"] = elf(None)
    spec["usr/bin/nvidia-ctk"] = elf(None)
    spec["usr/bin/nvidia-container-runtime"] = elf(None)
    spec["usr/bin/nvidia-container-cli"] = elf(None)
    spec["etc/docker/daemon.json"] = json.dumps({"runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}},
                                                 "default-ulimits": {"memlock": {"Hard": -1, "Name": "memlock", "Soft": -1}}},
                                                indent=4)
    conda_root(spec)
    site = _dlami_pytorch_env(spec, "/opt/conda/envs/pytorch", "2.4.1+cu124", TORCH_241_CU124)
    spec["opt/conda/envs/pytorch/etc/conda/activate.d/cuda.sh"] = "export CUDA_HOME=/usr/local/cuda-12.4\n"
    del site
    spec["proc/self/environ"] = environ(dlami_env("12.4", {
        "CONDA_PREFIX": "/opt/conda/envs/pytorch", "CONDA_DEFAULT_ENV": "pytorch", "CONDA_PROMPT_MODIFIER": "(pytorch) ",
        "PATH": "/opt/conda/envs/pytorch/bin:/opt/conda/condabin:/usr/local/cuda-12.4/bin:/opt/amazon/openmpi/bin:"
                "/opt/amazon/efa/bin:/usr/local/bin:/usr/bin:/usr/local/sbin:/usr/sbin",
        "FI_EFA_USE_DEVICE_RDMA": "1", "FI_PROVIDER": "efa", "FI_EFA_FORK_SAFE": "1", "NCCL_SOCKET_IFNAME": "^docker,lo"}))
    kernel_log(spec, "var/log/messages", "ip-10-0-1-23", k, driver, extra=[
        # an application-level Xid: a user's job was killed with Ctrl-C while it ran on GPU 0 (RC_ERR / 43)
        "Nov 29 11:12:13 ip-10-0-1-23 kernel: NVRM: Xid (PCI:0000:10:1c): 43, pid=48211, name=python, Ch 00000008",
        "Nov 29 11:30:00 ip-10-0-1-23 systemd[1]: Started Session 12 of user ec2-user.",
        # what `nvidia-smi -pm 1` in the AMI's user data prints to the kernel log
        "Nov 29 10:00:40 ip-10-0-1-23 kernel: NVRM: Persistence mode is deprecated and will be removed in a future "
        "release. Please use nvidia-persistenced instead."])
    # the 8 instance-store NVMe SSDs of a p4d: the DLAMI stripes them into one LV at /opt/dlami/nvme
    ebs_root(spec)
    instance_store(spec, 8, 1953125000)
    tunables(spec, numa_nodes=2, thp="always")
    netdevs(spec, "docker0")
    # the kernel the AMI was baked with, kept by dnf (installonly_limit=3), with the DKMS module built for it too
    old = "4.18.0-553.22.1.el8_10.x86_64"
    spec[f"boot/vmlinuz-{old}"] = ""
    spec[f"boot/loader/entries/ec2abcdef-{old}.conf"] = f"title ({old})\nversion {old}\nlinux /vmlinuz-{old}\n"
    spec[f"lib/modules/{old}/modules.dep"] = ""
    spec[f"lib/modules/{old}/extra/nvidia.ko.xz"] = lzma.compress(machines.module_blob(driver, old))
    spec[f"var/lib/dkms/nvidia/{driver}/{old}/x86_64/module/nvidia.ko.xz"] = ""
    return spec


def dlami_al2023_p5(instance: str = "p5.48xlarge", driver: str = "550.127.05", device: str = "2330",
                    switch: Tuple[str, int] = ("22a3", 4), cuda: Tuple[str, Sequence[Tuple[str, str]]] = ("12.4.1", ()),
                    torch_pins: Tuple[str, Dict[str, str]] = ("2.5.1+cu124", {}),
                    efa_stack: Tuple[int, str, str, str] = (32, "1.34.0", "1.11.0", "1.22.0"),
                    cupti_file: str = "libcupti.so.2024.1.1") -> Spec:
    """Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.5 (Amazon Linux 2023) on a p5.48xlarge: 8x H100 80GB with the
    open kernel modules, 4 NVSwitches, fabric manager, 32 EFA with aws-ofi-nccl, CUDA 12.4."""
    spec: Spec = {}
    host = "ip-10-1-2-3.ec2.internal"
    cuda_version, cuda_libs = cuda[0], list(cuda[1]) or CUDA_124_LIBS
    torch_version, pins = torch_pins[0], torch_pins[1] or TORCH_251_CU124
    mm = ".".join(cuda_version.split(".")[:2])
    rpm_host(spec, "al2023", host)
    k = kernel_host(spec, "al2023", driver, flavor="open",
                    extra_modules="efa 159744 0 - Live 0x0\nnvidia_peermem 16384 0 - Live 0x0\nena 143360 0 - Live 0x0\n")
    spec["proc/mounts"] = HOST_MOUNTS.format(fs="xfs")
    spec["proc/meminfo"] = MEMINFO["2048G"]
    spec["proc/cmdline"] = f"BOOT_IMAGE=(hd0,gpt1)/boot/vmlinuz-{k} root=UUID=1c2d ro console=tty0 console=ttyS0,115200n8 nvme_core.io_timeout=4294967295 rd.emergency=poweroff rd.shell=0 selinux=1 security=selinux quiet\n"
    dmi(spec, instance)
    gpus(spec, device, P5_BUSES)
    nvswitches(spec, switch[0], switch[1], base=0x05)
    driver_userspace(spec, "usr/lib64", driver)
    glibc(spec, "usr/lib64", glibcxx="GLIBCXX_3.4.29")
    persistenced(spec)
    fabric_manager(spec, driver)
    spec["var/log/dnf.rpm.log"] = dnf_rpm_log([
        f"kmod-nvidia-open-dkms-{driver}-1.amzn2023.x86_64", f"nvidia-driver-{driver}-1.amzn2023.x86_64",
        f"nvidia-fabric-manager-{driver}-1.x86_64", f"cuda-toolkit-{mm.replace('.', '-')}-{cuda_version}-1.x86_64"])
    spec["var/lib/rpm/rpmdb.sqlite"] = rpmdb_sqlite([f"kmod-nvidia-open-dkms-{driver}", f"nvidia-driver-{driver}",
                                                     f"nvidia-fabric-manager-{driver}",
                                                     f"cuda-toolkit-{mm.replace('.', '-')}-{cuda_version}"])
    root = cuda_toolkit(spec, cuda_version, libs=cuda_libs)
    cupti(spec, root, real=cupti_file)
    efa(spec, efa_stack[0], efa_stack[1], "amzn2023", plugin=efa_stack[2], libfabric=efa_stack[3])
    conda_root(spec)
    _dlami_pytorch_env(spec, "/opt/conda/envs/pytorch", torch_version, pins)
    spec["proc/self/environ"] = environ(dlami_env(mm, {
        "CONDA_PREFIX": "/opt/conda/envs/pytorch", "CONDA_DEFAULT_ENV": "pytorch",
        "PATH": f"/opt/conda/envs/pytorch/bin:/opt/conda/condabin:/usr/local/cuda-{mm}/bin:/opt/amazon/openmpi/bin:"
                "/opt/amazon/efa/bin:/usr/local/bin:/usr/bin",
        "FI_PROVIDER": "efa", "FI_EFA_FORK_SAFE": "1", "NCCL_BUFFSIZE": "8388608", "NCCL_P2P_NET_CHUNKSIZE": "524288",
        "NCCL_TUNER_PLUGIN": "/opt/amazon/ofi-nccl/lib/libnccl-ofi-tuner.so"}))
    kernel_log(spec, "var/log/messages", "ip-10-1-2-3", k, driver, flavor="open")
    ebs_root(spec, "vol0fedcba9876543210")
    instance_store(spec, 8, 7500000000)
    tunables(spec, numa_nodes=2, thp="madvise", cpus=192)
    return spec


# CUDA 12.8.1's toolkit, and the nvidia-*-cu12 wheels torch 2.7.0+cu128 pins
CUDA_128_LIBS = [("libcudart.so.12.8.90", "libcudart.so.12"), ("libcublas.so.12.8.4.1", "libcublas.so.12"),
                 ("libcublasLt.so.12.8.4.1", "libcublasLt.so.12"), ("libcufft.so.11.3.3.83", "libcufft.so.11"),
                 ("libcurand.so.10.3.9.90", "libcurand.so.10"), ("libcusolver.so.11.7.3.90", "libcusolver.so.11"),
                 ("libcusparse.so.12.5.8.93", "libcusparse.so.12"), ("libnvJitLink.so.12.8.93", "libnvJitLink.so.12"),
                 ("libnvrtc.so.12.8.93", "libnvrtc.so.12"), ("libnvToolsExt.so.1.0.0", "libnvToolsExt.so.1")]
TORCH_270_CU128 = {"nvidia-cuda-runtime-cu12": "12.8.57", "nvidia-cuda-nvrtc-cu12": "12.8.61",
                   "nvidia-cuda-cupti-cu12": "12.8.57", "nvidia-cublas-cu12": "12.8.3.14",
                   "nvidia-cudnn-cu12": "9.7.1.26", "nvidia-cufft-cu12": "11.3.3.41", "nvidia-curand-cu12": "10.3.9.55",
                   "nvidia-cusolver-cu12": "11.7.2.55", "nvidia-cusparse-cu12": "12.5.7.53",
                   "nvidia-nccl-cu12": "2.26.2", "nvidia-nvjitlink-cu12": "12.8.61", "nvidia-nvtx-cu12": "12.8.55",
                   "nvidia-cusparselt-cu12": "0.6.3"}


def dlami_al2023_p6_b200() -> Spec:
    """Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.7 (Amazon Linux 2023) on a p6-b200.48xlarge: 8x B200
    (Blackwell, the open modules required) on NVSwitch with fabric manager 570, CUDA 12.8, torch 2.7.0+cu128, 8 EFA
    with aws-ofi-nccl 1.15 (the first with P6-B200 support)."""
    return dlami_al2023_p5("p6-b200.48xlarge", "570.133.20", "2901", ("2901", 0), ("12.8.1", CUDA_128_LIBS),
                           ("2.7.0+cu128", TORCH_270_CU128), (8, "1.41.0", "1.15.0", "2.1.0"),
                           cupti_file="libcupti.so.2025.1.1")


def _ubuntu_dlami(distro: str, instance: str, device: str, buses: Sequence[str], driver: str, torch_version: str,
                  pins: Dict[str, str], mem: str, second_env: bool, extensions: bool = True) -> Spec:
    spec: Spec = {}
    host = "ip-172-31-5-6"
    deb_host(spec, distro, host)
    k = kernel_host(spec, distro, driver, extra_modules="ena 143360 0 - Live 0x0\next4 1 1 - Live 0x0\n")
    spec["proc/mounts"] = HOST_MOUNTS.format(fs="ext4").replace(",attr2,inode64,logbufs=8,logbsize=32k,noquota", ",discard,errors=remount-ro")
    spec["proc/meminfo"] = MEMINFO[mem]
    spec["proc/cmdline"] = (f"BOOT_IMAGE=/boot/vmlinuz-{k} root=PARTUUID=9c3f0a1b-01 ro console=tty1 console=ttyS0 "
                            "nvme_core.io_timeout=4294967295 panic=-1\n")
    spec["sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"] = b"\x06\x00\x00\x00\x00"
    dmi(spec, instance)
    gpus(spec, device, buses)
    libdir = LIBDIR["x86_64"]
    driver_userspace(spec, libdir, driver)
    glibc(spec, libdir, glibcxx="GLIBCXX_3.4.30" if distro == "ubuntu2204" else "GLIBCXX_3.4.33")
    persistenced(spec)
    branch = driver.split(".")[0]
    release = "22.04" if distro == "ubuntu2204" else "24.04"
    spec["var/lib/dpkg/status"] = dpkg_status([
        (f"nvidia-driver-{branch}-server", f"{driver}-0ubuntu0.{release}.1"),
        (f"linux-modules-nvidia-{branch}-server-{k}", f"{k}.{k.split('-')[1]}+1"),
        (f"libnvidia-compute-{branch}-server", f"{driver}-0ubuntu0.1"), ("nvidia-container-toolkit", "1.17.3-1"),
        ("docker-ce", "5:27.3.1-1~ubuntu"), ("cuda-toolkit-12-4", "12.4.1-1"), ("libc6", "2.35-0ubuntu3.8")])
    root = cuda_toolkit(spec, "12.4.1", libs=CUDA_124_LIBS)
    cupti(spec, root)
    cuda_toolkit(spec, "12.1.1", libs=CUDA_121_LIBS, link=False)
    spec["usr/bin/dockerd"] = elf(None)
    for b in ("nvidia-ctk", "nvidia-container-runtime", "nvidia-container-cli"):
        spec[f"usr/bin/{b}"] = elf(None)
    spec["etc/docker/daemon.json"] = json.dumps({"runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}})
    conda_root(spec)
    _dlami_pytorch_env(spec, "/opt/conda/envs/pytorch", torch_version, pins, extensions)
    if second_env:  # the AMI's second environment: the same torch for a jupyter kernel, pinned older numpy
        site = conda_env(spec, "/opt/conda/envs/pytorch_p311_jupyter")
        cu12_wheels(spec, site, pins)
        torch(spec, site, torch_version, "12.4", pins)
        numpy(spec, site, "1.26.4")
        for name, ver in (("jupyterlab", "4.3.1"), ("ipykernel", "6.29.5"), ("notebook", "7.2.2")):
            pure(spec, site, name, ver)
        spec["opt/conda/envs/pytorch_p311_jupyter/share/jupyter/kernels/python3/kernel.json"] = json.dumps(
            {"argv": ["/opt/conda/envs/pytorch_p311_jupyter/bin/python", "-m", "ipykernel_launcher", "-f",
                      "{connection_file}"], "display_name": "Python 3 (ipykernel)", "language": "python"})
    spec["proc/self/environ"] = environ(dlami_env("12.4", {
        "CONDA_PREFIX": "/opt/conda/envs/pytorch", "CONDA_DEFAULT_ENV": "pytorch", "HOSTNAME": host,
        "PATH": "/opt/conda/envs/pytorch/bin:/opt/conda/condabin:/usr/local/cuda-12.4/bin:/usr/local/sbin:"
                "/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/snap/bin",
        "LESSOPEN": "| /usr/bin/lesspipe %s"}, user="ubuntu", efa_paths=False))
    kernel_log(spec, "var/log/kern.log", host, k, driver)
    spec["var/log/syslog"] = f"Nov 29 10:00:30 {host} systemd[1]: Started nvidia-persistenced.service - NVIDIA Persistence Daemon.\n"
    ebs_root(spec)
    stores = {"g5.12xlarge": (1, 7325000000), "g6.xlarge": (1, 488281250), "p4de.24xlarge": (8, 1953125000),
              "g6e.12xlarge": (2, 3710937500)}
    if instance in stores:
        instance_store(spec, *stores[instance])
    tunables(spec, numa_nodes=1, thp="madvise", cpus=48)
    netdevs(spec, "ens5", "docker0")
    # the image's default user: cloud-init's passwordless sudo, and the docker group the DLAMI adds it to
    spec["etc/group"] = ("root:x:0:\nadm:x:4:syslog,ubuntu\nsudo:x:27:ubuntu\nvideo:x:44:ubuntu\n"
                         "docker:x:999:ubuntu\nubuntu:x:1000:\n")
    spec["etc/sudoers.d/90-cloud-init-users"] = "# Created by cloud-init v. 24.1.3\nubuntu ALL=(ALL) NOPASSWD:ALL\n"
    # a user's `pip install --user` of tools the env does not have (not shadowing anything), and JupyterLab bound to
    # localhost with a token (reached through an SSH tunnel)
    user_site = "home/ubuntu/.local/lib/python3.11/site-packages"
    for name, ver in (("nvitop", "1.3.2"), ("gpustat", "1.1.1")):
        pure(spec, user_site, name, ver)
    spec["home/ubuntu/.jupyter/jupyter_server_config.py"] = ("c = get_config()  # noqa\nc.ServerApp.ip = 'localhost'\n"
                                                            "c.ServerApp.port = 8888\nc.ServerApp.open_browser = False\n"
                                                            "c.IdentityProvider.token = 'b1946ac92492d2347c6235b4d2611184'\n")
    return spec


def dlami_ubuntu2204_g5() -> Spec:
    """DLAMI GPU PyTorch 2.5 (Ubuntu 22.04) on a g5.12xlarge: 4x A10G, a pytorch env and a jupyter env."""
    return _ubuntu_dlami("ubuntu2204", "g5.12xlarge", "2237", ("0000:00:1b.0", "0000:00:1c.0", "0000:00:1d.0",
                                                                "0000:00:1e.0"),
                         "550.127.05", "2.5.1+cu124", TORCH_251_CU124, "480G", second_env=True)


def dlami_ubuntu2404_g6() -> Spec:
    """DLAMI GPU PyTorch 2.5 (Ubuntu 24.04) on a g6.xlarge: 1x L4, the 550 server driver."""
    return _ubuntu_dlami("ubuntu2404", "g6.xlarge", "27b8", ("0000:31:00.0",), "550.127.05", "2.5.1+cu124",
                         TORCH_251_CU124, "64G", second_env=False)


# -- containers ------------------------------------------------------------------------------------------------------

def mountinfo(lines: Sequence[Tuple[str, str, str, str]]) -> str:
    """/proc/self/mountinfo lines: (mount point, fstype, source, root within source)."""
    out = []
    for i, (point, fstype, source, root) in enumerate(lines):
        opts = "ro,nosuid,nodev,relatime" if fstype in ("ext4", "xfs") and point != "/" else "rw,relatime"
        out.append(f"{1000 + i} {999 + i if i else 998} 259:1 {root} {point} {opts} - {fstype} {source} rw")
    return "\n".join(out) + "\n"


def runtime_injected(driver: str, libdir: str, with_smi: bool = True, devices: Sequence[int] = range(8),
                     source_libdir: str = "/usr/lib64", extra: Sequence[str] = ()) -> Tuple[Spec, str, str]:
    """What the NVIDIA container runtime (nvidia-container-cli) bind-mounts from the host into a container: the
    driver libraries (read-only), nvidia-smi and the persistenced socket. The spec of the files, plus the
    mountinfo and mounts lines of the binds."""
    spec: Spec = {}
    info, mounts = [], []
    libs = [f"libnvidia-ml.so.{driver}", f"libcuda.so.{driver}", f"libcudadebugger.so.{driver}",
            f"libnvidia-ptxjitcompiler.so.{driver}", f"libnvidia-nvvm.so.{driver}", f"libnvidia-cfg.so.{driver}",
            f"libnvidia-opencl.so.{driver}", f"libnvidia-allocator.so.{driver}"] + list(extra)
    for name in libs:
        soname = {"libnvidia-ml": "libnvidia-ml.so.1", "libcuda": "libcuda.so.1", "libnvidia-nvvm": "libnvidia-nvvm.so.4"}.get(
            name.split(".so")[0], name.split(".so")[0] + ".so.1")
        spec[f"{libdir}/{name}"] = elf(soname)
        info.append((f"/{libdir}/{name}", "xfs", "/dev/nvme0n1p1", f"{source_libdir}/{name}"))
        mounts.append(f"/dev/nvme0n1p1 /{libdir}/{name} xfs ro,nosuid,nodev,relatime,attr2,inode64,noquota 0 0")
    # ldconfig inside the container (the runtime's update-ldcache hook) made the soname links
    spec[f"{libdir}/libcuda.so.1"] = {"symlink": f"libcuda.so.{driver}"}
    spec[f"{libdir}/libnvidia-ml.so.1"] = {"symlink": f"libnvidia-ml.so.{driver}"}
    spec[f"{libdir}/libcuda.so"] = {"symlink": "libcuda.so.1"}
    if with_smi:
        for b in ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control",
                  "nvidia-cuda-mps-server"):
            spec[f"usr/bin/{b}"] = elf(None)
            info.append((f"/usr/bin/{b}", "xfs", "/dev/nvme0n1p1", f"/usr/bin/{b}"))
            mounts.append(f"/dev/nvme0n1p1 /usr/bin/{b} xfs ro,nosuid,nodev,relatime,attr2,inode64,noquota 0 0")
    info.append(("/run/nvidia-persistenced/socket", "tmpfs", "tmpfs", "/nvidia-persistenced/socket"))
    mounts.append("tmpfs /run/nvidia-persistenced/socket tmpfs rw,nosuid,nodev,noexec,size=201457088k,mode=755 0 0")
    for d in ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"] + [f"nvidia{n}" for n in devices]:
        info.append((f"/dev/{d}", "devtmpfs", "devtmpfs", f"/{d}"))
        mounts.append(f"devtmpfs /dev/{d} devtmpfs ro,nosuid,noexec,size=4096k,nr_inodes=1048576,mode=755 0 0")
    return spec, mountinfo(info), "\n".join(mounts) + "\n"


CONTAINER_BASE = [("/", "overlay", "overlay", "/"), ("/proc", "proc", "proc", "/"), ("/dev", "tmpfs", "tmpfs", "/"),
                  ("/dev/pts", "devpts", "devpts", "/"), ("/sys", "sysfs", "sysfs", "/"),
                  ("/sys/fs/cgroup", "cgroup2", "cgroup", "/"), ("/dev/mqueue", "mqueue", "mqueue", "/"),
                  ("/dev/shm", "tmpfs", "shm", "/"), ("/etc/resolv.conf", "xfs", "/dev/nvme0n1p1",
                                                      "/var/lib/docker/containers/3f2a/resolv.conf"),
                  ("/etc/hostname", "xfs", "/dev/nvme0n1p1", "/var/lib/docker/containers/3f2a/hostname"),
                  ("/etc/hosts", "xfs", "/dev/nvme0n1p1", "/var/lib/docker/containers/3f2a/hosts")]
CONTAINER_MOUNTS = ("overlay / overlay rw,relatime,lowerdir=/var/lib/docker/overlay2/l/ABC:/var/lib/docker/overlay2/l/DEF,"
                    "upperdir=/var/lib/docker/overlay2/3f2a/diff,workdir=/var/lib/docker/overlay2/3f2a/work 0 0\n"
                    "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n"
                    "tmpfs /dev tmpfs rw,nosuid,size=65536k,mode=755,inode64 0 0\n"
                    "devpts /dev/pts devpts rw,nosuid,noexec,relatime,gid=5,mode=620,ptmxmode=666 0 0\n"
                    "sysfs /sys sysfs ro,nosuid,nodev,noexec,relatime 0 0\n"
                    "cgroup /sys/fs/cgroup cgroup2 ro,nosuid,nodev,noexec,relatime,nsdelegate,memory_recursiveprot 0 0\n"
                    "mqueue /dev/mqueue mqueue rw,nosuid,nodev,noexec,relatime 0 0\n"
                    "shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size={shm} 0 0\n"
                    "/dev/nvme0n1p1 /etc/resolv.conf xfs rw,noatime,attr2,inode64,noquota 0 0\n"
                    "/dev/nvme0n1p1 /etc/hostname xfs rw,noatime,attr2,inode64,noquota 0 0\n"
                    "/dev/nvme0n1p1 /etc/hosts xfs rw,noatime,attr2,inode64,noquota 0 0\n")

# nvidia/cuda:12.4.1 images: CUDA 12.4, or a datacenter (brand=tesla...) driver of a branch minor-version
# compatibility serves
REQUIRE_CUDA_124 = ("cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 "
                    "brand=nvidia,driver>=470,driver<471 brand=tesla,driver>=525,driver<526 "
                    "brand=unknown,driver>=525,driver<526 brand=tesla,driver>=535,driver<536 "
                    "brand=unknown,driver>=535,driver<536 brand=nvidia,driver>=535,driver<536")
PYTORCH_IMAGE_ENV = {  # pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime (docker inspect)
    "PATH": "/opt/conda/bin:/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    "LD_LIBRARY_PATH": "/usr/local/nvidia/lib:/usr/local/nvidia/lib64", "PYTORCH_VERSION": "2.5.1",
    "HOSTNAME": "3f2a9c1b7d4e", "HOME": "/root", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
}


def _pytorch_image(spec: Spec, machine: str = "x86_64") -> None:
    """The official pytorch/pytorch image's files: Ubuntu 22.04, /opt/conda with torch and the cu12 wheels."""
    spec["etc/os-release"] = OS_RELEASE["ubuntu2204"]
    spec["etc/debian_version"] = "bookworm/sid\n"
    glibc(spec, LIBDIR[machine], machine=machine)
    spec["etc/passwd"] = "root:x:0:0:root:/root:/bin/bash\n"
    spec["var/lib/dpkg/status"] = dpkg_status([("libc6", "2.35-0ubuntu3.8"), ("ca-certificates", "20240203~22.04.1")],
                                              arch="arm64" if machine == "aarch64" else "amd64")
    site = conda_env(spec, "/opt/conda", machine=machine)
    conda_pkg(spec, "opt/conda", "conda", "24.9.2", "py311h06a4308_0", channel="pkgs/main")
    cu12_wheels(spec, site, TORCH_251_CU124, machine=machine)
    torch(spec, site, "2.5.1+cu124" if machine == "x86_64" else "2.5.1", "12.4", TORCH_251_CU124, machine=machine)
    numpy(spec, site, "2.1.2", machine=machine)
    for name, ver in (("filelock", "3.16.1"), ("sympy", "1.13.1"), ("triton", "3.1.0")):
        pure(spec, site, name, ver)


def _container_kernel(spec: Spec, driver: str, kernel: str = "5.15.0-1071-aws", devices: Sequence[int] = range(8),
                      flavor: str = "proprietary", buses: Sequence[str] = P4D_BUSES,
                      model: str = "NVIDIA A100-SXM4-40GB", uuids: Optional[Sequence[str]] = None) -> None:
    """What a container sees of the host's kernel: /proc and /sys are the host's (no /lib/modules in the image);
    /proc/driver/nvidia/gpus holds the GPUs the runtime gave the container."""
    spec["proc/sys/kernel/osrelease"] = kernel + "\n"
    spec["proc/version"] = f"Linux version {kernel} (buildd@lcy02-amd64-080) #81~20.04.1-Ubuntu SMP\n"
    spec["proc/driver/nvidia/version"] = nvrm(driver, flavor).replace(
        "gcc version 8.5.0 20210514 (Red Hat 8.5.0-22) (GCC)", "gcc version 9.4.0 (Ubuntu 9.4.0-1ubuntu1~20.04.2)")
    spec["proc/modules"] = PROC_MODULES_NVIDIA + "ena 143360 0 - Live 0x0\n"
    spec["sys/module/nvidia/version"] = driver + "\n"
    for k, n in enumerate(devices):
        bus = buses[n]
        uuid = uuids[k] if uuids else f"GPU-{n:08x}-1111-2222-3333-444455556666"
        spec[f"proc/driver/nvidia/gpus/{bus}/information"] = (
            f"Model: \t\t {model}\nIRQ:   \t\t {42 + n}\nGPU UUID: \t {uuid}\n"
            "Video BIOS: \t 92.00.45.00.03\nBus Type: \t PCIe\nDMA Size: \t 47 bits\nDMA Mask: \t 0x7fffffffffff\n"
            f"Bus Location: \t {bus}\nDevice Minor: \t {n}\nGPU Excluded:\t No\n")


def docker_pytorch_nvidia_runtime() -> Spec:
    """pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime started with `docker run --gpus all --shm-size=16g` on a p4d
    (Ubuntu 20.04 host, driver 535): the runtime's bind mounts of the host's libcuda, libnvidia-ml, nvidia-smi and
    /dev/nvidia* in /proc/self/mountinfo."""
    driver = "535.216.01"
    spec: Spec = {".dockerenv": ""}
    _pytorch_image(spec)
    injected, info, mounts = runtime_injected(driver, LIBDIR["x86_64"], source_libdir="/usr/lib/x86_64-linux-gnu")
    spec.update(injected)
    spec["proc/self/mountinfo"] = mountinfo(CONTAINER_BASE) + info
    spec["proc/mounts"] = CONTAINER_MOUNTS.format(shm="16777216k") + mounts
    spec["proc/1/cgroup"] = "0::/\n"
    spec["proc/meminfo"] = MEMINFO["1152G"]
    spec["proc/sys/kernel/hostname"] = "3f2a9c1b7d4e\n"
    spec["etc/hostname"] = "3f2a9c1b7d4e\n"
    _container_kernel(spec, driver)
    gpus(spec, "20b0", P4D_BUSES)
    nvswitches(spec, "1af1", 6)  # /sys is the host's: its NVSwitches too (the fabric manager runs on the host)
    dmi(spec, "p4d.24xlarge")
    netdevs(spec, "eth0")
    spec["proc/self/environ"] = environ({**PYTORCH_IMAGE_ENV, "NVIDIA_REQUIRE_CUDA": REQUIRE_CUDA_124,
                                         "CUDA_VERSION": "12.4.1"})
    return spec


# the two GPUs the device plugin allocated (tests/fixtures/nvml/k8s_pod_two_h100.json has the same UUIDs)
POD_GPUS = ("GPU-8a5b3e4f-1c2d-4e6f-9a0b-1c2d3e4f5a6b", "GPU-2f3e4d5c-6b7a-4980-a1b2-c3d4e5f6a7b8")


def k8s_pod_two_gpus() -> Spec:
    """The same image as a Kubernetes pod (containerd, NVIDIA device plugin) given 2 of the node's 8 H100s:
    NVIDIA_VISIBLE_DEVICES holds the two GPU UUIDs, only /dev/nvidia2 and /dev/nvidia5 are mounted."""
    driver = "550.127.05"
    spec: Spec = {}
    _pytorch_image(spec)
    injected, info, mounts = runtime_injected(driver, LIBDIR["x86_64"], devices=(2, 5),
                                              source_libdir="/usr/lib/x86_64-linux-gnu")
    spec.update(injected)
    base = [(p, f, s, r.replace("/var/lib/docker/containers/3f2a", "/var/lib/kubelet/pods/7c1e/etc-hosts"))
            for p, f, s, r in CONTAINER_BASE]
    base.append(("/var/run/secrets/kubernetes.io/serviceaccount", "tmpfs", "tmpfs", "/"))
    spec["proc/self/mountinfo"] = mountinfo(base) + info
    spec["proc/mounts"] = CONTAINER_MOUNTS.format(shm="65536k").replace("/var/lib/docker", "/var/lib/containerd") + \
        "tmpfs /var/run/secrets/kubernetes.io/serviceaccount tmpfs ro,relatime,size=1000000k 0 0\n" + mounts
    # the pod mounts an emptyDir (medium: Memory) over /dev/shm for its DataLoader workers
    spec["proc/mounts"] = spec["proc/mounts"].replace("shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=65536k",
                                                      "tmpfs /dev/shm tmpfs rw,relatime,size=268435456k")
    spec["proc/1/cgroup"] = "0::/kubepods.slice/kubepods-pod7c1e.slice/cri-containerd-9d8e7f.scope\n"
    spec["sys/fs/cgroup/memory.max"] = f"{512 * 1024 ** 3}\n"
    spec["sys/fs/cgroup/cpu.max"] = "4800000 100000\n"
    spec["proc/meminfo"] = MEMINFO["2048G"]
    spec["proc/sys/kernel/hostname"] = "train-job-0-worker-0\n"
    spec["etc/hostname"] = "train-job-0-worker-0\n"
    _container_kernel(spec, driver, kernel="6.1.115-126.197.amzn2023.x86_64", devices=(2, 5), flavor="open",
                      buses=P5_BUSES, model="NVIDIA H100 80GB HBM3", uuids=POD_GPUS)
    gpus(spec, "2330", P5_BUSES)
    nvswitches(spec, "22a3", 4, base=0x05)
    dmi(spec, "p5.48xlarge")
    env = {**PYTORCH_IMAGE_ENV, "HOSTNAME": "train-job-0-worker-0",
           "NVIDIA_VISIBLE_DEVICES": ",".join(POD_GPUS),
           "NVIDIA_REQUIRE_CUDA": REQUIRE_CUDA_124, "CUDA_VERSION": "12.4.1",
           "KUBERNETES_SERVICE_HOST": "172.20.0.1", "KUBERNETES_SERVICE_PORT": "443",
           "KUBERNETES_PORT": "tcp://172.20.0.1:443", "MASTER_ADDR": "train-job-0-master-0", "MASTER_PORT": "23456",
           "WORLD_SIZE": "2", "RANK": "1", "PET_NPROC_PER_NODE": "2"}
    spec["proc/self/environ"] = environ(env)
    netdevs(spec, "eth0")
    return spec


CDI_SPEC = """---
cdiVersion: 0.5.0
containerEdits:
  deviceNodes:
  - path: /dev/nvidia-modeset
  - path: /dev/nvidia-uvm
  - path: /dev/nvidia-uvm-tools
  - path: /dev/nvidiactl
  hooks:
  - args:
    - nvidia-cdi-hook
    - create-symlinks
    - --link
    - libcuda.so.1::/usr/lib64/libcuda.so
    hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
  - args:
    - nvidia-cdi-hook
    - update-ldcache
    - --folder
    - /usr/lib64
    hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
  mounts:
  - containerPath: /usr/lib64/libcuda.so.{driver}
    hostPath: /usr/lib64/libcuda.so.{driver}
    options:
    - ro
    - nosuid
    - nodev
    - bind
  - containerPath: /usr/lib64/libnvidia-ml.so.{driver}
    hostPath: /usr/lib64/libnvidia-ml.so.{driver}
    options:
    - ro
    - nosuid
    - nodev
    - bind
  - containerPath: /usr/bin/nvidia-smi
    hostPath: /usr/bin/nvidia-smi
    options:
    - ro
    - nosuid
    - nodev
    - bind
devices:
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: "0"
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: all
kind: nvidia.com/gpu
"""


def podman_cdi() -> Spec:
    """`podman run --device nvidia.com/gpu=all` on a RHEL 9 g6e host with CDI (/etc/cdi/nvidia.yaml generated by
    nvidia-ctk cdi generate): the container (a UBI 9 image with a pip venv of torch) sees the host's libraries at
    the paths the spec names, bind-mounted."""
    driver = "550.127.05"
    spec: Spec = {"run/.containerenv": 'engine="podman-4.9.4-rhel"\nname="trainer"\nid="5e6f"\nimage="registry.access.redhat.com/ubi9/python-311:latest"\nrootless=1\n'}
    spec["etc/os-release"] = ('NAME="Red Hat Enterprise Linux"\nVERSION="9.4 (Plow)"\nID="rhel"\nID_LIKE="fedora"\n'
                              'VERSION_ID="9.4"\nPLATFORM_ID="platform:el9"\nPRETTY_NAME="Red Hat Enterprise Linux 9.4 (Plow)"\n')
    spec["etc/redhat-release"] = "Red Hat Enterprise Linux release 9.4 (Plow)\n"
    glibc(spec, "usr/lib64", glibcxx="GLIBCXX_3.4.29")
    spec["var/lib/rpm/rpmdb.sqlite"] = rpmdb_sqlite(["glibc-2.34-100.el9_4.4", "python3.11-3.11.9-2.el9_4.1"])
    injected, info, mounts = runtime_injected(driver, "usr/lib64", devices=(0,), source_libdir="/usr/lib64")
    spec.update(injected)
    spec["proc/self/mountinfo"] = mountinfo([(p, f, s, r.replace("/var/lib/docker/containers/3f2a",
                                                                  "/home/ci/.local/share/containers/storage/overlay-containers/5e6f/userdata"))
                                             for p, f, s, r in CONTAINER_BASE]) + info
    spec["proc/mounts"] = CONTAINER_MOUNTS.format(shm="65536000k").replace("/var/lib/docker", "/home/ci/.local/share/containers/storage") + mounts
    spec["proc/1/cgroup"] = "0::/\n"
    spec["proc/meminfo"] = MEMINFO["128G"]
    spec["proc/sys/kernel/hostname"] = "5e6f7a8b9c0d\n"
    spec["proc/sys/kernel/osrelease"] = "5.14.0-427.42.1.el9_4.x86_64\n"
    spec["proc/driver/nvidia/version"] = nvrm(driver, "open")
    spec["proc/modules"] = PROC_MODULES_NVIDIA
    spec["sys/module/nvidia/version"] = driver + "\n"
    gpus(spec, "26b9", ("0000:30:00.0",))
    dmi(spec, "g6e.4xlarge")
    prefix = "opt/app-root"
    spec[f"{prefix}/pyvenv.cfg"] = "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.9\n"
    spec[f"{prefix}/bin/python3.11"] = elf(None, needed=("libpython3.11.so.1.0", "libc.so.6"))
    spec[f"{prefix}/bin/python3"] = {"symlink": "python3.11"}
    spec[f"{prefix}/bin/python"] = {"symlink": "python3.11"}
    so(spec, "usr/lib64", "libpython3.11.so.1.0", "libpython3.11.so.1.0")
    spec["usr/bin/python3.11"] = elf(None, needed=("libpython3.11.so.1.0", "libc.so.6"))
    site = f"{prefix}/lib/python3.11/site-packages"
    cu12_wheels(spec, site, TORCH_251_CU124)
    torch(spec, site, "2.5.1+cu124", "12.4", TORCH_251_CU124)
    numpy(spec, site)
    spec["proc/self/environ"] = environ({
        "container": "podman", "PATH": "/opt/app-root/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin",
        "VIRTUAL_ENV": "/opt/app-root", "HOME": "/opt/app-root/src", "HOSTNAME": "5e6f7a8b9c0d",
        "NVIDIA_VISIBLE_DEVICES": "void", "PYTHONUNBUFFERED": "1", "TERM": "xterm"})
    return spec


def ngc_cuda_compat(host_driver: str = "535.216.01", geforce: bool = False) -> Spec:
    """nvcr.io/nvidia/pytorch:24.10-py3 (CUDA 12.6.2, cuda-compat-12-6 in /usr/local/cuda/compat) on an A100 host
    with driver 535: forward compatibility is legitimate on a datacenter GPU; the NGC entrypoint (/etc/shinit_v2)
    links compat/lib to lib.real, which LD_LIBRARY_PATH names."""
    spec: Spec = {".dockerenv": ""}
    spec["etc/os-release"] = OS_RELEASE["ubuntu2204"]
    glibc(spec, LIBDIR["x86_64"])
    spec["var/lib/dpkg/status"] = dpkg_status([("cuda-compat-12-6", "560.35.03-1"), ("cuda-cudart-12-6", "12.6.77-1"),
                                               ("libcudnn9-cuda-12", "9.5.0.50-1"), ("libnccl2", "2.22.3-1+cuda12.6"),
                                               ("libc6", "2.35-0ubuntu3.8")])
    root = cuda_toolkit(spec, "12.6.2", libs=[("libcudart.so.12.6.77", "libcudart.so.12"),
                                              ("libcublas.so.12.6.3.3", "libcublas.so.12"),
                                              ("libcublasLt.so.12.6.3.3", "libcublasLt.so.12"),
                                              ("libnvJitLink.so.12.6.77", "libnvJitLink.so.12"),
                                              ("libcusparse.so.12.5.4.2", "libcusparse.so.12"),
                                              ("libcufft.so.11.3.0.4", "libcufft.so.11"),
                                              ("libcurand.so.10.3.7.77", "libcurand.so.10"),
                                              ("libcusolver.so.11.7.1.2", "libcusolver.so.11"),
                                              ("libnvToolsExt.so.1.0.0", "libnvToolsExt.so.1")])
    # cuda-compat-12-6's files; NGC keeps them in compat/lib.real and its entrypoint (/etc/shinit_v2) links
    # compat/lib to it when the host's driver is older than the image's CUDA
    compat = f"{root.strip('/')}/compat/lib.real"
    so(spec, compat, "libcuda.so.560.35.03", "libcuda.so.1", links=["libcuda.so"])
    so(spec, compat, "libnvidia-ptxjitcompiler.so.560.35.03", "libnvidia-ptxjitcompiler.so.1")
    spec[f"{compat}/libnvidia-nvvm.so.560.35.03"] = elf("libnvidia-nvvm.so.4")
    if not geforce:  # the entrypoint's check: compat only where the driver is older and the GPU supports it
        spec[f"{root.strip('/')}/compat/lib"] = {"symlink": "lib.real"}
    spec["etc/ld.so.conf"] = "include /etc/ld.so.conf.d/*.conf\n"
    spec["etc/ld.so.conf.d/000_cuda.conf"] = "/usr/local/cuda/lib64\n"
    spec["etc/ld.so.conf.d/988_cuda-12.conf"] = "/usr/local/cuda-12/targets/x86_64-linux/lib\n"
    spec["etc/ld.so.conf.d/libc.conf"] = "/usr/local/lib\n"
    spec["etc/ld.so.conf.d/x86_64-linux-gnu.conf"] = "/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n"
    spec["usr/local/cuda-12"] = {"symlink": "/usr/local/cuda-12.6"}
    cudnn_system(spec, LIBDIR["x86_64"], "9.5.0")
    nccl_system(spec, LIBDIR["x86_64"], "2.22.3")
    injected, info, mounts = runtime_injected(host_driver, LIBDIR["x86_64"], source_libdir="/usr/lib/x86_64-linux-gnu")
    spec.update(injected)
    spec["proc/self/mountinfo"] = mountinfo(CONTAINER_BASE) + info
    spec["proc/mounts"] = CONTAINER_MOUNTS.format(shm="33554432k") + mounts
    spec["proc/1/cgroup"] = "0::/\n"
    spec["proc/meminfo"] = MEMINFO["1152G"]
    spec["proc/sys/kernel/hostname"] = "a1b2c3d4e5f6\n"
    _container_kernel(spec, host_driver)
    if geforce:
        machines.pci(spec, "0000:01:00.0", "2684", cls="0x030000")
        for key in [k for k in spec if k.startswith("proc/driver/nvidia/gpus/")]:
            del spec[key]
        spec["proc/meminfo"] = MEMINFO["128G"]
    else:
        gpus(spec, "20b0", P4D_BUSES)
        nvswitches(spec, "1af1", 6)
        dmi(spec, "p4d.24xlarge")
    site = "usr/local/lib/python3.10/dist-packages"
    spec["usr/bin/python3.10"] = elf(None)
    spec["usr/bin/python3"] = {"symlink": "python3.10"}
    spec["usr/lib/python3.10/os.py"] = ""
    files = {"torch/lib/libtorch_cuda.so": elf(
        "libtorch_cuda.so", runpath=["$ORIGIN"], needed=["libcudart.so.12", "libcublas.so.12", "libcudnn.so.9",
                                                         "libnccl.so.2", "libnvToolsExt.so.1", "libc10.so",
                                                         "libstdc++.so.6", "libc.so.6"]),
        "torch/lib/libc10.so": elf("libc10.so", needed=["libstdc++.so.6", "libc.so.6"]),
        "torch/_C.cpython-310-x86_64-linux-gnu.so": elf(None, runpath=["$ORIGIN/lib"],
                                                         needed=["libtorch_cuda.so", "libc.so.6"]),
        "torch/__init__.py": "import ctypes\n",
        "torch/version.py": "__version__ = '2.5.0a0+e000cf0ad9.nv24.10'\ndebug = False\ncuda = '12.6'\n"
                            "git_version = 'e000cf0ad980e5d140dc895a646174e9b945cf26'\nhip = None\n"}
    dist(spec, site, "torch", "2.5.0a0+e000cf0ad9.nv24.10", files, tag="cp310-cp310-linux_x86_64", installer="")
    spec["proc/self/environ"] = environ({
        "PATH": "/usr/local/lib/python3.10/dist-packages/torch_tensorrt/bin:/usr/local/mpi/bin:/usr/local/nvidia/bin:"
                "/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/ucx/bin:"
                "/opt/tensorrt/bin",
        "LD_LIBRARY_PATH": "/usr/local/lib/python3.10/dist-packages/torch/lib:"
                           "/usr/local/lib/python3.10/dist-packages/torch_tensorrt/lib:/usr/local/cuda/compat/lib:"
                           "/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
        "NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility,video",
        "NVIDIA_REQUIRE_CUDA": "cuda>=9.0", "CUDA_VERSION": "12.6.2.004", "CUDA_DRIVER_VERSION": "560.35.03",
        "NVIDIA_PRODUCT_NAME": "PyTorch", "PYTORCH_VERSION": "2.5.0a0+e000cf0", "NVIDIA_PYTORCH_VERSION": "24.10",
        "CUDNN_VERSION": "9.5.0.50", "NCCL_VERSION": "2.22.3", "CUBLAS_VERSION": "12.6.3.3",
        "_CUDA_COMPAT_PATH": "/usr/local/cuda/compat", "ENV": "/etc/shinit_v2", "BASH_ENV": "/etc/bash.bashrc",
        "NVIDIA_BUILD_ID": "114410972", "HOME": "/root", "HOSTNAME": "a1b2c3d4e5f6"})
    return spec


def grace_hopper() -> Spec:
    """A GH200 (Grace Hopper, aarch64) node on Ubuntu 22.04 with the 64k-page NVIDIA kernel, the open modules, and a
    venv with the aarch64 torch and cu12 wheels (EM_AARCH64 objects under /usr/lib/aarch64-linux-gnu)."""
    driver = "560.35.03"
    k = "6.8.0-1017-nvidia-64k"
    spec: Spec = {}
    deb_host(spec, "ubuntu2204", "gh200-node-01", user="ubuntu")
    del spec["etc/ld.so.conf.d/x86_64-linux-gnu.conf"]
    spec["etc/ld.so.conf.d/aarch64-linux-gnu.conf"] = ("# Multiarch support\n/usr/local/lib/aarch64-linux-gnu\n"
                                                       "/lib/aarch64-linux-gnu\n/usr/lib/aarch64-linux-gnu\n")
    spec["proc/sys/kernel/osrelease"] = k + "\n"
    spec["proc/driver/nvidia/version"] = nvrm(driver, "open", "aarch64")
    spec["proc/modules"] = PROC_MODULES_NVIDIA + "nvidia_peermem 16384 0 - Live 0x0\n"
    spec["sys/module/nvidia/version"] = driver + "\n"
    spec[f"lib/modules/{k}/modules.dep"] = ""
    # nvidia-dkms-560-open built it; DKMS compresses as the kernel's config says (zstd on these 6.8 kernels)
    spec[f"lib/modules/{k}/updates/dkms/nvidia.ko.zst"] = zstd_raw(machines.module_blob(driver, k))
    spec[f"lib/modules/{k}/updates/dkms/nvidia-uvm.ko.zst"] = zstd_raw(machines.module_blob(driver, k))
    spec[f"var/lib/dkms/nvidia/{driver}/{k}/aarch64/module/nvidia.ko.zst"] = ""
    tunables(spec, numa_nodes=2, thp="madvise", numa_balancing=0, governor="schedutil", scaling_driver="cppc_cpufreq",
             cpus=72)
    spec[f"boot/vmlinuz-{k}"] = ""
    spec["boot/vmlinuz"] = {"symlink": f"vmlinuz-{k}"}
    for fw in ("gsp_ga10x.bin", "gsp_tu10x.bin"):
        spec[f"lib/firmware/nvidia/{driver}/{fw}"] = b"\0"
    spec["proc/mounts"] = HOST_MOUNTS.format(fs="ext4")
    spec["proc/meminfo"] = MEMINFO["480G"]
    spec["proc/cmdline"] = f"BOOT_IMAGE=/boot/vmlinuz-{k} root=UUID=4f1e ro init_on_alloc=0 iommu.passthrough=1\n"
    dmi(spec, "ThinkSystem HPE Cray XD670 GH200", vendor="Supermicro")
    machines.pci(spec, "0009:01:00.0", "2342")
    libdir = LIBDIR["aarch64"]
    driver_userspace(spec, libdir, driver, machine="aarch64")
    glibc(spec, libdir, machine="aarch64")
    persistenced(spec)
    spec["var/lib/dpkg/status"] = dpkg_status([("nvidia-driver-560-open", f"{driver}-0ubuntu1"),
                                               ("nvidia-dkms-560-open", f"{driver}-0ubuntu1"),
                                               ("cuda-toolkit-12-6", "12.6.2-1"), ("libc6", "2.35-0ubuntu3.8")],
                                              arch="arm64")
    root = cuda_toolkit(spec, "12.6.2", arch="aarch64", libs=[("libcudart.so.12.6.77", "libcudart.so.12"),
                                                               ("libnvToolsExt.so.1.0.0", "libnvToolsExt.so.1")])
    del root
    prefix = "home/ubuntu/venvs/torch"
    spec[f"{prefix}/pyvenv.cfg"] = "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.10.12\n"
    spec[f"{prefix}/bin/python3"] = {"symlink": "/usr/bin/python3.10"}
    spec[f"{prefix}/bin/python"] = {"symlink": "python3"}
    spec["usr/bin/python3.10"] = elf(None, machine="aarch64")
    spec["usr/lib/python3.10/os.py"] = ""
    site = f"{prefix}/lib/python3.10/site-packages"
    cu12_wheels(spec, site, TORCH_251_CU124, machine="aarch64")
    torch(spec, site, "2.5.1", "12.4", TORCH_251_CU124, machine="aarch64", python_tag="310")
    spec["proc/self/environ"] = environ({
        "PATH": f"/{prefix}/bin:/usr/local/cuda-12.6/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin",
        "VIRTUAL_ENV": f"/{prefix}", "HOME": "/home/ubuntu", "USER": "ubuntu", "LANG": "C.UTF-8",
        "LD_LIBRARY_PATH": "/usr/local/cuda-12.6/lib64"})
    kernel_log(spec, "var/log/kern.log", "gh200-node-01", k, driver, flavor="open")
    return spec


def wsl2() -> Spec:
    """Ubuntu 22.04 under WSL2 on a Windows laptop with an RTX 4070 Laptop GPU: libcuda comes from the Windows driver
    through /usr/lib/wsl/lib (mounted by WSL), no nvidia kernel module, /dev/dxg; a venv with torch cu124."""
    spec: Spec = {}
    deb_host(spec, "ubuntu2204", "DESKTOP-7H3K2L9", user="dev")
    k = "5.15.167.4-microsoft-standard-WSL2"
    spec["proc/sys/kernel/osrelease"] = k + "\n"
    spec["proc/version"] = f"Linux version {k} (root@f9c826d3017f) (gcc (GCC) 11.2.0) #1 SMP Tue Nov 5 00:21:55 UTC 2024\n"
    spec["proc/modules"] = ""
    spec["proc/meminfo"] = MEMINFO["64G"].replace("65011712", "32768000")
    spec["proc/mounts"] = ("/dev/sdc / ext4 rw,relatime,discard,errors=remount-ro,data=ordered 0 0\n"
                           "none /usr/lib/wsl/drivers 9p ro,nosuid,nodev,noatime,dirsync,aname=drivers;fmask=222;dmask=222 0 0\n"
                           "none /usr/lib/wsl/lib overlay rw,nosuid,nodev,noatime,lowerdir=/gpu_lib_packaged:/gpu_lib_inbox,upperdir=/gpu_lib/rw/upper,workdir=/gpu_lib/rw/work 0 0\n"
                           "C:\\134 /mnt/c 9p rw,noatime,dirsync,aname=drvfs;path=C:\\;uid=1000;gid=1000 0 0\n"
                           "none /dev/shm tmpfs rw,nosuid,nodev,noatime 0 0\n"
                           "proc /proc proc rw,nosuid,nodev,noexec,noatime 0 0\n")
    for name, soname in (("libcuda.so.1.1", "libcuda.so.1"), ("libnvidia-ml.so.1", "libnvidia-ml.so.1"),
                         ("libdxcore.so", "libdxcore.so"), ("libnvidia-ptxjitcompiler.so.1", "libnvidia-ptxjitcompiler.so.1"),
                         ("libnvdxgdmal.so.1", "libnvdxgdmal.so.1")):
        spec[f"usr/lib/wsl/lib/{name}"] = elf(soname)
    spec["usr/lib/wsl/lib/libcuda.so.1"] = {"symlink": "libcuda.so.1.1"}
    spec["usr/lib/wsl/lib/libcuda.so"] = {"symlink": "libcuda.so.1.1"}
    spec["usr/lib/wsl/lib/nvidia-smi"] = elf(None)
    spec["usr/lib/wsl/drivers/nvltsi.inf_amd64_8ef5fb3c1f1a8e0a/nvlti.inf"] = "; NVIDIA Windows driver 566.14\n"
    spec["etc/ld.so.conf.d/ld.wsl.conf"] = "# This file was automatically generated by WSL.\n/usr/lib/wsl/lib\n"
    spec["etc/wsl.conf"] = "[boot]\nsystemd=true\n[user]\ndefault=dev\n"
    spec["dev/dxg"] = ""
    # the GPU as WSL2's Linux sees it: a VMBus-backed PCI function of Microsoft's (1414:008e, "Basic Render Driver")
    real = "/sys/devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/8e3ad8c1-4f6b-4c44-9a4b-1e2d3c4b5a69/pci9f1e:00/9f1e:00:00.0"
    spec["sys/bus/pci/devices/9f1e:00:00.0"] = {"symlink": "../../.." + real}
    spec[f"{real}/vendor"] = "0x1414\n"
    spec[f"{real}/device"] = "0x008e\n"
    spec[f"{real}/class"] = "0x030200\n"
    libdir = LIBDIR["x86_64"]
    glibc(spec, libdir)
    spec["var/lib/dpkg/status"] = dpkg_status([("libc6", "2.35-0ubuntu3.8"), ("python3.10", "3.10.12-1~22.04.6"),
                                               ("wslu", "3.2.3-0ubuntu2")])
    prefix = "home/dev/.venvs/ml"
    spec[f"{prefix}/pyvenv.cfg"] = "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.10.12\n"
    spec[f"{prefix}/bin/python3"] = {"symlink": "/usr/bin/python3.10"}
    spec[f"{prefix}/bin/python"] = {"symlink": "python3"}
    spec["usr/bin/python3.10"] = elf(None)
    spec["usr/lib/python3.10/os.py"] = ""
    site = f"{prefix}/lib/python3.10/site-packages"
    cu12_wheels(spec, site, TORCH_251_CU124)
    torch(spec, site, "2.5.1+cu124", "12.4", TORCH_251_CU124, python_tag="310")
    spec["proc/self/environ"] = environ({
        "PATH": f"/{prefix}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/usr/lib/wsl/lib:"
                "/mnt/c/Windows/system32:/mnt/c/Windows",
        "VIRTUAL_ENV": f"/{prefix}", "HOME": "/home/dev", "USER": "dev", "WSL_DISTRO_NAME": "Ubuntu-22.04",
        "WSL_INTEROP": "/run/WSL/352_interop", "WSLENV": "", "WT_SESSION": "1d0b1a8e", "LANG": "C.UTF-8",
        "DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0", "XDG_RUNTIME_DIR": "/run/user/1000/",
        "PULSE_SERVER": "unix:/mnt/wslg/PulseServer"})
    return spec


def geforce_workstation() -> Spec:
    """A 2x RTX 4090 workstation on Ubuntu 24.04 with the distro's nvidia-driver-550 (signed by Canonical, from
    linux-modules-nvidia-550), desktop session, a miniforge install in the user's home with a torch env."""
    driver = "550.120"
    k = "6.8.0-49-generic"
    spec: Spec = {}
    deb_host(spec, "ubuntu2404", "rig", user="alice")
    spec["proc/sys/kernel/osrelease"] = k + "\n"
    spec["proc/driver/nvidia/version"] = nvrm(driver, "proprietary").replace(
        "gcc version 8.5.0 20210514 (Red Hat 8.5.0-22) (GCC)", "gcc version 13.2.0 (Ubuntu 13.2.0-23ubuntu4)")
    spec["proc/modules"] = PROC_MODULES_NVIDIA + "snd_hda_intel 61440 4 - Live 0x0\nnvme 61440 3 - Live 0x0\n"
    spec["sys/module/nvidia/version"] = driver + "\n"
    spec[f"lib/modules/{k}/modules.dep"] = ""
    spec[f"lib/modules/{k}/kernel/nvidia-550/nvidia.ko"] = machines.module_blob(driver, k)
    spec[f"lib/modules/{k}/kernel/nvidia-550/nvidia-uvm.ko"] = machines.module_blob(driver, k)
    spec[f"boot/vmlinuz-{k}"] = ""
    spec["boot/vmlinuz"] = {"symlink": f"vmlinuz-{k}"}
    spec["lib/firmware/nvidia/550.120/gsp_ga10x.bin"] = b"\0"
    spec["lib/firmware/nvidia/550.120/gsp_tu10x.bin"] = b"\0"
    spec["usr/lib/modprobe.d/nvidia-graphics-drivers.conf"] = "blacklist nouveau\nblacklist lbm-nouveau\nalias nouveau off\n"
    spec["proc/mounts"] = ("/dev/nvme0n1p2 / ext4 rw,relatime 0 0\n/dev/nvme0n1p1 /boot/efi vfat rw,relatime 0 0\n"
                           "/dev/nvme1n1p1 /data ext4 rw,relatime 0 0\ntmpfs /dev/shm tmpfs rw,nosuid,nodev,inode64 0 0\n"
                           "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n")
    spec["proc/meminfo"] = MEMINFO["128G"]
    spec["proc/cmdline"] = f"BOOT_IMAGE=/boot/vmlinuz-{k} root=UUID=3a1b ro quiet splash vt.handoff=7\n"
    spec["sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"] = b"\x06\x00\x00\x00\x01"
    spec["sys/class/dmi/id/sys_vendor"] = "ASUS\n"
    spec["sys/class/dmi/id/product_name"] = "System Product Name\n"
    for bus in ("01", "02"):  # two RTX 4090s (GeForce 40-series: no PCIe peer-to-peer)
        machines.pci(spec, f"0000:{bus}:00.0", "2684", cls="0x030000")
        machines.pci(spec, f"0000:{bus}:00.1", "22ba", cls="0x040300", driver="snd_hda_intel")
    netdevs(spec, "enp5s0", "wlp6s0")
    libdir = LIBDIR["x86_64"]
    driver_userspace(spec, libdir, driver)
    glibc(spec, libdir, glibcxx="GLIBCXX_3.4.33")
    for name in ("libnvidia-glcore", "libnvidia-eglcore", "libnvidia-glsi", "libGLX_nvidia", "libEGL_nvidia"):
        spec[f"{libdir}/{name}.so.{driver}"] = elf(f"{name}.so.0")
    spec["var/lib/dpkg/status"] = dpkg_status([
        ("nvidia-driver-550", "550.120-0ubuntu0.24.04.1"), ("libnvidia-compute-550", "550.120-0ubuntu0.24.04.1"),
        (f"linux-modules-nvidia-550-{k}", "6.8.0-49.49+1"), ("linux-modules-nvidia-550-generic", "6.8.0-49.49+1"),
        ("nvidia-kernel-common-550", "550.120-0ubuntu0.24.04.1"), ("nvidia-prime", "0.8.17.2"),
        ("libc6", "2.39-0ubuntu8.3"), ("ubuntu-desktop", "1.539.1"), ("cuda-toolkit-12-4", "12.4.1-1"),
        ("cuda-toolkit-config-common", "12.6.77-1")])
    spec["usr/bin/nvidia-smi"] = elf(None)
    spec["usr/lib/systemd/system/nvidia-suspend.service"] = "[Unit]\nDescription=NVIDIA system suspend actions\n"
    spec["etc/systemd/system/systemd-suspend.service.wants/nvidia-suspend.service"] = {
        "symlink": "/usr/lib/systemd/system/nvidia-suspend.service"}
    spec["usr/lib/systemd/system/nvidia-persistenced.service"] = "[Service]\nExecStart=/usr/bin/nvidia-persistenced\n"
    spec["usr/bin/nvidia-persistenced"] = elf(None)
    # CUDA 12.4 from NVIDIA's repository, for building extensions; its deb puts the toolkit in ld.so.conf
    cuda_toolkit(spec, "12.4.1", libs=CUDA_124_LIBS)
    spec["etc/ld.so.conf.d/988_cuda-12.conf"] = "/usr/local/cuda-12/targets/x86_64-linux/lib\n"
    spec["usr/local/cuda-12"] = {"symlink": "/usr/local/cuda-12.4"}
    home = "home/alice"
    conda_pkg(spec, f"{home}/miniforge3", "conda", "24.9.2", "py312h7900ff3_0", files=["bin/conda"])
    conda_env(spec, f"{home}/miniforge3", python="3.12.7", build="hc5c86c4_0_cpython")
    site = conda_env(spec, f"{home}/miniforge3/envs/torch")
    cu12_wheels(spec, site, TORCH_251_CU124)
    torch(spec, site, "2.5.1+cu124", "12.4", TORCH_251_CU124)
    torch_companions(spec, site, "2.5.1+cu124")
    torch_extensions(spec, site, "2.5.1+cu124")
    spec[f"{home}/.condarc"] = "channels:\n  - conda-forge\n"
    spec[f"{home}/.bashrc"] = "# >>> conda initialize >>>\n__conda_setup=\"$('/home/alice/miniforge3/bin/conda' 'shell.bash' 'hook')\"\n"
    spec["proc/self/environ"] = environ({
        "PATH": f"/{home}/miniforge3/envs/torch/bin:/{home}/miniforge3/condabin:/usr/local/sbin:/usr/local/bin:"
                "/usr/sbin:/usr/bin:/sbin:/bin:/usr/games:/usr/local/games:/snap/bin",
        "CONDA_PREFIX": f"/{home}/miniforge3/envs/torch", "CONDA_DEFAULT_ENV": "torch", "CONDA_SHLVL": "2",
        "CONDA_PREFIX_1": f"/{home}/miniforge3", "CONDA_EXE": f"/{home}/miniforge3/bin/conda",
        "HOME": f"/{home}", "USER": "alice", "LANG": "en_US.UTF-8", "DISPLAY": ":0", "XDG_SESSION_TYPE": "wayland",
        "XDG_CURRENT_DESKTOP": "ubuntu:GNOME", "DESKTOP_SESSION": "ubuntu", "__GL_SHADER_DISK_CACHE": "1",
        # what every 2x 4090 DDP guide sets: the 40-series has no P2P, and NCCL's probe of it hung on some drivers
        "NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "1"})
    # intel_pstate in active mode: 'powersave' is its default, dynamic (HWP) policy, not the legacy lowest-clock one
    tunables(spec, numa_nodes=1, thp="madvise", governor="powersave", scaling_driver="intel_pstate", cpus=32)
    spec["etc/group"] = "root:x:0:\nsudo:x:27:alice\nvideo:x:44:alice\nrender:x:109:alice\nalice:x:1000:\n"
    spec["var/log/kern.log"] = (
        f"Nov 29 08:00:00 rig kernel: Linux version {k} (buildd@lcy02-amd64-040) #49-Ubuntu SMP\n"
        "Nov 29 08:00:01 rig kernel: secureboot: Secure boot enabled\n"
        f"Nov 29 08:00:03 rig kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {driver}  Wed Oct 30 2024\n"
        "Nov 29 08:00:03 rig kernel: nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms\n"
        "Nov 29 08:00:04 rig kernel: [drm] Initialized nvidia-drm 0.0.0 20160202 for 0000:01:00.0 on minor 1\n"
        "Nov 29 08:00:05 rig kernel: nvidia 0000:01:00.0: vgaarb: VGA decodes changed\n"
        # what consumer boards log now and then on the chipset's root port (an x1 slot with the Wi-Fi card)
        "Nov 29 09:12:44 rig kernel: pcieport 0000:00:1c.0: AER: Corrected error received: 0000:00:1c.0\n"
        "Nov 29 09:12:44 rig kernel: pcieport 0000:00:1c.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, "
        "(Receiver ID)\n")
    return spec


def cpu_only() -> Spec:
    """A c7i.4xlarge build host on Ubuntu 24.04: no NVIDIA anything, a CPU torch venv for tests."""
    spec: Spec = {}
    deb_host(spec, "ubuntu2404", "ip-172-31-9-9")
    k = "6.8.0-1019-aws"
    spec["proc/sys/kernel/osrelease"] = k + "\n"
    spec["proc/modules"] = "ena 143360 0 - Live 0x0\nnvme 61440 3 - Live 0x0\next4 1 1 - Live 0x0\n"
    spec[f"lib/modules/{k}/modules.dep"] = ""
    spec[f"boot/vmlinuz-{k}"] = ""
    spec["proc/mounts"] = HOST_MOUNTS.format(fs="ext4").replace(",attr2,inode64,logbufs=8,logbsize=32k,noquota", ",discard")
    spec["proc/meminfo"] = MEMINFO["64G"]
    spec["proc/cmdline"] = f"BOOT_IMAGE=/boot/vmlinuz-{k} root=PARTUUID=9c ro console=tty1 console=ttyS0\n"
    dmi(spec, "c7i.4xlarge")
    machines.pci(spec, "0000:00:05.0", "ec20", cls="0x020000", driver="ena")
    spec["sys/devices/pci0000:00/0000:00:05.0/vendor"] = "0x1d0f\n"
    glibc(spec, LIBDIR["x86_64"], glibcxx="GLIBCXX_3.4.33")
    spec["var/lib/dpkg/status"] = dpkg_status([("libc6", "2.39-0ubuntu8.3"), ("python3.12", "3.12.3-1ubuntu0.3")])
    prefix = "home/ubuntu/.venv"
    spec[f"{prefix}/pyvenv.cfg"] = "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.12.3\n"
    spec[f"{prefix}/bin/python3"] = {"symlink": "/usr/bin/python3.12"}
    spec[f"{prefix}/bin/python"] = {"symlink": "python3"}
    spec["usr/bin/python3.12"] = elf(None)
    spec["usr/lib/python3.12/os.py"] = ""
    site = f"{prefix}/lib/python3.12/site-packages"
    torch(spec, site, "2.5.1+cpu", None, python_tag="312")
    numpy(spec, site, "2.1.3")
    spec["proc/self/environ"] = environ({"PATH": f"/{prefix}/bin:/usr/local/bin:/usr/bin:/bin", "HOME": "/home/ubuntu",
                                         "USER": "ubuntu", "VIRTUAL_ENV": f"/{prefix}", "LANG": "C.UTF-8"})
    spec["var/log/kern.log"] = f"Nov 29 09:00:00 ip-172-31-9-9 kernel: Linux version {k} (buildd@lcy02)\n"
    ebs_root(spec, "vol0c0ffee0c0ffee000", 209715200)
    tunables(spec, numa_nodes=1, thp="madvise", cpus=16)
    return spec


def mig_a100() -> Spec:
    """A p4de (8x A100 80GB) on Ubuntu 22.04 with MIG mode on all GPUs (a 7x 1g.10gb inference layout, made at boot
    by nvidia-mig-parted): the healthy state is in NVML (recorded)."""
    spec = _ubuntu_dlami("ubuntu2204", "p4de.24xlarge", "20b2", P4D_BUSES, "550.127.05", "2.5.1+cu124",
                         TORCH_251_CU124, "1152G", second_env=False)
    fabric_manager(spec, "550.127.05")
    nvswitches(spec, "1af1", 6)
    spec["etc/nvidia-mig-manager/config.yaml"] = ("version: v1\nmig-configs:\n  all-1g.10gb:\n    - devices: all\n"
                                                  "      mig-enabled: true\n      mig-devices:\n        \"1g.10gb\": 7\n")
    spec["usr/lib/systemd/system/nvidia-mig-manager.service"] = "[Service]\nExecStart=/usr/bin/nvidia-mig-parted apply\n"
    spec["etc/systemd/system/multi-user.target.wants/nvidia-mig-manager.service"] = {
        "symlink": "/usr/lib/systemd/system/nvidia-mig-manager.service"}
    spec["etc/nvidia-mig-manager/selected"] = "all-1g.10gb\n"
    env = dict(kv.split("=", 1) for kv in spec["proc/self/environ"].decode().split("\0") if kv)
    env["CUDA_VISIBLE_DEVICES"] = "MIG-4b6a8c2e-0f1d-5e3c-9a7b-6d5c4b3a2918"
    spec["proc/self/environ"] = environ(env)
    return spec


def nvswitch_hgx_h100() -> Spec:
    """A bare-metal HGX H100 node (8 GPUs, 4 NVSwitches) on Ubuntu 22.04 with the 550 server driver, fabric manager
    enabled and running (recorded NVML shows fabric registration complete), no EFA (InfiniBand ConnectX-7)."""
    driver = "550.127.05"
    spec: Spec = {}
    deb_host(spec, "ubuntu2204", "hgx-a07", user="ops")
    k = kernel_host(spec, "ubuntu2204", driver, kernel="5.15.0-125-generic",
                    extra_modules="nvidia_peermem 16384 0 - Live 0x0\nmlx5_ib 479232 0 - Live 0x0\nmlx5_core 2351104 1 mlx5_ib, Live 0x0\n")
    spec["proc/mounts"] = ("/dev/md0 / ext4 rw,relatime 0 0\n/dev/md1 /raid ext4 rw,relatime 0 0\n"
                           "tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0\nproc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n")
    spec["proc/meminfo"] = MEMINFO["2048G"]
    spec["proc/cmdline"] = f"BOOT_IMAGE=/boot/vmlinuz-{k} root=/dev/md0 ro iommu=pt pci=realloc=off\n"
    spec["sys/class/dmi/id/sys_vendor"] = "Supermicro\n"
    spec["sys/class/dmi/id/product_name"] = "SYS-821GE-TNHR\n"
    gpus(spec, "2330", ("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0", "0000:9a:00.0",
                        "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"))
    nvswitches(spec, "22a3", 4, base=0x05)
    libdir = LIBDIR["x86_64"]
    driver_userspace(spec, libdir, driver)
    glibc(spec, libdir)
    persistenced(spec)
    fabric_manager(spec, driver)
    spec["var/lib/dpkg/status"] = dpkg_status([
        ("nvidia-driver-550-server", f"{driver}-0ubuntu0.22.04.1"), ("nvidia-fabricmanager-550", f"{driver}-1"),
        ("libnvidia-nscq-550", f"{driver}-1"), ("datacenter-gpu-manager", "1:3.3.9"), ("libc6", "2.35-0ubuntu3.8"),
        ("mlnx-ofed-kernel-dkms", "24.07.OFED.24.07.0.6.1.1-1")])
    for i in range(8):
        spec[f"sys/class/infiniband/mlx5_{i}/device/driver"] = {"symlink": "../../../../bus/pci/drivers/mlx5_core"}
    spec["usr/lib/systemd/system/nvidia-dcgm.service"] = "[Service]\nExecStart=/usr/bin/nv-hostengine -n\n"
    spec["etc/systemd/system/multi-user.target.wants/nvidia-dcgm.service"] = {
        "symlink": "/usr/lib/systemd/system/nvidia-dcgm.service"}
    root = cuda_toolkit(spec, "12.4.1", libs=CUDA_124_LIBS)
    cupti(spec, root)
    nccl_system(spec, libdir, "2.21.5")
    site = conda_env(spec, "/opt/conda")
    conda_pkg(spec, "opt/conda", "conda", "24.9.2", "py311h06a4308_0")
    cu12_wheels(spec, site, TORCH_251_CU124)
    torch(spec, site, "2.5.1+cu124", "12.4", TORCH_251_CU124)
    torch_companions(spec, site, "2.5.1+cu124")
    spec["proc/self/environ"] = environ({
        "PATH": "/opt/conda/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin",
        "HOME": "/home/ops", "USER": "ops", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
        "NCCL_IB_HCA": "mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7", "NCCL_SOCKET_IFNAME": "bond0",
        "CONDA_PREFIX": "/opt/conda", "CONDA_DEFAULT_ENV": "base"})
    kernel_log(spec, "var/log/kern.log", "hgx-a07", k, driver, extra=[
        # one corrected Physical Layer error on a NIC's root port at link training: corrected by the hardware
        "Nov 29 10:00:02 hgx-a07 kernel: pcieport 0000:c0:01.1: AER: Corrected error received: 0000:c1:00.0",
        "Nov 29 10:00:02 hgx-a07 kernel: mlx5_core 0000:c1:00.0: PCIe Bus Error: severity=Corrected, "
        "type=Physical Layer, (Receiver ID)",
        "Nov 29 10:00:07 hgx-a07 kernel: nvidia-peermem nv_peer_mem: loaded",
        "Nov 29 10:00:09 hgx-a07 kernel: NVRM: GPU at PCI:0000:18:00: GPU-00000000-5a5a-4b4b-8c8c-0123456789ab"])
    tunables(spec, numa_nodes=2, thp="madvise", numa_balancing=0, governor="performance", scaling_driver="intel_pstate",
             cpus=224)
    spec["etc/sysctl.d/90-gpu.conf"] = "kernel.numa_balancing = 0\n"
    netdevs(spec, "eno1np0", "eno2np1", "bond0", *[f"ibp{b}s0" for b in ("24", "3c", "4d", "5e", "9c", "bc", "cc", "dc")])
    spec["etc/security/limits.d/90-nofile.conf"] = "* - nofile 1048576\n* - memlock unlimited\n"
    return spec


def efa_p5_aws_ofi_nccl() -> Spec:
    """A p5.48xlarge built by hand on Ubuntu 22.04 (not a DLAMI): EFA installer 1.36 with aws-ofi-nccl in
    /opt/amazon/ofi-nccl, NCCL from the nvidia-nccl-cu12 wheel, 32 EFA; NCCL_NET_PLUGIN names the plugin."""
    driver = "550.127.05"
    spec: Spec = {}
    deb_host(spec, "ubuntu2204", "ip-10-2-3-4")
    k = kernel_host(spec, "ubuntu2204", driver, flavor="open",
                    extra_modules="efa 159744 0 - Live 0x0\nnvidia_peermem 16384 0 - Live 0x0\n")
    spec["proc/mounts"] = HOST_MOUNTS.format(fs="ext4")
    spec["proc/meminfo"] = MEMINFO["2048G"]
    spec["proc/cmdline"] = f"BOOT_IMAGE=/boot/vmlinuz-{k} root=PARTUUID=1 ro console=ttyS0 nvme_core.io_timeout=4294967295\n"
    dmi(spec, "p5.48xlarge")
    gpus(spec, "2330", P5_BUSES)
    nvswitches(spec, "22a3", 4, base=0x05)
    libdir = LIBDIR["x86_64"]
    driver_userspace(spec, libdir, driver)
    glibc(spec, libdir)
    persistenced(spec)
    fabric_manager(spec, driver)
    spec["var/lib/dpkg/status"] = dpkg_status([
        ("nvidia-driver-550-open", f"{driver}-0ubuntu1"), ("nvidia-fabricmanager-550", f"{driver}-1"),
        ("libc6", "2.35-0ubuntu3.8")])
    efa(spec, 32, "1.36.0", "ubuntu22.04", plugin="1.12.1", libfabric="1.22.0")
    # instance store: 8x 3.84 TB NVMe in a RAID 0 mounted at /scratch
    instance_store(spec, 8, 7500000000, use="md")
    prefix = "home/ubuntu/venv"
    spec[f"{prefix}/pyvenv.cfg"] = "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.10.12\n"
    spec[f"{prefix}/bin/python3"] = {"symlink": "/usr/bin/python3.10"}
    spec[f"{prefix}/bin/python"] = {"symlink": "python3"}
    spec["usr/bin/python3.10"] = elf(None)
    spec["usr/lib/python3.10/os.py"] = ""
    site = f"{prefix}/lib/python3.10/site-packages"
    cu12_wheels(spec, site, TORCH_251_CU124)
    torch(spec, site, "2.5.1+cu124", "12.4", TORCH_251_CU124, python_tag="310")
    torch_extensions(spec, site, "2.5.1+cu124", py="310")
    spec["proc/self/environ"] = environ({
        "PATH": f"/{prefix}/bin:/opt/amazon/openmpi/bin:/opt/amazon/efa/bin:/usr/local/bin:/usr/bin:/bin",
        "VIRTUAL_ENV": f"/{prefix}", "HOME": "/home/ubuntu", "USER": "ubuntu",
        "LD_LIBRARY_PATH": "/opt/amazon/ofi-nccl/lib:/opt/amazon/efa/lib:/opt/amazon/openmpi/lib",
        "FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_NET_PLUGIN": "ofi",
        "NCCL_TUNER_PLUGIN": "ofi", "NCCL_DEBUG": "WARN"})
    spec["usr/lib/systemd/system/nvidia-fabricmanager.service"] = "[Service]\nExecStart=/usr/bin/nv-fabricmanager\n"
    kernel_log(spec, "var/log/kern.log", "ip-10-2-3-4", k, driver, flavor="open")
    ebs_root(spec, "vol0aaaabbbbccccdddd0")
    tunables(spec, numa_nodes=2, thp="madvise", cpus=192)
    return spec


def frameworks_side_by_side() -> Spec:
    """A g6e.12xlarge (4x L40S) Ubuntu 22.04 host where a team keeps TensorFlow, JAX and ONNX Runtime envs beside
    torch under /opt/conda/envs, each with the CUDA 12 wheels its release pins (each env its own cu12 family)."""
    spec = _ubuntu_dlami("ubuntu2204", "g6e.12xlarge", "26b9", ("0000:38:00.0", "0000:3a:00.0", "0000:3c:00.0",
                                                                 "0000:3e:00.0"),
                         "550.127.05", "2.5.1+cu124", TORCH_251_CU124, "480G", second_env=False, extensions=False)
    # not a DLAMI login: nothing is on LD_LIBRARY_PATH, and the runfile toolkit in /usr/local/cuda-12.4 is not in
    # ld.so.conf (each framework finds its own wheels)
    env = dict(kv.split("=", 1) for kv in spec["proc/self/environ"].decode().split("\0") if kv)
    for key in ("LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH"):
        env.pop(key)
    env["PATH"] = "/opt/conda/envs/pytorch/bin:/opt/conda/condabin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
    spec["proc/self/environ"] = environ(env)
    spec["etc/ld.so.conf"] = "include /etc/ld.so.conf.d/*.conf\n"
    spec["etc/ld.so.conf.d/x86_64-linux-gnu.conf"] = "/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n"
    # the team keeps its data on FSx for Lustre and leaves the two instance-store SSDs unused
    for key in [k for k in spec if "holders/dm-0" in k or k.startswith("sys/block/dm-0")]:
        del spec[key]
    spec["proc/mounts"] = spec["proc/mounts"].replace(
        "/dev/mapper/vg.01-lv_ephemeral /opt/dlami/nvme ext4 rw,relatime,stripe=256 0 0\n",
        "10.0.12.34@tcp:/fsx /fsx lustre rw,relatime,flock,lazystatfs 0 0\n")
    site = conda_env(spec, "/opt/conda/envs/tensorflow")
    cu12_wheels(spec, site, TF_218_PINS)
    tensorflow(spec, site)
    numpy(spec, site, "2.0.2")
    site = conda_env(spec, "/opt/conda/envs/jax")
    cu12_wheels(spec, site, JAX_PINS)
    jax(spec, site)
    numpy(spec, site, "2.1.3")
    site = conda_env(spec, "/opt/conda/envs/onnx")
    cu12_wheels(spec, site, {k: v for k, v in TORCH_251_CU124.items()
                             if k in ("nvidia-cuda-runtime-cu12", "nvidia-cublas-cu12", "nvidia-cudnn-cu12",
                                      "nvidia-cufft-cu12", "nvidia-curand-cu12")})
    onnxruntime(spec, site)
    numpy(spec, site, "1.26.4")
    pure(spec, site, "onnx", "1.17.0")
    return spec


def conda_forge_lab_server() -> Spec:
    """A lab server (4x RTX A6000, Ubuntu 22.04, the 560 driver from NVIDIA's CUDA repository built by DKMS) whose
    users run conda-forge's pytorch: the CUDA libraries are conda packages in the env's lib/ (cuda-cudart,
    libcublas, cudnn, nccl, cuda-nvtx with its libnvToolsExt.so.1.0.0), found through torch's RUNPATH, no wheels."""
    driver = "560.35.03"
    k = "5.15.0-126-generic"
    spec: Spec = {}
    deb_host(spec, "ubuntu2204", "gpu-lab-03", user="lab")
    spec["proc/sys/kernel/osrelease"] = k + "\n"
    spec["proc/driver/nvidia/version"] = nvrm(driver, "proprietary").replace(
        "gcc version 8.5.0 20210514 (Red Hat 8.5.0-22) (GCC)", "gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)")
    spec["proc/modules"] = PROC_MODULES_NVIDIA + "ext4 1 1 - Live 0x0\n"
    spec["sys/module/nvidia/version"] = driver + "\n"
    spec[f"lib/modules/{k}/modules.dep"] = ""
    for m in ("nvidia", "nvidia-uvm", "nvidia-modeset", "nvidia-drm"):
        spec[f"lib/modules/{k}/updates/dkms/{m}.ko"] = machines.module_blob(driver, k)
    spec[f"var/lib/dkms/nvidia/{driver}/{k}/x86_64/module/nvidia.ko"] = ""
    spec[f"boot/vmlinuz-{k}"] = ""
    spec["boot/vmlinuz"] = {"symlink": f"vmlinuz-{k}"}
    spec["etc/modprobe.d/blacklist-nouveau.conf"] = "blacklist nouveau\noptions nouveau modeset=0\n"
    spec["proc/mounts"] = ("/dev/sda2 / ext4 rw,relatime 0 0\n/dev/sdb1 /home ext4 rw,relatime 0 0\n"
                           "nfs01:/datasets /datasets nfs4 ro,relatime,vers=4.2,rsize=1048576 0 0\n"
                           "tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0\nproc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n")
    spec["proc/meminfo"] = MEMINFO["480G"]
    spec["proc/cmdline"] = f"BOOT_IMAGE=/boot/vmlinuz-{k} root=UUID=77aa ro quiet splash\n"
    spec["sys/class/dmi/id/sys_vendor"] = "Supermicro\n"
    spec["sys/class/dmi/id/product_name"] = "AS -4124GS-TNR\n"
    gpus(spec, "2230", ("0000:01:00.0", "0000:25:00.0", "0000:41:00.0", "0000:61:00.0"))
    libdir = LIBDIR["x86_64"]
    driver_userspace(spec, libdir, driver)
    glibc(spec, libdir)
    persistenced(spec)
    tunables(spec, numa_nodes=2, thp="madvise", numa_balancing=0, governor="performance", scaling_driver="acpi-cpufreq",
             cpus=128)
    spec["var/lib/dpkg/status"] = dpkg_status([
        ("cuda-drivers-560", f"{driver}-1"), ("nvidia-driver-560", f"{driver}-0ubuntu1"),
        ("nvidia-dkms-560", f"{driver}-0ubuntu1"), ("nvidia-kernel-common-560", f"{driver}-0ubuntu1"),
        ("libnvidia-compute-560", f"{driver}-0ubuntu1"), ("dkms", "2.8.7-2ubuntu2.2"), ("libc6", "2.35-0ubuntu3.8")])
    spec["etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list"] = (
        "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
        "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/ /\n")
    root = "opt/miniforge3"
    conda_env(spec, root, python="3.12.7", build="hc5c86c4_0_cpython")
    conda_pkg(spec, root, "conda", "24.9.2", "py312h7900ff3_0", files=["bin/conda"])
    prefix = f"{root}/envs/pt"
    site = conda_env(spec, prefix)
    # conda-forge's CUDA 12.6 packages: (package, version, build, real file, soname)
    cf = [("cuda-cudart", "12.6.77", "h5888daf_0", "libcudart.so.12.6.77", "libcudart.so.12"),
          ("libcublas", "12.6.4.1", "h5888daf_0", "libcublas.so.12.6.4.1", "libcublas.so.12"),
          ("libcublas", "12.6.4.1", "h5888daf_0", "libcublasLt.so.12.6.4.1", "libcublasLt.so.12"),
          ("libcufft", "11.3.0.4", "hbd13f7d_0", "libcufft.so.11.3.0.4", "libcufft.so.11"),
          ("libcurand", "10.3.7.77", "hbd13f7d_0", "libcurand.so.10.3.7.77", "libcurand.so.10"),
          ("libcusolver", "11.7.1.2", "hbd13f7d_0", "libcusolver.so.11.7.1.2", "libcusolver.so.11"),
          ("libcusparse", "12.5.4.2", "hbd13f7d_0", "libcusparse.so.12.5.4.2", "libcusparse.so.12"),
          ("libnvjitlink", "12.6.85", "hbd13f7d_0", "libnvJitLink.so.12.6.85", "libnvJitLink.so.12"),
          ("cuda-nvtx", "12.6.77", "hbd13f7d_0", "libnvToolsExt.so.1.0.0", "libnvToolsExt.so.1"),
          ("cudnn", "9.3.0.75", "h93bb076_0", "libcudnn.so.9.3.0", "libcudnn.so.9"),
          ("nccl", "2.23.4.1", "h52f6c39_3", "libnccl.so.2.23.4", "libnccl.so.2")]
    for pkg, version, build, real, soname in cf:
        so(spec, f"{prefix}/lib", real, soname, needed=NEEDS.get(soname, []) + ["libc.so.6"],
           runpath=["$ORIGIN"])  # conda-build's rpath for $PREFIX/lib
        conda_pkg(spec, prefix, pkg, version, build, files=[f"lib/{real}", f"lib/{soname}"])
    conda_pkg(spec, prefix, "cuda-version", "12.6", "h7480c83_3")
    conda_pkg(spec, prefix, "pytorch", "2.5.1", "cuda126_py311hc5b8c95_305",
              files=["lib/python3.11/site-packages/torch/lib/libtorch_cuda.so"])
    runpath = ["$ORIGIN/../../../.."]  # conda-forge's torch finds $PREFIX/lib
    files = {
        "torch/lib/libtorch_cuda.so": elf("libtorch_cuda.so", runpath=runpath + ["$ORIGIN"],
                                          needed=["libc10_cuda.so", "libcudart.so.12", "libcublas.so.12",
                                                  "libcublasLt.so.12", "libcudnn.so.9", "libnccl.so.2",
                                                  "libcusparse.so.12", "libcufft.so.11", "libcurand.so.10",
                                                  "libcusolver.so.11", "libnvToolsExt.so.1", "libc10.so",
                                                  "libstdc++.so.6", "libc.so.6"],
                                          verneed={"libstdc++.so.6": ["GLIBCXX_3.4.32", "CXXABI_1.3.15"]}),
        "torch/lib/libc10_cuda.so": elf("libc10_cuda.so", runpath=runpath + ["$ORIGIN"],
                                        needed=["libcudart.so.12", "libc10.so", "libc.so.6"]),
        "torch/lib/libc10.so": elf("libc10.so", runpath=runpath, needed=["libstdc++.so.6", "libc.so.6"]),
        "torch/_C.cpython-311-x86_64-linux-gnu.so": elf(None, runpath=["$ORIGIN/lib"] + runpath,
                                                         needed=["libtorch_cuda.so", "libc.so.6"]),
        "torch/__init__.py": "import ctypes\nimport os\nimport platform\nimport sys\n",
        "torch/version.py": ("__version__ = '2.5.1'\ndebug = False\ncuda = '12.6'\n"
                             "git_version = 'a8d6afb511a69687bbb2b7e88a3cf67917e1697e'\nhip = None\n")}
    dist(spec, site, "torch", "2.5.1", files, installer="conda", tag="cp311-cp311-linux_x86_64")
    numpy(spec, site, "2.1.3")
    spec["proc/self/environ"] = environ({
        "PATH": f"/{prefix}/bin:/{root}/condabin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "CONDA_PREFIX": f"/{prefix}", "CONDA_DEFAULT_ENV": "pt", "CONDA_SHLVL": "2", "CONDA_PREFIX_1": f"/{root}",
        "CONDA_EXE": f"/{root}/bin/conda", "HOME": "/home/lab", "USER": "lab", "LANG": "en_US.UTF-8",
        "CUDA_VISIBLE_DEVICES": "2,3"})
    spec["var/log/kern.log"] = (
        f"Nov 29 07:00:00 gpu-lab-03 kernel: Linux version {k} (buildd@lcy02-amd64-026) #136-Ubuntu SMP\n"
        f"Nov 29 07:00:04 gpu-lab-03 kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {driver}  Wed Aug 21\n")
    return spec


def ngc_on_geforce() -> Spec:
    """The same NGC image on a GeForce RTX 4090 desktop whose driver (565.57.01, CUDA 12.7) is newer than the image's
    CUDA: the compat libraries are in the image but the entrypoint leaves them off (no compat/lib link), as it must
    on a GPU without forward compatibility."""
    spec = ngc_cuda_compat("565.57.01", geforce=True)
    spec["proc/sys/kernel/hostname"] = "b2c3d4e5f6a7\n"
    return spec


HEALTHY: Dict[str, Dict[str, Any]] = {
    "dlami_rhel8_p4d": {"tree": dlami_rhel8_p4d},
    "dlami_al2023_p5": {"tree": dlami_al2023_p5},
    "dlami_al2023_p6_b200": {"tree": dlami_al2023_p6_b200},
    "dlami_ubuntu2204_g5": {"tree": dlami_ubuntu2204_g5},
    "dlami_ubuntu2404_g6": {"tree": dlami_ubuntu2404_g6},
    "docker_pytorch_nvidia_runtime": {"tree": docker_pytorch_nvidia_runtime},
    "k8s_pod_two_gpus": {"tree": k8s_pod_two_gpus, "nvml": "k8s_pod_two_h100",
                         "device_nodes": ["nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools", "nvidia2", "nvidia5",
                                          "nvidiactl"]},
    "podman_cdi": {"tree": podman_cdi},
    "ngc_cuda_compat": {"tree": ngc_cuda_compat},
    "ngc_on_geforce": {"tree": ngc_on_geforce},
    "grace_hopper": {"tree": grace_hopper},
    "wsl2": {"tree": wsl2},
    "geforce_workstation": {"tree": geforce_workstation},
    "cpu_only": {"tree": cpu_only, "nvml": "no_library", "device_nodes": []},
    "mig_a100": {"tree": mig_a100, "nvml": "mig_a100_80gb",
                 "device_nodes": ["nvidia-caps", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools"]
                 + [f"nvidia{i}" for i in range(8)] + ["nvidiactl"]},
    "nvswitch_hgx_h100": {"tree": nvswitch_hgx_h100, "nvml": "hgx_h100_nvswitch",
                          "device_nodes": ["nvidia-modeset", "nvidia-nvswitch0", "nvidia-nvswitch1", "nvidia-nvswitch2",
                                           "nvidia-nvswitch3", "nvidia-nvswitchctl", "nvidia-uvm", "nvidia-uvm-tools"]
                          + [f"nvidia{i}" for i in range(8)] + ["nvidiactl"]},
    "efa_p5_aws_ofi_nccl": {"tree": efa_p5_aws_ofi_nccl},
    "frameworks_side_by_side": {"tree": frameworks_side_by_side},
    "conda_forge_lab_server": {"tree": conda_forge_lab_server},
}


def spec_of(name: str) -> Spec:
    return copy.deepcopy(HEALTHY[name]["tree"]())


def names() -> List[str]:
    return sorted(HEALTHY)
