"""Write docs/facts.md, the reference of every fact the built-in probes provide, from the facts schema and the
registry (tests/e2e/test_plugins.py fails when it is out of date):

    python tests/tools/make_facts_doc.py
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List

from dl_doctor import __version__
from dl_doctor.registry import load_registry
from dl_doctor.facts import schema as facts_schema

OUT = Path(__file__).resolve().parents[2] / "docs" / "facts.md"
SINCE = "0.1.0"  # every fact below was there in the first release; a fact added later names its own version here
SINCE_OVERRIDES: Dict[str, str] = {"security": "0.2.0", "imds.imdsv1_allowed": "0.2.0", "imds.instance_role": "0.2.0",
                                   "python_processes": "0.2.0", "python_envs.environments[].consumers": "0.2.0",
                                   "python_envs.environments[].consumers_error": "0.2.0", "python_envs.environments[].active": "0.2.0",
                                   "python_envs.environments[].found_by": "0.2.0",
                                   "nvidia_driver.module_autoload": "0.2.0",
                                   "gpu_services.other_units": "0.2.0", "gpu_services.suspend_units": "0.2.0", "kernel_log.candidates": "0.2.0",
                                   "kernel_log.suspends": "0.2.0", "kernel_log.module_loaded": "0.2.0",
                                   "kernel_log.boot": "0.2.0", "kernel_log.candidates_dropped": "0.2.0",
                                   "nvidia_driver.dev_char_links": "0.2.0", "nvidia_driver.gsp_firmware": "0.2.0",
                                   "python_envs.discovery": "0.2.0",
                                   "python_envs.environments[].live.withheld_env": "0.2.0"}

# What the facts that checks rely on mean (the paths in the built-in checks' requires=, and what the checks read).
MEANINGS = {
    "security.sshd": "sshd's effective settings from its files (first value wins; Include read where it stands; Match "
                     "blocks reported apart): settings, sources (file:line), match_blocks, files",
    "security.listening": "TCP listeners and bound UDP sockets from /proc/net (live), with the owner of each one "
                          "beyond loopback where readable",
    "security.suspicious_processes": "processes with a miner's name or running from /tmp, /var/tmp or /dev/shm (live)",
    "imds.imdsv1_allowed": "a token-less request for the instance id was answered",
    "imds.instance_role": "the instance role's name from the credentials listing (credentials are never requested)",
    "gpu_services.other_units": "nvidia-dcgm and nvidia-imex: installed, enabled, active (live), and in a tree "
                                "journal_state/journal_tail from its journal",
    "nvidia_driver.module_autoload": "NVIDIA modules the root filesystem loads at boot (/etc/modules-load.d/*.conf, "
                                     "/etc/modules): {module, file}",
    "kernel_log.boot": "how far the boot's log was read: source (/dev/kmsg, journalctl -k -b, journal, a syslog "
                       "file), boot_start_seen, cut_by_cap, bytes read; from a tree's journal also boot_id",
    "kernel_log.candidates": "this boot's lines worth matching against the signature base, each with "
                             "after_module_load (judged by DLD-LOG-001)",
    "python_envs.environments[].consumers": "every installed distribution that needs CUDA libraries (dl_doctor.readers.consumers):"
                                            " its build, what it needs, where each library resolves, what is missing"
                                            " and where the loader looked, unmet symbol versions",
    "python_envs.environments[].consumers_error": "why the consumer model could not be built for this environment",
    "os": "/etc/os-release and the distribution's release files", "os.id": "ID from /etc/os-release",
    "os.id_like": "ID_LIKE, as a list", "os.version_id": "VERSION_ID", "os.pretty_name": "PRETTY_NAME",
    "kernel.release": "the running kernel (uname -r; under --sysroot, the tree's newest)",
    "system.hostname": "the host name", "system.container": "whether dl-doctor runs in a container, and which",
    "system.cgroup": "the cgroup's memory and CPU limits", "memory": "/proc/meminfo, in bytes",
    "mounts": "/proc/mounts, with /dev/shm", "disks.volumes": "each mounted volume: size, free space, inodes, roles",
    "environment": "the session environment (secret values are masked in every output)",
    "environment.variables": "NAME -> value of the session's variables",
    "gpu_pci": "PCI devices of NVIDIA (GPUs, NVSwitches) from sysfs", "gpu_pci.gpu_count": "NVIDIA GPUs on the PCI bus",
    "gpu_pci.devices": "one entry per NVIDIA PCI function: bdf, device id, kind, bound driver",
    "nvidia_driver": "the NVIDIA kernel module and the user-space driver (libcuda, libnvidia-ml) found",
    "nvidia_driver.kernel_module.version": "the loaded module's version (/proc/driver/nvidia/version)",
    "nvidia_driver.kernel_module.loaded": "whether the nvidia module is loaded",
    "nvidia_driver.userspace.versions": "versions of the user-space driver libraries found",
    "nvml": "NVML (nvidia-ml-py): driver version, each GPU's health", "nvml.devices": "one entry per GPU NVML sees",
    "nvml.driver_version": "the driver version NVML reports",
    "kmod": "kernels and NVIDIA modules on disk: boot default, DKMS/akmods, Secure Boot, nouveau",
    "kmod.secure_boot": "the Secure Boot state from the EFI variable", "kernel_log": "the kernel log of this boot: Xids, NVRM errors",
    "cuda_toolkits": "CUDA toolkits (/usr/local/cuda-*, CUDA_HOME, nvcc on PATH) and their versions",
    "python_envs": "every Python environment: frameworks, CUDA libraries, which copy loads",
    "python_envs.environments": "one entry per environment found (see docs/security.md for which are run)",
    "limits": "resource limits (memlock, nofile), NUMA and kernel settings", "network": "network devices, EFA, NCCL/libfabric",
    "network.env": "NCCL_* and FI_* settings of the session", "ebs": "EBS and instance-store volumes and their I/O",
    "imds": "EC2 instance metadata (only on EC2)", "cloud": "DMI: cloud vendor and instance type",
    "gpu_services": "fabric manager, persistence daemon, container toolkit",
    "python_processes": "Python processes running now (live only)",
    "python_processes.processes": "one entry per Python process whose maps could be read",
    "python_processes.processes.cuda_libraries": "the CUDA-family libraries it has mapped: what really loaded",
    "python_envs.environments.active": "the session uses it: CONDA_PREFIX, VIRTUAL_ENV or the first python on PATH",
    "python_envs.environments.found_by": "how it was found (CONDA_PREFIX, PATH, a Jupyter kernel, pipx, .condarc...)",
    "python_envs.environments.live.withheld_env": "as root: the PYTHONPATH, PYTHONUSERBASE, LD_LIBRARY_PATH and "
    "LD_PRELOAD entries kept from the interpreter because the trust rule does not pass them, and why "
    "(docs/security.md)",
    "python_envs.discovery": "what environment discovery did (bounded per owner, with priority; docs/security.md)",
    "python_envs.discovery.entry_cap": "directory entries discovery examines per owner where environments are listed",
    "python_envs.discovery.out_of_time": "discovery's share of the probe's time ran out (what it found is kept)",
    "python_envs.discovery.not_inspected": "environments found but not inspected before the probe's time ran out",
    "python_envs.discovery.owners": "one entry per owner (uid) whose directories discovery looked at, root's first",
    "python_envs.discovery.owners.uid": "the owner: of the home, or of the directory that was listed",
    "python_envs.discovery.owners.where": "the home (or first directory) discovery looked at for this owner",
    "python_envs.discovery.owners.entries_scanned": "directory entries (and environments.txt lines) examined",
    "python_envs.discovery.owners.found": "environments found in what was examined",
    "python_envs.discovery.owners.kept": "environments kept (listed in python_envs.environments)",
    "python_envs.discovery.owners.cut_reason": "why not all were kept: time, entry cap or env-limit share (null: none"
                                               " was cut)",
    "python_envs.discovery.owners.cut_at": "the directory (or environments.txt) where the entry cap stopped it",
    "python_envs.discovery.owners.venv_search_entries": "entries the search for virtual environments examined (a"
                                                        " budget of its own)",
    "python_envs.discovery.owners.venv_search_cut_at": "where that search stopped at its budget",
}


def _type(node: Dict[str, Any]) -> str:
    types = [t for t in node.get("type", []) if t != "null"] if isinstance(node.get("type"), list) else [node.get("type")]
    text = " or ".join(t for t in types if t) or "any"
    if "minimum" in node:
        text += f" ({node['minimum']}–{node['maximum']})"
    return text


def _since(path: str) -> str:
    for prefix, version in SINCE_OVERRIDES.items():
        if path == prefix or path.startswith(prefix + ".") or path.startswith(prefix + "[]"):
            return version
    return SINCE


def rows(node: Dict[str, Any], path: str, out: List[str], depth: int = 0) -> None:
    out.append(f"| `{path}` | {_type(node)} | {MEANINGS.get(path.replace('[]', ''), '')} | "
               f"{_since(path)} |")
    if depth >= 4:
        return
    for key, child in sorted((node.get("properties") or {}).items()):
        if key.replace("_", "").isalnum():
            rows(child, f"{path}.{key}", out, depth + 1)
    if isinstance(node.get("items"), dict) and node["items"].get("properties"):
        for key, child in sorted(node["items"]["properties"].items()):
            rows(child, f"{path}[].{key}", out, depth + 1)


def render() -> str:
    schema = facts_schema()["properties"]["facts"]["properties"]
    probes = {p.name: p for p in load_registry().probes}
    lines = [f"# Facts", "",
             "Every fact the built-in probes provide, generated from `doctor/facts/facts-v1.json` and the registry by",
             "`tests/tools/make_facts_doc.py`. A check names the facts it needs in `requires=` by these paths (a path",
             "no probe provides is refused at load, see [plugins.md](plugins.md)); `[]` is an item of a list. `null`",
             "is always possible (unknown), and a probe that cannot know its facts here leaves them out with the",
             "reason in `unavailable`. Types list what recorded machines have shown; counts carry their ranges.", ""]
    for name in sorted(probes):
        spec = probes[name]
        lines += [f"## `{name}`", "", f"{spec.description} (probe in `{spec.module}`).", "",
                  "| fact | type | meaning | since |", "|---|---|---|---|"]
        body: List[str] = []
        rows(schema.get(name, {"type": ["object"]}), name, body)
        lines += body + [""]
    return "\n".join(lines)


if __name__ == "__main__":
    OUT.write_text(render(), encoding="utf-8")
    print(f"{OUT}: written")
    sys.exit(0)
