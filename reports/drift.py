"""The text of a drift comparison (``dl-doctor diff``; the comparison itself is doctor/judge/diff.py)."""

from __future__ import annotations

from typing import Any, Mapping


def _one_line(obj: Any) -> Any:
    """Every string escaped for a terminal and kept on one line (a value cannot forge a line of the diff)."""
    from dl_doctor.reports.text import safe_value

    return safe_value(obj, one_line=True)


def render_text(result: Mapping[str, Any], baseline: str, current: str) -> str:
    result, baseline, current = _one_line(dict(result)), _one_line(baseline), _one_line(current)
    v, f = result["versions"], result["findings"]
    lines = [f"dl-doctor diff {baseline} -> {current}"]
    for key, change in v["changed"].items():
        lines.append(f"  changed   {key}: {change['from']} -> {change['to']}")
    for key, value in v["added"].items():
        lines.append(f"  added     {key}: {value}")
    for key, value in v["removed"].items():
        lines.append(f"  removed   {key}: {value}")
    for item in f["appeared"]:
        lines.append(f"  appeared  {item['id']} [{item['status']}] {item['message']}")
    for item in f["changed"]:
        lines.append(f"  worse     {item['id']} [{item['was']} -> {item['status']}] {item['message']}"
                     if _rank(item["status"]) > _rank(item["was"]) else
                     f"  better    {item['id']} [{item['was']} -> {item['status']}] {item['message']}")
    for item in f["cleared"]:
        lines.append(f"  cleared   {item['id']} [was {item['was']}] {item['message']}")
    n = sum(len(v[k]) for k in v) + sum(len(f[k]) for k in f)
    lines.append(f"{n} change(s)." if n else "No drift.")
    return "\n".join(lines) + "\n"


def _rank(status: str) -> int:
    return {"warn": 1, "fail": 2, "error": 3}.get(status, 0)


def render_markdown(result: Mapping[str, Any], baseline: str, current: str) -> str:
    """The drift as GitHub-flavoured Markdown for a ticket or a pull request: a table of the versions that changed,
    appeared or went, and one of the findings that moved. Every value is escaped (reports.markdown's text/code); the
    caller redacts host names, addresses and users first (it is meant to be pasted in public)."""
    from dl_doctor.reports.markdown import code, text

    v, f = result["versions"], result["findings"]
    lines = [f"### dl-doctor diff {code(baseline)} → {code(current)}", ""]
    rows = ([(key, change["from"], change["to"]) for key, change in v["changed"].items()]
            + [(key, None, value) for key, value in v["added"].items()]
            + [(key, value, None) for key, value in v["removed"].items()])
    if rows:
        lines += ["| version | baseline | current |", "|---|---|---|"]
        lines += [f"| {code(key, True)} | {code(a, True) if a is not None else '(none)'} | "
                  f"{code(b, True) if b is not None else '(none)'} |" for key, a, b in rows]
        lines.append("")
    moved = ([(i["id"], "(none)", i["status"], i["message"]) for i in f["appeared"]]
             + [(i["id"], i["was"], i["status"], i["message"]) for i in f["changed"]]
             + [(i["id"], i["was"], "cleared", i["message"]) for i in f["cleared"]])
    if moved:
        lines += ["| check | baseline | current | finding |", "|---|---|---|---|"]
        lines += [f"| {code(i, True)} | {text(was)} | {text(now)} | {text(message, 500)} |"
                  for i, was, now, message in moved]
        lines.append("")
    n = len(rows) + len(moved)
    lines.append(f"{n} change(s)." if n else "No drift.")
    return "\n".join(lines) + "\n"
