"""ELF dynamic sections (SONAME, DT_NEEDED, DT_RPATH, DT_RUNPATH), read with struct.

Only what the dynamic loader reads is parsed: the program headers, the PT_DYNAMIC segment and its string table
(32/64-bit, both byte orders). This replaced pyelftools, whose import alone cost ~70 ms of every run that resolves
libraries and whose parse cost ~3 ms per library; tests/test_elf_reader.py holds the two readers to the same answers
on every ELF file of the test environments and of /usr/lib. Results
are cached per file identity (device, inode, size, mtime): conda environments hard-link the
same libraries from their package cache, so many environments share one parse. Files are
opened through the Host, so sysroot confinement holds.
"""

from __future__ import annotations

import struct
from typing import Any, Dict, List, Optional, Tuple

from dl_doctor.host import Host



def _split(value: str) -> List[str]:
    return [p for p in value.split(":") if p]


# Real libraries have tens of dynamic tags (libtorch_cuda.so: ~60); a crafted file can claim millions.
MAX_DYNAMIC_TAGS = 4096
MAX_SEGMENTS = 4096


PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 14, 15, 29
MAX_STRTAB = 64 << 20
# e_machine numbers as pyelftools (and readelf) name them
MACHINES = {3: "EM_386", 8: "EM_MIPS", 20: "EM_PPC", 21: "EM_PPC64", 22: "EM_S390", 40: "EM_ARM", 62: "EM_X86_64",
            183: "EM_AARCH64", 243: "EM_RISCV", 258: "EM_LOONGARCH"}


def _parse(fh) -> Optional[Dict[str, Any]]:
    """SONAME, DT_NEEDED, DT_RPATH, DT_RUNPATH and the machine from the PT_DYNAMIC segment.

    Read with struct: the ELF header, the program headers (at most MAX_SEGMENTS), the first PT_DYNAMIC segment (at
    most MAX_DYNAMIC_TAGS entries) and its string table, located through the PT_LOAD segment that maps DT_STRTAB —
    what ld.so itself reads. 32/64-bit, either byte order.
    """
    ident = fh.read(16)
    if len(ident) < 16 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) or ident[5] not in (1, 2):
        return None
    wide = ident[4] == 2
    order = "<" if ident[5] == 1 else ">"
    if wide:
        head = struct.unpack(order + "HHIQQQIHHHHHH", fh.read(48))
        _, machine, _, _, phoff, _, _, _, phentsize, phnum, _, _, _ = head
        ph_fmt, dyn_fmt = order + "IIQQQQQQ", order + "qQ"
    else:
        head = struct.unpack(order + "HHIIIIIHHHHHH", fh.read(36))
        _, machine, _, _, phoff, _, _, _, phentsize, phnum, _, _, _ = head
        ph_fmt, dyn_fmt = order + "IIIIIIII", order + "iI"
    ph_size, dyn_size = struct.calcsize(ph_fmt), struct.calcsize(dyn_fmt)
    out: Dict[str, Any] = {"soname": None, "needed": [], "rpath": [], "runpath": [],
                           "machine": MACHINES.get(machine, machine)}
    if phentsize < ph_size:
        return out
    loads: List[Tuple[int, int, int]] = []  # (vaddr, offset, filesz)
    dynamic: Optional[Tuple[int, int]] = None
    fh.seek(phoff)
    table = fh.read(phentsize * min(phnum, MAX_SEGMENTS))
    for n in range(len(table) // phentsize):
        fields = struct.unpack_from(ph_fmt, table, n * phentsize)
        if wide:
            p_type, _, p_offset, p_vaddr, _, p_filesz = fields[:6]
        else:
            p_type, p_offset, p_vaddr, _, p_filesz = fields[:5]
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == PT_DYNAMIC and dynamic is None:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return out
    fh.seek(dynamic[0])
    count = min(dynamic[1] // dyn_size, MAX_DYNAMIC_TAGS + 1)
    raw = fh.read(count * dyn_size)
    tags: List[Tuple[int, int]] = []
    for n in range(len(raw) // dyn_size):
        tag, value = struct.unpack_from(dyn_fmt, raw, n * dyn_size)
        if tag == DT_NULL:
            break
        if n >= MAX_DYNAMIC_TAGS:
            out["truncated"] = f"more than {MAX_DYNAMIC_TAGS} dynamic tags; the rest were not read"
            break
        tags.append((tag, value))
    strtab = next((v for t, v in tags if t == DT_STRTAB), None)
    strsz = next((v for t, v in tags if t == DT_STRSZ), None)
    offset = next((off + strtab - vaddr for vaddr, off, size in loads
                   if strtab is not None and vaddr <= strtab < vaddr + size), None)
    if offset is None:
        return out
    fh.seek(offset)
    strings = fh.read(min(strsz or MAX_STRTAB, MAX_STRTAB))

    def string(index: int) -> str:
        end = strings.find(b"\0", index)
        return strings[index:end if end >= 0 else len(strings)].decode("utf-8", "surrogateescape")

    for tag, value in tags:
        if value >= len(strings):
            continue
        if tag == DT_NEEDED:
            out["needed"].append(string(value))
        elif tag == DT_SONAME:
            out["soname"] = string(value)
        elif tag == DT_RPATH:
            out["rpath"] += _split(string(value))
        elif tag == DT_RUNPATH:
            out["runpath"] += _split(string(value))
    return out


def _read(host: Host, path: str) -> Optional[Dict[str, Any]]:
    try:
        with host.open_binary(path) as fh:
            return _parse(fh)
    except Exception:  # noqa: BLE001 - a malformed ELF is "not an ELF we can read", never a crash
        return None


def read_dynamic(host: Host, path: str) -> Optional[Dict[str, Any]]:
    """``{"soname", "needed", "rpath", "runpath", "machine"}`` of an ELF file, or None if it is not one.

    Parsed once per file identity (device, inode, size, mtime) and run: conda environments hard-link the same
    libraries from their package cache, so many environments share one parse; the cache lives on the Host.
    """
    try:
        st = host.stat(path)
    except OSError:
        return None
    key = ("elf", st.st_dev, st.st_ino, st.st_size, int(st.st_mtime))
    hit = host.cached(key, lambda: _read(host, path))
    return None if hit is None else {k: (list(v) if isinstance(v, list) else v) for k, v in hit.items()}
