"""Issue 30 items 4 and 5: GPU homogeneity (NVML), work hung on a GPU (/proc, two samples), the NIC closest to each
GPU (sysfs) and NCCL's settings against it."""

from __future__ import annotations

import copy
import json

import pytest

from conftest import FIXTURES, build_tree, snapshot
from dl_doctor import compat_matrix
from dl_doctor.engine import evaluate
from dl_doctor.host import Host
from dl_doctor.probes import ProbeContext, Unavailable
from dl_doctor.probes import processes
from dl_doctor.probes.nvml import collect_nvml
from dl_doctor.probes.processes import gpu_hung_processes_probe, parse_stat, sample_hung
from dl_doctor.probes.topology import collect_topology, topology_probe
from dl_doctor.registry import load_registry
from fake_nvml import FakeNVML

MATRIX = compat_matrix.load(site=False)
CHECKS = {c.id: c for c in load_registry().checks if c.id.startswith("DLD-GPU-02")}

# H100 SXM5's default power limit is 700 W (NVIDIA's DGX H100/B200 user guide, "Managing Power Capping": the
# Redfish example shows "DefaultSetPoint": 700 -- https://docs.nvidia.com/dgx/dgxb200-user-guide/ and
# https://www.easymanua.ls/nvidia/dgx-b200/manual?p=61). The VBIOS/InfoROM strings have NVIDIA's formats
# (nvidia-smi -q: "VBIOS Version : 96.00.xx.00.xx", "Image Version : G520.0200.00.05"); the values are illustrative.
FIRMWARE = {"vbios": "96.00.89.00.01", "inforom": "G520.0200.00.05", "power_limit_mw": 700000,
            "power_default_limit_mw": 700000, "app_clocks": [1980, 2619]}


def p5(changes=None):
    """The recorded p5 (8x H100) with firmware on every GPU; ``changes`` maps a GPU index to firmware overrides."""
    rec = json.loads((FIXTURES / "nvml" / "p5_healthy.json").read_text())
    for i, dev in enumerate(rec["devices"]):
        dev["firmware"] = {**copy.deepcopy(FIRMWARE), **(changes or {}).get(i, {})}
    return collect_nvml(FakeNVML(rec))


def findings(facts, *ids):
    return {f.id.split(":")[0]: f for f in evaluate(snapshot(facts), [CHECKS[i] for i in ids], MATRIX)}


def gpu_facts(nvml):
    return {"gpu_pci": {"gpu_count": len(nvml["devices"]), "devices": []}, "nvml": nvml}


# -- homogeneity ----------------------------------------------------------------------------------------------------

def test_the_probe_records_firmware_power_and_clocks():
    d = p5()["devices"][0]
    assert d["vbios_version"] == "96.00.89.00.01" and d["inforom_image_version"] == "G520.0200.00.05"
    assert d["power_limit_mw"] == 700000 and d["power_default_limit_mw"] == 700000
    assert d["applications_clocks_mhz"] == {"graphics": 1980, "memory": 2619}


def test_a_recording_without_firmware_is_unknown_and_the_checks_skip():
    nvml = collect_nvml(FakeNVML.from_file(FIXTURES / "nvml" / "p5_healthy.json"))
    d = nvml["devices"][0]
    assert d["vbios_version"] is None and "vbios_version" in d["unsupported"]
    assert d["applications_clocks_mhz"] == {"graphics": None, "memory": None}
    out = findings(gpu_facts(nvml), "DLD-GPU-020", "DLD-GPU-021", "DLD-GPU-022")
    assert {f.status.value for f in out.values()} == {"skip"}


def test_one_gpu_with_another_vbios_is_named_beside_the_majority():
    out = findings(gpu_facts(p5({5: {"vbios": "96.00.74.00.11"}})), "DLD-GPU-020")["DLD-GPU-020"]
    assert out.status.value == "warn"
    assert "GPU 5" in out.message and "96.00.74.00.11" in out.message
    assert "7 of 8 NVIDIA H100 80GB HBM3 GPUs have 96.00.89.00.01" in out.message
    assert "GPU 4" not in out.message


def test_the_healthy_twin_with_equal_firmware_passes():
    out = findings(gpu_facts(p5()), "DLD-GPU-020", "DLD-GPU-021", "DLD-GPU-022")
    assert {k: f.status.value for k, f in out.items()} == {"DLD-GPU-020": "pass", "DLD-GPU-021": "pass",
                                                           "DLD-GPU-022": "pass"}


def test_inforom_power_limit_and_clocks_that_differ_warn_with_a_fix():
    nvml = p5({2: {"inforom": "G520.0200.00.04"}, 3: {"power_limit_mw": 500000},
                 6: {"app_clocks": [1755, 2619]}})
    out = findings(gpu_facts(nvml), "DLD-GPU-020", "DLD-GPU-021", "DLD-GPU-022")
    assert out["DLD-GPU-020"].status.value == "warn" and "InfoROM image" in out["DLD-GPU-020"].message
    assert "VBIOS" not in out["DLD-GPU-020"].message
    power = out["DLD-GPU-021"]
    assert power.status.value == "warn" and "GPU 3" in power.message and "500 W" in power.message
    assert "700 W" in power.message and "sudo nvidia-smi -i 3 -pl 700" in power.fix.commands
    clocks = out["DLD-GPU-022"]
    assert clocks.status.value == "warn" and "GPU 6" in clocks.message and "1755 MHz graphics" in clocks.message
    assert "sudo nvidia-smi -i 6 -ac 2619,1980" in clocks.fix.commands


def test_gpus_of_different_models_are_not_compared():
    nvml = p5({7: {"vbios": "92.00.45.00.06"}})
    nvml["devices"][7]["name"] = "NVIDIA A10G"
    assert findings(gpu_facts(nvml), "DLD-GPU-020")["DLD-GPU-020"].status.value == "pass"


def test_an_even_split_has_no_majority_and_still_warns():
    nvml = p5({i: {"power_limit_mw": 600000} for i in range(4)})
    out = findings(gpu_facts(nvml), "DLD-GPU-021")["DLD-GPU-021"]
    assert out.status.value == "warn" and "split evenly" in out.message


# -- hung work ------------------------------------------------------------------------------------------------------

def stat(pid, comm, state, start="4242"):
    # /proc/PID/stat: pid (comm) state ppid pgrp ... field 22 is the start time (proc(5))
    fields = [state, "1", str(pid), str(pid), "0", "-1", "4194560"] + ["0"] * 14
    fields[19] = start
    return f"{pid} ({comm}) " + " ".join(fields) + "\n"


def proc_tree(tmp_path, procs):
    spec = {}
    for pid, p in procs.items():
        spec[f"proc/{pid}/stat"] = stat(pid, p.get("comm", "python"), p["state"], p.get("start", "4242"))
        spec[f"proc/{pid}/cmdline"] = p.get("cmdline", "python\0train.py\0")
        spec[f"proc/{pid}/wchan"] = p.get("wchan", "0")
        spec[f"proc/{pid}/fd"] = {"dir": True}
        for n, target in enumerate(p.get("fds", [])):
            spec[f"proc/{pid}/fd/{n}"] = {"symlink": target}
    build_tree(tmp_path, spec)
    return Host(sysroot=str(tmp_path))


def test_stat_parsing_takes_the_comm_up_to_the_last_parenthesis():
    assert parse_stat(stat(7, "a) S (b", "D")) == ("a) S (b", "D", "4242")
    assert parse_stat(stat(7, "two\nlines )", "R")) == ("two\nlines )", "R", "4242")
    assert parse_stat("7 (no end R 1 2") is None and parse_stat("7 (x) D") is None


def test_a_process_in_d_state_in_both_samples_holding_a_gpu_fails(tmp_path):
    host = proc_tree(tmp_path, {
        100: {"state": "D", "comm": "pt_main) D (x", "wchan": "os_acquire_spinlock",
              "fds": ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia0", "/tmp/log"]},
        101: {"state": "D", "fds": ["/dev/sda"]},          # D, but no GPU
        102: {"state": "S", "fds": ["/dev/nvidia1"]},      # holds a GPU, not in D
    })
    slept = []
    out = sample_hung(host, slept.append)
    assert slept == [1.0] and out["samples"] == 2 and out["candidates"] == 1 and out["d_state"] == 2
    assert out["hung"] == [{"pid": 100, "comm": "pt_main) D (x", "cmdline": "python train.py",
                            "wchan": "os_acquire_spinlock", "devices": ["/dev/nvidia0", "/dev/nvidiactl"]}]
    res = findings({"gpu_pci": {"gpu_count": 1}, "gpu_hung_processes": out}, "DLD-GPU-023")["DLD-GPU-023"]
    assert res.status.value == "fail" and "PID 100 (pt_main) D (x)" in res.message
    assert "os_acquire_spinlock" in res.message


def test_a_process_in_d_state_only_in_the_first_sample_is_nothing(tmp_path):
    host = proc_tree(tmp_path, {100: {"state": "D", "fds": ["/dev/nvidia0"]}})

    def wake(seconds):  # between the samples the process woke up
        (tmp_path / "proc/100/stat").write_text(stat(100, "python", "S"))
    out = sample_hung(host, wake)
    assert out["samples"] == 2 and out["candidates"] == 1 and out["hung"] == []
    res = findings({"gpu_pci": {"gpu_count": 1}, "gpu_hung_processes": out}, "DLD-GPU-023")["DLD-GPU-023"]
    assert res.status.value == "pass"


def test_a_reused_pid_is_not_the_same_hung_process(tmp_path):
    host = proc_tree(tmp_path, {100: {"state": "D", "fds": ["/dev/nvidia0"]}})
    out = sample_hung(host, lambda s: (tmp_path / "proc/100/stat").write_text(stat(100, "other", "D", start="9999")))
    assert out["hung"] == []


def test_a_healthy_machine_takes_one_sample_and_no_second(tmp_path):
    host = proc_tree(tmp_path, {1: {"state": "S", "fds": ["/dev/nvidia0"]}, 2: {"state": "R"}})
    out = sample_hung(host, lambda s: pytest.fail("slept on a healthy machine"))
    assert out["samples"] == 1 and out["interval_s"] is None and out["hung"] == []


def test_a_wait_outside_the_driver_warns_and_does_not_drain(tmp_path):
    host = proc_tree(tmp_path, {100: {"state": "D", "wchan": "nfs_wait_bit_killable", "fds": ["/dev/nvidia3"]}})
    out = sample_hung(host, lambda s: None)
    res = findings({"gpu_pci": {"gpu_count": 1}, "gpu_hung_processes": out}, "DLD-GPU-023")["DLD-GPU-023"]
    assert res.status.value == "warn" and "nfs_wait_bit_killable" in res.message


def test_hostile_proc_newlines_in_comm_are_escaped_and_the_scan_is_bounded(tmp_path, monkeypatch):
    procs = {pid: {"state": "S"} for pid in range(1000, 1300)}
    procs[1001] = {"state": "D", "comm": "evil\n\x1b[2J)", "fds": ["/dev/nvidia0"], "wchan": "uvm_wait"}
    host = proc_tree(tmp_path, procs)
    build_tree(tmp_path, {"proc/self": {"dir": True}, "proc/not-a-pid": "x"})
    monkeypatch.setattr(processes, "MAX_STAT_PIDS", 100)
    out = sample_hung(host, lambda s: None)
    assert out["scanned"] == 100 and out["truncated"] is True
    assert [p["comm"] for p in out["hung"]] == ["evil\n\x1b[2J)"]
    res = findings({"gpu_pci": {"gpu_count": 1}, "gpu_hung_processes": out}, "DLD-GPU-023")["DLD-GPU-023"]
    assert res.status.value == "fail" and "\n" not in res.message and "\x1b" not in res.message
    assert "evil\\x0a\\x1b[2J)" in res.message


def test_hung_work_is_live_only(tmp_path):
    with pytest.raises(Unavailable):
        gpu_hung_processes_probe.func(ProbeContext(host=Host(sysroot=str(tmp_path))))


# -- topology -------------------------------------------------------------------------------------------------------

def pci_device(spec, path, vendor="0x10de", cls="0x030200", numa=0, cpus="0-47"):
    """A PCI function at ``path`` below /sys/devices (its last component is its address), linked from
    /sys/bus/pci/devices as the kernel does (a relative link into /sys/devices)."""
    address = path.rsplit("/", 1)[-1]
    spec[f"sys/devices/{path}/vendor"] = vendor + "\n"
    spec[f"sys/devices/{path}/class"] = cls + "\n"
    spec[f"sys/devices/{path}/numa_node"] = f"{numa}\n"
    spec[f"sys/devices/{path}/local_cpulist"] = cpus + "\n"
    spec[f"sys/bus/pci/devices/{address}"] = {"symlink": f"../../../devices/{path}"}
    return address


def nic(spec, path, rdma=None, net=None, numa=0):
    address = pci_device(spec, path, vendor="0x1d0f", cls="0x020000", numa=numa)
    for cls, name in (("infiniband", rdma), ("net", net)):
        if name:
            spec[f"sys/devices/{path}/{cls}/{name}/device"] = {"symlink": "../../../" + address}
            spec[f"sys/class/{cls}/{name}"] = {"symlink": f"../../devices/{path}/{cls}/{name}"}


def p4d_like(tmp_path, efa_numa=None):
    """A p4d.24xlarge-like tree: 8 A100s in pairs under four PCIe switches (the bus numbers of the recorded
    tests/fixtures/nvml/p4d_healthy.json: 10:1c.0, 10:1d.0, 20:1c.0 ...), one EFA device under each switch (as
    `nvidia-smi topo -m` on p4d shows PXB between a GPU pair and its EFA), two NUMA nodes, and the ENA interface on
    the root bus. The bridge addresses are illustrative. ``efa_numa`` moves one switch's EFA device to another root
    complex on the other NUMA node."""
    spec = {}
    for i, bus in enumerate(("10", "20", "90", "a0")):
        numa = 0 if i < 2 else 1
        cpus = "0-23,48-71" if numa == 0 else "24-47,72-95"
        root = f"pci0000:{bus[0]}0"
        switch = f"{root}/0000:{bus[0]}0:00.0/0000:{int(bus, 16) - 2:02x}:00.0/0000:{int(bus, 16) - 1:02x}:00.0"
        for dev in ("1c", "1d"):
            pci_device(spec, f"{switch}/0000:{bus}:{dev}.0", numa=numa, cpus=cpus)
        if efa_numa is not None and i == 0:
            nic(spec, f"pci0000:b0/0000:b0:00.0/0000:b1:1b.0", rdma="efa_0", numa=efa_numa)
        else:
            nic(spec, f"{switch}/0000:{bus}:1b.0", rdma=f"efa_{i}", numa=numa)
    nic(spec, "pci0000:00/0000:00:06.0", net="ens32", numa=0)
    pci_device(spec, "pci0000:00/0000:00:02.0", vendor="0x1234", cls="0x030000")  # a VGA device, not NVIDIA
    build_tree(tmp_path, spec)
    return Host(sysroot=str(tmp_path))


def test_a_p4d_like_tree_puts_each_gpu_beside_its_efa_device(tmp_path):
    topo = topology_probe.func(ProbeContext(host=p4d_like(tmp_path)))
    gpus = {g["address"]: g for g in topo["gpus"]}
    assert len(gpus) == 8 and gpus["0000:10:1c.0"]["numa_node"] == 0 and gpus["0000:a0:1d.0"]["numa_node"] == 1
    assert gpus["0000:90:1c.0"]["local_cpulist"] == "24-47,72-95"
    assert gpus["0000:10:1c.0"]["pci_path"] == "pci0000:10/0000:10:00.0/0000:0e:00.0/0000:0f:00.0/0000:10:1c.0"
    assert gpus["0000:20:1d.0"]["closest_rdma"] == {"address": "0000:20:1b.0", "name": "efa_1", "rdma": True,
                                                    "closeness": "pcie-switch"}
    assert gpus["0000:10:1c.0"]["closest_nic"]["name"] == "efa_0"
    assert {n["address"]: (n["rdma"], n["net"]) for n in topo["nics"]}["0000:00:06.0"] == ([], ["ens32"])
    res = findings({"gpu_pci": {"gpu_count": 8}, "topology": topo, "network": {"env": {}}},
                   "DLD-GPU-024")["DLD-GPU-024"]
    assert res.status.value == "pass" and "pcie-switch: GPU 0000:10:1c.0" in res.message
    assert "through the CPU" not in res.message


def test_an_efa_device_on_the_other_numa_node_is_noted_in_a_pass(tmp_path):
    topo = collect_topology(p4d_like(tmp_path, efa_numa=1))
    gpus = {g["address"]: g for g in topo["gpus"]}
    # GPU 10:1c.0's switch lost its EFA device: the nearest is on its NUMA node's other switch (20:1b.0)
    assert gpus["0000:10:1c.0"]["closest_rdma"]["closeness"] == "numa-node"
    assert gpus["0000:10:1c.0"]["closest_rdma"]["name"] == "efa_1"
    res = findings({"gpu_pci": {"gpu_count": 8}, "topology": topo}, "DLD-GPU-024")["DLD-GPU-024"]
    assert res.status.value == "pass" and "2 GPU(s) have no RDMA device on their PCIe switch (NCCL path PHB)" \
        in res.message


def test_a_gpu_without_a_nic_on_its_numa_node_on_a_nic_per_gpu_node_warns(tmp_path):
    spec = {}
    pci_device(spec, "pci0000:00/0000:00:01.0/0000:01:00.0", numa=0)
    pci_device(spec, "pci0000:80/0000:80:01.0/0000:81:00.0", numa=1)
    nic(spec, "pci0000:00/0000:00:01.0/0000:02:00.0", rdma="mlx5_0", net="ib0", numa=0)
    nic(spec, "pci0000:00/0000:00:03.0/0000:03:00.0", rdma="mlx5_1", numa=0)
    build_tree(tmp_path, spec)
    topo = collect_topology(Host(sysroot=str(tmp_path)))
    far = next(g for g in topo["gpus"] if g["address"] == "0000:81:00.0")
    assert far["closest_rdma"]["closeness"] == "other" and far["numa_node"] == 1
    res = findings({"gpu_pci": {"gpu_count": 2}, "topology": topo}, "DLD-GPU-024")["DLD-GPU-024"]
    assert res.status.value == "warn" and "GPU 0000:81:00.0 has no RDMA device on its NUMA node" in res.message
    assert "SYS" in res.message


def test_nccl_settings_that_contradict_the_topology_warn(tmp_path):
    spec = {}
    for n in range(2):
        pci_device(spec, f"pci0000:00/0000:00:0{n + 1}.0/0000:0{n + 1}:00.0/0000:0{n + 1}:01.0")
        nic(spec, f"pci0000:00/0000:00:0{n + 1}.0/0000:0{n + 1}:00.0/0000:0{n + 1}:02.0", rdma=f"mlx5_{n}")
    build_tree(tmp_path, spec)
    topo = collect_topology(Host(sysroot=str(tmp_path)))
    facts = {"gpu_pci": {"gpu_count": 2}, "topology": topo,
             "network": {"env": {"NCCL_NET_GDR_LEVEL": "LOC", "NCCL_IB_HCA": "^=mlx5_1"}}}
    res = findings(facts, "DLD-GPU-024")["DLD-GPU-024"]
    assert res.status.value == "warn" and "NCCL_NET_GDR_LEVEL=LOC" in res.message
    assert "mlx5_1 (GPU 0000:02:01.0)" in res.message and "mlx5_0" not in res.message
    ok = {"gpu_pci": {"gpu_count": 2}, "topology": topo, "network": {"env": {"NCCL_IB_HCA": "mlx5"}}}
    assert findings(ok, "DLD-GPU-024")["DLD-GPU-024"].status.value == "pass"


def test_no_rdma_device_skips_and_a_looping_link_costs_only_its_facts(tmp_path):
    spec = {}
    pci_device(spec, "pci0000:00/0000:00:1e.0")
    spec["sys/bus/pci/devices/0000:00:1f.0"] = {"symlink": "0000:00:1f.0"}  # a link to itself
    spec["sys/class/net/lo"] = {"dir": True}
    build_tree(tmp_path, spec)
    topo = collect_topology(Host(sysroot=str(tmp_path)))
    assert [g["address"] for g in topo["gpus"]] == ["0000:00:1e.0"] and topo["nics"] == []
    assert topo["gpus"][0]["closest_nic"] is None
    res = findings({"gpu_pci": {"gpu_count": 1}, "topology": topo}, "DLD-GPU-024")["DLD-GPU-024"]
    assert res.status.value == "skip"


def test_prometheus_metrics_for_firmware_topology_and_hung_work(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    from dl_doctor.reports import prometheus

    topo = topology_probe.func(ProbeContext(host=p4d_like(tmp_path)))
    nvml = {"devices": [{"index": i, "uuid": f"GPU-{i}", "vbios_version": "92.00.45.00.03" if i else "92.00.36.00.02",
                         "power_limit_mw": 400000} for i in range(2)]}
    hung = {"hung": [{"pid": 7, "comm": "python", "devices": ["/dev/nvidia0"]}], "scanned": 10}
    report = {"tool": {}, "host": {}, "run": {}, "summary": {}, "findings": [],
              "facts": {"nvml": nvml, "topology": topo, "gpu_hung_processes": hung}}
    families = {f.name: f for f in text_string_to_metric_families(prometheus.render(report))}
    vbios = {s.labels["gpu"]: s.labels["vbios"] for s in families["dl_doctor_gpu_firmware_info"].samples}
    assert vbios == {"0": "92.00.36.00.02", "1": "92.00.45.00.03"}
    assert [s.value for s in families["dl_doctor_gpu_power_limit_watts"].samples] == [400.0, 400.0]
    place = {s.labels["address"]: s.labels for s in families["dl_doctor_gpu_topology_info"].samples}
    assert place["0000:10:1c.0"]["nic"] == "efa_0" and place["0000:10:1c.0"]["closeness"] == "pcie-switch"
    assert place["0000:a0:1d.0"]["numa_node"] == "1"
    assert families["dl_doctor_gpu_hung_processes"].samples[0].value == 1.0


def test_the_stack_shows_where_the_gpus_sit(tmp_path):
    from dl_doctor.reports.stack import _placement

    topo = topology_probe.func(ProbeContext(host=p4d_like(tmp_path)))
    assert _placement({"topology": topo}) == "NUMA 0: 4, NUMA 1: 4; RDMA NIC on the GPU's PCIe switch: 8 of 8"
    moved = topology_probe.func(ProbeContext(host=p4d_like(tmp_path / "moved", efa_numa=1)))
    assert _placement({"topology": moved}).endswith("RDMA NIC on the GPU's PCIe switch: 6 of 8")
    assert _placement({}) == "" and _placement({"topology": {"gpus": []}}) == ""
