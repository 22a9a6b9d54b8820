"""Outputs another user controls: a planted file, FIFO or socket at an output path, another user's output directory
or a link to one, `--keep-reports` among other users' files, and directories created under a careless umask.

Most of these need root, to hand files to another uid (OTHER_UID needs no passwd entry: ownership is a number).
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import set_access_acl
from dl_doctor.host.output import OutputRefused, prune_reports, reserve_unique, write_file

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
OTHER_UID = 1001
needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root (to give files to another uid)")


class _Umask:
    """Run a block under a given umask (the test process's own), restoring the old one after."""

    def __init__(self, mask: int):
        self.mask = mask

    def __enter__(self):
        self.old = os.umask(self.mask)

    def __exit__(self, *exc):
        os.umask(self.old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _give(path: Path, uid: int = OTHER_UID) -> Path:
    os.lchown(path, uid, uid)
    return path


def _reports(directory: Path, stamps, host: str = "h") -> list:
    made = []
    for stamp in stamps:
        for ext in ("json", "html"):
            p = directory / f"dl-doctor-{host}-{stamp}.{ext}"
            p.write_text("{}")
            made.append(p)
    return made


@pytest.fixture
def cli(run_cli):
    """The shared runner under ``umask`` (022 unless a test says), the output directory left to dl-doctor's default."""
    def run(*args: str, cwd: Path, umask: int = 0o022):
        return run_cli(*args, cwd=cwd, umask=umask, outdir=False)
    return run


def _error_lines(stderr: str) -> list:
    return [line for line in stderr.splitlines() if line.startswith("dl-doctor: ")]


# -- the target itself -------------------------------------------------------------------------------------------------

@needs_root
@pytest.mark.parametrize("private", [True, False])
def test_a_file_another_user_planted_at_the_output_path_is_refused_and_left_alone(tmp_path, private):
    planted = tmp_path / "r.json"
    planted.write_text("alice's\n")
    planted.chmod(0o666)
    _give(planted)
    with pytest.raises(OutputRefused, match=rf"owned by uid {OTHER_UID}\b.*not by this user"):
        write_file(str(planted), "root's report\n", private=private)
    assert planted.read_text() == "alice's\n" and os.lstat(planted).st_uid == OTHER_UID


@pytest.mark.parametrize("private, expected", [(True, 0o600), (False, 0o644)])
def test_an_own_file_is_replaced_with_dl_doctors_mode_not_its_old_one(tmp_path, private, expected):
    mine = tmp_path / "r.json"
    mine.write_text("old")
    mine.chmod(0o666)
    with _Umask(0o022):
        assert write_file(str(mine), "new", private=private) == "written"
    assert mine.read_text() == "new" and _mode(mine) == expected


@needs_root
def test_a_fifo_another_user_planted_is_refused_without_blocking_and_receives_nothing(tmp_path):
    fifo = tmp_path / "r.json"
    os.mkfifo(fifo, 0o666)
    _give(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # alice is listening
    outcome = {}

    def write():
        try:
            outcome["result"] = write_file(str(fifo), "root's whole report\n")
        except OutputRefused as exc:
            outcome["refused"] = str(exc)

    try:
        t = threading.Thread(target=write, daemon=True)
        t.start()
        t.join(10)
        assert not t.is_alive(), "write_file blocked on a planted FIFO"
        assert f"owned by uid {OTHER_UID}" in outcome.get("refused", ""), outcome
        try:
            got = os.read(reader, 4096)
        except BlockingIOError:
            got = b""
        assert got == b""
    finally:
        os.close(reader)


@needs_root
def test_a_socket_another_user_planted_is_refused_naming_its_owner(tmp_path):
    path = tmp_path / "s.json"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        _give(path)
        with pytest.raises(OutputRefused, match=f"owned by uid {OTHER_UID}"):
            write_file(str(path), "x")
    finally:
        sock.close()


def test_an_own_fifo_and_dev_stdout_are_still_written_through(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert write_file(str(fifo), "through\n") == "written through"
        assert os.read(reader, 100) == b"through\n"
    finally:
        os.close(reader)
    assert write_file("/dev/null", "x") == "written through"


# -- the output directory ----------------------------------------------------------------------------------------------

@needs_root
def test_another_users_output_directory_or_link_to_one_is_refused(tmp_path):
    archive = tmp_path / "archive"  # root's own reports
    archive.mkdir(mode=0o700)
    old = _reports(archive, ["20261101T000000Z"])
    alice = tmp_path / "alice"
    alice.mkdir()
    _give(alice)
    owned = alice / "owned"
    owned.mkdir()
    _give(owned)
    link = alice / "reports"
    link.symlink_to(archive)
    _give(link)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # world-writable, no sticky bit
    for directory, why in ((owned, f"owned by uid {OTHER_UID}"), (link, f"owned by uid {OTHER_UID}"),
                           (shared, "writable by every user")):
        with pytest.raises(OutputRefused, match=why):
            reserve_unique(str(directory / "dl-doctor-h-20261201T000000Z"), ".json")
        with pytest.raises(OutputRefused, match=why):
            prune_reports(str(directory), keep=0)
    assert all(p.exists() for p in old) and sorted(os.listdir(archive)) == sorted(p.name for p in old)
    assert os.listdir(owned) == [] and os.listdir(shared) == []


@needs_root
def test_a_link_on_the_way_inside_a_directory_another_user_controls_is_refused(tmp_path):
    archive = tmp_path / "archive"
    (archive / "reports").mkdir(parents=True)
    alice = tmp_path / "alice"
    alice.mkdir()
    _give(alice)
    (alice / "x").symlink_to(archive)  # root's link, but in alice's directory: she chose where it leads
    with pytest.raises(OutputRefused, match=rf"{alice}.*owned by uid {OTHER_UID}"):
        prune_reports(str(alice / "x" / "reports"), keep=0)


@needs_root
def test_a_sticky_world_writable_directory_and_a_new_name_in_it_are_fine(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    base = reserve_unique(str(tmp / "dl-doctor-h-20261201T000000Z"), ".json")
    assert write_file(base + ".json", "{}") == "written"
    assert os.lstat(base + ".json").st_uid == os.geteuid()


@needs_root
def test_keep_reports_prunes_only_this_users_regular_files(tmp_path):
    out = tmp_path / "reports"
    out.mkdir()
    ours = _reports(out, ["20261101T000000Z", "20261102T000000Z", "20261103T000000Z"])
    theirs = out / "dl-doctor-h-20261001T000000Z.json"
    theirs.write_text("alice's")
    _give(theirs)
    hard = out / "dl-doctor-h-20261002T000000Z.json"
    os.mkfifo(hard)
    removed = prune_reports(str(out), keep=1)
    assert sorted(removed) == sorted(str(p) for p in ours[:4])
    assert theirs.exists() and hard.exists() and all(p.exists() for p in ours[4:])


# -- end to end through the entry point --------------------------------------------------------------------------------

@needs_root
@pytest.mark.parametrize("command", [["run", "--html", "/dev/null", "-q", "--json"], ["collect", "-o"],
                                     ["bundle", "-q", "-o"]], ids=["report", "facts", "bundle"])
def test_a_planted_report_facts_or_bundle_target_is_one_line_and_exit_2(cli, tmp_path, command):
    tree = tmp_path / "sysroot"
    (tree / "usr").mkdir(parents=True)  # a root filesystem (an empty tree is refused as the wrong partition)
    planted = tmp_path / "r.json"
    planted.write_text("alice's\n")
    planted.chmod(0o666)
    _give(planted)
    r = cli(command[0], "--sysroot", str(tree), *command[1:], str(planted), cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    lines = _error_lines(r.stderr)
    assert len(lines) == 1 and str(planted) in lines[0] and f"owned by uid {OTHER_UID}" in lines[0], r.stderr
    assert planted.read_text() == "alice's\n"


@needs_root
def test_run_refuses_a_default_output_directory_linked_by_another_user(cli, tmp_path):
    """`sudo dl-doctor run` in alice's directory, where she linked ./dl-doctor-reports to root's archive."""
    tree = tmp_path / "sysroot"
    (tree / "usr").mkdir(parents=True)  # a root filesystem (an empty tree is refused as the wrong partition)
    archive = tmp_path / "archive"
    archive.mkdir(mode=0o700)
    old = _reports(archive, ["20261101T000000Z", "20261102T000000Z"])
    alice = tmp_path / "alice"
    alice.mkdir()
    _give(alice)
    (alice / "dl-doctor-reports").symlink_to(archive)
    _give(alice / "dl-doctor-reports")
    r = cli("run", "--sysroot", str(tree), "-q", "--keep-reports", "1", cwd=alice)
    assert r.returncode == 2, r.stderr
    lines = _error_lines(r.stderr)
    assert len(lines) == 1 and "dl-doctor-reports" in lines[0] and f"owned by uid {OTHER_UID}" in lines[0], r.stderr
    assert sorted(os.listdir(archive)) == sorted(p.name for p in old)


def test_run_under_umask_000_creates_no_world_writable_output_directory(cli, tmp_path):
    tree = tmp_path / "sysroot"
    (tree / "usr").mkdir(parents=True)  # a root filesystem (an empty tree is refused as the wrong partition)
    out = tmp_path / "new" / "reports"
    r = cli("run", "--sysroot", str(tree), "-q", "--output-dir", str(out), cwd=tmp_path, umask=0)
    assert r.returncode in (0, 1), r.stderr
    for d in (tmp_path / "new", out):
        assert _mode(d) & 0o022 == 0, oct(_mode(d))
    assert [p for p in out.iterdir() if _mode(p) & 0o077] == []


# -- the login hook ----------------------------------------------------------------------------------------------------

def test_install_login_hook_under_umask_000_creates_nothing_writable_by_others(cli, tmp_path):
    image = tmp_path / "image"
    image.mkdir()
    r = cli("install-login-hook", "--root", str(image), "--exe", "/usr/local/bin/dl-doctor", cwd=tmp_path, umask=0)
    assert r.returncode == 0, r.stderr
    made = [Path(d) / n for d, dirs, files in os.walk(image) for n in dirs + files]
    assert {p.relative_to(image).as_posix() for p in made} >= {
        "etc/profile.d/dl-doctor.sh", "etc/systemd/system/dl-doctor.service", "etc/systemd/system/dl-doctor.timer",
        "etc/systemd/system/timers.target.wants/dl-doctor.timer"}
    for p in made:
        if p.is_symlink():
            continue
        assert _mode(p) == (0o755 if p.is_dir() else 0o644), (p, oct(_mode(p)))


def test_install_login_hook_under_umask_077_still_installs_files_every_user_can_read(cli, tmp_path):
    image = tmp_path / "image"
    image.mkdir()
    r = cli("install-login-hook", "--root", str(image), "--no-systemd", cwd=tmp_path, umask=0o077)
    assert r.returncode == 0, r.stderr
    assert _mode(image / "etc/profile.d/dl-doctor.sh") == 0o644
    assert _mode(image / "etc/profile.d") == 0o755 and _mode(image / "etc") == 0o755


@needs_root
@pytest.mark.parametrize("kind", ["owned by another user", "world-writable"])
def test_run_refuses_an_output_dir_another_user_controls(cli, tmp_path, kind):
    tree = tmp_path / "sysroot"
    (tree / "usr").mkdir(parents=True)  # a root filesystem (an empty tree is refused as the wrong partition)
    out = tmp_path / "out"
    out.mkdir()
    if kind == "world-writable":
        out.chmod(0o777)
    else:
        _give(out)
    r = cli("run", "--sysroot", str(tree), "-q", "--output-dir", str(out), cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = _error_lines(r.stderr)
    why = f"owned by uid {OTHER_UID}" if kind != "world-writable" else "writable by every user"
    assert len(lines) == 1 and str(out) in lines[0] and why in lines[0], r.stderr
    assert os.listdir(out) == []


@needs_root
def test_run_refuses_an_output_dir_whose_acl_lets_another_user_write(cli, tmp_path):
    """Root's 0755 directory, but a POSIX ACL entry grants another user write: that user controls the archive."""
    tree = tmp_path / "sysroot"
    (tree / "usr").mkdir(parents=True)  # a root filesystem (an empty tree is refused as the wrong partition)
    out = tmp_path / "out"
    out.mkdir(mode=0o755)
    if not set_access_acl(out, OTHER_UID):
        pytest.skip("this file system has no POSIX ACLs")
    r = cli("run", "--sysroot", str(tree), "-q", "--output-dir", str(out), cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = _error_lines(r.stderr)
    assert len(lines) == 1 and f"uid {OTHER_UID} through its ACL" in lines[0], r.stderr
    assert os.listdir(out) == []
