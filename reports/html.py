"""The HTML report: one self-contained file (inline CSS, no external URL, no JavaScript). Every page's <head> carries
a Content-Security-Policy that allows only that inline CSS and data: images, so a value that got past the escaping
still could not run a script, load anything or send a form."""

from __future__ import annotations

import functools
import json
import pathlib
from typing import Any, Dict, List, Mapping, Optional

import jinja2
from markupsafe import Markup, escape

from dl_doctor.reports import present, stack
from dl_doctor.reports.inventory import inventory
from dl_doctor.reports.terminal import ORDER, headline, safe_text


def shown(value: Any) -> Any:
    """Every value a template prints: text with its control characters and bidirectional overrides escaped, as in
    a terminal (an override would make a path read as another on the page, a control character can hide text);
    markup made here and numbers as they are. Autoescaping then escapes the HTML."""
    return safe_text(value) if isinstance(value, str) and not isinstance(value, Markup) else value


def wrap_path(value: Any) -> Markup:
    """The value escaped, with a break opportunity after each '/': a long path wraps at its separators."""
    return Markup(str(escape(safe_text("" if value is None else str(value)))).replace("/", "/<wbr>"))


def _compiled_loader() -> "jinja2.BaseLoader | None":
    """The report's template compiled ahead of time (tests/tools/make_compiled_template.py), when its stamp still
    matches the template's source and this Jinja's version; None otherwise (the template is then compiled)."""
    import hashlib
    from importlib import resources

    try:
        base = resources.files("dl_doctor.reports")
        stamp = json.loads(base.joinpath("templates_compiled/stamp.json").read_text(encoding="utf-8"))
        source = base.joinpath("templates/report.html.j2").read_bytes()
        path = base.joinpath("templates_compiled")
        if (stamp.get("jinja2") != jinja2.__version__
                or stamp.get("template_sha256") != hashlib.sha256(source).hexdigest()
                or not isinstance(path, pathlib.Path)):  # a zipapp: no directory to import from
            return None
        return jinja2.ModuleLoader(str(path))
    except (OSError, ValueError, TypeError, ModuleNotFoundError):
        return None


def _source_environment() -> jinja2.Environment:
    return _environment(compiled=False)


def _environment(compiled: bool = True) -> jinja2.Environment:
    package = jinja2.PackageLoader("dl_doctor.reports", "templates")
    ahead = _compiled_loader() if compiled else None
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader([ahead, package]) if ahead is not None else package,
        autoescape=True,  # every value is escaped, whatever the file name
        finalize=shown,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True,
    )
    env.filters["pretty_json"] = pretty_json
    env.filters["wrap_path"] = wrap_path
    env.filters["heading"] = present.heading
    env.filters["items"] = present.items
    return env


MAX_FACT_CHARS = 2 << 20  # of one fact's JSON on the page; the JSON report holds it whole


def pretty_json(value: Any, limit: int = MAX_FACT_CHARS) -> str:
    """A fact as indented JSON for the page, at most ``limit`` characters: encoded a piece at a time and stopped
    there, so a fact of tens of MB (a facts file someone sent) costs the page 2 MiB, not a copy of itself per step
    of rendering."""
    out: List[str] = []
    size = 0
    for chunk in json.JSONEncoder(indent=2, ensure_ascii=False, sort_keys=True).iterencode(value):
        out.append(chunk)
        size += len(chunk)
        if size > limit:
            return "".join(out)[:limit] + f"\n… (cut here at {limit // (1 << 20)} MiB: the JSON report holds it whole)"
    return "".join(out)


@functools.lru_cache(maxsize=1)
def template() -> jinja2.Template:
    """The compiled template (compiling it is most of the cost of an HTML report; `run` does it while the probes
    wait on the host)."""
    return _environment().get_template("report.html.j2")


def render(report: Dict[str, Any], gpu_names: Optional[Mapping[str, str]] = None) -> str:
    """The report as one page; ``gpu_names`` names the GPUs' PCI IDs in the stack's GPU box and the inventory (the
    application's, from the run's matrix: dl_doctor.app.gpu_names; computed before rendering, the page looks
    nothing up). The problems worst first; then the checks that passed, before those that were skipped."""
    findings = sorted(report.get("findings", []), key=lambda f: (ORDER.index(f["status"]), f["id"]))
    return template().render(
        report=report,
        headline=headline(report),
        problems=[f for f in findings if f["status"] in ("error", "fail", "warn")],
        others=[f for f in findings if f["status"] == "pass"] + [f for f in findings if f["status"] == "skip"],
        icons=stack.STATUS_ICON,
        inventory=inventory(report, gpu_names),
        stack_html=Markup(stack.render_html(stack.build(report, gpu_names))),
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
