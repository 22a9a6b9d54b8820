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
