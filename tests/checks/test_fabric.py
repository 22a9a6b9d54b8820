"""DLD-GPU-015..018 on recorded NVML (tests/fixtures/nvml/hgx_h100_nvlink_healthy.json), each with its healthy twin."""

import json

from conftest import FIXTURES, snapshot
from dl_doctor import compat_matrix
from dl_doctor.engine import evaluate
from dl_doctor.probes.nvml import collect_nvml
from dl_doctor.registry import load_registry
from fake_nvml import FakeNVML, FakeNVMLFabric

IDS = ("DLD-GPU-015", "DLD-GPU-016", "DLD-GPU-017", "DLD-GPU-018")


def _rec():
    return json.loads((FIXTURES / "nvml" / "hgx_h100_nvlink_healthy.json").read_text())


def _run(rec, fake=FakeNVMLFabric):
    checks = [c for c in load_registry().checks if c.id in IDS]
    facts = {"gpu_pci": {"gpu_count": 8, "devices": []}, "nvml": collect_nvml(fake(rec)),
             "links": {"rdma_ports": [], "pci": [], "acs": [], "acs_known": None, "uptime_s": 100.0}}
    return {f.id: f for f in evaluate(snapshot(facts), checks, compat_matrix.load(site=False))}


def test_healthy_hgx_h100_passes_all_four():
    found = _run(_rec())
    assert {i: found[i].status.value for i in IDS} == {i: "pass" for i in IDS}


def test_a_link_down_fails_naming_gpu_and_link():
    rec = _rec()
    rec["devices"][2]["nvlink"][11]["active"] = False
    f = _run(rec)["DLD-GPU-015"]
    assert f.status.value == "fail" and "GPU 2" in f.message and "[11]" in f.message
    assert f.remediation["drain"] is True


def test_fewer_links_than_peers_fails_for_an_unknown_model():
    rec = _rec()
    for d in rec["devices"]:
        d["name"] = "NVIDIA Future GPU"
    rec["devices"][4]["nvlink"] = rec["devices"][4]["nvlink"][:17]
    f = _run(rec)["DLD-GPU-015"]
    assert f.status.value == "fail" and "GPU 4" in f.message


def test_high_crc_errors_warn_naming_gpu_link_counter():
    rec = _rec()
    rec["devices"][6]["nvlink"][3]["errors"]["crc_flit"] = 50000
    found = _run(rec)
    f = found["DLD-GPU-016"]
    assert f.status.value == "warn" and "GPU 6" in f.message and "link 3 crc 50000 (500/s)" in f.message
    assert found["DLD-GPU-015"].status.value == "pass"


def test_a_fabric_health_problem_fails_with_the_fabric_manager_fix():
    rec = _rec()
    rec["devices"][1]["fabric"]["health_mask"] = 0x1
    rec["devices"][5]["fabric"]["state"] = 2
    f = _run(rec)["DLD-GPU-017"]
    assert f.status.value == "fail" and "GPU 1" in f.message and "GPU 5" in f.message and "state in progress" in f.message
    assert "status" not in f.message  # NVML: the status counts only once the registration completed
    assert "nvidia-fabricmanager" in json.dumps(f.fix.__dict__, default=str)


def test_a_recovery_action_fails_naming_it_and_the_reset():
    rec = _rec()
    rec["devices"][3]["recovery_action"] = 1
    f = _run(rec)["DLD-GPU-018"]
    assert f.status.value == "fail" and "gpu_reset" in f.message and "GPU 3" in f.message
    assert "nvidia-smi -r -i 3" in json.dumps(f.fix.__dict__, default=str)
    rec["devices"][3]["recovery_action"] = 2
    f = _run(rec)["DLD-GPU-018"]
    assert f.status.value == "fail" and f.remediation["action"] == "reboot"


def test_old_nvidia_ml_py_skips_all_four():
    found = _run(_rec(), FakeNVML)
    assert {i: found[i].status.value for i in IDS} == {i: "skip" for i in IDS}


def test_a_gpu_without_nvlink_skips():
    rec = _rec()
    for d in rec["devices"]:
        del d["nvlink"], d["fabric"], d["recovery_action"]
    found = _run(rec)
    assert {i: found[i].status.value for i in IDS} == {i: "skip" for i in IDS}


def test_prometheus_nvlink_and_fabric_metrics_parse():
    from prometheus_client.parser import text_string_to_metric_families

    from dl_doctor.reports import prometheus

    rec = _rec()
    rec["devices"][2]["nvlink"][11]["active"] = False
    rec["devices"][2]["nvlink"][11]["errors"]["replay"] = 7
    rec["devices"][5]["fabric"]["state"] = 2
    for d in rec["devices"]:
        d["fabric"]["health_summary"] = 1
    rec["devices"][6]["fabric"]["health_summary"] = 3  # limited capacity
    report = dict(snapshot({"nvml": collect_nvml(FakeNVMLFabric(rec))}))
    report.update({"tool": {"version": "1"}, "host": {}, "run": {}, "summary": {}, "findings": []})
    families = {f.name: f for f in text_string_to_metric_families(prometheus.render(report))}
    up = {(s.labels["gpu"], s.labels["link"]): s.value for s in families["dl_doctor_nvlink_link_active"].samples}
    assert len(up) == 8 * 18 and up[("2", "11")] == 0 and up[("2", "10")] == 1
    errs = {(s.labels["gpu"], s.labels["link"], s.labels["counter"]): s.value
            for s in families["dl_doctor_nvlink_errors"].samples}
    assert errs[("2", "11", "replay")] == 7 and errs[("0", "0", "crc_data")] == 0
    states = {s.labels["gpu"]: s.labels["state"] for s in families["dl_doctor_gpu_fabric_state"].samples}
    assert states["5"] == "in_progress" and states["0"] == "completed"
    health = {s.labels["gpu"]: s.labels["health"] for s in families["dl_doctor_gpu_fabric_state"].samples}
    assert health["6"] == "limited_capacity" and health["0"] == "healthy"


def test_a_healthy_health_mask_reads_false_in_every_field_and_passes():
    from dl_doctor.checks.fabric import health_problems

    rec = _rec()
    for d in rec["devices"]:  # DEGRADED_BW, ROUTE_RECOVERY, ROUTE_UNHEALTHY, ACCESS_TIMEOUT_RECOVERY all FALSE (2),
        # INCORRECT_CONFIGURATION NONE (1), PARTITION_ASSIGNED TRUE (1), GFM connected (1): what a healthy GPU reads
        d["fabric"]["health_mask"] = 2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8 | 1 << 12 | 1 << 14
    assert _run(rec)["DLD-GPU-017"].status.value == "pass"
    assert health_problems(5 << 8 | 2 << 14) == ["incorrect configuration: insufficient NVLinks",
                                                 "global fabric manager: disconnected"]
    assert health_problems(None) == [] and health_problems("x") == []


def test_a_v3_driver_reports_the_health_summary_and_an_older_one_falls_back_to_v2():
    rec = _rec()
    for d in rec["devices"]:
        d["fabric"]["health_summary"] = 1  # NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY
    rec["devices"][3]["fabric"]["health_summary"] = 2  # UNHEALTHY, with every mask field not supported
    nvml = collect_nvml(FakeNVMLFabric(rec))
    assert [d["fabric"]["health_summary"] for d in nvml["devices"]][2:5] == ["healthy", "unhealthy", "healthy"]
    f = _run(rec)["DLD-GPU-017"]
    assert f.status.value == "fail" and "GPU 3" in f.message and "health summary: unhealthy" in f.message
    assert "GPU 2" not in f.message
    # the recording without health_summary stands for a driver before nvmlGpuFabricInfo_v3: v2 is read instead
    old = collect_nvml(FakeNVMLFabric(_rec()))
    assert old["devices"][0]["fabric"]["state"] == "completed" and old["devices"][0]["fabric"]["health_summary"] is None
    assert "fabric" not in old["devices"][0]["errors"]


def test_a_registration_that_completed_with_an_error_status_names_the_status():
    # Azure/azhpc-images#506: State Completed, Status Insufficient Resources, CliqueId 0, a zero ClusterUUID
    rec = _rec()
    rec["devices"][5]["fabric"].update(status=23, clique_id=0, cluster_uuid="00" * 16)
    f = _run(rec)["DLD-GPU-017"]
    assert f.status.value == "fail" and "GPU 5" in f.message
    assert "state completed, status insufficient resources (23)" in f.message


def _with_pci(rec, device_id):
    """The facts of ``rec`` with gpu_pci naming each GPU's PCI device id, so the matrix's link count applies."""
    checks = [c for c in load_registry().checks if c.id in IDS]
    nvml = collect_nvml(FakeNVMLFabric(rec))
    devices = [{"bdf": d["bus_id"], "device_id": device_id} for d in nvml["devices"]]
    facts = {"gpu_pci": {"gpu_count": len(devices), "devices": devices}, "nvml": nvml,
             "links": {"rdma_ports": [], "pci": [], "acs": [], "acs_known": None, "uptime_s": 100.0}}
    return {f.id: f for f in evaluate(snapshot(facts), checks, compat_matrix.load(site=False))}


def test_an_h100_with_fewer_links_than_its_verified_18_fails_even_when_all_its_peers_agree():
    rec = _rec()
    for d in rec["devices"]:
        d["nvlink"] = d["nvlink"][:16]  # every GPU answers for 16 links only: no peer is better off
    f = _with_pci(rec, "2330")["DLD-GPU-015"]
    assert f.status.value == "fail" and "16 active" in f.message
    assert {v["expected"] for v in f.evidence["links_down"].values()} == {18} and len(f.evidence["links_down"]) == 8


def test_the_published_v100_capture_with_two_links_inactive_fails():
    # Azure/azhpc-diagnostics#73: GPU 3 Tesla V100-SXM2-32GB, Link 3 and Link 5 <inactive>, the other four up
    rec = _rec()
    rec["devices"] = rec["devices"][:4]
    for d in rec["devices"]:
        d["name"] = "Tesla V100-SXM2-32GB"
        d["nvlink"] = [{"active": True, "version": 2, "errors": {}} for _ in range(6)]
    for link in (3, 5):
        rec["devices"][3]["nvlink"][link]["active"] = False
    found = _with_pci(rec, "1db5")
    f = found["DLD-GPU-015"]
    assert f.status.value == "fail" and f.message.count("GPU ") == 1 and "links [3, 5] down, 4 active" in f.message
    healthy = _rec()
    healthy["devices"] = healthy["devices"][:4]
    for d in healthy["devices"]:
        d["name"] = "Tesla V100-SXM2-32GB"
        d["nvlink"] = [{"active": True, "version": 2, "errors": {}} for _ in range(6)]
    assert _with_pci(healthy, "1db5")["DLD-GPU-015"].status.value == "pass"


def test_one_gpu_alone_in_its_vm_is_not_judged_on_links_it_has_no_peer_for():
    # a p5.4xlarge-like VM, or a one-GPU partition of an HGX board: the fabric manager leaves its links disabled
    rec = _rec()
    rec["devices"] = rec["devices"][:1]
    for link in rec["devices"][0]["nvlink"]:
        link["active"] = False
    f = _with_pci(rec, "2330")["DLD-GPU-015"]
    assert f.status.value == "pass" and "one GPU in this node" in f.message and "0 of 18 links active" in f.message
