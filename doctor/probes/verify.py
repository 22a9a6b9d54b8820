"""The workloads of `dl-doctor verify` (and `run --verify`), as facts: only when asked for, never in a default run."""

from __future__ import annotations

from typing import Any, Dict, List

from dl_doctor.probes import ProbeContext, Unavailable, probe


def _interpreter(ctx: ProbeContext) -> str:
    """The environment to verify with: the first --python, else the active conda environment or virtualenv, else
    python3 on PATH."""
    host = ctx.host
    pythons: List[str] = list(ctx.options.get("python") or [])
    if pythons:
        return pythons[0]
    env = host.environ()
    for var in ("CONDA_PREFIX", "VIRTUAL_ENV"):
        if env.get(var) and host.is_file(f"{env[var]}/bin/python"):
            return f"{env[var]}/bin/python"
    return host.which("python3") or "python3"


@probe("verify", "short bounded workloads in an environment's own torch: matmul per GPU and dtype, a cuDNN "
       "convolution, pinned copies, an NCCL all-reduce (only with dl-doctor verify or run --verify)",
       timeout_option="verify_timeout")
def verify_probe(ctx: ProbeContext) -> Dict[str, Any]:
    if not ctx.options.get("verify"):
        raise Unavailable("not asked for: dl-doctor verify (or run --verify) runs the workloads")
    if not ctx.host.live:
        raise Unavailable("workloads run on a running machine, not a sysroot")
    from dl_doctor.verify import run_workload

    level = ctx.options.get("verify_level") or "quick"
    out = run_workload(ctx.host, _interpreter(ctx), level)
    out["dcgm"] = _dcgm(ctx, level)
    return out


def _dcgm(ctx: ProbeContext, level: str) -> Dict[str, Any]:
    """`dcgmi diag -r 1` (2 for --long) where DCGM is installed, its JSON parsed (both shapes); the run's own
    judgement comes from that JSON, not from the exit code."""
    import json

    from dl_doctor.dcgm import parse_diag

    exe = ctx.host.which("dcgmi")
    if not exe:
        return {"ran": False, "reason": "dcgmi is not installed"}
    argv = [exe, "diag", "-r", "1" if level == "quick" else "2", "-j"]
    try:
        r = ctx.host.run(argv, timeout=120 if level == "quick" else 600)
    except OSError as exc:
        return {"ran": False, "reason": f"dcgmi could not run: {exc}"}
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        return {"ran": False, "reason": f"dcgmi diag printed no JSON (exit {r.returncode}): "
                                        f"{(r.stderr or r.stdout).strip()[-300:]}"}
    return {"ran": True, "command": " ".join(argv[1:]), **parse_diag(doc)}
