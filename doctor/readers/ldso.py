"""What the dynamic loader reads on a machine: ld.so.cache, ld.so.conf, and every file the search looks at.

glibc's search itself is simulated by dl_doctor.facts.loading.Loader, a pure function of what it asks; this module
answers those questions from the Host (``HostView``) and records every answer, so that the probe's facts carry the
raw loader inputs and the judging side replays the same search on them (one resolution, computed from facts).

Everything reads through the Host, so it works under --sysroot.
"""

from __future__ import annotations

import posixpath
import struct
from typing import Any, Dict, List, Optional, Sequence, Tuple

from dl_doctor.facts.loading import DEFAULT_DIRS, Loader as _Loader, expand  # noqa: F401 (re-exported)
from dl_doctor.readers.elf import read_dynamic
from dl_doctor.host import Host

CACHE_MAGIC_NEW = b"glibc-ld.so.cache1.1"
FLAG_X8664_LIB64 = 0x0303
FLAG_AARCH64_LIB64 = 0x0a03
# Per ELF machine: the ld.so.cache flags of its entries, the default directories (with the Debian multiarch ones),
# and what $PLATFORM expands to. x86_64 and aarch64 (Grace hosts) are the DL machines.
MACHINE_LAYOUT = {"EM_X86_64": (FLAG_X8664_LIB64,), "EM_AARCH64": (FLAG_AARCH64_LIB64,)}


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




class HostView:
    """The loader's questions answered from the Host, each answer recorded (``record()``) for the facts."""

    def __init__(self, host: Host, owned: Optional[Dict[str, Tuple[str, str]]] = None, machine: str = "EM_X86_64",
                 version_of: Any = None):
        self.host = host
        self.owned = owned or {}
        self.machine = machine
        self.version_of = version_of
        self.files: Dict[str, Any] = {}
        self.links: Dict[str, str] = {}
        self.cache_hits: Dict[str, List[str]] = {}
        self.globs: Dict[str, List[str]] = {}
        self.versions: Dict[str, List[Any]] = {}
        self.owners: Dict[str, List[str]] = {}
        self.searched: List[str] = []
        self._present: Dict[str, bool] = {}
        self._dyn: Dict[str, Optional[Dict[str, Any]]] = {}

    def note_search(self, name: str) -> None:
        if name not in self.searched:
            self.searched.append(name)

    def real(self, path: str) -> str:
        try:
            real = self.host.tree_path(path)
        except OSError:
            real = path
        if real != path:
            self.links[path] = real
        return real

    def is_file(self, path: str) -> bool:
        if path not in self._present:
            self._present[path] = self.host.is_file(path)
            if self._present[path]:
                self.files.setdefault(path, {})
        return self._present[path]

    def dynamic(self, path: str) -> Optional[Dict[str, Any]]:
        if path not in self._dyn:
            dyn = read_dynamic(self.host, path)
            self._dyn[path] = dyn
            if dyn is not None:
                self.files[path] = {k: dyn.get(k) for k in ("soname", "needed", "rpath", "runpath", "machine",
                                                              "verneed", "verdef")}
        dyn = self._dyn[path]
        return None if dyn is None else {k: (list(v) if isinstance(v, list) else v) for k, v in dyn.items()}

    def _cache_entries(self) -> List[Tuple[str, str]]:
        key = "_ld_cache_entries_" + self.machine
        shared = getattr(self.host, key, None)
        if shared is not None:  # parsed once per host, not once per simulated process
            return shared
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
        try:
            setattr(self.host, key, parsed)
        except AttributeError:
            pass
        return parsed

    def cache_lookup(self, name: str) -> List[str]:
        if name not in self.cache_hits:
            self.cache_hits[name] = [p for s, p in self._cache_entries() if s == name][:8]
        return list(self.cache_hits[name])

    def glob(self, pattern: str) -> List[str]:
        if pattern not in self.globs:
            self.globs[pattern] = sorted(self.host.glob(pattern))[:16]
            for hit in self.globs[pattern]:
                self.is_file(hit)
        return list(self.globs[pattern])

    def version(self, path: str) -> Tuple[Optional[str], str]:
        if path not in self.versions:
            v = self.version_of(self.host, path, self.owned) if self.version_of else (None, "unknown")
            self.versions[path] = [v[0], v[1]]
        got = self.versions[path]
        return got[0], got[1]

    def owner(self, path: str) -> Optional[Tuple[str, str]]:
        hit = self.owned.get(path)
        if hit:
            self.owners[path] = [hit[0], hit[1]]
            return hit[0], hit[1]
        return None

    def was_searched(self, name: str) -> bool:
        return True

    def record(self) -> Dict[str, Any]:
        """The raw loader inputs this view was asked about (facts: ``loader``). A file's DT_VERDEF is kept only for
        the versions some recorded file needs from it (all the loader's check asks; libstdc++ defines ~60)."""
        needed: Dict[str, set] = {}
        for dyn in self.files.values():
            for file, names in (dyn.get("verneed") or {}).items():
                needed.setdefault(file, set()).update(names)
        files = {}
        for path, dyn in sorted(self.files.items()):
            if dyn.get("verdef"):
                wanted = needed.get(dyn.get("soname") or "", set()) | needed.get(path.rsplit("/", 1)[-1], set())
                # an empty list would read as 'defines no versions' (which satisfies any need): keep one
                kept = [v for v in dyn["verdef"] if v in wanted] or dyn["verdef"][:1]
                dyn = dict(dyn, verdef=kept)
            # compact: what is empty, or the host's machine, is left out (dl_doctor.facts.loading.RecordedView
            # reads a missing key as empty; ``needed`` marks an ELF object and is always kept)
            files[path] = {k: v for k, v in dyn.items() if k == "needed" or (v and not (k == "machine" and
                                                                                      v == self.machine))}
        return {"files": files, "links": dict(sorted(self.links.items())),
                "cache": dict(sorted(self.cache_hits.items())), "globs": dict(sorted(self.globs.items())),
                "versions": dict(sorted(self.versions.items())), "owners": dict(sorted(self.owners.items())),
                "searched": list(self.searched)}


def Loader(host: Host, ld_library_path: Sequence[str] = (), executable: Optional[str] = None,
           machine: str = "EM_X86_64") -> _Loader:
    """glibc's search (dl_doctor.facts.loading.Loader) over the files of ``host``."""
    return _Loader(HostView(host, machine=machine), ld_library_path=list(ld_library_path), executable=executable,
                   machine=machine)
