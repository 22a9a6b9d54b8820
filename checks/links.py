"""The links under a multi-GPU, multi-node job, from sysfs (the ``links`` probe): RDMA ports (InfiniBand, RoCE, EFA)
down, slower than their peers or counting errors; PCIe links of network devices (and of GPUs NVML does not report)
trained narrower or slower than both ends support; AER errors; ACS redirecting peer-to-peer traffic."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from dl_doctor.model import Facts, Fix, Result, check, fail, passed, skip, warn

ACTIVE, LINK_UP = 4, 5
EFA_DRIVERS = ("efa",)


def _ports(facts: Facts) -> List[Dict[str, Any]]:
    return [p for p in facts.get("links.rdma_ports") or [] if isinstance(p, dict)]


def needs_rdma_ports(facts: Facts) -> Optional[str]:
    if not facts.has("links"):
        return None  # the engine explains missing facts
    return None if _ports(facts) else "no RDMA device (InfiniBand, RoCE, EFA) on this host"


def needs_pci_links(facts: Facts) -> Optional[str]:
    if not facts.has("links"):
        return None
    return None if facts.get("links.pci") else "no GPU or network device with a PCIe link in sysfs"


def _name(p: Dict[str, Any]) -> str:
    return f"{p.get('device')} port {p.get('port')}"


def _is_efa(p: Dict[str, Any]) -> bool:
    return p.get("driver") in EFA_DRIVERS or str(p.get("device") or "").startswith(("efa", "rdmap"))


def _kind(p: Dict[str, Any]) -> str:
    """What a port is compared with: EFA with EFA, InfiniBand with InfiniBand, RoCE with RoCE (per driver)."""
    if _is_efa(p):
        return "EFA"
    return f"{p.get('link_layer') or 'unknown'} ({p.get('driver') or 'unknown driver'})"


def _up(p: Dict[str, Any]) -> bool:
    return p.get("state_code") == ACTIVE and p.get("phys_state_code") in (LINK_UP, None)


def _named_by_nccl(facts: Facts, device: str) -> bool:
    """NCCL_IB_HCA lists the device (``mlx5_0``, ``=mlx5_0:1``, ``^mlx5_1`` excludes)."""
    value = str((facts.get("network.env") or {}).get("NCCL_IB_HCA") or "")
    if not value or value.startswith("^"):
        return False
    names = [part.lstrip("=").split(":", 1)[0] for part in value.split(",")]
    return any(device == n or (not value.startswith("=") and device.startswith(n)) for n in names if n)


PORT_FIX = ("ibstat", "ibv_devinfo -v | grep -E 'hca_id|port:|state|active_speed|active_width'",
            "cat /sys/class/infiniband/*/ports/*/{state,phys_state,rate}")


@check(
    id="DLD-NET-005", slug="rdma-port-down", title="RDMA ports are up (InfiniBand, RoCE, EFA)",
    remedy="replace-hardware", drain=True,
    problem="An RDMA port is down",
    tags=("network", "rdma", "hardware"), requires=("links",), applies=(needs_rdma_ports,),
    what="""Reads each RDMA port's logical state (/sys/class/infiniband/DEV/ports/N/state: 4: ACTIVE) and physical
    state (phys_state: 5: LinkUp). An EFA port that is not ACTIVE fails. An InfiniBand port that is down while other
    ports of its kind are up fails. A RoCE (Ethernet) port that is down fails only when NCCL_IB_HCA names it: spare
    Ethernet ports are common.""",
    why="""NCCL spreads its rings over every RDMA port it finds (or those NCCL_IB_HCA names). A port that is down
    takes its rail out: NCCL either fails to connect ('NET/IB : Got async event : port error') or runs the job over
    fewer rails, at a fraction of the bandwidth, with no error. On EFA every device is one rail.""",
    fix="""Check the cable and the switch port (phys_state Polling: no peer; Disabled: turned off), reset the link
    or reboot; a port that stays down is a hardware ticket (on EC2: stop and start the instance).""",
)
def rdma_port_down(facts: Facts) -> Result:
    ports = _ports(facts)
    evidence: Dict[str, Any] = {"ports": {_name(p): f"{p.get('state_code')}: {p.get('state')}, "
                                                    f"{p.get('phys_state_code')}: {p.get('phys_state')}"
                                          for p in ports}}
    kinds: Dict[str, List[Dict[str, Any]]] = {}
    for p in ports:
        kinds.setdefault(_kind(p), []).append(p)
    down: List[str] = []
    spare: List[str] = []
    for kind, group in kinds.items():
        up = [p for p in group if _up(p)]
        for p in group:
            if _up(p) or p.get("state_code") is None:
                continue
            text = f"{_name(p)} ({kind}): {p.get('state') or '?'}, {p.get('phys_state') or '?'}"
            if kind == "EFA" or _named_by_nccl(facts, str(p.get("device"))):
                down.append(text)
            elif "InfiniBand" in kind and up:
                down.append(text)
            else:
                spare.append(text)
    if down:
        return fail(f"{len(down)} RDMA port(s) down: " + "; ".join(down), evidence,
                    Fix("Find out why the port is down (cable, switch port, NIC), then reset the link or reboot.",
                        PORT_FIX), headline=f"RDMA port down: {down[0].split(' (')[0]}")
    note = (f"; not judged: {'; '.join(spare)} (no up port of its kind, or an Ethernet port NCCL_IB_HCA does not "
            f"name: a spare port is not a fault)") if spare else ""
    return passed(f"{sum(1 for p in ports if _up(p))} of {len(ports)} RDMA port(s) ACTIVE and LinkUp{note}",
                  **evidence)


@check(
    id="DLD-NET-006", slug="rdma-port-slow", title="RDMA ports run at the rate of their peers",
    remedy="replace-hardware", drain=False,
    problem="An RDMA port runs slower than its peers",
    tags=("network", "rdma", "performance", "hardware"), requires=("links",), applies=(needs_rdma_ports,),
    what="""Compares the rate of each ACTIVE RDMA port (/sys/class/infiniband/DEV/ports/N/rate: 400 Gb/sec (4X NDR))
    with the fastest ACTIVE port of its kind (EFA with EFA, InfiniBand with InfiniBand, RoCE per driver).""",
    why="""A port that trained at a lower rate (fewer lanes, a lower speed: a bad cable or transceiver) makes its
    rail the slowest in every ring NCCL builds, so the whole all-reduce runs at its rate.""",
    fix="""Reseat or replace the cable/transceiver, check the switch port's configuration, retrain the link.""",
)
def rdma_port_slow(facts: Facts) -> Result:
    ports = [p for p in _ports(facts) if _up(p) and isinstance(p.get("rate_gbps"), (int, float))]
    evidence: Dict[str, Any] = {"rates": {_name(p): f"{p.get('rate_gbps'):g} Gb/sec" + (f" ({p['rate']})" if p.get("rate") else "")
                                          for p in ports}}
    if len(ports) < 2:
        return skip("fewer than two ACTIVE RDMA ports with a rate: nothing to compare", **evidence)
    kinds: Dict[str, List[Dict[str, Any]]] = {}
    for p in ports:
        kinds.setdefault(_kind(p), []).append(p)
    slow: List[str] = []
    for kind, group in kinds.items():
        best = max(p["rate_gbps"] for p in group)
        for p in group:
            if p["rate_gbps"] < best:
                slow.append(f"{_name(p)} at {p['rate_gbps']:g} Gb/s" + (f" ({p['rate']})" if p.get("rate") else "")
                            + f", its {kind} peers at {best:g} Gb/s")
    if slow:
        return warn("slower RDMA port(s): " + "; ".join(slow), evidence,
                    Fix("Check the slow port's cable, transceiver and switch port; retrain the link.", PORT_FIX))
    return passed(f"{len(ports)} ACTIVE RDMA port(s), each at the rate of its peers", **evidence)


def _threshold(matrix: Any, name: str) -> Optional[Dict[str, Any]]:
    try:
        return matrix.threshold(name)
    except (AttributeError, KeyError):
        return None


@check(
    id="DLD-NET-007", slug="rdma-port-errors", title="RDMA ports count no link errors",
    remedy="replace-hardware", drain=False,
    problem="An RDMA port counts link errors",
    tags=("network", "rdma", "hardware"), requires=("links",), applies=(needs_rdma_ports,),
    what="""Holds each InfiniBand/RoCE port's error counters (/sys/class/infiniband/DEV/ports/N/counters:
    symbol_error, link_error_recovery, link_downed, port_rcv_errors, local_link_integrity_errors,
    excessive_buffer_overrun_errors, port_rcv_remote_physical_errors) against the thresholds of the compatibility
    matrix (thresholds.toml). The counters count since they were last cleared (at the latest the driver's load).""",
    why="""Symbol and integrity errors mean a marginal cable or transceiver; link recoveries and downs mean the link
    went away under traffic. Each stalls NCCL's transfers (retransmissions, 'IBV_WC_RETRY_EXC_ERR' timeouts), and
    one bad link slows or hangs the whole job.""",
    fix="""Watch whether the counters still rise (perfquery -x), then reseat or replace the cable or transceiver;
    clear the counters after the repair (perfquery -R).""",
)
def rdma_port_errors(facts: Facts, matrix) -> Result:
    ports = [p for p in _ports(facts) if isinstance(p.get("counters"), dict)]
    if not ports:
        return skip("no RDMA port has error counters (EFA keeps none in sysfs)")
    over: List[str] = []
    used: Dict[str, Any] = {}
    unverified = False
    for p in ports:
        for name, value in sorted(p["counters"].items()):
            limit = _threshold(matrix, f"ib_{name}")
            if limit is None or not isinstance(value, int) or value <= limit["value"]:
                continue
            used[name] = limit["value"]
            unverified = unverified or not limit["verified"]
            over.append(f"{_name(p)}: {name} {value} (above {limit['value']:g})")
    evidence: Dict[str, Any] = {"counters": {_name(p): {k: v for k, v in p["counters"].items() if v}
                                             for p in ports if any(p["counters"].values())},
                                "thresholds": used}
    if over:
        return warn("RDMA link errors: " + "; ".join(over[:12]) + (f" (and {len(over) - 12} more)" if len(over) > 12 else "")
                    + (" (thresholds marked unverified in the matrix)" if unverified else ""), evidence,
                    Fix("See whether the counters still rise, then check the cable/transceiver of that port.",
                        ("perfquery -x   # on that HCA and port: -C DEV -P PORT",
                         "grep . /sys/class/infiniband/*/ports/*/counters/{symbol_error,link_downed,"
                         "link_error_recovery,port_rcv_errors}")))
    return passed(f"{len(ports)} RDMA port(s) below the error thresholds", **evidence)


def _devices(facts: Facts) -> List[Dict[str, Any]]:
    return [d for d in facts.get("links.pci") or [] if isinstance(d, dict)]


def _nvml_pcie(facts: Facts) -> Dict[str, Dict[str, Any]]:
    """NVML's view of each GPU by bus address (DLD-GPU-010 judges those)."""
    out = {}
    for d in facts.get("nvml.devices") or []:
        if isinstance(d, dict) and d.get("bus_id") and (d.get("pcie") or {}).get("width"):
            out[str(d["bus_id"])] = d
    return out


def _label(d: Dict[str, Any]) -> str:
    what = "GPU" if d.get("kind") == "gpu" else ("RDMA NIC" if d.get("rdma") else "NIC")
    return f"{what} {d.get('bdf')}"


def _both_ends(d: Dict[str, Any], own: str, upstream: str) -> Optional[float]:
    values = [v for v in (d.get(own), d.get(upstream)) if isinstance(v, (int, float)) and v > 0]
    return min(values) if values else None


@check(
    id="DLD-NET-008", slug="pcie-link-narrow", title="PCIe links of network devices run at full width and speed",
    remedy="replace-hardware", drain=False,
    problem="A PCIe link trained below what both its ends support",
    tags=("network", "performance", "hardware", "pcie"), requires=("links",), applies=(needs_pci_links,),
    what="""Compares each network device's current PCIe link width and speed (sysfs current_link_width/_speed) with
    the most both ends of the link support (the device's and its upstream port's max_link_width/_speed). GPUs are
    judged here only when NVML did not report their link (DLD-GPU-010 does otherwise), and then by width only: GPUs
    lower their speed when idle.""",
    why="""A NIC trained at x8 of x16, or at 16 GT/s where both ends do 32, cannot feed its port: a 400 Gb/s NIC
    needs PCIe 5.0 x16. GPUDirect RDMA traffic and every staged copy slow down, with no error anywhere. It usually
    means a badly seated card, riser or cable.""",
    fix="""Reboot to retrain the link; if it stays degraded, reseat the card or open a hardware ticket (on EC2: stop
    and start the instance to move hosts).""",
)
def pcie_link_narrow(facts: Facts) -> Result:
    nvml = _nvml_pcie(facts)
    judged: List[Dict[str, Any]] = []
    bad: List[str] = []
    for d in _devices(facts):
        if d.get("kind") == "gpu" and d.get("bdf") in nvml:
            continue
        judged.append(d)
        width, best_width = d.get("width"), _both_ends(d, "max_width", "upstream_max_width")
        if isinstance(width, int) and width > 0 and best_width and width < best_width:
            bad.append(f"{_label(d)}: x{width} of x{best_width:g}")
            continue
        speed, best_speed = d.get("speed_gts"), _both_ends(d, "max_speed_gts", "upstream_max_speed_gts")
        if d.get("kind") != "gpu" and isinstance(speed, (int, float)) and best_speed and speed < best_speed:
            bad.append(f"{_label(d)}: {speed:g} GT/s of {best_speed:g} GT/s")
    evidence: Dict[str, Any] = {"links": {_label(d): {k: d.get(k) for k in ("speed_gts", "max_speed_gts", "width",
                                                                            "max_width", "upstream",
                                                                            "upstream_max_speed_gts",
                                                                            "upstream_max_width")}
                                          for d in judged}}
    if not judged:
        return skip("only GPUs, whose links NVML reports (DLD-GPU-010)", **evidence)
    if bad:
        return warn("degraded PCIe link: " + "; ".join(bad), evidence,
                    Fix("Retrain the link with a reboot; reseat the card or report it if it persists.",
                        tuple(f"sudo lspci -vv -s {b.split(': ')[0].split(' ')[-1]} | grep -E 'LnkCap|LnkSta'"
                              for b in bad[:4])))
    return passed(f"{len(judged)} PCIe link(s) at the width and speed both ends support", **evidence)


def _aer_total(d: Dict[str, Any], kind: str) -> int:
    entry = (d.get("aer") or {}).get(kind) or {}
    total = entry.get("total")
    return total if isinstance(total, int) and total > 0 else 0


@check(
    id="DLD-NET-009", slug="pcie-aer-errors", title="GPUs and network devices report no uncorrectable PCIe errors",
    remedy="replace-hardware", drain=True,
    problem="A GPU or network device reported PCIe errors",
    tags=("network", "gpu", "hardware", "pcie"), requires=("links",), applies=(needs_pci_links,),
    what="""Reads the kernel's AER counters of each GPU and network device since boot (sysfs aer_dev_fatal,
    aer_dev_nonfatal, aer_dev_correctable). A fatal error fails; a non-fatal one warns; correctable errors warn only
    above the matrix's rate per minute of uptime (thresholds.toml: healthy links count some).""",
    why="""An uncorrectable PCIe error drops transactions: the device is reset or falls off the bus (for a GPU,
    Xid 79 or 'GPU has fallen off the bus'), and a job using it dies or hangs. A high rate of correctable errors is a
    marginal link that retries every transfer.""",
    fix="""Look at the kernel log for the AER lines of that address; reboot to recover the device; a device that
    reports them again is a hardware ticket (on EC2: stop and start the instance).""",
)
def pcie_aer_errors(facts: Facts, matrix) -> Result:
    devices = [d for d in _devices(facts) if d.get("aer")]
    if not devices:
        return skip("the kernel reports no AER counters for these devices (AER off, or not in this tree)")
    limit = _threshold(matrix, "pcie_correctable_per_minute")
    uptime = facts.get("links.uptime_s")
    minutes = uptime / 60 if isinstance(uptime, (int, float)) and uptime > 0 else None
    fatal = [f"{_label(d)}: {_aer_total(d, 'fatal')} fatal ({', '.join((d['aer'].get('fatal') or {}).get('nonzero') or {}) or 'types not named'})"
             for d in devices if _aer_total(d, "fatal")]
    nonfatal = [f"{_label(d)}: {_aer_total(d, 'nonfatal')} non-fatal "
                f"({', '.join((d['aer'].get('nonfatal') or {}).get('nonzero') or {}) or 'types not named'})"
                for d in devices if _aer_total(d, "nonfatal")]
    correctable: List[str] = []
    if limit is not None and minutes:
        for d in devices:
            rate = _aer_total(d, "correctable") / minutes
            if rate > limit["value"]:
                correctable.append(f"{_label(d)}: {_aer_total(d, 'correctable')} correctable in {minutes:.0f} min "
                                   f"({rate:.1f}/min, above {limit['value']:g}/min)")
    evidence: Dict[str, Any] = {"aer": {_label(d): {k: _aer_total(d, k) for k in ("fatal", "nonfatal", "correctable")}
                                        for d in devices},
                                "uptime_s": uptime, "correctable_limit_per_minute": (limit or {}).get("value")}
    fix = Fix("Read the kernel's AER lines for the device, reboot to recover it, report it if it repeats.",
              ("sudo dmesg | grep -iE 'AER|PCIe Bus Error|fallen off the bus'",
               "grep . /sys/bus/pci/devices/*/aer_dev_{fatal,nonfatal,correctable} | grep -v ' 0$'"))
    text = "; ".join(fatal + nonfatal + correctable)
    if fatal:
        return fail("uncorrectable fatal PCIe errors since boot: " + text, evidence, fix,
                    headline=f"Fatal PCIe errors on {fatal[0].split(':')[0]}")
    if nonfatal or correctable:
        return warn("PCIe errors since boot: " + text, evidence, fix, remedy="replace-hardware", drain=False)
    return passed(f"no uncorrectable PCIe error on {len(devices)} device(s)"
                  + ("" if minutes else "; correctable errors not judged (uptime not known)"), **evidence)


@check(
    id="DLD-NET-010", slug="pcie-acs-redirect", title="PCIe ACS does not redirect peer-to-peer traffic",
    remedy="fix-configuration", drain=False,
    problem="PCIe ACS redirects peer-to-peer traffic through the CPU",
    tags=("network", "gpu", "performance", "pcie"), requires=("links",), applies=(needs_pci_links,),
    what="""For every pair of peers (GPUs, RDMA devices) that share a PCIe switch, reads the ACS Control register of
    the switch ports below the shared bridge (extended configuration space: root only) and reports a port with P2P
    request or completion redirect or egress control on.""",
    why="""With ACS redirect on, peer-to-peer transactions between devices under one PCIe switch go up to the root
    complex and back (NCCL's troubleshooting guide): GPUDirect P2P and RDMA are slower, and with the IOMMU on they
    can fail or hang. On bare metal the BIOS or the kernel turns it on for virtualisation.""",
    fix="""Disable ACS in the BIOS (or with setpci on each switch port at boot, as NCCL's guide shows); inside a VM,
    the hypervisor's configuration decides.""",
)
def pcie_acs_redirect(facts: Facts) -> Result:
    bridges = [b for b in facts.get("links.acs") or [] if isinstance(b, dict)]
    if not bridges:
        return skip("no PCIe switch port between peers (GPUs, RDMA devices) in this tree")
    if not facts.get("links.acs_known"):
        return skip(f"{len(bridges)} switch port(s) between peers, but their configuration space could not be read "
                    "(run as root)", bridges=[b.get("bridge") for b in bridges])
    on = [b for b in bridges if b.get("redirect")]
    evidence: Dict[str, Any] = {"acs": {str(b.get("bridge")): {"control": b.get("control"), "redirect": b.get("redirect"),
                                                               "below": b.get("below")} for b in bridges}}
    if on:
        names = ", ".join(f"{b['bridge']} (above {', '.join(b.get('below') or [])})" for b in on[:8])
        return warn(f"ACS redirect is on at {len(on)} PCIe switch port(s) between peers: {names}; their P2P traffic "
                    "goes through the CPU root complex", evidence,
                    Fix("Disable ACS on these switch ports (BIOS, or setpci at boot as NCCL's troubleshooting guide "
                        "shows).",
                        tuple(f"sudo lspci -vvv -s {b['bridge']} | grep ACSCtl" for b in on[:4])
                        + tuple(f"sudo setpci -s {b['bridge']} ECAP_ACS+0x6.w=0000   # until the next boot"
                                for b in on[:4])))
    unread = [b for b in bridges if not b.get("read")]
    return passed(f"no ACS redirect on {len(bridges) - len(unread)} switch port(s) between peers"
                  + (f" ({len(unread)} not readable)" if unread else ""), **evidence)
