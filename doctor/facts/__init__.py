"""The facts contract: the schema of a facts snapshot, its validation (``validate``), the flat stack view
(``flat``) and a node's fleet fingerprint (``fleet_section``). Pure: nothing here touches the host."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, Dict


def schema() -> Dict[str, Any]:
    """The JSON Schema of a facts snapshot (``doctor/facts/facts-v1.json``)."""
    text = resources.files("dl_doctor.facts").joinpath("facts-v1.json").read_text(encoding="utf-8")
    return json.loads(text)
