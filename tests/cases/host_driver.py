"""Reported failures of the NVIDIA kernel module, its packaging, the GPUs' bring-up and the container runtimes
(issue 27, the host area), each rebuilt as the machine it happened on, with its healthy twin."""

from __future__ import annotations

import json
import struct
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import healthy
from cases import Machine, case, nvml_fixture

Spec = Dict[str, object]


# -- kernel modules as the kernel's build writes them ----------------------------------------------------------------

def ko(name: str, version: str, kernel: str, depends: Sequence[str] = (), license: str = "NVIDIA",
       signed: bool = False, extra: Sequence[Tuple[str, str]] = ()) -> bytes:
    """A relocatable ELF64 kernel module with a real ``.modinfo`` section (the strings modpost writes: license,
    version, depends, retpoline, name, vermagic, NUL-separated) and ``.gnu.linkonce.this_module``; a signed module
    ends with the appended-signature trailer."""
    fields = [("license", license), ("version", version)] + list(extra) + [
        ("srcversion", "A9C7B0E5D1F3A2C4B6D8E0F"), ("depends", ",".join(depends)), ("retpoline", "Y"),
        ("name", name), ("vermagic", f"{kernel} SMP preempt mod_unload modversions ")]
    modinfo = b"".join(f"{k}={v}".encode() + b"\0" for k, v in fields)
    this_module = name.encode().ljust(56, b"\0") + b"\0" * 8
    shstr = b"\0.modinfo\0.gnu.linkonce.this_module\0.shstrtab\0"
    body = [modinfo, this_module, shstr]
    offsets, off = [], 64
    for blob in body:
        offsets.append(off)
        off += len(blob)
    shoff = (off + 7) & ~7
    header = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8 + struct.pack(
        "<HHIQQQIHHHHHH", 1, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 4, 3)
    sections = [struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)]
    for (nm, flags, align), blob, at in zip(((1, 2, 1), (10, 3, 64), (36, 0, 1)), body, offsets):
        kind = 3 if nm == 36 else 1
        sections.append(struct.pack("<IIQQQQIIQQ", nm, kind, flags, 0, at, len(blob), 0, 0, align, 0))
    data = header + b"".join(body)
    data += b"\0" * (shoff - len(data)) + b"".join(sections)
    if signed:
        data += b"\x30\x82" + b"\x5a" * 600 + struct.pack(">BBBBBxxxI", 0, 0, 2, 0, 0, 602) + \
            b"~Module signature appended~\n"
    return data


def modules_dep(entries: Iterable[Tuple[str, Sequence[str]]]) -> str:
    """/lib/modules/KERNEL/modules.dep: ``path: dep dep`` per module, paths relative to the kernel's directory."""
    return "".join(f"{path}:{''.join(' ' + d for d in deps)}\n" for path, deps in entries)


# the in-tree modules of an Ubuntu -generic kernel that the NVIDIA modules can depend on (a part of modules.dep)
def ubuntu_kernel_modules(k: str, with_ipmi: bool = True, with_drm: bool = True,
                          with_ib: bool = False) -> List[Tuple[str, Sequence[str]]]:
    z = ".ko.zst" if k.startswith("6.") else ".ko"
    drm = f"kernel/drivers/gpu/drm/drm{z}"
    out: List[Tuple[str, Sequence[str]]] = [
        (f"kernel/drivers/video/fbdev/core/fb_sys_fops{z}", ()),
        (f"kernel/drivers/i2c/algos/i2c-algo-bit{z}", ()),
        (f"kernel/drivers/net/ethernet/intel/e1000e/e1000e{z}", ()),
        (f"kernel/drivers/nvme/host/nvme{z}", (f"kernel/drivers/nvme/host/nvme-core{z}",)),
        (f"kernel/drivers/nvme/host/nvme-core{z}", ()),
        (f"kernel/sound/pci/hda/snd-hda-intel{z}", ()),
    ]
    if with_drm:
        out += [(drm, ()), (f"kernel/drivers/gpu/drm/drm_kms_helper{z}", (drm,))]
    if with_ipmi:
        out += [(f"kernel/drivers/char/ipmi/ipmi_msghandler{z}", ()),
                (f"kernel/drivers/char/ipmi/ipmi_devintf{z}", (f"kernel/drivers/char/ipmi/ipmi_msghandler{z}",))]
    if with_ib:
        out += [(f"kernel/drivers/infiniband/core/ib_core{z}", ()),
                (f"kernel/drivers/infiniband/core/ib_uverbs{z}", (f"kernel/drivers/infiniband/core/ib_core{z}",))]
    return out


MODULES_BUILTIN = ("kernel/arch/x86/crypto/aesni-intel.ko\nkernel/drivers/pci/pcie/portdrv.ko\n"
                   "kernel/fs/ext4/ext4.ko\nkernel/drivers/char/tpm/tpm.ko\nkernel/drivers/video/backlight/backlight.ko\n")


def syslog_lines(host: str, stamp: str, lines: Sequence[Tuple[float, str]], source: str = "kernel") -> str:
    """Lines as rsyslog writes them on Debian/Ubuntu (/var/log/kern.log, syslog): ``Mon DD HH:MM:SS host kernel:
    [   4.009675] text``."""
    return "".join(f"{stamp} {host} {source}: [{t:12.6f}] {text}\n" for t, text in lines)


def kern_boot(host: str, k: str) -> List[Tuple[float, str]]:
    return [(0.0, f"Linux version {k} (buildd@lcy02-amd64-047) (x86_64-linux-gnu-gcc-12 (Ubuntu 12.3.0-1ubuntu1~22.04) "
                  f"12.3.0, GNU ld (GNU Binutils for Ubuntu) 2.38) #91-Ubuntu SMP"),
            (0.0, f"Command line: BOOT_IMAGE=/boot/vmlinuz-{k} root=UUID=3a1b ro quiet splash vt.handoff=7")]


def drop(spec: Spec, *prefixes: str) -> None:
    for path in [p for p in spec if p.startswith(prefixes)]:
        del spec[path]


def unload_nvidia(spec: Spec) -> None:
    """The machine came up without the nvidia module loaded: no /proc/driver/nvidia, nothing in /proc/modules."""
    drop(spec, "proc/driver/nvidia", "sys/module/nvidia")
    spec["proc/modules"] = "".join(l + "\n" for l in str(spec.get("proc/modules", "")).splitlines()
                                   if not l.startswith("nvidia"))
    for key in [k for k in spec if k.lstrip("/").startswith("sys/devices/pci") and k.endswith("/driver")]:
        del spec[key]


# -- 1. a module's dependency is not loaded first: Unknown symbol ------------------------------------------------------

@case("batocera-7222-nvidia-390-needs-ipmi-msghandler")
def batocera_7222(broken: bool) -> Machine:
    """The 390 legacy driver's nvidia.ko needs the kernel's IPMI message handler (its .modinfo says
    depends=ipmi_msghandler); the kernel's modules.dep lists nvidia.ko without it, so `modprobe nvidia` inserts it
    alone and the kernel refuses it: 'nvidia: Unknown symbol ipmi_create_user (err -2)'."""
    driver, k, host = "390.157", "5.15.0-91-generic", "batocera"
    spec = healthy.geforce_workstation()
    old = str(spec["proc/sys/kernel/osrelease"]).strip()
    drop(spec, f"lib/modules/{old}", f"boot/vmlinuz-{old}", "lib/firmware/nvidia/", "usr/lib/x86_64-linux-gnu/libcuda",
         "usr/lib/x86_64-linux-gnu/libnvidia")
    spec["etc/os-release"] = healthy.OS_RELEASE["ubuntu2204"]
    spec["etc/debian_version"] = "bookworm/sid\n"
    spec["sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"] = b"\x06\x00\x00\x00\x00"
    spec["boot/vmlinuz"] = {"symlink": f"vmlinuz-{k}"}
    spec[f"boot/vmlinuz-{k}"] = ""
    spec["proc/sys/kernel/osrelease"] = k + "\n"
    spec["proc/cmdline"] = f"BOOT_IMAGE=/boot/vmlinuz-{k} root=UUID=3a1b ro quiet splash vt.handoff=7\n"
    # a 390 machine has no CUDA 12 toolkit, no torch env for it, no 40-series NCCL settings
    drop(spec, "usr/local/cuda", "etc/ld.so.conf.d/988_cuda-12.conf", "home/alice/miniforge3/envs/torch")
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/games", "HOME": "/root",
           "USER": "root", "LANG": "en_US.UTF-8"}
    spec["proc/self/environ"] = healthy.environ(env)
    spec["var/lib/dpkg/status"] = ""
    healthy.driver_userspace(spec, healthy.LIBDIR["x86_64"], driver)
    spec["sys/module/nvidia/version"] = driver + "\n"
    spec["proc/driver/nvidia/version"] = healthy.nvrm(driver, "proprietary")
    # a GeForce GTX 570 (Fermi): the 390 branch is its last driver; no GSP, no open modules
    for key in [key for key in spec if "/sys/devices/pci0000:00/" in "/" + key and key.endswith("/device")]:
        spec[key] = "0x1081\n"
    base = f"lib/modules/{k}"
    mods = {"nvidia": ko("nvidia", driver, k, depends=("ipmi_msghandler",)),
            "nvidia-modeset": ko("nvidia-modeset", driver, k, depends=("nvidia",)),
            "nvidia-uvm": ko("nvidia-uvm", driver, k, depends=("nvidia",)),
            "nvidia-drm": ko("nvidia-drm", driver, k, depends=("drm", "drm_kms_helper", "nvidia-modeset"))}
    for name, blob in mods.items():
        spec[f"{base}/updates/dkms/{name}.ko"] = blob
    drm = "kernel/drivers/gpu/drm/drm.ko"
    nv = "updates/dkms/nvidia.ko"
    ipmi = "kernel/drivers/char/ipmi/ipmi_msghandler.ko"
    entries = ubuntu_kernel_modules(k) + [
        (nv, (ipmi,) if not broken else ()),
        ("updates/dkms/nvidia-modeset.ko", (nv,) + ((ipmi,) if not broken else ())),
        ("updates/dkms/nvidia-uvm.ko", (nv,) + ((ipmi,) if not broken else ())),
        ("updates/dkms/nvidia-drm.ko", ("updates/dkms/nvidia-modeset.ko", nv, "kernel/drivers/gpu/drm/drm_kms_helper.ko",
                                        drm) + ((ipmi,) if not broken else ()))]
    spec[f"{base}/modules.dep"] = modules_dep(entries)
    spec[f"{base}/modules.builtin"] = MODULES_BUILTIN
    spec[f"var/lib/dkms/nvidia/{driver}/{k}/x86_64/module/nvidia.ko"] = b""
    spec[f"var/lib/dkms/nvidia/{driver}/source"] = {"symlink": f"/usr/src/nvidia-{driver}"}
    spec[f"usr/src/nvidia-{driver}/dkms.conf"] = (f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{driver}"\n'
                                                  'AUTOINSTALL="yes"\nBUILT_MODULE_NAME[0]="nvidia"\n'
                                                  'DEST_MODULE_LOCATION[0]="/updates/dkms"\n')
    spec["var/lib/dpkg/status"] = healthy.dpkg_status([
        ("nvidia-driver-390", f"{driver}-0ubuntu0.22.04.2"), ("nvidia-dkms-390", f"{driver}-0ubuntu0.22.04.2"),
        ("nvidia-kernel-source-390", f"{driver}-0ubuntu0.22.04.2"), ("libnvidia-compute-390", f"{driver}-0ubuntu0.22.04.2"),
        ("dkms", "2.8.7-2ubuntu2.2"), (f"linux-image-{k}", "5.15.0-91.101"), (f"linux-modules-{k}", "5.15.0-91.101"),
        ("libc6", "2.35-0ubuntu3.6")])
    boot = kern_boot(host, k) + [(3.921, "nvidia: loading out-of-tree module taints kernel."),
                                 (3.921, "nvidia: module license 'NVIDIA' taints kernel.")]
    if broken:
        unload_nvidia(spec)
        boot += [(4.009675, "nvidia: Unknown symbol ipmi_create_user (err -2)"),
                 (4.009800, "nvidia: Unknown symbol ipmi_destroy_user (err -2)"),
                 (4.009865, "nvidia: Unknown symbol ipmi_validate_addr (err -2)"),
                 (4.009889, "nvidia: Unknown symbol ipmi_free_recv_msg (err -2)"),
                 (4.009927, "nvidia: Unknown symbol ipmi_set_my_address (err -2)"),
                 (4.009954, "nvidia: Unknown symbol ipmi_request_settime (err -2)"),
                 (4.009968, "nvidia: Unknown symbol ipmi_set_gets_events (err -2)")]
    else:
        boot += [(3.930, "IPMI message handler: version 39.2"),
                 (3.990, f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {driver}  Wed Nov 16 20:05:59 UTC 2022"),
                 (4.120, f"nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  {driver}")]
    spec["var/log/kern.log"] = syslog_lines(host, "Oct  8 14:02:11", boot)
    return Machine(spec)


# -- a bare-metal or cloud Ubuntu 22.04 GPU host, as the NVIDIA .run installer or the distro packages leave it --------

def ubuntu_gpu_host(host: str, k: str, driver: str, device: str, buses: Sequence[str], instance: Optional[str] = None,
                    vendor: str = "Amazon EC2", runfile: bool = False) -> Spec:
    spec: Spec = {}
    healthy.deb_host(spec, "ubuntu2204", host)
    spec["proc/sys/kernel/osrelease"] = k + "\n"
    spec["proc/version"] = f"Linux version {k} (buildd@lcy02-amd64-047) (gcc 11.4.0) #88-Ubuntu SMP\n"
    spec["proc/driver/nvidia/version"] = healthy.nvrm(driver, "proprietary").replace(
        "gcc version 8.5.0 20210514 (Red Hat 8.5.0-22) (GCC)", "gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04)")
    spec["proc/modules"] = healthy.PROC_MODULES_NVIDIA + "ena 143360 0 - Live 0x0\next4 1 1 - Live 0x0\n"
    spec["sys/module/nvidia/version"] = driver + "\n"
    spec["proc/cmdline"] = f"BOOT_IMAGE=/boot/vmlinuz-{k} root=PARTUUID=9c3f0a1b-01 ro console=tty1 console=ttyS0\n"
    spec["proc/mounts"] = ("/dev/root / ext4 rw,relatime,discard,errors=remount-ro 0 0\n"
                           "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n"
                           "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate,memory_recursiveprot 0 0\n"
                           "tmpfs /dev/shm tmpfs rw,nosuid,nodev,inode64 0 0\n")
    spec["sys/fs/cgroup/cgroup.controllers"] = "cpuset cpu io memory hugetlb pids rdma misc\n"
    spec["proc/meminfo"] = healthy.MEMINFO["1152G"]
    spec["sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"] = b"\x06\x00\x00\x00\x00"
    if instance:
        healthy.dmi(spec, instance, vendor=vendor)
    healthy.gpus(spec, device, buses)
    libdir = healthy.LIBDIR["x86_64"]
    healthy.driver_userspace(spec, libdir, driver)
    healthy.glibc(spec, libdir)
    base = f"lib/modules/{k}"
    where = "kernel/drivers/video" if runfile else f"kernel/nvidia-{driver.split('.')[0]}srv"
    names = ("nvidia", "nvidia-modeset", "nvidia-uvm", "nvidia-drm", "nvidia-peermem")
    deps = {"nvidia": (), "nvidia-modeset": ("nvidia",), "nvidia-uvm": ("nvidia",),
            "nvidia-drm": ("drm", "drm_kms_helper", "nvidia-modeset"), "nvidia-peermem": ("ib_core", "nvidia")}
    for name in names:
        spec[f"{base}/{where}/{name}.ko"] = ko(name, driver, k, depends=deps[name], signed=not runfile)
    nv = f"{where}/nvidia.ko"
    ib = "kernel/drivers/infiniband/core/ib_core.ko"
    spec[f"{base}/modules.dep"] = modules_dep(ubuntu_kernel_modules(k, with_ib=True) + [
        (nv, ()), (f"{where}/nvidia-modeset.ko", (nv,)), (f"{where}/nvidia-uvm.ko", (nv,)),
        (f"{where}/nvidia-drm.ko", (f"{where}/nvidia-modeset.ko", nv, "kernel/drivers/gpu/drm/drm_kms_helper.ko",
                                    "kernel/drivers/gpu/drm/drm.ko")),
        (f"{where}/nvidia-peermem.ko", (ib, nv))])
    spec[f"{base}/modules.builtin"] = MODULES_BUILTIN
    spec[f"boot/vmlinuz-{k}"] = ""
    spec["boot/vmlinuz"] = {"symlink": f"vmlinuz-{k}"}
    for fw in ("gsp_ga10x.bin", "gsp_tu10x.bin"):
        spec[f"lib/firmware/nvidia/{driver}/{fw}"] = b"\0"
    spec["etc/modprobe.d/blacklist-nouveau.conf"] = "blacklist nouveau\noptions nouveau modeset=0\n"
    spec["usr/bin/nvidia-smi"] = healthy.elf(None)
    spec["usr/bin/nvidia-persistenced"] = healthy.elf(None)
    if runfile:
        spec["usr/bin/nvidia-uninstall"] = healthy.elf(None)
        spec["var/log/nvidia-installer.log"] = (f"nvidia-installer log file '/var/log/nvidia-installer.log'\n"
                                                f"creation time: Tue Nov 26 09:12:31 2024\ninstaller version: {driver}\n")
    return spec


def persistenced_unit(spec: Spec, enabled: bool, where: str = "lib/systemd/system") -> None:
    """The unit the .run installer writes (nvidia-installer's sample), enabled or not (its multi-user.target.wants
    link)."""
    spec[f"{where}/nvidia-persistenced.service"] = (
        "# NVIDIA Persistence Daemon Init Script\n#\n# Copyright (c) 2013 NVIDIA Corporation\n#\n\n[Unit]\n"
        "Description=NVIDIA Persistence Daemon\nWants=syslog.target\n\n[Service]\nType=forking\n"
        "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced\n"
        "ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced\n\n[Install]\nWantedBy=multi-user.target\n")
    if enabled:
        spec["etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service"] = {
            "symlink": f"/{where}/nvidia-persistenced.service"}


def containerd_node(spec: Spec, systemd_cgroup: bool = True, nvidia_runtime: bool = True,
                    default_nvidia: bool = True) -> None:
    """A Kubernetes node's containerd (1.7) with the NVIDIA container toolkit's runtime, as `nvidia-ctk runtime
    configure --runtime=containerd` writes it."""
    runtime = ('\n        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
               '          privileged_without_host_devices = false\n          runtime_engine = ""\n'
               '          runtime_root = ""\n          runtime_type = "io.containerd.runc.v2"\n\n'
               '          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
               '            BinaryName = "/usr/bin/nvidia-container-runtime"\n'
               f'            SystemdCgroup = {"true" if systemd_cgroup else "false"}\n') if nvidia_runtime else ""
    spec["etc/containerd/config.toml"] = (
        'disabled_plugins = []\nimports = ["/etc/containerd/conf.d/*.toml"]\nversion = 2\n\n[plugins]\n\n'
        '  [plugins."io.containerd.grpc.v1.cri"]\n    sandbox_image = "registry.k8s.io/pause:3.9"\n\n'
        '    [plugins."io.containerd.grpc.v1.cri".containerd]\n'
        f'      default_runtime_name = "{"nvidia" if nvidia_runtime and default_nvidia else "runc"}"\n\n'
        '      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\n' + runtime +
        '\n        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
        '          runtime_type = "io.containerd.runc.v2"\n\n'
        '          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
        f'            SystemdCgroup = {"true" if systemd_cgroup else "false"}\n')
    spec["usr/bin/containerd"] = healthy.elf(None)
    spec["usr/bin/kubelet"] = healthy.elf(None)
    spec["var/lib/kubelet/config.yaml"] = ("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                                           f"cgroupDriver: {'systemd' if systemd_cgroup else 'cgroupfs'}\n")
    for b in ("nvidia-container-toolkit", "nvidia-container-runtime", "nvidia-ctk", "nvidia-container-cli"):
        spec[f"usr/bin/{b}"] = healthy.elf(None)
    spec["etc/nvidia-container-runtime/config.toml"] = (
        '#accept-nvidia-visible-devices-as-volume-mounts = false\ndisable-require = false\n'
        'supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"\n\n'
        '[nvidia-container-cli]\nenvironment = []\nldconfig = "@/sbin/ldconfig.real"\nload-kmods = true\n\n'
        '[nvidia-container-runtime]\nlog-level = "info"\nmode = "auto"\nruntimes = ["docker-runc", "runc", "crun"]\n')


def dev_char(spec: Spec, gpus: int, nvidia: bool) -> None:
    """/dev/char as devtmpfs/udev leave it on a running host (captured with the tree): MAJOR:MINOR links for every
    character device udev knows; the NVIDIA nodes, which nvidia-modprobe creates outside udev, have links only where
    something made them (nvidia-ctk system create-dev-char-symlinks)."""
    for link, target in (("1:1", "../mem"), ("1:3", "../null"), ("1:5", "../zero"), ("1:8", "../random"),
                         ("1:9", "../urandom"), ("4:0", "../tty0"), ("5:0", "../tty"), ("5:1", "../console"),
                         ("5:2", "../pts/ptmx"), ("10:229", "../fuse"), ("10:183", "../hwrng")):
        spec[f"dev/char/{link}"] = {"symlink": target}
    if nvidia:
        for n in range(gpus):
            spec[f"dev/char/195:{n}"] = {"symlink": f"../nvidia{n}"}
        spec["dev/char/195:255"] = {"symlink": "../nvidiactl"}
        spec["dev/char/195:254"] = {"symlink": "../nvidia-modeset"}
        spec["dev/char/507:0"] = {"symlink": "../nvidia-uvm"}
        spec["dev/char/507:1"] = {"symlink": "../nvidia-uvm-tools"}


def nodes_for(gpus: int) -> List[str]:
    return ["nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools"] + [f"nvidia{n}" for n in range(gpus)] + ["nvidiactl"]


P5 = ("0000:53:00.0", "0000:64:00.0", "0000:75:00.0", "0000:86:00.0", "0000:97:00.0", "0000:a8:00.0", "0000:b9:00.0",
      "0000:ca:00.0")
P4D = ("0000:10:1c.0", "0000:10:1d.0", "0000:20:1c.0", "0000:20:1d.0", "0000:90:1c.0", "0000:90:1d.0", "0000:a0:1c.0",
       "0000:a0:1d.0")


# -- 2. persistence off: the daemon's unit is installed but not enabled ----------------------------------------------

@case("aks-gpu-105-persistenced-not-running-slow-nvidia-smi")
def aks_gpu_105(broken: bool) -> Machine:
    """An AKS 8x A100 node whose driver the .run installer put in (aks-gpu): nvidia-installer writes the
    nvidia-persistenced unit, nothing enables it; with no daemon the GPUs drop persistence, every nvidia-smi
    re-initialises all eight (30 s instead of 2), and the node's provisioning timed out."""
    driver, k = "535.104.05", "5.15.0-1073-azure"
    spec = ubuntu_gpu_host("aks-nd96asr-39370903-vmss000002", k, driver, "20b0", P4D, "Virtual Machine",
                           vendor="Microsoft Corporation", runfile=True)
    containerd_node(spec)
    persistenced_unit(spec, enabled=not broken)
    dev_char(spec, 8, nvidia=True)
    nvml = nvml_fixture("p4d_healthy", devices={"persistence": 0 if broken else 1})
    return Machine(spec, nvml=nvml, device_nodes=nodes_for(8))


# -- 4. a GPU the driver could not initialise -------------------------------------------------------------------------

WORKER_BUSES = ("0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0", "0000:09:00.0", "0000:0a:00.0",
                "0000:0b:00.0", "0000:0c:00.0")


@case("gpu-operator-1146-rminitadapter-failed-one-gpu")
def gpu_operator_1146(broken: bool) -> Machine:
    """A bare-metal Kubernetes worker with 8 GPUs: the driver loads, and one GPU (0000:0a:00.0, minor 5) fails to
    initialise again and again ('RmInitAdapter failed! (0x24:0x72:1568)'): NVML lists seven, and the operator's CUDA
    validator, which uses every GPU, crashes on that node."""
    driver, k, host = "535.104.05", "5.15.0-91-generic", "worker4"
    spec = ubuntu_gpu_host(host, k, driver, "20b0", WORKER_BUSES)
    containerd_node(spec)
    persistenced_unit(spec, enabled=True)
    dev_char(spec, 8, nvidia=True)
    lines = kern_boot(host, k) + [
        (5.120, "nvidia: loading out-of-tree module taints kernel."),
        (5.311, f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {driver}  Sat Aug 19 01:15:15 UTC 2023"),
        (5.402, "nvidia-uvm: Loaded the UVM driver, major device number 507.")]
    if broken:
        for t in (885.242168, 926.232044, 1015.260402, 1172.496983, 3669.298927):
            lines += [(t, "NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)"),
                      (t + 0.000270, "NVRM: GPU 0000:0a:00.0: rm_init_adapter failed, device minor number 5")]
    spec["var/log/kern.log"] = syslog_lines(host, "Dec  2 11:49:53", lines)
    nvml = nvml_fixture("p4d_healthy")
    for dev, bus in zip(nvml["devices"], WORKER_BUSES):
        dev["bus_id"] = "0000" + bus.upper()
    if broken:
        nvml["devices"] = [d for d in nvml["devices"] if not d["bus_id"].endswith("0A:00.0")]
    return Machine(spec, nvml=nvml, device_nodes=nodes_for(8))


# -- 6. systemd manages the containers' cgroups and /dev/char has no NVIDIA links --------------------------------------

@case("nvidia-container-toolkit-932-systemd-cgroup-no-dev-char-links")
def nct_932(broken: bool) -> Machine:
    """A Kubernetes node moved to cgroup v2 and the systemd cgroup driver (containerd SystemdCgroup = true, kubelet
    cgroupDriver: systemd), the toolkit alone (no GPU operator): the NVIDIA device nodes have no /dev/char links, so
    after a systemd daemon-reload pods lose their GPUs ('Failed to initialize NVML: Unknown Error')."""
    driver, k, host = "550.54.15", "5.15.0-1071-aws", "ip-10-0-12-34"
    spec = ubuntu_gpu_host(host, k, driver, "2330", P5, "p5.48xlarge")
    containerd_node(spec, systemd_cgroup=True)
    persistenced_unit(spec, enabled=True)
    dev_char(spec, 8, nvidia=not broken)
    if not broken:
        spec["lib/udev/rules.d/71-nvidia-dev-char.rules"] = (
            'ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia", RUN+="/usr/bin/nvidia-ctk system '
            'create-dev-char-symlinks --create-all"\n')
    nvml = nvml_fixture("p5_healthy")
    return Machine(spec, nvml=nvml, device_nodes=nodes_for(8))


# -- containers -------------------------------------------------------------------------------------------------------

def without_runtime_injection(spec: Spec) -> None:
    """The same container started without --gpus: nothing bind-mounted from the host (no driver libraries, no
    nvidia-smi, no /dev/nvidia*), /proc/driver/nvidia not there (the host's module is loaded, but the runtime's mask
    of it is not), the mount table only the container's own."""
    libdir = healthy.LIBDIR["x86_64"]
    drop(spec, f"{libdir}/libcuda", f"{libdir}/libnvidia", f"{libdir}/libcudadebugger", "usr/bin/nvidia-",
         "proc/driver/nvidia/gpus")
    spec["proc/self/mountinfo"] = healthy.mountinfo(healthy.CONTAINER_BASE)
    spec["proc/mounts"] = healthy.CONTAINER_MOUNTS.format(shm="65536k")


# -- 5. a container started without the GPUs --------------------------------------------------------------------------

@case("anomalib-584-container-run-without-gpus")
def anomalib_584(broken: bool) -> Machine:
    """A CUDA image (nvidia/cuda base: NVIDIA_VISIBLE_DEVICES=all and CUDA_VERSION in its ENV) run with plain
    `docker run -it IMAGE` on a GPU host: no --gpus, so the NVIDIA runtime injected nothing: no /dev/nvidia*, no
    libcuda, no nvidia-smi ('nvidia-smi: command not found', torch.cuda.is_available() False)."""
    spec = healthy.docker_pytorch_nvidia_runtime()
    if broken:
        without_runtime_injection(spec)
        return Machine(spec, device_nodes=[])
    return Machine(spec, device_nodes=nodes_for(8))


# -- 3. the image's cuda-compat libcuda mounted over the driver's on a GeForce GPU ------------------------------------

def geforce_container(driver: str, device: str, compat: Optional[str], cuda: str = "12.1.1") -> Spec:
    """A CUDA 12.1 image (nvidia/cuda:12.1.1-devel-ubuntu22.04 base, cuda-compat-12-1 in /usr/local/cuda-12.1/compat)
    run with --gpus all on a desktop with one GeForce GPU. With ``compat``, nvidia-container-cli also bind-mounted the
    image's own forward-compatibility libcuda into the library directory (its CUDA compat mode, taken when the
    image's compat driver is newer than the host's), and its ldconfig pointed libcuda.so.1 at it."""
    spec = healthy.docker_pytorch_nvidia_runtime()
    libdir = healthy.LIBDIR["x86_64"]
    drop(spec, f"{libdir}/libcuda", f"{libdir}/libnvidia", f"{libdir}/libcudadebugger", "proc/driver/nvidia",
         "sys/module/nvidia", "/sys/devices/pci", "sys/bus/pci", "sys/class/dmi")
    injected, info, mounts = healthy.runtime_injected(driver, libdir, devices=(0,),
                                                      source_libdir="/usr/lib/x86_64-linux-gnu")
    spec.update(injected)
    root = "usr/local/cuda-12.1"
    compat_version = "530.30.02"
    healthy.so(spec, f"{root}/compat", f"libcuda.so.{compat_version}", "libcuda.so.1", links=["libcuda.so"])
    healthy.so(spec, f"{root}/compat", f"libnvidia-ptxjitcompiler.so.{compat_version}", "libnvidia-ptxjitcompiler.so.1")
    spec[f"{root}/compat/libnvidia-nvvm.so.{compat_version}"] = healthy.elf("libnvidia-nvvm.so.4")
    spec[f"{root}/version.json"] = json.dumps({"cuda": {"name": "CUDA SDK", "version": cuda}})
    spec["usr/local/cuda"] = {"symlink": "/usr/local/cuda-12.1"}
    spec["etc/ld.so.conf.d/000_cuda.conf"] = "/usr/local/cuda/lib64\n"
    spec["var/lib/dpkg/status"] = healthy.dpkg_status([
        ("cuda-compat-12-1", f"{compat_version}-1"), ("cuda-cudart-12-1", "12.1.105-1"), ("libc6", "2.35-0ubuntu3.1")])
    if compat:
        for name in (f"libcuda.so.{compat_version}", f"libnvidia-ptxjitcompiler.so.{compat_version}"):
            spec[f"{libdir}/{name}"] = spec[f"{root}/compat/{name}"]
            info += healthy.mountinfo([(f"/{libdir}/{name}", "overlay", "overlay", f"/{root}/compat/{name}")]).replace(
                "1000 998", "1900 998")
            mounts += f"overlay /{libdir}/{name} overlay ro,nosuid,nodev,relatime 0 0\n"
        spec[f"{libdir}/libcuda.so.1"] = {"symlink": f"libcuda.so.{compat_version}"}
    spec["proc/self/mountinfo"] = healthy.mountinfo(healthy.CONTAINER_BASE) + info
    spec["proc/mounts"] = healthy.CONTAINER_MOUNTS.format(shm="16777216k") + mounts  # compose: shm_size 16gb
    healthy._container_kernel(spec, driver, kernel="6.2.0-35-generic", devices=(0,), buses=("0000:01:00.0",),
                              model="NVIDIA GeForce GTX 1050 Ti")
    import machines
    machines.pci(spec, "0000:01:00.0", device, cls="0x030000")
    spec["proc/meminfo"] = healthy.MEMINFO["96G"]
    env = dict(healthy.PYTORCH_IMAGE_ENV)
    env.update({"CUDA_VERSION": cuda, "NV_CUDA_COMPAT_PACKAGE": "cuda-compat-12-1",
                "NVIDIA_REQUIRE_CUDA": "cuda>=12.1 brand=tesla,driver>=470,driver<471 brand=tesla,driver>=525,driver<526",
                "LD_LIBRARY_PATH": "/usr/local/nvidia/lib:/usr/local/nvidia/lib64"})
    spec["proc/self/environ"] = healthy.environ(env)
    return spec


@case("textgen-4407-cuda-compat-mounted-on-geforce")
def textgen_4407(broken: bool) -> Machine:
    """oobabooga's CUDA 12.1 image on a GTX 1050 Ti with driver 525.125.06 (CUDA 12.0): the container runtime mounted
    the image's cuda-compat libcuda 530.30.02 in the driver's place, and GeForce GPUs do not support forward
    compatibility: 'Error 804: forward compatibility was attempted on non supported HW'. With the driver upgraded to
    535.113.01 (CUDA 12.2, newer than the image's compat driver) the runtime mounts the host's libcuda alone."""
    return Machine(geforce_container("525.125.06" if broken else "535.113.01", "1c82", compat="530.30.02" if broken
                                     else None), device_nodes=nodes_for(1))


# -- DKMS could not build the module for a new kernel ----------------------------------------------------------------

def dkms_failed_build(spec: Spec, driver: str, old_k: str, new_k: str, errors: Sequence[str], host: str,
                      module_dir: str = "updates/dkms") -> None:
    """The machine rebooted into a kernel DKMS could not build the module for: the module exists for the old kernel
    only, DKMS's build directory keeps the failed build's make.log, the kernel log has no NVRM line."""
    spec["proc/sys/kernel/osrelease"] = new_k + "\n"
    spec["proc/cmdline"] = f"BOOT_IMAGE=/boot/vmlinuz-{new_k} root=UUID=3a1b ro quiet splash\n"
    spec[f"boot/vmlinuz-{new_k}"] = ""
    spec["boot/vmlinuz"] = {"symlink": f"vmlinuz-{new_k}"}
    spec[f"lib/modules/{new_k}/modules.dep"] = modules_dep(ubuntu_kernel_modules(new_k))
    spec[f"lib/modules/{new_k}/modules.builtin"] = MODULES_BUILTIN
    spec[f"lib/modules/{new_k}/build"] = {"symlink": f"/usr/src/linux-headers-{new_k}"}
    spec[f"usr/src/linux-headers-{new_k}/Makefile"] = "VERSION = " + new_k.split(".")[0] + "\n"
    unload_nvidia(spec)
    spec[f"var/lib/dkms/nvidia/{driver}/source"] = {"symlink": f"/usr/src/nvidia-{driver}"}
    spec[f"usr/src/nvidia-{driver}/dkms.conf"] = (f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{driver}"\nAUTOINSTALL="yes"\n'
                                                  f'BUILT_MODULE_NAME[0]="nvidia"\nDEST_MODULE_LOCATION[0]="/{module_dir}"\n')
    log = [f"DKMS make.log for nvidia-{driver} for kernel {new_k} (x86_64)", "Thu Jan 16 16:51:02 UTC 2020",
           f"make[1]: Entering directory '/usr/src/linux-headers-{new_k}'",
           f"  CC [M]  /var/lib/dkms/nvidia/{driver}/build/nvidia/nv.o"] + list(errors) + [
           f"make[1]: *** [Makefile:1719: /var/lib/dkms/nvidia/{driver}/build] Error 2",
           f"make[1]: Leaving directory '/usr/src/linux-headers-{new_k}'", "make: *** [Makefile:81: modules] Error 2"]
    spec[f"var/lib/dkms/nvidia/{driver}/build/make.log"] = "\n".join(log) + "\n"
    spec["var/log/kern.log"] = syslog_lines(host, "Jan 16 17:02:11", kern_boot(host, new_k))


@case("ukuu-plus-43-dkms-build-fails-on-new-kernel")
def ukuu_43(broken: bool) -> Machine:
    """Peppermint 10 (Ubuntu 18.04) with nvidia-driver-435 through DKMS, a mainline 5.4.12 kernel installed: the
    435.21 sources do not build against 5.4, DKMS's make.log keeps the compiler errors, and the machine boots 5.4
    without a driver. The twin still runs the 5.3 kernel the module was built for."""
    driver, old_k, new_k, host = "435.21", "5.3.0-26-generic", "5.4.12-050412-generic", "peppermint"
    spec = ubuntu_gpu_host(host, old_k, driver, "1c03", ("0000:01:00.0",))
    spec["etc/os-release"] = ('NAME="Peppermint"\nVERSION="10 (Tricia)"\nID=peppermint\nID_LIKE="ubuntu debian"\n'
                              'PRETTY_NAME="Peppermint 10"\nVERSION_ID="10"\nUBUNTU_CODENAME=bionic\n')
    drop(spec, "lib/firmware/nvidia/", f"lib/modules/{old_k}/kernel/nvidia-435srv")
    for name in ("nvidia", "nvidia-modeset", "nvidia-uvm", "nvidia-drm"):
        spec[f"lib/modules/{old_k}/updates/dkms/{name}.ko"] = ko(name, driver, old_k, depends=(
            ("nvidia",) if name in ("nvidia-modeset", "nvidia-uvm") else ("drm", "drm_kms_helper", "nvidia-modeset")
            if name == "nvidia-drm" else ()))
    nv = "updates/dkms/nvidia.ko"
    spec[f"lib/modules/{old_k}/modules.dep"] = modules_dep(ubuntu_kernel_modules(old_k) + [
        (nv, ()), ("updates/dkms/nvidia-modeset.ko", (nv,)), ("updates/dkms/nvidia-uvm.ko", (nv,)),
        ("updates/dkms/nvidia-drm.ko", ("updates/dkms/nvidia-modeset.ko", nv, "kernel/drivers/gpu/drm/drm_kms_helper.ko",
                                        "kernel/drivers/gpu/drm/drm.ko"))])
    spec[f"var/lib/dkms/nvidia/{driver}/{old_k}/x86_64/module/nvidia.ko"] = b""
    spec["var/lib/dpkg/status"] = healthy.dpkg_status([
        ("nvidia-driver-435", "435.21-0ubuntu0.18.04.2"), ("nvidia-dkms-435", "435.21-0ubuntu0.18.04.2"),
        ("libnvidia-compute-435", "435.21-0ubuntu0.18.04.2"), ("dkms", "2.3-3ubuntu9.7"),
        (f"linux-image-{old_k}", "5.3.0-26.28~18.04.1"), (f"linux-image-unsigned-{new_k}", "5.4.12-050412.202001141531"),
        (f"linux-headers-{new_k}", "5.4.12-050412.202001141531"), ("libc6", "2.27-3ubuntu1")])
    if broken:
        dkms_failed_build(spec, driver, old_k, new_k, [
            f"/var/lib/dkms/nvidia/{driver}/build/common/inc/nv-time.h:26:10: fatal error: linux/ktime.h: No such file "
            "or directory",
            f"/var/lib/dkms/nvidia/{driver}/build/nvidia/os-interface.c:436:5: error: implicit declaration of function "
            "'do_gettimeofday'; did you mean 'do_settimeofday64'? [-Werror=implicit-function-declaration]"], host)
    return Machine(spec, device_nodes=None if broken else nodes_for(1))


# -- the user space upgraded under a loaded module ----------------------------------------------------------------------

@case("nvidia-ubuntu-driver-guide-4-minor-update-mismatch")
def driver_guide_4(broken: bool) -> Machine:
    """Ubuntu 24.04 desktop: apt took nvidia-driver-550 from 550.90.07 to 550.107.02 (libraries and the
    linux-modules-nvidia module on disk) while the 550.90.07 module stayed loaded: 'Failed to initialize NVML:
    Driver/library version mismatch' until a reboot."""
    new, old = "550.107.02", "550.90.07"
    spec = healthy.geforce_workstation()
    k = str(spec["proc/sys/kernel/osrelease"]).strip()
    libdir = healthy.LIBDIR["x86_64"]
    drop(spec, f"{libdir}/libcuda.so", f"{libdir}/libnvidia-", "lib/firmware/nvidia/")
    healthy.driver_userspace(spec, libdir, new)
    for fw in ("gsp_ga10x.bin", "gsp_tu10x.bin"):
        spec[f"lib/firmware/nvidia/{new}/{fw}"] = b"\0"
    for name in ("nvidia", "nvidia-uvm"):
        spec[f"lib/modules/{k}/kernel/nvidia-550/{name}.ko"] = ko(name, new, k, depends=("nvidia",) if name != "nvidia"
                                                                   else (), signed=True)
    spec["var/lib/dpkg/status"] = healthy.dpkg_status([
        ("nvidia-driver-550", f"{new}-0ubuntu0.24.04.1"), ("libnvidia-compute-550", f"{new}-0ubuntu0.24.04.1"),
        (f"linux-modules-nvidia-550-{k}", "6.8.0-49.49+2"), ("nvidia-kernel-common-550", f"{new}-0ubuntu0.24.04.1"),
        ("libc6", "2.39-0ubuntu8.3"), ("cuda-toolkit-12-4", "12.4.1-1")])
    loaded = old if broken else new
    spec["proc/driver/nvidia/version"] = healthy.nvrm(loaded, "proprietary").replace(
        "gcc version 8.5.0 20210514 (Red Hat 8.5.0-22) (GCC)", "gcc version 13.2.0 (Ubuntu 13.2.0-23ubuntu4)")
    spec["sys/module/nvidia/version"] = loaded + "\n"
    spec["var/log/apt/history.log"] = ("\nStart-Date: 2024-09-05  06:21:44\nCommandline: /usr/bin/unattended-upgrade\n"
                                       f"Upgrade: nvidia-driver-550:amd64 ({old}-0ubuntu0.24.04.1, {new}-0ubuntu0.24.04.1), "
                                       f"libnvidia-compute-550:amd64 ({old}-0ubuntu0.24.04.1, {new}-0ubuntu0.24.04.1)\n"
                                       "End-Date: 2024-09-05  06:22:31\n")
    return Machine(spec)


@case("machine-shop-70-debian-module-on-disk-older-than-userspace")
def machine_shop_70(broken: bool) -> Machine:
    """Debian 12 workstation with NVIDIA's CUDA repository: an interrupted upgrade left nvidia-smi and the libraries at
    525.85.12 and the DKMS module at 520.56.06, so even after a reboot the loaded module is 520.56.06 and NVML
    reports a Driver/library version mismatch; apt --fix-broken install finished the module."""
    new, old, k, host = "525.85.12", "520.56.06", "6.1.0-5-amd64", "bock"
    module = old if broken else new
    spec = ubuntu_gpu_host(host, k, new, "2204", ("0000:41:00.0",))
    spec["etc/os-release"] = ('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\n'
                              'VERSION="12 (bookworm)"\nVERSION_CODENAME=bookworm\nID=debian\n')
    spec["etc/debian_version"] = "12.0\n"
    drop(spec, f"lib/modules/{k}/kernel/nvidia-525srv", "lib/firmware/nvidia/")
    for name in ("nvidia", "nvidia-modeset", "nvidia-uvm", "nvidia-drm"):
        spec[f"lib/modules/{k}/updates/dkms/{name}.ko"] = ko(name, module, k, depends=(
            ("nvidia",) if name in ("nvidia-modeset", "nvidia-uvm") else ("drm", "drm_kms_helper", "nvidia-modeset")
            if name == "nvidia-drm" else ()))
    nv = "updates/dkms/nvidia.ko"
    spec[f"lib/modules/{k}/modules.dep"] = modules_dep(ubuntu_kernel_modules(k) + [
        (nv, ()), ("updates/dkms/nvidia-modeset.ko", (nv,)), ("updates/dkms/nvidia-uvm.ko", (nv,)),
        ("updates/dkms/nvidia-drm.ko", ("updates/dkms/nvidia-modeset.ko", nv, "kernel/drivers/gpu/drm/drm_kms_helper.ko",
                                        "kernel/drivers/gpu/drm/drm.ko"))])
    spec[f"var/lib/dkms/nvidia/{module}/{k}/x86_64/module/nvidia.ko"] = b""
    spec["proc/driver/nvidia/version"] = healthy.nvrm(module, "proprietary").replace(
        "gcc version 8.5.0 20210514 (Red Hat 8.5.0-22) (GCC)", "gcc version 12.2.0 (Debian 12.2.0-14)")
    spec["sys/module/nvidia/version"] = module + "\n"
    spec["var/lib/dpkg/status"] = healthy.dpkg_status([
        ("nvidia-smi", f"{new}-1"), ("libnvidia-ml1", f"{new}-1"), ("libcuda1", f"{new}-1"),
        ("nvidia-kernel-dkms", f"{module}-1"), ("nvidia-driver", f"{new}-1"), ("dkms", "3.0.10-8"),
        ("libc6", "2.36-8")])
    return Machine(spec)


# -- the open kernel modules on a GPU without a GSP ---------------------------------------------------------------------

@case("open-gpu-kernel-modules-322-open-module-on-volta")
def open_gpu_322(broken: bool) -> Machine:
    """An Ubuntu server with a Tesla V100 (Volta, 10de:1db5) on which the open kernel modules were built and
    installed from NVIDIA's repository: the open nvidia.ko refuses every GPU without a GSP ('not supported by open
    nvidia.ko because it does not include the required GPU System Processor'), so no GPU is initialised. The twin
    runs the proprietary module of the same version."""
    driver, k, host = "515.57", "5.15.0-41-generic", "dgx-v100"
    spec = ubuntu_gpu_host(host, k, driver, "1db5", ("0000:af:00.0",))
    flavor = "open" if broken else "proprietary"
    spec["proc/driver/nvidia/version"] = healthy.nvrm(driver, flavor)
    lines = kern_boot(host, k) + [(1157.036170, "PKCS#7 signature not signed with a trusted key"),
                                  (1157.043851, "nvidia-nvlink: Nvlink Core is being initialized, major device number 237")]
    if broken:
        lines += [(1157.046099, "NVRM: The NVIDIA GPU 0000:af:00.0 (PCI ID: 10de:1db5)"),
                  (1157.046099, "NVRM: installed in this system is not supported by open"),
                  (1157.046099, "NVRM: nvidia.ko because it does not include the required GPU"),
                  (1157.046099, "NVRM: System Processor (GSP)."),
                  (1157.046200, "nvidia: probe of 0000:af:00.0 failed with error -1"),
                  (1157.046210, "NVRM: The NVIDIA probe routine failed for 1 device(s)."),
                  (1157.046215, "NVRM: None of the NVIDIA devices were initialized.")]
        for key in [key for key in spec if key.endswith("0000:af:00.0/driver")]:
            del spec[key]
    else:
        lines += [(1157.2, f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {driver}  Wed Jun 22 19:35:33 UTC 2022")]
    spec["var/log/kern.log"] = syslog_lines(host, "Jul 16 10:12:03", lines)
    return Machine(spec)


@case("compute-gpu-installation-25-kernel-update-without-headers")
def gce_install_25(broken: bool) -> Machine:
    """A GCE Debian 11 VM with a Tesla P100 and the driver installed by Google's script through DKMS: an automatic
    kernel update booted 5.10.0-25-cloud-amd64 without its linux-headers package, so DKMS could not build the module
    and nvidia-smi 'couldn't communicate with the NVIDIA driver'; `apt-get install linux-headers-$(uname -r)` fixed
    it."""
    driver, old_k, new_k, host = "535.86.10", "5.10.0-24-cloud-amd64", "5.10.0-25-cloud-amd64", "p100-vm"
    spec = ubuntu_gpu_host(host, old_k, driver, "15f8", ("0000:00:04.0",), "Google Compute Engine", vendor="Google")
    spec["etc/os-release"] = ('PRETTY_NAME="Debian GNU/Linux 11 (bullseye)"\nNAME="Debian GNU/Linux"\nVERSION_ID="11"\n'
                              'VERSION="11 (bullseye)"\nVERSION_CODENAME=bullseye\nID=debian\n')
    spec["etc/debian_version"] = "11.7\n"
    drop(spec, f"lib/modules/{old_k}/kernel/nvidia-535srv", "lib/firmware/nvidia/")
    for name in ("nvidia", "nvidia-modeset", "nvidia-uvm", "nvidia-drm"):
        spec[f"lib/modules/{old_k}/updates/dkms/{name}.ko"] = ko(name, driver, old_k, depends=(
            ("nvidia",) if name in ("nvidia-modeset", "nvidia-uvm") else ("drm", "drm_kms_helper", "nvidia-modeset")
            if name == "nvidia-drm" else ()))
    nv = "updates/dkms/nvidia.ko"
    spec[f"lib/modules/{old_k}/modules.dep"] = modules_dep(ubuntu_kernel_modules(old_k) + [
        (nv, ()), ("updates/dkms/nvidia-modeset.ko", (nv,)), ("updates/dkms/nvidia-uvm.ko", (nv,)),
        ("updates/dkms/nvidia-drm.ko", ("updates/dkms/nvidia-modeset.ko", nv, "kernel/drivers/gpu/drm/drm_kms_helper.ko",
                                        "kernel/drivers/gpu/drm/drm.ko"))])
    spec[f"lib/modules/{old_k}/build"] = {"symlink": f"/usr/src/linux-headers-{old_k}"}
    spec[f"usr/src/linux-headers-{old_k}/Makefile"] = "VERSION = 5\n"
    spec[f"var/lib/dkms/nvidia/{driver}/{old_k}/x86_64/module/nvidia.ko"] = b""
    spec[f"var/lib/dkms/nvidia/{driver}/source"] = {"symlink": f"/usr/src/nvidia-{driver}"}
    packages = [("nvidia-driver", f"{driver}-1"), ("nvidia-kernel-dkms", f"{driver}-1"), ("dkms", "2.8.4-3"),
                (f"linux-image-{old_k}", "5.10.179-3"), (f"linux-headers-{old_k}", "5.10.179-3"),
                (f"linux-image-{new_k}", "5.10.179-5"), ("linux-image-cloud-amd64", "5.10.179-5"), ("libc6", "2.31-13+deb11u6")]
    spec[f"boot/vmlinuz-{new_k}"] = ""
    spec[f"lib/modules/{new_k}/modules.dep"] = modules_dep(ubuntu_kernel_modules(new_k))
    spec[f"lib/modules/{new_k}/modules.builtin"] = MODULES_BUILTIN
    spec["boot/vmlinuz"] = {"symlink": f"vmlinuz-{new_k}"}
    if broken:
        spec["proc/sys/kernel/osrelease"] = new_k + "\n"
        unload_nvidia(spec)
        spec["var/log/kern.log"] = syslog_lines(host, "Aug 22 06:25:03", kern_boot(host, new_k))
    else:
        # the headers were installed and DKMS built the module for the new kernel
        packages.append((f"linux-headers-{new_k}", "5.10.179-5"))
        spec["proc/sys/kernel/osrelease"] = new_k + "\n"
        spec[f"lib/modules/{new_k}/build"] = {"symlink": f"/usr/src/linux-headers-{new_k}"}
        spec[f"usr/src/linux-headers-{new_k}/Makefile"] = "VERSION = 5\n"
        for name in ("nvidia", "nvidia-modeset", "nvidia-uvm", "nvidia-drm"):
            spec[f"lib/modules/{new_k}/updates/dkms/{name}.ko"] = ko(name, driver, new_k, depends=(
                ("nvidia",) if name in ("nvidia-modeset", "nvidia-uvm") else ("drm", "drm_kms_helper", "nvidia-modeset")
                if name == "nvidia-drm" else ()))
        spec[f"lib/modules/{new_k}/modules.dep"] = modules_dep(ubuntu_kernel_modules(new_k) + [
            (nv, ()), ("updates/dkms/nvidia-modeset.ko", (nv,)), ("updates/dkms/nvidia-uvm.ko", (nv,)),
            ("updates/dkms/nvidia-drm.ko", ("updates/dkms/nvidia-modeset.ko", nv,
                                            "kernel/drivers/gpu/drm/drm_kms_helper.ko", "kernel/drivers/gpu/drm/drm.ko"))])
        spec[f"var/lib/dkms/nvidia/{driver}/{new_k}/x86_64/module/nvidia.ko"] = b""
    spec["proc/cmdline"] = f"BOOT_IMAGE=/boot/vmlinuz-{new_k} root=UUID=3a1b ro console=ttyS0,38400n8\n"
    spec["var/lib/dpkg/status"] = healthy.dpkg_status(packages)
    return Machine(spec)


@case("nvidia-docker-804-runfile-driver-lost-after-kernel-upgrade")
def nvidia_docker_804(broken: bool) -> Machine:
    """An Azure NC-series Ubuntu 16.04 VM whose cloud-init installed driver 396.26 with NVIDIA's .run installer (no
    DKMS): the image's pending upgrade installed kernel 4.15.0-1018-azure, the reboot it asked for booted it, and the
    module built for 4.13.0-1018-azure does not load there; nothing rebuilds a .run module."""
    driver, old_k, new_k, host = "396.26", "4.13.0-1018-azure", "4.15.0-1018-azure", "nc6-vm"
    spec = ubuntu_gpu_host(host, old_k, driver, "102d", ("0001:00:00.0",), "Virtual Machine",
                           vendor="Microsoft Corporation", runfile=True)
    drop(spec, "lib/firmware/nvidia/")
    spec[f"boot/vmlinuz-{new_k}"] = ""
    spec["boot/vmlinuz"] = {"symlink": f"vmlinuz-{new_k}"}
    spec[f"lib/modules/{new_k}/modules.dep"] = modules_dep(ubuntu_kernel_modules(new_k))
    spec[f"lib/modules/{new_k}/modules.builtin"] = MODULES_BUILTIN
    spec["var/lib/dpkg/status"] = healthy.dpkg_status([
        (f"linux-image-{old_k}", "4.13.0-1018.21"), (f"linux-image-{new_k}", "4.15.0-1018.18~16.04.1"),
        ("linux-image-azure", "4.15.0.1018.24"), ("nvidia-docker2", "2.0.3+docker18.03.1-1"), ("libc6", "2.23-0ubuntu10")])
    if broken:
        spec["proc/sys/kernel/osrelease"] = new_k + "\n"
        spec["proc/cmdline"] = f"BOOT_IMAGE=/boot/vmlinuz-{new_k} root=UUID=3a1b ro console=ttyS0\n"
        unload_nvidia(spec)
        spec["var/log/kern.log"] = syslog_lines(host, "Aug  3 09:14:22", kern_boot(host, new_k))
        spec["var/run/reboot-required"] = "*** System restart required ***\n"
    else:
        spec["boot/vmlinuz"] = {"symlink": f"vmlinuz-{old_k}"}
        drop(spec, f"boot/vmlinuz-{new_k}", f"lib/modules/{new_k}")
        spec["var/lib/dpkg/status"] = healthy.dpkg_status([
            (f"linux-image-{old_k}", "4.13.0-1018.21"), ("nvidia-docker2", "2.0.3+docker18.03.1-1"),
            ("libc6", "2.23-0ubuntu10")])
    return Machine(spec)


@case("nvidia-docker-137-nouveau-from-initramfs-after-restart")
def nvidia_docker_137(broken: bool) -> Machine:
    """An EC2 g2 Ubuntu instance with the .run driver: after a stop/start the kernel's initramfs (never regenerated
    with a nouveau blacklist) loads nouveau first, which takes the GPU, and nvidia-docker reports 'Could not load UVM
    kernel module'."""
    driver, k, host = "361.42", "4.4.0-28-generic", "ip-172-31-9-14"
    spec = ubuntu_gpu_host(host, k, driver, "11bf", ("0000:00:03.0",), "g2.2xlarge", runfile=True)
    drop(spec, "lib/firmware/nvidia/", "etc/modprobe.d/blacklist-nouveau.conf")
    if broken:
        unload_nvidia(spec)
        spec["proc/modules"] = ("nouveau 1499136 0 - Live 0x0\nmxm_wmi 16384 1 nouveau, Live 0x0\nttm 98304 1 nouveau, "
                                "Live 0x0\ndrm_kms_helper 155648 1 nouveau, Live 0x0\next4 1 1 - Live 0x0\n")
        import machines
        machines.pci(spec, "0000:00:03.0", "11bf", driver="nouveau")
        spec["var/log/kern.log"] = syslog_lines(host, "Jul 13 23:39:02", kern_boot(host, k) + [
            (3.112, "nouveau 0000:00:03.0: NVIDIA GK104 (0e4200a2)"),
            (3.240, "nouveau 0000:00:03.0: bios: version 80.04.d4.00.04"),
            (3.801, "[drm] Initialized nouveau 1.3.1 20120801 for 0000:00:03.0 on minor 0")])
    else:
        spec["etc/modprobe.d/blacklist-nouveau.conf"] = "blacklist nouveau\noptions nouveau modeset=0\n"
    return Machine(spec)


@case("pop-os-3811-dkms-580-fails-for-next-kernel")
def pop_os_3811(broken: bool) -> Machine:
    """Pop!_OS 22.04 with system76's nvidia-dkms-580-open 580.119.02: the update to kernel 6.17.9-76061709-generic
    could not build the module (DKMS 'Bad return status', make.log errors); the reporter rolled back to 6.17.4, which
    runs, and the next boot would take 6.17.9 again without a driver."""
    driver, k, new_k, host = "580.119.02", "6.17.4-76061704-generic", "6.17.9-76061709-generic", "pop-os"
    spec = ubuntu_gpu_host(host, k, driver, "2684", ("0000:01:00.0",))
    spec["proc/driver/nvidia/version"] = healthy.nvrm(driver, "open")
    spec["etc/os-release"] = ('NAME="Pop!_OS"\nVERSION="22.04 LTS"\nID=pop\nID_LIKE="ubuntu debian"\n'
                              'PRETTY_NAME="Pop!_OS 22.04 LTS"\nVERSION_ID="22.04"\nUBUNTU_CODENAME=jammy\n')
    spec[f"var/lib/dkms/nvidia/{driver}/{k}/x86_64/module/nvidia.ko.zst"] = b""
    if broken:
        spec[f"boot/vmlinuz-{new_k}"] = ""
        spec["boot/vmlinuz"] = {"symlink": f"vmlinuz-{new_k}"}
        spec[f"lib/modules/{new_k}/modules.dep"] = modules_dep(ubuntu_kernel_modules(new_k))
        spec[f"lib/modules/{new_k}/build"] = {"symlink": f"/usr/src/linux-headers-{new_k}"}
        spec[f"usr/src/linux-headers-{new_k}/Makefile"] = "VERSION = 6\n"
        spec[f"var/lib/dkms/nvidia/{driver}/build/make.log"] = (
            f"DKMS make.log for nvidia-{driver} for kernel {new_k} (x86_64)\nWed Jan 14 09:12:40 PM UTC 2026\n"
            f"make[1]: Entering directory '/usr/src/linux-headers-{new_k}'\n"
            f"/var/lib/dkms/nvidia/{driver}/build/nvidia-drm/nvidia-drm-drv.c:1745:10: error: 'struct drm_driver' has no "
            "member named 'date'\n"
            f"make[3]: *** [scripts/Makefile.build:287: /var/lib/dkms/nvidia/{driver}/build/nvidia-drm/nvidia-drm-drv.o] Error 1\n"
            "make: *** [Makefile:81: modules] Error 2\n")
    return Machine(spec)


@case("open-gpu-kernel-modules-696-open-driver-ignores-pascal-gpu")
def open_gpu_696(broken: bool) -> Machine:
    """A desktop with a Turing-or-later GPU and a GTX 1070 Ti (Pascal, 10de:1b82): the 560 driver installs the open
    kernel modules by default, which drive the first GPU and refuse the Pascal one (no GSP); the proprietary
    560.35.03 module drives both."""
    driver, k, host = "560.35.03", "6.8.0-41-generic", "ajvengo-pc"
    spec = ubuntu_gpu_host(host, k, driver, "2684", ("0000:01:00.0",))
    import machines
    machines.pci(spec, "0000:02:00.0", "1b82", cls="0x030000")
    spec["proc/driver/nvidia/version"] = healthy.nvrm(driver, "open" if broken else "proprietary")
    lines = kern_boot(host, k) + [(4.01, "nvidia: loading out-of-tree module taints kernel.")]
    if broken:
        lines += [(4.120, "NVRM: The NVIDIA GPU 0000:02:00.0 (PCI ID: 10de:1b82)"),
                  (4.120, "NVRM: installed in this system is not supported by open"),
                  (4.120, "NVRM: nvidia.ko because it does not include the required GPU"),
                  (4.120, "NVRM: System Processor (GSP)."),
                  (4.121, "nvidia 0000:02:00.0: probe with driver nvidia failed with error -1")]
        for key in [key for key in spec if key.endswith("0000:02:00.0/driver")]:
            del spec[key]
    lines += [(4.300, f"NVRM: loading NVIDIA UNIX {'Open ' if broken else ''}Kernel Module for x86_64  {driver}  "
                      "Release Build  (dvs-builder@U16-I3-D08-1-1)  Fri Aug 16 21:42:42 UTC 2024")]
    spec["var/log/kern.log"] = syslog_lines(host, "Aug 26 08:30:12", lines)
    return Machine(spec)


# -- driver/library mismatches reported through containers and cluster tooling ------------------------------------------

def _retag(value, old: str, new: str):
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, bytes):
        return value.replace(old.encode(), new.encode())
    if isinstance(value, dict) and "symlink" in value:
        return {"symlink": value["symlink"].replace(old, new)}
    return value


def retag(spec: Spec, old: str, new: str) -> Spec:
    """The same machine with another driver version: every path and file that names ``old`` names ``new``."""
    return {k.replace(old, new): _retag(v, old, new) for k, v in spec.items()}


@case("gpu-operator-544-fabric-manager-version-differs-from-driver")
def gpu_operator_544(broken: bool) -> Machine:
    """An HGX node with the 530.41.03 driver (CUDA 12.1's) and nvidia-fabricmanager-530 from apt, which resolved to
    530.30.02: the fabric manager refuses to start ('fabric manager NVIDIA GPU driver interface version 530.30.02
    don't match with driver version 530.41.03'), and CUDA on the NVSwitch fabric fails with 802."""
    driver = "530.41.03"
    spec = retag(healthy.nvswitch_hgx_h100(), "550.127.05", driver)
    fm = "530.30.02" if broken else driver
    spec["var/lib/dpkg/status"] = healthy.dpkg_status([
        ("nvidia-driver-530", f"{driver}-0ubuntu1"), ("nvidia-fabricmanager-530", f"{fm}-1"),
        ("libnvidia-nscq-530", f"{fm}-1"), ("libc6", "2.35-0ubuntu3.1"), ("mlnx-ofed-kernel-dkms", "23.04.OFED.23.04.0.5.3.1-1")])
    drop(spec, "usr/share/doc/nvidia-fabricmanager")
    spec[f"usr/share/doc/nvidia-fabricmanager-{fm}/README"] = "NVIDIA Fabric Manager\n"
    if broken:
        spec["var/log/fabricmanager.log"] = (
            f"[Jun 28 2023 09:12:01] [ERROR] [tid 3228] fabric manager NVIDIA GPU driver interface version {fm} don't "
            f"match with driver version {driver}. Please update with matching NVIDIA driver package.\n")
    nvml = nvml_fixture("hgx_h100_nvswitch", driver_version=driver)
    if broken:
        for dev in nvml["devices"]:
            if isinstance(dev.get("fabric"), dict):
                dev["fabric"] = {**dev["fabric"], "state": 1, "status": 0}
    return Machine(spec, nvml=nvml, device_nodes=["nvidia-modeset", "nvidia-nvswitch0", "nvidia-nvswitch1",
                                                 "nvidia-nvswitch2", "nvidia-nvswitch3", "nvidia-nvswitchctl",
                                                 "nvidia-uvm", "nvidia-uvm-tools"] + [f"nvidia{i}" for i in range(8)]
                   + ["nvidiactl"])


@case("nvidia-docker-182-api-mismatch-after-upgrade")
def nvidia_docker_182(broken: bool) -> Machine:
    """Ubuntu 16.04 with the graphics-drivers PPA: the driver went from 367.35 to 367.44 while the 367.35 module stayed
    loaded; nvidia-docker's service and nvidia-smi fail, and the kernel logs 'NVRM: API mismatch: the client has the
    version 367.44, but this kernel module has the version 367.35'. A reboot loaded 367.44."""
    new, old, k, host = "367.44", "367.35", "4.4.0-34-generic", "nyasara-linux"
    spec = ubuntu_gpu_host(host, k, new, "13c2", ("0000:01:00.0",))
    drop(spec, "lib/firmware/nvidia/")
    loaded = old if broken else new
    spec["proc/driver/nvidia/version"] = healthy.nvrm(loaded, "proprietary")
    spec["sys/module/nvidia/version"] = loaded + "\n"
    lines = kern_boot(host, k) + [(3.9, f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {old}  Mon Jul 11 23:14:18 PDT 2016")]
    if broken:
        lines += [(9871.2, f"NVRM: API mismatch: the client has the version {new}, but"),
                  (9871.2, f"NVRM: this kernel module has the version {old}.  Please"),
                  (9871.2, "NVRM: make sure that this kernel module and all NVIDIA driver"),
                  (9871.2, "NVRM: components have the same version.")]
    spec["var/log/kern.log"] = syslog_lines(host, "Aug 26 14:08:07", lines if broken else kern_boot(host, k) + [
        (3.9, f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {new}  Mon Aug 15 23:14:18 PDT 2016")])
    spec["var/lib/dpkg/status"] = healthy.dpkg_status([("nvidia-367", f"{new}-0ubuntu1"), ("nvidia-docker", "1.0.0~rc.3-1"),
                                                       ("docker-engine", "1.12.1-0~xenial"), ("libc6", "2.23-0ubuntu3")])
    return Machine(spec)


@case("ansible-slurm-appliance-287-cuda-role-upgrade-without-reboot")
def slurm_appliance_287(broken: bool) -> Machine:
    """A Rocky Linux 8 Slurm GPU node: the appliance's cuda role upgraded the DKMS driver from 530.30.02 to 535.54.03
    and enabled nvidia-persistenced before any reboot, so the daemon (a client of the new user space) met the old
    module: 'NVRM: API mismatch: the client has the version 535.54.03, but this kernel module has the version
    530.30.02' (rsyslog joins the driver's lines with #012). A reboot fixed it."""
    new, old = "535.54.03", "530.30.02"
    import machines
    spec = machines.p4d_rhel8_healthy()
    cur = str(spec["sys/module/nvidia/version"]).strip()
    spec = retag(spec, cur, new)
    loaded = old if broken else new
    spec["proc/driver/nvidia/version"] = machines.nvrm(loaded)
    spec["sys/module/nvidia/version"] = loaded + "\n"
    spec["etc/os-release"] = ('NAME="Rocky Linux"\nVERSION="8.8 (Green Obsidian)"\nID="rocky"\nID_LIKE="rhel centos fedora"\n'
                              'VERSION_ID="8.8"\nPLATFORM_ID="platform:el8"\nPRETTY_NAME="Rocky Linux 8.8 (Green Obsidian)"\n')
    k = str(spec["proc/sys/kernel/osrelease"]).strip()
    log = [f"Jun 30 10:58:01 gpu-0 kernel: Linux version {k} (mockbuild@iad1-prod-build001.bld.equ.rockylinux.org) #1 SMP",
           f"Jun 30 10:58:05 gpu-0 kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {loaded}  Thu Jun  1 2023"]
    if broken:
        log.append(f"Jun 30 11:07:05 gpu-0 kernel: NVRM: API mismatch: the client has the version {new}, but#012NVRM: "
                   f"this kernel module has the version {old}.  Please#012NVRM: make sure that this kernel module and "
                   "all NVIDIA driver#012NVRM: components have the same version.")
    spec["var/log/messages"] = "\n".join(log) + "\n"
    spec["var/log/dnf.rpm.log"] = healthy.dnf_rpm_log([f"nvidia-driver-3:{new}-1.el8.x86_64",
                                                       f"kmod-nvidia-latest-dkms-3:{new}-1.el8.x86_64"])
    return Machine(spec)


ARCH_OS = 'NAME="Arch Linux"\nPRETTY_NAME="Arch Linux"\nID=arch\nBUILD_ID=rolling\n'


def arch_host(host: str, k: str, driver: str, device: str) -> Spec:
    """An Arch Linux desktop (pacman, no dpkg), the nvidia-dkms package's module under updates/dkms as .ko.zst."""
    spec = ubuntu_gpu_host(host, k, driver, device, ("0000:01:00.0",))
    spec["etc/os-release"] = ARCH_OS
    drop(spec, "etc/debian_version", "var/lib/dpkg", f"lib/modules/{k}/kernel/nvidia-{driver.split('.')[0]}srv",
         "lib/firmware/nvidia/")
    spec["var/lib/pacman/local/ALPM_DB_VERSION"] = "9\n"
    return spec


@case("nvidia-all-394-dkms-module-not-rebuilt-after-upgrade")
def nvidia_all_394(broken: bool) -> Machine:
    """Arch with Frogging-Family's nvidia-all (DKMS, the open modules): the upgrade from 595.80 to 595.84 replaced the
    user space but the DKMS module for the running zen kernel stayed 595.80 (updates/dkms/nvidia.ko.zst), so even
    after a reboot the kernel logs 'NVRM: API mismatch: the client ... has the version 595.84, but this kernel module
    has the version 595.80'."""
    new, old, k, host = "595.84", "595.80", "7.0.12-zen1-1-zen", "mario-pc"
    module = old if broken else new
    spec = arch_host(host, k, new, "2b85")
    for name in ("nvidia", "nvidia-modeset", "nvidia-uvm", "nvidia-drm"):
        spec[f"lib/modules/{k}/updates/dkms/{name}.ko.zst"] = healthy.zstd_raw(ko(name, module, k, license="Dual MIT/GPL",
            depends=(("nvidia",) if name in ("nvidia-modeset", "nvidia-uvm") else
                     ("drm", "drm_kms_helper", "nvidia-modeset") if name == "nvidia-drm" else ())))
    z = "updates/dkms/nvidia.ko.zst"
    spec[f"lib/modules/{k}/modules.dep"] = modules_dep(ubuntu_kernel_modules(k) + [
        (z, ()), ("updates/dkms/nvidia-modeset.ko.zst", (z,)), ("updates/dkms/nvidia-uvm.ko.zst", (z,)),
        ("updates/dkms/nvidia-drm.ko.zst", ("updates/dkms/nvidia-modeset.ko.zst", z,
                                            "kernel/drivers/gpu/drm/drm_kms_helper.ko.zst", "kernel/drivers/gpu/drm/drm.ko.zst"))])
    spec[f"var/lib/dkms/nvidia/{module}/{k}/x86_64/module/nvidia.ko.zst"] = b""
    for fw in ("gsp_ga10x.bin", "gsp_tu10x.bin"):
        spec[f"usr/lib/firmware/nvidia/{new}/{fw}"] = b"\0"
    spec["proc/driver/nvidia/version"] = healthy.nvrm(module, "open")
    spec["sys/module/nvidia/version"] = module + "\n"
    lines = kern_boot(host, k) + [(6.1, f"NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  {module}  Release Build")]
    if broken:
        lines += [(9.424670, "NVRM: API mismatch: the client 'kwin_wayland' (pid 1005)"),
                  (9.424670, f"NVRM: has the version {new}, but this kernel module has"),
                  (9.424670, f"NVRM: the version {old}.  Please make sure that this"),
                  (9.424670, "NVRM: kernel module and all NVIDIA driver components"),
                  (9.424670, "NVRM: have the same version.")]
    spec["var/log/kern.log"] = syslog_lines(host, "Jun 19 20:48:35", lines)
    return Machine(spec)


@case("open-gpu-kernel-modules-526-390-dkms-fails-on-kernel-6-4")
def open_gpu_526(broken: bool) -> Machine:
    """Arch with the zen kernel and nvidia-390xx-dkms (a Fermi/Kepler card): the update to 6.4.1-zen1-1-zen left DKMS
    unable to build 390.157 ('Bad return status for module build', make.log errors): the 390 legacy branch does not
    build against 6.4, and the machine boots without a driver; 6.3.9 worked."""
    driver, old_k, new_k, host = "390.157", "6.3.9-zen1-1-zen", "6.4.1-zen1-1-zen", "alufd-pc"
    spec = arch_host(host, old_k, driver, "1180")
    for name in ("nvidia", "nvidia-modeset", "nvidia-uvm", "nvidia-drm"):
        spec[f"lib/modules/{old_k}/updates/dkms/{name}.ko.zst"] = healthy.zstd_raw(ko(name, driver, old_k, depends=(
            ("nvidia",) if name in ("nvidia-modeset", "nvidia-uvm") else ("drm", "drm_kms_helper", "nvidia-modeset")
            if name == "nvidia-drm" else ("ipmi_msghandler",))))
    spec[f"var/lib/dkms/nvidia/{driver}/{old_k}/x86_64/module/nvidia.ko.zst"] = b""
    if broken:
        dkms_failed_build(spec, driver, old_k, new_k, [
            f"/var/lib/dkms/nvidia/{driver}/build/nvidia-drm/nvidia-drm-drv.c:43:10: fatal error: drm/drm_pci.h: No "
            "such file or directory",
            f"/var/lib/dkms/nvidia/{driver}/build/common/inc/nv-mm.h:116:5: error: too few arguments to function "
            "'get_user_pages_remote'"], host)
    return Machine(spec)


@case("dalle-playground-104-container-nvml-mismatch")
def dalle_104(broken: bool) -> Machine:
    """Pop!_OS 22.04: system76's driver update took the user space to 515.48.07 while the 510.73.05 module stayed
    loaded, so `docker-compose up` fails in the NVIDIA hook ('nvidia-container-cli: initialization error: nvml error:
    driver/library version mismatch') and the kernel logs the API mismatch."""
    new, old, k, host = "515.48.07", "510.73.05", "5.17.5-76051705-generic", "pop-os"
    spec = ubuntu_gpu_host(host, k, new, "2206", ("0000:01:00.0",))
    spec["etc/os-release"] = ('NAME="Pop!_OS"\nVERSION="22.04 LTS"\nID=pop\nID_LIKE="ubuntu debian"\n'
                              'PRETTY_NAME="Pop!_OS 22.04 LTS"\nVERSION_ID="22.04"\nUBUNTU_CODENAME=jammy\n')
    loaded = old if broken else new
    spec["proc/driver/nvidia/version"] = healthy.nvrm(loaded, "proprietary")
    spec["sys/module/nvidia/version"] = loaded + "\n"
    spec["usr/bin/dockerd"] = healthy.elf(None)
    for b in ("nvidia-ctk", "nvidia-container-runtime", "nvidia-container-cli", "nvidia-container-toolkit"):
        spec[f"usr/bin/{b}"] = healthy.elf(None)
    spec["etc/docker/daemon.json"] = json.dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime",
                                                                          "runtimeArgs": []}}}, indent=4) + "\n"
    lines = kern_boot(host, k)
    if broken:
        lines += [(7386.259769, f"NVRM: API mismatch: the client has the version {new}, but"),
                  (7386.259769, f"NVRM: this kernel module has the version {old}.  Please"),
                  (7386.259769, "NVRM: make sure that this kernel module and all NVIDIA driver"),
                  (7386.259769, "NVRM: components have the same version.")]
    spec["var/log/kern.log"] = syslog_lines(host, "Jun 29 14:12:40", lines)
    spec["var/lib/dpkg/status"] = healthy.dpkg_status([
        ("system76-driver-nvidia", "22.04.6~1655232111~22.04~0a3b6e2"), ("nvidia-driver-515", f"{new}-1pop0~1655229372~22.04~a7efe0a"),
        ("nvidia-container-toolkit", "1.10.0-1pop1~1654283017~22.04~b5c4b6c"), ("docker.io", "20.10.12-0ubuntu4"),
        ("libc6", "2.35-0ubuntu3")])
    return Machine(spec)


@case("compute-gpu-installation-18-runfile-driver-after-kernel-upgrade")
def gce_install_18(broken: bool) -> Machine:
    """A GCE Ubuntu 22.04 VM whose driver Google's script installed with the .run installer before DKMS was present:
    an unattended kernel upgrade booted 5.19.0-1021-gcp, where no module exists, and nvidia-smi 'couldn't
    communicate with the NVIDIA driver'; the fix installs dkms first so the installer registers the module."""
    driver, old_k, new_k, host = "525.85.12", "5.15.0-1030-gcp", "5.19.0-1021-gcp", "t4-vm"
    spec = ubuntu_gpu_host(host, old_k, driver, "1eb8", ("0000:00:04.0",), "Google Compute Engine", vendor="Google",
                           runfile=True)
    spec[f"boot/vmlinuz-{new_k}"] = ""
    spec["boot/vmlinuz"] = {"symlink": f"vmlinuz-{new_k}"}
    spec[f"lib/modules/{new_k}/modules.dep"] = modules_dep(ubuntu_kernel_modules(new_k))
    spec[f"lib/modules/{new_k}/modules.builtin"] = MODULES_BUILTIN
    spec["var/lib/dpkg/status"] = healthy.dpkg_status([
        (f"linux-image-{old_k}", "5.15.0-1030.37"), (f"linux-image-{new_k}", "5.19.0-1021.23~22.04.1"),
        ("linux-image-gcp", "5.19.0.1021.23~22.04.1"), ("unattended-upgrades", "2.8ubuntu1"), ("libc6", "2.35-0ubuntu3.1")])
    if broken:
        spec["proc/sys/kernel/osrelease"] = new_k + "\n"
        spec["proc/cmdline"] = f"BOOT_IMAGE=/boot/vmlinuz-{new_k} root=PARTUUID=9c3f0a1b-01 ro console=ttyS0\n"
        unload_nvidia(spec)
        spec["var/log/kern.log"] = syslog_lines(host, "Apr  2 06:25:11", kern_boot(host, new_k))
    else:
        spec["boot/vmlinuz"] = {"symlink": f"vmlinuz-{old_k}"}
        drop(spec, f"boot/vmlinuz-{new_k}", f"lib/modules/{new_k}")
        spec["var/lib/dpkg/status"] = healthy.dpkg_status([(f"linux-image-{old_k}", "5.15.0-1030.37"),
                                                           ("libc6", "2.35-0ubuntu3.1")])
    return Machine(spec)


@case("azhpc-images-86-fabric-manager-upgraded-past-runfile-driver")
def azhpc_86(broken: bool) -> Machine:
    """An Azure ND A100 v4 node from the HPC image: the driver came from NVIDIA's .run installer (470.57.02), the fabric
    manager from the deb repository; an apt-get upgrade moved nvidia-fabricmanager-470 to 470.82.01, which refuses to
    run with the 470.57.02 driver, and CUDA fails to initialise on the NVSwitch fabric."""
    driver = "470.57.02"
    spec = retag(healthy.nvswitch_hgx_h100(), "550.127.05", driver)
    fm = "470.82.01" if broken else driver
    # the image of 2021: CUDA 11.4 of the driver's branch, not the HGX base's CUDA 12.4 and torch
    drop(spec, "usr/share/doc/nvidia-fabricmanager", "usr/local/cuda", "opt/conda")
    spec["proc/self/environ"] = healthy.environ({"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin",
                                                 "HOME": "/home/ops", "USER": "ops"})
    spec[f"usr/share/doc/nvidia-fabricmanager-{fm}/README"] = "NVIDIA Fabric Manager\n"
    spec["var/lib/dpkg/status"] = healthy.dpkg_status([
        ("nvidia-fabricmanager-470", f"{fm}-1"), ("libnvidia-nscq-470", f"{fm}-1"), ("libc6", "2.31-0ubuntu9.2")])
    spec["usr/bin/nvidia-uninstall"] = healthy.elf(None)
    spec["var/log/nvidia-installer.log"] = f"nvidia-installer log file '/var/log/nvidia-installer.log'\ninstaller version: {driver}\n"
    for bus in ("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0", "0000:9a:00.0", "0000:ab:00.0",
                "0000:ba:00.0", "0000:db:00.0"):
        spec[f"/sys/devices/pci0000:00/{bus}/device"] = "0x20b0\n"
    if broken:
        spec["var/log/fabricmanager.log"] = (
            f"[Jul 15 2021 08:02:11] [ERROR] [tid 2391] fabric manager NVIDIA GPU driver interface version {fm} don't "
            f"match with driver version {driver}. Please update with matching NVIDIA driver package.\n")
    nvml = nvml_fixture("hgx_h100_nvswitch", driver_version=driver)
    for dev in nvml["devices"]:
        dev["name"] = "NVIDIA A100-SXM4-40GB"
    return Machine(spec, nvml=nvml, device_nodes=["nvidia-modeset", "nvidia-nvswitch0", "nvidia-nvswitch1",
                                                 "nvidia-nvswitch2", "nvidia-nvswitch3", "nvidia-nvswitchctl",
                                                 "nvidia-uvm", "nvidia-uvm-tools"] + [f"nvidia{i}" for i in range(8)]
                   + ["nvidiactl"])
