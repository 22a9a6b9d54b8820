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
    lines += _links_metrics(report.get("facts") or {})
    lines += _gpu_node_metrics(report.get("facts") or {})
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


def _gauge(name: str, help_text: str, samples: List[tuple]) -> List[str]:
    """One gauge family (nothing when it has no sample): ``samples`` are (labels dict, value)."""
    if not samples:
        return []
    out = [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
    for labels, value in samples:
        text = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items() if v is not None)
        out.append(f"{name}{{{text}}} {value:g}" if isinstance(value, float) else f"{name}{{{text}}} {value}")
    return out


def _num(value: Any) -> Any:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _links_metrics(facts: Dict[str, Any]) -> List[str]:
    """RDMA ports and PCIe links (the links probe): state, rate, error counters, link width/speed, AER totals."""
    links = facts.get("links") if isinstance(facts, dict) else None
    if not isinstance(links, dict):
        return []
    ports = [p for p in links.get("rdma_ports") or [] if isinstance(p, dict)][:512]
    pci = [d for d in links.get("pci") or [] if isinstance(d, dict)][:1024]

    def port(p: Dict[str, Any]) -> Dict[str, Any]:
        return {"device": p.get("device"), "port": p.get("port"), "link_layer": p.get("link_layer")}

    up = [(port(p), 1 if p.get("state_code") == 4 and p.get("phys_state_code") in (5, None) else 0)
          for p in ports if p.get("state_code") is not None]
    rate = [(port(p), float(p["rate_gbps"])) for p in ports if _num(p.get("rate_gbps")) is not None]
    errors = [({**port(p), "counter": name}, value) for p in ports if isinstance(p.get("counters"), dict)
              for name, value in sorted(p["counters"].items()) if _num(value) is not None]
    width = [({"bdf": d.get("bdf"), "kind": d.get("kind")}, d["width"]) for d in pci if _num(d.get("width"))]
    max_width = [({"bdf": d.get("bdf"), "kind": d.get("kind")}, d["max_width"]) for d in pci
                 if _num(d.get("max_width"))]
    speed = [({"bdf": d.get("bdf"), "kind": d.get("kind")}, float(d["speed_gts"])) for d in pci
             if _num(d.get("speed_gts")) is not None]
    aer = [({"bdf": d.get("bdf"), "kind": d.get("kind"), "severity": sev}, (d["aer"].get(sev) or {}).get("total"))
           for d in pci if isinstance(d.get("aer"), dict) for sev in ("fatal", "nonfatal", "correctable")
           if isinstance(d["aer"].get(sev), dict) and _num((d["aer"].get(sev) or {}).get("total")) is not None]
    return (_gauge("dl_doctor_rdma_port_up", "An RDMA port is ACTIVE and LinkUp (1) or not (0).", up)
            + _gauge("dl_doctor_rdma_port_rate_gbps", "An ACTIVE RDMA port's rate in Gb/s.", rate)
            + _gauge("dl_doctor_rdma_port_errors", "An RDMA port's error counter (since it was last cleared).", errors)
            + _gauge("dl_doctor_pcie_link_width", "A GPU's or NIC's current PCIe link width (lanes, sysfs).", width)
            + _gauge("dl_doctor_pcie_link_max_width", "The widest PCIe link the device supports.", max_width)
            + _gauge("dl_doctor_pcie_link_speed_gts", "The current PCIe link speed in GT/s per lane.", speed)
            + _gauge("dl_doctor_pcie_aer_errors", "AER errors since boot by severity (fatal, nonfatal, correctable).",
                     aer))


def _gpu_node_metrics(facts: Dict[str, Any]) -> List[str]:
    """Each GPU's firmware and power limit (NVML), its NUMA node and closest NIC (topology), and hung GPU work."""
    if not isinstance(facts, dict):
        return []
    nvml: Dict[str, Any] = facts["nvml"] if isinstance(facts.get("nvml"), dict) else {}
    devices = [d for d in nvml.get("devices") or [] if isinstance(d, dict)][:256]
    firmware = [({"gpu": d.get("index"), "uuid": d.get("uuid"), "vbios": d.get("vbios_version"),
                  "inforom": d.get("inforom_image_version")}, 1)
                for d in devices if d.get("vbios_version") or d.get("inforom_image_version")]
    power = [({"gpu": d.get("index"), "uuid": d.get("uuid")}, d["power_limit_mw"] / 1000.0)
             for d in devices if _num(d.get("power_limit_mw")) is not None]
    topo: Dict[str, Any] = facts["topology"] if isinstance(facts.get("topology"), dict) else {}
    place = []
    for g in [g for g in topo.get("gpus") or [] if isinstance(g, dict)][:256]:
        near: Dict[str, Any] = {}
        for key in ("closest_rdma", "closest_nic"):
            if isinstance(g.get(key), dict):
                near = g[key]
                break
        place.append(({"address": g.get("address"), "numa_node": g.get("numa_node"), "nic": near.get("name"),
                       "closeness": near.get("closeness")}, 1))
    hung_facts = facts.get("gpu_hung_processes") if isinstance(facts.get("gpu_hung_processes"), dict) else None
    hung: List[tuple] = ([({}, len([p for p in hung_facts.get("hung") or [] if isinstance(p, dict)]))]
                         if hung_facts else [])
    return (_gauge("dl_doctor_gpu_firmware_info", "Each GPU's VBIOS and InfoROM versions (NVML).", firmware)
            + _gauge("dl_doctor_gpu_power_limit_watts", "Each GPU's power management limit (NVML).", power)
            + _gauge("dl_doctor_gpu_topology_info", "Each GPU's NUMA node and its closest NIC (sysfs).", place)
            + _gauge("dl_doctor_gpu_hung_processes", "Processes holding a GPU in uninterruptible sleep in two "
                                                     "samples a second apart.", hung))
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
            health = _label(fab.get("health_summary") or "unknown")
            fabric.append(f'dl_doctor_gpu_fabric_state{{gpu="{gpu}",state="{_label(fab["state"])}",'
                          f'health="{health}"}} 1')
    out: List[str] = []
    if active:
        out += ["# HELP dl_doctor_nvlink_link_active Whether each NVLink link is up (1) or down (0).",
                "# TYPE dl_doctor_nvlink_link_active gauge"] + active
    if errors:
        out += ["# HELP dl_doctor_nvlink_errors_total NVLink error counters per link (replay, recovery, crc_flit, "
                "crc_data).", "# TYPE dl_doctor_nvlink_errors_total counter"] + errors
    if fabric:
        out += ["# HELP dl_doctor_gpu_fabric_state Each GPU's NVSwitch fabric registration state and health summary "
                "(1 for its state; health unknown before nvmlGpuFabricInfo_v3).",
                "# TYPE dl_doctor_gpu_fabric_state gauge"] + fabric
    return out
