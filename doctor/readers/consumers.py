"""Every CUDA consumer in a Python environment, one model for all frameworks.

A *consumer* is an installed distribution whose ELF objects need CUDA libraries (DT_NEEDED), or that opens them by
name at run time (dlopen, known from the matrix's ``consumer`` table). For each one this module finds its objects
(from the distribution's ``RECORD``), reads their dynamic sections once per run, and simulates the loader from each
object as glibc would (its RPATH/RUNPATH, LD_LIBRARY_PATH, ld.so.cache, defaults), after the preloading the
framework itself does (torch, jax and CuPy load nvidia-* wheel libraries by absolute path; onnxruntime only when
``preload_dlls()`` is called). What it was built for comes from its own files (``build_info`` in the matrix), its
name (``-cu12``, ``-cuda12x``, ``cuda12-plugin``), its local version (``+cu121``) or the sonames it needs.

Nothing here imports or runs anything: it reads files through the Host, so it works under --sysroot. --deep
(python_envs) checks the prediction against a real import.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from dl_doctor.readers.elf import read_dynamic
from dl_doctor.host import Host

# The CUDA library family, by soname: the runtime, math libraries, cuDNN, NCCL, NVRTC/nvJitLink, TensorRT, CUPTI,
# NVTX, cuTENSOR, NVSHMEM, cuFile. The driver's own libraries are judged by the driver checks, not per framework.
CUDA_FAMILY = re.compile(r"lib(cudart|cublas|cublasLt|cudnn[A-Za-z_]*|nccl|cufft|cufftw|curand|cusolver|cusolverMg|"
                         r"cusparse|cusparseLt|nvrtc|nvrtc-builtins|nvJitLink|nvinfer[A-Za-z_]*|nvonnxparser|cupti|"
                         r"nvToolsExt|nvtx3interop|cutensor|cutensorMg|nvshmem_host|cufile|cufile_rdma)\.so(\.[0-9.]+)?")
DRIVER_LIBRARIES = ("libcuda.so", "libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ml.so")
# Sonames whose major is the CUDA major (libcublas.so.12 is CUDA 12); others (libcufft.so.11, libcudnn.so.9) are not.
_MAJOR_IS_CUDA = re.compile(r"lib(cudart|cublas|cublasLt|nvrtc|nvJitLink|cupti)\.so\.(\d+)$")
# Distributions that *are* CUDA libraries (providers), not consumers of them.
PROVIDER = re.compile(r"(nvidia-.*|cuda-toolkit|cuda-bindings|cuda-python|cuda-pathfinder|cuda-core)")
_NAME_MAJOR = (re.compile(r"-cu(\d{2})\d?(?:x|-|$)"), re.compile(r"-cuda(\d{2})x?(?:-|$)"),
               re.compile(r"cuda(\d{2})-(?:plugin|pjrt)"))
_LOCAL_MAJOR = re.compile(r"\+cu(\d{2})\d")
_RECORD_SO = re.compile(r"\.so(?:\.[0-9][0-9.]*)?,")
# Build-information files hold `key = 'value'`, `'key': 'value'` or `('key', 'value')`: matched per line, bounded.
_BUILD_FORMS = (
    re.compile(r"""^[ \t]*([A-Za-z_]\w{0,40})[ \t]*(?::[^=\n]{0,80})?=[ \t]*['"]([^'"\n]{0,64})['"]"""),  # key = 'v'
    re.compile(r"""['"]([A-Za-z_]\w{0,40})['"][ \t]*:[ \t]*['"]([^'"\n]{0,64})['"]"""),  # 'key': 'v'
    re.compile(r"""\([ \t]*['"]([A-Za-z_]\w{0,40})['"][ \t]*,[ \t]*['"]([^'"\n]{0,64})['"][ \t]*\)"""),  # ('key', 'v')
)
_CUDNN_H = re.compile(r"#define CUDNN_(MAJOR|MINOR|PATCHLEVEL)\s+(\d+)")
_NCCL_H = re.compile(r"#define NCCL_(MAJOR|MINOR|PATCH)\s+(\d+)")
MAX_RECORD = 16 << 20
MAX_OBJECTS = 4000
MAX_REPORTED = 40


def _header_version(host: Host, path: str, pattern: re.Pattern) -> Optional[str]:
    try:
        text = host.try_read(path, 1 << 20)
    except PermissionError:
        return None
    if not text:
        return None
    parts = dict(pattern.findall(text))
    keys = [k for k in ("MAJOR", "MINOR", "PATCHLEVEL", "PATCH") if k in parts]
    return ".".join(parts[k] for k in keys) if len(keys) >= 2 else None


def lib_version(host: Host, path: str, owned: Dict[str, Tuple[str, str]]) -> Tuple[Optional[str], str]:
    """A CUDA library's version: the wheel that installed it, a fully versioned file name, or a header."""
    if path in owned:
        return owned[path][1], f"wheel {owned[path][0]}"
    base = posixpath.basename(path)
    target = host.readlink(path)
    for name in ([posixpath.basename(target)] if target else []) + [base]:
        m = re.search(r"\.so\.(\d+\.\d+(?:\.\d+)*)$", name)
        if m:
            return m.group(1), f"file name {name}"
    directory = posixpath.dirname(path)
    if base.startswith("libcudnn"):
        for h in (f"{directory}/../include/cudnn_version.h", f"{directory}/../include/cudnn.h"):
            v = _header_version(host, posixpath.normpath(h), _CUDNN_H)
            if v:
                return v, f"header {posixpath.normpath(h)}"
    if base.startswith("libnccl"):
        v = _header_version(host, posixpath.normpath(f"{directory}/../include/nccl.h"), _NCCL_H)
        if v:
            return v, "header nccl.h"
    return None, "unknown"


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def is_cuda_library(soname: str) -> bool:
    return bool(CUDA_FAMILY.fullmatch(soname))


def read_build_info(text: str, keys: Dict[str, str]) -> Dict[str, str]:
    """The values of ``keys`` ({what: key in file}) in a framework's build-information file (never executed)."""
    wanted = {v: k for k, v in keys.items()}
    out: Dict[str, str] = {}
    for line in text.splitlines()[:4000]:
        if len(line) > 8192:
            line = line[:8192]
        for form in _BUILD_FORMS:
            for m in form.finditer(line):
                what = wanted.get(m.group(1))
                if what and what not in out and m.group(2).strip() not in ("", "None"):
                    out[what] = m.group(2).strip()
    return out


def cuda_major_of(name: str, version: str, build_cuda: Optional[str], needed: Sequence[str]) -> Tuple[Optional[int], str]:
    """The CUDA major a distribution was built for, and where that was read."""
    lead = re.match(r"\d+", build_cuda) if build_cuda else None
    if lead:
        return int(lead.group(0)), "build information"
    for pattern in _NAME_MAJOR:
        m = pattern.search(name)
        if m:
            return int(m.group(1)), "distribution name"
    m = _LOCAL_MAJOR.search(version or "")
    if m:
        return int(m.group(1)), "version tag"
    majors = sorted({int(m.group(2)) for n in needed for m in [_MAJOR_IS_CUDA.fullmatch(n)] if m})
    if len(majors) == 1:
        return majors[0], "needed sonames"
    return None, "unknown"


def library_major(soname: str, path: str, wheel: Optional[str]) -> Optional[int]:
    """The CUDA major a resolved library belongs to: its wheel's -cuNN, an nvidia/cuNN directory, or its soname."""
    if wheel:
        m = re.search(r"-cu(\d{2})$", wheel)
        if m:
            return int(m.group(1))
    m = re.search(r"/nvidia/cu(\d{2})/lib/", path)
    if m:
        return int(m.group(1))
    m = _MAJOR_IS_CUDA.fullmatch(soname)
    return int(m.group(2)) if m else None


def record_objects(host: Host, dist_info: str, site: str) -> List[str]:
    """Absolute paths of the shared objects a distribution installed (its RECORD), inside its site directory."""
    try:
        text = host.try_read(f"{dist_info}/RECORD", MAX_RECORD)
    except PermissionError:
        return []
    if not text or ".so" not in text:
        return []
    out: List[str] = []
    for m in _RECORD_SO.finditer(text):  # the few '.so,' hits of a large RECORD, then their lines
        start = text.rfind("\n", 0, m.start()) + 1
        rel = text[start:m.end() - 1]
        if "," in rel or not rel or len(rel) > 1024:
            continue
        path = posixpath.normpath(posixpath.join(site, rel))
        if path.startswith(site.rstrip("/") + "/"):
            out.append(path)
            if len(out) >= MAX_OBJECTS:
                break
    return out


def wheel_dirs(host: Host, bases: Sequence[str]) -> List[str]:
    """The ``nvidia/*/lib`` directories of nvidia-* wheels on sys.path, in sys.path order."""
    out: List[str] = []
    for base in bases:
        if base.startswith("/") and host.is_dir(f"{base}/nvidia"):
            out += sorted(d for d in host.glob(f"{base}/nvidia/*/lib") if host.is_dir(d))
    return list(dict.fromkeys(out))


def find_in_wheels(host: Host, soname: str, dirs: Sequence[str]) -> Optional[str]:
    for d in dirs:
        if host.is_file(f"{d}/{soname}"):
            return f"{d}/{soname}"
    return None


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


_REQUIRES_TORCH = re.compile(r"^Requires-Dist:[ \t]*torch[ \t]*(?:\(([^)\n]{0,100})\)|([<>=!~][^;\n]{0,100}))?[ \t]*(;[^\n]{0,200})?$",
                             re.M)
_BUILT_FOR_TORCH = re.compile(r"torch[-_]?(\d+\.\d+)")


def wheel_metadata(host: Host, dist_info: str, version: str) -> Dict[str, Any]:
    """What a wheel says it was built for: its tags (WHEEL), the torch it requires (METADATA Requires-Dist, without
    extras markers), and a torch named in its local version (flash-attn's '+cu123torch2.4cxx11abiFALSE')."""
    out: Dict[str, Any] = {}
    try:
        wheel = host.try_read(f"{dist_info}/WHEEL", 65536) or ""
        meta = host.try_read(f"{dist_info}/METADATA", 1 << 20) or ""
    except PermissionError:
        return out
    tags = [line.split(":", 1)[1].strip() for line in wheel.splitlines()[:200] if line.startswith("Tag:")]
    if tags:
        out["wheel_tags"] = tags[:16]
    for m in _REQUIRES_TORCH.finditer(meta[:1 << 20]):
        if m.group(3) and "extra" in m.group(3):
            continue
        out["requires_torch"] = (m.group(1) or m.group(2) or "").strip() or "any"
        break
    local = version.split("+", 1)[1] if "+" in version else ""
    built = _BUILT_FOR_TORCH.search(local)
    if built:
        out["built_for_torch"] = built.group(1)
    return out


def _rel(path: str, site: str) -> str:
    return path[len(site) + 1:] if path.startswith(site + "/") else path


class _Simulation:
    """One consumer's loads in one process: preloads, then each object that needs CUDA, then its dlopen names."""

    def __init__(self, host: Host, ld_library_path: Sequence[str], executable: Optional[str], machine: str):
        from dl_doctor.readers.ldso import Loader

        self.loader = Loader(host, ld_library_path=list(ld_library_path), executable=executable, machine=machine)
        self.missing: List[Dict[str, Any]] = []

    def preload(self, sonames: Sequence[str], host: Host, dirs: Sequence[str], who: str) -> List[str]:
        done = []
        for soname in sonames:
            hit = find_in_wheels(host, soname, dirs)
            if hit and soname not in self.loader.by_soname:
                self.loader.load(hit, via=f"preloaded by {who}")
                done.append(soname)
        return done

    def load(self, path: str, optional: bool) -> None:
        before = len(self.loader.missing)
        self.loader.load(path, via="loaded with its package")
        for soname, requester in self.loader.missing[before:]:
            self.missing.append({"soname": soname, "needed_by": requester, "optional": optional, "how": "DT_NEEDED",
                                 "looked_in": self.loader.search_order(requester)})

    def dlopen(self, soname: str, callers: Sequence[str], optional: bool) -> None:
        if soname in self.loader.by_soname:
            return
        for caller in callers:
            found, how = self.loader.search(soname, caller)
            if found:
                self.loader.load(found, via=f"dlopen ({how})", loader=caller)
                return
        looked: List[str] = []
        requesters: Sequence[Optional[str]] = callers or [None]
        for c in requesters:
            looked += self.loader.search_order(c)
        self.missing.append({"soname": soname, "needed_by": callers[0] if callers else None,
                             "optional": optional, "how": "dlopen",
                             "looked_in": list(dict.fromkeys(looked))})


def scan(host: Host, *, sites: Sequence[str], dists: Dict[str, Dict[str, Any]], owned: Dict[str, Tuple[str, str]],
         ld_library_path: Sequence[str], sys_path: Optional[Sequence[str]], executable: Optional[str],
         matrix: Any, torch_preload: Optional[str] = None) -> List[Dict[str, Any]]:
    """The CUDA consumers among ``dists`` (name -> {version, metadata, location}), each with what it needs, where
    each library resolves, and what will not load."""
    bases = [p for p in (sys_path or sites) if p and p.startswith("/")]
    dirs = wheel_dirs(host, bases)
    exe = read_dynamic(host, executable) if executable else None
    host_machine = (exe or {}).get("machine") if isinstance((exe or {}).get("machine"), str) else None
    out: List[Dict[str, Any]] = []
    for name in sorted(dists):
        d = dists[name]
        if PROVIDER.fullmatch(name) or not str(d.get("metadata", "")).endswith(".dist-info"):
            continue
        entry = matrix.consumer(name) if matrix is not None else None
        text = None
        if entry and entry.get("build_info"):  # its own build information says it is not a CUDA build: skip
            text = host.try_read(posixpath.join(d["location"], entry["build_info"]), 1 << 20)
            if text is not None and len(text) < (1 << 20) - 4 and \
                    "cuda" not in read_build_info(text, entry.get("build_keys") or {}):
                continue  # (a file cut off by the cap proves nothing: its objects are scanned)
        objects = record_objects(host, d["metadata"], d["location"])
        if not objects:
            continue
        parsed: List[Tuple[str, Dict[str, Any]]] = []
        for path in objects:
            dyn = read_dynamic(host, path)
            if dyn is not None:
                parsed.append((path, dyn))
        needing = [(p, dyn) for p, dyn in parsed if any(is_cuda_library(n) for n in dyn["needed"])]
        dlopen_by = (entry or {}).get("dlopen_by") or []
        callers = [p for p, _ in parsed if _matches(posixpath.basename(p), dlopen_by)]
        if not needing and not (entry and entry.get("dlopen") and callers):
            continue
        out.append(_consumer(host, name, d, entry, parsed, needing, callers, dirs, owned, ld_library_path,
                             executable, host_machine, torch_preload if "torch" in dists else None, text))
    return out


def _consumer(host: Host, name: str, d: Dict[str, Any], entry: Optional[Dict[str, Any]], parsed, needing, callers,
              dirs: Sequence[str], owned: Dict[str, Tuple[str, str]], ld_library_path: Sequence[str],
              executable: Optional[str], host_machine: Optional[str], torch_preload: Optional[str],
              build_text: Optional[str]) -> Dict[str, Any]:
    site = d["location"]
    entry = entry or {}
    needed = sorted({n for _, dyn in needing for n in dyn["needed"] if is_cuda_library(n)})
    build: Dict[str, Any] = {}
    if entry.get("build_info"):  # read once, by scan()
        build = read_build_info(build_text or "", entry.get("build_keys") or {})
        if build:
            build["from"] = entry["build_info"]
    major, major_from = cuda_major_of(name, d.get("version") or "", build.get("cuda"), needed)
    if major is None and len(entry.get("dlopen") or {}) == 1:  # the matrix knows only one build (ctranslate2 4.x)
        major, major_from = int(next(iter(entry["dlopen"]))), "matrix"
    machines = sorted({str(dyn.get("machine")) for _, dyn in parsed})
    machine = host_machine or next((m for m in ("EM_X86_64", "EM_AARCH64") if m in machines),
                                   machines[0] if machines else "EM_X86_64")
    mode = entry.get("preload") or "none"
    torch_mode = {"always": "wheels", "on-failure": "on-failure", "none": "none"}.get(torch_preload or "")
    if name == "torch" and torch_mode:  # read from this torch's own __init__.py
        mode = torch_mode
    links_torch = name != "torch" and any(n.startswith(("libc10", "libtorch")) for _, dyn in needing
                                          for n in dyn["needed"])
    meta = wheel_metadata(host, d["metadata"], d.get("version") or "")
    after_torch = name != "torch" and (links_torch or "requires_torch" in meta)
    who = entry.get("name") or name
    if after_torch and torch_mode == "wheels" and mode == "none":
        # a torch extension imports torch first, and torch has loaded the wheel libraries process-wide by then
        mode, who = "wheels", "torch (imported first)"
    dlopen = ((entry.get("dlopen") or {}).get(str(major)) or []) if major is not None else []
    optional_objects = entry.get("optional_objects") or []
    optional_libs = entry.get("optional_libraries") or []
    wanted = list(dict.fromkeys(needed + dlopen))

    def simulate(preload: bool) -> _Simulation:
        sim = _Simulation(host, ld_library_path, executable, machine)
        if preload:
            sim.preload(wanted, host, dirs, who)
        for path, _ in sorted(needing, key=lambda item: _matches(posixpath.basename(item[0]), optional_objects)):
            sim.load(path, _matches(posixpath.basename(path), optional_objects))
        for soname in dlopen:
            sim.dlopen(soname, callers, _matches(soname, optional_libs))
        return sim

    sim = simulate(preload=mode == "wheels")
    applied = mode == "wheels"
    fixed_by_preload = None
    required_missing = [m for m in sim.missing if not (m["optional"] or _matches(m["soname"], optional_libs))
                        and m["soname"] not in DRIVER_LIBRARIES]
    if required_missing and mode in ("on-failure", "opt-in") and dirs:
        retry = simulate(preload=True)
        still = {m["soname"] for m in retry.missing}
        if mode == "on-failure":
            sim, applied = retry, True
        else:
            fixed_by_preload = sorted({m["soname"] for m in required_missing} - still)
    libraries = []
    for obj in sim.loader.objects:
        if not is_cuda_library(obj.soname):
            continue
        version, how = lib_version(host, obj.path, owned)
        wheel = owned[obj.path][0] if obj.path in owned else None
        lib: Dict[str, Any]
        lib = {"soname": obj.soname, "path": obj.path, "via": obj.via, "version": version, "version_source": how,
               "wheel": wheel, "cuda_major": library_major(obj.soname, obj.path, wheel),
               "requested_by": _rel(obj.requested_by, site) if obj.requested_by else None}
        if wheel is None:  # another copy won: the one the environment's own wheels hold, for comparison
            own = find_in_wheels(host, obj.soname, dirs)
            if own and host.tree_path(own) != obj.path:
                lib["env_copy"] = {"path": own, "version": lib_version(host, own, owned)[0],
                                   "wheel": owned[own][0] if own in owned else None}
        libraries.append(lib)
    missing = []
    seen = set()
    # one entry per (soname, object), required needs before optional ones
    for m in sorted(sim.missing, key=lambda m: bool(m["optional"] or _matches(m["soname"], optional_libs))):
        if (m["soname"], m["needed_by"]) in seen:
            continue
        seen.add((m["soname"], m["needed_by"]))
        if m["soname"] in DRIVER_LIBRARIES:
            continue
        in_wheels = find_in_wheels(host, m["soname"], dirs)
        missing.append({"soname": m["soname"], "needed_by": _rel(m["needed_by"], site) if m["needed_by"] else None,
                        "optional": bool(m["optional"] or _matches(m["soname"], optional_libs)), "how": m["how"],
                        "looked_in": m["looked_in"][:32], "in_wheels": in_wheels})
    loaded_paths = {o.path for o in sim.loader.objects}
    unmet = [{"object": _rel(o, site), "file": f, "version": v, "provider": p}
             for o, f, v, p in sim.loader.unmet_versions() if o in loaded_paths][:MAX_REPORTED]
    wrong_machine = sorted({posixpath.basename(p) for p, dyn in parsed if dyn.get("machine") not in (machine, None)})
    return {**(meta if after_torch else {k: v for k, v in meta.items() if k == "wheel_tags"}),
            "distribution": name, "version": d.get("version"), "known_as": entry.get("name"), "location": site,
            "machine": machine, "objects": len(parsed), "cuda_objects": len(needing),
            "cuda_object_paths": [_rel(p, site) for p, _ in needing][:MAX_REPORTED], "package": entry.get("package"),
            "links_torch": links_torch,
            "build": build or None, "cuda_major": major, "cuda_major_from": major_from,
            "needs": needed + [s for s in dlopen if s not in needed], "dlopen": dlopen,
            "preload": mode, "preload_applied": applied, "preload_call": entry.get("preload_call"),
            "fixed_by_preload": fixed_by_preload, "libraries": libraries[:MAX_REPORTED],
            "missing": missing[:MAX_REPORTED], "unmet_versions": unmet, "other_machine": wrong_machine[:MAX_REPORTED]}
