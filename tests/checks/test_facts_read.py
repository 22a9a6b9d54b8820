"""Every fact a built-in check reads is declared by a probe with a one-line meaning: the paths in each check's
requires=, and the dotted paths its module reads with facts.get("...") / facts.has("...") (dl_doctor.model.Facts)."""

import ast
from pathlib import Path
from typing import Dict, Optional, Set

from dl_doctor.registry import load_registry

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = load_registry()


def read_paths() -> Dict[str, Set[str]]:
    """fact path -> where it is read (a check's id for requires=, else the module)."""
    out: Dict[str, Set[str]] = {}
    for spec in REGISTRY.checks:
        if spec.module.startswith("dl_doctor.checks."):
            for path in spec.requires:
                out.setdefault(path, set()).add(spec.id)
    for module in sorted((ROOT / "checks").glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "has")
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "facts" and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                out.setdefault(node.args[0].value, set()).add(f"checks/{module.name}")
    return out


def declared(path: str):
    """The declared fact at ``path`` (a map's value stands for any key), or None."""
    probes = {p.name: p for p in REGISTRY.probes}
    first, *rest = path.split(".")
    spec = probes.get(first)
    fact = spec.facts if spec is not None else None
    for part in rest:
        if fact is None:
            return None
        fact = fact.child(part)
    return fact


def test_the_checks_read_facts_by_many_paths():
    paths = read_paths()
    assert len(paths) > 100
    assert {"nvml.devices", "verify", "os.id", "kmod.secure_boot"} <= set(paths)


def test_every_fact_a_builtin_check_reads_is_declared_with_a_meaning():
    missing: Dict[str, Optional[str]] = {}
    for path, where in sorted(read_paths().items()):
        fact = declared(path)
        if fact is None or not fact.meaning:
            missing[path] = "not declared" if fact is None else "no meaning"
            missing[path] += f" (read in {', '.join(sorted(where))})"
    assert missing == {}


def test_a_path_no_probe_declares_is_found():
    assert declared("gpu_pci.gpu_cuont") is None
    assert declared("nope.x") is None
    assert declared("environment.variables.ANY_NAME").meaning == "the variable's value"
