"""`dl-doctor verify`: the workload in a real CPU torch environment (the GPU parts skip with their reason), and the
judging of recorded GPU results (a slow GPU against its dense peak and its peers, a failed all-reduce, a slow copy)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dl_doctor import compat_matrix
from dl_doctor.model import Facts
from dl_doctor.testing import snapshot

DOCTOR = Path(sys.executable).parent / "dl-doctor"
TORCH_ENV = Path.home() / ".cache" / "dl-doctor-test-envs" / "torch-2.13.0-cpu" / "bin" / "python"
MATRIX = compat_matrix.load(site=False)


def test_verify_on_cpu_torch_gives_a_finding_per_workload(tmp_path):
    if not TORCH_ENV.exists():
        pytest.skip("the CPU torch test environment is missing (tests/setup_torch_envs.sh)")
    r = subprocess.run([str(DOCTOR), "verify", "--python", str(TORCH_ENV), "--json", str(tmp_path / "v.json")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads((tmp_path / "v.json").read_text())
    f = {x["id"]: x for x in report["findings"]}
    assert set(f) == {"DLD-VER-001", "DLD-VER-002", "DLD-VER-003", "DLD-VER-004", "DLD-VER-005"}
    assert f["DLD-VER-005"]["status"] == "skip" and "dcgmi is not installed" in f["DLD-VER-005"]["message"]
    assert f["DLD-VER-001"]["status"] == "pass" and "computes a matmul on the CPU" in f["DLD-VER-001"]["message"]
    assert "GPU part skipped: no CUDA device" in f["DLD-VER-001"]["message"]
    assert f["DLD-VER-002"]["status"] == "pass" and "on the CPU" in f["DLD-VER-002"]["message"]
    assert f["DLD-VER-003"]["status"] == "skip" and "no CUDA device" in f["DLD-VER-003"]["message"]
    assert f["DLD-VER-004"]["status"] == "skip"
    facts = report["facts"]["verify"]
    assert facts["version"].startswith("2.") and facts["devices"][0]["matmul"]["fp32"]["tflops"] > 0


def test_verify_without_torch_says_so_and_exits_1(tmp_path):
    r = subprocess.run([str(DOCTOR), "verify", "--python", sys.executable, "--json", "-"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 1, r.stderr
    f = {x["id"]: x for x in json.loads(r.stdout)["findings"]}
    assert f["DLD-VER-001"]["status"] == "fail" and "does not import" in f["DLD-VER-001"]["message"]


def _judge(check_id, verify, nvml=None):
    from dl_doctor.app import registry
    from dl_doctor.engine import run_check

    spec = registry().find_check(check_id)
    facts = {"verify": verify}
    if nvml:
        facts["nvml"] = nvml
    return run_check(spec, Facts(snapshot(facts)), MATRIX)


H100 = "NVIDIA H100 80GB HBM3"


def _gpu(i, bf16, fp32=50.0):
    return {"index": i, "name": H100, "capability": "9.0",
            "matmul": {"bf16": {"tflops": bf16}, "fp32": {"tflops": fp32}}, "conv": {"ok": True},
            "copy_gbps": {"h2d": 52.0, "d2h": 50.0}}


def test_a_gpu_below_half_its_dense_peak_or_its_peers_warns():
    v = {"version": "2.7.1+cu126", "python": "/opt/env/bin/python", "devices": [_gpu(i, 720.0) for i in range(7)]
         + [_gpu(7, 430.0)], "errors": {}, "skipped": {}}
    f = _judge("DLD-VER-001", v)
    assert f.status.value == "warn" and "GPU 7 bf16: 430.0 TFLOPS, under half of its dense peak 989.5" in f.message
    v["devices"][7] = _gpu(7, 560.0)
    f = _judge("DLD-VER-001", v)
    assert f.status.value == "warn" and "GPU 7 bf16: 560.0 TFLOPS against 720.0 on its best peer" in f.message
    v["devices"][7] = _gpu(7, 700.0)
    assert _judge("DLD-VER-001", v).status.value == "pass"


def test_a_wrong_all_reduce_fails_and_drains_and_a_slow_copy_warns():
    v = {"version": "2.7.1+cu126", "devices": [_gpu(0, 700.0), _gpu(1, 700.0)], "errors": {}, "skipped": {},
         "allreduce": {"gpus": [0, 1], "busbw_gbps": 180.0, "correct": False}}
    f = _judge("DLD-VER-003", v)
    assert f.status.value == "fail" and "returned a wrong sum" in f.message and f.remediation["drain"] is True
    nvml = {"devices": [{"index": 0, "pcie": {"gen": 5, "width": 16}}, {"index": 1, "pcie": {"gen": 5, "width": 16}}]}
    v["devices"][1]["copy_gbps"] = {"h2d": 12.0, "d2h": 11.0}
    f = _judge("DLD-VER-004", v, nvml)
    assert f.status.value == "warn" and f.message.startswith("GPU 1: 12.0/11.0 GB/s h2d/d2h on a gen5 x16 link")


def test_the_dense_peaks_are_half_the_datasheets_sparse_rates():
    h100 = MATRIX.gpu("H100 80GB HBM3")
    assert h100["dense_tflops"]["bf16"] == 989.5 and h100["dense_tflops"]["tf32"] == 494.5
    assert "dense_tflops" not in h100["unverified"]
    assert "dense_tflops" in MATRIX.gpu("NVIDIA H200")["unverified"]


def test_dcgm_3x_output_from_dcgms_repository_is_parsed():
    """tests/fixtures/dcgm/diag-3x-dcgm-repo.json: verbatim from NVIDIA's DCGM repository (see the README there)."""
    from dl_doctor.dcgm import parse_diag

    doc = json.loads((Path(__file__).parent / "fixtures/dcgm/diag-3x-dcgm-repo.json").read_text())
    parsed = parse_diag(doc)
    assert parsed["shape"] == "3.x" and len(parsed["results"]) == 38
    fails = [(r["test"], r["gpu"]) for r in parsed["results"] if r["status"] == "fail"]
    assert fails == [("sm_stress", "0"), ("sm_stress", "2"), ("sm_stress", "3")]
    memory0 = next(r for r in parsed["results"] if r["test"] == "memory" and r["gpu"] == "0")
    assert memory0["status"] == "skip" and "ECC memory on GPU 0 is not currently active" in memory0["messages"][0]
    assert parse_diag({"DCGM Diagnostic": {"test_categories": "x"}}) == {"shape": "4.x", "results": []}
    assert parse_diag([1, 2]) == {"shape": None, "results": []}
