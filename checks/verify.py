"""What the verify workloads measured (dl-doctor verify / run --verify), judged: each workload is a finding."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from dl_doctor.facts import fact_schema
from dl_doctor.facts.contract import conform
from dl_doctor.fixes import reboot, service
from dl_doctor.model import Facts, Fix, Result, check, fail, passed, skip, warn
from dl_doctor.util.units import PCIE_GBPS_PER_LANE

# A GPU below half of its dense (datasheet) peak for a dtype, or below 80% of the node's best GPU for it, warns
# (docs/verify.md). For comparison, DCGM's own diagnostic sets each SKU's SM-stress target at 0.75 of what a healthy
# GPU of that SKU measures (NVIDIA/DCGM nvvs/diag-skus.yaml.in, e.g. H100 80GB HBM3: ~39,000 measured, target 29,250);
# cuBLAS reaches roughly 0.7-0.8 of the dense peak on a healthy GPU, so half the peak is about DCGM's margin or looser
PEAK_FLOOR = 0.5
PEER_FLOOR = 0.8
# A pinned copy reaching less than half of the PCIe link's width x its per-lane rate (dl_doctor.util.units) warns
COPY_FLOOR = 0.5
# Under load (NVML watched during the workloads): these clock event reasons mean the GPU slowed down for a cause
# other than the work's own power budget (sw_power_cap is what a GPU at full load normally shows); seen in at least
# this share of the samples, they warn
SLOWDOWN_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")
SLOWDOWN_SHARE = 0.1
# An all-reduce under a quarter of its links' one-direction bandwidth (the matrix's NVLink figure, else the PCIe link:
# dl_doctor.compat_matrix Matrix.node_busbw_expectation) warns (docs/verify.md)
ALLREDUCE_FLOOR = 0.25


# requires=("verify",): without the facts (no `dl-doctor verify`), the engine skips with "not checked: ...", and the
# verify probe's own reason ("not asked for: dl-doctor verify ...") says why


def _v(facts: Facts) -> Optional[Dict[str, Any]]:
    """The verify facts cut to the shape the verify probe declares (its provides=, through the facts schema). They
    come from a subprocess running someone's interpreter, or from a facts file: what does not have that shape is
    dropped, so a malformed part costs only itself."""
    v = facts.get("verify")
    return conform(v, fact_schema("verify")) if isinstance(v, dict) else None


def _unrunnable(v: Dict[str, Any]) -> Optional[str]:
    if v.get("error"):
        return v["error"]
    imp = (v.get("errors") or {}).get("import")
    if imp:
        return f"{v.get('framework') or 'the framework'} does not import in {v.get('python')}: {imp}"
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


def coverage(v: Dict[str, Any]) -> str:
    """Which GPUs the node-wide parts covered, and which were left alone and why (empty when nothing was)."""
    alone = v.get("left_alone") or {}
    if not alone:
        return ""
    return ("; left alone as in use by others (--include-busy tests them too): "
            + ", ".join(str(why) for why in list(alone.values())[:8]))


def _blind(v: Dict[str, Any]) -> Optional[str]:
    """Why it is a failure that the framework saw no GPU: NVML lists GPUs that were not left alone (a CPU build of
    torch on a GPU node, or a framework whose CUDA cannot start), or None."""
    if not v.get("no_gpu"):
        return None
    listed = v.get("nvml_gpus") or []
    alone = {str(k) for k in (v.get("left_alone") or {})}
    usable = [g for g in listed if str(g.get("index")) not in alone]
    if not usable:
        return None
    return (f"{v.get('framework') or 'the framework'} sees no GPU, though NVML lists {len(usable)} free: "
            f"{v['no_gpu']}")


FIX_RUN = Fix("Verify with an environment whose torch or JAX imports (--python), on the machine itself.",
              ("dl-doctor verify --python /path/to/env/bin/python",))


@check(
    id="DLD-VER-001", slug="matmul-below-peak",
    problem="A GPU's matmul runs below its dense peak or its peers",
    remedy="reset-gpu", drain=False,
    title="Each GPU's matmul reaches its dense peak's range and its peers' (verify)",
    tags=("verify", "gpu", "performance"), requires=("verify",),
    what="""From dl-doctor verify: a matmul per GPU in fp32, tf32, fp16, bf16 and fp8 (where the GPU has them), achieved
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
    blind = _blind(v)
    if not gpus and blind:
        return fail(blind, {"nvml_gpus": v.get("nvml_gpus"), "framework_says": v.get("no_gpu")},
                    Fix("Verify with an environment whose framework is a CUDA build for this driver.",
                        ("dl-doctor run --python /path/to/env/bin/python   # what the environment's build needs",
                         "dl-doctor verify --python /path/to/another/env/bin/python")),
                    headline="The framework sees none of the GPUs", remedy="repair-software", drain=False)
    if not gpus:
        cpu = next((d for d in v.get("devices") or [] if d.get("name") == "cpu"), None)
        skipped = (v.get("skipped") or {}).get("gpu_matmul") or "no GPU was tested"
        if cpu and cpu.get("matmul", {}).get("fp32"):
            return passed(f"{v.get('framework') or 'torch'} {v.get('version')} computes a matmul on the CPU "
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
    evidence: Dict[str, Any]
    evidence = {"results": rows, "errors": errors, "thresholds": {"peak": PEAK_FLOOR, "peer": PEER_FLOOR}}
    fix = Fix("Find out why that GPU is slow.", ("nvidia-smi -q -d PERFORMANCE,CLOCK,POWER,TEMPERATURE",
                                                "sudo nvidia-smi -r -i <index>   # reset it when nothing runs on it"))
    if errors:
        return fail("; ".join(f"{k}: {e}" for k, e in errors.items()), evidence, fix)
    if notes:
        return warn("; ".join(notes) + coverage(v), evidence, fix)
    fp8 = {d["index"]: d["fp8"] for d in gpus if d.get("fp8")}
    if fp8:
        evidence["fp8_not_run"] = fp8
    return passed(f"{len(gpus)} GPU(s) {sorted(d['index'] for d in gpus)}: "
                  + ", ".join(f"{k} best {val} TFLOPS" for k, val in sorted(best.items())) + coverage(v), **evidence)


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
    bad = [d for d in devices if "conv" in d and not d["conv"].get("ok")]
    evidence: Dict[str, Any] = {"cudnn": v.get("cudnn"), "errors": errors}
    if errors or bad:
        return fail("; ".join([f"{k}: {e}" for k, e in errors.items()] +
                              [f"{d.get('name')}: the gradient is not finite" for d in bad]), evidence,
                    Fix("Let the framework load its own cuDNN.", ("dl-doctor run --only DLD-PY-004,DLD-PY-012",)))
    where = "on the CPU (no CUDA device)" if all(d.get("index") is None for d in devices) else \
        f"with cuDNN {v.get('cudnn')} on {len(devices)} GPU(s)"
    return passed(f"a convolution ran forward and backward {where}", **evidence)


def allreduce_expectation(v: Dict[str, Any], matrix) -> Dict[str, Any]:
    """What the verify facts' all-reduce is held against, from the GPUs NVML named (``nvml_gpus``: their names and
    PCIe links) and ``matrix``: the node's expectation (``gbps``, ``via``, ``unverified``) with the floor under
    which it warns (``floor_gbps``, ``floor_ratio``); ``{}`` when nothing is known."""
    expect = matrix.node_busbw_expectation(v.get("nvml_gpus") or []) if matrix is not None else {}
    if not expect.get("gbps"):
        return {}
    return dict(expect, floor_gbps=round(ALLREDUCE_FLOOR * expect["gbps"], 1), floor_ratio=ALLREDUCE_FLOOR)


@check(
    id="DLD-VER-003", slug="nccl-allreduce-fails",
    problem="NCCL does not all-reduce across this node's GPUs, or does so far below its links' speed",
    remedy="reboot", drain=True,
    title="NCCL all-reduces across all local GPUs, correctly and near its links' speed (verify)",
    tags=("verify", "nccl", "gpu"), requires=("verify",),
    what="""From dl-doctor verify: an NCCL all-reduce across every tested GPU of the node (single process,
    torch.cuda.nccl), its sum checked and its bus bandwidth held against the node's links: half the NVLink bandwidth
    the matrix cites for the GPU (datasheets quote both directions together), else the PCIe link NVML reports. Under
    a quarter of that warns and names the slowest GPU pairs (each pair is all-reduced alone when the whole is slow,
    and always with --long). A failure or a wrong sum fails. Skipped with fewer than two GPUs.""",
    why="""An all-reduce that fails or returns a wrong sum on one node hangs or corrupts every data-parallel job
    scheduled there; one that runs at PCIe speed where NVLink is expected makes every step wait for it.""",
    fix="""Check the fabric manager and NVLink (DLD-GPU-004, DLD-GPU-008), reset the GPUs or reboot.""",
)
def allreduce(facts: Facts, matrix) -> Result:
    v, early = _verified(facts)
    if early is not None:
        return early
    err = (v.get("errors") or {}).get("allreduce")
    ar = v.get("allreduce")
    pairs = [p for p in v.get("pairs") or [] if len(p.get("gpus") or []) == 2]
    broken = [p for p in pairs if p.get("error") or p.get("correct") is False]
    fix = Fix("Check NVLink and the fabric manager, then reset the GPUs or reboot.",
              ("nvidia-smi nvlink --status", "dl-doctor run --only DLD-GPU-004,DLD-GPU-008", reboot()))
    if err or (isinstance(ar, dict) and not ar.get("correct")):
        where = "; ".join(f"pair {p['gpus']}: {p.get('error') or 'wrong sum'}" for p in broken[:4])
        across = f" across GPUs {ar['gpus']}" if isinstance(ar, dict) and ar.get("gpus") else ""
        return fail(f"the all-reduce{across} "
                    f"{'failed: ' + err if err else 'returned a wrong sum'}" + (f" ({where})" if where else ""),
                    {"allreduce": ar, "error": err, "pairs": pairs}, fix)
    if not isinstance(ar, dict):
        return skip(f"not run: {(v.get('skipped') or {}).get('allreduce') or 'no all-reduce result'}")
    expect = allreduce_expectation(v, matrix)
    floor = expect.get("floor_gbps")
    evidence: Dict[str, Any] = {"allreduce": ar, "expectation": expect, "pairs": pairs}
    measured = f"NCCL all-reduce across GPUs {ar.get('gpus', [])}: bus bandwidth {ar.get('busbw_gbps')} GB/s"
    if broken:
        return fail(f"{measured}, but pairs fail: " + "; ".join(
            f"{p['gpus']}: {p.get('error') or 'wrong sum'}" for p in broken[:4]), evidence, fix)
    if floor and float(ar.get("busbw_gbps") or 0) < floor:
        slow = sorted((p for p in pairs if p.get("busbw_gbps") is not None), key=lambda p: p["busbw_gbps"])
        named = [p for p in slow if p["busbw_gbps"] < floor][:4] or slow[:1]
        pair_text = ("; slowest pairs: " + ", ".join(f"GPU {p['gpus'][0]}-{p['gpus'][1]} {p['busbw_gbps']} GB/s"
                                                     for p in named)) if named else ""
        return warn(f"{measured}, under a quarter of the {expect.get('gbps')} GB/s its links carry in one direction "
                    f"({expect.get('via')}){pair_text}" + coverage(v), evidence, fix)
    against = f" (expectation {expect['gbps']} GB/s via {expect.get('via')})" if expect.get("gbps") else ""
    return passed(f"{measured}{against}, sum correct" + coverage(v), **evidence)


@check(
    id="DLD-VER-004", slug="host-copy-slow",
    problem="Host<->GPU copies run far below the PCIe link's speed",
    remedy="replace-hardware", drain=False,
    title="Pinned host<->GPU copies reach the PCIe link's speed (verify)",
    tags=("verify", "gpu", "pcie", "performance"), requires=("verify",),
    what="""From dl-doctor verify: a pinned copy host->GPU and GPU->host per GPU, against the PCIe link NVML reports
    (generation x width x the per-lane rate after line coding). Under half of that warns. JAX copies from pageable
    memory (through a staging buffer); those figures are reported and not judged.""",
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
        pinned = d.get("copy_pinned") is not False
        rows.append({"gpu": d["index"], "h2d": c.get("h2d"), "d2h": c.get("d2h"), "link": f"gen{gen} x{width}",
                     "link_gbps": expect, "pinned": pinned})
        # a copy from pageable memory (JAX's) goes through a staging buffer: reported, not held against the link
        if pinned and expect and min(c.get("h2d") or 0, c.get("d2h") or 0) < COPY_FLOOR * expect:
            slow.append(f"GPU {d['index']}: {c.get('h2d')}/{c.get('d2h')} GB/s h2d/d2h on a gen{gen} x{width} link "
                        f"({expect:.1f} GB/s)")
    if slow:
        return warn("; ".join(slow), {"copies": rows}, Fix("Check the link and the topology.",
                                                          ("nvidia-smi -q -d PCIE", "nvidia-smi topo -m")))
    pageable = "" if all(r["pinned"] for r in rows) else \
        " (from pageable host memory, as the framework copies: not held against the link)"
    return passed("; ".join(f"GPU {r['gpu']}: {r['h2d']}/{r['d2h']} GB/s" for r in rows) + pageable, copies=rows)


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
    if d.get("runtime_error") and not d.get("results"):
        return fail(f"dcgmi {d.get('command')} could not run its tests: {d['runtime_error']}",
                    {"shape": d.get("shape"), "runtime_error": d["runtime_error"]},
                    Fix("Start DCGM's host engine and rerun the diagnostic.",
                        (service("start", "nvidia-dcgm"), "dcgmi diag -r 1")))
    results = d.get("results") or []
    failed = [r for r in results if r.get("status") == "fail"]
    warned = [r for r in results if r.get("status") == "warn"]
    text = lambda r: (f"{'all GPUs' if r.get('gpu') == 'all' else 'GPU ' + str(r.get('gpu'))} "  # noqa: E731
                      f"{r.get('category')}/{r.get('test')}: "
                      + ("; ".join(r.get("messages") or []) or r.get("status", "")))
    evidence: Dict[str, Any]
    evidence = {"shape": d.get("shape"), "command": d.get("command"), "failed": failed[:20], "warned": warned[:20],
                "counts": {s: sum(1 for r in results if r.get("status") == s)
                           for s in ("pass", "fail", "warn", "skip")}}
    fix = Fix("Follow DCGM's message for each failed test.", ("dcgmi diag -r 2 -v   # rerun, verbosely",
                                                              "sudo nvidia-smi -r -i <gpu>   # reset it when idle"))
    if failed:
        return fail("; ".join(text(r) for r in failed[:10]), evidence, fix)
    if warned:
        return warn("; ".join(text(r) for r in warned[:10]), evidence, fix)
    return passed(f"dcgmi {d.get('command')}: {evidence['counts']['pass']} results passed "
                  f"({evidence['counts']['skip']} skipped), DCGM {d.get('shape')} output", **evidence)


@check(
    id="DLD-VER-006", slug="gpu-unwell-under-load",
    problem="A GPU slowed down, overheated or logged errors while verify's workloads ran",
    remedy="reset-gpu", drain=True,
    title="No GPU throttles for heat or hardware, gains ECC errors or raises an Xid under load (verify)",
    tags=("verify", "gpu", "nvml"), requires=("verify",),
    what="""From dl-doctor verify: NVML sampled every 0.1 s while the workloads run, per GPU: the SM clock, the
    clock event (throttle) reasons, power, temperature, the volatile ECC counters before and after, and Xid events
    (NVML's critical-error events). An Xid or a new uncorrectable ECC error fails; hardware, thermal or power-brake
    slowdown in at least a tenth of the samples, or a temperature at the GPU's slowdown threshold, warns. The software
    power cap alone is what a GPU at full load shows and passes.""",
    why="""A GPU that only misbehaves under load passes every idle check: its fault shows as a slow or failed
    training step hours later, on every job placed on it.""",
    fix="""Look up the Xid (dl-doctor why "Xid <n>"), check cooling and power, reset the GPU, and move the instance if
    it recurs.""",
)
def unwell_under_load(facts: Facts, matrix) -> Result:
    v, early = _verified(facts)
    if early is not None:
        return early
    w = v.get("watch") or {}
    if not w.get("ran"):
        return skip(f"not watched: {w.get('reason') or 'NVML was not sampled'}")
    gpus = w.get("gpus") or []
    # Xid events and ECC errors count on every GPU; slowdown and heat only on the GPUs the workloads ran on (a GPU
    # left alone carries someone else's load)
    tested = {d.get("index") for d in v.get("devices") or [] if d.get("index") is not None}
    failures, warnings, others = [], [], []
    for g in gpus:
        name = f"GPU {g.get('index')}"
        for xid in (g.get("xid") or [])[:5]:
            entry = matrix.xid(xid)
            text = f"{name} raised Xid {xid}" + (f" ({entry['name']})" if entry else "")
            # an application Xid on a GPU the workloads left alone is another program's error (NVIDIA's Xid
            # catalog: 13, 31, 43 follow the program's own fault), not the GPU's; on a tested GPU the workload is
            # known-good code, so it counts
            if g.get("index") not in tested and (entry or {}).get("kind") in ("application", "informational"):
                others.append(text)
            else:
                failures.append(text)
        ecc = g.get("ecc_delta") or {}
        if (ecc.get("uncorrected") or 0) > 0:
            failures.append(f"{name} gained {ecc['uncorrected']} uncorrectable ECC error(s)")
        if g.get("index") not in tested:
            continue
        samples = max(int(g.get("samples") or 0), 1)
        for reason in SLOWDOWN_REASONS:
            seen = int((g.get("throttle") or {}).get(reason, 0))
            if seen and seen / samples >= SLOWDOWN_SHARE:
                warnings.append(f"{name} {reason} in {seen} of {samples} samples")
        temp, limit = (g.get("temperature_c") or {}).get("max"), g.get("slowdown_temp_c")
        if temp is not None and limit and temp >= limit:
            warnings.append(f"{name} reached {temp} C, its slowdown threshold {limit} C")
    for xid in (w.get("xid_unattributed") or [])[:3]:
        failures.append(f"Xid {xid} on a GPU NVML could not name")
    evidence: Dict[str, Any]
    evidence = {"gpus": gpus, "xid_watch": w.get("xid_watch"),
                "thresholds": {"slowdown_share": SLOWDOWN_SHARE, "reasons": list(SLOWDOWN_REASONS)}}
    xids = sorted({x for g in gpus for x in g.get("xid") or []})[:3]
    fix = Fix("Find out what the GPU logged and why it slowed down.",
              tuple(f'dl-doctor why "Xid {x}"' for x in xids)
              + ("nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER,ECC",
                 "sudo nvidia-smi -r -i <index>   # reset it when nothing runs on it"))
    if failures:
        return fail("; ".join(failures + warnings), evidence, fix)
    if warnings:
        return warn("; ".join(warnings), evidence, fix)
    if not gpus:
        return skip("not watched: NVML lists no GPU")
    if not tested:
        why = (v.get("skipped") or {}).get("gpu_matmul") or "no GPU ran a workload"
        return skip(f"{len(gpus)} GPU(s) watched, no Xid and no new uncorrectable ECC error, but no GPU was under "
                    f"load: {why}", evidence)
    gpus = [g for g in gpus if g.get("index") in tested]
    peak = lambda key: max((((g.get(key) or {}).get("max") or 0) for g in gpus), default=0)  # noqa: E731
    note = "" if w.get("xid_watch") == "watched" else f" ({w.get('xid_watch')})"
    if others:
        note += ("; on GPUs the workloads left alone, another program's application-level Xid: "
                 + "; ".join(others))
    xid = "no Xid on the GPUs under load" if others else "no Xid"
    return passed(f"{len(gpus)} GPU(s) watched under load: {xid}, no new uncorrectable ECC error, no thermal or "
                  f"hardware slowdown; peak {peak('temperature_c')} C, {peak('power_w')} W{note}", **evidence)


@check(
    id="DLD-VER-007", slug="dcgm-health-incident",
    problem="DCGM's health watches report an incident",
    remedy="reset-gpu", drain=True,
    title="DCGM's health watches report the node healthy (verify, where DCGM is installed)",
    tags=("verify", "gpu", "dcgm"), requires=("verify",),
    what="""Where DCGM is installed, dl-doctor verify reads dcgmi health -c -j: what DCGM's background health watches
    (PCIe, NVLink, memory, SM, InfoROM, thermal, power, driver) have seen. dcgmi exits 0 whatever the health is, so
    only its JSON is read: a Failure fails, a Warning warns, naming the GPU, the subsystem and DCGM's message.
    dl-doctor does not turn the watches on (that changes the host engine's state); without them it says so.""",
    why="""DCGM's watches see what happens between jobs: double-bit errors, NVLink replays, PCIe errors, thermal
    events. A node they call unhealthy should not take the next job.""",
    fix="""Follow DCGM's message; reset the GPU or drain the node, and replace what keeps failing.""",
)
def dcgm_health(facts: Facts) -> Result:
    v = _v(facts)
    d = (v or {}).get("dcgm_health")
    if not isinstance(d, dict):
        return skip("not verified with DCGM (dl-doctor verify reads dcgmi health where DCGM is installed)")
    if not d.get("ran"):
        if d.get("watches_off"):
            return skip("DCGM's health watches are not enabled; `sudo dcgmi health -s a` turns them on "
                        "(dl-doctor does not change DCGM's state)")
        return skip(d.get("reason") or "dcgmi health did not run")
    incidents = d.get("incidents") or []
    text = "; ".join(f"{i.get('entity')} {i.get('system') or ''}: {i.get('message') or i.get('status')}".replace(
        "  ", " ") for i in incidents[:8])
    evidence: Dict[str, Any] = {"overall": d.get("overall"), "incidents": incidents[:50]}
    fix = Fix("Follow DCGM's message for each incident.", ("dcgmi health -c -v", "dcgmi diag -r 2"))
    overall = d.get("overall")
    if overall == "fail" or any(i.get("status") == "fail" for i in incidents):
        return fail(f"DCGM health: Failure: {text}", evidence, fix)
    if overall not in ("pass", None) or incidents:
        return warn(f"DCGM health: {overall or 'warn'}: {text or 'no incident listed'}", evidence, fix)
    if overall is None:  # a report without an overall result and without incidents: nothing to judge
        return skip("dcgmi health gave no overall result and no incident", **evidence)
    return passed("DCGM's health watches report the node healthy", **evidence)
