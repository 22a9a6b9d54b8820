"""NVLink links and error counters, the GPU's NVSwitch fabric registration and the driver's recovery action (NVML)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from dl_doctor.checks.common import needs_nvidia_gpu
from dl_doctor.checks.gpu_health import needs_nvml
from dl_doctor.model import Facts, Fix, Result, check, fail, passed, skip, warn

FABRIC: Dict[str, Any] = dict(requires=("nvml",), applies=(needs_nvidia_gpu, needs_nvml))

# The fabric health mask's fields (nvml.h, NVML_GPU_FABRIC_HEALTH_MASK_*): (name, shift, width mask, the values that
# are a problem). Each field is 0 where the driver does not report it; a healthy GPU reads FALSE (2) in the two-state
# fields, so a mask is never judged as a number.
HEALTH_FIELDS = (
    ("degraded bandwidth", 0, 0x3, {1: "true"}),
    ("route recovery in progress", 2, 0x3, {1: "true"}),
    ("route unhealthy", 4, 0x3, {1: "true"}),
    ("access timeout recovery", 6, 0x3, {1: "true"}),
    ("incorrect configuration", 8, 0xF, {2: "incorrect system GUID", 3: "incorrect chassis serial number",
                                         4: "no partition", 5: "insufficient NVLinks",
                                         6: "incompatible GPU firmware", 7: "invalid location",
                                         8: "GPU state invalid"}),
    ("global fabric manager", 14, 0x3, {2: "disconnected"}),
)


# nvmlReturn_t values a fabric registration's status reports (nvml.h; the values as nvidia-ml-py 13.615 defines them)
FABRIC_STATUS = {0: "success", 3: "not supported", 6: "not found", 10: "timeout", 17: "operating system error",
                 20: "out of memory", 23: "insufficient resources", 27: "not ready", 29: "invalid state",
                 999: "unknown error"}


def _status(value: Any) -> str:
    name = FABRIC_STATUS.get(value) if isinstance(value, int) else None
    return f"status {name} ({value})" if name else f"status {value}"


def health_problems(mask: Any) -> List[str]:
    """What a fabric health mask reports wrong (nothing for a mask that is not an integer)."""
    if not isinstance(mask, int) or isinstance(mask, bool) or mask < 0:
        return []
    out = []
    for name, shift, width, bad in HEALTH_FIELDS:
        value = (mask >> shift) & width
        if value in bad:
            out.append(f"{name}: {bad[value]}")
    return out


FABRIC_FIX = ("sudo systemctl restart nvidia-fabricmanager", "nvidia-smi -q -d FABRIC")
RECOVERY_FIX = {
    "gpu_reset": ("Reset the GPU (no processes may use it).", "sudo nvidia-smi -r -i {i}"),
    "bus_reset": ("Reset the GPU (no processes may use it).", "sudo nvidia-smi -r -i {i}"),
    "node_reboot": ("Reboot the node.", "sudo reboot"),
    "system_reboot": ("Reboot the node.", "sudo reboot"),
    "drain_p2p": ("Drain the node of peer-to-peer (multi-GPU) work, then reset the GPU.", "sudo nvidia-smi -r -i {i}"),
    "drain_and_reset": ("Drain the node, then reset the GPU.", "sudo nvidia-smi -r -i {i}"),
}


def _label(dev: Dict[str, Any]) -> str:
    known = [str(dev[k]) for k in ("bus_id", "name") if dev.get(k)]
    return f"GPU {dev.get('index')}" + (f" ({', '.join(known)})" if known else "")


def expected_links(facts: Facts, matrix: Any, dev: Dict[str, Any]) -> Tuple[Optional[int], bool]:
    """The NVLink links the GPU's model has (the matrix's ``nvlink_links``, found by its PCI device id) and whether
    that number is verified; (None, False) for a model the matrix gives none (PCIe cards, whose bridges vary)."""
    ids = {str(d.get("bdf")): str(d.get("device_id")) for d in facts.get("gpu_pci.devices") or []
           if isinstance(d, dict) and d.get("device_id")}
    device_id = ids.get(str(dev.get("bus_id")))
    entry = matrix.gpu_by_pci(device_id) if device_id and matrix is not None else None
    if not isinstance(entry, dict):
        return None, False
    links = entry.get("nvlink_links")
    if not isinstance(links, int):
        return None, False
    return links, entry.get("verified", True) is not False and "nvlink_links" not in (entry.get("unverified") or [])


def _nvlink_devs(facts: Facts) -> List[Dict[str, Any]]:
    return [d for d in facts.get("nvml.devices") or []
            if isinstance(d.get("nvlink"), dict) and d["nvlink"].get("supported")]


@check(
    id="DLD-GPU-015", slug="nvlink-links-down", title="Every NVLink link is up",
    remedy="reset-gpu", drain=True, problem="NVLink links are down",
    tags=("gpu", "hardware", "nvlink"), **FABRIC,
    what="""Reads each GPU's NVLink link states through NVML and counts the active links against the links its model
    has (NVIDIA's specifications) and against the other GPUs of the same model on the node.""",
    why="""A link that is down cuts a GPU's NVLink bandwidth (1/18 per link on H100) or, on an NVSwitch system, takes it
    out of the fabric: all-reduce slows down for every rank or NCCL falls back to PCIe. A GPU alone in its node or VM
    has no NVLink peer (a one-GPU partition's links are disabled), so its links are not judged.""",
    fix="Reset the GPU; if the link stays down, drain the node and have the board or NVSwitch tray serviced.",
)
def nvlink_links_down(facts: Facts, matrix) -> Result:
    devs = _nvlink_devs(facts)
    if not devs:
        return skip("no GPU reports NVLink links (no NVLink, or nvidia-ml-py too old to say)")
    gpus = len(facts.get("nvml.devices") or [])
    if gpus == 1:
        # A GPU alone in the node or VM (p5.4xlarge, a one-GPU partition of an HGX board) has no NVLink peer: the
        # fabric manager leaves a one-GPU partition's links disabled, so links down say nothing about the hardware.
        links = devs[0]["nvlink"].get("links") or []
        active = sum(1 for link in links if link.get("active"))
        return passed(f"one GPU in this node: NVLink has no peer to reach ({active} of {len(links)} links active)",
                      {"gpus": 1, "active": active, "links": len(links)})
    bad: Dict[str, Any] = {}
    notes: List[str] = []
    for d in devs:
        links = d["nvlink"].get("links") or []
        active = sum(1 for link in links if link.get("active"))
        down = [link.get("link") for link in links if link.get("active") is False]
        peers = [sum(1 for link in (p["nvlink"].get("links") or []) if link.get("active"))
                 for p in devs if p is not d and p.get("name") == d.get("name")]
        want, verified = expected_links(facts, matrix, d)
        if want is not None and down:
            bad[_label(d)] = {"active": active, "expected": want, "down": down}
        elif want is not None and verified and active < want:
            bad[_label(d)] = {"active": active, "expected": want, "down": down}
        elif peers and active < max(peers):
            bad[_label(d)] = {"active": active, "peers_active": max(peers), "down": down}
        elif want is None and not peers:
            notes.append(f"{_label(d)}: model without a known link count and no peers to compare")
    evidence: Dict[str, Any] = {"links_down": bad, "notes": notes}
    if bad:
        first = devs[0].get("index")
        return fail("NVLink links down: " + "; ".join(
            f"{k}: links {v['down']} down, {v['active']} active" for k, v in bad.items()), evidence,
            Fix("Reset the affected GPU; if the links stay down, drain the node for service.",
                (f"nvidia-smi nvlink --status -i {first}", "sudo nvidia-smi -r -i <GPU>   # with no processes on it")))
    return passed(f"all NVLink links up on {len(devs)} GPUs" + (f" ({'; '.join(notes)})" if notes else ""),
                  evidence)


@check(
    id="DLD-GPU-016", slug="nvlink-errors", title="NVLink error counters are low",
    remedy="replace-hardware", drain=False, problem="NVLink links count many errors",
    tags=("gpu", "hardware", "nvlink"), **FABRIC,
    what="Reads each NVLink link's replay, recovery and CRC (flit, data) error counters through NVML.",
    why="""Replays and CRC errors mean a link retransmits: a link that counts many is marginal, slows collective
    communication and often goes down later.""",
    fix="Watch the counters (nvidia-smi nvlink -e); a link whose counters keep rising needs service.",
)
def nvlink_errors(facts: Facts, matrix) -> Result:
    devs = _nvlink_devs(facts)
    if not devs:
        return skip("no GPU reports NVLink links (no NVLink, or nvidia-ml-py too old to say)")
    crc = matrix.threshold("nvlink_crc_per_second") if matrix is not None else None
    counts = {name: matrix.threshold(f"nvlink_{name}") if matrix is not None else None
              for name in ("replay", "recovery")}
    uptime = facts.get("links.uptime_s")
    seconds = uptime if isinstance(uptime, (int, float)) and uptime > 0 else None
    high: List[Dict[str, Any]] = []
    for d in devs:
        for link in d["nvlink"].get("links") or []:
            errors = link.get("errors") or {}
            crc_count = sum(v for k, v in errors.items() if k.startswith("crc") and isinstance(v, int))
            if crc and seconds and crc_count / seconds > crc["value"]:
                high.append({"gpu": _label(d), "link": link.get("link"), "counter": "crc",
                             "count": crc_count, "rate": f"{crc_count / seconds:.0f}/s"})
            for name, limit in counts.items():
                value = errors.get(name)
                if limit and isinstance(value, int) and value > limit["value"]:
                    high.append({"gpu": _label(d), "link": link.get("link"), "counter": name, "count": value})
    evidence: Dict[str, Any] = {"high": high, "crc_per_second_limit": (crc or {}).get("value"), "uptime_s": uptime,
                                "count_limits": {k: (v or {}).get("value") for k, v in counts.items()}}
    if high:
        return warn("NVLink error counters high: " + "; ".join(
            f"{h['gpu']} link {h['link']} {h['counter']} {h['count']}" + (f" ({h['rate']})" if h.get("rate") else "")
            for h in high[:8]) + " (the replay/recovery limits are marked unverified in the matrix)", evidence,
            Fix("Check whether the counters keep rising; have a link that does serviced.",
                ("nvidia-smi nvlink -e", "nvidia-smi nvlink --status")))
    note = "" if seconds else "; CRC rates not judged (uptime not known)"
    return passed(f"NVLink error counters are low on {len(devs)} GPUs{note}", evidence)


@check(
    id="DLD-GPU-017", slug="gpu-fabric", title="The GPUs joined the NVSwitch fabric",
    remedy="fix-configuration", drain=True, problem="GPUs are not registered with the NVSwitch fabric",
    tags=("gpu", "nvlink", "fabric"), **FABRIC,
    what="""On NVSwitch systems (a GPU reports a fabric state other than not_supported), reads each GPU's fabric
    registration state, its status, its health mask and (drivers with nvmlGpuFabricInfo_v3) its health summary
    through NVML. A completed registration with a zero cluster UUID and clique is what a single HGX H100 board
    reports (no multi-node NVLink) and is not a problem.""",
    why="""Until the fabric manager has registered a GPU with the NVSwitch fabric, CUDA cannot use it (cudaErrorSystem
    NotReady) or peer-to-peer over NVLink fails; a registration that completed with an error status (insufficient
    resources, on nodes that lost NVLinks) or a health summary of unhealthy leaves the GPU out of the NVLink domain,
    and a health mask that reports degraded bandwidth or routes slows every collective.""",
    fix="Restart nvidia-fabricmanager and check the fabric state with nvidia-smi -q -d FABRIC.",
)
def gpu_fabric(facts: Facts) -> Result:
    devs = [d for d in facts.get("nvml.devices") or [] if isinstance(d.get("fabric"), dict)
            and d["fabric"].get("state") not in (None, "not_supported")]
    if not devs:
        return skip("no GPU reports an NVSwitch fabric state (not an NVSwitch system, or too old to say)")
    bad = {}
    for d in devs:
        fab = d["fabric"]
        health = health_problems(fab.get("health_mask"))
        if fab.get("health_summary") in ("unhealthy", "limited_capacity"):
            health.insert(0, f"health summary: {str(fab['health_summary']).replace('_', ' ')}")
        # NVML: the status "must be checked only if state returns complete"
        if fab.get("state") != "completed" or fab.get("status") not in (None, 0) or health:
            bad[_label(d)] = {**{k: fab.get(k) for k in ("state", "status", "health_mask", "health_summary")},
                              "health": health}
    if bad:
        return fail("fabric problem on " + "; ".join(
            f"{k}: state {str(v['state']).replace('_', ' ')}"
            + (f", {_status(v['status'])}" if v["state"] == "completed" and v["status"] not in (None, 0) else "")
            + (f", health: {', '.join(v['health'])}" if v["health"] else "") for k, v in bad.items()),
            {"fabric": bad}, Fix("Restart the fabric manager, then check the fabric state.", FABRIC_FIX))
    return passed(f"{len(devs)} GPUs registered with the NVSwitch fabric", {"gpus": len(devs)})


@check(
    id="DLD-GPU-018", slug="gpu-recovery-action", title="No GPU needs a recovery action",
    remedy="reset-gpu", drain=True, problem="The driver asks for a GPU recovery action",
    tags=("gpu", "hardware"), **FABRIC,
    what="Reads the recovery action the driver reports for each GPU (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION).",
    why="""The driver sets it after an error it cannot hide: until the GPU is reset, the node rebooted or drained, work
    on it fails or hangs.""",
    fix="Do what the driver asks: reset the GPU, reboot the node, or drain it first.",
)
def gpu_recovery_action(facts: Facts) -> Result:
    devs = [d for d in facts.get("nvml.devices") or [] if d.get("recovery_action")]
    if not devs:
        return skip("no GPU reports a recovery action (driver or nvidia-ml-py too old to say)")
    need = [d for d in devs if d.get("recovery_action") != "none"]
    if need:
        d = need[0]
        action = str(d.get("recovery_action"))
        text, cmd = RECOVERY_FIX.get(action, ("See the driver's documentation for this action.",
                                              "nvidia-smi -q -i {i}"))
        reboot = action in ("node_reboot", "system_reboot")
        return fail("recovery action needed: " + "; ".join(f"{_label(x)}: {x.get('recovery_action')}" for x in need),
                    {"actions": {_label(x): x.get("recovery_action") for x in need}},
                    Fix(text, (cmd.format(i=d.get("index")),)), remedy="reboot" if reboot else None)
    return passed(f"no recovery action pending on {len(devs)} GPUs", {"gpus": len(devs)})
