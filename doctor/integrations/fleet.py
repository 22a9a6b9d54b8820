"""Many nodes' reports, compared: each node's failing checks, and every fact that must be the same on every node of a
group but is not, with the odd nodes named against the majority.

Each report carries a compact ``fleet_node`` section (what the comparison needs: the stack's versions, the NCCL/FI/CUDA
settings, the failing checks), written near the top of the JSON file. The merge reads only the head of each file and
decodes that section; a report without it (an older report, a facts file) is read whole and summarised the same way.
10,000 node reports merge in seconds (benchmarks/fleet.py).
"""

from __future__ import annotations

import glob
import os
import stat
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import IO, Any, BinaryIO, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from dl_doctor.facts.fleet_section import FLEET_VERSION, node_section  # noqa: F401 - re-exported
from dl_doctor.facts.shape import json_type
from dl_doctor.facts.validate import MAX_DOCUMENT_BYTES, InputError, load_json_bytes, load_json_head, \
    open_regular

HEAD_BYTES = 64 << 10          # the first read of a report; the section is within it for any report dl-doctor writes
MAX_SECTION_BYTES = 4 << 20
MAX_FILES = 200_000
MAX_COMPARED = 4096            # facts one node's section may compare
MAX_FAILING = 1000             # failing checks one node's section may list
MAX_VALUE_CHARS = 1000         # one compared value (dl-doctor writes at most 300)
MAX_FLEET_CHARS = 64 << 20     # compared keys, values and failing checks of all nodes together (~100 a fact)
_MARK = b'\n  "fleet_node": '
_SCALARS = (str, int, float, bool, type(None))


@dataclass
class Node:
    name: str
    source: str
    section: Dict[str, Any]
    file_name: str = ""  # the name its file gives it ("a" for reports/a.json): the name where host names repeat


@dataclass
class Fleet:
    nodes: List[Node] = field(default_factory=list)
    unreadable: List[Dict[str, str]] = field(default_factory=list)
    chars: int = 0  # what the nodes kept so far hold (MAX_FLEET_CHARS)


def _a(value: Any) -> str:
    kind = json_type(value)
    return kind if kind == "null" else ("an " if kind[0] in "aeiou" else "a ") + kind


def conform(section: Any) -> Dict[str, Any]:
    """One node's fleet section in exactly the shape the comparison relies on (compared values are JSON scalars, a
    failing check has a string id), or InputError naming the first part that does not fit: a malformed report is
    left out and named, never guessed at, and never stops the comparison of the others."""
    if not isinstance(section, dict):
        raise InputError(f"fleet_node is {_a(section)}, not an object")
    parts = {"identity": dict, "compare": dict, "failing": list}
    for key, kind in parts.items():
        if section.get(key) is not None and not isinstance(section[key], kind):
            raise InputError(f"fleet_node.{key} is {_a(section[key])}, not "
                             f"{'an object' if kind is dict else 'an array'}")
    identity = section.get("identity") or {}
    for key in ("hostname", "instance_id"):
        if not isinstance(identity.get(key), _SCALARS):
            raise InputError(f"fleet_node.identity.{key} is {_a(identity[key])}, not a value")
    compare = section.get("compare") or {}
    if len(compare) > MAX_COMPARED:
        raise InputError(f"fleet_node.compare has more than {MAX_COMPARED} facts")
    for key, value in compare.items():
        if not isinstance(value, _SCALARS):
            raise InputError(f"fleet_node.compare.{key[:100]} is {_a(value)}, not a value")
        if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
            raise InputError(f"fleet_node.compare.{key[:100]} is longer than {MAX_VALUE_CHARS} characters")
    failing = section.get("failing") or []
    if len(failing) > MAX_FAILING:
        raise InputError(f"fleet_node.failing has more than {MAX_FAILING} checks")
    for n, item in enumerate(failing):
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            raise InputError(f"fleet_node.failing[{n}] is not a failing check (an object with a string id)")
    warnings = section.get("warnings")
    return {"version": str(section.get("version", ""))[:20],
            "identity": {k: identity.get(k) for k in ("hostname", "instance_id")},
            "compare": dict(compare),
            "failing": [{"id": f["id"][:200], "status": str(f.get("status", ""))[:20],
                         "headline": str(f.get("headline", ""))[:200]} for f in failing],
            "warnings": warnings if isinstance(warnings, int) and not isinstance(warnings, bool) else 0}


def _section_from_document(doc: Any) -> Optional[Dict[str, Any]]:
    """The section of a whole report (its own, or one summarised from its facts and findings); None when the
    document is not a report or a facts file."""
    if not isinstance(doc, dict):
        return None
    if "fleet_node" in doc:
        return conform(doc["fleet_node"])
    if isinstance(doc.get("facts"), dict):
        findings = doc["findings"] if isinstance(doc.get("findings"), list) else []
        try:
            return conform(node_section(doc["facts"], findings, doc.get("loading")))
        except (TypeError, ValueError, AttributeError) as exc:
            raise InputError(f"its facts have an unexpected shape ({type(exc).__name__})")
    return None


def read_section(data: bytes, more: Optional[Callable[[], bytes]] = None) -> Optional[Dict[str, Any]]:
    """The fleet section of a report whose first bytes are ``data`` (``more()`` returns the whole file when the
    section is not in them, or is cut): decoded alone when it can be, else from the whole document. None when it
    is not a dl-doctor report; InputError (the reason) when it is malformed. Every parse is bounded like any input
    (``validate``)."""
    at = data.find(_MARK)
    if at >= 0:
        start = at + len(_MARK)
        try:
            value = load_json_head(data[start:start + MAX_SECTION_BYTES], "fleet_node")
        except InputError:
            value = None  # cut by the head read: read it all below
        if isinstance(value, dict):
            return conform(value)
    whole = more() if more else data
    return _section_from_document(load_json_bytes(whole, "the report"))


def _file_name(source: str) -> str:
    """The node's name from its file: ``reports/node-7.json`` is ``node-7``."""
    base = os.path.basename(source)
    for ext in (".json", ".gz"):
        base = base[:-len(ext)] if base.endswith(ext) else base
    return base[:200] or source[-200:]


def _name(section: Dict[str, Any], source: str) -> str:
    host = section["identity"].get("hostname")
    if host and not str(host).startswith("[HOST-"):
        return str(host)[:200]
    return _file_name(source)


def _files(paths: Iterable[str]) -> Iterator[str]:
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, names in os.walk(p):
                dirs.sort()
                for n in sorted(names):
                    if n.endswith((".json", ".tar", ".tar.gz", ".tgz")):
                        yield os.path.join(root, n)
        elif any(ch in p for ch in "*?["):
            yield from sorted(glob.glob(p))
        else:
            yield p


def _not_regular(path: str) -> Optional[str]:
    """Why ``path`` is not read, from its own inode (never opened: opening a FIFO can block, a device can have
    effects); a symbolic link is followed at the open, where the descriptor is checked again."""
    try:
        mode = os.lstat(path).st_mode
    except OSError as exc:
        return exc.strerror or str(exc)
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return None
    kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
            "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file")
    return f"it is {kind}, not a regular file; not read"


def _looks_like_tar(path: str, head: bytes) -> bool:
    if path.endswith((".tar", ".tar.gz", ".tgz")):
        return True
    return not path.endswith(".json") and head.lstrip()[:1] not in (b"{", b"[")


def read_inputs(paths: Iterable[str], unreadable: List[Dict[str, str]], read: Callable[[str, BinaryIO], None],
                full: Callable[[], Optional[str]] = lambda: None, max_files: int = MAX_FILES) -> None:
    """Hand every input file under ``paths`` (see :func:`_files`) to ``read`` as an open regular file. One that is
    not a regular file, or that ``read`` refuses (InputError) or cannot read (OSError), is listed in
    ``unreadable`` with the reason and costs nothing else; past ``max_files`` files, or once ``full()`` gives a
    reason, the rest are not read."""
    for count, path in enumerate(_files(paths), 1):
        why = f"more than {max_files} files; the rest were not read" if count > max_files else full()
        if why:
            unreadable.append({"source": path, "error": why})
            break
        why = _not_regular(path)
        if why:
            unreadable.append({"source": path, "error": why})
            continue
        try:
            with open_regular(path) as fh:
                read(path, fh)
        except InputError as exc:
            unreadable.append({"source": path, "error": str(exc)})
        except OSError as exc:
            unreadable.append({"source": path, "error": exc.strerror or str(exc)})


def gather(paths: Iterable[str]) -> Fleet:
    """Every node report under ``paths`` (files, directories, globs, tarballs of reports). An input that cannot be
    used (not a regular file, not a report, malformed, over a limit) is listed in ``unreadable`` with the reason,
    and costs nothing else."""
    fleet = Fleet()
    read_inputs(paths, fleet.unreadable, lambda path, fh: _gather_file(path, fh, fleet))
    return fleet


def _gather_file(path: str, fh: BinaryIO, fleet: Fleet) -> None:
    import tarfile

    head = fh.read(HEAD_BYTES)
    if _looks_like_tar(path, head):
        fh.seek(0)
        try:
            _gather_tar(path, fh, fleet)
        except (tarfile.TarError, EOFError, ValueError) as exc:
            fleet.unreadable.append({"source": path, "error": f"not a readable tarball: {exc}"})
        return
    _add(fleet, path, path, _read_report(fh, head, os.fstat(fh.fileno()).st_size))


def _read_report(fh: IO[bytes], head: bytes, size: int) -> Optional[Dict[str, Any]]:
    """The section from the head of a report of ``size`` bytes, or from all of it; one over the input limit is
    refused before the rest is read."""
    def rest() -> bytes:
        if size > MAX_DOCUMENT_BYTES:
            raise InputError(f"the report is {size} bytes, over the {MAX_DOCUMENT_BYTES >> 20} MiB limit for an "
                             f"input")
        return head + fh.read(MAX_DOCUMENT_BYTES + 1 - len(head))

    return read_section(head, rest)


def _add(fleet: Fleet, source: str, name_source: str, section: Optional[Dict[str, Any]]) -> None:
    if section is None:
        fleet.unreadable.append({"source": source, "error": "not a dl-doctor report or facts file"})
        return
    cost = (sum(len(str(k)) + len(str(v)) for k, v in section["compare"].items())
            + sum(len(f["id"]) + len(f["headline"]) + 20 for f in section["failing"]) + 200)
    if fleet.chars + cost > MAX_FLEET_CHARS:
        fleet.unreadable.append({"source": source, "error": f"not compared: the nodes before it already hold "
                                                            f"{MAX_FLEET_CHARS >> 20} MiB of facts, the comparison's "
                                                            f"bound"})
        return
    fleet.chars += cost
    fleet.nodes.append(Node(_name(section, name_source), source, section, _file_name(name_source)))


def _gather_tar(path: str, raw: BinaryIO, fleet: Fleet) -> None:
    """The reports in a tarball, read through ``dl_doctor.facts.tarball`` (at most ``tarball.FLEET_MAX_MEMBERS``
    members and ``tarball.FLEET_MAX_BYTES`` of the decompressed archive), each report held to the bounds of any input; past a
    limit the rest of the tarball is named as not read."""
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
            if member.size > MAX_DOCUMENT_BYTES:
                fleet.unreadable.append({"source": source, "error": f"{member.size} bytes, over the "
                                                                    f"{MAX_DOCUMENT_BYTES >> 20} MiB limit"})
                continue
            fh = tar.extractfile(member)
            if fh is None:
                continue
            try:
                _add(fleet, source, member.name.replace("/report.json", ""),
                     _read_report(fh, fh.read(HEAD_BYTES), member.size))
            except InputError as exc:
                fleet.unreadable.append({"source": source, "error": str(exc)})
            except zlib.error as exc:
                raise tarfile.TarError(str(exc))
    except tarball.ArchiveLimit as exc:
        fleet.unreadable.append({"source": path, "error": f"{exc}; the rest was not read"})


def _group_key(section: Dict[str, Any]) -> str:
    c = section.get("compare") or {}
    return " · ".join(str(c.get(k)) for k in ("instance_type", "gpu.model") if c.get(k)) or "all nodes"


def unique_names(nodes: List[Node]) -> List[str]:
    """One name for each node, every name different: its host name; where host names repeat (a redacted host name,
    one host's reports of several runs) the name its file gives it, then the file's path; a node that is still not
    told apart (one file given twice, nodes without files) gets ``#1``, ``#2``... after its name."""
    names = [n.name for n in nodes]
    groups: Dict[str, List[int]] = defaultdict(list)
    for i, name in enumerate(names):
        groups[name].append(i)
    for same in (g for g in groups.values() if len(g) > 1):
        ways = [[nodes[i].file_name or nodes[i].name for i in same],
                [nodes[i].source if nodes[i].file_name else nodes[i].name for i in same]]
        chosen = next((w for w in ways if len(set(w)) == len(w)), ways[0])  # else numbered below
        for i, name in zip(same, chosen):
            names[i] = name
    counts = Counter(names)
    seen: Dict[str, int] = defaultdict(int)
    out = []
    for name in names:
        if counts[name] > 1:
            seen[name] += 1
            name = f"{name}#{seen[name]}"
        out.append(name)
    return out


def compare(fleet: Fleet) -> Dict[str, Any]:
    """Groups of like nodes (instance type and GPU model), and in each the facts whose value is not the same on
    every node: the majority value and the odd nodes out."""
    nodes = list(zip(unique_names(fleet.nodes), fleet.nodes))
    groups: Dict[str, List[Tuple[str, Node]]] = defaultdict(list)
    for name, n in nodes:
        groups[_group_key(n.section)].append((name, n))
    out_groups = []
    for key, members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        keys = sorted({k for _, n in members for k in (n.section.get("compare") or {})})
        differences = []
        for k in keys:
            values = {name: (n.section.get("compare") or {}).get(k) for name, n in members}
            counts = Counter(values.values())
            if len(counts) <= 1:
                continue
            majority, majority_count = max(counts.items(), key=lambda kv: (kv[1], kv[0] is not None, str(kv[0])))
            tie = sum(1 for c in counts.values() if c == majority_count) > 1
            odd = [{"node": name, "value": v} for name, v in sorted(values.items()) if v != majority]
            difference = {"fact": k, "majority": majority, "majority_count": majority_count, "tie": tie,
                          "odd": odd, "values": len(counts)}
            if tie:  # no majority: the nodes with the value shown first are named too
                difference["majority_nodes"] = sorted(name for name, v in values.items() if v == majority)
            differences.append(difference)
        differences.sort(key=lambda d: (len(d["odd"]), d["fact"]))
        out_groups.append({"group": key, "nodes": [name for name, _ in members], "differences": differences})
    failing = []
    by_check: Dict[str, List[str]] = defaultdict(list)
    headlines: Dict[str, Counter] = defaultdict(Counter)
    statuses: Dict[str, set] = defaultdict(set)
    for name, n in nodes:
        f = n.section.get("failing") or []
        if f:
            failing.append({"node": name, "source": n.source, "findings": f})
            for item in f:
                check = item.get("id", "?")
                by_check[check].append(name)
                statuses[check].add(item.get("status") or "fail")
                if item.get("headline"):
                    headlines[check][item["headline"]] += 1
    # each failing check's headline (the one most of its nodes give: a few name their own GPU or path) and status
    # ("error" only where it could not judge on any of them)
    checks = {k: {"headline": max(headlines[k].items(), key=lambda kv: (kv[1], kv[0]))[0] if headlines[k] else "",
                  "status": "error" if statuses[k] == {"error"} else "fail"} for k in sorted(by_check)}
    return {"version": FLEET_VERSION, "nodes": len(nodes), "groups": out_groups, "failing": failing,
            "failing_by_check": {k: sorted(v) for k, v in sorted(by_check.items())}, "checks": checks,
            "unreadable": fleet.unreadable,
            "ok": not failing and not any(g["differences"] for g in out_groups) and bool(nodes)}


def plural(count: int, word: str) -> str:
    """``1 node``, ``2 nodes``."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def show_value(fact: str, value: Any) -> str:
    """A compared value for a person: a fact a node does not have is "unknown" (a setting: "not set"), an empty
    one "(empty)", never Python's None or nothing at all."""
    if value is None:
        return "not set" if fact.startswith("env.") else "unknown"
    if value == "":
        return "(empty)"
    return str(value)


def _difference_line(d: Dict[str, Any]) -> str:
    from dl_doctor.reports.text import safe_line

    fact = d["fact"]
    shown = d["odd"][:8]
    more = f" and {len(d['odd']) - 8} more" if len(d["odd"]) > 8 else ""
    odd = "; ".join(f"{safe_line(o['node'])} = {safe_line(show_value(fact, o['value']))}" for o in shown)
    majority = safe_line(show_value(fact, d["majority"]))
    if d.get("tie"):  # no majority: each value with the nodes that have it
        named = d.get("majority_nodes") or []
        first = ", ".join(safe_line(n) for n in named[:8]) + (f" and {len(named) - 8} more" if len(named) > 8 else "")
        lead = f"{first} = {majority}" if first else f"{plural(d['majority_count'], 'node')} = {majority}"
        return f"  DIFFERS {safe_line(fact)} (no majority): {lead}; {odd}{more}"
    if d["majority"] is None:  # most nodes lack it: "not set on 3 nodes", not "3 nodes have None"
        return f"  DIFFERS {safe_line(fact)}: {majority} on {plural(d['majority_count'], 'node')}; {odd}{more}"
    have = "node has" if d["majority_count"] == 1 else "nodes have"
    return f"  DIFFERS {safe_line(fact)}: {d['majority_count']} {have} {majority}; {odd}{more}"


def render_text(result: Dict[str, Any], width: int = 100) -> str:
    from dl_doctor.reports.text import safe_line, short

    lines = [f"dl-doctor fleet: {plural(result['nodes'], 'node')} in {plural(len(result['groups']), 'group')}"]
    for g in result["groups"]:
        lines.append("")
        lines.append(f"{safe_line(g['group'])}: {plural(len(g['nodes']), 'node')}")
        if not g["differences"]:
            lines.append("  every compared fact is the same on every node")
        for d in g["differences"]:
            lines.append(_difference_line(d))
    if result["failing"]:
        lines.append("")
        lines.append("Failing checks:")
        checks = result.get("checks") or {}
        for check, nodes in result["failing_by_check"].items():
            about = checks.get(check) or {}
            label = "ERROR" if about.get("status") == "error" else "FAIL"
            shown = ", ".join(safe_line(n) for n in nodes[:10]) + (f" and {len(nodes) - 10} more" if len(nodes) > 10 else "")
            head = f"  {label} {safe_line(check)}"
            if about.get("headline"):
                head += " " + short(safe_line(about["headline"]), max(40, min(width, 120) - len(head) - 1))
            lines.append(f"{head} ({plural(len(nodes), 'node')}: {shown})")
    if result["unreadable"]:
        lines.append("")
        count = len(result["unreadable"])
        lines.append(f"Skipped {plural(count, 'input')} (not compared):")
        for u in result["unreadable"][:20]:
            lines.append(f"  SKIPPED {safe_line(u['source'])}: {safe_line(u['error'])}")
        if count > 20:
            lines.append(f"  and {count - 20} more (all of them are in --json)")
    lines.append("")
    differing = sum(len(g["differences"]) for g in result["groups"])
    lines.append("OK: the nodes agree and none fails" if result["ok"] else
                 "NOT OK: " + "; ".join(p for p in (
                     plural(differing, "differing fact") if differing else "",
                     plural(len(result["failing"]), "failing node") if result["failing"] else "",
                     "no node report" if not result["nodes"] else "") if p))
    return "\n".join(lines) + "\n"
