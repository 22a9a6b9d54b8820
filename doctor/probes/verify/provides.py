"""The facts the verify probe provides (its ``provides=``): each with its JSON type and meaning.

They come from a subprocess running someone's interpreter, or from a facts file: the verify checks read them through
``dl_doctor.facts.contract.conform`` with this shape (from the facts schema), which keeps what has it and drops the
rest, so a malformed part costs only itself. That is why the shape is not enforced when a facts file is loaded
(``enforce=False``): a file holding such a part, as dl-doctor wrote it, is still judged."""

from __future__ import annotations

from dl_doctor.facts.contract import array, boolean, integer, map_of, number, obj, string


def _span(what: str):
    return obj(what, min=number("the lowest sample"), max=number("the highest sample"))


_GPU_WATCH = obj(
    "",
    index=integer("NVML's index of the GPU"),
    samples=integer("NVML samples taken during the workloads"),
    throttle=map_of(integer("samples that showed it"), "clock event reason (sw_power_cap, hw_slowdown, "
                                                       "hw_thermal_slowdown...) -> samples that showed it"),
    ecc_delta=obj(
        "ECC errors counted during the workloads",
        corrected=number("corrected"),
        uncorrected=number("uncorrected"),
    ),
    xid=array(integer(), "Xid events NVML reported for this GPU during the workloads"),
    temperature_c=_span("the GPU's temperature (°C) under load"),
    slowdown_temp_c=number("the temperature at which the GPU slows down (NVML's threshold)"),
    power_w=_span("its power draw (W) under load"),
    power_limit_w=number("its enforced power limit (W)"),
    sm_clock_mhz=_span("its SM clock (MHz) under load"),
    max_sm_clock_mhz=number("its maximum SM clock (MHz)"),
    name=string("the product name"),
    uuid=string("the GPU's UUID"),
)

VERIFY_FACTS = obj(
    "the verify workloads' results (only with dl-doctor verify or run --verify)",
    framework=string("the framework the workloads ran in: torch or jax"),
    version=string("its version"),
    cuda=string("the CUDA version it was built with (null: a CPU build)"),
    cudnn=integer("torch: cuDNN's version (torch.backends.cudnn.version())"),
    level=string("quick or long"),
    python=string("the interpreter the workloads ran in"),
    error=string("why the workloads gave no result (could not run, no JSON, not an object)"),
    no_gpu=string("why the framework saw no GPU (a CPU build, no device, what CUDA said); the CPU part ran instead"),
    include_busy=boolean("--include-busy: GPUs in use by others were tested too"),
    errors=map_of(string("what it raised"), "part (import, cpu, gpuN.matmul.DTYPE, gpuN.conv, gpuN.copy, allreduce) "
                                            "-> what it raised"),
    skipped=map_of(string("why"), "part (allreduce, pairs, cudaN, gpuN.DTYPE) -> why it was not run"),
    left_alone=map_of(string("why (NVML's compute processes of others)"),
                      "NVML index -> why that GPU was left alone as in use by others"),
    devices=array(obj(
        "",
        index=integer("NVML's index (matched by UUID; null for the CPU)"),
        cuda_index=integer("the framework's own device index"),
        uuid=string("the GPU's UUID"),
        name=string("the device's name (cpu on a host without a CUDA device)"),
        capability=string("the compute capability (9.0)"),
        fp8=string("why fp8 was not measured (no torch._scaled_mm...)"),
        matmul=map_of(obj(
            "",
            tflops=number("achieved TFLOPS"),
            seconds=number("time of the timed iterations"),
            n=integer("the matrices' size (n x n)"),
            iters=integer("timed iterations"),
        ), "dtype (fp32, tf32, fp16, bf16, fp8) -> the matmul's rate"),
        conv=obj("a cuDNN convolution, forward and backward", ok=boolean("its gradients are finite")),
        copy_gbps=obj(
            "pinned host <-> device copies",
            h2d=number("host to device, GB/s"),
            d2h=number("device to host, GB/s"),
        ),
        copy_pinned=boolean("false: the copies used pageable host memory (JAX); absent: pinned"),
    ), "each device tested (the CPU where the framework saw no GPU)"),
    allreduce=obj(
        "an NCCL all-reduce across the GPUs tested",
        gpus=array(integer(), "the GPUs (NVML's indexes)"),
        bytes=integer("bytes reduced"),
        iters=integer("timed iterations"),
        seconds=number("time of the timed iterations"),
        algbw_gbps=number("algorithm bandwidth, GB/s"),
        busbw_gbps=number("bus bandwidth, GB/s (algbw x 2(n-1)/n, as nccl-tests)"),
        correct=boolean("the result was the expected sum"),
    ),
    pairs=array(obj(
        "",
        gpus=array(integer(), "the two GPUs"),
        busbw_gbps=number("bus bandwidth, GB/s"),
        correct=boolean("the result was the expected sum"),
        error=string("what it raised"),
    ), "all-reduce per pair of GPUs (long level, or when the all-reduce was slow or failed)"),
    busbw_expectation=obj(
        "what the all-reduce's bus bandwidth is held to: the slowest GPU's link",
        gbps=number("the link's rate, GB/s"),
        via=string("where it comes from: NVLink (the matrix) or the PCIe link (NVML)"),
        unverified=boolean("the matrix marks the NVLink rate as unverified"),
        floor_gbps=number("the bus bandwidth below which the all-reduce is slow"),
        floor_ratio=number("floor_gbps / gbps"),
    ),
    nvml_gpus=array(obj(
        "",
        index=integer("NVML's index"),
        uuid=string("the GPU's UUID"),
        name=string("the product name"),
        bus_id=string("the PCI address"),
        pcie=obj("the PCIe link", gen=integer("its generation"), width=integer("its width (lanes)")),
    ), "the GPUs NVML lists"),
    watch=obj(
        "NVML watched during the workloads",
        ran=boolean("it watched"),
        reason=string("why it did not"),
        interval_s=number("the sampling interval"),
        gpus=array(_GPU_WATCH, "per GPU: what it did under load"),
        xid_watch=string("watched, or why Xid events were not watched"),
        xid_unattributed=array(integer(), "Xid events that named no GPU"),
    ),
    dcgm=obj(
        "dcgmi diag where DCGM is installed",
        ran=boolean("it ran and printed its JSON"),
        reason=string("why it did not"),
        command=string("the command (diag -r LEVEL -j)"),
        exit=integer("its exit status"),
        shape=string("the JSON's shape: 3.x or 4.x"),
        version=string("DCGM's version"),
        runtime_error=string("an error DCGM reported instead of results"),
        truncated=boolean("results were left out past the cap"),
        results=array(obj(
            "",
            category=string("the test category"),
            test=string("the test"),
            gpu=string("the GPU (its id, or all)"),
            status=string("pass, fail, warn, skip..."),
            messages=array(string(), "its warnings"),
        ), "each test's result per GPU"),
    ),
    dcgm_health=obj(
        "dcgmi health -c -j: what DCGM's background health watches have seen (read-only)",
        ran=boolean("it ran and gave a report"),
        reason=string("why it did not"),
        command=string("the command"),
        exit=integer("its exit status"),
        watches_off=boolean("DCGM's health watches are not enabled"),
        overall=string("pass, warn or fail"),
        incidents=array(obj(
            "",
            entity=string("the GPU (or other entity)"),
            system=string("the subsystem (PCIe, memory, thermal...)"),
            status=string("pass, warn or fail"),
            message=string("DCGM's message"),
        ), "what the watches report"),
    ),
    since="0.2.0",
    enforce=False,
)
