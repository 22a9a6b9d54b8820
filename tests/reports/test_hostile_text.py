"""Text from the machine that reaches a terminal or a Markdown page: escape sequences, bidirectional overrides and
forged lines come out escaped (`why --log`, preflight, the CLI's other printers), and no value becomes a link in a
GitHub-flavoured Markdown renderer."""

from __future__ import annotations


RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\r")


def _assert_escaped(out: str) -> None:
    assert not [c for c in RAW if c in out], repr(out)


def test_why_log_prints_a_log_lines_escape_sequences_escaped(run_cli, tmp_path):
    log = tmp_path / "train.log"
    log.write_text("epoch 1\n\x1b]0;owned\x07\x1b[2J\u202eRuntimeError: DataLoader worker (pid 4242) is killed by "
                   "signal: Bus error.\x1b[8m hidden\r\n", newline="")
    r = run_cli("why", "--text-only", "--log", str(log))
    assert r.returncode == 0, r.stderr
    assert "1 distinct known error(s) in the log" in r.stdout and "/dev/shm is too small" in r.stdout
    _assert_escaped(r.stdout)
    assert "\\x1b]0;owned\\x07\\x1b[2J\\u202eRuntimeError" in r.stdout


HOSTILE_HOST = "gpu7\x1b]0;pwned\x07\u202e\nOK: the nodes agree and none fails"


def _preflight_result():
    """What rank 0 builds from the gathered sections: one peer names itself with an escape sequence, a bidi
    override and a forged verdict line, fails a check, and cannot reduce with rank 0."""
    from dl_doctor.integrations import fleet

    failing = [{"id": "DLD-GPU-001", "status": "fail", "headline": "no GPU"}]
    nodes = [fleet.Node("gpu1", "rank 0", {"version": "1", "identity": {}, "compare": {}, "failing": [],
                                           "warnings": 0}),
             fleet.Node(HOSTILE_HOST, "rank 1", {"version": "1", "identity": {}, "compare": {}, "failing": failing,
                                                 "warnings": 0})]
    result = fleet.compare(fleet.Fleet(nodes=nodes))
    result["path"] = {"backend": "nccl", "ok": False, "error": "DistBackendError: \x1b[2Jpeer reset",
                      "failed_pairs": [[0, 1]], "failed_pairs_named": [["gpu1", HOSTILE_HOST]]}
    result["ok"] = False
    return result


def test_preflight_verdict_escapes_a_peers_hostile_host_name():
    from dl_doctor.integrations.preflight import verdict_text

    out = verdict_text(_preflight_result())
    _assert_escaped(out)
    assert out.startswith("dl-doctor preflight\n")
    assert "\nOK:" not in out and out.rstrip().splitlines()[-2].startswith("NOT OK")
    assert "gpu7\\x1b]0;pwned\\x07\\u202e\\nOK: the nodes agree" in out
    assert "FAILED (DistBackendError: \\x1b[2Jpeer reset); pairs that cannot reduce: gpu1 <-> gpu7\\x1b]0;" in out


def test_an_error_line_quotes_a_hostile_file_name_escaped(run_cli, tmp_path):
    r = run_cli("why", "--log", str(tmp_path / "x\x1b]0;owned\x07\u202e\n.log"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    _assert_escaped(r.stderr)
    assert "x\\x1b]0;owned\\x07\\u202e .log is not a regular file" in r.stderr  # whitespace is one space
    r = run_cli("run", "--fail-on", "\x1b[2J\x9b1m")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    _assert_escaped(r.stderr)
    assert "\\x1b[2J\\x9b1m" in r.stderr


def test_a_matrix_overlays_text_is_printed_escaped(run_cli, tmp_path):
    overlay = tmp_path / "overlay.toml"
    overlay.write_text('schema_version = 1\n[sources.acme]\nurl = "https://wiki.example.com/\\u001b]0;owned\\u0007"\n'
                       '[[toolkit]]\nversion = "13.9"\nmin_driver = "640.10"\nsource = ["acme"]\n'
                       'note = "rebuilt \\u001b[2J\\u202e here"\n')
    r = run_cli("matrix", "cuda", "13.9", "--matrix-overlay", str(overlay))
    assert r.returncode == 0, r.stderr
    _assert_escaped(r.stdout)
    assert "https://wiki.example.com/\\x1b]0;owned\\x07" in r.stdout


def test_the_terminal_summary_keeps_each_value_on_its_line_and_a_fix_keeps_its_commands():
    from dl_doctor.reports import terminal

    forged = "\nPASS  DLD-GPU-001  every GPU is healthy\x1b[2J"
    report = {"tool": {"version": "1"}, "host": {"hostname": "gpu7" + forged}, "run": {},
              "summary": {"fail": 1, "pass": 1},
              "findings": [{"id": "DLD-MEM-001", "status": "fail", "title": "shm" + forged,
                            "headline": "small" + forged, "message": "the mount" + forged,
                            "fix": {"summary": "grow it" + forged, "commands": ["# in the pod spec:\nvolumes: []"]}},
                           {"id": "DLD-SYS-001", "status": "pass", "title": "ok", "message": "fine" + forged}]}
    for verbose, shown in ((False, 4), (True, 6)):  # host, headline, message, fix (-v: and title, pass message)
        text = terminal.render(report, verbose=verbose)
        _assert_escaped(text)
        assert not [line for line in text.splitlines() if line.lstrip().startswith("PASS  DLD-GPU-001")], text
        assert text.count("\\nPASS  DLD-GPU-001  every GPU is healthy\\x1b[2J") == shown, text
        assert "  # in the pod spec:\n" in text and "\n        volumes: []\n" in text  # the commands' own lines


def test_preflight_error_line_escapes_what_a_peer_sent(monkeypatch, capsys):
    import dl_doctor.integrations.preflight as preflight

    def refused(*args):
        raise RuntimeError("connection reset by gpu7\x1b]0;pwned\x07\nOK: ready")

    monkeypatch.setattr(preflight, "preflight", refused)
    assert preflight.main([]) == 2
    err = capsys.readouterr().err
    _assert_escaped(err)
    assert err == "dl-doctor preflight: error: connection reset by gpu7\\x1b]0;pwned\\x07\\nOK: ready\n"


def test_every_character_that_breaks_or_reorders_a_line_is_escaped():
    from dl_doctor.reports.text import safe_line, safe_text

    # C0, DEL, C1 (0x9b is an 8-bit CSI), the bidi controls, and the Unicode line and paragraph separators
    assert safe_line("a\x1b\x7f\x9b\u061c\u200f\u202e\u2066\u2028\u2029\n\tb") == (
        "a\\x1b\\x7f\\x9b\\u061c\\u200f\\u202e\\u2066\\u2028\\u2029\\n\\tb")
    assert safe_text("a\nb\tc") == "a\nb\tc" and safe_text("venv\udcff") == "venv\\xff"
    assert len(safe_line("x" + "\u2028" * 10).splitlines()) == 1
