"""The version inventory: every version that matters, in one table (HTML report, support tickets)."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

from dl_doctor.facts.derive import torch_cpu_only
from dl_doctor.facts.loading import env_consumers
from dl_doctor.util.units import human_bytes


def _get(facts: Dict[str, Any], path: str) -> Any:
    node: Any = facts
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _gpu_name(pci_id: str, gpu_names: Optional[Mapping[str, str]]) -> str:
    """``10de:20b0`` -> ``NVIDIA A100 SXM4 40GB (10de:20b0)`` when ``gpu_names`` (the application's, from the run's
    matrix) names it; the ID alone otherwise (a name is a nicety, the ID is the fact)."""
    name = (gpu_names or {}).get(pci_id)
    return f"{name} ({pci_id})" if name else pci_id


def gpu_ids(report: Dict[str, Any]) -> List[str]:
    """The PCI IDs (``10de:XXXX``) of the report's NVIDIA GPUs, for the caller that names them (gpu_names)."""
    devices = _get(report.get("facts", {}) or {}, "gpu_pci.devices") or []
    return sorted({f"10de:{d.get('device_id')}" for d in devices if isinstance(d, dict) and d.get("kind") == "gpu"})


def inventory(report: Dict[str, Any], gpu_names: Optional[Mapping[str, str]] = None) -> List[Tuple[str, str]]:
    """(item, value) rows built from the report's facts; unknown items are left out. ``gpu_names``: the GPU model
    for a PCI ID (``10de:20b0``), supplied by the application from the run's matrix (a report never loads it)."""
    facts = report.get("facts", {}) or {}
    rows: List[Tuple[str, str]] = []

    def add(label: str, value: Any) -> None:
        if value not in (None, "", []):
            rows.append((label, str(value)))

    add("Operating system", _get(facts, "os.pretty_name") or _get(facts, "os.redhat_release"))
    add("Kernel (running)", _get(facts, "kernel.release"))
    installed = _get(facts, "kernel.installed")
    if installed:
        add("Kernels installed", ", ".join(installed))
    add("Architecture", _get(facts, "kernel.arch"))
    add("Container", _get(facts, "system.container.kind"))
    module = _get(facts, "nvidia_driver.kernel_module") or {}
    if module.get("version"):
        add("NVIDIA kernel module", f"{module['version']} ({module.get('flavor') or 'flavour unknown'})")
    elif module.get("loaded") is False:
        add("NVIDIA kernel module", "not loaded")
    add("User-space driver", ", ".join(_get(facts, "nvidia_driver.userspace.versions") or []))
    gpus = [d for d in (_get(facts, "gpu_pci.devices") or []) if d.get("kind") == "gpu"]
    if gpus:
        ids: Dict[str, int] = {}
        for g in gpus:
            key = f"10de:{g.get('device_id')}"
            ids[key] = ids.get(key, 0) + 1
        add("NVIDIA GPUs", ", ".join(f"{n} × {_gpu_name(k, gpu_names)}" for k, n in sorted(ids.items())))
    elif _get(facts, "gpu_pci.gpu_count") == 0:
        add("NVIDIA GPUs", "none")
    if _get(facts, "gpu_pci.nvswitch_count"):
        add("NVSwitches", _get(facts, "gpu_pci.nvswitch_count"))
    fm = (_get(facts, "gpu_services.fabric_manager.version") or {}).get("version")
    add("Fabric manager", fm)
    add("NVML CUDA version", _get(facts, "nvml.cuda_driver_version"))
    for tk in _get(facts, "cuda_toolkits.toolkits") or []:
        add(f"CUDA toolkit {tk.get('path')}", tk.get("version") or "version unknown")
    add("EC2 instance type", _get(facts, "cloud.instance_type"))
    for env in _get(facts, "python_envs.environments") or []:
        fw = env.get("frameworks") or {}
        parts = [f"Python {env.get('python_version') or '?'}"]
        torch = fw.get("torch")
        if torch:
            parts.append(f"torch {torch.get('version')}" + (" (CPU build)" if torch_cpu_only(torch, env.get("conda_packages")) else
                                                           f" (CUDA {torch.get('cuda')})"))
        for name in ("torchvision", "tensorflow", "jax", "numpy"):
            if fw.get(name):
                parts.append(f"{name} {fw[name].get('version')}")
        torch_loads = next((c.get("libraries") or [] for c in env_consumers(report.get("loading") or {}, env)
                            if c.get("distribution") == "torch"), [])
        for key in ("cudnn", "nccl"):
            hit = next((x for x in torch_loads if str(x.get("soname", "")).startswith(f"lib{key}.so")), None)
            if hit:
                parts.append(f"{key} {hit.get('version') or 'version not known'}")
        label = f"Python env {env.get('name')} ({env.get('kind')})"
        add(label, ", ".join(parts) + f" — {env.get('prefix')}")
    shm = _get(facts, "mounts.shm") or {}
    if shm.get("size_bytes") is not None:
        add("/dev/shm", human_bytes(shm["size_bytes"]))
    for vol in _get(facts, "disks.volumes") or []:
        add(f"Free on {', '.join(vol.get('paths', []))}",
            f"{human_bytes(vol.get('free_bytes'))} of {human_bytes(vol.get('total_bytes'))}"
            + (f" ({vol['fstype']})" if vol.get("fstype") else ""))
    mem = _get(facts, "memory.total_bytes")
    if mem:
        add("Memory", human_bytes(mem))
    return rows
