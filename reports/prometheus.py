"""Metrics in the node_exporter textfile format (write to its --collector.textfile.directory)."""

from __future__ import annotations

import datetime as _dt
from typing import Any, Dict, List

from dl_doctor.model import Facts, iter_statuses
from dl_doctor.facts.flat import stack

STATUS_VALUE = {"pass": 0, "skip": 0, "warn": 1, "fail": 2, "error": 3}


def _label(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(report: Dict[str, Any]) -> str:
    host = report.get("host", {})
    lines: List[str] = [
        "# HELP dl_doctor_check_status Status of each dl-doctor check (0 pass or skip, 1 warn, 2 fail, 3 error).",
        "# TYPE dl_doctor_check_status gauge",
    ]
    for f in sorted(report.get("findings", []), key=lambda f: f["id"]):
        lines.append(f'dl_doctor_check_status{{id="{_label(f["id"])}",slug="{_label(f.get("slug", ""))}",'
                     f'status="{f["status"]}"}} {STATUS_VALUE[f["status"]]}')
    lines += ["# HELP dl_doctor_findings Number of findings per status.", "# TYPE dl_doctor_findings gauge"]
    summary = report.get("summary", {})
    for status in iter_statuses():
        lines.append(f'dl_doctor_findings{{status="{status.value}"}} {summary.get(status.value, 0)}')
    run = report.get("run", {})
    lines += ["# HELP dl_doctor_run_duration_seconds How long the run took.",
              "# TYPE dl_doctor_run_duration_seconds gauge",
              f"dl_doctor_run_duration_seconds {float(run.get('duration_s') or 0):.3f}",
              "# HELP dl_doctor_probe_errors Probes that failed or timed out in this run.",
              "# TYPE dl_doctor_probe_errors gauge",
              f"dl_doctor_probe_errors {len(report.get('probe_errors') or [])}"]
    info = {"version": report.get("tool", {}).get("version"), "hostname": host.get("hostname")}
    try:
        versions = stack(Facts(report))
    except Exception:  # noqa: BLE001 - a report without usable facts still gets its status metrics
        versions = {}
    for key in ("os_id", "os_version", "kernel", "driver", "cuda_toolkit", "gpu_model", "gpu_count", "instance_type"):
        info[key] = versions.get(key)
    info["torch"] = next((e["torch"] for e in (versions.get("environments") or {}).values() if e.get("torch")), None)
    labels = ",".join(f'{k}="{_label(v)}"' for k, v in info.items() if v is not None)
    lines += ["# HELP dl_doctor_info Versions found by the last dl-doctor run.", "# TYPE dl_doctor_info gauge",
              f"dl_doctor_info{{{labels}}} 1"]
    lines += _nvlink_metrics(report)
    started = run.get("started_at")
    if started:
        try:
            stamp = _dt.datetime.fromisoformat(str(started).replace("Z", "+00:00")).timestamp()
            lines += ["# HELP dl_doctor_last_run_timestamp_seconds When the run started (Unix time).",
                      "# TYPE dl_doctor_last_run_timestamp_seconds gauge",
                      f"dl_doctor_last_run_timestamp_seconds {stamp:.0f}"]
        except ValueError:
            pass
    return "\n".join(lines) + "\n"


def _nvlink_metrics(report: Dict[str, Any]) -> List[str]:
    """NVLink link states and error counters, and each GPU's NVSwitch fabric state (nvml facts, issue 30)."""
    try:
        devs = Facts(report).get("nvml.devices") or []
    except Exception:  # noqa: BLE001 - a report without usable facts has no NVLink metrics
        return []
    active: List[str] = []
    errors: List[str] = []
    fabric: List[str] = []
    for dev in devs if isinstance(devs, list) else []:
        if not isinstance(dev, dict):
            continue
        gpu = _label(dev.get("index"))
        raw = dev.get("nvlink")
        nvlink: Dict[str, Any] = raw if isinstance(raw, dict) else {}
        for link in nvlink.get("links") or []:
            if not isinstance(link, dict):
                continue
            name = _label(link.get("link"))
            active.append(f'dl_doctor_nvlink_link_active{{gpu="{gpu}",link="{name}"}} {1 if link.get("active") else 0}')
            for counter, value in sorted((link.get("errors") or {}).items()):
                if isinstance(value, int) and not isinstance(value, bool):
                    errors.append(f'dl_doctor_nvlink_errors_total{{gpu="{gpu}",link="{name}",'
                                  f'counter="{_label(counter)}"}} {value}')
        fab = dev.get("fabric")
        if isinstance(fab, dict) and fab.get("state"):
            fabric.append(f'dl_doctor_gpu_fabric_state{{gpu="{gpu}",state="{_label(fab["state"])}"}} 1')
    out: List[str] = []
    if active:
        out += ["# HELP dl_doctor_nvlink_link_active Whether each NVLink link is up (1) or down (0).",
                "# TYPE dl_doctor_nvlink_link_active gauge"] + active
    if errors:
        out += ["# HELP dl_doctor_nvlink_errors_total NVLink error counters per link (replay, recovery, crc_flit, "
                "crc_data).", "# TYPE dl_doctor_nvlink_errors_total counter"] + errors
    if fabric:
        out += ["# HELP dl_doctor_gpu_fabric_state Each GPU's NVSwitch fabric registration state (1 for its state).",
                "# TYPE dl_doctor_gpu_fabric_state gauge"] + fabric
    return out
