"""The NVIDIA kernel module against the kernel, the user-space driver, nouveau and Secure Boot."""

from __future__ import annotations

import shlex
from typing import Any, Dict, List

from dl_doctor.checks.common import needs_nvidia_gpu, nvidia_gpus, os_family, package_manager
from dl_doctor.fixes import Step, initramfs, install, load_module, reboot, root_command, write_file
from dl_doctor.model import Facts, Fix, Result, check, fail, passed, skip, warn


def _driver_installed(facts: Facts) -> bool:
    return bool(facts.get("kmod.nvidia_modules") or facts.get("nvidia_driver.userspace.libraries")
                or facts.get("kmod.dkms.registered") or facts.get("kmod.dnf_module"))


def _install_method(facts: Facts) -> str:
    """dkms / akmods / rhel-precompiled / ubuntu-precompiled / runfile / unknown."""
    stream = (facts.get("kmod.dnf_module") or {}).get("stream") or ""
    if facts.get("kmod.dkms.registered") or stream.endswith("dkms"):
        return "dkms"
    if facts.get("kmod.akmods"):
        return "akmods"
    if stream:
        return "rhel-precompiled"
    if any(p["package"].startswith("linux-modules-nvidia") for p in facts.get("kmod.dpkg_packages") or []):
        return "ubuntu-precompiled"
    if facts.get("kmod.runfile_installer"):
        return "runfile"
    return "unknown"


def _headers(facts: Facts, kernel: str) -> Step:
    pm = package_manager(facts)
    if pm.name == "apt":
        return pm.install(f"linux-headers-{kernel}")
    if pm.name == "zypper":
        return pm.install("kernel-default-devel")
    return pm.install(f"kernel-devel-{kernel}", f"kernel-headers-{kernel}")


def _build_fix(facts: Facts, kernel: str, method: str, other_kernels: List[str]) -> Fix:
    fallback = [f"# or boot a kernel that has the module: {', '.join(other_kernels)}"] if other_kernels else []
    load = (load_module("nvidia"), "nvidia-smi")
    if method == "dkms":
        return Fix(f"Build the module for {kernel} with DKMS (it needs the matching kernel headers), then load it.",
                   (_headers(facts, kernel), root_command(f"dkms autoinstall -k {kernel}"), *load, *fallback))
    if method == "akmods":
        return Fix(f"Have akmods build the module for {kernel}, then load it.",
                   (_headers(facts, kernel), root_command(f"akmods --force --kernels {kernel}"), load_module("nvidia"),
                    *fallback))
    if method == "rhel-precompiled":
        stream = (facts.get("kmod.dnf_module") or {}).get("stream")
        return Fix("The precompiled kmod stream has no package for this kernel (NVIDIA publishes them only for released "
                   "kernels); switch to the DKMS stream so the module is built for any kernel, or boot a supported one.",
                   (root_command(f"dnf module switch-to -y nvidia-driver:{stream}-dkms"
                                 if stream and stream[:1].isdigit()
                                 else "dnf module switch-to -y nvidia-driver:latest-dkms"),
                    _headers(facts, kernel), reboot(), *fallback))
    if method == "ubuntu-precompiled":
        pkgs = [p["package"] for p in facts.get("kmod.dpkg_packages") or [] if p["package"].startswith("linux-modules-nvidia")]
        branch = pkgs[0].split("-")[3] if pkgs and len(pkgs[0].split("-")) > 3 else "<branch>"
        return Fix(f"Install the precompiled NVIDIA modules for {kernel}.",
                   (install(f"linux-modules-nvidia-{branch}-{kernel}", manager="apt"), load_module("nvidia"),
                    *fallback))
    if method == "runfile":
        return Fix("The driver was installed with the .run installer without DKMS; reinstall it with --dkms so that "
                   "kernel updates rebuild it.",
                   (_headers(facts, kernel), "sudo sh ./NVIDIA-Linux-$(uname -m)-<version>.run --silent --dkms",
                    *fallback))
    return Fix(f"Install the NVIDIA driver for kernel {kernel} (prefer the DKMS packages so kernel updates rebuild it).",
               (_headers(facts, kernel), *fallback))


def _rhel_minor(matrix, kernel: str):
    """The RHEL minor release a kernel belongs to (compatibility matrix, os.toml), or None."""
    if matrix is None or not kernel or not hasattr(matrix, "rhel_release_for_kernel"):
        return None
    entry = matrix.rhel_release_for_kernel(kernel)
    return entry.get("release") if entry else None


def _weak_link_applies(facts: Facts, matrix, module: Dict[str, Any], running: str) -> bool:
    """A weak-updates module (RHEL's weak-modules links a kmod into later kernels of one kABI) built for another
    kernel of the running kernel's RHEL minor release: it loads (the kernel checks the symbol versions, not the
    release in vermagic)."""
    built = (module.get("vermagic") or "").split()[:1] or [module.get("link_kernel") or ""]
    if "/weak-updates/" not in (module.get("path") or "") or os_family(facts) != "rhel" or not built[0]:
        return False
    minor = _rhel_minor(matrix, running)
    return minor is not None and minor == _rhel_minor(matrix, built[0])


def _headers_missing(facts: Facts, kernel: str) -> str:
    """': DKMS cannot build it: the headers ... are not installed' where the tree says so (older facts: '')."""
    headers = facts.get("kmod.kernel_headers")
    # said only where the tree shows headers of another kernel (so a tree without /usr/src proves nothing)
    if not headers or kernel in headers:
        return ""
    return (f": {'DKMS' if _install_method(facts) == 'dkms' else 'akmods'} cannot build it, the headers for {kernel} are "
            f"not installed (/lib/modules/{kernel}/build)")


def _failed_dkms_build(facts: Facts, kernel: str):
    """DKMS's make.log of a failed NVIDIA build for this kernel, if there is one."""
    for log in facts.get("kmod.dkms.build_logs") or []:
        if isinstance(log, dict) and log.get("failed") and log.get("kernel") == kernel and log.get("errors"):
            return log
    return None


def _failed_build_fix(facts: Facts, kernel: str, log, other_kernels: List[str]) -> Fix:
    fallback = [f"# or boot a kernel that has the module: {', '.join(other_kernels)}"] if other_kernels else []
    return Fix(f"The nvidia {log['version']} sources do not build against {kernel} (the compiler errors are in "
               f"{log['path']}): install a driver branch that supports this kernel, then rebuild; or keep booting "
               f"the kernel it was built for.",
               (f"grep -m5 -E 'error:|Error [0-9]' {shlex.quote(log['path'])}", "dkms status",
                "# install a newer driver branch (ubuntu-drivers list / dnf module list nvidia-driver), then:",
                root_command(f"dkms autoinstall -k {kernel}"), *fallback))


@check(
    id="DLD-DRV-001", slug="kernel-module-missing-for-running-kernel",
    remedy="repair-software", drain=True,
    problem="No NVIDIA kernel module for the running kernel",
    title="An NVIDIA kernel module exists for the running kernel",
    tags=("driver", "kernel", "gpu"), requires=("kmod",), applies=(needs_nvidia_gpu,),
    what="""Looks under /lib/modules/<running kernel>/ (extra, updates/dkms, weak-updates, kernel/) for nvidia.ko and
    reads its vermagic where it can. Passes when the module is loaded or built for the running kernel.""",
    why="""After a kernel update the old module does not load into the new kernel: 'modprobe: FATAL: Module nvidia not
    found' and nvidia-smi 'couldn't communicate with the NVIDIA driver'. DKMS rebuilds it only when the matching
    kernel headers are installed; the RHEL 8 precompiled kmod streams only exist for kernels NVIDIA has packaged;
    a .run install without --dkms is never rebuilt.""",
    fix="""Build the module for the running kernel the way the driver was installed: dkms autoinstall (with
    kernel-devel/linux-headers of the running kernel), akmods --force, switching a precompiled stream to its -dkms
    stream, or reinstalling the .run driver with --dkms. Booting the previous kernel is the short-term way out.""",
)
def module_for_running_kernel(facts: Facts, matrix=None) -> Result:
    running = facts.get("kmod.running_kernel")
    if not running:
        return skip("no running kernel (sysroot): see DLD-DRV-002 for the kernel this image boots")
    if not _driver_installed(facts):
        return skip("no NVIDIA driver is installed (DLD-GPU-001 reports a GPU without a driver)")
    modules = facts.get("kmod.nvidia_modules") or []
    here = [m for m in modules if m["kernel"] == running]
    loaded = facts.get("nvidia_driver.kernel_module.loaded")
    evidence = {"kmod.running_kernel": running, "kmod.nvidia_modules": [
        {k: m.get(k) for k in ("kernel", "path", "kind", "vermagic", "link_kernel")} for m in modules],
        "nvidia_driver.kernel_module.loaded": loaded, "install_method": _install_method(facts)}
    if loaded:
        return passed(f"the nvidia module is loaded into the running kernel {running}", **evidence)
    others = sorted({m["kernel"] for m in modules if m["kernel"] != running})
    if not here and running in (facts.get("kmod.module_unknown") or []):
        return skip(f"whether an NVIDIA module exists for {running} is not known (what builds or ships it for that "
                    f"kernel is not in these facts: see the plan's notes)", **evidence)
    if not here:
        where = f"; modules exist only for {', '.join(others)}" if others else ""
        failed = _failed_dkms_build(facts, running)
        if failed:
            evidence["dkms_build_log"] = failed
            return fail(f"no NVIDIA kernel module for the running kernel {running}{where}: DKMS tried to build nvidia "
                        f"{failed['version']} for it and failed ({failed['path']}: {failed['errors'][0]})", evidence,
                        _failed_build_fix(facts, running, failed, others))
        method = _install_method(facts)
        headers = _headers_missing(facts, running) if method in ("dkms", "akmods") else ""
        return fail(f"no NVIDIA kernel module for the running kernel {running}{where}{headers}", evidence,
                    _build_fix(facts, running, method, others))
    real = [m for m in here if m["kind"] != "weak-updates"]
    linked = [m for m in here if m["kind"] == "weak-updates" and _weak_link_applies(facts, matrix, m, running)]
    mismatched = [m for m in here if m.get("vermagic") and not m["vermagic"].split()[0] == running
                  and m not in linked]
    if mismatched:
        m = mismatched[0]
        return fail(f"{m['path']} was built for {m['vermagic'].split()[0]}, not the running kernel {running}",
                    evidence, _build_fix(facts, running, _install_method(facts), others))
    if not real and linked:
        m = linked[0]
        built = ((m.get("vermagic") or "").split() or [m.get("link_kernel") or "another kernel"])[0]
        return passed(f"{m['path']} links the build for {built} into the running kernel {running}: "
                      f"both are RHEL {_rhel_minor(matrix, running)} (one kABI), so it loads", **evidence)
    if not real:
        target = here[0].get("link_kernel") or "another kernel"
        return warn(f"the module for {running} is only a weak-updates link to the build for {target}; it loads while "
                    f"the kernel ABI is unchanged, and it is not loaded now", evidence,
                    _build_fix(facts, running, _install_method(facts), others))
    return passed(f"nvidia.ko exists for the running kernel {running} ({real[0]['path']})", **evidence)


@check(
    id="DLD-DRV-002", slug="next-boot-kernel-without-module",
    remedy="repair-software", drain=False,
    problem="The kernel that boots next has no NVIDIA kernel module",
    title="The kernel that boots next has an NVIDIA kernel module",
    tags=("driver", "kernel", "gpu", "ami"), requires=("kmod",), applies=(needs_nvidia_gpu,),
    what="""Finds the default boot kernel (grubenv saved_entry and its BLS entry on RHEL, the /boot/vmlinuz link on
    Ubuntu, else the newest installed kernel) and checks that an nvidia.ko exists or DKMS has built one for it.""",
    why="""A kernel update installs a new default kernel; if no NVIDIA module exists for it, the next reboot (or the
    first boot of an image) comes up without a GPU driver. Catching it before the reboot saves a broken node.""",
    fix="""Build the module for that kernel now (dkms autoinstall -k KERNEL with its headers, akmods --kernels KERNEL,
    the matching precompiled package), or keep booting the current kernel (grubby --set-default, apt-mark hold).""",
)
def next_boot_kernel(facts: Facts) -> Result:
    default = facts.get("kmod.boot_default.kernel")
    if not default:
        return skip("the default boot kernel could not be determined")
    if not _driver_installed(facts):
        return skip("no NVIDIA driver is installed")
    running = facts.get("kmod.running_kernel")
    modules = facts.get("kmod.nvidia_modules") or []
    has_module = any(m["kernel"] == default for m in modules)
    dkms_built = any(b["kernel"] == default for b in facts.get("kmod.dkms.builds") or [])
    evidence = {"kmod.boot_default": facts.get("kmod.boot_default"), "kmod.running_kernel": running,
                "kernels_with_module": sorted({m["kernel"] for m in modules})}
    if has_module or dkms_built:
        return passed(f"the next boot kernel {default} has an NVIDIA module", **evidence)
    if default in (facts.get("kmod.module_unknown") or []):
        return skip(f"whether an NVIDIA module exists for the next boot kernel {default} is not known (what builds "
                    f"or ships it for that kernel is not in these facts: see the plan's notes)", **evidence)
    method = _install_method(facts)
    others = sorted({m["kernel"] for m in modules})
    fix = _build_fix(facts, default, method, [])
    keep = []
    if running and running != default:
        keep = [root_command(f"grubby --set-default {shlex.quote('/boot/vmlinuz-' + running)}")
                if os_family(facts) != "debian"
                else root_command(f"apt-mark hold {shlex.quote('linux-image-' + running)}",
                                  note="and make it the GRUB default")]
    fix = Fix(fix.summary + " Or keep booting the current kernel.", fix.steps + tuple(keep))
    failed = _failed_dkms_build(facts, default)
    if failed:
        evidence["dkms_build_log"] = failed
        message = (f"the next boot kernel {default} has no NVIDIA module: DKMS tried to build nvidia {failed['version']} "
                   f"for it and failed ({failed['path']}: {failed['errors'][0]})")
        fix = _failed_build_fix(facts, default, failed, others)
        fix = Fix(fix.summary + " Or keep booting the current kernel.", fix.steps + tuple(keep))
    elif method == "dkms":
        headers = facts.get("kmod.kernel_headers")
        message = (f"the next boot kernel {default} has no NVIDIA module yet; DKMS builds it at boot only if "
                   f"kernel-devel/headers for {default} are installed"
                   + (f", and they are not (/lib/modules/{default}/build)" if headers
                      and default not in headers else ""))
    else:
        message = f"the next boot kernel {default} has no NVIDIA module ({'modules exist for ' + ', '.join(others) if others else 'none built'}): the GPUs will be gone after a reboot"
    if not facts.live:  # an image about to be booted: this is the failure
        return fail(message, evidence, fix)
    if running == default:
        return skip("the default boot kernel is the running kernel (see DLD-DRV-001)")
    return warn(message, evidence, fix)


@check(
    id="DLD-DRV-003", slug="driver-library-mismatch",
    remedy="reload-driver", drain=True,
    problem="Kernel module and user-space driver are different versions",
    title="The loaded kernel module and the user-space driver are the same version",
    tags=("driver", "gpu"), requires=("nvidia_driver",), applies=(needs_nvidia_gpu,),
    what="""Compares the loaded module's version (/proc/driver/nvidia/version) with the user-space driver libraries
    (libnvidia-ml.so.VERSION, libcuda.so.VERSION), NVML's initialisation result and 'API mismatch' lines in the
    kernel log.""",
    why="""When packages update the user space but the old module stays loaded, every new CUDA program and nvidia-smi
    fails with 'Failed to initialize NVML: Driver/library version mismatch' while running jobs keep working. Several
    user-space versions side by side mean two installers (a .run file and packages) fought.""",
    fix="""Reboot (or stop every GPU user and reload the nvidia modules). If the module on disk is still the old
    version, rebuild it first. With several user-space versions, remove the .run install (nvidia-uninstall) and
    reinstall the packages. Hold the driver packages to stop unattended upgrades repeating it.""",
)
def driver_library_mismatch(facts: Facts) -> Result:
    module = facts.get("nvidia_driver.kernel_module.version")
    libs: List[Dict] = facts.get("nvidia_driver.userspace.libraries") or []
    versions = sorted({lib["version"] for lib in libs if lib.get("version")})  # WSL2's names carry none
    nvml_error = facts.get("nvml.init_error")
    mismatch_log = facts.get("kernel_log.api_mismatches") or []
    evidence = {"nvidia_driver.kernel_module.version": module, "nvidia_driver.userspace.versions": versions,
                "nvml.init_error": nvml_error, "kernel_log.api_mismatches": mismatch_log}
    if not facts.get("nvidia_driver.kernel_module.loaded"):
        return skip("the nvidia module is not loaded (see DLD-GPU-001)")
    if not module or not versions:
        return skip("the module or the user-space driver version is unknown", **evidence)
    if len(versions) > 1:
        pm = package_manager(facts)
        # the package list comes from dpkg on the machine itself: a command of its own, not a package step
        reinstall = ("sudo apt-get install --reinstall -y $(dpkg -l | awk '/^ii +(libnvidia|nvidia)/{print $2}')"
                     if pm.name == "apt" else pm.reinstall("nvidia-driver*"))
        return fail(f"several user-space driver versions are installed ({', '.join(versions)}; module {module}): "
                    "two installers were mixed", evidence,
                    Fix("Remove the .run-file install and reinstall the driver packages, then reboot.",
                        ("ls -l " + " ".join(sorted({lib['path'] for lib in libs})),
                         "sudo nvidia-uninstall   # if a .run installer was used", reinstall, reboot())))
    user = versions[0]
    if user != module or "mismatch" in (nvml_error or "").lower():
        running = facts.get("kmod.running_kernel")
        on_disk = [m.get("version") for m in facts.get("kmod.nvidia_modules") or []
                   if m["kernel"] == running and m.get("version")]
        commands = [reboot(),
                    "# or, with no GPU processes left: sudo systemctl stop nvidia-persistenced nvidia-fabricmanager; "
                    "sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia"]
        summary = "Reboot so the module matching the user space is loaded (or reload the modules)."
        if on_disk and user not in on_disk:
            summary = (f"The module on disk for {running} is still {on_disk[0]}: rebuild it for {user} first "
                       f"(see DLD-DRV-001), then reboot.")
        if os_family(facts) == "debian":
            commands.append("sudo apt-mark hold $(dpkg -l | awk '/^ii +(libnvidia|nvidia)/{print $2}')   # stop "
                            "unattended upgrades from doing it again")
        return fail(f"Driver/library version mismatch: the loaded kernel module is {module}, the user-space driver is "
                    f"{user}", evidence, Fix(summary, tuple(commands)))
    return passed(f"kernel module and user-space driver are both {module}", **evidence)


@check(
    id="DLD-DRV-004", slug="nouveau-active",
    remedy="repair-software", drain=True,
    problem="nouveau holds the NVIDIA GPUs",
    title="nouveau does not hold the NVIDIA GPUs",
    tags=("driver", "gpu", "kernel"), requires=("gpu_pci",), applies=(needs_nvidia_gpu,),
    what="""Checks /proc/modules and each GPU's bound driver for nouveau, and the modprobe.d files and kernel
    command line for a nouveau blacklist.""",
    why="""The in-tree nouveau driver binds the GPUs first when it is not blacklisted (or is still in the initramfs);
    the NVIDIA driver then logs 'The NVIDIA probe routine was not called' and CUDA sees no device.""",
    fix="""Blacklist nouveau in /etc/modprobe.d, regenerate the initramfs (dracut --force on RHEL, update-initramfs -u
    on Ubuntu) and reboot.""",
)
def nouveau_active(facts: Facts) -> Result:
    gpus = nvidia_gpus(facts)
    bound = [g["bdf"] for g in gpus if g.get("driver") == "nouveau"]
    loaded = facts.get("kmod.nouveau.loaded")
    if loaded is None:
        loaded = "nouveau" in (facts.get("nvidia_driver.modules") or []) or None
    blacklisted = facts.get("kmod.nouveau.blacklisted")
    evidence = {"gpus_bound_to_nouveau": bound, "kmod.nouveau": facts.get("kmod.nouveau")}
    fix = Fix("Blacklist nouveau, rebuild the initramfs and reboot.",
              (write_file("/etc/modprobe.d/blacklist-nouveau.conf", "blacklist nouveau\noptions nouveau modeset=0\n"),
               initramfs(os_family(facts)), reboot()))
    if bound or loaded:
        what = f"nouveau is bound to {', '.join(bound)}" if bound else "the nouveau module is loaded"
        return fail(f"{what}: the NVIDIA driver cannot take the GPUs", evidence, fix)
    nvidia_bound = gpus and all(g.get("driver") == "nvidia" for g in gpus)
    if blacklisted is False and not nvidia_bound and facts.get("kmod") is not None:
        return warn("nouveau is not blacklisted and the NVIDIA driver does not hold the GPUs: nouveau may take them at "
                    "the next boot", evidence, fix)
    return passed("nouveau is not loaded" + (" and is blacklisted" if blacklisted else ""), **evidence)


@check(
    id="DLD-DRV-005", slug="secure-boot-blocks-module",
    remedy="repair-software", drain=True,
    problem="Secure Boot blocks the NVIDIA module",
    title="Secure Boot does not block the NVIDIA module",
    tags=("driver", "kernel", "security"), requires=("kmod.secure_boot",), applies=(needs_nvidia_gpu,),
    what="""Reads the SecureBoot EFI variable; when Secure Boot is on and the nvidia module is not loaded, checks
    whether the module on disk is signed and whether the kernel log shows 'Key was rejected by service'.""",
    why="""With Secure Boot on, the kernel refuses modules not signed by an enrolled key. A DKMS-built module is
    signed with a machine owner key (MOK) that must be confirmed at the boot-time MOK screen, which a cloud VM
    reached over SSH never shows, so the driver silently fails to load.""",
    fix="""Enroll the DKMS/akmods signing key (mokutil --import, then confirm at the console on reboot), use a
    pre-signed driver package, or turn Secure Boot off for the instance.""",
)
def secure_boot_blocks_module(facts: Facts) -> Result:
    sb = facts.get("kmod.secure_boot") or {}
    enabled = sb.get("enabled")
    evidence = {"kmod.secure_boot": sb, "nvidia_driver.kernel_module.loaded": facts.get("nvidia_driver.kernel_module.loaded"),
                "kernel_log.module_key_rejected": facts.get("kernel_log.module_key_rejected")}
    if enabled is None:
        return skip("whether Secure Boot is on is unknown here", **evidence)
    if not enabled:
        return passed("Secure Boot is off", **evidence)
    if facts.get("nvidia_driver.kernel_module.loaded"):
        return passed("Secure Boot is on and the nvidia module is loaded (it is signed by an enrolled key)", **evidence)
    running = facts.get("kmod.running_kernel")
    mods = [m for m in facts.get("kmod.nvidia_modules") or [] if m["kernel"] == running]
    unsigned = [m["path"] for m in mods if m.get("signed") is False]
    evidence["unsigned_modules"] = unsigned
    if not mods and running in (facts.get("kmod.module_unknown") or []):
        return skip(f"whether an NVIDIA module exists for {running} is not known", **evidence)
    fix = Fix("Enroll the module signing key and confirm it at the console on the next boot (or disable Secure Boot).",
              ("mokutil --sb-state", "sudo mokutil --import /var/lib/dkms/mok.pub   # akmods: /etc/pki/akmods/certs/public_key.der",
               reboot("confirm the key on the MOK screen (serial console on a cloud VM)")))
    if unsigned:
        return fail(f"Secure Boot is on and {unsigned[0]} is not signed: the kernel refuses to load it", evidence, fix)
    if facts.get("kernel_log.module_key_rejected"):
        return fail("Secure Boot is on and the kernel rejected the nvidia module's signing key (not enrolled)",
                    evidence, fix)
    return warn("Secure Boot is on and the nvidia module is not loaded; check that its signing key is enrolled",
                evidence, fix)


@check(
    id="DLD-DRV-006", slug="gsp-firmware-missing",
    remedy="repair-software", drain=True,
    problem="The open kernel modules' GSP firmware is missing",
    title="The GSP firmware of the driver's version is installed where the open kernel modules need it",
    tags=("driver", "gpu", "kernel", "ami"), requires=("nvidia_driver",), applies=(needs_nvidia_gpu,),
    what="""With the open NVIDIA kernel modules, looks for the GPU System Processor firmware of the module's exact
    version, /lib/firmware/nvidia/<version>/gsp_*.bin. Works on an unbooted image (--sysroot).""",
    why="""The open kernel modules offload GPU initialisation to the GSP and cannot drive a GPU without its firmware:
    the module loads, then every GPU fails with 'RmInitAdapter failed' or a GSP firmware load error, and nvidia-smi
    finds no devices. It happens when the firmware package was left out of an image or is of another driver
    version than the module (NVIDIA's driver README, chapter 'GSP Firmware').""",
    fix="""Install the firmware package of the exact driver version (Debian/Ubuntu: firmware-nvidia-gsp or
    nvidia-firmware-<branch>-<version>; RHEL: nvidia-kmod-common), or reinstall the driver.""",
)
def gsp_firmware(facts: Facts) -> Result:
    module = facts.get("nvidia_driver.kernel_module") or {}
    flavor = module.get("flavor")
    versions = facts.get("nvidia_driver.userspace.versions") or []
    version = module.get("version") or (versions[0] if len(versions) == 1 else None)
    firmware = facts.get("nvidia_driver.gsp_firmware")
    evidence = {"flavor": flavor, "version": version, "gsp_firmware": firmware}
    if firmware is None:
        return skip("these facts predate the GSP firmware facts (dl-doctor 0.2.0)", **evidence)
    if facts.get("system.container.kind"):
        return skip(f"inside a container ({facts.get('system.container.kind')}): the kernel module, and the GSP "
                    f"firmware it loads, are the host's", **evidence)
    if not version:
        return skip("the driver version is not known here", **evidence)
    files = firmware.get(version) or []
    if files:
        return passed(f"GSP firmware {version}: {', '.join(files)}", **evidence)
    if flavor != "open":
        return skip(f"no GSP firmware for {version}; the {flavor or 'unknown'} module flavour does not require it",
                    **evidence)
    others = sorted(firmware)
    return fail(f"the open kernel module {version} needs /lib/firmware/nvidia/{version}/gsp_*.bin, which is not "
                f"installed" + (f" (firmware exists only for {', '.join(others)})" if others else ""), evidence,
                Fix("Install the GSP firmware of the driver's exact version.",
                    (package_manager(facts).install(f"nvidia-firmware-{version.split('.')[0]}-{version}"
                                                    if package_manager(facts).name == "apt" else "nvidia-kmod-common"),
                     f"ls /lib/firmware/nvidia/{version}/   # gsp_ga10x.bin, gsp_tu10x.bin")))


def _extra_modules_package(facts: Facts, kernel: str) -> Step:
    """The distro package that carries a kernel's less common in-tree modules (Ubuntu and Debian split them into
    linux-modules-extra; RHEL, Rocky, Alma and Amazon Linux into kernel-modules-extra)."""
    pm = package_manager(facts)
    if pm.name == "apt":
        return pm.install(f"linux-modules-extra-{kernel}")
    if pm.name == "zypper":
        return pm.install("kernel-default-extra")
    return pm.install(f"kernel-modules-extra-{kernel}")


@check(
    id="DLD-DRV-007", slug="nvidia-module-dependency-unavailable",
    remedy="repair-software", drain=True,
    problem="An NVIDIA kernel module cannot load: a module it needs is missing or not loaded first",
    title="Every NVIDIA kernel module of the running kernel has what it needs from that kernel (depends=, "
          "modules.dep, vermagic)",
    tags=("driver", "kernel", "gpu"), requires=("kmod",), applies=(needs_nvidia_gpu,),
    what="""For every NVIDIA module of the running kernel (nvidia, nvidia-uvm, -modeset, -drm, -peermem; .ko,
    .ko.xz, .ko.gz, and .ko.zst where readable), reads the modules its .modinfo depends= names and its vermagic, and
    holds them against the kernel's own modules.dep and modules.builtin, and against the kernel log's 'Unknown
    symbol' lines of this boot. Judged only where modules.dep lists modules (an empty one says nothing).""",
    why="""modprobe loads a module's dependencies first only as modules.dep lists them, and the kernel refuses a
    module whose symbols no loaded module exports: 'MODULE: Unknown symbol SYMBOL (err -2)', then 'modprobe: ERROR:
    could not insert ... Unknown symbol in module'. That happens when the module it needs is not installed for
    this kernel (a split package such as linux-modules-extra or kernel-modules-extra left out), when modules.dep
    was not regenerated after the NVIDIA module was installed (depmod), or when a module was built for another
    kernel (its vermagic).""",
    fix="""Install the package that carries the missing module for the running kernel (linux-modules-extra-KERNEL,
    kernel-modules-extra-KERNEL), run depmod -a KERNEL so that modules.dep names every dependency, then modprobe
    the NVIDIA module again; a module built for another kernel is rebuilt for this one.""",
)
def module_dependencies(facts: Facts, matrix=None) -> Result:
    rm = facts.get("kmod.running_modules")
    symbols = [s for s in facts.get("kernel_log.unknown_symbols") or [] if isinstance(s, dict)]
    if rm is None:
        return skip("the running kernel's modules are not known here (no running kernel or no /lib/modules for it)")
    kernel = rm.get("kernel") or facts.get("kmod.running_kernel")
    mods = [m for m in rm.get("modules") or [] if isinstance(m, dict)]
    if not mods:
        return skip(f"no NVIDIA module is installed for the running kernel {kernel} (see DLD-DRV-001)")
    loaded = set(facts.get("nvidia_driver.modules") or [])
    refused: Dict[str, List[Dict[str, Any]]] = {}
    for s in symbols:
        refused.setdefault(s["module"], []).append(s)
    evidence: Dict = {"kernel": kernel, "modules": [{k: m.get(k) for k in ("name", "path", "depends", "vermagic",
                                                                            "listed", "missing", "unlisted")}
                                                     for m in mods],
                      "kernel_log.unknown_symbols": [s.get("line") for s in symbols[:10]]}
    problems: List[str] = []
    warnings: List[str] = []
    steps: List = []
    heads: List[str] = []

    def said(name: str) -> str:
        lines = refused.get(name) or []
        if not lines:
            return ""
        more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
        return f"; the kernel log shows it: '{lines[0]['line'].split('] ', 1)[-1][-160:]}'{more}"

    for m in mods:
        name, path = m["name"], m["path"]
        file = path.rsplit("/", 1)[-1]
        is_loaded = name in loaded
        vm = (m.get("vermagic") or "").split()
        if vm and vm[0] != kernel and not _weak_link_applies(facts, matrix, m, kernel):
            (warnings if is_loaded else problems).append(
                f"{file} was built for {vm[0]}, not the running kernel {kernel}: the kernel refuses it" + said(name))
            heads.append(f"{file} was built for another kernel")
            steps.append(root_command(f"dkms autoinstall -k {kernel}"))
            continue
        if not rm.get("modules_dep"):
            continue
        if m.get("missing"):
            need = ", ".join(m["missing"])
            (warnings if is_loaded else problems).append(
                f"{file} needs {need} (its .modinfo depends=), which the running kernel {kernel} does not have (not in "
                f"modules.dep or modules.builtin): loading {name} fails with 'Unknown symbol'" + said(name))
            heads.append(f"{file} needs {need}, which the running kernel does not have")
            steps.append(_extra_modules_package(facts, kernel))
            steps.append(root_command(f"depmod -a {kernel}"))
            steps.append(load_module(name.replace("_", "-")))
        elif m.get("listed") is False:
            (warnings if is_loaded else problems).append(
                f"{path} is not in the running kernel's modules.dep (depmod was not run after it was installed): "
                f"'modprobe {name}' cannot find it or load what it needs" + said(name))
            heads.append(f"{file} is not in modules.dep")
            steps.append(root_command(f"depmod -a {kernel}"))
            steps.append(load_module(name.replace("_", "-")))
        elif m.get("unlisted"):
            need = ", ".join(m["unlisted"])
            (warnings if is_loaded else problems).append(
                f"modules.dep lists {file} without {need}, which its .modinfo depends on: modprobe inserts it alone "
                f"and the kernel refuses its symbols ('Unknown symbol'); modules.dep is stale" + said(name))
            heads.append(f"modules.dep lists {file} without {need}")
            steps.append(root_command(f"depmod -a {kernel}"))
            steps.append(load_module(name.replace("_", "-")))
    # refusals the tree cannot explain (a module the files judge fine): the log line is the evidence
    explained = {p.split(" ", 1)[0] for p in problems + warnings}
    for name, lines in sorted(refused.items()):
        if name in loaded or any(name in e or name.replace("_", "-") in e for e in explained):
            continue
        if not any(m["name"] == name for m in mods):
            continue
        kinds = {s["kind"] for s in lines}
        why = ("built against other kernel headers or another provider of those symbols" if kinds == {"version"}
               else "no loaded module exports them")
        problems.append(f"the kernel refused {name} in this boot ({why}): '{lines[0]['line'].split('] ', 1)[-1][-160:]}'"
                        + (f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""))
        heads.append(f"the kernel refused {name}: Unknown symbol")
        steps.append(f"modprobe --show-depends {shlex.quote(name)}")
        steps.append(f"modinfo -F depends {shlex.quote(name)}")
    fix = Fix("Give the NVIDIA modules what they need from the running kernel, then load them.",
              tuple(dict.fromkeys(steps)) + ("sudo dmesg | grep -iE 'Unknown symbol|disagrees about version' | tail",))
    from dl_doctor.checks.common import first_heading
    if problems:
        return fail("; ".join(problems + warnings), evidence, fix, headline=first_heading(heads))
    if warnings:
        return warn("; ".join(warnings) + " (loaded now, but it will not load again as the files stand)", evidence, fix,
                    headline=first_heading(heads))
    if not rm.get("modules_dep"):
        return skip(f"the running kernel's modules.dep is missing or empty: what {kernel} provides is not known",
                    **evidence)
    return passed(f"{len(mods)} NVIDIA module(s) of {kernel}: everything their depends= names is in modules.dep or "
                  f"built in, and they were built for it", **evidence)
