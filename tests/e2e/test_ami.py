"""Image pipelines: golden-stack expectations, JUnit, Prometheus metrics and drift, end to end through the CLI."""

import json
import re
from pathlib import Path

import pytest

from conftest import FIXTURES

SNAPSHOTS = FIXTURES / "snapshots"
HEALTHY = SNAPSHOTS / "p4d_rhel8_healthy.json"
UPGRADED = SNAPSHOTS / "p4d_driver_upgrade_no_reboot.json"  # same p4d after `dnf upgrade` of the driver, no reboot
PYTHON = FIXTURES / "checks" / "_p4d_python.json"


def _report(run_cli, tmp_path, facts, name, *extra):
    path = tmp_path / f"{name}.json"
    result = run_cli("check", str(facts), "--json", str(path), "-q", *extra)
    assert result.returncode in (0, 1), result.stderr
    return path, result


def _python_facts(tmp_path):
    """The p4d conda-env facts as a facts file (the fixture holds only the facts object)."""
    from conftest import snapshot

    path = tmp_path / "python-facts.json"
    path.write_text(json.dumps(snapshot(json.loads(PYTHON.read_text()))))
    return path


# -- expectations -------------------------------------------------------------------------------------------------

def test_expect_from_a_good_run_pins_it_and_the_same_machine_meets_every_expectation(run_cli, tmp_path):
    facts = _python_facts(tmp_path)
    report, _ = _report(run_cli, tmp_path, facts, "good")
    result = run_cli("expect", "--from", str(report))
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert 'driver = "550.54.15"' in text and "gpu_count = 8" in text
    assert "[environments.pytorch]" in text and 'torch = "2.4.1+cu124"' in text
    assert "packages = { numpy = \"1.26.4\", torchvision = \"0.19.1\" }" in text
    expect = tmp_path / "expect.toml"
    expect.write_text(text)

    checked = run_cli("check", str(facts), "--expect", str(expect), "--json", "-", "-q")
    doc = json.loads(checked.stdout)
    exp = {f["id"]: f for f in doc["findings"] if f["id"].startswith("DLD-EXP-001")}
    keys = [line.split(" = ")[0] for line in text.splitlines() if " = " in line and not line.startswith("#")]
    # every line of the file is one expectation, packages count one each
    n_expected = len(keys) - 1 + 2
    assert len(exp) == n_expected, sorted(exp)
    assert {f["status"] for f in exp.values()} == {"pass"}
    assert exp["DLD-EXP-001:environments.pytorch.packages.numpy"]["evidence"] == {"expected": "1.26.4",
                                                                                "found": "1.26.4"}
    assert doc["run"]["options"]["expect"] == str(expect)


def test_expectations_from_the_healthy_image_catch_a_driver_upgrade_without_reboot(run_cli, tmp_path):
    report, _ = _report(run_cli, tmp_path, HEALTHY, "healthy")
    expect = tmp_path / "expect.toml"
    assert run_cli("expect", "--from", str(report), "-o", str(expect)).returncode == 0
    result = run_cli("check", str(UPGRADED), "--expect", str(expect), "--json", "-", "-q")
    assert result.returncode == 1
    doc = json.loads(result.stdout)
    failed = {f["id"]: f for f in doc["findings"] if f["id"].startswith("DLD-EXP-001") and f["status"] == "fail"}
    assert sorted(failed) == ["DLD-EXP-001:driver_userspace", "DLD-EXP-001:fabric_manager", "DLD-EXP-001:gpu_model"]
    assert failed["DLD-EXP-001:driver_userspace"]["message"] == \
        "driver_userspace: expected 535.104.05, found 535.129.03"
    assert failed["DLD-EXP-001:driver_userspace"]["evidence"] == {"expected": "535.104.05", "found": "535.129.03"}
    # the GPU model needs the driver; the PCI IDs from sysfs still match
    assert failed["DLD-EXP-001:gpu_model"]["message"] == "gpu_model: expected NVIDIA A100-SXM4-40GB, found nothing"
    passed = {f["id"] for f in doc["findings"] if f["status"] == "pass"}
    assert {"DLD-EXP-001:gpu_pci_ids", "DLD-EXP-001:driver", "DLD-EXP-001:kernel"} <= passed


def test_ranges_and_patterns_in_a_hand_written_file(run_cli, tmp_path):
    expect = tmp_path / "expect.toml"
    expect.write_text('driver = ">=535,<536"\nkernel = "4.18.0-477.*"\ncuda_toolkit = "~=12.4.0"\n'
                      'gpu_count = 8\nos_version = "9.*"\n')
    doc = json.loads(run_cli("check", str(HEALTHY), "--expect", str(expect), "--json", "-", "-q").stdout)
    status = {f["id"].split(":", 1)[1]: f["status"] for f in doc["findings"] if f["id"].startswith("DLD-EXP-001:")}
    assert status == {"driver": "pass", "kernel": "pass", "cuda_toolkit": "fail", "gpu_count": "pass",
                      "os_version": "fail"}


@pytest.mark.parametrize("content,message", [
    ("driver = \n", "is not valid TOML"),
    ('drivr = "535"\n', "unknown expectation(s) drivr"),
    ('driver = ">=535,<<536"\n', "driver = '>=535,<<536' is not a version range"),
    ('[environments.pt]\ntorchh = "2.4"\n', "environments.pt: unknown key(s) torchh"),
    ('[environments.pt]\npackages = "numpy"\n', "environments.pt.packages must be a table"),
    ("os_version = 8.8\n", "os_version = 8.8: expected a version, range, pattern or number"),
])
def test_a_bad_expectations_file_is_one_line_and_exit_2(run_cli, tmp_path, content, message):
    expect = tmp_path / "bad.toml"
    expect.write_text(content)
    result = run_cli("check", str(HEALTHY), "--expect", str(expect))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert result.reports("json") == []


def test_run_rejects_a_missing_expectations_file_before_collecting(run_cli, tmp_path):
    result = run_cli("run", "--expect", str(tmp_path / "nope.toml"))
    assert result.returncode == 2
    assert result.stderr.strip() == f"dl-doctor: error: cannot read {tmp_path / 'nope.toml'}: No such file or directory"


# -- JUnit ----------------------------------------------------------------------------------------------------------

def _junit(run_cli, tmp_path, facts, *extra):
    xml = tmp_path / "junit.xml"
    result = run_cli("check", str(facts), "--junit", str(xml), "--json", "-", "-q", *extra)
    return xml, json.loads(result.stdout), result


def test_junit_validates_against_the_junit_schema_and_agrees_with_the_findings(run_cli, tmp_path):
    import xmlschema
    from xml.etree import ElementTree as ET

    # the upgraded p4d, with a launch script's NCCL_P2P_DISABLE=1 for a warning beside its failures
    snap = json.loads(UPGRADED.read_text())
    snap["facts"]["network"]["env"] = {"NCCL_P2P_DISABLE": "1"}
    facts = tmp_path / "upgraded-p2p-off.json"
    facts.write_text(json.dumps(snap))
    xml, doc, result = _junit(run_cli, tmp_path, facts)
    xmlschema.XMLSchema(str(FIXTURES / "formats" / "junit.xsd")).validate(str(xml))
    root = ET.parse(xml).getroot()
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == len(doc["findings"]) == int(suite.get("tests")) == int(root.get("tests"))
    failures = sorted(c.get("name").split()[0] for c in cases if c.find("failure") is not None)
    assert failures == sorted(f["id"] for f in doc["findings"] if f["status"] == "fail")
    assert "DLD-DRV-003" in failures
    assert int(suite.get("failures")) == len(failures)
    skipped = [c for c in cases if c.find("skipped") is not None]
    assert len(skipped) == doc["summary"]["skip"] == int(suite.get("skipped"))
    drv = next(c for c in cases if c.get("name").startswith("DLD-DRV-003 "))
    text = drv.find("failure").text
    assert "Fix: Reboot" in text and "$ sudo reboot" in text  # the paste-able fix reaches the CI page
    # warnings pass with --fail-on fail (the exit code agrees) and fail with --fail-on warn
    warn_ids = {f["id"] for f in doc["findings"] if f["status"] == "warn"}
    assert warn_ids and not warn_ids & set(failures)
    xml2, _, strict = _junit(run_cli, tmp_path, facts, "--fail-on", "warn")
    root2 = ET.parse(xml2).getroot()
    failures2 = {c.get("name").split()[0] for c in root2.iter("testcase") if c.find("failure") is not None}
    assert failures2 == set(failures) | warn_ids
    assert strict.returncode == 1


def test_junit_survives_control_characters_in_messages():
    import xmlschema

    from dl_doctor.reports import junit

    report = {"run": {"duration_s": 0.5, "options": {}}, "host": {"hostname": "h"},
              "findings": [{"id": "DLD-GPU-008", "slug": "xid-errors", "title": "t", "status": "fail",
                            "message": "dmesg said \x1b[31mXid 79\x1b[0m\x00", "evidence": {}, "tags": ["gpu"],
                            "fix": {"summary": "s", "commands": ["sudo reboot"]}}]}
    text = junit.render(report)
    xmlschema.XMLSchema(str(FIXTURES / "formats" / "junit.xsd")).validate(text)
    assert "\x1b" not in text and "\ufffd[31mXid 79" in text


# -- Prometheus -------------------------------------------------------------------------------------------------------

def test_prometheus_textfile_parses_with_the_prometheus_client_parser(run_cli, tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    out = tmp_path / "textfile"
    out.mkdir()
    prom = out / "dl_doctor.prom"
    result = run_cli("check", str(UPGRADED), "--prometheus", str(prom), "--json", "-", "-q")
    doc = json.loads(result.stdout)
    assert sorted(p.name for p in out.iterdir()) == ["dl_doctor.prom"]  # written atomically: no temp file left
    families = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    assert set(families) == {"dl_doctor_check_status", "dl_doctor_findings", "dl_doctor_run_duration_seconds",
                             "dl_doctor_probe_errors", "dl_doctor_info", "dl_doctor_last_run_timestamp_seconds",
                             # each GPU's NUMA node and closest NIC from the recorded sysfs (it has no link files)
                             "dl_doctor_gpu_topology_info"}
    status = {s.labels["id"]: (s.value, s.labels["status"]) for s in families["dl_doctor_check_status"].samples}
    assert status["DLD-DRV-003"] == (2.0, "fail")
    assert len(status) == len(doc["findings"])
    counts = {s.labels["status"]: s.value for s in families["dl_doctor_findings"].samples}
    assert counts == {k: float(v) for k, v in doc["summary"].items()}
    info = families["dl_doctor_info"].samples[0].labels
    assert info["driver"] == "535.104.05" and info["instance_type"] == "p4d.24xlarge" and info["gpu_count"] == "8"
    assert families["dl_doctor_probe_errors"].samples[0].value == len(doc["probe_errors"])


def test_prometheus_label_values_are_escaped():
    from prometheus_client.parser import text_string_to_metric_families

    from dl_doctor.reports import prometheus

    report = {"tool": {"version": "1"}, "host": {"hostname": 'we"ird\\host\nname'}, "run": {}, "summary": {},
              "findings": [], "facts": {}}
    families = {f.name: f for f in text_string_to_metric_families(prometheus.render(report))}
    assert families["dl_doctor_info"].samples[0].labels["hostname"] == 'we"ird\\host\nname'


# -- drift ------------------------------------------------------------------------------------------------------------

def test_diff_of_two_recorded_reports_gives_the_exact_changes(run_cli, tmp_path):
    base, _ = _report(run_cli, tmp_path, HEALTHY, "base")
    cur, _ = _report(run_cli, tmp_path, UPGRADED, "cur")
    result = run_cli("diff", str(base), str(cur), "--json", "-")
    assert result.returncode == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["versions"] == {
        "added": {},
        "removed": {"gpu_model": "NVIDIA A100-SXM4-40GB"},
        "changed": {"driver_userspace": {"from": "535.104.05", "to": "535.129.03"},
                    "fabric_manager": {"from": "535.104.05", "to": "535.129.03"}},
    }
    assert [(f["id"], f["was"], f["status"]) for f in doc["findings"]["appeared"]] == [
        ("DLD-DRV-003", "pass", "fail"), ("DLD-GPU-004", "pass", "fail")]
    assert doc["findings"]["cleared"] == [] and doc["findings"]["changed"] == []
    assert doc["drift"] is True

    text = run_cli("diff", str(base), str(cur))
    assert text.returncode == 1
    assert "  changed   driver_userspace: 535.104.05 -> 535.129.03" in text.stdout
    assert "  removed   gpu_model: NVIDIA A100-SXM4-40GB" in text.stdout
    assert re.search(r"^  appeared  DLD-DRV-003 \[fail\] Driver/library version mismatch", text.stdout, re.M)
    assert text.stdout.rstrip().endswith("5 change(s).")

    # the other way round, the problems clear
    back = json.loads(run_cli("diff", str(cur), str(base), "--json", "-").stdout)
    assert [f["id"] for f in back["findings"]["cleared"]] == ["DLD-DRV-003", "DLD-GPU-004"]
    assert back["versions"]["added"] == {"gpu_model": "NVIDIA A100-SXM4-40GB"}


def test_diff_ignore_patterns_and_no_drift(run_cli, tmp_path):
    base, _ = _report(run_cli, tmp_path, HEALTHY, "base")
    again, _ = _report(run_cli, tmp_path, HEALTHY, "again")  # another run: other timestamps, same stack
    same = run_cli("diff", str(base), str(again))
    assert same.returncode == 0 and same.stdout.strip().endswith("No drift.")
    cur, _ = _report(run_cli, tmp_path, UPGRADED, "cur")
    quiet = run_cli("diff", str(base), str(cur), "--ignore", "driver*,fabric_manager", "--ignore", "gpu_model",
                    "--ignore", "DLD-DRV-*", "--ignore", "DLD-GPU-004", "--json", "-")
    assert quiet.returncode == 0, quiet.stdout
    assert json.loads(quiet.stdout)["drift"] is False


def test_diff_reads_facts_files_and_runs_todays_checks_on_them(run_cli, tmp_path):
    result = run_cli("diff", str(HEALTHY), str(UPGRADED), "--json", "-")
    assert result.returncode == 1
    doc = json.loads(result.stdout)
    assert "DLD-DRV-003" in [f["id"] for f in doc["findings"]["appeared"]]


def test_diff_environment_package_changes(run_cli, tmp_path):
    from conftest import snapshot

    facts = json.loads(PYTHON.read_text())
    base = tmp_path / "a.json"
    base.write_text(json.dumps(snapshot(facts)))
    env = facts["python_envs"]["environments"][0]
    env["distributions"]["numpy"] = "2.1.0"
    env["distributions"]["transformers"] = "4.44.0"
    del env["distributions"]["torchvision"]
    cur = tmp_path / "b.json"
    cur.write_text(json.dumps(snapshot(facts)))
    doc = json.loads(run_cli("diff", str(base), str(cur), "--json", "-").stdout)
    assert doc["versions"] == {
        "added": {"environments.pytorch.packages.transformers": "4.44.0"},
        "removed": {"environments.pytorch.packages.torchvision": "0.19.1"},
        "changed": {"environments.pytorch.packages.numpy": {"from": "1.26.4", "to": "2.1.0"}},
    }


@pytest.mark.parametrize("args,message", [
    (["missing.json", "x.json"], "cannot read missing.json: no such file"),
])
def test_diff_bad_input_is_exit_2(run_cli, tmp_path, args, message):
    result = run_cli("diff", *args)
    assert result.returncode == 2
    assert result.stderr.strip() == f"dl-doctor: error: {message}"


def test_expectations_on_an_unbooted_image_hold_what_the_files_say(run_cli, tree, tmp_path):
    """--sysroot on a mounted root volume: installed software is checked; runtime-only keys fail as not found."""
    import machines

    spec = {k: v for k, v in machines.p4d_rhel8_healthy().items() if not k.startswith(("proc/", "sys/"))}
    expect = tmp_path / "expect.toml"
    expect.write_text('os_id = "rhel"\nos_version = "8.8"\ndriver_userspace = "535.104.05"\ncuda_toolkit = "12.2.2"\n'
                      'gpu_count = 8\n')
    result = run_cli("run", "--sysroot", str(tree(spec)), "--expect", str(expect), "--json", "-", "-q")
    doc = json.loads(result.stdout)
    status = {f["id"].split(":", 1)[1]: (f["status"], f["evidence"].get("found"))
              for f in doc["findings"] if f["id"].startswith("DLD-EXP-001:")}
    assert status == {"os_id": ("pass", "rhel"), "os_version": ("pass", "8.8"),
                      "driver_userspace": ("pass", "535.104.05"), "cuda_toolkit": ("pass", "12.2.2"),
                      "missing": ("fail", None)}
    # what the image cannot show (no GPU is visible without its hardware) is the one finding for what is missing
    missing = next(f for f in doc["findings"] if f["id"] == "DLD-EXP-001:missing")
    assert "gpu_count" in json.dumps(missing)


def test_environment_names_with_dots_and_spaces_keep_their_expectations_apart():
    from dl_doctor.judge.expect import evaluate

    stack = {"environments": {"my env.v2": {"python": "3.11", "packages": {"numpy": "1.26.4"}}}}
    expectations = {"environments": {"my env.v2": {"python": "3.11", "packages": {"NumPy": "<2"}},
                                     "gone": {"python": "3.10"}}}
    assert evaluate(expectations, stack) == [
        ("environments.my env.v2.python", "3.11", "3.11", True),
        ("environments.my env.v2.packages.NumPy", "<2", "1.26.4", True),
        ("environments.gone.python", "3.10", None, False),
    ]


def test_finding_ids_stay_valid_for_any_environment_name():
    from dl_doctor.engine import run_check_all
    from dl_doctor.model import Facts
    from dl_doctor.registry import load_registry
    from conftest import snapshot

    spec = next(s for s in load_registry().checks if s.id == "DLD-EXP-001")
    facts = json.loads(PYTHON.read_text())
    findings = run_check_all(spec, Facts(snapshot(facts)), None,
                             {"expectations": {"environments": {"my env/2": {"python": "3.10"}}}})
    assert [(f.id, f.status.value) for f in findings] == [("DLD-EXP-001:environments.my_env_2.python", "fail")]
    assert "no Python environment named my env/2; found: pytorch" in findings[0].message
