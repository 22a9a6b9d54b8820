"""`dl-doctor verify`: short, bounded workloads in an environment's own interpreter and framework (torch or JAX),
whose results become the ``verify`` facts that the DLD-VER checks judge, like any other facts.

The workload runs in a subprocess started under the trust rule (Host.run): a matmul per GPU in each dtype the GPU
supports, one convolution forward and backward (cuDNN's), host<->device copies, and an all-reduce across the local
GPUs (NCCL's); on a host without a GPU, a CPU matmul and convolution prove the framework runs, and every GPU part says
why it was skipped. Both frameworks write the same result shape, so the checks know no framework. Each part has its
own time limit inside the workload, and the whole run one from the caller.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional


LEVELS = {"quick": {"n": 4096, "iters": 10, "copy_mib": 256, "allreduce_mib": 64, "allreduce_iters": 5,
                    "pair_mib": 32, "seconds": 60},
          "long": {"n": 8192, "iters": 50, "copy_mib": 1024, "allreduce_mib": 256, "allreduce_iters": 20,
                   "pair_mib": 128, "seconds": 300}}

PRELUDE = r"""
import json, sys, time
plan = json.loads(sys.argv[1])
out = {"framework": None, "version": None, "cuda": None, "level": plan["level"], "devices": [], "skipped": {},
       "errors": {}}
deadline = time.monotonic() + plan["seconds"]
def done():
    sys.stdout.write("DLDOCTOR-VERIFY " + json.dumps(out) + "\n")
    sys.stdout.flush()
def err(exc, limit=300):
    return "%s: %s" % (type(exc).__name__, str(exc)[:limit])
def rate(n, iters, seconds):
    return {"tflops": round(2.0 * n ** 3 * iters / seconds / 1e12, 3), "seconds": round(seconds, 4), "n": n,
            "iters": iters}
def finish_on_cpu(why, reason, cpu_matmul, cpu_conv):
    # no GPU: every GPU part says why, and a small matmul and convolution on the CPU prove the framework computes
    out["no_gpu"] = why
    for part in ("gpu_matmul", "cudnn_conv", "copy", "allreduce"):
        out["skipped"][part] = plan.get("no_gpu_reason") or reason
    try:
        out["devices"].append({"index": None, "name": "cpu", "matmul": {"fp32": cpu_matmul()}, "conv": cpu_conv()})
    except BaseException as exc:
        out["errors"]["cpu"] = err(exc)
    done()
    sys.exit(0)
def import_failed(exc):
    out["errors"]["import"] = err(exc)
    done()
    sys.exit(0)
def timed_matmul(step, finish, n, iters):
    # one untimed call (compilation, autotuning), then iters timed ones; finish(result) waits for the device
    finish(step())
    start = time.perf_counter()
    for _ in range(iters):
        last = step()
    finish(last)
    return rate(n, iters, time.perf_counter() - start)
def lacks(dtype, major, minor):
    # why a GPU of this compute capability has no Tensor Cores for dtype (plan["min_capability"]), or None
    need = plan["min_capability"].get(dtype)
    if need and (major, minor) < tuple(need):
        return "compute capability %d.%d has no %s Tensor Cores (%d.%d and later)" % (major, minor, dtype, need[0],
                                                                                   need[1])
    return None
def node_allreduce(allreduce):
    # the all-reduce across every tested GPU, then every pair alone when it was slow or failed (always with --long),
    # to name the slow or failing link; allreduce(gpus, mib, iters) is the framework's
    tested = [d["index"] for d in out["devices"]]
    if len(tested) < 2:
        out["skipped"]["allreduce"] = "fewer than two GPUs to all-reduce across"
        return
    try:
        out["allreduce"] = allreduce(tested, plan["allreduce_mib"], plan["allreduce_iters"])
    except BaseException as exc:
        out["errors"]["allreduce"] = err(exc)
    below = plan.get("pairs_below_gbps")
    slow = "allreduce" in out and below and out["allreduce"]["busbw_gbps"] < below
    if len(tested) > 2 and (plan["level"] == "long" or slow or "allreduce" in out["errors"]):
        out["pairs"] = []
        for x in range(len(tested)):
            for y in range(x + 1, len(tested)):
                pair = [tested[x], tested[y]]
                if time.monotonic() > deadline:
                    out["skipped"]["pairs"] = "the time limit was reached after %d pairs" % len(out["pairs"])
                    return
                try:
                    r = allreduce(pair, plan["pair_mib"], 3)
                    out["pairs"].append({"gpus": pair, "busbw_gbps": r["busbw_gbps"], "correct": r["correct"]})
                except BaseException as exc:
                    out["pairs"].append({"gpus": pair, "error": err(exc, 200)})
def allreduce_result(gpus, numel, iters, seconds, correct):
    n = len(gpus)
    algbw = numel * 4 / seconds / 1e9
    return {"gpus": gpus, "bytes": numel * 4, "iters": iters, "seconds": round(seconds, 6),
            "algbw_gbps": round(algbw, 2), "busbw_gbps": round(algbw * 2 * (n - 1) / n, 2), "correct": correct}
framework = plan.get("framework") or "auto"
if framework == "auto":
    import importlib.util
    framework = next((name for name in ("torch", "jax") if importlib.util.find_spec(name) is not None), None)
    if framework is None:
        out["errors"]["import"] = "neither torch nor jax is installed in this environment"
        done()
        sys.exit(0)
out["framework"] = framework
"""

TORCH = r"""
try:
    import torch
except BaseException as exc:
    import_failed(exc)
out["version"] = torch.__version__
out["cuda"] = getattr(torch.version, "cuda", None)
def sync(device):
    if device != "cpu":
        torch.cuda.synchronize(device)
def matmul(device, dtype, n, iters, tf32=False):
    if device != "cpu":
        torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    return timed_matmul(lambda: a @ b, lambda _: sync(device), n, iters)
def fp8(device, n, iters):
    # torch._scaled_mm: fp8 e4m3 x fp8 e4m3 -> bf16 on sm_89 and later; its second operand column-major
    a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0, device=device)
    return timed_matmul(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                        lambda _: sync(device), n, iters)
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
    if out["cuda"] is None:
        why = "torch %s is a CPU-only build" % out["version"]
    else:
        try:
            torch.cuda.init()  # raises what is_available() only warned about (no driver, a driver too old, ...)
            why = "torch %s (CUDA %s) found no device" % (out["version"], out["cuda"])
        except BaseException as exc:
            why = "torch %s (CUDA %s): %s" % (out["version"], out["cuda"], err(exc, 200))
    finish_on_cpu(why, "no CUDA device: torch.cuda.is_available() is False (%s)" % why,
                  lambda: matmul("cpu", torch.float32, 512, 3), lambda: conv("cpu"))
out["cudnn"] = torch.backends.cudnn.version()
count = torch.cuda.device_count()
skip_uuids = set(plan.get("skip_uuids") or [])
for i in range(count):
    device = "cuda:%d" % i
    try:
        props = torch.cuda.get_device_properties(i)
    except BaseException as exc:
        out["errors"]["gpu%d.matmul.properties" % i] = err(exc)
        continue
    uuid = uuid_of(props)
    if uuid in skip_uuids:
        out["skipped"]["cuda%d" % i] = "left alone as in use by others: %s" % plan["skip_reason"].get(uuid, "")
        continue
    dev = {"index": i, "cuda_index": i, "uuid": uuid, "name": props.name,
           "capability": "%d.%d" % (props.major, props.minor), "matmul": {}}
    for name, dtype, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                              ("fp16", torch.float16, False), ("bf16", torch.bfloat16, False)):
        if lacks(name, props.major, props.minor):
            continue
        if time.monotonic() > deadline:
            out["skipped"]["gpu%d.%s" % (i, name)] = "the time limit was reached"
            continue
        try:
            dev["matmul"][name] = matmul(device, dtype, plan["n"], plan["iters"], tf32)
        except BaseException as exc:
            out["errors"]["gpu%d.matmul.%s" % (i, name)] = err(exc)
    if lacks("fp8", props.major, props.minor):
        dev["fp8"] = lacks("fp8", props.major, props.minor)
    elif not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        dev["fp8"] = "torch %s has no torch._scaled_mm" % out["version"]
    elif time.monotonic() > deadline:
        dev["fp8"] = "the time limit was reached"
    else:
        try:
            dev["matmul"]["fp8"] = fp8(device, plan["n"], plan["iters"])
        except BaseException as exc:
            # torch's private fp8 entry point changes between releases: its failure is reported, not judged
            dev["fp8"] = "torch._scaled_mm failed: " + err(exc, 200)
    try:
        torch.backends.cudnn.enabled = True
        dev["conv"] = conv(device)
    except BaseException as exc:
        out["errors"]["gpu%d.conv" % i] = err(exc)
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
        out["errors"]["gpu%d.copy" % i] = err(exc)
    out["devices"].append(dev)
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
    return allreduce_result(gpus, numel, iters, (time.perf_counter() - start) / iters, correct)
node_allreduce(allreduce)
done()
"""

JAX = r"""
try:
    import numpy as np
    import jax
    import jax.numpy as jnp
    from jax import lax
except BaseException as exc:
    import_failed(exc)
out["version"] = jax.__version__
def block(x):
    x.block_until_ready()
    return x
host_normal = {}
def normal(shape, seed):
    # operands made once on the host (numpy; ml_dtypes' types for bf16 and fp8) and copied: jax.random would compile
    # a kernel per device and shape
    key = (shape, seed)
    if key not in host_normal:
        host_normal[key] = np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)
    return host_normal[key]
def operands(device, dtype, n):
    return (block(jax.device_put(normal((n, n), 0).astype(dtype), device)),
            block(jax.device_put(normal((n, n), 1).astype(dtype), device)))
def matmul(device, dtype, n, iters, precision=None, out_dtype=None):
    a, b = operands(device, dtype, n)
    f = jax.jit(lambda x, y: jnp.dot(x, y, precision=precision, preferred_element_type=out_dtype))
    return timed_matmul(lambda: f(a, b), block, n, iters)
def conv(device):
    x = jax.device_put(normal((plan.get("conv_batch", 16), 64, 56, 56), 2), device)
    w = jax.device_put(normal((64, 64, 3, 3), 3), device)
    loss = lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME").sum()
    gx, gw = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, w)
    return {"ok": bool(jnp.isfinite(gx).all()) and bool(jnp.isfinite(gw).all())}
try:
    # the tests run this branch on XLA's CPU devices (jax_platform "cpu" with several host devices)
    gpus = jax.devices(plan.get("jax_platform") or "gpu")
    why = "jax %s found none" % out["version"]
except BaseException as exc:
    gpus = []
    why = "jax %s: %s" % (out["version"], err(exc, 200))
if not gpus:
    finish_on_cpu(why, "no GPU: " + why,
                  lambda: matmul(jax.devices("cpu")[0], jnp.float32, 512, 3, lax.Precision.HIGHEST),
                  lambda: conv(jax.devices("cpu")[0]))
visible = plan.get("visible_uuids") or []
by_index = {}
for d in gpus:
    i = getattr(d, "local_hardware_id", None)
    i = d.id if i is None else i
    by_index[i] = d
    cc = str(getattr(d, "compute_capability", "") or "0.0")
    major, minor = (int(x) for x in (cc.split(".") + ["0"])[:2])
    dev = {"index": i, "cuda_index": i, "uuid": visible[i] if i < len(visible) else None, "name": d.device_kind,
           "capability": cc, "matmul": {}}
    tf32 = getattr(getattr(lax, "DotAlgorithmPreset", None), "TF32_TF32_F32", None)  # else XLA's default on f32
    for name, dtype, precision in (("fp32", jnp.float32, lax.Precision.HIGHEST), ("tf32", jnp.float32, tf32),
                                   ("fp16", jnp.float16, None), ("bf16", jnp.bfloat16, None)):
        if lacks(name, major, minor):
            continue
        if time.monotonic() > deadline:
            out["skipped"]["gpu%d.%s" % (i, name)] = "the time limit was reached"
            continue
        try:
            dev["matmul"][name] = matmul(d, dtype, plan["n"], plan["iters"], precision)
        except BaseException as exc:
            out["errors"]["gpu%d.matmul.%s" % (i, name)] = err(exc)
    if lacks("fp8", major, minor):
        dev["fp8"] = lacks("fp8", major, minor)
    elif time.monotonic() > deadline:
        dev["fp8"] = "the time limit was reached"
    else:
        try:
            dev["matmul"]["fp8"] = matmul(d, jnp.float8_e4m3fn, plan["n"], plan["iters"], None, jnp.bfloat16)
        except BaseException as exc:
            dev["fp8"] = "an fp8 dot in XLA failed: " + err(exc, 200)
    try:
        dev["conv"] = conv(d)
    except BaseException as exc:
        out["errors"]["gpu%d.conv" % i] = err(exc)
    try:
        size = plan["copy_mib"] << 20
        host = np.ones(size, dtype=np.uint8)
        block(jax.device_put(host, d))
        start = time.perf_counter()
        x = block(jax.device_put(host, d))
        h2d = size / (time.perf_counter() - start) / 1e9
        start = time.perf_counter()
        np.asarray(x)
        d2h = size / (time.perf_counter() - start) / 1e9
        # JAX copies from ordinary (pageable) host memory: reported, not held against the link
        dev["copy_gbps"] = {"h2d": round(h2d, 2), "d2h": round(d2h, 2)}
        dev["copy_pinned"] = False
    except BaseException as exc:
        out["errors"]["gpu%d.copy" % i] = err(exc)
    out["devices"].append(dev)
def allreduce(indices, mib, iters):
    # a psum over a one-axis mesh of the devices (shard_map; XLA runs it with NCCL on GPUs)
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    shard_map = getattr(jax, "shard_map", None)
    if shard_map is None:
        from jax.experimental.shard_map import shard_map
    devs = [by_index[i] for i in indices]
    numel = (mib << 20) // 4
    mesh = Mesh(np.array(devs), ("i",))
    spec = PartitionSpec("i")
    x = block(jax.device_put(np.ones((len(devs), numel), dtype=np.float32), NamedSharding(mesh, spec)))
    f = jax.jit(shard_map(lambda b: lax.psum(b, "i"), mesh=mesh, in_specs=spec, out_specs=spec))
    r = block(f(x))
    correct = bool(float(r[0, 0]) == len(devs))
    start = time.perf_counter()
    for _ in range(iters):
        r = f(x)
    block(r)
    return allreduce_result(indices, numel, iters, (time.perf_counter() - start) / iters, correct)
node_allreduce(allreduce)
done()
"""

FRAMEWORKS = {"torch": TORCH, "jax": JAX}
# The subprocess runs the prelude, which picks the framework (the first of torch and jax the environment has,
# unless --framework says), then that framework's body, with the prelude's names (plan, out, done, ...)
WORKLOAD = PRELUDE + "BODIES = %r\nexec(compile(BODIES[framework], '<dl-doctor verify: ' + framework + '>', " \
    "'exec'))\n" % FRAMEWORKS



# The compute capability from which a GPU has Tensor Cores for a dtype (NVIDIA's CUDA C++ Programming Guide:
# TF32 and BF16 from 8.0, Ampere; FP8 from 8.9, Ada and Hopper); fp32 and fp16 run everywhere. Both frameworks'
# workloads read it from their plan.
MIN_CAPABILITY = {"tf32": (8, 0), "bf16": (8, 0), "fp8": (8, 9)}
# The share of the node's expected all-reduce bus bandwidth (ProbeContext.matrix.node_busbw_expectation) under which
# every pair of GPUs is also all-reduced alone, to name the slow link; the workload's own plan, not a verdict: the
# check (checks/verify.py, ALLREDUCE_FLOOR) judges the measurement against today's matrix.
PAIRS_BELOW = 0.25


def run_workload(host, python: str, level: str = "quick", skip: Optional[Dict[str, str]] = None,
                 pairs_below_gbps: Optional[float] = None, timeout: Optional[float] = None, watch=None,
                 env: Optional[Dict[str, str]] = None, requested: bool = True, startup_paths=(),
                 **plan_extra: Any) -> Dict[str, Any]:
    """Run the workload with ``python`` (under Host.run's trust rule) and return its results (or why it could not).

    ``skip`` maps GPU UUIDs to why they are left alone; an all-reduce under ``pairs_below_gbps`` (GB/s of bus
    bandwidth) has every pair of GPUs all-reduced alone as well, as with --long; ``watch`` (a started-up GpuWatch)
    samples NVML while the workload runs; ``requested`` says the person named ``python`` (--python), and
    ``startup_paths`` are what it executes before the workload (its .pth files), both for the trust rule; ``env`` is
    added to the subprocess's environment and ``plan_extra`` to its plan (framework, visible_uuids, no_gpu_reason,
    and sizes in the tests). CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA's numbering NVML's where a framework gives no
    UUID; XLA_PYTHON_CLIENT_PREALLOCATE=false keeps JAX from taking most of each GPU's memory."""
    skip = skip or {}
    plan: Dict[str, Any]
    plan = dict(LEVELS[level], level=level, skip_uuids=sorted(skip), skip_reason=skip,
                pairs_below_gbps=pairs_below_gbps, min_capability=MIN_CAPABILITY)
    plan.update(plan_extra)
    limit = timeout or plan["seconds"] + 30
    env = dict(host.environ(), **(env or {}))
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    if watch is not None:
        watch.start()
    try:
        result = host.run_python(python, WORKLOAD, [json.dumps(plan)], timeout=limit, env=env, requested=requested,
                                 startup_paths=startup_paths)
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
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past Python's stack
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
    devices = out.get("devices")
    for d in devices if isinstance(devices, list) else []:
        if isinstance(d, dict) and d.get("uuid") in by_uuid:
            mapping[d.get("cuda_index")] = by_uuid[d["uuid"]]
            d["index"] = by_uuid[d["uuid"]]
    if not mapping:
        return
    fix = lambda xs: [mapping.get(x, x) for x in xs if isinstance(x, int)] if isinstance(xs, list) else []  # noqa: E731
    if isinstance(out.get("allreduce"), dict):
        out["allreduce"]["gpus"] = fix(out["allreduce"].get("gpus") or [])
    for p in out.get("pairs") or []:
        if isinstance(p, dict):
            p["gpus"] = fix(p.get("gpus") or [])
