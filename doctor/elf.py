"""ELF dynamic sections (SONAME, DT_NEEDED, DT_RPATH, DT_RUNPATH) through pyelftools.

pyelftools handles 32/64-bit, both byte orders and the string tables; a hand-written reader
would have to. Only the PT_DYNAMIC segment is parsed (not every section header), and results
are cached per file identity (device, inode, size, mtime): conda environments hard-link the
same libraries from their package cache, so many environments share one parse. Files are
opened through the Host, so sysroot confinement holds.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Tuple

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSegment
from elftools.elf.elffile import ELFFile

from dl_doctor.host import Host

_CACHE: Dict[Tuple[int, int, int, int], Optional[Dict[str, Any]]] = {}
_LOCK = threading.Lock()


def _split(value: str) -> List[str]:
    return [p for p in value.split(":") if p]


# Real libraries have tens of dynamic tags (libtorch_cuda.so: ~60); a crafted file can claim millions.
MAX_DYNAMIC_TAGS = 4096
MAX_SEGMENTS = 4096


def _parse(fh) -> Optional[Dict[str, Any]]:
    elf = ELFFile(fh)
    out: Dict[str, Any] = {"soname": None, "needed": [], "rpath": [], "runpath": [], "machine": elf["e_machine"]}
    for n, segment in enumerate(elf.iter_segments()):
        if n >= MAX_SEGMENTS:
            break
        if not isinstance(segment, DynamicSegment):
            continue
        for count, tag in enumerate(segment.iter_tags()):
            if count >= MAX_DYNAMIC_TAGS:
                out["truncated"] = f"more than {MAX_DYNAMIC_TAGS} dynamic tags; the rest were not read"
                break
            kind = tag.entry.d_tag
            if kind == "DT_NEEDED":
                out["needed"].append(tag.needed)
            elif kind == "DT_SONAME":
                out["soname"] = tag.soname
            elif kind == "DT_RPATH":
                out["rpath"] += _split(tag.rpath)
            elif kind == "DT_RUNPATH":
                out["runpath"] += _split(tag.runpath)
        break
    return out


def read_dynamic(host: Host, path: str) -> Optional[Dict[str, Any]]:
    """``{"soname", "needed", "rpath", "runpath", "machine"}`` of an ELF file, or None if it is not one."""
    try:
        st = host.stat(path)
    except OSError:
        return None
    key = (st.st_dev, st.st_ino, st.st_size, int(st.st_mtime))
    # One lock around look-up and parse: parsing is CPU-bound under the GIL anyway, and threads
    # inspecting environments that share files then wait for one parse instead of repeating it.
    with _LOCK:
        if key not in _CACHE:
            try:
                with host.open_binary(path) as fh:
                    if fh.read(4) != b"\x7fELF":
                        _CACHE[key] = None
                    else:
                        fh.seek(0)
                        _CACHE[key] = _parse(fh)
            except Exception:  # noqa: BLE001 - a malformed ELF is "not an ELF we can read", never a crash
                return None
        hit = _CACHE[key]
    return None if hit is None else {k: (list(v) if isinstance(v, list) else v) for k, v in hit.items()}
