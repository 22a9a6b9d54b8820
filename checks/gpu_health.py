"""GPU health from NVML and the kernel log: persistence, ECC, row remapping, Xid, throttling, PCIe, MIG,
CUDA_VISIBLE_DEVICES, other processes."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

from dl_doctor.checks.common import human_bytes, needs_nvidia_gpu
from dl_doctor.fixes import service
from dl_doctor.model import Facts, Fix, Result, check, fail, passed, warn


def needs_nvml(facts: Facts) -> Optional[str]:
    if not facts.has("nvml"):
        return None  # the missing facts are explained by the engine (probe failed / unavailable)
    if facts.get("nvml.init_error"):
        return f"NVML could not initialise: {facts.get('nvml.init_error')}"
    if not facts.get("nvml.devices"):
        return "NVML reports no GPU"
    return None


def _label(dev: Dict[str, Any]) -> str:
    known = [str(dev[k]) for k in ("bus_id", "name") if dev.get(k)]
    return f"GPU {dev.get('index')}" + (f" ({', '.join(known)})" if known else "")


def _reset_commands(devs: List[Dict[str, Any]]) -> tuple:
    ids = ",".join(str(d.get("index")) for d in devs)
    return (f"sudo nvidia-smi -r -i {ids}   # with no processes on the GPU(s); otherwise reboot",
            "nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT")


HEALTH: Dict[str, Any] = dict(requires=("nvml",), applies=(needs_nvidia_gpu, needs_nvml))


def _persistenced_state(facts: Facts) -> str:
    """What the tree or host says about nvidia-persistenced: not installed, installed but not enabled (and the
    preset that keeps it off), enabled but not running."""
    unit = facts.get("gpu_services.persistenced") or {}
    if not isinstance(unit, dict) or not unit:
        return ""
    if not unit.get("installed"):
        return "; nvidia-persistenced is not installed as a systemd unit"
    where = unit.get("unit_path") or "its unit file"
    if not unit.get("enabled"):
        preset = unit.get("preset")
        return (f"; nvidia-persistenced is installed ({where}) but not enabled (no systemd *.wants link"
                + (f"; {preset}" if preset else "") + "), so nothing keeps the GPUs initialised")
    state = unit.get("active") or unit.get("journal_state")
    if state and state != "active":
        return f"; nvidia-persistenced is enabled but {state}"
    return ""


@check(
    id="DLD-GPU-005", slug="persistence-mode-off", title="GPU persistence mode is on",
    remedy="fix-configuration", drain=False,
    problem="GPU persistence mode is off",
    tags=("gpu", "performance"), **HEALTH,
    what="""Reads each GPU's persistence mode through NVML and, where it is off, the nvidia-persistenced unit's state
    from the tree (its unit file, its *.wants link, a systemd preset that disables it).""",
    why="""Without persistence (the nvidia-persistenced daemon, or persistence mode) the driver tears the GPUs down
    whenever no client is open, so every nvidia-smi and every CUDA process start re-initialises all GPUs: seconds of
    delay per start on an 8-GPU node, and flaky health probes.""",
    fix="Enable the nvidia-persistenced service (preferred) or set persistence mode with nvidia-smi -pm 1.",
)
def persistence_mode(facts: Facts) -> Result:
    devs = facts.get("nvml.devices") or []
    off = [d for d in devs if d.get("persistence_mode") is False]
    evidence: Dict[str, Any] = {"persistence_off": [_label(d) for d in off],
                                "gpu_services.persistenced": facts.get("gpu_services.persistenced")}
    if off:
        daemon = _persistenced_state(facts)
        if facts.get("system.container.in_container") and not daemon:
            daemon = "; the persistence daemon runs on the host, not in this container"
        return warn(f"persistence mode is off on {len(off)} of {len(devs)} GPUs: every CUDA start and nvidia-smi "
                    f"re-initialises them{daemon}",
                    evidence, Fix("Enable the persistence daemon.",
                                  (service("enable", "nvidia-persistenced", now=True), "# or: sudo nvidia-smi -pm 1")))
    return passed(f"persistence mode is on for all {len(devs)} GPUs", **evidence)


@check(
    id="DLD-GPU-006", slug="gpu-ecc-uncorrectable", title="No uncorrectable ECC errors",
    remedy="reset-gpu", drain=True,
    problem="Uncorrectable ECC errors",
    tags=("gpu", "hardware", "ecc"), **HEALTH,
    what="Reads the uncorrectable (double-bit) ECC error counters of each GPU: since the last reset and lifetime.",
    why="""An uncorrectable memory error kills the process that touched the memory and can corrupt results. Errors
    since the last reset mean the GPU is affected now; lifetime errors alone are history, often already handled by row
    remapping.""",
    fix="Reset the GPU (or reboot); if uncorrectable errors return, drain the node and replace the GPU.",
)
def ecc_uncorrectable(facts: Facts) -> Result:
    devs = facts.get("nvml.devices") or []
    now = [d for d in devs if (d.get("ecc_uncorrected_volatile") or 0) > 0]
    past = [d for d in devs if (d.get("ecc_uncorrected_aggregate") or 0) > 0 and d not in now]
    evidence: Dict[str, Any]
    evidence = {"volatile": {_label(d): d.get("ecc_uncorrected_volatile") for d in now},
                "aggregate": {_label(d): d.get("ecc_uncorrected_aggregate") for d in now + past},
                "ecc_disabled": [_label(d) for d in devs if d.get("ecc_mode") is False]}
    if now:
        return fail("uncorrectable ECC errors since the last reset on " + ", ".join(_label(d) for d in now), evidence,
                    Fix("Reset the GPU(s); replace them if the errors come back.", _reset_commands(now)))
    remap = lambda d: d.get("remapped_rows") or {}  # noqa: E731
    handled = [d for d in past if remap(d).get("uncorrectable") and not remap(d).get("pending")
               and not remap(d).get("failure")]
    if past and len(handled) == len(past):
        return passed("no uncorrectable ECC errors since the last reset; the lifetime counters of "
                      + ", ".join(_label(d) for d in past) + " hold earlier ones, whose rows were remapped "
                      "(row remapping replaced the bad memory; nothing pending, no failure)", evidence,
                      Fix("Watch the counters and row remapping; plan a replacement if they grow.",
                          ("nvidia-smi -q -d ECC,ROW_REMAPPER",)))
    if past:
        return warn("uncorrectable ECC errors in the lifetime counters of " + ", ".join(_label(d) for d in past)
                    + " (none since the last reset)", evidence,
                    Fix("Watch the counters and row remapping; plan a replacement if they grow.",
                        ("nvidia-smi -q -d ECC,ROW_REMAPPER",)))
    return passed(f"no uncorrectable ECC errors on {len(devs)} GPUs", **evidence)


@check(
    id="DLD-GPU-007", slug="gpu-memory-remap-pending", title="No row remapping or page retirement is pending or failed",
    remedy="reset-gpu", drain=True,
    problem="GPU memory row remapping or page retirement is pending or failed",
    tags=("gpu", "hardware", "ecc"), **HEALTH,
    what="Reads row-remapping state (Ampere and newer) and pending page retirement (older GPUs) through NVML.",
    why="""A pending remap or retirement only takes effect after the GPU is reset; until then the bad memory stays in
    use (Xid 63/94/95 follow). A remapping failure means the GPU has run out of spare rows and must be replaced.""",
    fix="Reset the GPU (nvidia-smi -r) or reboot to activate pending remaps; replace a GPU whose remapping failed.",
)
def remap_pending(facts: Facts) -> Result:
    devs = facts.get("nvml.devices") or []
    failed = [d for d in devs if (d.get("remapped_rows") or {}).get("failure")]
    pending = [d for d in devs if (d.get("remapped_rows") or {}).get("pending") or d.get("retired_pages_pending")]
    evidence: Dict[str, Any]
    evidence = {"remapped_rows": {_label(d): d.get("remapped_rows") for d in devs if d.get("remapped_rows")},
                "retired_pages_pending": [_label(d) for d in devs if d.get("retired_pages_pending")]}
    if failed:
        return fail("row remapping failed on " + ", ".join(_label(d) for d in failed) + ": the GPU needs replacing",
                    evidence, Fix("Drain the node and replace the GPU (on EC2: stop and start, then open a case).",
                                  ("nvidia-smi -q -d ROW_REMAPPER",)))
    if pending:
        return fail("memory repair is pending on " + ", ".join(_label(d) for d in pending)
                    + ": reset the GPU to activate it", evidence,
                    Fix("Reset the GPU(s) or reboot.", _reset_commands(pending)))
    return passed(f"no pending or failed row remapping on {len(devs)} GPUs", **evidence)


@check(
    id="DLD-GPU-008", slug="xid-errors", title="No Xid errors in the kernel log of this boot",
    remedy="reset-gpu", drain=True,
    problem="Xid errors in this boot's kernel log",
    tags=("gpu", "hardware", "driver"), requires=("kernel_log",), applies=(needs_nvidia_gpu,),
    what="""Reads NVRM Xid lines of the current boot from the kernel log and explains each code from the matrix's Xid
    table: what it means, whether it points at the application, the driver or the hardware, and what to do.""",
    why="""Xid events are the driver's record of GPU faults. Application Xids (13, 31, 43, and 45 after them) follow
    an error in the program and pass with a note: the GPU and the driver are fine; so do the informational ones
    NVIDIA's Xid catalog says need no action (63 a row marked for remapping, 92, 154 ...). Hardware Xids (48, 64, 74,
    79, 94, 95), firmware Xids (62, 119, 120) and codes the catalog does not attribute mean the GPU needs a reset, a
    reboot or a replacement before it can be trusted with a long run.""",
    fix="""Act on the worst code: restart the application for application Xids; reset the GPU or reboot for
    firmware and ECC Xids; for Xid 79 (fallen off the bus) or repeated hardware Xids, move the instance to new
    hardware and open a support case.""",
)
def xid_errors(facts: Facts, matrix) -> Result:
    xids = facts.get("kernel_log.xids") or []
    if not xids:
        return passed(f"no Xid errors in {facts.get('kernel_log.source') or 'the kernel log'} of this boot",
                      source=facts.get("kernel_log.source"))
    by_code: Dict[int, Dict[str, Any]] = {}
    for x in xids:
        info = by_code.setdefault(x["code"], {"count": 0, "buses": set(), "sample": x.get("line")})
        info["count"] += 1
        info["buses"].add(x.get("bus"))
    rows = []
    serious = False
    for code, info in sorted(by_code.items()):
        meta = matrix.xid(code) or {}
        kind = meta.get("kind", "unknown")
        serious = serious or kind in ("hardware", "driver", "unknown")
        rows.append({"code": code, "count": info["count"], "gpus": sorted(b for b in info["buses"] if b),
                     "meaning": meta.get("name", "not in dl-doctor's Xid table"), "kind": kind,
                     "action": meta.get("action"), "sample": info["sample"]})
    text = "; ".join(f"Xid {r['code']} x{r['count']} on {', '.join(r['gpus']) or 'a GPU the line does not name'} "
                     f"({r['meaning']}, {r['kind']})" for r in rows)
    actions = tuple(f"# Xid {r['code']}: {r['action']}" for r in rows if r.get("action")) + (
        "sudo dmesg | grep -i xid | tail -20",)
    evidence = {"xids": rows, "source": facts.get("kernel_log.source")}
    fix = Fix("Act on the most serious Xid first (see the notes per code).", actions)
    order = {"hardware": 0, "driver": 1, "unknown": 2}
    worst = min(rows, key=lambda r: (order.get(r["kind"], 3), -r["count"]))
    gpus = worst["gpus"]
    where = f"GPU {gpus[0]}" if len(gpus) == 1 else f"{len(gpus)} GPUs" if gpus else "a GPU"
    headline = f"Xid {worst['code']} on {where}: {worst['meaning']}"
    if len(rows) > 1:
        headline += f" (and {len(rows) - 1} other Xid code{'s' if len(rows) > 2 else ''})"
    # what to do: the most disruptive remedy the matrix gives the codes seen (an application Xid: restart it)
    from dl_doctor.model import REMEDIES

    remedies = [(matrix.xid(r["code"]) or {}) for r in rows]
    remedy = max((m.get("remedy") or "reset-gpu" for m in remedies), key=REMEDIES.index, default="reset-gpu")
    drain = any(m.get("drain", True) for m in remedies)
    if serious:
        return fail(text, evidence, fix, headline=headline, remedy=remedy, drain=drain)
    # Only application and informational codes (NVIDIA's Xid catalog: 13, 31 and 43 follow a program's own error,
    # 45 the driver's clean-up after it): the GPU and the driver are fine, the program that hit them already failed.
    if not any(r["kind"] == "application" or r["code"] == 45 for r in rows):
        # informational codes alone (the catalog's IGNORE: 63, 92, 121, 154 ...): nothing the host must do now
        return passed(f"{text}: only informational Xids, for which NVIDIA's Xid catalog gives no immediate action "
                      f"(see the note per code)", evidence, fix)
    return passed(f"{text}: only application-level Xids, which follow an error in a program (the GPU stopped its "
                  f"work), not a GPU or driver fault; nothing to do on this host unless they recur across jobs with "
                  f"known-good code", evidence, fix)


# A GPU lowers its link generation with its performance state; a monitoring agent's 1% keeps it low legitimately,
# so a lower generation counts only on a GPU this busy.
BUSY = 50

SLOWDOWN = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")


@check(
    id="DLD-GPU-009", slug="gpu-throttled", title="GPUs are not throttled by hardware, heat or power brake",
    remedy="replace-hardware", drain=False,
    problem="GPUs are throttled",
    tags=("gpu", "performance", "hardware"), **HEALTH,
    what="Reads NVML's current clock event (throttle) reasons of each GPU.",
    why="""HW slowdown, thermal slowdown and power-brake throttling cut clocks sharply and make one GPU the straggler
    that slows every synchronous step of a multi-GPU job. Power capping and idle clocks are normal and not reported.""",
    fix="""Check temperatures, fans/airflow and power delivery (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER); on a
    cloud instance, a persistently throttled GPU is a hardware ticket.""",
)
def throttled(facts: Facts) -> Result:
    devs = facts.get("nvml.devices") or []
    hit = [(d, [r for r in d.get("throttle_reasons") or [] if r in SLOWDOWN]) for d in devs]
    hit = [(d, r) for d, r in hit if r]
    evidence: Dict[str, Any]
    evidence = {"throttle_reasons": {_label(d): d.get("throttle_reasons") for d in devs},
                "temperature_c": {_label(d): d.get("temperature_c") for d in devs}}
    if hit:
        return warn("; ".join(f"{_label(d)}: {', '.join(r)} (temperature {d.get('temperature_c')} C)" for d, r in hit),
                    evidence, Fix("Find the cause of the slowdown; report persistent hardware throttling.",
                                  ("nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER",)))
    return passed(f"no hardware, thermal or power-brake throttling on {len(devs)} GPUs", **evidence)


@check(
    id="DLD-GPU-010", slug="pcie-link-degraded", title="GPU PCIe links run at their full width",
    remedy="replace-hardware", drain=False,
    problem="A GPU's PCIe link runs below its full width",
    tags=("gpu", "performance", "hardware"), **HEALTH,
    what="""Compares each GPU's current PCIe link width with its maximum, and the link generation with its maximum
    while the GPU is busy (at least 50% utilised: idle and lightly used GPUs lower the generation to save power;
    that is not reported).""",
    why="""A link trained at x8 or x4 instead of x16 halves or quarters host-to-device bandwidth: data loading and
    NCCL traffic over PCIe slow down with no error anywhere. It usually means a badly seated card or riser.""",
    fix="""Reset or reboot to retrain the link; if it stays degraded, it is a hardware ticket (on EC2: stop and start
    the instance to move hosts).""",
)
def pcie_degraded(facts: Facts) -> Result:
    devs = facts.get("nvml.devices") or []
    bad = []
    for d in devs:
        p = d.get("pcie") or {}
        if p.get("width") and p.get("max_width") and p["width"] < p["max_width"]:
            bad.append(f"{_label(d)}: x{p['width']} of x{p['max_width']}")
        elif p.get("gen") and p.get("max_gen") and p["gen"] < p["max_gen"] and (d.get("utilization_gpu") or 0) >= BUSY:
            bad.append(f"{_label(d)}: Gen{p['gen']} of Gen{p['max_gen']} while busy")
    evidence: Dict[str, Any] = {"pcie": {_label(d): d.get("pcie") for d in devs}}
    if bad:
        return warn("degraded PCIe link: " + "; ".join(bad), evidence,
                    Fix("Retrain the link with a reset or reboot; report it if it persists.",
                        ("nvidia-smi -q -d PCIE", "sudo lspci -vv -d 10de: | grep -E 'LnkCap|LnkSta'")))
    return passed(f"PCIe links at full width on {len(devs)} GPUs", **evidence)


@check(
    id="DLD-GPU-011", slug="mig-enabled", title="MIG mode is off (or known to be on)",
    remedy="fix-configuration", drain=False,
    problem="MIG mode is on",
    tags=("gpu", "mig"), **HEALTH,
    what="Reads each GPU's current and pending MIG mode, and the MIG devices that exist, through NVML.",
    why="""With MIG on, a GPU is split into instances and a CUDA process can use only one MIG instance: a training
    job sees one small device instead of the whole GPU, and CUDA_VISIBLE_DEVICES needs MIG UUIDs. Turning MIG on takes
    an administrator and a GPU reset, so MIG that is on passes with a note saying so (the usual cause of 'only 1 GPU
    visible'); MIG on with no MIG instance created fails (CUDA enumerates MIG devices only, so that GPU offers none); a
    pending mode change that waits for a GPU reset warns.""",
    fix="""Disable MIG when whole GPUs are wanted (nvidia-smi -mig 0, then reset the GPU); when MIG is intended, address
    instances by their MIG UUIDs (nvidia-smi -L).""",
)
def mig_enabled(facts: Facts) -> Result:
    devs = facts.get("nvml.devices") or []
    on = [d for d in devs if (d.get("mig_mode") or {}).get("current")]
    pending = [d for d in devs if d.get("mig_mode") and d["mig_mode"]["pending"] != d["mig_mode"]["current"]]
    evidence: Dict[str, Any] = {"mig_mode": {_label(d): d.get("mig_mode") for d in devs if d.get("mig_mode")}}
    fix = Fix("Turn MIG off if whole GPUs are wanted; otherwise use the MIG UUIDs.",
              ("nvidia-smi -L", "sudo nvidia-smi -mig 0 && sudo nvidia-smi -r   # whole GPUs again"))
    on_text = (f"MIG is on for {', '.join(_label(d) for d in on)}: each process can use one MIG instance, addressed "
               f"by its MIG UUID (nvidia-smi -L)") if on else ""
    # MIG on with no MIG device: CUDA enumerates MIG devices only (MIG user guide, "CUDA device enumeration"), so such
    # a GPU offers nothing to run on until instances are created (or MIG is turned off)
    empty = [d for d in on if d.get("mig_devices") == 0]
    if empty:
        evidence["mig_devices"] = {_label(d): d.get("mig_devices") for d in on}
        names = ", ".join(_label(d) for d in empty)
        return fail(f"MIG is on for {names} but no MIG instance exists there: CUDA (and Slurm's NVML autodetection) "
                    "finds no device to run on", evidence,
                    Fix("Create the MIG instances the node is meant to have, or turn MIG off for whole GPUs.",
                        ("nvidia-smi mig -lgip   # the GPU instance profiles this GPU offers",
                         "sudo nvidia-smi mig -cgi <profile ids> -C   # or: sudo nvidia-mig-parted apply",
                         "sudo nvidia-smi -mig 0 && sudo nvidia-smi -r   # or whole GPUs again")),
                    headline=f"MIG on, no MIG instance: {names}")
    if pending:
        parts = [on_text] if on_text else []
        parts.append(f"a MIG mode change is pending on {', '.join(_label(d) for d in pending)} (reset needed)")
        return warn("; ".join(parts), evidence, fix)
    if on:
        # Turning MIG on takes an administrator and a GPU reset: a partitioned GPU is a configuration, not a fault
        return passed(on_text, evidence, fix)
    return passed("MIG is off on all GPUs", **evidence)


_UUID = re.compile(r"^(GPU|MIG)-[0-9a-fA-F-]+")


@check(
    id="DLD-GPU-012", slug="cuda-visible-devices-invalid", title="CUDA_VISIBLE_DEVICES names GPUs that exist",
    remedy="fix-configuration", drain=False,
    problem="CUDA_VISIBLE_DEVICES names GPUs that do not exist",
    tags=("gpu", "environment"), requires=("environment",), applies=(needs_nvidia_gpu,),
    what="""Parses CUDA_VISIBLE_DEVICES from the session environment and holds each index or UUID against the GPUs the
    driver sees (NVML, else the PCI bus).""",
    why="""CUDA stops at the first entry that does not exist: with CUDA_VISIBLE_DEVICES=4,5 on a 4-GPU host, or a UUID
    from another machine, torch.cuda.device_count() is 0 and the job falls back to the CPU or dies with 'no CUDA GPUs
    are available'. An empty value hides every GPU.""",
    fix="Unset it, or list indexes below the GPU count or UUIDs from nvidia-smi -L of this host.",
)
def cuda_visible_devices(facts: Facts) -> Result:
    env = facts.get("environment.variables") or {}
    if "CUDA_VISIBLE_DEVICES" not in env:
        return passed("CUDA_VISIBLE_DEVICES is not set: all GPUs are visible")
    value = env["CUDA_VISIBLE_DEVICES"]
    devs = facts.get("nvml.devices") or []
    count = len(devs) if devs else facts.get("gpu_pci.gpu_count")
    uuids = {d.get("uuid") for d in devs if d.get("uuid")}
    evidence = {"CUDA_VISIBLE_DEVICES": value, "gpu_count": count, "uuids": sorted(uuids)}
    fix = Fix("Point CUDA_VISIBLE_DEVICES at GPUs of this host, or unset it.",
              ("nvidia-smi -L", "unset CUDA_VISIBLE_DEVICES", f"export CUDA_VISIBLE_DEVICES={','.join(str(i) for i in range(count or 1))}"))
    tokens = [t.strip() for t in value.split(",")]
    if value.strip() in ("", "-1", "NoDevFiles"):
        return warn(f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU from CUDA", evidence, fix)
    bad: List[str] = []
    first_bad: Optional[int] = None
    for i, t in enumerate(tokens):
        problem = None
        if t.isdigit():
            if count is not None and int(t) >= count:
                problem = f"{t} (only {count} GPUs: 0..{count - 1})"
        elif _UUID.match(t):
            if uuids and t.startswith("GPU-") and not any(u.startswith(t) for u in uuids):
                problem = f"{t} (no GPU with this UUID here)"
        else:
            problem = f"{t!r} (neither an index nor a GPU/MIG UUID)"
        if problem:
            bad.append(problem)
            first_bad = i if first_bad is None else first_bad
    if bad:
        hidden = ("; CUDA stops at the first bad entry, so no GPU is visible" if first_bad == 0 else
                  f"; CUDA stops at the first bad entry, so only the {first_bad} before it are visible")
        return fail(f"CUDA_VISIBLE_DEVICES={value} names GPUs that do not exist: {'; '.join(bad)}{hidden}", evidence, fix)
    return passed(f"CUDA_VISIBLE_DEVICES={value} names existing GPUs", **evidence)


@check(
    id="DLD-GPU-013", slug="gpu-busy-other-processes", title="No other process holds GPU memory",
    remedy="restart-application", drain=False,
    problem="Another process holds GPU memory",
    tags=("gpu", "memory"), **HEALTH,
    what="Lists compute processes on each GPU and the memory in use through NVML.",
    why="""A leftover process (a crashed job's zombie, a notebook kernel, another user's run) holds GPU memory: the new
    job fails with 'CUDA out of memory' on a GPU that should be empty, or runs slower sharing it.""",
    fix="Find the processes with nvidia-smi and stop the ones that should not be there.",
)
def busy(facts: Facts) -> Result:
    devs = facts.get("nvml.devices") or []
    busy_devs = [d for d in devs if d.get("processes")]
    evidence: Dict[str, Any]
    evidence = {"processes": {_label(d): d.get("processes") for d in busy_devs},
                "memory_used": {_label(d): d.get("memory_used_bytes") for d in devs}}
    if busy_devs:
        parts = []
        for d in busy_devs:
            used = sum(p.get("used_memory_bytes") or 0 for p in d["processes"])
            pids = ", ".join(str(p["pid"]) for p in d["processes"])
            parts.append(f"{_label(d)}: PID {pids} ({human_bytes(used)})")
        return warn("GPU memory is held by other processes: " + "; ".join(parts), evidence,
                    Fix("Stop processes that should not be there.",
                        ("nvidia-smi --query-compute-apps=gpu_bus_id,pid,process_name,used_memory --format=csv",
                         "ps -o pid,user,etime,cmd -p <pid>", "kill <pid>")))
    return passed(f"no compute processes on {len(devs)} GPUs", **evidence)
