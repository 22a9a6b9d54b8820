"""Every registered check: well-formed metadata, an explanation, and pass and fail fixtures that hold.

Fixtures live in tests/fixtures/checks/<ID>.json as a list of cases: recorded
facts, the status they must produce, a substring of the message and, for
problems, of the fix.
"""

import ast
import json
import re
from pathlib import Path

import pytest

from conftest import FIXTURES, snapshot
from dl_doctor.engine import run_check_all
from dl_doctor.model import Facts
from dl_doctor import compat_matrix
from dl_doctor.registry import load_registry

REGISTRY = load_registry()
CHECKS = sorted(REGISTRY.checks, key=lambda s: s.id)
BUILTIN = [s for s in CHECKS if s.module.startswith("dl_doctor.checks.")]


MATRIX = compat_matrix.load(site=False)


def deep_merge(base, override):
    """``override`` on top of ``base``; dictionaries merge, anything else replaces (``null`` deletes)."""
    out = dict(base)
    for key, value in override.items():
        if value is None and key in out:
            del out[key]
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def set_path(doc, path, value):
    """Set ``a.b.3.c`` (integers index lists) in a nested document."""
    parts = path.split(".")
    node = doc
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    last = parts[-1]
    if isinstance(node, list):
        if int(last) == len(node):
            node.append(value)  # one past the end adds an item
        else:
            node[int(last)] = value
    else:
        node[last] = value


def _cases(check_id):
    """Fixture cases of one check.

    A file-level ``base`` (a dict, or the name of a shared base file) holds facts common to every case; each case's
    ``facts`` is merged over it (``"no_base": true`` skips it), then ``set`` applies dotted-path edits.
    """
    path = FIXTURES / "checks" / f"{check_id}.json"
    if not path.exists():
        return []
    doc = json.loads(path.read_text())
    base = doc.get("base", {})
    if isinstance(base, str):
        base = json.loads((FIXTURES / "checks" / base).read_text())
    cases = []
    for case in doc["cases"]:
        facts = case.get("facts", {}) if case.get("no_base") else deep_merge(base, case.get("facts", {}))
        facts = json.loads(json.dumps(facts))
        for dotted, value in (case.get("set") or {}).items():
            set_path(facts, dotted, value)
        cases.append({**case, "facts": facts})
    return cases


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
    expects = {c["expect"] for c in _cases(spec.id)}
    assert "pass" in expects, f"{spec.id} needs a passing fixture"
    assert expects & {"warn", "fail"}, f"{spec.id} needs a failing (warn/fail) fixture"
    assert "skip" in expects, f"{spec.id} needs a missing-facts fixture"


ALL_CASES = [(s, c) for s in BUILTIN for c in _cases(s.id)]


@pytest.mark.parametrize("spec,case", ALL_CASES, ids=[f"{s.id}:{c['name']}" for s, c in ALL_CASES])
def test_fixture(spec, case):
    snap = snapshot(case["facts"], mode=case.get("mode", "live"), probe_errors=case.get("probe_errors", []),
                    unavailable=case.get("unavailable", {}))
    context = {"expectations": case["expectations"]} if "expectations" in case else None
    findings = run_check_all(spec, Facts(snap), MATRIX, context)
    if "key" in case:  # a check with one finding per item (golden-stack expectations): pick the item
        by_id = {f.id: f for f in findings}
        assert f"{spec.id}:{case['key']}" in by_id, sorted(by_id)
        finding = by_id[f"{spec.id}:{case['key']}"]
    else:
        finding = findings[0]
    assert finding.status.value == case["expect"], finding.message
    assert case["message"] in finding.message
    if finding.status.value in ("warn", "fail"):
        assert finding.fix is not None and finding.fix.summary and finding.fix.commands
        if "fix_contains" in case:
            assert any(case["fix_contains"] in c for c in finding.fix.commands), finding.fix.commands
    json.dumps(finding.to_dict())


BANNED_CALLS = {"open", "exec", "eval", "__import__"}
BANNED_MODULES = {"os", "subprocess", "socket", "ctypes", "shutil", "pathlib", "io", "urllib", "http", "pynvml",
                  "psutil", "glob"}


@pytest.mark.parametrize("path", sorted((Path(__file__).parent.parent / "checks").glob("*.py")), ids=lambda p: p.name)
def test_checks_never_touch_the_host(path):
    """Nothing under checks/ opens files, runs commands or loads libraries."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                assert alias.name.split(".")[0] not in BANNED_MODULES, f"{path.name} imports {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.module.split(".")[0] not in BANNED_MODULES, f"{path.name} imports from {node.module}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in BANNED_CALLS, f"{path.name} calls {node.func.id}()"


VERSION_LITERAL = re.compile(r"^\d+\.\d+(\.\d+)*$")


@pytest.mark.parametrize("path", sorted((Path(__file__).parent.parent / "checks").glob("*.py")), ids=lambda p: p.name)
def test_checks_hard_code_no_versions(path):
    """Version facts live in compat_matrix/data; a check asks the matrix instead."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            assert not VERSION_LITERAL.match(node.value.strip()), f"{path.name} hard-codes version {node.value!r}"
