"""The stack as a person pictures it, from a report: the GPUs, the kernel module, the user-space driver and the CUDA
toolkits; then, for each Python environment, each framework with every CUDA library it needs and the file that
library resolves to (from which search-path entry), with the broken or suspicious links marked and tied to the
findings that explain them. The HTML report draws it; the Markdown summary tabulates its versions.

Which layer a finding marks comes from what the finding is about, read from the finding itself (:func:`about`), never
from a list of check IDs: the facts its evidence is keyed by (``nvidia_driver.kernel_module.version`` is the kernel
module's, ``gpu_services.fabric_manager`` the fabric manager's), and the things of the picture its problem text names
(a toolkit's directory, an environment's prefix or name with its framework, a GPU's model or PCI address, a service's
unit, "driver 535.104.05"). A finding that the driver is too old for torch so marks the driver and that environment's
torch, and the toolkits only where it names a toolkit too. The library rows come from the one loading model
(dl_doctor.facts.loading), as the checks that judge loading do."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

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
    return [(str(f.get("id", "")).split(":")[0], str(f.get("status")), _text_of(f)) for f in report.get("findings") or []
            if isinstance(f, dict) and f.get("status") in ("warn", "fail", "error")]


def _finding(state: str, problems: Dict[str, str]) -> Optional[str]:
    return next((c for c in EXPLAINED_BY.get(state, ()) if c in problems), None)


# -- what a finding is about -----------------------------------------------------------------------------------------

# the system layers of the picture, in the order they are drawn
LAYERS = ("gpus", "module", "driver", "services", "toolkits")
LAYER_NAMES = {"gpus": "GPUs", "module": "Kernel module", "driver": "User-space driver", "services": "NVIDIA services",
               "toolkits": "CUDA toolkits"}
# the facts each layer shows: a finding whose evidence is keyed by one of them (or by a fact below it) is about it
FACTS_OF_LAYER = (("gpu_pci.devices", "gpus"), ("nvml.devices", "gpus"), ("nvidia_driver.proc_gpus", "gpus"),
                  ("nvidia_driver.kernel_module", "module"), ("kmod", "module"),
                  ("nvidia_driver.userspace", "driver"), ("nvidia_driver.forward_compat_libs", "driver"),
                  ("nvml.driver_version", "driver"), ("nvml.cuda_driver_version", "driver"),
                  ("gpu_services.fabric_manager", "nvidia-fabricmanager"),
                  ("gpu_services.persistenced", "nvidia-persistenced"),
                  ("gpu_services.other_units.nvidia-dcgm", "nvidia-dcgm"),
                  ("gpu_services.other_units.nvidia-imex", "nvidia-imex"),
                  ("cuda_toolkits.toolkits", "toolkits"))
# the NVIDIA services: unit -> (the fact, how a finding's text names it, what the picture calls it)
SERVICES = {
    "nvidia-fabricmanager": ("fabric_manager", r"nvidia-fabricmanager|fabric[ -]?manager", "fabric manager"),
    "nvidia-persistenced": ("persistenced", r"nvidia-persistenced|persistence daemon", "persistenced"),
    "nvidia-dcgm": ("other_units.nvidia-dcgm", r"nvidia-dcgm|nv-hostengine|DCGM'?s? host engine", "DCGM"),
    "nvidia-imex": ("other_units.nvidia-imex", r"nvidia-imex|\bIMEX\b", "IMEX"),
}
WORSE = {"error": 3, "fail": 2, "warn": 1}
# how the page shows a status and a node's state: an icon and a word beside the colour (colour-blind readers, print)
STATUS_ICON = {"fail": "✖", "error": "◆", "warn": "▲", "pass": "✔", "skip": "○"}
STATE_ICON = {"bad": "✖", "warn": "▲", "ok": "✔", "unknown": "?"}
STATE_WORD = {"bad": "a problem", "warn": "to look at", "ok": "fine", "unknown": "not known"}
_END = r"(?![\w/.+-])"  # a path or name ends here (not the start of a longer one)


def _text_of(f: Dict[str, Any]) -> str:
    """What a finding says is wrong: its message, headline and its evidence's ``problems`` (not the notes it passes
    on, nor the fix: a fix names what to change, not what is broken)."""
    text = " ".join(str(f.get(k) or "") for k in ("message", "headline"))
    problems = (f.get("evidence") or {}).get("problems") if isinstance(f.get("evidence"), dict) else None
    if isinstance(problems, list):
        text += " " + " ".join(str(p) for p in problems[:200])
    return text


def _names_path(text: str, path: str) -> bool:
    """``path`` appears in ``text`` whole: not as the start of a longer path (a file under a toolkit's directory
    names the file, not the toolkit)."""
    return bool(path) and re.search(r"(?<![\w/.-])" + re.escape(path.rstrip("/")) + _END, text) is not None


def _names_word(text: str, word: str) -> bool:
    return bool(word) and re.search(r"(?<![\w/.+-])" + re.escape(word) + _END, text) is not None


def _gpu_labels(facts: Dict[str, Any], gpu_names: Optional[Mapping[str, str]]) -> List[str]:
    """Every way a finding may name a GPU here: its model (NVML's, the driver's, the PCI ID's) and its address."""
    out: List[str] = []
    for d in (facts.get("nvml") or {}).get("devices") or []:
        if isinstance(d, dict):
            out += [str(d.get(k)) for k in ("name", "bus_id") if d.get(k)]
    for d in (facts.get("gpu_pci") or {}).get("devices") or []:
        if isinstance(d, dict) and d.get("kind", "gpu") == "gpu":
            out += [str(d["bdf"])] if d.get("bdf") else []
    for g in (facts.get("nvidia_driver") or {}).get("proc_gpus") or []:
        if isinstance(g, dict) and g.get("model"):
            out.append(str(g["model"]))
    out += [str(n) for n in (gpu_names or {}).values() if n]
    return sorted({o for o in out if len(o) >= 4}, key=len, reverse=True)


def _driver_versions(facts: Dict[str, Any]) -> Tuple[List[str], List[str]]:
    driver = facts.get("nvidia_driver") or {}
    user = [str(v) for v in (driver.get("userspace") or {}).get("versions") or []]
    nvml = (facts.get("nvml") or {}).get("driver_version")
    module = (driver.get("kernel_module") or {}).get("version")
    return sorted(set(user + ([str(nvml)] if nvml else []) + ([str(module)] if module else []))), \
        [str(module)] if module else []


MAX_TEXT = 100_000  # characters of a finding's text read for what it names (a finding lists at most 200 problems)


def _picture(report: Dict[str, Any], gpu_names: Optional[Mapping[str, str]]) -> Dict[str, Any]:
    """What a finding may name, gathered once per report: the toolkits, the driver's versions, the GPUs, and each
    environment (its key, prefix, name and the frameworks the picture shows of it)."""
    facts = report.get("facts") or {}
    loading: Dict[str, Any] = report["loading"] if isinstance(report.get("loading"), dict) else {}
    envs = []
    for env in ((facts.get("python_envs") or {}).get("environments") or [])[:MAX_ENVIRONMENTS]:
        if isinstance(env, dict):
            envs.append({"key": str(env.get("prefix") or env.get("name") or ""), "prefix": str(env.get("prefix") or ""),
                         "name": str(env.get("name") or ""),
                         "frameworks": sorted({str(c.get("distribution")) for c in env_consumers(loading, env)
                                               if isinstance(c, dict) and c.get("distribution")})})
    versions, module = _driver_versions(facts)
    return {"toolkits": [t for t in (facts.get("cuda_toolkits") or {}).get("toolkits") or [] if isinstance(t, dict)],
            "versions": versions, "module": module, "gpus": _gpu_labels(facts, gpu_names), "envs": envs}


def about(finding: Dict[str, Any], report: Dict[str, Any], gpu_names: Optional[Mapping[str, str]] = None,
          picture: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """What a warn/fail/error finding is about, in the picture's terms: ``{"layers": {layer...}, "services":
    {unit...}, "environments": {environment key: {framework...}}}`` (an environment key is its prefix, else its
    name; an empty set: the environment as a whole). Read from the finding's own data, the same way for every check
    (module docstring). ``picture``: what :func:`_picture` gathered of ``report`` (computed here when not given)."""
    seen = picture if picture is not None else _picture(report, gpu_names)
    layers: Set[str] = set()
    services: Set[str] = set()
    envs: Dict[str, Set[str]] = {}
    raw = finding.get("evidence")
    evidence: Dict[str, Any] = raw if isinstance(raw, dict) else {}
    for key in evidence:
        for prefix, layer in FACTS_OF_LAYER:
            if key == prefix or str(key).startswith(prefix + "."):
                (services if layer in SERVICES else layers).add(layer)
    text = _text_of(finding)[:MAX_TEXT]
    for unit, (_, pattern, _) in SERVICES.items():
        if re.search(pattern, text, re.I):
            services.add(unit)
    if services:
        layers.add("services")
    for tk in seen["toolkits"]:
        if _names_path(text, str(tk.get("path") or "")) or (
                tk.get("version") and _names_word(text, f"CUDA toolkit {tk['version']}")):
            layers.add("toolkits")
    for v in seen["versions"]:
        if v in text and re.search(r"\bdriver (?:is |version |branch )?(?:still )?R?" + re.escape(v) + _END, text):
            layers.add("driver")
    for v in seen["module"]:
        if v in text and re.search(r"\bmodule (?:is |version )?(?:still )?" + re.escape(v) + _END, text):
            layers.add("module")
    if re.search(r"\bnvidia\.ko\b|\bnvidia(?: kernel)? module\b", text, re.I):
        layers.add("module")
    if any(g in text and _names_word(text, g) for g in seen["gpus"]):
        layers.add("gpus")
    clauses: Optional[List[str]] = None
    for env in seen["envs"]:
        prefix, name = env["prefix"], env["name"]
        if not ((prefix and prefix.rstrip("/") in text) or (name and name in text)):
            continue
        if clauses is None:  # a finding about several environments says each in its own clause
            clauses = re.split(r";\s", text)
        for clause in clauses:
            named = _names_path(clause, prefix) or (name and re.search(
                r"(?:\(|\bin )" + re.escape(name) + r"(?=[\s):;,]|$)", clause))
            if named:
                envs.setdefault(env["key"], set()).update(fw for fw in env["frameworks"] if _names_word(clause, fw))
    return {"layers": layers, "services": services, "environments": envs}


def _marks(report: Dict[str, Any], gpu_names: Optional[Mapping[str, str]]) -> List[Tuple[Dict[str, Any], Dict[str, Any]]]:
    """(finding, what it is about) for each finding that found a problem, the worst first."""
    found = [f for f in report.get("findings") or []
             if isinstance(f, dict) and f.get("status") in WORSE and f.get("id")]
    found.sort(key=lambda f: (-WORSE[str(f["status"])], str(f["id"])))
    picture = _picture(report, gpu_names) if found else None
    return [(f, about(f, report, gpu_names, picture)) for f in found]


def _mark(node: Dict[str, Any], finding: Dict[str, Any]) -> None:
    """Tie ``finding`` to a node of the picture: its ``findings`` (worst first), ``finding`` the worst one, and its
    state at least as bad as the finding says."""
    ident = str(finding["id"]).split(":")[0]
    node.setdefault("findings", [])
    if all(m["id"] != ident for m in node["findings"]):
        node["findings"].append({"id": ident, "status": finding["status"]})
    node["finding"] = node.get("finding") or ident
    if finding["status"] in ("fail", "error"):
        node["state"] = "bad"
    elif node.get("state") != "bad":
        node["state"] = "warn"


def _unit_state(unit: Optional[Dict[str, Any]]) -> Tuple[str, str]:
    """(what the picture says of a unit, its state)."""
    if not isinstance(unit, dict) or not unit.get("installed"):
        return "not installed", "unknown"
    active = unit.get("active") or unit.get("journal_state")
    words = ["enabled" if unit.get("enabled") else "not enabled"]
    if active:
        words.append(str(active))
    elif unit.get("running") is not None:
        words.append("running" if unit.get("running") else "not running")
    state = "bad" if active == "failed" else "ok"
    return ", ".join(words), state


def _services(facts: Dict[str, Any]) -> Dict[str, Any]:
    services = facts.get("gpu_services")
    node: Dict[str, Any] = {"key": "services", "layer": LAYER_NAMES["services"], "detail": "", "finding": None,
                            "findings": [], "items": []}
    if not isinstance(services, dict):
        node.update(label="unknown here", state="unknown")
        return node
    nvswitches = (facts.get("gpu_pci") or {}).get("nvswitch_count") or 0
    for unit, (path, _, short) in SERVICES.items():
        fact: Any = services
        for part in path.split("."):
            fact = fact.get(part) if isinstance(fact, dict) else None
        needed = unit == "nvidia-fabricmanager" and nvswitches
        if not (isinstance(fact, dict) and fact.get("installed")) and not needed:
            continue
        words, state = _unit_state(fact)
        version = fact.get("version") if isinstance(fact, dict) else None
        version = version.get("version") if isinstance(version, dict) else None
        if needed and state == "unknown":
            words, state = f"not installed ({nvswitches} NVSwitch{'es need' if nvswitches != 1 else ' needs'} it)", "bad"
        node["items"].append({"unit": unit, "name": short + (f" {version}" if version else ""), "status": words,
                              "state": state, "findings": []})
    node["label"] = ", ".join(i["name"] for i in node["items"]) or "none installed"
    node["state"] = "bad" if any(i["state"] == "bad" for i in node["items"]) else "ok"
    return node


def _placement(facts: Dict[str, Any]) -> str:
    """Where the GPUs sit (the topology probe): GPUs per NUMA node, and how many have an RDMA device on their PCIe
    switch (what NCCL's GPUDirect RDMA wants), e.g. ``NUMA 0: 4, NUMA 1: 4; RDMA NIC on the GPU's PCIe switch: 8 of
    8``."""
    topo = facts.get("topology") if isinstance(facts.get("topology"), dict) else {}
    gpus = [g for g in (topo or {}).get("gpus") or [] if isinstance(g, dict)]
    if not gpus:
        return ""
    numa = Counter(g.get("numa_node") for g in gpus if isinstance(g.get("numa_node"), int) and g["numa_node"] >= 0)
    parts = [", ".join(f"NUMA {n}: {c}" for n, c in sorted(numa.items()))] if len(numa) > 1 else []
    if (topo or {}).get("nics") and any(isinstance(g.get("closest_rdma"), dict) for g in gpus):
        near = sum(1 for g in gpus if isinstance(g.get("closest_rdma"), dict)
                   and g["closest_rdma"].get("closeness") == "pcie-switch")
        parts.append(f"RDMA NIC on the GPU's PCIe switch: {near} of {len(gpus)}")
    return "; ".join(parts)


def _system(facts: Dict[str, Any], gpu_names: Optional[Mapping[str, str]] = None) -> List[Dict[str, Any]]:
    nodes: List[Dict[str, Any]] = []
    devices = (facts.get("nvml") or {}).get("devices") or []
    names = Counter(str(d["name"]) for d in devices if isinstance(d, dict) and d.get("name"))
    pci = (facts.get("gpu_pci") or {}).get("devices") or []
    pci_gpus = [d for d in pci if isinstance(d, dict) and d.get("kind", "gpu") == "gpu"]
    detail = "NVML" if names else ""
    if names:
        label = ", ".join(f"{n} × {name}" for name, n in names.most_common())
    elif pci_gpus:  # no NVML (a tree, a container without it): the model the PCI device ID gives
        ids = Counter(f"10de:{d.get('device_id')}" for d in pci_gpus)
        known = gpu_names or {}
        label = ", ".join(f"{n} × {known.get(pci_id) or 'NVIDIA GPU ' + pci_id}"
                          for pci_id, n in sorted(ids.items(), key=lambda kv: (-kv[1], kv[0])))
        detail = "from the PCI ID " + ", ".join(sorted(ids)) if any(i in known for i in ids) else "PCI"
    elif facts.get("gpu_pci") is None and facts.get("nvml") is None:
        label = "not visible here"
    else:
        label = "none"
    placement = _placement(facts)
    if placement:
        detail = f"{detail}; {placement}" if detail else placement
    nodes.append({"key": "gpus", "layer": LAYER_NAMES["gpus"], "label": label, "detail": detail,
                  "state": "ok" if names or pci_gpus else "unknown", "finding": None, "findings": []})
    driver = facts.get("nvidia_driver") or {}
    module = driver.get("kernel_module") or {}
    if module.get("loaded"):
        label, state = f"nvidia {module.get('version') or '?'}", "ok"
        detail = module.get("flavor") or ""
    elif module.get("loaded") is False:
        label, state, detail = "not loaded", "unknown", ""  # a fault only where GPUs need it (a finding says so)
    else:
        label, state, detail = "unknown here", "unknown", "a tree, or /proc not readable"
    nodes.append({"key": "module", "layer": LAYER_NAMES["module"], "label": label, "detail": detail,
                  "state": state, "finding": None, "findings": []})
    versions = sorted({str(v) for v in (driver.get("userspace") or {}).get("versions") or []})
    compat = [c for c in driver.get("forward_compat_libs") or [] if isinstance(c, dict) and c.get("active")]
    label = ", ".join(f"libcuda {v}" for v in versions) or "no libcuda found"
    detail = f"forward compatibility {compat[0].get('version')} active" if compat else ""
    mismatch = len(versions) > 1 or (module.get("version") and versions and module.get("version") not in versions)
    nodes.append({"key": "driver", "layer": LAYER_NAMES["driver"], "label": label, "detail": detail,
                  "state": "bad" if mismatch else "ok" if versions else "unknown", "finding": None, "findings": []})
    nodes.append(_services(facts))
    toolkits = (facts.get("cuda_toolkits") or {}).get("toolkits") or []
    tk = [f"{t['version']} ({t.get('path')})" if t.get("version") else f"{t.get('path')} (version unknown)"
          for t in toolkits if isinstance(t, dict)][:6]
    nodes.append({"key": "toolkits", "layer": LAYER_NAMES["toolkits"], "label": ", ".join(tk) or "none",
                  "detail": "", "state": "ok", "finding": None, "findings": []})
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


def build(report: Dict[str, Any], gpu_names: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """The picture's model: ``{"system": [node...], "environments": [env...], "counts": {...}}``. Each system node
    has a ``key`` (LAYERS), its ``layer`` name, ``label``, ``detail``, ``state`` (ok, warn, bad, unknown) and the
    ``findings`` about it (``{"id", "status"}``, the worst first; ``finding`` is the first); the services node lists
    its ``items``; each environment and framework carries the ``findings`` about it as a whole and its ``state``.
    ``gpu_names``: the GPU model of each PCI ID (``10de:20b0``), supplied by the application from the run's matrix
    (dl_doctor.app.gpu_names), shown where NVML named no GPU."""
    facts = report.get("facts") or {}
    problems = _problems(report)
    named = _named(report)
    marks = _marks(report, gpu_names)
    loading: Dict[str, Any] = report["loading"] if isinstance(report.get("loading"), dict) else {}
    environments: List[Dict[str, Any]] = []
    for env in ((facts.get("python_envs") or {}).get("environments") or [])[:MAX_ENVIRONMENTS]:
        if not isinstance(env, dict):
            continue
        key = str(env.get("prefix") or env.get("name") or "")
        frameworks = []
        for c in env_consumers(loading, env):  # the one resolution model the checks judged from
            if not isinstance(c, dict):
                continue
            build_info = c.get("build") or {}
            cuda = build_info.get("cuda") or (f"{c['cuda_major']}.x" if isinstance(c.get("cuda_major"), int) else None)
            libs = _libraries(c, problems, named)
            fw: Dict[str, Any] = {"name": c.get("distribution"), "version": c.get("version"), "cuda": cuda,
                                  "libraries": libs, "bad": sum(r["state"] in BAD for r in libs),
                                  "odd": sum(r["state"] in ODD for r in libs), "findings": [], "finding": None}
            fw["state"] = "bad" if fw["bad"] else "warn" if fw["odd"] else "ok"
            for finding, subject in marks:
                if str(c.get("distribution")) in subject["environments"].get(key, ()):
                    _mark(fw, finding)
            frameworks.append(fw)
        entry: Dict[str, Any] = {"name": env.get("name") or env.get("prefix"), "prefix": env.get("prefix"),
                                 "python": env.get("python_version"), "kind": env.get("kind"),
                                 "frameworks": frameworks, "bad": sum(f["bad"] for f in frameworks),
                                 "odd": sum(f["odd"] for f in frameworks), "findings": [], "finding": None}
        entry["state"] = ("bad" if entry["bad"] or any(f["state"] == "bad" for f in frameworks) else
                          "warn" if entry["odd"] or any(f["state"] == "warn" for f in frameworks) else "ok")
        for finding, subject in marks:
            if key in subject["environments"] and not subject["environments"][key]:
                _mark(entry, finding)  # about the environment, no framework of it named
        environments.append(entry)
    rank = {"bad": 0, "warn": 1, "ok": 2}
    environments.sort(key=lambda e: (rank.get(e["state"], 2), -e["bad"], -e["odd"], str(e["name"])))
    system = _system(facts, gpu_names)
    for finding, subject in marks:
        for node in system:
            if node["key"] in subject["layers"]:
                _mark(node, finding)
        for item in system[LAYERS.index("services")]["items"]:
            if item["unit"] in subject["services"]:
                _mark(item, finding)
    return {"system": system, "environments": environments,
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

    def flags(node: Dict[str, Any]) -> str:  # the findings about a node: icon, status word and a link to each
        return "".join(f'<a class="flag s-{e(m["status"])}" href="#{e(m["id"])}">'
                       f'<span aria-hidden="true">{STATUS_ICON.get(m["status"], "")}</span> '
                       f'<span class="word">{e(m["status"])}</span> {e(m["id"])}</a>' for m in node.get("findings") or [])

    out = ['<section id="stack">', "  <h2>The stack</h2>",
           '  <div class="chain" role="list" aria-label="GPUs, driver, services and CUDA">']
    for i, n in enumerate(model["system"]):
        if i:
            out.append('    <span class="to" aria-hidden="true">→</span>')
        mark = STATE_ICON.get(n["state"], "")
        items = "".join(f'<span class="item st-{e(it["state"])}"><span class="mark" aria-hidden="true">'
                        f'{STATE_ICON.get(it["state"], "")}</span> <span class="name">{e(it["name"])}</span> '
                        f'<span class="unit">{e(it["unit"])}: {e(it["status"])}</span>'
                        f'{(" " + flags(it)) if it.get("findings") else ""}</span>' for it in n.get("items") or [])
        on_items = {m["id"] for it in n.get("items") or [] for m in it.get("findings") or []}
        rest = dict(n, findings=[m for m in n.get("findings") or [] if m["id"] not in on_items])
        out.append(f'    <div class="node {e(n["state"])} layer-{e(n.get("key") or "")}" role="listitem" '
                   f'aria-label="{e(n["layer"])}: {e(STATE_WORD.get(n["state"], n["state"]))}">'
                   f'<span class="layer">{e(n["layer"])}'
                   + (f' <span class="st" aria-hidden="true">{mark}</span>' if mark else "") + "</span> "
                   + (items or f'<span class="val">{path(n["label"])}</span>')
                   + (f'<span class="detail">{e(n["detail"])}</span>' if n.get("detail") else "")
                   + (f'<span class="detail flags">{flags(rest)}</span>' if rest["findings"] else "") + "</div>")
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
        cls = {"bad": "bad", "warn": "odd"}.get(env.get("state") or "", "ok")
        opened = " open" if cls != "ok" or len(envs) <= 3 else ""
        n = len(env["frameworks"])
        count = f"{n} CUDA consumer{'s' if n != 1 else ''}" if n else "no CUDA consumer"
        state = (f' · <span class="c-fail">{env["bad"]} broken link{"s" if env["bad"] != 1 else ""}</span>'
                 if env["bad"] else f' · <span class="c-warn">{env["odd"]} to look at</span>' if env["odd"] else "")
        python = f" · Python {e(env['python'])}" if env.get("python") else ""
        out.append(f'  <details class="env {cls}"{opened}>')
        out.append(f'    <summary>{e(env["name"])} <span class="sub">{path(env["prefix"])}{python} · {count}{state}'
                   f"</span>" + (f' <span class="flags">{flags(env)}</span>' if env.get("findings") else "")
                   + "</summary>")
        for fw in env["frameworks"]:
            # a problem column where a link is broken or odd; else a note column where another copy serves
            problem_col = bool(fw["bad"] or fw["odd"] or any(lib.get("note") for lib in fw["libraries"]))
            column = "Problem" if fw["bad"] or fw["odd"] else "Note"
            built = f"built for CUDA {e(fw['cuda'])}" if fw.get("cuda") else "CUDA build unknown"
            out.append(f'    <div class="fw {e(fw.get("state") or "ok")}"><h4>{e(fw["name"])} {e(fw.get("version") or "")} '
                       f'<span class="sub">{built}</span>'
                       + (f' <span class="flags">{flags(fw)}</span>' if fw.get("findings") else "") + "</h4>")
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
