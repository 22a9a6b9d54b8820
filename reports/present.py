"""How a finding reads to a person, the same in every report: the problem first, then the check; a finding about
several items as a list, not a paragraph."""

from __future__ import annotations

from typing import Any, Dict, List

MAX_ITEMS = 30


def heading(finding: Dict[str, Any]) -> str:
    """What is wrong, in a few words (the check's problem heading, or the finding's own); the title for a pass."""
    if finding.get("status") in ("warn", "fail", "error") and finding.get("headline"):
        return str(finding["headline"])
    return str(finding.get("title") or finding.get("id") or "")


def items(finding: Dict[str, Any]) -> List[str]:
    """The finding's message as the items it is about: checks join several problems with '; ' (each a sentence of
    its own), so a message of two or more such parts is a list; anything else is one item."""
    message = str(finding.get("message") or "")
    parts = [p.strip() for p in _top_level_split(message) if p.strip()]
    if len(parts) >= 2 and all(len(p) >= 24 for p in parts):
        if len(parts) > MAX_ITEMS:
            parts = parts[:MAX_ITEMS] + [f"… and {len(parts) - MAX_ITEMS} more (the JSON report has them all)"]
        return parts
    return [message]


def _top_level_split(text: str, sep: str = "; ") -> List[str]:
    """``text`` split at ``sep`` outside parentheses and brackets ('(each needs its own runtime; keep them apart)'
    stays whole)."""
    out, depth, start, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        if ch in "([":
            depth += 1
        elif ch in ")]" and depth:
            depth -= 1
        elif depth == 0 and text.startswith(sep, i):
            out.append(text[start:i])
            start = i + len(sep)
            i = start
            continue
        i += 1
    out.append(text[start:])
    return out
