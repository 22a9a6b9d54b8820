"""Hostile input and a hostile local user (issue: security and hardening).

Each test here reproduces one way main used to fail as a root run facing files other people control: running their
code, writing outside its target, hanging, or losing the report. Tests that need root (chown to another uid, a mount
namespace) skip cleanly without it.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from dl_doctor.host import trust
from dl_doctor.host import Host, NotARegularFile, UntrustedCommand
from dl_doctor.host.output import OutputRefused, clean_stale_temporaries, prune_reports, reserve_unique, write_file
from conftest import FIXTURES

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
OTHER_UID = 4242  # no passwd entry needed: ownership is a number
needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root (to give files to another uid)")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _open_dir(prefix: str) -> Path:
    """A directory every user can traverse (pytest's tmp_path is 0700 root: another uid could not run from it)."""
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    d.chmod(0o755)
    return d


def _planted_python(venv: Path, marker: Path, uid: int = OTHER_UID) -> Path:
    """An executable `python` that records who ran it, owned (with its venv) by ``uid``."""
    (venv / "bin").mkdir(parents=True)
    (venv / "lib/python3.11/site-packages").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.11.7\n")
    py = venv / "bin/python"
    py.write_text(f"#!/bin/sh\nid -u > {marker}\nenv > {marker}.env\nexit 1\n")
    py.chmod(0o755)
    for p in [venv, *venv.rglob("*")]:
        os.lchown(p, uid, uid)
    return py


# -- the trust rule ---------------------------------------------------------------------------------------------------

@needs_root
def test_trust_refuses_a_program_another_user_owns_or_can_change():
    base = _open_dir("dld-trust-")
    try:
        ours = base / "ours"
        ours.write_text("#!/bin/sh\n")
        ours.chmod(0o755)
        assert trust.check([str(ours)]).allowed

        theirs = base / "theirs"
        theirs.write_text("#!/bin/sh\n")
        os.chown(theirs, OTHER_UID, OTHER_UID)
        verdict = trust.check([str(theirs)])
        assert not verdict.allowed and f"owned by uid {OTHER_UID}" in verdict.reason
        assert verdict.owners == {OTHER_UID}

        # root's file in a directory another user can write: they could swap it
        shared = base / "shared"
        shared.mkdir()
        shared.chmod(0o777)
        prog = shared / "prog"
        prog.write_text("#!/bin/sh\n")
        verdict = trust.check([str(prog)])
        assert not verdict.allowed and "writable by every user" in verdict.reason
        # ... unless the directory is sticky (like /tmp): others cannot rename what they do not own there
        shared.chmod(0o1777)
        assert trust.check([str(prog)]).allowed

        group = base / "group"
        group.mkdir()
        group.chmod(0o775)
        os.chown(group, 0, 50)
        (group / "prog").write_text("")
        assert "writable by group 50" in trust.check([str(group / "prog")]).reason

        # a symlink is followed: a root-owned link to another user's file is that user's file
        link = base / "link"
        link.symlink_to(theirs)
        assert not trust.check([str(link)]).allowed
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


@needs_root
def test_trust_covers_what_an_interpreter_runs_at_start_up():
    base = _open_dir("dld-startup-")
    try:
        site = base / "env/lib/python3.11/site-packages"
        site.mkdir(parents=True)
        (site / "ok.pth").write_text("/some/path\n")
        (site / "hook.pth").write_text("import _evil_hook\n")
        (site / "_evil_hook.py").write_text("print('pwned')\n")
        host = Host()
        paths = trust.python_startup_paths(host, str(base / "env"), [str(site)])
        assert str(site / "hook.pth") in paths and str(site / "_evil_hook.py") in paths
        prog = Path(sys.executable).resolve()
        assert trust.check([str(prog), *paths]).allowed
        os.chown(site / "_evil_hook.py", OTHER_UID, OTHER_UID)
        verdict = trust.check([str(prog), *paths])
        assert not verdict.allowed and "_evil_hook.py" in verdict.reason
        (site / "sitecustomize.py").write_text("")
        assert str(site / "sitecustomize.py") in trust.python_startup_paths(host, None, [str(site)])
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


def test_trust_rule_applies_only_to_root_and_lets_the_user_choose():
    assert trust.decide(["/nonexistent/x"], euid=1000).allowed  # not root: a user runs what they run
    named = trust.decide(["/nonexistent/x"], euid=0, requested=True)
    assert named.allowed and "named with --python" in named.reason


def test_children_get_a_scrubbed_environment():
    env = trust.scrubbed_environ({"PATH": "/bin", "HF_TOKEN": "s", "AWS_SECRET_ACCESS_KEY": "s", "PYTHONPATH": "/p",
                                  "LD_LIBRARY_PATH": "/l", "CUDA_HOME": "/c", "RANDOM_THING": "x",
                                  "NCCL_SOCKET_IFNAME": "eth0", "CONDA_PREFIX": "/c"}, home="/home/u", user="u")
    assert env == {"PATH": "/bin", "PYTHONPATH": "/p", "LD_LIBRARY_PATH": "/l", "CUDA_HOME": "/c",
                   "NCCL_SOCKET_IFNAME": "eth0", "CONDA_PREFIX": "/c", "HOME": "/home/u", "USER": "u", "LOGNAME": "u"}


@needs_root
def test_a_root_run_never_executes_a_planted_interpreter(run_cli):
    """A user's ~/.venv/bin/python found by discovery is inspected statically, never run as root."""
    home = _open_dir("dld-home-")
    marker = home / ".venv" / "ran"  # in the venv: the owner may write there
    try:
        _planted_python(home / ".venv", marker)
        r = run_cli("run", "--json", "-", "--only", "DLD-PY-001", env={"HOME": str(home), "HF_TOKEN": "zz9secret42"})
        assert r.returncode in (0, 1), r.stderr
        assert not marker.exists(), "the planted interpreter was executed by a root run"
        report = json.loads(r.stdout)
        env = next(e for e in report["facts"]["python_envs"]["environments"] if e["prefix"] == str(home / ".venv"))
        assert "not run as root" in env["live"]["skipped"] and f"uid {OTHER_UID}" in env["live"]["skipped"]
        assert env["python_version"] == "3.11.7"  # still inspected from its files

        # --run-as-owner: run as that user instead (live facts kept, no root, no secrets)
        r = run_cli("run", "--json", "-", "--only", "DLD-PY-001", "--run-as-owner",
                    env={"HOME": str(home), "HF_TOKEN": "zz9secret42"})
        assert r.returncode in (0, 1), r.stderr
        assert marker.read_text().strip() == str(OTHER_UID)
        child_env = (home / ".venv" / "ran.env").read_text()
        assert "zz9secret42" not in child_env and "HF_TOKEN" not in child_env
    finally:
        subprocess.run(["rm", "-rf", str(home)], check=False)


def _can_unshare() -> bool:
    if not IS_ROOT:
        return False
    try:
        return subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True,
                              timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _can_unshare(), reason="needs root and a private mount namespace (unshare -m)")
def test_cross_user_in_a_private_mount_namespace_over_home(run_cli, tmp_path):
    """The real layout: /home/mallory/.venv/bin/python owned by mallory, discovered by the scan of /home."""
    script = tmp_path / "inner.sh"
    out = _open_dir("dld-ns-")
    script.write_text(textwrap.dedent(f"""\
        set -e
        mount -t tmpfs -o mode=0755 none /home
        mkdir -p /home/mallory/.venv/bin /home/mallory/.venv/lib/python3.11/site-packages
        printf 'home = /usr/bin\\nversion = 3.11.7\\n' > /home/mallory/.venv/pyvenv.cfg
        printf '#!/bin/sh\\nid -u > {out}/ran\\n' > /home/mallory/.venv/bin/python
        chmod 755 /home/mallory/.venv/bin/python
        chown -R {OTHER_UID}:{OTHER_UID} /home/mallory
        "$@" || true
        """))
    try:
        proc = run_cli("run", "--json", f"{out}/report.json", "--html", "/dev/null", "--only", "DLD-PY-001", "-q",
                       prefix=["unshare", "-m", "--propagation", "private", "sh", str(script)], timeout=180)
        assert proc.returncode == 0, proc.stderr
        assert not (out / "ran").exists()
        report = json.loads((out / "report.json").read_text())
        env = next(e for e in report["facts"]["python_envs"]["environments"]
                   if e["prefix"] == "/home/mallory/.venv")
        assert "not run as root" in env["live"]["skipped"]
    finally:
        subprocess.run(["rm", "-rf", str(out)], check=False)


def test_host_run_keeps_bounded_output_and_kills_the_whole_group():
    host = Host(command_timeout=1.0)
    start = time.monotonic()
    r = host.run(["sh", "-c", "yes | head -c 20000000; sleep 30 & wait"])
    assert r.timed_out and time.monotonic() - start < 5
    assert len(r.stdout) == 4 * 1024 * 1024
    assert "output beyond" in host.commands[-1].error


@needs_root
def test_host_run_raises_untrusted_for_another_users_program():
    base = _open_dir("dld-run-")
    try:
        prog = base / "prog"
        prog.write_text("#!/bin/sh\necho hi\n")
        prog.chmod(0o755)
        os.chown(prog, OTHER_UID, OTHER_UID)
        with pytest.raises(UntrustedCommand) as err:
            Host().run([str(prog)])
        assert f"uid {OTHER_UID}" in err.value.reason
        assert Host().run([str(prog)], requested=True).stdout == "hi\n"
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


# -- safe output ------------------------------------------------------------------------------------------------------

def test_outputs_never_replace_devices_or_follow_links(run_cli, tmp_path):
    facts = str(FIXTURES / "snapshots" / "g5_ubuntu2204.json")
    r = run_cli("check", facts, "--html", "/dev/null", "-q")
    assert r.returncode in (0, 1), r.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / "report.html"
    link.symlink_to(victim)
    r = run_cli("check", facts, "--html", str(link), "-q")
    assert r.returncode == 2
    assert "is a symbolic link" in r.stderr and victim.read_text() == "precious\n" and link.is_symlink()

    (tmp_path / "adir").mkdir()
    r = run_cli("check", facts, "--html", str(tmp_path / "adir"), "-q")
    assert r.returncode == 2 and "is a directory" in r.stderr

    # bundle -o onto a planted link: refused, the link's target untouched
    (tmp_path / "adir" / "usr").mkdir()
    r = run_cli("bundle", "--sysroot", str(tmp_path / "adir"), "-o", str(link), "-q")
    assert r.returncode == 2 and "symbolic link" in r.stderr and victim.read_text() == "precious\n"


def test_pipelines_write_through_stdout_and_fifos(run_cli, tmp_path):
    facts = str(FIXTURES / "snapshots" / "g5_ubuntu2204.json")
    proc = run_cli("check", facts, "--json", "/dev/stdout", "--html", "/dev/null", "-q", timeout=60)
    assert proc.returncode in (0, 1), proc.stderr
    assert json.loads(proc.stdout[: proc.stdout.rindex("}") + 1])["tool"]["name"] == "dl-doctor"

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = {}

    def reader():
        with open(fifo, encoding="utf-8") as fh:
            got["text"] = fh.read()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    time.sleep(0.1)
    assert write_file(str(fifo), "through the pipe\n") == "written through"
    t.join(5)
    assert got["text"] == "through the pipe\n" and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    # a FIFO nobody reads: refused at once, never a hang
    lonely = tmp_path / "lonely"
    os.mkfifo(lonely)
    with pytest.raises(OutputRefused, match="nobody reads"):
        write_file(str(lonely), "x")


def test_modes_respect_the_umask_and_an_existing_file_does_not_pass_on_its_mode(tmp_path):
    private = tmp_path / "r.json"
    write_file(str(private), "{}", private=True)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600 & ~_umask()
    public = tmp_path / "status"
    write_file(str(public), "ok\n", private=False)
    assert stat.S_IMODE(public.stat().st_mode) == 0o644 & ~_umask()
    old = os.umask(0o077)
    try:
        write_file(str(tmp_path / "strict"), "x", private=False)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "strict").stat().st_mode) == 0o600
    replaced = tmp_path / "replaced"
    replaced.write_text("old")
    replaced.chmod(0o666)
    write_file(str(replaced), "new", private=True)
    assert replaced.read_text() == "new" and stat.S_IMODE(replaced.stat().st_mode) == 0o600 & ~_umask()


def test_two_runs_in_the_same_second_get_different_names_and_old_ones_are_pruned(tmp_path):
    base = str(tmp_path / "dl-doctor-host-20261130T120000Z")
    first, second = reserve_unique(base, ".json"), reserve_unique(base, ".json")
    assert first == base and second == base + "-2"
    for stamp in ("20261101T000000Z", "20261102T000000Z", "20261103T000000Z", "20261104T000000Z"):
        for ext in ("json", "html"):
            (tmp_path / f"dl-doctor-h-{stamp}.{ext}").write_text("{}")
    (tmp_path / "dl-doctor-h-20261101T000000Z.notes").write_text("mine")
    removed = prune_reports(str(tmp_path), keep=3)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(removed) == 6
    assert {n for n in names if n.endswith((".json", ".html"))} == {
        "dl-doctor-host-20261130T120000Z.json", "dl-doctor-host-20261130T120000Z-2.json",
        "dl-doctor-h-20261104T000000Z.json", "dl-doctor-h-20261104T000000Z.html"}
    assert (tmp_path / "dl-doctor-h-20261101T000000Z.notes").exists()


def test_run_writes_unique_default_names_in_one_second(run_cli, tmp_path):
    facts = str(FIXTURES / "snapshots" / "g5_ubuntu2204.json")
    out = tmp_path / "reports"
    for _ in range(3):
        assert run_cli("check", facts, "-q", outdir=out).returncode in (0, 1)
    # three runs (some in the same second) left three pairs, none overwritten
    assert len(list(out.glob("*.json"))) == 3 and len(list(out.glob("*.html"))) == 3
    r = run_cli("check", facts, "-q", "--keep-reports", "2", outdir=out)
    assert r.returncode in (0, 1)
    assert len(list(out.glob("*.json"))) == 2 and len(list(out.glob("*.html"))) == 2


def test_a_killed_runs_temporaries_are_removed(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f".report.json.dl-doctor-tmp-{dead.pid}-deadbeef"
    stale.write_text("half")
    live = tmp_path / f".report.json.dl-doctor-tmp-{os.getpid()}-cafebabe"
    live.write_text("mine, in progress")
    write_file(str(tmp_path / "report.json"), "{}")
    assert not stale.exists() and live.exists()
    assert clean_stale_temporaries(str(tmp_path)) == []


def test_a_kill_minus_nine_during_a_write_leaves_nothing_that_survives_the_next_run(tmp_path):
    code = ("import os, sys; from dl_doctor.host import output\n"
            "real = output._write_fd\n"
            "def slow(fd, data):\n    real(fd, data[:10]); os.kill(os.getpid(), 9)\n"
            "output._write_fd = slow\noutput.write_file(%r, 'x' * 1000)\n") % (str(tmp_path / "r.json"),)
    subprocess.run([sys.executable, "-c", code], timeout=30)
    assert [p.name for p in tmp_path.iterdir() if ".dl-doctor-tmp-" in p.name]
    write_file(str(tmp_path / "other.json"), "{}")
    assert not [p.name for p in tmp_path.iterdir() if ".dl-doctor-tmp-" in p.name]


# -- the login hook ---------------------------------------------------------------------------------------------------

def test_login_hook_stays_inside_the_image_it_is_installed_into(run_cli, tmp_path):
    image = tmp_path / "image"
    outside = tmp_path / "host-etc"
    (image / "etc/systemd").mkdir(parents=True)
    (image / "usr/local/bin").mkdir(parents=True)
    (image / "usr/local/bin/dl-doctor").write_text("")
    # absolute links inside the image, pointing where this host's own files would be
    (image / "etc/profile.d").symlink_to(f"{outside}/profile.d")
    (image / "etc/systemd/system").symlink_to("/etc/systemd/image-system")
    r = run_cli("install-login-hook", "--root", str(image), "--exe", "/usr/local/bin/dl-doctor")
    assert r.returncode == 0, r.stderr
    assert not outside.exists() and not Path("/etc/systemd/image-system").exists()
    assert (image / str(outside).lstrip("/") / "profile.d/dl-doctor.sh").is_file()
    assert (image / "etc/systemd/image-system/dl-doctor.service").is_file()
    assert (image / "etc/systemd/image-system/timers.target.wants/dl-doctor.timer").is_symlink()
    r = run_cli("uninstall-login-hook", "--root", str(image))
    assert r.returncode == 0, r.stderr
    assert not (image / "etc/systemd/image-system/dl-doctor.service").exists()
    assert not (image / str(outside).lstrip("/") / "profile.d/dl-doctor.sh").exists()


def test_login_hook_arguments_cannot_inject_into_the_unit(run_cli, tmp_path):
    image = tmp_path / "image"
    image.mkdir()
    r = run_cli("install-login-hook", "--root", str(image), "--exe", "/x", "--expect", "a.toml\nExecStartPre=/bin/evil")
    assert r.returncode == 2 and "control character" in r.stderr
    assert not (image / "etc/systemd/system/dl-doctor.service").exists()
    r = run_cli("install-login-hook", "--root", str(image), "--exe", "/x", "--expect", "/srv/100%/$HOME/e.toml")
    assert r.returncode == 0, r.stderr
    unit = (image / "etc/systemd/system/dl-doctor.service").read_text()
    assert '"--expect" /srv/100%%/$$HOME/e.toml' in unit.replace("--expect ", '"--expect" ')


def test_the_timer_unit_is_sandboxed_but_still_sees_the_hardware():
    from dl_doctor.integrations.login_hook import service_unit

    unit = service_unit("/usr/local/bin/dl-doctor", writable=["/var/lib/node_exporter/textfile"])
    lines = set(unit.splitlines())
    for want in ("ProtectSystem=strict", "ProtectHome=read-only", "PrivateTmp=yes", "NoNewPrivileges=yes",
                 "StateDirectory=dl-doctor", "ReadWritePaths=/var/lib/node_exporter/textfile"):
        assert want in lines, want
    for hides in ("PrivateDevices", "ProtectKernelLogs", "ProtectProc", "PrivateNetwork", "ProtectKernelModules"):
        assert not any(l.startswith(hides + "=") for l in lines), hides
    assert "--keep-reports 30" in unit


@pytest.mark.skipif(subprocess.run(["sh", "-c", "command -v systemd-analyze"], capture_output=True).returncode != 0,
                    reason="systemd-analyze is not installed")
def test_the_units_pass_systemd_analyze_verify(tmp_path):
    from dl_doctor.integrations.login_hook import service_unit, timer_unit

    exe = tmp_path / "dl-doctor"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    (tmp_path / "dl-doctor.service").write_text(service_unit(str(exe)))
    (tmp_path / "dl-doctor.timer").write_text(timer_unit(False))
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no", str(tmp_path / "dl-doctor.service"),
                           str(tmp_path / "dl-doctor.timer")], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0 and ("Failed to" in proc.stderr and "bus" in proc.stderr.lower()):
        pytest.skip(f"systemd-analyze cannot run here: {proc.stderr.strip()[:200]}")
    unknown = [l for l in proc.stderr.splitlines() if "Unknown" in l and "dl-doctor" in l]
    assert not unknown, proc.stderr


# -- smaller things ---------------------------------------------------------------------------------------------------

def test_a_live_interpreter_printing_the_wrong_shape_costs_only_its_own_facts(run_cli, tmp_path):
    for body, expect in (('echo "[1, 2]"', "not an object"), ("echo '{\"sys_path\": 5, \"version\": \"3.11.7\"}'", None),
                         ("echo '{{{{'", "unreadable output")):
        fake = tmp_path / "python3"
        fake.write_text(f"#!/bin/sh\n{body}\n")
        fake.chmod(0o755)
        r = run_cli("run", "--json", "-", "--no-env-scan", "--python", str(fake), "--only", "DLD-PY-001")
        assert r.returncode in (0, 1), r.stderr
        report = json.loads(r.stdout)
        assert not [e for e in report["probe_errors"] if e["probe"] == "python_envs"]
        env = next(e for e in report["facts"]["python_envs"]["environments"] if e.get("python") == str(fake))
        if expect:
            assert expect in env["live"]["error"]
        else:
            assert env["live"] == {"version": "3.11.7", "dropped_fields": ["sys_path"]}


def test_expect_from_writes_valid_toml_for_any_environment_name(run_cli, tmp_path):
    try:
        import tomllib  # type: ignore[import-not-found]
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib  # type: ignore[no-redef]
    from conftest import snapshot

    snap = snapshot(json.loads((FIXTURES / "checks" / "_p4d_python.json").read_text()))
    envs = snap["facts"]["python_envs"]["environments"]
    torch_env = next(e for e in envs if (e.get("frameworks") or {}).get("torch"))
    torch_env["name"] = "café 😀 \"quoted\" \\ env\x7f"
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps(snap))
    r = run_cli("expect", "--from", str(facts), "-o", str(tmp_path / "e.toml"))
    assert r.returncode == 0, r.stderr
    parsed = tomllib.loads((tmp_path / "e.toml").read_text(encoding="utf-8"))
    assert "café 😀 \"quoted\" \\ env\x7f" in parsed["environments"]
    r = run_cli("check", str(facts), "--expect", str(tmp_path / "e.toml"), "--only", "DLD-EXP-001", "--json", "-")
    statuses = {f["id"]: f["status"] for f in json.loads(r.stdout)["findings"]}
    assert r.returncode == 0 and statuses and set(statuses.values()) == {"pass"}, statuses


def test_the_metadata_endpoint_cannot_be_redirected_from_the_environment():
    root = Path(__file__).parents[2]
    sources = [p for d in ("doctor", "checks", "reports") for p in (root / d).rglob("*.py")]
    assert sources and not [p for p in sources if "DL_DOCTOR_IMDS" in p.read_text(encoding="utf-8")]


def test_timeout_help_says_which_probes_get_longer(run_cli):
    r = run_cli("run", "--help")
    assert "at least 60 s" in " ".join(r.stdout.split()) and "--sample-seconds" in r.stdout


@pytest.mark.skipif(not (IS_ROOT and Path("/run/systemd/system").is_dir()),
                    reason="needs root on a host booted with systemd (systemd-run)")
def test_a_sandboxed_run_gathers_the_same_facts(run_cli):
    """The unit's sandbox (ProtectSystem=strict, ProtectHome=read-only, PrivateTmp, NoNewPrivileges...) hides
    nothing dl-doctor reads: the same probes succeed with the same facts."""
    from dl_doctor.integrations.login_hook import SANDBOX

    props = [f"--property={line}" for line in SANDBOX.splitlines()]
    plain = run_cli("collect", "-o", "-", "--no-env-scan")
    boxed = run_cli("collect", "-o", "-", "--no-env-scan", timeout=180,
                    prefix=["systemd-run", "--wait", "--pipe", "--quiet", *props])
    assert plain.returncode == 0 and boxed.returncode == 0, boxed.stderr
    a, b = json.loads(plain.stdout), json.loads(boxed.stdout)
    assert {k: v["status"] for k, v in a["probes"].items()} == {k: v["status"] for k, v in b["probes"].items()}
    for probe in ("gpu_pci", "nvidia_driver", "kmod", "os", "kernel"):
        assert a["facts"].get(probe) == b["facts"].get(probe), probe


@needs_root
def test_verify_never_runs_another_users_active_environment_as_root_unless_named(run_cli):
    """VIRTUAL_ENV kept through `sudo -E` points at another user's venv: dl-doctor verify, as root, does not run it;
    named with --python it runs (the person chose it), and says so."""
    base = _open_dir("dld-verify-")
    try:
        marker = base / "ran"
        py = _planted_python(base / "venv", marker)
        env = {"VIRTUAL_ENV": str(base / "venv")}
        r = run_cli("verify", "--json", "-", "--dcgm-level", "0", env=env)
        f = {x["id"]: x for x in json.loads(r.stdout)["findings"]}
        assert r.returncode == 1 and not marker.exists()
        assert f["DLD-VER-001"]["status"] == "fail" and f"could not run {py}" in f["DLD-VER-001"]["message"]
        r = run_cli("verify", "--python", str(py), "--json", "-", "--dcgm-level", "0", env=env)
        assert marker.exists()  # named: it ran (and failed: it is not a Python)
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)
