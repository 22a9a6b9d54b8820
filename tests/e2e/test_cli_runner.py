"""The shared CLI runner (conftest's ``run_cli``): a clean environment, a working directory under tmp_path, and every
JSON report the command produced validated against the schemas, wherever it was written."""

import json
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES

SNAPSHOT = FIXTURES / "snapshots" / "g5_ubuntu2204.json"
# a report that parses but breaks the schema: the findings are not a list
BAD_REPORT = {"schema_version": "1", "findings": "none"}


def _fake(tmp_path: Path, body: str) -> list:
    """An entry point that runs ``body`` (Python, with json, os, sys and tarfile imported) instead of dl-doctor."""
    script = tmp_path / "fake_dl_doctor.py"
    script.write_text("import io, json, os, sys, tarfile\n" + body)
    return [sys.executable, str(script)]


def test_the_command_sees_only_a_clean_environment_and_runs_under_tmp_path(run_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("DLD_LEAK_CHECK", "from the developer's shell")
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    exe = _fake(tmp_path, "print(json.dumps({'env': dict(os.environ), 'cwd': os.getcwd()}))\n")
    seen = json.loads(run_cli("list", exe=exe).stdout)
    assert set(seen["env"]) <= {"PATH", "HOME", "LANG", "LC_CTYPE"}, seen["env"]
    assert seen["env"]["LANG"] == "C.UTF-8" and Path(seen["env"]["HOME"]) == tmp_path / "home"
    assert Path(seen["cwd"]) == tmp_path
    # what a test passes is added; None removes a variable
    seen = json.loads(run_cli("list", exe=exe, env={"DLD_X": "1", "LANG": None}).stdout)
    assert seen["env"]["DLD_X"] == "1" and "LANG" not in seen["env"]


def test_run_and_check_write_into_an_output_directory_under_tmp_path(run_cli, tmp_path):
    r = run_cli("check", str(SNAPSHOT), "-q", "--fail-on", "never")
    assert r.returncode == 0, r.stderr
    assert r.outdir.parent == tmp_path and len(r.reports("json")) == 1 and r.reports("html")
    assert [str(p) for p in r.reports("json")] == r.validated


def test_every_report_is_validated_wherever_it_was_written(run_cli, tmp_path):
    facts = tmp_path / "facts.json"
    r = run_cli("check", str(SNAPSHOT), "--json", str(tmp_path / "r.json"), "--html", "/dev/null", "-q",
                "--fail-on", "never")
    assert r.returncode == 0 and str(tmp_path / "r.json") in r.validated, (r.stderr, r.validated)
    r = run_cli("check", str(SNAPSHOT), "--json", "-", "--html", "/dev/null", "--fail-on", "never")
    assert "stdout" in r.validated
    (tmp_path / "usr").mkdir(exist_ok=True)  # a root filesystem
    r = run_cli("collect", "--sysroot", str(tmp_path), "-o", str(facts))
    assert r.returncode == 0 and r.validated == [str(facts)], (r.stderr, r.validated)
    bundle = tmp_path / "b.tar.gz"
    r = run_cli("bundle", "--sysroot", str(tmp_path), "-o", str(bundle), "-q")
    assert r.returncode == 0, r.stderr
    assert sorted(v.rsplit("/", 1)[-1] for v in r.validated) == ["facts.json", "report.json"], r.validated


@pytest.mark.parametrize("where", ["stdout", "--json", "--output-dir", "bundle"])
def test_a_report_that_breaks_the_schema_fails_the_test(run_cli, tmp_path, where):
    bad = json.dumps(BAD_REPORT)
    body = {
        "stdout": f"print({bad!r})\n",
        "--json": f"open(sys.argv[sys.argv.index('--json') + 1], 'w').write({bad!r})\n",
        "--output-dir": (f"d = sys.argv[sys.argv.index('--output-dir') + 1]; os.makedirs(d)\n"
                         f"open(os.path.join(d, 'dl-doctor-h-x.json'), 'w').write({bad!r})\n"),
        "bundle": (f"data = {bad!r}.encode()\nwith tarfile.open(sys.argv[sys.argv.index('-o') + 1], 'w:gz') as t:\n"
                   f"    m = tarfile.TarInfo('b/report.json'); m.size = len(data); t.addfile(m, io.BytesIO(data))\n"),
    }[where]
    args = {"stdout": ["check", "x"], "--json": ["check", "x", "--json", str(tmp_path / "r.json")],
            "--output-dir": ["run"], "bundle": ["bundle", "-o", str(tmp_path / "b.tar.gz")]}[where]
    with pytest.raises(pytest.fail.Exception, match="does not match its schema"):
        run_cli(*args, exe=_fake(tmp_path, body))


def test_a_file_the_command_left_alone_is_not_its_report(run_cli, tmp_path):
    """A planted file at the output path that dl-doctor refused to replace is not validated as if it wrote it."""
    planted = tmp_path / "r.json"
    planted.write_text(json.dumps(BAD_REPORT))
    r = run_cli("check", "x", "--json", str(planted), exe=_fake(tmp_path, "sys.exit(2)\n"))
    assert r.returncode == 2 and r.validated == []


def test_a_pseudo_terminal_and_a_started_process(run_cli, tmp_path):
    exe = _fake(tmp_path, "print(sys.stdout.isatty(), sys.stdin.isatty())\n")
    assert run_cli("list", exe=exe, tty=True).stdout.split() == ["True", "True"]
    proc = run_cli.popen("check", str(SNAPSHOT), "--json", "-", "--html", "/dev/null", "--fail-on", "never")
    out, err = proc.communicate(timeout=120)
    r = run_cli.finish(proc, out, err)
    assert r.returncode == 0 and r.validated == ["stdout"], err
