"""The torchrun preflight with a real torchrun: two local "nodes" (two torchrun agents on this host, rendezvous over
c10d on loopback, gloo on CPU with the local CPU torch wheel), one with a planted NCCL setting. Rank 0 names the
difference and the node that has it, the two agents on one host stay two nodes, the all-reduce proves the path, and
both agents exit with rank 0's verdict."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

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
                      "from dl_doctor.preflight import main\nsys.exit(main(sys.argv[1:]))\n")
    return torchrun, script


def _agents(torchrun, script, envs, tmp_path, *extra_args):
    port = _free_port()
    procs = []
    for n, extra in enumerate(envs):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "FI_"))}
        env.update(extra)
        procs.append(subprocess.Popen(
            [str(torchrun), "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
             f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=preflight-test", str(script),
             "--doctor", str(DOCTOR), "--timeout", "120", "--json", str(tmp_path / f"r{n}.json"), *extra_args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env))
    outs = [p.communicate(timeout=300)[0] for p in procs]
    return [p.returncode for p in procs], outs


def test_two_local_nodes_with_a_planted_nccl_setting(launcher, tmp_path):
    import json

    torchrun, script = launcher
    codes, outs = _agents(torchrun, script, [{"NCCL_SOCKET_IFNAME": "lo"}, {"NCCL_SOCKET_IFNAME": "eth7"}],
                          tmp_path)
    report = next(o for o in outs if "dl-doctor preflight" in o)
    text = report[report.index("dl-doctor preflight"):]
    assert "2 nodes in 1 group" in text
    assert "DIFFERS env.NCCL_SOCKET_IFNAME: 1 node has" in text and "(no majority)" in text
    host = socket.gethostname()
    assert text.count(f"{host}:agent-") >= 1  # two agents on one host are two nodes, named by their agent
    assert "all-reduce over gloo: ok in" in text
    assert codes == [1, 1], outs  # every agent exits with rank 0's verdict
    result = json.loads(next(p for p in tmp_path.glob("r*.json")).read_text())
    [diff] = [d for d in result["groups"][0]["differences"] if d["fact"] == "env.NCCL_SOCKET_IFNAME"]
    assert sorted(o["value"] for o in diff["odd"]) + [diff["majority"]] != [] and {diff["majority"]} | {
        o["value"] for o in diff["odd"]} == {"lo", "eth7"}
    assert result["path"]["ok"] is True and result["path"]["backend"] == "gloo"


def test_a_backend_the_nodes_cannot_use_is_named_with_the_pairs(launcher, tmp_path):
    """NCCL on CPU-only nodes: the all-reduce over the job's backend fails, and the pair that cannot reduce is named."""
    torchrun, script = launcher
    codes, outs = _agents(torchrun, script, [{}, {}], tmp_path, "--backend", "nccl")
    report = next(o for o in outs if "dl-doctor preflight" in o)
    line = next(l for l in report.splitlines() if l.startswith("all-reduce over nccl"))
    assert "FAILED" in line and "pairs that cannot reduce:" in line and " <-> " in line
    assert codes == [1, 1]
