"""Helpers shared by the built-in checks (pure functions of facts)."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from dl_doctor import versions
from dl_doctor.facts import requirements
from dl_doctor.fixes import Step  # noqa: F401 - re-exported for checks
from dl_doctor.model import Facts
from dl_doctor.judge.distro import (PackageManager, driver_install_commands, os_family,  # noqa: F401 - re-exported
                                   package_manager)
from dl_doctor.util.units import GIB, MIB, human_bytes  # noqa: F401 - re-exported for checks


def container_kind(facts: Facts) -> Optional[str]:
    return facts.get("system.container.kind")


def needs_nvidia_gpu(facts: Facts) -> Optional[str]:
    """Precondition of GPU checks: skip with a clear reason on a host without NVIDIA GPUs."""
    if facts.get("nvidia_driver.runtime.wsl") and not facts.get("gpu_pci.gpu_count"):
        return ("WSL2: the GPU and its driver are the Windows host's (reached through /dev/dxg and "
                "/usr/lib/wsl/lib; no NVIDIA kernel module or PCI function here)")
    if facts.get("gpu_pci.gpu_count") == 0:
        return "no NVIDIA GPU on the PCI bus: GPU checks do not apply to this host"
    return None


def no_nvidia_gpu(facts: Facts) -> bool:
    """The host is known to have no NVIDIA GPU: none on the PCI bus, none NVML counts, and not WSL2 (whose GPU is the
    Windows host's, on no PCI bus here). Unknown is not none."""
    return (facts.get("gpu_pci.gpu_count") == 0 and not facts.get("nvidia_driver.runtime.wsl")
            and not facts.get("nvml.device_count"))


def grow_partition_commands(device: Optional[str], mountpoint: str, fstype: Optional[str]) -> list:
    """Commands that grow a partition and its filesystem after the volume was enlarged."""
    part = None
    if device:
        m = re.match(r"^(/dev/nvme\d+n\d+)p(\d+)$", device) or re.match(r"^(/dev/(?:xv|s|v)d[a-z]+)(\d+)$", device)
        if m:
            part = (m.group(1), m.group(2))
    cmds = []
    if part:
        cmds.append(f"sudo growpart {part[0]} {part[1]}")
    if fstype == "xfs":
        cmds.append(f"sudo xfs_growfs -d {mountpoint}")
    elif fstype in ("ext4", "ext3", "ext2") and device:
        cmds.append(f"sudo resize2fs {device}")
    return cmds


def driver_version(facts: Facts) -> Optional[str]:
    """The running driver's version: the loaded kernel module, else NVML."""
    return facts.get("nvidia_driver.kernel_module.version") or facts.get("nvml.driver_version")


def driver_branch(version: Optional[str]) -> Optional[int]:
    """``535.104.05`` -> 535."""
    return versions.major(version)


def nvidia_gpus(facts: Facts) -> list:
    return [d for d in (facts.get("gpu_pci.devices") or []) if d.get("kind") == "gpu"]


def cuda_from_require(text: str) -> Optional[str]:
    """``NVIDIA_REQUIRE_CUDA='cuda>=12.2 brand=tesla,driver>=470,...'`` -> ``12.2`` (the runtime's own parse:
    dl_doctor.facts.requirements)."""
    return requirements.require_cuda(text)


def cuda_consumers(facts: Facts) -> list:
    """Everything on the host that needs a CUDA version from the driver, with where it was found."""
    out = []
    for tk in facts.get("cuda_toolkits.toolkits") or []:
        if tk.get("version"):
            out.append({"kind": "toolkit", "what": f"CUDA toolkit {tk['version']}", "where": tk["path"],
                        "cuda": ".".join(tk["version"].split(".")[:2])})
    env = facts.get("cuda_toolkits.container_env") or {}
    req = cuda_from_require(env.get("NVIDIA_REQUIRE_CUDA", ""))
    if req:
        out.append({"kind": "container", "what": f"container image built for CUDA {req}",
                    "where": "NVIDIA_REQUIRE_CUDA", "cuda": req})
    elif env.get("CUDA_VERSION"):
        cuda: Optional[str] = ".".join(env["CUDA_VERSION"].split(".")[:2])
        out.append({"kind": "container", "what": f"container image with CUDA {cuda}", "where": "CUDA_VERSION",
                    "cuda": cuda})
    for penv in facts.get("python_envs.environments") or []:
        torch = (penv.get("frameworks") or {}).get("torch") or {}
        if torch.get("cuda"):
            out.append({"kind": "framework", "what": f"torch {torch.get('version')}",
                        "where": penv.get("path") or penv.get("name"), "cuda": torch["cuda"]})
        for c in penv.get("consumers") or []:  # every other framework with a known build CUDA (docs/frameworks.md)
            cuda = (c.get("build") or {}).get("cuda")
            if c.get("distribution") == "torch":
                continue
            what = f"{c['distribution']} {c.get('version') or ''}".strip()
            if cuda and re.match(r"^\d+\.\d+", cuda):
                out.append({"kind": "consumer", "what": what, "where": penv.get("prefix") or penv.get("name"),
                            "cuda": ".".join(cuda.split(".")[:2])})
            elif isinstance(c.get("cuda_major"), int) and c.get("cuda_major_from") in (
                    "distribution name", "version tag", "needed sonames"):
                # only its CUDA major is known (cupy-cuda12x, jax-cuda12-plugin, libcudart.so.12): the major's first
                # release is the least it needs of the driver (CUDA minor-version compatibility's floor)
                out.append({"kind": "consumer", "what": f"{what} (a CUDA {c['cuda_major']} build)",
                            "where": penv.get("prefix") or penv.get("name"), "cuda": f"{c['cuda_major']}.0",
                            "major_only": True})
    return out


def consumers_with_loading(facts: Facts, matrix: Any = None) -> List[Tuple[Dict[str, Any], Dict[str, Any]]]:
    """(environment, consumer) for every CUDA consumer, each with its loading from the one resolution model
    (dl_doctor.facts.loading: computed once per run from the recorded loader inputs, --deep's truth applied)."""
    from dl_doctor.facts import loading

    model = loading.model(facts, matrix)
    envs = [e for e in facts.get("python_envs.environments") or [] if isinstance(e, dict) and not e.get("error")]
    return [(e, c) for e in envs for c in loading.env_consumers(model, e)]


def first_heading(heads: List[str], total: Optional[int] = None) -> Optional[str]:
    """A finding's heading from the first of its problems' headings, with how many more there are."""
    if not heads:
        return None
    total = len(heads) if total is None else total
    return heads[0] + (f" (and {total - 1} more)" if total > 1 else "")
