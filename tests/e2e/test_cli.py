"""The command line, end to end through the installed `dl-doctor` entry point."""

import json
import sys
import textwrap
from pathlib import Path

import pytest

import trees

STATUSES = ("pass", "warn", "fail", "skip", "error")


def _statuses(report):
    return {f["id"]: f["status"] for f in report["findings"]}


def _one_line_error(result):
    lines = [l for l in result.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("dl-doctor: error: ")
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    return lines[0]


# -- the live run -----------------------------------------------------------------

def test_live_run_writes_both_reports_and_prints_a_summary(run_cli):
    r = run_cli()
    assert r.returncode in (0, 1), r.stderr
    report = r.json_report()
    assert report["run"]["mode"] == "live"
    assert len(r.reports("html")) == 1
    expected_code = 1 if report["summary"]["fail"] or report["summary"]["error"] else 0
    assert r.returncode == expected_code
    assert "\nChecks: " in r.stdout and "Report: " in r.stdout
    problems = [f for f in report["findings"] if f["status"] in ("fail", "error", "warn")]
    for f in problems:  # each problem has its block; passes and skips are counted, not listed
        assert f["id"] in r.stdout
    last = r.stdout.splitlines()[-1]
    assert last.startswith(f"{len(problems)} problem") if problems else last.startswith(("All is well", "No problem"))
    assert not any(line.startswith(("PASS ", "SKIP ")) for line in r.stdout.splitlines())
    verbose = run_cli("run", "-v")
    for f in report["findings"]:  # -v lists every pass and skip
        assert f["id"] in verbose.stdout
    name = r.reports("json")[0].name
    assert name.startswith("dl-doctor-") and name.endswith("Z.json")
    assert "\033[" not in r.stdout  # not a TTY: no colour
    assert report["probe_errors"] == [], report["probe_errors"]


def test_bare_command_is_run(run_cli):
    a = run_cli("run", "--only", "DLD-SYS-001", "--json", "-")
    b = run_cli("--only", "DLD-SYS-001", "--json", "-")
    assert json.loads(a.stdout)["findings"] == json.loads(b.stdout)["findings"]


def test_json_dash_prints_the_json_report_alone(run_cli):
    r = run_cli("run", "--json", "-")
    report = json.loads(r.stdout)
    assert report["schema_version"] == "1" and set(report["summary"]) == set(STATUSES)
    assert r.reports("json") == [] and len(r.reports("html")) == 1


def test_explicit_paths(run_cli, tmp_path):
    j, h = tmp_path / "x" / "r.json", tmp_path / "y" / "r.html"
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    r = run_cli("run", "--json", str(j), "--html", str(h), "--fail-on", "never")
    assert r.returncode == 0
    assert json.loads(j.read_text())["tool"]["name"] == "dl-doctor"
    assert h.read_text().startswith("<!DOCTYPE html>")
    assert f"Report: {j}" in r.stdout


def test_quiet_prints_only_problems_and_the_last_line(run_cli):
    r = run_cli("run", "-q", "--only", "DLD-SYS-001")
    assert r.stdout.count("\n") == 1 and r.stdout.startswith(("All is well", "No problem found")), r.stdout
    assert "PASS" not in r.stdout and "Report:" not in r.stdout and "Checks:" not in r.stdout


# -- sysroot ------------------------------------------------------------------------

def test_sysroot_empty_dir_is_one_line_and_exit_2(run_cli, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    for command in (["run"], ["collect", "-o", str(tmp_path / "f.json")], ["bundle", "-o", str(tmp_path / "b.tgz")],
                    ["why", "CUDA error: out of memory"]):
        r = run_cli(*command, "--sysroot", str(empty), "--fail-on", "warn") if command == ["run"] else \
            run_cli(*command, "--sysroot", str(empty))
        assert r.returncode == 2, (command, r.stdout + r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "the directory is empty" in lines[0] and "Traceback" not in r.stderr, lines
    boot = tmp_path / "boot"
    (boot / "grub2").mkdir(parents=True)
    (boot / "vmlinuz-5.14.0-362.el9.x86_64").write_bytes(b"")
    r = run_cli("run", "--sysroot", str(boot), "--fail-on", "warn")
    assert r.returncode == 2 and "/boot partition" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_sysroot_of_a_bare_root_filesystem_produces_reports_without_tracebacks(run_cli, tmp_path):
    empty = tmp_path / "empty"
    (empty / "usr").mkdir(parents=True)
    r = run_cli("run", "--sysroot", str(empty))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    report = r.json_report()
    assert report["run"]["mode"] == "sysroot" and report["probe_errors"] == []
    st = _statuses(report)
    assert st["DLD-SYS-001"] == st["DLD-MEM-001"] == st["DLD-GPU-001"] == "skip"
    assert "mounts" in report["unavailable"]


def test_sysroot_docker_container_with_64m_shm_fails(run_cli, tree):
    root = tree(trees.g4dn_docker_64m())
    r = run_cli("run", "--sysroot", str(root))
    assert r.returncode == 1
    report = r.json_report()
    st = _statuses(report)
    assert st["DLD-MEM-001"] == "fail" and st["DLD-GPU-001"] == "pass" and st["DLD-SYS-001"] == "pass"
    shm = next(f for f in report["findings"] if f["id"] == "DLD-MEM-001")
    assert "64.0 MiB" in shm["message"] and any("--shm-size=" in c for c in shm["fix"]["commands"])
    assert report["host"]["container"] == "docker" and report["host"]["driver"] == "535.104.05"
    # failures come first in the terminal, with their fix
    out = r.stdout
    # the problem first ("FAIL  /dev/shm is too small for training · DLD-MEM-001"), then its fix, then the counts
    assert out.index("FAIL  /dev/shm is too small for training") < out.index("      fix: ") < out.index("\nChecks: ")
    assert "\nPASS" not in out and out.splitlines()[-1].startswith("1 problem: FAIL DLD-MEM-001")
    # the tree was captured from the running container: the fix is for it, not for this machine
    assert f"# on {report['host']['hostname']}: docker run --gpus all --shm-size=" in out


def test_sysroot_rhel8_gpu_without_driver_fails_with_a_dnf_fix(run_cli, tree):
    r = run_cli("run", "--sysroot", str(tree(trees.rhel8_gpu_no_driver())), "--only", "DLD-GPU-001")
    assert r.returncode == 1
    [finding] = r.json_report()["findings"]
    assert finding["status"] == "fail" and "not loaded" in finding["message"]
    assert any("dnf module install" in c for c in finding["fix"]["commands"])


def test_sysroot_symlink_to_etc_hostname_reads_the_tree(run_cli, tree):
    r = run_cli("run", "--sysroot", str(tree(trees.healthy_host())), "--json", "-")
    report = json.loads(r.stdout)
    assert report["host"]["hostname"] == "tree-host"
    assert report["host"]["hostname"] != Path("/etc/hostname").read_text().strip() if Path("/etc/hostname").exists() else True
    assert r.returncode == 0


def test_fail_on_levels(run_cli, tree):
    root = tree(trees.g4dn_docker_64m())
    assert run_cli("run", "--sysroot", str(root), "--fail-on", "never").returncode == 0
    assert run_cli("run", "--sysroot", str(root), "--only", "DLD-SYS-001", "--fail-on", "warn").returncode == 0
    assert run_cli("run", "--sysroot", str(root), "--fail-on", "warn").returncode == 1


# -- collect, then check -------------------------------------------------------------

@pytest.mark.parametrize("which", ["live", "docker", "rhel-no-driver"])
def test_collect_then_check_gives_the_same_findings_as_run(run_cli, tree, tmp_path, which):
    extra = [] if which == "live" else ["--sysroot", str(tree(
        trees.g4dn_docker_64m() if which == "docker" else trees.rhel8_gpu_no_driver()))]
    facts = tmp_path / "facts.json"
    c = run_cli("collect", "-o", str(facts), *extra)
    assert c.returncode == 0, c.stderr
    snapshot = json.loads(facts.read_text())
    assert snapshot["kind"] == "dl-doctor-facts"
    checked = run_cli("check", str(facts), "--json", "-")
    ran = run_cli("run", *extra, "--json", "-")
    a, b = json.loads(checked.stdout), json.loads(ran.stdout)
    assert a["run"]["mode"] == "facts"

    def stable(findings):
        # disk free space moves between two live runs; everything else must be identical
        moving = ("DLD-DISK-001", "DLD-DISK-002")
        return [{k: v for k, v in f.items() if not (f["id"] in moving and k in ("message", "evidence"))}
                for f in findings]

    assert stable(a["findings"]) == stable(b["findings"])
    assert checked.returncode == ran.returncode
    # a JSON report is accepted by `check` too (a report attached to a ticket)
    report_path = tmp_path / "report.json"
    report_path.write_text(ran.stdout)
    again = run_cli("check", str(report_path), "--json", "-")
    assert stable(json.loads(again.stdout)["findings"]) == stable(b["findings"])


# -- a hanging probe --------------------------------------------------------------------

def _plugin(tmp_path, module_source, probes="", checks=""):
    site = tmp_path / "plugin-site"
    dist = site / "dl_doctor_testplugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: dl-doctor-testplugin\nVersion: 0.1\n")
    eps = ""
    if probes:
        eps += f"[dl_doctor.probes]\n{probes}\n"
    if checks:
        eps += f"[dl_doctor.checks]\n{checks}\n"
    (dist / "entry_points.txt").write_text(eps)
    (site / "dld_testplugin.py").write_text(textwrap.dedent(module_source))
    return {"PYTHONPATH": str(site)}


HANGING = """
    import time
    from dl_doctor.probes import probe
    from dl_doctor.model import check, passed

    @probe("rootonly", "reads a root-only log", root_adds="Xid errors from /var/log/messages (root only)")
    def rootonly(ctx):
        raise PermissionError(13, "Permission denied", "/var/log/messages")

    @probe("stuck", "a probe that hangs like NVML on a wedged GPU")
    def stuck(ctx):
        time.sleep(3600)
        return {}

    @check(id="ACME-001", slug="acme-stuck", title="Needs the stuck probe", tags=("acme",), requires=("stuck",),
           what="A third-party check that needs the stuck probe's facts.",
           why="Shows that a hanging probe costs only its own facts.",
           fix="Nothing to fix; this is a test plugin.")
    def acme(facts):
        return passed("ran")
"""


def test_a_hanging_probe_is_cut_at_its_timeout_and_the_run_completes(run_cli, tmp_path):
    env = _plugin(tmp_path, HANGING, probes="stuck = dld_testplugin", checks="acme = dld_testplugin")
    r = run_cli("run", "--timeout", "1", env=env, timeout=60)
    assert r.returncode in (0, 1), r.stderr
    report = r.json_report()
    assert len(r.reports("html")) == 1
    [err] = [e for e in report["probe_errors"] if e["probe"] == "stuck"]
    assert err["kind"] == "timeout" and "timed out after 1s" in err["error"]
    acme = next(f for f in report["findings"] if f["id"] == "ACME-001")
    assert acme["status"] == "skip" and "probe 'stuck' failed" in acme["message"]
    assert _statuses(report)["DLD-SYS-001"] == "pass"  # the other probes' facts are all there
    assert report["run"]["duration_s"] < 30
    assert "stuck: timed out after 1s" in r.stdout
    # lack of privilege is reported as what root would add, in every format
    assert {"probe": "rootonly", "would_add": "Xid errors from /var/log/messages (root only)"} in \
        report["privilege"]["limited"]
    assert "Running as root would add:" in r.stdout and "Xid errors from /var/log/messages" in r.stdout
    assert "Xid errors from /var/log/messages (root only)" in r.reports("html")[0].read_text()


def test_python_option_inspects_more_interpreters(run_cli, tmp_path):
    missing = str(tmp_path / "nope" / "bin" / "python3")
    r = run_cli("run", "--python", sys.executable, "--python", missing, "--no-env-scan", "--json", "-")
    report = json.loads(r.stdout)
    envs = report["facts"]["python_envs"]["environments"]
    by_python = {e.get("python"): e for e in envs}
    assert by_python[sys.executable]["live"]["version"] == "%d.%d.%d" % sys.version_info[:3]
    assert by_python[missing]["prefix"] == str(tmp_path / "nope") and "live" not in by_python[missing]
    assert report["facts"]["python_envs"]["scan"]["env_scan"] is False
    assert report["run"]["options"]["python"][1] == missing


def test_collect_writes_a_schema_valid_snapshot(run_cli, tmp_path, tree):
    from conftest import validate_report

    out = tmp_path / "facts.json"
    r = run_cli("collect", "-o", str(out), "--sysroot", str(tree(trees.healthy_host())))
    assert r.returncode == 0 and "Facts: " in r.stderr
    snap = json.loads(out.read_text())
    validate_report(snap)
    assert snap["mode"] == "sysroot" and snap["facts"]["system"]["hostname"] == "tree-host"
    stdout = run_cli("collect", "-o", "-")
    validate_report(json.loads(stdout.stdout))


def test_a_broken_plugin_costs_only_itself(run_cli, tmp_path):
    env = _plugin(tmp_path, "raise ImportError('acme is broken')\n", checks="acme = dld_testplugin")
    r = run_cli("run", "--json", "-", env=env)
    report = json.loads(r.stdout)
    assert any("acme is broken" in e for e in report["run"]["load_errors"])
    assert "DLD-SYS-001" in _statuses(report)


# -- list, explain, version ---------------------------------------------------------------

def test_list_and_list_json(run_cli):
    r = run_cli("list")
    assert r.returncode == 0 and "DLD-MEM-001" in r.stdout and "shm-too-small" in r.stdout
    items = json.loads(run_cli("list", "--json", "-").stdout)
    assert {"id", "slug", "title", "tags"} <= set(items[0])
    assert [i["id"] for i in items] == sorted(i["id"] for i in items)


@pytest.mark.parametrize("key", ["DLD-MEM-001", "shm-too-small", "dld-mem-001"])
def test_explain_by_id_or_slug(run_cli, key):
    r = run_cli("explain", key)
    assert r.returncode == 0
    for heading in ("What it checks", "Why it matters", "How to fix"):
        assert heading in r.stdout
    assert r.stdout.startswith("DLD-MEM-001 (shm-too-small)")


def test_version(run_cli):
    from dl_doctor import __version__

    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"dl-doctor {__version__}"


def test_python_m_doctor(run_cli):
    r = run_cli("list", exe=[sys.executable, "-m", "dl_doctor"])
    assert r.returncode == 0 and "DLD-SYS-001" in r.stdout


# -- bad input: one line, exit 2 ------------------------------------------------------------

@pytest.mark.parametrize("args,needle", [
    (["explain", "DLD-NOPE-999"], "unknown check 'DLD-NOPE-999'"),
    (["run", "--only", "shm-too-smal"], "did you mean shm-too-small"),
    (["run", "--fail-on", "sometimes"], "'sometimes' is not one of"),
    (["run", "--timeout", "-1"], "--timeout"),
    (["run", "--sysroot", "/does/not/exist"], "does not exist"),
    (["check", "/does/not/exist.json"], "no such file"),
    (["bogus-command", "x"], "No such"),
    (["collect"], "-o"),
])
def test_bad_input_is_one_line_and_exit_2(run_cli, args, needle):
    r = run_cli(*args)
    assert r.returncode == 2
    assert needle in _one_line_error(r)


def test_check_rejects_files_that_are_not_facts(run_cli, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert "is not a JSON file" in _one_line_error(run_cli("check", str(bad)))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": 1}))
    assert "not a dl-doctor facts file" in _one_line_error(run_cli("check", str(other)))
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({"kind": "dl-doctor-facts", "schema_version": "2", "facts": {}}))
    assert "schema_version '2'" in _one_line_error(run_cli("check", str(newer)))


def test_unwritable_output_is_a_clear_error(run_cli, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = run_cli("run", "--output-dir", str(blocker / "sub"), "--only", "DLD-SYS-001")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(blocker) in lines[0], lines  # one line says why, not three


# -- colour -------------------------------------------------------------------------------

def test_colour_only_on_a_tty_and_never_with_no_color(run_cli):
    """Run under a pseudo-terminal: colour by default, none with NO_COLOR or --no-color."""
    def run(args, env_extra):
        return run_cli("run", "--only", "DLD-SYS-001", *args, env=env_extra, tty=True, timeout=60).stdout

    assert "\033[" in run([], {})
    assert "\033[" not in run([], {"NO_COLOR": "1"})
    assert "\033[" not in run(["--no-color"], {})
