"""Reported failures of the NVIDIA container stack on the host (the toolkit's runtime registration, CDI
specifications, the Kubernetes node's container runtime), each rebuilt as the host it happened on, with its twin."""

from __future__ import annotations

import json
from typing import Dict, Sequence

import healthy
from cases import Machine, case, nvml_fixture
from cases.host_driver import containerd_node, dev_char, drop, nodes_for, persistenced_unit, ubuntu_gpu_host

Spec = Dict[str, object]

CDI_LIBS = ("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so", "libnvidia-nvvm.so", "libEGL_nvidia.so",
            "libGLX_nvidia.so", "libnvidia-eglcore.so", "libnvidia-glcore.so", "libnvidia-glsi.so",
            "libnvidia-tls.so", "libnvidia-opencl.so")


def cdi_spec(driver: str, libdir: str = "/usr/lib/x86_64-linux-gnu", gpus: int = 1) -> str:
    """/etc/cdi/nvidia.yaml as `nvidia-ctk cdi generate` writes it: every driver library of the version it found
    bind-mounted by its full name, the device nodes, the ldcache hook."""
    mounts = "".join(f"  - containerPath: {libdir}/{lib}.{driver}\n    hostPath: {libdir}/{lib}.{driver}\n"
                     "    options:\n    - ro\n    - nosuid\n    - nodev\n    - bind\n" for lib in CDI_LIBS)
    mounts += "".join(f"  - containerPath: /usr/bin/{b}\n    hostPath: /usr/bin/{b}\n    options:\n    - ro\n"
                      "    - nosuid\n    - nodev\n    - bind\n" for b in ("nvidia-smi", "nvidia-debugdump",
                                                                        "nvidia-persistenced"))
    devices = "".join(f"- containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia{n}\n  name: \"{n}\"\n"
                      for n in range(gpus))
    return ("---\ncdiVersion: 0.5.0\ncontainerEdits:\n  deviceNodes:\n  - path: /dev/nvidia-modeset\n"
            "  - path: /dev/nvidia-uvm\n  - path: /dev/nvidia-uvm-tools\n  - path: /dev/nvidiactl\n  hooks:\n"
            "  - args:\n    - nvidia-ctk\n    - hook\n    - update-ldcache\n    - --folder\n"
            f"    - {libdir}\n    hookName: createContainer\n    path: /usr/bin/nvidia-ctk\n  mounts:\n" + mounts +
            "devices:\n" + devices +
            "- containerEdits:\n    deviceNodes:\n" + "".join(f"    - path: /dev/nvidia{n}\n" for n in range(gpus)) +
            "  name: all\nkind: nvidia.com/gpu\n")


def graphics_libs(spec: Spec, driver: str) -> None:
    libdir = healthy.LIBDIR["x86_64"]
    for name in ("libEGL_nvidia", "libGLX_nvidia", "libnvidia-eglcore", "libnvidia-glcore", "libnvidia-glsi",
                 "libnvidia-tls", "libnvidia-opencl"):
        spec[f"{libdir}/{name}.so.{driver}"] = healthy.elf(f"{name}.so.0" if "GL" in name else f"{name}.so.1")


# -- a CDI specification written for the driver before the upgrade -----------------------------------------------------

@case("webkit-container-sdk-23-cdi-spec-stale-after-driver-upgrade")
def webkit_sdk_23(broken: bool) -> Machine:
    """An Ubuntu 22.04 workstation running its development container with podman and CDI: the driver was upgraded
    from 535.161.07 to 535.171.04 (and the host rebooted), /etc/cdi/nvidia.yaml still names every library by its old
    full name, and crun refuses to start the container: "error stat'ing file
    /lib/x86_64-linux-gnu/libEGL_nvidia.so.535.161.07"."""
    driver, old, k, host = "535.171.04", "535.161.07", "6.5.0-35-generic", "igalia-ws"
    spec = ubuntu_gpu_host(host, k, driver, "2684", ("0000:01:00.0",))
    graphics_libs(spec, driver)
    spec["var/lib/dpkg/status"] = healthy.dpkg_status([
        ("nvidia-driver-535", f"{driver}-0ubuntu0.22.04.1"), ("libnvidia-compute-535", f"{driver}-0ubuntu0.22.04.1"),
        ("libnvidia-gl-535", f"{driver}-0ubuntu0.22.04.1"), (f"linux-modules-nvidia-535-{k}", "6.5.0-35.35~22.04.1"),
        ("nvidia-container-toolkit", "1.15.0-1"), ("nvidia-container-toolkit-base", "1.15.0-1"),
        ("podman", "3.4.4+ds1-1ubuntu1.22.04.2"), ("libc6", "2.35-0ubuntu3.7")])
    spec["usr/bin/podman"] = healthy.elf(None)
    spec["usr/bin/crun"] = healthy.elf(None)
    for b in ("nvidia-ctk", "nvidia-container-runtime", "nvidia-container-cli"):
        spec[f"usr/bin/{b}"] = healthy.elf(None)
    persistenced_unit(spec, enabled=True)
    dev_char(spec, 1, nvidia=True)
    spec["etc/cdi/nvidia.yaml"] = cdi_spec(old if broken else driver)
    return Machine(spec, device_nodes=nodes_for(1))


# -- a Kubernetes node whose container runtime does not run pods through the NVIDIA runtime ---------------------------

@case("k8s-device-plugin-314-containerd-default-runtime-not-nvidia")
def k8s_dp_314(broken: bool) -> Machine:
    """A containerd Kubernetes node set up by the container toolkit's guide: `nvidia-ctk runtime configure
    --runtime=containerd` added the nvidia runtime but left default_runtime_name = "runc", so the device plugin's
    pod (which asks for no runtime class) gets no driver libraries and fails to load NVML; `ctr run --gpus 0` works
    all the same."""
    driver, k, host = "515.48.07", "5.15.0-1015-aws", "ip-10-20-3-41"
    spec = ubuntu_gpu_host(host, k, driver, "1eb8", ("0000:00:1e.0",), "g4dn.xlarge")
    containerd_node(spec, systemd_cgroup=True, default_nvidia=not broken)
    persistenced_unit(spec, enabled=True)
    dev_char(spec, 1, nvidia=True)
    return Machine(spec, device_nodes=nodes_for(1))


@case("k8s-device-plugin-23-docker-default-runtime-not-nvidia")
def k8s_dp_23(broken: bool) -> Machine:
    """A Kubernetes node on Docker with nvidia-docker2: daemon.json registers the nvidia runtime but does not make it
    Docker's default-runtime, so the device plugin's container starts under runc without NVML ('Failed to start
    nvml with error: could not load NVML library')."""
    driver, k, host = "390.48", "4.4.0-116-generic", "gpu-node-1"
    spec = ubuntu_gpu_host(host, k, driver, "1b06", ("0000:03:00.0", "0000:04:00.0"))
    drop_gsp = [key for key in spec if key.startswith("lib/firmware/nvidia/")]
    for key in drop_gsp:
        del spec[key]
    spec["usr/bin/dockerd"] = healthy.elf(None)
    spec["usr/bin/kubelet"] = healthy.elf(None)
    for b in ("nvidia-container-runtime", "nvidia-container-runtime-hook", "nvidia-container-cli"):
        spec[f"usr/bin/{b}"] = healthy.elf(None)
    doc = {"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": []}}}
    if not broken:
        doc = {"default-runtime": "nvidia", **doc}
    spec["etc/docker/daemon.json"] = json.dumps(doc, indent=4) + "\n"
    spec["etc/systemd/system/kubelet.service.d/10-kubeadm.conf"] = (
        '[Service]\nEnvironment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf '
        '--kubeconfig=/etc/kubernetes/kubelet.conf"\nEnvironment="KUBELET_EXTRA_ARGS=--feature-gates=DevicePlugins=true"\n'
        "ExecStart=\nExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_EXTRA_ARGS\n")
    spec["var/lib/dpkg/status"] = healthy.dpkg_status([
        ("nvidia-390", "390.48-0ubuntu0.16.04.2"), ("nvidia-docker2", "2.0.3+docker18.03.0-1"),
        ("nvidia-container-runtime", "2.0.0+docker18.03.0-1"), ("libnvidia-container1", "1.0.0~rc.1-1"),
        ("docker-ce", "18.03.0~ce-0~ubuntu"), ("kubelet", "1.10.0-00"), ("libc6", "2.23-0ubuntu10")])
    persistenced_unit(spec, enabled=True)
    return Machine(spec, device_nodes=nodes_for(2))


# -- Docker installed as a snap: the toolkit configured a daemon.json that Docker never reads --------------------------

@case("nvidia-docker-1637-docker-snap-gpus-fail")
def nvidia_docker_1637(broken: bool) -> Machine:
    """Ubuntu 20.04 with Docker from the snap store and the NVIDIA container toolkit from NVIDIA's apt repository:
    `nvidia-ctk runtime configure` (and nvidia-docker2) write /etc/docker/daemon.json, which the snap's dockerd does
    not read (it reads /var/snap/docker/current/config/daemon.json), so `docker run --gpus all` fails with 'could not
    select device driver "" with capabilities: [[gpu]]'. The twin has Docker from Docker's apt repository."""
    driver, k, host = "510.60.02", "5.13.0-40-generic", "alyaan-desktop"
    spec = ubuntu_gpu_host(host, k, driver, "2489", ("0000:01:00.0",))
    for b in ("nvidia-ctk", "nvidia-container-runtime", "nvidia-container-runtime-hook", "nvidia-container-cli",
              "nvidia-container-toolkit"):
        spec[f"usr/bin/{b}"] = healthy.elf(None)
    spec["etc/docker/daemon.json"] = json.dumps({"runtimes": {"nvidia": {
        "path": "nvidia-container-runtime", "runtimeArgs": []}}}, indent=4) + "\n"
    packages = [("nvidia-driver-510", f"{driver}-0ubuntu0.20.04.1"), ("nvidia-docker2", "2.10.0-1"),
                ("nvidia-container-toolkit", "1.9.0-1"), ("libnvidia-container1", "1.9.0-1"), ("libc6", "2.31-0ubuntu9.7")]
    if broken:
        rev = "1779"
        spec[f"snap/docker/{rev}/bin/dockerd"] = healthy.elf(None)
        spec[f"snap/docker/{rev}/bin/docker"] = healthy.elf(None)
        spec["snap/docker/current"] = {"symlink": rev}
        spec["snap/bin/docker"] = {"symlink": "/usr/bin/snap"}
        spec["usr/bin/snap"] = healthy.elf(None)
        spec[f"var/snap/docker/{rev}/config/daemon.json"] = '{\n    "log-level":        "error"\n}\n'
        spec["var/snap/docker/current"] = {"symlink": rev}
        spec["var/lib/snapd/state.json"] = '{"data":{"snaps":{"docker":{"type":"app","sequence":[{"name":"docker","revision":"1779"}],"current":"1779"}}}}'
    else:
        spec["usr/bin/dockerd"] = healthy.elf(None)
        spec["usr/bin/docker"] = healthy.elf(None)
        packages += [("docker-ce", "5:20.10.14~3-0~ubuntu-focal"), ("containerd.io", "1.5.11-1")]
    spec["var/lib/dpkg/status"] = healthy.dpkg_status(packages)
    persistenced_unit(spec, enabled=True)
    dev_char(spec, 1, nvidia=True)
    return Machine(spec, device_nodes=nodes_for(1))


@case("elasticfusion-dockerfile-11-container-toolkit-missing")
def elasticfusion_11(broken: bool) -> Machine:
    """An Ubuntu 20.04 desktop with Docker CE and the NVIDIA driver, without the NVIDIA container toolkit: `docker run
    --gpus all` fails with 'could not select device driver "" with capabilities: [[gpu]]'; installing
    nvidia-container-toolkit (and restarting Docker) fixed it."""
    driver, k, host = "460.56", "5.8.0-48-generic", "tranvnhan-pc"
    spec = ubuntu_gpu_host(host, k, driver, "1e87", ("0000:01:00.0",))
    spec["usr/bin/dockerd"] = healthy.elf(None)
    spec["usr/bin/docker"] = healthy.elf(None)
    packages = [("nvidia-driver-460", f"{driver}-0ubuntu0.20.04.1"), ("docker-ce", "5:20.10.5~3-0~ubuntu-focal"),
                ("containerd.io", "1.4.4-1"), ("libc6", "2.31-0ubuntu9.2")]
    if not broken:
        for b in ("nvidia-container-toolkit", "nvidia-container-cli", "nvidia-container-runtime-hook"):
            spec[f"usr/bin/{b}"] = healthy.elf(None)
        packages += [("nvidia-container-toolkit", "1.4.2-1"), ("libnvidia-container1", "1.3.3-1")]
        spec["etc/docker/daemon.json"] = json.dumps({"runtimes": {"nvidia": {
            "path": "nvidia-container-runtime", "runtimeArgs": []}}}, indent=4) + "\n"
    spec["var/lib/dpkg/status"] = healthy.dpkg_status(packages)
    persistenced_unit(spec, enabled=True)
    return Machine(spec, device_nodes=nodes_for(1))


@case("nvidia-docker-1671-docker-cgroup-v2-no-dev-char-links")
def nvidia_docker_1671(broken: bool) -> Machine:
    """An Ubuntu 22.04 GPU server with Docker 24 on cgroup v2, where Docker's cgroup driver is systemd by default (no
    exec-opts in daemon.json): the NVIDIA device nodes have no /dev/char links, so GPU containers lose their GPUs
    at the next systemd daemon-reload ('Failed to initialize NVML: Unknown Error'). The twin has the links from
    nvidia-ctk system create-dev-char-symlinks (a udev rule)."""
    driver, k, host = "525.85.12", "5.15.0-60-generic", "gpu-srv-03"
    spec = ubuntu_gpu_host(host, k, driver, "20b5", ("0000:17:00.0", "0000:31:00.0", "0000:b1:00.0", "0000:ca:00.0"))
    spec["usr/bin/dockerd"] = healthy.elf(None)
    for b in ("nvidia-ctk", "nvidia-container-runtime", "nvidia-container-cli", "nvidia-container-toolkit"):
        spec[f"usr/bin/{b}"] = healthy.elf(None)
    spec["etc/docker/daemon.json"] = json.dumps({"runtimes": {"nvidia": {
        "args": [], "path": "nvidia-container-runtime"}}}, indent=4) + "\n"
    spec["var/lib/dpkg/status"] = healthy.dpkg_status([
        ("nvidia-driver-525-server", f"{driver}-0ubuntu0.22.04.1"), ("docker-ce", "5:24.0.2-1~ubuntu.22.04~jammy"),
        ("nvidia-container-toolkit", "1.12.0-1"), ("libc6", "2.35-0ubuntu3.1")])
    persistenced_unit(spec, enabled=True)
    dev_char(spec, 4, nvidia=not broken)
    if not broken:
        spec["lib/udev/rules.d/71-nvidia-dev-char.rules"] = (
            'ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia", RUN+="/usr/bin/nvidia-ctk system '
            'create-dev-char-symlinks --create-all"\n')
    return Machine(spec, device_nodes=nodes_for(4))


@case("delta-interpolator-10-toolkit-without-driver-libraries")
def delta_interpolator_10(broken: bool) -> Machine:
    """An Ubuntu 22.04 box with the NVIDIA kernel module from linux-modules-nvidia-525 and the container toolkit, but
    no driver user space (libnvidia-compute-525 not installed): nvidia-container-cli, which loads the host's NVML
    to set up every GPU container, fails with 'load library failed: libnvidia-ml.so.1'."""
    driver, k, host = "525.60.11", "5.15.0-56-generic", "toctave-ws"
    spec = ubuntu_gpu_host(host, k, driver, "2204", ("0000:01:00.0",))
    libdir = healthy.LIBDIR["x86_64"]
    packages = [(f"linux-modules-nvidia-525-{k}", "5.15.0-56.62"), ("nvidia-kernel-common-525", f"{driver}-0ubuntu0.22.04.1"),
                ("nvidia-container-toolkit", "1.11.0-1"), ("libnvidia-container1", "1.11.0-1"),
                ("docker-ce", "5:20.10.21~3-0~ubuntu-jammy"), ("nvidia-docker2", "2.11.0-1"), ("libc6", "2.35-0ubuntu3.1")]
    if broken:
        drop(spec, f"{libdir}/libcuda", f"{libdir}/libnvidia", f"{libdir}/libcudadebugger", "usr/bin/nvidia-smi")
        spec["proc/driver/nvidia/version"] = healthy.nvrm(driver, "proprietary")
    else:
        packages += [("libnvidia-compute-525", f"{driver}-0ubuntu0.22.04.1"), ("nvidia-utils-525", f"{driver}-0ubuntu0.22.04.1")]
    spec["var/lib/dpkg/status"] = healthy.dpkg_status(packages)
    spec["usr/bin/dockerd"] = healthy.elf(None)
    for b in ("nvidia-ctk", "nvidia-container-runtime", "nvidia-container-cli", "nvidia-container-toolkit"):
        spec[f"usr/bin/{b}"] = healthy.elf(None)
    spec["etc/docker/daemon.json"] = json.dumps({"runtimes": {"nvidia": {
        "path": "nvidia-container-runtime", "runtimeArgs": []}}}, indent=4) + "\n"
    dev_char(spec, 1, nvidia=True)
    return Machine(spec, device_nodes=nodes_for(1))


FEDORA41 = ('NAME="Fedora Linux"\nVERSION="41 (Workstation Edition)"\nID=fedora\nVERSION_ID=41\n'
            'PLATFORM_ID="platform:f41"\nPRETTY_NAME="Fedora Linux 41 (Workstation Edition)"\nVARIANT_ID=workstation\n')


@case("nvidia-container-toolkit-856-cdi-stale-after-akmod-update")
def nct_856(broken: bool) -> Machine:
    """Fedora 41 with RPM Fusion's akmod-nvidia and podman using CDI: a dnf update brought driver 570.86.16 (akmods
    rebuilt the module, the host rebooted), and /etc/cdi/nvidia.yaml, generated at 565.77, still bind-mounts the
    565.77 libraries that are gone, so every GPU container fails to start until `nvidia-ctk cdi generate` is run
    again."""
    driver, old, k, host = "570.86.16", "565.77", "6.12.9-200.fc41.x86_64", "fedora-ws"
    spec = ubuntu_gpu_host(host, k, driver, "2704", ("0000:01:00.0",))
    spec["etc/os-release"] = FEDORA41
    spec["etc/fedora-release"] = "Fedora release 41 (Forty One)\n"
    drop(spec, "etc/debian_version", "var/lib/dpkg", "usr/lib/x86_64-linux-gnu/libcuda", "usr/lib/x86_64-linux-gnu/libnvidia",
         "usr/lib/x86_64-linux-gnu/libcudadebugger", f"lib/modules/{k}/kernel/nvidia-570srv")
    healthy.driver_userspace(spec, "usr/lib64", driver)
    for name in ("libEGL_nvidia", "libGLX_nvidia", "libnvidia-eglcore", "libnvidia-glcore", "libnvidia-glsi",
                 "libnvidia-tls", "libnvidia-opencl"):
        spec[f"usr/lib64/{name}.so.{driver}"] = healthy.elf(f"{name}.so.0" if "GL" in name else f"{name}.so.1")
    for name in ("nvidia", "nvidia-modeset", "nvidia-uvm", "nvidia-drm"):
        spec[f"lib/modules/{k}/extra/nvidia/{name}.ko.xz"] = __import__("lzma").compress(
            __import__("cases.host_driver", fromlist=["ko"]).ko(name, driver, k, depends=(
                ("nvidia",) if name in ("nvidia-modeset", "nvidia-uvm") else ("drm", "drm_kms_helper", "nvidia-modeset")
                if name == "nvidia-drm" else ())))
    spec[f"lib/modules/{k}/modules.dep"] = ""
    spec["var/cache/akmods/nvidia/570.86.16-1-for-6.12.9-200.fc41.x86_64.log"] = "akmods: built kmod-nvidia\n"
    spec["usr/src/akmods/nvidia-kmod.latest"] = {"symlink": "nvidia-kmod-570.86.16-1.fc41.src.rpm"}
    spec["var/lib/rpm/rpmdb.sqlite"] = healthy.rpmdb_sqlite([
        f"akmod-nvidia-{driver}-1.fc41", f"xorg-x11-drv-nvidia-cuda-{driver}-1.fc41", f"xorg-x11-drv-nvidia-{driver}-1.fc41",
        "nvidia-container-toolkit-1.17.3-1", "podman-5.3.1-1.fc41", f"kernel-core-6.12.9-200.fc41", "glibc-2.40-17.fc41"])
    spec["usr/bin/podman"] = healthy.elf(None)
    spec["usr/bin/crun"] = healthy.elf(None)
    for b in ("nvidia-ctk", "nvidia-container-runtime", "nvidia-container-cli"):
        spec[f"usr/bin/{b}"] = healthy.elf(None)
    spec["etc/cdi/nvidia.yaml"] = cdi_spec(old if broken else driver, libdir="/usr/lib64")
    persistenced_unit(spec, enabled=True, where="usr/lib/systemd/system")
    dev_char(spec, 1, nvidia=True)
    return Machine(spec, device_nodes=nodes_for(1))


@case("nvidia-docker-1650-containerd-systemd-cgroup-v1-daemon-reload")
def nvidia_docker_1650(broken: bool) -> Machine:
    """A Kubernetes node on kernel 5.10.23 with systemd 239 and cgroup v1: containerd runs pods with SystemdCgroup =
    true, and the NVIDIA device nodes have no /dev/char links, so a `systemctl daemon-reload` rewrites the pods'
    device cgroups to 'c 195:* m' and NVML inside fails ('Failed to initialize NVML: Unknown Error')."""
    driver, k, host = "460.91.03", "5.10.23-4.al8.x86_64", "gpu-node-7"
    spec = ubuntu_gpu_host(host, k, driver, "1eb8", ("0000:00:07.0", "0000:00:08.0"))
    spec["etc/os-release"] = ('NAME="Alibaba Cloud Linux"\nVERSION="3 (Soaring Falcon)"\nID="alinux"\n'
                              'ID_LIKE="rhel fedora centos anolis"\nVERSION_ID="3"\nPLATFORM_ID="platform:al8"\n'
                              'PRETTY_NAME="Alibaba Cloud Linux 3 (Soaring Falcon)"\n')
    drop(spec, "etc/debian_version", "var/lib/dpkg", "sys/fs/cgroup/cgroup.controllers", "lib/firmware/nvidia/")
    spec["proc/mounts"] = ("/dev/vda1 / ext4 rw,relatime 0 0\nproc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n"
                           "tmpfs /sys/fs/cgroup tmpfs ro,nosuid,nodev,noexec,mode=755 0 0\n"
                           "cgroup /sys/fs/cgroup/devices cgroup rw,nosuid,nodev,noexec,relatime,devices 0 0\n"
                           "cgroup /sys/fs/cgroup/memory cgroup rw,nosuid,nodev,noexec,relatime,memory 0 0\n"
                           "tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0\n")
    spec["sys/fs/cgroup/devices/devices.list"] = "a *:* rwm\n"
    spec["sys/fs/cgroup/memory/memory.limit_in_bytes"] = "9223372036854771712\n"
    containerd_node(spec, systemd_cgroup=True)
    persistenced_unit(spec, enabled=True, where="usr/lib/systemd/system")
    dev_char(spec, 2, nvidia=not broken)
    return Machine(spec, device_nodes=nodes_for(2))
