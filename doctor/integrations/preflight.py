"""A torchrun preflight: before training starts, each node's local rank 0 runs dl-doctor on its node, the summaries
are gathered to rank 0 over a gloo group and compared (the odd nodes out, the failing checks), and a tiny all-reduce
over the job's own backend proves the path between the nodes; rank 0 prints the verdict and every rank exits with it.

    torchrun --nnodes=N --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT -m dl_doctor.integrations.preflight

or, in a training script, once per node on local rank 0 (with the default process group initialised, or not):

    from dl_doctor.integrations.preflight import preflight
    ok = preflight()

The traffic is the job's own: its process group, between its own nodes (docs/clusters.md). Nodes are keyed by host
name, and where two ranks share one (two agents on one host) by the torchrun agent's process too: ranks are not
stable across restarts, so they never name a node.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from datetime import timedelta
from typing import Any, Dict, List, Optional

MAX_PAIR_TESTS = 16  # nodes up to which a failed all-reduce is narrowed down to the pairs that cannot talk
MAX_PAYLOAD_BYTES = 4 << 20    # one node's summary (dl-doctor's are tens of KiB)
MAX_GATHER_BYTES = 256 << 20   # all the summaries, as every rank holds them


def _doctor_command(doctor: Optional[str], host=None) -> List[str]:
    """How this node's dl-doctor is started: the one named, else ``dl-doctor`` on the trusted search path
    (doctor.spawn: never the current directory), else this interpreter's own copy (``-m dl_doctor``)."""
    if doctor:
        return [doctor]
    from dl_doctor.host import Host

    found = (host or Host()).which("dl-doctor")
    return [found] if found else [sys.executable, "-m", "dl_doctor"]


def node_section(doctor: Optional[str] = None, timeout: float = 120.0, extra: Optional[List[str]] = None) -> Dict[str, Any]:
    """This node's fleet section, from a fast dl-doctor run that also inspects this interpreter's environment.

    The child is started like every program dl-doctor runs (Host.run: the trust rule, the checked descriptor, cwd
    ``/``, a scrubbed environment); ``-m dl_doctor`` runs in this interpreter isolated, with its session path."""
    from dl_doctor.host import Host

    host = Host()
    command = _doctor_command(doctor, host)
    args = ["run", "--profile", "fast", "--python", sys.executable, "--json", "-", "--html", os.devnull,
            "--fail-on", "never", *(extra or [])]
    try:
        if command[1:] == ["-m", "dl_doctor"]:
            r = host.run_python(command[0], "import runpy, sys; sys.argv = sys.argv[1:]; "
                                "runpy.run_module('dl_doctor', run_name='__main__')", ["dl-doctor", *args], timeout=timeout, requested=True)
        else:
            r = host.run([*command, *args], timeout=timeout, requested=bool(doctor))
        if r.timed_out:
            raise TimeoutError(f"no answer within {timeout:g}s")
        doc = json.loads(r.stdout)
        return doc["fleet_node"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        return {"version": "1", "identity": {}, "compare": {},
                "failing": [{"id": "DLD-PREFLIGHT", "status": "error",
                             "headline": f"dl-doctor could not run on this node: {type(exc).__name__}: {exc}"[:200]}],
                "warnings": 0}


class PreflightError(RuntimeError):
    """The preflight cannot give a verdict (a peer's payload is refused or malformed, rank 0 could not compare the
    nodes); raised on every rank alike, so every agent exits 2 instead of some waiting for a verdict that never
    comes."""


def _refused_sizes(sizes: List[int]) -> Optional[str]:
    """Why the announced payload sizes cannot be gathered (every rank sees the same sizes, so every rank decides
    the same), before anything is allocated for them; None when they can."""
    bad = [f"rank {r} announced {n} bytes" for r, n in enumerate(sizes) if not 0 <= n <= MAX_PAYLOAD_BYTES]
    if bad:
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        return f"{', '.join(bad[:5])}{more}: over the {MAX_PAYLOAD_BYTES >> 20} MiB limit for a node's payload"
    total = len(sizes) * max(sizes, default=0)
    if total > MAX_GATHER_BYTES:
        return (f"the payloads of {len(sizes)} ranks would take {total >> 20} MiB on every rank, over the "
                f"{MAX_GATHER_BYTES >> 20} MiB limit")
    return None


def _gather_json(dist, torch, value: Any) -> List[Any]:
    """Every rank's JSON-able ``value``, gathered on every rank as bytes tensors (no pickling, no NumPy).

    The sizes go first; a size over the limits is refused on every rank before the payloads are allocated, and
    each payload is parsed under the bounds of any input (``validate``). A PreflightError (on every rank alike)
    names the ranks whose payload is refused or is not JSON."""
    from dl_doctor.facts.validate import InputError, load_json_bytes

    data = json.dumps(value).encode()
    world = dist.get_world_size()
    size = torch.tensor([len(data)], dtype=torch.int64)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, size)
    announced = [int(s.item()) for s in sizes]
    refused = _refused_sizes(announced)
    if refused:
        raise PreflightError(f"not gathering the nodes' summaries: {refused}")
    longest = max(announced)
    mine = torch.zeros(longest, dtype=torch.uint8)
    if data:
        mine[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    parts = [torch.zeros(longest, dtype=torch.uint8) for _ in range(world)]
    dist.all_gather(parts, mine)
    values, bad = [], []
    for rank, (part, n) in enumerate(zip(parts, announced)):
        try:
            values.append(load_json_bytes(bytes(part[:n].tolist()), f"rank {rank}'s payload"))
        except InputError as exc:
            bad.append(str(exc))
    if bad:
        raise PreflightError("; ".join(bad[:5]) + (f"; and {len(bad) - 5} more" if len(bad) > 5 else ""))
    return values


def _payload_nodes(gathered: List[Any]) -> List[Any]:
    """The fleet nodes in the gathered payloads, each held to the shape the comparison relies on; a
    PreflightError names every rank whose payload does not fit (decided alike on every rank)."""
    from dl_doctor.integrations import fleet
    from dl_doctor.facts.validate import InputError

    checked, bad = [], []
    for rank, g in enumerate(gathered):
        identity = g.get("identity") if isinstance(g, dict) else None
        try:
            if not isinstance(identity, dict) or not isinstance(identity.get("hostname"), str) \
                    or not all(isinstance(identity.get(k), int) for k in ("agent", "rank")):
                raise InputError("identity is not a host name, an agent and a rank")
            checked.append((identity["hostname"][:200], identity["agent"], fleet.conform(g.get("section"))))
        except InputError as exc:
            bad.append(f"rank {rank}'s payload: {exc}")
    if bad:
        raise PreflightError("; ".join(bad[:5]) + (f"; and {len(bad) - 5} more" if len(bad) > 5 else ""))
    hosts = [host for host, _, _ in checked]
    nodes = []
    for rank, (host, agent, section) in enumerate(checked):
        # two agents on one host: the agent's process tells them apart
        name = f"{host}:agent-{agent}" if hosts.count(host) > 1 else host
        nodes.append(fleet.Node(name, f"rank {rank}", section))
    return nodes


def _allreduce(dist, torch, backend: str, world: int, timeout: float) -> Dict[str, Any]:
    """A one-element all-reduce over ``backend`` (the job's: NCCL where CUDA is, else gloo), bounded by ``timeout``;
    when it fails, the pairs of ranks that cannot reduce together (up to MAX_PAIR_TESTS ranks)."""
    out: Dict[str, Any] = {"backend": backend, "ok": False}
    start = time.monotonic()
    device = "cpu"
    try:
        if backend == "nccl":
            device = f"cuda:{torch.cuda.current_device()}"
        group = dist.new_group(backend=backend, timeout=timedelta(seconds=timeout))
        t = torch.ones(1, device=device)
        dist.all_reduce(t, group=group)
        out["ok"] = int(t.item()) == world
        out["seconds"] = round(time.monotonic() - start, 3)
        if not out["ok"]:
            out["error"] = f"the sum was {t.item()}, not {world}"
        return out
    except Exception as exc:  # noqa: BLE001 - a transport error is the finding
        out["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    if world > MAX_PAIR_TESTS:
        return out
    bad = []
    for i in range(world):
        for j in range(i + 1, world):
            try:
                if backend == "nccl":
                    device = f"cuda:{torch.cuda.current_device()}"
                pair = dist.new_group([i, j], backend=backend, timeout=timedelta(seconds=max(5.0, timeout / 4)))
                if dist.get_rank() in (i, j):
                    t = torch.ones(1, device=device)
                    dist.all_reduce(t, group=pair)
            except Exception:  # noqa: BLE001
                bad.append([i, j])
    out["failed_pairs"] = bad
    return out


def verdict_text(result: Dict[str, Any]) -> str:
    """What rank 0 prints: the fleet comparison and the all-reduce's line. Host names and errors come from the
    peers, so every value is one escaped line (a peer cannot retitle rank 0's terminal or forge its verdict)."""
    from dl_doctor.integrations import fleet
    from dl_doctor.reports.text import safe_line

    text = fleet.render_text(result)
    path = result.get("path")
    if path is not None:
        line = (f"all-reduce over {safe_line(path['backend'])}: " + (
            f"ok in {safe_line(path.get('seconds'))} s" if path["ok"] else f"FAILED ({safe_line(path.get('error'))})"))
        if path.get("failed_pairs_named"):
            line += "; pairs that cannot reduce: " + ", ".join(f"{safe_line(a)} <-> {safe_line(b)}"
                                                              for a, b in path["failed_pairs_named"])
        text = text.rstrip("\n") + "\n" + line + "\n"
    return "dl-doctor preflight\n" + text


READY, NOT_READY, ERROR = 1, 0, 2  # the verdict rank 0 broadcasts


def preflight(doctor: Optional[str] = None, timeout: float = 120.0, backend: str = "auto", allreduce: bool = True,
              json_path: Optional[str] = None, stream=None) -> bool:
    """Run on every node's local rank 0 (or every rank of a --nproc-per-node=1 job); True when the nodes agree, none
    fails and the all-reduce went through. Rank 0 prints the comparison. PreflightError, on every rank, when there
    is no verdict to give (a peer's payload is refused or malformed, rank 0 could not compare)."""
    import torch
    import torch.distributed as dist

    stream = stream or sys.stdout
    own = not dist.is_initialized()
    if own:
        dist.init_process_group("gloo", timeout=timedelta(seconds=timeout))
    try:
        return _preflight(dist, torch, doctor, timeout, backend, allreduce, json_path, stream)
    finally:
        if own:
            dist.destroy_process_group()


def _preflight(dist, torch, doctor, timeout, backend, allreduce, json_path, stream) -> bool:
    rank, world = dist.get_rank(), dist.get_world_size()
    section = node_section(doctor, timeout)
    identity = {"hostname": socket.gethostname(), "agent": os.getppid(), "rank": rank}
    nodes = _payload_nodes(_gather_json(dist, torch, {"identity": identity, "section": section}))
    chosen = backend if backend != "auto" else ("nccl" if torch.cuda.is_available() and dist.is_nccl_available()
                                                else "gloo")
    path = _allreduce(dist, torch, chosen, world, min(timeout, 60.0)) if allreduce and world > 1 else None
    verdict = torch.zeros(1, dtype=torch.int64)
    problem = None
    if rank == 0:
        try:
            verdict[0] = READY if _report(nodes, path, json_path, stream) else NOT_READY
        except Exception as exc:  # noqa: BLE001 - whatever it is, the other ranks must hear there is no verdict
            problem = f"rank 0 could not compare the nodes: {type(exc).__name__}: {str(exc)[:300]}"
            verdict[0] = ERROR
    dist.broadcast(verdict, src=0)
    if int(verdict.item()) == ERROR:
        raise PreflightError(problem or "rank 0 could not compare the nodes (its output says why)")
    return int(verdict.item()) == READY


def _report(nodes, path: Optional[Dict[str, Any]], json_path: Optional[str], stream) -> bool:
    """Rank 0's comparison, printed (and written to ``json_path``); whether the nodes are ready."""
    from dl_doctor.integrations import fleet

    result = fleet.compare(fleet.Fleet(nodes=nodes))
    if path is not None:
        names = {i: n.name for i, n in enumerate(nodes)}
        path["failed_pairs_named"] = [[names.get(a), names.get(b)] for a, b in path.get("failed_pairs", [])]
        result["path"] = path
        result["ok"] = result["ok"] and path["ok"]
    stream.write(verdict_text(result))
    stream.flush()
    if json_path:
        from dl_doctor.host.output import write_file

        write_file(json_path, json.dumps(result, indent=2) + "\n")  # refused (another user's file): rank 0 errs
    return result["ok"]


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dl_doctor.integrations.preflight",
                                description="Run under torchrun (--nproc-per-node=1): compare the nodes before "
                                            "training and prove the path between them. Exit 0 ready, 1 not, 2 error.")
    p.add_argument("--doctor", help="the dl-doctor program (default: dl-doctor on PATH)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds for the node's run and the collectives")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                   help="the all-reduce's backend (auto: NCCL where CUDA is, else gloo)")
    p.add_argument("--no-allreduce", action="store_true", help="only compare the nodes")
    p.add_argument("--json", dest="json_path", help="rank 0 also writes the comparison here")
    args = p.parse_args(argv)
    try:
        ok = preflight(args.doctor, args.timeout, args.backend, not args.no_allreduce, args.json_path)
    except ImportError as exc:
        print(f"dl-doctor preflight: error: needs torch ({exc})", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # a transport error can quote what a peer sent: one escaped line
        from dl_doctor.reports.text import safe_line

        print(f"dl-doctor preflight: error: {safe_line(str(exc)[:500])}", file=sys.stderr)
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
