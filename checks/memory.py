"""Memory: /dev/shm against the GPUs, and host RAM (and the container's limit) against the GPUs' memory."""

from __future__ import annotations

from typing import Any, Dict, Optional

from dl_doctor.checks.common import GIB, MIB, container_kind, human_bytes
from dl_doctor.fixes import write_file
from dl_doctor.model import Facts, Fix, Result, check, fail, passed, skip, warn

# Policy thresholds (not version facts): below SHM_FAIL nothing multi-process works
# reliably (Docker's default is 64 MiB); below SHM_PER_GPU x GPUs (at least 1 GiB)
# DataLoader workers and NCCL's shared-memory transport run short under load.
SHM_FAIL = 512 * MIB
SHM_PER_GPU = 1 * GIB


def _shm_fix(kind: Optional[str], want: int) -> Fix:
    gib = max(1, want // GIB)
    if kind == "kubernetes":
        return Fix(
            f"Mount a memory-backed emptyDir of at least {gib} GiB at /dev/shm in the pod spec.",
            ("# in the pod spec:\n"
             "volumes:\n  - name: dshm\n    emptyDir:\n      medium: Memory\n"
             f"      sizeLimit: {gib}Gi\n"
             "# and in the container:\n"
             "volumeMounts:\n  - name: dshm\n    mountPath: /dev/shm",))
    if kind is not None:
        return Fix(
            f"Restart the container with a larger /dev/shm (at least {gib} GiB) or the host's IPC namespace.",
            (f"docker run --gpus all --shm-size={gib}g ...", "docker run --gpus all --ipc=host ..."))
    return Fix(
        f"Enlarge /dev/shm to at least {gib} GiB now, and make it persistent in /etc/fstab.",
        (f"sudo mount -o remount,size={gib}G /dev/shm",
         write_file("/etc/fstab", f"tmpfs /dev/shm tmpfs defaults,size={gib}G 0 0\n", append=True)))


@check(
    id="DLD-MEM-001", slug="shm-too-small", title="/dev/shm is large enough for training",
    remedy="fix-configuration", drain=False,
    problem="/dev/shm is too small for training",
    tags=("memory", "container", "nccl"), requires=("mounts",),
    what="""Reads the size of the /dev/shm tmpfs (statvfs on a live host, the size= mount option
    in a recorded tree) and compares it with what multi-process training needs: at least
    512 MiB, and 1 GiB per NVIDIA GPU (at least 1 GiB) to be comfortable.""",
    why="""PyTorch DataLoader workers hand every batch to the training process through shared
    memory, and NCCL's shared-memory transport between GPUs of one node allocates its buffers
    in /dev/shm. Docker gives a container 64 MiB by default and a Kubernetes pod gets the same
    unless a memory-backed volume is mounted, which ends in 'bus error', 'DataLoader worker
    killed' or 'NCCL WARN Error while creating shared memory segment' partway through a run.""",
    fix="""In Docker, start the container with --shm-size=16g (or --ipc=host). In Kubernetes,
    mount an emptyDir with medium: Memory at /dev/shm. On a host, remount /dev/shm with a
    larger size= option and put it in /etc/fstab.""",
)
def shm_too_small(facts: Facts) -> Result:
    shm = facts.get("mounts.shm") or {}
    kind = container_kind(facts)
    gpus = facts.get("gpu_pci.gpu_count") or 0
    want = max(SHM_PER_GPU, SHM_PER_GPU * gpus)
    evidence: Dict[str, Any]
    evidence = {"mounts.shm.size_bytes": shm.get("size_bytes"), "mounts.shm.size_source": shm.get("size_source"),
                "mounts.shm.options": shm.get("options"), "gpu_pci.gpu_count": gpus,
                "system.container.kind": kind}
    if not shm.get("mounted"):
        return fail("/dev/shm is not mounted: DataLoader workers and NCCL cannot create shared memory",
                    evidence, _shm_fix(kind, want))
    size = shm.get("size_bytes")
    if size is None:
        return skip("/dev/shm is mounted but its size could not be determined here (df -h /dev/shm shows it)",
                    **evidence)
    where = f" ({kind} container)" if kind else ""
    if size < SHM_FAIL:
        return fail(f"/dev/shm is only {human_bytes(size)}{where}: DataLoader workers and NCCL's shared-memory "
                    f"transport fail with 'bus error' or 'No space left on device'; want at least {human_bytes(want)}",
                    evidence, _shm_fix(kind, want))
    if size < want:
        return warn(f"/dev/shm is {human_bytes(size)}{where}; with {gpus} GPU(s) at least {human_bytes(want)} "
                    f"is recommended", evidence, _shm_fix(kind, want))
    return passed(f"/dev/shm is {human_bytes(size)}", **evidence)


def _gpu_memory_total(facts: Facts, matrix):
    devs = facts.get("nvml.devices") or []
    if devs and all(d.get("memory_total_bytes") for d in devs):
        return sum(d["memory_total_bytes"] for d in devs), "NVML"
    total, source = 0, None
    gpus = [d for d in facts.get("gpu_pci.devices") or [] if d.get("kind") == "gpu"]
    for g in gpus:
        entry = matrix.gpu_by_pci(g.get("device_id") or "")
        if not entry or not entry.get("memory_mib"):
            return None, None
        total += entry["memory_mib"] * 2 ** 20
        source = "compatibility matrix (GPU model)"
    # a pod given part of the node's GPUs: sysfs shows the node's whole bus, the job has the GPUs it was given
    given = facts.get("nvidia_driver.runtime.given_gpus") if facts.get("system.container.in_container") else None
    if total and given and len(given) < len(gpus) and len({g.get("device_id") for g in gpus}) == 1:
        total, source = total // len(gpus) * len(given), f"{source}, the {len(given)} GPU(s) given to this container"
    return (total or None), source


@check(
    id="DLD-MEM-002", slug="host-memory-below-gpu-memory",
    remedy="fix-configuration", drain=False,
    problem="Less host memory than GPU memory",
    title="Host memory (and the container's limit) is at least the GPUs' memory",
    tags=("memory", "gpu", "container"), requires=("memory",),
    what="""Compares host RAM, and the cgroup memory limit in a container, with the total memory of the NVIDIA GPUs
    (NVML, else the GPU models in the matrix). Reports swap alongside.""",
    why="""Loading a checkpoint, pinned-memory DataLoaders, DeepSpeed/FSDP CPU offload and torch.save all stage
    tensors in host memory; with less RAM than GPU memory a job that fits on the GPUs dies with the OOM killer
    ('Killed', exit 137) while saving or loading. A container limit below the GPUs' memory warns (someone set it and
    can raise it); a machine built that way (a g5.xlarge) passes with a note on loading checkpoints.""",
    fix="""Use an instance with more memory per GPU, raise the container's memory limit (docker --memory, the pod's
    limits.memory), or shard checkpoint loading (mmap, load per rank).""",
)
def host_memory(facts: Facts, matrix) -> Result:
    ram = facts.get("memory.total_bytes")
    limit = facts.get("system.cgroup.memory_limit_bytes")
    gpu_total, source = _gpu_memory_total(facts, matrix)
    evidence = {"memory.total_bytes": ram, "cgroup_memory_limit": limit, "gpu_memory_total": gpu_total,
                "gpu_memory_source": source, "swap_total_bytes": facts.get("memory.swap_total_bytes")}
    if not gpu_total:
        return skip("no NVIDIA GPU memory to compare with", **evidence)
    usable = min(x for x in (ram, limit) if x) if (ram or limit) else None
    if not usable:
        return skip("host memory is unknown", **evidence)
    where = "the container's memory limit" if limit and usable == limit else "host RAM"
    if usable < gpu_total and where.startswith("the container"):
        return warn(f"{where} is {human_bytes(usable)} but the GPUs have {human_bytes(gpu_total)}: loading or saving a "
                    f"full checkpoint can be OOM-killed", evidence,
                    Fix("Give the job more host memory.",
                        ("docker run --memory=<size> ...   # or the pod's resources.limits.memory",)))
    if usable < gpu_total:
        # the machine's own shape (a g5.xlarge: 16 GiB of RAM for a 24 GiB A10G; a workstation with two 24 GiB cards
        # and 32 GiB): healthy, and nothing on the host to change; how checkpoints are loaded is what matters
        return passed(f"{where} {human_bytes(usable)} for {human_bytes(gpu_total)} of GPU memory: a checkpoint larger "
                      f"than host RAM must be loaded memory-mapped or by shard (torch.load(..., mmap=True)) to escape "
                      f"the OOM killer", evidence,
                      Fix("Load large checkpoints memory-mapped or by shard.",
                          ("free -g", "# torch.load(path, mmap=True, map_location='cuda')")))
    return passed(f"{where} {human_bytes(usable)} for {human_bytes(gpu_total)} of GPU memory", **evidence)
