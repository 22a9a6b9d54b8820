"""EFA devices, libfabric, the aws-ofi-nccl plugin, network interfaces, and the limits and kernel settings that
training depends on (memlock, nofile, IOMMU, NUMA balancing, transparent hugepages, CPU governor)."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

from dl_doctor.readers.ldso import Loader
from dl_doctor.util.parse import ascii_int
from dl_doctor.facts.contract import Fact, array, boolean, count, integer, map_of, obj, string
from dl_doctor.probes import ProbeContext, probe

PLUGIN_DIRS = ("/opt/amazon/ofi-nccl/lib", "/opt/amazon/ofi-nccl/lib64", "/opt/aws-ofi-nccl/lib",
               "/usr/local/cuda/efa/lib", "/usr/local/lib", "/usr/lib64", "/usr/lib/x86_64-linux-gnu")
LIBFABRIC_DIRS = ("/opt/amazon/efa/lib", "/opt/amazon/efa/lib64", "/usr/lib64", "/usr/lib/x86_64-linux-gnu",
                  "/usr/local/lib")
_PKG = re.compile(r"^(?P<name>[a-z][a-z0-9_.+-]*?)-(?P<version>\d+\.\d+(?:\.\d+)?[0-9a-z.]*)-", re.M)


def parse_limits_conf(text: str) -> List[Dict[str, str]]:
    """``/etc/security/limits.conf`` lines: domain, type (soft/hard/-), item, value."""
    out = []
    for line in text.splitlines():
        parts = line.split("#", 1)[0].split()
        if len(parts) == 4:
            out.append({"domain": parts[0], "type": parts[1], "item": parts[2], "value": parts[3]})
    return out


def parse_installed_packages(text: str) -> Dict[str, str]:
    """``/opt/amazon/efa_installed_packages``: the installer version and package versions."""
    out: Dict[str, str] = {}
    m = re.search(r"EFA installer version:\s*(\S+)", text)
    if m:
        out["efa-installer"] = m.group(1)
    for pm in _PKG.finditer(text):
        out.setdefault(pm.group("name"), pm.group("version"))
    return out


def _version_from_name(name: str) -> Optional[str]:
    m = re.search(r"\.so\.(\d+\.\d+(?:\.\d+)?)$", name)
    return m.group(1) if m else None


NETWORK_FACTS = obj(
    "network devices, EFA, NCCL/libfabric",
    infiniband_devices=array(obj(
        "",
        name=string("the device (/sys/class/infiniband/NAME)"),
        driver=string("its bound driver (efa, mlx5_core...)"),
        link_layer=string("port 1's link layer: InfiniBand or Ethernet (RoCE); null: not known", since="0.2.0"),
    ), "RDMA devices in /sys/class/infiniband"),
    efa_devices=array(string(), "the EFA devices among them (driver efa, or named efa*/rdmap*)"),
    uverbs=array(string(), "/dev/infiniband/uverbs* (live only): what user-space RDMA opens"),
    libfabric=array(obj(
        "",
        path=string("the library file"),
        version=string("its version from the file name"),
    ), "libfabric.so* in the EFA installer's and the system's library directories"),
    efa_provider=boolean("libfabric's EFA provider is installed (the EFA installer's libfabric)"),
    efa_installed=map_of(string("its version"), "/opt/amazon/efa_installed_packages: package (and efa-installer) -> "
                                                "version (null: no such file)"),
    ofi_nccl_plugins=array(obj(
        "",
        path=string("the plugin file (libnccl-net*.so*)"),
        link=string("the link's target, when it is a link"),
    ), "NCCL network plugins (aws-ofi-nccl) in the usual directories"),
    nccl_plugin_lookup=obj(
        "the NCCL net plugin NCCL would load, found as the loader would",
        name=string("the library NCCL asks for (libnccl-net.so, or from NCCL_NET_PLUGIN)"),
        found=string("where it resolves (null: not found)"),
        via=string("how: LD_LIBRARY_PATH, ld.so.cache, a default directory, path"),
    ),
    interfaces=array(string(), "network interfaces (/sys/class/net)"),
    env=map_of(string("the value"), "NCCL_* and FI_* settings of the session (null: the environment is not known)"),
)


@probe("network", "EFA devices, libfabric and the aws-ofi-nccl plugin, network interfaces, NCCL/FI settings",
       provides=NETWORK_FACTS)
def network_probe(ctx: ProbeContext) -> Dict[str, Any]:
    host = ctx.host
    devices: List[Dict[str, Any]] = []
    for name in host.listdir("/sys/class/infiniband"):
        driver = host.readlink(f"/sys/class/infiniband/{name}/device/driver")
        layer = host.try_read(f"/sys/class/infiniband/{name}/ports/1/link_layer", 64)
        devices.append({"name": name, "driver": driver.rsplit("/", 1)[-1] if driver else None,
                        "link_layer": layer.strip()[:32] if layer else None})
    efa = [d for d in devices if d["driver"] == "efa" or d["name"].startswith(("efa", "rdmap"))]
    uverbs = sorted(n for n in host.listdir("/dev/infiniband") if n.startswith("uverbs")) if host.kernel_live else None

    installed_text = host.try_read("/opt/amazon/efa_installed_packages", 1 << 20)
    installed = parse_installed_packages(installed_text) if installed_text else {}
    libfabric: List[Dict[str, Any]] = []
    for d in LIBFABRIC_DIRS:
        for n in host.listdir(d):
            if n.startswith("libfabric.so"):
                libfabric.append({"path": f"{d}/{n}", "version": _version_from_name(n)})
    efa_provider = bool(host.glob("/opt/amazon/efa/lib*/libfabric/libefa-fi.so") or
                        (libfabric and any(p["path"].startswith("/opt/amazon/efa/") for p in libfabric)))
    plugins = []
    for d in PLUGIN_DIRS:
        for n in host.listdir(d):
            if n.startswith("libnccl-net") and ".so" in n:
                plugins.append({"path": f"{d}/{n}", "link": host.readlink(f"{d}/{n}")})
    env = host.environ()
    ld = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    wanted = env.get("NCCL_NET_PLUGIN")
    name = "libnccl-net.so" if not wanted else (wanted if wanted.endswith(".so") else f"libnccl-net-{wanted}.so")
    found, via = Loader(host, ld_library_path=ld).search(name, None) if "/" not in name else (
        name if host.is_file(name) else None, "path")
    interfaces = [n for n in host.listdir("/sys/class/net")]
    nccl_env = {k: v for k, v in env.items() if k.startswith(("NCCL_", "FI_"))}
    return {
        "infiniband_devices": devices, "efa_devices": [d["name"] for d in efa], "uverbs": uverbs,
        "libfabric": libfabric, "efa_provider": efa_provider,
        "efa_installed": installed or None,
        "ofi_nccl_plugins": plugins,
        "nccl_plugin_lookup": {"name": name, "found": found, "via": via if found else None},
        "interfaces": interfaces, "env": nccl_env if host.environ_known else None,
    }


PROC_LIMITS = {"Max locked memory": "memlock", "Max open files": "nofile", "Max core file size": "core"}


def parse_proc_limits(text: str) -> Dict[str, Dict[str, Any]]:
    """/proc/PID/limits (the kernel's proc_pid_limits: a header, then 'Max ...' name, soft, hard, units columns)."""
    out: Dict[str, Dict[str, Any]] = {}
    for line in text.splitlines()[:64]:
        for name, key in PROC_LIMITS.items():
            if line.startswith(name):
                cols = line[len(name):].split()
                if len(cols) >= 2:
                    out[key] = {"soft": cols[0] if not cols[0].isdigit() else int(cols[0]),
                                "hard": cols[1] if not cols[1].isdigit() else int(cols[1])}
    return out


def _rlimit(what: str):
    return obj(what, soft=Fact("integer|string", "the soft limit (unlimited, or a number)"),
               hard=Fact("integer|string", "the hard limit (unlimited, or a number)"))


LIMITS_FACTS = obj(
    "resource limits (memlock, nofile), NUMA and kernel settings",
    rlimits=obj(
        "the session's resource limits: dl-doctor's own, as a process of this session gets them (live); under a "
        "sysroot, the tree's /proc/self/limits where it holds one (a machine captured with its /proc), else null",
        memlock=_rlimit("RLIMIT_MEMLOCK in bytes: locked memory (RDMA registers its buffers)"),
        nofile=_rlimit("RLIMIT_NOFILE: open files"),
        core=_rlimit("RLIMIT_CORE in bytes: core dumps"),
    ),
    limits_conf=array(obj(
        "",
        domain=string("who: a user, @group, *"),
        type=string("soft, hard or -"),
        item=string("memlock, nofile, ..."),
        value=string("the value as written"),
        file=string("the file"),
    ), "the lines of /etc/security/limits.conf and limits.d/*.conf"),
    iommu_cmdline=array(string(), "kernel command line arguments about the IOMMU (null: no command line)"),
    rlimits_from=string("where rlimits come from: this process (live), or the tree's /proc/self/limits", since="0.2.0"),
    cmdline_known=boolean("the kernel command line could be read"),
    transparent_hugepage=string("the transparent hugepage mode: always, madvise, never"),
    numa_balancing=integer("kernel.numa_balancing (0 off, 1 on)"),
    numa_nodes=count("NUMA nodes (/sys/devices/system/node)"),
    cpu_governor=string("cpu0's cpufreq scaling governor (null: no cpufreq)"),
    cpufreq_driver=string("cpu0's cpufreq scaling driver (intel_pstate, amd-pstate-epp, acpi-cpufreq...; null: none)",
                          since="0.2.0"),
)


@probe("limits", "resource limits (memlock, nofile, core) and kernel settings (IOMMU, NUMA balancing, THP, governor)",
       provides=LIMITS_FACTS)
def limits_probe(ctx: ProbeContext) -> Dict[str, Any]:
    host = ctx.host
    rlimits: Optional[Dict[str, Any]] = None
    source: Optional[str] = None
    if host.live:
        import resource

        def fmt(v):
            return "unlimited" if v == resource.RLIM_INFINITY else v

        rlimits = {}
        for key, res in (("memlock", resource.RLIMIT_MEMLOCK), ("nofile", resource.RLIMIT_NOFILE),
                         ("core", resource.RLIMIT_CORE)):
            soft, hard = resource.getrlimit(res)
            rlimits[key] = {"soft": fmt(soft), "hard": fmt(hard)}
        source = "process"
    else:
        rlimits = parse_proc_limits(host.try_read("/proc/self/limits", 65536) or "") or None
        source = "/proc/self/limits" if rlimits else None
    conf: List[Dict[str, str]] = []
    for path in ["/etc/security/limits.conf"] + host.glob("/etc/security/limits.d/*.conf"):
        for entry in parse_limits_conf(host.try_read(path, 1 << 20) or ""):
            conf.append({**entry, "file": path})
    cmdline = (host.try_read("/proc/cmdline", 65536) or "").split()
    thp = host.try_read("/sys/kernel/mm/transparent_hugepage/enabled", 256)
    thp_match = re.search(r"\[(\w+)\]", thp) if thp else None
    thp_mode = thp_match.group(1) if thp_match else None
    numa = host.try_read("/proc/sys/kernel/numa_balancing", 64)
    governor = host.try_read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", 64)
    cpufreq_driver = host.try_read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_driver", 64)
    nodes = [n for n in host.listdir("/sys/devices/system/node") if re.match(r"^node\d+$", n)]
    return {
        "rlimits": rlimits, "rlimits_from": source, "limits_conf": conf,
        "iommu_cmdline": [t for t in cmdline if "iommu" in t] if cmdline else None,
        "cmdline_known": bool(cmdline),
        "transparent_hugepage": thp_mode,
        "numa_balancing": ascii_int(numa),
        "numa_nodes": len(nodes) or None,
        "cpu_governor": governor.strip() if governor else None,
        "cpufreq_driver": cpufreq_driver.strip()[:64] if cpufreq_driver else None,
    }
