"""Mounts, /dev/shm and free space."""

from __future__ import annotations

import posixpath
import re
from typing import Any, Dict, List, Optional, Tuple

from dl_doctor.facts.contract import array, boolean, integer, map_of, number, obj, string
from dl_doctor.probes import ProbeContext, Unavailable, probe
from dl_doctor.probes.system import parse_meminfo

_OCTAL = re.compile(r"\\([0-7]{3})")
_SIZE = re.compile(r"^([0-9]{1,20})([kKmMgGtT%]?)$")
_UNITS = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3, "t": 1024 ** 4}


def _unescape(field: str) -> str:
    """``/proc/mounts`` escapes space, tab, newline and backslash as octal (``\\040``)."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mounts(text: str) -> List[Dict[str, Any]]:
    """Parse ``/proc/mounts`` (fstab format); malformed lines are skipped."""
    entries = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        entries.append({
            "device": _unescape(fields[0]),
            "mountpoint": _unescape(fields[1]),
            "fstype": fields[2],
            "options": fields[3].split(","),
        })
    return entries


def tmpfs_size_option(options: List[str], mem_total: Optional[int]) -> Optional[int]:
    """The ``size=`` of a tmpfs mount in bytes (``65536k``, ``1g``, ``50%``)."""
    for opt in options:
        if opt.startswith("size="):
            m = _SIZE.match(opt[5:])
            if not m:
                return None
            number, unit = int(m.group(1)), m.group(2)
            if unit == "%":
                return number * mem_total // 100 if mem_total else None
            return number * _UNITS[unit.lower()]
    return None


def mount_for(path: str, entries: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The mount entry that holds ``path`` (the longest mountpoint prefix; last one wins)."""
    best = None
    for entry in entries:
        mp = entry["mountpoint"]
        if path == mp or path.startswith(mp.rstrip("/") + "/"):
            if best is None or len(mp) >= len(best["mountpoint"]):
                best = entry
    return best


MOUNTS_FACTS = obj(
    "/proc/mounts, with /dev/shm",
    entries=array(obj(
        "",
        device=string("the mounted device or source (octal escapes undone)"),
        mountpoint=string("where it is mounted"),
        fstype=string("the filesystem type"),
        options=array(string(), "the mount options"),
    ), "one entry per line of /proc/self/mounts (live) or the tree's /proc/mounts"),
    shm=obj(
        "/dev/shm, where NCCL and DataLoader workers share memory",
        path=string("/dev/shm"),
        mounted=boolean("something is mounted on /dev/shm"),
        fstype=string("its filesystem type"),
        options=array(string(), "its mount options"),
        device=string("its device"),
        size_bytes=integer("its size: statvfs (live), its size= option, or half of RAM for a tmpfs without one"),
        size_source=string("where size_bytes came from: statvfs, mount options, tmpfs default (half of RAM)"),
        free_bytes=integer("free bytes in it (statvfs, live only)"),
    ),
)


@probe("mounts", "mounted filesystems and the /dev/shm size", provides=MOUNTS_FACTS)
def mounts_probe(ctx: ProbeContext) -> Dict[str, Any]:
    host = ctx.host
    text = host.try_read("/proc/self/mounts") if host.live else None
    if text is None:
        text = host.try_read("/proc/mounts")
    if text is None:
        raise Unavailable("no /proc/mounts (an image that has not booted has an empty /proc)")
    entries = parse_mounts(text)
    meminfo = host.try_read("/proc/meminfo")
    mem_total = parse_meminfo(meminfo).get("MemTotal") if meminfo else None

    shm_entry = next((e for e in reversed(entries) if e["mountpoint"] == "/dev/shm"), None)
    shm: Dict[str, Any] = {"mounted": shm_entry is not None, "path": "/dev/shm"}
    if shm_entry:
        shm.update(fstype=shm_entry["fstype"], options=shm_entry["options"], device=shm_entry["device"])
        size = tmpfs_size_option(shm_entry["options"], mem_total)
        source = "mount options"
        if host.live:
            try:
                st = host.statvfs("/dev/shm")
                size, source = st.f_blocks * st.f_frsize, "statvfs"
                shm["free_bytes"] = st.f_bavail * st.f_frsize
            except OSError:
                pass
        elif size is None and shm_entry["fstype"] == "tmpfs" and mem_total:
            # tmpfs without size= gets half of RAM
            size, source = mem_total // 2, "tmpfs default (half of RAM)"
        shm["size_bytes"] = size
        shm["size_source"] = source if size is not None else None
    return {"entries": entries, "shm": shm}


PSEUDO_FS = {"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "securityfs", "debugfs", "tracefs",
             "pstore", "bpf", "mqueue", "hugetlbfs", "configfs", "fusectl", "autofs", "binfmt_misc", "rpc_pipefs",
             "nsfs", "efivarfs", "selinuxfs", "squashfs", "overlay", "tmpfs", "ramfs"}
NETWORK_FS = {"nfs", "nfs4", "lustre", "efs", "fuse.s3fs", "fuse.mountpoint-s3", "cifs", "smb3", "fuse.gcsfuse"}


def _targets(ctx: ProbeContext) -> List[Tuple[str, str]]:
    """(path, role): the system locations and where the common caches live (or would be created)."""
    env = ctx.host.environ()
    home = env.get("HOME") if (env.get("HOME") or "").startswith("/") else None
    out = [("/", "root")]
    if home:
        out.append((home, "home"))
    out += [("/tmp", "tmp"), ("/var/tmp", "var-tmp")]
    caches = {
        "cache:huggingface": env.get("HF_HOME") or (env.get("XDG_CACHE_HOME") or (f"{home}/.cache" if home else "")) + "/huggingface",
        "cache:torch": env.get("TORCH_HOME") or (f"{home}/.cache/torch" if home else ""),
        "cache:pip": env.get("PIP_CACHE_DIR") or (f"{home}/.cache/pip" if home else ""),
        "cache:conda-pkgs": (env.get("CONDA_PKGS_DIRS") or "").split(",")[0] or next(
            (p for p in ["/opt/conda/pkgs"] + ([f"{home}/anaconda3/pkgs", f"{home}/miniconda3/pkgs"] if home else [])
             if ctx.host.is_dir(p)), ""),
    }
    for role, path in caches.items():
        if path and path.startswith("/") and not path.startswith("/huggingface"):
            out.append((path, role))
    return out


def _existing(host, path: str) -> str:
    """The path itself or its nearest existing parent (where a cache would be created)."""
    while path != "/" and not host.exists(path):
        path = posixpath.dirname(path)
    return path


DISKS_FACTS = obj(
    "free space and inodes on /, home, /tmp, /var/tmp, the cache directories and the data mounts",
    volumes=array(obj(
        "",
        paths=array(string(), "the locations looked at on this volume (/, home, a cache directory...)"),
        roles=array(string(), "what they are: root, home, tmp, var-tmp, cache:huggingface, cache:torch, cache:pip, "
                              "cache:conda-pkgs, mount"),
        mountpoint=string("the volume's mount point (null: not in /proc/self/mounts)"),
        fstype=string("its filesystem type"),
        device=string("its device"),
        network=boolean("a network filesystem (NFS, Lustre, EFS, s3 and gcs FUSE, SMB)"),
        total_bytes=integer("its size in bytes (statvfs)"),
        free_bytes=integer("bytes available to unprivileged users"),
        used_pct=number("percent used", range=(0, 100)),
        inodes_total=integer("inodes in all"),
        inodes_free=integer("inodes available to unprivileged users"),
        measured=string("live, or filesystem holding the sysroot tree (under --sysroot)"),
    ), "each mounted volume: size, free space, inodes, roles"),
    errors=map_of(string("the error"), "path -> why statvfs failed on it"),
)


@probe("disks", "free space and inodes on /, home, /tmp, /var/tmp, the cache directories and the data mounts",
       provides=DISKS_FACTS)
def disks_probe(ctx: ProbeContext) -> Dict[str, Any]:
    host = ctx.host
    # Under a sysroot, statvfs measures the filesystem holding the tree, so the
    # tree's own /proc/mounts (another machine's) would describe something else.
    mounts_text = host.try_read("/proc/self/mounts") if host.live else None
    entries = parse_mounts(mounts_text) if mounts_text else []
    targets = _targets(ctx)
    for e in entries:
        if e["fstype"] not in PSEUDO_FS and (e["device"].startswith("/dev/") or e["fstype"] in NETWORK_FS) \
                and not e["mountpoint"].startswith(("/boot", "/snap", "/var/lib/docker", "/etc/", "/proc", "/sys")) \
                and e["mountpoint"] not in ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf"):
            targets.append((e["mountpoint"], "mount"))
    volumes: List[Dict[str, Any]] = []
    errors: Dict[str, str] = {}
    for path, role in targets:
        real = _existing(host, path)
        try:
            st = host.statvfs(real)
        except OSError as exc:
            errors[path] = f"{type(exc).__name__}: {exc}"
            continue
        entry = mount_for(real, entries)
        mountpoint = entry["mountpoint"] if entry else None
        key = mountpoint or (f"dev:{host.stat(real).st_dev}" if host.live else "/")
        existing = next((v for v in volumes if v["_key"] == key), None)
        if existing:
            if role not in existing["roles"]:
                existing["roles"].append(role)
            if path not in existing["paths"] and role != "mount":
                existing["paths"].append(path)
            continue
        total = st.f_blocks * st.f_frsize
        free = st.f_bavail * st.f_frsize
        volumes.append({
            "_key": key, "paths": [path], "roles": [role], "mountpoint": mountpoint,
            "fstype": entry["fstype"] if entry else None, "device": entry["device"] if entry else None,
            "network": (entry["fstype"] in NETWORK_FS) if entry else None,
            "total_bytes": total, "free_bytes": free,
            "used_pct": round(100.0 * (total - free) / total, 1) if total else None,
            "inodes_total": st.f_files, "inodes_free": st.f_favail,
            "measured": "live" if host.live else "filesystem holding the sysroot tree",
        })
    for v in volumes:
        del v["_key"]
    return {"volumes": volumes, "errors": errors}
