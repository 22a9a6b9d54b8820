"""Events in the kernel log of this boot that the signature base knows, judged against the NVIDIA module load."""

from __future__ import annotations

import shlex
from typing import Any, Dict, List, Union

from dl_doctor.checks.common import first_heading
from dl_doctor.fixes import Step, service
from dl_doctor.model import Facts, Fix, Result, check, fail, passed, skip, warn

# PCIe AER errors the hardware corrected (a link-level retry): a few in a boot are normal on healthy machines; a
# boot with this many has a link that keeps retrying, which costs bandwidth.
AER_CORRECTED_FLOOD = 100


def _corrected_aer(sig: Dict[str, Any], line: str) -> bool:
    from dl_doctor.judge.logs import corrected_aer

    return corrected_aer(sig, line)


@check(
    id="DLD-LOG-001", slug="kernel-log-events",
    remedy="reboot", drain=False,
    problem="An event since the NVIDIA module loaded left the driver or a job in a bad state",
    title="No event since the NVIDIA module was loaded has left the driver or a job in a bad state",
    tags=("driver", "gpu", "kernel", "logs"), requires=("kernel_log",),
    what="""Matches the kernel log of the current boot (the ring buffer live; from files, the syslog family read
    backwards with its rotations until the boot's first line, bounded) against the signature base: module symbol
    failures, PCIe AER errors, soft lockups, the OOM killer taking a Python process, segfaults inside CUDA
    libraries, and a suspend or hibernation after the NVIDIA module was loaded on a host without the driver's
    suspend/resume units. PCIe errors the hardware corrected are counted in the note of a pass (a few are normal),
    and warn only when a boot has 100 or more of them. Events before the module load, or from an earlier boot, do not count; Xid errors, API
    mismatches and rejected signatures are judged by their own checks. When the byte cap cut off the boot's start,
    the finding says so and judges what was read.""",
    why="""A GPU job fails for reasons that leave no file behind: the driver lost the GPU's memory across a suspend
    (CUDA then fails until the module reloads), the kernel killed a DataLoader worker for host memory, a CPU locked
    up in the driver. The log line is the only evidence, and the same line from last week's boot is noise.""",
    fix="""Follow the cause the finding names (dl-doctor why "LINE" explains one line); for suspend, enable
    nvidia-suspend/nvidia-resume (and nvidia-hibernate) or keep the host from suspending.""",
)
def kernel_log_events(facts: Facts, matrix) -> Result:
    from dl_doctor.judge.logs import events

    if facts.get("kernel_log.candidates") is None and facts.has("kernel_log"):
        return skip("these facts predate kernel-log events (dl-doctor 0.2.0); collect them again")
    sigs = {s["id"]: s for s in matrix.signatures()}
    found = events(facts.get("kernel_log.candidates") or [], sigs.values())
    causes = matrix.causes()
    boot = facts.get("kernel_log.boot") or {}
    problems: List[str] = []
    notes: List[str] = []
    severity = "pass"
    fixes: List[Union[str, Step]] = []
    rows: List[Dict[str, Any]] = []
    corrected: List[str] = []
    for e in found:
        sig = sigs.get(e.get("event"))
        if sig is None or sig.get("reported_by") or not e.get("after_module_load", True) and facts.get(
                "kernel_log.module_loaded"):
            continue
        if _corrected_aer(sig, str(e.get("line") or "")):
            corrected.append(str(e.get("line")))
            continue
        cause = causes.get((sig.get("causes") or [None])[0]) or {}
        text = f"{sig['meaning']}: {e.get('line')}"
        rows.append({"event": sig["id"], "line": e.get("line"), "cause": cause.get("summary"),
                     "meaning": sig.get("meaning"), "severity": sig.get("severity")})
        if sig.get("severity") == "fail":
            severity = "fail"
            problems.append(text)
        elif sig.get("severity") == "warn":
            severity = "warn" if severity == "pass" else severity
            notes.append(text)
        if cause.get("fix"):
            fixes.append(cause["fix"])
    if len(corrected) >= AER_CORRECTED_FLOOD:
        severity = "warn" if severity == "pass" else severity
        notes.append(f"{len(corrected)} corrected PCIe errors in this boot (a link that keeps retrying costs "
                     f"bandwidth): {corrected[-1]}")
        rows.append({"event": "pcie-aer", "line": corrected[-1], "meaning": "Corrected PCIe errors keep recurring",
                     "severity": "warn", "count": len(corrected), "cause": None})
        fixes.append("sudo lspci -vvv | grep -E 'CESta|UESta|LnkSta'   # which link, and its error status")
    units = facts.get("gpu_services.suspend_units") or {}
    after = [s for s in facts.get("kernel_log.suspends") or [] if s.get("after_module_load")]
    if after and not ((units.get("nvidia-suspend") or {}).get("enabled") and (units.get("nvidia-resume") or {}).get(
            "enabled")):
        severity = "warn" if severity == "pass" else severity
        notes.append(f"the host suspended after the NVIDIA module was loaded ({after[-1]['line']}) and "
                     f"nvidia-suspend/nvidia-resume are not enabled: GPU memory was not preserved")
        fixes.append(service("enable", "nvidia-suspend.service", "nvidia-resume.service", "nvidia-hibernate.service"))
    evidence: Dict[str, Any] = {"events": rows[:50], "boot": boot, "corrected_pcie_errors": len(corrected)}
    aer = (f"; {len(corrected)} corrected PCIe error(s), which the hardware retried (normal in small numbers)"
           if corrected and len(corrected) < AER_CORRECTED_FLOOD else "")
    cut = " (the byte cap cut off the start of this boot: judged what was read)" if boot.get("cut_by_cap") else ""
    fix = Fix("Deal with the cause each event names.", tuple(dict.fromkeys(fixes)) or ("dl-doctor why --log /var/log/kern.log",))
    worst = next((r for r in rows if r.get("severity") == "fail"), None) or next(
        (r for r in rows if r.get("severity") == "warn"), None)
    count = len(problems) + len(notes)
    headline = (worst["meaning"] if worst else "The host suspended after the NVIDIA module loaded, without the "
                "driver's suspend units") + (f" (and {count - 1} more)" if count > 1 else "")
    if severity == "fail":
        return fail("; ".join(problems + notes) + aer + cut, evidence, fix, headline=headline)
    if severity == "warn":
        return warn("; ".join(notes) + aer + cut, evidence, fix, headline=headline)
    where = boot.get("source") or facts.get("kernel_log.source") or "the kernel log"
    if facts.get("kernel_log.module_loaded"):
        return passed(f"no event in {where} of this boot since the NVIDIA module was loaded{aer}{cut}", **evidence)
    # No module load in the log: every event of the boot counted (an OOM kill or a soft lockup matters without a GPU)
    if facts.get("gpu_pci.gpu_count") == 0:
        why = "no NVIDIA GPU here, so no NVIDIA module load to count from"
    elif facts.get("nvidia_driver.kernel_module.loaded") is False:
        why = "the NVIDIA module is not loaded"
    elif facts.get("nvidia_driver.kernel_module.loaded"):
        why = "the NVIDIA module is loaded, but the part of the log read does not show it loading"
    else:
        why = "the log does not show the NVIDIA module loading"
    return passed(f"no event in {where} of this boot ({why}: every line of the boot read was judged){aer}{cut}",
                  **evidence)


def _units(facts: Facts) -> Dict[str, Dict[str, Any]]:
    services = facts.get("gpu_services") or {}
    out = {"nvidia-fabricmanager": services.get("fabric_manager") or {},
           "nvidia-persistenced": services.get("persistenced") or {}}
    for group in ("suspend_units", "other_units"):
        out.update({k: v for k, v in (services.get(group) or {}).items() if isinstance(v, dict)})
    return {k: v for k, v in out.items() if v.get("installed")}


@check(
    id="DLD-LOG-002", slug="gpu-service-failed",
    remedy="repair-software", drain=True,
    problem="An enabled NVIDIA service is not running",
    title="The NVIDIA services this host has enabled are running (fabric manager, persistence daemon, suspend units, "
          "DCGM, IMEX)",
    tags=("driver", "gpu", "logs", "services"), requires=("gpu_services",),
    what="""For each NVIDIA unit that is installed and enabled (nvidia-fabricmanager, nvidia-persistenced,
    nvidia-suspend/resume/hibernate, nvidia-dcgm, nvidia-imex), reads its state from systemd (live) and, for a unit that is not running, this
    boot's journal of it, matched against the signature base for the reason. In a tree (--sysroot), the state is
    the one systemd's own lines in the tree's journal of its last boot leave the unit in ('Started', 'Failed with
    result'), read by dl-doctor's journal reader.""",
    why="""A failed fabric manager leaves an NVSwitch system with 'system not yet initialized' (CUDA error 802); a
    failed persistence daemon makes every CUDA start slow and can lose the GPUs' state; the unit's own journal says
    why (a version mismatch with the driver, a missing device), and nothing else does.""",
    fix="""Fix the reason the journal names, then sudo systemctl restart the unit; a fabric manager must be the
    driver's exact version.""",
)
def gpu_service_failed(facts: Facts, matrix) -> Result:
    from dl_doctor.compat_matrix.signatures import match

    units = _units(facts)
    enabled = {k: v for k, v in units.items() if v.get("enabled")}
    if not enabled:
        return skip("no NVIDIA service is installed and enabled here")
    if all(v.get("active") is None and v.get("journal_state") is None for v in enabled.values()):
        return skip("service states are seen on a running host (systemctl) or in a tree's journal of its last "
                    "boot; neither is here")
    journal_sigs = [s for s in matrix.signatures() if "journal" in (s.get("where") or [])]
    causes = matrix.causes()
    problems, fixes, rows, heads = [], [], [], []
    seen = []
    for name, unit in sorted(enabled.items()):
        state = unit.get("active")
        where = ""
        if state is None and unit.get("journal_state"):
            state, where = unit["journal_state"], " (the journal of the tree's last boot)"
        if state is not None:
            seen.append(name)
        if state in (None, "active"):
            continue
        tail = unit.get("journal_tail") or []
        found = match("\n".join(tail), journal_sigs + matrix.signatures()) if tail else []
        reason = ""
        if found:
            cause = causes.get((found[0].signature.get("causes") or [None])[0]) or {}
            reason = f": {found[0].signature['meaning']} ({found[0].excerpt})"
            if cause.get("fix"):
                fixes.append(cause["fix"])
        elif tail:
            reason = f"; its journal ends: {tail[-1]}"
        problems.append(f"{name} is {state}{where}{reason}")
        heads.append(f"{name} is {state}" + (f": {found[0].signature['meaning']}" if found else ""))
        rows.append({"unit": name, "active": state, "journal_tail": tail[-10:]})
        fixes.append(service("restart", f"{name}.service"))
        fixes.append(f"journalctl -b -u {shlex.quote(name)} -n 50 --no-pager")
    if problems:
        return fail("; ".join(problems), {"units": rows}, Fix("Get the NVIDIA services running again.",
                                                              tuple(dict.fromkeys(fixes))),
                    headline=first_heading(heads))
    return passed(f"running: {', '.join(seen)}")
