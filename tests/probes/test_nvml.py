"""The NVML probe against a fake NVML built from recorded JSON: every health state without a GPU."""

import pytest

from conftest import FIXTURES, snapshot
from dl_doctor.engine import evaluate
from dl_doctor.probes import Unavailable
from dl_doctor.probes.nvml import collect_nvml
from dl_doctor.registry import load_registry
from fake_nvml import FakeNVML

from dl_doctor import compat_matrix


def nv(name):
    return FakeNVML.from_file(FIXTURES / "nvml" / f"{name}.json")


def test_healthy_p4d():
    fake = nv("p4d_healthy")
    out = collect_nvml(fake)
    assert out["driver_version"] == "535.104.05" and out["cuda_driver_version"] == "12.2"
    assert out["device_count"] == 8 and fake.shutdowns == 1
    d0 = out["devices"][0]
    assert d0["name"] == "NVIDIA A100-SXM4-40GB" and d0["bus_id"] == "0000:10:1c.0"
    assert d0["compute_capability"] == "8.0" and d0["persistence_mode"] is True
    assert d0["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert d0["throttle_reasons"] == ["gpu_idle"] and d0["pcie"] == {"gen": 1, "max_gen": 4, "width": 16, "max_width": 16}
    assert d0["unsupported"] == [] and d0["errors"] == {}


def test_unsupported_and_failing_queries_are_recorded_not_fatal():
    out = collect_nvml(nv("g5_ubuntu"))
    d = out["devices"][0]
    assert d["remapped_rows"] is None and "remapped_rows" in d["unsupported"]
    assert d["ecc_mode"] is False and d["persistence_mode"] is False
    sick = collect_nvml(nv("p4d_sick"))["devices"][7]
    assert sick["temperature_c"] is None and "temperature" in sick["errors"]


def test_version_mismatch_is_a_fact_and_missing_library_is_unknown():
    out = collect_nvml(nv("mismatch"))
    assert out == {"init_error": "Driver/library version mismatch", "init_error_code": 18, "devices": []}
    with pytest.raises(Unavailable):
        collect_nvml(nv("no_library"))


def test_every_health_state_reaches_its_check():
    registry = load_registry()
    checks = [c for c in registry.checks if c.id in ("DLD-GPU-005", "DLD-GPU-006", "DLD-GPU-007", "DLD-GPU-009",
                                                       "DLD-GPU-010", "DLD-GPU-011", "DLD-GPU-013")]
    facts = {"gpu_pci": {"gpu_count": 8, "devices": []}, "nvml": collect_nvml(nv("p4d_sick"))}
    findings = {f.id: f for f in evaluate(snapshot(facts), checks, compat_matrix.load(site=False))}
    assert findings["DLD-GPU-005"].status.value == "warn" and "off on 1 of 8" in findings["DLD-GPU-005"].message
    assert findings["DLD-GPU-006"].status.value == "fail" and "GPU 2" in findings["DLD-GPU-006"].message
    assert findings["DLD-GPU-007"].status.value == "fail" and "pending on GPU 1" in findings["DLD-GPU-007"].message
    assert findings["DLD-GPU-009"].status.value == "warn" and "hw_thermal_slowdown" in findings["DLD-GPU-009"].message
    assert findings["DLD-GPU-010"].status.value == "warn" and "x8 of x16" in findings["DLD-GPU-010"].message
    # MIG on is a configuration (an administrator and a GPU reset): noted in a pass, not a warning
    assert findings["DLD-GPU-011"].status.value == "pass" and "MIG is on for GPU 5" in findings["DLD-GPU-011"].message
    assert findings["DLD-GPU-013"].status.value == "warn" and "PID 4242 (12.0 GiB)" in findings["DLD-GPU-013"].message
    healthy = {"gpu_pci": {"gpu_count": 8, "devices": []}, "nvml": collect_nvml(nv("p4d_healthy"))}
    assert {f.status.value for f in evaluate(snapshot(healthy), checks, compat_matrix.load(site=False))} == {"pass"}


def test_mig_devices_are_counted_only_where_mig_is_on():
    """NVML's MIG device slots: an empty one is NVML_ERROR_NOT_FOUND; a recording (or driver) that cannot say leaves
    the count unknown (null), never zero."""
    fake = nv("mig_a100_80gb")
    out = collect_nvml(fake)
    assert [d["mig_devices"] for d in out["devices"]] == [7] * 8
    for dev in fake.rec["devices"]:
        dev["mig_devices"] = 0
    assert {d["mig_devices"] for d in collect_nvml(fake)["devices"]} == {0}
    for dev in fake.rec["devices"]:
        del dev["mig_devices"]
    unknown = collect_nvml(fake)["devices"][0]
    assert unknown["mig_devices"] is None and "mig_devices" in unknown["unsupported"]
    off = collect_nvml(nv("p4d_healthy"))["devices"][0]
    assert off["mig_devices"] is None and "mig_devices" not in off["unsupported"]
