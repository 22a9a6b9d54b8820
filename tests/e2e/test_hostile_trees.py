"""Hostile trees and data: FIFOs, link loops, undecodable names, escape sequences, bombs, backtracking regexes.

Every test bounds its own time (a subprocess timeout, or a scaling ratio), so a regression fails instead of hanging
the suite.
"""

from __future__ import annotations

import gzip
import importlib
import json
import os
import pkgutil
import re
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, build_tree
from trees import UBUNTU2204_OS_RELEASE

def _venv(root: Path, home: str = "home/alice/venv") -> Path:
    site = root / home / "lib/python3.11/site-packages"
    site.mkdir(parents=True)
    (root / home / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.11.7\n")
    (root / home / "bin").mkdir()
    return site


# -- hangs ------------------------------------------------------------------------------------------------------------

def test_fifos_where_the_environment_probe_reads_cannot_hang_the_run(run_cli, tmp_path):
    root = tmp_path / "root"
    build_tree(root, {"etc/os-release": UBUNTU2204_OS_RELEASE})
    site = _venv(root)
    (site / "numpy-1.26.4.dist-info").mkdir()
    os.mkfifo(site / "numpy-1.26.4.dist-info/INSTALLER")
    (site / "torch").mkdir()
    (site / "torch-2.4.0.dist-info").mkdir()
    os.mkfifo(site / "torch/version.py")
    os.mkfifo(root / "etc/hostname")
    start = time.monotonic()
    r = run_cli("run", "--sysroot", str(root), "--json", "-", "--html", "/dev/null", timeout=60)
    assert r.returncode in (0, 1), r.stderr
    assert time.monotonic() - start < 30
    report = json.loads(r.stdout)
    env = next(e for e in report["facts"]["python_envs"]["environments"] if e["prefix"].endswith("/venv"))
    assert env["distributions"]["numpy"] == "1.26.4" and "torch" in env["frameworks"]


def test_a_device_or_fifo_is_never_read_as_a_file(tmp_path):
    from dl_doctor.host import Host, NotARegularFile

    os.mkfifo(tmp_path / "fifo")
    host = Host()
    with pytest.raises(NotARegularFile):
        host.read_bytes(str(tmp_path / "fifo"))
    assert host.try_read(str(tmp_path / "fifo")) is None
    assert host.try_read("/dev/zero") is None  # a character device that would never end


# -- names and loops --------------------------------------------------------------------------------------------------

def test_undecodable_names_and_link_loops_cost_nothing(run_cli, tmp_path):
    root = tmp_path / "root"
    build_tree(root, {"etc/os-release": UBUNTU2204_OS_RELEASE, "etc/hostname": "box\n"})
    bad = os.fsencode(str(root)) + b"/home/alice/venv\xff"
    os.makedirs(bad + b"/lib/python3.11/site-packages")
    with open(bad + b"/pyvenv.cfg", "wb") as fh:
        fh.write(b"version = 3.11.7\n")
    os.symlink("/opt", root / "opt")  # opt -> /opt inside the tree: a loop
    os.symlink("loop", root / "loop")
    r = run_cli("run", "--sysroot", str(root), "--json", "-", "--html", str(tmp_path / "r.html"))
    assert r.returncode in (0, 1), r.stderr
    report = json.loads(r.stdout)
    prefixes = [e["prefix"] for e in report["facts"]["python_envs"]["environments"]]
    assert "/home/alice/venv\\xff" in prefixes
    assert not [e for e in report["probe_errors"] if e["probe"] in ("python_envs", "system", "storage")]
    assert "venv\\xff" in (tmp_path / "r.html").read_text(encoding="utf-8")


def test_escape_sequences_from_the_machine_never_reach_the_terminal(run_cli, tmp_path):
    root = tmp_path / "root"
    evil = "Evil\x1b]0;owned\x07\x1b[2J\u202eOS"
    build_tree(root, {"etc/os-release": f'NAME="x"\nID=ubuntu\nVERSION_ID="22.04"\nPRETTY_NAME="{evil}"\n',
                      "etc/hostname": "box\x1b[31m\n"})
    _venv(root, "home/alice/\x1b[2Jvenv")
    status = tmp_path / "status"
    r = run_cli("run", "--sysroot", str(root), "--no-color", "--status-line", str(status), "--json",
                str(tmp_path / "r.json"), "--html", "/dev/null")
    assert r.returncode in (0, 1), r.stderr
    assert "\x1b" not in r.stdout and "\u202e" not in r.stdout and "\x07" not in r.stdout
    assert "Evil\\x1b]0;owned\\x07\\x1b[2J\\u202eOS" in r.stdout
    assert "\x1b" not in status.read_text()
    # drift between two facts files whose values carry escapes and newlines: one line each, escaped
    base = json.loads((FIXTURES / "snapshots" / "g5_ubuntu2204.json").read_text())
    cur = json.loads(json.dumps(base))
    cur["facts"]["kernel"]["release"] = "6.1\x1b[2J\nadded     fake: line"
    (tmp_path / "a.json").write_text(json.dumps(base))
    (tmp_path / "b.json").write_text(json.dumps(cur))
    r = run_cli("diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    assert r.returncode == 1 and "\x1b" not in r.stdout
    assert "\\x1b[2J\\nadded     fake: line" in r.stdout and "\nadded     fake" not in r.stdout


# -- bombs and caps ---------------------------------------------------------------------------------------------------

def _elf_with_needed(count: int) -> bytes:
    """A minimal 64-bit little-endian ELF whose PT_DYNAMIC holds ``count`` DT_NEEDED entries."""
    strtab = b"\0libfoo.so.1\0"
    ehsize, phsize = 64, 56
    dyn_off = ehsize + 2 * phsize
    entries = [(5, 0), (10, len(strtab))] + [(1, 1)] * count + [(0, 0)]  # DT_STRTAB (patched), DT_STRSZ, NEEDED...
    str_off = dyn_off + 16 * len(entries)
    entries[0] = (5, str_off)
    dyn = b"".join(struct.pack("<qQ", t, v) for t, v in entries)
    size = str_off + len(strtab)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8
    eh = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, ehsize, 0, 0, ehsize, phsize, 2, 0, 0, 0)
    load = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, size, size, 0x1000)
    dynamic = struct.pack("<IIQQQQQQ", 2, 6, dyn_off, dyn_off, dyn_off, len(dyn), len(dyn), 8)
    return eh + load + dynamic + dyn + strtab


def test_an_elf_with_600000_needed_entries_is_capped(tmp_path):
    from dl_doctor.readers import elf
    from dl_doctor.host import Host

    small = tmp_path / "small.so"
    small.write_bytes(_elf_with_needed(3))
    assert elf.read_dynamic(Host(), str(small))["needed"] == ["libfoo.so.1"] * 3
    big = tmp_path / "big.so"
    big.write_bytes(_elf_with_needed(600_000))
    start = time.monotonic()
    info = elf.read_dynamic(Host(), str(big))
    assert time.monotonic() - start < 20
    assert len(info["needed"]) < elf.MAX_DYNAMIC_TAGS and "more than" in info["truncated"]


def test_a_decompression_bomb_module_is_read_as_a_bounded_stream(tmp_path):
    bomb = tmp_path / "nvidia.ko.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as fh:
        chunk = b"\0" * (1 << 20)
        for _ in range(1024):  # 1 GiB of zeros in about 1 MiB
            fh.write(chunk)
    assert bomb.stat().st_size < 2 << 20
    code = ("import json; from dl_doctor.probes.kmod import _module_info; "
            "from dl_doctor.probes import ProbeContext; from dl_doctor.host import Host; "
            f"print(json.dumps(_module_info(ProbeContext(host=Host()), {str(bomb)!r})))")
    # measured from a small parent: a child's own ru_maxrss counts what it inherited from this (large) test process
    # before its exec
    parent = ("import json, resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
              "print(json.dumps([r.returncode, r.stdout, r.stderr, "
              "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))")
    proc = subprocess.run([sys.executable, "-c", parent, sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    rc, out, err, maxrss_kib = json.loads(proc.stdout)
    assert rc == 0, err
    info = json.loads(out)
    assert "stopped there" in info["note"] and info["signed"] is None
    assert maxrss_kib < 300 * 1024  # hundreds of MiB at most (main: 2 GiB)


def test_a_real_shaped_module_still_reads_its_modinfo_and_signature(tmp_path):
    from dl_doctor.host import Host
    from dl_doctor.probes import ProbeContext
    from dl_doctor.probes.kmod import SIGNATURE_MAGIC, _module_info

    body = (b"\x7fELF" + os.urandom(3 << 20) + b"\0vermagic=5.15.0-1051-aws SMP mod_unload modversions \0"
            b"version=535.104.05\0license=NVIDIA\0" + os.urandom(1 << 20) + SIGNATURE_MAGIC)
    for name, data in (("nvidia.ko", body), ("nvidia.ko.gz", gzip.compress(body, 1))):
        (tmp_path / name).write_bytes(data)
        info = _module_info(ProbeContext(host=Host()), str(tmp_path / name))
        assert info["version"] == "535.104.05" and info["signed"] is True, (name, info)
    (tmp_path / "broken.ko.gz").write_bytes(gzip.compress(body, 1)[:4096])
    assert "unreadable" in _module_info(ProbeContext(host=Host()), str(tmp_path / "broken.ko.gz"))["note"]


# -- regular expressions ----------------------------------------------------------------------------------------------

def _all_patterns():
    pats = {}
    seen = set()
    for pkg_name in ("dl_doctor", "dl_doctor.checks", "dl_doctor.compat_matrix", "dl_doctor.reports"):
        pkg = importlib.import_module(pkg_name)
        mods = [pkg] + [importlib.import_module(m.name) for m in pkgutil.walk_packages(pkg.__path__, pkg_name + ".")
                        if not m.name.endswith("__main__")]
        for mod in mods:
            if mod.__name__ in seen:
                continue
            seen.add(mod.__name__)
            for key, value in vars(mod).items():
                items = value if isinstance(value, (list, tuple)) else [value]
                for i, item in enumerate(items):
                    pat = item[0] if isinstance(item, tuple) and item else item
                    if isinstance(pat, re.Pattern):
                        pats[f"{mod.__name__}.{key}" + (f"[{i}]" if items is value else "")] = pat
    return pats


PATTERNS = _all_patterns()
UNITS = ["a", "-a", "a.", "a:", " ", "0", "0.", "a=", "/", "a/", "\\", '"', "'", "\0", "1,", "a-", ":/", "@", "\n",
         " :", "a\n", "?a=", "token ", "-----BEGIN PRIVATE KEY-----", "mysql -p", "https://", "cuda: "]


def _time(pattern: re.Pattern, text) -> float:
    start = time.perf_counter()
    for _ in pattern.finditer(text):
        pass
    return time.perf_counter() - start


def _input(pattern: re.Pattern, unit: str, size: int):
    text = (unit * (size // len(unit) + 1))[:size]
    return text.encode("utf-8", "surrogatepass") if isinstance(pattern.pattern, bytes) else text


def test_the_pattern_census_finds_the_patterns():
    assert len(PATTERNS) > 50
    assert "dl_doctor.redact._ALWAYS[0]" in PATTERNS and "dl_doctor.probes.python_envs.static._VERSION_PY_LINE" in PATTERNS


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_every_pattern_is_linear_on_1_mib_of_adversarial_input(name):
    """Quadratic backtracking on 1 MiB takes minutes; linear takes well under a second. The slowest adversarial
    unit at 64 KiB is then run at 1 MiB: 16 times the input must cost far less than 256 times the time."""
    pattern = PATTERNS[name]
    worst_unit, worst = max(((u, _time(pattern, _input(pattern, u, 1 << 16))) for u in UNITS), key=lambda x: x[1])
    big = _time(pattern, _input(pattern, worst_unit, 1 << 20))
    assert big < 2.0 or big < 64 * worst, (name, repr(worst_unit), worst, big)


@pytest.mark.slow
@pytest.mark.parametrize("unit", ["-a", "a.", "a-", "a:", "token ", "?a=&", "https://x@", "/home/a"])
def test_redaction_of_1_mib_is_linear(unit):
    from dl_doctor.redact import Redactor

    def fresh():  # a new Redactor each time: each remembers the strings it has already redacted
        return Redactor(extended=True, hostnames=["box"], usernames=["alice"]).text

    small = (unit * ((1 << 18) // len(unit) + 1))[: 1 << 18]
    big = (unit * ((1 << 20) // len(unit) + 1))[: 1 << 20]
    t_small = min(_timed(fresh(), small) for _ in range(2))
    t_big = _timed(fresh(), big)
    assert t_big < 8 * t_small + 0.5, (unit, t_small, t_big)  # 4x the input: linear ~4x, quadratic ~16x


def _timed(func, arg) -> float:
    start = time.perf_counter()
    func(arg)
    return time.perf_counter() - start


def test_version_py_parser_is_linear_and_still_reads_torch():
    from dl_doctor.probes.python_envs import parse_version_py

    start = time.perf_counter()
    assert parse_version_py("cuda:" + " " * 65536) == {}
    assert parse_version_py("cuda: " + "x " * 500000 + "\n") == {}
    assert time.perf_counter() - start < 2
    text = "__version__ = '2.4.0+cu124'\ndebug = False\ncuda: Optional[str] = '12.4'\ngit_version = 'e4ee3be4'\nhip = None\n"
    assert parse_version_py(text) == {"__version__": "2.4.0+cu124", "cuda": "12.4", "git_version": "e4ee3be4"}
    assert parse_version_py("cuda = None\n") == {"cuda": None}


def test_a_bad_file_costs_only_its_own_facts_with_the_reason_in_probe_errors(run_cli, tmp_path):
    root = tmp_path / "root"
    build_tree(root, {
        "etc/os-release": UBUNTU2204_OS_RELEASE,
        "boot/vmlinuz-6.1.0-1": "",
        "lib/modules/6.1.0-1/updates/dkms/nvidia.ko.gz": b"\x1f\x8b\x08\x00corrupt" + b"\0" * 64,
        "etc/docker/daemon.json": '{"runtimes": 5}',
        "usr/bin/dockerd": "",
        "usr/local/cuda-12.4/version.json": '["not", "an", "object"]',
        "usr/local/cuda-12.4/bin/nvcc": "",
        "proc/meminfo": "MemTotal:       ²²² kB\nMemAvailable: " + "9" * 5000 + " kB\n",
    })
    r = run_cli("run", "--sysroot", str(root), "--json", "-", "--html", str(tmp_path / "r.html"))
    assert r.returncode in (0, 1), r.stderr
    report = json.loads(r.stdout)
    inputs = {e["probe"]: e["error"] for e in report["probe_errors"] if e["kind"] == "input"}
    assert "unreadable module" in inputs["kmod"] and "daemon.json" in inputs["gpu_services"]
    assert "version.json" in inputs["cuda_toolkits"]
    assert not [e for e in report["probe_errors"] if e["kind"] == "exception"]
    for probe in ("kmod", "gpu_services", "cuda_toolkits", "memory"):
        assert probe in report["facts"], probe
