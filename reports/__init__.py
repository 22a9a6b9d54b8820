"""Renderers: turn a (redacted) report dictionary into terminal text, JSON and HTML.

Renderers only format; they never collect facts or judge them.
"""

from __future__ import annotations

import json
import os
import tempfile
from importlib import resources
from typing import Any, Dict


def schema() -> Dict[str, Any]:
    """The JSON Schema of the report (``reports/schema/report-v1.json``)."""
    text = resources.files("reports").joinpath("schema/report-v1.json").read_text(encoding="utf-8")
    return json.loads(text)


def facts_schema() -> Dict[str, Any]:
    """The JSON Schema of a facts snapshot (``reports/schema/facts-v1.json``)."""
    text = resources.files("reports").joinpath("schema/facts-v1.json").read_text(encoding="utf-8")
    return json.loads(text)


def to_json(document: Dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".dl-doctor-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
