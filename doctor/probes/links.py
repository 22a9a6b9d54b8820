"""The links a multi-GPU, multi-node job runs over, from sysfs (so it works on a captured tree too): every RDMA port
(InfiniBand, RoCE, EFA) with its state, rate and error counters; the PCIe link of each GPU and network device
against its maximum, and their AER counters; and PCIe ACS on the bridges between peers that talk peer to peer.

The kernel's formats (drivers/infiniband/core/sysfs.c, drivers/pci/pci-sysfs.c, drivers/pci/pcie/aer.c):

- ``ports/N/state`` ``4: ACTIVE``, ``phys_state`` ``5: LinkUp``, ``rate`` ``100 Gb/sec (4X EDR)``, ``link_layer``
  ``InfiniBand`` or ``Ethernet``, ``counters/NAME`` one decimal number;
- ``current_link_speed`` ``16.0 GT/s PCIe`` (``Unknown`` where the kernel cannot say), ``current_link_width`` ``16``;
- ``aer_dev_fatal`` lines ``NAME COUNT`` ending with ``TOTAL_ERR_FATAL COUNT`` (likewise ``_nonfatal``, ``_correctable``
  with ``TOTAL_ERR_COR``).

ACS is not in sysfs: it is read from the bridge's extended configuration space (``config``, which only root can read
past its first 64 bytes). Where that cannot be read, ACS is unknown.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from dl_doctor.facts.contract import array, boolean, integer, map_of, number, obj, string
from dl_doctor.probes import ProbeContext, probe
from dl_doctor.probes.pci import PCI_ADDRESS as _BDF, PCI_DEVICES as PCI, class_device_address, pci_chain
from dl_doctor.util.parse import ascii_int

IB = "/sys/class/infiniband"
MAX_DEVICES = 512         # PCI functions looked at (a large HGX node has ~300)
MAX_RDMA = 128            # RDMA devices (a p5 has 32 EFA devices)
MAX_PORTS = 8             # ports per RDMA device
MAX_COUNTERS = 48         # counter files per port
COUNTER_MAX = (1 << 64) - 1
# the IB port counters of drivers/infiniband/core/sysfs.c that count errors (the rest count traffic)
ERROR_COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
                  "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_discards",
                  "port_xmit_constraint_errors", "port_rcv_constraint_errors", "local_link_integrity_errors",
                  "excessive_buffer_overrun_errors", "VL15_dropped")
_STATE = re.compile(r"^\s{0,8}(\d{1,3})\s{0,8}:\s{0,8}([A-Za-z_]{1,32})")
_RATE = re.compile(r"^\s{0,8}(\d{1,6}(?:\.\d{1,3})?)\s{0,8}Gb/sec(?:\s{0,8}\(([^)\n]{1,40})\))?")
_SPEED = re.compile(r"^\s{0,8}(\d{1,3}(?:\.\d{1,3})?)\s{0,8}GT/s")
_AER_LINE = re.compile(r"^([A-Za-z][A-Za-z0-9_]{0,40})\s{1,8}(\d{1,20})\s*$")
ACS_CAP_ID = 0x000D
ACS_SOURCE_VALIDATION, ACS_REQUEST_REDIRECT, ACS_COMPLETION_REDIRECT, ACS_EGRESS_CONTROL = 0x01, 0x04, 0x08, 0x20


def parse_state(text: Optional[str]) -> Tuple[Optional[int], Optional[str]]:
    """``4: ACTIVE`` -> (4, "ACTIVE")."""
    m = _STATE.match(text or "")
    return (int(m.group(1)), m.group(2)) if m else (None, None)


def parse_rate(text: Optional[str]) -> Tuple[Optional[float], Optional[str]]:
    """``100 Gb/sec (4X EDR)`` -> (100.0, "4X EDR")."""
    m = _RATE.match(text or "")
    return (float(m.group(1)), m.group(2)) if m else (None, None)


def parse_speed(text: Optional[str]) -> Optional[float]:
    """``16.0 GT/s PCIe`` -> 16.0; ``Unknown`` -> None."""
    m = _SPEED.match(text or "")
    return float(m.group(1)) if m else None


def parse_aer(text: Optional[str]) -> Optional[Dict[str, Any]]:
    """An ``aer_dev_*`` file: ``{"total": N, "nonzero": {NAME: COUNT}}`` (TOTAL_ERR_* is the total)."""
    if text is None:
        return None
    total: Optional[int] = None
    nonzero: Dict[str, int] = {}
    for line in text.splitlines()[:64]:
        m = _AER_LINE.match(line.strip())
        if not m:
            continue
        value = min(int(m.group(2)), COUNTER_MAX)
        if m.group(1).startswith("TOTAL_ERR"):
            total = value
        elif value and len(nonzero) < 32:
            nonzero[m.group(1)] = value
    if total is None and not nonzero:
        return None
    return {"total": total if total is not None else sum(nonzero.values()), "nonzero": nonzero}


def acs_control(config: bytes) -> Optional[int]:
    """The ACS Control register of a function's extended configuration space (PCIe base spec, 7.7.8), or None when
    the space was not read whole (the first 256 bytes are all an unprivileged read returns) or has no ACS."""
    if len(config) < 0x104:
        return None
    offset, hops = 0x100, 0
    while 0x100 <= offset <= len(config) - 8 and hops < 64:
        header = int.from_bytes(config[offset:offset + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == ACS_CAP_ID:
            return int.from_bytes(config[offset + 6:offset + 8], "little")
        offset, hops = (header >> 20) & 0xFFC, hops + 1
    return None


def _kind(pci_class: str, vendor: str) -> Optional[str]:
    if vendor == "10de" and pci_class.startswith(("0300", "0302")):
        return "gpu"
    if pci_class.startswith(("0200", "0207")):
        return "nic"
    return None


def _hex(text: Optional[str]) -> str:
    value = (text or "").strip().lower()
    return value[2:] if value.startswith("0x") else value


def _rdma_ports(host: Any) -> List[Dict[str, Any]]:
    ports: List[Dict[str, Any]] = []
    for dev in sorted(host.listdir(IB))[:MAX_RDMA]:
        driver = host.readlink(f"{IB}/{dev}/device/driver")
        parent = class_device_address(host, f"{IB}/{dev}")
        for port in sorted(host.listdir(f"{IB}/{dev}/ports"), key=lambda p: (len(p), p))[:MAX_PORTS]:
            if not port.isdigit():
                continue
            base = f"{IB}/{dev}/ports/{port}"
            code, state = parse_state(host.try_read(f"{base}/state", 64))
            phys_code, phys = parse_state(host.try_read(f"{base}/phys_state", 64))
            gbps, label = parse_rate(host.try_read(f"{base}/rate", 128))
            layer = (host.try_read(f"{base}/link_layer", 64) or "").strip()[:32] or None
            counters: Dict[str, int] = {}
            for name in sorted(host.listdir(f"{base}/counters"))[:MAX_COUNTERS * 4]:
                if name in ERROR_COUNTERS and len(counters) < MAX_COUNTERS:
                    value = ascii_int(host.try_read(f"{base}/counters/{name}", 64))
                    if value is not None:
                        counters[name] = min(value, COUNTER_MAX)
            ports.append({"device": dev[:64], "port": int(port), "driver": driver.rsplit("/", 1)[-1][:64] if driver else None,
                          "bdf": parent, "state": state, "state_code": code, "phys_state": phys,
                          "phys_state_code": phys_code, "rate_gbps": gbps, "rate": label, "link_layer": layer,
                          "counters": counters if host.is_dir(f"{base}/counters") else None})
    return ports


def _pci_devices(host: Any, rdma_bdfs: set) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    for bdf in sorted(host.listdir(PCI))[:MAX_DEVICES]:
        if not _BDF.match(bdf):
            continue
        base = f"{PCI}/{bdf}"
        kind = _kind(_hex(host.try_read(f"{base}/class", 64)), _hex(host.try_read(f"{base}/vendor", 64)))
        if kind is None and bdf in rdma_bdfs:
            kind = "nic"  # an RDMA function of another class (EFA is 0x0200 too; some HCAs are 0x0c06 or 0x0280)
        if kind is None:
            continue
        aer = {name: parse_aer(host.try_read(f"{base}/aer_dev_{name}", 4096))
               for name in ("fatal", "nonfatal", "correctable")}
        chain = pci_chain(host, bdf)
        up = f"{PCI}/{chain[-2]}" if chain and len(chain) > 1 else None
        out.append({
            "bdf": bdf, "kind": kind, "rdma": bdf in rdma_bdfs,
            "vendor_id": _hex(host.try_read(f"{base}/vendor", 64))[:8] or None,
            "device_id": _hex(host.try_read(f"{base}/device", 64))[:8] or None,
            "speed_gts": parse_speed(host.try_read(f"{base}/current_link_speed", 64)),
            "max_speed_gts": parse_speed(host.try_read(f"{base}/max_link_speed", 64)),
            "width": ascii_int(host.try_read(f"{base}/current_link_width", 64)),
            "max_width": ascii_int(host.try_read(f"{base}/max_link_width", 64)),
            "upstream": chain[-2] if up and chain else None,
            "upstream_max_speed_gts": parse_speed(host.try_read(f"{up}/max_link_speed", 64)) if up else None,
            "upstream_max_width": ascii_int(host.try_read(f"{up}/max_link_width", 64)) if up else None,
            "aer": aer if any(v is not None for v in aer.values()) else None,
            "chain": chain,
        })
    return out


def _acs(host: Any, devices: List[Dict[str, Any]]) -> Tuple[List[Dict[str, Any]], Optional[bool]]:
    """ACS on the downstream ports below the deepest bridge two peers share (where a redirect sends their
    peer-to-peer traffic up to the root complex). Peers: the GPUs and the RDMA devices."""
    peers = [d for d in devices if (d["kind"] == "gpu" or d["rdma"]) and d.get("chain")]
    ports: Dict[str, List[str]] = {}
    for i, a in enumerate(peers):
        for b in peers[i + 1:]:
            ca, cb = a["chain"], b["chain"]
            common = 0
            while common < min(len(ca), len(cb)) and ca[common] == cb[common]:
                common += 1
            if common == 0:
                continue  # under different root ports: their traffic crosses the root complex whatever ACS says
            for chain, other in ((ca, b["bdf"]), (cb, a["bdf"])):
                if common < len(chain) - 1:  # a bridge of this side below the shared one
                    ports.setdefault(chain[common], [])
                    name = chain[-1]
                    if name not in ports[chain[common]]:
                        ports[chain[common]].append(name)
    out: List[Dict[str, Any]] = []
    known: Optional[bool] = None
    for bridge in sorted(ports)[:64]:
        try:
            config = host.read_bytes(f"{PCI}/{bridge}/config", 4096)
        except OSError:
            config = b""
        control = acs_control(config)
        readable = len(config) >= 0x104
        known = (known or False) or readable
        out.append({"bridge": bridge, "below": sorted(ports[bridge])[:16], "read": readable,
                    "control": control,
                    "redirect": None if control is None else bool(
                        control & (ACS_REQUEST_REDIRECT | ACS_COMPLETION_REDIRECT | ACS_EGRESS_CONTROL)),
                    "source_validation": None if control is None else bool(control & ACS_SOURCE_VALIDATION)})
    return out, known


LINKS_FACTS = obj(
    "RDMA ports, PCIe links and AER counters of GPUs and network devices, and ACS between peers (sysfs)",
    rdma_ports=array(obj(
        "",
        device=string("the RDMA device (/sys/class/infiniband/NAME)"),
        port=integer("the port number", range=(0, 255)),
        driver=string("the device's bound driver (mlx5_core, efa...)"),
        bdf=string("the PCI address the device sits on"),
        state=string("the port's logical state: ACTIVE, DOWN, INIT, ARMED"),
        state_code=integer("the state's number (4 = ACTIVE)", range=(0, 255)),
        phys_state=string("the physical state: LinkUp, Polling, Disabled..."),
        phys_state_code=integer("its number (5 = LinkUp)", range=(0, 255)),
        rate_gbps=number("the port's rate in Gb/s"),
        rate=string("the rate's width and speed label (4X EDR, 4X NDR)"),
        link_layer=string("InfiniBand or Ethernet (RoCE); EFA reports Unspecified"),
        counters=map_of(integer("the count (since the port was last cleared, at the latest its driver's load)"),
                        "the port's error counters (symbol_error, link_downed, port_rcv_errors...); null: the port "
                        "has no counters directory (EFA)"),
    ), "every port of every RDMA device", since="0.2.0"),
    pci=array(obj(
        "",
        bdf=string("the PCI address"),
        kind=string("gpu or nic"),
        rdma=boolean("an RDMA device (InfiniBand, RoCE, EFA) sits on it"),
        vendor_id=string("the PCI vendor id, hexadecimal"),
        device_id=string("the PCI device id, hexadecimal"),
        speed_gts=number("the link's current speed in GT/s per lane (16.0 = PCIe 4.0)"),
        max_speed_gts=number("the fastest speed the device supports"),
        width=integer("the current link width in lanes", range=(0, 64)),
        max_width=integer("the widest link the device supports", range=(0, 64)),
        upstream=string("the bridge (port) above it: the link's other end (null: none in the tree, as under "
                        "many hypervisors)"),
        upstream_max_speed_gts=number("the fastest speed that port supports"),
        upstream_max_width=integer("the widest link that port supports", range=(0, 64)),
        aer=obj(
            "the kernel's AER counters since boot (aer_dev_*; null: AER is not reported for it)",
            fatal=obj("uncorrectable fatal errors", total=integer("their count"),
                      nonzero=map_of(integer("count"), "the error types that counted")),
            nonfatal=obj("uncorrectable non-fatal errors", total=integer("their count"),
                         nonzero=map_of(integer("count"), "the error types that counted")),
            correctable=obj("correctable errors", total=integer("their count"),
                            nonzero=map_of(integer("count"), "the error types that counted")),
        ),
        chain=array(string(), "the PCI addresses from the root port down to it (null: not known)"),
    ), "the PCIe link of each GPU and network device", since="0.2.0"),
    acs=array(obj(
        "",
        bridge=string("the downstream port's PCI address"),
        below=array(string(), "the peers below it"),
        read=boolean("its extended configuration space could be read (root only)"),
        control=integer("the ACS Control register (null: no ACS capability, or not read)"),
        redirect=boolean("P2P request/completion redirect or egress control is on (null: not known)"),
        source_validation=boolean("ACS source validation is on"),
    ), "ACS on the bridges between peers (GPUs, RDMA devices) under one PCIe switch", since="0.2.0"),
    acs_known=boolean("at least one such bridge's configuration space could be read (null: no bridge between "
                      "peers)", since="0.2.0"),
    uptime_s=number("seconds since boot (/proc/uptime; null: not known): the time the AER counters cover",
                    since="0.2.0"),
)


@probe("links", "RDMA ports (state, rate, error counters), PCIe links and AER of GPUs and NICs, ACS between peers",
       root_adds="ACS on PCIe bridges (their extended configuration space)", provides=LINKS_FACTS)
def links_probe(ctx: ProbeContext) -> Dict[str, Any]:
    host = ctx.host
    ports = _rdma_ports(host)
    rdma_bdfs = {p["bdf"] for p in ports if p.get("bdf")}
    devices = _pci_devices(host, rdma_bdfs)
    acs, known = _acs(host, devices)
    uptime_text = (host.try_read("/proc/uptime", 128) or "").split()
    try:
        uptime: Optional[float] = float(uptime_text[0]) if uptime_text and len(uptime_text[0]) < 20 else None
    except ValueError:
        uptime = None
    return {"rdma_ports": ports, "pci": devices, "acs": acs, "acs_known": known, "uptime_s": uptime}
