"""Secrets never survive in any report; --redact also hides identity."""

import json

import pytest

import trees
from dl_doctor.redact import MASK, Redactor, looks_secret_name, redact

AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SESSION_TOKEN = "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQDexample0123456789abcdefghij"
URL_PASSWORD = "hunter2-url-pass"
HF_TOKEN = "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH"
GH_TOKEN = "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB"
DB_PASS = "s3cr3t-db-pass"
BEARER = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"

SECRETS = [AWS_KEY_ID, AWS_SECRET, SESSION_TOKEN, URL_PASSWORD, HF_TOKEN, GH_TOKEN, DB_PASS, BEARER]

PLANTED_ENV = {
    "AWS_ACCESS_KEY_ID": AWS_KEY_ID,
    "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
    "AWS_SESSION_TOKEN": SESSION_TOKEN,
    "PIP_INDEX_URL": f"https://builder:{URL_PASSWORD}@pypi.example.com/simple",
    "HF_TOKEN": HF_TOKEN,
    "MY_SERVICE_TOKEN": "plain-looking-value-123",
    "DB_PASS": DB_PASS,
    "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
    "NOTES": f"deploy with {GH_TOKEN} and Authorization: Bearer {BEARER}",
}


@pytest.mark.parametrize("name,secret", [
    ("AWS_SECRET_ACCESS_KEY", True), ("AWS_SESSION_TOKEN", True), ("HF_TOKEN", True), ("DB_PASSWORD", True),
    ("DB_PASS", True), ("GITHUB_PAT_CREDENTIALS", True), ("OPENAI_API_KEY", True), ("SSHKEY", True),
    ("PATH", False), ("PWD", False), ("OLDPWD", False), ("CUDA_HOME", False), ("LD_LIBRARY_PATH", False),
    ("NCCL_SOCKET_IFNAME", False), ("SSH_AUTH_SOCK", False), ("TOKENIZERS_PARALLELISM", True),
])
def test_secret_names(name, secret):
    assert looks_secret_name(name) is secret


def test_value_detectors_in_free_text():
    r = Redactor()
    text = (f"key {AWS_KEY_ID} url https://u:{URL_PASSWORD}@host/x cmd --password={DB_PASS} "
            f"AWS_SECRET_ACCESS_KEY={AWS_SECRET} Authorization: Bearer {BEARER} {HF_TOKEN} {GH_TOKEN}")
    out = r.text(text)
    for s in SECRETS[:2] + [URL_PASSWORD, DB_PASS, HF_TOKEN, GH_TOKEN, BEARER]:
        assert s not in out
    assert "https://u:[REDACTED]@host/x" in out
    assert "-----BEGIN" not in r.text("-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\n-----END RSA PRIVATE KEY-----")[30:]


def test_ordinary_text_is_left_alone():
    r = Redactor()
    text = "driver 535.104.05, CUDA 12.2, /usr/local/cuda-12.2/bin/nvcc, tokens=4096 batch, key_count=3"
    assert r.text("driver 535.104.05, CUDA 12.2, /usr/local/cuda-12.2/bin/nvcc") == \
        "driver 535.104.05, CUDA 12.2, /usr/local/cuda-12.2/bin/nvcc"
    assert r.text(text) == text
    assert r.text("TOKENIZERS_PARALLELISM=false DB_PASSWORD=abcdefgh") == "TOKENIZERS_PARALLELISM=false DB_PASSWORD=[REDACTED]"


def test_nested_secret_keys_are_masked_and_a_summary_is_added():
    doc = {"facts": {"x": {"password": "pw-value-1", "nested": [{"api_key": "k-value-2"}], "count": 3}}}
    out = redact(doc)
    assert out["facts"]["x"]["password"] == MASK and out["facts"]["x"]["nested"][0]["api_key"] == MASK
    assert out["facts"]["x"]["count"] == 3
    assert out["redaction"]["always"] is True and out["redaction"]["redactions"] >= 2


def _env_block(env):
    return b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())


def _all_outputs(result):
    texts = [result.stdout, result.stderr]
    for ext in ("json", "html"):
        texts += [p.read_text() for p in result.reports(ext)]
    return "\n".join(texts)


def test_planted_secrets_never_survive_in_json_html_or_terminal(run_cli, tree, tmp_path):
    spec = trees.g4dn_docker_64m()
    spec["proc/self/environ"] = _env_block({"PATH": "/usr/bin", **PLANTED_ENV})
    # a secret inside a file a probe copies into the facts, and in a fact a check quotes
    spec["etc/os-release"] = spec["etc/os-release"] + f'PRETTY_NAME="Ubuntu {AWS_KEY_ID}"\n'
    root = tree(spec)
    r = run_cli("run", "--sysroot", str(root))
    everything = _all_outputs(r)
    for secret in SECRETS + ["plain-looking-value-123", "0123456789abcdef0123456789abcdef01234567"]:
        assert secret not in everything, secret
    report = r.json_report()
    env = report["facts"]["environment"]["variables"]
    assert env["AWS_SECRET_ACCESS_KEY"] == MASK and env["PATH"] == "/usr/bin"
    assert env["PIP_INDEX_URL"] == "https://builder:[REDACTED]@pypi.example.com/simple"
    assert AWS_KEY_ID not in r.stdout and "Ubuntu [REDACTED]" in r.stdout


def test_live_environment_secrets_are_redacted(run_cli):
    r = run_cli("run", env=PLANTED_ENV)
    everything = _all_outputs(r)
    for secret in SECRETS:
        assert secret not in everything, secret
    assert r.json_report()["facts"]["environment"]["variables"]["HF_TOKEN"] == MASK


def test_collect_redacts_the_facts_file(run_cli, tmp_path):
    out = tmp_path / "facts.json"
    run_cli("collect", "-o", str(out), env=PLANTED_ENV)
    text = out.read_text()
    for secret in SECRETS:
        assert secret not in text


def test_extended_redaction_masks_identity(run_cli, tree):
    spec = trees.rhel8_gpu_no_driver()
    spec["proc/self/environ"] = _env_block({"USER": "alice", "HOME": "/home/alice", "PATH": "/usr/bin",
                                            "SSH_CONNECTION": "203.0.113.9 52144 10.0.12.34 22",
                                            "MY_IPV6": "2001:db8::8a2e:370:7334", "MAC": "0a:1b:2c:3d:4e:5f",
                                            "NODE": "ip-10-0-12-34.ec2.internal"})
    root = tree(spec)
    plain = run_cli("run", "--sysroot", str(root))
    assert "gpu-node-7" in _all_outputs(plain) and "203.0.113.9" in _all_outputs(plain)
    r = run_cli("run", "--sysroot", str(root), "--redact")
    everything = _all_outputs(r)
    for needle in ("gpu-node-7", "alice", "203.0.113.9", "10.0.12.34", "2001:db8::8a2e:370:7334",
                   "0a:1b:2c:3d:4e:5f", "ip-10-0-12-34"):
        assert needle not in everything, needle
    report = r.json_report()
    env = report["facts"]["environment"]["variables"]
    assert env["HOME"] == "/home/[USER-1]" and env["USER"] == "[USER-1]"
    assert report["host"]["hostname"] == "[HOST-1]"
    assert r.reports("json")[0].name.startswith("dl-doctor-redacted-")
    a, port, b, ssh = env["SSH_CONNECTION"].split()
    assert a.startswith("[IP-") and b.startswith("[IP-") and a != b and (port, ssh) == ("52144", "22")
    assert report["redaction"]["extended"] is True
    # versions are not mistaken for addresses
    assert report["facts"]["kernel"]["release"] == "4.18.0-513.5.1.el8_9.x86_64"
