"""`dl-doctor plan` (issue 29): the what-if facts after a change, judged with the same checks as `run`.

Judged on machines of the healthy corpus (tests/healthy.py: a DLAMI g5 with torch 2.5.1+cu124 envs, a p5 with
NVSwitches) and recorded machines (tests/fixtures/snapshots), through dl_doctor.integrations.plan and the installed
entry point."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from conftest import FIXTURES

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

SNAPSHOTS = FIXTURES / "snapshots"


def _healthy(name: str, tmp: Path) -> Dict[str, Any]:
    import cases
    import healthy

    spec = healthy.spec_of(name)
    machine = cases.paired(name, spec) if healthy.HEALTHY[name].get("nvml") else cases.Machine(spec)
    root = cases.build(tmp / name, machine.spec)
    snap = cases.snapshot_of(root, machine)
    snap.update(mode="live", sysroot=None)
    return snap


@pytest.fixture(scope="module")
def machines(tmp_path_factory) -> Dict[str, Dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("plan")
    out = {name: _healthy(name, tmp) for name in ("dlami_ubuntu2204_g5", "dlami_al2023_p5")}
    for name in ("p4d_rhel8_healthy", "p4d_driver_upgrade_no_reboot"):
        out[name] = json.loads((SNAPSHOTS / f"{name}.json").read_text())
    return out


def plan(snapshot: Dict[str, Any], *requests: Tuple[str, Any], fail_on: str = "fail",
         **options: Any) -> Tuple[Dict[str, Any], int]:
    from dl_doctor.app import load_matrix, registry
    from dl_doctor.integrations.plan import make_plan

    return make_plan(snapshot, list(requests), registry().checks, load_matrix(()), fail_on=fail_on, options=options)


def moved(doc: Dict[str, Any]) -> Dict[str, Tuple[Any, Any]]:
    return {t["id"]: (t["from"], t["to"]) for t in doc["transitions"]}


def worse(doc: Dict[str, Any]) -> List[str]:
    return [t["id"] for t in doc["transitions"] if t["worse"]]


# -- --driver -----------------------------------------------------------------------------------------------------

def test_a_driver_too_old_for_an_environments_cuda_build_fails(machines):
    doc, code = plan(machines["dlami_ubuntu2204_g5"], ("driver", "470.256.02"))
    assert code == 1 and doc["exit_code"] == 1
    assert moved(doc)["DLD-CUDA-001"] == ("pass", "fail")
    t = next(t for t in doc["transitions"] if t["id"] == "DLD-CUDA-001")
    assert t["verified"] and "torch 2.5.1+cu124" in t["reason"] and "needs driver >= " in t["reason"]
    assert set(t) >= {"id", "key", "env", "from", "to", "reason"}
    # the driver step that makes it safe names a branch that serves CUDA 12.4
    assert any("nvidia-driver-550-server" in c or "nvidia-driver-5" in c for s in doc["steps"] for c in s["commands"])
    assert doc["verdict"].startswith("not safe")


def test_a_newer_driver_breaks_nothing_and_moves_every_driver_fact(machines):
    snap = machines["dlami_ubuntu2204_g5"]
    doc, code = plan(snap, ("driver", "570.172.08"))
    assert code == 0 and worse(doc) == [], doc["transitions"]
    change = doc["changes"][0]
    assert change["summary"] == "driver 550.127.05 -> 570.172.08 (CUDA 12.8)" and change["verified"]
    keys = {e["key"]: e for e in change["edits"]}
    assert keys["nvidia_driver.kernel_module.version"]["to"] == "570.172.08"
    assert any(k.endswith(".path") and str(e["to"]).endswith("libcuda.so.570.172.08") for k, e in keys.items())
    assert doc["verdict"] == "safe: no finding gets worse"
    # the input snapshot is not touched: the what-if is a copy
    assert snap["facts"]["nvidia_driver"]["kernel_module"]["version"] == "550.127.05"


def test_nvml_reports_the_new_driver_and_its_cuda(machines):
    doc, code = plan(machines["p4d_rhel8_healthy"], ("driver", "535.230.02"))
    keys = {e["key"]: e for e in doc["changes"][0]["edits"]}
    assert keys["nvml.driver_version"]["to"] == "535.230.02" and "nvml.cuda_driver_version" not in keys  # R535: 12.2
    assert keys["gpu_services.fabric_manager.version.version"] == {
        "key": "gpu_services.fabric_manager.version.version", "from": "535.104.05", "to": "535.230.02"}
    assert code == 0 and worse(doc) == [], doc["transitions"]


def test_the_same_driver_changes_nothing(machines):
    doc, code = plan(machines["dlami_ubuntu2204_g5"], ("driver", "550.127.05"))
    assert code == 0 and doc["transitions"] == [] and doc["changes"][0]["edits"] == []


def test_a_point_release_moves_the_fabric_manager_another_branch_does_not(machines):
    p5 = machines["dlami_al2023_p5"]
    same, code = plan(p5, ("driver", "550.163.01"))
    assert code == 0 and worse(same) == []
    assert any("upgraded with the driver" in n for n in same["changes"][0]["notes"])
    other, code = plan(p5, ("driver", "570.172.08"))
    assert code == 1 and moved(other)["DLD-GPU-004"] == ("pass", "fail")
    fm = [s for s in other["steps"] if "DLD-GPU-004" in s["for"]]
    assert fm and any("570.172.08" in c for c in fm[0]["commands"])
    # the driver comes before the fabric manager of its version
    order = [s["for"][0] for s in other["steps"]]
    assert order.index("--driver 570.172.08") < order.index("DLD-GPU-004")


def test_failures_before_the_change_are_listed_but_do_not_count(machines):
    snap = machines["p4d_driver_upgrade_no_reboot"]
    from dl_doctor.app import load_matrix, registry
    from dl_doctor.engine import evaluate

    before = {f.id for f in evaluate(snap, registry().checks, load_matrix(())) if f.status.value == "fail"}
    assert before, "the recorded machine has failures"
    doc, code = plan(snap, ("cuda", "12.2"))  # what /usr/local/cuda is already: nothing changes
    assert code == 0 and doc["transitions"] == []
    assert before <= {p["id"] for p in doc["unchanged_problems"]}


@pytest.mark.parametrize("value, words", [
    ("999.1.2", "branch R999 is not in the matrix (newer than every branch it knows); nearest known branches"),
    ("300.10", "older than every CUDA release the matrix knows"),
    ("latest", "is not an NVIDIA driver version"),
    ("535.1.2.3.4", "is not an NVIDIA driver version"),
])
def test_a_driver_the_matrix_cannot_judge_is_bad_input(machines, value, words):
    from dl_doctor.judge.plan import PlanInputError

    with pytest.raises(PlanInputError, match=words.replace("(", r"\(").replace(")", r"\)")):
        plan(machines["p4d_rhel8_healthy"], ("driver", value))


def test_a_branch_between_the_matrixs_floors_is_judged_by_the_floor_below_it(machines):
    # R565 (a feature branch; its nvidia-smi says CUDA 12.7, a CUDA release that does not exist as a toolkit)
    doc, code = plan(machines["dlami_ubuntu2204_g5"], ("driver", "565.57.01"))
    assert doc["changes"][0]["summary"] == "driver 550.127.05 -> 565.57.01 (CUDA 12.6)" and code == 0


# -- --cuda ---------------------------------------------------------------------------------------------------------

def test_a_toolkit_the_driver_cannot_serve_fails(machines):
    doc, code = plan(machines["p4d_rhel8_healthy"], ("cuda", "13.0"))
    assert code == 1 and moved(doc)["DLD-CUDA-001"] == ("pass", "fail")
    cuda_step = next(s for s in doc["steps"] if s["for"] == ["--cuda 13.0"])
    assert "sudo ln -sfn /usr/local/cuda-13.0 /usr/local/cuda" in cuda_step["commands"]
    assert any("cuda-toolkit-13-0" in c for c in cuda_step["commands"])


def test_a_worsening_that_rests_on_an_unverified_entry_is_reported_without_exit_1(machines):
    from dl_doctor.app import load_matrix

    entry = load_matrix(()).cuda("13.3")
    assert entry is not None and entry["verified"] is False, "the matrix's CUDA 13.3 floor is marked unverified"
    doc, code = plan(machines["p4d_rhel8_healthy"], ("cuda", "13.3"))
    t = next(t for t in doc["transitions"] if t["id"] == "DLD-CUDA-001")
    assert (t["from"], t["to"], t["worse"], t["verified"]) == ("pass", "fail", True, False)
    assert code == 0 and not doc["changes"][0]["verified"]
    assert "unverified" in doc["verdict"]


# -- --install --------------------------------------------------------------------------------------------------------

def test_a_torch_upgrade_to_a_cuda_major_the_driver_cannot_serve(machines):
    doc, code = plan(machines["dlami_ubuntu2204_g5"], ("install", "pytorch:torch==2.9.0+cu130"))
    assert code == 1
    t = next(t for t in doc["transitions"] if t["id"] == "DLD-CUDA-001")
    assert t["to"] == "fail" and "torch 2.9.0+cu130" in t["reason"] and t["env"] == "pytorch"
    # torchvision/torchaudio pinned to the old torch: the companions' findings move too
    assert {"DLD-PY-005", "DLD-PKG-001"} <= set(worse(doc))
    # the driver before the wheel; the wheel with its companions, from the index of its build
    steps = doc["steps"]
    driver = next(n for n, s in enumerate(steps) if "DLD-CUDA-001" in s["for"])
    wheel = next(n for n, s in enumerate(steps) if s["for"] == ["--install pytorch:torch==2.9.0+cu130"])
    assert driver < wheel
    assert steps[wheel]["commands"] == [
        "/opt/conda/envs/pytorch/bin/python -m pip install 'torch==2.9.0' 'torchvision==0.24.0' 'torchaudio==2.9.0' "
        "--index-url https://download.pytorch.org/whl/cu130"]
    # no step reinstalls the old torch the requirers pin (the plan's own step installs torch)
    assert not any("torch==2.5.1" in c for s in steps for c in s["commands"])


def test_a_torch_build_the_driver_serves_moves_only_the_companions(machines):
    doc, code = plan(machines["dlami_ubuntu2204_g5"], ("install", "pytorch:torch==2.5.1+cu121"))
    assert "DLD-CUDA-001" not in moved(doc)
    assert not {"DLD-PY-011", "DLD-PY-012"} & set(worse(doc)), doc["transitions"]


def test_an_unknown_package_is_reported_as_unknown(machines):
    doc, code = plan(machines["dlami_ubuntu2204_g5"], ("install", "pytorch:jax==0.4.30"))
    assert code == 0 and doc["transitions"] == [] and doc["changes"][0]["unknown"]
    assert "no release data for jax" in doc["changes"][0]["notes"][0]


def test_a_wheel_for_another_python_is_a_change_that_cannot_be_made(machines):
    snap = copy.deepcopy(machines["dlami_ubuntu2204_g5"])
    env = next(e for e in snap["facts"]["python_envs"]["environments"] if e.get("name") == "pytorch")
    env["python_version"] = "3.8.18"
    doc, code = plan(snap, ("install", "pytorch:torch==2.9.0+cu126"))
    assert code == 1 and "no wheel for Python 3.8" in doc["changes"][0]["blockers"][0]
    assert "cannot be made as asked" in doc["verdict"]


@pytest.mark.parametrize("value, words", [
    ("pytorch:torch==2.99.0+cu130", "torch 2.99.0 is not in the matrix; nearest known"),
    ("pytorch:torch==2.5.1+cu130", "torch 2.5.1 has no cu130 build; its builds: cu118, cu121, cu124"),
    ("pytorch:torch>=2.5", "say which torch release and build"),
    ("pytorch:torch==2.9.0+rocm6", "is not a PyTorch build label"),
    ("nowhere:torch==2.9.0+cu130", "no Python environment 'nowhere'"),
    ("torch==2.9.0", "is not ENV:REQUIREMENT"),
    ("pytorch:torch===", "is not a requirement"),
    ("pytorch:torchvision==9.9.9", "torchvision 9.9.9 is not in the matrix"),
])
def test_an_install_the_plan_cannot_take_is_bad_input(machines, value, words):
    from dl_doctor.judge.plan import PlanInputError

    with pytest.raises(PlanInputError, match=words.replace("(", r"\(").replace("+", r"\+")):
        plan(machines["dlami_ubuntu2204_g5"], ("install", value))


def test_an_ambiguous_environment_name_lists_the_candidates(machines):
    from dl_doctor.judge.plan import PlanInputError

    snap = copy.deepcopy(machines["dlami_ubuntu2204_g5"])
    envs = snap["facts"]["python_envs"]["environments"]
    twin = copy.deepcopy(next(e for e in envs if e.get("name") == "pytorch"))
    twin["prefix"] = "/home/ubuntu/miniconda3/envs/pytorch"
    envs.append(twin)
    with pytest.raises(PlanInputError) as err:
        plan(snap, ("install", "pytorch:torch==2.9.0+cu126"))
    assert "names 2 environments" in str(err.value) and "/home/ubuntu/miniconda3/envs/pytorch" in str(err.value)
    doc, _ = plan(snap, ("install", "/home/ubuntu/miniconda3/envs/pytorch:torch==2.5.1+cu121"))
    assert doc["changes"][0]["summary"].startswith("pytorch: torch 2.5.1+cu124 -> 2.5.1+cu121")


# -- --gpu / --instance-type --------------------------------------------------------------------------------------

def test_the_same_stack_on_a_gpu_its_builds_have_no_code_for(machines):
    doc, code = plan(machines["dlami_ubuntu2204_g5"], ("gpu", "B200"))
    # torch 2.5.1+cu124's arch list ends at sm_90 without PTX: no code for sm_100; and a Blackwell GPU needs the open
    # kernel modules, which this machine does not load
    t = next(t for t in doc["transitions"] if t["id"] == "DLD-PY-003")
    assert t["worse"] and "has no code for NVIDIA B200 (compute capability 10.0, sm_100)" in t["reason"]
    assert moved(doc)["DLD-GPU-002"] == ("pass", "fail") and code == 1
    assert "DLD-CUDA-004" in worse(doc)  # its nvcc 12.4 cannot build for sm_100
    # an instance type says which GPUs it has: another GPU is not this g5
    assert "DLD-GPU-003" not in worse(doc)


def test_the_same_stack_on_a_gpu_it_has_code_for_is_safe(machines):
    doc, code = plan(machines["dlami_ubuntu2204_g5"], ("gpu", "L40S"))
    assert code == 0 and worse(doc) == [], doc["transitions"]


def test_another_instance_type_brings_its_gpus_nvswitch_and_efa(machines):
    doc, code = plan(machines["p4d_rhel8_healthy"], ("instance-type", "p5.48xlarge"))
    summary = doc["changes"][0]["summary"]
    assert summary.startswith("instance p4d.24xlarge -> p5.48xlarge: 8 x NVIDIA H100")
    assert "DLD-NET-001" in worse(doc)  # the image has no EFA software for p5's 32 interfaces
    with pytest.raises(Exception, match="exclude each other"):
        plan(machines["p4d_rhel8_healthy"], ("gpu", "H100"), ("instance-type", "p5.48xlarge"))


# -- the command line -----------------------------------------------------------------------------------------------

def test_plan_on_a_saved_report_through_the_entry_point(run_cli, machines, tmp_path):
    facts = tmp_path / "g5.json"
    facts.write_text(json.dumps(machines["dlami_ubuntu2204_g5"]))
    out = tmp_path / "plan.json"
    r = run_cli("plan", "--report", str(facts), "--install", "pytorch:torch==2.9.0+cu130", "--json", str(out),
                "--markdown", str(tmp_path / "plan.md"))
    assert r.returncode == 1, r.stderr
    doc = json.loads(out.read_text())
    assert doc["kind"] == "dl-doctor-plan" and doc["exit_code"] == 1
    assert "pass -> FAIL  DLD-CUDA-001" in r.stdout and r.stdout.rstrip().splitlines()[-1].startswith("Plan: not safe")
    md = (tmp_path / "plan.md").read_text()
    assert "| `DLD-CUDA-001` | pass | FAIL |" in md and "ip-" not in md
    r = run_cli("plan", "--report", str(facts), "--driver", "570.172.08", "--fail-on", "warn", "-q")
    assert r.returncode == 0 and r.stdout.strip() == "Plan: safe: no finding gets worse"


@pytest.mark.parametrize("args, words", [
    ([], "say what changes"),
    (["--driver", "999.1"], "branch R999"),
    (["--driver-flavor", "open"], "--driver-flavor goes with --driver"),
    (["--install", "pytorch:torch==2.99.0+cu130"], "not in the matrix"),
])
def test_bad_plan_input_is_one_line_and_exit_2(run_cli, machines, tmp_path, args, words):
    facts = tmp_path / "g5.json"
    facts.write_text(json.dumps(machines["dlami_ubuntu2204_g5"]))
    r = run_cli("plan", "--report", str(facts), *args)
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and words in lines[0], (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr


def test_plan_on_a_mounted_image_collects_it_first(run_cli, tmp_path):
    from conftest import build_tree
    from machines import p4d_rhel8_healthy

    root = build_tree(tmp_path / "img", p4d_rhel8_healthy())
    r = run_cli("plan", "--sysroot", str(root), "--cuda", "13.0", "--json", "-")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["source"] == f"sysroot {root}" and doc["host"]["target"] in ("image", "captured")
    t = next(t for t in doc["transitions"] if t["id"] == "DLD-CUDA-001")
    assert t["to"] == "fail"
    # a typo in a change option costs no collection: refused before the probes
    r = run_cli("plan", "--sysroot", str(root), "--gpu", "no-such-gpu")
    assert r.returncode == 2 and "no GPU 'no-such-gpu'" in r.stderr


def test_plan_on_the_live_host(run_cli):
    r = run_cli("plan", "--cuda", "12.8", "--no-env-scan", "--json", "-", timeout=180)
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    assert doc["source"] == "this host" and doc["host"]["target"] == "live"
    change = doc["changes"][0]
    assert change["kind"] == "cuda" and change["summary"].endswith("-> 12.8 (needs driver >= 570.26)")
    assert any(e["key"] == "cuda_toolkits.default" for e in change["edits"]) or "already" in " ".join(change["notes"])


def test_a_gpu_its_builds_have_no_code_for_gets_the_build_that_has(machines):
    doc, _ = plan(machines["dlami_ubuntu2204_g5"], ("gpu", "B200"))
    take = [s for s in doc["steps"] if s["text"].startswith("pytorch: torch 2.5.1+cu124 has no code for NVIDIA B200")]
    assert take and "take torch 2.7.0+cu128 instead" in take[0]["text"]
    assert take[0]["commands"] == ["/opt/conda/envs/pytorch/bin/python -m pip install 'torch==2.7.0' --index-url "
                                   "https://download.pytorch.org/whl/cu128"]
    # DLD-PY-003's own generic reinstall is left out: the plan's step names the build
    assert not any("whl/cu<XY>" in c for s in doc["steps"] for c in s["commands"] if "--force-reinstall" in c)


def test_an_image_config_through_the_entry_point(run_cli, machines, tmp_path):
    """`docker inspect nvidia/cuda:12.6.3-base-ubuntu22.04`'s Env (its real NVIDIA_REQUIRE_CUDA, shortened to the
    brands of the R470/R535 alternatives) on the recorded p4d (R535, A100: NVML brand nvidia)."""
    require = "cuda>=12.6 " + " ".join(f"brand={b},driver>={d},driver<{d + 1}" for d in (470, 535)
                                       for b in ("unknown", "tesla", "nvidia", "quadro"))
    image = tmp_path / "inspect.json"
    image.write_text(json.dumps([{"Id": "sha256:0", "RepoTags": ["nvidia/cuda:12.6.3-base-ubuntu22.04"],
                                  "Config": {"Env": [f"NVIDIA_REQUIRE_CUDA={require}", "CUDA_VERSION=12.6.3"]}}]))
    facts = SNAPSHOTS / "p4d_rhel8_healthy.json"
    r = run_cli("plan", "--report", str(facts), "--image", str(image), "--json", "-")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["changes"][0]["summary"] == "image nvidia/cuda:12.6.3-base-ubuntu22.04 (CUDA 12.6)"
    assert any("brand=nvidia,driver>=535,driver<536" in n for n in doc["changes"][0]["notes"])
    assert not [t for t in doc["transitions"] if t["worse"]]
    assert {t["change"] for t in doc["transitions"]} <= {"judged", "not judged"}
    # the same image where only cuda>=12.6 could start it: R535 cannot
    image.write_text(json.dumps([{"Config": {"Env": ["NVIDIA_REQUIRE_CUDA=cuda>=12.6", "CUDA_VERSION=12.6.3"]}}]))
    r = run_cli("plan", "--report", str(facts), "--image", str(image))
    assert r.returncode == 1 and "pass -> FAIL  DLD-CUDA-001" in r.stdout, r.stdout
    image.write_text('{"Config": "not an object"}')
    r = run_cli("plan", "--report", str(facts), "--image", str(image))
    assert r.returncode == 2 and r.stderr.startswith("dl-doctor: error: --image")
