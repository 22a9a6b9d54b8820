"""A plan that changes nothing that matters is green on every healthy machine (precision first): the same driver,
the same toolkit, a newer point release of the driver's own branch. Every machine of the healthy corpus
(tests/healthy.py) and every recorded machine (tests/fixtures/snapshots), each change option, no traceback."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict

import pytest

from conftest import FIXTURES

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import healthy  # noqa: E402

NEWER_POINT = {  # the driver each corpus machine has -> a newer point release of its branch the matrix knows
    "535": "535.261.03", "550": "550.163.01", "560": "560.94", "565": "565.77", "570": "570.195.03",
}


@pytest.fixture(scope="module")
def corpus() -> Dict[str, Dict[str, Any]]:
    import cases

    out: Dict[str, Dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in healthy.names():
            spec = healthy.spec_of(name)
            machine = cases.paired(name, spec) if healthy.HEALTHY[name].get("nvml") else cases.Machine(spec)
            snap = cases.snapshot_of(cases.build(Path(tmp) / name, machine.spec), machine)
            snap.update(mode="live", sysroot=None)
            out[name] = snap
    for path in sorted((FIXTURES / "snapshots").glob("*.json")):
        out[path.stem] = json.loads(path.read_text())
    return out


def _plan(snap, *requests):
    from dl_doctor.app import load_matrix, registry
    from dl_doctor.integrations.plan import make_plan

    return make_plan(snap, list(requests), registry().checks, load_matrix(()))


def _driver(snap):
    km = (snap["facts"].get("nvidia_driver") or {}).get("kernel_module") or {}
    return km.get("version") or (snap["facts"].get("nvml") or {}).get("driver_version")


def test_the_same_driver_and_toolkit_change_nothing_anywhere(corpus):
    for name, snap in corpus.items():
        driver = _driver(snap)
        if driver:
            doc, code = _plan(snap, ("driver", driver))
            assert doc["transitions"] == [] and code == 0, (name, doc["transitions"])
        default = (snap["facts"].get("cuda_toolkits") or {}).get("default") or {}
        if default.get("version"):
            doc, code = _plan(snap, ("cuda", default["version"]))
            assert doc["transitions"] == [] and code == 0, (name, doc["transitions"])


def test_a_point_release_of_the_drivers_own_branch_is_safe_on_every_healthy_machine(corpus):
    planned = 0
    for name in healthy.names():
        snap = corpus[name]
        driver = _driver(snap)
        if not driver or driver.split(".")[0] not in NEWER_POINT:
            continue
        doc, code = _plan(snap, ("driver", NEWER_POINT[driver.split(".")[0]]))
        bad = [t for t in doc["transitions"] if t["worse"]]
        assert code == 0 and bad == [], (name, bad)
        planned += 1
    assert planned >= 12


@pytest.mark.parametrize("request_", [("driver", "580.95.05"), ("cuda", "12.8"), ("gpu", "H100"),
                                      ("instance-type", "p5.48xlarge"), ("gpu", "T4")])
def test_every_change_runs_on_every_machine_without_a_traceback(corpus, request_):
    import jsonschema

    schema = json.loads((Path(__file__).resolve().parents[2] / "reports" / "schema" / "plan-v1.json").read_text())
    for name, snap in corpus.items():
        doc, code = _plan(snap, request_)
        jsonschema.validate(doc, schema)
        assert code in (0, 1) and doc["exit_code"] == code, name
        assert not [t for t in doc["transitions"] if t["to"] == "error"], (name, doc["transitions"])
        json.dumps(doc)


def test_a_driver_change_where_the_driver_is_not_this_machines_own(corpus):
    # WSL2: the Windows host's driver, no kernel module here
    doc, _ = _plan(corpus["wsl2"], ("driver", "570.172.08"))
    keys = {e["key"] for e in doc["changes"][0]["edits"]}
    assert not any(k.startswith("nvidia_driver.kernel_module") for k in keys)
    assert doc["steps"][0]["text"].startswith("Install the NVIDIA driver 570.172.08 on Windows")
    assert not any("apt-get" in c for s in doc["steps"] for c in s["commands"])
    # a container under the NVIDIA runtime: the host's driver, mounted in; the change is the host's
    doc, code = _plan(corpus["docker_pytorch_nvidia_runtime"], ("driver", "470.256.02"))
    assert code == 1 and doc["steps"][0]["text"].startswith("On the host: install driver 470.256.02")
    # the fix of what the change breaks (another driver) answers the change: after its step
    assert [s["for"] for s in doc["steps"]][:2] == [["--driver 470.256.02"], ["DLD-CUDA-001"]]


def test_a_kernel_update_fails_no_healthy_machine_whose_tree_cannot_say(corpus):
    """A newer kernel of the same series on every healthy machine: their trees show no kernel headers (DKMS built the
    module, so they were there) and no repository metadata, so whether the new kernel gets a module is unknown, not
    broken: nothing fails (a warning that rests on the reboot itself may show)."""
    import re

    planned = 0
    for name in healthy.names():
        snap = corpus[name]
        release = (snap["facts"].get("kernel") or {}).get("release") or ""
        m = re.match(r"^(\d+\.\d+\.\d+-)(\d+)(.*)$", release)
        if not m or (snap["facts"].get("nvidia_driver") or {}).get("runtime", {}).get("wsl"):
            continue
        doc, code = _plan(snap, ("kernel", f"{m.group(1)}{int(m.group(2)) + 7}{m.group(3)}"))
        assert code == 0, (name, [t for t in doc["transitions"] if t["worse"]])
        planned += 1
    assert planned >= 15
