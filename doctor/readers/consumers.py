"""Every CUDA consumer in a Python environment, one model for all frameworks.

A *consumer* is an installed distribution whose ELF objects need CUDA libraries (DT_NEEDED), or that opens them by
name at run time (dlopen, known from the matrix's ``consumer`` table). For each one this module finds its objects
(from the distribution's ``RECORD``) and reads their dynamic sections once per run; the search for their libraries
(glibc's order, after the framework's own preloading) is dl_doctor.facts.loading's, run here over the live files
through a recording view so that the facts carry every input it read (``loader``) and the judging side replays it.
What it was built for comes from its own files (``build_info`` in the matrix), its
name (``-cu12``, ``-cuda12x``, ``cuda12-plugin``), its local version (``+cu121``) or the sonames it needs.

Nothing here imports or runs anything: it reads files through the Host, so it works under --sysroot. --deep
(python_envs) checks the prediction against a real import.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from dl_doctor.facts.loading import (CUDA_FAMILY, DRIVER_LIBRARIES, MAX_REPORTED, dlopen_names,  # noqa: F401
                                     find_in_wheels, is_cuda_library, library_major, simulate)
from dl_doctor.host import Host
from dl_doctor.readers import abi
from dl_doctor.readers.elf import read_dynamic, read_fatbin
from dl_doctor.readers.ldso import HostView

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
# A list value: `('cuda_compute_capabilities', ['sm_60', 'compute_90'])` or `key = ['sm_60', ...]`
_BUILD_LIST = re.compile(r"""['"]?([A-Za-z_]\w{0,40})['"]?[ \t]*[,:=][ \t]*\[([^\]\n]{0,1000})\]""")
_LIST_ITEM = re.compile(r"""['"]([A-Za-z0-9_.+]{1,32})['"]""")
_CUDNN_H = re.compile(r"#define CUDNN_(MAJOR|MINOR|PATCHLEVEL)\s+(\d+)")
_NCCL_H = re.compile(r"#define NCCL_(MAJOR|MINOR|PATCH)\s+(\d+)")
MAX_RECORD = 16 << 20
MAX_OBJECTS = 4000


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


def read_build_info(text: str, keys: Dict[str, str]) -> Dict[str, Any]:
    """The values of ``keys`` ({what: key in file}) in a framework's build-information file (never executed)."""
    wanted = {v: k for k, v in keys.items()}
    out: Dict[str, Any] = {}
    for line in text.splitlines()[:4000]:
        if len(line) > 8192:
            line = line[:8192]
        for m in _BUILD_LIST.finditer(line):
            what = wanted.get(m.group(1))
            if what and what not in out:
                items = _LIST_ITEM.findall(m.group(2))[:64]
                if items:
                    out[what] = items
        for form in _BUILD_FORMS:
            for m in form.finditer(line):
                what = wanted.get(m.group(1))
                if what and what not in out and m.group(2).strip() not in ("", "None"):
                    out[what] = m.group(2).strip()
    return out


def release_major(since: Dict[str, Any], version: str) -> Optional[int]:
    """The CUDA major of a release's own wheels from the matrix's ``cuda_major_since`` ({first release: major})."""
    m = re.match(r"(\d+)\.(\d+)", version or "")
    if not m:
        return None
    have = (int(m.group(1)), int(m.group(2)))
    best: Optional[Tuple[Tuple[int, int], int]] = None
    for first, major in since.items():
        f = re.match(r"(\d+)\.(\d+)$", str(first))
        if f and isinstance(major, int) and (int(f.group(1)), int(f.group(2))) <= have:
            key = (int(f.group(1)), int(f.group(2)))
            if best is None or key > best[0]:
                best = (key, major)
    return best[1] if best else None


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


MAX_FATBIN_OBJECTS = 64


def device_code(host: Host, paths: Sequence[str], site: str) -> Optional[Dict[str, Any]]:
    """The GPU code these objects carry (their .nv_fatbin sections, dl_doctor.readers.elf.read_fatbin), merged: None
    when none of them has device code of its own (or none could be read)."""
    sass: set = set()
    ptx: set = set()
    complete, objects = True, []
    for path in list(paths)[:MAX_FATBIN_OBJECTS]:
        code = read_fatbin(host, path)
        if not code or not code.get("section"):
            continue
        objects.append(_rel(path, site))
        sass.update(code["sass"])
        ptx.update(code["ptx"])
        complete = complete and bool(code["complete"])
    if not objects:
        return None
    return {"sass": sorted(sass), "ptx": sorted(ptx), "complete": complete and len(paths) <= MAX_FATBIN_OBJECTS,
            "objects": objects[:MAX_REPORTED]}


def _rel(path: str, site: str) -> str:
    return path[len(site) + 1:] if path.startswith(site + "/") else path


def scan(host: Host, *, sites: Sequence[str], dists: Dict[str, Dict[str, Any]], owned: Dict[str, Tuple[str, str]],
         ld_library_path: Sequence[str], sys_path: Optional[Sequence[str]], executable: Optional[str],
         matrix: Any, torch: Optional[Dict[str, Any]] = None) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """The CUDA consumers among ``dists`` (name -> {version, metadata, location}), each with what it needs and what
    it was built for; and the raw loader inputs of the environment (facts: ``loader``): every file, link, cache entry
    and glob the search for their libraries looked at, recorded while dl_doctor.facts.loading simulates it here, so
    that the judging side replays the same search from the facts."""
    bases = [p for p in (sys_path or sites) if p and p.startswith("/")]
    dirs = wheel_dirs(host, bases)
    exe = read_dynamic(host, executable) if executable else None
    host_machine = (exe or {}).get("machine") if isinstance((exe or {}).get("machine"), str) else None
    out: List[Dict[str, Any]] = []
    objects: Dict[str, Dict[str, List[str]]] = {}
    links: Dict[str, List[str]] = {}  # each consumer's objects that link torch (the symbol check's, not the record's)
    compiled: Dict[str, Dict[str, Any]] = {}  # the other distributions with ELF objects
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
                # not a CUDA build: its symbol versions are still judged (readers.abi)
                compiled[name] = {"version": d.get("version"), "location": d["location"],
                                  "paths": record_objects(host, d["metadata"], d["location"])}
                continue  # (a file cut off by the cap proves nothing: its objects are scanned)
        paths = record_objects(host, d["metadata"], d["location"])
        if not paths and entry and entry.get("package"):  # no RECORD (conda's builds may drop it): its package dir
            package = posixpath.join(d["location"], str(entry["package"]))
            paths = sorted(set(host.glob(f"{package}/*.so") + host.glob(f"{package}/lib/*.so*")))[:MAX_OBJECTS]
        if not paths:
            continue
        parsed: List[Tuple[str, Dict[str, Any]]] = []
        for path in paths:
            dyn = read_dynamic(host, path)
            if dyn is not None:
                parsed.append((path, dyn))
        needing = [(p, dyn) for p, dyn in parsed if any(is_cuda_library(n) for n in dyn["needed"])]
        dlopen_by = (entry or {}).get("dlopen_by") or []
        callers = [p for p, _ in parsed if _matches(posixpath.basename(p), dlopen_by)]
        if not needing and not (entry and entry.get("dlopen") and callers):
            if parsed:  # not a CUDA consumer: its symbol versions are judged on their own (readers.abi)
                compiled[name] = {"version": d.get("version"), "location": d["location"],
                                  "paths": [p for p, _ in parsed]}
            continue
        out.append(_describe(host, name, d, entry, parsed, needing, host_machine, text))
        objects[name] = {"needing": [p for p, _ in needing], "callers": callers}
        links[name] = [p for p, dyn in parsed if any(n.startswith(("libc10", "libtorch")) for n in dyn["needed"])]
    view = HostView(host, owned, machine=host_machine or "EM_X86_64", version_of=lib_version)
    torch_dir = (torch or {}).get("path")
    torch_inputs = None
    if torch and torch_dir and "torch" in dists:
        gdeps = f"{torch_dir}/lib/libtorch_global_deps.so"
        ext = next(iter(sorted(host.glob(f"{torch_dir}/_C.cpython-*.so")) + host.glob(f"{torch_dir}/_C.so")), None)
        torch_inputs = {"preload": torch.get("preload"), "cuda": torch.get("cuda"),
                        "global_deps": gdeps if host.is_file(gdeps) else None, "extension": ext}
    record: Dict[str, Any] = {"ld_library_path": list(ld_library_path), "executable": executable,
                              "machine": host_machine, "wheel_dirs": dirs,
                              "preload_bases": [b for b in bases if host.is_dir(f"{b}/nvidia")] or bases[:8],
                              "torch": torch_inputs, "objects": objects}
    for c in out:  # the same search the judging side will replay, run here to record what it looks at
        simulate(view, record, c, objects[c["distribution"]], matrix,
                 observe=abi.observe(host, c, links.get(c["distribution"]) or []))
    for wdir in dirs:  # the environment's own copies of what loads, for comparison
        for described in out:
            for soname in described["needs"]:
                if view.is_file(f"{wdir}/{soname}"):
                    view.version(f"{wdir}/{soname}")
                    view.owner(f"{wdir}/{soname}")
    for path in list(view.files):
        view.owner(path)
    record.update(view.record())
    torch_ext = None
    if "torch" in dists and dists["torch"].get("location"):
        loc = dists["torch"]["location"]
        torch_ext = next(iter(sorted(host.glob(f"{loc}/torch/_C.cpython-*.so")) + host.glob(f"{loc}/torch/_C.so")), None)
    extensions: Dict[str, Any] = {}
    record["unmet_versions"] = abi.compiled_versions(host, compiled, record, host_machine or "EM_X86_64",
                                                     torch_extension=torch_ext, extensions=extensions)
    if extensions:
        record["extensions_abi"] = extensions
    return out, record


def _describe(host: Host, name: str, d: Dict[str, Any], entry: Optional[Dict[str, Any]], parsed, needing,
              host_machine: Optional[str], build_text: Optional[str]) -> Dict[str, Any]:
    """What a consumer is: its objects, what they need, what it was built for (its files, name and version)."""
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
    if major is None and entry.get("cuda_major_since"):  # its own build information unreadable: its release's CUDA
        major = release_major(entry["cuda_major_since"], d.get("version") or "")
        major_from = "matrix (the CUDA major of its release's wheels)" if major is not None else major_from
    dlopen = dlopen_names(entry, {"cuda_major": major, "build": build})
    machines = sorted({str(dyn.get("machine")) for _, dyn in parsed})
    machine = host_machine or next((m for m in ("EM_X86_64", "EM_AARCH64") if m in machines),
                                   machines[0] if machines else "EM_X86_64")
    links_torch = name != "torch" and any(n.startswith(("libc10", "libtorch")) for _, dyn in needing
                                          for n in dyn["needed"])
    meta = wheel_metadata(host, d["metadata"], d.get("version") or "")
    after_torch = name != "torch" and (links_torch or "requires_torch" in meta)
    wrong_machine = sorted({posixpath.basename(p) for p, dyn in parsed if dyn.get("machine") not in (machine, None)})
    need_paths = [p for p, _ in needing]
    code = device_code(host, need_paths + [p for p, _ in parsed if p not in need_paths
                                           and _matches(posixpath.basename(p), entry.get("dlopen_by") or [])], site)
    return {**(meta if after_torch else {k: v for k, v in meta.items() if k == "wheel_tags"}),
            "distribution": name, "version": d.get("version"), "known_as": entry.get("name"), "location": site,
            "machine": machine, "objects": len(parsed), "cuda_objects": len(needing),
            "cuda_object_paths": [_rel(p, site) for p, _ in needing][:MAX_REPORTED], "package": entry.get("package"),
            "links_torch": links_torch, "build": build or None, "cuda_major": major, "cuda_major_from": major_from,
            "device_code": code, "needs": needed + [s for s in dlopen if s not in needed], "dlopen": dlopen,
            "other_machine": wrong_machine[:MAX_REPORTED]}
