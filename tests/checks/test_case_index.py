"""tests/cases/index.json, the reported failures (issue 27): its shape, and what it must hold."""

from __future__ import annotations

import re
from collections import Counter

import cases
from dl_doctor import compat_matrix
from dl_doctor.registry import load_registry

RECORDS = cases.index()
FIELDS = {"id": str, "url": str, "component": str, "class": str, "symptom": str, "root_cause": str, "checks": list,
          "names": list, "blind": bool}
SLUG = re.compile(r"^[a-z0-9][a-z0-9.+-]{1,79}$")


def test_every_record_has_the_fields_with_their_types():
    for r in RECORDS:
        assert set(r) == set(FIELDS), (r.get("id"), sorted(set(r) ^ set(FIELDS)))
        for key, kind in FIELDS.items():
            assert isinstance(r[key], kind), (r["id"], key)
        assert SLUG.match(r["id"]) and SLUG.match(r["component"]) and SLUG.match(r["class"]), r["id"]
        assert r["symptom"].strip() and r["root_cause"].strip() and r["checks"], r["id"]
        assert all(isinstance(n, str) and n for n in r["names"]), r["id"]


def test_ids_and_urls_are_unique_and_public():
    ids = Counter(r["id"] for r in RECORDS)
    urls = Counter(r["url"].rstrip("/").split("#")[0] for r in RECORDS)
    assert not [i for i, n in ids.items() if n > 1]
    assert not [u for u, n in urls.items() if n > 1]
    assert all(re.match(r"^https://[a-z0-9.-]+\.[a-z]{2,}/\S+$", r["url"]) for r in RECORDS)


def test_every_named_check_or_cause_exists():
    check_ids = {c.id for c in load_registry().checks}
    causes = set(compat_matrix.load(site=False).causes())
    unknown = [(r["id"], c) for r in RECORDS for c in r["checks"] if c not in check_ids | causes]
    assert not unknown
    # every case names at least one check: a cause alone is a guess from the text
    assert not [r["id"] for r in RECORDS if not set(r["checks"]) & check_ids]
def test_the_harvest_is_as_wide_as_the_issue_asks():
    """At least 150 cases from at least 15 components, one in five of them blind (written before their checks)."""
    assert len(RECORDS) >= 150, len(RECORDS)
    assert len({r["component"] for r in RECORDS}) >= 15
    assert sum(r["blind"] for r in RECORDS) * 5 >= len(RECORDS)


def test_the_coverage_doc_is_the_index_s():
    """docs/coverage.md's tables are generated from the index (python tests/tools/make_coverage_doc.py)."""
    import importlib.util
    from pathlib import Path

    tool = Path(__file__).parents[1] / "tools" / "make_coverage_doc.py"
    spec = importlib.util.spec_from_file_location("make_coverage_doc", tool)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = mod.DOC.read_text()
    assert mod.render(text, RECORDS) == text, "run: python tests/tools/make_coverage_doc.py"
    every_check = {c for r in RECORDS for c in r["checks"] if c.startswith("DLD-")}
    assert all(c in text for c in every_check), sorted(c for c in every_check if c not in text)
