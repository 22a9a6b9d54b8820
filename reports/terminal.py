"""The terminal summary: problems first, each with its fix; one line per pass and skip."""

from __future__ import annotations

import shutil
import textwrap
from typing import Any, Dict, List, Optional, Sequence

from dl_doctor.reports.present import heading, items
from dl_doctor.reports.text import safe_line, safe_text, safe_value  # noqa: F401 - part of this module's API

COLORS = {"fail": "31;1", "error": "35;1", "warn": "33;1", "pass": "32", "skip": "2", "dim": "2", "bold": "1"}
LABELS = {"fail": "FAIL", "error": "ERROR", "warn": "WARN", "pass": "PASS", "skip": "SKIP"}
ORDER = ("error", "fail", "warn", "skip", "pass")
WIDTH = 100


def _paint(text: str, style: str, color: bool) -> str:
    return f"\033[{COLORS[style]}m{text}\033[0m" if color else text


def terminal_width(stream: Any = None) -> int:
    """The terminal's width (60 to 160 columns) where the output is one; WIDTH otherwise (a pipe, a file)."""
    try:
        if stream is not None and stream.isatty():
            return max(60, min(160, shutil.get_terminal_size((WIDTH, 24)).columns))
    except (AttributeError, ValueError, OSError):
        pass
    return WIDTH


_width = WIDTH


def _wrap(text: str, indent: str, hanging: Optional[str] = None) -> List[str]:
    """``text`` wrapped to the width (the first line after ``indent``, the others after ``hanging``); a path longer
    than the line breaks after a '/' instead of overflowing it."""
    width = max(40, _width)
    rest = indent if hanging is None else hanging
    room = max(20, width - len(rest))
    pieces = []  # (text, whether a space goes before it)
    for word in text.split(" "):
        spaced = True
        while len(word) > room and "/" in word[1:room]:
            cut = word.rfind("/", 1, room) + 1
            pieces.append((word[:cut], spaced))
            spaced, word = False, word[cut:]
        pieces.append((word, spaced))
    out: List[str] = []
    line, empty = indent, True
    for piece, spaced in pieces:
        add = (" " if spaced and not empty else "") + piece
        if not empty and len(line) + len(add) > width:
            out.append(line)
            line = rest + piece
        else:
            line += add
        empty = False
    out.append(line)
    return out


def headline(report: Dict[str, Any]) -> str:
    host = report.get("host", {})
    parts = [p for p in (host.get("hostname"), host.get("os"),
                         f"kernel {host['kernel']}" if host.get("kernel") else None) if p]
    gpus = host.get("nvidia_gpus")
    if gpus is not None:
        parts.append(f"{gpus} NVIDIA GPU{'s' if gpus != 1 else ''}" if gpus else "no NVIDIA GPU")
    if host.get("driver"):
        parts.append(f"driver {host['driver']}")
    if host.get("container"):
        parts.append(f"in a {host['container']} container")
    run = report.get("run", {})
    if run.get("mode") == "sysroot":
        parts.append(f"sysroot {run.get('sysroot')}")
    elif run.get("mode") == "facts":
        parts.append(f"facts collected {run.get('facts_collected_at')}")
    return " · ".join(parts)


def summary_line(report: Dict[str, Any]) -> str:
    s = report.get("summary", {})
    counts = ", ".join(f"{s.get(k, 0)} {k}" for k in ("fail", "error", "warn", "pass", "skip"))
    return f"{counts}  ({report.get('run', {}).get('duration_s', 0):.2f} s)"


def _shown(report: Dict[str, Any]) -> Dict[str, Any]:
    """The parts of ``report`` the summary shows (not the facts, which are most of a report), escaped: every value
    one line, so a message or a host name cannot forge a PASS line of its own; a fix's commands keep their lines
    (a pod spec, a here-document), each printed indented under the fix."""
    shown = safe_value({k: report.get(k) for k in ("tool", "host", "run", "summary", "findings", "probe_errors",
                                                    "privilege") if k in report}, one_line=True)
    for finding, original in zip(shown.get("findings") or [], report.get("findings") or []):
        fix = original.get("fix") if isinstance(original, dict) else None
        if isinstance(fix, dict) and isinstance(fix.get("commands"), list):
            finding["fix"]["commands"] = [safe_text(str(c)) for c in fix["commands"]]
    return shown


def render(report: Dict[str, Any], color: bool = False, quiet: bool = False,
           paths: Sequence[str] = (), width: int = WIDTH) -> str:
    global _width
    _width = width
    report = _shown(report)
    paths = [safe_text(p) for p in paths]
    lines: List[str] = []
    tool = report.get("tool", {})
    if not quiet:
        lines.append(_paint(f"dl-doctor {tool.get('version', '')}", "bold", color) + "  " + headline(report))
        lines.append("")
    findings = sorted(report.get("findings", []), key=lambda f: (ORDER.index(f["status"]), f["id"]))
    # Skips that share a reason ("no NVIDIA GPU on this host") are one line, not twenty.
    skip_groups: Dict[str, List[str]] = {}
    for f in findings:
        if f["status"] == "skip":
            skip_groups.setdefault(f["message"], []).append(f["id"])
    printed_groups = set()
    # the ID column fits the longest plain ID (keyed IDs, DLD-EXP-001:<key>, wrap instead)
    idw = max([13] + [len(f["id"]) for f in findings if ":" not in f["id"] and len(f["id"]) <= 24])
    pad = " " * (idw + 7)
    for f in findings:
        status = f["status"]
        if quiet and status in ("pass", "skip"):
            continue
        label = _paint(f"{LABELS[status]:<5}", status, color)
        group = skip_groups.get(f["message"], []) if status == "skip" else []
        if len(group) >= 3:
            if f["message"] not in printed_groups:
                printed_groups.add(f["message"])
                lines.append(f"{label} {len(group)} checks  {f['message']}")
                lines.extend(_wrap(", ".join(group), pad))
            continue
        if status in ("pass", "skip"):
            lines.append(f"{label} {f['id']:<{idw}} {f['message']}")
            continue
        # the problem first, then the check that found it; several items as a list
        ind = " " * 6
        head = _wrap(heading(f), ind)
        lines.append(label + " " + _paint(head[0][6:], "bold", color))
        lines.extend(ind + _paint(h[6:], "bold", color) for h in head[1:])
        lines.extend(_paint(l, "dim", color) for l in _wrap(f"{f['id']} · {f['title']}", ind))
        parts = items(f)
        if len(parts) == 1:
            lines.extend(_wrap(parts[0], ind))
        else:
            for part in parts:
                lines.extend(_wrap(part, ind + "- ", ind + "  "))
        fix = f.get("fix")
        if fix:
            lines.extend(_wrap("fix: " + fix["summary"], ind))
            for cmd in fix.get("commands", []):
                for i, cmd_line in enumerate(cmd.splitlines()):
                    if cmd_line.lstrip().startswith("#"):
                        lines.append(ind + "  " + _paint(cmd_line, "dim", color))
                    else:
                        lines.append(ind + ("$ " if i == 0 else "  ") + cmd_line)
        lines.append("")
    if findings and lines and lines[-1] != "":
        lines.append("")

    errors = report.get("probe_errors", [])
    if errors and not quiet:
        lines.append(_paint("Facts that could not be collected:", "bold", color))
        for err in errors:
            lines.extend(_wrap(f"- {err['probe']}: {err['error']}", "  "))
        lines.append("")
    limited = (report.get("privilege") or {}).get("limited") or []
    if limited and not quiet:
        lines.append(_paint("Running as root would add:", "bold", color))
        for item in limited:
            lines.extend(_wrap(f"- {item['would_add']} (probe {item['probe']})", "  "))
        lines.append("")
    load_errors = report.get("run", {}).get("load_errors") or []
    if load_errors:
        lines.append(_paint("Plugins that did not load:", "bold", color))
        for err in load_errors:
            lines.extend(_wrap(f"- {err}", "  "))
        lines.append("")

    lines.append(_paint("Summary:", "bold", color) + " " + summary_line(report))
    for path in paths:
        lines.append(f"Report: {path}")
    return "\n".join(lines) + "\n"
