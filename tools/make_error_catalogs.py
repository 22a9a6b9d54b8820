#!/usr/bin/env python3
"""Regenerate compat_matrix/catalogs/*.toml: the error codes (and their strings) of the CUDA runtime and driver API,
NVML, cuDNN 8 and 9, cuBLAS, cuSOLVER, cuFFT, cuSPARSE, cuRAND and NCCL, read from NVIDIA's wheels on PyPI.

    python tools/make_error_catalogs.py [--cache DIR] [--out DIR] [--offline]

Each enumeration is parsed from the header the wheel ships (only the one enum block, so the other enums in the
same header never count), and each code's string is asked of the wheel's own library with ctypes where the
library has a pure string function (cudaGetErrorString, cublasGetStatusString, cusparseGetErrorString,
cudnnGetErrorString, ncclGetErrorString: none needs a GPU or a driver). Only codes and strings are recorded.

Wheels are downloaded once into the cache (default $DL_DOCTOR_WHEEL_CACHE or ~/.cache/dl-doctor-wheels; about
3 GB: cuDNN, cuBLAS and NCCL are large) with ``pip download --no-deps --only-binary :all:`` for Linux x86-64
(manylinux2014, and manylinux_2_27/2_28 where a newer wheel has only those tags) and reused when present;
``--offline`` never downloads (the regeneration test uses it, and skips when the cache is absent: CI has none).
Each wheel's PyPI file URL is read from the index's JSON API (PEP 691) and kept in the cache (urls.json), with its
sha256 checked against the file. The libraries are unpacked under the cache (unpacked/) to be loaded.

The output is deterministic: the same wheels give the same bytes.
"""

from __future__ import annotations

import argparse
import ast
import ctypes
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "compat_matrix" / "catalogs"
DEFAULT_CACHE = Path(os.environ.get("DL_DOCTOR_WHEEL_CACHE") or os.path.expanduser("~/.cache/dl-doctor-wheels"))
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_27_x86_64", "manylinux_2_28_x86_64")
SCRIPT = "tools/make_error_catalogs.py"


class CatalogError(Exception):
    pass


# -- the C enum parser -----------------------------------------------------------------------------------------

@dataclass
class Enumerator:
    name: str
    value: int
    alias_of: Optional[str] = None   # its value was written as another enumerator's name (a deprecated alias)
    doc: str = ""                    # the comment that documents it (a doc comment before it, or ///< after)


_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_IDENT = re.compile(r"[A-Za-z_]\w*")


def _find_enum_body(text: str, name: str) -> str:
    """The text between the braces of the enum whose tag or typedef name is ``name`` (only that block)."""
    stripped = _COMMENT.sub(lambda m: " " * len(m.group(0)) if "\n" not in m.group(0)
                            else re.sub(r"[^\n]", " ", m.group(0)), text)  # same offsets, comments blanked
    for m in re.finditer(r"\benum\b", stripped):
        brace = stripped.find("{", m.end())
        if brace < 0:
            break
        head = stripped[m.end():brace]
        if not re.fullmatch(r"[\w\s]*", head):  # 'enum x y;' (a declaration): not a definition
            continue
        depth, end = 0, brace
        while end < len(stripped):
            ch = stripped[end]
            depth += ch == "{"
            depth -= ch == "}"
            if depth == 0:
                break
            end += 1
        tail = re.match(r"\s*(\w*)\s*;", stripped[end + 1:end + 200])
        tag = (_IDENT.findall(head) or [""])[-1]
        typedef = tail.group(1) if tail else ""
        if name in (tag, typedef):
            return text[brace + 1:end]
    raise CatalogError(f"no enum {name!r} in the header")


def _eval(expr: str, known: Dict[str, int]) -> int:
    expr = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b", r"\1", expr.strip())
    tree = ast.parse(expr, mode="eval")

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and node.id in known:
            return known[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else (~v if isinstance(node.op, ast.Invert) else v)
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            ops = {ast.Add: a + b, ast.Sub: a - b, ast.BitOr: a | b, ast.LShift: a << b if 0 <= b < 64 else None}
            if type(node.op) in ops and ops[type(node.op)] is not None:
                return ops[type(node.op)]  # type: ignore[return-value]
        raise CatalogError(f"cannot evaluate enumerator value {expr!r}")

    return ev(tree)


def parse_enum(text: str, name: str) -> List[Enumerator]:
    """The enumerators of the C enum ``name`` (its tag or its typedef name) in ``text``, in order, with their values
    (implicit ones counted on from the previous, aliases resolved) and each one's documenting comment."""
    body = _find_enum_body(text, name)
    body = "\n".join(line for line in body.split("\n") if not line.lstrip().startswith("#"))
    out: List[Enumerator] = []
    known: Dict[str, int] = {}
    pending_doc = ""
    nxt = 0
    # split on commas outside comments; keep the comments to attach them
    pos = 0
    items: List[Tuple[str, str, str]] = []  # (code text, doc before, doc after)
    code, before, ahead = "", "", ""  # ahead: a doc comment written after this enumerator, before its comma
    for m in re.finditer(r"/\*.*?\*/|//[^\n]*|,", body, re.S):
        code += body[pos:m.start()]
        tok = m.group(0)
        pos = m.end()
        if tok == ",":
            if code.strip():  # (', name = 1' after a comment: the comment is the next one's)
                items.append((code, before, ""))
                code, before, ahead = "", ahead, ""
            continue
        comment = tok
        if comment.startswith(("///<", "/**<", "//!<", "/*!<")):
            # documents the enumerator before it (on its line): the current one if it has text, else the last
            if code.strip():
                before = comment
            elif items:
                c, b, _ = items[-1]
                items[-1] = (c, b, comment)
        elif not code.strip():
            before = comment
        elif comment.startswith(("/**", "/*!", "///", "//!")):
            ahead = comment  # a doc comment documents what follows it
        else:
            code += " "  # a plain comment inside the enumerator ('= 2001 /* please transition */,')
    code += body[pos:]
    if code.strip():
        items.append((code, before, ""))
    for raw, doc_before, doc_after in items:
        raw = raw.strip()
        if not raw:
            continue
        got = re.match(r"([A-Za-z_]\w*)((?:\s+[A-Za-z_]\w*(?:\([^)]*\))?)*)\s*(?:=\s*(.+))?$", raw, re.S)
        if not got:
            raise CatalogError(f"cannot read enumerator {raw!r}")
        ename, expr = got.group(1), got.group(3)
        alias = None
        if expr is not None:
            expr = " ".join(expr.split())
            if re.fullmatch(r"[A-Za-z_]\w*", expr):
                if expr not in known:
                    raise CatalogError(f"{ename} = {expr}: not an earlier enumerator")
                alias = expr
            value = _eval(expr, known)
        else:
            value = nxt
        known[ename] = value
        nxt = value + 1
        out.append(Enumerator(ename, value, alias, _doc_text(doc_after or doc_before)))
    return out


def _doc_text(comment: str) -> str:
    text = re.sub(r"^/\*+!?<?|\*+/$|^//[/!]?<?", "", comment.strip())
    lines = [re.sub(r"^\s*\*\s?", "", ln).strip() for ln in text.split("\n")]
    return " ".join(ln for ln in lines if ln).strip()


def first_sentence(doc: str) -> str:
    """The first sentence of a doc comment (up to the first '. ' or the end), without doxygen markup."""
    doc = re.sub(r"::", "", doc)
    doc = re.sub(r"\\(deprecated|note|brief)\b.*", "", doc).strip()
    m = re.match(r"(.+?\.)(\s|$)", doc)
    return (m.group(1) if m else doc).strip()


def parse_pynvml(text: str) -> Tuple[List[Enumerator], Dict[int, str]]:
    """NVML_SUCCESS and NVML_ERROR_* = N at module level of pynvml.py, and its NVMLError._errcode_to_string table
    (read with ast: nothing is executed)."""
    tree = ast.parse(text)
    codes: List[Enumerator] = []
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and re.fullmatch(r"NVML_(SUCCESS|ERROR_\w+)", node.targets[0].id)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int)):
            codes.append(Enumerator(node.targets[0].id, node.value.value))
    by_name = {c.name: c.value for c in codes}
    strings: Dict[int, str] = {}
    for klass in ast.walk(tree):
        if isinstance(klass, ast.ClassDef) and klass.name == "NVMLError":
            for stmt in klass.body:
                if (isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name)
                        and stmt.targets[0].id == "_errcode_to_string" and isinstance(stmt.value, ast.Dict)):
                    for k, v in zip(stmt.value.keys, stmt.value.values):
                        if isinstance(k, ast.Name) and k.id in by_name and isinstance(v, ast.Constant):
                            strings[by_name[k.id]] = str(v.value)
    return codes, strings


def pynvml_class_name(name: str) -> str:
    """The exception class pynvml makes of an NVML_ERROR_* name (its _extractNVMLErrorsAsClasses rule)."""
    import string

    return "NVMLError_" + string.capwords(name.replace("NVML_ERROR_", ""), "_").replace("_", "")


# -- what is read from where -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Wheel:
    project: str
    version: str

    @property
    def stem(self) -> str:
        return f"{re.sub(r'[-_.]+', '_', self.project).lower()}-{self.version}-"

    @property
    def source_id(self) -> str:
        return "pypi_" + re.sub(r"[^a-z0-9]+", "_", f"{self.project}_{self.version}".lower())


@dataclass(frozen=True)
class Release:
    version: str                 # the release as the catalog names it ("12.9", "9.28")
    wheel: Wheel
    member: str                  # the header (or pynvml.py) inside the wheel
    enum: str = ""               # the enum's tag or typedef name
    lib: str = ""                # the library inside the wheel that holds the string function
    string_fn: str = ""
    name_fn: str = ""            # a function that returns the name (checked against the header's)
    preload: Tuple[Tuple[Wheel, str], ...] = ()   # libraries of other wheels the library needs (loaded first)
    sentinels: Tuple[str, ...] = ()               # enumerators that are not codes (a count of the codes)
    kind: str = "c-enum"         # or "pynvml"
    doc_strings: bool = False    # no string function anywhere in a wheel: the header's doc comment stands in


CU11 = Wheel("nvidia-cuda-runtime-cu11", "11.8.89")
CU12 = Wheel("nvidia-cuda-runtime-cu12", "12.9.79")
CU13 = Wheel("nvidia-cuda-runtime", "13.5.37")   # the newest 13.x on PyPI when generated
PYNVML = Wheel("nvidia-ml-py", "13.615.71")
NVML_DEV = Wheel("nvidia-nvml-dev-cu12", "12.9.79")
CUDNN8 = Wheel("nvidia-cudnn-cu12", "8.9.7.29")
CUDNN9 = Wheel("nvidia-cudnn-cu12", "9.28.0.42")
CUBLAS = Wheel("nvidia-cublas-cu12", "12.9.3.13")
CUSOLVER = Wheel("nvidia-cusolver-cu12", "11.7.5.82")
CUFFT = Wheel("nvidia-cufft-cu12", "11.4.1.4")
CUSPARSE = Wheel("nvidia-cusparse-cu12", "12.5.10.65")
CURAND = Wheel("nvidia-curand-cu12", "10.3.10.19")
NCCL = Wheel("nvidia-nccl-cu12", "2.32.3")
NVJITLINK = Wheel("nvidia-nvjitlink-cu12", "12.9.86")   # only to load libcusparse (it needs libnvJitLink)

_RT = {CU11: ("nvidia/cuda_runtime", "libcudart.so.11.0"), CU12: ("nvidia/cuda_runtime", "libcudart.so.12"),
       CU13: ("nvidia/cu13", "libcudart.so.13")}


def _runtime(version: str, wheel: Wheel) -> Release:
    base, lib = _RT[wheel]
    return Release(version, wheel, f"{base}/include/driver_types.h", "cudaError", f"{base}/lib/{lib}",
                   "cudaGetErrorString", "cudaGetErrorName")


def _driver(version: str, wheel: Wheel) -> Release:
    return Release(version, wheel, f"{_RT[wheel][0]}/include/cuda.h", "CUresult", doc_strings=True)


@dataclass
class CatalogSpec:
    id: str
    title: str
    library: str
    enum: str
    releases: List[Release]


CATALOGS: List[CatalogSpec] = [
    CatalogSpec("cuda-runtime", "CUDA runtime API error codes (cudaError_t)", "libcudart", "cudaError_t",
                [_runtime("11.8", CU11), _runtime("12.9", CU12), _runtime("13.5", CU13)]),
    CatalogSpec("cuda-driver", "CUDA driver API error codes (CUresult)", "libcuda", "CUresult",
                [_driver("11.8", CU11), _driver("12.9", CU12), _driver("13.5", CU13)]),
    CatalogSpec("nvml", "NVML return codes (nvmlReturn_t)", "libnvidia-ml", "nvmlReturn_t",
                [Release("12.9", NVML_DEV, "nvidia/nvml_dev/include/nvml.h", "nvmlReturn_t", doc_strings=True),
                 Release("13.615", PYNVML, "pynvml.py", kind="pynvml")]),
    CatalogSpec("cudnn", "cuDNN status codes (cudnnStatus_t)", "libcudnn", "cudnnStatus_t",
                [Release("8.9", CUDNN8, "nvidia/cudnn/include/cudnn_ops_infer.h", "cudnnStatus_t",
                         "nvidia/cudnn/lib/libcudnn_ops_infer.so.8", "cudnnGetErrorString"),
                 Release("9.28", CUDNN9, "nvidia/cudnn/include/cudnn_graph.h", "cudnnStatus_t",
                         "nvidia/cudnn/lib/libcudnn_graph.so.9", "cudnnGetErrorString")]),
    CatalogSpec("cublas", "cuBLAS status codes (cublasStatus_t)", "libcublas", "cublasStatus_t",
                [Release("12.9", CUBLAS, "nvidia/cublas/include/cublas_api.h", "cublasStatus_t",
                         "nvidia/cublas/lib/libcublas.so.12", "cublasGetStatusString", "cublasGetStatusName")]),
    CatalogSpec("cusolver", "cuSOLVER status codes (cusolverStatus_t)", "libcusolver", "cusolverStatus_t",
                [Release("11.7", CUSOLVER, "nvidia/cusolver/include/cusolver_common.h", "cusolverStatus_t")]),
    CatalogSpec("cufft", "cuFFT result codes (cufftResult)", "libcufft", "cufftResult",
                [Release("11.4", CUFFT, "nvidia/cufft/include/cufft.h", "cufftResult")]),
    CatalogSpec("cusparse", "cuSPARSE status codes (cusparseStatus_t)", "libcusparse", "cusparseStatus_t",
                [Release("12.5", CUSPARSE, "nvidia/cusparse/include/cusparse.h", "cusparseStatus_t",
                         "nvidia/cusparse/lib/libcusparse.so.12", "cusparseGetErrorString",
                         preload=((NVJITLINK, "nvidia/nvjitlink/lib/libnvJitLink.so.12"),))]),
    CatalogSpec("curand", "cuRAND status codes (curandStatus_t)", "libcurand", "curandStatus_t",
                [Release("10.3", CURAND, "nvidia/curand/include/curand.h", "curandStatus")]),
    CatalogSpec("nccl", "NCCL result codes (ncclResult_t)", "libnccl", "ncclResult_t",
                [Release("2.32", NCCL, "nvidia/nccl/include/nccl.h", "ncclResult_t", "nvidia/nccl/lib/libnccl.so.2",
                         "ncclGetErrorString", sentinels=("ncclNumResults",))]),
]


# -- classes: what a code means for the person reading it (compat_matrix/catalogs/classes.toml) -------------------

# CUDA runtime and driver codes share their numbers (cudaErrorECCUncorrectable = CUDA_ERROR_ECC_UNCORRECTABLE = 214):
# one mapping by value serves both. A CUDA code not named here is a programming error (invalid-usage).
_CUDA_BY_VALUE: Dict[str, Sequence[int]] = {
    "success": (0,),
    "status": (600,),
    "out-of-memory": (2,),
    "driver-not-initialised": (3, 34, 127),
    "insufficient-driver": (35, 36, 227),
    "device-unavailable": (46, 216),
    "no-device": (100, 101),
    "no-kernel-image": (98, 200, 209),
    "gpu-memory-hardware": (214, 226),
    "gpu-hardware": (220,),
    "ptx-toolchain": (218, 221, 222, 223),
    "peer-access": (217, 704, 705, 711),
    "illegal-access": (700, 710, 714, 715, 716, 717, 718, 721),
    "launch": (47, 53, 65, 66, 67, 68, 69, 701, 702, 719, 720, 909),
    "system-not-ready": (802, 919),
    "compat": (803, 804),
    "mps": (805, 806, 807, 808, 809, 810),
    "not-supported": (31, 102, 103, 215, 224, 225, 402, 800, 801, 811, 812, 916),
    "unknown": (304, 999, 10000),
}
_CUDA_CLASS = {v: cls for cls, values in _CUDA_BY_VALUE.items() for v in values}

# The libraries' status names, after their prefix (CUBLAS_STATUS_, CUDNN_STATUS_, CUFFT_, ...): exact names first,
# then the first rule whose pattern the name matches; anything else is a programming error (invalid-usage).
_LIB_EXACT = {
    "SUCCESS": "success",
    "NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER": "insufficient-driver",
    "NOT_SUPPORTED_INCOMPATIBLE_CUDART": "library-version-mismatch",
    "NOT_SUPPORTED_ARCH_MISMATCH": "no-kernel-image",
    "RUNTIME_PREREQUISITE_MISSING": "library-missing",
    "NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING": "library-missing",
    "NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE": "library-missing",
    "SUBLIBRARY_LOADING_FAILED": "library-missing",
    "SERIALIZATION_VERSION_MISMATCH": "invalid-usage",
    "RUNTIME_IN_PROGRESS": "status",
    "INTERNAL_ERROR_HOST_ALLOCATION_FAILED": "out-of-memory",
    "INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED": "out-of-memory",
    "IRS_INTERNAL_ERROR": "library-internal",
}
_LIB_RULES: Sequence[Tuple[str, str]] = (
    (r"NOT_INITIALIZED|INITIALIZATION_FAILED|SETUP_FAILED", "library-init"),
    (r"ALLOC_FAILED|ALLOCATION_FAILED|INSUFFICIENT_RESOURCES", "out-of-memory"),
    (r"VERSION_MISMATCH", "library-version-mismatch"),
    (r"ARCH_MISMATCH", "no-kernel-image"),
    (r"EXECUTION_FAILED|EXEC_FAILED|LAUNCH_FAILURE|PREEXISTING_FAILURE", "cuda-call-failed"),
    (r"INTERNAL_ERROR|MAPPING_ERROR", "library-internal"),
    (r"NOT_SUPPORTED|NOT_IMPLEMENTED|UNSUPPORTED|LICENSE|DOUBLE_PRECISION_REQUIRED", "not-supported"),
    (r"ZERO_PIVOT|SINGULAR|FP_OVERFLOW", "numerical"),
)
_LIB_PREFIX = re.compile(r"^(CUBLAS_STATUS_|CUDNN_STATUS_|CUSOLVER_STATUS_|CUSPARSE_STATUS_|CURAND_STATUS_|CUFFT_)")

_NVML = {
    "SUCCESS": "success", "UNINITIALIZED": "invalid-usage", "INVALID_ARGUMENT": "invalid-usage",
    "NOT_SUPPORTED": "not-supported", "NO_PERMISSION": "not-supported", "ALREADY_INITIALIZED": "status",
    "NOT_FOUND": "invalid-usage", "INSUFFICIENT_SIZE": "invalid-usage", "INSUFFICIENT_POWER": "gpu-hardware",
    "DRIVER_NOT_LOADED": "driver-not-initialised", "TIMEOUT": "status", "IRQ_ISSUE": "gpu-hardware",
    "LIBRARY_NOT_FOUND": "driver-not-initialised", "FUNCTION_NOT_FOUND": "insufficient-driver",
    "CORRUPTED_INFOROM": "gpu-hardware", "GPU_IS_LOST": "gpu-hardware", "RESET_REQUIRED": "gpu-hardware",
    "OPERATING_SYSTEM": "not-supported", "LIB_RM_VERSION_MISMATCH": "driver-version-mismatch",
    "IN_USE": "device-unavailable", "MEMORY": "out-of-memory", "NO_DATA": "status",
    "VGPU_ECC_NOT_SUPPORTED": "not-supported", "INSUFFICIENT_RESOURCES": "device-unavailable",
    "FREQ_NOT_SUPPORTED": "not-supported", "ARGUMENT_VERSION_MISMATCH": "insufficient-driver",
    "DEPRECATED": "invalid-usage", "NOT_READY": "status", "GPU_NOT_FOUND": "no-device",
    "INVALID_STATE": "invalid-usage", "RESET_TYPE_NOT_SUPPORTED": "not-supported", "UNKNOWN": "unknown",
}
_NCCL = {
    "ncclSuccess": "success", "ncclUnhandledCudaError": "cuda-call-failed", "ncclSystemError": "system-call",
    "ncclInternalError": "library-internal", "ncclInvalidArgument": "invalid-usage",
    "ncclInvalidUsage": "invalid-usage", "ncclRemoteError": "remote-peer", "ncclInProgress": "status",
    "ncclTimeout": "remote-peer",
}


def classify(catalog: str, name: str, value: int) -> str:
    if catalog in ("cuda-runtime", "cuda-driver"):
        return _CUDA_CLASS.get(value, "invalid-usage")
    if catalog == "nvml":
        short = re.sub(r"^NVML_(ERROR_)?", "", name)
        if short not in _NVML:
            raise CatalogError(f"nvml: {name} has no class: add it to _NVML")
        return _NVML[short]
    if catalog == "nccl":
        if name not in _NCCL:
            raise CatalogError(f"nccl: {name} has no class: add it to _NCCL")
        return _NCCL[name]
    short = _LIB_PREFIX.sub("", name)
    if short in _LIB_EXACT:
        return _LIB_EXACT[short]
    for pattern, cls in _LIB_RULES:
        if re.search(pattern, short):
            return cls
    return "invalid-usage"


# -- wheels: find, download, read ---------------------------------------------------------------------------------

def find_wheel(cache: Path, wheel: Wheel) -> Optional[Path]:
    """The cached wheel of this project and version (a Linux x86-64 or pure one)."""
    hits = sorted(p for p in cache.glob("*.whl") if p.name.lower().startswith(wheel.stem.lower())
                  and ("x86_64" in p.name or p.name.endswith("-any.whl")))
    return hits[0] if hits else None


def get_wheel(cache: Path, wheel: Wheel, offline: bool) -> Path:
    found = find_wheel(cache, wheel)
    if found:
        return found
    if offline:
        raise CatalogError(f"{wheel.project} {wheel.version}: not in {cache} (and --offline)")
    cache.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-d", str(cache),
           "--python-version", "3.11"]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    subprocess.run(cmd + [f"{wheel.project}=={wheel.version}"], check=True)
    found = find_wheel(cache, wheel)
    if not found:
        raise CatalogError(f"{wheel.project} {wheel.version}: pip download left no wheel in {cache}")
    return found


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def wheel_url(cache: Path, wheel: Wheel, path: Path, digest: str, offline: bool) -> str:
    """The PyPI file URL of exactly this wheel (the index's JSON API, PEP 691), kept in the cache's urls.json."""
    store = cache / "urls.json"
    try:
        known = json.loads(store.read_text())
    except (OSError, ValueError):
        known = {}
    if path.name in known and known[path.name]["sha256"] == digest:
        return known[path.name]["url"]
    if offline:
        raise CatalogError(f"{path.name}: its PyPI URL is not in {store} (and --offline)")
    req = urllib.request.Request(f"https://pypi.org/simple/{wheel.project}/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        files = json.load(resp)["files"]
    hit = next((f for f in files if f["filename"] == path.name), None)
    if hit is None or hit.get("hashes", {}).get("sha256") != digest:
        raise CatalogError(f"{path.name}: PyPI lists no file of this name and sha256")
    known[path.name] = {"url": hit["url"], "sha256": digest}
    store.write_text(json.dumps(known, indent=1, sort_keys=True) + "\n")
    return hit["url"]


def extract(cache: Path, whl: Path, member: str) -> Path:
    """A file of the wheel, unpacked under the cache with the libraries beside it (which a library may need)."""
    root = cache / "unpacked" / whl.stem
    target = root / member
    if not target.exists():
        folder = member.rsplit("/", 1)[0] + "/"
        with zipfile.ZipFile(whl) as zf:
            for info in zf.infolist():
                beside = info.filename.startswith(folder) and "/" not in info.filename[len(folder):]
                if info.filename == member or (".so" in member and beside and ".so" in info.filename):
                    zf.extract(info, root)
    return target


# -- strings: asked of the library itself, in a child process per library ----------------------------------------

def _strings_child(lib: str, fn: str, name_fn: str, preload: List[str], values: List[int]) -> None:
    for p in preload:
        ctypes.CDLL(p, mode=ctypes.RTLD_GLOBAL)
    handle = ctypes.CDLL(lib)
    out: Dict[str, Any] = {}
    for attr, key in ((fn, "string"), (name_fn, "name")):
        if not attr:
            continue
        f = getattr(handle, attr)
        f.restype = ctypes.c_char_p
        f.argtypes = [ctypes.c_int]
        out[key] = {str(v): (f(v) or b"").decode("utf-8", "replace") for v in values}
    json.dump(out, sys.stdout)


def library_strings(cache: Path, rel: Release, whl: Path, values: List[int],
                    offline: bool) -> Dict[str, Dict[str, str]]:
    """Each value's string (and name, where the library has a name function), from the library in a child process
    (a library that crashes on load takes only the child with it)."""
    lib = extract(cache, whl, rel.lib)
    preload = [str(extract(cache, get_wheel(cache, w, offline), m)) for w, m in rel.preload]
    args = json.dumps([str(lib), rel.string_fn, rel.name_fn, preload, values])
    proc = subprocess.run([sys.executable, __file__, "--strings-child", args], capture_output=True, text=True,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    if proc.returncode != 0:
        raise CatalogError(f"{rel.lib}: {rel.string_fn} could not be called: {proc.stderr.strip()[-300:]}")
    return json.loads(proc.stdout)


# -- building a catalog --------------------------------------------------------------------------------------------

@dataclass
class ReadRelease:
    spec: Release
    wheel_file: str
    sha256: str
    url: str
    codes: List[Enumerator]
    enumerators: int
    strings: Dict[int, str] = field(default_factory=dict)
    string_from: str = ""
    strings_how: str = ""


def read_release(cache: Path, rel: Release, offline: bool) -> ReadRelease:
    whl = get_wheel(cache, rel.wheel, offline)
    digest = sha256(whl)
    url = wheel_url(cache, rel.wheel, whl, digest, offline)
    with zipfile.ZipFile(whl) as zf:
        text = zf.read(rel.member).decode("utf-8", "replace")
    if rel.kind == "pynvml":
        codes, table = parse_pynvml(text)
        got = ReadRelease(rel, whl.name, digest, url, codes, len(codes), table, "binding",
                          "pynvml.py NVMLError._errcode_to_string")
        return got
    parsed = parse_enum(text, rel.enum)
    codes = [e for e in parsed if e.name not in rel.sentinels]
    missing = set(rel.sentinels) - {e.name for e in parsed}
    if missing:
        raise CatalogError(f"{rel.member}: sentinel(s) {sorted(missing)} not in the enum")
    got = ReadRelease(rel, whl.name, digest, url, codes, len(parsed))
    if rel.lib:
        values = sorted({e.value for e in codes})
        asked = library_strings(cache, rel, whl, values, offline)
        got.strings = {int(k): v for k, v in asked["string"].items()}
        got.string_from = "library"
        got.strings_how = f"{rel.lib.rsplit('/', 1)[-1]} {rel.string_fn}()"
        for e in codes:
            said = asked.get("name", {}).get(str(e.value))
            if said is not None and said != e.name and e.alias_of is None:
                print(f"note: {rel.wheel.project} {rel.string_fn}: {rel.name_fn}({e.value}) is {said!r}, "
                      f"the header names it {e.name!r}", file=sys.stderr)
    elif rel.doc_strings and any(e.doc for e in codes):
        got.strings = {e.value: first_sentence(e.doc) for e in codes if e.doc and e.alias_of is None}
        got.string_from = "header-comment"
        got.strings_how = f"{rel.member.rsplit('/', 1)[-1]} doc comments (first sentence)"
    return got


def _norm(name: str) -> str:
    return re.sub(r"^(cudaerror|cuda_error_|cuda_)", "", name.lower()).replace("_", "")


def build(spec: CatalogSpec, cache: Path, offline: bool,
          runtime: Optional[Dict[str, ReadRelease]] = None) -> Tuple[Dict[str, Any], Dict[str, ReadRelease]]:
    reads = {rel.version: read_release(cache, rel, offline) for rel in spec.releases}
    order = [rel.version for rel in spec.releases]  # oldest first; the newest one's value and string lead
    rows: Dict[str, Dict[str, Any]] = {}
    for version in order:
        rr = reads[version]
        for e in rr.codes:
            row = rows.setdefault(e.name, {"name": e.name, "by_release": {}})
            row["by_release"][version] = (e, rr.strings.get(e.value) if e.alias_of is None or rr.string_from ==
                                          "library" else None, rr.string_from)
    out_rows = []
    for name, row in rows.items():
        releases = [v for v in order if v in row["by_release"]]
        newest = releases[-1]
        e, string, string_from = row["by_release"][newest]
        # the string of the newest release that has one (pynvml's table wins over nvml.h's comments: it is printed)
        for v in reversed(releases):
            _, s, f = row["by_release"][v]
            if s and (not string or (f == "binding" and string_from != "binding")):
                string, string_from = s, f
                if f == "binding":
                    break
        code: Dict[str, Any] = {"name": name, "value": e.value}
        other_values = {v: row["by_release"][v][0].value for v in releases if row["by_release"][v][0].value != e.value}
        if other_values:
            code["values"] = other_values
        if string:
            code["string"] = string
            code["string_from"] = string_from
            other = {v: row["by_release"][v][1] for v in releases
                     if row["by_release"][v][1] and row["by_release"][v][1] != string
                     and row["by_release"][v][2] == string_from}
            if other:
                code["strings"] = other
        aliases = {row["by_release"][v][0].alias_of for v in releases} - {None}
        if aliases:
            code["alias_of"] = sorted(aliases)[0]
        if spec.id == "cuda-driver" and runtime:
            for v in reversed(releases):
                rt = runtime.get(v)
                hit = next((r for r in (rt.codes if rt else []) if r.value == e.value and _norm(r.name) == _norm(name)),
                           None)
                if hit is not None and rt is not None and rt.strings.get(hit.value):
                    code["runtime_name"] = hit.name
                    code["runtime_string"] = rt.strings[hit.value]
                    break
        code["releases"] = releases
        code["class"] = classify(spec.id, name, e.value)
        code["source"] = sorted({reads[v].spec.wheel.source_id for v in releases})
        out_rows.append(code)
    out_rows.sort(key=lambda c: (c["value"], c["name"]))
    header = {
        "id": spec.id, "title": spec.title, "library": spec.library, "enum": spec.enum,
        "source": sorted({rr.spec.wheel.source_id for rr in reads.values()}),
        "release": [dict({"version": v, "wheel": reads[v].wheel_file, "sha256": reads[v].sha256,
                          "count": len(reads[v].codes), "enumerators": reads[v].enumerators,
                          "read": reads[v].spec.member, "source": reads[v].spec.wheel.source_id},
                         **({"sentinels": list(reads[v].spec.sentinels)} if reads[v].spec.sentinels else {}),
                         **({"strings": reads[v].strings_how} if reads[v].strings_how else {}))
                    for v in order],
    }
    sources = {}
    for rr in reads.values():
        sources[rr.spec.wheel.source_id] = {
            "url": rr.url, "title": f"{rr.spec.wheel.project} {rr.spec.wheel.version} (PyPI wheel {rr.wheel_file})"}
    return {"catalog": header, "sources": dict(sorted(sources.items())), "code": out_rows}, reads


# -- writing -------------------------------------------------------------------------------------------------------

def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a TOML basic string (\uXXXX escapes included)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(type(v))


def render(doc: Dict[str, Any]) -> str:
    cat = doc["catalog"]
    lines = [f"# GENERATED by {SCRIPT} from NVIDIA's wheels on PyPI: do not edit; rerun the script.",
             f"# {cat['title']}: every enumerator of {cat['enum']} in each release below (count), with the string",
             "# the library itself returns for it where it has a string function (string_from = \"library\"), else",
             "# the header's own documentation (\"header-comment\") or the Python binding's table (\"binding\").",
             "# Codes and strings only; class: compat_matrix/catalogs/classes.toml.",
             "schema_version = 1", "", "[catalog]"]
    for k in ("id", "title", "library", "enum", "source"):
        lines.append(f"{k} = {_toml_value(cat[k])}")
    for rel in cat["release"]:
        lines += ["", "[[catalog.release]]"] + [f"{k} = {_toml_value(v)}" for k, v in rel.items()]
    for sid, src in doc["sources"].items():
        lines += ["", f"[sources.{sid}]"] + [f"{k} = {_toml_value(v)}" for k, v in src.items()]
    for code in doc["code"]:
        lines += ["", "[[code]]"] + [f"{k} = {_toml_value(v)}" for k, v in code.items()]
    return "\n".join(lines) + "\n"


def generate(cache: Path, out: Path, offline: bool, only: Sequence[str] = ()) -> List[Path]:
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib  # type: ignore[no-redef]
    classes = {c["id"] for c in tomllib.loads((OUT / "classes.toml").read_text(encoding="utf-8"))["class"]}
    out.mkdir(parents=True, exist_ok=True)
    written = []
    runtime: Dict[str, ReadRelease] = {}
    for spec in CATALOGS:
        if only and spec.id not in only and not (spec.id == "cuda-runtime" and "cuda-driver" in only):
            continue
        doc, reads = build(spec, cache, offline, runtime)
        if spec.id == "cuda-runtime":
            runtime = reads
        if only and spec.id not in only:
            continue
        unknown = sorted({c["class"] for c in doc["code"]} - classes)
        if unknown:
            raise CatalogError(f"{spec.id}: class(es) {unknown} not in {OUT / 'classes.toml'}")
        path = out / f"{spec.id}.toml"
        path.write_text(render(doc), encoding="utf-8")
        written.append(path)
        counts = ", ".join(f"{r['version']}: {r['count']}" for r in doc["catalog"]["release"])
        print(f"{path.name}: {len(doc['code'])} codes ({counts})")
    return written


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--strings-child"]:
        _strings_child(*json.loads(argv[1]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where the wheels are (and go)")
    ap.add_argument("--out", type=Path, default=OUT, help="where the catalogs are written")
    ap.add_argument("--offline", action="store_true", help="never download: fail when a wheel is not cached")
    ap.add_argument("--only", action="append", default=[], help="one catalog id (repeatable)")
    args = ap.parse_args(argv)
    try:
        generate(args.cache, args.out, args.offline, args.only)
    except (CatalogError, subprocess.CalledProcessError, OSError, zipfile.BadZipFile) as exc:
        print(f"make_error_catalogs: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
