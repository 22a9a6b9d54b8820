"""One truth of what loads (issue 25): where a report's checks of loading, its one resolution model (``loading``) and
its stack view disagree about a library file. Used by tests/e2e/test_one_resolution.py and the healthy corpus."""

from __future__ import annotations

import json
from typing import Any, Dict, List

from dl_doctor.reports import stack


def disagreements(report: Dict[str, Any]) -> List[str]:
    """Where a check of loading and the model, or the stack view and a finding, disagree about a library file."""
    out: List[str] = []
    loaded = {lib["path"]: lib for e in report["loading"]["environments"] for c in e["consumers"]
              for lib in c["libraries"]}
    model = stack.build(report)
    rows = {row["path"]: row for e in model["environments"] for fw in e["frameworks"] for row in fw["libraries"]
            if row.get("path")}
    for f in report["findings"]:
        if not f["id"].startswith(("DLD-PY-004", "DLD-PY-011", "DLD-PY-012", "DLD-PY-013")):
            continue
        # what the finding says is wrong: its message, or its evidence's problems (not the notes it passes on)
        ev = f.get("evidence") or {}
        text = f["message"] if "problems" not in ev else json.dumps(ev["problems"])
        for path, lib in loaded.items():
            named = path in text
            if f["status"] in ("fail", "warn") and named and rows.get(path, {}).get("state") in ("ok", "other"):
                out.append(f"the stack marks {path} as fine under {f['id']} {f['status']}")
            if f["status"] == "fail" and named and lib.get("verdict") in ("own", "serves") and \
                    f["id"].startswith(("DLD-PY-004", "DLD-PY-012")):
                out.append(f"{f['id']} fails {path}, which the model says serves")
        if f["id"] in ("DLD-PY-004", "DLD-PY-012") and f["status"] == "pass":
            bad = [p for p, lib in loaded.items() if lib.get("verdict") == "fails"
                   and (lib.get("rule") == "cuda-major") == (f["id"] == "DLD-PY-012")]
            if bad:
                out.append(f"{f['id']} passes while the model says {bad} do not serve the build")
    return out
