"""One spawning path (doctor.spawn): what a hostile local user plants never runs as root (issue 23, items 1-4, 14).

Each test reproduces one attack that worked on main before the spawning path: the current directory on an
interpreter's module path, an empty PATH entry, an ACL that grants another user write, another user's symbolic link
swapped between the check and the exec, another user's library directory on PYTHONPATH, and secrets handed to a
child. Files "of another user" are made under /tmp as root with os.chown; tests that need root skip without it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from dl_doctor.host import spawn
from dl_doctor.host import trust
from dl_doctor.host import Host, UntrustedCommand
from conftest import set_access_acl

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
OTHER_UID = 4242
needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root (to give files to another uid)")


@pytest.fixture
def open_dir():
    """Directories under /tmp every user can traverse (tmp_path is root's 0700), removed afterwards."""
    made = []

    def make(prefix: str = "dld-spawn-") -> Path:
        d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
        d.chmod(0o755)
        made.append(d)
        return d

    yield make
    for d in made:
        subprocess.run(["rm", "-rf", str(d)], check=False)


def _script(path: Path, body: str, mode: int = 0o755) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(mode)
    return path


# -- 1. the current directory is never on an interpreter's module path -------------------------------------------

def test_an_interpreter_never_imports_the_current_directorys_modules(open_dir, monkeypatch):
    cwd = open_dir()
    marker = cwd / "imported"
    (cwd / "json.py").write_text(f"open({str(marker)!r}, 'w').write('pwned')\nfrom json import *\n")
    monkeypatch.chdir(cwd)
    result = Host().run_python(sys.executable, "import json, os, sys; print(json.dumps([os.getcwd(), sys.path]))")
    assert result.ok, result.stderr
    assert not marker.exists(), "the interpreter imported the current directory's json.py"
    where, path = json.loads(result.stdout)
    assert where == "/" and str(cwd) not in path and "" not in path


@needs_root
def test_sudo_collect_in_a_directory_another_user_writes_runs_none_of_their_modules(run_cli, open_dir, tmp_path):
    """The reported attack: `sudo dl-doctor collect --python /usr/bin/python3` started in another user's directory."""
    cwd = open_dir()
    os.chown(cwd, OTHER_UID, OTHER_UID)
    marker = cwd / "ran-as-root"
    for module in ("json", "site", "os", "encodings"):
        (cwd / f"{module}.py").write_text(f"open({str(marker)!r}, 'a').write({module!r})\n")
    python = sys.executable
    proc = run_cli("collect", "--python", python, "--no-env-scan", "-o", str(tmp_path / "facts.json"), cwd=cwd,
                   timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists(), marker.read_text()
    facts = json.loads((tmp_path / "facts.json").read_text())
    env = next(e for e in facts["facts"]["python_envs"]["environments"] if e.get("python") == python)
    assert env["live"]["executable"] and str(cwd) not in env["live"]["sys_path"]


def test_a_python_without_dash_I_is_run_with_dash_E_dash_s(open_dir):
    """Python 2.7 has no -I: it says so and exits 2, and is run again with -E -s (isolated as far as it can be)."""
    d = open_dir()
    log = d / "argv"
    old = _script(d / "python2.7", f'case "$1" in -I) echo "Unknown option: -I" >&2; exit 2;; esac\n'
                                   f'echo "$1 $2 $3" > {log}\necho ok\n')
    result = Host().run_python(str(old), "print(1)")
    assert result.ok and result.stdout.strip() == "ok"
    assert log.read_text().split() == ["-E", "-s", "-c"]


def test_the_prelude_keeps_the_sessions_trusted_module_path_and_user_site(tmp_path):
    """-I drops PYTHONPATH and the user site; the prelude adds them back in Python's order, so the live facts stay the
    person's (the user-site check needs them)."""
    extra = tmp_path / "extra"
    extra.mkdir()
    base = tmp_path / "userbase"
    user_site = base / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    user_site.mkdir(parents=True)
    python = os.path.realpath(sys.executable) if sys.prefix == sys.base_prefix else sys._base_executable
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(extra), "PYTHONUSERBASE": str(base), "HOME": str(tmp_path)}
    result = Host(environ_override=env).run_python(
        python, "import json, site, sys; print(json.dumps([site.ENABLE_USER_SITE, sys.path]))")
    assert result.ok, result.stderr
    enabled, path = json.loads(result.stdout)
    assert enabled is True and path[0] == str(extra)
    sites = [p for p in path if p.endswith(("site-packages", "dist-packages")) and p != str(user_site)]
    assert str(user_site) in path and (not sites or path.index(str(user_site)) < path.index(sites[0]))


# -- 2. programs are looked up only where root controls them -----------------------------------------------------

@pytest.mark.parametrize("path_value", [":/usr/bin", "/usr/bin:", "/usr/bin::/bin", ".:/usr/bin", "rel:/usr/bin"])
def test_an_empty_or_relative_path_entry_never_finds_the_current_directory(open_dir, monkeypatch, path_value):
    """The reported form is `scontrol` (or dcgmi, sshd...) planted in the current directory; a name no system
    directory holds stands for it here (a real scontrol may be installed in /usr/bin)."""
    name = "dld-planted-scontrol"
    cwd = open_dir()
    marker = cwd / "ran"
    _script(cwd / name, f"echo pwned > {marker}\n")
    (cwd / "rel").mkdir()
    _script(cwd / "rel" / name, f"echo pwned > {marker}\n")
    monkeypatch.chdir(cwd)
    host = Host(environ_override={"PATH": path_value})
    assert host.which(name) is None
    with pytest.raises(FileNotFoundError):
        host.run([name, "show", "node"])
    assert not marker.exists()
    assert all(d.startswith("/") for d in spawn.search_dirs(path_value, IS_ROOT))


@needs_root
def test_root_looks_up_only_in_trusted_directories(open_dir):
    good = open_dir("dld-optbin-")  # root's 0755: like /opt/slurm/bin
    _script(good / "scontrol", "echo from-opt\n")
    bad = open_dir("dld-userbin-")
    os.chown(bad, OTHER_UID, OTHER_UID)
    _script(bad / "dcgmi", "echo pwned\n")
    host = Host(environ_override={"PATH": f"{bad}:{good}:/usr/bin"})
    assert host.which("scontrol") == f"{good}/scontrol"
    assert host.run(["scontrol"]).stdout.strip() == "from-opt"
    assert host.which("dcgmi") is None
    assert str(bad) not in spawn.search_dirs(f"{bad}:{good}", True)
    assert spawn.search_dirs("", True)[-len(spawn.SAFE_DIRS):] == list(spawn.SAFE_DIRS)


def test_preflight_never_starts_a_dl_doctor_from_the_current_directory(open_dir, monkeypatch):
    from dl_doctor.integrations import preflight

    cwd = open_dir()
    _script(cwd / "dl-doctor", "echo pwned\n")
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("PATH", ":/nonexistent")
    command = preflight._doctor_command(None)
    assert command[0] != "dl-doctor" and not command[0].startswith(str(cwd))
    assert command[1:] == ["-m", "dl_doctor"]


# -- 3. ACLs and PYTHONPATH count as control ----------------------------------------------------------------------

@needs_root
def test_an_acl_that_grants_another_user_write_fails_the_trust_rule(open_dir):
    d = open_dir()
    prog = _script(d / "prog", "true\n")
    assert trust.check([str(prog)]).allowed
    if not set_access_acl(prog, OTHER_UID):
        pytest.skip("this file system has no POSIX ACLs")
    assert trust.acl_writers(str(prog)) == [f"uid {OTHER_UID}"]
    verdict = trust.check([str(prog)])
    assert not verdict.allowed and f"uid {OTHER_UID} through its ACL" in verdict.reason
    # the same on a directory on the way
    sub = d / "sub"
    sub.mkdir(mode=0o755)
    inner = _script(sub / "prog", "true\n")
    assert trust.check([str(inner)]).allowed
    set_access_acl(sub, OTHER_UID)
    assert "through its ACL" in trust.check([str(inner)]).reason
    with pytest.raises(UntrustedCommand):
        Host().run([str(inner)])


@needs_root
def test_a_mask_without_write_leaves_an_acl_harmless(open_dir):
    d = open_dir()
    prog = _script(d / "prog", "true\n")
    if not set_access_acl(prog, OTHER_UID, mask=5):
        pytest.skip("this file system has no POSIX ACLs")
    assert trust.acl_writers(str(prog)) == [] and trust.check([str(prog)]).allowed


@needs_root
def test_another_users_pythonpath_directory_is_withheld_and_recorded(open_dir, tmp_path):
    theirs = open_dir("dld-pp-")
    os.chown(theirs, OTHER_UID, OTHER_UID)
    marker = theirs / "imported"
    (theirs / "numpy.py").write_text(f"open({str(marker)!r}, 'w').write('pwned')\n")
    ours = tmp_path / "ours"
    ours.mkdir()
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{theirs}:{ours}", "LD_LIBRARY_PATH": f"{theirs}::/usr/lib",
           "LD_PRELOAD": f"{theirs}/libx.so"}
    result = Host(environ_override=env).run_python(
        sys.executable, "import json, os, sys\ntry:\n    import numpy\nexcept ImportError:\n    pass\n"
        "print(json.dumps([sys.path, os.environ.get('LD_LIBRARY_PATH'), os.environ.get('LD_PRELOAD')]))")
    assert result.ok, result.stderr
    path, ld, preload = json.loads(result.stdout)
    assert not marker.exists() and str(theirs) not in path and path[0] == str(ours)
    assert ld == "/usr/lib" and preload is None
    assert any(w.startswith(f"PYTHONPATH {theirs}: ") and f"uid {OTHER_UID}" in w for w in result.withheld)
    assert any(w.startswith("LD_LIBRARY_PATH: an empty entry") for w in result.withheld)
    assert any(w.startswith(f"LD_PRELOAD {theirs}/libx.so") for w in result.withheld)


@needs_root
def test_the_live_probe_says_what_the_session_path_would_have_added(run_cli, open_dir, tmp_path):
    theirs = open_dir("dld-pp-")
    os.chown(theirs, OTHER_UID, OTHER_UID)
    proc = run_cli("collect", "--python", sys.executable, "--no-env-scan", "-o", str(tmp_path / "facts.json"),
                   timeout=180, cwd=Path("/"), env={"PYTHONPATH": str(theirs), "LANG": None})
    assert proc.returncode == 0, proc.stderr
    facts = json.loads((tmp_path / "facts.json").read_text())
    env = next(e for e in facts["facts"]["python_envs"]["environments"] if e.get("python") == sys.executable)
    assert any(str(theirs) in w for w in env["live"]["withheld_env"])


# -- 4. symbolic links another user owns; the descriptor that was checked is the one executed ---------------------

@needs_root
def test_a_symlink_another_user_owns_fails_the_trust_rule(open_dir):
    sticky = open_dir("dld-sticky-")
    sticky.chmod(0o1777)
    link = sticky / "python3"
    link.symlink_to("/bin/true")
    assert trust.check([str(link)]).allowed  # root's own link in a sticky directory
    os.lchown(link, OTHER_UID, OTHER_UID)
    verdict = trust.check([str(link)])
    assert not verdict.allowed and "(symbolic link) is owned by uid 4242" in verdict.reason
    with pytest.raises(UntrustedCommand):
        Host().run([str(link)])


def test_what_runs_is_the_file_that_was_checked_even_if_the_link_is_swapped(open_dir):
    d = open_dir()
    good = _script(d / "good", "echo good\n")
    evil = _script(d / "evil", "echo evil\n")
    link = d / "prog"
    link.symlink_to(good)
    prepared = spawn.prepare([str(link)], {"PATH": "/usr/bin:/bin"}, euid=os.geteuid())
    try:
        link.unlink()
        link.symlink_to(evil)  # the swap, between the check and the exec
        proc = subprocess.run(prepared.argv, capture_output=True, text=True, timeout=30,
                              **spawn.popen_kwargs(prepared))
    finally:
        prepared.close()
    assert proc.stdout.strip() == "good"
    assert prepared.argv[0] == str(link)  # argv[0] is the name the caller gave


@needs_root
def test_a_script_whose_interpreter_another_user_controls_is_not_run(open_dir):
    d = open_dir()
    theirs = _script(d / "their-sh", "echo pwned\n")
    os.chown(theirs, OTHER_UID, OTHER_UID)
    prog = d / "tool"
    prog.write_text(f"#!{theirs}\necho hi\n")
    prog.chmod(0o755)
    with pytest.raises(UntrustedCommand) as info:
        Host().run([str(prog)])
    assert "its interpreter" in info.value.reason and f"uid {OTHER_UID}" in info.value.reason


# -- 14. nothing secret reaches a child, --run-as-owner included --------------------------------------------------

def test_children_get_no_proxy_credentials_channel_tokens_or_shell_start_up_files():
    env = trust.scrubbed_environ({
        "PATH": "/bin", "CONDA_PREFIX": "/opt/conda", "BASH_ENV": "/tmp/x", "ENV": "/tmp/y",
        "CONDA_PROXY_SERVERS_HTTPS": "http://user:hunter2@proxy:3128",
        "CONDA_CHANNELS": "https://conda.example.com/t/tk-0123456789abcdef0123/private",
        "CONDA_DEFAULT_ENV": "base", "NCCL_DEBUG": "INFO"})
    assert env == {"PATH": "/bin", "CONDA_PREFIX": "/opt/conda", "CONDA_DEFAULT_ENV": "base", "NCCL_DEBUG": "INFO"}


@needs_root
def test_run_as_owner_hands_no_secret_to_the_other_user(open_dir):
    home = open_dir("dld-owner-")
    venv = home / ".venv"
    (venv / "bin").mkdir(parents=True)
    marker = venv / "env"
    py = _script(venv / "bin" / "python", f"env > {marker}\nid -u >> {marker}\n")
    for p in (venv, venv / "bin", py):
        os.lchown(p, OTHER_UID, OTHER_UID)
    host = Host(run_as_owner=True, environ_override={
        "PATH": "/usr/bin:/bin", "CONDA_PROXY_SERVERS_HTTP": "http://u:pw9secret@proxy:3128",
        "CONDA_CHANNELS": "https://conda.example.com/t/tk-0123456789abcdef0123/private", "BASH_ENV": "/x"})
    host.run_python(str(py), "print(1)")
    seen = marker.read_text()
    assert seen.strip().endswith(str(OTHER_UID))
    assert "pw9secret" not in seen and "tk-0123456789abcdef0123" not in seen and "BASH_ENV" not in seen
    assert "PWD=/\n" in seen or "PWD" not in seen
