"""Golden-stack expectations (--expect FILE): each expectation is a finding of its own, except those the machine
has nothing of what they read for (no driver, no environments): one finding, DLD-EXP-001:missing, holds them."""

from __future__ import annotations

import re
import shlex
from typing import Any, Dict, List, Optional

from dl_doctor.judge.expect import absent_layer, environment_of, evaluate, is_range
from dl_doctor.model import Facts, Fix, Result, Status, check, skip
from dl_doctor.facts.flat import stack

_REFRESH = "dl-doctor expect --from REPORT.json > expect.toml   # when the change is intended"


def _interpreters(facts: Facts) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for env in facts.get("python_envs.environments") or []:
        if env.get("name") and env.get("python"):
            out.setdefault(env["name"], env["python"])
    return out


def _fix(key: str, expected: Any, env_name: Optional[str], package: Optional[str], pythons: Dict[str, str]) -> Fix:
    if env_name is not None and package is not None:
        spec = str(expected) if is_range(expected) else f"=={expected}"
        python = shlex.quote(pythons.get(env_name, "python3"))
        cmds = [f"{python} -m pip install {shlex.quote(package + spec)}", _REFRESH]
        if package == "torch":
            cmds.insert(1, "# pick the CUDA variant with --index-url https://download.pytorch.org/whl/cuXYZ")
        return Fix(f"Install the expected {package} into environment {env_name} (or update the expectation).",
                   tuple(cmds))
    if key == "driver":
        return Fix("Install the expected NVIDIA driver in the image recipe and pin it, or update the expectation.",
                   (f"dl-doctor matrix driver {expected}   # what that driver supports" if not is_range(expected)
                    else "dl-doctor matrix driver --help", _REFRESH))
    return Fix("Bring the image to the expected stack in its recipe, or update the expectation if the change is "
               "intended.", (_REFRESH,))


@check(
    id="DLD-EXP-001", slug="golden-stack-mismatch", title="The machine matches its golden-stack expectations",
    remedy="repair-software", drain=False,
    problem="The machine differs from its golden-stack expectations",
    tags=("ami", "expectations"),
    what="""Holds the stack read from the facts (OS, kernel, driver, CUDA toolkit, GPU model and count, NVSwitches,
    EFA, Fabric Manager, instance type, and per named environment Python, torch with its CUDA variant, cuDNN, NCCL and
    packages) against the --expect file: exact values, PEP 440 ranges or glob patterns. Each expectation becomes its
    own finding, DLD-EXP-001:KEY, with the expected and found values; the expectations on a layer of which nothing
    was found at all (no NVIDIA driver, no CUDA toolkit, no Python environment, no os-release) are one finding,
    DLD-EXP-001:missing, that names the absent layers and lists the keys.""",
    why="""An image bake that silently picked up another driver, kernel or torch build ships machines that differ from
    the ones the team tested; catching it at the end of the bake is cheaper than debugging it on a cluster.""",
    fix="""Pin the drifting component in the image recipe (package versions, dnf versionlock or apt-mark hold, pip
    constraints), or update the expectations file when the change is intended (dl-doctor expect --from a known-good
    report).""",
)
def golden_stack(facts: Facts, expectations: Optional[Dict[str, Any]] = None):
    if not expectations:
        return skip("no expectations file (--expect FILE)")
    found_stack = stack(facts)
    pythons = _interpreters(facts)
    results: List[Result] = []
    envs = found_stack.get("environments") or {}
    lacking: Dict[str, Any] = {}  # key -> expected, for the expectations whose whole layer is absent
    layers: List[str] = []
    for key, expected, found, met in evaluate(expectations, found_stack):
        layer = None if met else absent_layer(key, found_stack)
        if layer is not None:
            lacking[key] = expected
            if layer not in layers:
                layers.append(layer)
            continue
        evidence = {"expected": expected, "found": found}
        rkey = re.sub(r"[^A-Za-z0-9_.+-]", "_", key)  # finding IDs stay ID:key whatever an environment is called
        if met:
            results.append(Result(Status.PASS, f"{key} is {_show(found)} (expected {expected})", evidence, key=rkey))
            continue
        env_name, package = environment_of(expectations, key)
        where = ""
        if env_name is not None and env_name not in envs:
            where = f" (no Python environment named {env_name}; found: {', '.join(envs) or 'none'})"
        results.append(Result(Status.FAIL, f"{key}: expected {expected}, found {_show(found)}{where}", evidence,
                              _fix(key, expected, env_name, package, pythons), key=rkey))
    if lacking:
        results.insert(0, _missing(facts, layers, lacking))
    return results or skip("the expectations file is empty")


_MESSAGE_KEYS = 12  # keys named in the message; the evidence has them all


def _missing(facts: Facts, layers: List[str], lacking: Dict[str, Any]) -> Result:
    """One finding for every expectation that nothing on the machine can answer: an empty tree, a tree without the
    driver, an image without any Python environment. The keys and their expected values are in the evidence."""
    keys = list(lacking)
    named = ", ".join(keys[:_MESSAGE_KEYS]) + (f" and {len(keys) - _MESSAGE_KEYS} more" if len(keys) > _MESSAGE_KEYS
                                              else "")
    n = len(keys)
    where = "the tree" if facts.mode == "sysroot" else "the machine"
    message = (f"{where[0].upper()}{where[1:]} has no {_or(layers)}: {n} expectation{'s' if n != 1 else ''} "
               f"cannot be met ({named})")
    evidence = {"missing": layers, "expected": dict(lacking), "found": None}
    if facts.mode == "sysroot":
        fix = Fix("Check that --sysroot is the image's root filesystem and that the recipe installs these layers; "
                  "a tree never holds what only a running machine knows (the loaded driver, gpu_model, gpu_count, "
                  "the instance type), so leave those out of a sysroot expectations file.", (_REFRESH,))
    else:
        fix = Fix("Install what is missing in the image recipe, or remove these expectations if the image is not "
                  "meant to have it.", (_REFRESH,))
    return Result(Status.FAIL, message, evidence, fix, key="missing")


def _or(names: List[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def _show(found: Any) -> str:
    if found is None:
        return "nothing"
    if isinstance(found, dict):
        return ", ".join(f"{k}: {v}" for k, v in found.items())
    return str(found)
