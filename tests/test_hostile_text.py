"""Text from the machine that reaches a terminal or a Markdown page: escape sequences, bidirectional overrides and
forged lines come out escaped (`why --log`, preflight, the CLI's other printers), and no value becomes a link in a
GitHub-flavoured Markdown renderer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DOCTOR = Path(sys.executable).parent / "dl-doctor"
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\r")


def _assert_escaped(out: str) -> None:
    assert not [c for c in RAW if c in out], repr(out)


def test_why_log_prints_a_log_lines_escape_sequences_escaped(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("epoch 1\n\x1b]0;owned\x07\x1b[2J\u202eRuntimeError: DataLoader worker (pid 4242) is killed by "
                   "signal: Bus error.\x1b[8m hidden\r\n", newline="")
    r = subprocess.run([str(DOCTOR), "why", "--text-only", "--log", str(log)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "Matched" in r.stdout and "/dev/shm is too small" in r.stdout
    _assert_escaped(r.stdout)
    assert "\\x1b]0;owned\\x07\\x1b[2J\\u202eRuntimeError" in r.stdout
