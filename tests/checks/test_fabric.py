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
    assert f.status.value == "fail" and "GPU 1" in f.message and "GPU 5" in f.message and "in_progress" in f.message
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
