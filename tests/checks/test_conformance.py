"""Every registered check: well-formed metadata, an explanation, and pass and fail fixtures that hold.

Fixtures live in tests/fixtures/checks/<ID>.json as a list of cases: recorded facts, the status they must produce,
a substring of the message and, for problems, of the fix. The runner and the purity rules are
``dl_doctor.testing``, installed with the package, so a plugin tests its checks the same way.
"""

from pathlib import Path

import pytest

from conftest import FIXTURES
from dl_doctor import compat_matrix, testing
from dl_doctor.registry import load_registry

REGISTRY = load_registry()
CHECKS = sorted(REGISTRY.checks, key=lambda s: s.id)
BUILTIN = [s for s in CHECKS if s.module.startswith("dl_doctor.checks.")]


MATRIX = compat_matrix.load(site=False)


def _cases(check_id):
    return testing.load_cases(FIXTURES / "checks" / f"{check_id}.json")


def test_registry_loads_builtins_through_entry_points_without_errors():
    assert REGISTRY.load_errors == []
    assert {s.id for s in BUILTIN} >= {"DLD-SYS-001", "DLD-MEM-001", "DLD-DISK-001", "DLD-GPU-001"}
    assert {p.name for p in REGISTRY.probes} >= {"os", "kernel", "system", "environment", "memory", "mounts",
                                                   "disks", "gpu_pci", "nvidia_driver", "python_envs", "kmod", "nvml"}


@pytest.mark.parametrize("spec", CHECKS, ids=lambda s: s.id)
def test_metadata_and_explanation(spec):
    assert spec.validate() == []
    assert spec.id.startswith("DLD-") or not spec.module.startswith("dl_doctor.checks.")



@pytest.mark.parametrize("spec", BUILTIN, ids=lambda s: s.id)
def test_has_pass_and_problem_fixtures(spec):
    assert testing.fixture_problems(spec, _cases(spec.id)) == []


ALL_CASES = [(s, c) for s in BUILTIN for c in _cases(s.id)]


@pytest.mark.parametrize("spec,case", ALL_CASES, ids=[f"{s.id}:{c['name']}" for s, c in ALL_CASES])
def test_fixture(spec, case):
    testing.assert_case(spec, case, MATRIX)


@pytest.mark.parametrize("path", sorted((Path(__file__).parents[2] / "checks").glob("*.py")), ids=lambda p: p.name)
def test_checks_are_pure_and_hard_code_no_versions(path):
    """Nothing under checks/ opens files, runs commands or loads libraries; version facts live in the matrix."""
    assert testing.purity_problems(path) == []


def test_purity_rules_catch_what_they_name(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom subprocess import run\nx = open('f')\nV = '12.4'\n")
    assert testing.purity_problems(bad) == ["bad.py imports os", "bad.py imports from subprocess",
                                            "bad.py calls open()",
                                            "bad.py hard-codes version '12.4' (ask the compatibility matrix)"]


def test_dotted_evidence_keys_are_fact_paths():
    """Evidence keys written as fact paths (with a dot) name facts that exist; derived values use plain names."""
    from dl_doctor.registry import unknown_fact

    wrong = set()
    for spec, case in ALL_CASES:
        finding = testing.run_case(spec, case, MATRIX)
        for key in finding.evidence:
            if "." in key and "/" not in key and " " not in key and unknown_fact(REGISTRY, key) is not None:
                wrong.add((spec.id, key))
    assert not wrong, sorted(wrong)


# -- evidence in fixture cases ------------------------------------------------------------------------------------------

EVIDENCE_CASES = [(s, c) for s, c in ALL_CASES if "evidence" in c]


def test_cases_assert_the_evidence_a_person_acts_on():
    """Which file shadows which, which GPU, which variable: asserted in the fixtures of at least 15 checks."""
    assert len({s.id for s, _ in EVIDENCE_CASES}) >= 15, sorted({s.id for s, _ in EVIDENCE_CASES})


def _case(check_id, name):
    return next((s, c) for s, c in EVIDENCE_CASES if s.id == check_id and c["name"] == name)


@pytest.mark.parametrize("path,wrong,says", [
    # which library wins: another directory than the one it resolves from
    ("problems.0", "from /usr/local/cuda-12.2/lib64/libcudnn.so.9", "which lacks"),
    # a path the evidence does not have
    ("problems.1", "anything", "evidence has no 'problems.1'"),
    ("shadowed_by", "/usr/local/cuda", "evidence has no 'shadowed_by'"),
])
def test_a_wrong_expected_evidence_fails_the_case(path, wrong, says):
    spec, case = _case("DLD-PY-004", "the same tree with an older cuDNN there fails")
    testing.assert_case(spec, case, MATRIX)  # as recorded, it holds
    with pytest.raises(AssertionError, match=says):
        testing.assert_case(spec, {**case, "evidence": {**case["evidence"], path: wrong}}, MATRIX)


@pytest.mark.parametrize("path,wrong", [
    ("nvidia_driver.kernel_module.version", "535.129.03"),   # a key holding dots, matched whole
    ("nvidia_driver.userspace.versions", ["535.104.05"]),    # lists must be equal
    ("kernel_log.api_mismatches.0.client", "535.104.05"),    # into a list by index
])
def test_dotted_fact_keys_and_list_indexes_are_asserted_exactly(path, wrong):
    spec, case = _case("DLD-DRV-003", "upgrade without reboot")
    with pytest.raises(AssertionError, match="evidence"):
        testing.assert_case(spec, {**case, "evidence": {path: wrong}}, MATRIX)


def test_evidence_matching_rules():
    ev = {"gpu_pci.gpu_count": 8, "ok": True, "items": [{"path": "/usr/local/cuda-12.4/lib64/libcudnn.so.9"}],
          "GPU 0 (0000:10:1c.0, A100)": {"pending": False}}
    assert testing.evidence_problems(ev, {"gpu_pci.gpu_count": 8, "ok": True, "items.0.path": "/usr/local/cuda",
                                          "items.-1.path": "libcudnn.so.9",
                                          "GPU 0 (0000:10:1c.0, A100).pending": False, "items": ev["items"]}) == []
    assert testing.evidence_problems(ev, {"ok": 1}) == ["evidence 'ok' is True, not 1"]           # True is not 1
    assert testing.evidence_problems(ev, {"gpu_pci.gpu_count": "8"})  # a string expects a string
    assert testing.evidence_problems(ev, {"gpu_pci.gpu_count": 7.0}) == ["evidence 'gpu_pci.gpu_count' is 8, not 7.0"]
    assert testing.evidence_problems(ev, {"items.1.path": "x"}) and testing.evidence_problems(ev, {"items.x": 1})
