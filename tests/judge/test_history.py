"""`dl-doctor history`'s judgement (doctor/judge/history.py) and its reading of a directory
(doctor/integrations/history.py), on reports built from a recorded machine (tests/fixtures/snapshots) by editing its
facts: a timeline over three runs across a reboot, a driver upgrade, findings that appear and clear, new Xids, many
nodes in one directory, damaged and foreign files, and a healthy twin that shows no change."""

from __future__ import annotations

import copy
import json
import tarfile
from pathlib import Path
from typing import Any, Dict, List, Optional

import jsonschema
import pytest

from dl_doctor.integrations.history import gather
from dl_doctor.integrations.login_hook import changed
from dl_doctor.judge.history import COUNTERS, Counter, counters, expand, history, record
from dl_doctor.probes.system import parse_boot

SNAPSHOTS = Path(__file__).resolve().parent.parent / "fixtures" / "snapshots"
SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "reports" / "schema" / "history-v1.json").read_text())
BOOT_A = "5f0c1b6e-8a51-4a0e-9d4b-0a1e2b3c4d5e"
BOOT_B = "0d9e8f7a-6b5c-4d3e-8f1a-2b3c4d5e6f70"
XID_79 = {"code": 79, "bus": "0000:10:1c.0", "pid": None, "text": "GPU has fallen off the bus.",
          "line": "[ 5123.456789] NVRM: Xid (PCI:0000:10:1c): 79, pid=0, GPU has fallen off the bus."}


def report(started_at: str, boot: Optional[str] = BOOT_A, findings: Optional[List[Dict[str, Any]]] = None,
           edit=None, machine: str = "p4d_rhel8_healthy") -> Dict[str, Any]:
    """A report of a recorded machine: its facts (edited), a boot and findings."""
    snap = json.loads((SNAPSHOTS / f"{machine}.json").read_text())
    facts = copy.deepcopy(snap["facts"])
    if boot:
        facts["system"]["boot"] = {"id": boot, "time": 1796000000 if boot == BOOT_A else 1796100000}
    if edit:
        edit(facts)
    return {"schema_version": "1", "tool": {"name": "dl-doctor", "version": "0.2.0"},
            "run": {"started_at": started_at, "mode": "live", "facts_mode": "live"},
            "findings": findings if findings is not None else
            [{"id": "DLD-GPU-005", "status": "pass", "message": "ECC is on"}], "facts": facts}


def ecc(volatile: int, aggregate: Optional[int] = None):
    def edit(facts):
        for d in facts["nvml"]["devices"]:
            d["ecc_uncorrected_volatile"] = 0
        facts["nvml"]["devices"][3]["ecc_uncorrected_volatile"] = volatile
        if aggregate is not None:
            facts["nvml"]["devices"][3]["ecc_uncorrected_aggregate"] = aggregate
    return edit


def timeline(*docs, fail_on="warn"):
    result = history([record(d, f"r{n}.json") for n, d in enumerate(docs)], fail_on=fail_on)
    jsonschema.validate(result, SCHEMA)
    return result


def test_three_runs_across_a_reboot_counters_rise_within_a_boot_and_are_not_compared_across_it():
    gpu3 = None

    def xid_and_ecc(facts):
        ecc(5, aggregate=5)(facts)
        facts["kernel_log"]["xids"] = [XID_79]

    first = report("2026-11-28T02:00:00Z", BOOT_A, edit=ecc(0, aggregate=0))
    second = report("2026-11-28T14:00:00Z", BOOT_A, edit=xid_and_ecc)
    third = report("2026-11-29T02:00:00Z", BOOT_B, edit=ecc(0, aggregate=5))  # rebooted: the volatile count reset
    result = timeline(third, first, second)  # given in any order: ordered by their own timestamps
    (host,) = result["hosts"]
    assert [r["started_at"] for r in host["runs"]] == ["2026-11-28T02:00:00Z", "2026-11-28T14:00:00Z",
                                                       "2026-11-29T02:00:00Z"]
    one, two = host["transitions"]
    gpu3 = json.loads((SNAPSHOTS / "p4d_rhel8_healthy.json").read_text())["facts"]["nvml"]["devices"][3]["uuid"]
    assert one["boot"] == "same"
    assert [(c["counter"], c["from"], c["to"]) for c in one["counters"]] == [
        (f"nvml.devices[{gpu3}].ecc_uncorrected_aggregate", 0, 5),
        (f"nvml.devices[{gpu3}].ecc_uncorrected_volatile", 0, 5)]
    assert [x["code"] for x in one["xids"]] == [79] and one["worst"] == "warn"
    # across the reboot: the volatile count went 5 -> 0 (reset), which is no change; the lifetime count is compared
    # (5 -> 5: no rise); the boot's log no longer holds the Xid, which is not "resolved" either
    assert two["boot"] == "reboot" and two["counters"] == [] and two["xids"] == []
    assert two["worst"] is None and not two["new"]
    assert result["exit_code"] == 0  # the newest run is no worse than the one before
    from dl_doctor.reports.history import render_text

    text = render_text(result)
    assert "reboot    the machine rebooted: counters that reset at boot are not compared" in text
    assert f"rose      nvml.devices[{gpu3}].ecc_uncorrected_volatile (uncorrectable ECC errors since the driver " \
           f"loaded): 0 -> 5" in text
    assert "xid       Xid 79 on 0000:10:1c.0: GPU has fallen off the bus." in text


def test_a_counter_rising_in_the_newest_run_is_exit_1_at_warn_and_not_at_fail():
    runs = (report("2026-11-28T02:00:00Z", edit=ecc(0)), report("2026-11-28T03:00:00Z", edit=ecc(2)))
    assert timeline(*runs)["exit_code"] == 1
    assert timeline(*runs, fail_on="fail")["exit_code"] == 0
    assert timeline(*runs, fail_on="never")["exit_code"] == 0


def test_a_run_without_a_boot_id_compares_no_boot_counter():
    result = timeline(report("2026-11-28T02:00:00Z", None, edit=ecc(0)),
                      report("2026-11-28T03:00:00Z", BOOT_A, edit=ecc(2)))
    (t,) = result["hosts"][0]["transitions"]
    assert t["boot"] == "unknown" and t["counters"] == [] and result["exit_code"] == 0
    assert t["counters_not_compared"] == 8  # the volatile count of each of the eight GPUs
    from dl_doctor.reports.history import render_text

    assert "    boot      boot not known (a report without the boot id): counters that reset at boot are not " \
           "compared" in render_text(result).splitlines()


def test_a_driver_upgrade_between_runs_is_a_version_change_and_new_but_not_worse():
    def upgrade(facts):
        facts["nvidia_driver"]["kernel_module"]["version"] = "550.90.07"

    result = timeline(report("2026-11-28T02:00:00Z"), report("2026-11-29T02:00:00Z", BOOT_B, edit=upgrade))
    (t,) = result["hosts"][0]["transitions"]
    assert t["versions"]["changed"]["driver"] == {"from": "535.104.05", "to": "550.90.07"}
    assert t["new"] and t["worst"] is None and result["exit_code"] == 0


def test_a_new_finding_and_a_resolved_one():
    before = [{"id": "DLD-GPU-005", "status": "pass", "message": "ok"},
              {"id": "DLD-DISK-001", "status": "warn", "message": "/ is 91% full"}]
    after = [{"id": "DLD-GPU-005", "status": "fail", "message": "ECC is off on GPU 2"},
             {"id": "DLD-DISK-001", "status": "pass", "message": "/ is 40% full"}]
    result = timeline(report("2026-11-28T02:00:00Z", findings=before),
                      report("2026-11-28T03:00:00Z", findings=after), fail_on="fail")
    (t,) = result["hosts"][0]["transitions"]
    assert [(f["id"], f["status"]) for f in t["findings"]["appeared"]] == [("DLD-GPU-005", "fail")]
    assert [(f["id"], f["was"]) for f in t["findings"]["cleared"]] == [("DLD-DISK-001", "warn")]
    assert result["exit_code"] == 1 and result["worse"] == ["ip-10-0-1-23.ec2.internal"]


def test_the_healthy_twin_identical_runs_show_no_change():
    result = timeline(report("2026-11-28T02:00:00Z"), report("2026-11-28T03:00:00Z"),
                      report("2026-11-28T04:00:00Z"))
    for t in result["hosts"][0]["transitions"]:
        assert not t["new"] and t["worse"] == [] and t["boot"] == "same"
        assert not any(t["versions"].values()) and not any(t["findings"].values())
    assert result["exit_code"] == 0
    from dl_doctor.reports.history import render_text

    assert render_text(result).count("; no change") == 2


def test_many_nodes_in_one_directory_give_one_history_per_node(tmp_path):
    def node(name, instance):
        def edit(facts):
            facts["system"]["hostname"] = name
            facts.setdefault("imds", {})["instance_id"] = instance
        return edit

    for n, (name, instance) in enumerate([("gpu-a", "i-0a"), ("gpu-b", "i-0b"), ("gpu-a", "i-0a"),
                                          ("gpu-b", "i-0b")]):
        (tmp_path / f"r{n}.json").write_text(json.dumps(report(f"2026-11-28T0{n}:00:00Z", edit=node(name, instance))))
    # a run of gpu-a whose instance metadata did not answer: it is still gpu-a's
    (tmp_path / "r9.json").write_text(json.dumps(report("2026-11-28T09:00:00Z",
                                                        edit=lambda f: f["system"].update(hostname="gpu-a"))))
    found = gather([str(tmp_path)])
    result = history(found.records, found.skipped)
    jsonschema.validate(result, SCHEMA)
    assert [(h["host"], len(h["runs"])) for h in result["hosts"]] == [("gpu-a", 3), ("gpu-b", 2)]


def test_damaged_and_foreign_files_are_listed_with_a_reason_and_skipped(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps(report("2026-11-28T02:00:00Z")))
    (tmp_path / "b.json").write_text(json.dumps(report("2026-11-28T03:00:00Z"))[:5000])  # cut by a full disk
    (tmp_path / "package.json").write_text('{"name": "left-pad"}')
    (tmp_path / "facts.json").write_text((SNAPSHOTS / "p4d_rhel8_healthy.json").read_text())
    (tmp_path / "old.json").write_text(json.dumps({**report("x"), "run": {}}))
    (tmp_path / "bad.tar.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    bundle = tmp_path / "bundle.tar.gz"
    data = json.dumps(report("2026-11-28T04:00:00Z")).encode()
    with tarfile.open(bundle, "w:gz") as tar:
        import io

        info = tarfile.TarInfo("dl-doctor-bundle-x/report.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    found = gather([str(tmp_path)])
    assert sorted(r["source"].replace(f"{tmp_path}/", "") for r in found.records) == [
        "a.json", "bundle.tar.gz:dl-doctor-bundle-x/report.json"]
    reasons = {s["source"].replace(f"{tmp_path}/", ""): s["error"] for s in found.skipped}
    assert set(reasons) == {"b.json", "package.json", "facts.json", "old.json", "bad.tar.gz"}
    assert "not a dl-doctor report" in reasons["package.json"]
    assert "a facts file, not a report" in reasons["facts.json"]
    assert "no run.started_at" in reasons["old.json"]
    assert "not a readable tarball" in reasons["bad.tar.gz"]
    assert all("\n" not in r for r in reasons.values())


def test_a_hostile_fact_value_cannot_forge_a_line():
    def evil(facts):
        facts["kernel"]["release"] = "6.0\n    rose      fake \x1b[31m"

    result = timeline(report("2026-11-28T02:00:00Z"), report("2026-11-28T03:00:00Z", edit=evil))
    from dl_doctor.reports.history import render_html, render_text

    text = render_text(result)
    assert "\x1b" not in text and not any(line.startswith("    rose      fake") for line in text.splitlines())
    page = render_html(result)
    assert "<script" not in page and "\x1b" not in page and "Content-Security-Policy" in page


def test_a_hostile_host_name_and_message_are_escaped_in_every_output():
    from dl_doctor.reports.history import render_html, render_markdown, render_text

    host = "gpu7\x1b]0;pwned\x07\u202e\nOK: no host's newest run is worse <script>alert(1)</script>"

    def named(facts):
        facts["system"]["hostname"] = host

    bad = [{"id": "DLD-GPU-005", "status": "fail", "message": "see http://evil.example/x @admin \x1b[2J\r<img src=x>"}]
    result = timeline(report("2026-11-28T02:00:00Z", edit=named),
                      report("2026-11-28T03:00:00Z", edit=named, findings=bad))
    text = render_text(result)
    assert not [c for c in ("\x1b", "\x07", "\u202e", "\r") if c in text]
    assert text.splitlines()[-1].startswith("NOT OK") and text.count("\nOK: ") == 0
    page = render_html(result)
    assert "<script>" not in page and "<img" not in page and "&lt;script&gt;" in page
    md = render_markdown(result)
    assert "http://evil" not in md and "<script>" not in md and "\x1b" not in md


def test_the_counter_table_is_data_a_probe_can_extend():
    facts = {"nvml": {"devices": [{"uuid": "GPU-1", "nvlink": {"links": [{"link": 0, "crc_errors": 3},
                                                                          {"link": 1, "crc_errors": 0}]}}]},
             "ports": {"mlx5_0": {"symbol_error": 7}}}
    table = COUNTERS + (Counter("nvml.devices[].nvlink.links[].crc_errors", "NVLink CRC errors"),
                        Counter("ports.*.symbol_error", "symbol errors"))
    assert counters(facts, table) == {
        "nvml.devices[GPU-1].nvlink.links[0].crc_errors": {"value": 3, "label": "NVLink CRC errors", "scope": "boot",
                                                           "level": "warn"},
        "nvml.devices[GPU-1].nvlink.links[1].crc_errors": {"value": 0, "label": "NVLink CRC errors", "scope": "boot",
                                                           "level": "warn"},
        "ports.mlx5_0.symbol_error": {"value": 7, "label": "symbol errors", "scope": "boot", "level": "warn"}}
    assert list(expand({"a": [{"x": True}]}, "a[].x")) == [("a[#0].x", True)]


def test_the_login_lines_new_is_the_historys_new():
    """The status line's "new since" and the history agree: a new Xid in the same boot is new (no finding moved),
    the same run twice is not."""
    def xid(facts):
        facts["kernel_log"]["xids"] = [XID_79]

    before, after = report("2026-11-28T02:00:00Z"), report("2026-11-28T03:00:00Z", edit=xid)
    assert changed(before, after) and timeline(before, after)["hosts"][0]["transitions"][0]["new"]
    assert not changed(before, report("2026-11-28T03:00:00Z"))


@pytest.mark.parametrize("boot_id, stat, expected", [
    ("2368a347-4e9c-4893-8307-cd42c96b15c2\n", "cpu  1 2 3\nbtime 1796232538\nprocesses 9\n",
     {"id": "2368a347-4e9c-4893-8307-cd42c96b15c2", "time": 1796232538}),
    ("not a uuid\n", "no btime here", {}),
    (None, None, {}),
])
def test_the_boot_facts_parse_only_what_reads_as_a_boot(boot_id, stat, expected):
    assert parse_boot(boot_id, stat) == expected


def test_the_system_probe_records_the_boot_where_proc_shows_it(tmp_path):
    from conftest import build_tree
    from dl_doctor.host import Host
    from dl_doctor.probes import ProbeContext
    from dl_doctor.probes.system import system_probe

    captured = build_tree(tmp_path / "captured", {
        "proc/sys/kernel/hostname": "node-1\n",
        "proc/sys/kernel/random/boot_id": "2368A347-4E9C-4893-8307-CD42C96B15C2\n",
        "proc/stat": "cpu  10 0 5 100 0 0 0 0 0 0\nintr 0\nctxt 9\nbtime 1796232538\nprocesses 99\n"})
    out = system_probe.func(ProbeContext(host=Host(sysroot=str(captured))))
    assert out["boot"] == {"id": "2368a347-4e9c-4893-8307-cd42c96b15c2", "time": 1796232538}
    image = build_tree(tmp_path / "image", {"etc/hostname": "node-1\n"})
    assert "boot" not in system_probe.func(ProbeContext(host=Host(sysroot=str(image))))  # an image that never booted
    live = system_probe.func(ProbeContext(host=Host()))
    if Path("/proc/sys/kernel/random/boot_id").exists():
        assert live["boot"]["id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def test_an_xid_read_from_another_log_is_the_same_xid():
    """The same record read through the journal, then from /var/log/messages, is written differently: the Xid is not
    new; a second one of the same code is."""
    def journal(facts):
        facts["kernel_log"]["source"] = "journalctl -k -b"
        facts["kernel_log"]["xids"] = [XID_79]

    def syslog(extra):
        def edit(facts):
            facts["kernel_log"]["source"] = "/var/log/messages"
            facts["kernel_log"]["xids"] = [{**XID_79, "line": "Nov 28 03:00:00 ip kernel: " + XID_79["line"]}] * extra
        return edit

    same = timeline(report("2026-11-28T02:00:00Z", edit=journal), report("2026-11-28T03:00:00Z", edit=syslog(1)))
    assert same["hosts"][0]["transitions"][0]["xids"] == []
    again = timeline(report("2026-11-28T02:00:00Z", edit=journal), report("2026-11-28T03:00:00Z", edit=syslog(2)))
    assert [x["code"] for x in again["hosts"][0]["transitions"][0]["xids"]] == [79]


def test_redacted_reports_of_many_nodes_are_told_apart_by_their_files(tmp_path):
    """`run --redact` calls every node's own host [HOST-1]: the login timer's file names (and a bundle's directory)
    tell the nodes apart instead."""
    import io
    import os

    def redacted(facts):
        facts["system"]["hostname"] = "[HOST-1]"

    for host in ("gpu-a", "gpu-b"):
        for hour in ("02", "03"):
            (tmp_path / f"dl-doctor-{host}-20261128T{hour}0000Z.json").write_text(
                json.dumps(report(f"2026-11-28T{hour}:00:00Z", edit=redacted)))
    data = json.dumps(report("2026-11-28T04:00:00Z", edit=redacted)).encode()
    with tarfile.open(tmp_path / "ticket.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("dl-doctor-bundle-gpu-c/report.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    os.mkfifo(tmp_path / "pipe.json")  # never opened: listed
    found = gather([str(tmp_path)])
    result = history(found.records, found.skipped)
    assert [(h["host"], len(h["runs"])) for h in result["hosts"]] == [
        ("dl-doctor-bundle-gpu-c", 1), ("gpu-a", 2), ("gpu-b", 2)]
    assert [s["error"] for s in result["skipped"]] == ["it is a FIFO, not a regular file; not read"]


def test_past_the_bound_the_rest_is_listed_not_read(tmp_path, monkeypatch):
    from dl_doctor.integrations import history as reading

    for hour in ("02", "03", "04"):
        (tmp_path / f"r{hour}.json").write_text(json.dumps(report(f"2026-11-28T{hour}:00:00Z")))
    monkeypatch.setattr(reading, "MAX_REPORTS", 2)
    found = gather([str(tmp_path)])
    assert len(found.records) == 2
    assert [s["source"].rsplit("/", 1)[-1] for s in found.skipped] == ["r04.json"]
    assert "bound" in found.skipped[0]["error"]


def test_fabric_counters_link_faults_worsen_and_healthy_noise_is_only_shown():
    def links(symbol: int, correctable: int, fatal: int, discards: int = 0):
        def edit(facts):
            facts["links"] = {"rdma_ports": [{"device": "mlx5_0", "port": 1, "counters": {
                "symbol_error": symbol, "port_xmit_discards": discards}}],
                "pci": [{"bdf": "0000:10:1c.0", "kind": "gpu", "aer": {
                    "fatal": {"total": fatal, "nonzero": {}}, "nonfatal": {"total": 0, "nonzero": {}},
                    "correctable": {"total": correctable, "nonzero": {}}}}]}
        return edit

    quiet = timeline(report("2026-11-28T02:00:00Z", edit=links(0, 10, 0)),
                     report("2026-11-28T03:00:00Z", edit=links(0, 40, 0, discards=900)))
    (t,) = quiet["hosts"][0]["transitions"]
    assert {c["counter"] for c in t["counters"]} == {"links.pci[0000:10:1c.0].aer.correctable.total",
                                                     "links.rdma_ports[mlx5_0].counters.port_xmit_discards"}
    assert t["worse"] == [] and quiet["exit_code"] == 0  # correctable errors and congestion: shown, not worse
    bad = timeline(report("2026-11-28T02:00:00Z", edit=links(0, 10, 0)),
                   report("2026-11-28T03:00:00Z", edit=links(50, 10, 1)))
    (t,) = bad["hosts"][0]["transitions"]
    assert {w["what"]: w["level"] for w in t["worse"]} == {
        "links.rdma_ports[mlx5_0].counters.symbol_error": "warn", "links.pci[0000:10:1c.0].aer.fatal.total": "fail"}
    assert timeline(report("2026-11-28T02:00:00Z", edit=links(0, 10, 0)),
                    report("2026-11-28T03:00:00Z", edit=links(50, 10, 1)), fail_on="fail")["exit_code"] == 1
