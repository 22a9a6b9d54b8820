"""The environments the user really uses, found from the session (issue: every CUDA consumer, part 1), and discovery
bounded per owner, with priority, so that no user can blind the report (issue 23, item 8)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from conftest import build_tree


def _conda(prefix: str) -> dict:
    return {f"{prefix.lstrip('/')}/conda-meta/history": "", f"{prefix.lstrip('/')}/lib/python3.11/site-packages/.keep": ""}


def _venv(prefix: str) -> dict:
    return {f"{prefix.lstrip('/')}/pyvenv.cfg": "home = /usr/bin\nversion = 3.11.7\n",
            f"{prefix.lstrip('/')}/bin/python3": "", f"{prefix.lstrip('/')}/lib/python3.11/site-packages/.keep": ""}


def test_session_environments_are_found_first_and_marked_active(run_cli, tmp_path):
    environ = {"CONDA_PREFIX": "/data/odd/place/train", "CONDA_PREFIX_1": "/srv/mc",
               "CONDA_EXE": "/srv/mc/bin/conda", "PATH": "/work/proj/.venv/bin:/usr/bin:/bin", "HOME": "/home/ana"}
    spec = {"etc/os-release": 'ID=ubuntu\nVERSION_ID="22.04"\nPRETTY_NAME="Ubuntu 22.04"\n',
            "proc/self/environ": "\0".join(f"{k}={v}" for k, v in environ.items()) + "\0",
            **_conda("/data/odd/place/train"), **_conda("/srv/mc"), **_conda("/srv/mc/envs/eval"),
            **_venv("/work/proj/.venv"),
            "home/ana/.condarc": "channels:\n  - conda-forge\nenvs_dirs:\n  - /scratch/envs\n  - ~/more-envs\n",
            **_conda("/scratch/envs/big"), **_conda("/home/ana/more-envs/small"),
            "usr/local/share/jupyter/kernels/kenv/kernel.json": json.dumps(
                {"argv": ["/data/kenv/bin/python", "-m", "ipykernel_launcher", "-f", "{connection_file}"]}),
            **_venv("/data/kenv"),
            **_venv("/home/ana/.local/share/pipx/venvs/black")}
    root = build_tree(tmp_path / "root", spec)
    r = run_cli("run", "--sysroot", str(root), "--json", "-", "--html", str(tmp_path / "r.html"), "--only",
                "DLD-PY-001")
    assert r.returncode in (0, 1), r.stderr
    envs = json.loads(r.stdout)["facts"]["python_envs"]["environments"]
    by_prefix = {e["prefix"]: e for e in envs}
    # the activated ones first, marked active, with how they were found
    assert [e["prefix"] for e in envs[:2]] == ["/data/odd/place/train", "/work/proj/.venv"]
    assert by_prefix["/data/odd/place/train"]["active"] and by_prefix["/data/odd/place/train"]["found_by"] == ["CONDA_PREFIX"]
    assert by_prefix["/work/proj/.venv"]["active"] and "PATH" in by_prefix["/work/proj/.venv"]["found_by"]
    assert not by_prefix["/srv/mc"]["active"]
    assert set(by_prefix["/srv/mc"]["found_by"]) >= {"CONDA_PREFIX_1", "CONDA_EXE"}
    assert by_prefix["/srv/mc/envs/eval"]["found_by"] == ["CONDA_EXE envs/"]
    assert by_prefix["/scratch/envs/big"]["found_by"] == ["envs_dirs in /home/ana/.condarc"]
    assert "/home/ana/more-envs/small" in by_prefix
    assert by_prefix["/data/kenv"]["found_by"] == ["Jupyter kernel kenv"]
    assert by_prefix["/home/ana/.local/share/pipx/venvs/black"]["found_by"] == ["pipx"]
    html = (tmp_path / "r.html").read_text()
    assert html.index("/data/odd/place/train") < html.index("/srv/mc/envs/eval")


def test_condarc_envs_dirs_forms():
    from dl_doctor.probes.python_envs import _condarc_envs_dirs

    assert _condarc_envs_dirs("envs_dirs:\n  - /a\n  - '~/b'\n# c\npkgs_dirs:\n  - /p\n") == ["/a", "~/b"]
    assert _condarc_envs_dirs("envs_dirs: [/x, \"/y\"]\n") == ["/x", "/y"]
    assert _condarc_envs_dirs("envs_dirs:\n  - relative/path\n") == []


def test_an_unprivileged_run_keeps_the_environments_it_can_see(tree):
    """Not root: another user's home cannot be listed. The probe keeps the rest and says what root would add."""
    from dl_doctor.host import Host
    from dl_doctor.probes import ProbeContext
    from dl_doctor.probes.python_envs import python_envs_probe

    root = tree({"etc/os-release": "ID=ubuntu\n", **_venv("/home/ana/work/.venv"), **_venv("/home/bob/.venv"),
                 "root/.conda/environments.txt": "/opt/x\n"})

    class Unprivileged(Host):
        def listdir(self, path):
            if path.startswith(("/root", "/home/bob")):
                raise PermissionError(13, "Permission denied", path)
            return super().listdir(path)

        def scan_names(self, path, limit):
            if path.startswith(("/root", "/home/bob")):
                raise PermissionError(13, "Permission denied", path)
            return super().scan_names(path, limit)

        def try_read(self, path, max_bytes=4 << 20):
            if path.startswith(("/root", "/home/bob")):
                raise PermissionError(13, "Permission denied", path)
            return super().try_read(path, max_bytes)

    ctx = ProbeContext(host=Unprivileged(sysroot=str(root)))
    facts = python_envs_probe.func(ctx)
    prefixes = [e["prefix"] for e in facts["environments"]]
    assert "/home/ana/work/.venv" in prefixes and "/home/bob/.venv" not in prefixes
    assert ctx.denials == ["the environments under /home/bob, /root"]


# -- discovery bounded per owner, with priority (issue 23, item 8) ---------------------------------------------

def _conda_envs(envs_dir: Path, count: int) -> None:
    """``count`` conda environments (each a directory with conda-meta/) under ``envs_dir``."""
    envs_dir.mkdir(parents=True, exist_ok=True)
    for n in range(count):
        os.mkdir(envs_dir / f"e{n:05d}")
        os.mkdir(envs_dir / f"e{n:05d}" / "conda-meta")


def _give(path: Path, uid: int) -> None:
    """Make ``path`` another user's (the tests run as root, so the whole tree is root's)."""
    os.chown(path, uid, uid)


@pytest.mark.slow  # 140,000 directories made and removed
def test_one_user_with_70000_environments_cannot_hide_roots(run_cli, tmp_path):
    """The reported attack: 70,000 directories under one user's ~/.conda/envs made the probe time out and the report
    list no environment at all. Now root's and the system's environments are found first, the other user's are
    cut at the entry cap, a third user keeps theirs, and the facts and the report say what was cut."""
    environ = {"PATH": "/usr/bin:/bin", "HOME": "/root"}
    spec = {"etc/os-release": 'ID=ubuntu\nVERSION_ID="22.04"\n',
            "proc/self/environ": "\0".join(f"{k}={v}" for k, v in environ.items()) + "\0",
            "usr/bin/python3": "", "usr/lib/python3.10/site-packages/.keep": "",
            **_conda("/opt/conda"), **_conda("/root/.conda/envs/root-train"),
            **_venv("/home/carol/proj/.venv")}
    root = build_tree(tmp_path / "root", spec)
    bob_envs = root / "home/bob/.conda/envs"
    _conda_envs(bob_envs, 70000)
    for path in (root / "home/bob", root / "home/bob/.conda", bob_envs):
        _give(path, 1001)
    for path in (root / "home/carol", root / "home/carol/proj"):
        _give(path, 1002)
    started = time.monotonic()
    try:
        r = run_cli("run", "--sysroot", str(root), "--json", "-", "--html", str(tmp_path / "r.html"), "--only",
                    "DLD-PY-015", timeout=300)
    finally:
        shutil.rmtree(bob_envs)  # not left for pytest to delete at the start of a later session
    assert time.monotonic() - started < 60
    assert r.returncode in (0, 1), r.stderr
    report = json.loads(r.stdout)
    facts = report["facts"]["python_envs"]
    prefixes = [e["prefix"] for e in facts["environments"]]
    assert {"/usr", "/opt/conda", "/root/.conda/envs/root-train", "/home/carol/proj/.venv"} <= set(prefixes)
    assert len(prefixes) == 32  # --env-limit's default: the rest are bob's, in his share
    owners = {o["uid"]: o for o in facts["discovery"]["owners"]}
    assert owners[0]["cut_reason"] is None and owners[0]["kept"] == owners[0]["found"]
    assert owners[1002] == {**owners[1002], "found": 1, "kept": 1, "cut_reason": None}
    bob = owners[1001]
    assert bob["cut_reason"] == "entry cap" and bob["cut_at"] == "/home/bob/.conda/envs"
    assert bob["entries_scanned"] <= 5000 and bob["found"] <= 5000 and bob["kept"] == 32 - 4
    assert facts["scan"]["truncated"]
    finding = next(f for f in report["findings"] if f["id"] == "DLD-PY-015")
    assert finding["status"] == "warn" and "uid 1001 (/home/bob)" in finding["message"]
    assert "/home/bob/.conda/envs" in finding["message"]
    line = "uid 1001 (/home/bob): stopped after 5,000 directory entries, in /home/bob/.conda/envs"
    assert line in (tmp_path / "r.html").read_text().replace("<wbr>", "")
    (tmp_path / "report.json").write_text(r.stdout)
    terminal = run_cli("check", str(tmp_path / "report.json"), "--only", "DLD-PY-015", "--no-color")
    assert "WARN" in terminal.stdout and line in " ".join(terminal.stdout.split())


def _live_ctx(**options):
    from dl_doctor.host import Host
    from dl_doctor.probes import ProbeContext

    return ProbeContext(host=Host(), options=options)


def _homes(tmp_path: Path, counts: dict) -> list:
    """One home per uid under ``tmp_path``, each with ``counts[uid]`` conda environments in ~/.conda/envs."""
    homes = []
    for uid, count in counts.items():
        home = tmp_path / f"home{uid}"
        _conda_envs(home / ".conda" / "envs", count)
        for path in (home, home / ".conda", home / ".conda" / "envs"):
            _give(path, uid)
        homes.append(str(home))
    return homes


def test_other_users_share_the_entry_cap_and_env_limit_in_turn(tmp_path):
    """Discovery roots as parameters, on the live host: root's home first and whole, then the other users in turn,
    each within the entry cap and a fair share of --env-limit."""
    from dl_doctor.probes.python_envs import discover

    homes = _homes(tmp_path, {0: 2, 1001: 300, 1002: 3, 1003: 12})
    envs, truncated, facts = discover(_live_ctx(), 16, entry_cap=50, homes=homes, conda_roots=[])
    by_owner = {o["uid"]: o for o in facts["owners"]}
    prefixes = [e["prefix"] for e in envs]
    assert len(envs) == 16 and truncated
    assert {f"{homes[0]}/.conda/envs/e00000", f"{homes[0]}/.conda/envs/e00001"} <= set(prefixes)
    assert all(f"{homes[2]}/.conda/envs/e{n:05d}" in prefixes for n in range(3))  # the small user keeps all three
    assert by_owner[1001] == {**by_owner[1001], "entries_scanned": 50, "found": 50, "cut_reason": "entry cap",
                              "cut_at": f"{homes[1]}/.conda/envs"}
    assert by_owner[1003]["found"] == 12 and by_owner[1003]["cut_reason"] == "env-limit share"
    # what is left after root's (its home, the system Pythons, dl-doctor's own) is shared: neither big user starves
    assert abs(by_owner[1001]["kept"] - by_owner[1003]["kept"]) <= 1 and by_owner[1003]["kept"] >= 2
    assert sum(o["kept"] for o in facts["owners"]) == 16


def test_a_slow_user_costs_only_their_own_time(tmp_path):
    """When discovery's time runs out in one user's slow home, what was found so far is kept, root's first, and the
    users it did not finish are marked cut by time."""
    from dl_doctor.host import Host
    from dl_doctor.probes import ProbeContext
    from dl_doctor.probes.python_envs import discover

    homes = _homes(tmp_path, {0: 1, 1001: 200, 1002: 2})
    slow = homes[1]

    class SlowHome(Host):
        def is_dir(self, path):
            if path.startswith(slow + "/"):
                time.sleep(0.01)
            return super().is_dir(path)

    started = time.monotonic()
    envs, truncated, facts = discover(ProbeContext(host=SlowHome()), 32, deadline=started + 1.0, homes=homes,
                                      conda_roots=[])
    assert time.monotonic() - started < 3
    by_owner = {o["uid"]: o for o in facts["owners"]}
    prefixes = [e["prefix"] for e in envs]
    assert f"{homes[0]}/.conda/envs/e00000" in prefixes and "/usr" in prefixes
    assert all(f"{homes[2]}/.conda/envs/e{n:05d}" in prefixes for n in range(2))  # round-robin: found beside bob
    assert facts["out_of_time"] and by_owner[1001]["cut_reason"] == "time" and truncated
    assert 0 < by_owner[1001]["found"] < 200 and by_owner[0]["cut_reason"] is None


def test_a_directory_that_hangs_costs_the_rest_of_the_scan_never_the_probe(tmp_path):
    """A call that never returns (a stuck network home): discovery gives up on the scan at its deadline and keeps
    what it found, root's first; the user it was scanning is cut by time."""
    import threading

    from dl_doctor.host import Host
    from dl_doctor.probes import ProbeContext
    from dl_doctor.probes.python_envs import discover

    homes = _homes(tmp_path, {0: 1, 1001: 5})
    release = threading.Event()

    class HungHome(Host):
        def scan_names(self, path, limit):
            if path.startswith(homes[1] + "/"):
                release.wait(30)
            return super().scan_names(path, limit)

    started = time.monotonic()
    try:
        envs, truncated, facts = discover(ProbeContext(host=HungHome()), 32, deadline=started + 1.0, homes=homes,
                                          conda_roots=[])
    finally:
        release.set()
    assert time.monotonic() - started < 3
    assert {f"{homes[0]}/.conda/envs/e00000", "/usr"} <= {e["prefix"] for e in envs}
    by_owner = {o["uid"]: o for o in facts["owners"]}
    assert facts["out_of_time"] and truncated
    assert by_owner[1001]["cut_reason"] == "time" and by_owner[0]["cut_reason"] is None


def test_a_huge_directory_is_never_listed_whole(tmp_path):
    from dl_doctor.host import Host

    big = tmp_path / "big"
    big.mkdir()
    for n in range(300):
        (big / f"d{n:03d}").mkdir()
    names, more = Host().scan_names(str(big), 100)
    assert len(names) == 100 and more and names == sorted(names)
    assert Host().scan_names(str(big), 300) == (sorted(os.listdir(big)), False)
    assert Host().scan_names(str(tmp_path / "absent"), 10) == ([], False)
    tree = Host(sysroot=str(tmp_path))
    assert tree.scan_names("/big", 5)[1] and len(tree.scan_names("/big", 5)[0]) == 5


def test_environments_not_inspected_in_time_are_kept_with_the_reason(tree):
    """The probe's own time box: an environment whose files hang (a stuck network home) is reported as not
    inspected when the probe's time is nearly up, instead of the engine dropping every environment."""
    from dl_doctor.host import Host
    from dl_doctor.probes import ProbeContext
    from dl_doctor.probes.python_envs import python_envs_probe

    root = tree({"etc/os-release": "ID=ubuntu\n", **_conda("/opt/conda"), **_conda("/home/bob/.conda/envs/stuck")})

    class StuckHome(Host):
        def listdir(self, path):
            if path.startswith("/home/bob/.conda/envs/stuck/"):
                time.sleep(5)
            return super().listdir(path)

    started = time.monotonic()
    facts = python_envs_probe.func(ProbeContext(host=StuckHome(sysroot=str(root)),
                                                options={"python_envs_timeout": 2.0}))
    assert time.monotonic() - started < 4
    by_prefix = {e["prefix"]: e for e in facts["environments"]}
    assert "error" not in by_prefix["/opt/conda"] and by_prefix["/opt/conda"]["site_packages"]
    assert by_prefix["/home/bob/.conda/envs/stuck"]["error"] == "not inspected: the probe's time ran out first"
    assert facts["discovery"]["not_inspected"] == 1


def test_the_session_comes_before_other_users_and_their_directories_in_opt_are_theirs(tree):
    """Priority under a small --env-limit: root's and the system's, then the active environment (even one in a
    user's home), then other users'; a user's directory inside root's /opt is counted in that user's share."""
    from dl_doctor.host import Host
    from dl_doctor.probes import ProbeContext
    from dl_doctor.probes.python_envs import discover

    environ = {"CONDA_PREFIX": "/home/bob/.conda/envs/e00007", "PATH": "/usr/bin:/bin", "HOME": "/root"}
    root = tree({"etc/os-release": "ID=ubuntu\n", "proc/self/environ": "\0".join(f"{k}={v}" for k, v in environ.items()),
                 "usr/bin/python3": "", **_conda("/opt/conda"), **_venv("/opt/bobtools/venv"),
                 **_venv("/home/alice/proj/.venv")})
    _conda_envs(root / "home/bob/.conda/envs", 20)
    for path in (root / "home/bob", root / "opt/bobtools"):
        _give(path, 1001)
    _give(root / "home/alice", 1002)
    envs, truncated, facts = discover(ProbeContext(host=Host(sysroot=str(root))), 3)
    assert [(e["prefix"], e["active"]) for e in envs] == [("/home/bob/.conda/envs/e00007", True), ("/usr", False),
                                                          ("/opt/conda", False)]
    by_owner = {o["uid"]: o for o in facts["owners"]}
    assert by_owner[0] == {**by_owner[0], "found": 2, "kept": 2, "cut_reason": None}
    assert by_owner[1001] == {**by_owner[1001], "where": "/home/bob", "found": 21, "kept": 1,
                              "cut_reason": "env-limit share"}
    assert by_owner[1002] == {**by_owner[1002], "found": 1, "kept": 0, "cut_reason": "env-limit share"}
    assert truncated
    envs, _, facts = discover(ProbeContext(host=Host(sysroot=str(root))), 32)
    assert "/opt/bobtools/venv" in [e["prefix"] for e in envs]


def test_hostile_condarc_and_environments_txt_cost_only_their_owner(tree):
    """A NUL byte or a relative path in a .condarc is skipped, and an environments.txt of 100,000 lines costs
    only that user's own share (what comes after it in their home is theirs to lose)."""
    from dl_doctor.host import Host
    from dl_doctor.probes import ProbeContext
    from dl_doctor.probes.python_envs import discover

    environ = {"HOME": "relative/home", "PATH": "/usr/bin:/bin"}
    root = tree({"etc/os-release": "ID=ubuntu\n", "proc/self/environ": "\0".join(f"{k}={v}" for k, v in environ.items()),
                 "usr/bin/python3": "", "etc/conda/condarc": "envs_dirs:\n  - /srv/a\x00b\n  - ~/envs\n",
                 **_conda("/home/bob/.conda/envs/ok"), "home/bob/.conda/environments.txt": "/nowhere\n" * 100000,
                 **_conda("/home/carol/.conda/envs/fine")})
    _give(root / "home/bob", 1001)
    _give(root / "home/carol", 1002)
    assert Host(sysroot=str(root)).scan_names("/srv/a\x00b", 10) == ([], False)
    envs, _, facts = discover(ProbeContext(host=Host(sysroot=str(root))), 32)
    assert {"/usr", "/home/bob/.conda/envs/ok", "/home/carol/.conda/envs/fine"} <= {e["prefix"] for e in envs}
    owners = {o["uid"]: o for o in facts["owners"]}
    assert owners[1001]["cut_reason"] == "entry cap" and owners[1001]["cut_at"] == "/home/bob/.conda/environments.txt"
    assert owners[1001]["entries_scanned"] == 5000 and owners[1002]["cut_reason"] is None
