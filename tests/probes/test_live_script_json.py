"""The live interpreter script writes its JSON by hand (importing json costs a probed interpreter a third of its
start): what the probe reads back must be exactly what json.dumps would have given it."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

from dl_doctor.probes.python_envs.live import LIVE_SCRIPT

_START, _END = LIVE_SCRIPT.index("def _q(s):"), LIVE_SCRIPT.index("line = None")


def _encoder():
    ns: dict = {}
    exec(LIVE_SCRIPT[_START:_END], ns)  # noqa: S102 - the script's own encoder, as the child runs it
    return ns["_enc"]


def test_hand_written_json_reads_back_as_json_dumps_would():
    enc = _encoder()
    rnd = random.Random(24)
    alphabet = ['a', 'u', '0', '"', '\\', '/', ' ', '~', '\n', '\r', '\t', '\x00', '\x1c', '\x1f', '\x7f', '\x80',
                '\x85', 'é', '\u2028', '\u2029', '\ufeff', '\ud800', '\udcff', '\U0001f600', '\U0010ffff']

    def text() -> str:
        return "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 12)))

    for _ in range(2000):
        doc = {"version": text(), "executable": rnd.choice([text(), None]), "sys_path": [text() for _ in range(3)],
               "user_site_enabled": rnd.choice([True, False]), "origins": {text(): rnd.choice([text(), None])}}
        line = enc(doc)
        assert line.isascii() and line.splitlines() == [line]  # one line, whatever the names hold
        assert json.loads(line) == json.loads(json.dumps(doc))


def test_anything_else_is_left_to_the_json_module():
    enc = _encoder()
    for other in ({"a": 1}, {"a": [b"x"]}, {1: "a"}, ("a",), {"a": 1.5}):
        try:
            enc(other)
        except TypeError:
            continue
        raise AssertionError(f"encoded {other!r}")


def test_the_script_prints_what_the_json_module_would(tmp_path):
    """The whole script in a real interpreter, against the same script made to use json.dumps."""
    odd = tmp_path / "site\u00e9\u2028"
    odd.mkdir()
    (odd / "x.pth").write_text("")
    with_json = LIVE_SCRIPT.replace("if sys.version_info[0] >= 3:", "if False:")
    assert with_json != LIVE_SCRIPT
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": f"{odd}:/nonexistent/\"q\\"}
    outs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60,
                           check=True).stdout.strip().splitlines()[-1] for script in (LIVE_SCRIPT, with_json)]
    assert json.loads(outs[0]) == json.loads(outs[1])
    assert str(odd) in json.loads(outs[0])["sys_path"]
