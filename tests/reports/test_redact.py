"""Secrets never survive in any report; --redact also hides identity."""

import json

import pytest

import trees
from conftest import FIXTURES
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


# -- issue 23, items 11-13: command lines, whole files, structured configs, token shapes -------------------------------

JUPYTER_SECRETS = ["tok-space-form-1234", "tok-eq-form-5678", "pw-space-form-42", "opt-secret-9911",
                   "argon2:$argon2id$v=19$m=10240,t=10,p=8$c2FsdHNhbHQ$aGFzaGhhc2g"]
JUPYTER_ARGV = ["/opt/conda/bin/python3.11", "/opt/conda/bin/jupyter-lab", "--ip=0.0.0.0", "--port", "8888",
                "--NotebookApp.token", JUPYTER_SECRETS[0], f"--ServerApp.token={JUPYTER_SECRETS[1]}",
                "--ServerApp.password", JUPYTER_SECRETS[2], "--my_secret_opt", JUPYTER_SECRETS[3],
                f"--IdentityProvider.hashed_password={JUPYTER_SECRETS[4]}", "--allow-root"]


class _ProcHost:
    """A /proc with one process per pid: (comm, argv)."""

    def __init__(self, procs):
        self.procs = procs

    def listdir(self, path):
        return list(self.procs) if path == "/proc" else []

    def readlink(self, path):
        return "/opt/conda/bin/python3.11"

    def try_read(self, path, limit):
        _, _, pid, name = path.split("/")
        comm, argv = self.procs[pid]
        return comm + "\n" if name == "comm" else "\0".join(argv) + "\0"


def test_a_jupyter_command_line_is_redacted_as_a_whole_not_per_argument():
    from dl_doctor.checks.security import _argv_settings
    from dl_doctor.probes.security import processes

    empty = ["/usr/bin/python3", "/usr/local/bin/jupyter-notebook", "--NotebookApp.token=", "--ip=0.0.0.0"]
    _, servers = processes(_ProcHost({"101": ("jupyter-lab", JUPYTER_ARGV), "102": ("python3", empty)}))
    text = json.dumps(servers)
    for secret in JUPYTER_SECRETS:
        assert secret not in text, secret
    argv = servers[0]["argv"]
    assert "--ip=0.0.0.0" in argv and "--allow-root" in argv and ["--port", "8888"] == argv[3:5]
    assert f"--ServerApp.token={MASK}" in argv and argv[argv.index("--NotebookApp.token") + 1] == MASK
    # what the notebook check reads still reads right: an address, a token that is set, an empty one that is not
    assert _argv_settings(argv)["ip"] == "0.0.0.0" and _argv_settings(argv)["token"] == MASK
    assert _argv_settings(servers[1]["argv"]) == {"token": "", "ip": "0.0.0.0"}


def test_an_argument_list_in_facts_is_redacted_as_one_command_line():
    """Facts written by an older dl-doctor (or another machine) hold the raw argument list."""
    out = Redactor(extended=True).value({"jupyter_processes": [{"pid": 7, "argv": JUPYTER_ARGV}]})
    text = json.dumps(out)
    for secret in JUPYTER_SECRETS:
        assert secret not in text, secret
    assert out["jupyter_processes"][0]["argv"][2] == "--ip=0.0.0.0"


@pytest.mark.parametrize("line,secret", [
    ("docker login -u bob -p dockerpw-7788 registry.example.com", "dockerpw-7788"),
    ("COMMAND=/usr/bin/docker login --username bob --password=dockerpw-7789 r.example.com", "dockerpw-7789"),
    ("redis-cli -h 10.0.0.5 -p 6379 -a redispw-5566 ping", "redispw-5566"),
    ("redis-cli --pass redispw-5567 info", "redispw-5567"),
    ("htpasswd -b /etc/nginx/.htpasswd bob htpw-3344", "htpw-3344"),
    ("htpasswd -c -B -b /etc/nginx/.htpasswd bob htpw-3345", "htpw-3345"),
    ("sudo[99]: alice : COMMAND=/usr/bin/htpasswd -nbB carol htpw-2211", "htpw-2211"),
    ("jupyter lab --NotebookApp.token abc123tok --no-browser", "abc123tok"),
    ("jupyter server --ServerApp.password='pw with space'", "pw with space"),
    ('{"registry-mirrors": ["https://abcdefghijk@mirror.example.com/"]}', "abcdefghijk"),
    ("pip install -i https://bob@pypi.internal/simple x", "bob@"),
])
def test_command_line_and_url_secrets_in_text(line, secret):
    assert secret not in Redactor().text(line)


def test_command_lines_keep_what_is_not_a_secret():
    r = Redactor()
    for line in ("docker login --password-stdin registry.example.com", "redis-cli -p 6379 ping",
                 "htpasswd -v /etc/nginx/.htpasswd bob", "jupyter lab --ServerApp.token= --ip=0.0.0.0",
                 "jupyter lab --NotebookApp.token '' --ip=0.0.0.0", "git clone ssh://git@github.com/o/r.git",
                 "docker login --password-file /run/secrets/registry registry.example.com",
                 "python train.py --tokenizer_name gpt2-large --max-tokens 16384 --secret-name hf-cred"):
        assert r.text(line) == line


TOKEN_SHAPES = [
    "gldt-AbCdEfGhIjKlMnOpQrSt", "glrt-t1_AbCdEfGhIjKlMnOpQrSt", "xapp-1-A0123456789-4242424242-abcdef0123456789",
    "sk_live_51HqLyjEXAMPLEkeyABCDEFGHIJ", "rk_live_51HqLyjEXAMPLEkeyABCDEFGHIJ", "sk_test_4eC39HqLyjWDarjtT1zdp7dc",
    "hvs.CAESIJlU5Ctq8zQ3uAAUvWqZHy0XYZabcdefghijklmnop",
]


@pytest.mark.parametrize("token", TOKEN_SHAPES)
def test_token_shapes_under_neutral_names(token):
    r = Redactor()
    for text in (token, f"note: {token} done", f"[ 12.3] nvidia: fetched with {token}", f'"x": "{token}"'):
        assert token not in r.text(text), text


def test_client_secret_inside_text_and_pgp_blocks():
    r = Redactor()
    out = r.text('body={"client_id": "app-42", "client_secret": "cs-value-123", "n": 3}')
    assert "cs-value-123" not in out and '"client_id": "app-42"' in out
    assert "cs-escaped-7" not in r.text(r'{"auth": {"client_secret": "cs-\"escaped-7"}}')
    pgp = ("-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGSecretPgpLine1\nSecretPgpLine2==\n"
           "-----END PGP PRIVATE KEY BLOCK-----\n")
    out = r.text("before\n" + pgp + "after\n")
    assert "SecretPgp" not in out and out.startswith("before\n") and out.endswith("after\n")
    escaped = r'{"private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANEscapedLine\n-----END PRIVATE KEY-----\n"}'
    assert "EscapedLine" not in r.text(escaped)


def test_facts_that_look_like_tokens_are_kept():
    r = Redactor()
    kept = ["libcudnn.so.9 sha256=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            "Build ID: 4c2d8e6f0a1b3c5d7e9f0a1b2c3d4e5f6a7b8c9d", "driver 550.54.15 cuda 12.4 cudnn 9.1.0.70",
            "/usr/local/cuda-12.4/targets/x86_64-linux/lib/libcublasLt.so.12.4.5.8",
            "TOKENIZERS_PARALLELISM=false max_tokens=4096", "nvidia-smi --query-gpu=name --format=csv",
            "python -m torch.distributed.run --nproc-per-node 8 train.py --lr 3e-4",
            "https://example.com/login?next=/a&email=bob@example.com", "git clone ssh://git@github.com/o/r.git"]
    for text in kept:
        assert r.text(text) == text


def test_structured_configs_are_masked_by_key_wherever_nested():
    r = Redactor()
    jupyter = json.dumps({"ServerApp": {"ip": "0.0.0.0", "token": "jsontok-0011", "port": 8888},
                          "IdentityProvider": {"hashed_password": "sha1:ab12:cd34ef56"},
                          "deep": [{"list": [{"api_keys": ["k-one-1111", "k-two-2222"]}]}],
                          "max_tokens": 4096, "open_browser": False}, indent=1)
    out = r.file("/home/alice/.jupyter/jupyter_server_config.json", jupyter)
    for secret in ("jsontok-0011", "sha1:ab12:cd34ef56", "k-one-1111", "k-two-2222"):
        assert secret not in out
    doc = json.loads(out)
    assert doc["ServerApp"]["ip"] == "0.0.0.0" and doc["max_tokens"] == 4096 and doc["ServerApp"]["port"] == 8888
    toml_text = ('[tool.auth]\nname = "ci"\n"password" = \'\'\'multi\nline-pass-33\'\'\'\n'
                 '[[servers]]\nhost = "a"\ntoken = "tomltok-\\u0041-44"\n')
    out = r.file("/etc/app/config.toml", toml_text)
    assert "line-pass-33" not in out and "tomltok-" not in out and 'name = "ci"' in out
    ini = "[db]\nuser = app\npassword = two words here\nport = 5432\n"
    assert r.file("/etc/app/db.ini", ini) == f"[db]\nuser = app\npassword = {MASK}\nport = 5432\n"
    yaml = "db:\n  user: app\n  \"api_key\": abc def ghi\n  pin_memory: true\n"
    assert r.file("/etc/app/c.yaml", yaml) == f"db:\n  user: app\n  \"api_key\": {MASK}\n  pin_memory: true\n"


def test_a_whole_file_masks_a_block_that_spans_lines():
    environ = ("PATH=/usr/bin\nSSH_KEY=-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXkSecretLine2\n"
               "SecretLine3\n-----END OPENSSH PRIVATE KEY-----\nHOME=/root\n")
    out = Redactor().file("/proc/1/environ", environ)
    assert "SecretLine" not in out and out.startswith("PATH=/usr/bin\n") and out.endswith("HOME=/root\n")


def test_markdown_summary_redacts_whatever_the_report_claims(run_cli, tmp_path):
    snap = tmp_path / "facts.json"
    snap.write_text((FIXTURES / "snapshots" / "g5_ubuntu2204.json").read_text())
    saved = tmp_path / "r.json"
    assert run_cli("check", str(snap), "--redact", "--json", str(saved)).returncode in (0, 1)
    report = json.loads(saved.read_text())
    assert report["redaction"]["extended"] is True
    line = f"NVRM: Xid (PCI:0000:00:1e): 79, pid=1, GPU has fallen off the bus. fetched with {GH_TOKEN}"
    report["facts"].setdefault("kernel_log", {})["xids"] = [
        {"code": 79, "bus": "0000:00:1e.0", "pid": "1", "text": "GPU has fallen off the bus.", "line": line}]
    saved.write_text(json.dumps(report))
    r = run_cli("report", str(saved), "--markdown", "-")
    assert r.returncode == 0, r.stderr
    assert "Xid" in r.stdout and GH_TOKEN not in r.stdout


def test_a_config_of_thousands_of_secrets_is_masked_in_bounded_time():
    import time

    doc = {f"svc{n}": {"password": f"pw-{n:06d}", "port": 8000 + n % 1000} for n in range(20000)}
    start = time.perf_counter()
    out = Redactor().file("/etc/app/services.json", json.dumps(doc, indent=1))
    assert time.perf_counter() - start < 10
    assert "pw-0" not in out and json.loads(out)["svc7"] == {"password": MASK, "port": 8007}


def test_a_yaml_block_scalar_under_a_secret_key_is_masked_line_by_line():
    text = ("db:\n  password: |\n    hunter2-very-secret\n    second-line-x\n  user: alice\n"
            "token: >-\n  abc.def.ghi\nother: 1\n")
    out = Redactor().file("/etc/app/config.yaml", text)
    for secret in ("hunter2-very-secret", "second-line-x", "abc.def.ghi"):
        assert secret not in out
    assert "user: alice" in out and "other: 1" in out and out.count("\n") == text.count("\n")
