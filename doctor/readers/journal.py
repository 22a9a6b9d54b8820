"""A bounded reader of systemd journal files, for trees (``--sysroot``) whose logs live only in the journal.

The binary format is the one systemd documents (https://systemd.io/JOURNAL_FILE_FORMAT/, journal-def.h): a 272-byte
header (older files: at least 208), 8-byte aligned objects with a 16-byte header (type, flags, size), DATA objects
("FIELD=value" payloads, shared by every entry that carries them), ENTRY objects (seqnum, realtime, monotonic, boot
id, then the offsets of their DATA objects) and a chain of ENTRY_ARRAY objects that lists the entries in order.
Files made by systemd 252 and later may be *compact* (incompatible flag 16: 32-bit offsets, a DATA payload 8 bytes
further on).

Nothing in a tree is handed to a host program: the files are read here, by offset, with every offset and size
checked against the file and every read counted against a byte budget; a corrupt or hostile file costs only its own
entries. Payloads compressed with XZ are decompressed (bounded); LZ4 and ZSTD payloads (systemd compresses payloads
over 512 bytes) are counted and skipped, since the standard library cannot read them.

Only the newest boot is read (the newest file's ``tail_entry_boot_id``), newest entry first, until an entry of an
earlier boot shows where the boot started, or the byte budget or the entry limit is spent (then that is said).
Only the kernel's entries and the NVIDIA units' are read. They are found as journalctl finds them: the DATA object
"_TRANSPORT=kernel", looked up in the data hash table (SipHash-2-4 keyed by the file id where the keyed-hash flag
is set, systemd 246 and later; Jenkins' lookup3 before), lists its entries. A file whose hash table is unusable is
read entry by entry, within the same budget.
"""

from __future__ import annotations

import lzma
import struct
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from dl_doctor.host import Host

JOURNAL_DIRS = ("/var/log/journal", "/run/log/journal")
SIGNATURE = b"LPKSHHRH"
HEADER_MIN = 208
INCOMPAT_XZ, INCOMPAT_LZ4, INCOMPAT_KEYED_HASH, INCOMPAT_ZSTD, INCOMPAT_COMPACT = 1, 2, 4, 8, 16
KNOWN_INCOMPAT = 31
OBJ_DATA, OBJ_ENTRY, OBJ_ENTRY_ARRAY = 1, 3, 6
OBJ_COMPRESSED_XZ, OBJ_COMPRESSED_LZ4, OBJ_COMPRESSED_ZSTD = 1, 2, 4

MAX_FILES = 64
MAX_BYTES = 32 << 20        # read from all files together (blocks of BLOCK bytes)
MAX_ENTRIES = 400_000       # entries looked at
MAX_KEPT = 100_000          # entries kept (the kernel's and the NVIDIA units')
MAX_SECONDS = 3.0
MAX_ENTRY_ITEMS = 1024      # fields of one entry
MAX_PAYLOAD = 4096          # of one field's value kept
MAX_ARRAY_CHAIN = 4096
BLOCK = 4 << 10
CACHE_BLOCKS = 4096
DATA_CACHE = 65536
MAX_HASH_CHAIN = 10_000
WANTED = ("MESSAGE", "_TRANSPORT", "_SYSTEMD_UNIT", "UNIT", "SYSLOG_IDENTIFIER", "PRIORITY")
# the NVIDIA units whose lines are kept (their own output, and systemd's lines about them)
NVIDIA_UNITS = ("nvidia-fabricmanager.service", "nvidia-persistenced.service", "nvidia-suspend.service",
                "nvidia-resume.service", "nvidia-hibernate.service", "nvidia-dcgm.service", "nvidia-imex.service")
_M64 = (1 << 64) - 1


def _sipround(n: int, v0: int, v1: int, v2: int, v3: int) -> Tuple[int, int, int, int]:
    for _ in range(n):
        v0 = (v0 + v1) & _M64
        v1 = ((v1 << 13) | (v1 >> 51)) & _M64 ^ v0
        v0 = ((v0 << 32) | (v0 >> 32)) & _M64
        v2 = (v2 + v3) & _M64
        v3 = ((v3 << 16) | (v3 >> 48)) & _M64 ^ v2
        v0 = (v0 + v3) & _M64
        v3 = ((v3 << 21) | (v3 >> 43)) & _M64 ^ v0
        v2 = (v2 + v1) & _M64
        v1 = ((v1 << 17) | (v1 >> 47)) & _M64 ^ v2
        v2 = ((v2 << 32) | (v2 >> 32)) & _M64
    return v0, v1, v2, v3


_M32 = 0xFFFFFFFF
def _rot(x, k):
    return ((x << k) | (x >> (32 - k))) & _M32

def jenkins_hash64(data: bytes) -> int:
    """Bob Jenkins' lookup3 hashlittle2, as systemd's jenkins_hash64 returns it ((c << 32) | b): the data hash of
    journal files without the keyed-hash flag (systemd before 246, and files written with keyed hashes off)."""
    a = b = c = (0xDEADBEEF + len(data)) & _M32
    n = len(data)
    i = 0
    while n - i > 12:
        x, y, z = struct.unpack_from("<III", data, i)
        a = (a + x) & _M32; b = (b + y) & _M32; c = (c + z) & _M32
        a = (a - c) & _M32; a ^= _rot(c, 4); c = (c + b) & _M32
        b = (b - a) & _M32; b ^= _rot(a, 6); a = (a + c) & _M32
        c = (c - b) & _M32; c ^= _rot(b, 8); b = (b + a) & _M32
        a = (a - c) & _M32; a ^= _rot(c, 16); c = (c + b) & _M32
        b = (b - a) & _M32; b ^= _rot(a, 19); a = (a + c) & _M32
        c = (c - b) & _M32; c ^= _rot(b, 4); b = (b + a) & _M32
        i += 12
    tail = data[i:]
    if tail:
        x, y, z = struct.unpack("<III", tail.ljust(12, b"\0"))
        a = (a + x) & _M32; b = (b + y) & _M32; c = (c + z) & _M32
        c ^= b; c = (c - _rot(b, 14)) & _M32
        a ^= c; a = (a - _rot(c, 11)) & _M32
        b ^= a; b = (b - _rot(a, 25)) & _M32
        c ^= b; c = (c - _rot(b, 16)) & _M32
        a ^= c; a = (a - _rot(c, 4)) & _M32
        b ^= a; b = (b - _rot(a, 14)) & _M32
        c ^= b; c = (c - _rot(b, 24)) & _M32
    return (c << 32) | b


def siphash24(key: bytes, data: bytes) -> int:
    """SipHash-2-4 (Aumasson and Bernstein), which journal files with the keyed-hash flag (systemd 246 and later)
    use for their data hash table, keyed by the file's id."""
    k0, k1 = struct.unpack("<QQ", key)
    v = (k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D, k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573)
    v0, v1, v2, v3 = v
    full = len(data) & ~7
    for i in range(0, full, 8):
        m = int.from_bytes(data[i:i + 8], "little")
        v0, v1, v2, v3 = _sipround(2, v0, v1, v2, v3 ^ m)
        v0 ^= m
    b = ((len(data) & 0xFF) << 56) | int.from_bytes(data[full:], "little")
    v0, v1, v2, v3 = _sipround(2, v0, v1, v2, v3 ^ b)
    v0, v1, v2, v3 = _sipround(4, v0 ^ b, v1, v2 ^ 0xFF, v3)
    return v0 ^ v1 ^ v2 ^ v3


class JournalError(ValueError):
    """A file that is not a journal this reader can follow (its entries are skipped, the others are read)."""


@dataclass
class Entry:
    realtime: int
    monotonic: int
    boot_id: str
    fields: Dict[str, str]

    @property
    def kernel(self) -> bool:
        return self.fields.get("_TRANSPORT") == "kernel"

    @property
    def nvidia(self) -> bool:
        """An NVIDIA service's own message, or systemd's about one."""
        return self.fields.get("_SYSTEMD_UNIT") in NVIDIA_UNITS or self.fields.get("UNIT") in NVIDIA_UNITS


@dataclass
class JournalRead:
    """This boot's entries from the journal of a tree, and how far the reading got."""

    directory: str
    boot_id: Optional[str] = None
    entries: List[Entry] = field(default_factory=list)  # oldest first
    files: List[str] = field(default_factory=list)
    bytes_read: int = 0
    start_seen: bool = False
    cut_by_cap: bool = False
    skipped_compressed: int = 0
    errors: List[str] = field(default_factory=list)

    def describe(self) -> Dict[str, Any]:
        return {"source": f"journal {self.directory}", "files": self.files[:20], "bytes_read": self.bytes_read,
                "boot_id": self.boot_id, "boot_start_seen": self.start_seen, "cut_by_cap": self.cut_by_cap,
                "entries": len(self.entries), "skipped_compressed": self.skipped_compressed,
                "errors": self.errors[:5]}

    def kernel_text(self) -> str:
        """The kernel's messages as syslog-like lines ("kernel: ..."), for the kernel-log readers."""
        return "".join(f"kernel: {e.fields.get('MESSAGE', '')}\n" for e in self.entries if e.kernel)

    def unit_lines(self, unit: str, limit: int = 40) -> List[str]:
        """The messages of ``unit`` (its own output, and systemd's about it) in this boot, the last ``limit``."""
        base = unit[:-len(".service")] if unit.endswith(".service") else unit
        out = [e.fields.get("MESSAGE", "") for e in self.entries
               if unit in (e.fields.get("_SYSTEMD_UNIT"), e.fields.get("UNIT"))
               or e.fields.get("SYSLOG_IDENTIFIER") in (base, unit)]
        return [line[:300] for line in out[-limit:]]


class _Budget:
    def __init__(self, max_bytes: int, deadline: float):
        self.left = max_bytes
        self.deadline = deadline
        self.used = 0

    def spend(self, n: int) -> None:
        if self.left < n or time.monotonic() > self.deadline:
            raise _Spent()
        self.left -= n
        self.used += n


class _Spent(Exception):
    pass


class _File:
    """Reads of one journal file by offset, through a small block cache; every read is checked and counted."""

    def __init__(self, fh, size: int, budget: _Budget):
        self.fh, self.size, self.budget = fh, size, budget
        self.blocks: "OrderedDict[int, bytes]" = OrderedDict()

    def read(self, offset: int, n: int) -> bytes:
        if offset < 0 or n < 0 or offset + n > self.size:
            raise JournalError(f"a read at {offset}+{n} past the end of the file ({self.size})")
        out = bytearray()
        while n > 0:
            index = offset // BLOCK
            block = self.blocks.get(index)
            if block is None:
                self.budget.spend(BLOCK)
                self.fh.seek(index * BLOCK)
                block = self.fh.read(BLOCK)
                self.blocks[index] = block
                if len(self.blocks) > CACHE_BLOCKS:
                    self.blocks.popitem(last=False)
            else:
                self.blocks.move_to_end(index)
            start = offset - index * BLOCK
            piece = block[start:start + n]
            if not piece:
                raise JournalError("the file is shorter than it says")
            out += piece
            offset += len(piece)
            n -= len(piece)
        return bytes(out)


@dataclass
class _Header:
    incompat: int
    state: int
    file_id: bytes
    data_hash_table: Tuple[int, int]
    tail_boot_id: str
    header_size: int
    arena_size: int
    n_entries: int
    entry_array_offset: int
    head_realtime: int
    tail_realtime: int

    @property
    def compact(self) -> bool:
        return bool(self.incompat & INCOMPAT_COMPACT)

    @property
    def keyed(self) -> bool:
        return bool(self.incompat & INCOMPAT_KEYED_HASH)


def read_header(data: bytes) -> _Header:
    if len(data) < HEADER_MIN or data[:8] != SIGNATURE:
        raise JournalError("not a journal file (no LPKSHHRH signature)")
    incompat, state = struct.unpack_from("<IB", data, 12)
    if incompat & ~KNOWN_INCOMPAT:
        raise JournalError(f"incompatible flags {incompat:#x} this reader does not know")
    boot = data[56:72].hex()
    header_size, arena_size, dht_offset, dht_size = struct.unpack_from("<QQQQ", data, 88)
    n_entries, = struct.unpack_from("<Q", data, 152)
    entry_array_offset, head_rt, tail_rt = struct.unpack_from("<QQQ", data, 176)
    if header_size < HEADER_MIN:
        raise JournalError(f"header size {header_size} is too small")
    return _Header(incompat, state, data[24:40], (dht_offset, dht_size), boot, header_size, arena_size, n_entries, entry_array_offset, head_rt, tail_rt)


class _Journal:
    def __init__(self, f: _File, header: _Header, read: JournalRead):
        self.f, self.h, self.out = f, header, read
        self.data: Dict[int, Optional[Tuple[str, str]]] = {}
        self.item = 4 if header.compact else 8
        self.limit = min(f.size, header.header_size + header.arena_size) if header.arena_size else f.size

    def _object(self, offset: int, want: int) -> Tuple[int, int]:
        """(flags, size) of the object at ``offset``, checked to be of type ``want`` and inside the file."""
        if offset % 8 or offset < self.h.header_size or offset + 16 > self.limit:
            raise JournalError(f"an object offset {offset} outside the arena")
        kind, flags, size = struct.unpack("<BB6xQ", self.f.read(offset, 16))
        if kind != want or size < 16 or offset + size > self.limit:
            raise JournalError(f"the object at {offset} is not the expected kind {want} (type {kind}, size {size})")
        return flags, size

    def entry_offsets(self) -> List[int]:
        """Every entry's offset, in order, from the chain of entry arrays."""
        return self._chain(self.h.entry_array_offset, self.h.n_entries)

    def _chain(self, at: int, total: int, offsets: Optional[List[int]] = None) -> List[int]:
        """The entry offsets listed by the chain of entry arrays starting at ``at``, at most ``total``."""
        offsets = [] if offsets is None else offsets
        total = min(total, MAX_ENTRIES)
        hops = 0
        while at and hops < MAX_ARRAY_CHAIN and len(offsets) < total:
            hops += 1
            _, size = self._object(at, OBJ_ENTRY_ARRAY)
            body = self.f.read(at + 16, size - 16)
            nxt, = struct.unpack_from("<Q", body, 0)
            n = (len(body) - 8) // self.item
            items = struct.unpack_from(f"<{n}{'I' if self.item == 4 else 'Q'}", body, 8)
            for o in items:
                if not o or len(offsets) >= total:
                    break
                offsets.append(o)
            if nxt and nxt <= at:
                raise JournalError("the entry arrays loop")
            at = nxt
        return offsets

    @property
    def indexed(self) -> bool:
        """Whether the data hash table is there to look DATA objects up."""
        table, size = self.h.data_hash_table
        return size >= 16 and table % 8 == 0 and self.h.header_size <= table and table + size <= self.limit

    def find_data(self, payload: bytes) -> Optional[int]:
        """The offset of the DATA object holding ``payload`` (exactly, uncompressed), through the data hash table,
        or None."""
        table, size = self.h.data_hash_table
        buckets = size // 16
        h = siphash24(self.h.file_id, payload) if self.h.keyed else jenkins_hash64(payload)
        at, = struct.unpack("<Q", self.f.read(table + (h % buckets) * 16, 8))
        start = 72 if self.h.compact else 64
        for _ in range(MAX_HASH_CHAIN):
            if not at:
                return None
            flags, size_ = self._object(at, OBJ_DATA)
            stored, nxt = struct.unpack("<QQ", self.f.read(at + 16, 16))
            if stored == h and not flags and size_ - start == len(payload) and \
                    self.f.read(at + start, len(payload)) == payload:
                return at
            at = nxt
        return None

    def data_entries(self, offset: int) -> List[int]:
        """The offsets of the entries that hold the DATA object at ``offset``, in order."""
        first, array, n = struct.unpack("<QQQ", self.f.read(offset + 40, 24))
        if not first or not n:
            return []
        return self._chain(array, n, [first])

    def field(self, offset: int) -> Optional[Tuple[str, str]]:
        if offset in self.data:
            return self.data[offset]
        flags, size = self._object(offset, OBJ_DATA)
        start = 72 if self.h.compact else 64
        if size < start:
            raise JournalError(f"the data object at {offset} is too small")
        length = size - start
        value: Optional[Tuple[str, str]] = None
        if flags & (OBJ_COMPRESSED_LZ4 | OBJ_COMPRESSED_ZSTD):
            self.out.skipped_compressed += 1
        else:
            raw = self.f.read(offset + start, min(length, MAX_PAYLOAD + 64 if not flags else min(length, 1 << 20)))
            if flags & OBJ_COMPRESSED_XZ:
                try:
                    d = lzma.LZMADecompressor()
                    raw = d.decompress(raw, max_length=MAX_PAYLOAD + 64)
                except lzma.LZMAError:
                    raw = b""
            name, sep, rest = raw.partition(b"=")
            if sep and name.decode("ascii", "replace") in WANTED:
                value = (name.decode("ascii", "replace"), rest[:MAX_PAYLOAD].decode("utf-8", "replace"))
        if len(self.data) < DATA_CACHE:
            self.data[offset] = value
        return value

    def entry(self, offset: int) -> Entry:
        _, size = self._object(offset, OBJ_ENTRY)
        if size < 64:
            raise JournalError(f"the entry at {offset} is too small")
        head = self.f.read(offset + 16, 48)
        _seq, realtime, monotonic = struct.unpack_from("<QQQ", head, 0)
        boot = head[24:40].hex()
        step = 4 if self.h.compact else 16
        n = min((size - 64) // step, MAX_ENTRY_ITEMS)
        body = self.f.read(offset + 64, n * step)
        fields: Dict[str, str] = {}
        for i in range(n):
            o, = struct.unpack_from("<I" if self.h.compact else "<Q", body, i * step)
            try:
                kv = self.field(o)
            except JournalError:
                continue  # one bad field costs only itself
            if kv:
                fields[kv[0]] = kv[1]
        return Entry(realtime, monotonic, boot, fields)


def _wanted_offsets(journal: _Journal) -> List[int]:
    """The entries worth reading, in order: those holding _TRANSPORT=kernel or naming an NVIDIA unit, found through
    the data hash table and each DATA object's own entry list (as journalctl's matches are); in a file whose hash
    table is unusable, every entry (read and filtered one by one, within the budget)."""
    if not journal.indexed:
        return journal.entry_offsets()
    found: set = set()
    keys = [b"_TRANSPORT=kernel"] + [f"{k}={u}".encode() for u in NVIDIA_UNITS for k in ("_SYSTEMD_UNIT", "UNIT")]
    for key in keys:
        at = journal.find_data(key)
        if at is not None:
            found.update(journal.data_entries(at))
    return sorted(found)


def journal_files(host: Host, directory: str) -> List[str]:
    """The system journal files under ``directory`` (its machine-id subdirectories), at most MAX_FILES."""
    out: List[str] = []
    for sub in sorted(host.listdir(directory))[:16]:
        base = f"{directory}/{sub}"
        if not host.is_dir(base):
            continue
        for name in sorted(host.listdir(base)):
            if name.startswith("system") and (name.endswith(".journal") or name.endswith(".journal~")):
                out.append(f"{base}/{name}")
    return out[:MAX_FILES]


def read_boot(host: Host, directories: Sequence[str] = JOURNAL_DIRS, max_bytes: int = MAX_BYTES,
              max_entries: int = MAX_ENTRIES, seconds: float = MAX_SECONDS) -> Optional[JournalRead]:
    """The newest boot's entries from the first directory that holds system journal files, or None."""
    for directory in directories:
        files = journal_files(host, directory)
        if files:
            return _read(host, directory, files, max_bytes, max_entries, seconds)
    return None


def _open(host: Host, path: str, budget: _Budget, out: JournalRead):
    try:
        fh = host.open_binary(path)
    except OSError as exc:
        if isinstance(exc, PermissionError):
            raise
        out.errors.append(f"{path}: {exc.strerror or exc}")
        return None
    try:
        size = fh.seek(0, 2)  # the end: the size of the file Host opened
        f = _File(fh, size, budget)
        header = read_header(f.read(0, min(size, 272)))
        return fh, f, header
    except (JournalError, struct.error) as exc:
        fh.close()
        out.errors.append(f"{path}: {exc}")
        return None


def _read(host: Host, directory: str, paths: List[str], max_bytes: int, max_entries: int,
          seconds: float) -> JournalRead:
    out = JournalRead(directory=directory)
    budget = _Budget(max_bytes, time.monotonic() + seconds)
    opened = []
    try:
        for path in paths:
            try:
                got = _open(host, path, budget, out)
            except _Spent:
                out.cut_by_cap = True
                break
            if got:
                opened.append((path, *got))
        opened.sort(key=lambda t: t[3].tail_realtime, reverse=True)  # newest file first
        if not opened:
            return out
        out.boot_id = opened[0][3].tail_boot_id
        newest_first: List[Entry] = []
        seen = 0
        in_boot = False
        for path, fh, f, header in opened:
            if header.tail_realtime and header.tail_boot_id != out.boot_id and in_boot:
                out.start_seen = True  # an older file that ends in an earlier boot: the boot began after it
                break
            journal = _Journal(f, header, out)
            try:
                offsets = _wanted_offsets(journal)
            except (JournalError, struct.error) as exc:
                out.errors.append(f"{path}: {exc}")
                continue
            except _Spent:
                out.cut_by_cap = True
                break
            out.files.append(path)
            ended = False
            for offset in reversed(offsets):
                if seen >= max_entries:
                    out.cut_by_cap = ended = True
                    break
                seen += 1
                try:
                    e = journal.entry(offset)
                except (JournalError, struct.error):
                    continue
                except _Spent:
                    out.cut_by_cap = ended = True
                    break
                if e.boot_id != out.boot_id:
                    if in_boot:
                        out.start_seen = ended = True
                        break
                    continue  # entries of a later-written but older boot at the tail: not this boot
                in_boot = True
                if e.kernel or e.nvidia:
                    if len(newest_first) >= MAX_KEPT:
                        out.cut_by_cap = ended = True
                        break
                    newest_first.append(e)
            if ended:
                break
        if not out.start_seen and not out.cut_by_cap and newest_first:
            first = newest_first[-1]
            out.start_seen = first.kernel and "Linux version" in first.fields.get("MESSAGE", "")
        out.entries = newest_first[::-1]
        return out
    finally:
        out.bytes_read = budget.used
        for _, fh, _, _ in opened:
            fh.close()


def boot_once(host: Host) -> Optional[JournalRead]:
    """The tree's journal of its newest boot, read once per run however many probes ask (None: no journal, or one
    this user may not read)."""

    def compute() -> Optional[JournalRead]:
        try:
            return read_boot(host)
        except OSError:
            return None

    return host.cached(("journal", "boot"), compute)


# systemd's own lines about a unit, newest decides: the state a tree's journal says the unit was left in
_STATES = (("Failed with result", "failed"), ("Failed to start", "failed"), ("Started ", "active"),
           ("Finished ", "active"), ("Deactivated successfully", "inactive"), ("Stopped ", "inactive"),
           ("Starting ", "activating"))


def unit_state(lines: Sequence[str]) -> Optional[str]:
    """The state of a unit after the last of systemd's lines about it in ``lines`` (its journal), or None."""
    for line in reversed(lines):
        for prefix, state in _STATES:
            if prefix in line[:200]:
                return state
    return None
