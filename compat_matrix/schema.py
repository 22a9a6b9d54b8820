"""What a matrix file may contain: tables, their key fields and field types.

Every top-level entry carries ``source`` (keys of ``[sources.*]``), and may carry
``verified = false`` (the whole entry could not be confirmed), ``unverified``
(names of fields read only in secondary or conflicting material) and ``note``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple, Union


PATTERNS = {
    "cuda": (re.compile(r"^\d{1,2}\.\d{1,2}$"), "a CUDA version like 12.4"),
    "cuda_full": (re.compile(r"^\d{1,2}\.\d{1,2}(\.\d{1,3})?$"), "a CUDA version like 12.4 or 12.4.1"),
    "driver": (re.compile(r"^\d{3}(\.\d{1,3}){0,2}$"), "a driver version like 535.104.05"),
    "version": (re.compile(r"^\d+(\.\d+){0,3}$"), "a version like 2.4 or 9.1.0.70"),
    "cc": (re.compile(r"^\d{1,2}\.\d$"), "a compute capability like 9.0"),
    "arch": (re.compile(r"^\d{1,2}\.\d(\+PTX)?$"), "a compute capability like 9.0 or 12.0+PTX"),
    "python": (re.compile(r"^\d\.\d{1,2}$"), "a Python version like 3.11"),
    "pci_id": (re.compile(r"^[0-9a-f]{4}$"), "a 4-digit lower-case hex PCI device ID"),
    "instance_type": (re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$"), "an instance type like p4d.24xlarge"),
    "ki_id": (re.compile(r"^[A-Z]+-\d{3}$"), "an ID like KI-001"),
}

FieldType = Union[str, Tuple[str, Any]]


@dataclass(frozen=True)
class Table:
    key: Tuple[str, ...]
    fields: Dict[str, FieldType]
    required: Tuple[str, ...]
    nested: bool = False  # nested tables inherit source/verified from their parent


COMMON: Dict[str, FieldType] = {
    "source": "sources",
    "verified": "bool",
    "unverified": ("list", "str"),
    "note": "str",
}

UPDATE = Table(key=("version",), fields={"version": "cuda_full", "min_driver": "driver"},
               required=("version", "min_driver"), nested=True)
VARIANT = Table(key=("name",), fields={"name": "str", "cuda": "cuda", "cudnn": "version", "nccl": "version",
                                       "arch_list": ("list", "arch"), "unverified": ("list", "str"), "note": "str"},
                required=("name", "cuda"), nested=True)
COMPANION = Table(key=("torch",), fields={"torch": "version", "torchvision": "version", "torchaudio": "version"},
                  required=("torch", "torchvision", "torchaudio"), nested=True)

TABLES: Dict[str, Table] = {
    "toolkit": Table(("version",), {"version": "cuda", "min_driver": "driver", "updates": ("tables", UPDATE)},
                     ("version", "min_driver")),
    "minor_compat": Table(("cuda_major",), {"cuda_major": "int", "min_driver": "driver"}, ("cuda_major", "min_driver")),
    "forward_compat": Table(("name",), {"name": "str", "gpu_classes": ("list", "str")}, ("name", "gpu_classes")),
    "architecture": Table(("name",), {
        "name": "str", "compute_capabilities": ("list", "cc"), "min_cuda": "cuda", "max_cuda": "cuda",
        "removed_in_cuda": "cuda", "last_driver_branch": "version",
        "open_kernel_modules": ("enum", ("unsupported", "supported", "required"))},
        ("name", "compute_capabilities", "open_kernel_modules")),
    "gpu": Table(("name",), {
        "name": "str", "aliases": ("list", "str"), "pci_device_ids": ("list", "pci_id"), "compute_capability": "cc",
        "architecture": "str", "class": ("enum", ("datacenter", "workstation", "geforce", "jetson", "nvswitch")),
        "memory_mib": "int", "min_cuda": "cuda", "max_cuda": "cuda", "dense_tflops": ("map", "number"),
        "nvlink_gbps": "number",
        "nvlink_links": "int"},  # NVLink links per GPU (SXM models): DLD-GPU-015's expectation (issue 30)
        ("name", "pci_device_ids", "architecture", "class")),
    "torch": Table(("version",), {
        "version": "version", "patches": ("list", "version"), "python": ("list", "python"),
        "torchvision": "version", "torchaudio": "version", "numpy2": "bool",
        "companion_patches": ("tables", COMPANION), "variant": ("tables", VARIANT)},
        ("version", "python", "torchvision", "variant")),
    "cudnn": Table(("version", "cuda_major"), {
        "version": "version", "cuda_major": "int", "cuda": ("list", "cuda"), "min_driver": "driver",
        "compute_capabilities": ("list", "cc")}, ("version", "cuda_major", "cuda")),
    "nccl": Table(("version",), {"version": "version", "cuda": ("list", "cuda")}, ("version", "cuda")),
    "instance": Table(("type",), {
        "type": "instance_type", "family": "str", "gpu": "str", "gpu_count": "int", "gpu_memory_mib": "int",
        "efa_interfaces": "int", "nvswitch": "bool"},
        ("type", "family", "gpu", "gpu_count", "nvswitch")),
    "ebs_volume": Table(("type",), {
        "type": "str", "size_min_gib": "int", "size_max_gib": "int", "iops_baseline": "int", "iops_per_gib": "number",
        "iops_min": "int", "iops_max": "int", "iops_burst": "int", "burst_below_gib": "int",
        "throughput_baseline_mibps": "number", "throughput_max_mibps": "number", "throughput_small_mibps": "number",
        "throughput_small_max_gib": "int", "throughput_per_iops_mibps": "number", "throughput_per_tib_mibps": "number",
        "throughput_burst_per_tib_mibps": "number"},
        ("type", "size_min_gib", "size_max_gib", "throughput_max_mibps")),
    "rhel": Table(("release",), {"release": "version", "kernel": "str", "gcc": "version", "glibc": "version"},
                  ("release", "kernel")),
    "system_python": Table(("os",), {"os": "str", "version": "python", "platform_python": "str",
                                     "pip_install_dirs": ("list", "str"), "rpm_dirs": ("list", "str")},
                           ("os", "version")),
    "xid": Table(("code",), {"code": "int", "name": "str", "mnemonic": "str",
                             "kind": ("enum", ("application", "hardware", "driver", "informational", "unknown")),
                             "points_at": ("enum", ("application", "driver", "gpu", "fabric", "system")),
                             "action": "str", "resolution": "str", "investigation": "str",
                             "applies_to": ("list", ("enum", ("A100", "H100", "B100", "GB200"))), "since": "driver",
                             "remedy": ("enum", ("none", "restart-application", "fix-configuration", "repair-software",
                                                 "reload-driver", "reset-gpu", "reboot", "replace-hardware")),
                             "drain": "bool"}, ("code", "name", "kind", "action")),
    "consumer": Table(("name",), {
        "name": "str", "distributions": ("list", "str"), "package": "str", "build_info": "str",
        "build_keys": ("map", "str"), "preload": ("enum", ("wheels", "on-failure", "opt-in", "none")),
        "preload_call": "str", "optional_objects": ("list", "str"), "optional_libraries": ("list", "str"),
        "dlopen_by": ("list", "str"), "dlopen": ("map", ("list", "str")), "install": ("list", "str"),
        "cuda_major_since": ("map", "int"), "emits_ptx": ("enum", ("toolkit",)),
        "ptx_linkers": ("list", "str")},
        ("name", "preload")),
    # plugins a host library opens by name at run time (compat_matrix/data/loading.toml)
    "dlopen_plugin": Table(("name",), {
        "name": "str", "component": "str", "hosts": ("list", "str"), "host_unless_needed": "str",
        "variable": "str", "default": ("list", "str"), "named": ("list", "str"), "off": ("list", "str"),
        "plugins": ("list", "str"), "versioned": ("list", "str"), "search": ("enum", ("dlopen", "beside", "path")),
        "when": ("enum", ("named", "present", "always")), "same_version": "bool", "optional": ("list", "str"),
        "fallback": "str", "also": "str", "host_min_version": "version", "if_present": ("list", "str"), "if_present_from": "version", "host_max_version": "version",
        "host_dists": ("list", "str")},
        ("name", "hosts", "search", "when")),
    # directories compile-and-load workflows write code to and load it from (compat_matrix/data/loading.toml)
    "jit_dir": Table(("name",), {
        "name": "str", "tool": "str", "distributions": ("list", "str"), "variable": "str", "default": "str",
        "loads_code": "bool", "min_version": "version", "max_version": "version",
        "unnamed_at_import": ("list", "version")},
        ("name", "tool", "distributions", "default", "loads_code")),
    "cuda_library": Table(("soname", "cuda_major"), {
        "soname": "str", "cuda_major": "int", "wheel": "str", "version_follows_cuda": "bool", "pin": "str"},
        ("soname", "cuda_major", "wheel")),
    "library_family": Table(("name",), {
        "name": "str", "sonames": ("list", "str"), "numbering": ("list", ("enum", ("wheel", "file", "header"))),
        "rule": ("enum", ("not-older", "soname", "cudnn-minor")), "needed_minor_by": ("list", "str")},
        ("name", "sonames", "numbering", "rule")),
    "cause": Table(("id",), {"id": "str", "summary": "str", "checks": ("list", "str"), "fix": "str",
                             "confirmed_when": ("map", ("list", "signature_pattern"))},
                   ("id", "summary", "fix")),
    "signature": Table(("id",), {
        "id": "str", "where": ("list", ("enum", ("kernel-log", "journal", "app", "nccl", "container", "loader",
                                                  "installer"))),
        "patterns": ("list", "signature_pattern"), "meaning": "str", "causes": ("list", "str"),
        "severity": ("enum", ("fail", "warn", "info")), "reported_by": "str"},
        ("id", "where", "patterns", "meaning", "causes")),
    # Deep Learning AMI and NGC container releases: the stack each ships (compat_matrix/data/images.toml).
    # driver: the AMI's installed driver; for an NGC container the floor its release notes state.
    "image": Table(("kind", "name", "release"), {
        "kind": ("enum", ("dlami", "ngc")), "name": "str", "release": "str", "torch": "str", "cuda": "cuda_full",
        "driver": "driver", "os": "str", "arch": ("enum", ("x86_64", "aarch64")), "instances": ("list", "str")},
        ("kind", "name", "release", "torch")),
    # Levels above which a hardware counter is worth a finding (compat_matrix/data/thresholds.toml): a count (since
    # the counter was last cleared) or a rate ``per`` minute/second of uptime.
    "threshold": Table(("name",), {
        "name": "str", "value": "number", "per": ("enum", ("count", "second", "minute", "hour")), "summary": "str"},
        ("name", "value", "per", "summary")),
    "known_issue": Table(("id",), {
        "id": "ki_id", "component": "str", "versions": "specifier", "requires": ("map", "specifier"),
        "instance_families": ("list", "str"), "summary": "str", "fix": "str"},
        ("id", "component", "versions", "summary", "fix")),
}


def check_value(kind: FieldType, value: Any, sources: Optional[set] = None) -> Optional[str]:
    """Why ``value`` is not of ``kind`` (None when it is)."""
    if isinstance(kind, tuple):
        tag, arg = kind
        if tag == "list":
            if not isinstance(value, list):
                return f"must be a list, not {type(value).__name__}"
            for i, item in enumerate(value):
                problem = check_value(arg, item, sources)
                if problem:
                    return f"item {i} ({item!r}): {problem}"
            return None
        if tag == "enum":
            return None if value in arg else f"{value!r} is not one of {', '.join(arg)}"
        if tag == "map":
            if not isinstance(value, dict):
                return "must be a table"
            for k, v in value.items():
                problem = check_value(arg, v, sources)
                if problem:
                    return f"{k}: {problem}"
            return None
        raise ValueError(tag)  # pragma: no cover - schema bug
    if kind == "str":
        return None if isinstance(value, str) and value.strip() else "must be a non-empty string"
    if kind == "signature_pattern":
        from dl_doctor.compat_matrix.signatures import PatternError, compile_pattern

        if not isinstance(value, str):
            return "must be a string"
        try:
            compile_pattern(value)
        except PatternError as exc:
            return str(exc)
        return None
    if kind == "bool":
        return None if isinstance(value, bool) else "must be true or false"
    if kind == "int":
        return None if isinstance(value, int) and not isinstance(value, bool) else "must be an integer"
    if kind == "number":
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "must be a number"
    if kind == "specifier":
        if not isinstance(value, str):
            return "must be a version specifier string like '>=2.7'"
        from packaging.specifiers import InvalidSpecifier, SpecifierSet  # only TOML being validated needs it

        try:
            SpecifierSet(value)
        except InvalidSpecifier:
            return f"{value!r} is not a version specifier like '>=2.7,<3'"
        return None
    if kind == "sources":
        items = value if isinstance(value, list) else [value]
        if not items or not all(isinstance(s, str) for s in items):
            return "must name at least one source key"
        if sources is not None:
            unknown = [s for s in items if s not in sources]
            if unknown:
                return f"unknown source key(s) {', '.join(unknown)} (define them under [sources.KEY])"
        return None
    pattern, what = PATTERNS[kind]
    if not isinstance(value, str):
        return f"must be a string ({what}), not {type(value).__name__}"
    return None if pattern.match(value) else f"{value!r} is not {what}"
