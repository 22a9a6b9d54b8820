"""``dl-doctor plan`` as text for the terminal and as Markdown for a ticket or a pull request. Only formats: every
value from the facts (environment names, paths, versions) is escaped."""

from __future__ import annotations

import textwrap
from typing import Any, List, Mapping

from dl_doctor.reports.text import safe_line

_MARK = {"fail": "FAIL", "error": "ERROR", "warn": "WARN", "pass": "pass", "skip": "skip", None: "none"}


def _status(value: Any) -> str:
    return _MARK.get(value, str(value))


def _wrap(text: str, width: int, indent: str) -> List[str]:
    return textwrap.wrap(text, width=max(40, width), initial_indent=indent, subsequent_indent=indent + "  ") or [indent]


def render_text(doc: Mapping[str, Any], width: int = 100, quiet: bool = False) -> str:
    lines: List[str] = []
    if not quiet:
        lines.append("dl-doctor plan: what the change does to this machine"
                     + (f" ({safe_line(doc.get('source'))})" if doc.get("source") else ""))
        for c in doc["changes"]:
            lines += _wrap(f"- {safe_line(c['option'])}: {safe_line(c['summary'])}"
                           + ("" if c.get("verified", True) else " [rests on an unverified matrix entry]"),
                           width, "  ")
            for note in c.get("notes") or []:
                lines += _wrap(f"note: {safe_line(note)}", width, "      ")
        lines.append("")
    blockers = [(c["option"], b) for c in doc["changes"] for b in c.get("blockers") or []]
    for option, b in blockers:
        lines += _wrap(f"CANNOT {safe_line(option)}: {safe_line(b)}", width, "")
    worse = [t for t in doc["transitions"] if t["worse"]]
    better = [t for t in doc["transitions"] if t.get("change") == "better"]
    applies = [t for t in doc["transitions"] if t.get("change") in ("judged", "not judged")]
    if worse:
        lines.append("What gets worse:")
        for t in worse:
            head = safe_line(t.get("headline") or t.get("title") or t["id"])
            tag = "" if t.get("verified", True) else " [unverified matrix entry: does not fail the plan]"
            lines += _wrap(f"{_status(t['from'])} -> {_status(t['to'])}  {safe_line(t['id'])}: {head}{tag}", width,
                           "  ")
            if not quiet and t.get("reason"):
                lines += _wrap(safe_line(t["reason"]), width, "      ")
    if better and not quiet:
        lines.append("What gets better:")
        for t in better:
            lines += _wrap(f"{_status(t['from'])} -> {_status(t['to'])}  {safe_line(t['id'])}: "
                           f"{safe_line(t.get('title') or '')}", width, "  ")
    if applies and not quiet:
        lines += _wrap("Judged now / no longer: " + ", ".join(
            f"{safe_line(t['id'])} ({_status(t['from'])} -> {_status(t['to'])})" for t in applies), width, "")
    if not doc["transitions"] and not quiet:
        lines.append("No finding changes status.")
    kept = doc.get("unchanged_problems") or []
    if kept and not quiet:
        lines.append(f"Problems before the change, not counted ({len(kept)}): "
                     + ", ".join(f"{_status(p['status'])} {safe_line(p['id'])}" for p in kept[:8])
                     + (" ..." if len(kept) > 8 else ""))
    if doc.get("steps") and not quiet:
        lines.append("")
        lines.append("Steps, in order:")
        for s in doc["steps"]:
            lines += _wrap(f"{s['step']}. {safe_line(s['text'])}", width, "  ")
            for command in s.get("commands") or []:
                lines.append(f"       {safe_line(command)}")
    lines.append("")
    lines.append(f"Plan: {safe_line(doc['verdict'])}")
    return "\n".join(lines) + "\n"


def render_markdown(doc: Mapping[str, Any]) -> str:
    """The plan as GitHub-flavoured Markdown: the changes, a table of the findings that move, the steps. Every value is
    escaped (reports.markdown's text/code); the caller redacts host names, addresses and users first."""
    from dl_doctor.reports.markdown import code, text

    lines = ["### dl-doctor plan", ""]
    for c in doc["changes"]:
        lines.append(f"- {code(c['option'])}: {text(c['summary'], 300)}"
                     + ("" if c.get("verified", True) else " *(unverified matrix entry)*"))
        for b in c.get("blockers") or []:
            lines.append(f"  - **cannot be made as asked:** {text(b, 300)}")
    lines.append("")
    if doc["transitions"]:
        lines += ["| check | before | after | finding |", "|---|---|---|---|"]
        for t in doc["transitions"]:
            after = _status(t["to"]) + ("" if t.get("verified", True) else " (unverified)")
            lines.append(f"| {code(t['id'], True)} | {text(_status(t['from']))} | {text(after)} | "
                         f"{text(t.get('headline') or t.get('reason') or '', 400)} |")
        lines.append("")
    else:
        lines += ["No finding changes status.", ""]
    if doc.get("steps"):
        lines.append("Steps, in order:")
        lines.append("")
        for s in doc["steps"]:
            lines.append(f"{s['step']}. {text(s['text'], 400)}")
            for command in s.get("commands") or []:
                lines.append(f"   {code(command)}")
        lines.append("")
    lines.append(f"**{text(doc['verdict'], 300)}**")
    return "\n".join(lines) + "\n"
