"""The login status line (written by every run to ``--status``, printed at login by the profile.d snippet that
doctor/integrations/login_hook.py installs)."""

from __future__ import annotations

import datetime as _dt
from typing import Any, Dict

from dl_doctor.reports.text import safe_text


def status_line(report: Dict[str, Any], width: int = 240) -> str:
    """One line for the login: when, the counts, the worst finding, and the command that shows the rest.

    It names a command, not the cached report: the reports carry the environment and are private to root; any user
    can run ``dl-doctor`` themselves. Control characters from the machine (an image's names) are escaped.
    """
    s = report.get("summary", {})
    started = report.get("run", {}).get("started_at") or ""
    try:
        when = _dt.datetime.fromisoformat(started.replace("Z", "+00:00")).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        when = started or "unknown time"
    problems = [f for f in report.get("findings", []) if f.get("status") in ("fail", "error", "warn")]
    order = {"fail": 0, "error": 1, "warn": 2}
    problems.sort(key=lambda f: (order[f["status"]], f["id"]))
    where = "Details: run dl-doctor"
    # every user reads this line: security findings name weaknesses, so they are only counted, with the command
    security = [f for f in problems if str(f.get("id", "")).startswith("DLD-SEC-")]
    problems = [f for f in problems if not str(f.get("id", "")).startswith("DLD-SEC-")]
    if security:
        where = (f"{len(security)} security finding{'s' if len(security) != 1 else ''}: sudo dl-doctor run --only "
                 f"security. " + where)
    if not problems:
        if security:
            return f"dl-doctor {when}: {where}"
        return f"dl-doctor {when}: OK ({s.get('pass', 0)} pass, {s.get('skip', 0)} skipped). {where}"
    counts = ", ".join(f"{n} {k}" for k in ("fail", "error", "warn")
                       if (n := sum(1 for f in problems if f.get("status") == k)))
    worst = problems[0]
    head = f"dl-doctor {safe_text(when)}: {counts}. {safe_text(str(worst['id']))}: "
    tail = f" {where}"
    room = max(60, width - len(head) - len(tail))
    message = " ".join(safe_text(str(worst.get("message", ""))).split())
    if len(message) > room:
        message = message[: room - 1].rstrip() + "…"
    return " ".join(f"{head}{message}{tail}".split())  # one line, whatever the messages held
