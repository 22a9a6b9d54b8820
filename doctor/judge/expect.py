"""Golden-stack expectations (``--expect FILE``): what an image must have.

A TOML file of exact values, PEP 440 ranges or shell-style patterns::

    driver = "535.104.05"            # exact
    cuda_toolkit = ">=12.2,<12.3"    # a range (a leading operator makes it a version specifier)
    kernel = "4.18.0-477.*"          # a pattern (* and ? make it a glob)
    os_id = "rhel"
    os_version = "8.8"
    gpu_model = "NVIDIA A100-SXM4-40GB"   # as the driver names it (NVML)
    gpu_pci_ids = "10de:20b0"             # from sysfs: holds even when the driver is down
    gpu_count = 8
    efa_devices = 4
    cudnn = ">=9.1"                  # every environment with torch
    nccl = ">=2.20"

    [environments.pytorch]
    python = "3.10.*"
    torch = "==2.4.1"                # matches 2.4.1+cu124 too (local versions are ignored by ==)
    cuda = "12.4"
    packages = { numpy = "<2", transformers = ">=4.40" }
"""

from __future__ import annotations

import fnmatch
import sys
from typing import Any, Dict, List, Optional, Tuple

from packaging.version import InvalidVersion, Version

# packaging.specifiers and the TOML parser are imported where a file of expectations is read or judged (--expect):
# a run without one does not pay for them.

TOP_KEYS = {"driver", "driver_userspace", "cuda_toolkit", "kernel", "os_id", "os_version", "gpu_model",
            "gpu_pci_ids", "gpu_count", "efa_devices", "nvswitch_count", "fabric_manager", "instance_type", "cudnn",
            "nccl", "environments"}
ENV_KEYS = {"python", "torch", "cuda", "cudnn", "nccl", "packages"}


# Distributions `expect --from` pins next to torch: the ones whose version changes what training does.
DEFAULT_PACKAGES = ("numpy", "torchvision", "torchaudio", "transformers", "accelerate", "deepspeed", "flash-attn",
                    "xformers", "triton", "apex", "tensorflow", "jax", "jaxlib")


class ExpectationError(ValueError):
    pass


def load(path: str) -> Dict[str, Any]:
    """Read and validate an expectations file; a problem raises ExpectationError naming it."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except OSError as exc:
        raise ExpectationError(f"cannot read {path}: {exc.strerror or exc}")
    except tomllib.TOMLDecodeError as exc:
        raise ExpectationError(f"{path} is not valid TOML: {exc}")
    unknown = set(doc) - TOP_KEYS
    if unknown:
        raise ExpectationError(f"{path}: unknown expectation(s) {', '.join(sorted(unknown))} "
                               f"(known: {', '.join(sorted(TOP_KEYS))})")
    envs = doc.get("environments", {})
    if not isinstance(envs, dict):
        raise ExpectationError(f"{path}: environments must be a table of [environments.NAME] sections")
    for name, env in envs.items():
        if not isinstance(env, dict):
            raise ExpectationError(f"{path}: environments.{name} must be a table, not {env!r}")
        if set(env) - ENV_KEYS:
            raise ExpectationError(f"{path}: environments.{name}: unknown key(s) "
                                   f"{', '.join(sorted(set(env) - ENV_KEYS))} (known: {', '.join(sorted(ENV_KEYS))})")
        if not isinstance(env.get("packages", {}), dict):
            raise ExpectationError(f"{path}: environments.{name}.packages must be a table like "
                                   f"{{ numpy = \"<2\" }}")
    for key, value, _ in _items(doc):
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise ExpectationError(f"{path}: {key} = {value!r}: expected a version, range, pattern or number")
        _validate(path, key, value)
    return doc


def _items(doc: Dict[str, Any]) -> List[Tuple[str, Any, Tuple[Optional[str], str, Optional[str]]]]:
    """(dotted key, expected value, (environment or None, field, package or None)) for every expectation."""
    out: List[Tuple[str, Any, Tuple[Optional[str], str, Optional[str]]]] = [
        (k, v, (None, k, None)) for k, v in doc.items() if k != "environments"]
    for name, env in (doc.get("environments") or {}).items():
        for k, v in env.items():
            if k == "packages":
                out += [(f"environments.{name}.packages.{p}", pv, (name, "packages", p)) for p, pv in v.items()]
            else:
                out.append((f"environments.{name}.{k}", v, (name, k, None)))
    return out


def _validate(path: str, key: str, value: Any) -> None:
    if isinstance(value, str) and value[:1] in "<>=!~":
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        try:
            SpecifierSet(value)
        except InvalidSpecifier:
            raise ExpectationError(f"{path}: {key} = {value!r} is not a version range like '>=2.4,<2.5'")


def is_range(expected: Any) -> bool:
    return isinstance(expected, str) and expected[:1] in "<>=!~"


def matches(expected: Any, found: Any) -> bool:
    if found is None:
        return False
    if isinstance(expected, bool) or isinstance(expected, int):
        return found == expected
    text = str(expected)
    if text[:1] in "<>=!~":
        from packaging.specifiers import SpecifierSet

        try:
            return Version(str(found)) in SpecifierSet(text)
        except InvalidVersion:
            return False
    if any(ch in text for ch in "*?["):
        return fnmatch.fnmatchcase(str(found), text)
    return str(found) == text


def evaluate(expectations: Dict[str, Any], stack: Dict[str, Any]) -> List[Tuple[str, Any, Any, bool]]:
    """(key, expected, found, met) for every expectation; ``found`` is None for an environment that is not there."""
    envs = stack.get("environments") or {}
    out: List[Tuple[str, Any, Any, bool]] = []
    for key, expected, (env_name, field, package) in _items(expectations):
        if env_name is None and field in ("cudnn", "nccl"):
            found: Any = {name: e.get(field) for name, e in envs.items() if e.get("torch")}
            met = bool(found) and all(matches(expected, v) for v in found.values())
            out.append((key, expected, found or None, met))
            continue
        if env_name is not None:
            env = envs.get(env_name)
            if env is None:
                found = None
            elif package is not None:
                found = (env.get("packages") or {}).get(_norm(package))
            else:
                found = env.get(field)
        else:
            found = stack.get(key)
        out.append((key, expected, found, matches(expected, found)))
    return out


# What each expectation reads, as (the layer's name for a person, the stack items any of which shows the layer is
# there). An expectation whose layer the machine or tree has nothing of cannot be judged value by value: the
# check groups all of them into one finding that names the absent layers (an empty tree: one card, not twenty).
_LAYERS: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "os_id": ("OS release (os-release)", ("os_id", "os_version")),
    "os_version": ("OS release (os-release)", ("os_id", "os_version")),
    "kernel": ("kernel", ("kernel",)),
    "driver": ("NVIDIA driver", ("driver", "driver_userspace", "gpu_model")),
    "driver_userspace": ("NVIDIA driver", ("driver", "driver_userspace", "gpu_model")),
    "gpu_model": ("NVIDIA driver", ("driver", "driver_userspace", "gpu_model")),
    "gpu_pci_ids": ("NVIDIA GPU", ("gpu_pci_ids", "gpu_count", "nvswitch_count")),
    "gpu_count": ("NVIDIA GPU", ("gpu_pci_ids", "gpu_count", "nvswitch_count")),
    "nvswitch_count": ("NVIDIA GPU", ("gpu_pci_ids", "gpu_count", "nvswitch_count")),
    "cuda_toolkit": ("CUDA toolkit", ("cuda_toolkit", "cuda_toolkits")),
    "fabric_manager": ("Fabric Manager", ("fabric_manager",)),
    "efa_devices": ("network facts", ("efa_devices",)),
    "instance_type": ("instance type", ("instance_type",)),
}


def absent_layer(key: str, stack: Dict[str, Any]) -> Optional[str]:
    """The layer the expectation ``key`` reads when ``stack`` has nothing of it at all (``None``: it has some, so a
    missing value is this expectation's own mismatch)."""
    envs = stack.get("environments") or {}
    if key.startswith("environments."):
        return None if envs else "Python environments"
    if key in ("cudnn", "nccl"):
        return None if any(e.get("torch") for e in envs.values()) else \
            "Python environment with torch" if envs else "Python environments"
    name, shows = _LAYERS.get(key, (None, ()))
    if name is None or any(stack.get(k) not in (None, "", []) for k in shows):
        return None
    return name


def environment_of(expectations: Dict[str, Any], key: str) -> Tuple[Optional[str], Optional[str]]:
    """(environment name, package or "torch") that the expectation ``key`` is about."""
    for k, _, (env_name, field, package) in _items(expectations):
        if k == key:
            return env_name, package or (field if field == "torch" else None)
    return None, None


def _norm(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def toml_string(value: str) -> str:
    """A TOML basic string for any text: backslash, quote and control characters escaped; every other character,
    non-ASCII and outside the BMP included, kept as itself (TOML has no surrogate-pair escapes, as JSON does)."""
    out = []
    for ch in value:
        code = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        elif 0xD800 <= code <= 0xDFFF:  # a lone surrogate cannot be written as UTF-8
            out.append(f"\\\\x{code & 0xFF:02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_key(name: str) -> str:
    """A bare key where TOML allows one (ASCII letters, digits, - and _), else a quoted one."""
    import re

    return name if re.fullmatch(r"[A-Za-z0-9_-]{1,128}", name) else toml_string(name)


def to_toml(stack: Dict[str, Any], packages: Optional[List[str]] = None) -> str:
    """An expectations file pinning a known-good stack (a starting point to loosen by hand)."""
    def q(v: Any) -> str:
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else toml_string(str(v))

    lines = ["# dl-doctor golden-stack expectations, written by `dl-doctor expect --from`.",
             "# Values are exact; loosen them with ranges (\">=12.2,<12.3\") or patterns (\"4.18.0-477.*\").", ""]
    for key in ("os_id", "os_version", "kernel", "driver", "driver_userspace", "cuda_toolkit", "gpu_model",
                "gpu_pci_ids", "gpu_count", "nvswitch_count", "efa_devices", "fabric_manager", "instance_type"):
        if stack.get(key) is not None:
            lines.append(f"{key} = {q(stack[key])}")
    wanted = {_norm(p) for p in (packages or DEFAULT_PACKAGES)}
    for name, env in (stack.get("environments") or {}).items():
        if not env.get("torch") and not (set(env.get("packages") or {}) & wanted):
            continue
        lines += ["", f"[environments.{toml_key(str(name))}]"]
        for key in ("python", "torch", "cuda", "cudnn", "nccl"):
            if env.get(key):
                lines.append(f"{key} = {q(env[key])}")
        pkgs = {k: v for k, v in (env.get("packages") or {}).items() if k in wanted}
        if pkgs:
            lines.append("packages = { " + ", ".join(f"{toml_key(k)} = {q(v)}" for k, v in sorted(pkgs.items())) + " }")
    return "\n".join(lines) + "\n"
