"""The driver against everything that needs CUDA from it; forward-compatibility libraries."""

from __future__ import annotations

from typing import Any, Dict, List

from dl_doctor import versions
from dl_doctor.checks.common import (cuda_consumers, driver_branch, driver_install_commands, driver_version, needs_nvidia_gpu,
                           nvidia_gpus)
from dl_doctor.model import Facts, Fix, Result, check, fail, passed, skip, warn


def _active_compat(facts: Facts) -> List[Dict[str, Any]]:
    return [c for c in facts.get("nvidia_driver.forward_compat_libs") or [] if c.get("active")]


def _gpu_classes(facts: Facts, matrix) -> List[Dict[str, Any]]:
    out = []
    for g in nvidia_gpus(facts):
        entry = matrix.gpu_by_pci(g.get("device_id") or "")
        out.append({"bdf": g["bdf"], "device_id": g.get("device_id"), "name": entry["name"] if entry else None,
                    "class": entry["class"] if entry else None})
    return out


@check(
    id="DLD-CUDA-001", slug="driver-too-old-for-cuda",
    remedy="repair-software", drain=False,
    problem="The driver is too old for the CUDA version in use",
    title="The driver supports the CUDA versions installed here",
    tags=("cuda", "driver", "gpu"), requires=("cuda_toolkits",), applies=(needs_nvidia_gpu,),
    what="""Finds everything that needs a CUDA version from the driver — CUDA toolkits, framework builds in the Python
    environments, a container image's NVIDIA_REQUIRE_CUDA/CUDA_VERSION — and asks the compatibility matrix whether the
    running driver supports each fully, only through minor-version compatibility, or not at all (forward-compatibility
    libraries taken into account).""",
    why="""A CUDA program built for a newer CUDA than the driver supports fails at start with 'CUDA driver version is
    insufficient for CUDA runtime version' or 'The NVIDIA driver on your system is too old'. Minor-version
    compatibility lets a 12.x build run on any R525+ driver, but with a limited feature set (no newer PTX JIT).""",
    fix="""Upgrade the driver to at least the minimum the newest consumer needs, or use builds for the CUDA version the
    driver supports (for PyTorch, the matching --index-url wheel variant).""",
)
def driver_too_old_for_cuda(facts: Facts, matrix) -> Result:
    driver = driver_version(facts)
    consumers = cuda_consumers(facts)
    if not driver:
        return skip("no NVIDIA driver version is known (see DLD-GPU-001)")
    if not consumers:
        return passed(f"driver {driver}; nothing here needs a specific CUDA version", driver=driver)
    max_cuda = (matrix.driver(driver) or {}).get("max_cuda")
    compat = _active_compat(facts)
    compat_supported = compat and all(g["class"] in matrix.forward_compat_classes() for g in _gpu_classes(facts, matrix))
    effective = max((c["version"] for c in compat), key=versions.release) \
        if compat_supported else driver
    rows, worst = [], "full"
    for c in consumers:
        support = matrix.driver_supports_cuda(effective, c["cuda"])
        rows.append({**c, "support": support["support"], "min_driver": support.get("min_driver"),
                     "min_driver_minor_compat": support.get("min_driver_minor_compat")})
        if support["support"] == "none":
            worst = "none"
        elif support["support"] == "minor-compat" and worst == "full":
            worst = "minor-compat"
    evidence: Dict[str, Any]
    evidence = {"driver": driver, "driver_max_cuda": max_cuda, "consumers": rows,
                "forward_compat_used": effective if effective != driver else None}
    need = [r for r in rows if r["support"] != "full" and r.get("min_driver")]
    target = max((r["min_driver"] for r in need), key=versions.release, default=None)
    fix = None
    if target:
        commands = list(driver_install_commands(facts, driver_branch(target)))
        if max_cuda:
            commands.append(f"# or use builds for CUDA {max_cuda}, e.g. PyTorch: pip install torch --index-url "
                            f"https://download.pytorch.org/whl/cu{max_cuda.replace('.', '')}")
        fix = Fix(f"Install driver {target} or newer (branch R{driver_branch(target)}), or use builds for CUDA "
                  f"{max_cuda} or older.", tuple(commands))
    via = f" (through the cuda-compat libraries {effective})" if effective != driver else ""
    if worst == "none":
        bad = [r for r in rows if r["support"] == "none"]
        listed = "; ".join(f"{r['what']} ({r['where']}) needs driver >= {r['min_driver']}" for r in bad)
        return fail(f"driver {driver} supports CUDA up to {max_cuda}{via}: {listed}", evidence, fix)
    if worst == "minor-compat":
        part = [r for r in rows if r["support"] == "minor-compat"]
        listed = "; ".join(f"{r['what']} ({r['where']})" for r in part)
        return warn(f"driver {driver} (CUDA {max_cuda}) runs {listed} only through minor-version compatibility: "
                    f"limited feature set, no JIT of newer PTX; full support needs driver >= {target}", evidence, fix)
    listed = ", ".join(r["what"] for r in rows)
    return passed(f"driver {driver} (CUDA {max_cuda}){via} fully supports {listed}", **evidence)


@check(
    id="DLD-CUDA-002", slug="cuda-compat-on-unsupported-gpu",
    remedy="fix-configuration", drain=False,
    problem="CUDA forward-compatibility libraries on a GPU that does not support them",
    title="CUDA forward-compatibility libraries are only used on GPUs that support them",
    tags=("cuda", "driver", "container"), requires=("nvidia_driver", "gpu_pci"), applies=(needs_nvidia_gpu,),
    what="""Finds the cuda-compat libcuda (/usr/local/cuda*/compat) and whether it is active (on LD_LIBRARY_PATH or in
    ld.so.conf), and holds the GPUs against the classes forward compatibility supports (data center GPUs and Jetson).""",
    why="""Forward compatibility lets a newer CUDA run on an older data center driver. On GeForce and most workstation
    GPUs the compat libcuda refuses with 'Error 804: forward compatibility was attempted on non supported HW', so
    a CUDA image that ships it fails on such a host even though the host driver alone would be fine.""",
    fix="""Take the compat directory off LD_LIBRARY_PATH (or out of ld.so.conf.d) and upgrade the host driver to one
    that supports the image's CUDA version, or use an image built for the driver's CUDA version.""",
)
def cuda_compat_unsupported(facts: Facts, matrix) -> Result:
    compat = facts.get("nvidia_driver.forward_compat_libs") or []
    active = [c for c in compat if c.get("active")]
    gpus = _gpu_classes(facts, matrix)
    evidence = {"forward_compat_libs": compat, "gpus": gpus, "supported_classes": matrix.forward_compat_classes()}
    if not active:
        return passed("no CUDA forward-compatibility library is in use" + (" (present but inactive)" if compat else ""),
                      **evidence)
    supported = matrix.forward_compat_classes()
    unsupported = [g for g in gpus if g["class"] not in supported]
    if not unsupported:
        return passed(f"forward compatibility ({active[0]['path']}) is in use on supported GPUs", **evidence)
    names = ", ".join(f"{g['name'] or '10de:' + str(g['device_id'])} ({g['class'] or 'unknown class'})" for g in unsupported)
    directory = active[0]["path"].rsplit("/", 1)[0]
    return fail(f"cuda-compat libcuda {active[0]['version']} is active but {names} does not support forward "
                f"compatibility: CUDA fails with error 804", evidence,
                Fix("Stop using the compat library and upgrade the host driver instead.",
                    (f"export LD_LIBRARY_PATH=$(echo \"$LD_LIBRARY_PATH\" | tr ':' '\\n' | grep -v '{directory}' | paste -sd:)",
                     f"grep -rl '{directory}' /etc/ld.so.conf.d/ | xargs -r sudo rm && sudo ldconfig")))
