"""ELF dynamic sections (SONAME, DT_NEEDED, DT_RPATH, DT_RUNPATH), read with struct.

Only what the dynamic loader reads is parsed: the program headers, the PT_DYNAMIC segment and its string table
(32/64-bit, both byte orders). This replaced pyelftools, whose import alone cost ~70 ms of every run that resolves
libraries and whose parse cost ~3 ms per library; tests/probes/test_elf_reader.py holds the two readers to the same
answers on every ELF file of the test environments and of /usr/lib. Results
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
DT_VERDEF, DT_VERDEFNUM, DT_VERNEED, DT_VERNEEDNUM = 0x6FFFFFFC, 0x6FFFFFFD, 0x6FFFFFFE, 0x6FFFFFFF
VER_FLG_WEAK = 0x2
# Real objects define tens of versions (libstdc++: ~60) and need a few per library; a crafted file can claim more.
MAX_VERSION_ENTRIES = 1024
# The table is read a page at a time where a tag points (at most MAX_DYNAMIC_TAGS + MAX_VERSION_ENTRIES strings of
# at most 64 KiB each), so its declared size only bounds the indexes: TensorFlow 2.21's libtensorflow_cc holds 87 MB.
MAX_STRTAB = 1 << 30
# e_machine numbers as pyelftools (and readelf) name them
MACHINES = {3: "EM_386", 8: "EM_MIPS", 20: "EM_PPC", 21: "EM_PPC64", 22: "EM_S390", 40: "EM_ARM", 62: "EM_X86_64",
            183: "EM_AARCH64", 243: "EM_RISCV", 258: "EM_LOONGARCH"}


class _Strings:
    """The dynamic string table, read a page at a time where a string is asked for: libtorch_cpu's holds 5 MB of
    symbol names, of which the loader's tags use a few hundred bytes."""

    PAGE = 4096
    MAX_READ = 64 << 20  # a crafted file pointing every tag at a different long string costs at most this much I/O
    MAX_PAGES = 1024     # and at most this many pages (4 MiB) kept at once

    def __init__(self, fh, offset: int, size: int, strict: bool = False):
        self.fh, self.offset, self.size = fh, offset, size
        self.pages: Dict[int, bytes] = {}
        self.read = 0
        self.strict = strict  # symbol lookups: an exhausted budget is an error (unknown), not an empty name

    def _page(self, n: int) -> bytes:
        if n not in self.pages:
            if self.read >= self.MAX_READ:
                if self.strict:
                    raise ValueError("string table read budget spent")
                return b""
            if len(self.pages) >= self.MAX_PAGES:
                self.pages.clear()
            self.fh.seek(self.offset + n * self.PAGE)
            self.pages[n] = self.fh.read(max(0, min(self.PAGE, self.size - n * self.PAGE)))
            self.read += self.PAGE
        return self.pages[n]

    def get(self, index: int) -> str:
        out = b""
        n, at = divmod(index, self.PAGE)
        while n * self.PAGE < self.size and len(out) < 65536:
            page = self._page(n)
            end = page.find(b"\0", at)
            if end >= 0:
                out += page[at:end]
                break
            out += page[at:]
            if len(page) < self.PAGE:
                break
            n, at = n + 1, 0
        return out.decode("utf-8", "surrogateescape")


def _header(fh) -> Optional[Tuple[bool, str, Any, List[Tuple[int, int, int]], Optional[List[Tuple[int, int]]],
                                   Optional[str]]]:
    """(64-bit, byte order, machine, PT_LOAD segments, the dynamic tags (None: no PT_DYNAMIC), a truncation note)."""
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
    machine = MACHINES.get(machine, machine)
    if phentsize < ph_size:
        return wide, order, machine, [], None, None
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
        return wide, order, machine, loads, None, None
    fh.seek(dynamic[0])
    count = min(dynamic[1] // dyn_size, MAX_DYNAMIC_TAGS + 1)
    raw = fh.read(count * dyn_size)
    tags: List[Tuple[int, int]] = []
    truncated = None
    for n in range(len(raw) // dyn_size):
        tag, value = struct.unpack_from(dyn_fmt, raw, n * dyn_size)
        if tag == DT_NULL:
            break
        if n >= MAX_DYNAMIC_TAGS:
            truncated = f"more than {MAX_DYNAMIC_TAGS} dynamic tags; the rest were not read"
            break
        tags.append((tag, value))
    return wide, order, machine, loads, tags, truncated


def _parse(fh) -> Optional[Dict[str, Any]]:
    """SONAME, DT_NEEDED, DT_RPATH, DT_RUNPATH and the machine from the PT_DYNAMIC segment.

    Read with struct: the ELF header, the program headers (at most MAX_SEGMENTS), the first PT_DYNAMIC segment (at
    most MAX_DYNAMIC_TAGS entries) and its string table, located through the PT_LOAD segment that maps DT_STRTAB —
    what ld.so itself reads. 32/64-bit, either byte order.
    """
    header = _header(fh)
    if header is None:
        return None
    wide, order, machine, loads, tags, truncated = header
    out: Dict[str, Any] = {"soname": None, "needed": [], "rpath": [], "runpath": [],
                           "machine": machine, "verneed": {}, "verdef": []}
    if tags is None:
        return out
    if truncated:
        out["truncated"] = truncated
    strtab = next((v for t, v in tags if t == DT_STRTAB), None)
    strsz = next((v for t, v in tags if t == DT_STRSZ), None)
    offset = next((off + strtab - vaddr for vaddr, off, size in loads
                   if strtab is not None and vaddr <= strtab < vaddr + size), None)
    if offset is None:
        return out
    strings = _Strings(fh, offset, min(strsz or MAX_STRTAB, MAX_STRTAB))
    string = strings.get

    for tag, value in tags:
        if value >= strings.size:
            continue
        if tag == DT_NEEDED:
            out["needed"].append(string(value))
        elif tag == DT_SONAME:
            out["soname"] = string(value)
        elif tag == DT_RPATH:
            out["rpath"] += _split(string(value))
        elif tag == DT_RUNPATH:
            out["runpath"] += _split(string(value))
    values = dict(tags)

    def file_offset(vaddr: int) -> Optional[int]:
        return next((off + vaddr - va for va, off, size in loads if va <= vaddr < va + size), None)

    if DT_VERNEED in values:
        out["verneed"] = _verneed(fh, order, file_offset(values[DT_VERNEED]), values.get(DT_VERNEEDNUM, 0), string,
                                  strings.size)
    if DT_VERDEF in values:
        out["verdef"] = _verdef(fh, order, file_offset(values[DT_VERDEF]), values.get(DT_VERDEFNUM, 0), string,
                                strings.size)
    return out


def _verneed(fh, order: str, at: Optional[int], count: int, string, strsz: int) -> Dict[str, List[str]]:
    """``{file: [version, ...]}`` from DT_VERNEED (Elf_Verneed/Elf_Vernaux: the same layout in both classes).

    Weak needs (VER_FLG_WEAK) are left out: the loader only warns about those."""
    out: Dict[str, List[str]] = {}
    seen = 0
    for _ in range(min(count, MAX_VERSION_ENTRIES)):
        if at is None:
            break
        fh.seek(at)
        head = fh.read(16)
        if len(head) < 16:
            break
        _version, cnt, vn_file, vn_aux, vn_next = struct.unpack(order + "HHIII", head)
        if vn_file >= strsz:
            break
        names = out.setdefault(string(vn_file), [])
        aux = at + vn_aux
        for _ in range(min(cnt, MAX_VERSION_ENTRIES)):
            seen += 1
            if seen > MAX_VERSION_ENTRIES:
                return out
            fh.seek(aux)
            entry = fh.read(16)
            if len(entry) < 16:
                break
            _hash, flags, _other, name, nxt = struct.unpack(order + "IHHII", entry)
            if name < strsz and not flags & VER_FLG_WEAK:
                names.append(string(name))
            if not nxt:
                break
            aux += nxt
        if not vn_next:
            break
        at += vn_next
    return out


def _verdef(fh, order: str, at: Optional[int], count: int, string, strsz: int) -> List[str]:
    """The version names an object defines (DT_VERDEF; the base entry, its own soname, included)."""
    out: List[str] = []
    for _ in range(min(count, MAX_VERSION_ENTRIES)):
        if at is None:
            break
        fh.seek(at)
        head = fh.read(20)
        if len(head) < 20:
            break
        _version, _flags, _ndx, cnt, _hash, vd_aux, vd_next = struct.unpack(order + "HHHHIII", head)
        if cnt:
            fh.seek(at + vd_aux)
            aux = fh.read(8)
            if len(aux) == 8:
                name, _ = struct.unpack(order + "II", aux)
                if name < strsz:
                    out.append(string(name))
        if not vd_next:
            break
        at += vd_next
    return out


# -- the dynamic symbol table (.dynsym), as the loader reads it: DT_SYMTAB, counted through DT_HASH or DT_GNU_HASH --------

DT_HASH, DT_SYMTAB, DT_SYMENT, DT_GNU_HASH, DT_VERSYM = 4, 6, 11, 0x6FFFFEF5, 0x6FFFFFF0
STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE = 1, 2, 10
SHN_UNDEF = 0
# flash_attn_2_cuda holds ~10k dynamic symbols, libtorch_cpu ~150k: what is read of one object is bounded, and a
# lookup walks one hash chain (the loader's own cost), never the whole table.
MAX_SYMBOLS = 1 << 18
MAX_UNDEFINED = 20000
MAX_CHAIN = 4096
MAX_NAME = 4096


def gnu_hash(name: bytes) -> int:
    h = 5381
    for c in name:
        h = (h * 33 + c) & 0xFFFFFFFF
    return h


def sysv_hash(name: bytes) -> int:
    h = 0
    for c in name:
        h = ((h << 4) + c) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h


MAX_WHOLE_STRTAB = 48 << 20
MAX_MEMORY_TABLE = 48 << 20


class _WholeStrings:
    """A string table read once (bounded by MAX_WHOLE_STRTAB)."""

    def __init__(self, fh, offset: int, size: int):
        fh.seek(offset)
        self.data = fh.read(size)
        self.size = len(self.data)

    def get(self, index: int) -> str:
        end = self.data.find(b"\0", index, index + 65536)
        return self.data[index:end if end >= 0 else index + 65536].decode("utf-8", "surrogateescape")


class _Symbols:
    """One object's dynamic symbol table: its entries read by index, lookups through its hash table."""

    def __init__(self, fh, wide: bool, order: str, loads, tags, cache: Any = None):
        self.fh, self.wide, self.order = fh, wide, order
        values = dict(tags)
        self.sym_fmt = order + ("IBBHQQ" if wide else "IIIBBH")
        self.sym_size = struct.calcsize(self.sym_fmt)
        self.ent = values.get(DT_SYMENT) or self.sym_size
        if self.ent < self.sym_size:
            self.ent = self.sym_size

        def file_offset(vaddr: Optional[int]) -> Optional[int]:
            if vaddr is None:
                return None
            return next((off + vaddr - va for va, off, size in loads if va <= vaddr < va + size), None)

        # (Any: each is checked by ``usable`` before a table is used)
        self.symtab: Any = file_offset(values.get(DT_SYMTAB))
        self.strings: Any = None
        strtab = file_offset(values.get(DT_STRTAB))
        size = min(values.get(DT_STRSZ) or MAX_STRTAB, MAX_STRTAB)
        # symbol names are read in bulk: the whole table at once where it is of a sane size (libtorch_cpu's: ~9 MB),
        # else a page at a time; a read that runs out of its budget raises (the answer is unknown, never 'absent')
        if strtab is None:
            self.strings = None
        elif size <= MAX_WHOLE_STRTAB:
            if cache is not None and "strings" in cache:
                self.strings = cache["strings"]
            else:
                self.strings = _WholeStrings(fh, strtab, size)
                if cache is not None:
                    cache["strings"] = self.strings
        else:
            self.strings = _Strings(fh, strtab, size, strict=True)
        self.hash: Any = file_offset(values.get(DT_HASH))
        self.gnu: Any = file_offset(values.get(DT_GNU_HASH))
        self.versym: Any = file_offset(values.get(DT_VERSYM))
        self._gnu_head: Optional[Tuple[int, int, int, int]] = None

    @property
    def usable(self) -> bool:
        return self.symtab is not None and self.strings is not None and (self.hash is not None or self.gnu is not None)

    def load_memory(self, cache: Any) -> None:
        """Keep the symbol table and the hash table's words in memory (bounded), for many lookups in one run."""
        if cache is None:
            return
        if "symtab" not in cache:
            count = self.count() or 0
            size = min(count, MAX_SYMBOLS) * self.ent
            self.fh.seek(self.symtab)
            cache["symtab"] = self.fh.read(size) if size <= MAX_MEMORY_TABLE else None
            hash_at = self.gnu if self.gnu is not None else self.hash
            words = None
            if hash_at is not None:
                if self.gnu is not None:
                    nbuckets, symoffset, bloom_size, _ = self._gnu()
                    span = 16 + bloom_size * (8 if self.wide else 4) + 4 * (nbuckets + max(0, count - symoffset) + 1)
                else:
                    nbucket, nchain = self._u32(self.hash, 2)
                    span = 8 + 4 * (nbucket + nchain)
                if span <= MAX_MEMORY_TABLE:
                    self.fh.seek(hash_at)
                    words = self.fh.read(span)
            cache["hash"] = words
        self.memory_symtab, self.memory_hash = cache.get("symtab"), cache.get("hash")

    def _u32(self, at: int, n: int = 1) -> Tuple[int, ...]:
        base = self.gnu if self.gnu is not None else self.hash
        mem = getattr(self, "memory_hash", None)
        if mem is not None and base is not None and 0 <= at - base and at - base + 4 * n <= len(mem):
            return struct.unpack_from(self.order + "I" * n, mem, at - base)
        self.fh.seek(at)
        raw = self.fh.read(4 * n)
        if len(raw) < 4 * n:
            raise ValueError("short read")
        return struct.unpack(self.order + "I" * n, raw)

    def entry(self, index: int) -> Optional[Tuple[str, int, int]]:
        """(name, binding, section index) of symbol ``index``."""
        mem = getattr(self, "memory_symtab", None)
        if mem is not None and (index + 1) * self.ent <= len(mem):
            raw = mem[index * self.ent:index * self.ent + self.sym_size]
        else:
            self.fh.seek(self.symtab + index * self.ent)
            raw = self.fh.read(self.sym_size)
        if len(raw) < self.sym_size:
            return None
        fields = struct.unpack(self.sym_fmt, raw)
        if self.wide:
            name, info, _other, shndx = fields[0], fields[1], fields[2], fields[3]
        else:
            name, info, _other, shndx = fields[0], fields[3], fields[4], fields[5]
        if name >= self.strings.size:
            return "", info >> 4, shndx
        return self.strings.get(name)[:MAX_NAME], info >> 4, shndx

    def count(self) -> Optional[int]:
        """How many symbols the table holds: DT_HASH's nchain, or the end of DT_GNU_HASH's last chain."""
        if self.hash is not None:
            return self._u32(self.hash, 2)[1]
        nbuckets, symoffset, bloom_size, _shift = self._gnu()
        buckets = self.gnu + 16 + bloom_size * (8 if self.wide else 4)
        last = max(self._u32(buckets, min(nbuckets, 1 << 20)) or (0,))
        if last < symoffset:
            return symoffset
        chains = buckets + 4 * nbuckets
        for _ in range(MAX_SYMBOLS):
            if self._u32(chains + 4 * (last - symoffset))[0] & 1:
                return last + 1
            last += 1
        return last

    def _gnu(self) -> Tuple[int, int, int, int]:
        if self._gnu_head is None:
            head = self._u32(self.gnu, 4)
            self._gnu_head = (head[0], head[1], head[2], head[3])
        return self._gnu_head

    def _defined(self, index: int, name: str) -> bool:
        got = self.entry(index)
        return bool(got and got[0] == name and got[2] != SHN_UNDEF and got[1] in (STB_GLOBAL, STB_WEAK,
                                                                                   STB_GNU_UNIQUE))

    def defines(self, name: str) -> bool:
        """Whether the table exports ``name`` (defined, global or weak), found as ld.so finds it: its hash chain."""
        raw = name.encode("utf-8", "surrogateescape")
        if self.gnu is not None:
            nbuckets, symoffset, bloom_size, _shift = self._gnu()
            if not nbuckets:
                return False
            h = gnu_hash(raw)
            buckets = self.gnu + 16 + bloom_size * (8 if self.wide else 4)
            index = self._u32(buckets + 4 * (h % nbuckets))[0]
            if index < symoffset:
                return False
            chains = buckets + 4 * nbuckets
            for _ in range(MAX_CHAIN):
                value = self._u32(chains + 4 * (index - symoffset))[0]
                if (value | 1) == (h | 1) and self._defined(index, name):
                    return True
                if value & 1:
                    return False
                index += 1
            return False
        nbucket, nchain = self._u32(self.hash, 2)
        if not nbucket:
            return False
        index = self._u32(self.hash + 8 + 4 * (sysv_hash(raw) % nbucket))[0]
        for _ in range(MAX_CHAIN):
            if index == 0 or index >= nchain:
                return False
            if self._defined(index, name):
                return True
            index = self._u32(self.hash + 8 + 4 * nbucket + 4 * index)[0]
        return False

    def version_index(self, index: int) -> int:
        if self.versym is None:
            return 1
        self.fh.seek(self.versym + 2 * index)
        raw = self.fh.read(2)
        return struct.unpack(self.order + "H", raw)[0] & 0x7FFF if len(raw) == 2 else 1


def _symbols(fh, cache: Any = None) -> Optional[_Symbols]:
    header = _header(fh)
    if header is None or header[4] is None:
        return None
    wide, order, _machine, loads, tags, _truncated = header
    table = _Symbols(fh, wide, order, loads, tags, cache)
    return table if table.usable else None


def _table_cache(host: Host, path: str) -> Any:
    """A per-run place for one file's string table (looked up many times by one check: read once)."""
    try:
        st = host.stat(path)
    except OSError:
        return None
    return host.cached(("elf-dynstr", st.st_dev, st.st_ino, st.st_size, int(st.st_mtime)), dict)


def undefined_symbols(host: Host, path: str, wanted: Any = None) -> Optional[Dict[str, Any]]:
    """The symbols an object imports: ``{"names": [...], "truncated": bool}`` — undefined, non-weak (a weak
    reference that stays unresolved does not fail the load), not bound to a version (those are DT_VERNEED's, judged
    by their version), and where ``wanted`` (a predicate on the name) is given, only those it accepts. None: no
    dynamic symbol table the loader could use."""
    try:
        with host.open_binary(path) as fh:
            table = _symbols(fh)
            if table is None:
                return None
            total = table.count()
            if total is None:
                return None
            names: List[str] = []
            truncated = total > MAX_SYMBOLS
            count = min(total, MAX_SYMBOLS)
            fh.seek(table.symtab)
            raw = fh.read(count * table.ent)  # one read: at most MAX_SYMBOLS entries
            versym = b""
            if table.versym is not None:
                fh.seek(table.versym)
                versym = fh.read(2 * count)
            if len(raw) < count * table.ent:
                truncated, count = True, len(raw) // table.ent
            wide = table.wide
            for index in range(1, count):
                fields = struct.unpack_from(table.sym_fmt, raw, index * table.ent)
                name_at, info, shndx = (fields[0], fields[1], fields[3]) if wide else (fields[0], fields[3], fields[5])
                if shndx != SHN_UNDEF or info >> 4 != STB_GLOBAL or not name_at or name_at >= table.strings.size:
                    continue
                if 2 * index + 2 <= len(versym) and struct.unpack_from(table.order + "H", versym, 2 * index)[0] \
                        & 0x7FFF > 1:
                    continue  # bound to a version: DT_VERNEED's, judged by its version
                name = table.strings.get(name_at)[:MAX_NAME]
                if wanted is not None and not wanted(name):
                    continue
                names.append(name)
                if len(names) >= MAX_UNDEFINED:
                    truncated = True
                    break
            return {"names": names, "truncated": truncated}
    except Exception:  # noqa: BLE001 - a malformed table is "not read", never a crash
        return None


def exported(host: Host, path: str, names: Any) -> Optional[Dict[str, bool]]:
    """For each of ``names``, whether the object exports it (found through its hash table, as ld.so looks a symbol
    up); None: no table to look in (unknown, not 'exports nothing')."""
    try:
        with host.open_binary(path) as fh:
            cache = _table_cache(host, path)
            table = _symbols(fh, cache)
            if table is None:
                return None
            if len(names) > 8:
                table.load_memory(cache)
            return {n: table.defines(n) for n in names}
    except Exception:  # noqa: BLE001
        return None


def symbol_table(host: Host, path: str, limit: int = MAX_SYMBOLS) -> Optional[List[Tuple[str, bool]]]:
    """Every dynamic symbol as (name, defined): what tests compare with pyelftools."""
    try:
        with host.open_binary(path) as fh:
            table = _symbols(fh)
            if table is None:
                return None
            out = []
            for index in range(min(table.count() or 0, limit)):
                got = table.entry(index)
                if got is None:
                    break
                out.append((got[0], got[2] != SHN_UNDEF))
            return out
    except Exception:  # noqa: BLE001
        return None


def _read(host: Host, path: str) -> Optional[Dict[str, Any]]:
    try:
        with host.open_binary(path) as fh:
            return _parse(fh)
    except Exception:  # noqa: BLE001 - a malformed ELF is "not an ELF we can read", never a crash
        return None


def read_dynamic(host: Host, path: str) -> Optional[Dict[str, Any]]:
    """``{"soname", "needed", "rpath", "runpath", "machine", "verneed", "verdef"}`` of an ELF file, or None if it is not one.

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


# -- the CUDA code an object carries (its .nv_fatbin section) --------------------------------------------------------
#
# nvcc puts each compilation unit's device code in a fat binary container in the .nv_fatbin section: a 16-byte
# header (magic 0xBA55ED50, version, header size, size of the entries that follow), then entries, each with a header
# (kind 1 = PTX, 2 = ELF cubin; its header size; its payload size; the target architecture at offset 28) and its
# payload (what cuobjdump --list-elf / --list-ptx lists). Walking the headers costs one small read per entry.
FATBIN_MAGIC = 0xBA55ED50
FATBIN_KINDS = {1: "ptx", 2: "sass"}
MAX_FATBIN_ENTRIES = 50000  # libtorch_cuda.so of a 9-architecture build: ~2500 containers, ~20000 entries
MAX_SECTIONS = 65536


def _fatbin_section(fh, order: str) -> Optional[Tuple[int, int]]:
    fh.seek(0x28)
    shoff, = struct.unpack(order + "Q", fh.read(8))
    fh.seek(0x3A)
    shentsize, shnum, shstrndx = struct.unpack(order + "HHH", fh.read(6))
    if not shoff or shentsize < 64 or not 0 < shnum <= MAX_SECTIONS or shstrndx >= shnum:
        return None
    fh.seek(shoff)
    table = fh.read(shentsize * shnum)
    if len(table) < shentsize * shnum:
        return None
    heads = [struct.unpack_from(order + "IIQQQQIIQQ", table, n * shentsize) for n in range(shnum)]
    str_off, str_size = heads[shstrndx][4], heads[shstrndx][5]
    fh.seek(str_off)
    names = fh.read(min(str_size, 1 << 20))
    for h in heads:
        if names[h[0]:h[0] + 11] == b".nv_fatbin\0":
            return h[4], h[5]
    return None


def _fatbin(fh) -> Optional[Dict[str, Any]]:
    ident = fh.read(16)
    if len(ident) < 16 or ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] not in (1, 2):
        return None
    order = "<" if ident[5] == 1 else ">"
    where = _fatbin_section(fh, order)
    if where is None:
        return {"sass": [], "ptx": [], "complete": True, "section": False}
    start, size = where
    seen: Dict[str, set] = {"sass": set(), "ptx": set()}
    at, end, entries, complete = start, start + size, 0, True
    # the headers are read in place through a read-only map of the file (a torch build's section holds ~20,000
    # entries, each a seek and a read otherwise); a file that cannot be mapped is read as before
    view: Any = None
    try:
        import mmap

        view = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError, AttributeError):
        view = None

    def read(offset: int, n: int) -> bytes:
        if view is not None:
            return view[offset:offset + n] if 0 <= offset < len(view) else b""
        fh.seek(offset)
        return fh.read(n)

    try:
        return _walk_fatbin(read, order, at, end, seen)
    finally:
        if view is not None:
            view.close()


def _walk_fatbin(read: Any, order: str, at: int, end: int, seen: Dict[str, set]) -> Dict[str, Any]:
    entries, complete = 0, True
    while at + 16 <= end:
        head = read(at, 16)
        if len(head) < 16:
            complete = False
            break
        magic, _version, hsize, fat_size = struct.unpack(order + "IHHQ", head)
        if magic != FATBIN_MAGIC:
            if magic == 0:  # alignment padding between containers
                at += 8
                continue
            complete = False
            break
        entry, stop = at + hsize, min(at + hsize + fat_size, end)
        while entry + 32 <= stop:
            entries += 1
            if entries > MAX_FATBIN_ENTRIES:
                return {"sass": sorted(seen["sass"]), "ptx": sorted(seen["ptx"]), "complete": False, "section": True}
            e = read(entry, 32)
            if len(e) < 32:
                complete = False
                break
            kind, _, ehsize, payload = struct.unpack_from(order + "HHIQ", e)
            arch, = struct.unpack_from(order + "I", e, 28)
            if kind in FATBIN_KINDS and 10 <= arch < 1000:
                seen[FATBIN_KINDS[kind]].add(arch)
            if ehsize < 32:
                complete = False
                break
            entry += ehsize + payload
        at = stop
    return {"sass": sorted(seen["sass"]), "ptx": sorted(seen["ptx"]), "complete": complete, "section": True}


def read_fatbin(host: Host, path: str) -> Optional[Dict[str, Any]]:
    """The GPU architectures an object carries code for: ``{"sass": [80, 86, ...], "ptx": [90], "complete",
    "section"}`` (sm_XY as XY; ``section`` False: the object has no .nv_fatbin, no device code of its own;
    ``complete`` False: the walk stopped at a bound or a malformed entry, so the lists are a lower bound), or None when
    it is not a 64-bit ELF file that can be read. Cached per file identity like :func:`read_dynamic`."""
    try:
        st = host.stat(path)
    except OSError:
        return None

    def parse() -> Optional[Dict[str, Any]]:
        try:
            with host.open_binary(path) as fh:
                return _fatbin(fh)
        except Exception:  # noqa: BLE001 - a malformed object tells nothing, never a crash
            return None

    hit = host.cached(("fatbin", st.st_dev, st.st_ino, st.st_size, int(st.st_mtime)), parse)
    return None if hit is None else {k: (list(v) if isinstance(v, list) else v) for k, v in hit.items()}
