"""Test a check the way dl-doctor tests its own: fixture cases and purity, for plugins too.

A plugin's test module can be as short as::

    import pytest
    from dl_doctor import testing
    from acme_checks import checks as module

    CASES = testing.load_cases("tests/fixtures/ACME-TEMP-001.json")

    @pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
    def test_fixture(case):
        testing.assert_case(module.temperature_check, case)

    def test_pure():
        assert testing.purity_problems(module.__file__) == []

Fixture files are the format of ``tests/fixtures/checks/<ID>.json`` (see ``docs/plugins.md``): a list of ``cases``,
each with ``facts`` (merged over an optional file-level ``base``), ``set`` (dotted-path edits), the status it must
``expect``, a substring of the ``message``, optionally ``fix_contains``, ``key`` (for checks that judge several
items), ``mode``, ``probe_errors``, ``unavailable``, ``expectations``, ``context`` (extra keyword arguments) and
``evidence``.

``evidence`` asserts what the finding's evidence says where that is what a person acts on (which file shadows which,
which GPU, which variable): a dict of dotted paths into ``finding.evidence`` to the value expected there. A path
walks dicts by key and lists by index (``"shadowed.0.path"``); a key that itself holds dots, such as a fact path
(``"gpu_pci.gpu_count"``), is matched whole before it is split. An expected string is found as a substring of a
string (``"/usr/local/cuda"`` in ``"/usr/local/cuda-12.4/lib64/libcudnn.so.9"``); any other expected value
(numbers, booleans, ``null``, lists, dicts) must equal the evidence exactly. A missing path fails the case.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from dl_doctor.engine import run_check_all
from dl_doctor.model import CheckSpec, Facts, Finding

# What a check module may not use: checks are pure functions of the facts.
BANNED_CALLS = {"open", "exec", "eval", "__import__"}
BANNED_MODULES = {"os", "subprocess", "socket", "ctypes", "shutil", "pathlib", "io", "urllib", "http", "pynvml",
                  "psutil", "glob"}
VERSION_LITERAL = re.compile(r"^\d+\.\d+(\.\d+)*$")


def snapshot(facts: Dict[str, Any], mode: str = "live", **extra: Any) -> Dict[str, Any]:
    """A minimal facts snapshot around ``facts``."""
    snap: Dict[str, Any]
    snap = {"schema_version": "1", "kind": "dl-doctor-facts", "tool": {"name": "dl-doctor", "version": "test"},
            "collected_at": "2026-11-29T00:00:00Z", "mode": mode, "sysroot": None if mode == "live" else "/mnt",
            "facts": facts, "probe_errors": [], "unavailable": {}, "probes": {}, "privilege": {}}
    snap.update(extra)
    return snap


def deep_merge(base: Dict[str, Any], override: Dict[str, Any]) -> Dict[str, Any]:
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


def set_path(doc: Any, path: str, value: Any) -> None:
    """Set ``a.b.3.c`` (integers index lists; one past the end appends) in a nested document."""
    parts = path.split(".")
    node = doc
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    last = parts[-1]
    if isinstance(node, list):
        if int(last) == len(node):
            node.append(value)
        else:
            node[int(last)] = value
    else:
        node[last] = value


def load_cases(path: Union[str, Path]) -> List[Dict[str, Any]]:
    """The cases of one fixture file, with the file-level ``base`` merged and ``set`` applied."""
    path = Path(path)
    if not path.exists():
        return []
    doc = json.loads(path.read_text(encoding="utf-8"))
    base = doc.get("base", {})
    if isinstance(base, str):
        base = json.loads((path.parent / base).read_text(encoding="utf-8"))
    cases = []
    for case in doc["cases"]:
        facts = case.get("facts", {}) if case.get("no_base") else deep_merge(base, case.get("facts", {}))
        facts = json.loads(json.dumps(facts))
        for dotted, value in (case.get("set") or {}).items():
            set_path(facts, dotted, value)
        cases.append({**case, "facts": facts})
    return cases


def run_case(spec: CheckSpec, case: Dict[str, Any], matrix: Any = None) -> Finding:
    """The finding ``spec`` gives on ``case`` (the item named by ``key`` for checks that judge several)."""
    if matrix is None:
        from dl_doctor import compat_matrix

        matrix = compat_matrix.load(site=False)
    snap = snapshot(case["facts"], mode=case.get("mode", "live"), probe_errors=case.get("probe_errors", []),
                    unavailable=case.get("unavailable", {}))
    context: Dict[str, Any] = dict(case.get("context") or {})
    if "expectations" in case:
        context["expectations"] = case["expectations"]
    findings = run_check_all(spec, Facts(snap), matrix, context or None)
    if "key" in case:
        by_id = {f.id: f for f in findings}
        wanted = f"{spec.id}:{case['key']}"
        if wanted not in by_id:
            raise AssertionError(f"{case.get('name')}: no finding {wanted}; got {sorted(by_id)}")
        return by_id[wanted]
    return findings[0]


_MISSING = object()


def evidence_at(evidence: Any, path: str) -> Any:
    """The value at dotted ``path`` in ``evidence`` (see the module docstring), or ``_MISSING``."""
    if path == "":
        return evidence
    if isinstance(evidence, dict):
        parts = path.split(".")
        for n in range(len(parts), 0, -1):  # the longest key first: keys may hold dots
            key = ".".join(parts[:n])
            if key in evidence:
                found = evidence_at(evidence[key], ".".join(parts[n:]))
                if found is not _MISSING:
                    return found
        return _MISSING
    if isinstance(evidence, list):
        head, _, rest = path.partition(".")
        if head.lstrip("-").isdigit() and -len(evidence) <= int(head) < len(evidence):
            return evidence_at(evidence[int(head)], rest)
    return _MISSING


def _same(got: Any, want: Any) -> bool:
    if isinstance(got, bool) or isinstance(want, bool):  # True is not 1 here
        return type(got) is type(want) and got == want
    return bool(got == want)


def evidence_problems(evidence: Dict[str, Any], expected: Dict[str, Any]) -> List[str]:
    """How ``evidence`` differs from what a case's ``evidence`` key expects; empty when it holds."""
    out = []
    for path, want in expected.items():
        got = evidence_at(evidence, path)
        if got is _MISSING:
            have = sorted(evidence) if isinstance(evidence, dict) else evidence
            out.append(f"evidence has no {path!r} (its keys: {have})")
        elif isinstance(want, str) and isinstance(got, str):
            if want not in got:
                out.append(f"evidence {path!r} is {got!r}, which lacks {want!r}")
        elif not _same(got, want):
            out.append(f"evidence {path!r} is {got!r}, not {want!r}")
    return out


def assert_case(spec: CheckSpec, case: Dict[str, Any], matrix: Any = None) -> Finding:
    """Run a case and assert what it expects: status, message, evidence, a fix for every problem."""
    finding = run_case(spec, case, matrix)
    name = case.get("name", "?")
    assert finding.status.value == case["expect"], f"{name}: {finding.status.value}: {finding.message}"
    assert case["message"] in finding.message, f"{name}: {finding.message!r} lacks {case['message']!r}"
    if "evidence" in case:
        problems = evidence_problems(finding.evidence, case["evidence"])
        assert not problems, f"{name}: " + "; ".join(problems)
    if finding.status.value in ("warn", "fail", "error"):
        assert finding.fix is not None and finding.fix.summary and finding.fix.commands, f"{name}: no fix"
        if "fix_contains" in case:
            assert any(case["fix_contains"] in c for c in finding.fix.commands), finding.fix.commands
        assert finding.headline, f"{name}: a problem finding without a heading"
        if "headline" in case:
            assert case["headline"] in finding.headline, f"{name}: {finding.headline!r} lacks {case['headline']!r}"
        assert finding.remediation is not None, f"{name}: a problem finding without a remediation"
        if "remedy" in case:
            assert finding.remediation["action"] == case["remedy"], f"{name}: {finding.remediation}"
        if "drain" in case:
            assert finding.remediation["drain"] is case["drain"], f"{name}: {finding.remediation}"
    json.dumps(finding.to_dict())
    return finding


def fixture_problems(spec: CheckSpec, cases: List[Dict[str, Any]]) -> List[str]:
    """What a check's fixtures lack: a pass, a problem (warn/fail/error) and a skip (missing facts)."""
    expects = {c["expect"] for c in cases}
    out = []
    if "pass" not in expects:
        out.append(f"{spec.id} needs a passing fixture")
    if not expects & {"warn", "fail", "error"}:
        out.append(f"{spec.id} needs a problem (warn/fail) fixture")
    if "skip" not in expects:
        out.append(f"{spec.id} needs a missing-facts (skip) fixture")
    return out


def purity_problems(path: Union[str, Path]) -> List[str]:
    """Why a check module is not a pure function of the facts (imports os/subprocess..., calls open/eval...,
    hard-codes a version that belongs in the compatibility matrix). Empty when it is."""
    path = Path(path)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [f"{path.name} imports {a.name}" for a in node.names if a.name.split(".")[0] in BANNED_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in BANNED_MODULES:
            out.append(f"{path.name} imports from {node.module}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BANNED_CALLS:
            out.append(f"{path.name} calls {node.func.id}()")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and VERSION_LITERAL.match(node.value.strip()):
            out.append(f"{path.name} hard-codes version {node.value!r} (ask the compatibility matrix)")
    return out
