"""DCGM for the verify probe: `dcgmi diag` and `dcgmi health` run (run_diag, run_health) and their JSON read:
`dcgmi diag -j` in both shapes, as one list of results, and `dcgmi health -c -j`.

`dcgmi diag -j`:

- DCGM 3.x: {"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name", "results": [{"gpu_ids":
  "0,1", "status": "Pass", "warnings": [{"warning", "error_id"}], "info": ...}]}]}]}}.
- DCGM 4.x: {"DCGM Diagnostic": {"test_categories": [... {"name", "results": [{"entity_group": "GPU",
  "entity_group_id": 1, "entity_id": 0, "status": "Pass", "warnings": [...]}], "test_summary": {"status",
  "warnings"}}]}, "entity_groups": [...], "metadata": {"version", "Driver Version Detected"}} (dcgmi/Diag.cpp,
  HelperJsonBuildOutput, in NVIDIA's DCGM repository). A test's errors that belong to no entity appear only in its
  test_summary; a run that could not start says so in "runtime_error".

`dcgmi health -c -j` (dcgmi/Health.cpp, DcgmiOutputJson): {"header": ["Health Monitor Report"], "body": {"Overall
Health": {"value": "Healthy"|"Warning"|"Failure"}, "GPU": {"children": {"0": {"value": "Failure", "children":
{"Errors": {"children": {"PCIe system": {"value": "Warning", "overflow": ["message", "in", "parts"]}}}}}}}}}. dcgmi
exits 0 whatever the health is: only the JSON says it.

Statuses are compared case-insensitively; anything malformed is skipped, never trusted; every string is cut short.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

# How long `dcgmi diag -r N` may take (DCGM's documentation: level 1 seconds, 2 about two minutes, 3 about fifteen
# minutes, 4 longer), with room; 0 runs no diagnostic. The verify probe's time limit adds it (dl_doctor.app).
DCGM_DIAG_SECONDS = {0: 0.0, 1: 120.0, 2: 600.0, 3: 2400.0, 4: 9000.0}
MAX_RESULTS = 2000
MAX_TEXT = 400
MAX_DOCUMENT = 8 << 20


def load_json(text: str) -> Any:
    """The JSON document in a dcgmi output: from the first '{' to the last '}' (dcgmi may print a line before it, as
    DCGM's own tests allow for), or None."""
    if not isinstance(text, str) or len(text) > MAX_DOCUMENT:
        return None
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        return json.loads(text[start:end + 1])
    except (ValueError, RecursionError):  # RecursionError: JSON nested deeper than Python's stack
        return None


def _warnings(result: Dict[str, Any]) -> List[str]:
    out = []
    for w in result.get("warnings") or []:
        if isinstance(w, dict) and isinstance(w.get("warning"), str):
            out.append(w["warning"][:MAX_TEXT])
        elif isinstance(w, str):
            out.append(w[:MAX_TEXT])
    return out[:10]


def _entity(r: Dict[str, Any], shape: str) -> str:
    if shape == "3.x":
        return str(r.get("gpu_ids", ""))[:100]
    if "entity_id" not in r:
        return "all"
    group = r.get("entity_group")
    return (str(r.get("entity_id")) if group in ("GPU", None) else f"{group} {r.get('entity_id')}")[:100]


def parse_diag(doc: Any) -> Dict[str, Any]:
    """``{"shape": "3.x"|"4.x"|None, "results": [{"category", "test", "gpu", "status", "messages"}], "version",
    "runtime_error"}``. A 4.x test whose summary fails or warns with no entity result doing so adds a result for
    "all" with the summary's messages, so a failure that belongs to no GPU is not lost."""
    if not isinstance(doc, dict):
        return {"shape": None, "results": []}
    if isinstance(doc.get("DCGM Diagnostic"), dict):
        shape, body = "4.x", doc["DCGM Diagnostic"]
    elif isinstance(doc.get("DCGM GPU Diagnostic"), dict):
        shape, body = "3.x", doc["DCGM GPU Diagnostic"]
    else:
        return {"shape": None, "results": []}
    out: Dict[str, Any] = {"shape": shape, "results": []}
    meta = doc["metadata"] if isinstance(doc.get("metadata"), dict) else body
    if isinstance(meta.get("version"), str):
        out["version"] = meta["version"][:40]
    if isinstance(body.get("runtime_error"), str):
        out["runtime_error"] = body["runtime_error"][:MAX_TEXT]
    results: List[Dict[str, Any]] = out["results"]
    categories = body.get("test_categories")
    for cat in categories if isinstance(categories, list) else []:
        if not isinstance(cat, dict) or not isinstance(cat.get("tests"), list):
            continue
        for test in cat["tests"]:
            if not isinstance(test, dict):
                continue
            base = {"category": str(cat.get("category", ""))[:100], "test": str(test.get("name", ""))[:100]}
            worst = set()
            entries = test["results"] if isinstance(test.get("results"), list) else []
            for r in entries:
                if not isinstance(r, dict) or not isinstance(r.get("status"), str):
                    continue
                status = r["status"].strip().lower()[:20]
                worst.add(status)
                results.append({**base, "gpu": _entity(r, shape), "status": status, "messages": _warnings(r)})
                if len(results) >= MAX_RESULTS:
                    out["truncated"] = True
                    return out
            summary = test.get("test_summary")
            if shape == "4.x" and isinstance(summary, dict) and isinstance(summary.get("status"), str):
                status = summary["status"].strip().lower()[:20]
                if status in ("fail", "warn") and status not in worst:
                    results.append({**base, "gpu": "all", "status": status, "messages": _warnings(summary)})
    return out


HEALTH_STATES = {"healthy": "pass", "warning": "warn", "failure": "fail"}


def _value(node: Any) -> Optional[str]:
    return node["value"][:40] if isinstance(node, dict) and isinstance(node.get("value"), str) else None


def _children(node: Any) -> Dict[str, Any]:
    kids = node.get("children") if isinstance(node, dict) else None
    return kids if isinstance(kids, dict) else {}


def parse_health(doc: Any) -> Dict[str, Any]:
    """``{"overall": "pass"|"warn"|"fail"|None, "incidents": [{"entity", "system", "status", "message"}]}``; None
    overall when the document is not dcgmi health's."""
    body = doc.get("body") if isinstance(doc, dict) else None
    if not isinstance(body, dict) or "Overall Health" not in body:
        return {"overall": None, "incidents": []}
    overall = _value(body.get("Overall Health"))
    incidents: List[Dict[str, Any]] = []
    for group, node in list(body.items())[:20]:
        if group == "Overall Health":
            continue
        for eid, entity in list(_children(node).items())[:256]:
            errors = _children(_children(entity).get("Errors"))
            for system, err in list(errors.items())[:32]:
                parts = err.get("overflow") if isinstance(err, dict) else None
                text = " ".join(p for p in parts if isinstance(p, str)) if isinstance(parts, list) else ""
                state = (_value(err) or "").lower()
                incidents.append({"entity": f"{group} {eid}"[:60], "system": str(system)[:60],
                                  "status": HEALTH_STATES.get(state, state or "unknown"), "message": text[:MAX_TEXT]})
            if not errors and (_value(entity) or "").lower() in ("warning", "failure"):
                incidents.append({"entity": f"{group} {eid}"[:60], "system": "", "message": "",
                                  "status": HEALTH_STATES[(_value(entity) or "").lower()]})
    return {"overall": HEALTH_STATES.get((overall or "").lower(), (overall or "unknown").lower()),
            "incidents": incidents[:200]}


# -- running dcgmi (through the host: the verify probe's) --------------------------------------------------------

def run_diag(host, level: int) -> Dict[str, Any]:
    """`dcgmi diag -r LEVEL` where DCGM is installed (1 with --quick, 2 with --long, or --dcgm-level), its JSON parsed
    (both shapes); the run's own judgement comes from that JSON, not from the exit code."""
    if not level:
        return {"ran": False, "reason": "not asked for (--dcgm-level 0)"}
    exe = host.which("dcgmi")
    if not exe:
        return {"ran": False, "reason": "dcgmi is not installed"}
    argv = [exe, "diag", "-r", str(level), "-j"]
    try:
        r = host.run(argv, timeout=DCGM_DIAG_SECONDS.get(level, 600.0))
    except OSError as exc:
        return {"ran": False, "reason": f"dcgmi could not run: {exc}"}
    doc = load_json(r.stdout)
    parsed = parse_diag(doc)
    if parsed["shape"] is None:
        return {"ran": False, "reason": f"dcgmi diag printed no diagnostic JSON (exit {r.returncode}): "
                                        f"{(r.stderr or r.stdout or '').strip()[-300:]}"}
    return {"ran": True, "command": " ".join(argv[1:]), "exit": r.returncode, **parsed}


def run_health(host) -> Dict[str, Any]:
    """`dcgmi health -c -j`: what DCGM's background health watches have seen. Read-only: dl-doctor does not set
    watches (`dcgmi health -s a` would change the host engine's state); without them, it says so. dcgmi exits 0
    whatever the health is, so only the JSON is read."""
    exe = host.which("dcgmi")
    if not exe:
        return {"ran": False, "reason": "dcgmi is not installed"}
    try:
        r = host.run([exe, "health", "-c", "-j"], timeout=30)
    except OSError as exc:
        return {"ran": False, "reason": f"dcgmi could not run: {exc}"}
    parsed = parse_health(load_json(r.stdout))
    if parsed["overall"] is None:
        text = (r.stdout or r.stderr or "").strip()[-300:]
        return {"ran": False, "reason": f"dcgmi health gave no report (exit {r.returncode}): {text}",
                "watches_off": "not enabled" in text}
    return {"ran": True, "command": "health -c -j", "exit": r.returncode, **parsed}
