"""pip's and conda's rules as dl_doctor.checks.packaging reads them: conda's VersionOrder and MatchSpec strings."""

from __future__ import annotations

import pytest

from dl_doctor.checks import packaging as p


@pytest.mark.parametrize("a,b,want", [
    ("1.0", "1.0.0", 0), ("1.0a0", "1.0", -1), ("1.1dev1", "1.1a1", -1), ("1.1.0dev1", "1.1.0a1", -1), ("0.4.1.rc", "0.4.1", -1), ("1.0.post1", "1.0", 1),
    ("1.10", "1.9", 1), ("2!1.0", "3.0", 1), ("1.1_1", "1.1.1", 0), ("11.8.0", "11.3.1", 1)])
def test_conda_version_order(a, b, want):
    assert p.conda_compare(a, b) == want


@pytest.mark.parametrize("spec,version,want", [
    (">=1.2,<2", "1.10", True), (">=1.2,<2", "2.0", False), ("1.2.*", "1.2.7", True), ("1.2.*", "1.20", False),
    ("=1.2", "1.2.3", True), ("==1.2", "1.2.3", False), ("==1.2", "1.2.0", True), ("1.2|1.4", "1.4.1", True),
    ("1.2|>=1.4,<1.5", "1.3", False), (">=11.8,<12", "11.3.1", False), ("!=1.2.*", "1.2.5", False),
    (">=3.11,<3.12.0a0", "3.11.10", True), (">=3.11,<3.12.0a0", "3.12.0rc1", False), ("*", "0", True),
    ("~=1.2.3", "1.2.9", True), ("~=1.2.3", "1.3.0", False), ("(>=1|<0)", "1", None)])
def test_conda_version_match(spec, version, want):
    assert p.conda_version_match(spec, version) == want


@pytest.mark.parametrize("text,want", [
    ("python >=3.11,<3.12.0a0", ("python", ">=3.11,<3.12.0a0", None)),
    ("pytorch 2.1.0 cuda*", ("pytorch", "2.1.0", "cuda*")),
    ("numpy>=1.23", ("numpy", ">=1.23", None)),
    ("pytorch=2.1.0=cuda*", ("pytorch", "=2.1.0", "cuda*")),
    ("conda-forge::libstdcxx-ng >=12", ("libstdcxx-ng", ">=12", None)),
    ("pytorch[version='>=2.1,<3', build='cuda*']", ("pytorch", ">=2.1,<3", "cuda*")),
    ("__glibc >=2.17,<3.0.a0", ("__glibc", ">=2.17,<3.0.a0", None)),
    ("a b c d", None)])
def test_match_spec_strings(text, want):
    assert p.parse_match_spec(text) == want


def test_markers_are_the_environments_not_dl_doctors():
    envs = p.marker_environments({"python_version": "3.8", "platform_machine": None})
    assert {e["platform_machine"] for e in envs} == {"x86_64", "aarch64"} and envs[0]["python_version"] == "3.8"
    from packaging.markers import Marker

    assert p._holds(Marker('python_version < "3.9"'), envs) is True
    assert p._holds(Marker('platform_machine == "x86_64"'), envs) is False  # not on every machine it might be
    assert p.marker_environments({"python_version": None}) == []
    # only X.Y known: a marker on the patch release holds only where it holds for every patch release
    assert p._holds(Marker('python_full_version < "3.8.1"'), envs) is False
    assert p._holds(Marker('python_full_version >= "3.8.0"'), envs) is True
