"""Boot-aware, bounded reading of the kernel log, and its candidate lines marked for judging (doctor/judge/logs.py).

Live, the ring buffer (/dev/kmsg) is the current boot; its first sequence number says whether the start of the
boot was overwritten. From files (a --sysroot, or a live host whose ring buffer cannot be read), the syslog family
(/var/log/kern.log, messages, syslog, with their rotations .1 and .N.gz) is read from its end backwards until the
current boot's first line ("Linux version", "Command line:") is found or the byte cap is spent: what the cap cut off
is said, never guessed. Events are judged against the boot and the NVIDIA module load they happened after.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

from dl_doctor.host import Host

LOG_FAMILIES = ("/var/log/kern.log", "/var/log/messages", "/var/log/syslog")
MAX_LOG_BYTES = 16 << 20  # read from all files of a family together (a boot's kernel log is rarely a tenth of it)
MAX_ROTATIONS = 9
BOOT_MARKER = re.compile(r"kernel: (?:\[ *0\.0+\] )?(?:Linux version \d|Command line: )")
# The NVIDIA kernel module announcing itself: the events after the last of these happened to the loaded driver.
MODULE_LOAD = re.compile(r"NVRM: loading NVIDIA UNIX|nvidia: loading out-of-tree module|"
                         r"nvidia-nvlink: Nvlink Core is being initialized")
SUSPEND = re.compile(r"PM: (?:suspend|hibernation) entry|PM: suspend exit|PM: hibernation exit|ACPI: PM: Waking up")
# Lines worth matching against the signature base: found by plain substring search over the lower-cased text (no
# regular expression runs over every line of a large log), then matched one by one.
KEYWORDS = ("nvrm", "nvidia", "xid", "nouveau", "nvswitch", "fallen off the bus", "key was rejected",
            "module verification", "lockdown", "soft lockup", "out of memory", "oom-kill", "oom_reaper", "segfault at",
            "aer:", "pcie bus error", "unknown symbol", "disagrees about version", "rminitadapter", "rm_init_adapter",
            "pm: ")
_MARKERS = ("kernel: linux version ", "kernel: command line: ")
MAX_EVENTS = 200


def candidate_lines(text: str) -> List[str]:
    """The lines of ``text`` that hold a keyword, in order."""
    low = text.lower()
    starts = set()
    for word in KEYWORDS:
        at = low.find(word)
        while at >= 0:
            starts.add(low.rfind("\n", 0, at) + 1)
            at = low.find("\n", at)
            if at < 0:
                break
            at = low.find(word, at)
    out = []
    for start in sorted(starts):
        end = text.find("\n", start)
        out.append(text[start:end if end >= 0 else len(text)][:4096])
    return out


def boot_start(text: str) -> Optional[int]:
    """Where the last boot in ``text`` starts (the first of its 'Linux version' / 'Command line' lines), or None."""
    low = text.lower()
    at = max(low.rfind(m) for m in _MARKERS)
    if at < 0:
        return None
    start = low.rfind("\n", 0, at) + 1
    while start > 0:  # the other marker line just before it belongs to the same boot
        prev = low.rfind("\n", 0, start - 1) + 1
        if any(m in low[prev:start] for m in _MARKERS):
            start = prev
        else:
            break
    return start


@dataclass
class BootLog:
    text: str = ""
    source: Optional[str] = None
    files: List[str] = field(default_factory=list)
    bytes_read: int = 0
    start_seen: bool = False  # the first line of the current boot was read
    cut_by_cap: bool = False  # the byte cap stopped the reading before the boot's start

    def describe(self) -> Dict[str, Any]:
        return {"source": self.source, "files": self.files, "bytes_read": self.bytes_read,
                "boot_start_seen": self.start_seen, "cut_by_cap": self.cut_by_cap, "bytes": len(self.text)}


def _rotations(host: Host, base: str) -> List[str]:
    """``base``, ``base.1``, ``base.2.gz`` ... newest first (those that exist)."""
    out = [base] if host.exists(base) else []
    for n in range(1, MAX_ROTATIONS + 1):
        for name in (f"{base}.{n}", f"{base}.{n}.gz"):
            if host.exists(name):
                out.append(name)
    return out


def _tail(host: Host, path: str, budget: int) -> Tuple[bytes, bool]:
    """At most ``budget`` bytes of the end of ``path`` (decompressed for .gz, whose end is kept), and whether the
    whole file fit."""
    if path.endswith(".gz"):
        raw = host.read_bytes(path, budget)  # a compressed rotation is small; its text is bounded below
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = bytearray()
        whole = True
        chunk = raw
        while chunk:
            out += d.decompress(chunk, 1 << 20)
            chunk = d.unconsumed_tail
            if len(out) > budget:
                del out[:len(out) - budget]
                whole = False
        return bytes(out), whole
    data, whole = host.read_tail(path, budget)
    return data, whole


def read_boot(host: Host, cap: int = MAX_LOG_BYTES, families: Iterable[str] = LOG_FAMILIES) -> Optional[BootLog]:
    """The current boot's lines from the first syslog family present, newest file first, bounded by ``cap``."""
    for base in families:
        files = _rotations(host, base)
        if not files:
            continue
        log = BootLog(source=base)
        chunks: List[str] = []
        left = cap
        for path in files:
            if left <= 0:
                log.cut_by_cap = True
                break
            try:
                data, whole = _tail(host, path, left)
            except PermissionError:
                raise
            except (OSError, zlib.error, EOFError):  # a FIFO, a device, a broken .gz planted as a log: skipped
                continue
            left -= len(data)
            log.bytes_read += len(data)
            log.files.append(path)
            text = data.decode("utf-8", "replace")
            if not whole:
                text = text[text.find("\n") + 1:]  # the first line was cut in the middle
            at = boot_start(text)
            if at is not None:
                chunks.insert(0, text[at:])
                log.start_seen = True
                break
            chunks.insert(0, text if text.endswith("\n") or not text else text + "\n")
            if not whole:
                log.cut_by_cap = True
                break
        log.text = "".join(chunks)
        return log
    return None


def mark(lines: List[str]) -> Dict[str, Any]:
    """One boot's candidate lines (:func:`candidate_lines`), each marked with whether the NVIDIA module was loaded
    before it (the last module load of the boot counts), and its suspends. The signature base judges the lines in
    the check (DLD-LOG-001), so a report can be judged again with newer signatures."""
    load_at = max((i for i, line in enumerate(lines) if MODULE_LOAD.search(line)), default=None)
    marked: List[Dict[str, Any]] = []
    suspends: List[Dict[str, Any]] = []
    for i, line in enumerate(lines):
        after = load_at is not None and i > load_at
        if SUSPEND.search(line):
            suspends.append({"line": line.strip()[-300:], "after_module_load": after})
        elif not MODULE_LOAD.search(line):
            marked.append({"line": line.strip()[-300:], "after_module_load": after})
    return {"candidates": marked[-MAX_EVENTS:], "candidates_dropped": max(0, len(marked) - MAX_EVENTS),
            "suspends": suspends[-50:], "module_loaded": load_at is not None}

