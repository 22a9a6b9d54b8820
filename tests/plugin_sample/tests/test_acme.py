"""The plugin's own tests, with dl-doctor's installed test helpers (the same runner built-in checks use)."""

from pathlib import Path

import pytest

from acme_gpu_checks import checks
from dl_doctor import testing

CASES = testing.load_cases(Path(__file__).parent / "ACME-TEMP-001.json")


def test_fixtures_cover_pass_problem_and_skip():
    assert testing.fixture_problems(checks.gpu_above_fleet_ceiling, CASES) == []


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_fixture(case):
    testing.assert_case(checks.gpu_above_fleet_ceiling, case)


def test_pure():
    assert testing.purity_problems(checks.__file__) == []
