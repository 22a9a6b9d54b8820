"""The facts contract: the schema of a facts snapshot, its validation (``validate``), the flat stack view
(``flat``), a node's fleet fingerprint (``fleet_section``) and the typed declarations probes make with
``provides=`` (``contract``). Pure: nothing here touches the host."""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any, Dict


def schema() -> Dict[str, Any]:
    """The JSON Schema of a facts snapshot (``doctor/facts/facts-v1.json``)."""
    text = resources.files("dl_doctor.facts").joinpath("facts-v1.json").read_text(encoding="utf-8")
    return json.loads(text)


@functools.lru_cache(maxsize=1)
def _shared() -> Dict[str, Any]:
    return schema()


def fact_schema(probe: str) -> Dict[str, Any]:
    """The schema of one built-in probe's facts, as its ``provides=`` declares them (``{}``: a probe the schema does
    not name). Shared between callers: not to be changed."""
    return ((_shared().get("properties", {}).get("facts") or {}).get("properties") or {}).get(probe) or {}
