"""The login status line (written by every run to ``--status-line``, printed at login by the profile.d snippet that
doctor/integrations/login_hook.py installs)."""

from __future__ import annotations

import datetime as _dt
from typing import Any, Dict, Optional

from dl_doctor.reports.present import heading
from dl_doctor.reports.text import safe_line, short

MAX_CHARS = 100
CALL = "Run dl-doctor"
MIN_HEADLINE = 32  # characters of the worst headline worth more than the security hint
_ORDER = {"fail": 0, "error": 1, "warn": 2}
# what typography the checks' own words use, in ASCII (anything else outside ASCII is escaped)
_ASCII = str.maketrans({"\u2014": "-", "\u2013": "-", "\u2026": "...", "\u2018": "'", "\u2019": "'",
                        "\u201c": '"', "\u201d": '"', "\u00d7": "x", "\u2192": "->", "\u2265": ">=",
                        "\u2264": "<=", "\u00b7": "-", "\u2022": "-", "\u00a0": " "})


def ascii_line(text: Any) -> str:
    """``text`` as one line of printable ASCII: control characters and line breaks escaped (:func:`safe_line`), the
    usual typography spelled in ASCII, any other character as its escape (``\\u00e9``). A login line reaches every
    terminal and locale that logs in."""
    return safe_line(str(text).translate(_ASCII)).encode("ascii", "backslashreplace").decode("ascii")


def run_date(report: Dict[str, Any]) -> Optional[str]:
    """The UTC date a report's run started (``2026-11-29``), or None."""
    started = str((report.get("run") or {}).get("started_at") or "")
    try:
        when = _dt.datetime.fromisoformat(started.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is not None:
        when = when.astimezone(_dt.timezone.utc)
    return when.strftime("%Y-%m-%d")


def status_line(report: Dict[str, Any], new_since: Optional[str] = None, limit: int = MAX_CHARS) -> str:
    """One line of at most ``limit`` characters for the login: the counts, the worst problem's headline (cut at a
    word), ``new since DATE`` when this run found something the previous one did not (``new_since``: that run's
    date, from login_hook.new_since), and the command that shows the rest.

    It names a command, not the cached report: the reports carry the environment and are private to root; any user
    can run ``dl-doctor`` themselves. Security findings name weaknesses, and every user reads this line: they are
    only counted. Everything from the machine is escaped, in ASCII.
    """
    s = report.get("summary") or {}
    findings = [f for f in report.get("findings") or [] if isinstance(f, dict)]
    problems = sorted((f for f in findings if f.get("status") in _ORDER),
                      key=lambda f: (_ORDER[f["status"]], str(f.get("id", ""))))
    security = [f for f in problems if str(f.get("id", "")).startswith("DLD-SEC-")]
    problems = [f for f in problems if not str(f.get("id", "")).startswith("DLD-SEC-")]
    since = f"new since {ascii_line(new_since)}" if new_since else ""
    if not problems and not security:
        counts = f"OK ({s.get('pass', 0)} passed, {s.get('skip', 0)} skipped{'; ' + since if since else ''})"
        return _fit(f"dl-doctor: {counts}. {CALL}", limit)
    parts = [f"{n} {k}" for k in ("fail", "error", "warn")
             if (n := sum(1 for f in problems if f.get("status") == k))]
    if security:
        parts.append(f"{len(security)} security" if problems else
                     f"{len(security)} security finding{'s' if len(security) != 1 else ''}")
    counts = ", ".join(parts) + (f"; {since}" if since else "")
    if not problems:  # only security findings: the command that shows them
        return _fit(f"dl-doctor: {counts}. Run sudo dl-doctor run --only security", limit)
    worst = problems[0]
    text = ascii_line(heading(worst) or worst.get("message") or worst.get("id") or "").rstrip(". ")
    head = f"dl-doctor: {counts}: "
    # the headline comes before the hint that security findings need sudo (the counts still name them)
    calls = [f"{CALL} (sudo for security)", CALL] if security else [CALL]
    for call in calls:
        room = limit - len(head) - len(f". {call}")
        if room >= min(len(text), MIN_HEADLINE) or call == calls[-1]:
            break
    if room < MIN_HEADLINE // 2:  # a heap of counts: the headline gives way to them
        return _fit(f"dl-doctor: {counts}. {call}", limit)
    cut = short(text, room)
    return _fit(head + cut + (f" {call}" if cut.endswith("...") else f". {call}"), limit)


def _fit(line: str, limit: int) -> str:
    return short(line, limit)
