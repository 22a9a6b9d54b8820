"""The HTML report: one self-contained file (inline CSS, no external URL, no JavaScript)."""

from __future__ import annotations

import functools
import json
from typing import Any, Dict

import jinja2
from markupsafe import Markup, escape

from dl_doctor.reports import present, stack
from dl_doctor.reports.inventory import inventory
from dl_doctor.reports.terminal import ORDER, headline


def wrap_path(value: Any) -> Markup:
    """The value escaped, with a break opportunity after each '/': a long path wraps at its separators."""
    return Markup(str(escape("" if value is None else str(value))).replace("/", "/<wbr>"))


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("dl_doctor.reports", "templates"),
        autoescape=True,  # every value is escaped, whatever the file name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True,
    )
    env.filters["pretty_json"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False, sort_keys=True)
    env.filters["wrap_path"] = wrap_path
    env.filters["heading"] = present.heading
    env.filters["items"] = present.items
    return env


@functools.lru_cache(maxsize=1)
def template() -> jinja2.Template:
    """The compiled template (compiling it is most of the cost of an HTML report; `run` does it while the probes
    wait on the host)."""
    return _environment().get_template("report.html.j2")


def render(report: Dict[str, Any]) -> str:
    findings = sorted(report.get("findings", []), key=lambda f: (ORDER.index(f["status"]), f["id"]))
    return template().render(
        report=report,
        headline=headline(report),
        problems=[f for f in findings if f["status"] in ("error", "fail", "warn")],
        others=[f for f in findings if f["status"] in ("pass", "skip")],
        inventory=inventory(report),
        stack_html=Markup(stack.render_html(stack.build(report))),
        summary=report.get("summary", {}),
    )


def render_fleet(result: Dict[str, Any]) -> str:
    """The fleet comparison as one self-contained page: the differing facts by group, the failing checks, and the
    node × check grid for the nodes that matter (those that fail or are odd out), at most 200 of them."""
    odd = {o["node"] for g in result.get("groups", []) for d in g["differences"] for o in d["odd"]}
    failing = {f["node"] for f in result.get("failing", [])}
    grid = {check: set(nodes) for check, nodes in (result.get("failing_by_check") or {}).items()}
    nodes = sorted(failing | odd)[:200]
    return _environment().get_template("fleet.html.j2").render(
        r=result, grid=grid, grid_checks=sorted(grid)[:60], grid_nodes=nodes,
        diff_count=sum(len(g["differences"]) for g in result.get("groups", [])))
