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

LEVELS = {"quick": {"n": 4096, "iters": 10, "copy_mib": 256, "allreduce_mib": 64, "seconds": 60},
          "long": {"n": 8192, "iters": 50, "copy_mib": 1024, "allreduce_mib": 256, "seconds": 300}}

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
skip = set(plan.get("skip_gpus") or [])
for i in range(count):
    if i in skip:
        out["skipped"]["gpu%d" % i] = "other processes hold this GPU (NVML); --include-busy to test it anyway"
        continue
    device = "cuda:%d" % i
    props = torch.cuda.get_device_properties(i)
    dev = {"index": i, "name": props.name, "capability": "%d.%d" % (props.major, props.minor), "matmul": {}}
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
if len(tested) < 2:
    out["skipped"]["allreduce"] = "fewer than two GPUs to all-reduce across"
else:
    try:
        import torch.cuda.nccl as nccl
        numel = (plan["allreduce_mib"] << 20) // 4
        tensors = [torch.ones(numel, device="cuda:%d" % i) for i in tested]
        nccl.all_reduce(tensors)
        for i in tested: sync("cuda:%d" % i)
        start = time.perf_counter()
        nccl.all_reduce(tensors)
        for i in tested: sync("cuda:%d" % i)
        seconds = time.perf_counter() - start
        n = len(tested)
        algbw = numel * 4 / seconds / 1e9
        out["allreduce"] = {"gpus": tested, "bytes": numel * 4, "seconds": round(seconds, 4),
                            "algbw_gbps": round(algbw, 2), "busbw_gbps": round(algbw * 2 * (n - 1) / n, 2),
                            "correct": bool((tensors[0][:1] == n).all().item())}
    except BaseException as exc:
        out["errors"]["allreduce"] = "%s: %s" % (type(exc).__name__, str(exc)[:300])
done()
"""


def run_workload(host, python: str, level: str = "quick", skip_gpus=(), timeout: Optional[float] = None) -> Dict[str, Any]:
    """Run the workload with ``python`` (under Host.run's trust rule) and return its results (or why it could not)."""
    plan = dict(LEVELS[level], level=level, skip_gpus=list(skip_gpus))
    limit = timeout or plan["seconds"] + 30
    try:
        result = host.run([python, "-c", WORKLOAD, json.dumps(plan)], timeout=limit, requested=True)
    except OSError as exc:
        return {"python": python, "error": f"could not run {python}: {exc}"}
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
