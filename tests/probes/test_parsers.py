"""Probe parsers on verbatim captured text, malformed input included."""

from dl_doctor.probes.nvidia import parse_gpu_information, parse_proc_modules, parse_proc_version
from dl_doctor.probes.storage import mount_for, parse_mounts, tmpfs_size_option
from dl_doctor.probes.system import detect_container, parse_meminfo, parse_os_release

RHEL88_OS_RELEASE = '''NAME="Red Hat Enterprise Linux"
VERSION="8.8 (Ootpa)"
ID="rhel"
ID_LIKE="fedora"
VERSION_ID="8.8"
PLATFORM_ID="platform:el8"
PRETTY_NAME="Red Hat Enterprise Linux 8.8 (Ootpa)"
ANSI_COLOR="0;31"
CPE_NAME="cpe:/o:redhat:enterprise_linux:8::baseos"
HOME_URL="https://www.redhat.com/"
'''

UBUNTU2204_OS_RELEASE = '''PRETTY_NAME="Ubuntu 22.04.3 LTS"
NAME="Ubuntu"
VERSION_ID="22.04"
VERSION="22.04.3 LTS (Jammy Jellyfish)"
VERSION_CODENAME=jammy
ID=ubuntu
ID_LIKE=debian
'''


def test_os_release_rhel8():
    d = parse_os_release(RHEL88_OS_RELEASE)
    assert d["ID"] == "rhel" and d["VERSION_ID"] == "8.8" and d["PLATFORM_ID"] == "platform:el8"
    assert d["PRETTY_NAME"] == "Red Hat Enterprise Linux 8.8 (Ootpa)"


def test_os_release_unquoted_and_malformed_lines():
    d = parse_os_release(UBUNTU2204_OS_RELEASE + 'BROKEN="unterminated\nnot a line\n# comment\nlower=x\n')
    assert d["ID"] == "ubuntu" and d["VERSION_CODENAME"] == "jammy" and d["ID_LIKE"] == "debian"
    assert d["BROKEN"] == "unterminated"
    assert "lower" not in d


def test_meminfo():
    text = "MemTotal:       16318056 kB\nMemFree:         1000000 kB\nHugePages_Total:       0\nbad line\n"
    d = parse_meminfo(text)
    assert d["MemTotal"] == 16318056 * 1024 and d["HugePages_Total"] == 0 and "bad" not in d


DOCKER_MOUNTS = """overlay / overlay rw,relatime,lowerdir=/var/lib/docker/overlay2/l/ABC:/var/lib/docker/overlay2/l/DEF,upperdir=/x,workdir=/y 0 0
proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
tmpfs /dev tmpfs rw,nosuid,size=65536k,mode=755,inode64 0 0
shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=65536k,inode64 0 0
/dev/nvme0n1p1 /etc/hosts xfs rw,noatime,attr2,inode64,logbufs=8,logbsize=32k,noquota 0 0
/dev/nvme1n1 /mnt/my\\040data ext4 rw,relatime 0 0
garbage
"""


def test_mounts_docker_64m_shm_and_escapes():
    entries = parse_mounts(DOCKER_MOUNTS)
    assert len(entries) == 6
    shm = [e for e in entries if e["mountpoint"] == "/dev/shm"][0]
    assert tmpfs_size_option(shm["options"], None) == 64 * 1024 * 1024
    assert entries[-1]["mountpoint"] == "/mnt/my data"
    assert mount_for("/mnt/my data/x", entries)["device"] == "/dev/nvme1n1"
    assert mount_for("/home/u", entries)["mountpoint"] == "/"
    assert mount_for("/devx", entries)["mountpoint"] == "/"


def test_tmpfs_size_units_and_percent():
    assert tmpfs_size_option(["size=1g"], None) == 1024 ** 3
    assert tmpfs_size_option(["size=50%"], 8 * 1024 ** 3) == 4 * 1024 ** 3
    assert tmpfs_size_option(["size=50%"], None) is None
    assert tmpfs_size_option(["rw"], None) is None
    assert tmpfs_size_option(["size=lots"], None) is None


PROC_VERSION_PROPRIETARY = """NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023
GCC version:  gcc version 8.5.0 20210514 (Red Hat 8.5.0-18) (GCC)
"""
# Verbatim from a public build log (CUDA 12.5 on Ubuntu 22.04).
PROC_VERSION_OPEN = """NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  555.42.02  Release Build  (dvs-builder@U16-I3-A03-02-4)  Mon May 13 17:10:33 UTC 2024
GCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04)
"""
PROC_VERSION_VGPU = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  560.35.03  Release Build  (VirtualGPU)\n"
PROC_VERSION_ARM = "NVRM version: NVIDIA UNIX aarch64 Kernel Module  570.86.15  Thu Jan 23 21:04:44 UTC 2025\n"


def test_proc_version_proprietary():
    d = parse_proc_version(PROC_VERSION_PROPRIETARY)
    assert d["version"] == "535.104.05" and d["flavor"] == "proprietary" and d["arch"] == "x86_64"
    assert d["gcc"].startswith("gcc version 8.5.0")


def test_proc_version_open():
    d = parse_proc_version(PROC_VERSION_OPEN)
    assert d["version"] == "555.42.02" and d["flavor"] == "open" and d["arch"] == "x86_64"
    assert d["gcc"] == "gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04)"
    assert parse_proc_version(PROC_VERSION_VGPU)["version"] == "560.35.03"


def test_proc_version_aarch64_and_malformed():
    assert parse_proc_version(PROC_VERSION_ARM)["version"] == "570.86.15"
    assert parse_proc_version("NVRM version: garbage\n") == {}
    assert parse_proc_version("") == {}


def test_proc_modules():
    text = ("nvidia_uvm 1441792 0 - Live 0x0000000000000000 (POE)\n"
            "nvidia_drm 77824 0 - Live 0x0000000000000000 (POE)\n"
            "nvidia 56463360 2 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (POE)\n\n")
    assert parse_proc_modules(text) == ["nvidia_uvm", "nvidia_drm", "nvidia"]


def test_gpu_information():
    text = ("Model: \t\t Tesla T4\nIRQ:   \t\t 39\nGPU UUID: \t GPU-8b6a1c3e-0000-0000-0000-000000000000\n"
            "Video BIOS: \t 90.04.96.00.02\nBus Type: \t PCIe\nBus Location: \t 0000:00:1e.0\n")
    d = parse_gpu_information(text)
    assert d["model"] == "Tesla T4" and d["bus_location"] == "0000:00:1e.0"
    assert d["gpu_uuid"].startswith("GPU-")


def test_container_detection():
    assert detect_container({"/.dockerenv": ""}, {})["kind"] == "docker"
    k8s = detect_container({"/proc/1/cgroup": "0::/kubepods/burstable/pod1/abc\n"}, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert k8s["kind"] == "kubernetes" and k8s["in_container"]
    assert detect_container({"/proc/1/cgroup": "0::/init.scope\n"}, {}) == {"in_container": False, "kind": None,
                                                                           "evidence": []}
