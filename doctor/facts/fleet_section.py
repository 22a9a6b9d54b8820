"""The ``fleet_node`` section every report carries (what `dl-doctor fleet` compares across nodes): built here, apart
from the merge, so writing a report imports nothing the merge needs (tarfile, glob)."""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, Iterable, Mapping, Optional

from dl_doctor.facts.loading import env_consumers, model

FLEET_VERSION = "1"
MAX_VALUE = 300
ENV_PREFIXES = ("NCCL_", "FI_", "CUDA_")
LIBS = ("libnccl", "libcudnn", "libcublas", "libcudart", "libnvJitLink")


def _s(value: Any) -> Optional[str]:
    if value is None or isinstance(value, (dict, list)):
        return None
    return str(value)[:MAX_VALUE]


def _fabric(get: Any) -> Dict[str, Optional[str]]:
    """What the fabric looks like, as values that are the same on every healthy node of a group: RDMA ports up and
    their rates, PCIe links of GPUs/NICs trained narrower than the device supports, NVLink links active."""
    out: Dict[str, Optional[str]] = {}
    ports = get("links.rdma_ports")
    if isinstance(ports, list) and ports:
        items = [p for p in ports if isinstance(p, Mapping)]
        active = [p for p in items if p.get("state_code") == 4]
        out["rdma.ports_active"] = f"{len(active)} of {len(items)}"
        rates = sorted({float(p["rate_gbps"]) for p in active if isinstance(p.get("rate_gbps"), (int, float))})
        out["rdma.rate_gbps"] = ",".join(f"{r:g}" for r in rates) or None
    pci = get("links.pci")
    if isinstance(pci, list) and pci:
        narrow = [d for d in pci if isinstance(d, Mapping) and isinstance(d.get("width"), int)
                  and isinstance(d.get("max_width"), int) and 0 < d["width"] < d["max_width"]]
        out["pcie.narrow_links"] = str(len(narrow))
    devices = get("nvml.devices")
    if isinstance(devices, list):
        links = [l for d in devices if isinstance(d, Mapping) and isinstance(d.get("nvlink"), Mapping)
                 for l in d["nvlink"].get("links") or [] if isinstance(l, Mapping)]
        if links:
            out["nvlink.links_active"] = f"{sum(1 for l in links if l.get('active'))} of {len(links)}"
        gpus = [d for d in devices if isinstance(d, Mapping)]
        vbios = sorted({str(d["vbios_version"])[:64] for d in gpus if d.get("vbios_version")})
        if vbios:
            out["gpu.vbios"] = ",".join(vbios)
        limits = sorted({d["power_limit_mw"] // 1000 for d in gpus if isinstance(d.get("power_limit_mw"), int)})
        if limits:
            out["gpu.power_limit_w"] = ",".join(str(w) for w in limits)
    return out


def node_section(facts: Mapping[str, Any], findings: Iterable[Mapping[str, Any]],
                 loading: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """What the fleet comparison needs of one node, from its facts and findings."""
    def get(path: str) -> Any:
        cur: Any = facts
        for part in path.split("."):
            if not isinstance(cur, Mapping):
                return None
            cur = cur.get(part)
        return cur

    compare: Dict[str, Optional[str]] = {}
    compare["driver"] = _s(get("nvidia_driver.kernel_module.version"))
    versions = get("nvidia_driver.userspace.versions")
    compare["driver.userspace"] = ",".join(sorted(str(v) for v in versions)) if isinstance(versions, list) else None
    compare["cuda.driver_api"] = _s(get("nvml.cuda_driver_version"))
    compare["kernel"] = _s(get("kernel.release"))
    compare["os"] = _s(get("os.pretty_name"))
    devices = get("nvml.devices")
    names = Counter(str(d.get("name")) for d in devices if isinstance(d, Mapping)) if isinstance(devices, list) else {}
    compare["gpu.model"] = ", ".join(sorted(names)) if names else None
    compare["gpu.count"] = _s(get("gpu_pci.gpu_count"))
    compare["instance_type"] = _s(get("cloud.instance_type") or get("imds.instance_type"))
    toolkits = get("cuda_toolkits.toolkits")
    if isinstance(toolkits, list):
        compare["cuda.toolkits"] = ",".join(sorted(str(t.get("version")) for t in toolkits if isinstance(t, Mapping)))
    fm = get("gpu_services.fabric_manager.version")
    compare["fabric_manager"] = _s(fm.get("version")) if isinstance(fm, Mapping) else None
    installed = get("network.efa_installed")
    if isinstance(installed, Mapping):
        for key in ("efa-installer", "aws-ofi-nccl", "libnccl-ofi", "libfabric-aws", "libfabric"):
            if installed.get(key):
                compare[f"efa.{key}"] = _s(installed[key])
    libfabric = get("network.libfabric")
    if isinstance(libfabric, list) and libfabric:
        compare["libfabric"] = ",".join(sorted({str(l.get("version")) for l in libfabric if isinstance(l, Mapping)}))
    compare["efa.devices"] = _s(len(get("network.efa_devices") or [])) if get("network") is not None else None
    compare.update(_fabric(get))
    variables = get("environment.variables")
    env = dict(get("network.env") or {}) if isinstance(get("network.env"), Mapping) else {}
    if isinstance(variables, Mapping):
        env.update({k: v for k, v in variables.items() if isinstance(k, str) and k.startswith(ENV_PREFIXES)})
    for k, v in sorted(env.items())[:200]:
        compare[f"env.{k}"] = _s(v)
    for e in (get("python_envs.environments") or [])[:64] if isinstance(get("python_envs.environments"), list) else []:
        if not isinstance(e, Mapping):
            continue
        name = str(e.get("name") or e.get("prefix"))[:100]
        for c in env_consumers(loading if isinstance(loading, Mapping) else model(facts, None), e):
            if not isinstance(c, Mapping):
                continue
            dist = str(c.get("distribution"))[:100]
            compare[f"python.{name}.{dist}"] = _s(c.get("version"))
            build: Mapping[str, Any] = c["build"] if isinstance(c.get("build"), Mapping) else {}
            if build.get("cuda"):
                compare[f"python.{name}.{dist}.cuda"] = _s(build["cuda"])
            for lib in c.get("libraries") or []:
                if isinstance(lib, Mapping) and str(lib.get("soname", "")).startswith(LIBS):
                    stem = str(lib["soname"]).split(".so")[0]
                    compare[f"python.{name}.{dist}.{stem}"] = _s(lib.get("version") or lib.get("path"))
    failing = [{"id": str(f.get("id")), "status": str(f.get("status")),
                "headline": str(f.get("headline") or f.get("title") or "")[:200]}
               for f in findings if isinstance(f, Mapping) and f.get("status") in ("fail", "error")][:200]
    warnings = sum(1 for f in findings if isinstance(f, Mapping) and f.get("status") == "warn")
    identity = {"hostname": _s(get("system.hostname")), "instance_id": _s(get("imds.instance_id"))}
    return {"version": FLEET_VERSION, "identity": identity,
            "compare": {k: v for k, v in compare.items() if v is not None}, "failing": failing, "warnings": warnings}
