"""Which file the dynamic loader would load: glibc's search order, simulated from files.

For each DT_NEEDED name, breadth-first in load order (a soname already loaded is reused):

1. a name containing '/' is a path;
2. if the requesting object has no DT_RUNPATH: the DT_RPATH of the requesting object, then of each
   object in its loader chain (each only if that object has no DT_RUNPATH), then the executable's;
3. LD_LIBRARY_PATH;
4. the requesting object's DT_RUNPATH (only its own; not inherited);
5. /etc/ld.so.cache (or, without one, the ld.so.conf directories in order);
6. the default directories.

``$ORIGIN`` expands to the directory of the object that carries the tag. Objects loaded by
absolute path first (a framework's own preloading, LD_PRELOAD) take their soname before any
search happens. Everything reads through the Host, so it works under --sysroot.
"""

from __future__ import annotations

import posixpath
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from dl_doctor.readers.elf import read_dynamic
from dl_doctor.host import Host

CACHE_MAGIC_NEW = b"glibc-ld.so.cache1.1"
FLAG_X8664_LIB64 = 0x0303
FLAG_AARCH64_LIB64 = 0x0a03
# Per ELF machine: the ld.so.cache flags of its entries, the default directories (with the Debian multiarch ones),
# and what $PLATFORM expands to. x86_64 and aarch64 (Grace hosts) are the DL machines.
MACHINE_LAYOUT = {
    "EM_X86_64": (FLAG_X8664_LIB64, ("/lib64", "/usr/lib64", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
                                     "/lib", "/usr/lib"), "x86_64"),
    "EM_AARCH64": (FLAG_AARCH64_LIB64, ("/lib64", "/usr/lib64", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                                        "/lib", "/usr/lib"), "aarch64"),
}
DEFAULT_DIRS = MACHINE_LAYOUT["EM_X86_64"][1]


def parse_ld_so_cache(data: bytes, machine_flags: Optional[int] = FLAG_X8664_LIB64) -> Optional[List[Tuple[str, str]]]:
    """(soname, path) entries of an ``ld.so.cache`` in file order; None when it cannot be parsed."""
    start = data.find(CACHE_MAGIC_NEW)
    if start < 0 or len(data) < start + 48:
        return None
    nlibs, len_strings = struct.unpack_from("<II", data, start + 20)
    entries_at = start + 48
    if entries_at + nlibs * 24 > len(data):
        return None
    out: List[Tuple[str, str]] = []
    for i in range(nlibs):
        flags, key, value, _osv, _hwcap = struct.unpack_from("<iIIIQ", data, entries_at + i * 24)
        if machine_flags is not None and flags != machine_flags:
            continue
        try:
            k = data[start + key:data.index(b"\0", start + key)].decode()
            v = data[start + value:data.index(b"\0", start + value)].decode()
        except (ValueError, UnicodeDecodeError):
            return None
        out.append((k, v))
    return out


def ld_so_conf_dirs(host: Host, path: str = "/etc/ld.so.conf", depth: int = 0) -> List[str]:
    """Directories from ld.so.conf and its ``include`` globs, in order."""
    text = host.try_read(path, 1 << 20)
    if text is None or depth > 5:
        return []
    dirs: List[str] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("include "):
            pattern = line.split(None, 1)[1].strip()
            if not pattern.startswith("/"):
                pattern = posixpath.join(posixpath.dirname(path), pattern)
            for inc in host.glob(pattern):
                dirs += ld_so_conf_dirs(host, inc, depth + 1)
        elif line.startswith("/"):
            dirs.append(line.rstrip("/"))
    return list(dict.fromkeys(dirs))


def expand(entry: str, origin: str, platform: str = "x86_64") -> str:
    out = entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)
    out = out.replace("${LIB}", "lib64").replace("$LIB", "lib64")
    out = out.replace("${PLATFORM}", platform).replace("$PLATFORM", platform)
    return posixpath.normpath(out) if out.startswith("/") else out


@dataclass
class LoadedObject:
    path: str
    soname: str
    via: str
    requested_by: Optional[str]
    dynamic: Dict


@dataclass
class Loader:
    """Simulates one process's loads. ``executable`` is the program (its RPATH counts; it is not 'loaded' here)."""

    host: Host
    ld_library_path: Sequence[str] = ()
    executable: Optional[str] = None
    machine: str = "EM_X86_64"  # objects of another machine are skipped while searching, as ld.so does
    objects: List[LoadedObject] = field(default_factory=list)
    by_soname: Dict[str, LoadedObject] = field(default_factory=dict)
    missing: List[Tuple[str, str]] = field(default_factory=list)
    _cache: Optional[List[Tuple[str, str]]] = None
    _conf: Optional[List[str]] = None
    _dyn: Dict[str, Optional[Dict]] = field(default_factory=dict)
    _chain: Dict[str, List[str]] = field(default_factory=dict)

    def _dynamic(self, path: str) -> Optional[Dict]:
        if path not in self._dyn:
            self._dyn[path] = read_dynamic(self.host, path)
        return self._dyn[path]

    def _real(self, path: str) -> str:
        try:
            return self.host.tree_path(path)
        except OSError:
            return path

    def cache(self) -> List[Tuple[str, str]]:
        if self._cache is None:
            shared = getattr(self.host, "_ld_cache_entries_" + self.machine, None)
            if shared is not None:  # parsed once per host, not once per simulated process
                self._cache = shared
                return shared
            raw = None
            try:
                raw = self.host.read_bytes("/etc/ld.so.cache", 64 << 20)
            except OSError:
                raw = None
            flags = MACHINE_LAYOUT.get(self.machine, MACHINE_LAYOUT["EM_X86_64"])[0]
            parsed = parse_ld_so_cache(raw, flags) if raw else None
            if parsed is None:  # no cache (or unreadable): what ldconfig would have built
                parsed = []
                for d in ld_so_conf_dirs(self.host):
                    for name in self.host.listdir(d):
                        if ".so" in name:
                            parsed.append((name, f"{d}/{name}"))
            self._cache = parsed
            try:
                setattr(self.host, "_ld_cache_entries_" + self.machine, parsed)
            except AttributeError:
                pass
        return self._cache

    @property
    def platform(self) -> str:
        return MACHINE_LAYOUT.get(self.machine, MACHINE_LAYOUT["EM_X86_64"])[2]

    @property
    def default_dirs(self) -> Sequence[str]:
        return MACHINE_LAYOUT.get(self.machine, MACHINE_LAYOUT["EM_X86_64"])[1]

    def _usable(self, candidate: str) -> bool:
        if not self.host.is_file(candidate):
            return False
        dyn = self._dynamic(candidate)
        return dyn is not None and dyn.get("machine") in (self.machine, None)

    def _search_dirs(self, name: str, dirs: Iterable[str], origin_of: str) -> Optional[str]:
        for d in dirs:
            d = expand(d, posixpath.dirname(origin_of), self.platform)
            candidate = posixpath.join(d, name)
            if self._usable(candidate):
                return candidate
        return None

    def search_order(self, requester: Optional[str]) -> List[str]:
        """Where the loader looks for a name needed by ``requester``, in order (for a report's 'looked in')."""
        dyn = self._dynamic(requester) if requester else None
        out: List[str] = []
        if not (dyn and dyn["runpath"]):
            for obj in ([requester] if requester else []) + self._chain.get(requester or "", []) + \
                    ([self.executable] if self.executable else []):
                d = self._dynamic(obj)
                if d and d["rpath"] and not d["runpath"]:
                    out += [f"{expand(e, posixpath.dirname(obj), self.platform)} (RPATH)" for e in d["rpath"]]
        out += [f"{d} (LD_LIBRARY_PATH)" for d in self.ld_library_path]
        if dyn and requester and dyn["runpath"]:  # (dyn is only set for a requester)
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
        if "/" in name:
            return (name if self._usable(name) else None), "path"
        dyn = self._dynamic(requester) if requester else None
        if not (dyn and dyn["runpath"]):
            chain = ([requester] if requester else []) + self._chain.get(requester or "", [])
            for obj in chain:
                d = self._dynamic(obj)
                if d and d["rpath"] and not d["runpath"]:
                    hit = self._search_dirs(name, d["rpath"], obj)
                    if hit:
                        return hit, f"RPATH of {obj}"
            if self.executable:
                d = self._dynamic(self.executable)
                if d and d["rpath"] and not d["runpath"]:
                    hit = self._search_dirs(name, d["rpath"], self.executable)
                    if hit:
                        return hit, f"RPATH of {self.executable}"
        hit = self._search_dirs(name, self.ld_library_path, requester or "/")
        if hit:
            return hit, "LD_LIBRARY_PATH"
        if dyn and requester and dyn["runpath"]:  # (dyn is only set for a requester)
            hit = self._search_dirs(name, dyn["runpath"], requester)
            if hit:
                return hit, f"RUNPATH of {requester}"
        for soname, path in self.cache():
            if soname == name and self._usable(path):
                return path, "ld.so.cache"
        hit = self._search_dirs(name, self.default_dirs, "/")
        if hit:
            return hit, "default directories"
        return None, "not found"

    def load(self, path: str, via: str = "dlopen", loader: Optional[str] = None) -> Optional[LoadedObject]:
        """Load an object by path (dlopen/ctypes.CDLL/LD_PRELOAD) and its dependencies, breadth-first."""
        real = self._real(path)
        existing = next((o for o in self.objects if o.path == real), None)
        if existing:
            return existing
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
                    self.missing.append((needed, obj.path))
                    continue
                child = self._add(self._real(found), how, obj.path)
                if child is not None:
                    queue.append(child)
        return root

    def _add(self, path: str, via: str, loader: Optional[str]) -> Optional[LoadedObject]:
        existing = next((o for o in self.objects if o.path == path), None)
        if existing:
            return existing
        dyn = self._dynamic(path)
        if dyn is None:
            return None
        soname = dyn["soname"] or posixpath.basename(path)
        obj = LoadedObject(path=path, soname=soname, via=via, requested_by=loader, dynamic=dyn)
        self.objects.append(obj)
        self.by_soname.setdefault(soname, obj)  # the first object with a soname answers later lookups
        self.by_soname.setdefault(posixpath.basename(path), obj)
        self._chain[path] = ([loader] + self._chain.get(loader, [])) if loader else []
        return obj
