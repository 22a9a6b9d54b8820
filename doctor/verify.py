"""`dl-doctor verify`: short, bounded workloads in an environment's own interpreter and framework (torch), whose
results become the ``verify`` facts that the DLD-VER checks judge, like any other facts.

The workload runs in a subprocess started under the trust rule (Host.run): a matmul per GPU in each dtype the GPU
supports, one cuDNN convolution forward and backward, pinned host<->device copies, and an NCCL all-reduce across the
local GPUs; on a host without a CUDA device, a CPU matmul and convolution prove the framework runs, and every GPU part
says why it was skipped. Each part has its own time limit inside the workload, and the whole run one from the caller.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

from dl_doctor.units import PCIE_GBPS_PER_LANE

LEVELS = {"quick": {"n": 4096, "iters": 10, "copy_mib": 256, "allreduce_mib": 64, "allreduce_iters": 5,
                    "pair_mib": 32, "seconds": 60},
          "long": {"n": 8192, "iters": 50, "copy_mib": 1024, "allreduce_mib": 256, "allreduce_iters": 20,
                   "pair_mib": 128, "seconds": 300}}

WORKLOAD = r"""
import json, sys, time
plan = json.loads(sys.argv[1])
out = {"framework": "torch", "version": None, "cuda": None, "level": plan["level"], "devices": [], "skipped": {},
       "errors": {}}
def done():
    sys.stdout.write("DLDOCTOR-VERIFY " + json.dumps(out) + "\n")
    sys.stdout.flush()
try:
    import torch
except BaseException as exc:
    out["errors"]["import"] = "%s: %s" % (type(exc).__name__, str(exc)[:300])
    done()
    sys.exit(0)
out["version"] = torch.__version__
out["cuda"] = getattr(torch.version, "cuda", None)
deadline = time.monotonic() + plan["seconds"]
def sync(device):
    if device != "cpu":
        torch.cuda.synchronize(device)
def matmul(device, dtype, n, iters, tf32=False):
    if device != "cpu":
        torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    a @ b
    sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        a @ b
    sync(device)
    seconds = time.perf_counter() - start
    return {"tflops": round(2.0 * n ** 3 * iters / seconds / 1e12, 3), "seconds": round(seconds, 4), "n": n,
            "iters": iters}
def fp8(device, n, iters):
    # torch._scaled_mm: fp8 e4m3 x fp8 e4m3 -> bf16 on sm_89 and later; its second operand column-major
    a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0, device=device)
    f = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    f()
    sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        f()
    sync(device)
    seconds = time.perf_counter() - start
    return {"tflops": round(2.0 * n ** 3 * iters / seconds / 1e12, 3), "seconds": round(seconds, 4), "n": n,
            "iters": iters}
def uuid_of(props):
    u = getattr(props, "uuid", None)
    return str(u).lower().replace("gpu-", "") if u is not None else None
def conv(device):
    x = torch.randn(16, 64, 56, 56, device=device, requires_grad=True)
    w = torch.randn(64, 64, 3, 3, device=device, requires_grad=True)
    y = torch.nn.functional.conv2d(x, w, padding=1)
    y.sum().backward()
    sync(device)
    return {"ok": bool(torch.isfinite(x.grad).all().item())}
cuda = torch.cuda.is_available()
if not cuda:
    reason = "no CUDA device: torch.cuda.is_available() is False (torch %s, CUDA %s)" % (out["version"], out["cuda"])
    for part in ("gpu_matmul", "cudnn_conv", "copy", "allreduce"):
        out["skipped"][part] = reason
    try:
        dev = {"index": None, "name": "cpu", "matmul": {"fp32": matmul("cpu", torch.float32, 512, 3)}}
        dev["conv"] = conv("cpu")
        out["devices"].append(dev)
    except BaseException as exc:
        out["errors"]["cpu"] = "%s: %s" % (type(exc).__name__, str(exc)[:300])
    done()
    sys.exit(0)
out["cudnn"] = torch.backends.cudnn.version()
count = torch.cuda.device_count()
skip_uuids = set(plan.get("skip_uuids") or [])
for i in range(count):
    device = "cuda:%d" % i
    props = torch.cuda.get_device_properties(i)
    uuid = uuid_of(props)
    if uuid in skip_uuids:
        out["skipped"]["cuda%d" % i] = "left alone: %s" % plan["skip_reason"].get(uuid, "other processes use it")
        continue
    dev = {"index": i, "cuda_index": i, "uuid": uuid, "name": props.name,
           "capability": "%d.%d" % (props.major, props.minor), "matmul": {}}
    for name, dtype, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                              ("fp16", torch.float16, False), ("bf16", torch.bfloat16, False)):
        if name == "bf16" and props.major < 8 or name == "tf32" and props.major < 8:
            continue
        if time.monotonic() > deadline:
            out["skipped"]["gpu%d.%s" % (i, name)] = "the time limit was reached"
            continue
        try:
            dev["matmul"][name] = matmul(device, dtype, plan["n"], plan["iters"], tf32)
        except BaseException as exc:
            out["errors"]["gpu%d.matmul.%s" % (i, name)] = "%s: %s" % (type(exc).__name__, str(exc)[:300])
    if (props.major, props.minor) < (8, 9):
        dev["fp8"] = "compute capability %d.%d has no fp8 Tensor Cores (8.9 and later)" % (props.major, props.minor)
    elif not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        dev["fp8"] = "torch %s has no torch._scaled_mm" % out["version"]
    elif time.monotonic() > deadline:
        dev["fp8"] = "the time limit was reached"
    else:
        try:
            dev["matmul"]["fp8"] = fp8(device, plan["n"], plan["iters"])
        except BaseException as exc:
            # torch's private fp8 entry point changes between releases: its failure is reported, not judged
            dev["fp8"] = "torch._scaled_mm failed: %s: %s" % (type(exc).__name__, str(exc)[:200])
    try:
        torch.backends.cudnn.enabled = True
        dev["conv"] = conv(device)
    except BaseException as exc:
        out["errors"]["gpu%d.conv" % i] = "%s: %s" % (type(exc).__name__, str(exc)[:300])
    try:
        size = plan["copy_mib"] << 20
        host = torch.empty(size, dtype=torch.uint8).pin_memory()
        gpu = torch.empty(size, dtype=torch.uint8, device=device)
        gpu.copy_(host, non_blocking=True); sync(device)
        start = time.perf_counter(); gpu.copy_(host, non_blocking=True); sync(device)
        h2d = size / (time.perf_counter() - start) / 1e9
        start = time.perf_counter(); host.copy_(gpu, non_blocking=True); sync(device)
        d2h = size / (time.perf_counter() - start) / 1e9
        dev["copy_gbps"] = {"h2d": round(h2d, 2), "d2h": round(d2h, 2)}
    except BaseException as exc:
        out["errors"]["gpu%d.copy" % i] = "%s: %s" % (type(exc).__name__, str(exc)[:300])
    out["devices"].append(dev)
tested = [d["index"] for d in out["devices"]]
def allreduce(gpus, mib, iters):
    import torch.cuda.nccl as nccl
    numel = (mib << 20) // 4
    tensors = [torch.ones(numel, device="cuda:%d" % i) for i in gpus]
    nccl.all_reduce(tensors)
    for i in gpus: sync("cuda:%d" % i)
    correct = bool((tensors[0][:1] == len(gpus)).all().item())
    start = time.perf_counter()
    for _ in range(iters):
        nccl.all_reduce(tensors)
    for i in gpus: sync("cuda:%d" % i)
    seconds = (time.perf_counter() - start) / iters
    n = len(gpus)
    algbw = numel * 4 / seconds / 1e9
    return {"gpus": gpus, "bytes": numel * 4, "iters": iters, "seconds": round(seconds, 6),
            "algbw_gbps": round(algbw, 2), "busbw_gbps": round(algbw * 2 * (n - 1) / n, 2), "correct": correct}
if len(tested) < 2:
    out["skipped"]["allreduce"] = "fewer than two GPUs to all-reduce across"
else:
    try:
        out["allreduce"] = allreduce(tested, plan["allreduce_mib"], plan["allreduce_iters"])
    except BaseException as exc:
        out["errors"]["allreduce"] = "%s: %s" % (type(exc).__name__, str(exc)[:300])
    floor = plan.get("busbw_floor_gbps")
    slow = "allreduce" in out and floor and out["allreduce"]["busbw_gbps"] < floor
    if len(tested) > 2 and (plan["level"] == "long" or slow or "allreduce" in out["errors"]):
        # every pair, to name the slow or failing link
        out["pairs"] = []
        for x in range(len(tested)):
            for y in range(x + 1, len(tested)):
                pair = [tested[x], tested[y]]
                if time.monotonic() > deadline:
                    out["skipped"]["pairs"] = "the time limit was reached after %d pairs" % len(out["pairs"])
                    break
                try:
                    r = allreduce(pair, plan["pair_mib"], 3)
                    out["pairs"].append({"gpus": pair, "busbw_gbps": r["busbw_gbps"], "correct": r["correct"]})
                except BaseException as exc:
                    out["pairs"].append({"gpus": pair, "error": "%s: %s" % (type(exc).__name__, str(exc)[:200])})
            if "pairs" in out["skipped"]:
                break
done()
"""


ALLREDUCE_FLOOR = 0.25  # an all-reduce under a quarter of its links' one-direction bandwidth warns (docs/verify.md)


def busbw_expectation(matrix, name: Optional[str], pcie: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """What an all-reduce's bus bandwidth is held against (GB/s, one direction): half the GPU's NVLink bandwidth
    from the matrix (quoted for both directions together), else its PCIe link (NVML's generation x width x the
    per-lane rate after line coding). ``{}`` when neither is known."""
    entry = None
    if matrix is not None and name:
        entry = matrix.gpu(name) or (matrix.gpu(name.replace("NVIDIA ", "", 1)) if name.startswith("NVIDIA ") else None)
    nvlink = (entry or {}).get("nvlink_gbps")
    if nvlink:
        return {"gbps": nvlink / 2.0, "via": f"NVLink ({nvlink} GB/s both directions, matrix)",
                "unverified": "nvlink_gbps" in ((entry or {}).get("unverified") or [])}
    gen, width = (pcie or {}).get("gen"), (pcie or {}).get("width")
    if gen in PCIE_GBPS_PER_LANE and width:
        return {"gbps": round(PCIE_GBPS_PER_LANE[gen] * width, 1), "via": f"PCIe gen{gen} x{width} (NVML)"}
    return {}


def run_workload(host, python: str, level: str = "quick", skip: Optional[Dict[str, str]] = None,
                 busbw_floor: Optional[float] = None, timeout: Optional[float] = None, watch=None) -> Dict[str, Any]:
    """Run the workload with ``python`` (under Host.run's trust rule) and return its results (or why it could not).

    ``skip`` maps GPU UUIDs to why they are left alone; ``watch`` (a started-up GpuWatch) samples NVML while the
    workload runs. CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA's numbering NVML's, where torch gives no UUID."""
    skip = skip or {}
    plan = dict(LEVELS[level], level=level, skip_uuids=sorted(skip), skip_reason=skip, busbw_floor_gbps=busbw_floor)
    limit = timeout or plan["seconds"] + 30
    env = dict(host.environ())
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if watch is not None:
        watch.start()
    try:
        result = host.run([python, "-c", WORKLOAD, json.dumps(plan)], timeout=limit, env=env, requested=True)
    except OSError as exc:
        return {"python": python, "error": f"could not run {python}: {exc}"}
    finally:
        if watch is not None:
            watched = watch.stop()
    out = _result(python, result)
    if watch is not None:
        out["watch"] = watched
    return out


def _result(python: str, result) -> Dict[str, Any]:
    line = next((l for l in reversed((result.stdout or "").splitlines()) if l.startswith("DLDOCTOR-VERIFY ")), None)
    if line is None:
        tail = (result.stderr or result.stdout or "").strip()[-500:]
        why = "timed out" if getattr(result, "timed_out", False) else f"exit {result.returncode}"
        return {"python": python, "error": f"the workload gave no result ({why}): {tail}"}
    try:
        out = json.loads(line[len("DLDOCTOR-VERIFY "):])
    except ValueError as exc:
        return {"python": python, "error": f"the workload's result is not JSON: {exc}"}
    if not isinstance(out, dict):
        return {"python": python, "error": "the workload's result is not an object"}
    out["python"] = python
    return out


def renumber(out: Dict[str, Any], gpus) -> None:
    """Give each tested device NVML's index (matched by UUID; CUDA's own index where torch gives none, which
    CUDA_DEVICE_ORDER=PCI_BUS_ID makes the same), so the findings and NVML's facts name GPUs alike."""
    by_uuid = {g["uuid"]: g["index"] for g in gpus if g.get("uuid")}
    mapping = {}
    for d in out.get("devices") or []:
        if isinstance(d, dict) and d.get("uuid") in by_uuid:
            mapping[d.get("cuda_index")] = by_uuid[d["uuid"]]
            d["index"] = by_uuid[d["uuid"]]
    if not mapping:
        return
    fix = lambda xs: [mapping.get(x, x) for x in xs]  # noqa: E731
    if isinstance(out.get("allreduce"), dict):
        out["allreduce"]["gpus"] = fix(out["allreduce"].get("gpus") or [])
    for p in out.get("pairs") or []:
        if isinstance(p, dict):
            p["gpus"] = fix(p.get("gpus") or [])
