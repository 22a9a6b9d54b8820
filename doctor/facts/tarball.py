"""Tar archives given as input (a support bundle, a tarball of node reports): the one bounded reader.

An archive is read as a stream from a file opened like every input (``validate.open_regular``: a regular file, opened
non-blocking), never unpacked to disk. At most MAX_MEMBERS members and MAX_BYTES of the decompressed archive are gone
through; both limits are checked on a member's header, before the member is read or skipped (skipping a member of a
compressed stream inflates it), so a small archive that declares a huge member costs nothing. A member read as JSON
is held to the bounds of every input by whoever reads it (``validate.read_json``, ``MAX_DOCUMENT_BYTES``).
"""

from __future__ import annotations

import tarfile
from typing import BinaryIO, Iterator, Optional, Tuple

MAX_MEMBERS = 20_000       # members looked at (tarfile keeps each one's header in memory)
MAX_BYTES = 256 << 20      # decompressed bytes of the archive gone through
# A tarball of a fleet's reports (`dl-doctor fleet nodes.tar.gz`) is an operator's own collection, thousands of
# nodes' reports: the same reader, with room for them (each report is still held to the bounds of any input).
FLEET_MAX_MEMBERS = 50_000
FLEET_MAX_BYTES = 16 << 30


class ArchiveLimit(Exception):
    """The archive goes past a limit; ``kind`` is ``members`` or ``bytes``, ``str()`` says which, in words."""

    def __init__(self, kind: str, message: str):
        self.kind = kind
        super().__init__(message)


def is_tar(path: str) -> bool:
    """Whether ``path`` is a regular file holding a tar archive (looked at through the same non-blocking,
    descriptor-checked open as every input, so a name swapped for a FIFO cannot hang the look)."""
    from dl_doctor.facts.validate import InputError, open_regular

    try:
        with open_regular(path) as fh:
            return tarfile.is_tarfile(fh)
    except (InputError, OSError):
        return False  # the read that follows names the problem


def members(raw: BinaryIO, max_members: Optional[int] = None, max_bytes: Optional[int] = None,
            whole: bool = False) -> Iterator[Tuple[tarfile.TarInfo, tarfile.TarFile]]:
    """Each member's header with the open archive (``tar.extractfile(info)`` reads it), in archive order; raises
    ArchiveLimit before the first member past a limit (``MAX_MEMBERS``/``MAX_BYTES`` unless given). tarfile.TarError,
    EOFError, zlib.error and OSError are the caller's to name (a truncated or corrupt archive). ``whole``: once the
    caller has gone through every member, the archive is also held to be whole (:func:`verify_end`): EOFError if
    not."""
    limit_members = MAX_MEMBERS if max_members is None else max_members
    limit_bytes = MAX_BYTES if max_bytes is None else max_bytes
    with tarfile.open(fileobj=raw, mode="r:*") as tar:
        for n, info in enumerate(tar):
            if n >= limit_members:
                raise ArchiveLimit("members", f"more than {limit_members} members")
            if info.offset_data + info.size > limit_bytes:
                raise ArchiveLimit("bytes", f"past the first {limit_bytes >> 20} MiB of the archive")
            yield info, tar
        if whole:
            verify_end(tar, raw, limit_bytes)


END_OF_ARCHIVE = 2 * tarfile.BLOCKSIZE  # two zero blocks close every tar archive (POSIX; tarfile and GNU tar write them)


def verify_end(tar: tarfile.TarFile, raw: BinaryIO, max_bytes: Optional[int] = None) -> None:
    """After :func:`members` went through every member: raise EOFError unless the archive is whole, i.e. its
    end-of-archive marker follows the last member and a compressed stream reads to its end (its checksum and length
    are checked there). tarfile itself ends quietly at a cut between two members or inside a header; a reader that
    stopped at the member it wanted would not notice a cut at all. Reads at most ``max_bytes`` (``MAX_BYTES``) past
    the archive's start."""
    limit = MAX_BYTES if max_bytes is None else max_bytes
    fh = tar.fileobj
    if fh is None:  # pragma: no cover - an open archive has its file
        return
    fh.seek(tar.offset)
    marker = fh.read(END_OF_ARCHIVE)
    if len(marker) < END_OF_ARCHIVE or marker.strip(b"\0"):
        raise EOFError("the archive ends before its end-of-archive marker (cut short?)")
    if fh is not raw:  # a compressed stream: read to its end, where its checksum is
        read = tar.offset + END_OF_ARCHIVE
        while read < limit:
            chunk = fh.read(1 << 20)
            if not chunk:
                break
            read += len(chunk)
