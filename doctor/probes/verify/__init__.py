"""The workloads of `dl-doctor verify` (and `run --verify`), as facts: only when asked for, never in a default run."""

from __future__ import annotations

from typing import Any, Dict, List

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
    from dl_doctor.probes.verify.workload import ALLREDUCE_FLOOR, busbw_expectation, renumber, run_workload

    level = ctx.options.get("verify_level") or "quick"
    watch, why = _watch(ctx)
    gpus = watch.identities() if watch is not None else []
    skip = {} if ctx.options.get("verify_include_busy") or watch is None else watch.busy()
    expect = _expectation(gpus, busbw_expectation)
    floor = round(ALLREDUCE_FLOOR * expect["gbps"], 1) if expect.get("gbps") else None
    env, extra = _visibility(ctx, gpus, skip)
    python = _interpreter(ctx)
    # the trust rule (docs/security.md): an interpreter named with --python runs as asked; one found through
    # CONDA_PREFIX, VIRTUAL_ENV or PATH runs as root only if root controls it and what it executes at start-up
    requested = bool(ctx.options.get("python"))
    try:
        out = run_workload(ctx.host, python, level, skip=skip, busbw_floor=floor, watch=watch, env=env,
                           requested=requested, startup_paths=() if requested else _startup(ctx.host, python),
                           framework=ctx.options.get("verify_framework") or "auto", **extra)
    finally:
        if watch is not None:
            watch.close()
    renumber(out, gpus)
    out["nvml_gpus"] = gpus
    out["left_alone"] = {g["index"]: skip[g["uuid"]] for g in gpus if g.get("uuid") in skip}
    out["include_busy"] = bool(ctx.options.get("verify_include_busy"))
    if expect:
        out["busbw_expectation"] = dict(expect, floor_gbps=floor, floor_ratio=ALLREDUCE_FLOOR)
    if watch is None:
        out["watch"] = {"ran": False, "reason": why}
    out["dcgm"] = _dcgm(ctx, int(ctx.options.get("verify_dcgm_level", 2 if level == "long" else 1)))
    out["dcgm_health"] = _dcgm_health(ctx)
    return out


def _startup(host, python: str) -> List[str]:
    """What ``python`` executes before any script: its environment's .pth files and their imports, sitecustomize."""
    import posixpath

    from dl_doctor.probes.python_envs import site_dirs
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


def _expectation(gpus, busbw_expectation) -> Dict[str, Any]:
    """The all-reduce's expectation for this node: the lowest of its GPUs' (the slowest link sets the pace)."""
    from dl_doctor import compat_matrix

    try:
        matrix = compat_matrix.load()
    except Exception:  # noqa: BLE001 - a broken site overlay costs only the expectation
        return {}
    found = [e for e in (busbw_expectation(matrix, g.get("name"), g.get("pcie")) for g in gpus) if e]
    return min(found, key=lambda e: e["gbps"]) if found else {}


def _dcgm(ctx: ProbeContext, level: int) -> Dict[str, Any]:
    """`dcgmi diag -r LEVEL` where DCGM is installed (1 with --quick, 2 with --long, or --dcgm-level), its JSON parsed
    (both shapes); the run's own judgement comes from that JSON, not from the exit code."""
    from dl_doctor.app import DCGM_DIAG_SECONDS
    from dl_doctor.probes.verify.dcgm import load_json, parse_diag

    if not level:
        return {"ran": False, "reason": "not asked for (--dcgm-level 0)"}
    exe = ctx.host.which("dcgmi")
    if not exe:
        return {"ran": False, "reason": "dcgmi is not installed"}
    argv = [exe, "diag", "-r", str(level), "-j"]
    try:
        r = ctx.host.run(argv, timeout=DCGM_DIAG_SECONDS.get(level, 600.0))
    except OSError as exc:
        return {"ran": False, "reason": f"dcgmi could not run: {exc}"}
    doc = load_json(r.stdout)
    parsed = parse_diag(doc)
    if parsed["shape"] is None:
        return {"ran": False, "reason": f"dcgmi diag printed no diagnostic JSON (exit {r.returncode}): "
                                        f"{(r.stderr or r.stdout or '').strip()[-300:]}"}
    return {"ran": True, "command": " ".join(argv[1:]), "exit": r.returncode, **parsed}


def _dcgm_health(ctx: ProbeContext) -> Dict[str, Any]:
    """`dcgmi health -c -j`: what DCGM's background health watches have seen. Read-only: dl-doctor does not set
    watches (`dcgmi health -s a` would change the host engine's state); without them, it says so. dcgmi exits 0
    whatever the health is, so only the JSON is read."""
    from dl_doctor.probes.verify.dcgm import load_json, parse_health

    exe = ctx.host.which("dcgmi")
    if not exe:
        return {"ran": False, "reason": "dcgmi is not installed"}
    try:
        r = ctx.host.run([exe, "health", "-c", "-j"], timeout=30)
    except OSError as exc:
        return {"ran": False, "reason": f"dcgmi could not run: {exc}"}
    parsed = parse_health(load_json(r.stdout))
    if parsed["overall"] is None:
        text = (r.stdout or r.stderr or "").strip()[-300:]
        return {"ran": False, "reason": f"dcgmi health gave no report (exit {r.returncode}): {text}",
                "watches_off": "not enabled" in text}
    return {"ran": True, "command": "health -c -j", "exit": r.returncode, **parsed}
