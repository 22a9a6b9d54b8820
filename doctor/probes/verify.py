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
    return run_workload(ctx.host, _interpreter(ctx), level)
