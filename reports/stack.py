"""The stack as a person pictures it, from a report: the GPUs, the kernel module, the user-space driver and the CUDA
toolkits; then, for each Python environment, each framework with every CUDA library it needs and the file that
library resolves to (from which search-path entry), with the broken or suspicious links marked and tied to the
findings that explain them. The HTML report draws it; the Markdown summary tabulates its versions."""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

from dl_doctor.facts.loading import env_consumers

MAX_ENVIRONMENTS = 32
MAX_LIBRARIES = 64

# a link's state -> the checks whose finding explains it (the first one that found a problem is linked)
EXPLAINED_BY = {"missing": ("DLD-PY-011",), "optional": ("DLD-PY-011",), "wrong": ("DLD-PY-004", "DLD-PY-012"),
                "older": ("DLD-PY-004",), "unmet": ("DLD-PY-013",),
                "foreign": ("DLD-PY-011",)}
# the model's verdict on a copy that loads (dl_doctor.facts.loading.serves) -> how the stack marks it
STATE_OF_VERDICT = {"own": "ok", "serves": "other", "unknown": "other", "older": "older", "fails": "wrong"}
BAD = ("missing", "wrong", "unmet")
ODD = ("older", "optional")


def _problems(report: Dict[str, Any]) -> Dict[str, str]:
    """check ID -> status, for the findings that found a problem."""
    return {f["id"].split(":")[0]: f["status"] for f in report.get("findings") or []
            if isinstance(f, dict) and f.get("status") in ("warn", "fail", "error")}


def _named(report: Dict[str, Any]) -> List[Tuple[str, str, str]]:
    """(check ID, status, what it says is wrong) of each finding that found a problem: its message, headline and its
    evidence's ``problems`` (not the notes it passes on). A library file a finding names is never marked as fine
    (issue 25), whatever the model says of it."""
    out = []
    for f in report.get("findings") or []:
        if isinstance(f, dict) and f.get("status") in ("warn", "fail", "error"):
            text = " ".join(str(f.get(k) or "") for k in ("message", "headline"))
            problems = (f.get("evidence") or {}).get("problems") if isinstance(f.get("evidence"), dict) else None
            if isinstance(problems, list):
                text += " " + " ".join(str(p) for p in problems[:200])
            out.append((str(f.get("id", "")).split(":")[0], str(f.get("status")), text))
    return out


def _finding(state: str, problems: Dict[str, str]) -> Optional[str]:
    return next((c for c in EXPLAINED_BY.get(state, ()) if c in problems), None)


def _system(facts: Dict[str, Any], problems: Dict[str, str]) -> List[Dict[str, Any]]:
    nodes: List[Dict[str, Any]] = []
    devices = (facts.get("nvml") or {}).get("devices") or []
    names = Counter(str(d.get("name") or "GPU") for d in devices if isinstance(d, dict))
    pci = (facts.get("gpu_pci") or {}).get("devices") or []
    pci_gpus = [d for d in pci if isinstance(d, dict) and d.get("kind", "gpu") == "gpu"]
    if names:
        label = ", ".join(f"{n} × {name}" for name, n in names.most_common())
    elif pci_gpus:
        label = f"{len(pci_gpus)} NVIDIA GPU{'s' if len(pci_gpus) != 1 else ''} on the PCI bus"
    elif facts.get("gpu_pci") is None and facts.get("nvml") is None:
        label = "not visible here"
    else:
        label = "none"
    nodes.append({"layer": "GPUs", "label": label, "detail": "NVML" if names else "PCI" if pci_gpus else "",
                  "state": "ok" if names or pci_gpus else "unknown",
                  "finding": next((c for c in ("DLD-GPU-001", "DLD-GPU-002", "DLD-GPU-008") if c in problems), None)})
    driver = facts.get("nvidia_driver") or {}
    module = driver.get("kernel_module") or {}
    if module.get("loaded"):
        label, state = f"nvidia {module.get('version') or '?'}", "ok"
        detail = module.get("flavor") or ""
    elif module.get("loaded") is False:
        label, state, detail = "not loaded", "unknown", ""  # a fault only where GPUs need it (a finding says so)
    else:
        label, state, detail = "unknown here", "unknown", "a tree, or /proc not readable"
    found = next((c for c in ("DLD-DRV-001", "DLD-DRV-003", "DLD-DRV-005", "DLD-DRV-004", "DLD-GPU-001")
                  if c in problems), None)
    nodes.append({"layer": "Kernel module", "label": label, "detail": detail,
                  "state": "bad" if found and state != "unknown" else state, "finding": found})
    versions = sorted({str(v) for v in (driver.get("userspace") or {}).get("versions") or []})
    compat = [c for c in driver.get("forward_compat_libs") or [] if isinstance(c, dict) and c.get("active")]
    label = ", ".join(f"libcuda {v}" for v in versions) or "no libcuda found"
    detail = f"forward compatibility {compat[0].get('version')} active" if compat else ""
    found = next((c for c in ("DLD-DRV-003", "DLD-CUDA-002", "DLD-CTR-001", "DLD-CTR-005") if c in problems), None)
    mismatch = len(versions) > 1 or (module.get("version") and versions and module.get("version") not in versions)
    nodes.append({"layer": "User-space driver", "label": label, "detail": detail,
                  "state": "bad" if found or mismatch else "ok" if versions else "unknown", "finding": found})
    toolkits = (facts.get("cuda_toolkits") or {}).get("toolkits") or []
    tk = [f"{t['version']} ({t.get('path')})" if t.get("version") else f"{t.get('path')} (version unknown)"
          for t in toolkits if isinstance(t, dict)][:6]
    nodes.append({"layer": "CUDA toolkits", "label": ", ".join(tk) or "none", "detail": "",
                  "state": "ok", "finding": next((c for c in ("DLD-CUDA-001", "DLD-PY-008") if c in problems), None)})
    for node in nodes:
        status = problems.get(node["finding"] or "")
        if status in ("fail", "error"):
            node["state"] = "bad"
        elif status == "warn" and node["state"] != "bad":
            node["state"] = "warn"
    return nodes


def _libraries(consumer: Dict[str, Any], problems: Dict[str, str], named: List[Tuple[str, str, str]]
               ) -> List[Dict[str, Any]]:
    rows: List[Dict[str, Any]] = []
    for lib in (consumer.get("libraries") or [])[:MAX_LIBRARIES]:
        if not isinstance(lib, dict):
            continue
        verdict = str(lib.get("verdict") or "own")
        state = STATE_OF_VERDICT.get(verdict, "other")
        note = "" if verdict == "own" else str(lib.get("reason") or "")
        own = lib.get("env_copy") or {}
        if own.get("path") and verdict != "own":
            note = f"not the environment's own {own.get('path')}: {note}"
        row = {"soname": lib.get("soname"), "path": lib.get("path"), "version": lib.get("version"),
               "via": lib.get("via"), "state": state, "note": note, "finding": None}
        path = str(lib.get("path") or "")
        for check_id, status, text in named:  # a file a finding names is not fine, whatever the verdict
            if path and path in text and check_id.startswith("DLD-PY-"):
                worse = "wrong" if status in ("fail", "error") else "older"
                if (state in ("ok", "other") or (worse == "wrong" and state == "older")):
                    state = row["state"] = worse
                    row["note"] = note or f"named by {check_id}"
                row["finding"] = row["finding"] or check_id
        rows.append(row)
    missing: Dict[str, Dict[str, Any]] = {}
    for m in consumer.get("missing") or []:
        if isinstance(m, dict):
            entry = missing.setdefault(str(m.get("soname")), {"optional": True, "by": []})
            entry["optional"] = entry["optional"] and bool(m.get("optional"))
            if m.get("needed_by"):
                entry["by"].append(str(m["needed_by"]))
    for soname, m in missing.items():
        by = m["by"]
        needed = (f" (needed by {by[0]}" + (f" and {len(by) - 1} more" if len(by) > 1 else "") + ")") if by else ""
        rows.append({"soname": soname, "path": None, "version": None, "via": None,
                     "state": "missing" if not m["optional"] else "optional",
                     "note": ("not found" if not m["optional"] else "optional, not found") + needed, "finding": None})
    unmet = [u for u in consumer.get("unmet_versions") or [] if isinstance(u, dict)]
    for u in unmet[:8]:
        rows.append({"soname": u.get("file") or "(unnamed)", "path": u.get("provider"), "version": None, "via": None,
                     "state": "unmet", "note": f"{u.get('object')} needs {u.get('version')}, which this copy does "
                                               f"not define", "finding": None})
    for row in rows:  # (a copy that serves links no finding: the one that names it, if any, is linked above)
        if row["state"] not in ("ok", "other") and not row.get("finding"):
            row["finding"] = _finding(row["state"], problems)
    order = {"missing": 0, "unmet": 1, "wrong": 2, "older": 3, "optional": 4, "other": 5, "ok": 6}
    return sorted(rows, key=lambda r: (order.get(r["state"], 6), str(r["soname"])))


def build(report: Dict[str, Any]) -> Dict[str, Any]:
    """The picture's model: ``{"system": [node...], "environments": [env...], "counts": {...}}``."""
    facts = report.get("facts") or {}
    problems = _problems(report)
    named = _named(report)
    loading: Dict[str, Any] = report["loading"] if isinstance(report.get("loading"), dict) else {}
    environments: List[Dict[str, Any]] = []
    for env in ((facts.get("python_envs") or {}).get("environments") or [])[:MAX_ENVIRONMENTS]:
        if not isinstance(env, dict):
            continue
        frameworks = []
        for c in env_consumers(loading, env):  # the one resolution model the checks judged from
            if not isinstance(c, dict):
                continue
            build_info = c.get("build") or {}
            cuda = build_info.get("cuda") or (f"{c['cuda_major']}.x" if isinstance(c.get("cuda_major"), int) else None)
            libs = _libraries(c, problems, named)
            frameworks.append({"name": c.get("distribution"), "version": c.get("version"), "cuda": cuda,
                               "libraries": libs, "bad": sum(r["state"] in BAD for r in libs),
                               "odd": sum(r["state"] in ODD for r in libs)})
        environments.append({"name": env.get("name") or env.get("prefix"), "prefix": env.get("prefix"),
                             "python": env.get("python_version"), "kind": env.get("kind"),
                             "frameworks": frameworks, "bad": sum(f["bad"] for f in frameworks),
                             "odd": sum(f["odd"] for f in frameworks)})
    environments.sort(key=lambda e: (-e["bad"], -e["odd"], str(e["name"])))
    return {"system": _system(facts, problems), "environments": environments,
            "counts": {"environments": len(environments),
                       "frameworks": sum(len(e["frameworks"]) for e in environments),
                       "broken": sum(e["bad"] for e in environments)}}


def render_html(model: Dict[str, Any]) -> str:
    """The picture as HTML (escaped here; no script). Written in Python rather than in the report's template: the
    template is compiled on every run, and this part would double its compile time."""
    from markupsafe import escape

    from dl_doctor.reports.text import safe_text

    def e(value: Any) -> str:  # control characters and bidirectional overrides shown escaped, as in a terminal
        return str(escape(safe_text("" if value is None else str(value))))

    def path(value: Any) -> str:  # a break opportunity after each '/'
        return e(value).replace("/", "/<wbr>")

    out = ['<section id="stack">', "  <h2>The stack</h2>",
           '  <div class="chain" role="list" aria-label="GPUs, driver and CUDA">']
    for i, n in enumerate(model["system"]):
        if i:
            out.append('    <span class="to" aria-hidden="true">→</span>')
        out.append(f'    <div class="node {e(n["state"])}" role="listitem"><span class="layer">{e(n["layer"])}</span> '
                   f'<span class="val">{path(n["label"])}</span>'
                   + (f'<span class="detail">{e(n["detail"])}</span>' if n.get("detail") else "")
                   + (f'<span class="detail"><a href="#{e(n["finding"])}">{e(n["finding"])}</a></span>'
                      if n.get("finding") else "") + "</div>")
    out.append("  </div>")
    envs = model["environments"]
    if not envs:
        out += ['  <p class="legend">No Python environment with a CUDA framework was inspected.</p>', "</section>"]
        return "\n".join(out)
    out.append('  <p class="legend">Each environment\'s frameworks, every CUDA library they need, and the file the '
               'loader picks for it. <span class="m-ok">✓</span> loads its own copy · <span class="m-other">✓</span> '
               'another copy that serves the build · <span class="m-older">!</span> an older copy, or an optional '
               'library not found · <span class="m-wrong">✗</span> a copy that does not serve the build · '
               '<span class="m-missing">✗</span> not found.</p>')
    for env in envs:
        cls = "bad" if env["bad"] else "odd" if env["odd"] else "ok"
        opened = " open" if env["bad"] or env["odd"] or len(envs) <= 3 else ""
        n = len(env["frameworks"])
        count = f"{n} CUDA consumer{'s' if n != 1 else ''}" if n else "no CUDA consumer"
        state = (f' · <span class="c-fail">{env["bad"]} broken link{"s" if env["bad"] != 1 else ""}</span>'
                 if env["bad"] else f' · <span class="c-warn">{env["odd"]} to look at</span>' if env["odd"] else "")
        python = f" · Python {e(env['python'])}" if env.get("python") else ""
        out.append(f'  <details class="env {cls}"{opened}>')
        out.append(f'    <summary>{e(env["name"])} <span class="sub">{path(env["prefix"])}{python} · {count}{state}'
                   f"</span></summary>")
        for fw in env["frameworks"]:
            # a problem column where a link is broken or odd; else a note column where another copy serves
            problem_col = bool(fw["bad"] or fw["odd"] or any(lib.get("note") for lib in fw["libraries"]))
            column = "Problem" if fw["bad"] or fw["odd"] else "Note"
            built = f"built for CUDA {e(fw['cuda'])}" if fw.get("cuda") else "CUDA build unknown"
            out.append(f'    <div class="fw"><h4>{e(fw["name"])} {e(fw.get("version") or "")} '
                       f'<span class="sub">{built}</span></h4>')
            if not fw["libraries"]:
                out.append('      <p class="legend">It needs no CUDA library by name (or none was read).</p></div>')
                continue
            out.append('      <table class="libs"><thead><tr><th></th><th>Needs</th><th>Loads</th>'
                       + (f"<th>{column}</th>" if problem_col else "") + "</tr></thead><tbody>")
            for lib in fw["libraries"]:
                st = lib["state"]
                mark = "✓" if st in ("ok", "other") else "!" if st in ODD else "✗"
                if lib.get("path"):
                    loads = ((f"<strong>{e(lib['version'])}</strong> " if lib.get("version") else "")
                             + f'<span class="path">{path(lib["path"])}</span>'
                             + (f' <span class="via">via {path(lib["via"])}</span>' if lib.get("via") else ""))
                else:
                    loads = "—"
                cell = ""
                if problem_col:
                    link = f' <a href="#{e(lib["finding"])}">{e(lib["finding"])}</a>' if lib.get("finding") else ""
                    cell = f"<td>{path(lib.get('note'))}{link}</td>"
                out.append(f'        <tr class="lib-{e(st)}"><td class="mark m-{e(st)}" aria-label="{e(st)}">{mark}</td>'
                           f'<td class="soname mono">{e(lib["soname"])}</td><td>{loads}</td>{cell}</tr>')
            out.append("      </tbody></table></div>")
        out.append("  </details>")
    out.append("</section>")
    return "\n".join(out)
