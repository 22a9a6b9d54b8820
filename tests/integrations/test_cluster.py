"""dl-doctor in the engines clusters run: Slurm (a real slurmctld + slurmd + munge from the Debian packages, started
by tests/slurm/cluster.sh), LBNL NHC (its check-function contract: die/log, with NHC's functions stood in by bash),
and node-problem-detector's custom plugin contract (exit 0/1/2, at most 80 characters starting with the check ID)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import trees
from dl_doctor.integrations import cluster

DOCTOR = Path(sys.executable).parent / "dl-doctor"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bad_and_good(tmp_path_factory):
    from conftest import build_tree

    bad = build_tree(tmp_path_factory.mktemp("bad"), trees.rhel8_gpu_no_driver())
    good = build_tree(tmp_path_factory.mktemp("good"), trees.healthy_host())
    return bad, good


@pytest.fixture
def dld(run_cli):
    """The shared runner, leaving dl-doctor's default output directory alone: an engine mode writes no report."""
    def run(*args, env=None):
        return run_cli(*args, env=env, timeout=300, outdir=False)
    return run


def test_drain_reason_starts_with_the_prefix_and_the_check_id():
    f = {"id": "DLD-GPU-006", "status": "fail", "headline": 'Uncorrectable ECC "errors"\n$(reboot)',
         "remediation": {"action": "reset-gpu", "drain": True}}
    reason = cluster.drain_reason(f)
    assert reason.startswith("dld:DLD-GPU-006 ") and reason.index("DLD-GPU-006") + 11 <= 20
    assert '"' not in reason and "$" not in reason and "\n" not in reason
    assert cluster.parse_node("NodeName=n1 Arch=x86_64 State=IDLE+DRAIN Weight=1 Reason=dld:DLD-GPU-006 ECC "
                              "[root@2026-12-01T00:31:17]") == ("IDLE+DRAIN", "dld:DLD-GPU-006 ECC")
    assert cluster.parse_node("NodeName=n1 State=IDLE Weight=1") == ("IDLE", None)


HEADLINE = "The fabric manager is not running at the driver's version, so NVLink and NVSwitch stay down"
LONG = {"id": "DLD-GPU-004", "status": "fail", "headline": HEADLINE, "title": "The fabric manager runs",
        "message": "nvidia-fabricmanager.service is inactive (dead) since boot; " + "the raw message " * 20,
        "remediation": {"action": "restart-service", "drain": True}}


def _cut_at_a_word(line: str, whole: str) -> None:
    """``line`` is ``whole`` cut at a word boundary with an ASCII '...' (never mid-word, never a Unicode ellipsis)."""
    assert line.endswith("...") and "\u2026" not in line
    kept = line[:-3]
    assert whole.startswith(kept) and whole[len(kept)] in " ,", (line, whole)


def test_npd_line_is_the_headline_cut_at_a_word_within_80_characters():
    line = cluster.npd_line({"findings": [LONG]}, failing=True)
    assert len(line) <= 80 and line.startswith("DLD-GPU-004 The fabric manager is not running at the driver's")
    _cut_at_a_word(line, f"DLD-GPU-004 {HEADLINE}")
    assert "raw message" not in line and "inactive" not in line  # the headline, not the long message


def test_nhc_lines_and_the_drain_reason_keep_apostrophes_from_the_headline():
    warn = {"id": "DLD-DRV-004", "status": "warn", "headline": "nouveau is loaded: it can't drive CUDA",
            "message": "the long raw message"}
    assert cluster.nhc_lines({"findings": [LONG, warn]}) == [
        f"FAIL DLD-GPU-004 {HEADLINE}", "WARN DLD-DRV-004 nouveau is loaded: it can't drive CUDA"]
    reason = cluster.drain_reason(LONG)
    assert reason == f"dld:DLD-GPU-004 {HEADLINE}" and len(reason) <= cluster.REASON_MAX
    longer = {**LONG, "headline": HEADLINE + " and every job that needs more than one GPU of this node fails"}
    cut = cluster.drain_reason(longer)
    assert len(cut) <= cluster.REASON_MAX and "driver's version" in cut
    _cut_at_a_word(cut, f"dld:DLD-GPU-004 {longer['headline']}")


class _FakeSlurm:
    """Host.run for scontrol: a node in IDLE, and every command line it was given (an argument vector: no shell)."""

    def __init__(self):
        self.calls = []

    def run(self, argv, timeout=None):
        from types import SimpleNamespace

        self.calls.append(list(argv))
        out = "NodeName=n1 State=IDLE Weight=1" if argv[1] == "show" else ""
        return SimpleNamespace(returncode=0, stdout=out, stderr="")


def test_slurm_is_given_the_reason_with_its_apostrophe_as_one_argument():
    host = _FakeSlurm()
    out = cluster.slurm(host, {"findings": [LONG]}, "n1", act=True)
    assert out["action"] == "drained"
    assert host.calls[-1] == ["scontrol", "update", "NodeName=n1", "State=DRAIN",
                              f"Reason=dld:DLD-GPU-004 {HEADLINE}"]


def test_drain_without_slurm_says_so_in_one_line(dld, bad_and_good, tmp_path):
    import shutil

    # run as root, dl-doctor looks for tools in the system's own directories too, not only on PATH
    if shutil.which("scontrol", path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"):
        pytest.skip("Slurm's scontrol is installed here (the real-Slurm tests cover --drain)")
    _, good = bad_and_good
    empty = tmp_path / "bin"
    empty.mkdir()  # nothing on PATH: no scontrol
    r = dld("run", "--sysroot", str(good), "--engine", "slurm", "--drain", "--profile", "fast",
            env={"PATH": str(empty)})
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.splitlines() == ["dl-doctor: error: --drain needs Slurm's scontrol, which is not on PATH"]
    assert "Errno" not in r.stderr and "Traceback" not in r.stderr


def test_npd_contract_exit_codes_and_an_80_character_line(dld, bad_and_good):
    bad, good = bad_and_good
    r = dld("run", "--sysroot", str(bad), "--engine", "npd", "--profile", "fast")
    assert r.returncode == 1, r.stderr
    [line] = r.stdout.splitlines()
    assert len(line) <= 80 and line.startswith("DLD-") and line.split()[0] in ("DLD-DRV-001", "DLD-GPU-001")
    r = dld("run", "--sysroot", str(good), "--engine", "npd")
    assert r.returncode == 0 and len(r.stdout.strip()) <= 80 and r.stdout.startswith("dl-doctor: OK")
    r = dld("check", str(good / "nonexistent.json"), "--engine", "npd")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    r = dld("run", "--sysroot", str(good), "--engine", "npd", "--json", "-")
    assert r.returncode == 2 and "owns stdout" in r.stderr


def test_an_engine_mode_writes_no_report_unless_asked(run_cli, bad_and_good, tmp_path):
    bad, _ = bad_and_good
    r = run_cli("run", "--sysroot", str(bad), "--engine", "nhc", timeout=300, cwd=tmp_path, outdir=False)
    assert r.returncode == 1 and r.stdout.startswith("FAIL DLD-")
    assert not (tmp_path / "dl-doctor-reports").exists()  # a health check runs every few minutes: no pile of files
    r = run_cli("run", "--sysroot", str(bad), "--engine", "nhc", "--json", "r.json", timeout=300, cwd=tmp_path,
                outdir=False)
    assert json.loads((tmp_path / "r.json").read_text())["findings"]


def test_the_shipped_npd_monitor_config_matches_the_contract():
    doc = json.loads((ROOT / "contrib/npd/dl-doctor-monitor.json").read_text())
    assert doc["plugin"] == "custom" and doc["pluginConfig"]["max_output_length"] == 80
    [rule] = doc["rules"]
    assert rule["type"] == "permanent" and rule["condition"] == doc["conditions"][0]["type"]
    assert rule["args"][:3] == ["run", "--engine", "npd"]


def _nhc(tmp_path, tree):
    """NHC's contract: the check function calls die (fail) or log (warn); NHC's own functions stood in."""
    script = f"""
        die() {{ echo "DIE $1 $2" >> {tmp_path}/nhc.out; return 1; }}
        log() {{ echo "LOG $*" >> {tmp_path}/nhc.out; }}
        source {ROOT}/contrib/nhc/dl_doctor.nhc
        DL_DOCTOR={DOCTOR} check_dl_doctor --sysroot {tree}
        echo "RC $?" >> {tmp_path}/nhc.out
    """
    out = tmp_path / "nhc.out"
    out.unlink(missing_ok=True)
    subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=300)
    return out.read_text().splitlines()


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_nhc_check_dies_on_the_first_failure_and_logs_warnings(bad_and_good, tmp_path):
    bad, good = bad_and_good
    lines = _nhc(tmp_path, bad)
    dies = [l for l in lines if l.startswith("DIE ")]
    assert len(dies) == 1 and dies[0].startswith("DIE 1 check_dl_doctor: DLD-")
    assert any(l.startswith("LOG check_dl_doctor: DLD-DRV-004") for l in lines)  # nouveau: a warning, logged
    assert lines[-1] == "RC 1"
    lines = _nhc(tmp_path, good)
    assert not any(l.startswith("DIE") for l in lines) and lines[-1] == "RC 0"


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_nhc_passes_the_headline_on_with_its_apostrophe_and_nothing_evaluated(tmp_path):
    """The .nhc function hands dl-doctor's line to NHC's die quoted: an apostrophe arrives as it is, and nothing in
    the line is run by the shell (what dl-doctor prints has no $ or backquote anyway: nhc_lines drops them)."""
    line = cluster.nhc_lines({"findings": [{**LONG, "headline": "The driver's version `id` $(touch pwned) 'x'"}]})[0]
    assert line == "FAIL DLD-GPU-004 The driver's version id (touch pwned) 'x'"
    warn = "WARN DLD-DRV-004 it can't drive CUDA $(touch pwned) `touch pwned`"  # were a line ever to carry them
    fake = tmp_path / "dl-doctor"
    fake.write_text("#!/bin/sh\ncat <<'EOF'\n" + line + "\n" + warn + "\nEOF\nexit 1\n")
    fake.chmod(0o755)
    script = f"""
        die() {{ echo "DIE $1 $2" >> {tmp_path}/nhc.out; return 1; }}
        log() {{ echo "LOG $*" >> {tmp_path}/nhc.out; }}
        source {ROOT}/contrib/nhc/dl_doctor.nhc
        DL_DOCTOR={fake} check_dl_doctor
    """
    subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    lines = (tmp_path / "nhc.out").read_text().splitlines()
    assert lines == [f"LOG check_dl_doctor: {warn[len('WARN '):]}", f"DIE 1 check_dl_doctor: {line[len('FAIL '):]}"]
    assert "driver's version" in lines[1] and not (tmp_path / "pwned").exists()


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    if os.geteuid() != 0 or not all(shutil.which(b) for b in ("slurmctld", "slurmd", "munged", "scontrol", "sinfo")):
        pytest.skip("needs root and the Debian packages slurmctld slurmd slurm-client munge")
    d = tmp_path_factory.mktemp("slurm")
    script = ROOT / "tests/slurm/cluster.sh"
    r = subprocess.run(["bash", str(script), "start", str(d)], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        subprocess.run(["bash", str(script), "stop", str(d)], capture_output=True, timeout=60)
        pytest.skip(f"the test cluster did not start: {r.stderr.strip()[-300:]}")
    values = dict(line.split("=", 1) for line in r.stdout.split() if "=" in line)
    yield values
    subprocess.run(["bash", str(script), "stop", str(d)], capture_output=True, timeout=60)


def _sinfo_reason(env):
    r = subprocess.run(["sinfo", "-R", "-h", "-o", "%E"], capture_output=True, text=True, timeout=30, env=env)
    return r.stdout.strip()


def test_slurm_drains_with_its_reason_and_resumes_only_its_own_drain(dld, slurm_cluster, bad_and_good):
    bad, good = bad_and_good
    slurm = {"SLURM_CONF": slurm_cluster["SLURM_CONF"], "SLURMD_NODENAME": slurm_cluster["NODE"]}
    env = {**os.environ, **slurm}  # for sinfo and scontrol; dl-doctor gets only the two
    r = dld("run", "--sysroot", str(bad), "--engine", "slurm", "--drain", "--profile", "fast", env=slurm)
    assert r.returncode == 1 and "slurm: drained (dld:DLD-" in r.stdout, r.stdout + r.stderr
    reason = _sinfo_reason(env)
    assert reason.startswith("dld:DLD-") and reason[4:15] in ("DLD-DRV-001", "DLD-GPU-001")  # sinfo -R shows it
    r = dld("run", "--sysroot", str(good), "--engine", "slurm", "--drain", env=slurm)
    assert r.returncode == 0 and "slurm: resumed" in r.stdout, r.stdout + r.stderr
    assert _sinfo_reason(env) == ""
    # a node an operator drained is left alone, whatever dl-doctor finds
    subprocess.run(["scontrol", "update", f"NodeName={slurm_cluster['NODE']}", "State=DRAIN",
                    "Reason=disk swap on Tuesday"], check=True, env=env, timeout=30)
    try:
        r = dld("run", "--sysroot", str(good), "--engine", "slurm", "--drain", env=slurm)
        assert "slurm: left-alone" in r.stdout and _sinfo_reason(env) == "disk swap on Tuesday"
        r = dld("run", "--sysroot", str(bad), "--engine", "slurm", "--drain", env=slurm)
        assert "slurm: left-alone" in r.stdout and _sinfo_reason(env) == "disk swap on Tuesday"
    finally:
        subprocess.run(["scontrol", "update", f"NodeName={slurm_cluster['NODE']}", "State=RESUME"], env=env,
                       timeout=30)
    # without --drain it only says what it would do
    r = dld("run", "--sysroot", str(bad), "--engine", "slurm", env=slurm)
    assert "slurm: would-drain (dld:DLD-" in r.stdout and _sinfo_reason(env) == ""


def test_host_root_reads_the_mounted_root_and_the_running_kernel(dld, bad_and_good):
    """A DaemonSet's view: the host's files through a mount, the running kernel's /proc, /sys and /dev as they are.
    The tree's own /proc and /sys (a GPU on its PCI bus, its kernel) are not read; this machine's are."""
    bad, _ = bad_and_good
    r = dld("run", "--host-root", str(bad), "--json", "-", "--fail-on", "never", "--no-env-scan")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    facts = report["facts"]
    assert report["run"]["mode"] == "host-root" and report["run"]["sysroot"] == os.path.realpath(bad)
    assert facts["os"]["id"] == "rhel"                                  # from the mounted root
    assert facts["kernel"]["release"] == os.uname().release             # the running kernel
    assert facts["gpu_pci"]["gpu_count"] == sum(                        # this machine's PCI bus, not the tree's
        1 for d in os.listdir("/sys/bus/pci/devices")
        if open(f"/sys/bus/pci/devices/{d}/vendor").read().strip() == "0x10de"
        and open(f"/sys/bus/pci/devices/{d}/class").read().startswith("0x03"))
    assert "python_processes" in facts                                  # /proc is the running system's
    r = dld("run", "--host-root", str(bad), "--sysroot", str(bad))
    assert r.returncode == 2 and "exclude each other" in r.stderr
