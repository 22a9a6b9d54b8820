"""DCGM's `dcgmi diag -j` output, in both shapes, as one list of results.

DCGM 3.x: {"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name", "results": [{"gpu_ids":
"0,1", "status": "PASS", "warnings": [{"warning", "error_id"}], "info": [...]}]}]}]}}.
DCGM 4.x ("DCGM Diagnostic"): each test has a "test_summary" and "results" per entity ({"entity_group": "GPU",
"entity_id": 0, "status": "Pass", "warnings": [...]}) (DCGM's testing/python3/dcgm_diag_schema.json). Statuses are
compared case-insensitively; anything malformed is skipped, never trusted.
"""

from __future__ import annotations

from typing import Any, Dict, List

MAX_RESULTS = 2000


def _warnings(result: Dict[str, Any]) -> List[str]:
    out = []
    for w in result.get("warnings") or []:
        if isinstance(w, dict) and isinstance(w.get("warning"), str):
            out.append(w["warning"][:400])
        elif isinstance(w, str):
            out.append(w[:400])
    return out[:10]


def parse_diag(doc: Any) -> Dict[str, Any]:
    """``{"shape": "3.x"|"4.x"|None, "results": [{"category", "test", "gpu", "status", "messages"}]}``."""
    if not isinstance(doc, dict):
        return {"shape": None, "results": []}
    if isinstance(doc.get("DCGM Diagnostic"), dict):
        shape, body = "4.x", doc["DCGM Diagnostic"]
    elif isinstance(doc.get("DCGM GPU Diagnostic"), dict):
        shape, body = "3.x", doc["DCGM GPU Diagnostic"]
    else:
        return {"shape": None, "results": []}
    results: List[Dict[str, Any]] = []
    for cat in body.get("test_categories") or []:
        if not isinstance(cat, dict):
            continue
        for test in cat.get("tests") or []:
            if not isinstance(test, dict):
                continue
            for r in test.get("results") or []:
                if not isinstance(r, dict) or not isinstance(r.get("status"), str):
                    continue
                if shape == "4.x":
                    group = r.get("entity_group")
                    gpu = str(r.get("entity_id")) if group in ("GPU", None) else f"{group} {r.get('entity_id')}"
                else:
                    gpu = str(r.get("gpu_ids", ""))
                results.append({"category": str(cat.get("category", ""))[:100], "test": str(test.get("name", ""))[:100],
                                "gpu": gpu[:100], "status": r["status"].strip().lower()[:20],
                                "messages": _warnings(r)})
                if len(results) >= MAX_RESULTS:
                    return {"shape": shape, "results": results, "truncated": True}
    return {"shape": shape, "results": results}
