"""NVIDIA GPU presence and the kernel driver bound to it."""

from __future__ import annotations

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
        return fail(f"driver {version} loaded, but {len(unbound)} of {len(gpus)} GPUs are not bound to it: {names}",
                    evidence,
                    Fix("Read the kernel log for the GPU that failed to initialise (RmInitAdapter failed, Xid 79); "
                        "a GPU that keeps failing needs a reset or a hardware ticket.",
                        ("sudo dmesg | grep -iE 'NVRM|RmInitAdapter|Xid' | tail -20", "lspci -nnk -d 10de:")))
    return passed(f"{count}; driver {version}{flavor} loaded and bound to all of them", **evidence)
