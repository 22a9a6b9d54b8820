"""Parsers of the driver/kernel probes, on verbatim captured text (malformed included)."""

import gzip
import lzma

from dl_doctor.probes.cloud import is_ec2
from dl_doctor.probes.cuda import cuda_h_version
from dl_doctor.probes.kernel_log import current_boot, parse_kernel_log
from dl_doctor.probes.kmod import (classify_module_path, kernel_sort_key, newest_kernel, parse_bls_entry, parse_dnf_module,
                                parse_dpkg_status, parse_grubenv, parse_modinfo)
from dl_doctor.probes.nvidia import library_version, parse_mount_lines, parse_mountinfo
from dl_doctor.probes.storage import mount_for as mount_at
from dl_doctor.probes.nvml import normalize_bus_id, throttle_names

# Verbatim kernel log lines from public bug reports and write-ups.
XID_63 = "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate."
XID_79 = "May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus."
FALLEN_1 = "May 18 19:02:39 kernel: NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus."
FALLEN_2 = "[  412.331] NVRM: GPU at 0000:01:00.0 has fallen off the bus."
XID_OLD = "Jan 18 11:38:05 localhost kernel: [ 269.517039] NVRM: Xid (0000:01:00): 3, C 00000005 SC 00000007 M 00001ffc Data ffffffff"
XID_13 = ("Nov 25 15:40:58 cctvserver-MS-7B17 kernel: [159259.98] NVRM: Xid (PCI:0000:02:00): 13, pid=25450, "
          "Graphics SM Global Exception on (GPC 0, TPC 1, SM 1): Multiple Warp Errors")
RMINIT = "[    8.600582] NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x25:0x65:1468)"
RMINIT_DEV = "[    8.600674] NVRM: GPU 0000:01:00.0: rm_init_adapter failed, device minor number 0"
MISMATCH = ["[Sat Apr 13 23:38:47 2024] NVRM: API mismatch: the client has the version 535.171.04, but",
            "                           NVRM: this kernel module has the version 535.161.07.  Please",
            "                           NVRM: make sure that this kernel module and all NVIDIA driver"]


def test_xid_lines_new_and_old_formats():
    out = parse_kernel_log([XID_63, XID_79, XID_OLD, XID_13, "NVRM: Xid (garbage", "random line"])
    assert [(x["code"], x["bus"]) for x in out["xids"]] == [(63, "0000:10:1c"), (79, "0000:2b:00"), (3, "0000:01:00"),
                                                             (13, "0000:02:00")]
    assert out["xids"][0]["pid"] == "1896" and out["xids"][0]["text"].startswith("Row Remapper")
    assert out["xids"][1]["pid"] is None


def test_fallen_off_bus_and_init_failures():
    out = parse_kernel_log([FALLEN_1, FALLEN_2, RMINIT, RMINIT_DEV])
    assert out["fallen_off_bus"] == ["0000:01:00.0", "0000:2b:00.0"]
    assert out["init_failures"] == [{"bus": "0000:01:00.0", "code": "(0x25:0x65:1468)", "line": RMINIT.strip()}]


def test_api_mismatch_spans_two_lines():
    out = parse_kernel_log(MISMATCH)
    assert out["api_mismatches"] == [{"client": "535.171.04", "kernel_module": "535.161.07"}]
    assert parse_kernel_log(MISMATCH[1:])["api_mismatches"] == []  # the second half alone proves nothing


def test_current_boot_keeps_lines_after_the_last_boot():
    lines = ["Jan 1 kernel: Linux version 4.18.0-477", "Jan 1 kernel: NVRM: Xid (PCI:0000:10:1c): 79, old boot",
             "Jan 2 kernel: Linux version 4.18.0-513", "Jan 2 kernel: NVRM: loading"]
    assert current_boot(lines) == lines[2:]
    assert current_boot(lines[:2]) == lines[:2]
    assert current_boot(["no marker"]) == ["no marker"]


def test_modinfo_and_signature():
    blob = (b"\x7fELF...\0license=NVIDIA\0version=535.104.05\0vermagic=4.18.0-477.27.1.el8_8.x86_64 SMP mod_unload "
            b"modversions \0signer=DKMS module signing key\0" + b"\x00" * 8 + b"~Module signature appended~\n")
    info = parse_modinfo(blob)
    assert info["version"] == "535.104.05" and info["vermagic"].startswith("4.18.0-477.27.1.el8_8.x86_64 SMP")
    assert info["signed"] is True and info["signer"] == "DKMS module signing key"
    assert parse_modinfo(b"no modinfo here") == {"signed": False}
    # the probe decompresses .xz/.gz before parsing; the text survives a round trip
    assert parse_modinfo(lzma.decompress(lzma.compress(blob)))["version"] == "535.104.05"
    assert parse_modinfo(gzip.decompress(gzip.compress(blob)))["signed"]


def test_module_paths_and_kernel_order():
    assert classify_module_path("/lib/modules/K/weak-updates/nvidia/nvidia.ko.xz") == "weak-updates"
    assert classify_module_path("/lib/modules/K/updates/dkms/nvidia.ko") == "dkms"
    assert classify_module_path("/lib/modules/K/extra/nvidia.ko.xz") == "extra"
    assert classify_module_path("/lib/modules/K/kernel/nvidia-535srv/nvidia.ko") == "kernel"
    assert newest_kernel(["4.18.0-477.27.1.el8_8.x86_64", "4.18.0-513.5.1.el8_9.x86_64", "4.18.0-80.el8.x86_64"]) == \
        "4.18.0-513.5.1.el8_9.x86_64"
    assert newest_kernel(["5.15.0-1051-aws", "5.15.0-105-generic", "6.5.0-1014-aws"]) == "6.5.0-1014-aws"
    assert kernel_sort_key("5.15.0-1051-aws") > kernel_sort_key("5.15.0-105-aws")
    assert newest_kernel([]) is None


def test_boot_configuration_files():
    assert parse_grubenv("# GRUB Environment Block\nsaved_entry=ffffabcd-4.18.0-513.5.1.el8_9.x86_64\n"
                         "kernelopts=root=/dev/nvme0n1p1 ro\n###########")["saved_entry"] == \
        "ffffabcd-4.18.0-513.5.1.el8_9.x86_64"
    bls = parse_bls_entry("title Red Hat Enterprise Linux (4.18.0-513.5.1.el8_9.x86_64) 8.9 (Ootpa)\n"
                          "version 4.18.0-513.5.1.el8_9.x86_64\nlinux /vmlinuz-4.18.0-513.5.1.el8_9.x86_64\n"
                          "initrd /initramfs-4.18.0-513.5.1.el8_9.x86_64.img $tuned_initrd\n")
    assert bls["linux"] == "/vmlinuz-4.18.0-513.5.1.el8_9.x86_64"
    assert parse_dnf_module("[nvidia-driver]\nname=nvidia-driver\nstream=535-dkms\nprofiles=\nstate=enabled\n") == \
        {"name": "nvidia-driver", "stream": "535-dkms", "profiles": "", "state": "enabled"}


DPKG = """Package: nvidia-driver-535-server
Status: install ok installed
Priority: optional
Version: 535.104.05-0ubuntu0.22.04.1
Description: NVIDIA Server Driver metapackage
 continuation line: Version: 1.0

Package: linux-modules-nvidia-535-server-aws
Status: deinstall ok config-files
Version: 5.15.0-1051.56

Package: nvidia-fabricmanager-535
Status: install ok installed
Version: 535.104.05-1

Package: bash
Status: install ok installed
Version: 5.1-6ubuntu1
"""


def test_dpkg_status():
    pkgs = parse_dpkg_status(DPKG)
    assert pkgs == [{"package": "nvidia-driver-535-server", "version": "535.104.05-0ubuntu0.22.04.1"},
                    {"package": "nvidia-fabricmanager-535", "version": "535.104.05-1"}]


def test_dpkg_status_packages_start_lines_only():
    """A stanza counts from the file's first line on, and only at a line's start (not in a continuation line)."""
    text = ("Package: cuda-toolkit-12-4\nStatus: install ok installed\nVersion: 12.4.1-1\n"
            "Description: x\n Package: nvidia-not-a-stanza\n\nPackage: bash\nStatus: install ok installed\n"
            "Version: 5\n\nPackage: dkms\nStatus: install ok installed\nVersion: 2.8")
    assert parse_dpkg_status(text) == [{"package": "cuda-toolkit-12-4", "version": "12.4.1-1"},
                                       {"package": "dkms", "version": "2.8"}]
    assert parse_dpkg_status("") == [] and parse_dpkg_status("Package: bash\nStatus: installed") == []


def test_library_versions_and_misc():
    assert library_version("libnvidia-ml.so.535.104.05") == ("libnvidia-ml", "535.104.05")
    assert library_version("libcuda.so.550.54.14") == ("libcuda", "550.54.14")
    assert library_version("libcuda.so.1") is None and library_version("libnvidia-ml.so") is None
    assert cuda_h_version("#define CUDA_VERSION 12020\n") == "12.2"
    assert cuda_h_version("#define CUDA_VERSION 13000\n") == "13.0"
    assert cuda_h_version("nothing") is None
    assert normalize_bus_id(b"00000000:10:1C.0") == "0000:10:1c.0"
    assert throttle_names(0x1 | 0x40) == ["gpu_idle", "hw_thermal_slowdown"]
    assert is_ec2({"sys_vendor": "Amazon EC2"}, None)
    assert is_ec2({"sys_vendor": "Xen"}, "ec2e1916-9099-7caf-fd21-012345678901")
    assert not is_ec2({"sys_vendor": "QEMU"}, None)


# /proc/self/mountinfo of a container started by nvidia-container-cli (a file bind mount: ROOT is the host's path)
MOUNTINFO = """1503 1278 0:312 / / rw,relatime master:589 - overlay overlay rw,lowerdir=/l/A,upperdir=/c/diff,workdir=/c/work
1234 1503 259:1 /usr/lib/x86_64-linux-gnu/libcuda.so.535.129.03 /usr/lib/x86_64-linux-gnu/libcuda.so.535.129.03 ro,nosuid,nodev,relatime master:1 - ext4 /dev/nvme0n1p1 rw
1279 1505 0:5 /nvidia0 /dev/nvidia0 ro,nosuid,noexec master:2 shared:7 - devtmpfs udev rw,size=32G
1300 1503 259:1 /home/a\\040b /data\\040set rw - ext4 /dev/nvme0n1p1 rw
garbage line without the separator
1301 1503 0:1 / - proc
"""


def test_mountinfo_fields_escapes_and_malformed_lines():
    mounts = parse_mountinfo(MOUNTINFO)
    assert [m["mountpoint"] for m in mounts] == ["/", "/usr/lib/x86_64-linux-gnu/libcuda.so.535.129.03", "/dev/nvidia0",
                                                  "/data set"]
    assert mounts[1] == {"root": "/usr/lib/x86_64-linux-gnu/libcuda.so.535.129.03",
                         "mountpoint": "/usr/lib/x86_64-linux-gnu/libcuda.so.535.129.03", "fstype": "ext4",
                         "source": "/dev/nvme0n1p1"}
    assert mounts[2]["fstype"] == "devtmpfs" and mounts[3]["root"] == "/home/a b"
    assert len(parse_mountinfo(MOUNTINFO * 10, limit=6)) == 4  # bounded by the lines read
    assert parse_mountinfo("1 2 3:4 " + "/x" * 3000 + " /y rw - ext4 /dev/a rw\n") == []  # an absurd field


def test_mounts_fallback_and_the_mount_that_holds_a_path():
    mounts = parse_mount_lines("overlay / overlay rw 0 0\n/dev/nvme0n1p1 /usr/bin/nvidia-smi ext4 ro 0 0\nshort\n")
    assert mounts == [{"root": None, "mountpoint": "/", "fstype": "overlay", "source": "overlay"},
                      {"root": None, "mountpoint": "/usr/bin/nvidia-smi", "fstype": "ext4", "source": "/dev/nvme0n1p1"}]
    assert mount_at("/usr/bin/nvidia-smi", mounts)["fstype"] == "ext4"
    assert mount_at("/usr/bin/nvidia-smi-other", mounts)["mountpoint"] == "/"
    stacked = mounts + [{"root": "/", "mountpoint": "/", "fstype": "tmpfs", "source": "x"}]
    assert mount_at("/etc/hosts", stacked)["fstype"] == "tmpfs"  # the last of stacked mounts wins
