"""The text, Markdown and HTML of a machine's history (``dl-doctor history``; the history itself is
doctor/judge/history.py). One line per change; every value from a report is escaped where it is printed."""

from __future__ import annotations

from typing import Any, List, Mapping, Tuple

_RANK = {"warn": 1, "fail": 2, "error": 3}


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _shown(value: Any) -> str:
    return "(none)" if value is None else "(empty)" if value == "" else str(value)


def changes(t: Mapping[str, Any]) -> List[Tuple[str, str]]:
    """(kind, text) for every change of one transition, in the order they are shown; the texts are not escaped."""
    out: List[Tuple[str, str]] = []
    if t["boot"] == "reboot":
        out.append(("reboot", "the machine rebooted: counters that reset at boot are not compared"))
    elif t["boot"] == "unknown" and t.get("counters_not_compared"):
        out.append(("boot", "boot not known (a report without the boot id): counters that reset at boot are not "
                            "compared"))
    v, f = t["versions"], t["findings"]
    for key, change in v["changed"].items():
        out.append(("changed", f"{key}: {_shown(change['from'])} -> {_shown(change['to'])}"))
    for key, value in v["added"].items():
        out.append(("added", f"{key}: {_shown(value)}"))
    for key, value in v["removed"].items():
        out.append(("removed", f"{key}: {_shown(value)}"))
    for item in f["appeared"]:
        out.append(("appeared", f"{item['id']} [{item['status']}] {item['message']}"))
    for item in f["changed"]:
        word = "worse" if _RANK.get(item["status"], 0) > _RANK.get(item["was"], 0) else "better"
        out.append((word, f"{item['id']} [{item['was']} -> {item['status']}] {item['message']}"))
    for item in f["cleared"]:
        out.append(("cleared", f"{item['id']} [was {item['was']}, now {item['status'] or 'not run'}] "
                               f"{item['message']}"))
    for x in t["xids"]:
        out.append(("xid", f"Xid {x['code']}" + (f" on {x['bus']}" if x["bus"] else "") +
                    (f": {x['text']}" if x["text"] else "")))
    for c in t["counters"]:
        out.append(("rose", f"{c['counter']} ({c['label']}): {c['from']} -> {c['to']}"))
    return out


def _counts(summary: Mapping[str, int]) -> str:
    parts = [f"{summary[k]} {k}" for k in ("fail", "error", "warn") if summary.get(k)]
    return ", ".join(parts) if parts else "no problem"


def _verdict(result: Mapping[str, Any]) -> str:
    if result["worse"]:
        return (f"NOT OK: the newest run is worse than the one before (at or above {result['fail_on']}) on "
                f"{_plural(len(result['worse']), 'host')}: " + ", ".join(result["worse"][:10])
                + (f" and {len(result['worse']) - 10} more" if len(result["worse"]) > 10 else ""))
    if not result["hosts"]:
        return "No report to compare."
    return "OK: no host's newest run is worse than the one before" + (
        "" if result["fail_on"] == "never" else f" (at or above {result['fail_on']})")


def render_text(result: Mapping[str, Any]) -> str:
    from dl_doctor.reports.text import safe_line, safe_value

    result = safe_value(dict(result), one_line=True)  # every string escaped, on one line: none can forge a line
    runs = sum(len(h["runs"]) for h in result["hosts"])
    lines = [f"dl-doctor history: {_plural(len(result['hosts']), 'host')}, {_plural(runs, 'run')}"]
    for h in result["hosts"]:
        lines.append("")
        lines.append(f"{h['host']}: {_plural(len(h['runs']), 'run')}")
        first = h["runs"][0]
        lines.append(f"  {first['started_at']}  first run: {_counts(first['summary'])}  ({first['source']})")
        for run, t in zip(h["runs"][1:], h["transitions"]):
            shown = changes(t)
            head = f"  {run['started_at']}  {_counts(run['summary'])}"
            lines.append(head + ("" if shown else "; no change") + f"  ({run['source']})")
            for kind, text in shown:
                lines.append(f"    {kind:<9} {text}")
    if result["skipped"]:
        lines.append("")
        lines.append(f"Skipped {_plural(len(result['skipped']), 'input')}:")
        for s in result["skipped"][:50]:
            lines.append(f"  SKIPPED {s['source']}: {s['error']}")
        if len(result["skipped"]) > 50:
            lines.append(f"  and {len(result['skipped']) - 50} more (all of them are in --json)")
    lines.append("")
    lines.append(safe_line(_verdict(result)))
    return "\n".join(lines) + "\n"


def render_markdown(result: Mapping[str, Any]) -> str:
    """The history as GitHub-flavoured Markdown: per host a table of its runs and what changed. Every value is
    escaped (reports.markdown's text/code); the caller redacts host names, addresses and users first."""
    from dl_doctor.reports.markdown import code, text

    runs = sum(len(h["runs"]) for h in result["hosts"])
    lines = [f"### dl-doctor history: {_plural(len(result['hosts']), 'host')}, {_plural(runs, 'run')}", ""]
    for h in result["hosts"]:
        lines += [f"#### {text(h['host'], 200)}", "", "| run | findings | change |", "|---|---|---|"]
        first = h["runs"][0]
        lines.append(f"| {code(first['started_at'], True)} | {text(_counts(first['summary']))} | first run |")
        for run, t in zip(h["runs"][1:], h["transitions"]):
            shown = changes(t) or [("", "no change")]
            for n, (kind, what) in enumerate(shown):
                lead = f"| {code(run['started_at'], True)} | {text(_counts(run['summary']))} |" if n == 0 else "| | |"
                lines.append(f"{lead} {text(kind + ' ' + what if kind else what, 500)} |")
        lines.append("")
    if result["skipped"]:
        lines.append(f"{_plural(len(result['skipped']), 'input')} skipped (not a report, or damaged).")
        lines.append("")
    lines.append(text(_verdict(result)))
    return "\n".join(lines) + "\n"


_CSS = ("body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:.5em 0 "
        "1.5em}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}th{background:#f4f4f4}"
        ".worse{color:#a00}.reboot{color:#555;font-style:italic}code{font-size:13px}")
_WORSE = {"appeared", "worse", "xid", "rose"}


def render_html(result: Mapping[str, Any]) -> str:
    """One self-contained page (inline CSS, no script, no external URL; a Content-Security-Policy that allows only
    the inline CSS): every value escaped, its control characters shown as escapes."""
    from markupsafe import escape

    from dl_doctor.reports.text import safe_line

    def e(value: Any) -> str:
        return str(escape(safe_line(value)))

    runs = sum(len(h["runs"]) for h in result["hosts"])
    title = f"dl-doctor history: {_plural(len(result['hosts']), 'host')}, {_plural(runs, 'run')}"
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'; '
           'img-src data:; form-action \'none\'; base-uri \'none\'">',
           f"<title>{e(title)}</title><style>{_CSS}</style></head><body>", f"<h1>{e(title)}</h1>",
           f"<p><strong>{e(_verdict(result))}</strong></p>"]
    for h in result["hosts"]:
        out.append(f"<h2>{e(h['host'])}</h2>")
        out.append("<table><tr><th>run</th><th>findings</th><th>what changed</th><th>report</th></tr>")
        first = h["runs"][0]
        out.append(f"<tr><td><code>{e(first['started_at'])}</code></td><td>{e(_counts(first['summary']))}</td>"
                   f"<td>first run</td><td><code>{e(first['source'])}</code></td></tr>")
        for run, t in zip(h["runs"][1:], h["transitions"]):
            items = "".join(f'<li class="{"worse" if k in _WORSE else "reboot" if k in ("reboot", "boot") else ""}">'
                            f"{e(k)} {e(what)}</li>" for k, what in changes(t)) or "<li>no change</li>"
            out.append(f"<tr><td><code>{e(run['started_at'])}</code></td><td>{e(_counts(run['summary']))}</td>"
                       f"<td><ul>{items}</ul></td><td><code>{e(run['source'])}</code></td></tr>")
        out.append("</table>")
    if result["skipped"]:
        out.append(f"<h2>Skipped {e(_plural(len(result['skipped']), 'input'))}</h2><ul>")
        out += [f"<li><code>{e(s['source'])}</code>: {e(s['error'])}</li>" for s in result["skipped"][:1000]]
        out.append("</ul>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
