"""Many nodes' reports, compared: each node's failing checks, and every fact that must be the same on every node of a
group but is not, with the odd nodes named against the majority.

Each report carries a compact ``fleet_node`` section (what the comparison needs: the stack's versions, the NCCL/FI/CUDA
settings, the failing checks), written near the top of the JSON file. The merge reads only the head of each file and
decodes that section; a report without it (an older report, a facts file) is read whole and summarised the same way.
10,000 node reports merge in seconds (benchmarks/fleet.py).
"""

from __future__ import annotations

import glob
import json
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

from dl_doctor.fleet_section import FLEET_VERSION, node_section  # noqa: F401 - re-exported

HEAD_BYTES = 64 << 10          # the first read of a report; the section is within it for any report dl-doctor writes
MAX_SECTION_BYTES = 4 << 20
MAX_FILE_BYTES = 256 << 20     # the slow path (a whole report or facts file)
MAX_FILES = 200_000
_MARK = b'\n  "fleet_node": '


@dataclass
class Node:
    name: str
    source: str
    section: Dict[str, Any]


@dataclass
class Fleet:
    nodes: List[Node] = field(default_factory=list)
    unreadable: List[Dict[str, str]] = field(default_factory=list)


def _section_from_document(doc: Any) -> Optional[Dict[str, Any]]:
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("fleet_node"), dict):
        return doc["fleet_node"]
    if isinstance(doc.get("facts"), dict):
        return node_section(doc["facts"], doc.get("findings") if isinstance(doc.get("findings"), list) else [])
    return None


def read_section(data: bytes, more: Optional[Any] = None) -> Optional[Dict[str, Any]]:
    """The fleet section of a report whose first bytes are ``data`` (``more()`` returns the whole file when the
    section is not in them, or is cut): decoded alone when it can be, else from the whole document."""
    at = data.find(_MARK)
    if at >= 0:
        start = at + len(_MARK)
        text = data[start:start + MAX_SECTION_BYTES].decode("utf-8", "replace")
        try:
            value, _ = json.JSONDecoder().raw_decode(text)
            if isinstance(value, dict):
                return value
        except ValueError:
            pass  # cut by the head read: read it all below
    whole = more() if more else data
    try:
        return _section_from_document(json.loads(whole))
    except (ValueError, RecursionError):
        return None


def _name(section: Dict[str, Any], source: str) -> str:
    ident = section.get("identity") if isinstance(section.get("identity"), dict) else {}
    host = ident.get("hostname")
    if host and not str(host).startswith("[HOST-"):
        return str(host)[:200]
    base = os.path.basename(source)
    for ext in (".json", ".gz"):
        base = base[:-len(ext)] if base.endswith(ext) else base
    return base[:200]


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


def gather(paths: Iterable[str]) -> Fleet:
    """Every node report under ``paths`` (files, directories, globs, tarballs of reports)."""
    import tarfile

    fleet = Fleet()
    count = 0
    for path in _files(paths):
        count += 1
        if count > MAX_FILES:
            fleet.unreadable.append({"source": path, "error": f"more than {MAX_FILES} files; the rest were not read"})
            break
        try:
            if path.endswith((".tar", ".tar.gz", ".tgz")) or (os.path.isfile(path) and tarfile.is_tarfile(path)):
                _gather_tar(path, fleet)
                continue
            with open(path, "rb") as fh:
                head = fh.read(HEAD_BYTES)

                def rest(fh=fh, head=head) -> bytes:
                    return head + fh.read(MAX_FILE_BYTES - len(head))

                section = read_section(head, rest)
        except OSError as exc:
            fleet.unreadable.append({"source": path, "error": exc.strerror or str(exc)})
            continue
        except tarfile.TarError as exc:
            fleet.unreadable.append({"source": path, "error": f"not a readable tarball: {exc}"})
            continue
        if section is None:
            fleet.unreadable.append({"source": path, "error": "not a dl-doctor report or facts file"})
            continue
        fleet.nodes.append(Node(_name(section, path), path, section))
    return fleet


def _gather_tar(path: str, fleet: Fleet) -> None:
    import tarfile

    with tarfile.open(path) as tar:
        for member in tar:
            if not member.isfile() or not member.name.endswith(".json") or member.size > MAX_FILE_BYTES:
                continue
            if member.name.endswith(("manifest.json", "facts.json")) and "/" in member.name:
                continue  # a support bundle: its report.json speaks for it
            fh = tar.extractfile(member)
            if fh is None:
                continue
            data = fh.read(MAX_FILE_BYTES)
            section = read_section(data[:HEAD_BYTES], lambda data=data: data)
            source = f"{path}:{member.name}"
            if section is None:
                fleet.unreadable.append({"source": source, "error": "not a dl-doctor report or facts file"})
            else:
                fleet.nodes.append(Node(_name(section, member.name.replace("/report.json", "")), source, section))


def _group_key(section: Dict[str, Any]) -> str:
    c = section.get("compare") or {}
    return " · ".join(str(c.get(k)) for k in ("instance_type", "gpu.model") if c.get(k)) or "all nodes"


def compare(fleet: Fleet) -> Dict[str, Any]:
    """Groups of like nodes (instance type and GPU model), and in each the facts whose value is not the same on
    every node: the majority value and the odd nodes out."""
    names = Counter(n.name for n in fleet.nodes)
    seen: Dict[str, int] = defaultdict(int)
    nodes = []
    for n in fleet.nodes:  # two reports with one name (a redacted host name, one host twice): tell them apart
        name = n.name
        if names[name] > 1:
            seen[name] += 1
            name = f"{name}#{seen[name]}"
        nodes.append((name, n))
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
            differences.append({"fact": k, "majority": majority, "majority_count": majority_count, "tie": tie,
                                "odd": odd, "values": len(counts)})
        differences.sort(key=lambda d: (len(d["odd"]), d["fact"]))
        out_groups.append({"group": key, "nodes": [name for name, _ in members], "differences": differences})
    failing = []
    by_check: Dict[str, List[str]] = defaultdict(list)
    for name, n in nodes:
        f = n.section.get("failing") or []
        if f:
            failing.append({"node": name, "source": n.source, "findings": f})
            for item in f:
                by_check[item.get("id", "?")].append(name)
    return {"version": FLEET_VERSION, "nodes": len(nodes), "groups": out_groups, "failing": failing,
            "failing_by_check": {k: sorted(v) for k, v in sorted(by_check.items())},
            "unreadable": fleet.unreadable,
            "ok": not failing and not any(g["differences"] for g in out_groups) and bool(nodes)}


def render_text(result: Dict[str, Any], width: int = 100) -> str:
    from dl_doctor.reports.terminal import safe_line

    lines = [f"dl-doctor fleet: {result['nodes']} node{'s' if result['nodes'] != 1 else ''} in "
             f"{len(result['groups'])} group{'s' if len(result['groups']) != 1 else ''}"]
    for g in result["groups"]:
        lines.append("")
        lines.append(f"{safe_line(g['group'])}: {len(g['nodes'])} nodes")
        if not g["differences"]:
            lines.append("  every compared fact is the same on every node")
        for d in g["differences"]:
            odd = ", ".join(f"{safe_line(o['node'])} = {safe_line(o['value'])}" for o in d["odd"][:8])
            more = f" and {len(d['odd']) - 8} more" if len(d["odd"]) > 8 else ""
            have = "node has" if d["majority_count"] == 1 else "nodes have"
            tie = " (no majority)" if d.get("tie") else ""
            lines.append(f"  DIFFERS {safe_line(d['fact'])}: {d['majority_count']} {have} "
                         f"{safe_line(d['majority'])}{tie}; {odd}{more}")
    if result["failing"]:
        lines.append("")
        lines.append("Failing checks:")
        for check, nodes in result["failing_by_check"].items():
            shown = ", ".join(safe_line(n) for n in nodes[:10]) + (f" and {len(nodes) - 10} more" if len(nodes) > 10 else "")
            lines.append(f"  FAIL {safe_line(check)} on {len(nodes)} node{'s' if len(nodes) != 1 else ''}: {shown}")
    for u in result["unreadable"][:20]:
        lines.append(f"unreadable: {safe_line(u['source'])}: {safe_line(u['error'])}")
    lines.append("")
    lines.append("OK: the nodes agree and none fails" if result["ok"] else
                 "NOT OK: " + "; ".join(p for p in (
                     f"{sum(len(g['differences']) for g in result['groups'])} differing facts"
                     if any(g["differences"] for g in result["groups"]) else "",
                     f"{len(result['failing'])} failing nodes" if result["failing"] else "",
                     "no node report" if not result["nodes"] else "") if p))
    return "\n".join(lines) + "\n"
