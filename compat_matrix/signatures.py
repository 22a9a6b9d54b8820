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
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

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

    def finditer(self, hay: str, limit: int = MAX_FIRST_HITS) -> Iterator[Tuple[int, int]]:
        """Every non-overlapping match in ``hay`` (lower-cased), in order; at most ``limit`` occurrences of the first
        literal are tried, so a text of near-misses costs what :meth:`search` costs."""
        first = self.items[0][1]
        at = hay.find(first)
        tries = 0
        while at >= 0 and tries < limit:
            end = self._rest(hay, at + len(first))
            tries += 1
            if end is not None:
                yield at, end
                at = hay.find(first, max(end, at + 1))
            else:
                at = hay.find(first, at + 1)

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


def gated_in(sig: Mapping[str, Any], hay: str, seen: Dict[str, bool]) -> bool:
    """A signature's ``gate`` (literals, lower case) is a cheap test before its patterns are tried: a catalog of a
    thousand status codes is searched only in a text that holds one of its family's words (``cudnn_status_``,
    ``cuda error``). No gate: always tried."""
    gate = sig.get("gate")
    if not gate:
        return True
    for word in gate:
        if word not in seen:
            seen[word] = word in hay
        if seen[word]:
            return True
    return False


def match(text: str, signatures: Iterable[Dict[str, Any]]) -> List[Match]:
    """Every signature with a pattern in ``text``, the most specific first."""
    hay = text[-MAX_TEXT:].lower()
    out: List[Match] = []
    gates: Dict[str, bool] = {}
    for sig in signatures:
        if not gated_in(sig, hay, gates):
            continue
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


def _finding_text(f: Dict[str, Any]) -> str:
    fix = f.get("fix") if isinstance(f.get("fix"), dict) else {}
    return " ".join(str(x) for x in (f.get("message"), f.get("headline"), (fix or {}).get("summary")) if x)[:4000]


def _condition_holds(cause: Dict[str, Any], finding: Dict[str, Any]) -> Optional[bool]:
    """A cause's ``confirmed_when`` for this finding's check: True (a pattern is in the finding's message, headline
    or fix), False (the cause names patterns and none is there: the check failed for another reason), None (the
    cause names no condition for this check: any failure of it counts)."""
    when = cause.get("confirmed_when") or {}
    patterns = when.get(finding.get("id")) if isinstance(when, dict) else None
    if not patterns:
        return None
    hay = _finding_text(finding).lower()
    return any(compile_pattern(p).search(hay) is not None for p in patterns)


def _fix_of(finding: Dict[str, Any]) -> Optional[Tuple[str, List[str]]]:
    fix = finding.get("fix")
    if isinstance(fix, dict) and isinstance(fix.get("summary"), str) and fix["summary"].strip():
        commands = [c for c in fix.get("commands") or [] if isinstance(c, str)][:12]
        return fix["summary"], commands
    return None


WEIGHT = {"confirmed": 0, "likely": 1, "possible": 2, "unlikely": 3}


def rank(matches: Sequence[Match], causes: Dict[str, Dict[str, Any]],
         findings: Optional[Dict[str, Dict[str, Any]]] = None) -> List[Dict[str, Any]]:
    """The candidate causes of ``matches``, most likely first (docs/why.md, "Verdicts").

    From the text alone every cause is *possible*: the most specific matching signature first, then each signature's
    own order. With ``findings`` (check id -> finding):

    - a cause one of whose deciding checks fails (and, where the cause names a ``confirmed_when`` condition for that
      check, the finding says so) is a candidate for *confirmed*; one whose checks only warn is *likely*;
    - two causes are never both confirmed on the same evidence: where the same failures decide several candidates,
      the one whose condition the finding meets, or that more failing checks point at, is confirmed; candidates the evidence cannot tell apart are all *likely*, each naming the others;
    - a cause is *unlikely* only when a deciding check ran and passed and none failed or warned;
    - where a finding decides a cause, its fix (rendered for the machine inspected) replaces the cause's template.
    """
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
        support: Dict[str, Tuple[frozenset, bool]] = {}  # a confirmed candidate: its failing checks, conditioned
        for cid, c in scored.items():
            cause = causes[cid]
            ran = [findings[k] for k in c["checks"] if k in findings]
            failing, conditioned, other_reason = set(), False, []
            for f in ran:
                if f.get("status") not in ("fail", "warn", "error"):
                    continue
                holds = _condition_holds(cause, f)
                if holds is False:
                    other_reason.append(f)
                    continue
                conditioned = conditioned or holds is True
                failing.add(f["id"])
            passing = frozenset(f["id"] for f in ran if f.get("status") == "pass")
            bad = [findings[k] for k in sorted(failing)]
            if bad:
                hard = any(f.get("status") == "fail" for f in bad)
                c["verdict"] = "confirmed" if hard else "likely"
                c["evidence"] = [f"{f['id']} {f['status']}: {str(f.get('message', ''))[:300]}" for f in bad]
                fix = next((x for x in (_fix_of(f) for f in bad if f.get("status") == "fail") if x), None) \
                    or next((x for x in (_fix_of(f) for f in bad) if x), None)
                if fix:
                    c["fix"], c["commands"] = fix[0], fix[1]
                    c["fix_from"] = next(f["id"] for f in bad if _fix_of(f) == fix)
                if hard:
                    support[cid] = (frozenset(k for k in failing if findings[k].get("status") == "fail"), conditioned)
            elif other_reason:
                c["evidence"] = [f"{f['id']} {f['status']}, but its finding does not show this cause: "
                                 f"{str(f.get('message', ''))[:200]}" for f in other_reason]
            elif ran and passing and all(f.get("status") in ("pass", "skip", "info") for f in ran):
                c["verdict"] = "unlikely"
                c["evidence"] = [f"{f['id']} pass: {str(f.get('message', ''))[:200]}" for f in ran
                                 if f.get("status") == "pass"]
        # the same failing evidence confirms one cause at most
        for cid, mine in support.items():
            rivals = [o for o, theirs in support.items() if o != cid and theirs[0] & mine[0]]
            beaten_by = [o for o in rivals if _beats(support[o], mine)]
            tied = [o for o in rivals if not _beats(mine, support[o]) and not _beats(support[o], mine)]
            if beaten_by or tied:
                scored[cid]["verdict"] = "likely"
                if tied:
                    scored[cid]["ambiguous_with"] = sorted(tied)
    # among causes the evidence confirms, the one more of whose deciding checks found it comes first (a version
    # mismatch that both the fabric manager check and the unit's journal show, before 'not running' alone)
    return sorted(scored.values(), key=lambda c: (WEIGHT[c["verdict"]], -len(c["evidence"])
                                                  if c["verdict"] in ("confirmed", "likely") else 0, c["order"]))


def _beats(a: Tuple[frozenset, bool], b: Tuple[frozenset, bool]) -> bool:
    """Evidence ``a`` points at its cause more than ``b`` at its own: a condition the finding meets against none;
    else more failing checks (a strict superset). A passing check does not tell two causes apart (a cause that lists
    more checks would lose for being careful)."""
    (fa, ca), (fb, cb) = a, b
    if ca != cb:
        return ca
    return fa > fb
