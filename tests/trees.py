"""Small sysroot trees of real machine states, built at test time (symlinks included)."""

RHEL88_OS_RELEASE = '''NAME="Red Hat Enterprise Linux"
VERSION="8.8 (Ootpa)"
ID="rhel"
ID_LIKE="fedora"
VERSION_ID="8.8"
PLATFORM_ID="platform:el8"
PRETTY_NAME="Red Hat Enterprise Linux 8.8 (Ootpa)"
'''

UBUNTU2204_OS_RELEASE = '''PRETTY_NAME="Ubuntu 22.04.3 LTS"
NAME="Ubuntu"
VERSION_ID="22.04"
ID=ubuntu
ID_LIKE=debian
'''

MEMINFO_64G = "MemTotal:       65011712 kB\nMemAvailable:   60000000 kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\n"

HOST_MOUNTS = """/dev/nvme0n1p1 / xfs rw,noatime,attr2,inode64 0 0
proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0
"""

DOCKER_MOUNTS = """overlay / overlay rw,relatime,lowerdir=/a:/b,upperdir=/c,workdir=/d 0 0
proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=65536k,inode64 0 0
"""

NVRM_535 = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
            "GCC version:  gcc version 8.5.0 20210514 (Red Hat 8.5.0-18) (GCC)\n")

PROC_MODULES_NVIDIA = ("nvidia_uvm 1441792 0 - Live 0x0000000000000000 (POE)\n"
                       "nvidia 56463360 2 nvidia_uvm, Live 0x0000000000000000 (POE)\nxfs 1556480 2 - Live 0x0\n")
PROC_MODULES_NONE = "xfs 1556480 2 - Live 0x0000000000000000\nena 143360 0 - Live 0x0000000000000000\n"


def pci_gpu(bdf: str, device: str = "0x1eb8", driver: str = "nvidia") -> dict:
    """A GPU in /sys the way the kernel lays it out: a bus symlink into /sys/devices."""
    real = f"/sys/devices/pci0000:00/{bdf}"
    spec = {
        f"sys/bus/pci/devices/{bdf}": {"symlink": f"../../../devices/pci0000:00/{bdf}"},
        f"{real}/vendor": "0x10de\n",
        f"{real}/device": f"{device}\n",
        f"{real}/class": "0x030200\n",
    }
    if driver:
        spec[f"sys/bus/pci/drivers/{driver}/.keep"] = ""
        spec[f"{real}/driver"] = {"symlink": f"../../../bus/pci/drivers/{driver}"}
    return spec


def non_nvidia_pci(bdf: str) -> dict:
    real = f"/sys/devices/pci0000:00/{bdf}"
    return {f"sys/bus/pci/devices/{bdf}": {"symlink": f"../../../devices/pci0000:00/{bdf}"},
            f"{real}/vendor": "0x1d0f\n", f"{real}/device": "0xec20\n", f"{real}/class": "0x020000\n"}


def g4dn_docker_64m() -> dict:
    """A g4dn (T4) container started without --shm-size."""
    spec = {
        "etc/os-release": UBUNTU2204_OS_RELEASE,
        ".dockerenv": "",
        "proc/mounts": DOCKER_MOUNTS,
        "proc/meminfo": MEMINFO_64G,
        "proc/sys/kernel/osrelease": "5.15.0-1051-aws\n",
        "proc/sys/kernel/hostname": "3f2a9c1b7d4e\n",
        "proc/driver/nvidia/version": NVRM_535,
        "proc/modules": PROC_MODULES_NVIDIA,
        "proc/self/environ": b"PATH=/usr/local/nvidia/bin:/usr/bin\0HOME=/root\0NVIDIA_VISIBLE_DEVICES=all\0",
    }
    spec.update(pci_gpu("0000:00:1e.0"))
    spec.update(non_nvidia_pci("0000:00:05.0"))
    return spec


def rhel8_gpu_no_driver() -> dict:
    """RHEL 8.8 host after a kernel update: the GPU is there, the nvidia module is not loaded."""
    spec = {
        "etc/os-release": RHEL88_OS_RELEASE,
        "etc/redhat-release": "Red Hat Enterprise Linux release 8.8 (Ootpa)\n",
        "etc/hostname": "gpu-node-7.example.internal\n",
        "proc/mounts": HOST_MOUNTS,
        "proc/meminfo": MEMINFO_64G,
        "proc/sys/kernel/osrelease": "4.18.0-513.5.1.el8_9.x86_64\n",
        "proc/modules": PROC_MODULES_NONE,
        "lib/modules/4.18.0-477.27.1.el8_8.x86_64/extra/nvidia.ko.xz": "",
        "lib/modules/4.18.0-513.5.1.el8_9.x86_64/kernel/.keep": "",
    }
    spec.update(pci_gpu("0000:00:1e.0", driver=""))
    return spec


def healthy_host() -> dict:
    spec = {
        "etc/os-release": RHEL88_OS_RELEASE,
        "etc/hostname": {"symlink": "/etc/hostname.real"},
        "etc/hostname.real": "tree-host\n",
        "proc/mounts": HOST_MOUNTS,
        "proc/meminfo": MEMINFO_64G,
        "proc/sys/kernel/osrelease": "4.18.0-477.27.1.el8_8.x86_64\n",
        "proc/driver/nvidia/version": NVRM_535,
        "proc/modules": PROC_MODULES_NVIDIA,
    }
    spec.update(pci_gpu("0000:00:1e.0"))
    return spec
