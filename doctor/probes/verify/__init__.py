"""The workloads of `dl-doctor verify` (and `run --verify`), as facts: only when asked for, never in a default run.

The probe (this module) picks the interpreter and the GPUs and assembles the facts; ``workload`` holds the scripts
run in that interpreter, ``gpuwatch`` watches NVML meanwhile, ``dcgm`` runs and reads dcgmi. It records what was
measured, never what it is held against: the checks (checks/verify.py) judge with the run's matrix."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from dl_doctor.probes import ProbeContext, Unavailable, probe
from dl_doctor.probes.verify.provides import VERIFY_FACTS


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


@probe("verify", "short bounded workloads in an environment's own torch or JAX: matmul per GPU and dtype, a cuDNN "
       "convolution, pinned copies, an NCCL all-reduce, with NVML watched meanwhile; dcgmi diag and health where "
       "DCGM is installed (only with dl-doctor verify or run --verify)",
       timeout_option="verify_timeout", provides=VERIFY_FACTS)
def verify_probe(ctx: ProbeContext) -> Dict[str, Any]:
    if not ctx.options.get("verify"):
        raise Unavailable("not asked for: dl-doctor verify (or run --verify) runs the workloads")
    if not ctx.host.live:
        raise Unavailable("workloads run on a running machine, not a sysroot")
    from dl_doctor.probes.verify.dcgm import run_diag, run_health
    from dl_doctor.probes.verify.workload import renumber, run_workload

    level = ctx.options.get("verify_level") or "quick"
    watch, why = _watch(ctx)
    gpus = watch.identities() if watch is not None else []
    skip = {} if ctx.options.get("verify_include_busy") or watch is None else watch.busy()
    env, extra = _visibility(ctx, gpus, skip)
    python = _interpreter(ctx)
    # the trust rule (docs/security.md): an interpreter named with --python runs as asked; one found through
    # CONDA_PREFIX, VIRTUAL_ENV or PATH runs as root only if root controls it and what it executes at start-up
    requested = bool(ctx.options.get("python"))
    try:
        out = run_workload(ctx.host, python, level, skip=skip, pairs_below_gbps=_pairs_below(ctx, gpus), watch=watch,
                           env=env, requested=requested, startup_paths=() if requested else _startup(ctx.host, python),
                           framework=ctx.options.get("verify_framework") or "auto", **extra)
    finally:
        if watch is not None:
            watch.close()
    renumber(out, gpus)
    out["nvml_gpus"] = gpus
    out["left_alone"] = {g["index"]: skip[g["uuid"]] for g in gpus if g.get("uuid") in skip}
    out["include_busy"] = bool(ctx.options.get("verify_include_busy"))
    if watch is None:
        out["watch"] = {"ran": False, "reason": why}
    out["dcgm"] = run_diag(ctx.host, int(ctx.options.get("verify_dcgm_level", 2 if level == "long" else 1)))
    out["dcgm_health"] = run_health(ctx.host)
    return out


def _pairs_below(ctx: ProbeContext, gpus) -> Optional[float]:
    """The all-reduce bus bandwidth (GB/s) under which every pair of GPUs is also measured alone (PAIRS_BELOW of
    the node's expectation in the run's matrix, ProbeContext.matrix); None without a matrix or an expectation. What
    the measurement is judged against is the check's to say (checks/verify.py), not recorded here."""
    from dl_doctor.probes.verify.workload import PAIRS_BELOW

    expect = ctx.matrix.node_busbw_expectation(gpus) if ctx.matrix is not None else {}
    return round(PAIRS_BELOW * expect["gbps"], 1) if expect.get("gbps") else None


def _startup(host, python: str) -> List[str]:
    """What ``python`` executes before any script: its environment's .pth files and their imports, sitecustomize."""
    import posixpath

    from dl_doctor.probes.python_envs.static import site_dirs
    from dl_doctor.host.trust import python_startup_paths

    prefix = posixpath.dirname(posixpath.dirname(python))
    kind = ("venv" if host.is_file(f"{prefix}/pyvenv.cfg") else
            "conda" if host.is_dir(f"{prefix}/conda-meta") else "system")
    try:
        sites = site_dirs(host, {"prefix": prefix, "kind": kind})
    except OSError:
        sites = []
    return python_startup_paths(host, prefix if kind != "system" else None, sites)


def _visibility(ctx: ProbeContext, gpus, skip: Dict[str, str]):
    """Keep the workload off the GPUs left alone: CUDA_VISIBLE_DEVICES names the others by UUID (no CUDA context,
    no memory taken on a GPU someone else is using), unless the person already set CUDA_VISIBLE_DEVICES, which is
    kept (torch then skips by UUID). Returns the environment to add and the plan's visible_uuids / no_gpu_reason."""
    if not skip or "CUDA_VISIBLE_DEVICES" in ctx.host.environ():
        return {}, {}
    visible = [g["uuid"] for g in gpus if g.get("uuid") and g["uuid"] not in skip]
    extra: Dict[str, Any] = {"visible_uuids": visible}
    if not visible:
        extra["no_gpu_reason"] = ("every GPU has compute processes of others on it (NVML); --include-busy tests "
                                  "them anyway")
    return {"CUDA_VISIBLE_DEVICES": ",".join(f"GPU-{u}" for u in visible)}, extra


def _watch(ctx: ProbeContext):
    """A GpuWatch with NVML open, or None and why not."""
    if not ctx.host.kernel_live or not ctx.host.exists("/proc/driver/nvidia"):
        return None, "the NVIDIA kernel module is not loaded (no /proc/driver/nvidia): nothing for NVML to watch"
    nv = ctx.options.get("verify_nvml")  # tests hand in a recorded NVML
    if nv is None:
        try:
            import pynvml
        except ImportError as exc:  # pragma: no cover - a declared dependency
            return None, f"nvidia-ml-py is not installed: {exc}"
        nv = pynvml
    from dl_doctor.probes.verify.gpuwatch import GpuWatch

    watch = GpuWatch(nv)
    why = watch.open()
    if why:
        watch.close()
        return None, why
    return watch, None
