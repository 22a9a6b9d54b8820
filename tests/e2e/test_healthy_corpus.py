"""The healthy corpus as a gate (issue 25 item 5): every healthy machine of tests/healthy.py passes
`dl-doctor --fail-on warn`, but for the warnings its fixture (tests/fixtures/healthy/NAME.json) lists.

A fixture's ``allowed`` holds warnings a careful engineer would act on there, each with the reason; ``pending`` holds
false positives not fixed yet, each with its diagnosis. The run's warn/fail/error findings must be exactly those
(an unlisted one fails the gate, a listed one that no longer fires is stale and fails too). A tree whose healthy
state lives in NVML or device nodes (MIG, a pod's share of the GPUs, an NVSwitch node) is collected from its tree
and paired with its recorded NVML and device listing, then judged with `dl-doctor check` (NVML is live only); its
tree is also held to the plain `run --sysroot` gate, with the fixture's "sysroot" lists (what a tree alone shows).

A false positive found on a new machine is first recorded as ``pending`` with its diagnosis, which fails
test_no_false_positive_is_pending until it is fixed: the corpus holds none (every one issue 25 found is fixed; the
trees it fixed fail here with the entry named as stale if it is listed again).
To add a machine: a builder in tests/healthy.py, an entry in healthy.HEALTHY, and its fixture.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import pytest

import healthy
from agreement import disagreements
from conftest import FIXTURES, build_tree

CORPUS = FIXTURES / "healthy"
BAD = ("warn", "fail", "error")


def _fixture(name: str) -> Dict[str, Any]:
    return json.loads((CORPUS / f"{name}.json").read_text())


def paired_snapshot(root: Path, name: str) -> Dict[str, Any]:
    """The tree's facts as `dl-doctor collect` would have written them on the machine: the probes on the tree, plus
    what only the live machine has (its recorded NVML and /dev listing, real disks), as tests/machines.py does."""
    from dl_doctor.engine import collect
    from dl_doctor.host import Host
    from dl_doctor.probes import Unavailable
    from dl_doctor.probes.nvml import collect_nvml
    from dl_doctor.registry import load_registry
    from fake_nvml import FakeNVML
    from machines import FIXED_DISKS

    machine = healthy.HEALTHY[name]
    registry = load_registry()
    snap = collect([p for p in registry.probes if p.name != "nvml"], Host(sysroot=str(root)), {}, timeout=30)
    snap["unavailable"].pop("nvml", None)
    try:
        snap["facts"]["nvml"] = collect_nvml(FakeNVML.from_file(FIXTURES / "nvml" / f"{machine['nvml']}.json"))
        snap["probes"]["nvml"] = {"status": "ok", "duration_s": 0.1}
    except Unavailable as exc:  # no libnvidia-ml.so.1 (a CPU-only host): as the live probe reports it
        snap["unavailable"]["nvml"] = str(exc)
    snap["facts"]["nvidia_driver"]["device_nodes"] = machine["device_nodes"]
    snap["facts"]["disks"] = FIXED_DISKS
    snap.update(mode="live", sysroot=None, collected_at="2026-11-29T12:00:00Z", duration_s=0.5, commands=[],
                timeout_s=5.0)
    snap["privilege"] = {"euid": 0, "is_root": True, "limited": []}
    return snap


def gate(run_cli, tmp_path: Path, name: str, mode: str):
    root = build_tree(tmp_path / name, healthy.spec_of(name))
    if mode == "paired":
        facts = tmp_path / f"{name}-facts.json"
        facts.write_text(json.dumps(paired_snapshot(root, name)))
        result = run_cli("check", str(facts), "--json", "-", "--fail-on", "warn", "-q", timeout=300)
    else:
        result = run_cli("run", "--sysroot", str(root), "--json", "-", "--fail-on", "warn", "-q", timeout=300)
    assert result.returncode in (0, 1), result.stderr
    return result, json.loads(result.stdout)


def _runs():
    """Every machine's tree run (`run --sysroot`); a machine paired with NVML is also judged paired."""
    return [(n, m) for n in healthy.names() for m in (("paired", "sysroot") if healthy.HEALTHY[n].get("nvml")
                                                       else ("sysroot",))]


def _expected(name: str, mode: str) -> Dict[str, Any]:
    """A fixture's allowed and pending; a paired machine's tree run has its own, under "sysroot"."""
    fixture = _fixture(name)
    return fixture.get("sysroot", {}) if mode == "sysroot" and healthy.HEALTHY[name].get("nvml") else fixture


@pytest.mark.parametrize("name,mode", _runs())
def test_a_healthy_machine_is_green(run_cli, tmp_path, name, mode):
    fixture = _expected(name, mode)
    listed = {**fixture.get("allowed", {}), **fixture.get("pending", {})}
    result, report = gate(run_cli, tmp_path, name, mode)
    bad = {f["id"]: f"[{f['status']}] {f['message']}" for f in report["findings"] if f["status"] in BAD}
    unlisted = {i: m for i, m in bad.items() if i not in listed}
    assert unlisted == {}, f"{name}: warnings a healthy machine should not have (or list them in its fixture)"
    stale = sorted(set(listed) - set(bad))
    assert stale == [], f"{name}: listed in tests/fixtures/healthy/{name}.json but no longer fires"
    assert result.returncode == (1 if bad else 0), result.stderr
    assert disagreements(report) == []  # the checks of loading, the one model and the stack agree
    assert report["probe_errors"] == [] or all(e["probe"] in ("nvml", "ebs") for e in report["probe_errors"]), \
        report["probe_errors"]


def test_every_machine_has_a_fixture_with_reasons():
    assert sorted(p.stem for p in CORPUS.glob("*.json")) == healthy.names()
    assert len(healthy.names()) >= 15
    for name, mode in _runs():
        assert set(_fixture(name)) <= {"description", "allowed", "pending", "sysroot"} and \
            _fixture(name)["description"], name
        fixture = _expected(name, mode)
        for kind in ("allowed", "pending"):
            for check_id, reason in fixture.get(kind, {}).items():
                assert check_id.startswith("DLD-") and len(reason) > 30, (name, check_id)
                if kind == "pending":
                    assert reason.startswith("FALSE POSITIVE on 995d55c: "), (name, check_id)


def test_no_false_positive_is_pending():
    pending = {f"{name} ({mode})": sorted(_expected(name, mode).get("pending", {})) for name, mode in _runs()}
    assert {n: p for n, p in pending.items() if p} == {}


def test_the_gate_sees_a_real_problem(run_cli, tmp_path):
    """Not a vacuous gate: the p5 without its fabric manager unit (an NVSwitch system whose GPUs cannot talk over
    NVLink) fails it."""
    spec = healthy.spec_of("dlami_al2023_p5")
    for key in [k for k in spec if "fabricmanager" in k]:
        del spec[key]
    root = build_tree(tmp_path / "sick", spec)
    result = run_cli("run", "--sysroot", str(root), "--json", "-", "--fail-on", "warn", "-q", timeout=300)
    bad = {f["id"] for f in json.loads(result.stdout)["findings"] if f["status"] in BAD}
    listed = set(_fixture("dlami_al2023_p5").get("pending", {}))
    assert result.returncode == 1 and "DLD-GPU-004" in bad - listed, bad
