"""Operating system, kernel, host identity, session environment and memory."""

from __future__ import annotations

import re
import shlex
from typing import Any, Dict, List, Optional

from dl_doctor.util.parse import ascii_int, isnum
from dl_doctor.facts.contract import array, boolean, integer, map_of, number, obj, string
from dl_doctor.probes import ProbeContext, Unavailable, probe


# -- parsers (pure; tested on verbatim samples) -------------------------------

def parse_os_release(text: str) -> Dict[str, str]:
    """Parse ``/etc/os-release`` (shell-style ``KEY=value`` lines, quotes optional)."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key = key.strip()
        if not re.match(r"^[A-Z][A-Z0-9_]*$", key):
            continue
        try:
            parts = shlex.split(value, comments=False, posix=True)
            out[key] = " ".join(parts) if parts else ""
        except ValueError:  # unbalanced quotes: keep the raw text
            out[key] = value.strip().strip("\"'")
    return out


def parse_meminfo(text: str) -> Dict[str, int]:
    """``/proc/meminfo`` values in bytes (``MemTotal:  16318056 kB``)."""
    out: Dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z0-9_()]{1,64}):[ \t]{1,64}([0-9]{1,25})(?:[ \t]{1,8}(kB))?[ \t]{0,8}$", line)
        if m:
            out[m.group(1)] = int(m.group(2)) * (1024 if m.group(3) else 1)
    return out


CONTAINER_CGROUP_MARKERS = (
    ("kubepods", "kubernetes"), ("docker", "docker"), ("containerd", "containerd"),
    ("libpod", "podman"), ("crio", "cri-o"), ("lxc", "lxc"),
)


def detect_container(files: Dict[str, Optional[str]], env: Dict[str, str]) -> Dict[str, Any]:
    """Decide from marker files, cgroup paths and the environment whether this is a container."""
    evidence: List[str] = []
    kind = None
    if files.get("/.dockerenv") is not None:
        kind = "docker"
        evidence.append("/.dockerenv exists")
    if files.get("/run/.containerenv") is not None:
        kind = kind or "podman"
        evidence.append("/run/.containerenv exists")
    if env.get("KUBERNETES_SERVICE_HOST"):
        kind = "kubernetes"
        evidence.append("KUBERNETES_SERVICE_HOST is set")
    cgroup = files.get("/proc/1/cgroup") or ""
    for marker, name in CONTAINER_CGROUP_MARKERS:
        if marker in cgroup:
            kind = kind or name
            evidence.append(f"/proc/1/cgroup mentions {marker}")
            break
    if env.get("container"):
        kind = kind or env["container"]
        evidence.append(f"container={env['container']} in the environment")
    return {"in_container": kind is not None, "kind": kind, "evidence": evidence}


# -- probes -------------------------------------------------------------------

OS_FACTS = obj(
    "/etc/os-release and the distribution's release files",
    id=string("ID from /etc/os-release (e.g. ubuntu, rhel, amzn)"),
    id_like=array(string(), "ID_LIKE, as a list (empty when not set)"),
    name=string("NAME"),
    version_id=string("VERSION_ID"),
    version=string("VERSION"),
    pretty_name=string("PRETTY_NAME"),
    platform_id=string("PLATFORM_ID (RHEL and its rebuilds: platform:el9)"),
    source=string("the file read: /etc/os-release, /usr/lib/os-release, or distro (live, when neither exists)"),
    redhat_release=string("the text of /etc/redhat-release, where it exists"),
    system_release=string("the text of /etc/system-release, where it exists (Amazon Linux, RHEL)"),
    debian_version=string("the text of /etc/debian_version, where it exists"),
)


@probe("os", "operating system and release (/etc/os-release)", provides=OS_FACTS)
def os_probe(ctx: ProbeContext) -> Dict[str, Any]:
    host = ctx.host
    text = host.try_read("/etc/os-release")
    source = "/etc/os-release"
    if text is None:
        text = host.try_read("/usr/lib/os-release")
        source = "/usr/lib/os-release"
    release: Dict[str, str] = parse_os_release(text) if text else {}
    out: Dict[str, Any] = {
        "id": release.get("ID"),
        "id_like": release.get("ID_LIKE", "").split() if release.get("ID_LIKE") else [],
        "name": release.get("NAME"),
        "version_id": release.get("VERSION_ID"),
        "version": release.get("VERSION"),
        "pretty_name": release.get("PRETTY_NAME"),
        "platform_id": release.get("PLATFORM_ID"),
        "source": source if text else None,
    }
    for extra in ("/etc/redhat-release", "/etc/system-release", "/etc/debian_version"):
        value = host.try_read(extra, 4096)
        if value is not None:
            out[extra.rsplit("/", 1)[1].replace("-", "_")] = value.strip()
    if not text and host.live:
        # No os-release (very old or stripped systems): ask `distro`, which
        # also knows lsb_release and the distribution-specific files.
        import distro

        info = distro.info()
        if info.get("id"):
            out.update(id=info["id"], version_id=info.get("version") or None,
                       name=distro.name() or None, pretty_name=distro.name(pretty=True) or None,
                       source="distro")
    if not out["id"] and not any(k in out for k in ("redhat_release", "system_release", "debian_version")):
        if not host.live and not host.is_dir("/etc"):
            raise Unavailable("the sysroot has no /etc")
    return out


KERNEL_FACTS = obj(
    "the running kernel, its command line, and the kernels with modules installed",
    release=string("the running kernel (uname -r; under --sysroot, the tree's newest)"),
    version=string("/proc/version"),
    cmdline=string("the kernel command line (/proc/cmdline)"),
    arch=string("the machine architecture (uname -m; live only)"),
    running=boolean("whether the running kernel's release could be read"),
    installed=array(string(), "kernel releases with a /lib/modules directory"),
)


@probe("kernel", "running kernel, installed kernels and command line", provides=KERNEL_FACTS)
def kernel_probe(ctx: ProbeContext) -> Dict[str, Any]:
    host = ctx.host
    release = host.try_read("/proc/sys/kernel/osrelease", 4096)
    version = host.try_read("/proc/version", 4096)
    cmdline = host.try_read("/proc/cmdline", 65536)
    arch = None
    if host.kernel_live:
        uname = host.uname()
        assert uname is not None  # kernel_live
        release = release or uname.release
        arch = uname.machine
    installed = [name for name in host.listdir("/lib/modules") if host.is_dir(f"/lib/modules/{name}")]
    return {
        "release": release.strip() if release else None,
        "version": version.strip() if version else None,
        "cmdline": cmdline.strip() if cmdline else None,
        "arch": arch,
        "running": release is not None,
        "installed": installed,
    }


SYSTEM_FACTS = obj(
    "the host name, whether dl-doctor runs in a container, and the cgroup's limits",
    hostname=string("the host name"),
    container=obj(
        "whether dl-doctor runs in a container, and which",
        in_container=boolean("a container marker was found"),
        kind=string("docker, podman, kubernetes, containerd, cri-o, lxc, or the container= variable's value"),
        evidence=array(string(), "the markers found (/.dockerenv, /proc/1/cgroup, KUBERNETES_SERVICE_HOST...)"),
    ),
    cgroup=obj(
        "the cgroup's memory and CPU limits",
        version=integer("the cgroup version (1 or 2)", range=(1, 2)),
        memory_limit_bytes=integer("the memory limit in bytes (null: unlimited or unknown)"),
        cpu_limit=number("the CPU quota in CPUs (quota / period; null: unlimited)", range=(0, 1048576)),
    ),
    boot=obj(
        "which boot of the machine this is (present where the kernel's /proc shows it): `dl-doctor history` "
        "compares error counters only between runs of one boot, since they reset at a reboot",
        id=string("/proc/sys/kernel/random/boot_id: a random UUID the kernel makes at each boot"),
        time=integer("the boot's wall-clock time, seconds since the epoch (/proc/stat btime)", range=(0, 2 ** 40)),
        since="0.2.0",
    ),
)


@probe("system", "host name and container detection", provides=SYSTEM_FACTS)
def system_probe(ctx: ProbeContext) -> Dict[str, Any]:
    host = ctx.host
    hostname = None
    if host.live:
        hostname = host.hostname()
    else:
        for path in ("/proc/sys/kernel/hostname", "/etc/hostname"):
            text = host.try_read(path, 4096)
            if text and text.strip():
                hostname = text.strip().splitlines()[0].strip()
                break
    out = {"hostname": hostname, "container": container_of(host), "cgroup": cgroup_limits(host)}
    boot = boot_of(host)
    if boot:  # only where the kernel's /proc shows it (a mounted image has none): the recorded trees stay as they are
        out["boot"] = boot
    return out


_BOOT_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_BTIME = re.compile(r"^btime[ \t]{1,8}([0-9]{1,12})[ \t]{0,8}$", re.M)


def parse_boot(boot_id: Optional[str], stat: Optional[str]) -> Dict[str, Any]:
    """``{"id", "time"}`` from /proc/sys/kernel/random/boot_id and /proc/stat, each only where it reads as one (a
    UUID; ``btime SECONDS``); {} when neither does."""
    out: Dict[str, Any] = {}
    text = (boot_id or "").strip().lower()
    if _BOOT_ID.match(text):
        out["id"] = text
    m = _BTIME.search(stat or "")
    if m:
        out["time"] = int(m.group(1))
    return out


def boot_of(host) -> Dict[str, Any]:
    def read(path: str, limit: int) -> Optional[str]:
        try:
            return host.try_read(path, limit)
        except OSError:  # unreadable: this boot is unknown, the rest of the probe stands
            return None

    return parse_boot(read("/proc/sys/kernel/random/boot_id", 64), read("/proc/stat", 1 << 20))


def container_of(host) -> Dict[str, Any]:
    """``detect_container`` on this host's marker files and environment, once per run (the nvidia_driver probe
    asks too: a driver library in a container's image is the image's, on a host the host's)."""
    def compute() -> Dict[str, Any]:
        files = {p: host.try_read(p, 65536) if host.is_file(p) else None
                 for p in ("/.dockerenv", "/run/.containerenv", "/proc/1/cgroup")}
        if host.lexists("/.dockerenv") and files["/.dockerenv"] is None:
            files["/.dockerenv"] = ""
        return detect_container(files, host.environ())

    found = host.cached(("system", "container"), compute)
    return {**found, "evidence": list(found["evidence"])}


def cgroup_limits(host) -> Dict[str, Any]:
    """Memory and CPU limits of this process's cgroup (v2, else v1); None where unlimited or unknown."""
    out: Dict[str, Any] = {"version": None, "memory_limit_bytes": None, "cpu_limit": None}
    mem = host.try_read("/sys/fs/cgroup/memory.max", 64)
    if mem is not None:
        out["version"] = 2
        out["memory_limit_bytes"] = ascii_int(mem)
        cpu = (host.try_read("/sys/fs/cgroup/cpu.max", 64) or "").split()
        if len(cpu) == 2 and isnum(cpu[0]) and isnum(cpu[1]) and int(cpu[1]):
            out["cpu_limit"] = round(int(cpu[0]) / int(cpu[1]), 2)
        return out
    mem = host.try_read("/sys/fs/cgroup/memory/memory.limit_in_bytes", 64)
    if mem is not None:
        out["version"] = 1
        value = ascii_int(mem)
        out["memory_limit_bytes"] = value if value and value < 2 ** 60 else None  # v1 "unlimited" is a huge number
        quota = (host.try_read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", 64) or "").strip()
        period = (host.try_read("/sys/fs/cgroup/cpu/cpu.cfs_period_us", 64) or "").strip()
        if isnum(quota.lstrip("-")) and isnum(period) and int(quota) > 0 and int(period):
            out["cpu_limit"] = round(int(quota) / int(period), 2)
    return out


ENVIRONMENT_FACTS = obj(
    "the session environment (secret values are masked in every output)",
    variables=map_of(string("the variable's value"), "NAME -> value of the session's variables, sorted by name"),
)


@probe("environment", "environment variables of the session (secrets are redacted in every report)",
       provides=ENVIRONMENT_FACTS)
def environment_probe(ctx: ProbeContext) -> Dict[str, Any]:
    host = ctx.host
    env = host.environ()
    if not host.environ_known:
        raise Unavailable("the sysroot has no /proc/self/environ (no captured session environment)")
    return {"variables": dict(sorted(env.items()))}


MEMORY_FACTS = obj(
    "/proc/meminfo, in bytes",
    total_bytes=integer("MemTotal"),
    available_bytes=integer("MemAvailable"),
    swap_total_bytes=integer("SwapTotal"),
    swap_free_bytes=integer("SwapFree"),
    shmem_bytes=integer("Shmem: shared memory, tmpfs included"),
)


@probe("memory", "host memory and swap (/proc/meminfo)", provides=MEMORY_FACTS)
def memory_probe(ctx: ProbeContext) -> Dict[str, Any]:
    text = ctx.host.try_read("/proc/meminfo")
    if text is None:
        raise Unavailable("no /proc/meminfo (an image that has not booted)")
    info = parse_meminfo(text)
    return {
        "total_bytes": info.get("MemTotal"),
        "available_bytes": info.get("MemAvailable"),
        "swap_total_bytes": info.get("SwapTotal"),
        "swap_free_bytes": info.get("SwapFree"),
        "shmem_bytes": info.get("Shmem"),
    }
