"""Every name docs/plugins.md calls public is importable from the module it names (issue 24: the move kept them)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"


def _public_table():
    """``{module: [names]}`` from the table under "What a plugin may import"."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## What a plugin may import", 1)[1].split("\n## ", 1)[0]
    out = {}
    for row in re.findall(r"^\| `(dl_doctor[\w.]*)` \| (.*) \|$", section, re.M):
        module, what = row
        names = [n.split("(")[0] for n in re.findall(r"`([A-Za-z_][\w]*)(?:\([^`]*\))?`", what)]
        out[module] = names
    return out


TABLE = _public_table()


def test_the_table_names_the_public_modules():
    assert set(TABLE) == {"dl_doctor.probes", "dl_doctor.host", "dl_doctor.model", "dl_doctor.fixes",
                          "dl_doctor.versions", "dl_doctor.testing", "dl_doctor.facts.contract"}
    assert {"probe", "ProbeContext", "Unavailable"} <= set(TABLE["dl_doctor.probes"])
    assert {"Host", "CommandUnavailable", "UntrustedCommand", "NotARegularFile"} <= set(TABLE["dl_doctor.host"])


@pytest.mark.parametrize("module", sorted(TABLE))
def test_every_public_name_is_importable_where_the_doc_says(module):
    mod = importlib.import_module(module)
    missing = [n for n in TABLE[module] if not hasattr(mod, n)]
    assert missing == [], f"{module} lacks {missing}"


def test_the_helpers_named_in_the_text_exist():
    from dl_doctor import testing
    from dl_doctor.checks.common import package_manager

    assert callable(package_manager) and callable(testing.purity_problems) and callable(testing.assert_case)
