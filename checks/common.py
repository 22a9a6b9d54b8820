"""Helpers shared by the built-in checks (pure functions of facts)."""

from __future__ import annotations

import re
from typing import Optional

from doctor.model import Facts
from doctor.units import GIB, MIB, human_bytes  # noqa: F401 - re-exported for checks


def os_family(facts: Facts) -> Optional[str]:
    """``rhel`` (RHEL, Rocky, Alma, CentOS, Fedora), ``amzn``, ``debian`` (Debian, Ubuntu), ``suse`` or None."""
    ids = [facts.get("os.id") or ""] + list(facts.get("os.id_like") or [])
    ids = [i.lower() for i in ids if i]
    if "amzn" in ids:
        return "amzn"
    if any(i in ("rhel", "centos", "fedora", "rocky", "almalinux", "ol") for i in ids):
        return "rhel"
    if any(i in ("debian", "ubuntu") for i in ids):
        return "debian"
    if any("suse" in i for i in ids):
        return "suse"
    if facts.get("os.redhat_release"):
        return "rhel"
    return None


def container_kind(facts: Facts) -> Optional[str]:
    return facts.get("system.container.kind")


def needs_nvidia_gpu(facts: Facts) -> Optional[str]:
    """Precondition of GPU checks: skip with a clear reason on a host without NVIDIA GPUs."""
    if facts.get("gpu_pci.gpu_count") == 0:
        return "no NVIDIA GPU on the PCI bus: GPU checks do not apply to this host"
    return None


def grow_partition_commands(device: Optional[str], mountpoint: str, fstype: Optional[str]) -> list:
    """Commands that grow a partition and its filesystem after the volume was enlarged."""
    part = None
    if device:
        m = re.match(r"^(/dev/nvme\d+n\d+)p(\d+)$", device) or re.match(r"^(/dev/(?:xv|s|v)d[a-z]+)(\d+)$", device)
        if m:
            part = (m.group(1), m.group(2))
    cmds = []
    if part:
        cmds.append(f"sudo growpart {part[0]} {part[1]}")
    if fstype == "xfs":
        cmds.append(f"sudo xfs_growfs -d {mountpoint}")
    elif fstype in ("ext4", "ext3", "ext2") and device:
        cmds.append(f"sudo resize2fs {device}")
    return cmds
