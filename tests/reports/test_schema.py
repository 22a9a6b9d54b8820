"""The JSON Schema shipped in reports/ is a valid schema that rejects malformed reports."""

import copy
import json

import jsonschema
import pytest

from conftest import snapshot
from dl_doctor.engine import build_report, evaluate, utc_now
from dl_doctor.redact import redact
from dl_doctor.registry import load_registry
from dl_doctor.facts import schema as facts_schema
from dl_doctor.reports import schema

SNAP = snapshot({"os": {"id": "rhel", "pretty_name": "RHEL 8.8"}, "kernel": {"release": "4.18.0-477.el8.x86_64"}})
REPORT = redact(build_report(SNAP, evaluate(SNAP, load_registry().checks), mode="facts", started_at=utc_now(),
                             duration_s=0.1))


def test_schemas_are_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(schema())
    jsonschema.Draft202012Validator.check_schema(facts_schema())


def test_a_built_report_validates():
    jsonschema.validate(REPORT, schema())
    assert REPORT["summary"]["pass"] == 1


@pytest.mark.parametrize("mutate", [
    lambda r: r.pop("findings"),
    lambda r: r.__setitem__("schema_version", "2"),
    lambda r: r["findings"][0].__setitem__("status", "ok"),
    lambda r: r["findings"][0].__setitem__("fix", {"summary": "x"}),
    lambda r: r["summary"].__setitem__("bogus", 1),
    lambda r: r["run"].__setitem__("mode", "other"),
    lambda r: r["probe_errors"].append({"probe": "x"}),
])
def test_malformed_reports_are_rejected(mutate):
    bad = copy.deepcopy(REPORT)
    mutate(bad)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema())


def test_schema_files_are_shipped_as_package_data():
    from dl_doctor import reports

    assert json.loads(json.dumps(schema()))["title"] == "dl-doctor report"
    assert facts_schema()["title"] == "dl-doctor facts snapshot"
