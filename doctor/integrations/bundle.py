"""Support bundles (``dl-doctor bundle -o FILE.tar.gz``): the reports, the facts and the raw probe outputs.

While the probes run, a :class:`Capture` attached to the Host keeps every text file a probe read (up to a size
limit) and every command's output, with which probe asked. The bundle then passes the report, the facts, the
manifest and every raw text through one :class:`~doctor.redact.Redactor`, so ``--redact`` placeholders agree
across all of them and a secret masked in the facts is masked in the raw copies too. Each raw copy is redacted as a
whole (never line by line: a key block spans lines, a JSON config nests its token, an option's value is the next
argument).

Layout (one top-level directory, so unpacking never spills into the current directory)::

    dl-doctor-bundle-HOST-STAMP/
        manifest.json        what was collected: files, commands, return codes, durations, timeouts
        report.json  report.html  facts.json
        raw/files/<path on the host>
        raw/commands/NNN-<program>.txt
"""

from __future__ import annotations

import io
import json
import re
import tarfile
import time
from typing import Any, Dict, List, Optional, Tuple

# what a bundle keeps of the raw probe outputs is recorded by the host layer (doctor/host/capture.py)
from dl_doctor.host.capture import MAX_COMMAND_OUTPUT, Capture
from dl_doctor.redact import Redactor

BUNDLE_KIND = "dl-doctor-bundle"
BUNDLE_SCHEMA_VERSION = "1"



def _as_text(path: str, data: bytes) -> Optional[str]:
    """The file as text, or None for binary content (an ELF, ld.so.cache)."""
    if b"\0" in data[:65536]:
        return None
    return data.decode("utf-8", errors="replace")


def _masked_copy(red: Redactor, path: str, data: bytes) -> Optional[str]:
    """The raw copy of a file, redacted as a whole (a key block spans lines, a JSON config nests its token), or None
    for binary content. A process's environment and command line are NUL-separated: each variable is masked as the
    one value it is (a key in a variable is many lines) and the arguments as the one command line they are (an
    option's value is the next argument); the copy has one of them a line."""
    if path.endswith(("/environ", "/cmdline")) and b"\0" in data:  # not the kernel's /proc/cmdline, one line
        entries = data.decode("utf-8", errors="replace").split("\0")
        if entries and entries[-1] == "":
            entries.pop()
        masked = red.command(entries) if path.endswith("/cmdline") else [_variable(red, e) for e in entries]
        return "".join(m + "\n" for m in masked)
    text = _as_text(path, data)
    return None if text is None else red.file(path, text)


def _variable(red: Redactor, entry: str) -> str:
    """``NAME=value`` from an environment: the whole value masked under a secret-looking name (as in the facts)."""
    name, eq, value = entry.partition("=")
    return f"{red.text(name)}={red.value(value, name)}" if eq else red.text(entry)


def _member_name(path: str) -> str:
    clean = "/".join(p for p in path.split("/") if p not in ("", ".", ".."))
    return re.sub(r"[^A-Za-z0-9._@+=,/-]", "_", clean) or "_"


def build(capture: Capture, snapshot: Dict[str, Any], report: Dict[str, Any], html_render, red: Redactor,
          top: str) -> Tuple[bytes, Dict[str, Any]]:
    """The bundle as gzip'd tar bytes, and its manifest. ``report`` and ``snapshot`` are not yet redacted."""
    members: List[Tuple[str, bytes]] = []
    files_manifest: List[Dict[str, Any]] = []
    for path in sorted(capture.files):
        entry = capture.files[path]
        item = {"path": red.text(path), "size_read": entry["size_read"], "truncated": entry["truncated"],
                "probe": entry["probe"]}
        if entry.get("skipped"):
            item["skipped"] = entry["skipped"]
        else:
            masked = _masked_copy(red, path, entry["data"])
            if masked is None:
                item["skipped"] = "binary content"
            else:
                name = f"raw/files/{_member_name(red.text(path))}"
                members.append((name, masked.encode("utf-8", errors="replace")))
                item["archived_as"] = name
        files_manifest.append(item)

    commands_manifest: List[Dict[str, Any]] = []
    for n, cmd in enumerate(capture.commands, 1):
        argv = red.command(cmd["argv"])
        program = re.sub(r"[^A-Za-z0-9._-]", "_", argv[0].rsplit("/", 1)[-1])[:40] or "command"
        name = f"raw/commands/{n:03d}-{program}.txt"
        body = (f"$ {' '.join(argv)}\n# returncode: {cmd['returncode']}  duration: {cmd['duration_s']}s  "
                f"timed out: {cmd['timed_out']}" + (f"  error: {red.text(cmd['error'])}" if cmd["error"] else "")
                + f"\n--- stdout ---\n{red.text(cmd['stdout'])}\n--- stderr ---\n{red.text(cmd['stderr'])}\n")
        members.append((name, body.encode("utf-8", errors="replace")))
        commands_manifest.append({"argv": argv, "probe": cmd["probe"], "returncode": cmd["returncode"],
                                  "duration_s": cmd["duration_s"], "timed_out": cmd["timed_out"],
                                  "error": red.text(cmd["error"]) if cmd["error"] else None,
                                  "output_truncated": cmd["output_truncated"], "archived_as": name})

    facts = red.value(snapshot)
    rep = red.value(report)
    manifest = red.value({
        "kind": BUNDLE_KIND, "schema_version": BUNDLE_SCHEMA_VERSION, "tool": snapshot.get("tool"),
        "created_at": report.get("run", {}).get("started_at"), "mode": snapshot.get("mode"),
        "sysroot": snapshot.get("sysroot"), "hostname": report.get("host", {}).get("hostname"),
        "summary": report.get("summary"),
        "probes": snapshot.get("probes"), "probe_errors": snapshot.get("probe_errors"),
        "unavailable": snapshot.get("unavailable"),
        "files": files_manifest, "commands": commands_manifest,
        "limits": {"max_file_bytes": capture.max_file_bytes, "max_total_bytes": capture.max_total_bytes,
                   "max_command_output": MAX_COMMAND_OUTPUT},
    })
    summary = red.summary()
    for doc in (facts, rep, manifest):
        doc["redaction"] = summary
    from dl_doctor.redact import for_public
    from dl_doctor.reports.markdown import render as markdown_render

    manifest["contents"] = ["manifest.json", "report.json", "report.html", "summary.md", "facts.json"] + \
        [m for m, _ in members]
    # summary.md: the text to paste into the ticket the bundle is attached to (always with the extended redaction)
    head = [("manifest.json", _dump(manifest)), ("report.json", _dump(rep)),
            ("report.html", html_render(rep).encode("utf-8")),
            ("summary.md", markdown_render(for_public(rep, snapshot, False), 65536).encode("utf-8")), ("facts.json", _dump(facts))]

    buf = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in head + members:
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mtime, info.mode = len(data), now, 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue(), manifest


def _dump(doc: Dict[str, Any]) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=False, ensure_ascii=False) + "\n").encode("utf-8")


class BundleError(ValueError):
    pass


# Reading a bundle someone sent: bounded, whatever the archive holds (dl_doctor.facts.tarball, the one tar reader).
# dl-doctor writes the JSON members first, so they are found in the first few MiB of any bundle it made.


def is_bundle(path: str) -> bool:
    """Whether ``path`` is a regular file holding a tar archive (``tarball.is_tar``)."""
    from dl_doctor.facts.tarball import is_tar

    return is_tar(path)


def read_member(path: str, member: str) -> Dict[str, Any]:
    """One JSON member (``facts.json``, ``manifest.json``) of a bundle, read without unpacking anything to disk.

    The archive is read through ``dl_doctor.facts.tarball`` (a regular file opened non-blocking; at most
    ``tarball.MAX_MEMBERS`` members and ``tarball.MAX_BYTES`` of decompressed archive); the member is held to the
    bounds of every JSON input (``validate.MAX_DOCUMENT_BYTES``, values, depth), so a small gzip'd archive that
    inflates to a huge or deeply nested document is refused before it is parsed. The archive is read to its end
    whichever member is asked for, so a truncated or corrupt archive is a BundleError (one line, exit 2) for every
    reader (check, report, diff, why --report, expect), wherever the cut lies.
    """
    import zlib

    from dl_doctor.facts import tarball
    from dl_doctor.facts.validate import MAX_DOCUMENT_BYTES, InputError, open_regular, read_json

    found: Optional[Dict[str, Any]] = None
    try:
        with open_regular(path) as raw:
            # the archive is read to its end whichever member is asked for (whole=True): a bundle cut short (a
            # failed copy, an upload limit) is refused by every reader alike, not only by those whose member lies
            # past the cut
            for info, tar in tarball.members(raw, whole=True):
                parts = info.name.split("/")
                if found is None and info.isfile() and len(parts) == 2 and parts[1] == member:
                    if info.size > MAX_DOCUMENT_BYTES:
                        raise BundleError(f"{path}: {member} is {info.size} bytes, over the "
                                          f"{MAX_DOCUMENT_BYTES >> 20} MiB limit for an input")
                    fh = tar.extractfile(info)
                    found = read_json(fh, f"{path}: {member} in the bundle") if fh else {}
    except BundleError:
        raise
    except tarball.ArchiveLimit as exc:
        if found is not None:
            return found  # read within the bounds: what lies past them is not looked at
        if exc.kind == "members":
            raise BundleError(f"{path} has {exc} before {member}; not a dl-doctor bundle")
        raise BundleError(f"{path}: {member} not found in the first {tarball.MAX_BYTES >> 20} MiB")
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise BundleError(f"{path} is not a readable dl-doctor bundle (truncated or corrupt?): {exc}")
    except InputError as exc:
        raise BundleError(str(exc))
    except OSError as exc:
        raise BundleError(f"{path} is not a readable dl-doctor bundle (truncated or corrupt?): {exc}")
    if found is None:
        raise BundleError(f"{path} is a tar archive but not a dl-doctor bundle (no {member})")
    return found
