"""Every compiled extension against what it would load: its undefined C++ symbols of the framework's namespaces
(c10::, at::, torch::, caffe2::) against the exports of the libraries that resolve for it.

Run at collection time, on the one resolution of dl_doctor.facts.loading (the consumer's simulated process: torch's own
import sequence, then the extension's objects): for each object of a distribution that links the framework, the
framework symbols it imports (its .dynsym: undefined, global, unversioned) are looked up, as ld.so looks them up
(each object's hash chain), in the objects of its own DT_NEEDED closure as they resolve (Python loads an extension
RTLD_LOCAL: only what it links, and the global scope, can satisfy it). A symbol none of them exports is what the import
reports as 'undefined symbol: _ZN3c10...'. The facts carry only the answer (bounded), never the symbol tables.

Where a framework library of the closure has no readable symbol table, the answer is unknown (nothing is reported):
"unknown" is not "broken". For a symbol that is missing, the same name with the other C++ string ABI
(_GLIBCXX_USE_CXX11_ABI: ``std::__cxx11::basic_string`` against ``std::string``, the ``[abi:cxx11]`` tag) is looked up
too: found, the mismatch is the ABI flag, not the framework's version.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence

from dl_doctor.host import Host
from dl_doctor.readers.elf import exported, undefined_symbols

# the framework's own top-level namespaces, and the sonames of the libraries that define them
NAMESPACES = {"c10": "torch", "at": "torch", "torch": "torch", "caffe2": "torch", "c10d": "torch"}
FRAMEWORK_LIBRARY = re.compile(r"lib(c10|c10_cuda|c10_hip|torch|torch_cpu|torch_cuda|torch_cuda_cu|torch_cuda_cpp|"
                               r"torch_hip|torch_python|torch_global_deps|shm)\.so")
_NESTED = re.compile(r"_Z(?:T[VIST])?N[rVKRO]*(\d+)")
MAX_OBJECTS = 16          # objects of one distribution looked at
MAX_LOOKUPS = 6000        # symbol lookups per distribution (each walks one hash chain: ~25 µs on libtorch_cpu)
# where torch defines each namespace (looked up there first: a real extension imports 1,000-5,000 of them)
PREFERENCE = {"c10": ("libc10.so", "libc10_cuda.so"), "caffe2": ("libc10.so", "libtorch_cpu.so"),
              "at": ("libtorch_cpu.so", "libtorch_cuda.so"), "torch": ("libtorch_cpu.so", "libtorch_python.so"),
              "c10d": ("libtorch_cpu.so", "libtorch_cuda.so")}


def _preference(ns: str, soname: str) -> int:
    order = PREFERENCE.get(ns, ())
    return order.index(soname) if soname in order else len(order) + (0 if FRAMEWORK_LIBRARY.fullmatch(soname) else 1)
MAX_REPORTED = 20
CXX11_STRING = "NSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"


def namespace(name: str) -> Optional[str]:
    """The top-level namespace of a mangled nested name (``_ZN3c104cuda9SetDeviceEi`` -> ``c10``)."""
    m = _NESTED.match(name)
    if not m:
        return None
    n = int(m.group(1))
    start = m.end()
    return name[start:start + n] if n < 64 else None


def is_framework_symbol(name: str) -> bool:
    return namespace(name) in NAMESPACES


def demangle(name: str) -> str:
    """The qualified name of a mangled nested name, for a message (``c10::cuda::SetDevice``); the arguments are left
    out. A name it cannot read is returned as it is."""
    m = _NESTED.match(name)
    if not m:
        return name
    at = m.start(1)
    parts: List[str] = []
    while at < len(name) and len(parts) < 16:
        d = re.match(r"\d+", name[at:])
        if not d:
            break
        n = int(d.group(0))
        at += len(d.group(0))
        parts.append(name[at:at + n])
        at += n
        if name[at:at + 1] in ("C", "D") and name[at + 1:at + 2].isdigit():  # a constructor / destructor
            parts.append(("~" if name[at] == "D" else "") + parts[-1])
            break
        if name[at:at + 2] == "B5":  # an ABI tag: [abi:cxx11]
            at += 7
    prefix = {"_ZTV": "vtable for ", "_ZTI": "typeinfo for ", "_ZTS": "typeinfo name for "}.get(name[:4], "")
    return prefix + "::".join(p for p in parts if p) if parts else name


def uses_cxx11_abi(name: str) -> bool:
    return "St7__cxx11" in name or "B5cxx11" in name


def other_abi(name: str) -> Optional[str]:
    """The same symbol compiled with the other _GLIBCXX_USE_CXX11_ABI (the simple cases: a std::string argument, an
    [abi:cxx11] tag); None where the name has no std::string in it."""
    if uses_cxx11_abi(name):
        return name.replace(CXX11_STRING, "Ss").replace("B5cxx11", "")
    if "Ss" in name:  # (a guess where 'Ss' is inside an identifier: it is looked up, so it only finds nothing)
        return name.replace("Ss", CXX11_STRING)
    return None


def _closure(loader: Any, path: str) -> Optional[List[Any]]:
    """The objects an object's DT_NEEDED closure resolves to in the simulated process; None where one is missing."""
    by_path = getattr(loader, "_by_path", {})
    root = by_path.get(path)
    if root is None:
        return None
    seen = {root.path: root}
    queue = [root]
    while queue:
        obj = queue.pop(0)
        for needed in obj.dynamic.get("needed") or []:
            child = loader.by_soname.get(needed)
            if child is None:
                return None
            if child.path not in seen:
                seen[child.path] = child
                queue.append(child)
    return [o for p, o in seen.items() if p != root.path]


def check_process(host: Host, loader: Any, paths: Sequence[str], site: str) -> Optional[Dict[str, Any]]:
    """What the consumer's objects import from the framework that the libraries resolved for them do not export.

    ``{"objects": n, "symbols": n, "unresolved": [{"object", "symbol", "name", "libraries", "other_abi"}],
    "object_abi": ..., "unknown": [...]}``; None where no object imports a framework symbol."""
    objects = 0
    symbols = 0
    lookups = 0
    count = 0
    unresolved: List[Dict[str, Any]] = []
    unknown: List[str] = []
    exports_cache: Dict[str, Optional[Dict[str, bool]]] = {}
    for path in list(paths)[:MAX_OBJECTS]:
        wanted = undefined_symbols(host, path, is_framework_symbol)
        if not wanted or not wanted["names"]:
            continue
        if path not in getattr(loader, "_by_path", {}):
            loader.load(path, via="loaded with its package")
        closure = _closure(loader, path)
        rel = path[len(site) + 1:] if site and path.startswith(site + "/") else path
        if closure is None:
            unknown.append(f"{rel}: a library it links does not load (judged by the loading checks)")
            continue
        framework = [o for o in closure if FRAMEWORK_LIBRARY.fullmatch(o.soname or "")]
        if not framework:
            continue
        # the framework's libraries first (where a c10/at symbol lives), then the rest of the closure
        order = framework + [o for o in closure if o not in framework]
        tables: List[Any] = []
        blind = False
        for o in order:
            probe = exported(host, o.path, [])
            if probe is None:
                if o in framework:
                    blind = True
                    break
                continue
            tables.append(o)
        if blind:
            unknown.append(f"{rel}: a framework library it links has no readable symbol table")
            continue
        objects += 1
        names = wanted["names"]
        symbols += len(names)
        pending = list(dict.fromkeys(names))
        failed = False
        groups: Dict[str, List[str]] = {}
        for n in pending:
            groups.setdefault(namespace(n) or "", []).append(n)
        pending = []
        for ns, names in groups.items():  # each namespace looked up first where torch defines it
            for o in sorted(tables, key=lambda o: _preference(ns, o.soname)):
                if not names or lookups > MAX_LOOKUPS:
                    break
                lookups += len(names)
                hits = exported(host, o.path, names)
                if hits is None:  # the table could not be read through: unknown, never 'not exported'
                    failed = True
                    break
                names = [n for n in names if not hits.get(n)]
            pending += names
            if failed:
                break
        if failed:
            unknown.append(f"{rel}: a library's symbol table could not be read through")
            continue
        if lookups > MAX_LOOKUPS:
            unknown.append(f"{rel}: more than {MAX_LOOKUPS} lookups; the rest were not made")
            continue
        count += len(pending)
        for name in pending:
            if len(unresolved) >= MAX_REPORTED:
                break
            variant = other_abi(name)
            found_variant = None
            if variant and variant != name:
                for o in tables:
                    hit = exported(host, o.path, [variant]) or {}
                    if hit.get(variant):
                        found_variant = posixpath.basename(o.path)
                        break
            unresolved.append({"object": rel, "symbol": name, "name": demangle(name),
                               "libraries": [posixpath.basename(o.path) for o in framework][:8],
                               "other_abi": {"symbol": variant, "exported_by": found_variant} if found_variant
                               else None,
                               "cxx11": uses_cxx11_abi(name)})
        # Any other C++ import with a std::string in it: where a library it links exports the same symbol in the
        # other string ABI, the two were built with different _GLIBCXX_USE_CXX11_ABI (an extension and its own
        # common library: Transformer Engine's). A name found nowhere is left alone (the global scope may hold it).
        others = undefined_symbols(host, path, lambda n: n.startswith("_Z") and not is_framework_symbol(n)
                                   and other_abi(n) is not None) or {"names": []}
        for name in list(dict.fromkeys(others["names"]))[:MAX_REPORTED * 10]:
            if lookups > MAX_LOOKUPS:
                break
            lookups += 2 * len(tables)
            if any((exported(host, o.path, [name]) or {}).get(name) for o in tables):
                continue
            variant = other_abi(name)
            if variant is None:
                continue
            owner = next((o for o in tables if (exported(host, o.path, [variant]) or {}).get(variant)), None)
            if owner is None:
                continue
            count += 1
            if len(unresolved) < MAX_REPORTED:
                unresolved.append({"object": rel, "symbol": name, "name": demangle(name),
                                   "libraries": [posixpath.basename(owner.path)],
                                   "other_abi": {"symbol": variant, "exported_by": posixpath.basename(owner.path)},
                                   "cxx11": uses_cxx11_abi(name)})
    if not objects and not unknown:
        return None
    return {"objects": objects, "symbols": symbols, "unresolved": unresolved[:MAX_REPORTED],
            "unresolved_count": count, "unknown": unknown[:8]}


def observe(host: Host, consumer: Dict[str, Any], paths: Sequence[str]):
    """The callback dl_doctor.facts.loading.simulate calls with the consumer's final process: records ``abi`` on the
    consumer (facts) for its objects that link the framework (``paths``; those that need no CUDA library are loaded
    into the process here, after its prediction was made)."""
    def seen(proc: Any) -> None:
        if not consumer.get("links_torch") or not paths:
            return
        try:
            result = check_process(host, proc.loader, paths, str(consumer.get("location") or ""))
        except Exception as exc:  # noqa: BLE001 - one hostile object costs only this answer
            result = {"objects": 0, "symbols": 0, "unresolved": [], "unknown": [f"not read: {type(exc).__name__}"]}
        if result is not None:
            consumer["abi"] = result
    return seen


# -- symbol versions of every other compiled object of an environment ---------------------------------------------

MAX_DISTRIBUTIONS = 200   # compiled distributions of one environment looked at
MAX_DIST_OBJECTS = 32     # objects of one distribution loaded
MAX_UNMET = 40


def compiled_versions(host: Host, compiled: Mapping[str, Any], inputs: Mapping[str, Any],
                      machine: str, torch_extension: Optional[str] = None,
                      extensions: Optional[Dict[str, Any]] = None) -> List[Dict[str, Any]]:
    """The symbol versions (DT_VERNEED) the compiled objects of the environment's distributions that are not CUDA
    consumers (those are judged by the loading model) need and the copy that loads for them does not define
    (DT_VERDEF): ld.so refuses the import ('version `GLIBCXX_3.4.29' not found'). They are loaded as one interpreter
    would import them: the executable and its libraries, torch._C where a distribution links torch ('import torch'
    comes first), then each distribution's objects by path, their DT_NEEDED searched in glibc's order
    (dl_doctor.facts.loading.Loader) through a view of its own (these files are not recorded); a soname already
    loaded is reused, as in one process.

    A distribution whose objects link torch (a torch extension that needs no CUDA library: torchaudio's CPU build,
    torch-scatter's) has its framework imports looked up as for a CUDA consumer (check_process); the answers go into
    ``extensions``."""
    from dl_doctor.facts.loading import Loader
    from dl_doctor.readers.ldso import HostView

    view = HostView(host, machine=machine)
    selected: List[Any] = []
    for name in sorted(compiled)[:MAX_DISTRIBUTIONS]:
        entry = compiled[name]
        paths = [p for p in entry.get("paths") or [] if isinstance(p, str)][:MAX_DIST_OBJECTS]
        dyns = {p: view.dynamic(p) for p in paths}
        linking = [p for p, d in dyns.items() if d and name != "torch" and
                   any(n.startswith(("libc10", "libtorch")) for n in d.get("needed") or [])]
        # an object that needs no symbol version and links no framework cannot fail either way: not loaded
        if linking or any(d and d.get("verneed") for d in dyns.values()):
            selected.append((name, entry, paths, linking))
    if not selected:
        return []
    loader = Loader(view, ld_library_path=list(inputs.get("ld_library_path") or []),
                    executable=inputs.get("executable"), machine=machine)
    if inputs.get("executable"):
        loader.load(str(inputs["executable"]), via="the interpreter")
    if torch_extension and any(linking for _, _, _, linking in selected):
        loader.load(torch_extension, via="import torch")
    out: List[Dict[str, Any]] = []
    for name, entry, paths, linking in selected:
        for path in paths:
            loader.load(path, via="loaded with its package")
        site = str(entry.get("location") or "")
        if linking and extensions is not None:
            try:
                result = check_process(host, loader, linking, site)
            except Exception as exc:  # noqa: BLE001 - one hostile object costs only this answer
                result = {"objects": 0, "symbols": 0, "unresolved": [], "unknown": [f"not read: {type(exc).__name__}"]}
            if result is not None:
                extensions[name] = {"version": entry.get("version"), **result}
    owner = {p: (name, entry) for name, entry, paths, _ in selected for p in paths}
    for obj, file, version, provider in loader.unmet_versions():
        if obj in owner and len(out) < MAX_UNMET:
            name, entry = owner[obj]
            site = str(entry.get("location") or "")
            out.append({"distribution": name, "version": entry.get("version"),
                        "object": obj[len(site) + 1:] if site and obj.startswith(site + "/") else obj,
                        "file": file, "needs": version, "provider": provider})
    return out
