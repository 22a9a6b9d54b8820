"""Every reported failure of tests/cases/index.json, rebuilt as its machine (tests/cases/<module>.py), is named by a
finding and ranked first by `why`; its healthy twin stays quiet (tests/cases/__init__.py says what each means).

The cases run in-process (collect on the tree, every check, `why --report`); the blind ones also run through the
installed entry point as a user would type it: `dl-doctor why SYMPTOM --sysroot TREE`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cases

RECORDS = cases.index()
BUILDERS = cases.load_builders()


@pytest.mark.parametrize("record", RECORDS, ids=[r["id"] for r in RECORDS])
def test_the_case_is_named_and_ranked_first_and_its_twin_stays_quiet(record, tmp_path):
    v = cases.verdict(record, tmp_path)
    assert v["named"], f"no warn/fail finding among {record['checks']} says {record.get('names')}: {v['bad']}"
    assert v["why_first"], f"why ranked {v['why_ranked']} first, not one of {record['checks']}"
    assert not v["twin_bad"], f"the healthy twin warns or fails: {v['twin_bad']}"


def test_every_case_has_its_machine_and_every_machine_its_case():
    assert sorted(BUILDERS) == sorted(r["id"] for r in RECORDS)


BLIND = [r for r in RECORDS if r.get("blind") and BUILDERS[r["id"]](True).tree_only]


@pytest.mark.parametrize("record", BLIND, ids=[r["id"] for r in BLIND])
def test_a_blind_case_through_the_entry_point(record, run_cli, tmp_path):
    """`dl-doctor why --json - --sysroot TREE SYMPTOM` ranks the cause first on the tree alone (the cases paired with
    recorded NVML are judged in-process only: NVML is live)."""
    machine = BUILDERS[record["id"]](True)
    root = cases.build(tmp_path / "root", machine.spec)
    r = run_cli("why", "--json", "-", "--sysroot", str(root), record["symptom"], timeout=300)
    answer = json.loads(r.stdout)
    assert cases.why_first(record, cases.Outcome([], answer)), [c["id"] for c in answer["causes"][:3]]
    # exit 1: the machine confirms a cause (docs/why.md); 0 where the first cause is ranked from the text alone
    assert r.returncode == (1 if answer["causes"][0]["verdict"] == "confirmed" else 0), r.stderr
