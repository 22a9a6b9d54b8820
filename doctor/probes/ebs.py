"""EBS and instance-store NVMe volumes: identity, I/O over a short window (/proc/diskstats), and the EBS
detailed performance statistics log page (time spent over the volume's and the instance's limits).

The window is sampled while the other probes run (--sample-seconds, default about 1 s). The log page needs
root (an NVMe admin command on /dev/nvmeN); without it the diskstats rates still come back.
"""

from __future__ import annotations

import re
import struct
import time
from typing import Any, Dict, List, Optional

from dl_doctor.util.parse import isnum
from dl_doctor.host.devices import nvme_log_page
from dl_doctor.facts.contract import array, boolean, integer, map_of, number, obj, string
from dl_doctor.probes import ProbeContext, Unavailable, probe

EBS_MODEL = "Amazon Elastic Block Store"
INSTANCE_STORE_MODEL = "Amazon EC2 NVMe Instance Storage"
EBS_MAGIC = 0x3C23B510
STATS_FIELDS = ("total_read_ops", "total_write_ops", "total_read_bytes", "total_write_bytes", "total_read_time",
                "total_write_time", "ebs_volume_performance_exceeded_iops", "ebs_volume_performance_exceeded_tp",
                "ec2_instance_ebs_performance_exceeded_iops", "ec2_instance_ebs_performance_exceeded_tp",
                "volume_queue_length")
_DEV = re.compile(r"^nvme(\d+)n(\d+)$")


def parse_diskstats(text: str) -> Dict[str, Dict[str, int]]:
    """``/proc/diskstats`` -> {device: counters}; the first 11 fields after the name (kernel >= 2.6)."""
    out: Dict[str, Dict[str, int]] = {}
    names = ("reads", "reads_merged", "sectors_read", "ms_reading", "writes", "writes_merged", "sectors_written",
             "ms_writing", "in_flight", "ms_io", "weighted_ms")
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 14 or not all(isnum(p) for p in parts[3:14]):
            continue
        out[parts[2]] = dict(zip(names, (int(p) for p in parts[3:14])))
    return out


def rates(before: Dict[str, int], after: Dict[str, int], seconds: float) -> Dict[str, Optional[float]]:
    """IOPS, throughput and average queue depth between two /proc/diskstats readings."""
    if seconds <= 0:
        return {}
    d = {k: max(0, after[k] - before[k]) for k in before if k in after}
    return {
        "iops": round((d["reads"] + d["writes"]) / seconds, 1),
        "read_iops": round(d["reads"] / seconds, 1),
        "write_iops": round(d["writes"] / seconds, 1),
        "throughput_mibps": round((d["sectors_read"] + d["sectors_written"]) * 512 / seconds / 2 ** 20, 2),
        "avg_queue_depth": round(d["weighted_ms"] / (seconds * 1000), 2),
        "in_flight": after.get("in_flight"),
        "window_s": round(seconds, 3),
    }


def parse_ebs_stats_page(data: bytes) -> Optional[Dict[str, int]]:
    """The 4096-byte EBS statistics log page (vendor log 0xD0): magic, then eleven 64-bit counters."""
    if len(data) < 96:
        return None
    magic, = struct.unpack_from("<I", data, 0)
    if magic != EBS_MAGIC:
        return None
    values = struct.unpack_from("<11Q", data, 8)
    return dict(zip(STATS_FIELDS, values))


def volume_id(serial: str) -> Optional[str]:
    """The NVMe serial of an EBS volume is its ID without the hyphen (``vol0123...`` -> ``vol-0123...``)."""
    s = serial.strip()
    return f"vol-{s[3:]}" if s.startswith("vol") and not s.startswith("vol-") else (s or None)


def parse_volume_type_option(text: str) -> Dict[str, Any]:
    """``VOL=TYPE[:IOPS[:MBPS]]`` (``--ebs-volume-type``) -> {vol: {type, iops, throughput_mibps}}."""
    vol, sep, spec = text.partition("=")
    if not sep or not vol.strip() or not spec.strip():
        raise ValueError(f"--ebs-volume-type expects VOL=TYPE[:IOPS[:MBPS]], not {text!r}")
    parts = spec.split(":")
    out: Dict[str, Any] = {"type": parts[0].strip().lower()}
    if len(parts) > 1 and parts[1]:
        out["iops"] = int(parts[1])
    if len(parts) > 2 and parts[2]:
        out["throughput_mibps"] = float(parts[2])
    return {vol.strip(): out}


_EBS_STATS = {k: integer(m) for k, m in (
    ("total_read_ops", "read operations completed"), ("total_write_ops", "write operations completed"),
    ("total_read_bytes", "bytes read"), ("total_write_bytes", "bytes written"),
    ("total_read_time", "time spent reading (microseconds)"), ("total_write_time", "time spent writing (microseconds)"),
    ("ebs_volume_performance_exceeded_iops", "time the volume's I/O was over its provisioned IOPS (microseconds)"),
    ("ebs_volume_performance_exceeded_tp", "time over the volume's provisioned throughput (microseconds)"),
    ("ec2_instance_ebs_performance_exceeded_iops", "time over the instance's EBS IOPS limit (microseconds)"),
    ("ec2_instance_ebs_performance_exceeded_tp", "time over the instance's EBS throughput limit (microseconds)"))}
EBS_FACTS = obj(
    "EBS and instance-store volumes and their I/O",
    volumes=array(obj(
        "",
        device=string("the block device (nvme1n1)"),
        controller=string("its NVMe controller (nvme1)"),
        model=string("the NVMe model string"),
        kind=string("ebs, instance-store or other, from the model"),
        volume_id=string("the EBS volume id (vol-...) from the NVMe serial"),
        size_gib=number("its size in GiB"),
        partitions=array(string(), "its partitions (nvme1n1p1...)"),
        mounted=boolean("it or one of its partitions is mounted"),
        holders=array(string(), "what is built on it or its partitions (/sys/block/DEV/holders: md127, dm-0 for a "
                      "RAID or LVM volume)", since="0.2.0"),
        window=obj(
            "I/O over the sample window (/proc/diskstats; null: not sampled)",
            iops=number("operations per second"),
            read_iops=number("reads per second"),
            write_iops=number("writes per second"),
            throughput_mibps=number("MiB/s read and written"),
            avg_queue_depth=number("average queue depth"),
            in_flight=integer("I/Os in flight at the end"),
            window_s=number("the window's length in seconds"),
        ),
        ebs_stats=obj("the EBS detailed performance statistics log page (root only)",
                      dict(_EBS_STATS, volume_queue_length=integer("the volume's queue length now"))),
        ebs_stats_window=obj("how much each counter of ebs_stats grew over the window", _EBS_STATS),
        stats_error=string("why the statistics log page could not be read"),
    ), "each NVMe block device"),
    volume_types=map_of(obj(
        "",
        type=string("gp2, gp3, io1, io2, st1, sc1..."),
        iops=integer("provisioned IOPS"),
        throughput_mibps=number("provisioned throughput in MiB/s"),
    ), "volume id -> its type and provisioning, as given with --ebs-volume-type"),
    sampled=boolean("whether the I/O window was sampled (live, with EBS or instance-store volumes)"),
)


@probe("ebs", "EBS and instance-store NVMe volumes: IOPS, throughput and queue depth over a short window, and "
       "EBS's own statistics of time over the volume/instance limits",
       root_adds="the EBS detailed performance statistics (time each volume spent over its IOPS/throughput limit), "
                 "which need an NVMe admin command on /dev/nvmeN",
       timeout_option="ebs_timeout", provides=EBS_FACTS)
def ebs_probe(ctx: ProbeContext) -> Dict[str, Any]:
    host = ctx.host
    if not host.is_dir("/sys/block"):
        raise Unavailable("no /sys/block (an image that has not booted)")
    volumes: List[Dict[str, Any]] = []
    for dev in host.listdir("/sys/block"):
        m = _DEV.match(dev)
        if not m:
            continue
        model = (host.try_read(f"/sys/block/{dev}/device/model", 256) or "").strip()
        serial = (host.try_read(f"/sys/block/{dev}/device/serial", 256) or "").strip()
        kind = "ebs" if model == EBS_MODEL else "instance-store" if model == INSTANCE_STORE_MODEL else "other"
        sectors = (host.try_read(f"/sys/block/{dev}/size", 64) or "0").strip()
        volumes.append({"device": dev, "controller": f"nvme{m.group(1)}", "model": model or None, "kind": kind,
                        "volume_id": volume_id(serial) if kind == "ebs" else None,
                        "size_gib": round(int(sectors) * 512 / 2 ** 30, 1) if isnum(sectors) else None,
                        "partitions": [p for p in host.listdir(f"/sys/block/{dev}") if p.startswith(dev + "p")]})
        v = volumes[-1]
        v["holders"] = sorted({h for part in [""] + [f"/{p}" for p in v["partitions"]]
                               for h in host.listdir(f"/sys/block/{dev}{part}/holders")})
    stats_text = host.try_read("/proc/diskstats")
    window: Dict[str, Any] = {}
    denied = False
    pages_before: Dict[str, Optional[Dict[str, int]]] = {}
    if host.live and stats_text is not None and any(v["kind"] != "other" for v in volumes):
        seconds = float(ctx.options.get("sample_seconds") or 1.0)
        for v in volumes:
            if v["kind"] == "ebs":
                try:
                    pages_before[v["device"]] = parse_ebs_stats_page(nvme_log_page(host, f"/dev/{v['controller']}", 0xD0))
                except PermissionError:
                    denied = True
                except OSError as exc:
                    v["stats_error"] = str(exc)
        t0 = time.monotonic()
        before = parse_diskstats(stats_text)
        time.sleep(seconds)
        after_text = host.try_read("/proc/diskstats") or ""
        elapsed = time.monotonic() - t0
        after = parse_diskstats(after_text)
        for v in volumes:
            if v["device"] in before and v["device"] in after:
                window[v["device"]] = rates(before[v["device"]], after[v["device"]], elapsed)
            start = pages_before.get(v["device"])
            if start:
                try:
                    end = parse_ebs_stats_page(nvme_log_page(host, f"/dev/{v['controller']}", 0xD0))
                except OSError:
                    end = None
                v["ebs_stats"] = end or start
                if end:
                    v["ebs_stats_window"] = {k: end[k] - start[k] for k in STATS_FIELDS
                                             if k != "volume_queue_length"}
    if denied:
        ctx.denied("EBS detailed performance statistics (time over the volume's and the instance's IOPS/throughput "
                   "limits): the NVMe admin command needs root")
    for v in volumes:
        v["window"] = window.get(v["device"])
    mounts = host.try_read("/proc/self/mounts" if host.live else "/proc/mounts") or ""
    mounted = {line.split()[0].rsplit("/", 1)[-1] for line in mounts.splitlines() if line.startswith("/dev/")}
    for v in volumes:
        v["mounted"] = v["device"] in mounted or any(p in mounted for p in v["partitions"])
    overrides: Dict[str, Any] = {}
    for item in ctx.options.get("ebs_volume_types") or []:
        overrides.update(parse_volume_type_option(item))
    return {"volumes": volumes, "volume_types": overrides, "sampled": bool(window)}
