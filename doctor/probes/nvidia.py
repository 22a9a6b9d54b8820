"""NVIDIA GPUs on the PCI bus and the NVIDIA kernel module (file sources only)."""

from __future__ import annotations

import posixpath
import re
from typing import Any, Dict, List, Optional, Tuple

from dl_doctor.facts.contract import array, boolean, count, map_of, obj, string
from dl_doctor.probes import ProbeContext, Unavailable, probe

NVIDIA_VENDOR = "10de"

# PCI class codes (base class + subclass) of NVIDIA functions.
PCI_KINDS = {"0300": "gpu", "0302": "gpu", "0680": "nvswitch", "0403": "audio", "0c03": "usb", "0c80": "serial-bus"}

_NVRM = re.compile(
    r"NVRM version:\s+NVIDIA UNIX\s+(?P<open>Open\s+)?(?:(?P<arch1>\S+)\s+)?Kernel Module"
    r"(?:\s+for\s+(?P<arch2>\S+))?\s+(?P<version>\d+\.\d+(?:\.\d+)?)\s*(?P<rest>.*)$")
_GCC = re.compile(r"^GCC version:\s+(?P<gcc>.+?)\s*$")


def parse_proc_version(text: str) -> Dict[str, Any]:
    """Parse ``/proc/driver/nvidia/version``.

    Proprietary: ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ...``
    Open:        ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.14  Release Build ...``
    Returns ``{}`` when the text has no NVRM line.
    """
    out: Dict[str, Any] = {}
    for line in text.splitlines():
        line = line.strip()
        m = _NVRM.match(line)
        if m:
            out["version"] = m.group("version")
            out["flavor"] = "open" if m.group("open") else "proprietary"
            out["arch"] = m.group("arch2") or m.group("arch1")
            out["build"] = m.group("rest").strip() or None
            continue
        g = _GCC.match(line)
        if g:
            out["gcc"] = g.group("gcc")
    return out


def parse_proc_modules(text: str) -> List[str]:
    """Module names from ``/proc/modules`` (first field of each line)."""
    return [line.split()[0] for line in text.splitlines() if line.strip()]


def parse_gpu_information(text: str) -> Dict[str, str]:
    """``/proc/driver/nvidia/gpus/<bdf>/information``: ``Model:  Tesla T4`` lines."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            out[key.strip().lower().replace(" ", "_")] = value.strip()
    return out


LIBRARY_DIRS = ("/usr/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib",
                "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/lib64", "/lib/x86_64-linux-gnu")
_LIB_VERSION = re.compile(r"^(libnvidia-ml|libcuda)\.so\.(\d{3}\.\d{1,3}(?:\.\d{1,3})?)$")


def library_version(filename: str) -> Optional[Tuple[str, str]]:
    """``libnvidia-ml.so.535.104.05`` -> (``libnvidia-ml``, ``535.104.05``); sonames like ``.so.1`` -> None."""
    m = _LIB_VERSION.match(filename)
    return (m.group(1), m.group(2)) if m else None


def _hex(text: Optional[str]) -> Optional[str]:
    if not text:
        return None
    value = text.strip().lower()
    return value[2:] if value.startswith("0x") else value


GPU_PCI_FACTS = obj(
    "PCI devices of NVIDIA (GPUs, NVSwitches) from sysfs",
    devices=array(obj(
        "",
        keys={"class": string("the PCI class code, hexadecimal (030000, 030200, 068000...)")},
        bdf=string("the PCI address (0000:17:00.0)"),
        vendor_id=string("10de"),
        device_id=string("the PCI device id, hexadecimal (the GPU model, through the compatibility matrix)"),
        subsystem_device_id=string("the PCI subsystem device id, hexadecimal"),
        kind=string("gpu, nvswitch, audio, usb, serial-bus or other, from the class"),
        driver=string("the bound kernel driver (nvidia, vfio-pci, nouveau; null: none)"),
    ), "one entry per NVIDIA PCI function: bdf, device id, kind, bound driver"),
    gpu_count=count("NVIDIA GPUs on the PCI bus"),
    nvswitch_count=count("NVSwitches on the PCI bus"),
)


@probe("gpu_pci", "NVIDIA devices on the PCI bus (/sys/bus/pci)", provides=GPU_PCI_FACTS)
def gpu_pci_probe(ctx: ProbeContext) -> Dict[str, Any]:
    host = ctx.host
    base = "/sys/bus/pci/devices"
    if not host.is_dir(base):
        raise Unavailable("no /sys/bus/pci/devices (an image that has not booted has an empty /sys)")
    devices: List[Dict[str, Any]] = []
    for bdf in host.listdir(base):
        vendor = _hex(host.try_read(f"{base}/{bdf}/vendor", 64))
        if vendor != NVIDIA_VENDOR:
            continue
        pci_class = _hex(host.try_read(f"{base}/{bdf}/class", 64)) or ""
        driver_link = host.readlink(f"{base}/{bdf}/driver")
        devices.append({
            "bdf": bdf,
            "vendor_id": vendor,
            "device_id": _hex(host.try_read(f"{base}/{bdf}/device", 64)),
            "subsystem_device_id": _hex(host.try_read(f"{base}/{bdf}/subsystem_device", 64)),
            "class": pci_class,
            "kind": PCI_KINDS.get(pci_class[:4], "other"),
            "driver": posixpath.basename(driver_link.rstrip("/")) if driver_link else None,
        })
    gpus = [d for d in devices if d["kind"] == "gpu"]
    return {"devices": devices, "gpu_count": len(gpus),
            "nvswitch_count": sum(1 for d in devices if d["kind"] == "nvswitch")}


NVIDIA_DRIVER_FACTS = obj(
    "the NVIDIA kernel module and the user-space driver (libcuda, libnvidia-ml) found",
    kernel_module=obj(
        "the NVIDIA kernel module",
        loaded=boolean("whether the nvidia module is loaded"),
        loaded_source=string("what says so: /proc/driver/nvidia/version, /proc/modules, /sys/module/nvidia"),
        version=string("the loaded module's version (/proc/driver/nvidia/version)"),
        flavor=string("open or proprietary"),
        build=string("the rest of the NVRM version line (build date, Release Build)"),
        gcc=string("the compiler it was built with"),
    ),
    modules=array(string(), "loaded modules named nvidia* or nouveau (/proc/modules; null: not readable)"),
    module_autoload=array(obj(
        "",
        module=string("the module name"),
        file=string("the file that names it"),
    ), "NVIDIA modules the root filesystem loads at boot (/etc/modules-load.d/*.conf, /etc/modules): {module, "
       "file}", since="0.2.0"),
    proc_gpus=array(obj(
        "",
        bdf=string("the GPU's PCI address"),
        values=string("a field of /proc/driver/nvidia/gpus/BDF/information, by its name in lower case (model, "
                      "irq, gpu_uuid, video_bios, bus_type, device_minor, gpu_excluded...)"),
    ), "the GPUs the loaded driver lists (/proc/driver/nvidia/gpus)"),
    device_access=boolean("this user can read and write /dev/nvidiactl (live, with the module loaded; null: not "
                          "known)"),
    device_nodes=array(string(), "/dev/nvidia* (live only)"),
    dev_char_links=array(string(), "/dev/char links to NVIDIA devices (live only; systemd needs them for device "
                                   "cgroups)", since="0.2.0"),
    gsp_firmware=map_of(array(string(), "its gsp_*.bin files"),
                        "driver version -> the GSP firmware files installed for it (/lib/firmware/nvidia/VERSION)",
                        since="0.2.0"),
    userspace=obj(
        "the user-space driver libraries found in the system's library directories",
        libraries=array(obj(
            "",
            library=string("libcuda or libnvidia-ml"),
            version=string("its version from the file name"),
            path=string("the file"),
        ), "libcuda.so.VERSION and libnvidia-ml.so.VERSION files (each real file once)"),
        versions=array(string(), "versions of the user-space driver libraries found"),
    ),
    forward_compat_libs=array(obj(
        "",
        path=string("the libcuda file"),
        version=string("its version"),
        active=boolean("its directory is on LD_LIBRARY_PATH or in /etc/ld.so.conf.d"),
    ), "CUDA forward-compatibility libcuda (/usr/local/cuda*/compat, compat directories on LD_LIBRARY_PATH)"),
)


@probe("nvidia_driver", "the NVIDIA kernel module: loaded, version, flavour (/proc/driver/nvidia, /proc/modules)",
       root_adds="access to /dev/nvidiactl, which NVML needs for GPU health (ECC, clocks, retired pages)",
       provides=NVIDIA_DRIVER_FACTS)
def nvidia_driver_probe(ctx: ProbeContext) -> Dict[str, Any]:
    host = ctx.host
    version_text = host.try_read("/proc/driver/nvidia/version", 65536)
    parsed = parse_proc_version(version_text) if version_text else {}
    modules_text = host.try_read("/proc/modules")
    modules = parse_proc_modules(modules_text) if modules_text is not None else None
    sys_version = host.try_read("/sys/module/nvidia/version", 256)
    sys_module_dir = host.is_dir("/sys/module")

    if version_text is not None or (modules is not None and "nvidia" in modules) or host.is_dir("/sys/module/nvidia"):
        loaded: Optional[bool] = True
        loaded_source = ("/proc/driver/nvidia/version" if version_text is not None else
                         "/proc/modules" if modules is not None and "nvidia" in modules else "/sys/module/nvidia")
    elif modules is not None:
        loaded, loaded_source = False, "/proc/modules"
    elif sys_module_dir:
        loaded, loaded_source = False, "/sys/module"
    else:
        loaded, loaded_source = None, None

    if loaded is None and not host.live and not host.is_dir("/proc") and not host.is_dir("/sys"):
        raise Unavailable("the sysroot has no /proc or /sys (an image that has not booted)")

    gpus = []
    for bdf in host.listdir("/proc/driver/nvidia/gpus"):
        info = host.try_read(f"/proc/driver/nvidia/gpus/{bdf}/information", 65536)
        gpus.append({"bdf": bdf, **(parse_gpu_information(info) if info else {})})

    related = None
    if modules is not None:
        related = sorted(m for m in modules if m.startswith("nvidia") or m == "nouveau")
    # NVIDIA modules this root filesystem loads at boot (systemd-modules-load; Debian's /etc/modules): what a tree
    # says about modules such as nvidia-peermem that nothing else loads
    autoload = []
    for conf in sorted(host.glob("/etc/modules-load.d/*.conf"))[:64] + ["/etc/modules"]:
        for line in (host.try_read(conf, 65536) or "").splitlines()[:1000]:
            name = line.split("#", 1)[0].strip().replace("-", "_")
            if name.startswith("nvidia") and len(name) < 64:
                autoload.append({"module": name, "file": conf})

    device_access = None
    if host.kernel_live and loaded and host.exists("/dev/nvidiactl"):
        device_access = host.access("/dev/nvidiactl", 6)  # R_OK | W_OK
        if not device_access:
            ctx.denied("NVML facts (GPU health, ECC errors, clocks, processes): /dev/nvidiactl is not "
                       "readable and writable by this user; run as root or join the group that owns it")

    libraries = []
    seen_real = set()
    for directory in LIBRARY_DIRS:
        for name in host.listdir(directory):
            lib = library_version(name)
            if not lib:
                continue
            path = f"{directory}/{name}"
            try:
                real = host.resolve(path)
            except OSError:
                continue
            if real in seen_real:
                continue
            seen_real.add(real)
            libraries.append({"library": lib[0], "version": lib[1], "path": path})
    compat = []
    env = host.environ()
    ld_path = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    ld_conf = " ".join(host.try_read(p, 65536) or "" for p in host.glob("/etc/ld.so.conf.d/*.conf"))
    for directory in sorted(set(host.glob("/usr/local/cuda*/compat") + host.glob("/usr/local/cuda*/compat/lib*")
                                + [d for d in ld_path if "compat" in d])):
        for name in host.listdir(directory):
            lib = library_version(name)
            if lib and lib[0] == "libcuda":
                active = directory in ld_path or directory in ld_conf
                compat.append({"path": f"{directory}/{name}", "version": lib[1], "active": active})

    device_nodes = None
    char_links = None
    if host.kernel_live:
        device_nodes = sorted(n for n in host.listdir("/dev") if n.startswith("nvidia"))
        # /dev/char/MAJOR:MINOR links to the NVIDIA nodes: runc needs them to keep a container's device access
        # across a systemd daemon-reload (NVIDIA/nvidia-docker#1730)
        char_links = sorted(n for n in host.listdir("/dev/char")
                            if (host.readlink(f"/dev/char/{n}") or "").rsplit("/", 1)[-1].startswith("nvidia"))[:256]

    # the GSP firmware the driver loads on Turing and later GPUs (the open kernel modules cannot run without it)
    gsp: Dict[str, List[str]] = {}
    for path in (host.glob("/lib/firmware/nvidia/*/gsp_*.bin") + host.glob("/usr/lib/firmware/nvidia/*/gsp_*.bin"))[:256]:
        version = path.split("/")[-2]
        gsp.setdefault(version, [])
        if path.rsplit("/", 1)[-1] not in gsp[version]:
            gsp[version].append(path.rsplit("/", 1)[-1])
    return {
        "userspace": {"libraries": libraries, "versions": sorted({lib["version"] for lib in libraries})},
        "dev_char_links": char_links,
        "gsp_firmware": {k: sorted(v) for k, v in sorted(gsp.items())},
        "forward_compat_libs": compat,
        "device_nodes": device_nodes,
        "kernel_module": {
            "loaded": loaded,
            "loaded_source": loaded_source,
            "version": parsed.get("version") or (sys_version.strip() if sys_version else None),
            "flavor": parsed.get("flavor"),
            "build": parsed.get("build"),
            "gcc": parsed.get("gcc"),
        },
        "modules": related,
        "module_autoload": autoload,
        "proc_gpus": gpus,
        "device_access": device_access,
    }
