"""Free disk space, and where the caches live."""

from __future__ import annotations

from typing import Any, Dict, List

from dl_doctor.checks.common import GIB, grow_partition_commands, human_bytes
from dl_doctor.model import Facts, Fix, Result, Status, check, fail, passed, skip, warn


DISK_FAIL = 5 * GIB       # a CUDA framework wheel alone unpacks to several GiB
DISK_WARN = 20 * GIB
DISK_WARN_PCT = 95.0
DISK_ROOMY = 100 * GIB   # a volume 95% used with this much free (a large data volume) has room: not reported
INODES_FAIL_PCT = 1.0
INODES_WARN_PCT = 5.0



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
    if vol.get("used_pct") is not None and vol["used_pct"] >= DISK_WARN_PCT and (free is None or free < DISK_ROOMY):
        return Status.WARN, f"{vol['used_pct']:.0f}% used ({human_bytes(free)} free)"
    if ipct is not None and ipct < INODES_WARN_PCT:
        return Status.WARN, f"only {ipct:.1f}% of inodes free"
    return None


@check(
    id="DLD-DISK-001", slug="disk-space-low", title="Enough free space on /, home, /tmp, caches and data mounts",
    remedy="fix-configuration", drain=True,
    problem="A filesystem training needs is (nearly) full",
    tags=("storage", "disk"), requires=("disks.volumes",),
    what="""Measures free space and free inodes on the root filesystem, the home volume, /tmp, /var/tmp,
    the volumes holding the model/package caches and the data mounts. Less than 5 GiB free (or under 1% of
    inodes) fails; less than 20 GiB free, 95% used with under 100 GiB free, or under 5% of inodes warns (for /tmp
    and /var/tmp: under 1 GiB fails, under 5 GiB warns).""",
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
        return skip("no volume could be measured", {"disks.errors": facts.get("disks.errors")})
    problems = [(found[0], vol, found[1]) for vol in volumes for found in [_volume_problem(vol)] if found]
    def name(v: dict) -> str:
        roles = [r for r in v.get("roles") or [] if r != "mount"]
        caches = [r for r in roles if r.startswith("cache:")]
        shown = [r for r in roles if not r.startswith("cache:")] + ([f"{len(caches)} cache(s)"] if caches else [])
        return f"{v.get('mountpoint') or v['paths'][0]}" + (f" ({', '.join(shown)})" if shown else "")

    summary = "; ".join(f"{name(v)}: {human_bytes(v.get('free_bytes'))} free of {human_bytes(v.get('total_bytes'))}"
                        for v in volumes)
    evidence: Dict[str, Any]
    evidence = {"disks.volumes": [{k: v.get(k) for k in ("paths", "mountpoint", "fstype", "device", "free_bytes",
                                                         "total_bytes", "used_pct", "inodes_free", "inodes_total",
                                                         "measured")}
                                  for v in volumes]}
    if not facts.live:
        summary += " (measured on the filesystem holding the sysroot tree)"
    if not problems:
        return passed(summary, **evidence)
    text = "; ".join(f"{', '.join(v['paths'])}" + (f" ({v['mountpoint']})" if v.get("mountpoint") else "") + f": {t}"
                     for _, v, t in problems)
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
    remedy="fix-configuration", drain=False,
    problem="Model or package caches are on a filesystem without room",
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
    evidence: Dict[str, Any]
    evidence = {"caches": {r: {"volume": v.get("mountpoint"), "free_bytes": v.get("free_bytes")} for r, v in caches},
                "largest_data_mount": {"mountpoint": biggest.get("mountpoint"), "free_bytes": biggest.get("free_bytes")}
                if biggest else None}
    if moves:
        assert biggest is not None  # a move is only ever towards it
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
