"""`dl-doctor history` through the installed entry point, on reports `dl-doctor check` wrote of a recorded machine
(tests/fixtures/snapshots) whose facts were edited: three runs across a reboot (an ECC count rising within a boot, a
driver upgrade and the reboot's reset), the exit codes 0/1/2, the JSON against its schema, the Markdown redacted,
the HTML escaped, and a healthy twin."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

HERE = Path(__file__).resolve().parent.parent
SNAPSHOT = HERE / "fixtures" / "snapshots" / "p4d_rhel8_healthy.json"
SCHEMA = json.loads((HERE.parent / "reports" / "schema" / "history-v1.json").read_text())
BOOT_A, BOOT_B = "5f0c1b6e-8a51-4a0e-9d4b-0a1e2b3c4d5e", "0d9e8f7a-6b5c-4d3e-8f1a-2b3c4d5e6f70"
HOST = "ip-10-0-1-23.ec2.internal"


@pytest.fixture(scope="module")
def base_report(tmp_path_factory, request):
    """One real report of the recorded p4d (what `check` writes), to edit into runs."""
    from conftest import CliRunner

    run_cli = CliRunner(tmp_path_factory.mktemp("cli"), request)
    out = tmp_path_factory.mktemp("base") / "r.json"
    snap = json.loads(SNAPSHOT.read_text())
    snap["facts"]["system"]["boot"] = {"id": BOOT_A, "time": 1796000000}
    facts = out.parent / "facts.json"
    facts.write_text(json.dumps(snap))
    r = run_cli("check", facts, "--json", out, "-q")
    assert r.returncode in (0, 1), r.stderr
    return json.loads(out.read_text())


def run(base, started_at, boot=BOOT_A, volatile=0, driver=None):
    doc = json.loads(json.dumps(base))
    doc["run"]["started_at"] = started_at
    doc["facts"]["system"]["boot"] = {"id": boot, "time": 1796000000 if boot == BOOT_A else 1796100000}
    doc["facts"]["nvml"]["devices"][0]["ecc_uncorrected_volatile"] = volatile
    if driver:
        doc["facts"]["nvidia_driver"]["kernel_module"]["version"] = driver
    return doc


def write(directory: Path, *docs):
    directory.mkdir(exist_ok=True)
    for doc in docs:
        stamp = doc["run"]["started_at"].replace("-", "").replace(":", "")[:15] + "Z"
        (directory / f"dl-doctor-{HOST}-{stamp}.json").write_text(json.dumps(doc))
    return directory


def test_three_runs_across_a_reboot(run_cli, base_report, tmp_path):
    d = write(tmp_path / "reports",
              run(base_report, "2026-11-28T02:00:00+00:00"),
              run(base_report, "2026-11-28T14:00:00+00:00", volatile=4),
              run(base_report, "2026-11-29T02:00:00+00:00", boot=BOOT_B, volatile=0, driver="550.90.07"))
    (d / "notes.json").write_text("{not json")
    r = run_cli("history", d, "--json", tmp_path / "h.json", "--markdown", tmp_path / "h.md",
                "--html", tmp_path / "h.html")
    assert r.returncode == 0, r.stdout + r.stderr  # the newest run (after the reboot) is no worse than the one before
    doc = json.loads((tmp_path / "h.json").read_text())
    jsonschema.validate(doc, SCHEMA)
    (host,) = doc["hosts"]
    first, second = host["transitions"]
    assert [c["to"] for c in first["counters"]] == [4] and first["worst"] == "warn"
    assert second["boot"] == "reboot" and second["counters"] == []
    assert second["versions"]["changed"]["driver"] == {"from": "535.104.05", "to": "550.90.07"}
    lines = r.stdout.splitlines()
    assert any(line.startswith("    rose      nvml.devices[") and line.endswith(": 0 -> 4") for line in lines)
    assert "    reboot    the machine rebooted: counters that reset at boot are not compared" in lines
    assert "    changed   driver: 535.104.05 -> 550.90.07" in lines
    assert any(line.startswith("  SKIPPED ") and "notes.json" in line for line in lines)
    assert lines[-1].startswith("OK: no host's newest run is worse")
    md = (tmp_path / "h.md").read_text()
    assert "driver: 535.104.05 -\\> 550.90.07" in md or "550.90.07" in md
    assert HOST not in md and "ip-10-0-1-23" not in md  # redacted for a public ticket
    page = (tmp_path / "h.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "Content-Security-Policy" in page and "550.90.07" in page


def test_a_worsening_in_the_newest_run_is_exit_1(run_cli, base_report, tmp_path):
    d = write(tmp_path / "reports", run(base_report, "2026-11-28T02:00:00+00:00"),
              run(base_report, "2026-11-28T03:00:00+00:00", volatile=1))
    r = run_cli("history", d)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1].startswith(f"NOT OK: the newest run is worse than the one before (at or above "
                                                f"warn) on 1 host: {HOST}")
    assert run_cli("history", d, "--fail-on", "fail").returncode == 0


def test_the_healthy_twin_is_exit_0_and_no_change(run_cli, base_report, tmp_path):
    d = write(tmp_path / "reports", run(base_report, "2026-11-28T02:00:00+00:00"),
              run(base_report, "2026-11-28T03:00:00+00:00"))
    r = run_cli("history", d, "--json", "-")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    (t,) = doc["hosts"][0]["transitions"]
    assert not t["new"] and t["worse"] == []
    assert "; no change" in run_cli("history", d).stdout


def _one_error(r, *words):
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr + r.stdout, (r.stdout, r.stderr)
    for word in words:
        assert word in lines[0], lines[0]


def test_bad_input_is_one_line_and_exit_2(run_cli, base_report, tmp_path):
    _one_error(run_cli("history", tmp_path / "nowhere"), "nowhere does not exist")
    d = write(tmp_path / "reports", run(base_report, "2026-11-28T02:00:00+00:00"))
    _one_error(run_cli("history", d, "--json", tmp_path / "no" / "h.json"), "does not exist")
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "a.json").write_text("[1, 2")
    _one_error(run_cli("history", junk), "no readable dl-doctor report", "a.json")
    _one_error(run_cli("history", d, "--fail-on", "sometimes"), "--fail-on")
