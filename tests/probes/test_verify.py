"""`dl-doctor verify`: the workload in a real CPU torch environment (the GPU parts skip with their reason), and the
judging of recorded GPU results (a slow GPU against its dense peak and its peers, a failed all-reduce, a slow copy)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dl_doctor import compat_matrix
from dl_doctor.model import Facts
from dl_doctor.testing import snapshot

TORCH_ENV = Path.home() / ".cache" / "dl-doctor-test-envs" / "torch-2.13.0-cpu" / "bin" / "python"
MATRIX = compat_matrix.load(site=False)


def test_verify_on_cpu_torch_gives_a_finding_per_workload(run_cli, tmp_path):
    if not TORCH_ENV.exists():
        pytest.skip("the CPU torch test environment is missing (tests/setup_torch_envs.sh)")
    r = run_cli("verify", "--python", str(TORCH_ENV), "--json", str(tmp_path / "v.json"), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads((tmp_path / "v.json").read_text())
    f = {x["id"]: x for x in report["findings"]}
    assert set(f) == {f"DLD-VER-00{i}" for i in range(1, 8)}
    assert f["DLD-VER-005"]["status"] == "skip" and "dcgmi is not installed" in f["DLD-VER-005"]["message"]
    assert f["DLD-VER-007"]["status"] == "skip" and "dcgmi is not installed" in f["DLD-VER-007"]["message"]
    assert f["DLD-VER-006"]["status"] == "skip" and "no /proc/driver/nvidia" in f["DLD-VER-006"]["message"]
    assert f["DLD-VER-001"]["status"] == "pass" and "computes a matmul on the CPU" in f["DLD-VER-001"]["message"]
    assert ("GPU part skipped: no CUDA device: torch.cuda.is_available() is False (torch 2.13.0+cpu is a CPU-only "
            "build)") in f["DLD-VER-001"]["message"]
    assert f["DLD-VER-002"]["status"] == "pass" and "on the CPU" in f["DLD-VER-002"]["message"]
    assert f["DLD-VER-003"]["status"] == "skip" and "no CUDA device" in f["DLD-VER-003"]["message"]
    assert f["DLD-VER-004"]["status"] == "skip"
    facts = report["facts"]["verify"]
    assert facts["version"].startswith("2.") and facts["devices"][0]["matmul"]["fp32"]["tflops"] > 0


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """An interpreter with nothing installed (a fresh venv, no pip, no system site-packages): what dl-doctor's own
    environment happens to hold beside it and its test extra (a torch, a jax) must not decide these tests."""
    env = tmp_path_factory.mktemp("bare") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    return str(env / "bin" / "python")


def test_verify_without_torch_says_so_and_exits_1(run_cli, bare_python):
    r = run_cli("verify", "--python", bare_python, "--json", "-", timeout=300)
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
    from dl_doctor.probes.verify.dcgm import parse_diag

    doc = json.loads((Path(__file__).parents[1] / "fixtures/dcgm/diag-3x-dcgm-repo.json").read_text())
    parsed = parse_diag(doc)
    assert parsed["shape"] == "3.x" and len(parsed["results"]) == 38
    fails = [(r["test"], r["gpu"]) for r in parsed["results"] if r["status"] == "fail"]
    assert fails == [("sm_stress", "0"), ("sm_stress", "2"), ("sm_stress", "3")]
    memory0 = next(r for r in parsed["results"] if r["test"] == "memory" and r["gpu"] == "0")
    assert memory0["status"] == "skip" and "ECC memory on GPU 0 is not currently active" in memory0["messages"][0]
    assert parse_diag({"DCGM Diagnostic": {"test_categories": "x"}}) == {"shape": "4.x", "results": []}
    assert parse_diag([1, 2]) == {"shape": None, "results": []}


# -- NVML watched during the run (doctor/probes/verify/gpuwatch.py), on recorded NVML ------------------------------------------

from fake_nvml import FakeNVML  # noqa: E402

NVML_FIXTURES = Path(__file__).parents[1] / "fixtures" / "nvml"


def _p5(changes=None):
    """The recorded 8 x H100 NVML, with per-device changes (index -> keys)."""
    rec = json.loads((NVML_FIXTURES / "p5_healthy.json").read_text())
    for index, keys in (changes or {}).items():
        rec["devices"][index].update(keys)
    return FakeNVML(rec)


def test_the_watch_leaves_busy_gpus_alone_and_sees_throttling_ecc_and_xids_during_the_run():
    from dl_doctor.probes.verify.gpuwatch import GpuWatch

    nv = _p5({
        2: {"processes": [{"pid": 4242, "used": 1 << 30}]},
        5: {"load": {"sm_clock": [1980, 1200, 1100, 1100], "throttle": [0x4, 0x4, 0x40, 0x40, 0x40],
                     "temperature": [70, 86, 88, 88], "power_mw": [500000, 690000],
                     "ecc_after": {"corrected": 3, "uncorrected": 1}, "xid": [79]}},
    })
    watch = GpuWatch(nv, interval=0.01)
    assert watch.open() is None
    busy = watch.busy()
    assert list(busy) == ["00000002-aaaa-bbbb-cccc-000000000002"]
    assert busy["00000002-aaaa-bbbb-cccc-000000000002"] == "GPU 2 (1 compute process(es): pid 4242)"
    watch.start()
    deadline = time.monotonic() + 5
    while nv.sampled.get(id(nv.rec["devices"][5]), 0) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    out = watch.stop()
    g5 = out["gpus"][5]
    assert g5["xid"] == [79] and out["gpus"][4]["xid"] == []
    assert g5["ecc_delta"] == {"corrected": 3, "uncorrected": 1}
    assert g5["sm_clock_mhz"] == {"min": 1100, "max": 1980} and g5["power_w"]["max"] == 690.0
    assert g5["temperature_c"]["max"] == 88 and g5["slowdown_temp_c"] == 87
    assert g5["throttle"]["hw_thermal_slowdown"] >= 3 and g5["throttle"]["sw_power_cap"] == 1
    assert out["gpus"][0]["ecc_delta"] == {"corrected": 0, "uncorrected": 0}
    assert nv.shutdowns == 1 and nv.freed == 1 and out["xid_watch"] == "watched"


def test_without_nvml_events_the_watch_says_xids_were_not_watched():
    from dl_doctor.probes.verify.gpuwatch import GpuWatch

    nv = _p5()
    nv.rec["events_unsupported"] = True
    watch = GpuWatch(nv, interval=0.01)
    assert watch.open() is None
    watch.start()
    out = watch.stop()
    assert out["xid_watch"].startswith("NVML events are not available: Not Supported")
    assert all(g["samples"] >= 1 for g in out["gpus"])


class _GpuHost:
    """The real host (its commands run), but with the NVIDIA kernel module present, for a recorded NVML."""

    def __new__(cls):
        from dl_doctor.host import Host

        class GpuHost(Host):
            def exists(self, path):
                return path == "/proc/driver/nvidia" or super().exists(path)

        return GpuHost()


def test_the_probe_runs_the_workload_under_a_recorded_nvml_and_leaves_a_busy_gpu_alone():
    if not TORCH_ENV.exists():
        pytest.skip("the CPU torch test environment is missing (tests/setup_torch_envs.sh)")
    from dl_doctor.probes import ProbeContext
    from dl_doctor.probes.verify import verify_probe

    nv = _p5({6: {"processes": [{"pid": 777, "used": 1 << 30}]}})
    ctx = ProbeContext(host=_GpuHost(), options={"verify": True, "verify_level": "quick", "python": [str(TORCH_ENV)],
                                                 "verify_nvml": nv}, matrix=MATRIX)
    out = verify_probe.func(ctx)
    assert out["version"].startswith("2.") and out["devices"][0]["name"] == "cpu"
    assert list(out["left_alone"]) == [6] and "pid 777" in out["left_alone"][6]
    assert out["watch"]["ran"] and len(out["watch"]["gpus"]) == 8 and out["watch"]["gpus"][0]["samples"] >= 1
    # the probe records the measurement and the GPUs NVML named, not what they are held against: the check derives
    # that from the matrix (8 x H100 SXM: half of the 900 GB/s NVLink it cites, and a quarter of that as the floor)
    assert "busbw_expectation" not in out
    from dl_doctor.checks.verify import allreduce_expectation

    assert allreduce_expectation(out, MATRIX) == {"gbps": 450.0, "via": "NVLink (900 GB/s both directions, matrix)",
                                                  "unverified": False, "floor_gbps": 112.5, "floor_ratio": 0.25}
    assert nv.shutdowns == 1
    # a CPU torch on a GPU host: the framework is blind to the GPUs NVML lists, which fails, and the GPUs were
    # watched with nothing running on them, which is not a pass either
    f = _judge("DLD-VER-001", out)
    assert f.status.value == "fail"
    assert f.message == "torch sees no GPU, though NVML lists 7 free: torch 2.13.0+cpu is a CPU-only build"
    f = _judge("DLD-VER-006", out)
    assert f.status.value == "skip" and "8 GPU(s) watched, no Xid" in f.message
    assert "no GPU was under load: no CUDA device: torch.cuda.is_available() is False" in f.message
    ctx = ProbeContext(host=_GpuHost(), options={"verify": True, "verify_level": "quick", "python": [str(TORCH_ENV)],
                                                 "verify_nvml": _p5({6: {"processes": [{"pid": 777, "used": 1}]}}),
                                                 "verify_include_busy": True})
    assert verify_probe.func(ctx)["left_alone"] == {}


def test_renumbering_gives_tested_devices_nvmls_index_by_uuid():
    from dl_doctor.probes.verify.workload import renumber

    out = {"devices": [{"index": 0, "cuda_index": 0, "uuid": "bbb"}, {"index": 1, "cuda_index": 1, "uuid": "ccc"}],
           "allreduce": {"gpus": [0, 1]}, "pairs": [{"gpus": [0, 1]}]}
    renumber(out, [{"index": 0, "uuid": "aaa"}, {"index": 1, "uuid": "bbb"}, {"index": 2, "uuid": "ccc"}])
    assert [d["index"] for d in out["devices"]] == [1, 2]
    assert out["allreduce"]["gpus"] == [1, 2] and out["pairs"][0]["gpus"] == [1, 2]


def test_the_all_reduce_expectation_is_nvlink_from_the_matrix_else_the_pcie_link():
    assert MATRIX.busbw_expectation(H100, {"gen": 5, "width": 16})["gbps"] == 450.0
    pcie = MATRIX.busbw_expectation("NVIDIA L4", {"gen": 4, "width": 16})
    assert pcie["gbps"] == 31.5 and pcie["via"] == "PCIe gen4 x16 (NVML)"
    assert MATRIX.busbw_expectation("NVIDIA L4", {}) == {}
    assert MATRIX.busbw_expectation("NVIDIA H200", None)["unverified"] is True
    # the node's: the slowest GPU's (its link sets the pace)
    node = [{"name": H100, "pcie": {"gen": 5, "width": 16}}, {"name": "NVIDIA L4", "pcie": {"gen": 4, "width": 16}}]
    assert MATRIX.node_busbw_expectation(node)["gbps"] == 31.5
    assert MATRIX.node_busbw_expectation([{"name": "NVIDIA L4"}]) == {}


def _watched(**per_gpu):
    gpus = []
    for i in range(8):
        g = {"index": i, "samples": 40, "throttle": {"sw_power_cap": 30},
             "ecc_delta": {"corrected": 0, "uncorrected": 0},
             "xid": [], "temperature_c": {"min": 40, "max": 71}, "slowdown_temp_c": 87, "power_w": {"max": 690.0}}
        g.update(per_gpu.get(f"g{i}", {}))
        gpus.append(g)
    return {"version": "2.7.1+cu126", "devices": [_gpu(i, 700.0) for i in range(8)], "errors": {}, "skipped": {},
            "watch": {"ran": True, "gpus": gpus, "xid_watch": "watched"}}


def test_under_load_an_xid_or_new_uncorrectable_ecc_fails_and_thermal_slowdown_warns():
    f = _judge("DLD-VER-006", _watched())
    assert f.status.value == "pass" and "peak 71 C, 690.0 W" in f.message  # sw_power_cap alone is a loaded GPU
    f = _judge("DLD-VER-006", _watched(g3={"xid": [79]}, g5={"ecc_delta": {"corrected": 2, "uncorrected": 1}}))
    assert f.status.value == "fail" and f.remediation["drain"] is True
    assert "GPU 3 raised Xid 79 (" in f.message and "GPU 5 gained 1 uncorrectable ECC error(s)" in f.message
    assert f.fix.commands[0] == 'dl-doctor why "Xid 79"'
    f = _judge("DLD-VER-006", _watched(g1={"throttle": {"hw_thermal_slowdown": 12}, "temperature_c": {"max": 88}}))
    assert f.status.value == "warn"
    assert f.message == "GPU 1 hw_thermal_slowdown in 12 of 40 samples; GPU 1 reached 88 C, its slowdown threshold 87 C"
    f = _judge("DLD-VER-006", _watched(g1={"throttle": {"hw_slowdown": 2}}))
    assert f.status.value == "pass"  # 2 of 40 samples: under a tenth
    v = _watched()
    v["watch"] = {"ran": False, "reason": "NVML could not initialise: Driver Not Loaded"}
    f = _judge("DLD-VER-006", v)
    assert f.status.value == "skip" and "Driver Not Loaded" in f.message


def test_a_slow_all_reduce_warns_and_names_the_slowest_pairs_a_failing_pair_fails():
    v = {"version": "2.7.1+cu126", "devices": [_gpu(i, 700.0) for i in range(8)], "errors": {}, "skipped": {},
         "allreduce": {"gpus": list(range(8)), "busbw_gbps": 61.2, "correct": True},
         "nvml_gpus": [{"index": i, "name": H100, "pcie": {"gen": 5, "width": 16}} for i in range(8)],
         "pairs": [{"gpus": [a, b], "busbw_gbps": 38.0 if 4 in (a, b) else 310.0, "correct": True}
                   for a in range(8) for b in range(a + 1, 8)],
         "left_alone": {}}
    f = _judge("DLD-VER-003", v)
    assert f.status.value == "warn"
    assert "bus bandwidth 61.2 GB/s, under a quarter of the 450.0 GB/s" in f.message
    assert "slowest pairs: GPU 0-4 38.0 GB/s, GPU 1-4 38.0 GB/s, GPU 2-4 38.0 GB/s, GPU 3-4 38.0 GB/s" in f.message
    v["pairs"][5] = {"gpus": [0, 6], "error": "DistBackendError: NCCL error: unhandled system error"}
    f = _judge("DLD-VER-003", v)
    assert f.status.value == "fail" and "[0, 6]: DistBackendError" in f.message
    v["pairs"], v["allreduce"]["busbw_gbps"] = [], 390.0
    v["left_alone"] = {7: "GPU 7 (1 compute process(es): pid 9)"}
    f = _judge("DLD-VER-003", v)
    assert f.status.value == "pass" and "(expectation 450.0 GB/s via NVLink" in f.message
    assert f.message.endswith("; left alone as in use by others (--include-busy tests them too): "
                              "GPU 7 (1 compute process(es): pid 9)")


H100_NVLINK_1600 = """\
schema_version = 1
[sources.acme-fabric]
url = "https://wiki.example.com/fabric"

[[gpu]]
name = "NVIDIA H100 SXM5 80GB"
aliases = ["H100", "H100-SXM5-80GB", "H100 80GB HBM3"]
pci_device_ids = ["2330"]
compute_capability = "9.0"
architecture = "Hopper"
class = "datacenter"
source = ["acme-fabric"]
nvlink_gbps = 1600
"""


def test_check_rejudges_an_old_facts_file_with_the_matrix_not_its_stored_expectation(tmp_path, run_cli):
    """An older facts file carries busbw_expectation, what the probe then held the all-reduce against: `dl-doctor
    check` ignores it and asks the matrix of its own run, overlays included."""
    verify = {"version": "2.7.1+cu126", "python": "/opt/env/bin/python", "errors": {}, "skipped": {},
              "devices": [_gpu(i, 700.0) for i in range(2)],
              "allreduce": {"gpus": [0, 1], "busbw_gbps": 180.0, "correct": True},
              "nvml_gpus": [{"index": i, "uuid": f"GPU-{i}", "name": H100, "pcie": {"gen": 5, "width": 16}}
                            for i in range(2)],
              # stored by an older dl-doctor: a floor that 180 GB/s would be under
              "busbw_expectation": {"gbps": 4000.0, "via": "NVLink (8000 GB/s both directions, matrix)",
                                    "floor_gbps": 1000.0, "floor_ratio": 0.25}}
    old = tmp_path / "old.json"
    old.write_text(json.dumps(snapshot({"verify": verify})))
    overlay = tmp_path / "fabric.toml"
    overlay.write_text(H100_NVLINK_1600)

    def judged(*extra):
        r = run_cli("check", str(old), "--only", "DLD-VER-003", "--json", "-", "--html", "/dev/null",
                    "--fail-on", "never", *extra, timeout=120)
        assert r.returncode == 0, r.stderr
        [f] = [f for f in json.loads(r.stdout)["findings"] if f["id"] == "DLD-VER-003"]
        return f

    f = judged()  # today's built-in matrix: 900 GB/s NVLink, 450 one way, a floor of 112.5
    assert f["status"] == "pass" and "(expectation 450.0 GB/s via NVLink (900 GB/s both directions" in f["message"]
    assert f["evidence"]["expectation"]["floor_gbps"] == 112.5
    f = judged("--matrix-overlay", str(overlay))  # the site's: 1600 GB/s, 800 one way, a floor of 200
    assert f["status"] == "warn"
    assert "bus bandwidth 180.0 GB/s, under a quarter of the 800.0 GB/s its links carry in one direction" in f["message"]
    assert f["evidence"]["expectation"]["floor_gbps"] == 200.0


def test_the_probe_plans_pairs_with_the_runs_matrix_and_records_no_expectation():
    """Without a matrix the probe has no expectation to plan with (pairs only with --long or a failure); with one,
    the node's expectation times PAIRS_BELOW."""
    from dl_doctor.probes import ProbeContext
    from dl_doctor.probes.verify import _pairs_below

    gpus = [{"index": i, "name": H100, "pcie": {"gen": 5, "width": 16}} for i in range(8)]
    assert _pairs_below(ProbeContext(host=None), gpus) is None
    assert _pairs_below(ProbeContext(host=None, matrix=MATRIX), gpus) == 112.5
    assert _pairs_below(ProbeContext(host=None, matrix=MATRIX), [{"index": 0, "name": "NVIDIA T9000"}]) is None


# -- DCGM: recorded outputs (tests/fixtures/dcgm/README.md says where each comes from) ----------------------------

DCGM = Path(__file__).parents[1] / "fixtures" / "dcgm"


def test_dcgm_3x_output_recorded_by_virtualclient_is_parsed():
    from dl_doctor.probes.verify.dcgm import load_json, parse_diag

    parsed = parse_diag(load_json((DCGM / "diag-3x-virtualclient-r3.json").read_text()))
    assert parsed["shape"] == "3.x" and len(parsed["results"]) == 16
    assert [(r["test"], r["status"]) for r in parsed["results"] if r["status"] != "pass"] == [("EUD Test", "skip")]
    assert {r["gpu"] for r in parsed["results"] if r["category"] == "Stress"} == {"0"}


def _dcgm4(*tests, **body):
    """A DCGM 4.x document around tests: the envelope is built here with the key names of DCGM's own
    nvvs/include/NvvsJsonStrings.h (NVVS_NAME "DCGM Diagnostic", NVVS_HEADERS "test_categories"); the tests inside
    come from the recorded sample or are built and say so."""
    return {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": list(tests)}], **body}}


def test_dcgm_4x_output_from_a_real_run_in_dcgm_issue_215_is_parsed_per_entity():
    """tests/fixtures/dcgm/diag-4x-test-dcgm-issue-215.txt: one test of a real `dcgmi diag -r 3 -j` on 8 GPUs,
    DCGM 4.x, verbatim from https://github.com/NVIDIA/DCGM/issues/215."""
    from dl_doctor.probes.verify.dcgm import parse_diag

    test = json.loads((DCGM / "diag-4x-test-dcgm-issue-215.txt").read_text().rstrip().rstrip(","))
    parsed = parse_diag(_dcgm4(test))
    assert parsed["shape"] == "4.x"
    assert [(r["test"], r["gpu"], r["status"]) for r in parsed["results"]] == [
        ("diagnostic", str(i), "pass") for i in range(8)]
    f = _judge("DLD-VER-005", {"version": "2.7.1", "devices": [], "errors": {}, "skipped": {},
                               "dcgm": {"ran": True, "command": "diag -r 3 -j", **parsed}})
    assert f.status.value == "pass" and "8 results passed" in f.message and "DCGM 4.x output" in f.message


def test_a_4x_test_summary_failure_that_belongs_to_no_gpu_is_kept_and_a_runtime_error_fails():
    from dl_doctor.probes.verify.dcgm import load_json, parse_diag

    # built, not recorded: the shape dcgmi/Diag.cpp (HelperJsonAddTestSummary) writes for an error of no entity
    test = {"name": "software", "results": [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0,
                                             "status": "Pass"}],
            "test_summary": {"status": "Fail", "warnings": [{"warning": "CUDA library could not be loaded",
                                                             "error_id": 42, "error_category": 4,
                                                             "error_severity": 2}]}}
    parsed = parse_diag(_dcgm4(test))
    assert parsed["results"][-1] == {"category": "Hardware", "test": "software", "gpu": "all", "status": "fail",
                                     "messages": ["CUDA library could not be loaded"]}
    f = _judge("DLD-VER-005", {"devices": [], "errors": {}, "skipped": {}, "dcgm": {"ran": True, "command": "diag",
                                                                                     **parsed}})
    assert f.status.value == "fail" and f.message == "all GPUs Hardware/software: CUDA library could not be loaded"
    text = "Successfully ran diagnostic for group.\n" + json.dumps({"DCGM Diagnostic": {
        "runtime_error": "Unable to connect to the host engine"}})
    parsed = parse_diag(load_json(text))
    f = _judge("DLD-VER-005", {"devices": [], "errors": {}, "skipped": {}, "dcgm": {"ran": True, "command": "diag",
                                                                                     **parsed}})
    assert f.status.value == "fail" and "could not run its tests: Unable to connect to the host engine" in f.message
    assert load_json("Error: not json") is None and load_json("x" * (9 << 20)) is None
    assert load_json('{"a": ' * 100000 + "1" + "}" * 100000) is None  # nested past Python's stack


def test_dcgm_health_healthy_output_recorded_by_virtualclient_passes():
    from dl_doctor.probes.verify.dcgm import load_json, parse_health

    parsed = parse_health(load_json((DCGM / "health-virtualclient-healthy.json").read_text()))
    assert parsed == {"overall": "pass", "incidents": []}
    f = _judge("DLD-VER-007", {"devices": [], "errors": {}, "skipped": {}, "dcgm_health": {"ran": True, **parsed}})
    assert f.status.value == "pass"


def test_dcgm_health_failure_is_read_from_the_json_not_the_exit_code():
    from dl_doctor.probes.verify.dcgm import parse_health

    # built, not recorded: the tree dcgmi/Health.cpp writes through DcgmiOutputJson ("children", "value",
    # "overflow" holding the message in parts of at most 54 characters)
    doc = {"header": ["Health Monitor Report"], "body": {
        "Overall Health": {"value": "Failure"},
        "GPU": {"children": {"0": {"value": "Failure", "children": {"Errors": {"children": {
            "Memory system": {"value": "Failure", "overflow": ["A double-bit ECC error was detected on GPU 0",
                                                                "(1 errors)."]},
            "PCIe system": {"value": "Warning", "overflow": ["PCIe replay rate high"]}}}}}}}}}
    parsed = parse_health(doc)
    assert parsed["overall"] == "fail" and len(parsed["incidents"]) == 2
    f = _judge("DLD-VER-007", {"devices": [], "errors": {}, "skipped": {}, "dcgm_health": {"ran": True, **parsed}})
    assert f.status.value == "fail" and f.remediation["drain"] is True
    assert ("GPU 0 Memory system: A double-bit ECC error was detected on GPU 0 (1 errors).; "
            "GPU 0 PCIe system: PCIe replay rate high") in f.message
    f = _judge("DLD-VER-007", {"devices": [], "errors": {}, "skipped": {},
                               "dcgm_health": {"ran": False, "reason": "dcgmi health gave no report (exit 0): "
                                               "Error: Health watches not enabled.", "watches_off": True}})
    assert f.status.value == "skip" and "sudo dcgmi health -s a" in f.message
    assert parse_health({"body": {"x": 1}}) == {"overall": None, "incidents": []}


FAKE_TORCH = Path(__file__).parents[1] / "fake_torch"


def _fake_torch_host(tmp_path, conf):
    """The real host running the workload with this interpreter, but importing a copy of tests/fake_torch's torch
    (CUDA devices that compute nothing, set by ``conf``), so the workload's GPU branch runs without a GPU."""
    import shutil

    from dl_doctor.host import Host

    root = tmp_path / "fake_torch"
    shutil.copytree(FAKE_TORCH, root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "fake_torch.json").write_text(json.dumps(conf))

    class FakeTorchHost(Host):
        def environ(self):
            return dict(super().environ(), PYTHONPATH=str(root))

    return FakeTorchHost()


def _four(**conf):
    gpus = [{"name": H100, "cc": [9, 0], "uuid": f"GPU-00000000-aaaa-bbbb-cccc-00000000000{i}"} for i in range(3)]
    gpus.append({"name": "NVIDIA A100-SXM4-80GB", "cc": [8, 0], "uuid": "GPU-00000000-aaaa-bbbb-cccc-000000000003"})
    return dict(conf, gpus=gpus)


def test_the_workloads_gpu_branch_leaves_a_busy_gpu_alone_runs_fp8_where_it_exists_and_pairs_a_slow_all_reduce(
        tmp_path):
    from dl_doctor.probes.verify.workload import run_workload

    host = _fake_torch_host(tmp_path, _four(slow_gpus=[3]))
    busy = {"00000000-aaaa-bbbb-cccc-000000000001": "GPU 1 (1 compute process(es): pid 5)"}
    out = run_workload(host, sys.executable, "quick", skip=busy, pairs_below_gbps=1000.0)
    assert "error" not in out, out
    assert [d["index"] for d in out["devices"]] == [0, 2, 3]
    assert out["skipped"]["cuda1"] == "left alone as in use by others: GPU 1 (1 compute process(es): pid 5)"
    h100, a100 = out["devices"][0], out["devices"][2]
    assert set(h100["matmul"]) == {"fp32", "tf32", "fp16", "bf16", "fp8"} and "fp8" not in a100["matmul"]
    assert a100["fp8"] == "compute capability 8.0 has no fp8 Tensor Cores (8.9 and later)"
    assert h100["uuid"] == "00000000-aaaa-bbbb-cccc-000000000000" and h100["conv"] == {"ok": True}
    assert out["allreduce"]["gpus"] == [0, 2, 3] and out["allreduce"]["correct"] is True
    assert [p["gpus"] for p in out["pairs"]] == [[0, 2], [0, 3], [2, 3]]  # under pairs_below_gbps: every pair
    slow = {tuple(p["gpus"]) for p in out["pairs"] if p["busbw_gbps"] < 10}
    assert slow == {(0, 3), (2, 3)}
    out["nvml_gpus"] = [{"index": i, "name": H100, "pcie": {"gen": 5, "width": 16}} for i in range(4)]
    f = _judge("DLD-VER-003", out)
    named = f.message.split("slowest pairs: ")[1]
    assert f.status.value == "warn" and {named[:7], named.split(", ")[1][:7]} == {"GPU 0-3", "GPU 2-3"}


def test_a_failing_pair_and_a_failing_matmul_in_the_gpu_branch_fail_their_checks(tmp_path):
    from dl_doctor.probes.verify.workload import run_workload

    host = _fake_torch_host(tmp_path, _four(broken_pairs=[[0, 1], [0, 1, 2, 3]], matmul_error="cuda:2"))
    out = run_workload(host, sys.executable, "quick", pairs_below_gbps=1.0)
    assert out["errors"]["allreduce"].startswith("RuntimeError: NCCL error")
    assert [p for p in out["pairs"] if "error" in p] == [{"gpus": [0, 1], "error": "RuntimeError: NCCL error: "
                                                         "unhandled system error"}]
    f = _judge("DLD-VER-003", out)
    assert f.status.value == "fail" and "(pair [0, 1]: RuntimeError: NCCL error" in f.message
    f = _judge("DLD-VER-001", out)
    assert f.status.value == "fail" and "gpu2.matmul.fp32: RuntimeError: CUDA error: an illegal memory" in f.message


# -- JAX: the same workloads and result shape, on the real jax CPU wheel --------------------------------------------

JAX_ENV = Path.home() / ".cache" / "dl-doctor-test-envs" / "jax-0.10.2-cpu" / "bin" / "python"


def _need_jax():
    if not JAX_ENV.exists():
        pytest.skip("the JAX CPU test environment is missing (tests/setup_framework_envs.sh)")


def test_verify_with_jax_on_the_cpu_gives_a_finding_per_workload(run_cli, tmp_path):
    _need_jax()
    r = run_cli("verify", "--python", str(JAX_ENV), "--json", str(tmp_path / "v.json"), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads((tmp_path / "v.json").read_text())
    f = {x["id"]: x for x in report["findings"]}
    assert f["DLD-VER-001"]["status"] == "pass"
    assert f["DLD-VER-001"]["message"].startswith("jax 0.10.2 computes a matmul on the CPU")
    assert ("GPU part skipped: no GPU: jax 0.10.2: RuntimeError: Unknown backend: 'gpu' requested"
            in f["DLD-VER-001"]["message"])
    assert f["DLD-VER-002"]["status"] == "pass" and f["DLD-VER-003"]["status"] == "skip"
    assert report["facts"]["verify"]["framework"] == "jax"
    # the same environment asked for torch: it has none, and says so
    r = run_cli("verify", "--python", str(JAX_ENV), "--framework", "torch", "--json", "-", timeout=300)
    assert r.returncode == 1
    f = {x["id"]: x for x in json.loads(r.stdout)["findings"]}
    assert f["DLD-VER-001"]["message"].startswith(f"torch does not import in {JAX_ENV}: ModuleNotFoundError")


def test_an_environment_with_neither_framework_says_so(bare_python):
    from dl_doctor.host import Host
    from dl_doctor.probes.verify.workload import run_workload

    out = run_workload(Host(), bare_python, "quick")
    assert out["errors"] == {"import": "neither torch nor jax is installed in this environment"}
    f = _judge("DLD-VER-002", out)
    assert f.status.value == "fail" and "neither torch nor jax" in f.message


def test_the_jax_device_branch_runs_on_xlas_cpu_devices_with_a_real_all_reduce():
    """The JAX workload's per-device branch and its shard_map psum, run for real on three XLA host devices
    (--xla_force_host_platform_device_count), small sizes; pairs_below_gbps set high so every pair runs."""
    _need_jax()
    from dl_doctor.host import Host
    from dl_doctor.probes.verify.workload import run_workload

    out = run_workload(Host(), str(JAX_ENV), "quick", pairs_below_gbps=1e6,
                       env={"XLA_FLAGS": "--xla_force_host_platform_device_count=3"}, jax_platform="cpu",
                       framework="jax", n=128, iters=2, copy_mib=4, allreduce_mib=1, pair_mib=1, allreduce_iters=2,
                       conv_batch=1)
    assert out["errors"] == {} and out["skipped"] == {}, out
    assert [d["index"] for d in out["devices"]] == [0, 1, 2]
    dev = out["devices"][0]
    assert set(dev["matmul"]) == {"fp32", "fp16"} and dev["matmul"]["fp32"]["n"] == 128
    assert dev["conv"] == {"ok": True} and dev["copy_pinned"] is False and dev["copy_gbps"]["h2d"] > 0
    assert out["allreduce"]["gpus"] == [0, 1, 2] and out["allreduce"]["correct"] is True
    assert [p["gpus"] for p in out["pairs"]] == [[0, 1], [0, 2], [1, 2]] and all(p["correct"] for p in out["pairs"])
    f = _judge("DLD-VER-004", out, {"devices": [{"index": i, "pcie": {"gen": 5, "width": 16}} for i in range(3)]})
    assert f.status.value == "pass" and f.message.endswith("(from pageable host memory, as the framework copies: "
                                                           "not held against the link)")
    assert _judge("DLD-VER-003", out).status.value == "pass"


def test_gpus_left_alone_are_hidden_from_the_workload_by_uuid_unless_cuda_visible_devices_is_set():
    from dl_doctor.probes import ProbeContext
    from dl_doctor.probes.verify import _visibility

    class Env:
        def __init__(self, env):
            self.env = env

        def environ(self):
            return self.env

    gpus = [{"index": i, "uuid": f"u{i}"} for i in range(4)]
    busy = {"u1": "GPU 1 (1 compute process(es): pid 9)"}
    env, extra = _visibility(ProbeContext(host=Env({})), gpus, busy)
    assert env == {"CUDA_VISIBLE_DEVICES": "GPU-u0,GPU-u2,GPU-u3"} and extra == {"visible_uuids": ["u0", "u2", "u3"]}
    assert _visibility(ProbeContext(host=Env({"CUDA_VISIBLE_DEVICES": "0,1"})), gpus, busy) == ({}, {})
    assert _visibility(ProbeContext(host=Env({})), gpus, {}) == ({}, {})
    env, extra = _visibility(ProbeContext(host=Env({})), gpus, {f"u{i}": "busy" for i in range(4)})
    assert env == {"CUDA_VISIBLE_DEVICES": ""} and extra["no_gpu_reason"].startswith("every GPU has compute processes")


def test_run_verify_adds_the_workloads_to_a_full_run_and_a_plain_run_never_starts_them(run_cli):
    if not TORCH_ENV.exists():
        pytest.skip("the CPU torch test environment is missing (tests/setup_torch_envs.sh)")
    base = ["run", "--no-env-scan", "--python", str(TORCH_ENV), "--fail-on", "never", "--json", "-"]
    r = run_cli(*base, "--verify", timeout=300)
    report = json.loads(r.stdout)
    f = {x["id"]: x for x in report["findings"]}
    assert f["DLD-VER-001"]["status"] == "pass" and "computes a matmul on the CPU" in f["DLD-VER-001"]["message"]
    assert "DLD-PY-004" in f and report["facts"]["verify"]["framework"] == "torch"
    r = run_cli(*base, timeout=300)
    report = json.loads(r.stdout)
    f = {x["id"]: x for x in report["findings"]}
    assert "verify" not in report["facts"]
    assert f["DLD-VER-001"]["status"] == "skip" and "not asked for: dl-doctor verify" in f["DLD-VER-001"]["message"]


def test_the_probe_runs_dcgmi_at_the_asked_level_and_reads_diag_and_health_from_their_json(run_cli, tmp_path):
    """A stand-in dcgmi on PATH prints the recorded outputs (VirtualClient's diag -r 3 and healthy health) and exits
    0, as dcgmi does whatever it found; it logs how it was called."""
    if not TORCH_ENV.exists():
        pytest.skip("the CPU torch test environment is missing (tests/setup_torch_envs.sh)")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "calls"
    dcgmi = bindir / "dcgmi"
    dcgmi.write_text("#!/bin/sh\n"
                     f'echo "$@" >> {log}\n'
                     f'case "$1" in diag) cat {DCGM / "diag-3x-virtualclient-r3.json"} ;; '
                     f'health) cat {DCGM / "health-virtualclient-healthy.json"} ;; esac\n')
    dcgmi.chmod(0o755)
    env = {"PATH": f"{bindir}:{os.environ['PATH']}"}
    r = run_cli("verify", "--python", str(TORCH_ENV), "--dcgm-level", "3", "--json", "-", timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert log.read_text().splitlines() == ["diag -r 3 -j", "health -c -j"]
    f = {x["id"]: x for x in json.loads(r.stdout)["findings"]}
    assert f["DLD-VER-005"]["status"] == "pass"
    assert f["DLD-VER-005"]["message"] == "dcgmi diag -r 3 -j: 15 results passed (1 skipped), DCGM 3.x output"
    assert f["DLD-VER-007"]["status"] == "pass"
    r = run_cli("verify", "--python", str(TORCH_ENV), "--dcgm-level", "0", "--json", "-", timeout=300, env=env)
    f = {x["id"]: x for x in json.loads(r.stdout)["findings"]}
    assert f["DLD-VER-005"]["status"] == "skip" and "not asked for (--dcgm-level 0)" in f["DLD-VER-005"]["message"]


def test_a_cuda_torch_without_a_driver_says_what_cuda_said():
    """The real torch 2.14.1 cu130 wheel on this driverless machine: torch.cuda.init() gives the reason that
    is_available() only warns about."""
    env = Path.home() / ".cache" / "dl-doctor-test-envs" / "torch-2.14.1-cu130" / "bin" / "python"
    if not env.exists():
        pytest.skip("the cu130 torch test environment is missing (tests/setup_torch_envs.sh)")
    from dl_doctor.host import Host
    from dl_doctor.probes.verify.workload import run_workload

    out = run_workload(Host(), str(env), "quick")
    assert out["no_gpu"].startswith("torch 2.14.1+cu130 (CUDA 13.0): RuntimeError: Found no NVIDIA driver")
    f = _judge("DLD-VER-001", out)
    assert f.status.value == "pass" and "Found no NVIDIA driver" in f.message  # no NVML GPU: a CPU host


def test_malformed_verify_facts_cost_only_their_own_parts_never_a_check_error():
    """The verify facts come from someone's interpreter or a facts file: 3,000 seeded mutations of the check
    fixtures (odd types and values in random places) give findings, never a check that raised."""
    import copy
    import random

    from dl_doctor.app import registry
    from dl_doctor.engine import run_check

    specs = [registry().find_check(f"DLD-VER-00{i}") for i in range(1, 8)]
    fixtures = Path(__file__).parents[1] / "fixtures" / "checks"
    bases = [json.loads(p.read_text())["base"] for p in sorted(fixtures.glob("DLD-VER-*.json"))]
    odd = [None, 5, "x", [], {}, [1, "a", None], {"a": 1}, -1, 1e308, True, "\udcff", float("nan"), [[]], {"0": None}]

    def paths(o, pre=()):
        yield pre
        items = o.items() if isinstance(o, dict) else enumerate(o) if isinstance(o, list) else ()
        for k, v in items:
            yield from paths(v, pre + (k,))

    rng = random.Random(2)
    raised = {}
    for _ in range(3000):
        doc = copy.deepcopy(rng.choice(bases))
        where = [p for p in paths(doc["verify"]) if p]
        for _ in range(rng.randint(1, 3)):
            path, node = rng.choice(where), doc["verify"]
            try:
                for k in path[:-1]:
                    node = node[k]
                node[path[-1]] = rng.choice(odd)
            except (KeyError, IndexError, TypeError):
                pass
        for spec in specs:
            f = run_check(spec, Facts(snapshot(doc)), MATRIX)
            if f.status.value == "error":
                raised.setdefault(spec.id, f.message)
    assert raised == {}
