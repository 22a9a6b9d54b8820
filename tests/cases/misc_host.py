"""The host under the job as reported: the disks pip, nvcc and checkpoints write to, and the session's limits."""

from __future__ import annotations

import copy
from typing import Any, Dict, List

import healthy
from cases import FIXED_DISKS, Machine, case
from cases.misc_network import LIMITS

GIB = 1 << 30


def _vol(mount: str, fstype: str, device: str, total_gib: float, free_gib: float, roles: List[str]) -> Dict[str, Any]:
    total, free = int(total_gib * GIB), int(free_gib * GIB)
    return {"paths": [mount], "roles": roles, "mountpoint": mount, "fstype": fstype, "device": device,
            "total_bytes": total, "free_bytes": free, "used_pct": round(100.0 * (total - free) / total, 1),
            "inodes_total": 2097152, "inodes_free": 2000000, "measured": "live"}


def _disks(*volumes: Dict[str, Any]) -> Dict[str, Any]:
    return {"volumes": list(volumes), "errors": {}}


@case("easydiffusion-1649-pip-tmp-tmpfs-full")
def easydiffusion_1649(broken: bool) -> Machine:
    """A Linux desktop (2x RTX 4090 workstation) whose /tmp is a tmpfs of half its RAM: pip downloads the 2.3 GB torch
    wheel and its nvidia-* wheels there and runs out of room while the home volume has 50 GB free."""
    spec = healthy.geforce_workstation()
    tmp = _vol("/tmp", "tmpfs", "tmpfs", 7.8, 0.6 if broken else 7.6, ["tmp"])
    return Machine(spec, disks=_disks(_vol("/", "ext4", "/dev/nvme0n1p2", 465, 52, ["root", "home"]), tmp))


@case("lerobot-59-install-tmp-too-small")
def lerobot_59(broken: bool) -> Machine:
    """Installing lerobot's dependencies (torch and the CUDA wheels) on a machine whose /tmp partition is small: the
    documented workaround is TMPDIR on a volume with room."""
    spec = healthy.dlami_ubuntu2204_g5()
    tmp = _vol("/tmp", "ext4", "/dev/nvme0n1p3", 4 if broken else 20, 0.8 if broken else 19.5, ["tmp"])
    return Machine(spec, disks=_disks(_vol("/", "ext4", "/dev/nvme0n1p1", 200, 140, ["root", "home"]), tmp))


@case("pip-7745-root-volume-full-installing-torch")
def pip_7745(broken: bool) -> Machine:
    """`pip install torch==1.2.0` into a venv on a root filesystem 91% used with 2.9 GB left (/home on another disk
    had 289 GB)."""
    spec = healthy.geforce_workstation()
    root = _vol("/", "ext4", "/dev/sda5", 32, 2.9 if broken else 24, ["root", "tmp"])
    return Machine(spec, disks=_disks(root, _vol("/home", "ext4", "/dev/sdb3", 773, 289, ["home"])))


@case("torch7-1032-nvcc-tmp-full-building-cutorch")
def torch7_1032(broken: bool) -> Machine:
    """Building cutorch on Debian: nvcc writes its intermediate .ii/.fatbin.c files to /tmp, a 1 GB partition there,
    which filled ('catastrophic error: error while writing generated C++ file')."""
    spec = healthy.dlami_rhel8_p4d()
    tmp = _vol("/tmp", "ext4", "/dev/nvme0n1p4", 1 if broken else 20, 0.2 if broken else 19.5, ["tmp"])
    return Machine(spec, disks=_disks(copy.deepcopy(FIXED_DISKS["volumes"][0]), tmp))


def _nofile(spec: healthy.Spec, broken: bool) -> None:
    spec["proc/self/limits"] = LIMITS.format(memlock="unlimited").replace(
        "Max open files            1048576              1048576",
        "Max open files            1024                 1048576" if broken else
        "Max open files            1048576              1048576")


@case("graph-physics-22-ancdata-nofile-1024")
def graph_physics_22(broken: bool) -> Machine:
    """Training with DataLoader workers on an Ubuntu cluster's GPU nodes, whose sessions get the default open-files
    limit of 1024: the workers' shared-memory file descriptors run out ('received 0 items of ancdata')."""
    spec = healthy.dlami_ubuntu2204_g5()
    _nofile(spec, broken)
    return Machine(spec)


@case("fastai-23-ancdata-open-files-limit")
def fastai_23(broken: bool) -> Machine:
    """fastai's prediction with many DataLoader workers hit the soft open-files limit; raising RLIMIT_NOFILE
    (resource.setrlimit to 2048) made it go away."""
    spec = healthy.dlami_ubuntu2404_g6()
    _nofile(spec, broken)
    return Machine(spec)


def _oom_line(host: str, pid: int, comm: str, cgroup: bool) -> str:
    """The kernel's OOM-killer report as the distro's kern.log keeps it (mm/oom_kill.c's 'Killed process' line)."""
    prefix = "Memory cgroup out of memory" if cgroup else "Out of memory"
    return (f"Nov 29 11:42:07 {host} kernel: [ 6127.518734] {prefix}: Killed process {pid} ({comm}) "
            "total-vm:14119556kB, anon-rss:6538204kB, file-rss:80652kB, shmem-rss:16kB, UID:0 pgtables:13432kB "
            "oom_score_adj:0")


@case("opennmt-tutorial-6-dataloader-killed-cgroup-oom")
def opennmt_tutorial_6(broken: bool) -> Machine:
    """Training with OpenNMT's onmt_train entry point on a one-GPU VM: the memory cgroup's OOM killer took the
    process (dmesg -T showed it), which the DataLoader reports as its worker killed by signal: Killed."""
    spec = healthy.dlami_ubuntu2404_g6()
    if broken:
        spec["var/log/kern.log"] += _oom_line("ip-172-31-5-6", 629, "onmt_train", cgroup=True) + "\n"
    return Machine(spec)


@case("kraken-266-dataloader-killed-cluster-memory-limit")
def kraken_266(broken: bool) -> Machine:
    """kraken training on a university cluster node: the job exceeded its host-memory limit and the kernel's OOM
    killer took the training process ('It was a resource limit on the cluster')."""
    spec = healthy.dlami_ubuntu2204_g5()
    if broken:
        spec["var/log/kern.log"] += _oom_line("ip-172-31-5-6", 22048, "ketos", cgroup=False) + "\n"
    return Machine(spec)
