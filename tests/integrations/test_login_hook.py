"""The login status: the snippet in a throw-away HOME under bash as a login shell, the status line, install/remove."""

import json
import os
import shutil
import subprocess

import pytest

from conftest import FIXTURES
from dl_doctor.integrations.login_hook import MARKER, profile_snippet
from dl_doctor.reports.status import status_line

BASH = shutil.which("bash")
needs_bash = pytest.mark.skipif(BASH is None, reason="bash is not installed")
LINE = "dl-doctor: 2 fail; new since 2026-11-28: Kernel module and user-space driver are... Run dl-doctor"


def _login(tmp_path, interactive=True, env=None, status=LINE, path=""):
    """bash as a login shell in a throw-away HOME whose ~/.bash_profile sources the snippet."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    status_file = tmp_path / "status"
    if status is not None:
        status_file.write_text(status + "\n")
    snippet = tmp_path / "dl-doctor.sh"
    snippet.write_text(profile_snippet(str(status_file)))
    # PATH is empty while the snippet runs: any program it started instead of a shell built-in would fail
    (home / ".bash_profile").write_text(f'PATH="{path}"; hash -r\n. "{snippet}"\n')
    argv = [BASH, "--login"] + (["-i"] if interactive else []) + ["-c", "exit 0"]
    base = {"HOME": str(home), "TERM": "dumb", "PS1": ""}
    proc = subprocess.run(argv, capture_output=True, text=True, env={**base, **(env or {})}, timeout=30,
                          stdin=subprocess.DEVNULL, cwd=str(home))
    return proc


@needs_bash
def test_interactive_login_prints_exactly_the_cached_line_with_builtins_only(tmp_path):
    proc = _login(tmp_path)
    assert proc.returncode == 0
    assert proc.stdout.splitlines() == [LINE]
    assert "command not found" not in proc.stderr and "No such file" not in proc.stderr, proc.stderr


@needs_bash
@pytest.mark.parametrize("case", ["non-interactive", "opted out", "hushlogin", "no status yet"])
def test_login_stays_silent(tmp_path, case):
    kwargs = {"non-interactive": {"interactive": False}, "opted out": {"env": {"DL_DOCTOR_LOGIN": "0"}},
              "hushlogin": {}, "no status yet": {"status": None}}[case]
    if case == "hushlogin":
        (tmp_path / "home").mkdir()
        (tmp_path / "home" / ".hushlogin").write_text("")
    proc = _login(tmp_path, **kwargs)
    assert proc.returncode == 0
    assert proc.stdout == ""
    assert "dl-doctor" not in proc.stderr and "No such file" not in proc.stderr, proc.stderr


@needs_bash
def test_snippet_is_valid_posix_sh_too(tmp_path):
    sh = shutil.which("dash") or shutil.which("sh")
    status_file = tmp_path / "status"
    status_file.write_text(LINE + "\n")
    snippet = tmp_path / "s.sh"
    snippet.write_text(profile_snippet(str(status_file)))
    proc = subprocess.run([sh, "-i", "-c", f'. "{snippet}"'], capture_output=True, text=True,
                          env={"HOME": str(tmp_path), "PATH": ""}, stdin=subprocess.DEVNULL, timeout=30)
    assert proc.stdout.splitlines() == [LINE], proc.stderr


def _report(status_counts, findings):
    return {"run": {"started_at": "2026-11-29T16:15:00Z"}, "summary": status_counts, "findings": findings}


XID = ("The GPU fell off the bus (Xid 79) and every CUDA call on it fails until the node is reset, so its jobs die "
       "with cudaErrorLaunchFailure")


def test_status_line_is_the_headline_in_100_characters_cut_at_a_word():
    findings = [{"id": "DLD-NET-001", "status": "warn", "headline": "No EFA", "message": "no EFA"},
                {"id": "DLD-GPU-008", "status": "fail", "headline": XID,
                 "message": "Xid 79:\nGPU 0000:53:00.0 fell off the bus " + "x" * 400}]
    line = status_line(_report({"fail": 1, "warn": 1, "pass": 30}, findings))
    assert "\n" not in line and len(line) <= 100 and line.isascii(), line
    assert line.startswith("dl-doctor: 1 fail, 1 warn: The GPU fell off the bus (Xid 79) and every CUDA call")
    kept = line[len("dl-doctor: 1 fail, 1 warn: "):line.index("... Run dl-doctor")]
    assert XID.startswith(kept) and XID[len(kept)] == " "  # cut between words, with ASCII dots
    # a command every user can run, not the cached report (private to root); not the long raw message
    assert line.endswith("... Run dl-doctor") and "xxx" not in line and "0000:53" not in line
    short_one = status_line(_report({"warn": 1}, findings[:1]))
    assert short_one == "dl-doctor: 1 warn: No EFA. Run dl-doctor"
    ok = status_line(_report({"pass": 30, "skip": 5}, [{"id": "DLD-X-1", "status": "pass", "message": ""}]))
    assert ok == "dl-doctor: OK (30 passed, 5 skipped). Run dl-doctor"


def test_status_line_says_what_is_new_since_the_previous_run_in_100_characters():
    findings = [{"id": "DLD-GPU-008", "status": "fail", "headline": XID, "message": "m"}]
    line = status_line(_report({"fail": 1}, findings), new_since="2026-11-28")
    assert len(line) <= 100 and line.startswith("dl-doctor: 1 fail; new since 2026-11-28: The GPU fell off the bus")
    assert line.endswith("... Run dl-doctor")
    ok = status_line(_report({"pass": 30, "skip": 5}, []), new_since="2026-11-28")
    assert ok == "dl-doctor: OK (30 passed, 5 skipped; new since 2026-11-28). Run dl-doctor"


def test_status_line_escapes_and_stays_ascii():
    findings = [{"id": "DLD-ENV-001", "status": "warn", "headline": "caf\u00e9 \x1b[31m\u202eenv \u2014 it\u2019s odd",
                 "message": "m"}]
    line = status_line(_report({"warn": 1}, findings))
    assert line == "dl-doctor: 1 warn: caf\\xe9 \\x1b[31m\\u202eenv - it's odd. Run dl-doctor"


def test_status_line_only_counts_security_findings_for_everyone_who_logs_in():
    findings = [{"id": "DLD-SEC-002", "status": "fail", "message": "/home/alice/.jupyter: listens on 0.0.0.0 with an "
                                                                     "empty token"},
                {"id": "DLD-SEC-001", "status": "warn", "message": "PasswordAuthentication yes"},
                {"id": "DLD-MEM-001", "status": "warn", "headline": "/dev/shm is too small", "message": "64 MiB"}]
    line = status_line(_report({"fail": 1, "warn": 2, "pass": 30}, findings))
    assert "jupyter" not in line and "0.0.0.0" not in line and "Password" not in line
    assert line == "dl-doctor: 1 warn, 2 security: /dev/shm is too small. Run dl-doctor (sudo for security)"
    only = status_line(_report({"fail": 1}, findings[:1]))
    assert only == "dl-doctor: 1 security finding. Run sudo dl-doctor run --only security"


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_run_writes_the_status_line(run_cli, tmp_path):
    status = tmp_path / "status"
    html = tmp_path / "last.html"
    result = run_cli("check", str(FIXTURES / "snapshots" / "p4d_driver_upgrade_no_reboot.json"), "-q",
                     "--status-line", str(status), "--html", str(html))
    assert result.returncode == 1
    text = status.read_text()
    assert text.count("\n") == 1
    # the EFA-less p4d no longer warns; the worst finding's headline, not its message
    assert text == "dl-doctor: 2 fail: Kernel module and user-space driver are different versions. Run dl-doctor\n"
    # no environment in it: readable by every user who logs in (less the umask); the report stays private
    assert status.stat().st_mode & 0o777 == 0o644 & ~_umask()
    assert html.stat().st_mode & 0o777 == 0o600 & ~_umask()


def test_the_timer_run_says_new_since_only_when_the_previous_run_differs(run_cli, tmp_path):
    """What the login timer runs (--output-dir --keep-reports --status-line), three ways: a first run (nothing to
    compare with), the same machine again (nothing new), and after a run that had neither these problems nor this
    kernel (a planted earlier report of the same host): "new since" that run's UTC date."""
    import re

    import trees
    from conftest import build_tree

    root = build_tree(tmp_path / "tree", trees.rhel8_gpu_no_driver())
    out, status = tmp_path / "reports", tmp_path / "status"

    def timer_run():
        r = run_cli("run", "--sysroot", root, "--quiet", "--no-color", "--fail-on", "never", "--profile", "fast",
                    "--output-dir", out, "--keep-reports", "30", "--status-line", status)
        assert r.returncode == 0, r.stderr
        return status.read_text()

    first = timer_run()
    assert first == "dl-doctor: 2 fail, 1 warn: No NVIDIA kernel module for the running kernel. Run dl-doctor\n"
    assert timer_run() == first  # the same machine twice: nothing is new

    def plant(edit):
        latest = sorted(out.glob("*.json"))[-1]
        host = re.match(r"^(dl-doctor-.+)-\d{8}T\d{6}Z(?:-\d+)?\.json$", latest.name).group(1)
        doc = json.loads(latest.read_text())
        doc["run"]["started_at"] = "2026-11-28T23:30:00+00:00"
        edit(doc)
        for p in out.glob("*.json"):
            p.unlink()
        (out / f"{host}-20261128T233000Z.json").write_text(json.dumps(doc))

    def healthy(doc):
        for f in doc["findings"]:
            if f["status"] in ("warn", "fail", "error"):
                f["status"] = "pass"

    plant(healthy)
    third = timer_run()
    assert third == "dl-doctor: 2 fail, 1 warn; new since 2026-11-28: No NVIDIA kernel module for the... Run dl-doctor\n"
    assert len(third.rstrip("\n")) <= 100
    assert "new since" not in timer_run()  # and the next run compares with that one: nothing new again

    def other_kernel(doc):
        doc["facts"]["kernel"]["release"] = "4.18.0-477.10.1.el8_8.x86_64"

    plant(other_kernel)  # the same problems, another kernel: the stack drifted
    assert "; new since 2026-11-28: " in timer_run()


def test_install_and_uninstall_into_an_image_tree(run_cli, tmp_path):
    root = tmp_path / "image"
    (root / "usr/local/bin").mkdir(parents=True)
    (root / "usr/local/bin/dl-doctor").write_text("#!/bin/sh\n")
    result = run_cli("install-login-hook", "--root", str(root), "--boot", "--exe", "/usr/local/bin/dl-doctor",
                     "--prometheus", "/var/lib/node_exporter/textfile/dl_doctor.prom")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    snippet = (root / "etc/profile.d/dl-doctor.sh").read_text()
    assert MARKER in snippet and "/var/lib/dl-doctor/status" in snippet
    service = (root / "etc/systemd/system/dl-doctor.service").read_text()
    exec_line = next(l for l in service.splitlines() if l.startswith("ExecStart="))
    assert exec_line.startswith("ExecStart=/usr/local/bin/dl-doctor run --quiet --no-color --fail-on never ")
    assert "--status-line /var/lib/dl-doctor/status" in exec_line
    assert "--prometheus /var/lib/node_exporter/textfile/dl_doctor.prom" in exec_line
    timer = (root / "etc/systemd/system/dl-doctor.timer").read_text()
    assert "OnBootSec=2min" in timer and "OnUnitActiveSec" not in timer  # --boot: once per boot
    link = root / "etc/systemd/system/timers.target.wants/dl-doctor.timer"
    assert os.readlink(link) == "../dl-doctor.timer"

    # reinstalling (daily this time) replaces our own files
    assert run_cli("install-login-hook", "--root", str(root), "--exe", "/usr/local/bin/dl-doctor").returncode == 0
    assert "OnUnitActiveSec=1d" in (root / "etc/systemd/system/dl-doctor.timer").read_text()

    result = run_cli("uninstall-login-hook", "--root", str(root))
    assert result.returncode == 0
    assert sorted(result.stdout.split()) == sorted(
        "removed /etc/systemd/system/timers.target.wants/dl-doctor.timer removed /etc/profile.d/dl-doctor.sh "
        "removed /etc/systemd/system/dl-doctor.service removed /etc/systemd/system/dl-doctor.timer".split())
    assert not (root / "etc/profile.d/dl-doctor.sh").exists() and not os.path.lexists(link)
    assert run_cli("uninstall-login-hook", "--root", str(root)).stdout.strip() == "nothing to remove"


def test_install_never_overwrites_a_file_it_did_not_write(run_cli, tmp_path):
    root = tmp_path / "image"
    (root / "etc/profile.d").mkdir(parents=True)
    (root / "etc/profile.d/dl-doctor.sh").write_text("echo mine\n")
    result = run_cli("install-login-hook", "--root", str(root), "--no-systemd")
    assert result.returncode == 2
    assert result.stderr.strip() == ("dl-doctor: error: /etc/profile.d/dl-doctor.sh exists and was not written by "
                                     "dl-doctor; not overwriting it")
    assert (root / "etc/profile.d/dl-doctor.sh").read_text() == "echo mine\n"
    assert run_cli("uninstall-login-hook", "--root", str(root)).stdout.strip() == "nothing to remove"
    assert (root / "etc/profile.d/dl-doctor.sh").exists()


def test_install_warns_when_the_service_would_run_a_missing_program(run_cli, tmp_path):
    root = tmp_path / "image"
    root.mkdir()
    result = run_cli("install-login-hook", "--root", str(root), "--exe", "/opt/nothing/dl-doctor")
    assert result.returncode == 0
    assert "warning: /opt/nothing/dl-doctor does not exist under" in result.stderr
