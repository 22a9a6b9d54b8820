"""NVIDIA GPUs on the PCI bus and the NVIDIA kernel module (file sources only)."""

from __future__ import annotations

import posixpath
import re
from typing import Any, Dict, List, Optional, Tuple

from dl_doctor.facts.contract import array, boolean, count, map_of, obj, string
from dl_doctor.probes import ProbeContext, Unavailable, probe
from dl_doctor.probes.storage import mount_for  # the mount that holds a path: one helper for both probes

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
# WSL2: the Windows driver's Linux user space (libcuda.so.1.1, libnvidia-ml.so.1: no driver version in the names)
WSL_LIB_DIR = "/usr/lib/wsl/lib"
_WSL_LIB = re.compile(r"^(libnvidia-ml|libcuda)\.so(?:\.\d{1,3}){0,3}$")


def library_version(filename: str) -> Optional[Tuple[str, str]]:
    """``libnvidia-ml.so.535.104.05`` -> (``libnvidia-ml``, ``535.104.05``); sonames like ``.so.1`` -> None."""
    m = _LIB_VERSION.match(filename)
    return (m.group(1), m.group(2)) if m else None


# -- what the container runtime (or WSL) put here from the host ---------------------------------------------------

MAX_MOUNT_TABLE_BYTES = 4 << 20
MAX_MOUNTS = 20000
_OCTAL = re.compile(r"\\([0-7]{3})")
# a mount point that is the driver's: its user-space libraries and programs, device nodes, /proc/driver/nvidia,
# the host daemons' sockets, WSL2's driver directories
_DRIVER_MOUNT = re.compile(
    r"(?:/lib(?:nvidia-[a-z0-9_-]{1,40}|cuda|cudadebugger|nvcuvid|nvoptix|nvidia)\.so(?:\.[0-9.]{1,20})?"
    r"|/nvidia-(?:smi|debugdump|persistenced|cuda-mps-control|cuda-mps-server)"
    r"|^/dev/nvidia[a-z0-9-]{0,32}|^/dev/dxg|^/proc/driver/nvidia(?:/.*)?|^/run/nvidia-(?:persistenced|fabricmanager)/.*"
    r"|^/usr/lib/wsl/(?:lib|drivers)|^/usr/local/nvidia(?:/.*)?)$")
_HOST_SERVICE_SOCKETS = (("/run/nvidia-persistenced/", "nvidia-persistenced"),
                         ("/run/nvidia-fabricmanager/", "nvidia-fabricmanager"))


def _unescape(field: str) -> str:
    """Mount tables escape space, tab, newline and backslash as octal (``\\040``)."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str, limit: int = MAX_MOUNTS) -> List[Dict[str, Any]]:
    """``/proc/self/mountinfo``: ``ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER``.

    ROOT is the path inside the mounted file system: a bind mount of one file has that file's path on the host
    there. Malformed lines, and fields longer than 4096 characters, are skipped; at most ``limit`` lines are read."""
    out: List[Dict[str, Any]] = []
    for line in text.splitlines()[:limit]:
        head, sep, tail = line.partition(" - ")
        if not sep:
            continue
        h, t = head.split(), tail.split()
        if len(h) < 6 or len(t) < 2 or any(len(f) > 4096 for f in h[3:5] + t[:2]):
            continue
        out.append({"root": _unescape(h[3]), "mountpoint": _unescape(h[4]), "fstype": t[0][:64],
                    "source": _unescape(t[1])[:4096]})
    return out


def parse_mount_lines(text: str, limit: int = MAX_MOUNTS) -> List[Dict[str, Any]]:
    """``/proc/self/mounts`` (fstab format): no ROOT field, so a bind mount is known only by its mount point."""
    out: List[Dict[str, Any]] = []
    for line in text.splitlines()[:limit]:
        f = line.split()
        if len(f) < 3 or len(f[0]) > 4096 or len(f[1]) > 4096:
            continue
        out.append({"root": None, "mountpoint": _unescape(f[1]), "fstype": f[2][:64], "source": _unescape(f[0])})
    return out


def mount_table(host) -> Tuple[Optional[str], List[Dict[str, Any]]]:
    """This process's mounts, once per run: live /proc/self/mountinfo (else /proc/self/mounts); in a tree, the
    captured proc/self/mountinfo, else proc/self/mounts or proc/mounts. With --host-root the files come from the
    host's root and the mount table is this container's own: it says nothing about them (None, [])."""
    def compute() -> Tuple[Optional[str], List[Dict[str, Any]]]:
        if host.live_kernel and not host.live:
            return None, []
        paths = ["/proc/self/mountinfo", "/proc/self/mounts"] + ([] if host.live else ["/proc/mounts"])
        for path in paths:
            try:
                text = host.try_read(path, MAX_MOUNT_TABLE_BYTES)
            except OSError:
                continue
            if text is None:
                continue
            mounts = parse_mountinfo(text) if path.endswith("mountinfo") else parse_mount_lines(text)
            if mounts:
                return path, mounts
        return None, []

    return host.cached(("nvidia", "mount_table"), compute)


def _compat_origin(host, path: str, real: str) -> Optional[str]:
    """Where a libcuda in a system library directory comes from when it is a cuda-compat (forward-compatibility)
    copy: a link into a .../compat directory, or a bind mount whose source is one (nvidia-container-cli's CUDA compat
    mode mounts the image's /usr/local/cuda-X.Y/compat/libcuda.so.* into the library directory); None otherwise."""
    if "/compat/" in real:
        return real
    _, mounts = mount_table(host)
    for m in mounts:
        if m["mountpoint"] == path and m.get("root") and "/compat/" in m["root"]:
            return m["root"][:4096]
    return None


def _dev_char_captured(host) -> bool:
    """The tree holds a running host's /dev/char: udev's MAJOR:MINOR links of the basic devices (1:3 null, 1:5
    zero) are there."""
    return any(host.readlink(f"/dev/char/{n}") for n in ("1:3", "1:5"))


def _is_wsl(host, mounts: List[Dict[str, Any]]) -> bool:
    release = (host.try_read("/proc/sys/kernel/osrelease", 256) or "").lower()
    if "microsoft" in release and "wsl" in release:
        return True
    return host.is_dir(WSL_LIB_DIR) and (host.lexists("/dev/dxg") or any(
        m["mountpoint"] == WSL_LIB_DIR for m in mounts))


def runtime_facts(host, env: Dict[str, str], live_nodes: Optional[List[str]]) -> Dict[str, Any]:
    """What the container runtime (the NVIDIA container runtime / nvidia-container-cli, or CDI) or WSL2 put here
    from the host: the driver mounts, who made them, the GPUs this container was given."""
    source, mounts = mount_table(host)
    in_container = _in_container(host)
    driver_mounts = [m for m in mounts if m["mountpoint"] != "/" and _DRIVER_MOUNT.search(m["mountpoint"])]
    wsl = _is_wsl(host, mounts)
    nodes = sorted({m["mountpoint"][5:] for m in driver_mounts if m["mountpoint"].startswith("/dev/nvidia")})
    visible = env.get("NVIDIA_VISIBLE_DEVICES")
    visible = visible.strip()[:4096] if visible is not None else None
    by = None
    if wsl:
        by = "wsl"
    elif in_container and driver_mounts:
        legacy = nodes or any(m["mountpoint"].startswith("/proc/driver/nvidia") for m in driver_mounts)
        # nvidia-container-cli bind-mounts the nodes and masks /proc/driver/nvidia; a CDI spec creates the nodes (no
        # mount), mounts the files one by one and sets NVIDIA_VISIBLE_DEVICES=void (so that the legacy hook does not
        # inject again); podman reaches GPUs only through CDI. A directory of the host's (GKE's /usr/local/nvidia)
        # is the runtime's too.
        file_binds = any(_LIB_VERSION.match(m["mountpoint"].rsplit("/", 1)[-1]) for m in driver_mounts)
        podman = container_kind(host) == "podman"
        by = "cdi" if visible == "void" or (not legacy and file_binds and podman) else "container-runtime"
    given: Optional[List[str]] = None
    if in_container:
        seen = live_nodes if live_nodes is not None else nodes
        minors = [n for n in seen or [] if n[6:].isdigit()]
        if minors:
            given = sorted(minors, key=lambda n: int(n[6:]))
        elif visible and visible.startswith("/var/run/nvidia-container-devices"):
            # the device plugin's volume-mounts strategy: one mounted entry per device given
            given = host.listdir("/var/run/nvidia-container-devices")[:1024] or None
        elif visible and visible.lower() not in ("all", "none", "void"):
            given = [v.strip()[:128] for v in visible.split(",") if v.strip()][:1024] or None
    services = sorted({name for m in driver_mounts for prefix, name in _HOST_SERVICE_SOCKETS
                       if m["mountpoint"].startswith(prefix)})
    return {
        "source": source,
        "by": by,
        "wsl": wsl,
        "mounts": [{"path": m["mountpoint"][:4096], "root": m["root"], "fstype": m["fstype"]}
                   for m in driver_mounts[:256]],
        "device_nodes": nodes[:256] if source else None,
        "visible_devices": visible,
        "given_gpus": given,
        "host_services": services,
    }


def _in_container(host) -> bool:
    return container_kind(host) is not None


def container_kind(host) -> Optional[str]:
    from dl_doctor.probes.system import container_of

    found = container_of(host)
    return (found["kind"] or "container") if found["in_container"] else None


def provided_by(host, path: str, runtime: Dict[str, Any]) -> str:
    """Whose a driver library is: ``wsl`` (the Windows driver's, /usr/lib/wsl), ``container-runtime`` or ``cdi``
    (the host's, bind-mounted at start), ``mount`` (another volume or bind mount: not the image's), ``image`` (a
    file of the container's image) or ``host`` (this machine's own installation)."""
    try:
        real = host.tree_path(path)
    except OSError:
        real = path
    if real.startswith("/usr/lib/wsl/") or path.startswith("/usr/lib/wsl/"):
        return "wsl"
    if not _in_container(host):
        return "host"
    _, mounts = mount_table(host)
    m = mount_for(real, mounts)
    if m is None or m["mountpoint"] == "/":
        return "image"
    if m["mountpoint"] in (real, path) or _DRIVER_MOUNT.search(m["mountpoint"]):
        return "cdi" if runtime.get("by") == "cdi" else "container-runtime"
    return "mount"


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
    dev_char_links=array(string(), "/dev/char links to NVIDIA devices (live, or a tree that carries a running host's "
                                   "/dev/char; systemd needs them for device cgroups)", since="0.2.0"),
    gsp_firmware=map_of(array(string(), "its gsp_*.bin files"),
                        "driver version -> the GSP firmware files installed for it (/lib/firmware/nvidia/VERSION)",
                        since="0.2.0"),
    userspace=obj(
        "the user-space driver libraries found in the system's library directories",
        libraries=array(obj(
            "",
            library=string("libcuda or libnvidia-ml"),
            version=string("its version from the file name (null: WSL2's libcuda.so.1.1, whose name has none)"),
            path=string("the file"),
            provided_by=string("whose it is: host (this machine's installation), image (a file of the container's "
                               "image), container-runtime (the host's, bind-mounted by the NVIDIA container runtime "
                               "/ nvidia-container-cli), cdi (the host's, mounted from a CDI specification), wsl "
                               "(the Windows driver's, /usr/lib/wsl/lib), mount (another volume or bind mount)",
                               since="0.2.0"),
        ), "libcuda.so.VERSION and libnvidia-ml.so.VERSION files (each real file once), and WSL2's in "
           "/usr/lib/wsl/lib"),
        versions=array(string(), "versions of the user-space driver libraries found"),
    ),
    runtime=obj(
        "what the container runtime or WSL2 put here from the host (the mount table: /proc/self/mountinfo, else "
        "/proc/self/mounts; a tree's own)",
        source=string("the mount table read (null: none, or --host-root, whose files are the host's own)"),
        by=string("who put the driver here: container-runtime (nvidia-container-cli bind-mounts the libraries and "
                  "device nodes and masks /proc/driver/nvidia), cdi (a CDI specification: libraries mounted, device "
                  "nodes created), wsl (WSL2: the Windows driver through /dev/dxg); null: nobody"),
        wsl=boolean("this is WSL2 (a microsoft-standard-WSL2 kernel, or /usr/lib/wsl/lib with /dev/dxg)"),
        mounts=array(obj(
            "",
            path=string("the mount point (a driver library, nvidia-smi, /dev/nvidia0, /proc/driver/nvidia...)"),
            root=string("the path inside the mounted file system (for a bind mount, the host's path; null: "
                        "/proc/self/mounts has no such field)"),
            fstype=string("its file system type (ext4, xfs, devtmpfs, proc, tmpfs, overlay, 9p)"),
        ), "the driver's files, device nodes and /proc/driver/nvidia entries that are mounts (at most 256)"),
        device_nodes=array(string(), "/dev/nvidia* nodes that are mounts from the host: a tree's record of the "
                                     "devices a container was given (null: no mount table)"),
        visible_devices=string("NVIDIA_VISIBLE_DEVICES as the runtime was asked (all, none, void, indexes, GPU or "
                               "MIG UUIDs, /var/run/nvidia-container-devices)"),
        given_gpus=array(string(), "in a container, the GPUs it was given: its /dev/nvidiaN nodes (live, or mounted "
                                   "in a tree), else the device plugin's NVIDIA_VISIBLE_DEVICES list (null: all, or "
                                   "not known)"),
        host_services=array(string(), "host NVIDIA daemons whose sockets are mounted in (nvidia-persistenced): they "
                                      "run on the host, not here"),
        since="0.2.0",
    ),
    forward_compat_libs=array(obj(
        "",
        path=string("the libcuda file"),
        version=string("its version"),
        active=boolean("its directory is on LD_LIBRARY_PATH or in /etc/ld.so.conf.d, or, placed in a system library "
                       "directory, libcuda.so.1 there points at it"),
        origin=string("for a copy in a system library directory: the compat file it is (a link's target, a bind "
                      "mount's source)", since="0.2.0"),
    ), "CUDA forward-compatibility libcuda (/usr/local/cuda*/compat, compat directories on LD_LIBRARY_PATH, and "
       "compat copies linked or mounted into the system library directories)"),
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

    libraries: List[Dict[str, Any]] = []
    seen_real = set()
    placed_compat: List[Dict[str, Any]] = []  # cuda-compat libcuda put in a system library directory
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
            origin = _compat_origin(host, path, real) if lib[0] == "libcuda" else None
            if origin:
                # the image's forward-compatibility libcuda, copied, linked or bind-mounted (nvidia-container-cli's
                # CUDA compat mode) beside the driver's: not a second driver installation
                placed_compat.append({"path": path, "version": lib[1], "origin": origin, "directory": directory})
                continue
            libraries.append({"library": lib[0], "version": lib[1], "path": path})
    for name in host.listdir(WSL_LIB_DIR)[:1024]:  # WSL2: the Windows driver's libraries (no version in the name)
        wsl = _WSL_LIB.match(name)
        if not wsl:
            continue
        path = f"{WSL_LIB_DIR}/{name}"
        try:
            real = host.resolve(path)
        except OSError:
            continue
        if real in seen_real or host.readlink(path) is not None:
            continue
        seen_real.add(real)
        libraries.append({"library": wsl.group(1), "version": None, "path": path})
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
    for entry in placed_compat:
        # in a system library directory, it is what the loader takes for libcuda.so.1 when that link points at it
        link = host.readlink(f"{entry['directory']}/libcuda.so.1") or ""
        active = link.rsplit("/", 1)[-1] == entry["path"].rsplit("/", 1)[-1]
        compat.append({"path": entry["path"], "version": entry["version"], "active": active,
                       "origin": entry["origin"]})

    device_nodes = None
    char_links = None
    if host.kernel_live:
        device_nodes = sorted(n for n in host.listdir("/dev") if n.startswith("nvidia"))
    if host.kernel_live or _dev_char_captured(host):
        # /dev/char/MAJOR:MINOR links to the NVIDIA nodes: runc needs them to keep a container's device access
        # across a systemd daemon-reload (NVIDIA/nvidia-docker#1730). A tree captured from a running host carries
        # them (links, not device nodes); an image's empty /dev says nothing.
        char_links = sorted(n for n in host.listdir("/dev/char")
                            if (host.readlink(f"/dev/char/{n}") or "").rsplit("/", 1)[-1].startswith("nvidia"))[:256]

    runtime = runtime_facts(host, env, device_nodes)
    for entry in libraries:
        entry["provided_by"] = provided_by(host, entry["path"], runtime)

    # the GSP firmware the driver loads on Turing and later GPUs (the open kernel modules cannot run without it)
    gsp: Dict[str, List[str]] = {}
    for path in (host.glob("/lib/firmware/nvidia/*/gsp_*.bin") + host.glob("/usr/lib/firmware/nvidia/*/gsp_*.bin"))[:256]:
        version = path.split("/")[-2]
        gsp.setdefault(version, [])
        if path.rsplit("/", 1)[-1] not in gsp[version]:
            gsp[version].append(path.rsplit("/", 1)[-1])
    return {
        "userspace": {"libraries": libraries,
                      "versions": sorted({lib["version"] for lib in libraries if lib["version"]})},
        "runtime": runtime,
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
