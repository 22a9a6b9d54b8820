"""Renderers: turn a (redacted) report dictionary into terminal text, JSON and HTML.

Renderers only format; they never collect facts or judge them.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, Dict


def schema() -> Dict[str, Any]:
    """The JSON Schema of the report (``reports/schema/report-v1.json``)."""
    text = resources.files("dl_doctor.reports").joinpath("schema/report-v1.json").read_text(encoding="utf-8")
    return json.loads(text)



def to_json(document: Dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=False, ensure_ascii=False) + "\n"
