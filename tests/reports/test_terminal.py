"""The terminal report as a doctor's report (issue 28 item 1): the header (host, GPUs, driver, CUDA), the problems
worst first with the fix to paste, a compact stack, one line of pass/skip counts (-v lists them, -q prints only the
problems and the last line), the report paths and a last line that names the problems and the next command; prose
wrapped to the width, commands whole; on one screen where the screen's height is known."""

from __future__ import annotations

import copy
import json
import re
import time

import pytest

from conftest import FIXTURES, build_tree
from dl_doctor import app
from dl_doctor.engine import utc_now
from dl_doctor.reports import terminal

PATHS = ["/srv/reports/r.json", "/srv/reports/r.html"]
LONG_COMMAND = ("# or, with no GPU processes left: sudo systemctl stop nvidia-persistenced nvidia-fabricmanager; "
                "sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia")


def _judged(snapshot, **opts):
    report, _ = app.judge(snapshot, app.registry(), app.JudgeOptions(**opts), mode="live", started=utc_now(),
                          t0=time.monotonic())
    return json.loads(json.dumps(report))


def _snapshot(name):
    return json.loads((FIXTURES / "snapshots" / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def failing():  # a p4d after a driver upgrade without the reboot: two FAILs
    return _judged(_snapshot("p4d_driver_upgrade_no_reboot"))


@pytest.fixture(scope="module")
def warning():  # a g5 with persistence mode off: one WARN
    return _judged(_snapshot("g5_ubuntu2204"))


@pytest.fixture(scope="module")
def healthy():
    return _judged(_snapshot("g5_ubuntu2204"), skip=("DLD-GPU-005",))


@pytest.fixture(scope="module")
def no_gpu():  # the g5 with its GPU gone from the PCI bus and NVML
    snap = _snapshot("g5_ubuntu2204")
    snap["facts"]["gpu_pci"] = {"devices": [], "gpu_count": 0, "nvswitch_count": 0}
    snap["facts"].pop("nvml", None)
    return _judged(snap)


def _render(report, **kw):
    kw.setdefault("paths", PATHS)
    return terminal.render(report, gpu_names=app.gpu_names(report), **kw)


def test_a_failing_host_reads_header_problems_stack_counts_paths_and_a_last_line_naming_them(failing):
    text = _render(failing, width=80)
    lines = text.splitlines()
    assert lines[0] == "dl-doctor 0.1.0 · ip-10-0-1-23.ec2.internal ·"
    assert lines[1] == "Red Hat Enterprise Linux 8.8 (Ootpa) · kernel 4.18.0-477.27.1.el8_8.x86_64"
    assert lines[2] == "GPUs: 8 × NVIDIA A100 SXM4 40GB · driver 535.104.05"  # the model from the PCI ID
    assert lines[3] == ""
    # the problems, each headline with its check, then its evidence and the fix to paste
    assert lines[4] == "FAIL  Kernel module and user-space driver are different versions · DLD-DRV-003"
    assert lines[5] == "      Driver/library version mismatch: the loaded kernel module is 535.104.05,"
    assert "        sudo reboot" in lines and "        " + LONG_COMMAND in lines  # whole, though longer than 80
    second = lines.index("FAIL  The fabric manager is not running at the driver's version · DLD-GPU-004")
    assert second > lines.index("        " + LONG_COMMAND)
    assert lines[second - 1] == ""
    # the stack, the counts, the paths, and the last line
    stack = lines.index("Stack: driver  module nvidia 535.104.05 · libcuda 535.129.03 ✗ DLD-DRV-003")
    assert lines[stack + 1] == "       CUDA    toolkit 12.2.2 (/usr/local/cuda-12.2)"
    assert re.match(r"Checks: \d+ passed, \d+ skipped \(\d+ NVML could not initialise, \d+ other\)$", lines[stack + 2])
    assert lines[-3:] == ["Report: /srv/reports/r.json", "Report: /srv/reports/r.html",
                          "2 problems: FAIL DLD-DRV-003, DLD-GPU-004; next: dl-doctor explain DLD-DRV-003"]
    # prose wraps to the width; only commands are longer
    assert [l for l in lines if len(l) > 80] == ["        " + LONG_COMMAND]
    assert not any(l.startswith(("PASS", "SKIP")) for l in lines)


def test_at_120_columns_prose_fills_the_line_and_the_last_line_names_the_worst_problem(failing, warning):
    lines = _render(failing, width=120).splitlines()
    assert ("      Driver/library version mismatch: the loaded kernel module is 535.104.05, the user-space driver is "
            "535.129.03") in lines
    assert [l for l in lines if len(l) > 120] == ["        " + LONG_COMMAND]
    assert lines[-1] == ("2 problems: FAIL DLD-DRV-003, DLD-GPU-004; next: dl-doctor explain DLD-DRV-003, or open the "
                         "HTML report")
    last = _render(warning, width=120).splitlines()[-1]
    assert last == ("1 problem: WARN DLD-GPU-005 (GPU persistence mode is off); next: dl-doctor explain DLD-GPU-005, "
                    "or open the HTML report")


def test_the_last_line_keeps_to_the_width_naming_the_worst_first():
    findings = [{"id": f"DLD-GPU-{i:03d}", "status": "warn", "title": "t", "headline": f"problem {i}",
                 "message": "m"} for i in range(1, 9)]
    findings.insert(3, {"id": "DLD-DRV-001", "status": "fail", "title": "t", "headline": "driver too old",
                        "message": "m"})
    report = {"tool": {"version": "1"}, "host": {"hostname": "h"}, "run": {"mode": "live"}, "findings": findings}
    assert terminal.render(report, width=80).splitlines()[-1] == (
        "9 problems: FAIL DLD-DRV-001, +8 more; next: dl-doctor explain DLD-DRV-001")
    last = terminal.render(report, width=120).splitlines()[-1]
    assert last.startswith("9 problems: FAIL DLD-DRV-001, WARN DLD-GPU-001, DLD-GPU-002, ")
    assert re.search(r", \+\d more; next: dl-doctor explain DLD-DRV-001$", last) and len(last) <= 120, last
    wide = terminal.render(report, width=300).splitlines()[-1]
    assert wide.startswith("9 problems: FAIL DLD-DRV-001 (driver too old), WARN DLD-GPU-001, ") and "more" not in wide


def test_a_warning_is_a_list_of_its_items_with_the_fix_and_its_alternative(warning):
    text = _render(warning, width=80)
    block = text[text.index("WARN  GPU persistence mode is off · DLD-GPU-005\n"):]
    block = block[:block.index("\n\n")].splitlines()
    assert block[1:] == [
        "      - persistence mode is off on 1 of 1 GPUs: every CUDA start and nvidia-smi",
        "        re-initialises them",
        "      - nvidia-persistenced is not installed as a systemd unit",
        "      fix: Enable the persistence daemon.",
        "        sudo systemctl enable --now nvidia-persistenced",
        "        # or: sudo nvidia-smi -pm 1"]
    assert text.splitlines()[1] == "GPUs: 1 × NVIDIA A10G · driver 535.129.03 · CUDA 12.2"  # NVML's name and CUDA


def test_a_healthy_host_says_so_on_its_last_line(healthy):
    s = healthy["summary"]
    assert s["warn"] == s["fail"] == s["error"] == 0
    lines = _render(healthy, width=80).splitlines()
    assert lines[-1] == f"All is well: no problem found ({s['pass']} passed, {s['skip']} skipped)."
    assert "No NVIDIA GPU here" not in "\n".join(lines)


def test_no_nvidia_gpu_is_said_plainly_near_the_top_only_where_the_pci_bus_was_the_hosts(no_gpu):
    lines = _render(no_gpu, width=80).splitlines()
    assert terminal.NO_GPU_HERE in lines[:4], lines[:4]
    assert not any(l.startswith("GPUs:") for l in lines)
    if not any(f["status"] in ("warn", "fail", "error") for f in no_gpu["findings"]):
        assert lines[-1].startswith("No problem found, but no NVIDIA GPU here (")
    # the skips that share the reason are one group on the counts line
    counts = next(l for l in lines if l.startswith("Checks: "))
    assert re.search(r"\(\d+ no NVIDIA GPU[,)]", counts), counts
    # a sysroot's PCI bus is not the image's hardware; facts a live run collected are that host's
    tree = copy.deepcopy(no_gpu)
    tree["run"].update(mode="sysroot", sysroot="/mnt/image")
    text = _render(tree, width=80)
    assert "No NVIDIA GPU here" not in text and "GPUs: none on the tree's PCI bus" in text
    checked = copy.deepcopy(no_gpu)
    checked["run"].update(mode="facts", facts_mode="live")
    assert terminal.NO_GPU_HERE in _render(checked, width=80)
    checked["run"]["facts_mode"] = "sysroot"
    assert terminal.NO_GPU_HERE not in _render(checked, width=80)
    wsl = copy.deepcopy(no_gpu)
    wsl["facts"]["nvidia_driver"].setdefault("runtime", {})["wsl"] = True
    assert terminal.NO_GPU_HERE not in _render(wsl, width=80)


def test_the_counts_line_groups_the_skips_by_reason_within_the_width(no_gpu):
    for width in (80, 120):
        counts = next(l for l in _render(no_gpu, width=width).splitlines() if l.startswith("Checks: "))
        m = re.match(r"Checks: (\d+) passed, (\d+) skipped \((.*)\)$", counts)
        assert m and len(counts) <= width, counts
        assert (int(m.group(1)), int(m.group(2))) == (no_gpu["summary"]["pass"], no_gpu["summary"]["skip"])
        assert sum(int(part.split(" ")[0]) for part in m.group(3).split(", ")) == no_gpu["summary"]["skip"]


def test_quiet_prints_only_the_problems_and_the_last_line(failing, healthy):
    text = _render(failing, width=80, quiet=True)
    lines = text.splitlines()
    assert lines[0] == "FAIL  Kernel module and user-space driver are different versions · DLD-DRV-003"
    assert lines[-1] == "2 problems: FAIL DLD-DRV-003, DLD-GPU-004; next: dl-doctor explain DLD-DRV-003"
    assert not any(l.startswith(("dl-doctor", "GPUs:", "Stack:", "Checks:", "Report:", "PASS", "SKIP"))
                   for l in lines)
    assert _render(healthy, quiet=True).startswith("All is well: no problem found (")
    assert _render(healthy, quiet=True).count("\n") == 1


def test_verbose_lists_every_pass_and_skip_passes_first(failing):
    text = _render(failing, width=80, verbose=True)
    listed = [l for l in text.splitlines() if l.startswith(("PASS  ", "SKIP  "))]
    passes = [f["id"] for f in failing["findings"] if f["status"] == "pass"]
    skips = [f["id"] for f in failing["findings"] if f["status"] == "skip"]
    assert [l.split()[1] for l in listed] == sorted(passes) + sorted(skips)
    assert all(len(l) <= 80 for l in text.splitlines() if not l.startswith("        "))
    assert ("DLD-DRV-003 checks: The loaded kernel module and the user-space driver are the same version"
            in " ".join(text.split()))
    assert text.splitlines()[-1] == "2 problems: FAIL DLD-DRV-003, DLD-GPU-004; next: dl-doctor explain DLD-DRV-003"


def test_the_last_line_is_painted_by_the_worst_status(failing, warning, healthy):
    for report, code in ((failing, "31;1"), (warning, "33;1"), (healthy, "32;1")):
        last = _render(report, color=True).splitlines()[-1]
        assert last.startswith(f"\033[{code}m") and last.endswith("\033[0m"), repr(last)
    assert "\033[" not in _render(failing)


def test_on_a_24_row_screen_the_problems_and_the_last_line_fit(failing):
    full = _render(failing, width=80)
    assert terminal.rows(full, 80) > 24  # all of it would scroll the first problem off
    fitted = _render(failing, width=80, height=24)
    assert terminal.rows(fitted, 80) <= 24, fitted
    lines = fitted.splitlines()
    # the host and its GPUs in one line, without the OS and the kernel
    assert lines[0] == "ip-10-0-1-23.ec2.internal · GPUs: 8 × NVIDIA A100 SXM4 40GB · driver 535.104.05"
    assert lines[1] == "FAIL  Kernel module and user-space driver are different versions · DLD-DRV-003"
    assert "FAIL  The fabric manager is not running at the driver's version · DLD-GPU-004" in lines
    assert "        " + LONG_COMMAND in lines and "Stack:" not in fitted
    assert lines[-1] == "2 problems: FAIL DLD-DRV-003, DLD-GPU-004; next: dl-doctor explain DLD-DRV-003"
    assert _render(failing, width=80, height=60) == full  # a tall screen has all of it


def test_on_a_short_screen_what_root_would_add_and_the_facts_not_collected_are_a_line_each(warning):
    report = copy.deepcopy(warning)
    report["privilege"] = {"euid": 1000, "is_root": False, "limited": [
        {"probe": "kernel_log", "would_add": "the kernel log (/dev/kmsg): Xid errors and driver load failures"},
        {"probe": "processes", "would_add": "the mapped libraries of 3 Python process(es) of other users"},
        {"probe": "security", "would_add": "other users' Jupyter configs and processes, the owners of sockets"}]}
    report["probe_errors"] = [{"probe": "ebs", "error": "nvme: permission denied reading /dev/nvme1n1"}]
    full = _render(report, width=80)
    assert "Running as root would add: the kernel log (/dev/kmsg): Xid errors and driver\n  load" in full
    assert "\n  - ebs: nvme: permission denied reading /dev/nvme1n1\n" in full
    short = _render(report, width=80, height=20)
    assert terminal.rows(short, 80) <= 20, short
    assert "\nRun as root for facts from: kernel_log, processes, security (-v says what)\n" in short
    assert "\nFacts that could not be collected: ebs (-v says why)\n" in short
    assert _render(report, width=80, height=20, verbose=True).count("Xid errors and driver\n  load") == 1


def test_the_width_is_columns_else_the_terminals_else_100(monkeypatch):
    import io

    monkeypatch.setenv("COLUMNS", "80")
    assert terminal.terminal_width(io.StringIO()) == 80
    monkeypatch.setenv("COLUMNS", "12")
    assert terminal.terminal_width(None) == terminal.MIN_WIDTH
    monkeypatch.setenv("COLUMNS", "wide")
    assert terminal.terminal_width(io.StringIO()) == 100
    monkeypatch.delenv("COLUMNS")
    assert terminal.terminal_width(io.StringIO()) == 100
    monkeypatch.setenv("LINES", "24")
    assert terminal.terminal_height(io.StringIO()) == 24
    monkeypatch.delenv("LINES")
    assert terminal.terminal_height(io.StringIO()) is None


def test_the_stack_block_escapes_what_the_machine_named(warning):
    report = copy.deepcopy(warning)
    evil = "env\n\x1b[2JPASS  DLD-GPU-001 fine\u202e"
    report["facts"]["nvml"]["devices"][0]["name"] = evil
    report["facts"]["nvidia_driver"]["kernel_module"]["version"] = evil
    text = _render(report, width=80)
    assert "\x1b" not in text and "\u202e" not in text
    assert not any(l.startswith("PASS") for l in text.splitlines())
    assert "GPUs: 1 × env\\n\\x1b[2JPASS  DLD-GPU-001 fine\\u202e" in text
    assert "module nvidia env\\n\\x1b[2JPASS" in text


def test_run_through_the_entry_point_at_80_columns(run_cli, tmp_path):
    import machines

    root = build_tree(tmp_path / "tree", machines.p4d_after_driver_upgrade())
    r = run_cli("run", "--sysroot", str(root), "--json", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html"),
                env={"COLUMNS": "80"})
    report = json.loads((tmp_path / "r.json").read_text())
    problems = sorted((f for f in report["findings"] if f["status"] in ("fail", "error", "warn")),
                      key=lambda f: (terminal.ORDER.index(f["status"]), f["id"]))
    assert problems and r.returncode == (1 if report["summary"]["fail"] else 0), r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("dl-doctor ") and f"sysroot {root}" in " ".join(lines[:3])
    assert "No NVIDIA GPU here" not in r.stdout
    commands = {"        " + line for f in problems for c in (f.get("fix") or {}).get("commands") or []
                for line in c.splitlines()}
    assert all(len(l) <= 80 for l in lines if l not in commands), r.stdout
    assert f"Report: {tmp_path / 'r.json'}" in lines and lines[-2] == f"Report: {tmp_path / 'r.html'}"
    assert lines[-1].startswith(f"{len(problems)} problem{'s' if len(problems) != 1 else ''}: "
                                f"{terminal.LABELS[problems[0]['status']]} {problems[0]['id']}")
    assert lines[-1].endswith(f"next: dl-doctor explain {problems[0]['id']}") and len(lines[-1]) <= 80
    assert not any(l.startswith(("PASS", "SKIP")) for l in lines)
    verbose = run_cli("run", "--sysroot", str(root), "-v", "--html", "/dev/null", env={"COLUMNS": "80"})
    assert sum(l.startswith(("PASS  ", "SKIP  ")) for l in verbose.stdout.splitlines()) == (
        report["summary"]["pass"] + report["summary"]["skip"])
