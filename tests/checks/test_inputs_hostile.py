"""Inputs another user controls (facts files, reports, bundles): one bounded loader for all of them. The worst
documents we can build are refused before Python's parser allocates anything, in linear time, with peak memory
measured in a child process; what is inside a string never counts as structure (no false refusal); a FIFO given as
an input is refused without blocking."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from conftest import FIXTURES
from dl_doctor.facts import validate
from dl_doctor.facts.validate import InputError, load_json_bytes, prescan

MIB = 1 << 20
LIMIT = 64 * MIB

# run a command as the child of a fresh interpreter and report the child's peak RSS: RUSAGE_CHILDREN of the test
# process itself would include every earlier child
_MEASURE = """
import json, resource, subprocess, sys, time
start = time.monotonic()
r = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=300)
print(json.dumps({"rc": r.returncode, "stderr": r.stderr, "seconds": time.monotonic() - start,
                  "rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def _measured(run_cli, *argv) -> dict:
    """``dl-doctor ARGV`` through the shared runner, as the child of a fresh interpreter that reports its peak RSS."""
    out = run_cli(*map(str, argv), prefix=[sys.executable, "-c", _MEASURE], timeout=400)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _measured_python(*argv) -> dict:
    out = subprocess.run([sys.executable, "-c", _MEASURE, sys.executable, *map(str, argv)], capture_output=True,
                         text=True, timeout=400)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _bundle(path: Path, member: bytes) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("b/facts.json")
        info.size = len(member)
        tar.addfile(info, io.BytesIO(member))
    return path


@pytest.fixture(scope="module")
def worst(tmp_path_factory):
    """The worst documents for Python's parser, each at (or near) the 64 MiB limit."""
    d = tmp_path_factory.mktemp("worst")
    many = b"[" + b"[]," * ((LIMIT - 2) // 3 - 1) + b"[]]"  # 22 million empty lists: 1.5 GB once parsed
    (d / "containers.json").write_bytes(many)
    (d / "deep.json").write_bytes(b"[" * 400_000 + b"]" * 400_000)  # under the value limit, far over the depth
    (d / "wide.json").write_bytes(b'["' + b"x" * (LIMIT - 20) + '\U0001f600"]'.encode())  # 4 bytes a character
    (d / "escaped.json").write_bytes(b'["' + b"x" * (LIMIT - 30) + b'\\ud83d\\ude00"]')  # the same, by an escape
    _bundle(d / "bomb.tar.gz", b"[" + b"[]," * (60 * MIB // 3) + b"[]]")  # 60 KB that inflates to 60 MiB
    _bundle(d / "huge-member.tar.gz", b" " * (200 * MIB))
    # accepted: the most memory a document within every bound can take (a million short strings)
    base = json.loads((FIXTURES / "snapshots" / "g5_ubuntu2204.json").read_text())
    base["facts"]["acme"] = {"s": [f"{n:060d}" for n in range(490_000)]}
    (d / "strings.json").write_text(json.dumps(base))
    # accepted too: fewer, longer strings, up to the size limit (the page and the JSON report are each ~60 MB)
    base["facts"]["acme"] = {"s": [f"{n:0150d}" for n in range(400_000)]}
    (d / "long.json").write_text(json.dumps(base))
    return d


@pytest.mark.parametrize("name,message", [
    ("containers.json", "holds more than 500000 values"),
    ("deep.json", "is nested too deeply (more than 64 levels)"),
    ("wide.json", "MiB as text (it holds characters beyond Latin-1), over the 128 MiB limit"),
    ("escaped.json", "MiB as text (it holds characters beyond Latin-1), over the 128 MiB limit"),
    ("bomb.tar.gz", "facts.json in the bundle holds more than 500000 values"),
    ("huge-member.tar.gz", "facts.json is 209715200 bytes, over the 64 MiB limit for an input"),
])
def test_the_worst_inputs_are_refused_in_bounded_memory_and_time(run_cli, worst, name, message):
    """On main, containers.json took several GB in `check` and the bomb 860 MB from 60 KB."""
    r = _measured(run_cli, "check", worst / name, "-q", "--output-dir", worst / "out")
    lines = r["stderr"].strip().splitlines()
    assert r["rc"] == 2 and len(lines) == 1 and message in lines[0] and str(worst / name) in lines[0], r
    assert r["rss_mib"] <= 300, r
    assert r["seconds"] < 60, r


def test_the_largest_accepted_document_loads_in_bounded_memory(run_cli, worst):
    """A million short strings: within every bound, so parsed; the load (what every input command does) stays
    under 300 MiB."""
    load = ("import sys; from dl_doctor import app; s = app.load_snapshot(sys.argv[1]); "
            "assert len(s['facts']['acme']['s']) == 490000")
    r = _measured_python("-c", load, worst / "strings.json")
    assert r["rc"] == 0 and r["rss_mib"] <= 300, r
    r = _measured(run_cli, "diff", FIXTURES / "snapshots" / "g5_ubuntu2204.json", worst / "strings.json")
    assert r["rc"] == 0 and r["rss_mib"] <= 300, r
    # and judging it, redacting it and writing the JSON and HTML reports: all of `check`
    for name in ("strings.json", "long.json"):
        r = _measured(run_cli, "check", worst / name, "-q", "--fail-on", "never", "--output-dir", worst / "out-ok")
        assert r["rc"] == 0 and r["rss_mib"] <= 300, (name, r)


def test_an_input_over_64_mib_is_refused_before_it_is_read(run_cli, tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.write(b"{")
        fh.truncate(LIMIT + 1)  # sparse: reading it would cost 64 MiB, refusing it nothing
    for argv in (["check", big, "-q"], ["diff", big, big], ["expect", "--from", big, "-o", tmp_path / "e.toml"],
                 ["report", big, "--html", tmp_path / "r.html"]):
        r = _measured(run_cli, *argv)
        assert r["rc"] == 2 and r["stderr"].strip() == (
            f"dl-doctor: error: {big} is 67108865 bytes, over the 64 MiB limit for an input"), r
        assert r["rss_mib"] < 100, r


def test_a_fifo_given_as_an_input_is_refused_without_blocking(run_cli, tmp_path):
    fifo = tmp_path / "facts.json"
    os.mkfifo(fifo)  # nobody writes it: a blocking open would wait forever
    for argv in (["check", fifo, "-q"], ["diff", fifo, fifo], ["report", fifo, "--html", tmp_path / "r.html"]):
        r = run_cli(*map(str, argv), timeout=60)
        assert r.returncode == 2 and r.stderr.strip() == (
            f"dl-doctor: error: cannot read {fifo}: it is a FIFO, not a regular file"), r.stderr
    r = run_cli("check", "/dev/zero", "-q", timeout=60)
    assert r.returncode == 2 and "it is a device, not a regular file" in r.stderr


# -- the pre-scan: exact on what is inside strings, linear on what is built against it ---------------------------------


def test_structure_inside_strings_never_counts():
    """A legitimate document whose strings are full of brackets, commas, colons and escaped quotes (a log line, a
    command line) is not refused: only structure outside strings counts."""
    noisy = '[{,:]"\\\\' * 400_000  # 3.2 million structural characters inside one string, escapes too
    doc = {"log": noisy, "nested": [[[[["[[[[[" * 100]]]]], "q": 'a "quoted" value, with: commas'}
    data = json.dumps(doc).encode()
    assert load_json_bytes(data, "x") == doc
    deep_in_text = json.dumps({"a": "[" * 1000 + "]" * 1000}).encode()
    assert load_json_bytes(deep_in_text, "x")["a"].count("[") == 1000


def test_depth_and_value_bounds_are_exact():
    assert load_json_bytes(b"[" * 64 + b"]" * 64, "x") is not None
    with pytest.raises(InputError, match="nested too deeply"):
        load_json_bytes(b"[" * 65 + b"]" * 65, "x")
    with pytest.raises(InputError, match="nested too deeply"):
        load_json_bytes(b'{"a":' * 65 + b"1" + b"}" * 65, "x")
    at_limit = b"[" + b"1," * (validate.MAX_VALUES - 2) + b"1]"  # the list and its items
    assert len(load_json_bytes(at_limit, "x")) == validate.MAX_VALUES - 1
    with pytest.raises(InputError, match="more than 500000 values"):
        load_json_bytes(b"[" + b"1," * validate.MAX_VALUES + b"1]", "x")
    with pytest.raises(InputError, match="more than 500000 values"):
        load_json_bytes(b"[" + b'"",' * validate.MAX_VALUES + b'""]', "x")


@pytest.mark.parametrize("unit", [
    b"[],",                 # containers
    b'\\"',                # an unterminated string after every quote: a regex that retried each would be quadratic
    b'"\\\\"',             # strings of escapes
    b"[" * 3,               # unbalanced nesting
    b'{"a":',              # keys without values
    b"\xf0\x9f\x98\x80",   # wide characters
])
def test_the_prescan_is_linear(unit):
    def seconds(size):
        """The best of three runs: a busy machine (CI's other stages, a page-in) only ever adds time."""
        data = unit * (size // len(unit))
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            try:
                prescan(data, "x")
            except InputError:
                pass
            best = min(best, time.perf_counter() - start)
        return best

    small, large = seconds(2 * MIB), seconds(16 * MIB)
    assert large < max(small, 0.01) * 8 * 3, (small, large)  # 8 times the input: at most ~8 times the time


def test_lone_surrogates_are_repaired_in_place_keys_too():
    value = load_json_bytes(b'{"a": ["\\udcff", {"\\ud800k": "ok"}], "b": "\\udc80"}', "x")
    assert value == {"a": ["\\xff", {"\\ud800k": "ok"}], "b": "\\x80"}
    json.dumps(value).encode("utf-8")


def test_a_report_whose_facts_are_too_deep_is_one_line(run_cli, tmp_path):
    """`report` and `why --report` load through the same loader (their own check_limits walk used to copy a path for
    every value)."""
    doc = json.loads((FIXTURES / "snapshots" / "g5_ubuntu2204.json").read_text())
    doc["facts"]["acme"] = {"x": json.loads("[" * 70 + "]" * 70)}
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"findings": [], **doc}))
    r = run_cli("report", str(path), "--html", str(tmp_path / "r.html"), timeout=60)
    assert r.returncode == 2 and r.stderr.strip() == (
        f"dl-doctor: error: {path} is nested too deeply (more than 64 levels)"), r.stderr
