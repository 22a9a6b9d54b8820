"""One command-line contract for every command (issue 28, item 3), end to end through the installed `dl-doctor`:

* ``--json PATH|-`` on every command that answers in JSON: a value is required, ``-`` is stdout (alone), a PATH is
  written by the safe writer and the text still prints;
* only ``run`` and ``verify`` write default reports; ``check`` writes only what it is asked for;
* no directory is created for a named output; ``--output-dir`` on a bad place is one line, exit 2, before any work;
* every reader of one report or bundle refuses a damaged bundle alike; ``fleet`` lists bad inputs and goes on;
* an interrupt (a real SIGINT) is exit 130 and the one line ``dl-doctor: interrupted``, at any point;
* a closed stdout ends quietly with the exit code the run would have had.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest

from conftest import dl_doctor_exe

HERE = Path(__file__).resolve().parent.parent
SNAPSHOTS = HERE / "fixtures" / "snapshots"
G5, P4D = SNAPSHOTS / "g5_ubuntu2204.json", SNAPSHOTS / "p4d_rhel8_healthy.json"


def _lines(text: str):
    return [line for line in text.splitlines() if line.strip()]


def _one_error(r, *words: str) -> str:
    lines = _lines(r.stderr)
    assert r.returncode == 2 and len(lines) == 1, (r.returncode, r.stdout, r.stderr)
    assert lines[0].startswith("dl-doctor: error: ") and "Traceback" not in r.stderr + r.stdout
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def reports(tmp_path_factory, request):
    """Two reports of recorded machines (a g5 with one warning, a healthy p4d) and a bundle of the g5's, with its
    members in the order `dl-doctor bundle` writes them (the report near the start, the facts after the HTML)."""
    from conftest import CliRunner

    run_cli = CliRunner(tmp_path_factory.mktemp("cli"), request)
    out = tmp_path_factory.mktemp("reports")
    for name, facts in (("g5", G5), ("p4d", P4D)):
        r = run_cli("check", str(facts), "--json", str(out / f"{name}.json"), "-q")
        assert r.returncode in (0, 1), r.stderr
    report = (out / "g5.json").read_bytes()
    members = [("manifest.json", b'{"kind": "dl-doctor-bundle"}'), ("report.json", report),
               ("report.html", os.urandom(200_000)), ("summary.md", b"# summary\n"), ("facts.json", G5.read_bytes()),
               ("raw/files/etc_os-release", b"NAME=Ubuntu\n" * 2000)]
    for name, mode in (("bundle.tar.gz", "w:gz"), ("bundle.tar", "w")):
        with tarfile.open(out / name, mode) as tar:
            for member, data in members:
                info = tarfile.TarInfo(f"dl-doctor-bundle-g5/{member}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out


# -- --json PATH|- ------------------------------------------------------------------------------------------------

def _commands(reports):
    g5, p4d = str(reports / "g5.json"), str(reports / "p4d.json")
    return {
        "list": ["list"],
        "explain": ["explain", "DLD-GPU-005"],
        "report": ["report", g5],
        "diff": ["diff", g5, p4d],
        "why": ["why", "--text-only", "RuntimeError: CUDA error: no kernel image is available for execution"],
        "matrix cuda": ["matrix", "cuda", "12.4"],
        "matrix driver": ["matrix", "driver", "535.104.05"],
        "matrix gpu": ["matrix", "gpu", "10de:2330"],
        "matrix torch": ["matrix", "torch", "2.4.1"],
        "matrix torch --gpu": ["matrix", "torch", "2.5.1", "--gpu", "H100"],
        "matrix instance": ["matrix", "instance", "p4d.24xlarge"],
        "matrix xid": ["matrix", "xid", "48"],
        "matrix validate": ["matrix", "validate"],
        "fleet": ["fleet", g5, p4d],
        "history": ["history", g5, p4d],
        "check": ["check", g5, "-q"],
        "plan": ["plan", "--report", str(P4D), "--driver", "470.256.02"],
    }


NAMES = ["list", "explain", "report", "diff", "why", "matrix cuda", "matrix driver", "matrix gpu", "matrix torch",
         "matrix torch --gpu",
         "matrix instance", "matrix xid", "matrix validate", "fleet", "history", "check", "plan"]


@pytest.mark.parametrize("name", NAMES + ["run", "verify"])
def test_json_requires_a_value_on_every_command(run_cli, reports, name):
    args = _commands(reports).get(name, [name])
    r = run_cli(*args, "--json", timeout=120, outdir=False)
    _one_error(r, "'--json' requires an argument")
    assert r.stdout == ""


@pytest.mark.parametrize("name", ["list", "explain", "diff", "why", "matrix cuda", "fleet", "history"])
def test_an_option_after_json_is_not_taken_for_its_path(run_cli, reports, name, tmp_path):
    args = _commands(reports)[name]
    r = run_cli(*args, "--json", "--html", str(tmp_path / "x.html"), timeout=120)
    _one_error(r, "--json takes a PATH, or - for stdout (got '--html')")
    assert not (tmp_path / "--html").exists() and not (tmp_path / "x.html").exists()


def _expected_keys(name):
    return {"list": None, "explain": {"id", "slug", "title", "explanation", "remedy", "tags"},
            "report": {"findings", "facts", "summary", "schema_version"},
            "diff": {"baseline", "current", "versions", "findings", "drift"},
            "why": {"matched", "causes", "entities"}, "matrix cuda": {"cuda", "min_driver"},
            "matrix driver": {"driver", "max_cuda"}, "matrix gpu": {"name", "compute_capability"},
            "matrix torch": {"torch", "cuda_variants"}, "matrix instance": {"instance_type", "gpu_count"},
            "matrix torch --gpu": {"torch", "gpu", "compute_capability", "min_driver", "builds", "images", "sources",
                                   "verified"},
            "matrix xid": {"code", "name"}, "matrix validate": {"valid", "errors", "files"},
            "fleet": {"ok", "unreadable"}, "history": {"kind", "hosts", "skipped", "exit_code"}, "check": {"findings", "summary", "facts"},
            "plan": {"changes", "transitions", "steps", "exit_code", "verdict"}}[name]


@pytest.mark.parametrize("name", NAMES)
def test_json_dash_is_the_json_alone_on_stdout(run_cli, reports, name):
    r = run_cli(*_commands(reports)[name], "--json", "-", timeout=120)
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)  # the whole of stdout is the document
    keys = _expected_keys(name)
    if keys is None:
        assert isinstance(doc, list) and {"DLD-GPU-005", "DLD-SYS-001"} <= {c["id"] for c in doc}
    else:
        assert keys <= set(doc), sorted(doc)


@pytest.mark.parametrize("name", ["list", "explain", "diff", "why", "matrix xid", "matrix validate", "matrix torch --gpu",
                                  "fleet", "history", "plan"])
def test_json_path_writes_the_file_and_the_text_still_prints(run_cli, reports, name, tmp_path):
    target = tmp_path / "answer.json"
    r = run_cli(*_commands(reports)[name], "--json", str(target), timeout=120)
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(target.read_text())
    assert doc and not r.stdout.lstrip().startswith(("{", "["))
    assert r.stdout.strip(), "the text answer is still printed"
    assert oct(target.stat().st_mode & 0o777) == oct(0o600 & ~0o022)


def test_explain_json_is_the_spec_and_every_section(run_cli):
    from dl_doctor.model import Explanation

    r = run_cli("explain", "persistence-mode-off", "--json", "-")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["id"] == "DLD-GPU-005" and doc["slug"] == "persistence-mode-off"
    assert set(doc["explanation"]) == {attr for attr, _ in Explanation.SECTIONS}
    assert all(isinstance(v, str) and v for v in doc["explanation"].values())
    assert doc["headings"] == {attr: heading for attr, heading in Explanation.SECTIONS}
    text = run_cli("explain", "DLD-GPU-005").stdout
    assert doc["explanation"][Explanation.SECTIONS[0][0]].split()[0] in text


def test_diff_markdown_is_a_redacted_table(run_cli, reports, tmp_path):
    doc = json.loads((reports / "g5.json").read_text())
    doc["facts"]["system"]["hostname"] = doc["host"]["hostname"] = "gpu-node-17.corp.example"
    warned = next(f for f in doc["findings"] if f["id"] == "DLD-GPU-005")
    warned["message"] += " on gpu-node-17.corp.example | see `x`"
    base = tmp_path / "base.json"
    base.write_text(json.dumps(doc))
    r = run_cli("diff", base, reports / "p4d.json", "--markdown", "-", timeout=120)
    assert r.returncode == 1, r.stderr  # drifted
    lines = r.stdout.splitlines()
    assert "| version | baseline | current |" in lines and "| check | baseline | current | finding |" in lines
    assert "| `driver` | `535.129.03` | `535.104.05` |" in lines
    row = next(line for line in lines if line.startswith("| `DLD-GPU-005` | warn | cleared | "))
    assert "gpu-node-17" not in r.stdout and "[HOST-1]" in row.replace("\\[", "[").replace("\\]", "]")
    assert row.count(" | ") == 3 and "\\|" in row  # the message's bar cannot open a cell
    assert lines[-1] == f"{sum(1 for l in lines if l.startswith('| `'))} change(s)."
    # --markdown FILE: written, and the text prints as before
    r = run_cli("diff", base, reports / "p4d.json", "--markdown", tmp_path / "d.md", timeout=120)
    assert (tmp_path / "d.md").read_text().startswith("### dl-doctor diff ") and "change(s)." in r.stdout


# -- where reports go -----------------------------------------------------------------------------------------------

def test_check_writes_no_report_unless_asked(run_cli, reports, tmp_path):
    r = run_cli("check", str(G5), "-q", outdir=False, cwd=tmp_path)
    assert r.returncode in (0, 1), r.stderr
    assert not (tmp_path / "dl-doctor-reports").exists() and "Report:" not in r.stdout
    # --json alone: that file only, no HTML anywhere
    r = run_cli("check", str(G5), "-q", "--json", "r.json", outdir=False, cwd=tmp_path)
    assert json.loads((tmp_path / "r.json").read_text())["run"]["mode"] == "facts"
    assert not (tmp_path / "dl-doctor-reports").exists()
    # --output-dir given: the default reports go there, as before
    r = run_cli("check", str(G5), "-q", "--output-dir", "given", outdir=False, cwd=tmp_path)
    assert sorted(p.suffix for p in (tmp_path / "given").iterdir()) == [".html", ".json"]


def test_run_still_writes_its_default_reports(run_cli, tmp_path):
    r = run_cli("run", "--only", "DLD-SYS-001", "-q", outdir=False, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(p.suffix for p in (tmp_path / "dl-doctor-reports").iterdir()) == [".html", ".json"]


@pytest.mark.parametrize("name", ["run", "check", "list", "explain", "report", "diff", "why", "matrix cuda",
                                  "fleet", "history"])
def test_a_named_outputs_missing_directory_is_exit_2_and_never_created(run_cli, reports, name, tmp_path):
    target = tmp_path / "no" / "such" / "x.json"
    args = _commands(reports).get(name, ["run", "--only", "DLD-SYS-001"])
    r = run_cli(*args, "--json", str(target), timeout=120)
    _one_error(r, f"cannot write {target}: directory {target.parent} does not exist")
    assert not (tmp_path / "no").exists()
    assert "Summary" not in r.stdout  # refused before any work


def test_a_named_output_under_a_file_is_exit_2(run_cli, tmp_path):
    (tmp_path / "afile").write_text("x")
    r = run_cli("check", str(G5), "--html", str(tmp_path / "afile" / "r.html"))
    _one_error(r, f"{tmp_path / 'afile'} is not a directory")


def _bad_output_dirs(tmp_path):
    (tmp_path / "afile").write_text("x")
    cases = [(tmp_path / "afile", "not a directory"), (tmp_path / "afile" / "sub", "not a directory")]
    if os.geteuid() == 0:
        shared = tmp_path / "shared"
        shared.mkdir()
        shared.chmod(0o777)
        cases.append((shared, "writable by every user (and not sticky)"))
    return cases


@pytest.mark.parametrize("command", [["run", "--only", "DLD-SYS-001"], ["check", str(G5)], ["verify"]])
def test_a_bad_output_dir_is_one_line_and_exit_2_before_any_work(run_cli, tmp_path, command):
    for where, why in _bad_output_dirs(tmp_path):
        r = run_cli(*command, "--output-dir", str(where), timeout=120)
        line = _one_error(r, why)
        assert str(where) in line and r.stdout == "", r.stdout


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_an_unwritable_output_dir_is_one_line(run_cli, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    r = run_cli("run", "--only", "DLD-SYS-001", "--output-dir", str(locked))
    _one_error(r, f"cannot write into {locked}: permission denied")


# -- damaged bundles: every single-input reader alike -----------------------------------------------------------------

def _damaged(reports, tmp_path):
    """Bundles cut short where the report (near the start) is whole: after the HTML, and just before the gzip
    trailer; an uncompressed one cut at a member boundary and inside a member."""
    gz, plain = (reports / "bundle.tar.gz").read_bytes(), (reports / "bundle.tar").read_bytes()
    boundary = plain.index(b"dl-doctor-bundle-g5/facts.json")
    cuts = {"cut-in-raw.tar.gz": gz[: len(gz) * 3 // 4], "no-trailer.tar.gz": gz[:-8],
            "cut-at-member.tar": plain[:boundary], "cut-in-member.tar": plain[: boundary + 512 + 100]}
    out = []
    for name, blob in cuts.items():
        (tmp_path / name).write_bytes(blob)
        out.append(tmp_path / name)
    return out


READERS = {
    "check": lambda b, good: ["check", b, "-q"],
    "report": lambda b, good: ["report", b, "--markdown", "-"],
    "diff (baseline)": lambda b, good: ["diff", b, good],
    "diff (current)": lambda b, good: ["diff", good, b],
    "why --report": lambda b, good: ["why", "--report", b, "CUDA error: out of memory"],
    "expect --from": lambda b, good: ["expect", "--from", b],
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_reader_refuses_a_damaged_bundle_alike(run_cli, reports, reader, tmp_path):
    good = str(reports / "p4d.json")
    whole = run_cli(*READERS[reader](str(reports / "bundle.tar.gz"), good), timeout=120)
    assert whole.returncode in (0, 1), whole.stderr  # the whole bundle reads
    for bad in _damaged(reports, tmp_path):
        r = run_cli(*READERS[reader](str(bad), good), timeout=120)
        _one_error(r, f"{bad} is not a readable dl-doctor bundle (truncated or corrupt?)")
        assert r.stdout == ""


def test_fleet_lists_a_damaged_input_with_its_reason_and_compares_the_rest(run_cli, reports, tmp_path):
    tarball = tmp_path / "nodes.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        for name in ("g5.json", "p4d.json"):
            tar.add(reports / name, arcname=f"nodes/{name}")
    raw = tarball.read_bytes()
    (tmp_path / "cut.tar.gz").write_bytes(raw[: len(raw) // 2])
    (tmp_path / "junk.json").write_text("{not json")
    r = run_cli("fleet", reports / "g5.json", reports / "p4d.json", tmp_path / "cut.tar.gz", tmp_path / "junk.json",
                "--json", tmp_path / "f.json", timeout=120)
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads((tmp_path / "f.json").read_text())
    bad = {u["source"]: u["error"] for u in doc["unreadable"]}
    assert set(bad) == {str(tmp_path / "cut.tar.gz"), str(tmp_path / "junk.json")}, bad
    assert "not a readable tarball" in bad[str(tmp_path / "cut.tar.gz")]
    assert bad[str(tmp_path / "junk.json")]
    # the two reports given as files are compared (and what the cut tarball held before its cut)
    assert doc["nodes"] >= 2 and doc["groups"]
    for source in bad:
        assert source in r.stdout


# -- interrupts -------------------------------------------------------------------------------------------------------

def _default_sigint():
    """In the child: SIGINT's default disposition. A suite started as a background job of a non-interactive shell
    (`pytest &`, nohup) inherits SIGINT ignored, and a Python started with it ignored never raises
    KeyboardInterrupt; the tests are about what dl-doctor does with an interrupt it gets."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _assert_interrupted(proc, out, err):
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert err == "dl-doctor: interrupted\n", err
    assert "Traceback" not in out + err


def test_sigint_while_the_probes_run_is_130_and_one_line(tmp_path):
    """A real SIGINT while the probes' threads wait on an interpreter that sleeps (it says when it started)."""
    marker = tmp_path / "started"
    slow = tmp_path / "python3"
    slow.write_text(f"#!/bin/sh\ntouch {marker}\nsleep 60\n")
    slow.chmod(0o755)
    proc = subprocess.Popen([dl_doctor_exe(), "run", "--python", str(slow), "--no-env-scan", "-q", "--output-dir",
                             str(tmp_path / "out")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=str(tmp_path), preexec_fn=_default_sigint)
    deadline = time.monotonic() + 120
    while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert marker.exists(), "the probe never started the interpreter"
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    _assert_interrupted(proc, out, err)
    assert time.monotonic() - t0 < 20, "it ended at once, not after the probe's time limit"


# A real SIGINT the process sends itself at the moment a module is imported: while click is imported (before
# anything can catch it but main()), while the commands are, while the registry loads the checks.
_SELF_INTERRUPT = textwrap.dedent("""
    import os, signal, sys
    target = sys.argv.pop(1)

    class Interrupt:
        def find_spec(self, name, path=None, target_module=None):
            if name == target:
                sys.meta_path.remove(self)
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(1000):  # the handler runs at the next bytecode boundaries, here
                    pass
            return None

    sys.meta_path.insert(0, Interrupt())
    from dl_doctor.cli import main
    sys.argv[0] = "dl-doctor"
    main()
""")


@pytest.mark.parametrize("module", ["click", "dl_doctor.app", "dl_doctor.cli.core", "dl_doctor.registry",
                                    "dl_doctor.engine"])
def test_sigint_during_the_imports_is_130_and_one_line(tmp_path, module):
    exe = Path(dl_doctor_exe())
    python = exe.parent / "python"
    if not python.exists():
        python = Path(sys.executable)
    proc = subprocess.Popen([str(python), "-c", _SELF_INTERRUPT, module, "check", str(G5), "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(tmp_path),
                            preexec_fn=_default_sigint)
    out, err = proc.communicate(timeout=120)
    _assert_interrupted(proc, out, err)


# -- a closed stdout --------------------------------------------------------------------------------------------------

def _closed_stdout(args, cwd):
    """The command with a stdout whose reader is already gone: every write to it is EPIPE."""
    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run([dl_doctor_exe(), *args], stdout=w, stderr=subprocess.PIPE, text=True, cwd=str(cwd),
                              timeout=120)
    finally:
        os.close(w)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("args,code", [
    (["list"], 0),
    (["list", "--json", "-"], 0),
    (["explain", "DLD-GPU-005"], 0),
    (["check", str(G5), "--json", "-", "--fail-on", "warn"], 1),   # the g5 warns: the findings' code
    (["check", str(G5), "--json", "-"], 0),
    (["check", str(G5), "--markdown", "-", "--fail-on", "warn"], 1),
    (["matrix", "cuda", "13.9"], 1),                                  # no such entry: 1, as with a reader
])
def test_a_closed_stdout_ends_quietly_with_the_runs_exit_code(tmp_path, args, code):
    rc, err = _closed_stdout(args, tmp_path)
    assert rc == code, err
    assert "Exception ignored" not in err and "Traceback" not in err and "Broken pipe" not in err
    if args[0] != "matrix":
        assert err == ""


def test_head_reads_one_line_of_the_list(tmp_path):
    proc = subprocess.run(f"'{dl_doctor_exe()}' list | head -1; echo \"rc=${{PIPESTATUS[0]}}\"", shell=True,
                          executable="/bin/bash", capture_output=True, text=True, cwd=str(tmp_path), timeout=120)
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("DLD-") and lines[1] == "rc=0", proc.stdout
    assert proc.stderr == ""


def test_the_readme_lists_exit_code_130():
    text = (HERE.parent / "README.md").read_text()
    paragraph = text[text.index("Exit codes: `0`"):]
    paragraph = paragraph[:paragraph.index("\n\n")]
    assert "`130`" in paragraph and "interrupted" in paragraph
