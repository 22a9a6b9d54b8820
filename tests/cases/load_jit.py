"""Reported failures of compile-and-load workflows (Triton, TorchInductor, torch cpp extensions, CuPy, DeepSpeed) in
the directories they write kernels to and load them from: noexec mounts, caches the job's user cannot write."""

from __future__ import annotations

import healthy
from cases import Machine, case
from healthy import Spec
from cases.load_plugins import env_of, set_env


def status(uid: int) -> str:
    """/proc/self/status of the job's process (captured with the tree): its real, effective, saved and filesystem
    uids and gids."""
    return (f"Name:\tpython\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nPid:\t4242\nPPid:\t1\n"
            f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\nGroups:\t\n")


def add_mount(spec: Spec, line: str) -> None:
    spec["proc/mounts"] = spec.get("proc/mounts", "") + line + "\n"


@case("pytorch-123054-docker-tmpfs-tmp-noexec")
def pytorch_123054(broken: bool) -> Machine:
    """`docker run --tmpfs /tmp:mode=1777` mounts /tmp noexec (docker's default for --tmpfs): torch.compile writes
    Triton's cuda_utils.so under /tmp/torchinductor_root/triton and cannot map it. The twin mounts the tmpfs with
    exec."""
    spec = healthy.docker_pytorch_nvidia_runtime()
    opts = "rw,nosuid,nodev,noexec,relatime" if broken else "rw,nosuid,nodev,relatime"
    add_mount(spec, f"tmpfs /tmp tmpfs {opts},size=65536k,mode=1777,inode64 0 0")
    spec["tmp"] = {"dir": True, "mode": 0o1777}
    spec["tmp/torchinductor_root/triton/0/e5c3a6b1f0d2"] = {"dir": True, "mode": 0o755}
    spec["tmp/torchinductor_root/triton/0/e5c3a6b1f0d2/cuda_utils.so"] = healthy.elf(None)
    return Machine(spec)


@case("sonar-458-triton-cache-home-not-writable")
def sonar_458(broken: bool) -> Machine:
    """aphrodite-engine's image sets HOME=/app/aphrodite-engine, a directory root owns (0755); the container runs as
    uid 1000 (docker run --user), which cannot create Triton's cache, ~/.triton/cache. The twin is the reporter's
    workaround: the same container run as root."""
    spec = healthy.docker_pytorch_nvidia_runtime()
    spec["app/aphrodite-engine/aphrodite/__init__.py"] = ""
    spec["app/aphrodite-engine/aphrodite/common/__init__.py"] = ""
    spec["app/aphrodite-engine"] = {"dir": True, "mode": 0o555 if broken else 0o755}
    set_env(spec, HOME="/app/aphrodite-engine")
    spec["proc/self/status"] = status(1000 if broken else 0)
    return Machine(spec)


@case("cupy-2296-kernel-cache-home-read-only")
def cupy_2296(broken: bool) -> Machine:
    """An HPC system mounts home directories read-only on the compute nodes: CuPy's kernel cache, ~/.cupy/kernel_cache,
    cannot be written. The twin points CUPY_CACHE_DIR at the node's scratch."""
    spec = healthy.conda_forge_lab_server()
    spec["proc/mounts"] = spec["proc/mounts"].replace("/dev/sdb1 /home ext4 rw,relatime",
                                                      "nfs01:/export/home /home nfs4 ro,relatime,vers=4.2,rsize=1048576")
    add_mount(spec, "/dev/nvme0n1 /scratch xfs rw,noatime 0 0")
    spec["scratch"] = {"dir": True, "mode": 0o1777}
    env = env_of(spec)
    prefix = env.get("CONDA_PREFIX") or "/home/lab/miniforge3/envs/torch"
    site = healthy.site_of(prefix, "3.11")
    healthy.dist(spec, site, "cupy-cuda12x", "13.3.0", {"cupy/__init__.py": "__version__ = '13.3.0'\n",
                                                         "cupy/_core/core.cpython-311-x86_64-linux-gnu.so": healthy.elf(
                                                             None, needed=["libc.so.6"])})
    if not broken:
        set_env(spec, CUPY_CACHE_DIR="/scratch/lab/cupy")
    return Machine(spec)


def drop_dist(spec: Spec, site: str, name: str) -> None:
    for path in [p for p in spec if p.startswith((f"{site}/{name}/", f"{site}/{name}-"))]:
        del spec[path]


def cupy(spec: Spec, site: str, version: str = "13.3.0") -> None:
    healthy.dist(spec, site, "cupy-cuda12x", version, {
        "cupy/__init__.py": f"__version__ = '{version}'\n",
        "cupy/_core/core.cpython-311-x86_64-linux-gnu.so": healthy.elf(None, needed=["libc.so.6"])})


@case("accelerated-computing-hub-263-shared-cupy-cache-dir")
def ach_263(broken: bool) -> Machine:
    """The tutorial image forces CUPY_CACHE_DIR=/tmp/cupy_cache for every process; `docker compose exec` (root)
    compiled a kernel first, so the directory is root's (0755) and the notebook user, uid 1000, cannot write its
    cubins. The twin is the fix: no CUPY_CACHE_DIR, each user's ~/.cupy/kernel_cache."""
    spec = healthy.docker_pytorch_nvidia_runtime()
    site = "opt/conda/lib/python3.11/site-packages"
    cupy(spec, site)
    drop_dist(spec, site, "triton")
    spec["etc/passwd"] = "root:x:0:0:root:/root:/bin/bash\njovyan:x:1000:100::/home/jovyan:/bin/bash\n"
    spec["home/jovyan/work/.keep"] = ""
    spec["home/jovyan"] = {"dir": True, "mode": 0o777}  # the user's own home (the tree's owner is not the user)
    spec["tmp"] = {"dir": True, "mode": 0o1777}
    spec["tmp/cupy_cache/72f86c41c8573e998064b7a8fdab240eba823b7e.cubin"] = b"\x7fELF"
    # root's 0755 directory, as the notebook user sees it: no write bit for it (0555 keeps that true whatever uid
    # builds the tree, the user's own included)
    spec["tmp/cupy_cache"] = {"dir": True, "mode": 0o555}
    set_env(spec, HOME="/home/jovyan", USER="jovyan", CUPY_CACHE_DIR="/tmp/cupy_cache" if broken else None)
    spec["proc/self/status"] = status(1000)
    return Machine(spec)


@case("ilab-on-ocp-26-home-root-torch-extensions-cache")
def ilab_26(broken: bool) -> Machine:
    """InstructLab training on OpenShift runs as an arbitrary uid with HOME=/: DeepSpeed's JIT ops go to torch's
    extension root, $XDG_CACHE_HOME or ~/.cache (/.cache/torch_extensions), and / is not writable. The twin is the
    PR's fix, XDG_CACHE_HOME=/tmp (with Triton's cache moved there as well)."""
    spec = healthy.docker_pytorch_nvidia_runtime()
    site = "opt/conda/lib/python3.11/site-packages"
    healthy.dist(spec, site, "deepspeed", "0.14.4", {"deepspeed/__init__.py": "__version__ = '0.14.4'\n",
                                                    "deepspeed/ops/op_builder/__init__.py": ""},
                 requires=["torch", "ninja"], tag="py3-none-any")
    spec["tmp"] = {"dir": True, "mode": 0o1777}
    set_env(spec, HOME="/", XDG_CACHE_HOME=None if broken else "/tmp",
            TRITON_CACHE_DIR=None if broken else "/tmp/triton")
    spec["proc/self/status"] = status(1000680000)
    # the image's entrypoint gives OpenShift's arbitrary uid a name (a writable /etc/passwd), as UBI images do
    spec["etc/passwd"] = spec["etc/passwd"] + "default:x:1000680000:0:Default Application User:/:/sbin/nologin\n"
    return Machine(spec)


def nameless_container(spec: Spec, uid: int, broken: bool, home: str = "/workspace") -> None:
    """The container runs as a uid its image's /etc/passwd does not name (docker run --user, OpenShift's arbitrary
    uids), with HOME on a writable mount; the twin gives the uid a name through USER (the usual fix)."""
    spec[home.strip("/")] = {"dir": True, "mode": 0o777}
    spec["tmp"] = {"dir": True, "mode": 0o1777}
    set_env(spec, HOME=home, USER=None if broken else "app", LOGNAME=None)
    spec["proc/self/status"] = status(uid)


@case("llm-d-benchmark-1573-openshift-uid-no-user")
def llm_d_1573(broken: bool) -> Machine:
    """vLLM on OpenShift's restricted-v2 SCC runs as an arbitrary uid (1002700000) with no /etc/passwd entry and no USER
    in the standalone container's env: vLLM's import of torch's inductor calls getpass.getuser() and the pod
    crash-loops. The twin sets USER, as the modelservice pods already did."""
    spec = healthy.docker_pytorch_nvidia_runtime()
    site = "opt/conda/lib/python3.11/site-packages"
    healthy.dist(spec, site, "vllm", "0.23.0", {"vllm/__init__.py": "__version__ = '0.23.0'\n"},
                 requires=["torch==2.5.1"], tag="cp38-abi3-manylinux1_x86_64")
    nameless_container(spec, 1002700000, broken, home="/home/vllm")
    return Machine(spec)


@case("pytorch-140765-default-cache-dir-keyerror")
def pytorch_140765(broken: bool) -> Machine:
    """A production container forced to run as an ordinary uid that was never created with useradd: TorchInductor's
    default_cache_dir() calls getpass.getuser(), which raises KeyError. Setting a name for the uid (USER) is the twin;
    the reporter's TORCHINDUCTOR_CACHE_DIR works around the same thing."""
    spec = healthy.docker_pytorch_nvidia_runtime()
    nameless_container(spec, 10001, broken, home="/srv")
    return Machine(spec)
