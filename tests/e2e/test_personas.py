"""Each user's job, done the way they do it, through what they look with (tests/personas.py): the ML engineer at
first login (a real 80x24 terminal), the AMI builder (a bake's exit codes, JUnit, JSON through Debian's jq), the
support engineer (the Markdown through GitHub's renderer, the HTML page in headless Chromium at 1280 and 390 px)
and the cluster operator (fleet, the login status line). Each skips cleanly where its tool is missing."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import personas  # noqa: E402

SNAPSHOTS = ROOT / "tests" / "fixtures" / "snapshots"
UPGRADE = SNAPSHOTS / "p4d_driver_upgrade_no_reboot.json"  # two failures: the driver was upgraded, no reboot
G5 = SNAPSHOTS / "g5_ubuntu2204.json"                         # one warning
EXE = str(Path(sys.executable).with_name("dl-doctor"))

pytest.importorskip("pyte")


def _env(tmp_path):
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}


# -- the ML engineer at first login -------------------------------------------------------------------------------

def test_at_80x24_the_problems_and_the_line_that_names_them_are_on_the_screen(tmp_path):
    shown = personas.screen([EXE, "check", str(UPGRADE)], env=_env(tmp_path), cwd=tmp_path)
    assert shown.returncode == 1
    last = shown.last_line()
    assert last.startswith("2 problems") and "DLD-DRV-003" in last and "dl-doctor explain" in last, shown.text
    # the screen at the end holds a problem's headline and its fix, not a scroll of passes
    assert "Kernel module and user-space driver are different versions" in shown.text \
        or "fabric manager is not running" in shown.text, shown.text
    assert not [l for l in shown.lines if l.startswith(("PASS ", "SKIP "))]
    # prose fits the 80 columns; only a command may be longer, printed whole so it pastes
    printed = shown.printed
    long = [l for l in printed if len(l) > 80]
    assert all(l.startswith("        ") for l in long), long
    assert any("sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia" in l
               for l in printed)
    # check writes no report it was not asked for
    assert not (tmp_path / "dl-doctor-reports").exists()


def test_quiet_prints_the_problems_and_the_last_line_only(tmp_path):
    shown = personas.screen([EXE, "check", str(UPGRADE), "-q"], env=_env(tmp_path), cwd=tmp_path)
    assert shown.returncode == 1
    text = "\n".join(shown.printed)
    assert "FAIL" in text and "Stack:" not in text and "Checks:" not in text
    assert shown.last_line().startswith("2 problems")


def test_a_gpu_less_host_says_so_plainly(tmp_path):
    from conftest import host_has_nvidia_gpu

    if host_has_nvidia_gpu():
        pytest.skip("this host has an NVIDIA GPU")
    shown = personas.screen([EXE, "run", "--no-env-scan", "--output-dir", str(tmp_path / "r")],
                            env=_env(tmp_path), cwd=tmp_path, rows=60)
    assert shown.returncode in (0, 1)
    assert "No NVIDIA GPU here: this host cannot train on a GPU" in " ".join(shown.printed)


# -- the AMI builder ------------------------------------------------------------------------------------------------

def test_a_bake_on_the_wrong_partition_stops_with_one_line(tmp_path):
    boot = tmp_path / "boot"
    (boot / "grub2").mkdir(parents=True)
    (boot / "vmlinuz-5.14.0-362.el9.x86_64").write_bytes(b"")
    proc = subprocess.run([EXE, "run", "--sysroot", str(boot), "--fail-on", "warn"], capture_output=True,
                          text=True, env=_env(tmp_path), cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "boot" in lines[0].lower() and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.skipif(not shutil.which("jq"), reason="jq is not installed (Debian package 'jq')")
def test_the_pipeline_reads_the_json_through_jq(tmp_path):
    check = subprocess.run([EXE, "check", str(UPGRADE), "--json", "-"], capture_output=True, text=True,
                           env=_env(tmp_path), cwd=tmp_path, timeout=120)
    assert check.returncode == 1
    jq = subprocess.run(["jq", "-r", '.findings[] | select(.status == "fail") | .id'], input=check.stdout,
                        capture_output=True, text=True, timeout=60)
    assert jq.returncode == 0 and jq.stdout.split() == ["DLD-DRV-003", "DLD-GPU-004"], jq.stdout
    summary = subprocess.run(["jq", "-r", ".summary.fail"], input=check.stdout, capture_output=True, text=True)
    assert summary.stdout.strip() == "2"


# -- the support engineer -------------------------------------------------------------------------------------------

def test_the_ticket_markdown_renders_on_github_with_the_fix_as_code(tmp_path):
    pytest.importorskip("cmarkgfm")
    proc = subprocess.run([EXE, "check", str(UPGRADE), "--markdown", "-"], capture_output=True, text=True,
                          env=_env(tmp_path), cwd=tmp_path, timeout=120)
    assert proc.returncode == 1
    html = personas.gfm(proc.stdout)
    assert "<table>" in html and "|---" not in html  # the tables are tables, not pipes
    codes = re.findall(r"<pre[^>]*><code>(.*?)</code></pre>", html, re.S)
    assert any("sudo reboot" in c for c in codes), codes
    assert "ip-10-0-1-23" not in html  # the host name is redacted in what is pasted in public


@pytest.mark.skipif(not personas.chromium(), reason="headless Chromium is not installed (Debian package 'chromium')")
@pytest.mark.parametrize("width", [1280, 390])
def test_the_html_page_tells_fail_from_warn_and_fits_the_width(tmp_path, width):
    expect = tmp_path / "expect.toml"
    expect.write_text("gpu_count = 7\n")  # the g5 has one GPU: a failure beside its warning
    page = tmp_path / "r.html"
    proc = subprocess.run([EXE, "check", str(G5), "--expect", str(expect), "--html", str(page)],
                          capture_output=True, text=True, env=_env(tmp_path), cwd=tmp_path, timeout=120)
    assert proc.returncode == 1, proc.stderr
    measured = personas.browser_measure(page.read_text(encoding="utf-8"),
                                        {"fail": "article.finding.fail .badge", "warn": "article.finding.warn .badge",
                                         "cards": "article.finding"}, width, tmp_path)
    fail, warn = measured["marks"]["fail"], measured["marks"]["warn"]
    assert fail and warn
    # told apart by colour and by word (and icon), not by colour alone
    assert fail[0]["background"] != warn[0]["background"] or fail[0]["color"] != warn[0]["color"]
    assert "fail" in fail[0]["text"].lower() and "warn" in warn[0]["text"].lower()
    assert fail[0]["text"].split()[0] != warn[0]["text"].split()[0]  # the icons differ
    cards = measured["marks"]["cards"]
    assert cards[0]["border"] != cards[-1]["border"]  # the failing card's edge is not the warning's
    # nothing wider than the screen: no sideways scrolling on a phone
    assert measured["scrollWidth"] <= measured["innerWidth"], measured


# -- the cluster operator -------------------------------------------------------------------------------------------

def test_fleet_names_nodes_of_one_image_by_their_files(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    for name, snap in (("a", UPGRADE), ("b", UPGRADE), ("c", UPGRADE), ("d", UPGRADE)):
        subprocess.run([EXE, "check", str(snap), "--json", str(reports / f"{name}.json")], capture_output=True,
                       env=_env(tmp_path), cwd=tmp_path, timeout=120)
    proc = subprocess.run([EXE, "fleet", str(reports)], capture_output=True, text=True, env=_env(tmp_path),
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "#1" not in proc.stdout and "None" not in proc.stdout and "(1 nodes)" not in proc.stdout
    assert "The fabric manager is not running" in proc.stdout, proc.stdout
    assert re.search(r"\ba\b.*\bb\b.*\bc\b.*\bd\b", proc.stdout, re.S), proc.stdout


def test_the_login_status_line_is_the_headline_in_100_characters(tmp_path):
    status = tmp_path / "status"
    subprocess.run([EXE, "check", str(UPGRADE), "--status-line", str(status)], capture_output=True,
                   env=_env(tmp_path), cwd=tmp_path, timeout=120)
    line = status.read_text().rstrip("\n")
    assert "\n" not in line and len(line) <= 100, line
    assert "dl-doctor" in line and ("Kernel module" in line or "fabric manager" in line), line
    assert line.isascii()
