"""Error text and log lines against the signature base (compat_matrix/data/signatures.toml): what matched, the
candidate causes ranked, and — given a machine's findings — which causes the evidence confirms or argues against.

Patterns come from data and overlays, so they are not regular expressions: literal text (case-insensitive) with
``*`` (any text, at most ``GAP`` characters), ``{n}`` (digits) and ``{w}`` (a word: letters, digits, ``_+-``). A match
is found without backtracking (the spaces around a ``*`` belong to the gap): each occurrence of the pattern's first literal is tried once, each later literal is the
first occurrence inside its window, and ``{n}``/``{w}`` consume greedily. The cost is linear in the text for a
given pattern (bounded by occurrences × GAP), whatever the pattern says.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

GAP = 400
MAX_FIRST_HITS = 2000  # occurrences of a pattern's first literal tried per text
MAX_TEXT = 16 << 20    # why reads at most this much of a log (its end: the error is last)
_WORD = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_+-")
_DIGITS = frozenset("0123456789")


class PatternError(ValueError):
    pass


@dataclass(frozen=True)
class Pattern:
    text: str
    items: Tuple[Tuple[str, str], ...]  # ("lit", text) | ("any", "") | ("num", "") | ("word", "")

    @property
    def specificity(self) -> int:
        return sum(len(v) for k, v in self.items if k == "lit")

    def search(self, hay: str) -> Optional[Tuple[int, int]]:
        """(start, end) of the first match in ``hay`` (already lower-cased), or None."""
        first = self.items[0][1]
        at = hay.find(first)
        tries = 0
        while at >= 0 and tries < MAX_FIRST_HITS:
            end = self._rest(hay, at + len(first))
            if end is not None:
                return at, end
            at = hay.find(first, at + 1)
            tries += 1
        return None

    def _rest(self, hay: str, pos: int) -> Optional[int]:
        gap = False
        for kind, value in self.items[1:]:
            if kind == "any":
                gap = True
                continue
            if kind == "lit":
                if gap:
                    hit = hay.find(value, pos, pos + GAP + len(value))
                    if hit < 0:
                        return None
                    pos = hit + len(value)
                elif hay.startswith(value, pos):
                    pos += len(value)
                else:
                    return None
            else:
                chars = _DIGITS if kind == "num" else _WORD
                if gap:  # skip to the first character of the run, inside the window
                    limit = min(len(hay), pos + GAP)
                    while pos < limit and hay[pos] not in chars:
                        pos += 1
                start = pos
                while pos < len(hay) and hay[pos] in chars and pos - start < GAP:
                    pos += 1
                if pos == start:
                    return None
            gap = False
        return pos


@functools.lru_cache(maxsize=4096)
def compile_pattern(text: str) -> Pattern:
    if not isinstance(text, str) or not text.strip():
        raise PatternError("a pattern must be non-empty text")
    if len(text) > 500:
        raise PatternError("a pattern is at most 500 characters")
    items: List[Tuple[str, str]] = []
    buf = ""
    i = 0
    low = text.lower()
    while i < len(low):
        token = next((t for t in ("{n}", "{w}") if low.startswith(t, i)), None)
        if low[i] == "*" or token:
            if low[i] == "*":
                buf = buf.rstrip()  # the spaces around '*' belong to the gap ("Pending * : Yes")
            if buf:
                items.append(("lit", buf))
                buf = ""
            if low[i] == "*":
                if items and items[-1][0] == "any":
                    raise PatternError(f"{text!r}: two '*' in a row")
                items.append(("any", ""))
                i += 1
                while i < len(low) and low[i].isspace():
                    i += 1
            else:
                items.append(("num" if token == "{n}" else "word", ""))
                i += 3
            continue
        buf += low[i]
        i += 1
    if buf:
        items.append(("lit", buf))
    if not items or items[0][0] != "lit":
        raise PatternError(f"{text!r}: a pattern starts with literal text")
    if items[-1][0] == "any":
        raise PatternError(f"{text!r}: a pattern does not end with '*'")
    return Pattern(text, tuple(items))


@dataclass
class Match:
    signature: Dict[str, Any]
    pattern: Pattern
    excerpt: str


def match(text: str, signatures: Iterable[Dict[str, Any]]) -> List[Match]:
    """Every signature with a pattern in ``text``, the most specific first."""
    hay = text[-MAX_TEXT:].lower()
    out: List[Match] = []
    for sig in signatures:
        best: Optional[Tuple[Pattern, Tuple[int, int]]] = None
        for raw in sig.get("patterns") or []:
            pattern = compile_pattern(raw)
            span = pattern.search(hay)
            if span and (best is None or pattern.specificity > best[0].specificity):
                best = (pattern, span)
        if best:
            start, end = best[1]
            line_start = hay.rfind("\n", 0, start) + 1
            line_end = hay.find("\n", end)
            excerpt = text[-MAX_TEXT:][line_start:line_end if line_end >= 0 else len(hay)][:300]
            out.append(Match(sig, best[0], excerpt.strip()))
    out.sort(key=lambda m: -m.pattern.specificity)
    return out


def rank(matches: Sequence[Match], causes: Dict[str, Dict[str, Any]],
         findings: Optional[Dict[str, Dict[str, Any]]] = None) -> List[Dict[str, Any]]:
    """The candidate causes of ``matches``, most likely first.

    From the text alone: the most specific matching signature first, then each signature's own order. With
    ``findings`` (check id -> finding): a cause one of whose deciding checks fails or warns is *confirmed* and comes
    first (more confirming checks first); one whose deciding checks ran and all passed is *ruled out* (by what they found) and comes last."""
    scored: Dict[str, Dict[str, Any]] = {}
    for mi, m in enumerate(matches):
        for ci, cid in enumerate(m.signature.get("causes") or []):
            cause = causes.get(cid)
            if cause is None or cid in scored:
                continue
            scored[cid] = {"id": cid, "summary": cause["summary"], "fix": cause["fix"],
                           "checks": list(cause.get("checks") or []), "signature": m.signature["id"],
                           "order": (mi, ci), "evidence": [], "verdict": "possible"}
    if findings is not None:
        for c in scored.values():
            ran = [findings[k] for k in c["checks"] if k in findings]
            bad = [f for f in ran if f.get("status") in ("fail", "warn", "error")]
            if bad:
                c["verdict"] = "confirmed" if any(f.get("status") == "fail" for f in bad) else "likely"
                c["evidence"] = [f"{f['id']} {f['status']}: {f.get('message', '')[:300]}" for f in bad]
            elif ran and all(f.get("status") == "pass" for f in ran):
                c["verdict"] = "unlikely"
                c["evidence"] = [f"{f['id']} pass: {f.get('message', '')[:200]}" for f in ran]
    weight = {"confirmed": 0, "likely": 1, "possible": 2, "unlikely": 3}
    # among causes the evidence confirms, the one more of whose deciding checks found it comes first (a version
    # mismatch that both the fabric manager check and the unit's journal show, before 'not running' alone)
    return sorted(scored.values(), key=lambda c: (weight[c["verdict"]], -len(c["evidence"])
                                                  if c["verdict"] in ("confirmed", "likely") else 0, c["order"]))
