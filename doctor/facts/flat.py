"""The software/hardware stack as a flat set of versions, read from the facts.

Used by golden-stack expectations (``--expect``, ``dl-doctor expect --from``) and by ``dl-doctor diff``;
both compare the same names.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from dl_doctor.facts.loading import env_consumers, model
from dl_doctor.model import Facts


def _first(values):
    return next((v for v in values if v), None)


def environment_stack(env: Dict[str, Any], loading: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """One environment's versions; cuDNN and NCCL as the copies torch loads (the one resolution model,
    dl_doctor.facts.loading), else the environment's own copies."""
    fw = env.get("frameworks") or {}
    torch = fw.get("torch") or {}
    libs = env.get("cuda_libraries") or {}
    consumers = env_consumers(loading if loading is not None else model({"python_envs": {"environments": [env]}},
                                                                          None), env)
    loaded = next((c.get("libraries") or [] for c in consumers if c.get("distribution") == "torch"), [])

    def lib(key: str) -> Optional[str]:
        hit = next((x for x in loaded if str(x.get("soname", "")).startswith(f"lib{key}.so") and x.get("version")),
                   None)
        if hit:
            return hit["version"]
        return _first(c.get("version") for c in libs.get(key) or [])

    out: Dict[str, Any] = {"python": env.get("python_version") or (env.get("live") or {}).get("version")}
    if torch:
        out.update(torch=torch.get("version"), cuda=torch.get("cuda"), cudnn=lib("cudnn"), nccl=lib("nccl"))
    out["packages"] = dict(sorted((env.get("distributions") or {}).items()))
    return {k: v for k, v in out.items() if v not in (None, {}, "")}


def stack(facts: Facts) -> Dict[str, Any]:
    """``{"os_id", "os_version", "kernel", "driver", "cuda_toolkit", "gpu_model", "gpu_count", "efa_devices", ...,
    "environments": {name: {...}}}`` with unknown items left out."""
    default_tk = facts.get("cuda_toolkits.default.version")
    toolkits = [t.get("version") for t in facts.get("cuda_toolkits.toolkits") or [] if t.get("version")]
    gpus = [d for d in facts.get("gpu_pci.devices") or [] if d.get("kind") == "gpu"]
    # The model as the driver names it; with the driver down there is none, but the PCI IDs (from sysfs) still
    # say which GPUs are installed, so drift compares them separately.
    models = sorted({d.get("name") for d in facts.get("nvml.devices") or [] if d.get("name")}) or \
        sorted({g.get("model") for g in facts.get("nvidia_driver.proc_gpus") or [] if g.get("model")})
    pci_ids = sorted({f"{g.get('vendor_id')}:{g.get('device_id')}" for g in gpus if g.get("device_id")})
    envs: Dict[str, Any] = {}
    for env in facts.get("python_envs.environments") or []:
        if env.get("kind") in ("user-site",) or env.get("role") == "dl-doctor":
            continue
        name = env.get("name") or env.get("prefix")
        if name in envs:
            name = env.get("prefix")
        envs[name] = environment_stack(env)
    out = {
        "os_id": facts.get("os.id"), "os_version": facts.get("os.version_id"), "kernel": facts.get("kernel.release"),
        "driver": facts.get("nvidia_driver.kernel_module.version") or facts.get("nvml.driver_version"),
        # the user-space driver (libcuda): differs from "driver" (the loaded module) after an upgrade without reboot
        "driver_userspace": ", ".join(facts.get("nvidia_driver.userspace.versions") or []) or None,
        "cuda_toolkit": default_tk or (toolkits[0] if len(toolkits) == 1 else None),
        "cuda_toolkits": sorted(toolkits) or None,
        "gpu_model": models[0] if len(models) == 1 else (", ".join(models) if models else None),
        "gpu_pci_ids": ", ".join(pci_ids) or None,
        "gpu_count": facts.get("nvml.device_count") if facts.has("nvml.device_count") else facts.get("gpu_pci.gpu_count"),
        "nvswitch_count": facts.get("gpu_pci.nvswitch_count") or None,
        "efa_devices": len(facts.get("network.efa_devices") or []) if facts.has("network") else None,
        "fabric_manager": (facts.get("gpu_services.fabric_manager.version") or {}).get("version"),
        "instance_type": facts.get("cloud.instance_type") or facts.get("imds.instance_type"),
        "environments": envs or None,
    }
    return {k: v for k, v in out.items() if v not in (None, "")}


def flatten(doc: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    """``{"environments": {"pytorch": {"torch": "2.4.1"}}}`` -> ``{"environments.pytorch.torch": "2.4.1"}``."""
    out: Dict[str, Any] = {}
    for k, v in doc.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out
