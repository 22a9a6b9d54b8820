"""NVIDIA GPU presence and the kernel driver bound to it."""

from __future__ import annotations

from typing import Any, Dict, List

from dl_doctor.checks.common import needs_nvidia_gpu, os_family
from dl_doctor.fixes import load_module, root_command
from dl_doctor.model import Facts, Fix, Result, check, fail, passed, skip, warn


def _driver_fix(facts: Facts) -> Fix:
    family = os_family(facts)
    cmds = [load_module("nvidia"), "nvidia-smi",
            "sudo dmesg | grep -iE 'NVRM|nvidia' | tail -20"]
    if family in ("rhel", "amzn"):
        cmds.append("# if the module is missing for this kernel (uname -r), reinstall the driver, e.g.:")
        cmds.append(root_command("dnf module install -y nvidia-driver:latest-dkms"))
    elif family == "debian":
        cmds.append("# if the module is missing for this kernel (uname -r), reinstall the driver, e.g.:")
        cmds.append("sudo apt-get install -y linux-headers-$(uname -r) && sudo ubuntu-drivers install")
    return Fix("Load the NVIDIA kernel module; if that fails, (re)install the driver for the running kernel.",
               tuple(cmds))


@check(
    id="DLD-GPU-001", slug="nvidia-driver-not-loaded", title="NVIDIA GPUs present and the NVIDIA driver loaded",
    remedy="repair-software", drain=True,
    problem="NVIDIA GPUs without a loaded NVIDIA driver",
    tags=("gpu", "driver"), requires=("gpu_pci", "nvidia_driver"), applies=(needs_nvidia_gpu,),
    what="""Lists NVIDIA GPUs on the PCI bus (/sys/bus/pci, vendor 0x10de) and checks that the nvidia
    kernel module is loaded (/proc/driver/nvidia/version, /proc/modules) and bound to every GPU.
    A host without NVIDIA GPUs skips all GPU checks.""",
    why="""Without the kernel module no CUDA program can see a GPU: nvidia-smi says 'couldn't
    communicate with the NVIDIA driver' and torch.cuda.is_available() is False. The usual causes
    are a kernel update without a rebuilt module, nouveau holding the GPU, or a failed driver
    install.""",
    fix="""Load the module with 'sudo modprobe nvidia' and read the kernel log if it refuses. If no
    module exists for the running kernel, reinstall the driver for it (DKMS, the RHEL precompiled
    module stream, or the distribution's driver package), or boot the kernel it was built for.""",
)
def nvidia_driver_not_loaded(facts: Facts) -> Result:
    devices = facts.get("gpu_pci.devices") or []
    gpus = [d for d in devices if d.get("kind") == "gpu"]
    module = facts.get("nvidia_driver.kernel_module") or {}
    loaded = module.get("loaded")
    evidence = {"gpu_pci.devices": [{k: g.get(k) for k in ("bdf", "device_id", "driver")} for g in gpus],
                "nvidia_driver.kernel_module.loaded": loaded,
                "nvidia_driver.kernel_module.loaded_source": module.get("loaded_source"),
                "nvidia_driver.kernel_module.version": module.get("version"),
                "nvidia_driver.modules": facts.get("nvidia_driver.modules")}
    count = f"{len(gpus)} NVIDIA GPU{'s' if len(gpus) != 1 else ''}"
    if loaded is None:
        return skip(f"{count} on the PCI bus; whether the nvidia module is loaded is unknown here", **evidence)
    if not loaded:
        nouveau = "nouveau" in (facts.get("nvidia_driver.modules") or []) or any(g.get("driver") == "nouveau" for g in gpus)
        why = " (nouveau is loaded and holds them)" if nouveau else ""
        return fail(f"{count} present but the nvidia kernel module is not loaded{why}", evidence, _driver_fix(facts))
    unbound = [g for g in gpus if g.get("driver") != "nvidia"]
    version = module.get("version") or "unknown version"
    flavor = f" ({module['flavor']})" if module.get("flavor") else ""
    if unbound:
        names = ", ".join(f"{g['bdf']} ({g.get('driver') or 'no driver'})" for g in unbound)
        if all(g.get("driver") == "vfio-pci" for g in unbound):
            # binding to vfio-pci takes deliberate configuration (vfio-pci.ids, driver_override): these GPUs are
            # meant for virtual machines
            bound = len(gpus) - len(unbound)
            return passed(f"{count}; driver {version}{flavor} loaded and bound to {bound} of them; {names} "
                          f"{'is' if len(unbound) == 1 else 'are'} passed through to virtual machines (vfio-pci), "
                          f"which takes deliberate configuration: CUDA here does not see "
                          f"{'it' if len(unbound) == 1 else 'them'}", evidence,
                          Fix("Nothing to do if these GPUs are meant for virtual machines; otherwise unbind them "
                              "from vfio-pci.", ("lspci -nnk -d 10de:",)))
        refused = {r.get("bus"): r for r in facts.get("kernel_log.refused_gpus") or [] if isinstance(r, dict)}
        reasons = [f"{g['bdf']}: {refused[g['bdf']]['reason']}" for g in unbound
               if g["bdf"] in refused and refused[g["bdf"]].get("reason")]
        if reasons:
            names += f" (the driver refused {'; '.join(reasons)})"
            evidence["kernel_log.refused_gpus"] = [refused[g["bdf"]] for g in unbound if g["bdf"] in refused]
        return fail(f"driver {version} loaded, but {len(unbound)} of {len(gpus)} GPUs are not bound to it: {names}",
                    evidence,
                    Fix("Read the kernel log for the GPU that failed to initialise (RmInitAdapter failed, Xid 79); "
                        "a GPU that keeps failing needs a reset or a hardware ticket.",
                        ("sudo dmesg | grep -iE 'NVRM|RmInitAdapter|Xid' | tail -20", "lspci -nnk -d 10de:")))
    return passed(f"{count}; driver {version}{flavor} loaded and bound to all of them", **evidence)


def _bus(value: str) -> str:
    """A PCI address as sysfs writes it (0000:0a:00.0), from NVML's (00000000:0A:00.0) or the log's."""
    v = (value or "").strip().lower()
    parts = v.split(":")
    if len(parts) == 3 and len(parts[0]) > 4:
        parts[0] = parts[0][-4:]
    elif len(parts) == 2:
        parts = ["0000"] + parts
    return ":".join(parts)


@check(
    id="DLD-GPU-014", slug="gpu-failed-initialisation",
    remedy="reset-gpu", drain=True,
    problem="A GPU on the PCI bus failed to initialise (RmInitAdapter failed)",
    title="Every NVIDIA GPU on the PCI bus was initialised by the driver (no RmInitAdapter failure, none missing "
          "from NVML)",
    tags=("gpu", "driver", "hardware"), requires=("gpu_pci",), applies=(needs_nvidia_gpu,),
    what="""Holds the GPUs on the PCI bus that the nvidia driver is bound to against the kernel log's
    'NVRM: GPU <bus>: RmInitAdapter failed! (code)' lines of this boot and against the GPUs NVML lists. A GPU
    bound to nvidia that NVML does not list, or that the log says failed to initialise, is named with its code.""",
    why="""The driver binds every GPU at module load but initialises one only when a client opens it. A GPU whose
    initialisation fails (its firmware or GSP did not come up, a PCIe or power fault, a GPU the driver flavour
    does not support) stays on the bus and has a /dev/nvidiaN node, yet NVML leaves it out and every CUDA program
    or validator that touches it fails; the rest of the machine looks healthy.""",
    fix="""Read the driver's log for that GPU, reset it (nvidia-smi -r with nothing on it) or power-cycle the
    machine; a GPU that keeps failing with the same code is a hardware ticket (nvidia-bug-report.sh). Drain it
    meanwhile (CUDA_VISIBLE_DEVICES, or cordon the node).""",
)
def gpu_failed_initialisation(facts: Facts) -> Result:
    gpus = [d for d in facts.get("gpu_pci.devices") or [] if d.get("kind") == "gpu"]
    bound = {_bus(g["bdf"]): g for g in gpus if g.get("driver") == "nvidia"}
    failures = [f for f in facts.get("kernel_log.init_failures") or [] if isinstance(f, dict)]
    nvml_devs = facts.get("nvml.devices")
    listed = {_bus(d.get("bus_id") or "") for d in nvml_devs or [] if d.get("bus_id")}
    evidence: Dict[str, Any] = {"bound_to_nvidia": sorted(bound), "nvml_bus_ids": sorted(listed),
                                "kernel_log.init_failures": [f.get("line") for f in failures[:10]]}
    if not bound:
        return skip("no GPU is bound to the nvidia driver here (see DLD-GPU-001)", **evidence)
    by_bus: Dict[str, List[Dict[str, Any]]] = {}
    for f in failures:
        by_bus.setdefault(_bus(f.get("bus") or "") if f.get("bus") else "", []).append(f)
    # NVML leaving a bound GPU out is judged only where its addresses are the bus's (every one NVML lists is bound
    # here) and on the host (a container's NVML lists only the GPUs it was given, sysfs all of the node's)
    comparable = bool(listed) and listed <= set(bound) and not facts.get("system.container.in_container")
    missing = sorted(b for b in bound if b not in listed) if comparable else []
    bad = sorted({b for b in by_bus if b in bound} | set(missing))
    unplaced = by_bus.get("", [])
    rows = []
    for b in bad:
        lines = by_bus.get(b) or []
        code = next((f.get("code") for f in lines if f.get("code")), None)
        text = f"GPU {b}"
        if lines:
            text += f" failed to initialise (RmInitAdapter failed! {code or ''}".rstrip() + f"; {len(lines)} time(s) " \
                    f"in this boot)"
        if b in missing:
            text += (" and " if lines else " ") + f"is missing from NVML ({len(listed)} of {len(bound)} GPUs listed)"
        rows.append(text)
    if not rows and unplaced and not facts.get("nvml.devices"):
        rows.append(f"the driver could not initialise a GPU ({unplaced[-1].get('line')})")
    fix = Fix("Reset or power-cycle the GPU that failed to initialise; if it keeps failing, open a hardware ticket "
              "and keep it out of jobs meanwhile.",
              ("sudo dmesg | grep -E 'NVRM|RmInitAdapter|Xid' | tail -30", "nvidia-smi -L",
               *(f"sudo nvidia-smi -r -i {b}   # with no process on it; otherwise reboot" for b in bad[:4]),
               "sudo nvidia-bug-report.sh   # for the hardware ticket"))
    if rows:
        evidence["failed"] = bad
        return fail("; ".join(rows) + ": CUDA programs and validators that touch it fail while the other GPUs work",
                    evidence, fix, headline=f"GPU {bad[0]} failed to initialise" if bad else None)
    if failures:
        return warn(f"the kernel log of this boot shows RmInitAdapter failures ({failures[-1].get('line')}) but every "
                    f"GPU bound to nvidia is listed now", evidence, fix)
    if nvml_devs is None:
        return passed(f"no RmInitAdapter failure in the kernel log for the {len(bound)} GPU(s) bound to nvidia (NVML "
                      f"not read here)", **evidence)
    return passed(f"all {len(bound)} GPU(s) bound to nvidia are initialised (listed by NVML)", **evidence)
