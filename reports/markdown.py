"""A ticket-ready summary in GitHub-flavoured Markdown: the host in one line, the stack's versions, the problems with
their fixes, and the facts that matter in a collapsed block; under a size limit (GitHub's comment limit by default).

It is meant to be pasted in public, so every value that comes from the machine is escaped: it cannot close a block,
start a heading or a list, make a link or an image, mention a user, link a URL or an e-mail address, or pass raw HTML
through. Text goes through :func:`text`, values in tables through :func:`code`, and multi-line values into fences
longer than any run of backticks they hold."""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List

from dl_doctor.reports import present, stack
from dl_doctor.reports.terminal import ORDER, headline, safe_text

GITHUB_LIMIT = 65536  # characters in an issue or comment body
MIN_CHARS = 2000
STATUS_MARK = {"fail": "❌", "error": "⛔", "warn": "⚠️", "pass": "✅", "skip": "➖"}
STATE_MARK = {"ok": "", "other": "", "older": " ⚠️", "optional": " ⚠️", "wrong": " ❌", "missing": " ❌", "unmet": " ❌"}

# Markdown's punctuation that can start or end a construct anywhere in a line: emphasis, code, links, images, raw HTML,
# entities, tables, math, headings, strike-through. '\' first (it escapes the others).
_INLINE = re.compile(r"([\\`*_\[\]<>&|!#~$])")
# invisible; breaks '@name' mentions and e-mail autolinks without changing what is read (a backslash before '@' or '.'
# does not: cmark-gfm finds e-mail addresses in the text after the escapes are read)
_WORD_JOINER = "\u2060"


def text(value: Any, limit: int = 2000) -> str:
    """A machine value as Markdown text: one line, every construct escaped."""
    s = safe_text(str(value))[:limit]
    s = re.sub(r"\s+", " ", s).strip()
    s = _INLINE.sub(r"\\\1", s)
    s = re.sub(r":(?=//)", r"\\:", s)                    # no URL autolinks (http://, ftp://)
    s = re.sub(r"(?i)(www)\.", r"\1\\.", s)              # nor www. autolinks (GFM starts one after '_' too)
    s = s.replace("@", "@" + _WORD_JOINER)               # nor @mentions and e-mail autolinks
    s = re.sub(r"^([-+=])", r"\\\1", s)                   # nor a list or a setext underline, at the start
    s = re.sub(r"^(\d+)([.)])", r"\1\\\2", s)             # nor an ordered list
    return s


def code(value: Any, in_table: bool = False, limit: int = 500) -> str:
    """A machine value as an inline code span (nothing inside one is a link, a mention or HTML)."""
    s = safe_text(str(value))[:limit]
    s = re.sub(r"[\r\n]+", " ", s)
    if not s.strip():
        return "` `" if s else ""
    if in_table:
        s = s.replace("|", "\\|")  # GFM splits cells at '|' even inside code; '\|' is a literal bar there
    run = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (run + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or (s.startswith(" ") and s.endswith(" ")) else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def fenced(body: str, lang: str = "") -> List[str]:
    """``body`` in a code fence longer than any backtick run in it (it cannot close the fence)."""
    body = safe_text(body)
    run = max((len(m) for m in re.findall(r"`{3,}", body)), default=2)
    fence = "`" * max(3, run + 1)
    return [fence + lang, *body.splitlines(), fence]


def _host_line(report: Dict[str, Any]) -> str:
    return text(headline(report) or "unknown host")


def _stack_table(model: Dict[str, Any]) -> List[str]:
    rows = ["| Layer | What is there |", "|---|---|"]
    for node in model["system"]:
        mark = " ❌" if node["state"] == "bad" else " ⚠️" if node["state"] == "warn" else ""
        rows.append(f"| {text(node['layer'])}{mark} | {code(node['label'], True)}"
                    + (f" {text(node['detail'])}" if node.get("detail") else "")
                    + (f" ({code(node['finding'], True)})" if node.get("finding") else "") + " |")
    for env in model["environments"]:
        for fw in env["frameworks"]:
            libs = " · ".join(
                f"{code(l['soname'], True)} {code(l['version'] or ('not found' if l['state'] == 'missing' else '?'), True)}"
                f"{STATE_MARK.get(l['state'], '')}" for l in fw["libraries"][:12])
            more = f" · and {len(fw['libraries']) - 12} more" if len(fw["libraries"]) > 12 else ""
            rows.append(f"| {code(env['name'], True)}: {code(fw['name'], True)} {code(fw['version'] or '?', True)} "
                        f"(CUDA {code(fw['cuda'] or '?', True)}) | {libs or 'no CUDA library by name'}{more} |")
    return rows


def _problem(f: Dict[str, Any], max_items: int) -> List[str]:
    out = [f"#### {STATUS_MARK.get(f['status'], '')} {f['status'].upper()}: {text(present.heading(f), 300)}",
           f"{code(f['id'])} · {text(f.get('title') or '', 300)}", ""]
    parts = present.items(f)
    if len(parts) == 1:
        out += [text(parts[0], 3000), ""]
    else:
        out += [f"- {text(p, 1000)}" for p in parts[:max_items]]
        if len(parts) > max_items:
            out.append(f"- … and {len(parts) - max_items} more (in the JSON report)")
        out.append("")
    fix = f.get("fix") or {}
    if fix.get("summary"):
        out.append(f"**Fix:** {text(fix['summary'], 1000)}")
        if fix.get("commands"):
            out += ["", *fenced("\n".join(str(c) for c in fix["commands"][:20]), "sh")]
        out.append("")
    return out


def _facts_that_matter(report: Dict[str, Any], model: Dict[str, Any]) -> Dict[str, Any]:
    facts = report.get("facts") or {}
    driver = facts.get("nvidia_driver") or {}
    nvml = facts.get("nvml") or {}
    kernel_log = facts.get("kernel_log") or {}
    return {
        "host": report.get("host"),
        "kernel_module": driver.get("kernel_module"),
        "driver_libraries": (driver.get("userspace") or {}).get("versions"),
        "forward_compat": driver.get("forward_compat_libs"),
        "gpus": [{k: d.get(k) for k in ("name", "bus_id", "compute_capability", "memory_total_mib")}
                 for d in nvml.get("devices") or [] if isinstance(d, dict)][:16],
        "cuda_toolkits": (facts.get("cuda_toolkits") or {}).get("toolkits"),
        "xids": (kernel_log.get("xids") or [])[:20],
        "environments": [{"name": e["name"], "prefix": e["prefix"], "python": e["python"],
                          "frameworks": [{"name": f["name"], "version": f["version"], "cuda": f["cuda"],
                                          "libraries": [{k: l[k] for k in ("soname", "version", "path", "via", "state")}
                                                        for l in f["libraries"]]} for f in e["frameworks"]]}
                         for e in model["environments"]],
        "probe_errors": report.get("probe_errors"),
    }


def render(report: Dict[str, Any], max_chars: int = GITHUB_LIMIT) -> str:
    """The summary, at most ``max_chars`` characters: what does not fit is cut from the end of each section in
    turn (the facts block first, then the passed checks, then the problems' item lists), and the summary says so."""
    max_chars = max(MIN_CHARS, int(max_chars))
    model = stack.build(report)
    findings = sorted(report.get("findings") or [], key=lambda f: (ORDER.index(f["status"]), f["id"]))
    problems = [f for f in findings if f["status"] in ("error", "fail", "warn")]
    others = [f for f in findings if f["status"] in ("pass", "skip")]
    s = report.get("summary") or {}
    counts = ", ".join(f"{s.get(k, 0)} {k}" for k in ("fail", "error", "warn", "pass", "skip") if s.get(k))
    tool = report.get("tool") or {}
    red = report.get("redaction") or {}
    footer = (f"<sub>dl-doctor {text(tool.get('version', ''))} · report schema {text(report.get('schema_version', '1'))}"
              f" · secrets{', host names, addresses and user names' if red.get('extended') else ''} redacted"
              f" · re-check: <code>dl-doctor check FACTS.json</code></sub>")

    def build(facts_chars: int, passed: bool, max_items: int) -> str:
        out = [f"### dl-doctor: {counts or 'no checks ran'}", "", _host_line(report), ""]
        out += ["**Stack**", "", *_stack_table(model), ""]
        if problems:
            out += [f"**Problems ({len(problems)})**", ""]
            for f in problems:
                out += _problem(f, max_items)
        else:
            out += ["**No problems found.**", ""]
        if passed and others:
            out += [f"<details><summary>Passed ({s.get('pass', 0)}) and skipped ({s.get('skip', 0)}) checks"
                    f"</summary>", "", "| | Check | Result |", "|---|---|---|"]
            out += [f"| {STATUS_MARK[f['status']]} | {code(f['id'], True)} | {text(f['message'], 300)} |" for f in others]
            out += ["", "</details>", ""]
        if facts_chars:
            body = json.dumps(_facts_that_matter(report, model), indent=1, ensure_ascii=False, default=str)
            if len(body) > facts_chars:
                body = body[:facts_chars] + "\n… (cut to fit; the JSON report has every fact)"
            out += ["<details><summary>Facts that matter</summary>", "", *fenced(body, "json"), "", "</details>", ""]
        out.append(footer)
        return "\n".join(out) + "\n"

    attempts = [(40000, True, 30), (12000, True, 30), (4000, True, 12), (0, True, 12), (0, False, 12), (0, False, 5),
                (0, False, 2)]
    for facts_chars, passed, max_items in attempts:
        doc = build(facts_chars, passed, max_items)
        if len(doc) <= max_chars:
            return doc
    note = "\n\n*(cut to fit the size limit; the JSON report has everything)*\n"
    doc = build(0, False, 1)
    cut = doc[:max_chars - len(note)]
    # never leave a fence open: cut before the last opening fence the cut would leave unclosed
    fences = [m.start() for m in re.finditer(r"(?m)^`{3,}", cut)]
    if len(fences) % 2:
        cut = cut[:fences[-1]]
    return cut.rstrip() + note

