"""The reports `dl-doctor history` reads: every JSON report, support bundle and tarball of reports under the paths
given (the login timer's report directory by default), read as `dl-doctor fleet` reads them (regular files only, each
input held to the bounds of any input, tarballs through dl_doctor.facts.tarball), but whole: the history compares
facts. A file that is not a report, or is damaged, is listed with the reason and costs nothing else. What the
history keeps of each report is small (doctor/judge/history.py ``record``), so a directory of many nodes' reports
is held to :data:`MAX_REPORTS` and :data:`MAX_BYTES`, not to its size.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import IO, Any, BinaryIO, Dict, Iterable, List, Optional

from dl_doctor.facts.validate import MAX_DOCUMENT_BYTES, InputError, check_limits, load_json_bytes, \
    validate_snapshot
from dl_doctor.integrations.fleet import _looks_like_tar, read_inputs
from dl_doctor.integrations.login_hook import STATE_DIR
from dl_doctor.judge.history import parse_time, record

DEFAULT_DIR = f"{STATE_DIR}/reports"  # where the login timer's service writes its reports (login_hook.service_unit)
MAX_FILES = 100_000       # files looked at
MAX_REPORTS = 20_000      # reports kept (a few kilobytes of versions each)
MAX_BYTES = 4 << 30       # bytes of reports read, all together
STATUSES = ("pass", "warn", "fail", "error", "skip")


@dataclass
class Gathered:
    records: List[Dict[str, Any]] = field(default_factory=list)
    skipped: List[Dict[str, str]] = field(default_factory=list)
    bytes_read: int = 0


def report_record(doc: Any, source: str) -> Dict[str, Any]:
    """The history's record of one report document, or InputError saying why it is not one it can use."""
    from dl_doctor.model import FACTS_SCHEMA_VERSION

    if not isinstance(doc, dict):
        raise InputError("not a dl-doctor report")
    if doc.get("kind") == "dl-doctor-facts":
        raise InputError("a facts file, not a report (it has no findings to compare)")
    if not isinstance(doc.get("findings"), list) or not isinstance(doc.get("facts"), dict):
        raise InputError("not a dl-doctor report (no findings and facts)")
    version = str(doc.get("schema_version", ""))[:20]
    if version.split(".")[0] != FACTS_SCHEMA_VERSION:
        raise InputError(f"schema_version {version!r}; this dl-doctor reads version {FACTS_SCHEMA_VERSION}")
    run: Dict[str, Any] = doc["run"] if isinstance(doc.get("run"), dict) else {}
    if parse_time(run.get("started_at")) is None:
        raise InputError("no run.started_at timestamp: it cannot be placed in the history")
    check_limits(doc, "the report")
    snapshot = {"schema_version": version, "kind": "dl-doctor-facts",
                "tool": doc.get("tool") if isinstance(doc.get("tool"), dict) else {},
                "collected_at": run.get("facts_collected_at") or run.get("started_at"),
                "mode": run.get("facts_mode") or ("sysroot" if run.get("mode") == "sysroot" else "live"),
                "sysroot": run.get("sysroot"), "facts": doc["facts"],
                "probe_errors": doc.get("probe_errors", []), "unavailable": doc.get("unavailable", {}),
                "privilege": doc.get("privilege", {})}
    snapshot["tool"] = {**snapshot["tool"], "name": snapshot["tool"].get("name") or "dl-doctor",
                        "version": snapshot["tool"].get("version") or "unknown"}
    validate_snapshot(snapshot, "the report")
    for n, f in enumerate(doc["findings"]):
        if not isinstance(f, dict) or not all(isinstance(f.get(k), str) for k in ("id", "status", "message")) \
                or f["status"] not in STATUSES:
            raise InputError(f"findings[{n}] is not a finding (id, status and message strings)")
    return record(doc, source)


def gather(paths: Iterable[str]) -> Gathered:
    """Every report under ``paths`` (directories, files, globs, bundles and tarballs of reports)."""
    out = Gathered()

    def full() -> Optional[str]:
        if len(out.records) >= MAX_REPORTS or out.bytes_read > MAX_BYTES:
            return f"not read: the reports before it reached the history's bound ({MAX_REPORTS} reports, " \
                   f"{MAX_BYTES >> 30} GiB)"
        return None

    read_inputs(paths, out.skipped, lambda path, fh: _file(path, fh, out), full, MAX_FILES)
    return out


def _read(fh: IO[bytes], size: int, out: Gathered) -> Any:
    if size > MAX_DOCUMENT_BYTES:
        raise InputError(f"{size} bytes, over the {MAX_DOCUMENT_BYTES >> 20} MiB limit for an input")
    data = fh.read(MAX_DOCUMENT_BYTES + 1)
    out.bytes_read += len(data)
    if len(data) > MAX_DOCUMENT_BYTES:
        raise InputError(f"over the {MAX_DOCUMENT_BYTES >> 20} MiB limit for an input")
    return load_json_bytes(data, "the report")


def _add(out: Gathered, source: str, doc: Any) -> None:
    try:
        out.records.append(report_record(doc, source))
    except InputError as exc:
        out.skipped.append({"source": source, "error": str(exc)})
    except (TypeError, ValueError, AttributeError, KeyError, RecursionError) as exc:  # a shape no check foresaw
        out.skipped.append({"source": source, "error": f"its facts have an unexpected shape ({type(exc).__name__})"})


def _file(path: str, fh: BinaryIO, out: Gathered) -> None:
    import tarfile

    head = fh.read(64)
    fh.seek(0)
    if _looks_like_tar(path, head):
        try:
            _tar(path, fh, out)
        except (tarfile.TarError, EOFError, ValueError) as exc:
            out.skipped.append({"source": path, "error": f"not a readable tarball: {exc}"})
        return
    _add(out, path, _read(fh, os.fstat(fh.fileno()).st_size, out))


def _tar(path: str, raw: BinaryIO, out: Gathered) -> None:
    """The reports in a tarball: a support bundle's report.json, or each report of a tarball of reports."""
    import tarfile
    import zlib

    from dl_doctor.facts import tarball

    try:
        for member, tar in tarball.members(raw, tarball.FLEET_MAX_MEMBERS, tarball.FLEET_MAX_BYTES):
            if not member.isfile() or not member.name.endswith(".json"):
                continue
            if member.name.endswith(("manifest.json", "facts.json")) and "/" in member.name:
                continue  # a support bundle: its report.json speaks for it
            source = f"{path}:{member.name}"
            fh: Optional[IO[bytes]] = tar.extractfile(member)
            if fh is None:
                continue
            try:
                _add(out, source, _read(fh, member.size, out))
            except InputError as exc:
                out.skipped.append({"source": source, "error": str(exc)})
            except zlib.error as exc:
                raise tarfile.TarError(str(exc))
            if len(out.records) >= MAX_REPORTS or out.bytes_read > MAX_BYTES:
                out.skipped.append({"source": path, "error": "the history's bound was reached; the rest was not read"})
                return
    except tarball.ArchiveLimit as exc:
        out.skipped.append({"source": path, "error": f"{exc}; the rest was not read"})
