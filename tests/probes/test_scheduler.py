"""The scheduler probe: Slurm's files as slurmd reads them, bounded against hostile input."""

from __future__ import annotations

from dl_doctor.host import Host
from dl_doctor.probes.scheduler import expand, expand_list, parse_conf, read_slurm


def test_slurm_ranges_expand_as_slurm_does():
    assert expand("/dev/nvidia[0-3]") == [f"/dev/nvidia{i}" for i in range(4)]
    assert expand("/dev/nvidia[0-1,5]") == ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia5"]
    assert expand("gpu[01-03]") == ["gpu01", "gpu02", "gpu03"]
    assert expand_list("/dev/nvidia0,/dev/nvidia[2-3]") == ["/dev/nvidia0", "/dev/nvidia2", "/dev/nvidia3"]
    assert expand("/dev/nvidia[a-b]") == ["/dev/nvidia[a-b]"]  # not a range: kept as written


def test_hostile_ranges_and_lines_are_bounded():
    assert len(expand("n[0-99999999]")) == 256
    assert len(expand_list(",".join(["x[0-9999]"] * 1000))) == 256
    recs = parse_conf(("Name=gpu File=/dev/nvidia0 " * 2000 + "\n") * 5000)
    assert len(recs) <= 512


def test_read_slurm_from_a_tree(tmp_path):
    (tmp_path / "etc/slurm").mkdir(parents=True)
    (tmp_path / "etc/slurm/slurm.conf").write_text("ClusterName=c\nGresTypes=gpu\nNodeName=gpu[01-02] Gres=gpu:4 \\\n"
                                                  "  CPUs=32\nSlurmdLogFile=/var/log/slurm/slurmd.log\n")
    (tmp_path / "etc/slurm/gres.conf").write_text("# comment\nAutoDetect=nvml\nNodeName=gpu01 Name=gpu File=/dev/nvidia[0-3]\n")
    (tmp_path / "etc/slurm/cgroup.conf").write_text("ConstrainDevices=yes\n")
    (tmp_path / "usr/lib64/slurm").mkdir(parents=True)
    (tmp_path / "usr/lib64/slurm/gres_gpu.so").write_bytes(b"\x7fELF")
    (tmp_path / "var/log/slurm").mkdir(parents=True)
    (tmp_path / "var/log/slurm/slurmd.log").write_text("[t] slurmd started\n[t] fatal: can't stat gres.conf file /dev/nvidia3\n")
    (tmp_path / "etc/hostname").write_text("gpu01.cluster\n")
    s = read_slurm(Host(sysroot=str(tmp_path)))
    assert s["autodetect"] == "nvml" and s["constrain_devices"] is True
    assert s["nodes"] == [{"names": ["gpu01", "gpu02"], "gres": "gpu:4"}]
    assert s["gres"][0]["files"] == [f"/dev/nvidia{i}" for i in range(4)] and s["gres"][0]["node_names"] == ["gpu01"]
    assert s["plugins"] == ["gres_gpu.so"] and s["any_plugins"] is True and s["hostname"] == "gpu01"
    assert s["log_lines"] == ["[t] fatal: can't stat gres.conf file /dev/nvidia3"]


def test_no_slurm_is_none(tmp_path):
    assert read_slurm(Host(sysroot=str(tmp_path))) is None
