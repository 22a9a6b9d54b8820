"""Support bundles: contents, manifest, redaction of planted secrets, and the round trip through `check`."""

import io
import json
import os
import stat
import tarfile

import pytest

import machines
from dl_doctor.host.capture import Capture
from dl_doctor.host import Host

TOKEN = "zz9TopSecretValue42"              # no recognisable format: only its variable's name gives it away
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GH_TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
PASSWORD = "hunter2-but-longer"
SECRETS = (TOKEN, AWS_SECRET, GH_TOKEN, PASSWORD)


def members(path):
    """{name inside the top directory: bytes} of a bundle."""
    out = {}
    with tarfile.open(path, "r:gz") as tar:
        tops = {m.name.split("/")[0] for m in tar}
        assert len(tops) == 1, tops  # one top-level directory: unpacking never spills
        for m in tar:
            assert m.isfile() and not m.name.startswith("/") and ".." not in m.name.split("/")
            out[m.name.split("/", 1)[1]] = tar.extractfile(m).read()
    return out


def assert_no_secret(files):
    for name, data in files.items():
        text = data.decode("utf-8", "replace")
        for secret in SECRETS:
            assert secret not in text, f"{secret!r} survived in {name}"


def _image_with_secrets():
    spec = machines.p4d_rhel8_healthy()
    spec["proc/self/environ"] = (b"PATH=/usr/local/bin:/usr/bin\0HOME=/home/ec2-user\0USER=ec2-user\0"
                                 + f"HF_TOKEN={TOKEN}\0AWS_SECRET_ACCESS_KEY={AWS_SECRET}\0".encode())
    spec["proc/cmdline"] = (spec["proc/cmdline"].decode().strip() + f" root_password={PASSWORD}\n").encode() \
        if isinstance(spec["proc/cmdline"], bytes) else spec["proc/cmdline"].strip() + f" root_password={PASSWORD}\n"
    # a file the probes read that repeats a secret without its name, and one with a GitHub token in a comment
    spec["etc/ld.so.conf.d/zz-vendor.conf"] = f"# licence {TOKEN}\n# fetched with {GH_TOKEN}\n/opt/vendor/lib\n"
    return spec


def test_sysroot_bundle_has_reports_facts_raw_files_and_a_manifest_and_no_secret(run_cli, tree, tmp_path):
    out = tmp_path / "ticket.tar.gz"
    result = run_cli("bundle", "--sysroot", str(tree(_image_with_secrets())), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert f"Bundle: {out} (" in result.stdout
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    files = members(out)
    assert {"manifest.json", "report.json", "report.html", "summary.md", "facts.json"} <= set(files)
    assert_no_secret(files)

    manifest = json.loads(files["manifest.json"])
    assert manifest["kind"] == "dl-doctor-bundle" and manifest["mode"] == "sysroot"
    assert set(manifest["contents"]) == set(files)
    by_path = {f["path"]: f for f in manifest["files"]}
    assert by_path["/etc/os-release"]["probe"] == "os"
    assert by_path["/etc/os-release"]["archived_as"] == "raw/files/etc/os-release"
    assert files["raw/files/etc/os-release"].startswith(b'NAME="Red Hat Enterprise Linux"')
    # the planted secrets were read by probes and are masked in the raw copies, not dropped
    environ = files["raw/files/proc/self/environ"].decode()
    assert "HF_TOKEN=[REDACTED]" in environ and "AWS_SECRET_ACCESS_KEY=[REDACTED]" in environ
    assert "USER=ec2-user" in environ
    assert "root_password=[REDACTED]" in files["raw/files/proc/cmdline"].decode()
    vendor = files["raw/files/etc/ld.so.conf.d/zz-vendor.conf"].decode()
    assert vendor == "# licence [REDACTED]\n# fetched with [REDACTED]\n/opt/vendor/lib\n"
    assert manifest["commands"] == []  # nothing is run under a sysroot
    assert manifest["redaction"]["redactions"] >= 5
    assert {"os", "kernel", "nvidia_driver"} <= set(manifest["probes"])
    assert all("duration_s" in p and "status" in p for p in manifest["probes"].values())

    report = json.loads(files["report.json"])
    facts = json.loads(files["facts.json"])
    assert facts["facts"]["environment"]["variables"]["HF_TOKEN"] == "[REDACTED]"
    assert report["summary"] == manifest["summary"]
    assert b"<html" in files["report.html"][:200].lower()


def test_bundle_round_trips_through_check(run_cli, tree, tmp_path):
    out = tmp_path / "b.tar.gz"
    assert run_cli("bundle", "--sysroot", str(tree(_image_with_secrets())), "-o", str(out), "-q").returncode == 0
    packed = json.loads(members(out)["report.json"])
    result = run_cli("check", str(out), "--json", "-")
    assert result.returncode == 0, result.stderr
    again = json.loads(result.stdout)
    assert {f["id"]: f["status"] for f in again["findings"]} == {f["id"]: f["status"] for f in packed["findings"]}
    assert again["run"]["options"]["facts_file"] == str(out)
    # and drift between a bundle and itself is none
    assert run_cli("diff", str(out), str(out)).returncode == 0


def test_live_bundle_records_commands_and_masks_secrets_they_print(run_cli, tmp_path):
    fake = tmp_path / "python-fake"
    # The child gets a scrubbed environment (doctor.trust): the secrets never reach it. What it prints of its own
    # (a token in a config it cats, say) is masked in the bundle.
    fake.write_text(f"#!/bin/sh\necho \"env=[$HF_TOKEN]\"\necho \"using {TOKEN}\"\necho \"key={PASSWORD}\" >&2\n"
                    f"exit 3\n")
    fake.chmod(0o755)
    out = tmp_path / "live.tar.gz"
    result = run_cli("bundle", "--no-env-scan", "--python", str(fake), "-o", str(out), "-q",
                     env={"HF_TOKEN": TOKEN, "MY_API_KEY": PASSWORD, "GITHUB_TOKEN": GH_TOKEN})
    assert result.returncode in (0, 1), result.stderr
    files = members(out)
    assert_no_secret(files)
    manifest = json.loads(files["manifest.json"])
    ran = [c for c in manifest["commands"] if c["argv"][0] == str(fake)]
    assert ran and ran[0]["returncode"] == 3 and ran[0]["timed_out"] is False
    assert ran[0]["probe"] == "python_envs"
    text = files[ran[0]["archived_as"]].decode()
    assert "# returncode: 3" in text
    assert "using [REDACTED]" in text and "key=[REDACTED]" in text
    assert "env=[]" in text


def test_redact_placeholders_agree_across_the_whole_bundle(run_cli, tree, tmp_path):
    out = tmp_path / "r.tar.gz"
    assert run_cli("bundle", "--sysroot", str(tree(machines.p4d_rhel8_healthy())), "-o", str(out), "--redact",
                   "-q").returncode == 0
    files = members(out)
    host = "ip-10-0-1-23"
    for name, data in files.items():
        assert host.encode() not in data, name
    report = json.loads(files["report.json"])
    placeholder = report["host"]["hostname"]
    assert placeholder.startswith("[HOST-")
    assert files["raw/files/proc/sys/kernel/hostname"].decode().strip() == placeholder
    assert json.loads(files["facts.json"])["facts"]["system"]["hostname"] == placeholder


def test_capture_records_timeouts_and_failures_with_durations():
    cap = Capture()
    host = Host(capture=cap, command_timeout=0.3)
    result = host.run(["sleep", "5"])
    assert result.timed_out
    with pytest.raises(OSError):
        host.run(["/nonexistent/program"])
    assert [c["timed_out"] for c in cap.commands] == [True, False]
    assert cap.commands[0]["error"] == "timed out after 0.3s" and 0.25 < cap.commands[0]["duration_s"] < 3
    assert "No such file" in cap.commands[1]["error"]


def test_capture_limits_each_file_and_the_total():
    cap = Capture(max_file_bytes=10, max_total_bytes=25)
    cap.file("/a", b"x" * 50)
    cap.file("/b", b"y" * 10)
    cap.file("/c", b"z" * 10)
    assert cap.files["/a"]["data"] == b"x" * 10 and cap.files["/a"]["truncated"]
    assert cap.files["/b"]["data"] == b"y" * 10
    assert cap.files["/c"].get("skipped") == "bundle size limit reached" and cap.total == 20


@pytest.mark.parametrize("make,message", [
    (lambda p: _tar(p, {"x/notes.txt": b"hi"}), "is a tar archive but not a dl-doctor bundle (no facts.json)"),
    (lambda p: _tar(p, {"x/facts.json": b"{nope"}), "facts.json in the bundle is not a JSON file"),
])
def test_check_rejects_a_bad_bundle_in_one_line(run_cli, tmp_path, make, message):
    path = tmp_path / "bad.tar.gz"
    make(path)
    result = run_cli("check", str(path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_bundle_to_a_missing_directory_is_exit_2_before_collecting(run_cli, tmp_path):
    result = run_cli("bundle", "-o", str(tmp_path / "no" / "such" / "b.tar.gz"))
    assert result.returncode == 2
    assert "is not a directory" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def _tar(path, entries):
    with tarfile.open(path, "w:gz") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
