"""The loader simulation against what glibc really loads, on ELF files built with the C compiler."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dl_doctor.host import Host
from dl_doctor.readers.ldso import Loader, expand, ld_so_conf_dirs, parse_ld_so_cache

CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler to build test libraries")


def build(out: Path, name: str, source: str, soname: str = None, needed=(), rpath=None, runpath=None, libdirs=()):
    out.mkdir(parents=True, exist_ok=True)
    src = out / f"{name}.c"
    src.write_text(source)
    cmd = [CC, "-shared", "-fPIC", "-o", str(out / name), str(src), f"-Wl,-soname,{soname or name}"]
    for d in libdirs:
        cmd.append(f"-L{d}")
    for n in needed:
        cmd.append(f"-l:{n}")
    if rpath:
        cmd += ["-Wl,--disable-new-dtags", f"-Wl,-rpath,{rpath}"]
    if runpath:
        cmd += ["-Wl,--enable-new-dtags", f"-Wl,-rpath,{runpath}"]
    subprocess.run(cmd, check=True, capture_output=True)
    return out / name


@pytest.fixture
def libs(tmp_path):
    a, b, m = tmp_path / "a", tmp_path / "b", tmp_path / "m"
    build(a, "libleaf.so.1", "int leaf(void){return 1;}")
    build(b, "libleaf.so.1", "int leaf(void){return 2;}")
    # mid_rpath: DT_RPATH -> a ; mid_runpath: DT_RUNPATH -> a
    build(m, "libmid_rpath.so", "int leaf(void); int mid(void){return leaf();}", needed=["libleaf.so.1"],
          rpath="$ORIGIN/../a", libdirs=[a])
    build(m, "libmid_runpath.so", "int leaf(void); int mid(void){return leaf();}", needed=["libleaf.so.1"],
          runpath="$ORIGIN/../a", libdirs=[a])
    # plain needs leaf with no search path of its own; top carries RPATH to both m and a
    build(m, "libplain.so", "int leaf(void); int plain(void){return leaf();}", needed=["libleaf.so.1"], libdirs=[a])
    build(m, "libplain_runpath.so", "int leaf(void); int plain(void){return leaf();}", needed=["libleaf.so.1"],
          runpath="/nonexistent", libdirs=[a])
    build(m, "libtop.so", "int plain(void); int top(void){return plain();}", needed=["libplain.so"],
          rpath="$ORIGIN:$ORIGIN/../a", libdirs=[m])
    build(m, "libtop2.so", "int plain(void); int top(void){return plain();}", needed=["libplain_runpath.so"],
          rpath="$ORIGIN:$ORIGIN/../a", libdirs=[m])
    return tmp_path


def real_load(paths, ld_library_path, preload=()):
    """What glibc loads: ctypes.CDLL in a fresh interpreter, then /proc/self/maps."""
    code = ("import ctypes, json, sys\n"
            "for p in sys.argv[2:]: ctypes.CDLL(p)\n"
            "maps = [l.split()[-1] for l in open('/proc/self/maps') if '.so' in l]\n"
            "print(json.dumps(sorted(set(m for m in maps if sys.argv[1] in m))))\n")
    env = dict(os.environ, LD_LIBRARY_PATH=":".join(ld_library_path))
    out = subprocess.run([sys.executable, "-c", code, str(paths[0].parent.parent), *map(str, list(preload) + list(paths))],
                         capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout)


def simulated(paths, ld_library_path, preload=()):
    loader = Loader(Host(), ld_library_path=[str(p) for p in ld_library_path], executable=sys.executable)
    for p in list(preload) + list(paths):
        loader.load(str(p))
    return loader


@pytest.mark.parametrize("lib,ldpath,expected_dir", [
    ("libmid_rpath.so", ["b"], "a"),      # RPATH comes before LD_LIBRARY_PATH
    ("libmid_runpath.so", ["b"], "b"),    # RUNPATH comes after it
    ("libmid_runpath.so", [], "a"),       # ... and is used when LD_LIBRARY_PATH has nothing
    ("libtop.so", ["b"], "a"),            # the loader chain's RPATH applies to a requester without RUNPATH
    ("libtop2.so", ["b"], "b"),           # ... but not to one that has a RUNPATH of its own
])
def test_search_order_matches_glibc(libs, lib, ldpath, expected_dir):
    target = libs / "m" / lib
    ld = [libs / d for d in ldpath]
    real = [p for p in real_load([target], [str(p) for p in ld]) if p.endswith("libleaf.so.1")]
    sim = simulated([target], ld)
    assert real == [str(libs / expected_dir / "libleaf.so.1")]
    assert sim.by_soname["libleaf.so.1"].path == real[0]


def test_a_library_loaded_first_by_absolute_path_wins(libs):
    target = libs / "m" / "libmid_rpath.so"
    preload = [libs / "b" / "libleaf.so.1"]
    real = [p for p in real_load([target], [], preload=preload) if p.endswith("libleaf.so.1")]
    sim = simulated([target], [], preload=preload)
    assert real == [str(libs / "b" / "libleaf.so.1")]
    assert sim.by_soname["libleaf.so.1"].path == real[0] and sim.by_soname["libleaf.so.1"].via == "dlopen"


def test_sysroot_resolution_stays_in_the_tree(libs, tree):
    root = tree({"etc/ld.so.conf": "include /etc/ld.so.conf.d/*.conf\n/opt/extra\n",
                 "etc/ld.so.conf.d/cuda.conf": "/usr/local/cuda/lib64\n"})
    (root / "opt" / "extra").mkdir(parents=True)
    shutil.copy(libs / "b" / "libleaf.so.1", root / "opt" / "extra" / "libleaf.so.1")
    shutil.copy(libs / "m" / "libplain.so", root / "opt" / "libplain.so")
    host = Host(sysroot=str(root))
    assert ld_so_conf_dirs(host) == ["/usr/local/cuda/lib64", "/opt/extra"]
    loader = Loader(host)
    loader.load("/opt/libplain.so")
    # no cache file in the tree: the ld.so.conf directories stand in for it
    assert loader.by_soname["libleaf.so.1"].path == "/opt/extra/libleaf.so.1"
    assert loader.by_soname["libleaf.so.1"].via == "ld.so.cache"


def test_expand_origin():
    assert expand("$ORIGIN/../../nvidia/cudnn/lib", "/e/site-packages/torch/lib") == "/e/site-packages/nvidia/cudnn/lib"
    assert expand("${ORIGIN}", "/x/y") == "/x/y"


def test_parse_the_real_ld_so_cache():
    data = Path("/etc/ld.so.cache").read_bytes() if Path("/etc/ld.so.cache").exists() else b""
    if not data:
        pytest.skip("no /etc/ld.so.cache here")
    entries = parse_ld_so_cache(data)
    assert entries and any(name == "libc.so.6" for name, _ in entries)
    out = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True)
    if out.returncode == 0:
        expected = [l.split(" => ")[1].strip() for l in out.stdout.splitlines() if l.strip().startswith("libc.so.6 ")
                    and "x86-64" in l]
        assert [p for n, p in entries if n == "libc.so.6"][:1] == expected[:1]
    assert parse_ld_so_cache(b"garbage") is None
