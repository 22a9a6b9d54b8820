"""NVLink links, the GPU fabric and the recovery action, through recorded NVML (tests/fake_nvml.py)."""

import copy
import json
from pathlib import Path

from dl_doctor.probes.nvml import collect_nvml
from fake_nvml import FakeNVML, FakeNVMLFabric

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "nvml" / "hgx_h100_nvlink_healthy.json"


def _rec():
    return json.loads(FIXTURE.read_text())


class Counting(FakeNVMLFabric):
    calls = 0

    def nvmlDeviceGetNvLinkState(self, h, link):
        type(self).calls += 1
        return super().nvmlDeviceGetNvLinkState(h, link)


def test_healthy_hgx_h100_reports_18_active_links_and_a_completed_fabric():
    out = collect_nvml(FakeNVMLFabric(_rec()))
    assert len(out["devices"]) == 8
    for dev in out["devices"]:
        assert dev["nvlink"]["supported"] is True
        assert len(dev["nvlink"]["links"]) == 18
        assert all(link["active"] and link["version"] == 4 for link in dev["nvlink"]["links"])
        assert dev["nvlink"]["links"][0]["errors"] == {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}
        assert dev["fabric"]["state"] == "completed" and dev["fabric"]["status"] == 0
        assert dev["fabric"]["health_mask"] == 0 and dev["fabric"]["clique_id"] == 32766
        assert dev["fabric"]["cluster_uuid"] == "8f3a1c2d4e5b6a7980112233445566ff"
        assert dev["recovery_action"] == "none"


def test_a_link_down_high_crc_a_fabric_problem_and_a_recovery_action_are_recorded():
    rec = _rec()
    dev = rec["devices"][3]
    dev["nvlink"][5]["active"] = False
    dev["nvlink"][7]["errors"]["crc_flit"] = 10 ** 30  # clamped, not trusted
    dev["fabric"] = {"state": 2, "status": 5, "health_mask": 0x10}
    dev["recovery_action"] = 1
    out = collect_nvml(FakeNVMLFabric(rec))["devices"][3]
    assert out["nvlink"]["links"][5]["active"] is False
    assert out["nvlink"]["links"][7]["errors"]["crc_flit"] == 2 ** 63 - 1
    assert out["fabric"]["state"] == "in_progress" and out["fabric"]["status"] == 5
    assert out["fabric"]["health_mask"] == 0x10
    assert out["recovery_action"] == "gpu_reset"


def test_a_gpu_without_nvlink_costs_one_call_and_says_unsupported():
    rec = _rec()
    for dev in rec["devices"]:
        del dev["nvlink"], dev["fabric"], dev["recovery_action"]
    Counting.calls = 0
    out = collect_nvml(Counting(rec))["devices"]
    assert Counting.calls == 8
    assert out[0]["nvlink"] == {"links": [], "supported": False}
    assert out[0]["fabric"]["state"] == "not_supported"
    assert out[0]["recovery_action"] is None


def test_old_nvidia_ml_py_without_the_functions_gives_null_unknown():
    out = collect_nvml(FakeNVML(_rec()))["devices"][0]
    assert out["nvlink"] == {"links": [], "supported": False}
    assert out["fabric"] is None
    assert out["recovery_action"] is None
    assert out["name"] == "NVIDIA H100 80GB HBM3"
