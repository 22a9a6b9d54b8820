"""Which file each CUDA consumer loads, and whether that copy serves its build: one pure function of facts + matrix.

The python_envs probe records, per environment, the **raw loader inputs** (``loader``): LD_LIBRARY_PATH, the
interpreter, the wheel directories on sys.path, every file the search looked at (its ELF dynamic section: SONAME,
DT_NEEDED, DT_RPATH, DT_RUNPATH, machine, DT_VERNEED, DT_VERDEF), where links point, the ld.so.cache entries and glob
results it asked for, the version each file carries and which wheel owns it; and, per consumer, the objects that need
CUDA libraries and those that open them by name. :func:`model` replays glibc's search on those inputs
(:class:`Loader`), after the framework's own preloading as the matrix and the framework's own ``__init__`` say, and
judges each library that loads against the build (:func:`serves`). ``--deep`` (the real import: ``/proc/self/maps``
and each step's error) overrides the prediction where present.

Every check that judges loading (DLD-PY-004, 011, 012, 013, 014) and every view (the HTML stack, the Markdown
summary, the fleet comparison, the inventory) reads this one model; the report carries it as ``loading``
(docs/facts.md). The probe runs the same code over the live files while recording (dl_doctor.readers.ldso.HostView),
so a prediction made at collection and one replayed from the facts are the same by construction.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from dl_doctor import versions

MODEL_VERSION = 1
# Per ELF machine: the default directories (with the Debian multiarch ones) and what $PLATFORM expands to.
MACHINE_LAYOUT = {
    "EM_X86_64": (("/lib64", "/usr/lib64", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib", "/usr/lib"),
                  "x86_64"),
    "EM_AARCH64": (("/lib64", "/usr/lib64", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib",
                    "/usr/lib"), "aarch64"),
}
DEFAULT_DIRS = MACHINE_LAYOUT["EM_X86_64"][0]

# The CUDA library family, by soname (the driver's own libraries are judged by the driver checks).
CUDA_FAMILY = re.compile(r"lib(cudart|cublas|cublasLt|cudnn[A-Za-z_]*|nccl|cufft|cufftw|curand|cusolver|cusolverMg|"
                         r"cusparse|cusparseLt|nvrtc|nvrtc-builtins|nvJitLink|nvinfer[A-Za-z_]*|nvonnxparser|cupti|"
                         r"nvToolsExt|nvtx3interop|cutensor|cutensorMg|nvshmem_host|cufile|cufile_rdma)\.so(\.[0-9.]+)?")
DRIVER_LIBRARIES = ("libcuda.so", "libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ml.so")
_MAJOR_IS_CUDA = re.compile(r"lib(cudart|cublas|cublasLt|nvrtc|nvJitLink|cupti)\.so\.(\d+)$")
MAX_REPORTED = 40


def is_cuda_library(soname: str) -> bool:
    return bool(CUDA_FAMILY.fullmatch(soname))


def expand(entry: str, origin: str, platform: str = "x86_64") -> str:
    out = entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)
    out = out.replace("${LIB}", "lib64").replace("$LIB", "lib64")
    out = out.replace("${PLATFORM}", platform).replace("$PLATFORM", platform)
    return posixpath.normpath(out) if out.startswith("/") else out


def library_major(soname: str, path: str, wheel: Optional[str]) -> Optional[int]:
    """The CUDA major a library copy belongs to: its wheel's -cuNN, an nvidia/cuNN directory, or its soname."""
    if wheel:
        m = re.search(r"-cu(\d{2})$", wheel)
        if m:
            return int(m.group(1))
    m = re.search(r"/nvidia/cu(\d{2})/lib/", path)
    if m:
        return int(m.group(1))
    m = _MAJOR_IS_CUDA.fullmatch(soname)
    return int(m.group(2)) if m else None


# -- what the loader may ask about files ---------------------------------------------------------------------------

class RecordedView:
    """The loader's questions answered from recorded inputs (``env["loader"]``), never from a machine.

    A file the record does not hold is absent; a name the collection never searched for, a glob or an ld.so.cache
    name it never asked is *unrecorded*: the model says "unknown" for it instead of "not found"."""

    def __init__(self, record: Mapping[str, Any]):
        def table(key: str) -> Dict[str, Any]:
            value = record.get(key)
            return dict(value) if isinstance(value, Mapping) else {}

        self.files = table("files")
        self.links = table("links")
        self.cache_hits = table("cache")
        self.globs = table("globs")
        self.versions = table("versions")
        self.owners = table("owners")
        searched = record.get("searched")
        self.searched = set(searched) if isinstance(searched, list) else None
        self.unrecorded: List[str] = []
        # a file's machine is recorded only where it differs from the host's (the interpreter's)
        self.machine = record.get("machine") if isinstance(record.get("machine"), str) else "EM_X86_64"

    def real(self, path: str) -> str:
        target = self.links.get(path)
        return target if isinstance(target, str) else path

    def dynamic(self, path: str) -> Optional[Dict[str, Any]]:
        dyn = self.files.get(path)
        if not isinstance(dyn, Mapping) or "needed" not in dyn:
            return None
        return {"soname": dyn.get("soname"), "needed": list(dyn.get("needed") or []),
                "rpath": list(dyn.get("rpath") or []), "runpath": list(dyn.get("runpath") or []),
                "machine": dyn.get("machine") or self.machine, "verneed": dict(dyn.get("verneed") or {}),
                "verdef": list(dyn.get("verdef") or [])}

    def is_file(self, path: str) -> bool:
        return path in self.files

    def cache_lookup(self, name: str) -> List[str]:
        hits = self.cache_hits.get(name)
        if hits is None:
            return []
        return [p for p in hits if isinstance(p, str)]

    def glob(self, pattern: str) -> List[str]:
        hits = self.globs.get(pattern)
        if hits is None:
            self.unrecorded.append(f"glob {pattern}")
            return []
        return [p for p in hits if isinstance(p, str)]

    def version(self, path: str) -> Tuple[Optional[str], str]:
        v = self.versions.get(path)
        if isinstance(v, list) and len(v) == 2:
            return (v[0] if isinstance(v[0], str) else None), str(v[1])
        return None, "unknown"

    def owner(self, path: str) -> Optional[Tuple[str, str]]:
        o = self.owners.get(path)
        return (str(o[0]), str(o[1])) if isinstance(o, list) and len(o) == 2 else None

    def note_search(self, name: str) -> None:
        """(the recording view notes each name; a replay has them already)"""

    def was_searched(self, name: str) -> bool:
        return self.searched is None or name in self.searched


# -- glibc's search, simulated ---------------------------------------------------------------------------------------

@dataclass
class LoadedObject:
    path: str
    soname: str
    via: str
    requested_by: Optional[str]
    dynamic: Dict


@dataclass
class Loader:
    """One process's loads, as ld.so does them. For each DT_NEEDED name, breadth-first in load order (a soname
    already loaded is reused):

    1. a name containing '/' is a path;
    2. if the requesting object has no DT_RUNPATH: the DT_RPATH of the requesting object, then of each object in its
       loader chain (each only if that object has no DT_RUNPATH), then the executable's;
    3. LD_LIBRARY_PATH;
    4. the requesting object's DT_RUNPATH (only its own; not inherited);
    5. /etc/ld.so.cache (or, without one, the ld.so.conf directories in order);
    6. the default directories.

    ``$ORIGIN`` expands to the directory of the object that carries the tag. Objects loaded by absolute path first (a
    framework's own preloading) take their soname before any search happens. ``view`` answers every question about
    files: the live host while the probe records (dl_doctor.readers.ldso.HostView), or the record (RecordedView)."""

    view: Any
    ld_library_path: Sequence[str] = ()
    executable: Optional[str] = None
    machine: str = "EM_X86_64"  # objects of another machine are skipped while searching, as ld.so does
    objects: List[LoadedObject] = field(default_factory=list)
    by_soname: Dict[str, LoadedObject] = field(default_factory=dict)
    missing: List[Tuple[str, str]] = field(default_factory=list)
    unrecorded: List[str] = field(default_factory=list)
    _chain: Dict[str, List[str]] = field(default_factory=dict)
    _by_path: Dict[str, LoadedObject] = field(default_factory=dict)

    @property
    def platform(self) -> str:
        return MACHINE_LAYOUT.get(self.machine, MACHINE_LAYOUT["EM_X86_64"])[1]

    @property
    def default_dirs(self) -> Sequence[str]:
        return MACHINE_LAYOUT.get(self.machine, MACHINE_LAYOUT["EM_X86_64"])[0]

    def _usable(self, candidate: str) -> bool:
        if not self.view.is_file(candidate):
            return False
        dyn = self.view.dynamic(candidate)
        return dyn is not None and dyn.get("machine") in (self.machine, None)

    def _search_dirs(self, name: str, dirs: Iterable[str], origin_of: str) -> Optional[str]:
        for d in dirs:
            candidate = posixpath.join(expand(d, posixpath.dirname(origin_of), self.platform), name)
            if self._usable(candidate):
                return candidate
        return None

    def search_order(self, requester: Optional[str]) -> List[str]:
        """Where the loader looks for a name needed by ``requester``, in order (a finding's 'looked in')."""
        dyn = self.view.dynamic(requester) if requester else None
        out: List[str] = []
        if not (dyn and dyn["runpath"]):
            for obj in ([requester] if requester else []) + self._chain.get(requester or "", []) + \
                    ([self.executable] if self.executable else []):
                d = self.view.dynamic(obj)
                if d and d["rpath"] and not d["runpath"]:
                    out += [f"{expand(e, posixpath.dirname(obj), self.platform)} (RPATH)" for e in d["rpath"]]
        out += [f"{d} (LD_LIBRARY_PATH)" for d in self.ld_library_path]
        if dyn and requester and dyn["runpath"]:
            out += [f"{expand(e, posixpath.dirname(requester), self.platform)} (RUNPATH)" for e in dyn["runpath"]]
        return list(dict.fromkeys(out + ["ld.so.cache"] + list(self.default_dirs)))

    def unmet_versions(self) -> List[Tuple[str, str, str, str]]:
        """``(object, needed file, version, provider)`` for every symbol version an object needs (DT_VERNEED) that the
        object loaded for that file does not define (DT_VERDEF): ld.so refuses the load ("version `GLIBCXX_3.4.30'
        not found"). A provider without version definitions satisfies any need, as in glibc."""
        out: List[Tuple[str, str, str, str]] = []
        for obj in self.objects:
            for file, names in (obj.dynamic.get("verneed") or {}).items():
                provider = self.by_soname.get(file)
                if provider is None or not provider.dynamic.get("verdef"):
                    continue
                defined = set(provider.dynamic["verdef"])
                out += [(obj.path, file, n, provider.path) for n in names if n not in defined]
        return out

    def search(self, name: str, requester: Optional[str]) -> Tuple[Optional[str], str]:
        """(the file that wins, the step that found it) — or (None, "not found"), or (None, "unrecorded") when
        replaying facts that never searched for this name."""
        if "/" in name:
            return (name if self._usable(name) else None), "path"
        self.view.note_search(name)
        if not self.view.was_searched(name):
            self.unrecorded.append(name)
            return None, "unrecorded"
        dyn = self.view.dynamic(requester) if requester else None
        if not (dyn and dyn["runpath"]):
            chain = ([requester] if requester else []) + self._chain.get(requester or "", [])
            for obj in chain:
                d = self.view.dynamic(obj)
                if d and d["rpath"] and not d["runpath"]:
                    hit = self._search_dirs(name, d["rpath"], obj)
                    if hit:
                        return hit, f"RPATH of {obj}"
            if self.executable:
                d = self.view.dynamic(self.executable)
                if d and d["rpath"] and not d["runpath"]:
                    hit = self._search_dirs(name, d["rpath"], self.executable)
                    if hit:
                        return hit, f"RPATH of {self.executable}"
        hit = self._search_dirs(name, self.ld_library_path, requester or "/")
        if hit:
            return hit, "LD_LIBRARY_PATH"
        if dyn and requester and dyn["runpath"]:
            hit = self._search_dirs(name, dyn["runpath"], requester)
            if hit:
                return hit, f"RUNPATH of {requester}"
        for path in self.view.cache_lookup(name):
            if self._usable(path):
                return path, "ld.so.cache"
        hit = self._search_dirs(name, self.default_dirs, "/")
        if hit:
            return hit, "default directories"
        return None, "not found"

    def load(self, path: str, via: str = "dlopen", loader: Optional[str] = None) -> Optional[LoadedObject]:
        """Load an object by path (dlopen/ctypes.CDLL) and its dependencies, breadth-first."""
        real = self.view.real(path)
        if real in self._by_path:
            return self._by_path[real]
        root = self._add(real, via, loader)
        if root is None:
            return None
        queue = deque([root])
        while queue:
            obj = queue.popleft()
            for needed in obj.dynamic["needed"]:
                if needed in self.by_soname:
                    continue
                found, how = self.search(needed, obj.path)
                if found is None:
                    if how != "unrecorded":
                        self.missing.append((needed, obj.path))
                    continue
                child = self._add(self.view.real(found), how, obj.path)
                if child is not None:
                    queue.append(child)
        return root

    def _add(self, path: str, via: str, loader: Optional[str]) -> Optional[LoadedObject]:
        if path in self._by_path:
            return self._by_path[path]
        dyn = self.view.dynamic(path)
        if dyn is None:
            return None
        soname = dyn["soname"] or posixpath.basename(path)
        obj = LoadedObject(path=path, soname=soname, via=via, requested_by=loader, dynamic=dyn)
        self.objects.append(obj)
        self._by_path[path] = obj
        self.by_soname.setdefault(soname, obj)  # the first object with a soname answers later lookups
        self.by_soname.setdefault(posixpath.basename(path), obj)
        self._chain[path] = ([loader] + self._chain.get(loader, [])) if loader else []
        return obj


# -- one consumer's process ------------------------------------------------------------------------------------------

def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def find_in_wheels(view: Any, soname: str, dirs: Sequence[str]) -> Optional[str]:
    for d in dirs:
        if view.is_file(f"{d}/{soname}"):
            return f"{d}/{soname}"
    return None


def _rel(path: str, site: str) -> str:
    return path[len(site) + 1:] if site and path.startswith(site + "/") else path


def torch_preload_globs(bases: Sequence[str], folder: str, pattern: str, major: str) -> List[str]:
    """The places torch's _preload_cuda_deps looks for one library, per sys.path entry, in its order."""
    out = []
    for base in bases:
        out.append(f"{base}/nvidia/{folder}/lib/{pattern}")
        if major:
            out.append(f"{base}/nvidia/cu{major}/lib/{pattern}")
        out.append(f"{base}/{folder}/lib/{pattern}")
    return out


class Process:
    """One consumer's loads in one process: the framework's own import sequence (preloads), then each object that
    needs CUDA, then its dlopen names."""

    def __init__(self, view: Any, inputs: Mapping[str, Any], machine: str):
        self.view = view
        self.loader = Loader(view, ld_library_path=list(inputs.get("ld_library_path") or []),
                             executable=inputs.get("executable"), machine=machine)
        self.missing: List[Dict[str, Any]] = []
        self.steps: List[str] = []

    def preload_sonames(self, sonames: Sequence[str], dirs: Sequence[str], who: str) -> None:
        for soname in sonames:
            hit = find_in_wheels(self.view, soname, dirs)
            if hit and soname not in self.loader.by_soname:
                self.loader.load(hit, via=f"preloaded by {who}")

    def torch_sequence(self, torch: Mapping[str, Any], bases: Sequence[str]) -> None:
        """torch's own __init__: libtorch_global_deps by path, its wheel preloads (always, or after a failure that
        names one of them), then torch._C — as read from this torch's __init__.py (the probe's ``preload``)."""
        preload: Mapping[str, Any] = torch["preload"] if isinstance(torch.get("preload"), Mapping) else {}
        mode = preload.get("mode") or "none"
        table = [tuple(i) for i in preload.get("libraries") or [] if isinstance(i, list) and len(i) == 2]
        major = str(torch.get("cuda") or "").split(".")[0]

        def preload_all(required: bool) -> None:
            for folder, pattern in table:
                for candidate in torch_preload_globs(bases, str(folder), str(pattern), major):
                    hits = self.view.glob(candidate)
                    if hits:
                        self.loader.load(sorted(hits)[0], via=f"preloaded by torch ({mode})")
                        break

        gdeps = torch.get("global_deps")
        if isinstance(gdeps, str):
            before = len(self.loader.missing)
            self.loader.load(gdeps, via="dlopen (libtorch_global_deps)")
            self.steps.append("libtorch_global_deps.so")
            prefixes = [str(p).split(".", 1)[0] for _, p in table]
            failed_on = [m for m, _ in self.loader.missing[before:] if any(m.startswith(p) for p in prefixes)]
            if failed_on and mode in ("always", "on-failure"):
                # CDLL raised OSError naming a CUDA library: torch preloads the wheels and tries again
                self.loader = Loader(self.view, ld_library_path=self.loader.ld_library_path,
                                     executable=self.loader.executable, machine=self.loader.machine)
                preload_all(True)
                self.loader.load(gdeps, via="dlopen (libtorch_global_deps, retried)")
                self.steps.append(f"preload after failure ({', '.join(failed_on)})")
            elif mode == "always" and any(o.soname.startswith("libcudart.so") for o in self.loader.objects):
                preload_all(False)
                self.steps.append("preload (always)")
        ext = torch.get("extension")
        if isinstance(ext, str):
            self.loader.load(ext, via="import torch._C")
            self.steps.append(posixpath.basename(ext))

    def load(self, path: str, optional: bool) -> None:
        before = len(self.loader.missing)
        self.loader.load(path, via="loaded with its package")
        for soname, requester in self.loader.missing[before:]:
            looked = self.loader.search_order(requester)
            self.missing.append({"soname": soname, "needed_by": requester, "optional": optional, "how": "DT_NEEDED",
                                 "looked_in": looked})

    def other_versions(self, soname: str, looked: Sequence[str]) -> List[str]:
        """Files of the same library under another soname version in the directories the search looked in and those
        the process loaded its other libraries from (libcudart.so.10.2 where a build needs libcudart.so.11.0): what
        the loader would never take for it. Asked once the process has loaded everything it will."""
        base = soname.split(".so", 1)[0] + ".so."
        out: List[str] = []
        # the directories searched (RPATH, LD_LIBRARY_PATH, RUNPATH, the defaults) and those ld.so.cache pointed to
        # for the libraries this process did find
        dirs = [d.split(" (", 1)[0] for d in looked] + [posixpath.dirname(o.path) for o in self.loader.objects]
        for d in list(dict.fromkeys(dirs))[:32]:
            if not d.startswith("/"):
                continue
            for hit in self.loader.view.glob(f"{d.rstrip('/')}/{base}*"):
                name = posixpath.basename(hit)
                if name != soname and not name.startswith(soname + ".") and hit not in out:
                    out.append(hit)
            if len(out) >= 8:
                break
        return out[:8]

    def dlopen(self, soname: str, callers: Sequence[str], optional: bool) -> None:
        if soname in self.loader.by_soname:
            return
        for caller in callers:
            found, how = self.loader.search(soname, caller)
            if found:
                self.loader.load(found, via=f"dlopen ({how})", loader=caller)
                return
            if how == "unrecorded":
                return
        looked: List[str] = []
        requesters: List[Optional[str]] = list(callers) or [None]
        for c in requesters:
            looked += self.loader.search_order(c)
        looked = list(dict.fromkeys(looked))
        self.missing.append({"soname": soname, "needed_by": callers[0] if callers else None,
                             "optional": optional, "how": "dlopen", "looked_in": looked})


def _preload_mode(entry: Mapping[str, Any], consumer: Mapping[str, Any], torch: Optional[Mapping[str, Any]]
                  ) -> Tuple[str, str, bool]:
    """(how this consumer's process preloads wheel libraries, who does it, whether torch is imported first)."""
    mode = str(entry.get("preload") or "none")
    who = str(entry.get("name") or consumer.get("distribution"))
    name = consumer.get("distribution")
    torch_mode = None
    if torch:
        torch_mode = {"always": "wheels", "on-failure": "on-failure", "none": "none"}.get(
            str(((torch.get("preload") or {}) if isinstance(torch.get("preload"), Mapping) else {}).get("mode")))
    if name == "torch" and torch_mode:
        return torch_mode, "torch", False
    after_torch = bool(torch) and name != "torch" and bool(consumer.get("links_torch") or consumer.get("requires_torch"))
    if after_torch:
        return (torch_mode or mode), "torch (imported first)", True
    return mode, who, False


def dlopen_names(entry: Mapping[str, Any], consumer: Mapping[str, Any]) -> List[str]:
    """The sonames a consumer's build opens by name (the matrix's ``dlopen``): the list of its CUDA major.minor where
    the matrix has one (CUDA 10.x sonames change with the minor), else of its major; ``{cudnn_major}`` is filled
    from the build's own cuDNN version (TensorFlow 2.15-2.17 are CUDA 12 builds of cuDNN 8), and a name that needs
    it is left out where the build does not say it (unknown, not missing)."""
    table = entry.get("dlopen") or {}
    major = consumer.get("cuda_major")
    if major is None and len(table) == 1:  # the matrix knows only one build (ctranslate2 4.x)
        major = int(next(iter(table)))
    if major is None:
        return []
    raw = consumer.get("build")
    build: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    cuda = re.match(r"(\d+)\.(\d+)", str(build.get("cuda") or ""))
    names = list((table.get(f"{cuda.group(1)}.{cuda.group(2)}") if cuda else None) or table.get(str(major)) or [])
    cudnn = re.match(r"\d+", str(build.get("cudnn") or ""))
    out = []
    for name in names:
        if "{cudnn_major}" in name:
            if not cudnn:
                continue
            name = name.replace("{cudnn_major}", cudnn.group(0))
        out.append(name)
    return out


def simulate(view: Any, inputs: Mapping[str, Any], consumer: Mapping[str, Any], objects: Mapping[str, Any],
             matrix: Any, observe: Any = None) -> Dict[str, Any]:
    """Which file each CUDA library of one consumer resolves to, what does not load, and unmet symbol versions.
    ``observe``: called with the final process (the probe's symbol check reads its resolution, dl_doctor.readers.abi)."""
    entry: Mapping[str, Any] = (matrix.consumer(str(consumer.get("distribution"))) if matrix is not None else None) or {}
    site = str(consumer.get("location") or "")
    machine = str(consumer.get("machine") or inputs.get("machine") or "EM_X86_64")
    needing = [p for p in objects.get("needing") or [] if isinstance(p, str)]
    callers = [p for p in objects.get("callers") or [] if isinstance(p, str)]
    wheel_dirs = [d for d in inputs.get("wheel_dirs") or [] if isinstance(d, str)]
    bases = [b for b in inputs.get("preload_bases") or [] if isinstance(b, str)]
    torch = inputs.get("torch") if isinstance(inputs.get("torch"), Mapping) else None
    major = consumer.get("cuda_major")
    if major is None and len(entry.get("dlopen") or {}) == 1:  # the matrix knows only one build (ctranslate2 4.x)
        major = int(next(iter(entry["dlopen"])))
    dlopen = dlopen_names(entry, consumer)
    optional_objects = list(entry.get("optional_objects") or [])
    optional_libs = list(entry.get("optional_libraries") or [])
    needed = [n for n in consumer.get("needs") or [] if isinstance(n, str) and n not in dlopen]
    wanted = list(dict.fromkeys(needed + dlopen))
    mode, who, after_torch = _preload_mode(entry, consumer, torch)

    def run(preload: bool) -> Process:
        proc = Process(view, inputs, machine)
        if torch and (consumer.get("distribution") == "torch" or after_torch):
            proc.torch_sequence(torch, bases)
        if preload:
            proc.preload_sonames(wanted, wheel_dirs, who)
        for path in sorted(needing, key=lambda p: _matches(posixpath.basename(p), optional_objects)):
            proc.load(path, _matches(posixpath.basename(path), optional_objects))
        for soname in dlopen:
            proc.dlopen(soname, callers, _matches(soname, optional_libs))
        return proc

    torch_runs = bool(torch) and (consumer.get("distribution") == "torch" or after_torch)
    proc = run(preload=mode == "wheels" and not torch_runs)
    applied = mode == "wheels" or (torch_runs and "preload" in " ".join(proc.steps))
    fixed_by_preload = None
    required_missing = [m for m in proc.missing if not (m["optional"] or _matches(m["soname"], optional_libs))
                        and m["soname"] not in DRIVER_LIBRARIES]
    if required_missing and mode in ("on-failure", "opt-in") and wheel_dirs and not torch_runs:
        retry = run(preload=True)
        still = {m["soname"] for m in retry.missing}
        if mode == "on-failure":
            proc, applied = retry, True
        else:
            fixed_by_preload = sorted({m["soname"] for m in required_missing} - still)
    libraries = []
    for obj in proc.loader.objects:
        if not is_cuda_library(obj.soname):
            continue
        version, how = view.version(obj.path)
        owner = view.owner(obj.path)
        wheel = owner[0] if owner else None
        lib: Dict[str, Any] = {"soname": obj.soname, "path": obj.path, "via": obj.via, "version": version,
                               "version_source": how, "wheel": wheel, "wheel_version": owner[1] if owner else None,
                               "cuda_major": library_major(obj.soname, obj.path, wheel),
                               "requested_by": _rel(obj.requested_by, site) if obj.requested_by else None}
        own = find_in_wheels(view, obj.soname, wheel_dirs)
        if own and view.real(own) != obj.path:
            own_owner = view.owner(own)
            own_version, own_how = view.version(own)
            lib["env_copy"] = {"path": own, "version": own_version, "version_source": own_how,
                               "wheel": own_owner[0] if own_owner else None,
                               "wheel_version": own_owner[1] if own_owner else None}
        if not obj.via.startswith(("preloaded by", "loaded with", "dlopen (libtorch", "import torch")):
            lib["searched"] = proc.loader.search_order(obj.requested_by)[:24]  # it was found by the search
        libraries.append(lib)
    missing = []
    seen = set()
    for m in sorted(proc.missing, key=lambda m: bool(m["optional"] or _matches(m["soname"], optional_libs))):
        if (m["soname"], m["needed_by"]) in seen or m["soname"] in DRIVER_LIBRARIES:
            continue
        seen.add((m["soname"], m["needed_by"]))
        missing.append({"soname": m["soname"], "needed_by": _rel(m["needed_by"], site) if m["needed_by"] else None,
                        "optional": bool(m["optional"] or _matches(m["soname"], optional_libs)), "how": m["how"],
                        "looked_in": m["looked_in"][:32], "in_wheels": find_in_wheels(view, m["soname"], wheel_dirs),
                        "other_versions": proc.other_versions(m["soname"], m["looked_in"])})
    loaded_paths = {o.path for o in proc.loader.objects}
    unmet = [{"object": _rel(o, site), "file": f, "version": v, "provider": p}
             for o, f, v, p in proc.loader.unmet_versions() if o in loaded_paths][:MAX_REPORTED]
    if observe is not None:  # after the prediction: what it loads more cannot change it
        observe(proc)
    return {"distribution": consumer.get("distribution"), "version": consumer.get("version"),
            "cuda_major": major, "preload": mode, "preload_applied": applied, "preload_call": entry.get("preload_call"),
            "steps": proc.steps, "fixed_by_preload": fixed_by_preload, "libraries": libraries[:MAX_REPORTED],
            "missing": missing[:MAX_REPORTED], "unmet_versions": unmet,
            "unrecorded": sorted(set(proc.loader.unrecorded + list(getattr(view, "unrecorded", []) or [])))[:20]}


# -- does the copy that loads serve the build? ------------------------------------------------------------------------

_FAMILIES: Dict[Tuple[int, str], Tuple[Any, Optional[Mapping[str, Any]]]] = {}


def _family(matrix: Any, soname: str) -> Optional[Mapping[str, Any]]:
    """The library family of a soname (the matrix's fnmatch over every family), remembered per matrix object."""
    if matrix is None or not hasattr(matrix, "library_family"):
        return None
    key = (id(matrix), soname)
    hit = _FAMILIES.get(key)
    if hit is None or hit[0] is not matrix:  # (an id reused by another matrix is not a hit)
        if len(_FAMILIES) > 4096:
            _FAMILIES.clear()
        hit = _FAMILIES[key] = (matrix, matrix.library_family(soname))
    return hit[1]


def _schemes(copy: Mapping[str, Any]) -> Dict[str, str]:
    """The versions a copy carries, by numbering scheme: its wheel's package version, the version in its file name,
    a header's — each as the probe recorded it."""
    out: Dict[str, str] = {}
    if copy.get("wheel_version"):
        out["wheel"] = str(copy["wheel_version"])
    source = str(copy.get("version_source") or "")
    if copy.get("version"):
        if source.startswith("file name"):
            out["file"] = str(copy["version"])
        elif source.startswith("header"):
            out["header"] = str(copy["version"])
        elif source.startswith("wheel") and "wheel" not in out:
            out["wheel"] = str(copy["version"])
        elif not source:  # a prediction recorded without its source (hand-written or early facts): like with like
            out["recorded"] = str(copy["version"])
    return out


def comparable(family: Optional[Mapping[str, Any]], loaded: Mapping[str, Any], own: Mapping[str, Any]
               ) -> Optional[Tuple[str, str, str]]:
    """(scheme, loaded version, own version) in one numbering scheme both copies carry — or None. Without the
    family's data only like is compared with like (a file's version with a file's, a package's with a package's);
    the family's ``numbering`` lists the sources that share one numbering (cuDNN's wheel, file name and header all
    count cuDNN's release; NVTX's file name counts NVTX's own API version, its wheel NVIDIA's CUDA component)."""
    a, b = _schemes(loaded), _schemes(own)
    for scheme in ("file", "wheel", "header", "recorded"):
        if scheme in a and scheme in b:
            return scheme, a[scheme], b[scheme]
    shared = [s for s in (family or {}).get("numbering") or [] if isinstance(s, str)]
    if shared:
        shared.append("recorded")  # a prediction recorded without its source counted the family's own numbering
    for x in shared:
        for y in shared:
            if x in a and y in b:
                return f"{x}/{y}", a[x], b[y]
    return None


def _cmp(a: str, b: str) -> Optional[int]:
    ra, rb = versions.release(a.replace("-", ".")), versions.release(b.replace("-", "."))
    if not ra or not rb:
        return None
    n = min(len(ra), len(rb), 3)
    return (ra[:n] > rb[:n]) - (ra[:n] < rb[:n])


def serves(lib: Mapping[str, Any], consumer: Mapping[str, Any], matrix: Any,
           unmet: Sequence[Mapping[str, Any]] = (), seen: Optional[Mapping[str, Any]] = None,
           loaded: Sequence[str] = ()) -> Dict[str, Any]:
    """Whether the copy of a library that loads serves the consumer's build, from what the loader and the library
    need (docs/frameworks.md, "How a copy is judged to serve a build"):

    - ``own``: the environment's own copy (or the only one there is);
    - ``fails``: the loader refuses it (a symbol version it needs is not defined), it belongs to another CUDA major,
      or the library family's runtime rule refuses it (cuDNN: torch wants the same major and a minor not below the
      one it was built with);
    - ``older``: an older copy than the environment's own, in one numbering scheme, of a family whose rule does not
      promise that (it may lack symbols the build uses: a careful engineer fixes it);
    - ``serves``: another copy whose soname and symbol versions meet the needs, not older in a shared numbering, or
      in numbering schemes that cannot be compared;
    - ``unknown``: nothing decides (no versions) — never a failure.
    ``seen``: --deep saw this copy mapped after a successful import (ld.so resolved every symbol: RTLD_NOW)."""
    family = _family(matrix, str(lib.get("soname") or ""))
    source = (family or {}).get("source")
    rule = (family or {}).get("rule")
    mine = [u for u in unmet if u.get("file") == lib.get("soname") or u.get("provider") == lib.get("path")]
    if mine:
        return {"verdict": "fails", "reason": f"{mine[0].get('object')} needs symbol version {mine[0].get('version')}, "
                                              f"which this copy does not define", "rule": "DT_VERNEED"}
    major = consumer.get("cuda_major")
    lib_major = lib.get("cuda_major")
    if isinstance(major, int) and isinstance(lib_major, int) and major != lib_major:
        return {"verdict": "fails", "reason": f"a CUDA {lib_major} copy for a CUDA {major} build", "rule": "cuda-major"}
    own = lib.get("env_copy")
    build = _build_version(family, consumer, matrix, own if isinstance(own, Mapping) else None)
    if build and rule == "cudnn-minor":
        have = _schemes(lib)
        loaded_v = have.get("file") or have.get("header") or have.get("wheel") or have.get("recorded")
        if loaded_v:
            ra, rb = versions.release(loaded_v), versions.release(build)
            if ra and rb and (ra[0] != rb[0] or ra[1:2] < rb[1:2]):
                return {"verdict": "fails", "rule": "cudnn-minor", "source": source,
                        "reason": f"cuDNN {loaded_v} loads for a build made with cuDNN {build}: the framework wants "
                                  f"the same major and a minor not below the build's"}
    if not isinstance(own, Mapping) or not own.get("path"):
        return {"verdict": "own", "reason": "the environment's own copy" if lib.get("wheel") else "the only copy found"}
    if seen and seen.get("imported"):
        return {"verdict": "serves", "rule": "--deep",
                "reason": "--deep imported it with this copy mapped (ld.so resolved every symbol)"}
    pair = comparable(family, lib, own)
    if pair is None:
        if _schemes(lib) and _schemes(own):
            return {"verdict": "serves", "rule": "abi", "source": source,
                    "reason": "the versions are in different numbering schemes "
                              f"({_describe(lib)} against {_describe(own)}); the soname and the symbol versions the "
                              f"build needs are there"}
        return {"verdict": "unknown", "rule": "abi",
                "reason": "no version to compare; the soname and the symbol versions the build needs are there"}
    scheme, a, b = pair
    order = _cmp(a, b)
    if order is None:
        return {"verdict": "unknown", "rule": scheme, "reason": f"{a} and {b} are not comparable versions"}
    if order == 0:
        return {"verdict": "serves", "rule": scheme, "reason": f"the same version ({a}) as the environment's own"}
    if order > 0:
        return {"verdict": "serves", "rule": rule or scheme, "source": source,
                "reason": f"newer ({a}) than the environment's own ({b}), same soname: it serves the build"}
    if rule == "soname":
        return {"verdict": "serves", "rule": "soname", "source": source,
                "reason": f"older ({a} against {b}), but any copy of this soname serves (the family's rule)"}
    users = [n for n in (family or {}).get("needed_minor_by") or [] if any(fnmatch.fnmatchcase(x, n) for x in loaded)]
    if users and versions.release(a)[:2] < versions.release(b)[:2]:
        return {"verdict": "fails", "rule": "nvjitlink", "source": source,
                "reason": f"older ({a}) than the environment's own ({b}), and {users[0].split('.so')[0]} in the same "
                          f"process needs the nvJitLink of its own CUDA minor or newer ('undefined symbol: "
                          f"__nvJitLinkComplete_...')"}
    return {"verdict": "older", "rule": rule or scheme, "source": source,
            "reason": f"older ({a}) than the environment's own ({b}): it may lack symbols the build uses"}


def _describe(copy: Mapping[str, Any]) -> str:
    s = _schemes(copy)
    return ", ".join(f"{k} {v}" for k, v in s.items()) or "no version"


def _build_version(family: Optional[Mapping[str, Any]], consumer: Mapping[str, Any], matrix: Any,
                   own: Optional[Mapping[str, Any]]) -> Optional[str]:
    """The cuDNN the consumer was built with: its build information, the matrix's entry for its release, or the
    environment's own wheel (pip installed the one the framework pins: torch's Requires-Dist nvidia-cudnn-cu12==)."""
    if not family or family.get("rule") != "cudnn-minor":
        return None
    build: Mapping[str, Any] = consumer["build"] if isinstance(consumer.get("build"), Mapping) else {}
    if build.get("cudnn"):
        return str(build["cudnn"])
    if consumer.get("distribution") == "torch" and matrix is not None and hasattr(matrix, "torch_variant"):
        cuda = (build or {}).get("cuda")
        variant = matrix.torch_variant(str(consumer.get("version") or ""), cuda) if cuda else None
        if variant and variant.get("cudnn"):
            return str(variant["cudnn"])
    if own:
        schemes = _schemes(own)
        return schemes.get("wheel") or schemes.get("file") or schemes.get("header") or schemes.get("recorded")
    return None


# -- the model of a whole report --------------------------------------------------------------------------------------

def _deep_truth(env: Mapping[str, Any], consumer: Mapping[str, Any]) -> Dict[str, Any]:
    """What --deep saw for this consumer: mapped CUDA files, steps and their errors."""
    deep = (env.get("deep_consumers") or {}).get(consumer.get("distribution")) if isinstance(
        env.get("deep_consumers"), Mapping) else None
    mapped: List[str] = []
    steps: List[Mapping[str, Any]] = []
    if isinstance(deep, Mapping):
        mapped = [m for m in deep.get("mapped_cuda") or [] if isinstance(m, str)]
        steps = [s for s in deep.get("steps") or [] if isinstance(s, Mapping)]
    imported = bool(steps) and not any(s.get("error") for s in steps)
    if consumer.get("distribution") == "torch" and isinstance(env.get("deep"), Mapping):
        d = env["deep"]
        mapped = mapped or [m for m in d.get("mapped") or [] if isinstance(m, str)]
        imported = imported or (bool(d.get("mapped")) and not d.get("import_error"))
    return {"mapped": mapped, "steps": steps, "imported": imported, "ran": isinstance(deep, Mapping) or (
        consumer.get("distribution") == "torch" and isinstance(env.get("deep"), Mapping) and bool(env["deep"]))}


def _stem(name: str) -> str:
    return posixpath.basename(name).split(".so")[0]


def _apply_truth(result: Dict[str, Any], truth: Mapping[str, Any]) -> None:
    """--deep wins over the prediction: the file really mapped for a library, what really failed to load."""
    mapped = {_stem(m): m for m in truth.get("mapped") or []}
    for lib in result["libraries"]:
        real = mapped.get(_stem(lib["soname"]))
        if real and real != lib["path"]:
            lib["predicted"] = {"path": lib["path"], "via": lib["via"]}
            if lib.get("wheel") and not lib.get("env_copy"):  # the prediction was the environment's own copy
                lib["env_copy"] = {"path": lib["path"], "version": lib.get("version"),
                                   "version_source": lib.get("version_source"), "wheel": lib.get("wheel"),
                                   "wheel_version": lib.get("wheel_version")}
            lib["path"], lib["via"], lib["wheel"] = real, "seen in /proc/self/maps (--deep)", None
            if lib.get("env_copy") and lib["env_copy"].get("path") == real:
                lib["wheel"] = lib["env_copy"].get("wheel") or "the environment's own"
                lib.pop("env_copy")
            m = re.search(r"\.so\.(\d+\.\d+(?:\.\d+)*)$", posixpath.basename(real))
            lib["version"], lib["version_source"] = (m.group(1), f"file name {posixpath.basename(real)}") if m \
                else (None, "seen loaded (--deep)")
            lib["wheel_version"] = None
        elif real:
            lib["seen"] = True
    differences: List[str] = []
    import_errors: List[str] = []
    undefined: List[str] = []
    missing = list(result["missing"])
    for step in truth.get("steps") or []:
        name, error, lost = step.get("name"), step.get("error"), step.get("missing")
        if step.get("kind") == "import":
            if error:
                import_errors.append(f"import {name}: {error}")
            continue
        key = "needed_by" if step.get("kind") == "object" else "soname"
        predicted = [m for m in missing if _same_object(m.get(key), name, key) and not m.get("optional")]
        if not error and predicted:
            missing = [m for m in missing if m not in predicted]
            differences.append(f"{name} loaded in the real import although {', '.join(m['soname'] for m in predicted)}"
                               f" was predicted missing")
        elif error and "undefined symbol" in str(error):
            undefined.append(f"{name}: {error}")
        elif lost and lost not in DRIVER_LIBRARIES and not any(m["soname"] == lost for m in missing):
            missing.append({"soname": lost, "needed_by": name if key == "needed_by" else None, "optional": False,
                            "how": "seen by --deep", "looked_in": [], "in_wheels": None})
            differences.append(f"{name}: the real loader could not find {lost} (not predicted)")
    if truth.get("imported"):
        # the import succeeded: nothing it needed at import was missing (ld.so loads with RTLD_NOW)
        before = len(missing)
        missing = [m for m in missing if m.get("optional") or m.get("how") == "dlopen"]
        if len(missing) < before:
            differences.append("the real import succeeded: libraries predicted missing at load were found")
    result["missing"] = missing
    result["truth"] = {"differences": differences, "import_errors": import_errors, "undefined_symbols": undefined,
                       "mapped": list(truth.get("mapped") or [])[:MAX_REPORTED]}


def _same_object(recorded: Any, name: Any, key: str) -> bool:
    if recorded == name:
        return True
    return key == "needed_by" and isinstance(recorded, str) and isinstance(name, str) and (
        recorded.endswith("/" + name) or name.endswith("/" + recorded))


def judge_consumer(result: Dict[str, Any], consumer: Mapping[str, Any], matrix: Any,
                   imported: bool = False) -> Dict[str, Any]:
    """Each loaded library's verdict (``serves``), from the one resolution; ``imported``: --deep's import succeeded
    (a library it saw mapped then had every symbol resolved)."""
    clean = imported and not (result.get("truth") or {}).get("undefined_symbols")
    loaded = [str(lib.get("soname")) for lib in result["libraries"]]
    for lib in result["libraries"]:
        seen = {"imported": True} if clean and (lib.get("seen") or lib.get("predicted")) else None
        lib.update(serves(lib, consumer, matrix, result.get("unmet_versions") or [], seen, loaded))
    return result


_RESULT_KEYS = ("libraries", "missing", "unmet_versions", "fixed_by_preload", "preload", "preload_applied",
                "preload_call")


def _recorded_prediction(env: Mapping[str, Any], consumer: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """Facts written before the loader inputs were recorded: the prediction the probe made then (a consumer's
    ``libraries``/``missing``; dl-doctor 0.1's torch-only ``resolution``), judged the same way."""
    if any(k in consumer for k in ("libraries", "missing", "unmet_versions")):
        out = {k: consumer.get(k) for k in _RESULT_KEYS}
        out.update(distribution=consumer.get("distribution"), version=consumer.get("version"),
                   cuda_major=consumer.get("cuda_major"), steps=[], unrecorded=[])
        out["libraries"] = [dict(lib) for lib in out.get("libraries") or [] if isinstance(lib, Mapping)]
        out["missing"] = [dict(m) for m in out.get("missing") or [] if isinstance(m, Mapping)]
        out["unmet_versions"] = [dict(u) for u in out.get("unmet_versions") or [] if isinstance(u, Mapping)]
        return out
    return None


def _legacy_torch(env: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """dl-doctor 0.1's ``resolution`` (which file each key library resolved to when torch was imported) as the torch
    consumer of the model, its own copies from ``cuda_libraries``."""
    res = env.get("resolution")
    if not isinstance(res, Mapping) or not isinstance(res.get("libraries"), Mapping):
        return None
    own_copies: Mapping[str, Any] = env["cuda_libraries"] if isinstance(env.get("cuda_libraries"), Mapping) else {}
    torch = ((env.get("frameworks") or {}).get("torch") or {}) if isinstance(env.get("frameworks"), Mapping) else {}
    major = str(torch.get("cuda") or "").split(".")[0]
    libraries = []
    for key, lib in res["libraries"].items():
        if not isinstance(lib, Mapping) or not lib.get("path"):
            continue
        row = {"soname": lib.get("soname") or f"lib{key}.so", "path": lib["path"], "via": lib.get("via"),
               "version": lib.get("version"), "version_source": lib.get("version_source"), "wheel": None,
               "cuda_major": None, "requested_by": lib.get("requested_by")}
        own = [c for c in own_copies.get(key) or [] if isinstance(c, Mapping)]
        if own and lib["path"] in {c.get("path") for c in own}:
            row["wheel"] = "the environment's own"
        elif own:
            row["env_copy"] = {"path": own[0].get("path"), "version": own[0].get("version"),
                               "version_source": own[0].get("version_source")}
        libraries.append(row)
    missing = [{"soname": m[0], "needed_by": m[1] if len(m) > 1 else None, "optional": False, "how": "DT_NEEDED",
                "looked_in": [], "in_wheels": None}
               for m in res.get("missing") or [] if isinstance(m, list) and m and is_cuda_library(str(m[0]))]
    return {"distribution": "torch", "version": torch.get("version"), "cuda_major": int(major) if major.isdigit()
            else None, "libraries": libraries, "missing": missing, "unmet_versions": [], "steps": res.get("steps") or [],
            "unrecorded": [], "legacy": "resolution"}


def env_model(env: Mapping[str, Any], matrix: Any) -> Optional[Dict[str, Any]]:
    """One environment's resolution, from its recorded loader inputs (or, in older facts, the prediction recorded
    then); None where the facts carry neither."""
    record = env.get("loader") if isinstance(env.get("loader"), Mapping) else None
    consumers = [c for c in env.get("consumers") or [] if isinstance(c, Mapping)]
    objects = (record or {}).get("objects") if isinstance((record or {}).get("objects"), Mapping) else {}
    out = []
    for c in consumers:
        if record is not None:
            result: Optional[Dict[str, Any]] = simulate(RecordedView(record), record, c,
                                                        (objects or {}).get(c.get("distribution")) or {}, matrix)
        else:
            result = _recorded_prediction(env, c)
        if result is None:
            continue
        truth = _deep_truth(env, c)
        if truth["ran"]:
            _apply_truth(result, truth)
        out.append(judge_consumer(result, c, matrix, imported=bool(truth["ran"] and truth["imported"])))
    if record is None and not any(c.get("distribution") == "torch" for c in consumers):
        legacy = _legacy_torch(env)
        if legacy is not None:
            torch = {"distribution": "torch", "cuda_major": legacy["cuda_major"], "version": legacy["version"]}
            truth = _deep_truth(env, torch)
            if truth["ran"]:
                _apply_truth(legacy, truth)
            out.append(judge_consumer(legacy, torch, matrix, imported=bool(truth["ran"] and truth["imported"])))
    if not out and record is None:
        return None
    return {"prefix": env.get("prefix"), "name": env.get("name"), "consumers": out}


_CACHE: List[Tuple[Any, Any, Dict[str, Any]]] = []


def model(facts: Any, matrix: Any) -> Dict[str, Any]:
    """The report's ``loading`` section: every environment's consumers, each library that loads (which file, found
    how, the candidates tried, the environment's own copy) with its verdict, what does not load, unmet symbol
    versions. Computed once per facts snapshot and matrix (checks and the report share it)."""
    data = facts.data if hasattr(facts, "data") else facts
    for snap, mat, result in _CACHE:
        if snap is data and mat is matrix:
            return result
    envs = []
    python_envs = data.get("python_envs") if isinstance(data, Mapping) else None
    for env in (python_envs or {}).get("environments") or [] if isinstance(python_envs, Mapping) else []:
        if not isinstance(env, Mapping) or env.get("error"):
            continue
        m = env_model(env, matrix)
        if m is not None:
            envs.append(m)
    result = {"version": MODEL_VERSION, "environments": envs}
    _CACHE.append((data, matrix, result))
    del _CACHE[:-4]
    return result


def consumers_of(loading: Mapping[str, Any], env: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The modelled consumers of one environment (matched by prefix)."""
    for e in loading.get("environments") or []:
        if isinstance(e, Mapping) and e.get("prefix") == env.get("prefix"):
            return [c for c in e.get("consumers") or [] if isinstance(c, dict)]
    return []


def merged(consumer: Mapping[str, Any], modelled: Mapping[str, Any]) -> Dict[str, Any]:
    """A consumer's facts with its modelled loading (what the checks and views read)."""
    out = dict(consumer)
    out.update({k: v for k, v in modelled.items() if k not in ("distribution", "version")})
    return out


def env_consumers(loading: Mapping[str, Any], env: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """Each consumer of ``env`` with its loading: from the model where the facts carry loader inputs, else the
    prediction an older facts file recorded with the consumer."""
    modelled = {c.get("distribution"): c for c in consumers_of(loading, env)}
    out = []
    for c in env.get("consumers") or []:
        if isinstance(c, Mapping):
            m = modelled.pop(c.get("distribution"), None)
            out.append(merged(c, m) if m is not None else dict(c))
    out += [dict(m) for m in modelled.values()]  # dl-doctor 0.1's torch resolution, with no consumer facts
    return out

