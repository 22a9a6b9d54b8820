"""What follows from recorded facts alone: pure functions of a facts snapshot's values, used by probes (to decide
what to inspect next), checks and reports alike, so a verdict is never stored beside the facts it comes from. An
old facts file that still carries such a verdict is read through these functions too: the derivation counts, not
the stored value."""

from __future__ import annotations

from typing import Any, Mapping, Optional


def _conda_build(conda_packages: Optional[Mapping[str, Any]], name: str) -> str:
    """The build string of a conda package as ``python_envs`` records it (``conda_packages``: name -> "version
    build"), "" when it is not installed."""
    value = (conda_packages or {}).get(name)
    return value.split(" ", 1)[1] if isinstance(value, str) and " " in value else ""


def torch_cpu_only(torch: Optional[Mapping[str, Any]], conda_packages: Optional[Mapping[str, Any]] = None) -> bool:
    """Whether an environment's torch is a CPU-only build, from its facts: ``torch`` is
    ``python_envs.environments[].frameworks.torch`` (its ``version`` and the ``cuda`` read from torch/version.py),
    ``conda_packages`` the environment's conda packages. CPU-only: torch/version.py names no CUDA, the version says
    ``+cpu``, the conda build of pytorch says ``cpu``, conda's pytorch-mutex is the cpu variant, or conda's ``cpuonly``
    is installed. False where torch/version.py was not read (no ``cuda`` recorded: nothing says CPU-only)."""
    if not isinstance(torch, Mapping) or "cuda" not in torch:
        return False
    version = torch.get("version")
    return (torch.get("cuda") is None or "+cpu" in (version if isinstance(version, str) else "")
            or "cpu" in _conda_build(conda_packages, "pytorch")
            or _conda_build(conda_packages, "pytorch-mutex").startswith("cpu")
            or "cpuonly" in (conda_packages or {}))
