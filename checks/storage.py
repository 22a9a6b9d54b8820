"""Shared memory and free disk space."""

from __future__ import annotations

from typing import List, Optional

from dl_doctor.checks.common import GIB, MIB, container_kind, grow_partition_commands, human_bytes
from dl_doctor.model import Facts, Fix, Result, Status, check, fail, passed, skip, warn

# Policy thresholds (not version facts): below SHM_FAIL nothing multi-process works
# reliably (Docker's default is 64 MiB); below SHM_PER_GPU x GPUs (at least 1 GiB)
# DataLoader workers and NCCL's shared-memory transport run short under load.
SHM_FAIL = 512 * MIB
SHM_PER_GPU = 1 * GIB

DISK_FAIL = 5 * GIB       # a CUDA framework wheel alone unpacks to several GiB
DISK_WARN = 20 * GIB
DISK_WARN_PCT = 95.0
INODES_FAIL_PCT = 1.0
INODES_WARN_PCT = 5.0


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
         f"echo 'tmpfs /dev/shm tmpfs defaults,size={gib}G 0 0' | sudo tee -a /etc/fstab"))


@check(
    id="DLD-MEM-001", slug="shm-too-small", title="/dev/shm is large enough for training",
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
    evidence = {"mounts.shm.size_bytes": shm.get("size_bytes"), "mounts.shm.size_source": shm.get("size_source"),
                "mounts.shm.options": shm.get("options"), "gpu_pci.gpu_count": gpus,
                "system.container.kind": kind}
    if not shm.get("mounted"):
        return fail("/dev/shm is not mounted: DataLoader workers and NCCL cannot create shared memory",
                    evidence, _shm_fix(kind, want))
    size = shm.get("size_bytes")
    if size is None:
        return warn("/dev/shm is mounted but its size could not be determined", evidence,
                    Fix("Look at the size yourself.", ("df -h /dev/shm",)))
    where = f" ({kind} container)" if kind else ""
    if size < SHM_FAIL:
        return fail(f"/dev/shm is only {human_bytes(size)}{where}: DataLoader workers and NCCL's shared-memory "
                    f"transport fail with 'bus error' or 'No space left on device'; want at least {human_bytes(want)}",
                    evidence, _shm_fix(kind, want))
    if size < want:
        return warn(f"/dev/shm is {human_bytes(size)}{where}; with {gpus} GPU(s) at least {human_bytes(want)} "
                    f"is recommended", evidence, _shm_fix(kind, want))
    return passed(f"/dev/shm is {human_bytes(size)}", **evidence)


TMP_FAIL = 1 * GIB
TMP_WARN = 5 * GIB


def _volume_problem(vol: dict):
    free, total = vol.get("free_bytes"), vol.get("total_bytes") or 0
    roles = set(vol.get("roles") or [])
    if roles and roles <= {"tmp", "var-tmp"}:  # scratch space: nvcc, Triton and pip need a few GiB, not tens
        if free is not None and free < TMP_FAIL:
            return Status.FAIL, f"only {human_bytes(free)} free for temporary files"
        if free is not None and free < TMP_WARN:
            return Status.WARN, f"{human_bytes(free)} free for temporary files"
        return None
    itotal, ifree = vol.get("inodes_total") or 0, vol.get("inodes_free")
    ipct = 100.0 * ifree / itotal if itotal and ifree is not None else None
    if free is not None and free < DISK_FAIL:
        return Status.FAIL, f"only {human_bytes(free)} free"
    if ipct is not None and ipct < INODES_FAIL_PCT:
        return Status.FAIL, f"only {ipct:.1f}% of inodes free"
    if free is not None and free < DISK_WARN:
        return Status.WARN, f"{human_bytes(free)} free"
    if vol.get("used_pct") is not None and vol["used_pct"] >= DISK_WARN_PCT:
        return Status.WARN, f"{vol['used_pct']:.0f}% used ({human_bytes(free)} free)"
    if ipct is not None and ipct < INODES_WARN_PCT:
        return Status.WARN, f"only {ipct:.1f}% of inodes free"
    return None


@check(
    id="DLD-DISK-001", slug="disk-space-low", title="Enough free space on /, home, /tmp, caches and data mounts",
    tags=("storage", "disk"), requires=("disks.volumes",),
    what="""Measures free space and free inodes on the root filesystem, the home volume, /tmp, /var/tmp,
    the volumes holding the model/package caches and the data mounts. Less than 5 GiB free (or under 1% of
    inodes) fails; less than 20 GiB free, 95% used or under 5% of inodes warns (for /tmp and /var/tmp:
    under 1 GiB fails, under 5 GiB warns).""",
    why="""Installing a CUDA build of a framework unpacks several GiB into site-packages and the pip
    cache, nvcc and Triton write large temporary files, and checkpoints are written next to the
    code. A full root volume makes installs fail halfway and kills runs at their first
    checkpoint with 'No space left on device'.""",
    fix="""Free space (pip and conda caches, old checkpoints, container images) or enlarge the volume:
    on EC2, modify the EBS volume's size, then grow the partition and the filesystem. Put data
    and caches on a larger data volume.""",
)
def disk_space_low(facts: Facts) -> Result:
    volumes = facts.get("disks.volumes") or []
    if not volumes:
        return warn("no volume could be measured", {"disks.errors": facts.get("disks.errors")})
    problems = [(found[0], vol, found[1]) for vol in volumes for found in [_volume_problem(vol)] if found]
    def name(v: dict) -> str:
        roles = [r for r in v.get("roles") or [] if r != "mount"]
        caches = [r for r in roles if r.startswith("cache:")]
        shown = [r for r in roles if not r.startswith("cache:")] + ([f"{len(caches)} cache(s)"] if caches else [])
        return f"{v.get('mountpoint') or v['paths'][0]}" + (f" ({', '.join(shown)})" if shown else "")

    summary = "; ".join(f"{name(v)}: {human_bytes(v.get('free_bytes'))} free of {human_bytes(v.get('total_bytes'))}"
                        for v in volumes)
    evidence = {"disks.volumes": [{k: v.get(k) for k in ("paths", "mountpoint", "fstype", "device", "free_bytes",
                                                         "total_bytes", "used_pct", "inodes_free", "inodes_total",
                                                         "measured")}
                                  for v in volumes]}
    if not facts.live:
        summary += " (measured on the filesystem holding the sysroot tree)"
    if not problems:
        return passed(summary, **evidence)
    text = "; ".join(f"{', '.join(v['paths'])} ({v.get('mountpoint') or '?'}): {t}" for _, v, t in problems)
    cmds: List[str] = []
    for _, vol, _ in problems:
        path = vol["paths"][0]
        cmds.append(f"sudo du -xh --max-depth=1 {path} 2>/dev/null | sort -h | tail -15")
    cmds += ["pip cache purge", "conda clean --all --yes  # if conda is used"]
    for _, vol, _ in problems:
        if vol.get("mountpoint"):
            grow = grow_partition_commands(vol.get("device"), vol["mountpoint"], vol.get("fstype"))
            if grow:
                cmds.append("# after enlarging the volume (EC2: aws ec2 modify-volume --volume-id vol-... --size NEW_GIB):")
                cmds += grow
    fix = Fix("Free space on the full volume, or enlarge it and grow its filesystem.", tuple(dict.fromkeys(cmds)))
    message = f"low disk space: {text}"
    failing = any(status == Status.FAIL for status, _, _ in problems)
    return (fail if failing else warn)(message, evidence, fix)


CACHE_VARS = {"cache:huggingface": "HF_HOME", "cache:torch": "TORCH_HOME", "cache:pip": "PIP_CACHE_DIR",
              "cache:conda-pkgs": "CONDA_PKGS_DIRS"}
CACHE_SMALL = 50 * GIB
CACHE_BIG = 200 * GIB


@check(
    id="DLD-DISK-002", slug="caches-on-small-volume", title="Model and package caches live where there is room",
    tags=("storage", "disk"), requires=("disks.volumes",),
    what="""Finds the volumes holding the Hugging Face, torch, pip and conda package caches (HF_HOME, TORCH_HOME,
    PIP_CACHE_DIR, CONDA_PKGS_DIRS, or their defaults under ~/.cache) and compares them with the data mounts.""",
    why="""Model downloads (tens to hundreds of GiB for current LLMs) and pip/conda caches default to the home
    directory on the root volume, which fills while a multi-terabyte data volume or instance store sits empty;
    downloads then fail halfway and the machine stops being usable.""",
    fix="""Point the cache variables at the big volume (in the shell profile or the job's environment) and move the
    existing caches there.""",
)
def caches_on_small_volume(facts: Facts) -> Result:
    volumes = facts.get("disks.volumes") or []
    caches = [(r, v) for v in volumes for r in v.get("roles") or [] if r.startswith("cache:")]
    if not caches:
        return skip("no cache directory was located (HOME unknown)")
    biggest = max((v for v in volumes if "mount" in (v.get("roles") or [])), key=lambda v: v.get("free_bytes") or 0,
                  default=None)
    moves = []
    for role, v in caches:
        free = v.get("free_bytes") or 0
        if biggest is not None and biggest is not v and free < CACHE_SMALL and \
                (biggest.get("free_bytes") or 0) >= max(4 * free, CACHE_BIG):
            moves.append((role, v))
    evidence = {"caches": {r: {"volume": v.get("mountpoint"), "free_bytes": v.get("free_bytes")} for r, v in caches},
                "largest_data_mount": {"mountpoint": biggest.get("mountpoint"), "free_bytes": biggest.get("free_bytes")}
                if biggest else None}
    if moves:
        target = biggest["mountpoint"].rstrip("/")
        names = ", ".join(sorted({r.split(":", 1)[1] for r, _ in moves}))
        cmds = [f"export {CACHE_VARS[r]}={target}/cache/{r.split(':', 1)[1]}" for r, _ in moves]
        cmds.append(f"mkdir -p {target}/cache   # add the exports to ~/.bashrc or the job environment")
        return warn(f"the {names} cache(s) are on {moves[0][1].get('mountpoint') or '/'} with "
                    f"{human_bytes(moves[0][1].get('free_bytes'))} free while {target} has "
                    f"{human_bytes(biggest.get('free_bytes'))} free", evidence,
                    Fix(f"Move the caches to {target}.", tuple(cmds)))
    return passed("the caches are on volumes with room" if biggest else
                  "the caches share the only data volume", **evidence)


def _gpu_memory_total(facts: Facts, matrix):
    devs = facts.get("nvml.devices") or []
    if devs and all(d.get("memory_total_bytes") for d in devs):
        return sum(d["memory_total_bytes"] for d in devs), "NVML"
    total, source = 0, None
    for g in [d for d in facts.get("gpu_pci.devices") or [] if d.get("kind") == "gpu"]:
        entry = matrix.gpu_by_pci(g.get("device_id") or "")
        if not entry or not entry.get("memory_mib"):
            return None, None
        total += entry["memory_mib"] * 2 ** 20
        source = "compatibility matrix (GPU model)"
    return (total or None), source


@check(
    id="DLD-MEM-002", slug="host-memory-below-gpu-memory",
    title="Host memory (and the container's limit) is at least the GPUs' memory",
    tags=("memory", "gpu", "container"), requires=("memory",),
    what="""Compares host RAM, and the cgroup memory limit in a container, with the total memory of the NVIDIA GPUs
    (NVML, else the GPU models in the matrix). Reports swap alongside.""",
    why="""Loading a checkpoint, pinned-memory DataLoaders, DeepSpeed/FSDP CPU offload and torch.save all stage
    tensors in host memory; with less RAM than GPU memory a job that fits on the GPUs dies with the OOM killer
    ('Killed', exit 137) while saving or loading.""",
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
    if usable < gpu_total:
        cmds = (("docker run --memory=<size> ...   # or the pod's resources.limits.memory",) if where.startswith("the container")
                else ("free -g", "# a larger instance size, or load checkpoints with torch.load(..., mmap=True)"))
        return warn(f"{where} is {human_bytes(usable)} but the GPUs have {human_bytes(gpu_total)}: loading or saving a "
                    f"full checkpoint can be OOM-killed", evidence, Fix("Give the job more host memory.", cmds))
    return passed(f"{where} {human_bytes(usable)} for {human_bytes(gpu_total)} of GPU memory", **evidence)
