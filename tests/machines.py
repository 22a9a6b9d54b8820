"""Whole machines as sysroot trees plus recorded NVML state.

``snapshot_of(name)`` builds the machine's tree in a temporary directory, collects facts from it
with the real probes, adds what only a live host has (NVML, via the fake built from
tests/fixtures/nvml) and returns a snapshot as `dl-doctor collect` would have written it on
that machine. tests/fixtures/snapshots/*.json are these snapshots, recorded; test_machines.py
checks the recording is current and asserts each machine's exact findings.
"""

from __future__ import annotations

import lzma
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict

from conftest import FIXTURES, build_tree
from dl_doctor.engine import collect
from dl_doctor.host import Host
from dl_doctor.probes.nvml import collect_nvml
from dl_doctor.registry import load_registry
from fake_nvml import FakeNVML
from trees import MEMINFO_64G, RHEL88_OS_RELEASE

UBUNTU2204 = '''PRETTY_NAME="Ubuntu 22.04.4 LTS"
NAME="Ubuntu"
VERSION_ID="22.04"
VERSION="22.04.4 LTS (Jammy Jellyfish)"
ID=ubuntu
ID_LIKE=debian
'''
RHEL_K = "4.18.0-477.27.1.el8_8.x86_64"
UBUNTU_K = "5.15.0-1051-aws"
MEMINFO_1T = "MemTotal:       1073741824 kB\nMemAvailable:   1000000000 kB\nSwapTotal:             0 kB\n"
HOST_MOUNTS = ("/dev/nvme0n1p1 / xfs rw,noatime,attr2,inode64 0 0\nproc /proc proc rw 0 0\n"
               "tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0\n")


def nvrm(version: str, flavor: str = "proprietary") -> str:
    if flavor == "open":
        return (f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build  "
                f"(dvs-builder@U16-I3-B03-4-3)  Thu Feb 22 01:25:25 UTC 2024\nGCC version:  gcc version 8.5.0\n")
    return f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Sat Aug 19 01:15:15 UTC 2023\n"


def module_blob(version: str, kernel: str, signed: bool = True) -> bytes:
    body = (b"\x7fELF\0license=NVIDIA\0version=" + version.encode() + b"\0vermagic=" + kernel.encode() +
            b" SMP mod_unload modversions \0")
    return body + (b"\0\0~Module signature appended~\n" if signed else b"")


def pci(spec: Dict[str, Any], bdf: str, device: str, cls: str = "0x030200", driver: str = "nvidia") -> None:
    real = f"/sys/devices/pci0000:00/{bdf}"
    spec[f"sys/bus/pci/devices/{bdf}"] = {"symlink": f"../../../devices/pci0000:00/{bdf}"}
    spec[f"{real}/vendor"] = "0x10de\n"
    spec[f"{real}/device"] = f"0x{device}\n"
    spec[f"{real}/class"] = f"{cls}\n"
    if driver:
        spec[f"sys/bus/pci/drivers/{driver}/.keep"] = ""
        spec[f"{real}/driver"] = {"symlink": f"../../../bus/pci/drivers/{driver}"}


def dmi(spec: Dict[str, Any], instance_type: str) -> None:
    spec["sys/class/dmi/id/sys_vendor"] = "Amazon EC2\n"
    spec["sys/class/dmi/id/product_name"] = f"{instance_type}\n"
    spec["sys/class/dmi/id/board_asset_tag"] = "i-0123456789abcdef0\n"


def rhel_base(kernel: str, driver: str, flavor: str = "proprietary") -> Dict[str, Any]:
    spec: Dict[str, Any] = {
        # nvidia-kmod-common installs the GSP firmware of the driver's exact version
        f"lib/firmware/nvidia/{driver}/gsp_ga10x.bin": b"\0",
        f"lib/firmware/nvidia/{driver}/gsp_tu10x.bin": b"\0",
        "etc/os-release": RHEL88_OS_RELEASE,
        "etc/redhat-release": "Red Hat Enterprise Linux release 8.8 (Ootpa)\n",
        "etc/hostname": "ip-10-0-1-23.ec2.internal\n",
        "proc/sys/kernel/osrelease": kernel + "\n",
        "proc/sys/kernel/hostname": "ip-10-0-1-23.ec2.internal\n",
        "proc/mounts": HOST_MOUNTS,
        "proc/meminfo": MEMINFO_1T,
        "proc/cmdline": f"BOOT_IMAGE=(hd0,gpt2)/vmlinuz-{kernel} root=UUID=1234 ro console=ttyS0,115200n8\n",
        "proc/driver/nvidia/version": nvrm(driver, flavor),
        "proc/modules": ("nvidia_uvm 1441792 0 - Live 0x0 (POE)\nnvidia_drm 77824 0 - Live 0x0 (POE)\n"
                         "nvidia_modeset 1314816 1 nvidia_drm, Live 0x0 (POE)\nnvidia 56463360 2 nvidia_uvm, Live 0x0\n"
                         "xfs 1556480 2 - Live 0x0\nena 143360 0 - Live 0x0\n"),
        "proc/self/environ": b"PATH=/usr/local/bin:/usr/bin\0HOME=/home/ec2-user\0USER=ec2-user\0",
        f"boot/vmlinuz-{kernel}": "",
        f"lib/modules/{kernel}/modules.dep": "",
        f"lib/modules/{kernel}/extra/nvidia.ko.xz": lzma.compress(module_blob(driver, kernel)),
        f"var/lib/dkms/nvidia/{driver}/{kernel}/x86_64/module/nvidia.ko.xz": "",
        "boot/grub2/grubenv": f"# GRUB Environment Block\nsaved_entry=0123abcd-{kernel}\n",
        f"boot/loader/entries/0123abcd-{kernel}.conf": f"title RHEL ({kernel})\nlinux /vmlinuz-{kernel}\n",
        "etc/dnf/modules.d/nvidia-driver.module": f"[nvidia-driver]\nname=nvidia-driver\nstream={driver.split('.')[0]}-dkms\n"
                                                  "profiles=\nstate=enabled\n",
        "usr/lib/modprobe.d/dist-blacklist.conf": "blacklist nouveau\n",
        f"usr/lib64/libnvidia-ml.so.{driver}": "",
        "usr/lib64/libnvidia-ml.so.1": {"symlink": f"libnvidia-ml.so.{driver}"},
        f"usr/lib64/libcuda.so.{driver}": "",
        "usr/lib64/libcuda.so.1": {"symlink": f"libcuda.so.{driver}"},
        "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c": b"\x06\x00\x00\x00\x00",
        "sys/module/nvidia/version": driver + "\n",
        "usr/lib/systemd/system/nvidia-persistenced.service": "[Service]\n",
        "etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service":
            {"symlink": "/usr/lib/systemd/system/nvidia-persistenced.service"},
        "var/log/messages": (f"Nov 29 10:00:00 ip-10-0-1-23 kernel: Linux version {kernel} (mockbuild@x86-vm-07)\n"
                             f"Nov 29 10:00:05 ip-10-0-1-23 kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {driver}\n"),
    }
    return spec


def fabric_manager(spec: Dict[str, Any], version: str) -> None:
    spec["usr/lib/systemd/system/nvidia-fabricmanager.service"] = "[Service]\n"
    spec["etc/systemd/system/multi-user.target.wants/nvidia-fabricmanager.service"] = {
        "symlink": "/usr/lib/systemd/system/nvidia-fabricmanager.service"}
    spec[f"usr/share/doc/nvidia-fabricmanager-{version}/README"] = "Fabric Manager\n"


def cuda(spec: Dict[str, Any], version: str) -> None:
    mm = ".".join(version.split(".")[:2])
    spec[f"usr/local/cuda-{mm}/version.json"] = '{"cuda": {"name": "CUDA SDK", "version": "%s"}}' % version
    spec[f"usr/local/cuda-{mm}/bin/nvcc"] = ""
    spec["usr/local/cuda"] = {"symlink": f"/usr/local/cuda-{mm}"}


def p4d_rhel8_healthy() -> Dict[str, Any]:
    spec = rhel_base(RHEL_K, "535.104.05")
    dmi(spec, "p4d.24xlarge")
    for bus in ("10:1c", "10:1d", "20:1c", "20:1d", "90:1c", "90:1d", "a0:1c", "a0:1d"):
        pci(spec, f"0000:{bus}.0", "20b0")
    for n in range(6):
        pci(spec, f"0000:1{n + 1}:00.0", "1af1", cls="0x068000", driver="")
    fabric_manager(spec, "535.104.05")
    cuda(spec, "12.2.2")
    return spec


def p4d_secure_boot_unsigned_module() -> Dict[str, Any]:
    """The p4d with Secure Boot on and an unsigned nvidia.ko.xz for the running kernel: the module was refused."""
    spec = p4d_rhel8_healthy()
    spec["sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"] = b"\x06\x00\x00\x00\x01"
    spec["proc/modules"] = "xfs 1 1 - Live 0x0\n"
    del spec["proc/driver/nvidia/version"]
    del spec["sys/module/nvidia/version"]
    spec[f"lib/modules/{RHEL_K}/extra/nvidia.ko.xz"] = lzma.compress(module_blob("535.104.05", RHEL_K, signed=False))
    return spec


def p4d_after_driver_upgrade() -> Dict[str, Any]:
    """dnf upgraded the driver to 535.129.03 (DKMS rebuilt the module on disk) but nobody rebooted."""
    spec = p4d_rhel8_healthy()
    new = "535.129.03"
    for key in [k for k in spec if "535.104.05" in k and k.startswith(("usr/lib64", "usr/share/doc", "var/lib/dkms"))]:
        value = spec.pop(key)
        spec[key.replace("535.104.05", new)] = value if not isinstance(value, dict) else {
            "symlink": value["symlink"].replace("535.104.05", new)}
    spec["usr/lib64/libnvidia-ml.so.1"] = {"symlink": f"libnvidia-ml.so.{new}"}
    spec["usr/lib64/libcuda.so.1"] = {"symlink": f"libcuda.so.{new}"}
    spec[f"lib/modules/{RHEL_K}/extra/nvidia.ko.xz"] = lzma.compress(module_blob(new, RHEL_K))
    spec["var/log/messages"] += (
        "Nov 29 12:00:01 ip-10-0-1-23 kernel: NVRM: API mismatch: the client has the version 535.129.03, but\n"
        "Nov 29 12:00:01 ip-10-0-1-23 kernel: NVRM: this kernel module has the version 535.104.05.  Please\n")
    return spec


def p5_48xlarge() -> Dict[str, Any]:
    spec = rhel_base(RHEL_K, "550.54.15", flavor="open")
    dmi(spec, "p5.48xlarge")
    for bus in ("53:00", "64:00", "75:00", "86:00", "97:00", "a8:00", "b9:00", "ca:00"):
        pci(spec, f"0000:{bus}.0", "2330")
    for n in range(4):
        pci(spec, f"0000:0{n + 5}:00.0", "22a3", cls="0x068000", driver="")
    fabric_manager(spec, "550.54.15")
    cuda(spec, "12.4.1")
    return spec


def g5_ubuntu2204() -> Dict[str, Any]:
    k = UBUNTU_K
    spec: Dict[str, Any] = {
        "etc/os-release": UBUNTU2204,
        "etc/debian_version": "bookworm/sid\n",
        "etc/hostname": "ip-172-31-5-6\n",
        "proc/sys/kernel/osrelease": k + "\n",
        "proc/sys/kernel/hostname": "ip-172-31-5-6\n",
        "proc/mounts": HOST_MOUNTS.replace(" xfs ", " ext4 "),
        "proc/meminfo": MEMINFO_64G,
        "proc/cmdline": f"BOOT_IMAGE=/boot/vmlinuz-{k} root=PARTUUID=abcd ro console=tty1 console=ttyS0 nvme_core.io_timeout=4294967295\n",
        "proc/driver/nvidia/version": nvrm("535.129.03"),
        "proc/modules": "nvidia_uvm 1441792 0 - Live 0x0\nnvidia 56463360 1 nvidia_uvm, Live 0x0\next4 1 1 - Live 0x0\n",
        "proc/self/environ": b"PATH=/usr/bin:/bin\0HOME=/home/ubuntu\0USER=ubuntu\0",
        f"boot/vmlinuz-{k}": "",
        "boot/vmlinuz": {"symlink": f"vmlinuz-{k}"},
        f"lib/modules/{k}/modules.dep": "",
        f"lib/modules/{k}/kernel/nvidia-535srv/nvidia.ko": module_blob("535.129.03", k),
        "lib/modprobe.d/nvidia-installer-disable-nouveau.conf": "blacklist nouveau\noptions nouveau modeset=0\n",
        "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.129.03": "",
        "usr/lib/x86_64-linux-gnu/libcuda.so.535.129.03": "",
        "var/lib/dpkg/status": ("Package: nvidia-driver-535-server\nStatus: install ok installed\nVersion: 535.129.03-0ubuntu0.22.04.1\n\n"
                                f"Package: linux-modules-nvidia-535-server-{k}\nStatus: install ok installed\nVersion: {k}.56\n\n"
                                "Package: nvidia-container-toolkit\nStatus: install ok installed\nVersion: 1.14.3-1\n"),
        "usr/bin/dockerd": "",
        "usr/bin/nvidia-ctk": "",
        "usr/bin/nvidia-container-runtime": "",
        "etc/docker/daemon.json": '{"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}}}',
        "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c": b"\x06\x00\x00\x00\x00",
        "var/log/kern.log": f"Nov 29 09:00:00 ip-172-31-5-6 kernel: [    0.000000] Linux version {k} (buildd@lcy02)\n",
    }
    dmi(spec, "g5.2xlarge")
    pci(spec, "0000:00:1e.0", "2237")
    return spec


MACHINES: Dict[str, Dict[str, Any]] = {
    "p4d_rhel8_healthy": {"tree": p4d_rhel8_healthy, "nvml": "p4d_healthy"},
    "g5_ubuntu2204": {"tree": g5_ubuntu2204, "nvml": "g5_ubuntu"},
    "p5_48xlarge": {"tree": p5_48xlarge, "nvml": "p5_healthy"},
    "p4d_driver_upgrade_no_reboot": {"tree": p4d_after_driver_upgrade, "nvml": "mismatch"},
}

FIXED_DISKS = {"volumes": [{"paths": ["/"], "roles": ["root"], "mountpoint": "/", "fstype": "xfs",
                            "device": "/dev/nvme0n1p1", "total_bytes": 214748364800, "free_bytes": 150323855360,
                            "used_pct": 30.0, "inodes_total": 104857600, "inodes_free": 104000000,
                            "measured": "live"}], "errors": {}}


def snapshot_of(name: str) -> Dict[str, Any]:
    machine = MACHINES[name]
    with tempfile.TemporaryDirectory() as tmp:
        root = build_tree(Path(tmp), machine["tree"]())
        registry = load_registry()
        snap = collect([p for p in registry.probes if p.name not in ("nvml",)], Host(sysroot=str(root)),
                       {}, timeout=10)
    # What only the live machine has: NVML, and real disks.
    nvml_doc = FakeNVML.from_file(FIXTURES / "nvml" / f"{machine['nvml']}.json")
    snap["facts"]["nvml"] = collect_nvml(nvml_doc)
    snap["facts"]["disks"] = FIXED_DISKS
    snap.update(mode="live", sysroot=None, collected_at="2026-11-29T12:00:00Z", duration_s=0.5, commands=[],
                probes={}, timeout_s=5.0)
    snap["privilege"] = {"euid": 0, "is_root": True, "limited": []}
    return snap


BUILDERS: Dict[str, Callable[[], Dict[str, Any]]] = {name: m["tree"] for name, m in MACHINES.items()}


if __name__ == "__main__":  # re-record: cd tests && python machines.py
    import json as _json

    for _name in MACHINES:
        with open(FIXTURES / "snapshots" / f"{_name}.json", "w") as _fh:
            _json.dump(snapshot_of(_name), _fh, indent=1, sort_keys=True)
        print("recorded", _name)
