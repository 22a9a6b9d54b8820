"""Recorded whole-machine snapshots: each gives exactly the findings a person would expect."""

import json

import pytest

from conftest import FIXTURES
from machines import MACHINES, snapshot_of

SNAPSHOTS = FIXTURES / "snapshots"

ALL_PASS_GPU = {f"DLD-GPU-{n:03d}": "pass" for n in range(1, 14)}
BASE = {"DLD-SYS-001": "pass", "DLD-MEM-001": "pass", "DLD-DISK-001": "pass", "DLD-DRV-001": "pass",
        "DLD-DRV-002": "pass", "DLD-DRV-003": "pass", "DLD-DRV-004": "pass", "DLD-DRV-005": "pass",
        "DLD-CUDA-001": "pass", "DLD-CUDA-002": "pass", "DLD-CTR-001": "skip", "DLD-CTR-002": "skip",
        "DLD-DRV-006": "pass", **ALL_PASS_GPU}

EXPECTED = {
    "p4d_rhel8_healthy": BASE,
    "p5_48xlarge": BASE,
    "g5_ubuntu2204": {**BASE, "DLD-GPU-004": "skip", "DLD-GPU-005": "warn", "DLD-CTR-002": "pass",
                      "DLD-DRV-006": "skip"},  # the proprietary module, no GSP firmware package installed
    "p4d_driver_upgrade_no_reboot": {**BASE, "DLD-DRV-003": "fail", "DLD-GPU-004": "fail",
                                     **{f"DLD-GPU-{n:03d}": "skip" for n in (5, 6, 7, 9, 10, 11, 13)}},
}


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_recording_is_current(name):
    """The committed snapshot is what the probes produce from the machine's tree today."""
    recorded = json.loads((SNAPSHOTS / f"{name}.json").read_text())
    assert recorded == json.loads(json.dumps(snapshot_of(name))), \
        "re-record with: cd tests && python machines.py"


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_exact_findings(run_cli, name):
    r = run_cli("check", str(SNAPSHOTS / f"{name}.json"), "--json", "-")
    report = json.loads(r.stdout)
    found = {f["id"]: f["status"] for f in report["findings"] if f["id"] in EXPECTED[name]}
    assert found == EXPECTED[name]
    assert r.returncode == (1 if "fail" in EXPECTED[name].values() else 0)


def test_upgrade_without_reboot_says_reboot():
    from dl_doctor.engine import evaluate
    from dl_doctor.registry import load_registry
    from dl_doctor import compat_matrix

    snap = json.loads((SNAPSHOTS / "p4d_driver_upgrade_no_reboot.json").read_text())
    findings = {f.id: f for f in evaluate(snap, load_registry().checks, compat_matrix.load(site=False))}
    drv = findings["DLD-DRV-003"]
    assert drv.message == ("Driver/library version mismatch: the loaded kernel module is 535.104.05, the user-space "
                           "driver is 535.129.03")
    assert drv.fix.commands[0] == "sudo reboot"
    assert drv.evidence["kernel_log.api_mismatches"] == [{"client": "535.129.03", "kernel_module": "535.104.05"}]
    fm = findings["DLD-GPU-004"]
    assert "matches the newly installed driver" in fm.message and fm.fix.commands[0] == "sudo reboot"
