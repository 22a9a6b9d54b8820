"""The HTML report as a person reads it (issue 28): each status told apart by colour, icon and word; every stack mark
on the layer the finding is about; the NVIDIA services in the stack; the GPU model the PCI ID gives where NVML named
none; the checks that passed before those that were skipped. Reports come from recorded machines (tests/machines.py,
tests/fixtures/snapshots, the reported cases of tests/cases)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import machines

HERE = Path(__file__).resolve().parents[1]
SNAPSHOTS = HERE / "fixtures" / "snapshots"


def _runner(tmp_path_factory, request):
    from conftest import CliRunner

    return CliRunner(tmp_path_factory.mktemp("cli"), request)


def _section(page: str, start: str, end: str) -> str:
    return page[page.index(start):page.index(end)]


LAYERS = {"GPUs": "gpus", "Kernel module": "module", "User-space driver": "driver", "NVIDIA services": "services",
          "CUDA toolkits": "toolkits"}


def _nodes(page: str) -> dict:
    """The stack's system boxes, by the layer each names: layer key -> (state, the box's inner HTML)."""
    stack = _section(page, '<section id="stack">', '<section id="checks">')
    boxes = re.findall(r'<div class="node ([a-z]+)[^"]*"[^>]*>(<span class="layer">([^<]+).*?)</div>', stack, re.S)
    return {LAYERS[layer.strip()]: (state, body) for state, body, layer in boxes}


def _links(html: str) -> list:
    """The check IDs a part of the picture links to."""
    return re.findall(r'href="#([A-Z][A-Z0-9]*-[A-Z0-9-]+)"', html)


def _flags(html: str) -> list:
    """(status, check ID) of each finding a part of the picture links, as its flag shows it."""
    return re.findall(r'<a class="flag s-([a-z]+)" href="#([A-Z0-9-]+)">', html)


def _framework(page: str, name: str) -> str:
    stack = _section(page, '<section id="stack">', '<section id="checks">')
    m = re.search(r'<div class="fw ([a-z]+)"><h4>' + re.escape(name) + r' .*?</h4>', stack, re.S)
    assert m, f"no {name} in the stack"
    return m.group(0)


@pytest.fixture(scope="module")
def upgraded_p4d(tmp_path_factory, request):
    """The recorded p4d whose driver was upgraded without a reboot: DLD-DRV-003 and DLD-GPU-004 fail."""
    out = tmp_path_factory.mktemp("p4d")
    r = _runner(tmp_path_factory, request)(
        "check", str(SNAPSHOTS / "p4d_driver_upgrade_no_reboot.json"), "--fail-on", "never",
        "--json", str(out / "r.json"), "--html", str(out / "r.html"))
    assert r.returncode == 0, r.stderr
    return json.loads((out / "r.json").read_text()), (out / "r.html").read_text()


@pytest.fixture(scope="module")
def driver_too_old_for_torch(tmp_path_factory, request):
    """The reported case fooocus#1313 (driver 470.86 under torch 2.5.1+cu124), its CUDA 12 toolkits replaced by a
    CUDA 11.4 toolkit this driver does serve: DLD-CUDA-001 fails about torch alone, and DLD-PY-008 warns that this
    toolkit would build torch's extensions. Judged from its tree (no NVML)."""
    import cases
    from conftest import build_tree

    machine = cases.load_builders()["fooocus-1313-driver-470-torch-cu121"](True)
    spec = {k: v for k, v in machine.spec.items() if not k.startswith("usr/local/cuda")}
    machines.cuda(spec, "11.4.4")
    root = build_tree(tmp_path_factory.mktemp("fooocus") / "root", spec)
    out = tmp_path_factory.mktemp("out")
    r = _runner(tmp_path_factory, request)(
        "run", "--sysroot", str(root), "--fail-on", "never", "--json", str(out / "r.json"),
        "--html", str(out / "r.html"), timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads((out / "r.json").read_text()), (out / "r.html").read_text()


def test_fail_warn_error_pass_and_skip_differ_by_icon_and_word_not_colour_alone():
    from dl_doctor.reports import html

    def finding(status, ident):
        return {"id": ident, "slug": f"s-{status}", "title": f"t {status}", "status": status, "tags": [],
                "message": f"{status} message", "headline": f"{status} headline", "evidence": {}, "fix": None}

    report = {"schema_version": "1", "tool": {"name": "dl-doctor", "version": "0"}, "host": {"hostname": "h"},
              "run": {"mode": "check", "started_at": "2026-01-01T00:00:00Z", "duration_s": 0.1},
              "summary": {"fail": 1, "error": 1, "warn": 1, "pass": 1, "skip": 1}, "facts": {},
              "privilege": {}, "probe_errors": [],
              "findings": [finding(s, f"DLD-T-00{i}") for i, s in enumerate(("fail", "error", "warn", "pass", "skip"))]}
    page = html.render(report)
    icons = {"fail": "✖", "error": "◆", "warn": "▲", "pass": "✔", "skip": "○"}
    for status, icon in icons.items():
        badge = f'<span class="badge s-{status}"><span aria-hidden="true">{icon}</span> {status}</span>'
        assert badge in page, status
    for status in ("fail", "error", "warn"):  # a card per problem, its class the status, its badge in its heading
        card = re.search(rf'<article class="finding {status}" id="DLD-T-\d+">\s*<h3>(.*?)</h3>', page, re.S)
        assert card and f"{icons[status]}</span> {status}</span> {status} headline" in card.group(1)
    # the cards of a FAIL and a WARN differ in more than a hue: the left border's style, and the badge's ink
    css = page[page.index("<style>"):page.index("</style>")]
    fail_card = re.search(r"\.finding\.fail \{([^}]*)\}", css).group(1)
    warn_card = re.search(r"\.finding\.warn \{([^}]*)\}", css).group(1)
    assert "solid" in fail_card and "dashed" in warn_card
    fail_badge = re.search(r"\.s-fail \{([^}]*)\}", css).group(1)
    warn_badge = re.search(r"\.s-warn \{([^}]*)\}", css).group(1)
    assert "color: #fff" in fail_badge and "color: #101828" in warn_badge  # white on red, dark on amber
    # the counts at the top carry the icons too
    counts = _section(page, '<ul class="counts"', "</ul>")
    assert all(f"{icon}</span> 1 {status}" in counts for status, icon in icons.items())


def test_a_driver_too_old_for_torch_marks_the_driver_and_torch_not_the_toolkits(driver_too_old_for_torch):
    report, page = driver_too_old_for_torch
    bad = {f["id"]: f for f in report["findings"] if f["status"] in ("warn", "fail", "error")}
    assert {i: f["status"] for i, f in bad.items()} == {"DLD-CUDA-001": "fail", "DLD-PY-008": "warn"}
    assert "torch 2.5.1+cu124" in bad["DLD-CUDA-001"]["message"] and "toolkit" not in bad["DLD-CUDA-001"]["message"]
    nodes = _nodes(page)
    state, body = nodes["driver"]
    assert _links(body) == ["DLD-CUDA-001"] and "libcuda 470.86" in body
    assert state == "bad" and _flags(body) == [("fail", "DLD-CUDA-001")]
    # the toolkit is CUDA 11.4, which the driver serves: only the toolkit's own finding marks it
    state, body = nodes["toolkits"]
    assert _links(body) == ["DLD-PY-008"] and "11.4.4" in body
    assert state == "warn" and _flags(body) == [("warn", "DLD-PY-008")]
    assert "DLD-CUDA-001" not in nodes["gpus"][1] + nodes["module"][1] + nodes["services"][1]
    torch = _framework(page, "torch 2.5.1+cu124")
    assert torch.startswith('<div class="fw bad">') and ("fail", "DLD-CUDA-001") in _flags(torch)
    # and the model says the same, for the other views (the terminal's stack, the Markdown summary)
    from dl_doctor.reports import stack

    model = stack.build(report)
    system = {n["key"]: n for n in model["system"]}
    assert [m["id"] for m in system["driver"]["findings"]] == ["DLD-CUDA-001"]
    assert system["toolkits"]["findings"] == [{"id": "DLD-PY-008", "status": "warn"}]
    [env] = [e for e in model["environments"] if e["prefix"] == "/opt/conda/envs/pytorch"]
    [fw] = [fw for fw in env["frameworks"] if fw["name"] == "torch"]
    assert fw["findings"] == [{"id": "DLD-CUDA-001", "status": "fail"}, {"id": "DLD-PY-008", "status": "warn"}]
    assert env["state"] == "bad"


def test_a_toolkit_finding_marks_the_toolkit_and_the_framework_it_builds_for():
    """DLD-PY-008 (the reported case vllm#1453): torch 2.1.2+cu121 while CUDA_HOME's nvcc is 11.8."""
    from dl_doctor.reports import stack

    report = {"facts": {"cuda_toolkits": {"toolkits": [{"path": "/usr/local/cuda-11.8", "version": "11.8.0"},
                                                       {"path": "/usr/local/cuda-12.1", "version": "12.1.1"}]},
                        "nvidia_driver": {"userspace": {"versions": ["550.127.05"]},
                                          "kernel_module": {"loaded": True, "version": "550.127.05"}},
                        "python_envs": {"environments": [{"name": "pytorch", "prefix": "/opt/conda/envs/pytorch"}]}},
              "findings": [{"id": "DLD-PY-008", "status": "warn", "tags": ["cuda", "python", "build"],
                            "message": "torch 2.1.2+cu121 in pytorch (/opt/conda/envs/pytorch) is a CUDA 12.1 build "
                                       "but extensions would build with CUDA 11.8.0 (/usr/local/cuda-11.8)",
                            "evidence": {"CUDA_HOME": "/usr/local/cuda-11.8", "/usr/local/cuda": None}}]}
    subject = stack.about(report["findings"][0], report)
    assert subject["layers"] == {"toolkits"} and subject["services"] == set()
    assert subject["environments"] == {"/opt/conda/envs/pytorch": set()}  # no framework of it is in the picture
    model = stack.build(report)
    system = {n["key"]: n for n in model["system"]}
    assert system["toolkits"]["state"] == "warn" and system["toolkits"]["finding"] == "DLD-PY-008"
    assert all(system[k]["findings"] == [] for k in ("gpus", "module", "driver", "services"))
    [env] = model["environments"]
    assert env["findings"] == [{"id": "DLD-PY-008", "status": "warn"}] and env["state"] == "warn"
    page = stack.render_html(model)
    summary = re.search(r'<details class="env odd" open>\s*<summary>(.*?)</summary>', page, re.S).group(1)
    assert ("warn", "DLD-PY-008") in _flags(summary)


def test_what_a_finding_is_about_is_read_from_it_whatever_its_check():
    """No list of check IDs: a plugin's finding keyed by the fabric manager's facts marks the services box, one that
    names a GPU's address the GPUs, one that names a file under a toolkit's directory not the toolkit."""
    from dl_doctor.reports import stack

    report = {"facts": {"gpu_pci": {"devices": [{"kind": "gpu", "bdf": "0000:10:1c.0", "device_id": "20b0"}]},
                        "cuda_toolkits": {"toolkits": [{"path": "/usr/local/cuda-12.4", "version": "12.4.1"}]},
                        "nvidia_driver": {"kernel_module": {"loaded": True, "version": "535.104.05"},
                                          "userspace": {"versions": ["535.104.05"]}}}}

    def about(message, **evidence):
        return stack.about({"id": "ACME-001", "status": "warn", "message": message, "evidence": evidence}, report)

    assert about("x", **{"gpu_services.fabric_manager": {}}) == {
        "layers": {"services"}, "services": {"nvidia-fabricmanager"}, "environments": {}}
    assert about("Xid 79 on 0000:10:1c.0")["layers"] == {"gpus"}
    assert about("the loaded kernel module is still 535.104.05")["layers"] == {"module"}
    assert about("driver 535.104.05 is older than the image needs")["layers"] == {"driver"}
    assert about("/usr/local/cuda-12.4/lib64/libcudnn.so.9 is old")["layers"] == set()
    assert about("CUDA toolkit 12.4.1 (/usr/local/cuda-12.4) needs more")["layers"] == {"toolkits"}
    assert about("x", **{"kmod.secure_boot": True})["layers"] == {"module"}
    assert about("nvidia-persistenced is not running")["services"] == {"nvidia-persistenced"}


def test_the_fabric_manager_and_the_nvidia_services_are_a_box_of_the_stack(upgraded_p4d):
    report, page = upgraded_p4d
    state, body = _nodes(page)["services"]
    assert state == "bad" and "NVIDIA services" in body
    items = re.findall(r'<span class="item st-([a-z]+)">(.*?)</span>(?=<span class="item|<span class="detail|$)',
                       body, re.S)
    by_unit = {re.search(r'<span class="unit">([a-z-]+):', inner).group(1): (st, inner) for st, inner in items}
    assert set(by_unit) == {"nvidia-fabricmanager", "nvidia-persistenced"}
    st, inner = by_unit["nvidia-fabricmanager"]
    assert st == "bad" and "fabric manager 535.129.03" in inner and ("fail", "DLD-GPU-004") in _flags(inner)
    st, inner = by_unit["nvidia-persistenced"]
    assert st == "ok" and "enabled" in inner and _flags(inner) == []
    # the mismatch itself marks the module and the user-space driver, each with its status
    nodes = _nodes(page)
    assert nodes["module"][0] == "bad" and ("fail", "DLD-DRV-003") in _flags(nodes["module"][1])
    assert nodes["driver"][0] == "bad" and ("fail", "DLD-DRV-003") in _flags(nodes["driver"][1])
    assert nodes["toolkits"][0] == "ok" and _flags(nodes["toolkits"][1]) == []
    # the boxes come in the order of the stack, the services after the driver they run with
    assert list(nodes) == ["gpus", "module", "driver", "services", "toolkits"]


def test_the_passed_checks_are_listed_before_the_skipped_ones(upgraded_p4d):
    report, page = upgraded_p4d
    table = _section(page, '<section id="checks">', '<section id="inventory">')
    rows = re.findall(r'<tr id="([A-Z0-9-]+)"[^>]*><td class="status"><span class="badge s-([a-z]+)">', table)
    statuses = [s for _, s in rows]
    assert statuses == sorted(statuses, key=("pass", "skip").index) and {"pass", "skip"} == set(statuses)
    assert len(rows) == report["summary"]["pass"] + report["summary"]["skip"]
    passes = [i for i, s in rows if s == "pass"]
    assert passes == sorted(passes)  # and in each group by check ID


def test_a_tree_without_nvml_names_its_gpus_by_their_pci_id(run_cli, tree):
    r = run_cli("run", "--sysroot", str(tree(machines.p4d_rhel8_healthy())), "--fail-on", "never")
    assert r.returncode == 0, r.stderr
    [page] = r.reports("html")
    report = r.json_report()
    assert report["facts"].get("nvml") is None  # a tree: NVML named nothing
    state, body = _nodes(page.read_text())["gpus"]
    assert state == "ok" and '<span class="val">8 × NVIDIA A100 SXM4 40GB</span>' in body
    assert "from the PCI ID 10de:20b0" in body


def test_the_application_names_an_id_the_matrix_does_not_know_by_the_drivers_model():
    from dl_doctor import app
    from dl_doctor.reports import stack

    report = {"facts": {"gpu_pci": {"devices": [{"kind": "gpu", "bdf": "0000:01:00.0", "device_id": "2ffe"},
                                                {"kind": "gpu", "bdf": "0000:02:00.0", "device_id": "20b0"}]},
                        "nvidia_driver": {"proc_gpus": [{"bdf": "0000:01:00.0", "model": "ACME X1"}]}}}
    names = app.gpu_names(report)
    assert names == {"10de:2ffe": "ACME X1", "10de:20b0": "NVIDIA A100 SXM4 40GB"}
    gpus = stack.build(report, names)["system"][0]
    assert gpus["label"] == "1 × NVIDIA A100 SXM4 40GB, 1 × ACME X1"  # by PCI ID
    assert gpus["detail"] == "from the PCI ID 10de:20b0, 10de:2ffe"
    assert stack.build(report)["system"][0]["label"] == "1 × NVIDIA GPU 10de:20b0, 1 × NVIDIA GPU 10de:2ffe"
    # NVML answered but named no GPU (an old driver's NVML, a container's stub): the PCI ID's model still shows
    report["facts"]["nvml"] = {"devices": [{"name": None, "bus_id": "00000000:01:00.0"}, {"bus_id": "00000000:02:00.0"}]}
    assert stack.build(report, names)["system"][0]["label"] == "1 × NVIDIA A100 SXM4 40GB, 1 × ACME X1"


def test_an_nvswitch_host_without_the_fabric_manager_shows_it_missing_in_the_services_box():
    from dl_doctor.reports import stack

    report = {"facts": {"gpu_pci": {"nvswitch_count": 4, "devices": []},
                        "gpu_services": {"fabric_manager": {"installed": False, "enabled": False},
                                         "persistenced": {"installed": True, "enabled": True, "running": True},
                                         "other_units": {"nvidia-dcgm": {"installed": False},
                                                         "nvidia-imex": {"installed": False}}}}}
    services = {n["key"]: n for n in stack.build(report)["system"]}["services"]
    assert services["state"] == "bad" and services["label"] == "fabric manager, persistenced"
    assert [(i["unit"], i["status"], i["state"]) for i in services["items"]] == [
        ("nvidia-fabricmanager", "not installed (4 NVSwitches need it)", "bad"),
        ("nvidia-persistenced", "enabled, running", "ok")]
    page = stack.render_html(stack.build(report))
    assert '<span class="item st-bad"><span class="mark" aria-hidden="true">✖</span> <span class="name">fabric ' \
           'manager</span> <span class="unit">nvidia-fabricmanager: not installed (4 NVSwitches need it)</span>' in page
    # a host whose facts say nothing of its services says so, rather than "none"
    assert {n["key"]: n for n in stack.build({"facts": {}})["system"]}["services"]["label"] == "unknown here"
