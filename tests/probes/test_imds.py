"""The metadata probe against a fake IMDS on 127.0.0.1: normal, spot notice, slow, refusing; and no traffic off EC2."""

import http.server
import json
import socket
import threading
import time

import pytest

from dl_doctor.host import Host
from dl_doctor.probes import ProbeContext, Unavailable
from dl_doctor.probes.imds import imds_collect, imds_probe


class FakeIMDS(http.server.ThreadingHTTPServer):
    def __init__(self, answers, delay=0.0, require_token=True):
        self.answers, self.delay, self.require_token = answers, delay, require_token
        self.requests = []
        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, code, body=""):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self):
        self.server.requests.append(("PUT", self.path, dict(self.headers)))
        time.sleep(self.server.delay)
        if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            self._send(200, "TOKEN123")
        else:
            self._send(400)

    def do_GET(self):
        self.server.requests.append(("GET", self.path, dict(self.headers)))
        time.sleep(self.server.delay)
        if self.server.require_token and self.headers.get("X-aws-ec2-metadata-token") != "TOKEN123":
            self._send(401)
            return
        key = self.path[len("/latest/"):]
        if key in self.server.answers:
            self._send(200, self.server.answers[key])
        else:
            self._send(404, "Not Found")


@pytest.fixture
def fake_imds():
    servers = []

    def start(answers, **kw):
        srv = FakeIMDS(answers, **kw)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


ANSWERS = {"meta-data/instance-type": "p4d.24xlarge", "meta-data/instance-id": "i-0123456789abcdef0",
           "meta-data/placement/availability-zone": "us-east-1a", "meta-data/placement/region": "us-east-1",
           "meta-data/instance-life-cycle": "spot",
           "meta-data/spot/instance-action": json.dumps({"action": "terminate", "time": "2026-11-29T16:02:00Z"})}


def test_token_first_then_metadata(fake_imds):
    srv = fake_imds(ANSWERS)
    out = imds_collect(Host(), srv.url, timeout=1.0)
    assert out["instance_type"] == "p4d.24xlarge" and out["region"] == "us-east-1" and out["life_cycle"] == "spot"
    assert out["spot_instance_action"] == {"action": "terminate", "time": "2026-11-29T16:02:00Z"}
    assert out["scheduled_events"] is None and out["errors"] == {}
    assert srv.requests[0][0] == "PUT" and srv.requests[0][1] == "/latest/api/token"
    # every request carries the token but the one that asks whether IMDSv1 is still allowed (the last)
    assert all({k.lower(): v for k, v in r[2].items()}.get("x-aws-ec2-metadata-token") == "TOKEN123"
               for r in srv.requests[1:-1])
    assert srv.requests[-1][1] == "/latest/meta-data/instance-id" and out["imdsv1_allowed"] is False


def test_slow_imds_costs_only_a_short_timeout(fake_imds):
    srv = fake_imds(ANSWERS, delay=2.0)
    start = time.monotonic()
    with pytest.raises(Unavailable):
        imds_collect(Host(), srv.url, timeout=0.3)
    assert time.monotonic() - start < 1.5


def test_refusing_imds_is_unavailable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    with pytest.raises(Unavailable) as err:
        imds_collect(Host(), f"http://127.0.0.1:{port}", timeout=0.5)
    assert "did not answer" in str(err.value)


def test_token_refused(fake_imds, monkeypatch):
    from dl_doctor.host import devices
    from dl_doctor.probes import imds as imds_module

    srv = fake_imds(ANSWERS)
    srv.answers = {}

    def no_token(host, method, url, headers=None, timeout=1.0):
        return (403, "") if method == "PUT" else devices.http(host, method, url, headers, timeout)

    monkeypatch.setattr(imds_module, "http", no_token)
    with pytest.raises(Unavailable) as err:
        imds_collect(Host(), srv.url, timeout=0.5)
    assert "HTTP 403" in str(err.value)


class EC2Host(Host):
    """A live host whose DMI files say EC2 (this test machine is not one)."""

    def try_read(self, path, max_bytes=4 << 20):
        if path == "/sys/class/dmi/id/sys_vendor":
            return "Amazon EC2\n"
        if path == "/sys/class/dmi/id/product_name":
            return "p4d.24xlarge\n"
        return super().try_read(path, max_bytes)


def test_probe_asks_imds_on_ec2(fake_imds):
    srv = fake_imds(ANSWERS)
    out = imds_probe.func(ProbeContext(host=EC2Host(), options={"imds_endpoint": srv.url, "imds_timeout": 1.0}))
    assert out["instance_id"] == "i-0123456789abcdef0"


def test_no_traffic_off_ec2(fake_imds, run_cli):
    """On a host whose DMI does not say EC2 (this one), no request is sent, even with an endpoint configured."""
    srv = fake_imds(ANSWERS)
    with pytest.raises(Unavailable):
        imds_probe.func(ProbeContext(host=Host(), options={"imds_endpoint": srv.url}))
    r = run_cli("run", "--json", "-", "--only", "DLD-CLOUD-001", env={"DL_DOCTOR_IMDS_ENDPOINT": srv.url})
    report = json.loads(r.stdout)
    assert "imds" in report["unavailable"] and srv.requests == []
    assert report["findings"][0]["status"] == "skip"


def test_imdsv1_and_the_role_name_never_its_credentials(fake_imds):
    answers = dict(ANSWERS, **{"meta-data/iam/security-credentials/": "gpu-training-role",
                               "meta-data/iam/security-credentials/gpu-training-role": '{"SecretAccessKey": "x"}'})
    srv = fake_imds(answers, require_token=False)  # v1 allowed: token-less requests are answered
    out = imds_collect(Host(), srv.url, timeout=1.0)
    assert out["imdsv1_allowed"] is True and out["instance_role"] == "gpu-training-role"
    assert not any(r[1].endswith("/gpu-training-role") for r in srv.requests)  # the credentials were never asked for
    tokenless = [r for r in srv.requests if r[0] == "GET" and "x-aws-ec2-metadata-token" not in
                 {k.lower() for k in r[2]}]
    assert [r[1] for r in tokenless] == ["/latest/meta-data/instance-id"]
    srv2 = fake_imds(answers)  # v2 only: the token-less request gets 401
    assert imds_collect(Host(), srv2.url, timeout=1.0)["imdsv1_allowed"] is False
