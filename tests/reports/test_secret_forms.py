"""Every secret form the review found surviving redaction, planted where each output shows it: JSON, HTML,
terminal, JUnit, Prometheus, the status line and a support bundle (with and without --redact)."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from conftest import FIXTURES, build_tree
from trees import UBUNTU2204_OS_RELEASE

# (a text as it appears on a machine, the secret inside it)
FORMS = [
    ("MY_GPG_PASSPHRASE=correct-horse-battery", "correct-horse-battery"),
    ("DB_CRED=cr3dential-value-77", "cr3dential-value-77"),
    ("SENTRY_DSN=dsnsecret9988776655", "dsnsecret9988776655"),
    ("SLACK_WEBHOOK=whooksecret123456", "whooksecret123456"),
    ("git clone https://tok4user9876543210abcdef@github.com/o/r.git", "tok4user9876543210abcdef"),
    ("https://api.example.com/v1?password=qpass0123456", "qpass0123456"),
    ("https://api.example.com/v1?x=1&token=qtok0987654321", "qtok0987654321"),
    ("https://hooks.slack.com/services/T0AAA/B0BBB/slackpathsecret77", "slackpathsecret77"),
    ("https://conda.anaconda.org/t/condatok-4242-abcd/mychannel", "condatok-4242-abcd"),
    ('password = "quoted secret with spaces"', "quoted secret with spaces"),
    ("BOOT_IMAGE=/vmlinuz inst.rootpw=rootpwsecret55 ro", "rootpwsecret55"),
    ("mysql -u root -pMyS3cretPw db", "MyS3cretPw"),
    ("http://127.0.0.1:8888/lab?token=jupytertok0a1b2c3d4e5f", "jupytertok0a1b2c3d4e5f"),
]
ENV_SECRETS = {"MY_GPG_PASSPHRASE": "envpassphrase-1", "AWS_CRED_FILE_CONTENT": "envcred-2",
               "SENTRY_DSN": "https://envdsn3@o1.ingest.sentry.io/1", "TEAMS_WEBHOOK_URL": "envwebhook-4"}
SECRETS = [s for _, s in FORMS] + ["envpassphrase-1", "envcred-2", "envdsn3", "envwebhook-4"]


def _assert_clean(where: str, text: str) -> None:
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, f"{where} leaks {leaked}"


@pytest.mark.parametrize("extended", [False, True])
def test_no_secret_form_survives_in_any_output(run_cli, tmp_path, extended):
    snap = json.loads((FIXTURES / "snapshots" / "g5_ubuntu2204.json").read_text())
    carrier = " | ".join(text for text, _ in FORMS)
    snap["facts"]["os"]["pretty_name"] = carrier                 # terminal headline, HTML, JSON
    snap["facts"]["kernel"]["release"] = "6.1.0 " + carrier      # Prometheus info labels, an expectation message
    snap["facts"].setdefault("environment", {}).setdefault("variables", {}).update(ENV_SECRETS)
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps(snap))
    expect = tmp_path / "expect.toml"
    expect.write_text('kernel = "5.15.0"\n')  # fails, with the found kernel (and its secrets) in the message
    out = tmp_path / "o"
    out.mkdir()  # named outputs go into directories that exist (dl-doctor creates only --output-dir)
    args = ["check", str(facts), "--no-color", "--json", str(out / "r.json"), "--html", str(out / "r.html"),
            "--junit", str(out / "r.xml"), "--prometheus", str(out / "r.prom"), "--status-line",
            str(out / "status"), "--expect", str(expect)] + (["--redact"] if extended else [])
    r = run_cli(*args)
    assert r.returncode == 1, r.stderr
    # the status line names the worst finding by its headline (the message, which carries the found kernel, stays out)
    assert "The machine differs from its golden-stack expectations" in (out / "status").read_text()
    _assert_clean("terminal", r.stdout + r.stderr)
    assert "[REDACTED]" in r.stdout  # the carrier is shown there, masked
    for name in ("r.json", "r.html", "r.xml", "r.prom", "status"):
        _assert_clean(name, (out / name).read_text(encoding="utf-8"))
    assert "[REDACTED]" in (out / "r.json").read_text()


def test_no_secret_form_survives_in_a_bundle(run_cli, tmp_path):
    root = tmp_path / "root"
    syslog = "\n".join(f"Nov 30 10:00:0{i % 10} box app[1]: {text}" for i, (text, _) in enumerate(FORMS)) + "\n"
    build_tree(root, {
        "etc/os-release": UBUNTU2204_OS_RELEASE,
        "etc/hostname": "box\n",
        "proc/cmdline": "BOOT_IMAGE=/vmlinuz-6.1 root=/dev/nvme0n1p1 inst.rootpw=rootpwsecret55 ro\n",
        "var/log/syslog": syslog,
        "var/log/kern.log": syslog,
        "proc/self/environ": "\0".join(f"{k}={v}" for k, v in ENV_SECRETS.items()) + "\0",
    })
    for extended in (False, True):
        out = tmp_path / f"b{extended}.tar.gz"
        r = run_cli("bundle", "--sysroot", str(root), "-o", str(out), "-q", *(["--redact"] if extended else []))
        assert r.returncode in (0, 1), r.stderr
        with tarfile.open(out) as tar:
            names = tar.getnames()
            assert any(n.endswith("raw/files/var/log/syslog") or n.endswith("raw/files/var/log/kern.log")
                       for n in names), names
            for info in tar:
                if info.isfile():
                    _assert_clean(info.name, tar.extractfile(info).read().decode("utf-8", "replace"))


# What a bundle's raw copies held after line-by-line masking (issue 23, item 12): each secret, and where it was planted.
RAW_SECRETS = ["EnvKeyLine2Secret", "EnvKeyLine3Secret", "EscapedKeyLine", "jsontok-0a1b2c", "hashpw-9f8e7d",
               "dockerpw-7788", "redispw-5566", "htpw-3344", "abcdefghijk"]


def test_a_bundles_raw_copies_are_masked_as_whole_files(run_cli, tmp_path):
    root = tmp_path / "root"
    key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1EnvKeyLine2Secret\nEnvKeyLine3Secret\n" \
          "-----END OPENSSH PRIVATE KEY-----"
    escaped = r'{"private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQEscapedKeyLine\n-----END PRIVATE KEY-----\n"}'
    syslog = ("Nov 30 10:00:01 box sudo[9]: alice : COMMAND=/usr/bin/docker login -u bob -p dockerpw-7788 r.example.com\n"
              "Nov 30 10:00:02 box sudo[9]: alice : COMMAND=/usr/bin/redis-cli -h 10.0.0.5 -a redispw-5566 ping\n"
              "Nov 30 10:00:03 box sudo[9]: alice : COMMAND=/usr/bin/htpasswd -b /etc/nginx/.htpasswd bob htpw-3344\n"
              "Nov 30 10:00:04 box kernel: nvidia 0000:00:1e.0: sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b8\n")
    build_tree(root, {
        "etc/os-release": UBUNTU2204_OS_RELEASE,
        "etc/hostname": "box\n",
        "etc/passwd": "root:x:0:0::/root:/bin/bash\nalice:x:1001:1001::/home/alice:/bin/bash\n",
        "home/alice/.jupyter/jupyter_server_config.json": json.dumps(
            {"ServerApp": {"ip": "0.0.0.0", "token": "jsontok-0a1b2c"},
             "PasswordIdentityProvider": {"hashed_password": "argon2:$argon2id$v=19$hashpw-9f8e7d"}}, indent=2),
        "etc/docker/daemon.json": json.dumps({"registry-mirrors": ["https://abcdefghijk@mirror.example.com/"]}),
        "var/log/syslog": syslog,
        "proc/self/environ": f"PATH=/usr/bin\0SSH_KEY={key}\0GCP_SA={escaped}\0HOME=/root\0",
    })
    out = tmp_path / "b.tar.gz"
    r = run_cli("bundle", "--sysroot", str(root), "-o", str(out), "-q")
    assert r.returncode in (0, 1), r.stderr
    with tarfile.open(out) as tar:
        texts = {info.name.split("/", 1)[1]: tar.extractfile(info).read().decode("utf-8", "replace")
                 for info in tar if info.isfile()}
    for planted in ("raw/files/home/alice/.jupyter/jupyter_server_config.json", "raw/files/etc/docker/daemon.json",
                    "raw/files/var/log/syslog", "raw/files/proc/self/environ"):
        assert planted in texts, sorted(texts)
    for name, text in texts.items():
        leaked = [s for s in RAW_SECRETS if s in text]
        assert not leaked, f"{name} leaks {leaked}"
    # the facts in those copies are still there to read
    assert "mirror.example.com" in texts["raw/files/etc/docker/daemon.json"]
    assert '"ip": "0.0.0.0"' in texts["raw/files/home/alice/.jupyter/jupyter_server_config.json"]
    assert "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b8" in texts["raw/files/var/log/syslog"]
    assert "HOME=/root" in texts["raw/files/proc/self/environ"]
