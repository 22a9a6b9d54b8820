"""Where a PCI function sits in the device tree (sysfs; works under --sysroot), for every probe that asks.

``/sys/bus/pci/devices/ADDR`` is a link into ``/sys/devices/.../pciDDDD:BB/<root port>/<bridges...>/ADDR``. On bare
metal and most hypervisors the host bridge ``pciDDDD:BB`` sits right below /sys/devices; under Hyper-V (Azure) it
sits below the VMBus device (``/sys/devices/LNXSYSTM:00/.../VMBUS:00/<guid>/pci7870:00/7870:00:00.0``). The path is
read from the last host bridge down, and only where every component below it is a PCI address ending at ADDR.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any, List, Optional

PCI_DEVICES = "/sys/bus/pci/devices"
MAX_DEPTH = 16          # bridges between a host bridge and a device: real trees have 2-6
PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
HOST_BRIDGE = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
MAX_COMPONENTS = 64     # of the resolved path looked at (a real one has under 20)


def pci_path(host: Any, address: str) -> Optional[List[str]]:
    """The host bridge and the PCI addresses down to ``address`` (``["pci0000:00", "0000:00:01.0", ADDR]``), or
    None when its link does not land on such a path (resolution is bounded: the host's symlink hop limit)."""
    if not PCI_ADDRESS.match(address):
        return None
    try:
        real = host.tree_path(f"{PCI_DEVICES}/{address}")
    except (OSError, ValueError):
        return None
    parts = [p for p in real.split("/") if p][-MAX_COMPONENTS:]
    roots = [i for i, p in enumerate(parts) if HOST_BRIDGE.match(p)]
    if not roots:
        return None
    below = parts[roots[-1]:]
    if len(below) < 2 or len(below) > MAX_DEPTH + 2 or below[-1] != address \
            or not all(PCI_ADDRESS.match(p) for p in below[1:]):
        return None
    return below


def pci_chain(host: Any, address: str) -> Optional[List[str]]:
    """The PCI addresses from the root port down to ``address`` (inclusive); None where the path is unknown."""
    path = pci_path(host, address)
    return path[1:] if path else None


def class_device_address(host: Any, path: str) -> Optional[str]:
    """The PCI address a class device (``/sys/class/infiniband/mlx5_0``, ``/sys/class/net/ens32``) sits on, from its
    ``device`` link; None for a virtual one (lo, a bridge) or one whose link does not name a PCI function."""
    link = host.readlink(f"{path}/device")
    address = posixpath.basename(link.rstrip("/")) if link else ""
    return address if PCI_ADDRESS.match(address) else None
