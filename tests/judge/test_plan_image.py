"""`dl-doctor plan --image`: an image's config judged against this host the way the NVIDIA container runtime judges it
(dl_doctor.facts.requirements, shared with DLD-CUDA-001), on sysroot trees with recorded NVML state."""

import copy
import json
from pathlib import Path

import pytest

import machines
from conftest import FIXTURES, build_tree
from dl_doctor import app
from dl_doctor.engine import collect, evaluate
from dl_doctor.facts import requirements as req
from dl_doctor.host import Host
from dl_doctor.judge.plan import image
from dl_doctor.judge.plan.change import PlanInputError, WhatIf
from dl_doctor.probes.nvml import collect_nvml
from dl_doctor.registry import load_registry
from fake_nvml import FakeNVML

MATRIX = app.load_matrix(())

# nvidia/cuda:12.6.3-base-ubuntu24.04 (gitlab.com/nvidia/container-images/cuda dist/12.6.3/ubuntu2404/base/Dockerfile)
REQUIRE_126 = " ".join(
    ["cuda>=12.6"] + [f"brand={b},driver>={r},driver<{r + 1}" for r in (470, 535, 550)
                      for b in ("unknown", "grid", "tesla", "nvidia", "quadro", "quadrortx", "nvidiartx", "vapps",
                                "vpc", "vcs", "vws", "cloudgaming")])
CUDA_126_ENV = ["PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin",
                "NVARCH=x86_64", f"NVIDIA_REQUIRE_CUDA={REQUIRE_126}", "NV_CUDA_CUDART_VERSION=12.6.77-1",
                "CUDA_VERSION=12.6.3", "LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
                "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]


def inspect_doc(env, tags=("nvidia/cuda:12.6.3-base-ubuntu24.04",), labels=None):
    """What `docker inspect IMAGE` prints (trimmed)."""
    return [{"Id": "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
             "RepoTags": list(tags), "Architecture": "amd64", "Os": "linux",
             "Config": {"Env": list(env), "Labels": labels if labels is not None else
                        {"maintainer": "NVIDIA CORPORATION <cudatools@nvidia.com>"}}}]


def nvml_record(driver, cuda, name, cc, brand, buses):
    """A FakeNVML recording: p4d_healthy's first device, renamed."""
    base = json.loads((FIXTURES / "nvml" / "p4d_healthy.json").read_text())
    devices = []
    for i, bus in enumerate(buses):
        d = copy.deepcopy(base["devices"][0])
        d.update(name=name, uuid=f"GPU-0000000{i}-aaaa-bbbb-cccc-00000000000{i}", bus_id=f"00000000:{bus}", cc=list(cc))
        if brand is None:
            d.pop("brand", None)
        else:
            d["brand"] = brand
        devices.append(d)
    return {"driver_version": driver, "cuda_driver_version": cuda, "devices": devices}


def host_snapshot(tmp_path, spec, nvml=None):
    root = build_tree(tmp_path / "root", spec)
    probes = [p for p in load_registry().probes if p.name != "nvml"]
    snap = collect(probes, Host(sysroot=str(root)), {}, timeout=20, matrix=MATRIX)
    if nvml is not None:
        snap["facts"]["nvml"] = collect_nvml(FakeNVML(nvml))
    return snap


def rhel_host(driver, device, nvml_cuda, name, cc, brand, buses=("10:1C.0",)):
    spec = machines.rhel_base(machines.RHEL_K, driver)
    machines.dmi(spec, "p4d.24xlarge")
    for bus in buses:
        machines.pci(spec, "0000:" + bus.lower(), device)
    return spec, nvml_record(driver, nvml_cuda, name, cc, brand, buses)


def findings(snap):
    report = evaluate(snap, app.registry().checks, MATRIX)
    return {f["id"]: f for f in report["findings"]} if isinstance(report, dict) else \
        {f.id: f.to_dict() for f in report}


def plan(snap, document, file="image.json"):
    w = WhatIf(snap)
    change = image.apply(w, document, MATRIX, {"image_file": file})
    return w, change, findings(snap), findings(w.snapshot)


# -- the runtime refuses: the driver satisfies none of the alternatives ----------------------------------------------

def test_cuda_126_image_on_r525_host_is_refused_and_fails_after(tmp_path):
    spec, nvml = rhel_host("525.147.05", "20b0", 12000, "NVIDIA A100-SXM4-40GB", (8, 0), 14)
    w, change, before, after = plan(host_snapshot(tmp_path, spec, nvml), inspect_doc(CUDA_126_ENV))
    assert change.summary == "image nvidia/cuda:12.6.3-base-ubuntu24.04 (CUDA 12.6)"
    assert before["DLD-CUDA-001"]["status"] == "pass"
    cuda = after["DLD-CUDA-001"]
    assert cuda["status"] == "fail"
    assert ("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.6, please update your driver "
            "to a newer version, or use an earlier cuda container") in cuda["message"]
    assert cuda["evidence"]["container_requirements"]["status"] == "unsatisfied"
    assert w.get("cuda_toolkits.container_env.NVIDIA_REQUIRE_CUDA") == REQUIRE_126
    assert w.get("system.container.in_container") is True
    assert w.get("nvidia_driver.runtime.by") == "container-runtime"
    assert any("would refuse to start it" in n for n in change.notes)
    assert change.steps and "560.28.03" in change.steps[0]["text"]
    assert {e["key"] for e in change.edits} >= {"cuda_toolkits.container_env.NVIDIA_REQUIRE_CUDA",
                                                 "cuda_toolkits.container_env.CUDA_VERSION"}


def test_the_same_image_on_a_geforce_r470_host_is_refused(tmp_path):
    """The CUDA images list no geforce alternative: forward compatibility does not work there."""
    spec, nvml = rhel_host("470.256.02", "2204", 11040, "NVIDIA GeForce RTX 3090", (8, 6), 5)
    _, _, _, after = plan(host_snapshot(tmp_path, spec, nvml), inspect_doc(CUDA_126_ENV))
    assert after["DLD-CUDA-001"]["status"] == "fail"
    assert "unsatisfied condition: cuda>=12.6" in after["DLD-CUDA-001"]["message"]


def test_refused_image_whose_cuda_the_driver_serves_fails_in_a_plan_and_warns_in_a_running_container(tmp_path):
    """cuda>=12.4 on R535 (CUDA 12.2): the legacy runtime refuses it, though minor-version compatibility would run
    it. In a plan the container does not start (fail); a container that runs was started with the check bypassed
    (CDI) and works: only a new one started the legacy way fails (warn)."""
    snap = host_snapshot(tmp_path, machines.p4d_rhel8_healthy(),
                         json.loads((FIXTURES / "nvml" / "p4d_healthy.json").read_text()))
    env = ["NVIDIA_REQUIRE_CUDA=cuda>=12.4", "CUDA_VERSION=12.4.1", "NVIDIA_VISIBLE_DEVICES=all"]
    w, _, _, after = plan(snap, inspect_doc(env, tags=("pytorch:cu124",)))
    assert after["DLD-CUDA-001"]["status"] == "fail"
    assert "unsatisfied condition: cuda>=12.4, please update" in after["DLD-CUDA-001"]["message"]
    running = copy.deepcopy(w.snapshot)
    running["facts"]["system"]["container"]["evidence"] = ["/.dockerenv"]
    cuda = findings(running)["DLD-CUDA-001"]
    assert cuda["status"] == "warn"
    assert cuda["message"].startswith("driver 535.104.05 (CUDA 12.2) serves this container's CUDA 12.4 (through "
                                      "minor-version compatibility), but the NVIDIA container runtime refuses")


# -- satisfied through a brand/driver alternative: forward compatibility ----------------------------------------------

def test_cuda_126_image_on_r470_tesla_starts_through_forward_compat(tmp_path):
    spec, nvml = rhel_host("470.256.02", "1eb8", 11040, "Tesla T4", (7, 5), 2)
    w, change, before, after = plan(host_snapshot(tmp_path, spec, nvml), inspect_doc(CUDA_126_ENV))
    cuda = after["DLD-CUDA-001"]
    assert cuda["status"] == "pass", cuda["message"]
    assert "NVIDIA_REQUIRE_CUDA holds through its alternative 'brand=tesla,driver>=470,driver<471'" in cuda["message"]
    assert "only through the image's CUDA forward-compatibility libraries" in cuda["message"]
    assert "data-center GPUs only (datacenter, jetson): Tesla T4 is one" in cuda["message"]
    verdict = cuda["evidence"]["container_requirements"]
    assert verdict["forward_compat"] is True and verdict["status"] == "satisfied"
    assert any("forward-compatibility package" in n for n in change.notes)
    assert before["DLD-CUDA-001"]["status"] == after["DLD-CUDA-001"]["status"]


def test_without_nvml_the_brand_is_unknown_never_a_failure(tmp_path):
    """A tree without NVML: brand= alternatives cannot be judged, so the runtime's verdict is unknown; the
    matrix's judgement of the CUDA version stands alone."""
    spec, _ = rhel_host("470.256.02", "1eb8", 11040, "Tesla T4", (7, 5), 2)
    w, change, _, after = plan(host_snapshot(tmp_path, spec), inspect_doc(CUDA_126_ENV))
    verdict = after["DLD-CUDA-001"]["evidence"]["container_requirements"]
    assert verdict["status"] == "unknown"
    assert "refuses" not in after["DLD-CUDA-001"]["message"]
    assert any("NVML brand" in n for n in change.notes) and change.unknown


# -- NVIDIA_DISABLE_REQUIRE and legacy images -------------------------------------------------------------------------

def test_disable_require_starts_it_and_only_the_cuda_version_is_judged(tmp_path):
    spec, nvml = rhel_host("525.147.05", "20b0", 12000, "NVIDIA A100-SXM4-40GB", (8, 0), 14)
    _, change, _, after = plan(host_snapshot(tmp_path, spec, nvml),
                               inspect_doc(CUDA_126_ENV + ["NVIDIA_DISABLE_REQUIRE=true"]))
    cuda = after["DLD-CUDA-001"]
    assert cuda["evidence"]["container_requirements"]["status"] == "disabled"
    assert "refuses" not in cuda["message"] and cuda["status"] == "pass"  # 12.6 on R525: minor-version compatibility
    assert "minor-version compatibility" in cuda["message"]
    assert any("NVIDIA_DISABLE_REQUIRE=true" in n for n in change.notes)


def test_legacy_image_gets_cuda_floor_from_cuda_version(tmp_path):
    spec, nvml = rhel_host("470.256.02", "1eb8", 11040, "Tesla T4", (7, 5), 2)
    env = ["PATH=/usr/bin", "CUDA_VERSION=12.2.2", "NVIDIA_VISIBLE_DEVICES=all"]
    _, change, _, after = plan(host_snapshot(tmp_path, spec, nvml), inspect_doc(env, tags=("legacy:12.2",)))
    cuda = after["DLD-CUDA-001"]
    assert cuda["status"] == "fail"
    assert "unsatisfied condition: cuda>=12.2, please update your driver" in cuda["message"]
    assert cuda["evidence"]["container_requirements"]["legacy"] is True
    assert any("legacy image" in n for n in change.notes)


def test_legacy_image_on_a_host_whose_driver_serves_it(tmp_path):
    snap = host_snapshot(tmp_path, machines.p4d_rhel8_healthy(),
                         json.loads((FIXTURES / "nvml" / "p4d_healthy.json").read_text()))
    _, _, _, after = plan(snap, inspect_doc(["CUDA_VERSION=12.2.2"], tags=()))
    assert after["DLD-CUDA-001"]["status"] == "pass"
    assert after["DLD-CUDA-001"]["evidence"]["container_requirements"]["status"] == "satisfied"


# -- the document's shape -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("doc, why", [
    ([], "empty array"), ([{"Config": {}}, {"Config": {}}], "2 images"), (["x"], "not an object"),
    ("text", "not a docker inspect"), ({"Id": "x"}, "no Config"), ([{"Config": {"Env": "A=1"}}], "Env is not a list"),
    ([{"Config": {"Env": [], "Labels": []}}], "Labels is not an object"),
])
def test_bad_documents_are_one_line_errors(doc, why):
    with pytest.raises(PlanInputError) as err:
        image.apply(WhatIf({"facts": {}}), doc, MATRIX, {})
    assert why in str(err.value) and "\n" not in str(err.value)


def test_oci_config_hostile_entries_and_the_name():
    oci = {"architecture": "amd64", "os": "linux",
           "config": {"Env": [1, None, {"a": 1}, "NOEQUALS", "BAD NAME=1", "CUDA_VERSION=11.8.0",
                              "NVIDIA_REQUIRE_CUDA=" + "cuda>=11.8 " * 5000, "X=" + "y" * 70000],
                      "Labels": {"org.opencontainers.image.ref.name": "ubuntu\x1b[31m", "n": 5}}}
    w = WhatIf({"facts": {"cuda_toolkits": {"container_env": {"HOSTONLY": "1"}}}})
    change = image.apply(w, oci, MATRIX, {})
    assert change.summary == "image ubuntu?[31m (CUDA 11.8)"
    env = w.get("cuda_toolkits.container_env")
    assert set(env) == {"NVIDIA_REQUIRE_CUDA", "CUDA_VERSION"}  # the host's container variable is gone
    assert len(env["NVIDIA_REQUIRE_CUDA"]) == req.MAX_TEXT
    assert any("6 Env entries were left out" in n for n in change.notes)
    assert any("OCI image config" in n for n in change.notes)


# -- the parser and evaluator -------------------------------------------------------------------------------------------

def host(driver="470.256.02", cuda="11.4", gpus=(("Tesla T4", "7.5", "tesla"),)):
    return req.Host(driver=driver, cuda=cuda, gpus=[req.GPU(*g) for g in gpus], gpus_known=bool(gpus))


def status(env, h=None):
    return req.evaluate(env, h or host())


def test_space_is_or_comma_is_and_variables_are_anded():
    assert status({"NVIDIA_REQUIRE_CUDA": "cuda>=12.0 driver>=470"}).status == "satisfied"
    assert status({"NVIDIA_REQUIRE_CUDA": "cuda>=12.0 driver>=470,driver<470.1"}).status == "unsatisfied"
    v = status({"NVIDIA_REQUIRE_CUDA": "cuda>=11.0", "NVIDIA_REQUIRE_ARCH": "arch>=8.0"})
    assert v.status == "unsatisfied" and v.failed.variable == "NVIDIA_REQUIRE_ARCH"
    assert v.error == "nvidia-container-cli: requirement error: unsatisfied condition: arch>=8.0"
    assert status({"NVIDIA_REQUIRE_JETPACK": "csv-mounts=all"}).status == "none"  # the hook leaves it out


@pytest.mark.parametrize("text, expected", [
    ("driver=470.256.02", "satisfied"), ("driver=470.256", "unsatisfied"), ("driver!=470", "satisfied"),
    ("driver<470.256.02", "unsatisfied"), ("driver<=470.256.02", "satisfied"), ("driver>470.256.1", "satisfied"),
    ("cuda>=11.4.0", "satisfied"), ("cuda>11.4", "unsatisfied"), ("arch>=7.5", "satisfied"), ("arch<7.5", "unsatisfied"),
    ("BRAND=TESLA", "satisfied"), ("brand!=tesla", "unsatisfied"), ("brand!tesla", "unsatisfied"),  # '!' is '!='
    ("driver==470", "invalid"), ("brand<tesla", "invalid"), ("cuda>=12.x", "invalid"), ("gpu>=1", "invalid"),
    ("cuda>=", "invalid"), (">=12", "invalid"), ("cuda", "invalid"),
    ("cuda>=11.0 nonsense", "satisfied"),        # an invalid alternative after a satisfied one is never reached
    ("cuda>=12.0,foo>=1 cuda>=11.0", "satisfied"),  # nor one after a constraint that fails
    ("cuda>=99 ,", "unsatisfied"), (", cuda>=99", "satisfied"),  # an empty alternative ends it with what it has
    ("", "none"), ("   ", "none"),
])
def test_operators_and_malformed_constraints(text, expected):
    assert status({"NVIDIA_REQUIRE_X": text}).status == expected


def test_malformed_error_text_and_bounds():
    v = status({"NVIDIA_REQUIRE_CUDA": "cuda==12.0"})
    assert v.error == "nvidia-container-cli: requirement error: invalid expression"
    long = " ".join(["brand=geforce,driver>=1"] * 20000)
    r = req.parse(long)
    assert r.truncated and len(r.alternatives) <= req.MAX_ALTERNATIVES and len(r.text) == req.MAX_TEXT
    assert req.parse(",".join(["driver>=1"] * 100)).alternatives[0].constraints.__len__() == req.MAX_CONSTRAINTS
    assert status({f"NVIDIA_REQUIRE_{i}": "driver>=1" for i in range(100)}).notes[0].startswith("68 more")


def test_unknown_facts_are_never_failures():
    no_brand = host(gpus=(("Tesla T4", "7.5", None),))
    assert status({"NVIDIA_REQUIRE_CUDA": "cuda>=12.2 brand=tesla,driver>=470,driver<471"}, no_brand).status == "unknown"
    # a fact missing in an alternative that fails on another constraint does not matter
    assert status({"NVIDIA_REQUIRE_CUDA": "cuda>=12.2 brand=tesla,driver>=535,driver<536"}, no_brand).status \
        == "unsatisfied"
    assert status({"NVIDIA_REQUIRE_CUDA": "cuda>=11.0"}, host(cuda=None)).status == "unknown"
    # every GPU is judged: one GeForce among Teslas refuses the container
    mixed = host(gpus=(("Tesla T4", "7.5", "tesla"), ("RTX 3090", "8.6", "geforce")))
    assert status({"NVIDIA_REQUIRE_CUDA": "cuda>=12.2 brand=tesla,driver>=470,driver<471"}, mixed).status \
        == "unsatisfied"


def test_brands_as_the_runtime_names_them():
    assert req.runtime_brand("nvidia") == "Nvidia" and req.runtime_brand("geforce") == "GeForce"
    assert req.runtime_brand("other") == "Unknown" and req.runtime_brand(None) is None
    h100 = host(driver="535.104.05", cuda="12.2", gpus=(("H100", "9.0", "nvidia"),))
    v = status({"NVIDIA_REQUIRE_CUDA": REQUIRE_126, "CUDA_VERSION": "12.6.3"}, h100)
    assert v.status == "satisfied" and v.forward_compat
    assert v.satisfied_by["NVIDIA_REQUIRE_CUDA"] == "brand=nvidia,driver>=535,driver<536"


@pytest.mark.parametrize("value, off", [("1", True), ("true", True), ("True", True), ("t", True), ("yes", False),
                                        ("0", False), ("false", False), ("", False)])
def test_disable_require_is_go_parsebool(value, off):
    assert (status({"NVIDIA_REQUIRE_CUDA": "cuda>=99", "NVIDIA_DISABLE_REQUIRE": value}).status == "disabled") is off


def test_legacy_cuda_version_forms():
    assert status({"CUDA_VERSION": "12.2.2"}).requirements[0].text == "cuda>=12.2"
    assert status({"CUDA_VERSION": "12.2.2", "NVIDIA_REQUIRE_CUDA": ""}).legacy  # empty counts as unset
    assert not status({"CUDA_VERSION": "12.2.2", "NVIDIA_REQUIRE_CUDA": "cuda>=9.0"}).legacy
    assert status({"CUDA_VERSION": "12.6.2.004"}).status == "unknown"  # not a semantic version: the hook fails
    assert req.require_cuda("cuda>=12.2 brand=tesla,driver>=470") == "12.2" and req.require_cuda("brand=x") is None
    assert req.require_cuda("cuda>=12") == "12.0"


# -- the probes record what the runtime reads ---------------------------------------------------------------------------

def test_cuda_probe_records_every_require_variable_bounded(tmp_path):
    env = {"PATH": "/usr/bin", "NVIDIA_REQUIRE_CUDA": "cuda>=12.2", "NVIDIA_REQUIRE_ARCH": "arch>=8.0",
           "NVIDIA_REQUIRE_FOO": "x" * 20000, "NVIDIA_DISABLE_REQUIRE": "1", "CUDA_VERSION": "12.2.2"}
    block = b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())
    root = build_tree(tmp_path / "r", {"proc/self/environ": block, "etc/os-release": "ID=ubuntu\n"})
    probe = [p for p in load_registry().probes if p.name == "cuda_toolkits"]
    snap = collect(probe, Host(sysroot=str(root)), {}, timeout=10)
    recorded = snap["facts"]["cuda_toolkits"]["container_env"]
    assert set(recorded) == {"NVIDIA_REQUIRE_CUDA", "NVIDIA_REQUIRE_ARCH", "NVIDIA_REQUIRE_FOO",
                             "NVIDIA_DISABLE_REQUIRE", "CUDA_VERSION"}
    assert len(recorded["NVIDIA_REQUIRE_FOO"]) == req.MAX_TEXT and "PATH" not in recorded


def test_nvml_probe_records_the_brand():
    rec = nvml_record("535.104.05", 12020, "NVIDIA A100-SXM4-40GB", (8, 0), 14, ("10:1C.0", "10:1D.0", "20:1C.0"))
    rec["devices"][1]["brand"] = 99
    del rec["devices"][2]["brand"]
    devs = collect_nvml(FakeNVML(rec))["devices"]
    assert [d["brand"] for d in devs] == ["nvidia", "other", None]
    assert "brand" in devs[2]["unsupported"] and "brand" not in devs[0]["unsupported"]


def test_fact_contract_names_the_new_facts():
    schema = json.loads((Path(__file__).parents[2] / "doctor" / "facts" / "facts-v1.json").read_text())
    text = json.dumps(schema)
    assert "NVIDIA_DISABLE_REQUIRE" in text and "nvmlDeviceGetBrand" in text
