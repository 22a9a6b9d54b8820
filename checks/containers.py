"""GPU access from inside a container; the NVIDIA container toolkit on a host."""

from __future__ import annotations

from typing import Any, Dict

from dl_doctor.checks.common import nvidia_gpus, package_manager
from dl_doctor.fixes import root_command, service
from dl_doctor.model import Facts, Fix, Result, check, fail, passed, skip, warn


def in_container(facts: Facts):
    return None if facts.get("system.container.in_container") else "not running in a container"


def on_host(facts: Facts):
    return "inside a container (the host's runtime is checked on the host)" if facts.get("system.container.in_container") else None


@check(
    id="DLD-CTR-001", slug="container-without-gpu-access", title="The container was given the GPUs",
    remedy="fix-configuration", drain=False,
    problem="The container has no GPU access",
    tags=("container", "gpu"), requires=("system.container", "nvidia_driver"), applies=(in_container,),
    what="""Inside a container, checks for the GPU device nodes (/dev/nvidia*) and the driver libraries
    (libnvidia-ml, libcuda) that the NVIDIA container runtime injects, when the image or the PCI bus says GPUs are
    expected. On a container's or image's tree (--sysroot), where device nodes cannot be seen, it checks what the
    files can say: an image must not ship a driver library of its own. A library that is a mount (the container's
    /proc/self/mountinfo, else /proc/self/mounts: bind-mounted by nvidia-container-cli or from a CDI spec, GKE's
    /usr/local/nvidia) is the host's driver, not the image's.""",
    why="""A container started without --gpus (or a pod without an nvidia.com/gpu request) has no device nodes and
    no libcuda: CUDA reports 'CUDA driver version is insufficient for CUDA runtime version' or 'no CUDA-capable
    device', which sends people to upgrade a driver that is fine.""",
    fix="""Start the container with --gpus all (Docker, with the NVIDIA container toolkit on the host) or request
    nvidia.com/gpu in the pod spec.""",
)
def container_gpu_access(facts: Facts) -> Result:
    nodes = facts.get("nvidia_driver.device_nodes")
    libs = facts.get("nvidia_driver.userspace.libraries") or []
    runtime = facts.get("nvidia_driver.runtime") or {}
    env = facts.get("cuda_toolkits.container_env") or {}
    cuda_image = bool(env.get("NVIDIA_REQUIRE_CUDA") or env.get("CUDA_VERSION"))
    gpus_on_bus = len(nvidia_gpus(facts))
    evidence = {"device_nodes": nodes, "driver_libraries": [l["path"] for l in libs], "cuda_image": cuda_image,
                "gpu_pci.gpu_count": gpus_on_bus, "container": facts.get("system.container.kind"),
                "provided_by": {l["path"]: l.get("provided_by") for l in libs},
                "runtime": {k: runtime.get(k) for k in ("source", "by", "device_nodes", "given_gpus")}}
    # a library the runtime bind-mounted (or WSL's) is the host's driver; only a file of the image is baked in (no
    # provided_by: a snapshot from before it was recorded, judged as the image's, as then)
    hosts = [l for l in libs if l.get("provided_by") in _HOSTS]
    kinds = {l.get("provided_by") for l in hosts}
    by = ("CDI" if "cdi" in kinds else "the NVIDIA container runtime" if "container-runtime" in kinds else
          "WSL2" if "wsl" in kinds else "a volume or bind mount" if hosts else None)
    wsl_libcuda = [l["path"] for l in libs if l.get("provided_by") == "wsl" and l.get("library") == "libcuda"]
    if wsl_libcuda:  # Docker Desktop on WSL2 (--gpus all): /dev/dxg and the Windows driver's /usr/lib/wsl/lib
        return passed(f"WSL2: the container reaches the GPU through /dev/dxg with the Windows driver's libcuda "
                      f"({wsl_libcuda[0]}); there are no /dev/nvidia* nodes on WSL2", **evidence)
    if nodes is None:  # a tree (an exported container or image): what its files say
        baked = [l for l in libs if l.get("library") == "libcuda" and l.get("provided_by", "image") == "image"]
        if baked:
            paths = [l["path"] for l in baked]
            return fail(f"the image ships its own driver library ({', '.join(paths[:3])}, {baked[0]['version']}): the "
                        "NVIDIA runtime mounts the host's at start, and a baked-in copy of another version shadows it "
                        "('CUDA driver version is insufficient', 'Driver/library version mismatch')", evidence,
                        Fix("Remove the driver libraries from the image (they come from the host at run time).",
                            tuple(f"rm -f {p}   # in the Dockerfile, after the step that copied it" for p in paths[:3])
                            + ("# the CUDA forward-compatibility package (cuda-compat-*) is the supported way to run a "
                               "newer CUDA on an older driver",)))
        mounted_nodes = [n for n in runtime.get("device_nodes") or [] if n[6:].isdigit()]
        if hosts:
            names = ", ".join(l["path"].rsplit("/", 1)[-1] for l in hosts[:3])
            given = f"; {len(mounted_nodes)} GPU device node(s) were given" if mounted_nodes else ""
            return passed(f"the driver libraries here are the host's, mounted by {by} when the container started "
                          f"({names}){given}", **evidence)
        expects = cuda_image or bool(env.get("NVIDIA_VISIBLE_DEVICES"))
        if (runtime.get("source") == "/proc/self/mountinfo" and facts.get("system.container.in_container")
                and expects and not mounted_nodes and not [l for l in libs if l.get("library") == "libcuda"]):
            # the running container's own mount table was captured: nothing of the driver was put in
            why = "a CUDA image" if cuda_image else "NVIDIA_VISIBLE_DEVICES is set"
            return fail(f"the container's mount table shows no GPU device node and no driver library from the host "
                        f"({why}): it was started without --gpus", evidence, _gpu_fix(facts))
        return passed("the image ships no driver library of its own (the NVIDIA runtime injects the host's when the "
                      "container starts; device nodes exist only in a running container)", **evidence)
    expects = cuda_image or gpus_on_bus > 0 or bool(env.get("NVIDIA_VISIBLE_DEVICES"))
    has_nodes = any(n == "nvidiactl" for n in nodes) and any(n[6:].isdigit() for n in nodes if n.startswith("nvidia"))
    kind = facts.get("system.container.kind")
    fix = _gpu_fix(facts)
    if not has_nodes and expects:
        why = "a CUDA image" if cuda_image else f"{gpus_on_bus} GPU(s) on the PCI bus"
        return fail(f"this {kind or ''} container has {why} but no /dev/nvidia* device nodes: it was started without "
                    "--gpus", evidence, fix)
    if has_nodes and not libs:
        return fail("GPU device nodes are present but no driver libraries (libcuda, libnvidia-ml) were injected",
                    evidence, Fix("Use the NVIDIA container runtime (--gpus all / --runtime=nvidia) so the driver "
                                  "libraries are mounted.", ("docker run --gpus all ...",)))
    if not expects and not has_nodes:
        return passed("no GPU is expected in this container (no CUDA image, no GPU on the bus)", **evidence)
    # the runtime mounted the host's libcuda, and the image carries a libcuda of another version beside it
    host_versions = {l.get("version") for l in hosts if l.get("library") == "libcuda"}
    shadow = [l for l in libs if l.get("library") == "libcuda" and l.get("provided_by") == "image"
              and host_versions and l.get("version") not in host_versions]
    if shadow:
        paths = [l["path"] for l in shadow]
        return fail(f"the image ships its own driver library ({', '.join(paths[:3])}, {shadow[0]['version']}) beside "
                    f"the host's libcuda {', '.join(sorted(v for v in host_versions if v))} that {by} mounted: "
                    "whichever the loader finds first wins ('CUDA driver version is insufficient', 'Driver/library "
                    "version mismatch')", evidence,
                    Fix("Remove the driver libraries from the image (they come from the host at run time).",
                        tuple(f"rm -f {p}   # in the Dockerfile, after the step that copied it" for p in paths[:3])))
    n = len([x for x in nodes if x[6:].isdigit()])
    whose = f" (the host's, mounted by {by})" if by else ""
    return passed(f"{n} GPU device node(s) and the driver libraries{whose} are present", **evidence)


_HOSTS = ("container-runtime", "cdi", "wsl", "mount")


def _gpu_fix(facts: Facts) -> Fix:
    if facts.get("system.container.kind") == "kubernetes":
        return Fix("Restart the container with GPU access.",
                   ("# in the pod spec: resources: {limits: {nvidia.com/gpu: 1}} (NVIDIA device plugin installed)",))
    return Fix("Restart the container with GPU access.",
               ("docker run --gpus all ...   # needs nvidia-container-toolkit on the host",
                "# Kubernetes: resources: {limits: {nvidia.com/gpu: 1}}"))


def given_gpus(facts: Facts):
    """How many GPUs this container was given (its device nodes, the device plugin's list); None: all, or unknown."""
    if not facts.get("system.container.in_container"):
        return None
    given = facts.get("nvidia_driver.runtime.given_gpus")
    return len(given) if given else None


@check(
    id="DLD-CTR-002", slug="container-toolkit-missing",
    remedy="repair-software", drain=True,
    problem="Docker on this GPU host cannot start GPU containers",
    title="Docker on a GPU host can start GPU containers (NVIDIA container toolkit)",
    tags=("container", "gpu"), requires=("gpu_services",), applies=(on_host,),
    what="""On a host with NVIDIA GPUs and Docker, looks for the NVIDIA container toolkit (nvidia-ctk,
    nvidia-container-runtime, nvidia-container-cli) and for the nvidia runtime in /etc/docker/daemon.json.""",
    why="""Without the toolkit, 'docker run --gpus all' fails with 'could not select device driver "" with
    capabilities: [[gpu]]'. With the toolkit installed but the runtime not registered (or Docker not restarted since),
    --runtime=nvidia and Kubernetes' device plugin fail.""",
    fix="""Install nvidia-container-toolkit, register the runtime with nvidia-ctk runtime configure --runtime=docker and
    restart Docker.""",
)
def container_toolkit(facts: Facts) -> Result:
    ct = facts.get("gpu_services.container_toolkit") or {}
    gpus = facts.get("gpu_pci.gpu_count") or 0
    evidence: Dict[str, Any] = {"gpu_services.container_toolkit": ct, "gpu_pci.gpu_count": gpus}
    if not ct.get("docker_installed"):
        return skip("Docker is not installed", **evidence)
    if gpus == 0:
        return skip("no NVIDIA GPU on this host", **evidence)
    install = package_manager(facts).install("nvidia-container-toolkit")
    configure = (root_command("nvidia-ctk runtime configure --runtime=docker"), service("restart", "docker"),
                 "docker run --rm --gpus all ubuntu nvidia-smi")
    if not ct.get("binaries"):
        return fail("Docker is installed but the NVIDIA container toolkit is not: 'docker run --gpus all' fails with "
                    "'could not select device driver'", evidence,
                    Fix("Install the NVIDIA container toolkit and register it with Docker.", (install,) + configure))
    libs = facts.get("nvidia_driver.userspace.libraries")
    nvml = [l for l in libs or [] if l.get("library") == "libnvidia-ml"]
    cli = any(b.endswith("nvidia-container-cli") for b in ct.get("binaries") or [])
    if (cli and libs is not None and not nvml and not ct.get("driver_root") and "driver_root" in ct
            and facts.get("nvidia_driver.kernel_module.loaded")):
        return fail("the NVIDIA container toolkit is installed but the host has no driver user space (no "
                    "libnvidia-ml.so.* in its library directories): nvidia-container-cli fails every GPU container "
                    "with 'load library failed: libnvidia-ml.so.1'", evidence,
                    Fix("Install the driver's user-space libraries of the loaded module's version (the kernel module "
                        "alone is not enough), then restart Docker.",
                        (package_manager(facts).install(
                            f"libnvidia-compute-{(facts.get('nvidia_driver.kernel_module.version') or 'NNN').split('.')[0]}"
                            if package_manager(facts).name == "apt" else "nvidia-driver-cuda-libs"),
                         "ldconfig -p | grep libnvidia-ml", service("restart", "docker"))))
    if ct.get("docker_daemon_json_error"):
        return fail(ct["docker_daemon_json_error"] + ": Docker will not start with it", evidence,
                    Fix("Repair daemon.json, then let nvidia-ctk write the runtime entry.",
                        ("sudo python3 -m json.tool /etc/docker/daemon.json",) + configure))
    if ct.get("docker_snap") and ct.get("docker_daemon_json", "").startswith("/var/snap/") and "nvidia" not in (
            ct.get("docker_runtimes") or []):
        return fail(f"Docker is the snap package: its dockerd reads {ct['docker_daemon_json']}, which registers no "
                    "nvidia runtime (the toolkit writes /etc/docker/daemon.json), so 'docker run --gpus all' fails with "
                    "'could not select device driver \"\" with capabilities: [[gpu]]'", evidence,
                    Fix("Replace the snap's Docker with Docker's own packages (the NVIDIA container toolkit configures "
                        "those), then register the runtime.",
                        ("sudo snap remove --purge docker",
                         "# install docker-ce from Docker's apt repository: https://docs.docker.com/engine/install/",)
                        + configure))
    if "nvidia" not in (ct.get("docker_runtimes") or []) and not ct.get("cdi_specs"):
        return warn("the NVIDIA container toolkit is installed but the nvidia runtime is not registered with Docker "
                    "(--runtime=nvidia and Kubernetes' device plugin fail)", evidence,
                    Fix("Register the runtime and restart Docker.", configure))
    return passed("the NVIDIA container toolkit is installed and registered with Docker", **evidence)


@check(
    id="DLD-CTR-003", slug="container-cpu-limit-low", title="The container has CPUs to feed its GPUs",
    remedy="fix-configuration", drain=False,
    problem="The container has too few CPUs to feed its GPUs",
    tags=("container", "gpu", "performance"), requires=("system.cgroup",), applies=(in_container,),
    what="""Reads the container's CPU quota (cgroup cpu.max / cfs_quota_us) and holds it against the GPUs it was
    given (its /dev/nvidiaN nodes or the device plugin's NVIDIA_VISIBLE_DEVICES, else NVML or the PCI bus).""",
    why="""Data loading, augmentation and the Python training loop run on CPUs: a container limited to one or two CPUs
    per node starves eight GPUs, which then sit mostly idle while nvidia-smi shows low utilisation.""",
    fix="""Give the container more CPUs (docker --cpus, the pod's resources.limits.cpu), at least a few per GPU, and size
    DataLoader num_workers to them.""",
)
def container_cpu(facts: Facts) -> Result:
    limit = facts.get("system.cgroup.cpu_limit")
    # a pod given part of the node's GPUs feeds those: the PCI bus (sysfs is not namespaced) shows the node's
    gpus = given_gpus(facts) or facts.get("nvml.device_count") or len(nvidia_gpus(facts)) or 0
    evidence = {"cpu_limit": limit, "gpus": gpus, "nvidia_driver.runtime.given_gpus":
                facts.get("nvidia_driver.runtime.given_gpus")}
    if not limit:
        return passed("no CPU quota on this container", **evidence)
    if gpus and limit < 2 * gpus:
        return warn(f"the container may use {limit:g} CPU(s) for {gpus} GPU(s): data loading will starve them", evidence,
                    Fix("Give the container more CPUs.", ("docker run --cpus=<2 or more per GPU> ...",
                                                          "# Kubernetes: resources.limits.cpu")))
    return passed(f"{limit:g} CPUs for {gpus} GPU(s)", **evidence)


@check(
    id="DLD-CTR-004", slug="containers-lose-gpus-on-daemon-reload",
    remedy="fix-configuration", drain=False,
    problem="GPU containers lose their GPUs at the next systemd daemon-reload",
    title="GPU containers keep their GPUs across a systemd daemon-reload (/dev/char links for the NVIDIA devices)",
    tags=("container", "gpu"), requires=("gpu_services", "nvidia_driver"), applies=(on_host,),
    what="""On a host that runs GPU containers whose cgroups systemd manages (Docker with the systemd cgroup driver,
    which is Docker's default on cgroup v2, or containerd with SystemdCgroup = true), looks for the /dev/char
    symlinks to the NVIDIA device nodes that runc needs to restore the containers' device access when systemd
    reloads its units.""",
    why="""Without them, any 'systemctl daemon-reload' (a package upgrade runs one) detaches running GPU containers
    from their GPUs: inside, nvidia-smi answers 'Failed to initialize NVML: Unknown Error' until the container is
    recreated. NVIDIA documented it as a notice (NVIDIA/nvidia-docker#1730).""",
    fix="""Create the links (sudo nvidia-ctk system create-dev-char-symlinks --create-all) and keep them with a udev
    rule, or use CDI, or the cgroupfs driver.""",
)
def containers_lose_gpus(facts: Facts) -> Result:
    ct = facts.get("gpu_services.container_toolkit") or {}
    nodes = facts.get("nvidia_driver.device_nodes")
    links = facts.get("nvidia_driver.dev_char_links")
    # the host's hierarchy (the probe's cgroup facts are this process's cgroup, whose root has no memory.max)
    cgroup_v2 = ct.get("cgroup_version") == 2 or (facts.get("system.cgroup") or {}).get("version") == 2
    evidence = {"docker_cgroup_driver": ct.get("docker_cgroup_driver"),
                "containerd_systemd_cgroup": ct.get("containerd_systemd_cgroup"), "cgroup_v2": cgroup_v2,
                "dev_char_links": links, "toolkit": ct.get("binaries")}
    if not ct.get("binaries"):
        return skip("the NVIDIA container toolkit is not installed here", **evidence)
    if nodes is None or links is None:
        return skip("device nodes are seen only on a running host", **evidence)
    if not [n for n in nodes if n[6:].isdigit()]:
        return skip("no NVIDIA GPU device node here", **evidence)
    docker_systemd = ct.get("docker_installed") and (ct.get("docker_cgroup_driver") == "systemd" or (
        ct.get("docker_cgroup_driver") is None and cgroup_v2))
    systemd_managed = docker_systemd or ct.get("containerd_systemd_cgroup")
    if not systemd_managed:
        return passed("container cgroups are not managed by systemd here (cgroupfs driver)", **evidence)
    if links:
        return passed(f"{len(links)} /dev/char link(s) to the NVIDIA devices are present", **evidence)
    who = "Docker (systemd cgroup driver)" if docker_systemd else "containerd (SystemdCgroup = true)"
    return warn(f"{who} manages GPU containers' cgroups and /dev/char has no links to the NVIDIA device nodes: a "
                "'systemctl daemon-reload' will detach running containers from their GPUs ('Failed to initialize "
                "NVML: Unknown Error' inside)", evidence,
                Fix("Create the /dev/char links to the NVIDIA devices, and keep them at every boot.",
                    ("sudo nvidia-ctk system create-dev-char-symlinks --create-all",
                     "# keep them: a udev rule that runs it when the nvidia modules load (see the NVIDIA notice "
                     "https://github.com/NVIDIA/nvidia-docker/issues/1730), or configure the container runtime for CDI")))


_CAPABILITIES = ("compute", "utility", "graphics", "video", "display", "compat32", "ngx", "all")


@check(
    id="DLD-CTR-005", slug="driver-capabilities-without-compute",
    remedy="fix-configuration", drain=False,
    problem="The container gets no libcuda (NVIDIA_DRIVER_CAPABILITIES without compute)",
    title="The container asks the NVIDIA runtime for the compute capability (libcuda)",
    tags=("container", "cuda"), requires=("cuda_toolkits",), applies=(in_container,),
    what="""Reads NVIDIA_DRIVER_CAPABILITIES from the container's environment (or an image tree's): the NVIDIA
    runtime mounts the driver's CUDA libraries only for 'compute' (or 'all'), and nvidia-smi and NVML only for
    'utility'. NVIDIA_REQUIRE_CUDA against the host driver is DLD-CUDA-001's.""",
    why="""An image that sets NVIDIA_DRIVER_CAPABILITIES=utility (or graphics, video) gets nvidia-smi, which shows the
    GPUs and the driver, and no libcuda: CUDA then fails with 'CUDA driver version is insufficient' or 'libcuda.so.1:
    cannot open shared object file', and people upgrade a driver that is fine.""",
    fix="""Set NVIDIA_DRIVER_CAPABILITIES=compute,utility in the image (ENV) or when starting the container.""",
)
def driver_capabilities(facts: Facts) -> Result:
    env = facts.get("cuda_toolkits.container_env") or {}
    raw = env.get("NVIDIA_DRIVER_CAPABILITIES")
    if raw is None:
        return skip("NVIDIA_DRIVER_CAPABILITIES is not set: the runtime's default applies")
    caps = {c.strip().lower() for c in str(raw)[:256].split(",") if c.strip()}
    evidence: Dict[str, Any]
    evidence = {"NVIDIA_DRIVER_CAPABILITIES": str(raw)[:256],
                "unknown": sorted(c for c in caps if c not in _CAPABILITIES)[:8]}
    fix = Fix("Ask the runtime for compute and utility.",
              ("ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility   # in the Dockerfile",
               "docker run --gpus all -e NVIDIA_DRIVER_CAPABILITIES=compute,utility ..."))
    if "all" in caps:
        return passed("NVIDIA_DRIVER_CAPABILITIES=all: the runtime mounts every driver library", **evidence)
    if "compute" not in caps:
        libcuda = [l["path"] for l in facts.get("nvidia_driver.userspace.libraries") or []
                   if l.get("library") == "libcuda"]
        seen = ("; and no libcuda is here" if facts.get("nvidia_driver.device_nodes") and not libcuda else "")
        return fail(f"NVIDIA_DRIVER_CAPABILITIES={evidence['NVIDIA_DRIVER_CAPABILITIES']} leaves out compute: the "
                    f"NVIDIA runtime mounts no libcuda, so CUDA fails ('CUDA driver version is insufficient', "
                    f"'libcuda.so.1: cannot open shared object file') while nvidia-smi may work{seen}", evidence, fix)
    if "utility" not in caps:
        return warn(f"NVIDIA_DRIVER_CAPABILITIES={evidence['NVIDIA_DRIVER_CAPABILITIES']} leaves out utility: no "
                    f"nvidia-smi and no NVML in the container (GPU monitoring, and the frameworks' NVML queries, fail)",
                    evidence, fix)
    return passed(f"NVIDIA_DRIVER_CAPABILITIES={evidence['NVIDIA_DRIVER_CAPABILITIES']} includes compute and utility",
                  **evidence)


def _node_runtime(ct: Dict[str, Any]) -> Any:
    """The container runtime the kubelet runs pods with: the one its flags name, else containerd where its
    configuration exists and Docker is absent, else Docker (dockershim, Kubernetes < 1.24)."""
    kubelet = ct.get("kubelet") or {}
    if kubelet.get("runtime"):
        return kubelet["runtime"]
    if ct.get("containerd") is not None and not ct.get("docker_installed"):
        return "containerd"
    if ct.get("docker_installed") and ct.get("containerd") is None:
        return "docker"
    return None


@check(
    id="DLD-CTR-006", slug="k8s-node-runtime-not-nvidia-by-default",
    remedy="fix-configuration", drain=True,
    problem="This Kubernetes GPU node does not run pods through the NVIDIA runtime by default",
    title="A Kubernetes GPU node's container runtime runs pods through the NVIDIA runtime by default (the device "
          "plugin needs it)",
    tags=("container", "gpu", "kubernetes"), requires=("gpu_services",), applies=(on_host,),
    what="""On a Kubernetes node (a kubelet is installed or configured) with NVIDIA GPUs and the container toolkit,
    reads the container runtime the kubelet uses (its --container-runtime-endpoint, else containerd's or Docker's
    configuration) and whether that runtime has the nvidia runtime and makes it the default: containerd's
    default_runtime_name in /etc/containerd/config.toml, Docker's default-runtime in /etc/docker/daemon.json.""",
    why="""The NVIDIA device plugin (and GPU pods without a runtime class) start like any pod, with the runtime's
    default. With runc as the default, nothing injects the driver: the plugin logs 'could not load NVML library' or
    'Incompatible strategy detected auto', the node advertises no nvidia.com/gpu, and GPU pods stay Pending with
    'Insufficient nvidia.com/gpu', while `ctr run --gpus` or `docker run --gpus` on the node work.""",
    fix="""Make nvidia the runtime's default (nvidia-ctk runtime configure --runtime=containerd --set-as-default, or
    --runtime=docker --set-as-default) and restart it; or deploy the device plugin and the GPU pods with
    runtimeClassName: nvidia.""",
)
def node_runtime_default(facts: Facts) -> Result:
    ct = facts.get("gpu_services.container_toolkit") or {}
    gpus = facts.get("gpu_pci.gpu_count") or 0
    kubelet = ct.get("kubelet")
    runtime = _node_runtime(ct)
    evidence: Dict[str, Any] = {"kubelet": kubelet, "runtime": runtime, "containerd": ct.get("containerd"),
                                "docker_runtimes": ct.get("docker_runtimes"),
                                "docker_default_runtime": ct.get("docker_default_runtime"), "gpu_pci.gpu_count": gpus}
    if ct.get("kubelet") is None and "kubelet" in ct:
        return skip("not a Kubernetes node (no kubelet)", **evidence)
    if "kubelet" not in ct:
        return skip("these facts predate the node runtime facts (dl-doctor 0.2.0)", **evidence)
    if not gpus:
        return skip("no NVIDIA GPU on this node", **evidence)
    if not ct.get("binaries"):
        return skip("the NVIDIA container toolkit is not installed on this node (DLD-CTR-002; the GPU operator "
                    "installs it at run time)", **evidence)
    alt = "# or: deploy the device plugin and GPU pods with runtimeClassName: nvidia (a RuntimeClass named nvidia)"
    if runtime == "containerd":
        cri = ct.get("containerd")
        if cri is None or not cri.get("configured"):
            return skip("containerd's CRI configuration is not in /etc/containerd/config.toml (defaults, or a "
                        "drop-in it imports)", **evidence)
        runtimes = cri.get("runtimes") or {}
        nvidia = [n for n, b in runtimes.items() if n == "nvidia" or (b and "nvidia-container-runtime" in b)]
        default = cri.get("default_runtime") or "runc"
        fix = Fix("Make the NVIDIA runtime containerd's default and restart containerd.",
                  (root_command("nvidia-ctk runtime configure --runtime=containerd --set-as-default"),
                   service("restart", "containerd"), alt))
        if not nvidia:
            return fail("containerd on this Kubernetes node has no nvidia runtime in /etc/containerd/config.toml: the "
                        "device plugin cannot load NVML and the node offers no nvidia.com/gpu ('Insufficient "
                        "nvidia.com/gpu')", evidence, fix)
        if default not in nvidia:
            return warn(f"containerd's default_runtime_name is {default}, not {nvidia[0]}: the device plugin and GPU "
                        f"pods without runtimeClassName: nvidia start without the driver ('could not load NVML "
                        f"library', 'Insufficient nvidia.com/gpu')", evidence, fix)
        return passed(f"containerd runs pods through the {default} runtime by default", **evidence)
    if runtime == "docker":
        fix = Fix("Make nvidia Docker's default-runtime and restart Docker.",
                  (root_command("nvidia-ctk runtime configure --runtime=docker --set-as-default"),
                   service("restart", "docker"), alt))
        if "nvidia" not in (ct.get("docker_runtimes") or []):
            return fail("Docker on this Kubernetes node has no nvidia runtime in /etc/docker/daemon.json: the device "
                        "plugin cannot load NVML", evidence, fix)
        default = ct.get("docker_default_runtime") or "runc"
        if default != "nvidia":
            return warn(f"Docker's default-runtime is {default} (/etc/docker/daemon.json has the nvidia runtime but "
                        f"not as \"default-runtime\"): the device plugin's container starts without NVML ('could not "
                        f"load NVML library')", evidence, fix)
        return passed("Docker runs pods through the nvidia runtime by default", **evidence)
    return skip(f"the kubelet's container runtime ({runtime or 'not named'}) is not one this check reads", **evidence)


@check(
    id="DLD-CTR-007", slug="cdi-spec-stale",
    remedy="fix-configuration", drain=True,
    problem="The CDI specification names driver files of another driver version",
    title="The NVIDIA CDI specifications name the installed driver's files",
    tags=("container", "gpu", "driver"), requires=("gpu_services", "nvidia_driver"), applies=(on_host,),
    what="""Reads the driver libraries each NVIDIA CDI specification (/etc/cdi/nvidia*.yaml,
    /var/run/cdi/nvidia*.yaml) bind-mounts by their versioned names, and holds their versions and existence against
    the installed user-space driver.""",
    why="""nvidia-ctk cdi generate writes the exact file names of the driver it finds. After a driver upgrade those
    files are gone, and podman, containerd or Docker in CDI mode refuse to start any GPU container: 'error stat'ing
    file /usr/lib/x86_64-linux-gnu/libEGL_nvidia.so.OLD: No such file or directory'. NVIDIA's CDI guide says to
    regenerate the specification after every driver change.""",
    fix="""Regenerate the specification (sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml) and have it
    regenerated after driver upgrades (a systemd unit or the toolkit's nvidia-cdi-refresh units).""",
)
def cdi_spec_stale(facts: Facts) -> Result:
    ct = facts.get("gpu_services.container_toolkit") or {}
    libs = [l for l in ct.get("cdi_libraries") or [] if isinstance(l, dict)]
    specs = ct.get("cdi_specs") or []
    versions = facts.get("nvidia_driver.userspace.versions") or []
    module = facts.get("nvidia_driver.kernel_module.version")
    evidence: Dict[str, Any] = {"cdi_specs": specs, "driver": versions, "kernel_module": module,
                                "cdi_libraries": libs[:20]}
    if not specs:
        return skip("no NVIDIA CDI specification here", **evidence)
    if "cdi_libraries" not in ct:
        return skip("these facts predate the CDI library facts (dl-doctor 0.2.0)", **evidence)
    if not libs:
        return passed(f"{', '.join(specs)} names no versioned driver library", **evidence)
    installed = versions[0] if len(versions) == 1 else module
    stale = [l for l in libs if not l.get("exists") or (installed and l.get("version") != installed)]
    if not stale:
        return passed(f"{', '.join(specs)}: the {len(libs)} driver libraries it names are the installed driver's "
                      f"({installed or libs[0].get('version')})", **evidence)
    named = sorted({l["version"] for l in stale if l.get("version")})
    spec = stale[0]["spec"]
    missing = [l["path"] for l in stale if not l.get("exists")]
    what = (f"{spec} was generated for driver {', '.join(named)}"
            + (f", but the installed driver is {installed}" if installed and installed not in named else ""))
    detail = (f": {len(missing)} of the files it bind-mounts do not exist ({missing[0]}...), so every GPU container "
              "started through CDI fails ('error stat'ing file ... No such file or directory')" if missing else
              ": GPU containers get the old driver's libraries")
    return fail(what + detail, evidence,
                Fix("Regenerate the CDI specification for the installed driver (and after every driver upgrade).",
                    (root_command(f"nvidia-ctk cdi generate --output={spec}"), "nvidia-ctk cdi list")))
