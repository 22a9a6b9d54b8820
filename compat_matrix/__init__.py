"""The driver/CUDA/framework compatibility matrix: cited data files and a query API.

Every version fact dl-doctor judges by lives in ``compat_matrix/data/*.toml`` with
the source it was read from; checks ask this module and hard-code no version.
Overlays (``--matrix-overlay FILE`` and ``/etc/dl-doctor/matrix.d/*.toml``) add or
replace entries by key and are validated exactly like the built-in files.

    >>> m = load()
    >>> m.cuda("12.4")["min_driver"]
    '550.54.14'
"""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from packaging.version import InvalidVersion, Version

from dl_doctor.compat_matrix.schema import COMMON, TABLES, Table, check_value
from dl_doctor.util.units import PCIE_GBPS_PER_LANE

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.9/3.10
    import tomli as tomllib

MATRIX_SCHEMA_VERSION = 1
SITE_OVERLAY_DIR = "/etc/dl-doctor/matrix.d"


class MatrixError(Exception):
    """The matrix (or an overlay) is invalid; ``errors`` has one line per problem."""

    def __init__(self, errors: Sequence[str]):
        self.errors = list(errors)
        super().__init__(self.errors[0] if len(self.errors) == 1 else f"{len(self.errors)} errors: {self.errors[0]}")


def _v(text: str) -> Version:
    return Version(text)


def _key(table: Table, entry: Dict[str, Any]) -> Tuple[Any, ...]:
    return tuple(entry.get(k) for k in table.key)


def _key_text(table: Table, entry: Dict[str, Any]) -> str:
    return ", ".join(f"{k} {entry.get(k)!r}" for k in table.key)


def _validate_entry(table: Table, entry: Any, where: str, sources: set, errors: List[str]) -> None:
    if not isinstance(entry, dict):
        errors.append(f"{where}: must be a table, not {type(entry).__name__}")
        return
    allowed = dict(table.fields)
    if not table.nested:
        allowed.update(COMMON)
        if "source" not in entry:
            errors.append(f"{where}: field 'source': missing (every entry names where it was read)")
    for name in table.required:
        if name not in entry:
            errors.append(f"{where}: field '{name}': missing")
    for name, value in entry.items():
        if name not in allowed:
            import difflib  # suggestions only: not imported by a run that needs none
            close = difflib.get_close_matches(name, list(allowed), n=1)
            errors.append(f"{where}: field '{name}': unknown field" + (f" (did you mean '{close[0]}'?)" if close else ""))
            continue
        kind = allowed[name]
        if isinstance(kind, tuple) and kind[0] == "tables":
            sub: Table = kind[1]
            if not isinstance(value, list):
                errors.append(f"{where}: field '{name}': must be an array of tables")
                continue
            seen = set()
            for i, item in enumerate(value):
                sub_where = f"{where} {name}[{i}]"
                _validate_entry(sub, item, sub_where, sources, errors)
                if isinstance(item, dict):
                    k = _key(sub, item)
                    if k in seen:
                        errors.append(f"{sub_where}: duplicate {name} ({_key_text(sub, item)})")
                    seen.add(k)
            continue
        problem = check_value(kind, value, sources)
        if problem:
            errors.append(f"{where}: field '{name}': {problem}")
    if isinstance(entry.get("unverified"), list):
        for name in entry["unverified"]:
            if name not in table.fields:
                errors.append(f"{where}: field 'unverified': names unknown field {name!r}")


@dataclass
class Document:
    path: str
    tables: Dict[str, List[Dict[str, Any]]]
    sources: Dict[str, Dict[str, Any]]


def _read_bytes(path: str) -> bytes:
    """A matrix file's bytes: built-in files through importlib.resources (so they load from a wheel, a zip or the
    zipapp), anything else from the file system."""
    base = resources.files("dl_doctor.compat_matrix").joinpath("data")
    name = os.path.basename(path)
    if path in _BUILTIN_PATHS:
        return base.joinpath(name).read_bytes()
    with open(path, "rb") as fh:
        return fh.read()


_BUILTIN_PATHS: set = set()


def read_file(path: str, text: Optional[str] = None) -> Tuple[Optional[Dict[str, Any]], List[str]]:
    """Parse one TOML file (no validation yet)."""
    try:
        if text is None and path in _BUILTIN_PATHS:
            text = _read_bytes(path).decode("utf-8")
        if text is None:
            with open(path, "rb") as fh:
                return tomllib.load(fh), []
        return tomllib.loads(text), []
    except OSError as exc:
        return None, [f"{path}: cannot read: {exc.strerror or exc}"]
    except tomllib.TOMLDecodeError as exc:
        return None, [f"{os.path.basename(path)}: not valid TOML: {exc}"]


def _declared_sources(data: Optional[Dict[str, Any]]) -> set:
    sources = (data or {}).get("sources")
    return set(sources) if isinstance(sources, dict) else set()


def validate_document(path: str, data: Dict[str, Any], known_sources: Iterable[str] = ()) -> Tuple[Document, List[str]]:
    """Validate parsed matrix data; a broken entry names its file, entry and field."""
    name = os.path.basename(path)
    data = dict(data)
    errors: List[str] = []
    version = data.pop("schema_version", None)
    if version != MATRIX_SCHEMA_VERSION:
        errors.append(f"{name}: schema_version must be {MATRIX_SCHEMA_VERSION} (found {version!r})")
    sources = data.pop("sources", {})
    if not isinstance(sources, dict):
        errors.append(f"{name}: [sources] must be a table of tables")
        sources = {}
    for key, src in sources.items():
        if not isinstance(src, dict) or not isinstance(src.get("url"), str) or not src.get("url"):
            errors.append(f"{name}: sources.{key}: needs a 'url' (where the fact was read)")
    all_sources = set(known_sources) | set(sources)
    tables: Dict[str, List[Dict[str, Any]]] = {}
    for tname, entries in data.items():
        table = TABLES.get(tname)
        if table is None:
            import difflib
            close = difflib.get_close_matches(tname, list(TABLES), n=1)
            errors.append(f"{name}: unknown table '{tname}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
            continue
        if not isinstance(entries, list):
            errors.append(f"{name}: '{tname}' must be an array of tables ([[{tname}]])")
            continue
        seen: Dict[Tuple[Any, ...], int] = {}
        for i, entry in enumerate(entries):
            label = _key_text(table, entry) if isinstance(entry, dict) else "?"
            where = f"{name}: {tname}[{i}] ({label})"
            _validate_entry(table, entry, where, all_sources, errors)
            if isinstance(entry, dict):
                k = _key(table, entry)
                if k in seen:
                    errors.append(f"{where}: duplicate entry (also {tname}[{seen[k]}])")
                seen.setdefault(k, i)
        tables[tname] = [e for e in entries if isinstance(e, dict)]
    return Document(path, tables, sources), errors


def builtin_files() -> List[str]:
    base = resources.files("dl_doctor.compat_matrix").joinpath("data")
    files = sorted(str(p) for p in base.iterdir() if p.name.endswith(".toml"))
    _BUILTIN_PATHS.update(files)
    return files


def site_overlay_files(directory: Optional[str] = None) -> List[str]:
    directory = directory or os.environ.get("DL_DOCTOR_MATRIX_DIR", SITE_OVERLAY_DIR)
    try:
        return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".toml"))
    except OSError:
        return []


class Matrix:
    """The merged, validated matrix and the queries checks use."""

    def __init__(self, documents: Sequence[Document], overlays: Sequence[str] = ()):
        self.sources: Dict[str, Dict[str, Any]] = {}
        self.tables: Dict[str, Dict[Tuple[Any, ...], Dict[str, Any]]] = {name: {} for name in TABLES}
        self.overlays = list(overlays)
        for doc in documents:
            self.sources.update(doc.sources)
            for tname, entries in doc.tables.items():
                table = TABLES[tname]
                for entry in entries:
                    self.tables[tname][_key(table, entry)] = entry

    # -- helpers ---------------------------------------------------------------

    def entries(self, table: str) -> List[Dict[str, Any]]:
        return list(self.tables[table].values())

    def source_urls(self, *entries: Optional[Dict[str, Any]]) -> List[str]:
        urls: List[str] = []
        for entry in entries:
            if not entry:
                continue
            keys = entry.get("source") or []
            for key in [keys] if isinstance(keys, str) else keys:
                url = self.sources.get(key, {}).get("url", key)
                if url not in urls:
                    urls.append(url)
        return urls

    @staticmethod
    def _verified(*entries: Optional[Dict[str, Any]]) -> bool:
        return all(e.get("verified", True) for e in entries if e)

    def info(self) -> Dict[str, Any]:
        return {"overlays": list(self.overlays),
                "entries": {name: len(rows) for name, rows in self.tables.items() if rows}}

    # -- CUDA and drivers ------------------------------------------------------

    def toolkits(self) -> List[Dict[str, Any]]:
        return sorted(self.entries("toolkit"), key=lambda e: _v(e["version"]))

    def toolkit(self, version: str) -> Optional[Dict[str, Any]]:
        mm = major_minor(version)
        return self.tables["toolkit"].get((mm,)) if mm else None

    def minor_compat(self, major: int) -> Optional[Dict[str, Any]]:
        return self.tables["minor_compat"].get((major,))

    def cuda(self, version: str) -> Optional[Dict[str, Any]]:
        """Driver floors of a CUDA toolkit (``12.4`` or ``12.4.1``)."""
        entry = self.toolkit(version)
        if entry is None:
            return None
        minor = self.minor_compat(int(entry["version"].split(".")[0]))
        out = {"cuda": entry["version"], "min_driver": entry["min_driver"],
               "min_driver_minor_compat": minor["min_driver"] if minor else None,
               "sources": self.source_urls(entry, minor), "verified": self._verified(entry, minor)}
        for update in entry.get("updates", []):
            if update["version"] == version:
                out["update"] = {"version": update["version"], "min_driver": update["min_driver"]}
        return out

    def max_cuda_for_driver(self, driver: str) -> Optional[Dict[str, Any]]:
        """The newest CUDA a driver supports fully (what nvidia-smi prints as 'CUDA Version')."""
        d = _v(driver)
        best = None
        for entry in self.toolkits():
            if _v(entry["min_driver"]) <= d:
                best = entry
        return best

    def driver(self, version: str) -> Optional[Dict[str, Any]]:
        best = self.max_cuda_for_driver(version)
        if best is None:
            return None
        return {"driver": version, "max_cuda": best["version"], "sources": self.source_urls(best),
                "verified": self._verified(best)}

    def driver_supports_cuda(self, driver: str, cuda: str) -> Dict[str, Any]:
        """How a driver runs code built for a CUDA version: full, minor-compat, or not at all."""
        entry = self.toolkit(cuda)
        d = _v(driver)
        result: Dict[str, Any] = {"driver": driver, "cuda": major_minor(cuda), "known": entry is not None}
        if entry is None:
            result["support"] = "unknown"
            return result
        minor = self.minor_compat(int(entry["version"].split(".")[0]))
        result["min_driver"] = entry["min_driver"]
        result["min_driver_minor_compat"] = minor["min_driver"] if minor else None
        if d >= _v(entry["min_driver"]):
            result["support"] = "full"
        elif minor and d >= _v(minor["min_driver"]):
            result["support"] = "minor-compat"
        else:
            result["support"] = "none"
        result["sources"] = self.source_urls(entry, minor)
        return result

    def forward_compat_classes(self) -> List[str]:
        classes: List[str] = []
        for entry in self.entries("forward_compat"):
            classes += entry["gpu_classes"]
        return classes

    # -- GPUs ------------------------------------------------------------------

    def architecture(self, name: str) -> Optional[Dict[str, Any]]:
        return self.tables["architecture"].get((name,))

    def gpu_by_pci(self, device_id: str) -> Optional[Dict[str, Any]]:
        did = device_id.lower().split(":")[-1]
        for entry in self.entries("gpu"):
            if did in entry["pci_device_ids"]:
                return entry
        return None

    def find_gpus(self, query: str) -> List[Dict[str, Any]]:
        q = query.strip().lower()
        if ":" in q or (len(q) == 4 and all(c in "0123456789abcdef" for c in q)):
            hit = self.gpu_by_pci(q)
            if hit and (":" not in q or q.split(":")[0] == "10de"):
                return [hit]
        exact = [e for e in self.entries("gpu")
                 if q == e["name"].lower() or q in [a.lower() for a in e.get("aliases", [])]]
        if exact:
            return exact
        return [e for e in self.entries("gpu")
                if q in e["name"].lower() or any(q in a.lower() for a in e.get("aliases", []))]

    def gpu_info(self, entry: Dict[str, Any]) -> Dict[str, Any]:
        arch = self.architecture(entry["architecture"]) or {}
        forward = self.forward_compat_classes()
        return {
            "name": entry["name"],
            "compute_capability": entry.get("compute_capability"),
            "architecture": entry["architecture"],
            "min_cuda": entry.get("min_cuda", arch.get("min_cuda")),
            "max_cuda": entry.get("max_cuda", arch.get("max_cuda")),
            "last_driver_branch": arch.get("last_driver_branch"),
            "open_kernel_modules": arch.get("open_kernel_modules"),
            "class": entry["class"],
            "forward_compat": entry["class"] in forward,
            "memory_mib": entry.get("memory_mib"),
            "dense_tflops": entry.get("dense_tflops"),  # dense (not sparse) peak TFLOPS per dtype, where cited
            "nvlink_gbps": entry.get("nvlink_gbps"),  # NVLink bandwidth per GPU, both directions together (GB/s)
            "pci_ids": [f"10de:{d}" for d in entry["pci_device_ids"]],
            "sources": self.source_urls(entry, arch),
            "verified": self._verified(entry, arch),
            "unverified": sorted(set(entry.get("unverified", [])) | set(arch.get("unverified", []))),
        }

    def gpu(self, query: str) -> Optional[Dict[str, Any]]:
        matches = self.find_gpus(query)
        if not matches:
            return None
        out = self.gpu_info(matches[0])
        if len(matches) > 1:
            out["other_matches"] = [m["name"] for m in matches[1:]]
        return out

    def busbw_expectation(self, name: Optional[str], pcie: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        """What an all-reduce's bus bandwidth on a GPU named ``name`` is held against (GB/s, one direction): half
        the GPU's NVLink bandwidth from the matrix (quoted for both directions together), else its PCIe link
        (``pcie``: NVML's generation and width, times the per-lane rate after line coding). ``{}`` when neither is
        known."""
        entry = None
        if name:
            entry = self.gpu(name) or (self.gpu(name.replace("NVIDIA ", "", 1)) if name.startswith("NVIDIA ") else None)
        nvlink = (entry or {}).get("nvlink_gbps")
        if nvlink:
            return {"gbps": nvlink / 2.0, "via": f"NVLink ({nvlink} GB/s both directions, matrix)",
                    "unverified": "nvlink_gbps" in ((entry or {}).get("unverified") or [])}
        gen, width = (pcie or {}).get("gen"), (pcie or {}).get("width")
        if gen in PCIE_GBPS_PER_LANE and width:
            return {"gbps": round(PCIE_GBPS_PER_LANE[gen] * width, 1), "via": f"PCIe gen{gen} x{width} (NVML)"}
        return {}

    def node_busbw_expectation(self, gpus: Iterable[Dict[str, Any]]) -> Dict[str, Any]:
        """The all-reduce's expectation for a node whose GPUs are ``gpus`` (each with ``name`` and ``pcie``, as
        NVML names them): the lowest of its GPUs' (the slowest link sets the pace); ``{}`` when none is known."""
        found = [e for e in (self.busbw_expectation(g.get("name"), g.get("pcie")) for g in gpus if isinstance(g, dict))
                 if e]
        return min(found, key=lambda e: e["gbps"]) if found else {}

    # -- PyTorch -----------------------------------------------------------------

    def torch_release(self, version: str) -> Optional[Dict[str, Any]]:
        base = version.split("+")[0]
        try:
            v = _v(base)
        except InvalidVersion:
            return None
        entry = self.tables["torch"].get((f"{v.major}.{v.minor}",))
        if entry is None:
            return None
        if len(v.release) >= 3 and entry.get("patches") and base not in entry["patches"]:
            return None
        return entry

    def torch(self, version: str) -> Optional[Dict[str, Any]]:
        entry = self.torch_release(version)
        if entry is None:
            return None
        base = version.split("+")[0]
        v = _v(base)
        patch = v.release[2] if len(v.release) >= 3 else None
        companion = next((c for c in entry.get("companion_patches", []) if c["torch"] == base), None)

        def companion_version(name: str) -> Optional[str]:
            if companion:
                return companion[name]
            minor = entry.get(name)
            if minor is None:
                return None
            return f"{minor}.{patch}" if patch is not None else minor

        variants = entry["variant"]
        return {
            "torch": base,
            "cuda_variants": [va["cuda"] for va in variants],
            "python": entry["python"],
            "cudnn": {va["cuda"]: va.get("cudnn") for va in variants},
            "nccl": {va["cuda"]: va.get("nccl") for va in variants},
            "arch_list": {va["cuda"]: va.get("arch_list") for va in variants},
            "torchvision": companion_version("torchvision"),
            "torchaudio": companion_version("torchaudio"),
            "numpy2": entry.get("numpy2"),
            "sources": self.source_urls(entry),
            "verified": self._verified(entry),
            "unverified": {"release": entry.get("unverified", []),
                           **{va["cuda"]: va["unverified"] for va in variants if va.get("unverified")}},
        }

    def torch_variant(self, version: str, cuda: Optional[str]) -> Optional[Dict[str, Any]]:
        entry = self.torch_release(version)
        if entry is None or cuda is None:
            return None
        mm = major_minor(cuda)
        return next((va for va in entry["variant"] if va["cuda"] == mm), None)

    # -- the inverse query: a torch release on a GPU ---------------------------------------

    @staticmethod
    def arch_code_for(cc: str, arch_list: Sequence[str]) -> Dict[str, Optional[str]]:
        """The code a build's arch list holds for a GPU of compute capability ``cc``: ``sass``, the newest SASS the
        GPU runs (same major, minor <= the GPU's), and ``ptx``, the newest PTX the driver can JIT for it (any
        ``X.Y+PTX`` with X.Y <= the GPU's). None where the list has none."""
        def cc_tuple(text: str) -> Tuple[int, int]:
            major, minor = text.split(".")
            return int(major), int(minor)

        gpu = cc_tuple(cc)
        sass: Optional[str] = None
        ptx: Optional[str] = None
        for item in arch_list:
            base = item.split("+")[0]
            code = cc_tuple(base)
            if code[0] == gpu[0] and code[1] <= gpu[1] and (sass is None or code > cc_tuple(sass)):
                sass = base
            if item.endswith("+PTX") and code <= gpu and (ptx is None or code > cc_tuple(ptx)):
                ptx = base
        return {"sass": sass, "ptx": ptx}

    @staticmethod
    def _later_driver(*drivers: Optional[str]) -> Optional[str]:
        known = [d for d in drivers if d]
        return max(known, key=_v) if known else None

    @staticmethod
    def _branch(driver: str) -> int:
        return int(driver.split(".")[0])

    def torch_on_gpu(self, version: str, gpu_query: str) -> Optional[Dict[str, Any]]:
        """A PyTorch release on one GPU: which of its CUDA builds have code for the GPU (its compute capability
        against each build's arch list), the driver each needs there (full support and with minor-version
        compatibility, never below the GPU's own floor, the driver of its first CUDA release, nor above its last
        driver branch), the minimum driver over the builds that serve it, and the image releases (images.toml) of
        the same torch minor with what they ship. A local version (``2.5.1+cu124``) asks about that build alone.
        None when the torch release (or that build), the GPU or its compute capability is not in the matrix.
        ``serves`` is None where the build's arch list is not known."""
        release = self.torch_release(version)
        matches = self.find_gpus(gpu_query)
        gpu_entry = matches[0] if matches else None
        if release is None or gpu_entry is None or not gpu_entry.get("compute_capability"):
            return None
        info = self.gpu_info(gpu_entry)
        cc = info["compute_capability"]
        arch = self.architecture(gpu_entry["architecture"]) or {}
        last_branch = info.get("last_driver_branch")
        gpu_floor = self.cuda(info["min_cuda"]) if info.get("min_cuda") else None
        gpu_min_driver = gpu_floor["min_driver"] if gpu_floor else None
        torch_info = self.torch(version) or {}
        used: List[Optional[Dict[str, Any]]] = [release, gpu_entry, arch]
        variants = release["variant"]
        if "+" in version:  # a local version (2.5.1+cu124) names one build
            tag = version.split("+", 1)[1].lower()
            variants = [va for va in variants if va["name"] == tag]
            if not variants:
                return None
        builds = []
        for variant in variants:
            build = self._build_on_gpu(variant, info, gpu_min_driver, last_branch)
            used += [self.toolkit(variant["cuda"]), self.minor_compat(int(variant["cuda"].split(".")[0]))]
            builds.append(build)
        serving = [b for b in builds if b["serves"]]
        full = [b["min_driver"] for b in serving if b["min_driver"]]
        minor = [b["min_driver_minor_compat"] for b in serving if b["min_driver_minor_compat"]]
        images = self._images_for(torch_info.get("torch") or version.split("+")[0], info, gpu_min_driver,
                                  last_branch)
        out = {
            "torch": torch_info.get("torch") or version.split("+")[0],
            "gpu": info["name"],
            "compute_capability": cc,
            "architecture": info["architecture"],
            "min_driver": min(full, key=_v) if full else None,
            "min_driver_minor_compat": min(minor, key=_v) if minor else None,
            "gpu_min_driver": {"cuda": info["min_cuda"], "driver": gpu_min_driver} if gpu_min_driver else None,
            "last_driver_branch": last_branch,
            "serving": [b["cuda"] for b in serving],
            "builds": builds,
            "images": images,
            "sources": self.source_urls(*used) + [u for i in images for u in i["sources"]
                                                  if u not in self.source_urls(*used)],
            "verified": self._verified(*used),
        }
        out["sources"] = list(dict.fromkeys(out["sources"]))
        if len(matches) > 1:
            out["other_matches"] = [g["name"] for g in matches[1:]]
        return out

    def _build_on_gpu(self, variant: Dict[str, Any], info: Dict[str, Any], gpu_min_driver: Optional[str],
                      last_branch: Optional[str]) -> Dict[str, Any]:
        cc = info["compute_capability"]
        cuda = variant["cuda"]
        floors = self.cuda(cuda) or {}
        unverified = list(variant.get("unverified") or [])
        build: Dict[str, Any] = {"name": variant["name"], "cuda": cuda, "serves": None, "why": "",
                                 "sass": None, "ptx": None, "cudnn": variant.get("cudnn"), "nccl": variant.get("nccl"),
                                 "min_driver": None, "min_driver_minor_compat": None,
                                 "verified": "arch_list" not in unverified, "unverified": unverified}
        arch_list = variant.get("arch_list")
        if not arch_list:
            build["why"] = f"the matrix does not hold {variant['name']}'s arch list"
            return build
        code = self.arch_code_for(cc, arch_list)
        build.update(code)
        if not code["sass"] and not code["ptx"]:
            build["serves"] = False
            build["why"] = (f"no code for compute capability {cc}: the arch list is {';'.join(arch_list)} "
                            f"(no SASS for {cc.split('.')[0]}.x, no PTX at or below {cc})")
            return build
        full = self._later_driver(floors.get("min_driver"), gpu_min_driver)
        # PTX JIT needs a driver that knows the PTX's CUDA release: minor-version compatibility does not cover it
        minor = (None if not code["sass"]
                 else self._later_driver(floors.get("min_driver_minor_compat"), gpu_min_driver)
                 if floors.get("min_driver_minor_compat") else None)
        how = (f"SASS for {code['sass']}" if code["sass"] else
               f"PTX for {code['ptx']} only, JIT-compiled by the driver at first use (a driver with full support "
               f"for CUDA {cuda} is needed; minor-version compatibility does not JIT newer PTX)")
        if last_branch and full and self._branch(full) > int(last_branch):
            if minor and self._branch(minor) <= int(last_branch):
                build.update(serves=True, min_driver=None, min_driver_minor_compat=minor,
                             why=f"{how}; only through minor-version compatibility: full support needs driver >= "
                                 f"{full} and {info['architecture']}'s last driver branch is R{last_branch}")
                return build
            build.update(serves=False,
                         why=f"{how}, but it needs driver >= {minor or full} and {info['architecture']}'s last "
                             f"driver branch is R{last_branch}")
            return build
        build.update(serves=True, min_driver=full, min_driver_minor_compat=minor, why=how)
        return build

    def _images_for(self, torch_version: str, info: Dict[str, Any], gpu_min_driver: Optional[str],
                    last_branch: Optional[str]) -> List[Dict[str, Any]]:
        """images.toml entries of the same torch minor as ``torch_version``, each judged for the GPU."""
        want = _v(torch_version).release[:2]
        found = []
        for entry in self.entries("image"):
            try:
                have = _v(entry["torch"])
            except InvalidVersion:
                continue
            if have.release[:2] != want:
                continue
            found.append(self._image_on_gpu(entry, torch_version, info, gpu_min_driver, last_branch))
        return sorted(found, key=lambda e: (e["kind"], e["release"]), reverse=True)

    def _image_on_gpu(self, entry: Dict[str, Any], torch_version: str, info: Dict[str, Any],
                      gpu_min_driver: Optional[str], last_branch: Optional[str]) -> Dict[str, Any]:
        cuda = entry.get("cuda")
        floors = self.cuda(cuda) if cuda else None
        floor = (floors.get("update") or floors)["min_driver"] if floors else None
        have = _v(entry["torch"])
        out: Dict[str, Any] = {
            "kind": entry["kind"], "name": entry["name"], "release": entry["release"], "torch": entry["torch"],
            "torch_match": "exact" if have.base_version == torch_version and not have.is_prerelease else "minor",
            "cuda": cuda, "driver": entry.get("driver"), "os": entry.get("os"), "arch": entry.get("arch"),
            "instances": entry.get("instances"), "satisfies": None, "why": "",
            "min_driver": None, "sources": self.source_urls(entry), "verified": self._verified(entry),
            "unverified": entry.get("unverified", []),
        }
        reasons: List[str] = []
        ok: Optional[bool] = True
        min_cuda, max_cuda = info.get("min_cuda"), info.get("max_cuda")
        if cuda is None:
            ok = None
            reasons.append("its release notes name no CUDA release")
        elif min_cuda and _v(cuda) < _v(min_cuda):
            ok = None
            reasons.append(f"its CUDA {cuda} predates {info['architecture']} (native from CUDA {min_cuda}): it runs "
                           "only through PTX, which the matrix does not know it ships")
        elif max_cuda and _v(major_minor(cuda) or cuda) > _v(max_cuda):
            ok = False
            reasons.append(f"its CUDA {cuda} no longer supports {info['architecture']} (last: CUDA {max_cuda})")
        if entry["kind"] == "dlami":
            driver = entry.get("driver")
            families = sorted({i["family"] for i in self.entries("instance") if i["gpu"] == info["name"]})
            listed = [f for f in families if f in {n.lower() for n in entry.get("instances") or []}]
            if listed:
                if ok is None and cuda is None:
                    ok = True  # AWS's own release notes list an instance type with this GPU
                reasons.append(f"AWS lists {', '.join(f.upper() for f in listed)} ({info['name']}) among its "
                               "supported instances")
            elif families and entry.get("instances"):
                reasons.append(f"its supported instances do not list {', '.join(f.upper() for f in families)}")
            if driver and last_branch and self._branch(driver) > int(last_branch):
                ok = False
                reasons.append(f"its driver {driver} is past {info['architecture']}'s last branch R{last_branch}")
            elif driver and gpu_min_driver and _v(driver) < _v(gpu_min_driver):
                ok = False
                reasons.append(f"its driver {driver} predates the GPU (needs >= {gpu_min_driver})")
            elif driver:
                reasons.append(f"ships driver {driver}")
        else:
            stated = entry.get("driver")  # the floor its release notes state, else the floor of its CUDA release
            out["min_driver"] = self._later_driver(stated or floor, gpu_min_driver)
            if out["min_driver"]:
                basis = "its release notes" if stated else f"CUDA {cuda}"
                reasons.append(f"needs host driver >= {out['min_driver']} ({basis}; datacenter GPUs: older "
                               "production branches through its forward-compatibility package)")
                if last_branch and self._branch(out["min_driver"]) > int(last_branch):
                    ok = False
                    reasons.append(f"past {info['architecture']}'s last driver branch R{last_branch}")
        if have.is_prerelease:
            reasons.append(f"torch {entry['torch']} is a pre-release build of {have.major}.{have.minor}, "
                           f"not {torch_version} itself")
        elif len(have.release) < 3:
            reasons.append(f"its notes name torch {entry['torch']} without the patch release")
        elif out["torch_match"] == "minor":
            reasons.append(f"it ships torch {entry['torch']}, not {torch_version}")
        out["satisfies"] = ok
        out["why"] = "; ".join(reasons)
        return out

    # -- EC2 -----------------------------------------------------------------------

    def instance(self, instance_type: str) -> Optional[Dict[str, Any]]:
        entry = self.tables["instance"].get((instance_type.strip().lower(),))
        if entry is None:
            return None
        gpu = self.tables["gpu"].get((entry["gpu"],))
        mib = entry.get("gpu_memory_mib")
        return {
            "instance_type": entry["type"],
            "family": entry["family"],
            "gpu": entry["gpu"],
            "gpu_pci_ids": [f"10de:{d}" for d in gpu["pci_device_ids"]] if gpu else [],
            "gpu_count": entry["gpu_count"],
            "gpu_memory_gib": round(mib / 1024, 1) if mib else None,
            "efa_interfaces": entry.get("efa_interfaces"),
            "nvswitch": entry["nvswitch"],
            "fabric_manager_required": entry["nvswitch"],
            "sources": self.source_urls(entry),
            "verified": self._verified(entry),
            "unverified": entry.get("unverified", []),
        }

    def threshold(self, name: str) -> Optional[Dict[str, Any]]:
        """A counter's level worth a finding (thresholds.toml): ``{"value", "per", "summary", "verified",
        "sources"}``, or None."""
        entry = self.tables["threshold"].get((name,))
        if entry is None:
            return None
        return {"name": name, "value": entry["value"], "per": entry["per"], "summary": entry["summary"],
                "verified": self._verified(entry), "sources": self.source_urls(entry)}

    def ebs_volume(self, volume_type: str) -> Optional[Dict[str, Any]]:
        return self.tables["ebs_volume"].get((volume_type.strip().lower(),))

    def ebs_limits(self, volume_type: str, size_gib: int, iops: Optional[int] = None,
                   throughput_mibps: Optional[float] = None) -> Optional[Dict[str, Any]]:
        """Baseline IOPS and throughput of a volume from its type, size and provisioned values."""
        e = self.ebs_volume(volume_type)
        if e is None:
            return None
        out: Dict[str, Any] = {"type": e["type"], "size_gib": size_gib, "burst_iops": None}
        t = e["type"]
        if t == "gp2":
            out["iops"] = int(min(max(e["iops_per_gib"] * size_gib, e["iops_min"]), e["iops_max"]))
            if size_gib < e["burst_below_gib"]:
                out["burst_iops"] = e["iops_burst"]
            out["throughput_mibps"] = (e["throughput_small_mibps"] if size_gib <= e["throughput_small_max_gib"]
                                       else e["throughput_max_mibps"])
        elif t == "gp3":
            ceiling = min(e["iops_max"], max(e["iops_baseline"], int(e["iops_per_gib"] * size_gib)))
            out["iops"] = min(iops or e["iops_baseline"], ceiling)
            out["throughput_mibps"] = min(throughput_mibps or e["throughput_baseline_mibps"], e["throughput_max_mibps"])
        elif t in ("io1", "io2"):
            cap = min(e["iops_max"], int(e["iops_per_gib"] * size_gib))
            out["iops"] = min(iops, cap) if iops else None
            per_iops = e.get("throughput_per_iops_mibps")
            out["throughput_mibps"] = (min(e["throughput_max_mibps"], per_iops * out["iops"])
                                       if per_iops and out["iops"] else e["throughput_max_mibps"])
        else:  # st1, sc1: throughput scales with size
            tib = size_gib / 1024
            out["iops"] = e["iops_max"]
            out["throughput_mibps"] = min(e["throughput_per_tib_mibps"] * tib, e["throughput_max_mibps"])
            out["burst_throughput_mibps"] = min(e["throughput_burst_per_tib_mibps"] * tib, e["throughput_max_mibps"])
        out["sources"] = self.source_urls(e)
        return out

    # -- operating systems ------------------------------------------------------------

    def rhel_release_for_kernel(self, kernel: str) -> Optional[Dict[str, Any]]:
        for entry in self.entries("rhel"):
            if kernel.startswith(entry["kernel"] + ".") or kernel == entry["kernel"]:
                return entry
        return None

    def consumer(self, distribution: str) -> Optional[Dict[str, Any]]:
        """The consumer entry for an installed distribution (normalized name), by name or ``distributions`` glob."""
        import fnmatch

        for entry in self.entries("consumer"):
            if distribution == entry["name"] or any(fnmatch.fnmatchcase(distribution, p)
                                                    for p in entry.get("distributions") or []):
                return entry
        return None

    def wheel_for(self, soname: str, cuda_major: Optional[int]) -> Optional[Dict[str, Any]]:
        """Which wheel provides ``soname`` for a CUDA major (None: the only one known, if exactly one)."""
        hits = [e for e in self.entries("cuda_library") if e["soname"] == soname]
        if cuda_major is not None:
            return next((e for e in hits if e["cuda_major"] == cuda_major), None)
        return hits[0] if len(hits) == 1 else None

    def library_family(self, soname: str) -> Optional[Dict[str, Any]]:
        """The family a CUDA library belongs to (which of its version sources share one numbering, and the runtime
        rule that says whether a copy serves a build: docs/frameworks.md), by soname glob."""
        import fnmatch

        for entry in self.entries("library_family"):
            if any(fnmatch.fnmatchcase(soname, p) for p in entry.get("sonames") or []):
                return entry
        return None

    def signatures(self) -> List[Dict[str, Any]]:
        return self.entries("signature")

    def causes(self) -> Dict[str, Dict[str, Any]]:
        return {e["id"]: e for e in self.entries("cause")}

    def xid(self, code: int) -> Optional[Dict[str, Any]]:
        """An Xid code's entry (meaning, kind, points_at, action, NVIDIA's resolution bucket, remedy, drain) with
        its source URLs; None for a code the table does not hold."""
        entry = self.tables["xid"].get((int(code),))
        return {**entry, "sources": self.source_urls(entry)} if entry else None

    def xids(self) -> List[Dict[str, Any]]:
        """Every Xid entry, by code (counted against the driver's nverror.h and NVIDIA's Xid catalog: docs/matrix.md)."""
        return sorted(self.entries("xid"), key=lambda e: e["code"])

    # -- known issues --------------------------------------------------------------------

    def known_issues(self, component: str, version: str, others: Optional[Dict[str, str]] = None,
                     instance_family: Optional[str] = None) -> List[Dict[str, Any]]:
        """Known issues for ``component`` at ``version`` given the other components' versions.

        A ``requires`` condition on a component whose version is unknown does not match.
        """
        from packaging.specifiers import SpecifierSet  # here: its patterns cost a run that asks nothing of it

        others = {k.lower(): v for k, v in (others or {}).items() if v}
        found = []
        try:
            v = _v(version)
        except InvalidVersion:
            return []
        for entry in self.entries("known_issue"):
            if entry["component"].lower() != component.lower():
                continue
            if v not in SpecifierSet(entry["versions"]):
                continue
            ok = True
            for other, spec in (entry.get("requires") or {}).items():
                have = others.get(other.lower())
                try:
                    ok = ok and have is not None and _v(have) in SpecifierSet(spec)
                except InvalidVersion:
                    ok = False
            if entry.get("instance_families"):
                ok = ok and instance_family in entry["instance_families"]
            if ok:
                found.append({**entry, "sources": self.source_urls(entry)})
        return found

    # -- "did you mean" ---------------------------------------------------------------------

    def closest(self, kind: str, query: str, n: int = 3) -> List[str]:
        """Known entries nearest to ``query``: numerically for versions, by spelling for names."""
        if kind in ("cuda", "torch", "driver"):
            if kind == "cuda":
                names = [e["version"] for e in self.entries("toolkit")]
            elif kind == "torch":
                names = [p for e in self.entries("torch") for p in (e.get("patches") or [e["version"]])]
            else:
                oldest = self.toolkits()[0] if self.entries("toolkit") else None
                return [f"{oldest['min_driver']} (CUDA {oldest['version']}, the oldest in the matrix)"] if oldest else []
            try:
                q = _v(query.split("+")[0])
            except InvalidVersion:
                return names[:n]

            def distance(name: str) -> Tuple[int, ...]:
                r = _v(name).release + (0, 0, 0)
                qr = q.release + (0, 0, 0)
                return tuple(abs(a - b) for a, b in zip(qr[:3], r[:3]))

            return sorted(names, key=distance)[:n]
        if kind == "gpu":
            names = [e["name"] for e in self.entries("gpu")] + [a for e in self.entries("gpu")
                                                                for a in e.get("aliases", [])]
        elif kind == "instance":
            names = [e["type"] for e in self.entries("instance")]
        else:
            names = []
        import difflib
        return difflib.get_close_matches(query, names, n=n, cutoff=0.3)


def major_minor(version: str) -> Optional[str]:
    from dl_doctor import versions

    return versions.major_minor(version)


SNAPSHOT = "builtin.json"


def builtin_digest(files: Optional[Sequence[str]] = None) -> str:
    """sha256 over the built-in TOML files' names and bytes: what the snapshot was built from."""
    import hashlib

    h = hashlib.sha256()
    for path in files if files is not None else builtin_files():
        h.update(os.path.basename(path).encode() + b"\0")
        h.update(_read_bytes(path))
        h.update(b"\0")
    return h.hexdigest()


def build_snapshot() -> Dict[str, Any]:
    """The built-in matrix, parsed and validated, as JSON data (tests/tools/make_matrix_snapshot.py writes it)."""
    docs, errors = _load_documents([], builtin=True, use_snapshot=False)
    if errors:
        raise MatrixError(errors)
    return {"digest": builtin_digest(), "documents": [
        {"name": os.path.basename(d.path), "tables": d.tables, "sources": d.sources} for d in docs]}


def _builtin_from_snapshot() -> Optional[List[Document]]:
    """The built-in documents from the JSON snapshot, when it was built from exactly these TOML files (JSON loads
    in a few milliseconds; parsing and validating the TOML costs ~35 ms of every start). Else None."""
    try:
        base = resources.files("dl_doctor.compat_matrix").joinpath("data")
        snap = json.loads(base.joinpath(SNAPSHOT).read_text(encoding="utf-8"))
        files = builtin_files()
        if snap.get("digest") != builtin_digest(files):
            return None
        by_name = {os.path.basename(f): f for f in files}
        return [Document(by_name[d["name"]], d["tables"], d["sources"]) for d in snap["documents"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _load_documents(paths: Sequence[str], builtin: bool,
                    use_snapshot: bool = True) -> Tuple[List[Document], List[str]]:
    """Read and validate files; overlays may cite the built-in files' sources (and their own)."""
    raw: List[Tuple[str, Optional[Dict[str, Any]]]] = []
    errors: List[str] = []
    snapshot = _builtin_from_snapshot() if builtin and use_snapshot else None
    files = (builtin_files() if builtin and snapshot is None else []) + list(paths)
    for path in files:
        data, errs = read_file(path)
        raw.append((path, data))
        errors.extend(errs)
    known: set = set()
    for doc in snapshot or []:
        known |= set(doc.sources)
    for _, data in raw:
        known |= _declared_sources(data)
    docs: List[Document] = list(snapshot or [])
    for path, data in raw:
        if data is None:
            continue
        doc, errs = validate_document(path, data, known)
        docs.append(doc)
        errors.extend(errs)
    return docs, errors


def validate_files(paths: Sequence[str], with_builtin: bool = True) -> List[str]:
    """All errors in these files (and the built-in ones they are read with, from their TOML)."""
    return _load_documents(paths, with_builtin, use_snapshot=False)[1]


# The one cache of loaded matrices (every caller goes through load()): keyed by each overlay's path and file identity
# (size, mtime, inode, device), so an overlay edited, replaced or added to the site directory is read again, and
# the same files are read once however many callers ask. A failed load is never cached.
_CACHE: Dict[Tuple[Tuple[Any, ...], ...], Matrix] = {}
MAX_CACHED = 8
_LOCK = threading.Lock()


def file_identity(path: str) -> Tuple[Any, ...]:
    """``(path, size, mtime_ns, inode, device)``; ``(path,)`` when it cannot be looked at (reading it then fails)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return (path,)
    return (path, st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)


def load(overlays: Sequence[str] = (), site: bool = True) -> Matrix:
    """Load the built-in matrix plus overlays; raise :class:`MatrixError` on any invalid file.

    Overlays come after the built-in files: the site directory
    (``/etc/dl-doctor/matrix.d/*.toml``, or ``$DL_DOCTOR_MATRIX_DIR``), then each
    ``--matrix-overlay`` in order. A later entry with the same key replaces an earlier one.
    Loaded once per set of files as they are (:func:`file_identity`): a second call returns the same Matrix.
    """
    extra = list(site_overlay_files() if site else []) + list(overlays)
    cache_key = tuple(file_identity(p) for p in extra)
    with _LOCK:
        hit = _CACHE.get(cache_key)
        if hit is not None:
            return hit
        docs, errors = _load_documents(extra, builtin=True)
        if errors:
            raise MatrixError(errors)
        matrix = Matrix(docs, overlays=extra)
        while len(_CACHE) >= MAX_CACHED:
            del _CACHE[next(iter(_CACHE))]
        _CACHE[cache_key] = matrix
        return matrix
