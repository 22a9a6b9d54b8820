"""EBS: diskstats arithmetic on recorded sequences, the statistics log page, identification on a tree."""

import json
import struct

import pytest

from dl_doctor.probes.ebs import (EBS_MAGIC, STATS_FIELDS, parse_diskstats, parse_ebs_stats_page, parse_volume_type_option,
                               rates, volume_id)

# /proc/diskstats lines (kernel 5.x/6.x format, 20 fields) taken one second apart on a busy gp3 volume.
DISKSTATS_T0 = """ 259       0 nvme0n1 182640 1553 11263458 87421 404912 160231 24876712 1005872 0 303188 1093293 0 0 0 0 3820 1021
 259       1 nvme0n1p1 182401 1553 11255138 87355 404912 160231 24876712 1005872 0 303140 1093227 0 0 0 0 0 0
 259       3 nvme1n1 9918412 12 2539099840 41983212 1820 45 119424 3187 12 5120740 41986399 0 0 0 0 0 0
   7       0 loop0 60 0 2074 14 0 0 0 0 0 24 14 0 0 0 0 0 0
"""
DISKSTATS_T1 = """ 259       0 nvme0n1 182652 1553 11264522 87431 404950 160240 24879912 1005950 0 303203 1093381 0 0 0 0 3822 1021
 259       1 nvme0n1p1 182413 1553 11256202 87365 404950 160240 24879912 1005950 0 303155 1093315 0 0 0 0 0 0
 259       3 nvme1n1 9921412 12 2540635840 41991212 1820 45 119424 3187 16 5121740 41994399 0 0 0 0 0 0
garbage line
"""


def test_diskstats_rates():
    before, after = parse_diskstats(DISKSTATS_T0), parse_diskstats(DISKSTATS_T1)
    assert set(before) == {"nvme0n1", "nvme0n1p1", "nvme1n1", "loop0"}
    r = rates(before["nvme1n1"], after["nvme1n1"], 1.0)
    assert r["iops"] == 3000.0 and r["read_iops"] == 3000.0 and r["write_iops"] == 0.0
    assert r["throughput_mibps"] == 750.0          # 1,536,000 sectors x 512 B
    assert r["avg_queue_depth"] == 8.0             # 8,000 weighted ms over 1 s
    assert r["in_flight"] == 16
    root = rates(before["nvme0n1"], after["nvme0n1"], 2.0)
    assert root["iops"] == 25.0 and root["write_iops"] == 19.0
    assert rates(before["nvme0n1"], after["nvme0n1"], 0) == {}


def stats_page(**values):
    page = bytearray(4096)
    struct.pack_into("<I", page, 0, EBS_MAGIC)
    struct.pack_into("<11Q", page, 8, *[values.get(f, 0) for f in STATS_FIELDS])
    return bytes(page)


def test_statistics_log_page():
    page = stats_page(total_read_ops=9921412, ebs_volume_performance_exceeded_iops=31_000_000,
                      ec2_instance_ebs_performance_exceeded_tp=500_000, volume_queue_length=12)
    stats = parse_ebs_stats_page(page)
    assert stats["total_read_ops"] == 9921412 and stats["ebs_volume_performance_exceeded_iops"] == 31_000_000
    assert stats["ec2_instance_ebs_performance_exceeded_tp"] == 500_000 and stats["volume_queue_length"] == 12
    bad = bytearray(page)
    struct.pack_into("<I", bad, 0, 0xEC2C0D7E)  # an instance-store page
    assert parse_ebs_stats_page(bytes(bad)) is None and parse_ebs_stats_page(b"short") is None


def test_identifiers_and_options():
    assert volume_id("vol0123456789abcdef0") == "vol-0123456789abcdef0"
    assert volume_id("vol-0abc") == "vol-0abc"
    assert parse_volume_type_option("vol-0abc=gp3:6000:500") == {"vol-0abc": {"type": "gp3", "iops": 6000,
                                                                               "throughput_mibps": 500.0}}
    assert parse_volume_type_option("nvme1n1=gp2") == {"nvme1n1": {"type": "gp2"}}
    with pytest.raises(ValueError):
        parse_volume_type_option("gp3")


def nvme_tree(spec, dev, model, serial, sectors):
    spec[f"sys/block/{dev}/device/model"] = model + "\n"
    spec[f"sys/block/{dev}/device/serial"] = serial + "\n"
    spec[f"sys/block/{dev}/size"] = f"{sectors}\n"


def test_identification_on_a_tree(run_cli, tree):
    spec = {"proc/mounts": "/dev/nvme0n1p1 / xfs rw 0 0\n", "etc/os-release": "ID=rhel\n",
            "sys/block/nvme0n1/nvme0n1p1/partition": "1\n"}
    nvme_tree(spec, "nvme0n1", "Amazon Elastic Block Store", "vol0123456789abcdef0", 419430400)
    nvme_tree(spec, "nvme1n1", "Amazon EC2 NVMe Instance Storage", "AWS1234", 7500000000)
    nvme_tree(spec, "nvme2n1", "Amazon EC2 NVMe Instance Storage", "AWS5678", 7500000000)
    r = run_cli("run", "--sysroot", str(tree(spec)), "--json", "-", "--only", "DLD-EBS-001", "--only", "DLD-DISK-003",
                "--ebs-volume-type", "vol-0123456789abcdef0=gp3")
    report = json.loads(r.stdout)
    vols = {v["device"]: v for v in report["facts"]["ebs"]["volumes"]}
    assert vols["nvme0n1"]["kind"] == "ebs" and vols["nvme0n1"]["volume_id"] == "vol-0123456789abcdef0"
    assert vols["nvme0n1"]["size_gib"] == 200.0 and vols["nvme0n1"]["mounted"]
    assert vols["nvme1n1"]["kind"] == "instance-store" and not vols["nvme1n1"]["mounted"]
    f = {x["id"]: x for x in report["findings"]}
    # idle local NVMe is capacity available, not a problem: a pass with a note and the way to use it
    assert f["DLD-DISK-003"]["status"] == "pass"
    assert "7152.6 GiB of instance-store NVMe is available, not mounted" in f["DLD-DISK-003"]["message"]
    assert any("mdadm --create /dev/md0 --level=0 --raid-devices=2" in c for c in f["DLD-DISK-003"]["fix"]["commands"])
    # a sysroot has no live I/O to sample: identification and limits only
    assert f["DLD-EBS-001"]["status"] == "pass"
    assert f["DLD-EBS-001"]["evidence"]["volumes"][0]["limits"] == {"type": "gp3", "iops": 3000,
                                                                     "throughput_mibps": 125, "burst_iops": None}
    bad = run_cli("run", "--ebs-volume-type", "gp3")
    assert bad.returncode == 2 and "VOL=TYPE" in bad.stderr


def test_instance_store_under_raid_or_lvm_is_in_use(run_cli, tree):
    """A DLAMI builds an LVM volume over the instance stores (/opt/dlami/nvme): the devices themselves are not in
    /proc/mounts, their holders (/sys/block/DEV/holders) say they are in use."""
    spec = {"proc/mounts": "/dev/nvme0n1p1 / xfs rw 0 0\n/dev/mapper/vg.01-lv_ephemeral /opt/dlami/nvme ext4 rw 0 0\n",
            "etc/os-release": "ID=rhel\n", "sys/block/nvme0n1/nvme0n1p1/partition": "1\n",
            "sys/block/nvme1n1/holders/dm-0": "", "sys/block/nvme2n1/nvme2n1p1/holders/md127": ""}
    nvme_tree(spec, "nvme0n1", "Amazon Elastic Block Store", "vol0123456789abcdef0", 419430400)
    nvme_tree(spec, "nvme1n1", "Amazon EC2 NVMe Instance Storage", "AWS1234", 7500000000)
    nvme_tree(spec, "nvme2n1", "Amazon EC2 NVMe Instance Storage", "AWS5678", 7500000000)
    nvme_tree(spec, "nvme3n1", "Amazon EC2 NVMe Instance Storage", "AWS9012", 7500000000)
    r = run_cli("run", "--sysroot", str(tree(spec)), "--json", "-", "--only", "DLD-DISK-003")
    report = json.loads(r.stdout)
    vols = {v["device"]: v for v in report["facts"]["ebs"]["volumes"]}
    assert vols["nvme1n1"]["holders"] == ["dm-0"] and vols["nvme2n1"]["holders"] == ["md127"]
    assert vols["nvme3n1"]["holders"] == []
    f = {x["id"]: x for x in report["findings"]}
    assert f["DLD-DISK-003"]["status"] == "pass"
    assert "3576.3 GiB of instance-store NVMe is available, not mounted (/dev/nvme3n1)" in f["DLD-DISK-003"]["message"]
