"""The box's security posture: trees for each bad configuration and their hardened twins (through the installed CLI,
--sysroot), and the live listeners check against real sockets on loopback and on a non-loopback address in a network
namespace the test creates."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import build_tree

BASE = {"etc/os-release": 'ID=ubuntu\nVERSION_ID="22.04"\n',
        "etc/passwd": "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/bash\n",
        "home/alice/.keep": "", "usr/sbin/sshd": ""}
SEC = "DLD-SEC-001,DLD-SEC-002,DLD-SEC-003,DLD-SEC-004,DLD-SEC-005"


def _findings(run_cli, tmp_path, name, files):
    root = build_tree(tmp_path / name, {**BASE, **files})
    r = run_cli("run", "--sysroot", str(root), "--only", SEC, "--json", "-", "--fail-on", "never", timeout=300)
    assert r.returncode == 0, r.stderr
    return {f["id"]: f for f in json.loads(r.stdout)["findings"]}


SSHD_MAIN = ("Include /etc/ssh/sshd_config.d/*.conf\nPermitRootLogin yes\nPasswordAuthentication yes\n"
             "Match Address 10.0.0.0/8\n    PasswordAuthentication yes\n")


def test_sshd_root_and_passwords_fail_and_a_first_read_dropin_hardens_it(run_cli, tmp_path):
    f = _findings(run_cli, tmp_path, "bad", {"etc/ssh/sshd_config": SSHD_MAIN,
                                    "etc/ssh/sshd_config.d/60-cloudimg-settings.conf": "PasswordAuthentication yes\n"})
    sec = f["DLD-SEC-001"]
    assert sec["status"] == "fail" and "PermitRootLogin yes (/etc/ssh/sshd_config:2)" in sec["message"]
    # the cloud image's drop-in was read first (Include is on line 1): its value is the one that counts
    assert "PasswordAuthentication yes (/etc/ssh/sshd_config.d/60-cloudimg-settings.conf:1)" in sec["message"]
    assert "Match Address 10.0.0.0/8" in sec["message"] and "back on" in sec["message"]
    assert any("00-hardening.conf" in c for c in sec["fix"]["commands"])
    f = _findings(run_cli, tmp_path, "good", {"etc/ssh/sshd_config": "Include /etc/ssh/sshd_config.d/*.conf\nPermitRootLogin yes\n",
                                     "etc/ssh/sshd_config.d/00-hardening.conf":
                                         "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                                         "KbdInteractiveAuthentication no\n"})
    assert f["DLD-SEC-001"]["status"] == "pass", f["DLD-SEC-001"]["message"]
    f = _findings(run_cli, tmp_path, "defaults", {"etc/ssh/sshd_config": "Port 22\n"})
    assert f["DLD-SEC-001"]["status"] == "warn" and "(OpenSSH's default)" in f["DLD-SEC-001"]["message"]


JUPYTER_BAD = ("import os; os.system('touch /tmp/dl-doctor-jupyter-ran')\n"
               "c.ServerApp.ip = '0.0.0.0'\nc.ServerApp.token = ''\nc.ServerApp.allow_root = True\n")


def test_an_open_notebook_fails_and_its_config_is_never_run(run_cli, tmp_path):
    marker = Path("/tmp/dl-doctor-jupyter-ran")
    marker.unlink(missing_ok=True)
    f = _findings(run_cli, tmp_path, "bad", {"home/alice/.jupyter/jupyter_server_config.py": JUPYTER_BAD,
                                    "etc/jupyter/jupyter_notebook_config.json":
                                        json.dumps({"NotebookApp": {"ip": "*", "token": ""}}),
                                    "home/alice/.config/code-server/config.yaml":
                                        "bind-addr: 0.0.0.0:8080\nauth: none\ncert: false\n"})
    assert not marker.exists()  # read as text, never executed
    sec = f["DLD-SEC-002"]
    assert sec["status"] == "fail"
    assert "/home/alice/.jupyter/jupyter_server_config.py: listens on 0.0.0.0 with an empty token" in sec["message"]
    assert "/etc/jupyter/jupyter_notebook_config.json: listens on * with an empty token" in sec["message"]
    assert "code-server on 0.0.0.0:8080 with auth: none" in sec["message"] and "allow_root" in sec["message"]
    f = _findings(run_cli, tmp_path, "good", {"home/alice/.jupyter/jupyter_server_config.py":
                                         "c.ServerApp.ip = '127.0.0.1'\n",
                                     "home/alice/.config/code-server/config.yaml":
                                         "bind-addr: 127.0.0.1:8080\nauth: password\n"})
    assert f["DLD-SEC-002"]["status"] == "pass", f["DLD-SEC-002"]["message"]


def test_docker_on_tcp_without_tls_fails_and_the_group_warns(run_cli, tmp_path):
    f = _findings(run_cli, tmp_path, "bad", {"usr/bin/dockerd": "", "etc/docker/daemon.json": json.dumps(
        {"hosts": ["unix:///var/run/docker.sock", "tcp://0.0.0.0:2375"]}),
        "etc/group": "root:x:0:\ndocker:x:999:alice,bob\n",
        "var/lib/docker/containers/abcdef0123456789/hostconfig.json": json.dumps(
            {"Privileged": True, "Binds": ["/:/host:ro"]})})
    sec = f["DLD-SEC-003"]
    assert sec["status"] == "fail" and "tcp://0.0.0.0:2375 without TLS (/etc/docker/daemon.json)" in sec["message"]
    assert "docker group (root-equivalent): alice, bob" in sec["message"]
    assert "container abcdef012345 is configured privileged and with the host's / mounted" in sec["message"]
    # the tree is an image: the group is changed inside it, not on the machine doing the inspection
    assert f"sudo chroot {tmp_path / 'bad'} gpasswd -d alice docker" in sec["fix"]["commands"]
    assert {"kind": "root-command", "text": "gpasswd -d alice docker"} in sec["fix"]["steps"]
    f = _findings(run_cli, tmp_path, "good", {"usr/bin/dockerd": "", "etc/group": "docker:x:999:\n"})
    assert f["DLD-SEC-003"]["status"] == "pass" and "Unix socket only" in f["DLD-SEC-003"]["message"]


def test_a_hostile_container_config_costs_only_itself(run_cli, tmp_path):
    """A hostconfig.json that is a list or nested past Python's stack (any user with docker access writes them)
    is skipped; the next container and the rest of the security facts are still read."""
    deep = "[" * 100_000 + "]" * 100_000
    f = _findings(run_cli, tmp_path, "hostile", {"usr/bin/dockerd": "", "etc/docker/daemon.json": deep,
                                        "etc/group": "docker:x:999:\n",
                                        "var/lib/docker/containers/aaaa000000000000/hostconfig.json": "[1, 2]",
                                        "var/lib/docker/containers/bbbb000000000000/hostconfig.json": deep,
                                        "var/lib/docker/containers/cccc000000000000/hostconfig.json": json.dumps(
                                            {"Privileged": True, "Binds": ["/:/host"]})})
    sec = f["DLD-SEC-003"]
    assert sec["status"] == "warn" and "container cccc00000000 is configured privileged" in sec["message"]


def test_live_only_checks_do_not_pretend_to_judge_a_tree(run_cli, tmp_path):
    f = _findings(run_cli, tmp_path, "t", {})
    assert f["DLD-SEC-004"]["status"] == "skip" and f["DLD-SEC-005"]["status"] == "skip"


LISTENER = """
import socket, sys, time
socks = []
for host, port in ((sys.argv[1], 6006), ("0.0.0.0", 8265), ("127.0.0.1", 8888)):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((host, port)); s.listen()
    socks.append(s)
print("ready", flush=True)
time.sleep(120)
"""


@pytest.fixture
def netns():
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root and iproute2 to create a network namespace")
    name = f"dld{uuid.uuid4().hex[:8]}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot create a network namespace here: {r.stderr.strip()}")
    try:
        # a non-loopback address inside the namespace (on its lo: no dummy or veth module is needed)
        for cmd in (["ip", "link", "set", "lo", "up"], ["ip", "addr", "add", "10.99.0.1/32", "dev", "lo"]):
            r = subprocess.run(["ip", "netns", "exec", name, *cmd], capture_output=True, text=True)
            if r.returncode != 0:
                pytest.skip(f"cannot set up the namespace: {r.stderr.strip()}")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_listeners_beyond_loopback_are_named_and_loopback_ones_are_not(run_cli, netns):
    proc = subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, "-c", LISTENER, "10.99.0.1"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        r = run_cli("run", "--only", "DLD-SEC-004", "--json", "-", "--fail-on", "never", "--no-env-scan",
                    prefix=["ip", "netns", "exec", netns], timeout=300)
        assert r.returncode == 0, r.stderr
        report = json.loads(r.stdout)
        f = {x["id"]: x for x in report["findings"]}["DLD-SEC-004"]
        assert f["status"] == "warn", f["message"]
        assert "TensorBoard port 6006 on 10.99.0.1" in f["message"] and "Ray dashboard port 8265 on 0.0.0.0" in f["message"]
        assert "8888" not in f["message"]  # Jupyter on loopback is fine
        owners = {(s["address"], s["port"]): s.get("process") for s in report["facts"]["security"]["listening"]}
        assert owners[("10.99.0.1", 6006)]["pid"] == proc.pid or owners[("10.99.0.1", 6006)]["name"].startswith("python")
    finally:
        proc.kill()
        proc.wait()
