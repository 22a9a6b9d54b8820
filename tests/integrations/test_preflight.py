"""The torchrun preflight with a real torchrun: two local "nodes" (two torchrun agents on this host, rendezvous over
c10d on loopback, gloo on CPU with the local CPU torch wheel), one with a planted NCCL setting. Rank 0 names the
difference and the node that has it, the two agents on one host stay two nodes, the all-reduce proves the path, and
both agents exit with rank 0's verdict."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from fake_dist import FakeDist, FakeTorch, _mine, _payload, _peers

TORCH_ENV = Path.home() / ".cache" / "dl-doctor-test-envs" / "torch-2.13.0-cpu"
DOCTOR = Path(sys.executable).parent / "dl-doctor"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def launcher(tmp_path):
    torchrun = TORCH_ENV / "bin" / "torchrun"
    if not torchrun.exists():
        pytest.skip("the CPU torch test environment is missing (tests/setup_torch_envs.sh)")
    version = subprocess.run([str(TORCH_ENV / "bin" / "python"), "-c", "import sys; print(sys.version_info[:2])"],
                             capture_output=True, text=True).stdout.strip()
    if version != str(tuple(sys.version_info[:2])):
        pytest.skip(f"the torch environment runs Python {version}, dl-doctor's tests {sys.version_info[:2]}")
    script = tmp_path / "launch.py"
    # the torch environment imports dl_doctor from the test venv (same Python), as a site directory
    script.write_text(f"import site, sys\nsite.addsitedir({sysconfig.get_paths()['purelib']!r})\n"
                      "from dl_doctor.integrations.preflight import main\nsys.exit(main(sys.argv[1:]))\n")
    return torchrun, script


def _agents(run_cli, torchrun, script, envs, tmp_path, *extra_args):
    """Two torchrun agents in the shared runner's clean environment (no NCCL_ or FI_ setting of the developer's)."""
    port = _free_port()
    procs = []
    for n, extra in enumerate(envs):
        procs.append(run_cli.popen(
            "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
            "--rdzv-id=preflight-test", str(script), "--doctor", str(DOCTOR), "--timeout", "120", "--json",
            str(tmp_path / f"r{n}.json"), *extra_args, exe=[str(torchrun)], env=extra, outdir=False,
            stderr=subprocess.STDOUT))
    outs = [p.communicate(timeout=300)[0] for p in procs]
    return [p.returncode for p in procs], outs


def test_two_local_nodes_with_a_planted_nccl_setting(run_cli, launcher, tmp_path):
    import json

    torchrun, script = launcher
    codes, outs = _agents(run_cli, torchrun, script, [{"NCCL_SOCKET_IFNAME": "lo"}, {"NCCL_SOCKET_IFNAME": "eth7"}],
                          tmp_path)
    report = next(o for o in outs if "dl-doctor preflight" in o)
    text = report[report.index("dl-doctor preflight"):]
    assert "2 nodes in 1 group" in text
    host = socket.gethostname()
    # no majority: each value with the node that has it; two agents on one host are two nodes, named by their agent
    [line] = [l for l in text.splitlines() if l.startswith("  DIFFERS env.NCCL_SOCKET_IFNAME (no majority): ")]
    assert re.fullmatch(rf"  DIFFERS env\.NCCL_SOCKET_IFNAME \(no majority\): {re.escape(host)}:agent-\d+ = (lo|eth7); "
                        rf"{re.escape(host)}:agent-\d+ = (lo|eth7)", line), line
    assert "all-reduce over gloo: ok in" in text
    assert codes == [1, 1], outs  # every agent exits with rank 0's verdict
    result = json.loads(next(p for p in tmp_path.glob("r*.json")).read_text())
    [diff] = [d for d in result["groups"][0]["differences"] if d["fact"] == "env.NCCL_SOCKET_IFNAME"]
    assert sorted(o["value"] for o in diff["odd"]) + [diff["majority"]] != [] and {diff["majority"]} | {
        o["value"] for o in diff["odd"]} == {"lo", "eth7"}
    assert result["path"]["ok"] is True and result["path"]["backend"] == "gloo"


def test_a_backend_the_nodes_cannot_use_is_named_with_the_pairs(run_cli, launcher, tmp_path):
    """NCCL on CPU-only nodes: the all-reduce over the job's backend fails, and the pair that cannot reduce is named."""
    torchrun, script = launcher
    codes, outs = _agents(run_cli, torchrun, script, [{}, {}], tmp_path, "--backend", "nccl")
    report = next(o for o in outs if "dl-doctor preflight" in o)
    line = next(l for l in report.splitlines() if l.startswith("all-reduce over nccl"))
    assert "FAILED" in line and "pairs that cannot reduce:" in line and " <-> " in line
    assert codes == [1, 1]


# -- the payload exchange, with a fake process group (tests/fake_dist.py): what a hostile or broken peer can send ------

def test_honest_payloads_are_gathered_into_nodes():
    from dl_doctor.integrations import preflight

    torch = FakeTorch()
    dist = FakeDist(0, _peers({1: _payload(1), 2: _payload(2)}))
    nodes = preflight._payload_nodes(preflight._gather_json(dist, torch, _mine(0)))
    assert [(n.name, n.source, n.section["compare"]) for n in nodes] == [
        (f"node-{r}", f"rank {r}", {"driver": "550"}) for r in range(3)]


def test_no_majority_names_the_node_with_each_value():
    """Two nodes that disagree (or three that all do): rank 0 names the node that has each value, not "1 node has"."""
    import io
    import json

    from dl_doctor.integrations import preflight

    def payload(rank, ifname):
        section = {"version": "1", "identity": {"hostname": f"node-{rank}"}, "failing": [], "warnings": 0,
                   "compare": {"driver": "550", "env.NCCL_SOCKET_IFNAME": ifname}}
        return _payload(rank, section)

    for values in (["lo", "eth7"], ["lo", "eth7", "ens5"]):
        dist = FakeDist(0, _peers({r: payload(r, v) for r, v in enumerate(values) if r}))
        mine = json.loads(payload(0, values[0]))
        nodes = preflight._payload_nodes(preflight._gather_json(dist, FakeTorch(), mine))
        stream = io.StringIO()
        assert preflight._report(nodes, None, None, stream) is False
        lines = [l for l in stream.getvalue().splitlines() if "NCCL_SOCKET_IFNAME" in l]
        expected = {2: "  DIFFERS env.NCCL_SOCKET_IFNAME (no majority): node-0 = lo; node-1 = eth7",
                    3: "  DIFFERS env.NCCL_SOCKET_IFNAME (no majority): node-0 = lo; node-1 = eth7; node-2 = ens5"}
        assert lines == [expected[len(values)]]


def test_a_huge_announced_payload_is_refused_on_every_rank_before_it_is_allocated():
    from dl_doctor.integrations import preflight

    for rank in (0, 2):
        torch = FakeTorch()
        peers = {r: (1 << 40, b"") if r == 1 else (len(_payload(r)), _payload(r)) for r in range(3) if r != rank}
        dist = FakeDist(rank, peers)
        with pytest.raises(preflight.PreflightError, match=r"rank 1 announced 1099511627776 bytes: over the 4 MiB"):
            preflight._gather_json(dist, torch, _mine(rank))
        assert dist.calls == 1 and max(torch.allocated) == 1  # only the sizes were gathered
    # many ranks each under the limit, together over what every rank would hold
    peers = {r: (4 << 20, b"") for r in range(1, 100)}
    with pytest.raises(preflight.PreflightError, match=r"the payloads of 100 ranks would take 400 MiB"):
        preflight._gather_json(FakeDist(0, peers), FakeTorch(), _mine(0))


@pytest.mark.parametrize("bad,reason", [
    (b'{"identity": {"hostname": ', "rank 1's payload is not a JSON file"),
    (b"[" * 10000 + b"]" * 10000, "rank 1's payload is nested too deeply"),
    (b"\xff\xfe", "rank 1's payload is not UTF-8 text"),
    (b'{"identity": {"hostname": "n", "agent": 1, "rank": 1}, "section": {"compare": []}}',
     "rank 1's payload: fleet_node.compare is an array, not an object"),
    (b'{"identity": "n", "section": {}}', "rank 1's payload: identity is not a host name, an agent and a rank"),
    (b"[1, 2]", "rank 1's payload: identity is not"),
])
def test_a_malformed_peer_payload_is_named_by_its_rank_on_every_rank(bad, reason):
    from dl_doctor.integrations import preflight

    for rank in (0, 2):
        payloads = {r: _payload(r) for r in range(3) if r != rank}
        payloads[1] = bad
        with pytest.raises(preflight.PreflightError) as err:
            preflight._payload_nodes(preflight._gather_json(FakeDist(rank, _peers(payloads)), FakeTorch(),
                                                            _mine(rank)))
        assert reason in str(err.value)


@pytest.fixture
def fake_torch_modules(monkeypatch):
    """``import torch`` and ``torch.distributed`` answered by the fakes, for main() itself."""
    import types

    from dl_doctor.integrations import preflight

    fake = FakeTorch()
    torch = types.ModuleType("torch")
    for name in ("int64", "uint8"):
        setattr(torch, name, getattr(fake, name))
    torch.tensor, torch.zeros, torch.frombuffer = fake.tensor, fake.zeros, fake.frombuffer
    torch.cuda = types.SimpleNamespace(is_available=lambda: False)
    distributed = types.ModuleType("torch.distributed")
    torch.distributed = distributed
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.distributed", distributed)
    monkeypatch.setattr(preflight, "node_section", lambda doctor, timeout: _mine(0)["section"])

    def job(dist):
        for name in ("get_rank", "get_world_size", "all_gather", "broadcast"):
            setattr(distributed, name, getattr(dist, name))
        distributed.is_initialized = lambda: True
        distributed.is_nccl_available = lambda: False
    return job


def test_every_rank_exits_2_naming_the_rank_whose_payload_is_malformed(fake_torch_modules, capsys):
    from dl_doctor.integrations import preflight

    for rank in (0, 1):
        payloads = {r: _payload(r) for r in range(3) if r != rank}
        payloads[2] = b'{"identity": '
        fake_torch_modules(FakeDist(rank, _peers(payloads)))
        assert preflight.main(["--no-allreduce"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("dl-doctor preflight: error: rank 2's payload is not a JSON"), err


def test_when_rank_0_cannot_compare_every_rank_exits_2(fake_torch_modules, tmp_path, capsys):
    from dl_doctor.integrations import preflight

    peers = _peers({1: _payload(1)})
    fake_torch_modules(FakeDist(0, peers))
    # rank 0 cannot write its --json (a directory is there: write_file refuses it, as it refuses another user's file)
    (tmp_path / "r.json").mkdir()
    assert preflight.main(["--no-allreduce", "--json", str(tmp_path / "r.json")]) == 2
    assert "rank 0 could not compare the nodes: OutputRefused" in capsys.readouterr().err
    fake_torch_modules(FakeDist(1, {0: (len(_payload(0)), _payload(0))}, verdict=preflight.ERROR))
    assert preflight.main(["--no-allreduce"]) == 2  # the verdict it hears is the error, not "ready"
    assert "rank 0 could not compare the nodes (its output says why)" in capsys.readouterr().err
    fake_torch_modules(FakeDist(1, {0: (len(_payload(0)), _payload(0))}, verdict=preflight.NOT_READY))
    assert preflight.main(["--no-allreduce"]) == 1
