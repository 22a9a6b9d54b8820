"""GPU services and the container runtime: fabric manager, persistence daemon, NVIDIA container toolkit."""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Set

from dl_doctor.facts.contract import array, boolean, integer, map_of, obj, string
from dl_doctor.probes import ProbeContext, probe

UNIT_DIRS = ("/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system", "/run/systemd/system")
_FM_VERSION = re.compile(r"(\d{3}\.\d{1,3}(?:\.\d{1,3})?)")


def _wanted(host) -> set:
    """Every unit name some target wants (/etc/systemd/system/*.wants/), listed once per run."""
    def compute() -> set:
        names: Set[str] = set()
        for d in host.glob("/etc/systemd/system/*.wants"):
            names.update(n for n in host.listdir(d) if host.lexists(f"{d}/{n}"))
        return names

    return host.cached(("systemd", "wants"), compute)


def _unit(ctx: ProbeContext, name: str) -> Dict[str, Any]:
    host = ctx.host
    path = next((f"{d}/{name}" for d in UNIT_DIRS if host.exists(f"{d}/{name}")), None)
    enabled = name in _wanted(host)
    active = None
    # only where systemd runs (sd_booted: /run/systemd/system): in a container without it, systemctl answers for
    # nothing, and the units an image carries are not the host's services
    if host.live and path and host.is_dir("/run/systemd/system") and host.which("systemctl"):
        try:
            result = host.run(["systemctl", "is-active", name], timeout=3)
            active = result.stdout.strip()[:64] or None
        except OSError:
            active = None
    out: Dict[str, Any] = {"installed": path is not None, "unit_path": path, "enabled": enabled, "active": active}
    if active in ("failed", "activating", "deactivating") and host.which("journalctl"):
        # why it is not running: this boot's journal of the unit (only for a unit that is not healthy: no cost
        # on a healthy host); judged against the journal signatures by DLD-LOG-002
        try:
            result = host.run(["journalctl", "-b", "-u", name, "-n", "40", "--no-pager", "-o", "cat"], timeout=3)
            out["journal_tail"] = [line[:300] for line in result.stdout.splitlines()[-40:]]
        except OSError:
            pass
    elif not host.live and path and enabled:
        # a tree: what its journal of the last boot says about the unit (systemd's lines and its own output)
        from dl_doctor.readers.journal import boot_once, unit_state

        journal = boot_once(host)
        lines = journal.unit_lines(name) if journal is not None else []
        if lines:
            out["journal_state"] = unit_state(lines)
            out["journal_tail"] = lines
    return out


PRESET_DIRS = ("/etc/systemd/system-preset", "/usr/lib/systemd/system-preset", "/lib/systemd/system-preset")


def _preset(host, name: str) -> Optional[str]:
    """The first systemd preset line naming the unit (systemd.preset: files sorted by name across the directories,
    the first match wins), as 'FILE: enable|disable UNIT'; None where none names it."""
    files: Dict[str, str] = {}
    for d in PRESET_DIRS:
        for f in host.listdir(d)[:256]:
            if f.endswith(".preset"):
                files.setdefault(f, f"{d}/{f}")
    import fnmatch

    for f in sorted(files):
        for line in (host.try_read(files[f], 65536) or "").splitlines()[:2000]:
            words = line.split("#", 1)[0].split()
            if len(words) >= 2 and words[0] in ("enable", "disable") and fnmatch.fnmatchcase(name, words[1]):
                return f"{files[f]}: {words[0]} {words[1]}"[:300]
    return None


_CDI_HOST_PATH = re.compile(r"^[ \t]{0,64}hostPath:[ \t]{0,16}['\"]?(/[^\s'\"]{1,512})", re.M)
_DRIVER_LIB = re.compile(r"/(lib(?:cuda|nvidia-[a-z0-9_-]{1,40}|nvcuvid|nvoptix|EGL_nvidia|GLX_nvidia|GLESv[12]_CM_nvidia|"
                         r"GLESv2_nvidia)\.so)\.(\d{3}\.\d{1,3}(?:\.\d{1,3})?)$")


def _cdi_libraries(ctx: ProbeContext, specs: List[str]) -> List[Dict[str, Any]]:
    """The driver libraries each NVIDIA CDI specification bind-mounts by their full versioned name (hostPath), with
    the version in the name and whether the file is there: a specification is generated for one driver version."""
    host = ctx.host
    out: List[Dict[str, Any]] = []
    for spec in specs[:16]:
        text = host.try_read(spec, 4 << 20) or ""
        for m in _CDI_HOST_PATH.finditer(text):
            lib = _DRIVER_LIB.search(m.group(1))
            if lib and len(out) < 512:
                out.append({"spec": spec, "path": m.group(1), "library": lib.group(1), "version": lib.group(2),
                            "exists": host.exists(m.group(1))})
    return out


def _containerd_cri(ctx: ProbeContext, text: str) -> Optional[Dict[str, Any]]:
    """containerd's CRI plugin as its config.toml sets it: the default runtime and each runtime's binary (config
    version 2: plugins."io.containerd.grpc.v1.cri".containerd; version 3, containerd 2.x:
    plugins."io.containerd.cri.v1.runtime".containerd). None where the file is not TOML."""
    try:
        import tomllib  # type: ignore[import-not-found]
    except ImportError:  # Python < 3.11
        return None
    try:
        doc = tomllib.loads(text)
    except (ValueError, RecursionError) as exc:
        ctx.bad_input("/etc/containerd/config.toml", f"not TOML: {exc}")
        return None
    plugins = doc.get("plugins") if isinstance(doc.get("plugins"), dict) else {}
    section = None
    for key in ("io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime"):
        cri = plugins.get(key)
        if isinstance(cri, dict) and isinstance(cri.get("containerd"), dict):
            section = cri["containerd"]
            break
    if section is None:
        return {"default_runtime": None, "runtimes": {}, "configured": False,
                "imports": [str(i)[:256] for i in doc.get("imports") or []][:16]
                if isinstance(doc.get("imports"), list) else []}
    runtimes: Dict[str, Any] = {}
    for name, rt in (section.get("runtimes") or {}).items():
        if isinstance(rt, dict):
            opts: Dict[str, Any] = rt["options"] if isinstance(rt.get("options"), dict) else {}
            runtimes[str(name)[:64]] = str(opts.get("BinaryName") or "")[:256] or None
    default = section.get("default_runtime_name")
    return {"default_runtime": str(default)[:64] if isinstance(default, str) else None, "runtimes": runtimes,
            "configured": True, "imports": [str(i)[:256] for i in doc.get("imports") or []][:16]
            if isinstance(doc.get("imports"), list) else []}


def _kubelet(host) -> Optional[Dict[str, Any]]:
    """Whether this host is a Kubernetes node (a kubelet binary or its configuration), and which container runtime
    its flags name (--container-runtime-endpoint, containerRuntimeEndpoint): containerd, cri-o, docker."""
    binary = next((p for p in ("/usr/bin/kubelet", "/usr/local/bin/kubelet", "/snap/bin/kubelet") if host.exists(p)), None)
    configs = [p for p in ("/var/lib/kubelet/config.yaml", "/var/lib/kubelet/kubeadm-flags.env",
                           "/etc/default/kubelet", "/etc/sysconfig/kubelet") if host.exists(p)]
    configs += sorted(host.glob("/etc/systemd/system/kubelet.service.d/*.conf"))[:8]
    if not binary and not configs:
        return None
    said = " ".join((host.try_read(p, 65536) or "") for p in configs)
    endpoint = None
    m = _KUBELET_ENDPOINT.search(said)
    if m:
        endpoint = m.group(1)[:256]
    runtime = ("containerd" if endpoint and "containerd" in endpoint else "cri-o" if endpoint and "crio" in endpoint
               else "docker" if endpoint and ("docker" in endpoint or "dockershim" in endpoint) else None)
    return {"binary": binary, "configs": configs, "runtime_endpoint": endpoint, "runtime": runtime}


_TOOLKIT_ROOT = re.compile(r"^[ \t]{0,64}root[ \t]{0,16}=[ \t]{0,16}[\"']([^\"'\n]{1,256})[\"']", re.M)
_KUBELET_ENDPOINT = re.compile(r"(?:container-runtime-endpoint[= ]|containerRuntimeEndpoint:[ \t]{0,16})['\"]?"
                               r"([^\s'\"]{1,256})")


def _toolkit_driver_root(host) -> Optional[str]:
    """Where nvidia-container-cli looks for the driver: the [nvidia-container-cli] root of the toolkit's
    config.toml (the GPU operator's driver container: /run/nvidia/driver), else /run/nvidia/driver where it exists,
    else None (the host's own root)."""
    for path in ("/etc/nvidia-container-runtime/config.toml",
                 "/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml"):
        text = host.try_read(path, 1 << 20) or ""
        m = _TOOLKIT_ROOT.search(text)
        if m and m.group(1) != "/":
            return m.group(1)
    return "/run/nvidia/driver" if host.is_dir("/run/nvidia/driver/usr") else None


def _host_cgroup_version(host) -> Optional[int]:
    """cgroup v2 where /sys/fs/cgroup is the unified hierarchy (cgroup.controllers at its root; or /proc/mounts
    mounts cgroup2 there), v1 where it holds per-controller directories."""
    if host.exists("/sys/fs/cgroup/cgroup.controllers"):
        return 2
    mounts = host.try_read("/proc/mounts", 1 << 20) or ""
    for line in mounts.splitlines()[:5000]:
        f = line.split()
        if len(f) >= 3 and f[1] == "/sys/fs/cgroup":
            return 2 if f[2] == "cgroup2" else 1 if f[2] == "tmpfs" else None
    if host.is_dir("/sys/fs/cgroup/memory") or host.is_dir("/sys/fs/cgroup/devices"):
        return 1
    return None


def fabric_manager_version(ctx: ProbeContext, packages: Optional[List[Dict[str, str]]]) -> Optional[Dict[str, str]]:
    """From dpkg, the package docs directory, or `nv-fabricmanager --version` (live)."""
    host = ctx.host
    for pkg in packages or []:
        if pkg["package"].startswith(("nvidia-fabricmanager", "cuda-drivers-fabricmanager")):
            m = _FM_VERSION.search(pkg["version"])
            if m:
                return {"version": m.group(1), "source": f"dpkg {pkg['package']} {pkg['version']}"}
    for path in host.glob("/usr/share/doc/nvidia-fabricmanager*"):
        m = _FM_VERSION.search(path)
        if m:
            return {"version": m.group(1), "source": path}
    if host.live:
        exe = host.which("nv-fabricmanager") or ("/usr/bin/nv-fabricmanager" if host.exists("/usr/bin/nv-fabricmanager") else None)
        if exe:
            try:
                result = host.run([exe, "--version"], timeout=3)
            except OSError:
                return None
            m = _FM_VERSION.search(result.stdout + result.stderr)
            if m:
                return {"version": m.group(1), "source": "nv-fabricmanager --version"}
    return None


def _unit_facts(meaning: str, **more):
    return obj(
        meaning,
        installed=boolean("its unit file exists (/etc/systemd/system, /usr/lib/systemd/system, /lib/systemd/system, "
                          "/run/systemd/system)"),
        unit_path=string("the unit file found first"),
        enabled=boolean("some target wants it (/etc/systemd/system/*.wants/)"),
        active=string("systemctl is-active (live only, where systemd runs): active, inactive, failed, activating..."),
        journal_tail=array(string(), "its last journal lines of this boot: live when it is failed, activating or "
                                     "deactivating (journalctl -b -u), in a tree when it is enabled (judged by "
                                     "DLD-LOG-002)"),
        journal_state=string("in a tree: its state after systemd's last line about it in the journal of the last "
                             "boot (failed, active, inactive, activating)"),
        **more,
    )


GPU_SERVICES_FACTS = obj(
    "fabric manager, persistence daemon, container toolkit",
    fabric_manager=_unit_facts(
        "nvidia-fabricmanager.service (NVSwitch systems need it running)",
        version=obj(
            "the installed fabric manager's version (null: not found)",
            version=string("the version (535.104.05)"),
            source=string("where it was read: a dpkg package, the package's docs directory, nv-fabricmanager "
                          "--version"),
        ),
    ),
    persistenced=_unit_facts(
        "nvidia-persistenced.service",
        running=boolean("its pid file exists (/run/nvidia-persistenced; live only)"),
        preset=string("the systemd preset line that names it ('FILE: enable|disable PATTERN'; null: none)",
                      since="0.2.0"),
    ),
    suspend_units=obj("the driver's suspend and resume hooks (GPU memory survives a suspend only through them)",
                      keys={name: _unit_facts(f"{name}.service")
                            for name in ("nvidia-suspend", "nvidia-resume", "nvidia-hibernate")}, since="0.2.0"),
    other_units=obj("nvidia-dcgm and nvidia-imex: installed, enabled, active (live), and in a tree "
                    "journal_state/journal_tail from its journal",
                    keys={"nvidia-dcgm": _unit_facts("DCGM's host engine (nvidia-dcgm.service)"),
                          "nvidia-imex": _unit_facts("the IMEX daemon of multi-node NVLink (nvidia-imex.service)")},
                    since="0.2.0"),
    container_toolkit=obj(
        "the NVIDIA container toolkit and the container runtimes' configuration",
        binaries=array(string(), "the toolkit's programs found (nvidia-container-toolkit, nvidia-container-runtime, "
                                 "nvidia-ctk, nvidia-container-cli in /usr/bin)"),
        docker_installed=boolean("dockerd exists (/usr/bin, /usr/sbin, or the docker snap's)"),
        docker_snap=boolean("Docker is the snap package (/snap/docker/current/bin/dockerd)", since="0.2.0"),
        docker_daemon_json=string("the daemon.json that dockerd reads (/etc/docker/daemon.json; the snap's "
                                  "/var/snap/docker/current/config/daemon.json)", since="0.2.0"),
        docker_runtimes=array(string(), "the runtimes dockerd's daemon.json names (null: no daemon.json, or it "
                                        "could not be read)"),
        docker_daemon_json_error=string("why /etc/docker/daemon.json could not be used"),
        containerd_nvidia_runtime=boolean("/etc/containerd/config.toml mentions nvidia (null: no such file)"),
        docker_cgroup_driver=string("Docker's native.cgroupdriver exec-opt (systemd, cgroupfs; null: not set)"),
        containerd_systemd_cgroup=boolean("containerd's config sets SystemdCgroup = true (null: no config)"),
        cdi_specs=array(string(), "CDI specifications of NVIDIA devices (/etc/cdi/nvidia*.yaml, "
                                  "/var/run/cdi/nvidia*.yaml)"),
        docker_default_runtime=string("Docker's default-runtime in /etc/docker/daemon.json (null: not set: runc)",
                                      since="0.2.0"),
        containerd=obj(
            "containerd's CRI plugin as /etc/containerd/config.toml sets it (null: no such file, or not TOML)",
            default_runtime=string("default_runtime_name (null: not set: containerd's default, runc)"),
            runtimes=map_of(string("its BinaryName (null: runc's own)"), "runtime name -> its BinaryName"),
            configured=boolean("the file has the CRI plugin's containerd section"),
            imports=array(string(), "the files it imports (drop-in configuration)"),
            since="0.2.0",
        ),
        kubelet=obj(
            "this host is a Kubernetes node (null: no kubelet binary or configuration)",
            binary=string("the kubelet binary"),
            configs=array(string(), "its configuration files found"),
            runtime_endpoint=string("the container runtime endpoint its flags or configuration name"),
            runtime=string("containerd, cri-o or docker, from that endpoint (null: not named)"),
            since="0.2.0",
        ),
        driver_root=string("the driver root nvidia-container-cli uses when it is not / (config.toml's "
                           "[nvidia-container-cli] root, the GPU operator's /run/nvidia/driver); null: the host's",
                           since="0.2.0"),
        cdi_libraries=array(obj(
            "",
            spec=string("the CDI specification"),
            path=string("the hostPath it bind-mounts"),
            library=string("the library (libcuda.so, libnvidia-ml.so, libEGL_nvidia.so...)"),
            version=string("the driver version in its file name"),
            exists=boolean("the file is there"),
        ), "the driver libraries the NVIDIA CDI specifications bind-mount by versioned name (at most 512)",
           since="0.2.0"),
        cgroup_version=integer("the host's cgroup hierarchy: 2 where /sys/fs/cgroup is cgroup2 (its root holds "
                               "cgroup.controllers, or the mount table says so), 1 where it holds v1 controllers "
                               "(null: not known)", range=(1, 2), since="0.2.0"),
    ),
)


@probe("gpu_services", "nvidia-fabricmanager, nvidia-persistenced and the NVIDIA container toolkit",
       provides=GPU_SERVICES_FACTS)
def gpu_services_probe(ctx: ProbeContext) -> Dict[str, Any]:
    host = ctx.host
    from dl_doctor.probes.kmod import dpkg_packages

    packages = dpkg_packages(host)
    fm = _unit(ctx, "nvidia-fabricmanager.service")
    fm["version"] = fabric_manager_version(ctx, packages)
    persistenced = _unit(ctx, "nvidia-persistenced.service")
    persistenced["preset"] = _preset(host, "nvidia-persistenced.service") if persistenced["installed"] else None
    persistenced["running"] = host.exists("/run/nvidia-persistenced/nvidia-persistenced.pid") if host.live else None

    toolkit_bins = [b for b in ("/usr/bin/nvidia-container-toolkit", "/usr/bin/nvidia-container-runtime",
                                "/usr/bin/nvidia-ctk", "/usr/bin/nvidia-container-cli") if host.exists(b)]
    # Docker from the snap store runs its own dockerd, which reads the snap's daemon.json, not /etc/docker's
    docker_snap = host.exists("/snap/docker/current/bin/dockerd")
    docker_installed = docker_snap or any(host.exists(p) for p in ("/usr/bin/dockerd", "/usr/sbin/dockerd"))
    daemon_json = "/var/snap/docker/current/config/daemon.json" if docker_snap and not any(
        host.exists(p) for p in ("/usr/bin/dockerd", "/usr/sbin/dockerd")) else "/etc/docker/daemon.json"
    runtimes: Optional[List[str]] = None
    cgroup_driver: Optional[str] = None
    daemon_error = None
    text = host.try_read(daemon_json, 1 << 20)
    if text is not None:
        try:
            doc = json.loads(text)
            found = doc.get("runtimes") if isinstance(doc, dict) else None
            opts = doc.get("exec-opts") if isinstance(doc, dict) else None
            for opt in opts if isinstance(opts, list) else []:
                if isinstance(opt, str) and opt.startswith("native.cgroupdriver="):
                    cgroup_driver = opt.split("=", 1)[1][:32]
            if found is None or isinstance(found, dict):
                runtimes = sorted(str(k)[:200] for k in (found or {}))
            else:
                daemon_error = f"{daemon_json}: \"runtimes\" is a {type(found).__name__}, not an object"
        except (ValueError, RecursionError) as exc:
            daemon_error = f"{daemon_json} is not valid JSON: {exc}"
        if daemon_error:
            ctx.bad_input(daemon_json, daemon_error)
    containerd = host.try_read("/etc/containerd/config.toml", 1 << 20)
    cdi = sorted(host.glob("/etc/cdi/nvidia*.yaml") + host.glob("/var/run/cdi/nvidia*.yaml"))
    docker_default = None
    if text is not None and not daemon_error:
        try:
            value = json.loads(text).get("default-runtime")
            docker_default = str(value)[:64] if value is not None else None
        except (ValueError, AttributeError, RecursionError):
            pass
    cri = _containerd_cri(ctx, containerd) if containerd is not None else None
    return {
        "fabric_manager": fm,
        "persistenced": persistenced,
        # the driver's suspend/resume hooks: GPU memory survives a suspend only through them
        "suspend_units": {name: _unit(ctx, f"{name}.service") for name in ("nvidia-suspend", "nvidia-resume",
                                                                             "nvidia-hibernate")},
        # DCGM's host engine and the IMEX daemon (multi-node NVLink), where installed
        "other_units": {name: _unit(ctx, f"{name}.service") for name in ("nvidia-dcgm", "nvidia-imex")},
        "container_toolkit": {
            "binaries": toolkit_bins,
            "docker_installed": docker_installed,
            "docker_snap": docker_snap,
            "docker_daemon_json": daemon_json if docker_installed else None,
            "docker_runtimes": runtimes,
            "docker_daemon_json_error": daemon_error,
            "containerd_nvidia_runtime": ("nvidia" in containerd) if containerd is not None else None,
            # who manages the containers' cgroups: "systemd" (set, or containerd's SystemdCgroup = true) or "cgroupfs"
            "docker_cgroup_driver": cgroup_driver,
            "containerd_systemd_cgroup": (re.search(r"^[ \t]*SystemdCgroup[ \t]*=[ \t]*true", containerd, re.M) is not None)
            if containerd is not None else None,
            "cdi_specs": cdi,
            "cgroup_version": _host_cgroup_version(host),
            "docker_default_runtime": docker_default,
            "containerd": cri,
            "kubelet": _kubelet(host),
            "cdi_libraries": _cdi_libraries(ctx, cdi),
            "driver_root": _toolkit_driver_root(host),
        },
    }
