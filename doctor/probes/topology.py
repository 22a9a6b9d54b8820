"""The node's PCI topology (sysfs; works under --sysroot): for each NVIDIA GPU its NUMA node, its local CPUs and the
closest NIC or RDMA device, by the PCI paths in /sys/devices.

``/sys/bus/pci/devices/ADDR`` is a link into ``/sys/devices/pciDDDD:BB/<root port>/<bridges...>/ADDR``: two devices
whose paths share a bridge below the root (a PCIe switch, or one root port) reach each other without the CPU (what
NCCL calls PIX/PXB); sharing only the root complex is PHB; another root complex on the same NUMA node still crosses
the CPU; another NUMA node crosses the CPU interconnect (SYS).

Where a device sits comes from :mod:`dl_doctor.probes.pci`, which the links probe reads too.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from dl_doctor.facts.contract import Fact, array, boolean, integer, obj, string
from dl_doctor.probes import ProbeContext, probe
from dl_doctor.probes.pci import PCI_ADDRESS as _PCI_ADDRESS, PCI_DEVICES, class_device_address, pci_path

NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")  # VGA and 3D controllers (class >> 8)
MAX_PCI_DEVICES = 4096
MAX_NICS = 256
MAX_GPUS = 64
MAX_CPULIST = 1024
_CPULIST = re.compile(r"^[0-9]{1,5}(?:-[0-9]{1,5})?(?:,[0-9]{1,5}(?:-[0-9]{1,5})?){0,256}$")
CLOSENESS = ("pcie-switch", "root-complex", "numa-node", "other")  # best first


def _read(host: Any, path: str, limit: int = 64) -> Optional[str]:
    text = host.try_read(path, limit)
    return text.strip() if text is not None else None


def _numa(host: Any, address: str) -> Optional[int]:
    text = _read(host, f"{PCI_DEVICES}/{address}/numa_node", 16)
    if text is None or not re.match(r"^-?[0-9]{1,4}$", text):
        return None
    return int(text)


def closeness(a: Dict[str, Any], b: Dict[str, Any]) -> Optional[str]:
    """How close two devices are: a bridge in common below the root (pcie-switch), the root complex (root-complex),
    the NUMA node (numa-node), or none of those (other); None when a path is unknown."""
    pa, pb = a.get("pci_path"), b.get("pci_path")
    if not pa or not pb:
        return None
    common = 0
    for x, y in zip(pa[:-1], pb[:-1]):
        if x != y:
            break
        common += 1
    if common >= 2:
        return "pcie-switch"
    if common == 1:
        return "root-complex"
    na, nb = a.get("numa_node"), b.get("numa_node")
    if isinstance(na, int) and na >= 0 and na == nb:
        return "numa-node"
    return "other"


def _nics(host: Any) -> List[Dict[str, Any]]:
    """The PCI functions behind /sys/class/infiniband/* (RDMA: EFA, mlx5) and /sys/class/net/* (interfaces); one
    entry per PCI address, with its RDMA and interface names."""
    by_address: Dict[str, Dict[str, Any]] = {}
    for kind, cls in (("rdma", "/sys/class/infiniband"), ("net", "/sys/class/net")):
        try:
            names, _ = host.scan_names(cls, MAX_NICS)
        except PermissionError:
            continue
        for name in names:
            address = class_device_address(host, f"{cls}/{name}")
            if address is None:
                continue  # a virtual interface (lo, docker0, a bridge): no PCI function
            entry = by_address.get(address)
            if entry is None:
                if len(by_address) >= MAX_NICS:
                    continue
                entry = by_address[address] = {"address": address, "rdma": [], "net": [],
                                               "numa_node": _numa(host, address),
                                               "pci_path": pci_path(host, address)}
            entry[kind].append(name[:64])
    return [by_address[a] for a in sorted(by_address)]


def _gpus(host: Any) -> List[Dict[str, Any]]:
    try:
        names, _ = host.scan_names(PCI_DEVICES, MAX_PCI_DEVICES)
    except PermissionError:
        return []
    out: List[Dict[str, Any]] = []
    for address in names:
        if not _PCI_ADDRESS.match(address):
            continue
        if _read(host, f"{PCI_DEVICES}/{address}/vendor", 16) != NVIDIA_VENDOR:
            continue
        cls = _read(host, f"{PCI_DEVICES}/{address}/class", 16) or ""
        if cls[:6] not in GPU_CLASSES:
            continue
        cpus = _read(host, f"{PCI_DEVICES}/{address}/local_cpulist", MAX_CPULIST)
        out.append({"address": address, "numa_node": _numa(host, address),
                    "local_cpulist": cpus if cpus and _CPULIST.match(cpus) else None,
                    "pci_path": pci_path(host, address)})
        if len(out) >= MAX_GPUS:
            break
    return out


def _closest(gpu: Dict[str, Any], nics: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The NIC closest to a GPU: the best closeness, RDMA devices before plain interfaces, then the lowest address."""
    ranked: List[Tuple[int, int, str, Dict[str, Any], str]] = []
    for nic in nics:
        how = closeness(gpu, nic)
        if how is None:
            continue
        ranked.append((CLOSENESS.index(how), 0 if nic["rdma"] else 1, nic["address"], nic, how))
    if not ranked:
        return None
    _, _, _, nic, how = min(ranked, key=lambda r: r[:3])
    return {"address": nic["address"], "name": (nic["rdma"] or nic["net"])[0], "rdma": bool(nic["rdma"]),
            "closeness": how}


def collect_topology(host: Any) -> Dict[str, Any]:
    nics = _nics(host)
    gpus = _gpus(host)
    for gpu in gpus:
        gpu["closest_nic"] = _closest(gpu, nics)
        gpu["closest_rdma"] = _closest(gpu, [n for n in nics if n["rdma"]])
    for item in gpus + nics:
        item["pci_path"] = "/".join(item["pci_path"]) if item["pci_path"] else None
    return {"gpus": gpus, "nics": nics}


def _nic(meaning: str) -> Fact:
    return obj(
        meaning,
        address=string("its PCI address (0000:10:1c.0)"),
        name=string("its RDMA device name (efa_0, mlx5_0), else its interface name"),
        rdma=boolean("an RDMA device (/sys/class/infiniband), not an interface only"),
        closeness=string("pcie-switch (a bridge in common below the root: NCCL's PIX/PXB), root-complex (PHB), "
                         "numa-node (another root complex on the same NUMA node), other (another NUMA node: SYS)"),
    )


TOPOLOGY_FACTS = obj(
    "The PCI topology: each NVIDIA GPU's NUMA node, local CPUs and closest NIC (sysfs)",
    gpus=array(obj(
        "",
        address=string("its PCI address"),
        numa_node=integer("its NUMA node (-1: the platform reports none)", range=(-1, 4096)),
        local_cpulist=string("the CPUs local to it (local_cpulist: 0-47,96-143)"),
        pci_path=string("its path below /sys/devices (pci0000:00/0000:00:01.0/.../ADDR)"),
        closest_nic=_nic("the NIC (RDMA device or interface) closest to it on the PCI bus; null when none"),
        closest_rdma=_nic("the RDMA device (EFA, InfiniBand, RoCE) closest to it on the PCI bus; null when none"),
    ), "one entry per NVIDIA GPU on the PCI bus (at most 64)"),
    nics=array(obj(
        "",
        address=string("its PCI address"),
        rdma=array(string(), "its RDMA device names (/sys/class/infiniband)"),
        net=array(string(), "its interface names (/sys/class/net)"),
        numa_node=integer("its NUMA node (-1: none)", range=(-1, 4096)),
        pci_path=string("its path below /sys/devices"),
    ), "one entry per PCI function behind an RDMA device or a network interface (at most 256)"),
    since="0.2.0",
)


@probe("topology", "The PCI topology: each GPU's NUMA node, local CPUs and closest NIC or RDMA device (sysfs)",
       provides=TOPOLOGY_FACTS)
def topology_probe(ctx: ProbeContext) -> Dict[str, Any]:
    return collect_topology(ctx.host)
