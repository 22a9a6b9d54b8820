"""EBS headroom and instance-store volumes."""

from __future__ import annotations

from typing import Any, Dict, List

from dl_doctor.checks.common import GIB, human_bytes
from dl_doctor.model import Facts, Fix, Result, check, passed, skip, warn

NEAR_LIMIT = 0.95


def _seconds(us: int) -> str:
    return f"{us / 1e6:.1f} s"


@check(
    id="DLD-EBS-001", slug="ebs-volume-at-limit", title="EBS volumes have IOPS and throughput headroom",
    remedy="fix-configuration", drain=False,
    problem="An EBS volume is at its IOPS or throughput limit",
    tags=("storage", "ebs", "performance"), requires=("ebs",),
    what="""Identifies EBS volumes (NVMe model 'Amazon Elastic Block Store', serial = volume ID), measures IOPS,
    throughput and queue depth over a short window from /proc/diskstats, and holds them against the volume's limits
    (from its type and size via the matrix, given with --ebs-volume-type VOL=TYPE[:IOPS[:MBPS]]). With root, reads
    EBS's own statistics: time spent over the volume's and the instance's limits, during the window and since
    attach.""",
    why="""Data loading from EBS is the usual hidden bottleneck of training: a gp3 volume at its 3,000 IOPS / 125 MiB/s
    baseline, or an instance at its EBS bandwidth limit, leaves GPUs waiting with nothing in any log. EBS counts the
    microseconds it throttled; that number is the proof.""",
    fix="""Raise the volume's provisioned IOPS/throughput (gp3 and io2 change online with aws ec2 modify-volume), move
    hot data to instance-store NVMe or FSx, or cache the dataset locally.""",
)
def ebs_at_limit(facts: Facts, matrix) -> Result:
    volumes = [v for v in facts.get("ebs.volumes") or [] if v.get("kind") == "ebs"]
    if not volumes:
        return skip("no EBS volume on this host")
    types = facts.get("ebs.volume_types") or {}
    problems: List[str] = []
    rows: List[Dict[str, Any]] = []
    for v in volumes:
        vid = v.get("volume_id") or v["device"]
        row: Dict[str, Any] = {"device": v["device"], "volume_id": vid, "size_gib": v.get("size_gib"),
                               "window": v.get("window")}
        spec = types.get(vid) or types.get(v["device"])
        limits = None
        if spec:
            limits = matrix.ebs_limits(spec["type"], int(v.get("size_gib") or 0), spec.get("iops"),
                                       spec.get("throughput_mibps"))
            row["limits"] = {k: limits.get(k) for k in ("type", "iops", "throughput_mibps", "burst_iops")} if limits else None
        w = v.get("window") or {}
        if limits and w:
            for metric, unit in (("iops", "IOPS"), ("throughput_mibps", "MiB/s")):
                cap, seen = limits.get(metric), w.get(metric)
                if cap and seen is not None:
                    row[f"headroom_{metric}_pct"] = round(100 * (1 - seen / cap), 1)
                    if seen >= NEAR_LIMIT * cap:
                        problems.append(f"{vid} ({v['device']}) ran at {seen:g} of {cap:g} {unit} ({limits['type']})")
        stats = v.get("ebs_stats") or {}
        during = v.get("ebs_stats_window") or {}
        for key, what in (("ebs_volume_performance_exceeded_iops", "the volume's IOPS limit"),
                          ("ebs_volume_performance_exceeded_tp", "the volume's throughput limit"),
                          ("ec2_instance_ebs_performance_exceeded_iops", "the instance's EBS IOPS limit"),
                          ("ec2_instance_ebs_performance_exceeded_tp", "the instance's EBS bandwidth limit")):
            if during.get(key):
                seconds = w.get("window_s")
                window = f"the {seconds} s window" if isinstance(seconds, (int, float)) else "the window"
                problems.append(f"{vid} was over {what} for {_seconds(during[key])} of {window}")
            elif stats.get(key):
                problems.append(f"{vid} has spent {_seconds(stats[key])} over {what} since it was attached")
        rows.append(row)
    evidence = {"volumes": rows, "sampled": facts.get("ebs.sampled")}
    if problems:
        vid = rows[0]["volume_id"]
        return warn("; ".join(problems), evidence,
                    Fix("Give the volume more IOPS/throughput, or move hot data to local NVMe.",
                        (f"aws ec2 modify-volume --volume-id {vid} --volume-type gp3 --iops 16000 --throughput 1000",
                         "sudo nvme amzn stats /dev/nvme1n1   # or: ebsnvme stats (amazon-ec2-utils)",
                         "iostat -xm 1 5")))
    parts = []
    for r in rows:
        w = r.get("window") or {}
        fmt = lambda x: "unknown" if x is None else f"{x:g}"  # noqa: E731
        text = f"{r['volume_id']} {fmt(w.get('iops'))} IOPS, {fmt(w.get('throughput_mibps'))} MiB/s"
        if not w:
            text = f"{r['volume_id']} (no I/O sample)"
        if r.get("headroom_iops_pct") is not None:
            text += (f" ({fmt(r['headroom_iops_pct'])}% IOPS / {fmt(r.get('headroom_throughput_mibps_pct'))}% "
                     f"throughput headroom)")
        elif not r.get("limits"):
            text += " (limits unknown: pass --ebs-volume-type VOL=TYPE[:IOPS[:MBPS]])"
        parts.append(text)
    return passed("; ".join(parts), **evidence)


# A volume that holds a cache or the home directory with less than this free, while local NVMe sits idle: the
# downloads that fill it belong on the instance store (they can be fetched again after a stop).
CACHE_TIGHT = 50 * GIB


@check(
    id="DLD-DISK-003", slug="instance-store-unmounted", title="Idle instance-store NVMe is not needed by a full volume",
    remedy="fix-configuration", drain=False,
    problem="Caches fill a small volume while instance-store NVMe sits idle",
    tags=("storage", "ec2"), requires=("ebs",),
    what="""Finds instance-store NVMe devices (model 'Amazon EC2 NVMe Instance Storage') that nothing uses: not
    mounted, and no RAID or LVM volume built on them (/sys/block/DEV/holders). Idle local NVMe is normal (instance
    types and images leave it unformatted) and is reported as capacity available; it warns only when a volume that
    holds the home directory or a model/package cache has less than 50 GiB free at the same time.""",
    why="""GPU instances (p4d, p5, g5, g6e...) come with terabytes of fast local NVMe that is not formatted or mounted
    by default, and many hosts never need it. When the root or home volume is filling with model downloads and pip
    or conda caches, that idle NVMe is where they belong: downloads are fetched again after a stop, so its
    ephemerality does not matter.""",
    fix="""Format and mount it (its data is lost when the instance stops): mkfs.xfs, or a RAID 0 over several with
    mdadm, mounted at /opt/dlami/nvme or /scratch, and point caches and datasets there.""",
)
def instance_store(facts: Facts) -> Result:
    stores = [v for v in facts.get("ebs.volumes") or [] if v.get("kind") == "instance-store"]
    if not stores:
        return skip("no instance-store NVMe on this host")
    used = [v for v in stores if v.get("mounted") or v.get("holders")]
    idle = [v for v in stores if v not in used]
    total = sum(v.get("size_gib") or 0 for v in idle)
    evidence: Dict[str, Any]
    evidence = {"instance_store": [{k: v.get(k) for k in ("device", "size_gib", "mounted", "holders")}
                                   for v in stores]}
    if not idle:
        how = "mounted" if all(v.get("mounted") for v in stores) else "in use (mounted, or under a RAID/LVM volume)"
        return passed(f"all {len(stores)} instance-store volume(s) are {how}", **evidence)
    devs = " ".join(f"/dev/{v['device']}" for v in idle)
    cmds = ([f"sudo mkfs.xfs /dev/{idle[0]['device']}"] if len(idle) == 1 else
            [f"sudo mdadm --create /dev/md0 --level=0 --raid-devices={len(idle)} {devs}", "sudo mkfs.xfs /dev/md0"])
    target = f"/dev/{idle[0]['device']}" if len(idle) == 1 else "/dev/md0"
    cmds += ["sudo mkdir -p /scratch", f"sudo mount {target} /scratch",
             "# data on instance store is lost when the instance stops"]
    unknown = " (whether a RAID or LVM volume is built on them was not recorded)" if any(
        "holders" not in v for v in idle) else ""
    tight = [vol for vol in facts.get("disks.volumes") or []
             if any(r == "home" or r.startswith("cache:") for r in vol.get("roles") or [])
             and vol.get("free_bytes") is not None and vol["free_bytes"] < CACHE_TIGHT]
    if tight:
        vol = tight[0]
        where = vol.get("mountpoint") or (vol.get("paths") or ["the cache volume"])[0]
        caches = [r.split(":", 1)[1] for r in vol.get("roles") or [] if r.startswith("cache:")]
        held = f"the {', '.join(caches)} cache(s)" if caches else "the home directory"
        evidence["tight_volume"] = {k: vol.get(k) for k in ("mountpoint", "roles", "free_bytes", "total_bytes")}
        cmds += [f"export HF_HOME=/scratch/cache/huggingface PIP_CACHE_DIR=/scratch/cache/pip   # and TORCH_HOME, "
                 f"CONDA_PKGS_DIRS"]
        return warn(f"{where} holds {held} with {human_bytes(vol['free_bytes'])} free while {len(idle)} "
                    f"instance-store NVMe volume(s), {total:g} GiB, sit idle: {devs}{unknown}", evidence,
                    Fix("Format and mount the local NVMe and move the caches there.", tuple(cmds)),
                    headline=f"{where} is filling while {total:g} GiB of local NVMe sits idle")
    return passed(f"{total:g} GiB of instance-store NVMe is available, not mounted ({devs}){unknown}: normal on a "
                  f"fresh instance; format and mount it when datasets, caches or checkpoints need fast local space "
                  f"(its data is lost when the instance stops)", evidence,
                  Fix("Format and mount the local NVMe for datasets, caches and scratch.", tuple(cmds)))
