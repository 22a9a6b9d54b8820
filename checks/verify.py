"""What the verify workloads measured (dl-doctor verify / run --verify), judged: each workload is a finding."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from dl_doctor.model import Facts, Fix, Result, check, fail, passed, skip, warn

PEAK_FLOOR = 0.5   # a GPU below half of its dense peak for a dtype warns (docs/verify.md)
PEER_FLOOR = 0.8   # a GPU below 80% of the node's best GPU for a dtype warns
# PCIe usable bandwidth per lane and generation, GB/s (the raw rate after line coding: 8 GT/s 128b/130b for gen 3,
# doubling each generation); a pinned copy reaching less than half of width x this warns
PCIE_GBPS_PER_LANE = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
COPY_FLOOR = 0.5


# requires=("verify",): without the facts (no `dl-doctor verify`), the engine skips with "not checked: ...", and the
# verify probe's own reason ("not asked for: dl-doctor verify ...") says why


def _v(facts: Facts) -> Optional[Dict[str, Any]]:
    v = facts.get("verify")
    return v if isinstance(v, dict) else None


def _unrunnable(v: Dict[str, Any]) -> Optional[str]:
    if v.get("error"):
        return v["error"]
    imp = (v.get("errors") or {}).get("import")
    if imp:
        return f"the framework does not import in {v.get('python')}: {imp}"
    return None


def _verified(facts: Facts) -> Tuple[Dict[str, Any], Optional[Result]]:
    """The verify facts, or the finding to give instead: a skip when verify did not run, a failure when the
    framework could not run its workloads."""
    v = _v(facts)
    if v is None:
        return {}, skip("not verified: dl-doctor verify (or run --verify) runs the workloads")
    why = _unrunnable(v)
    if why:
        return v, fail(why, {"python": v.get("python")}, FIX_RUN)
    return v, None


FIX_RUN = Fix("Verify with an environment whose torch imports (--python), on the machine itself.",
              ("dl-doctor verify --python /path/to/env/bin/python",))


@check(
    id="DLD-VER-001", slug="matmul-below-peak",
    problem="A GPU's matmul runs below its dense peak or its peers",
    remedy="reset-gpu", drain=False,
    title="Each GPU's matmul reaches its dense peak's range and its peers' (verify)",
    tags=("verify", "gpu", "performance"), requires=("verify",),
    what="""From dl-doctor verify: a matmul per GPU in fp32, tf32, fp16 and bf16 (where the GPU has them), achieved
    TFLOPS against the GPU's dense peak from the matrix (datasheets quote sparse rates, twice as high) and against
    the node's best GPU for the same dtype. Below half the dense peak, or below 80% of the best peer, warns. On a host
    without a CUDA device, a CPU matmul proves the framework computes, and the GPU part says why it was skipped.""",
    why="""A GPU that computes at half speed (throttled, a degraded link, a bad clock state) slows every step of a
    data-parallel job to its pace; nothing else reports it.""",
    fix="""Look at that GPU's clocks and throttle reasons (nvidia-smi -q -d PERFORMANCE,CLOCK), reset it, and move
    the instance if it stays slow.""",
)
def matmul_below_peak(facts: Facts, matrix) -> Result:
    v, early = _verified(facts)
    if early is not None:
        return early
    gpus = [d for d in v.get("devices") or [] if d.get("index") is not None]
    if not gpus:
        cpu = next((d for d in v.get("devices") or [] if d.get("name") == "cpu"), None)
        skipped = (v.get("skipped") or {}).get("gpu_matmul") or "no GPU was tested"
        if cpu and cpu.get("matmul", {}).get("fp32"):
            return passed(f"torch {v.get('version')} computes a matmul on the CPU "
                          f"({cpu['matmul']['fp32']['tflops']} TFLOPS fp32); GPU part skipped: {skipped}",
                          python=v.get("python"), skipped=v.get("skipped"))
        return fail(f"no matmul ran: {(v.get('errors') or {}) or skipped}", {"verify": v}, FIX_RUN)
    best: Dict[str, float] = {}
    for d in gpus:
        for dtype, m in (d.get("matmul") or {}).items():
            best[dtype] = max(best.get(dtype, 0.0), float(m.get("tflops") or 0))
    notes: List[str] = []
    rows = []
    for d in gpus:
        name = str(d.get("name") or "")
        entry = matrix.gpu(name) or (matrix.gpu(name.replace("NVIDIA ", "", 1)) if name.startswith("NVIDIA ") else None)
        peaks = (entry or {}).get("dense_tflops") or {}
        for dtype, m in sorted((d.get("matmul") or {}).items()):
            got = float(m.get("tflops") or 0)
            peak = peaks.get(dtype)
            rows.append({"gpu": d["index"], "name": d.get("name"), "dtype": dtype, "tflops": got, "dense_peak": peak})
            if peak and got < PEAK_FLOOR * peak:
                notes.append(f"GPU {d['index']} {dtype}: {got} TFLOPS, under half of its dense peak {peak}")
            elif best.get(dtype) and got < PEER_FLOOR * best[dtype]:
                notes.append(f"GPU {d['index']} {dtype}: {got} TFLOPS against {best[dtype]} on its best peer")
    errors = {k: e for k, e in (v.get("errors") or {}).items() if ".matmul." in k}
    evidence = {"results": rows, "errors": errors, "thresholds": {"peak": PEAK_FLOOR, "peer": PEER_FLOOR}}
    fix = Fix("Find out why that GPU is slow.", ("nvidia-smi -q -d PERFORMANCE,CLOCK,POWER,TEMPERATURE",
                                                "sudo nvidia-smi -r -i <index>   # reset it when nothing runs on it"))
    if errors:
        return fail("; ".join(f"{k}: {e}" for k, e in errors.items()), evidence, fix)
    if notes:
        return warn("; ".join(notes), evidence, fix)
    return passed(f"{len(gpus)} GPU(s): " + ", ".join(f"{k} best {val} TFLOPS" for k, val in sorted(best.items())),
                  **evidence)


@check(
    id="DLD-VER-002", slug="cudnn-does-not-run",
    problem="cuDNN does not run a convolution",
    remedy="repair-software", drain=False,
    title="cuDNN runs a convolution forward and backward (verify)",
    tags=("verify", "cuda", "frameworks"), requires=("verify",),
    what="""From dl-doctor verify: one convolution forward and backward per GPU with cuDNN enabled (on a host
    without a CUDA device, on the CPU), so cuDNN is known to run, not only to load.""",
    why="""A cuDNN that loads but fails at its first kernel (another build's cuDNN first on the path, an
    architecture it has no kernels for) passes every file check and fails the first training step.""",
    fix="""Let the framework load its own cuDNN (see DLD-PY-004 and DLD-PY-012) and verify again.""",
)
def cudnn_runs(facts: Facts) -> Result:
    v, early = _verified(facts)
    if early is not None:
        return early
    errors = {k: e for k, e in (v.get("errors") or {}).items() if k.endswith(".conv") or k == "cpu"}
    devices = v.get("devices") or []
    bad = [d for d in devices if isinstance(d.get("conv"), dict) and not d["conv"].get("ok")]
    evidence = {"cudnn": v.get("cudnn"), "errors": errors}
    if errors or bad:
        return fail("; ".join([f"{k}: {e}" for k, e in errors.items()] +
                              [f"{d.get('name')}: the gradient is not finite" for d in bad]), evidence,
                    Fix("Let the framework load its own cuDNN.", ("dl-doctor run --only DLD-PY-004,DLD-PY-012",)))
    where = "on the CPU (no CUDA device)" if all(d.get("index") is None for d in devices) else \
        f"with cuDNN {v.get('cudnn')} on {len(devices)} GPU(s)"
    return passed(f"a convolution ran forward and backward {where}", **evidence)


@check(
    id="DLD-VER-003", slug="nccl-allreduce-fails",
    problem="NCCL does not all-reduce across this node's GPUs",
    remedy="reboot", drain=True,
    title="NCCL all-reduces across all local GPUs, correctly (verify)",
    tags=("verify", "nccl", "gpu"), requires=("verify",),
    what="""From dl-doctor verify: one NCCL all-reduce across every tested GPU of the node (single process,
    torch.cuda.nccl), its result checked and its bus bandwidth reported. Skipped with fewer than two GPUs.""",
    why="""An all-reduce that fails or returns a wrong sum on one node hangs or corrupts every data-parallel job
    scheduled there.""",
    fix="""Check the fabric manager and NVLink (DLD-GPU-004, DLD-GPU-008), reset the GPUs or reboot.""",
)
def allreduce(facts: Facts) -> Result:
    v, early = _verified(facts)
    if early is not None:
        return early
    err = (v.get("errors") or {}).get("allreduce")
    ar = v.get("allreduce")
    if err or (isinstance(ar, dict) and not ar.get("correct")):
        return fail(f"the all-reduce across GPUs {ar.get('gpus') if ar else '?'} "
                    f"{'failed: ' + err if err else 'returned a wrong sum'}", {"allreduce": ar, "error": err},
                    Fix("Check NVLink and the fabric manager, then reset the GPUs or reboot.",
                        ("dl-doctor run --only DLD-GPU-004,DLD-GPU-008", "sudo reboot")))
    if not isinstance(ar, dict):
        return skip(f"not run: {(v.get('skipped') or {}).get('allreduce') or 'no all-reduce result'}")
    return passed(f"NCCL all-reduce across GPUs {ar['gpus']}: bus bandwidth {ar.get('busbw_gbps')} GB/s, sum correct",
                  allreduce=ar)


@check(
    id="DLD-VER-004", slug="host-copy-slow",
    problem="Host<->GPU copies run far below the PCIe link's speed",
    remedy="replace-hardware", drain=False,
    title="Pinned host<->GPU copies reach the PCIe link's speed (verify)",
    tags=("verify", "gpu", "pcie", "performance"), requires=("verify",),
    what="""From dl-doctor verify: a pinned copy host->GPU and GPU->host per GPU, against the PCIe link NVML reports
    (generation x width x the per-lane rate after line coding). Under half of that warns.""",
    why="""A GPU on a link trained down, or behind a slow switch, starves its data loader and its NCCL traffic over
    PCIe.""",
    fix="""Compare with DLD-GPU-010 (the link's width), reseat or move the instance.""",
)
def copy_speed(facts: Facts) -> Result:
    v = _v(facts)
    if v is None:
        return skip("not verified: dl-doctor verify (or run --verify) runs the workloads")
    gpus = [d for d in v.get("devices") or [] if d.get("index") is not None and d.get("copy_gbps")]
    if not gpus:
        return skip(f"not run: {(v.get('skipped') or {}).get('copy') or 'no GPU copy was measured'}")
    links = {d.get("index"): (d.get("pcie") or {}) for d in facts.get("nvml.devices") or [] if isinstance(d, dict)}
    slow, rows = [], []
    for d in gpus:
        link = links.get(d["index"]) or {}
        gen, width = link.get("gen"), link.get("width")
        expect = PCIE_GBPS_PER_LANE.get(gen) * width if gen in PCIE_GBPS_PER_LANE and width else None
        c = d["copy_gbps"]
        rows.append({"gpu": d["index"], "h2d": c.get("h2d"), "d2h": c.get("d2h"), "link": f"gen{gen} x{width}",
                     "link_gbps": expect})
        if expect and min(c.get("h2d") or 0, c.get("d2h") or 0) < COPY_FLOOR * expect:
            slow.append(f"GPU {d['index']}: {c.get('h2d')}/{c.get('d2h')} GB/s h2d/d2h on a gen{gen} x{width} link "
                        f"({expect:.1f} GB/s)")
    if slow:
        return warn("; ".join(slow), {"copies": rows}, Fix("Check the link and the topology.",
                                                          ("nvidia-smi -q -d PCIE", "nvidia-smi topo -m")))
    return passed("; ".join(f"GPU {r['gpu']}: {r['h2d']}/{r['d2h']} GB/s" for r in rows), copies=rows)


@check(
    id="DLD-VER-005", slug="dcgm-diag-failed",
    problem="DCGM's diagnostic fails on this node",
    remedy="reset-gpu", drain=True,
    title="DCGM's diagnostic passes (verify, where DCGM is installed)",
    tags=("verify", "gpu", "dcgm"), requires=("verify",),
    what="""Where DCGM is installed, dl-doctor verify runs dcgmi diag -r 1 (-r 2 with --long) and reads its JSON, in
    DCGM 3.x's shape or 4.x's. A failed test fails, naming the GPU, the test and DCGM's message; a warning warns.""",
    why="""DCGM's diagnostic exercises what a training job will: memory, PCIe, NVLink, the SMs under stress. Its
    failures name hardware that should leave service before a job finds it.""",
    fix="""Follow DCGM's message; reset the GPU, rerun the diagnostic, and replace what keeps failing.""",
)
def dcgm_diag(facts: Facts) -> Result:
    v = _v(facts)
    d = (v or {}).get("dcgm")
    if not isinstance(d, dict):
        return skip("not verified with DCGM (dl-doctor verify runs dcgmi diag where DCGM is installed)")
    if not d.get("ran"):
        return skip(d.get("reason") or "dcgmi diag did not run")
    results = [r for r in d.get("results") or [] if isinstance(r, dict)]
    failed = [r for r in results if r.get("status") == "fail"]
    warned = [r for r in results if r.get("status") == "warn"]
    text = lambda r: (f"GPU {r.get('gpu')} {r.get('category')}/{r.get('test')}: "  # noqa: E731
                      + ("; ".join(r.get("messages") or []) or r.get("status", "")))
    evidence = {"shape": d.get("shape"), "command": d.get("command"), "failed": failed[:20], "warned": warned[:20],
                "counts": {s: sum(1 for r in results if r.get("status") == s) for s in ("pass", "fail", "warn", "skip")}}
    fix = Fix("Follow DCGM's message for each failed test.", ("dcgmi diag -r 2 -v   # rerun, verbosely",
                                                              "sudo nvidia-smi -r -i <gpu>   # reset it when idle"))
    if failed:
        return fail("; ".join(text(r) for r in failed[:10]), evidence, fix)
    if warned:
        return warn("; ".join(text(r) for r in warned[:10]), evidence, fix)
    return passed(f"dcgmi {d.get('command')}: {evidence['counts']['pass']} results passed "
                  f"({evidence['counts']['skip']} skipped), DCGM {d.get('shape')} output", **evidence)
