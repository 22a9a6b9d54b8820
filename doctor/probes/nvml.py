"""GPU state through NVML (nvidia-ml-py), live only.

``collect_nvml(nv)`` takes the ``pynvml`` module or anything with the same functions
(the tests use a fake built from recorded JSON), so every health state is testable
without a GPU. Each per-device query that fails is recorded, not fatal.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Type

from dl_doctor.facts.contract import array, boolean, count, integer, map_of, obj, string
from dl_doctor.facts.requirements import NVML_BRANDS
from dl_doctor.probes import ProbeContext, Unavailable, probe

# nvmlClocksEventReasons / ClocksThrottleReasons bits (nvml.h).
THROTTLE_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_LIBRARY_NOT_FOUND = 12
MAX_MIG_SLOTS = 16  # NVML's MIG device slots per GPU (7 on A100/H100): a bound on what a broken library can claim
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_TEMPERATURE_GPU = 0


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def normalize_bus_id(bus_id: str) -> str:
    """NVML's ``00000000:10:1C.0`` -> sysfs' ``0000:10:1c.0``."""
    text = _text(bus_id).strip().lower()
    domain, _, rest = text.partition(":")
    return f"{domain[-4:]}:{rest}" if rest else text


def throttle_names(mask: int) -> List[str]:
    return [name for bit, name in sorted(THROTTLE_REASONS.items()) if mask & bit]


def collect_nvml(nv: Any) -> Dict[str, Any]:
    error_type = getattr(nv, "NVMLError", Exception)
    try:
        nv.nvmlInit()
    except error_type as exc:
        code = getattr(exc, "value", None)
        if code == NVML_ERROR_LIBRARY_NOT_FOUND:
            raise Unavailable("libnvidia-ml.so.1 was not found: no NVIDIA driver user space on this host")
        if code == NVML_ERROR_NO_PERMISSION:
            raise PermissionError(f"NVML: {exc}")
        return {"init_error": _text(exc), "init_error_code": code, "devices": []}
    try:
        out: Dict[str, Any] = {"driver_version": _text(nv.nvmlSystemGetDriverVersion())}
        try:
            cuda = int(nv.nvmlSystemGetCudaDriverVersion_v2())
            out["cuda_driver_version"] = f"{cuda // 1000}.{(cuda % 1000) // 10}"
        except error_type:
            out["cuda_driver_version"] = None
        count = int(nv.nvmlDeviceGetCount())
        out["device_count"] = count
        out["devices"] = [_device(nv, error_type, i) for i in range(count)]
        return out
    finally:
        try:
            nv.nvmlShutdown()
        except error_type:
            pass


def _device(nv: Any, error_type: Type[BaseException], index: int) -> Dict[str, Any]:
    dev: Dict[str, Any] = {"index": index, "unsupported": [], "errors": {}}
    try:
        handle = nv.nvmlDeviceGetHandleByIndex(index)
    except error_type as exc:
        dev["errors"]["handle"] = _text(exc)
        return dev

    def q(name: str, fn: Callable[[], Any]) -> Optional[Any]:
        try:
            return fn()
        except error_type as exc:
            if getattr(exc, "value", None) == NVML_ERROR_NOT_SUPPORTED:
                dev["unsupported"].append(name)
            else:
                dev["errors"][name] = _text(exc)
            return None
        except AttributeError:  # an older nvidia-ml-py without this function
            dev["unsupported"].append(name)
            return None

    dev["name"] = q("name", lambda: _text(nv.nvmlDeviceGetName(handle)))
    dev["uuid"] = q("uuid", lambda: _text(nv.nvmlDeviceGetUUID(handle)))
    brand = q("brand", lambda: int(nv.nvmlDeviceGetBrand(handle)))
    dev["brand"] = NVML_BRANDS.get(brand, "other") if brand is not None else None
    pci = q("pci", lambda: nv.nvmlDeviceGetPciInfo(handle))
    dev["bus_id"] = normalize_bus_id(pci.busId) if pci is not None else None
    mem = q("memory", lambda: nv.nvmlDeviceGetMemoryInfo(handle))
    dev["memory_total_bytes"] = int(mem.total) if mem is not None else None
    dev["memory_used_bytes"] = int(mem.used) if mem is not None else None
    cc = q("compute_capability", lambda: nv.nvmlDeviceGetCudaComputeCapability(handle))
    dev["compute_capability"] = f"{cc[0]}.{cc[1]}" if cc else None
    pm = q("persistence_mode", lambda: nv.nvmlDeviceGetPersistenceMode(handle))
    dev["persistence_mode"] = bool(pm) if pm is not None else None
    ecc = q("ecc_mode", lambda: nv.nvmlDeviceGetEccMode(handle))
    dev["ecc_mode"] = bool(ecc[0]) if ecc else None
    dev["ecc_uncorrected_volatile"] = q("ecc_errors", lambda: int(nv.nvmlDeviceGetTotalEccErrors(
        handle, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)))
    dev["ecc_uncorrected_aggregate"] = q("ecc_errors_aggregate", lambda: int(nv.nvmlDeviceGetTotalEccErrors(
        handle, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC)))
    pending = q("retired_pages_pending", lambda: nv.nvmlDeviceGetRetiredPagesPendingStatus(handle))
    dev["retired_pages_pending"] = bool(pending) if pending is not None else None
    rows = q("remapped_rows", lambda: nv.nvmlDeviceGetRemappedRows(handle))
    dev["remapped_rows"] = ({"correctable": int(rows[0]), "uncorrectable": int(rows[1]), "pending": bool(rows[2]),
                             "failure": bool(rows[3])} if rows is not None else None)
    reasons = q("throttle_reasons", lambda: int(nv.nvmlDeviceGetCurrentClocksThrottleReasons(handle)))
    dev["throttle_mask"] = reasons
    dev["throttle_reasons"] = throttle_names(reasons) if reasons is not None else None
    dev["pcie"] = {
        "gen": q("pcie_gen", lambda: int(nv.nvmlDeviceGetCurrPcieLinkGeneration(handle))),
        "max_gen": q("pcie_max_gen", lambda: int(nv.nvmlDeviceGetMaxPcieLinkGeneration(handle))),
        "width": q("pcie_width", lambda: int(nv.nvmlDeviceGetCurrPcieLinkWidth(handle))),
        "max_width": q("pcie_max_width", lambda: int(nv.nvmlDeviceGetMaxPcieLinkWidth(handle))),
    }
    mig = q("mig_mode", lambda: nv.nvmlDeviceGetMigMode(handle))
    dev["mig_mode"] = {"current": bool(mig[0]), "pending": bool(mig[1])} if mig else None
    dev["mig_devices"] = None
    if mig and mig[0]:
        def count_mig() -> int:
            # NVML numbers a GPU's MIG devices in slots up to nvmlDeviceGetMaxMigDeviceCount; an empty slot is
            # NVML_ERROR_NOT_FOUND
            found = 0
            for i in range(min(int(nv.nvmlDeviceGetMaxMigDeviceCount(handle)), MAX_MIG_SLOTS)):
                try:
                    nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
                    found += 1
                except error_type as exc:
                    if getattr(exc, "value", None) != NVML_ERROR_NOT_FOUND:
                        raise
            return found
        dev["mig_devices"] = q("mig_devices", count_mig)
    procs = q("processes", lambda: nv.nvmlDeviceGetComputeRunningProcesses(handle))
    dev["processes"] = ([{"pid": int(p.pid), "used_memory_bytes": int(p.usedGpuMemory or 0)} for p in procs]
                        if procs is not None else None)
    dev["temperature_c"] = q("temperature", lambda: int(nv.nvmlDeviceGetTemperature(handle, NVML_TEMPERATURE_GPU)))
    util = q("utilization", lambda: nv.nvmlDeviceGetUtilizationRates(handle))
    dev["utilization_gpu"] = int(util.gpu) if util is not None else None
    _homogeneity(nv, q, handle, dev)  # issue 30 item 4: firmware, power limit, application clocks
    _nvlink(nv, error_type, handle, q, dev)
    return dev


# -- issue 30 item 4: what GPUs of one model must share (firmware, power limit, application clocks) ---------------
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_MEM = 2
MAX_FIRMWARE_TEXT = 64  # a VBIOS version is 96.00.89.00.01; a broken library's answer is cut here


def _homogeneity(nv: Any, q: Callable[[str, Callable[[], Any]], Optional[Any]], handle: Any,
                 dev: Dict[str, Any]) -> None:
    """The VBIOS and InfoROM image versions, the power limit (and its default) and the application clocks: equal on
    healthy GPUs of one model in one node, so a GPU that differs was flashed, capped or clocked apart."""
    def text(value: Any) -> str:
        return _text(value).strip()[:MAX_FIRMWARE_TEXT]

    def whole(value: Any) -> int:
        return int(value)

    dev["vbios_version"] = q("vbios_version", lambda: text(nv.nvmlDeviceGetVbiosVersion(handle)))
    dev["inforom_image_version"] = q("inforom_image_version",
                                     lambda: text(nv.nvmlDeviceGetInforomImageVersion(handle)))
    dev["power_limit_mw"] = q("power_limit", lambda: whole(nv.nvmlDeviceGetPowerManagementLimit(handle)))
    dev["power_default_limit_mw"] = q("power_default_limit",
                                      lambda: whole(nv.nvmlDeviceGetPowerManagementDefaultLimit(handle)))
    dev["applications_clocks_mhz"] = {
        "graphics": q("applications_clock_graphics",
                      lambda: whole(nv.nvmlDeviceGetApplicationsClock(handle, NVML_CLOCK_GRAPHICS))),
        "memory": q("applications_clock_memory",
                    lambda: whole(nv.nvmlDeviceGetApplicationsClock(handle, NVML_CLOCK_MEM))),
    }


HOMOGENEITY_FIELDS: Dict[str, Any] = dict(
    vbios_version=string("the VBIOS version (nvmlDeviceGetVbiosVersion: 96.00.89.00.01)", since="0.2.0"),
    inforom_image_version=string("the InfoROM image version (nvmlDeviceGetInforomImageVersion: G520.0200.00.05)",
                                 since="0.2.0"),
    power_limit_mw=integer("the power management limit in milliwatts (nvmlDeviceGetPowerManagementLimit)",
                           range=(0, 1 << 40), since="0.2.0"),
    power_default_limit_mw=integer("the default power limit in milliwatts "
                                   "(nvmlDeviceGetPowerManagementDefaultLimit)", range=(0, 1 << 40), since="0.2.0"),
    applications_clocks_mhz=obj(
        "the application clocks (nvmlDeviceGetApplicationsClock): what the GPU runs kernels at unless boosted",
        graphics=integer("the graphics clock in MHz", range=(0, 1 << 20)),
        memory=integer("the memory clock in MHz", range=(0, 1 << 20)),
        since="0.2.0",
    ),
)


# -- NVLink, the GPU fabric and the recovery action (issue 30) ---------------------------------------------------
NVLINK_MAX_LINKS = 36  # pynvml.NVML_NVLINK_MAX_LINKS
NVML_ERROR_INVALID_ARGUMENT = 2
NVLINK_COUNTERS = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3}  # NVML_NVLINK_ERROR_DL_*
FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}  # NVML_GPU_FABRIC_STATE_*
# NVML_GPU_FABRIC_HEALTH_SUMMARY_* (nvmlGpuFabricInfo_v3_t.healthSummary)
FABRIC_SUMMARIES = {0: "not_supported", 1: "healthy", 2: "unhealthy", 3: "limited_capacity"}
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
RECOVERY_ACTIONS = {0: "none", 1: "gpu_reset", 2: "node_reboot", 3: "drain_p2p", 4: "drain_and_reset",
                    5: "recover_imex_domain", 6: "bus_reset", 7: "system_reboot"}  # NVML_GPU_RECOVERY_ACTION_*
NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230
COUNTER_MAX = 2 ** 63 - 1


def _clamp(value: Any, high: int = COUNTER_MAX) -> Optional[int]:
    try:
        return max(0, min(int(value), high))
    except (TypeError, ValueError, OverflowError):
        return None


def _nvlink(nv: Any, error_type: Type[BaseException], handle: Any, q: Callable[[str, Callable[[], Any]], Any],
            dev: Dict[str, Any]) -> None:
    links: List[Dict[str, Any]] = []
    supported = False
    for link in range(NVLINK_MAX_LINKS):
        try:
            state = nv.nvmlDeviceGetNvLinkState(handle, link)
        except AttributeError:
            break
        except error_type as exc:
            if getattr(exc, "value", None) in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT):
                break  # no such link: a GPU without NVLink costs this one call
            dev["errors"][f"nvlink_{link}"] = _text(exc)[:200]
            break
        supported = True
        entry: Dict[str, Any] = {"link": link, "active": bool(state), "version": None, "errors": {}}
        try:
            entry["version"] = _clamp(nv.nvmlDeviceGetNvLinkVersion(handle, link), 64)
        except error_type:
            pass
        for name, counter in NVLINK_COUNTERS.items():
            try:
                entry["errors"][name] = _clamp(nv.nvmlDeviceGetNvLinkErrorCounter(handle, link, counter))
            except error_type:
                entry["errors"][name] = None
        links.append(entry)
    dev["nvlink"] = {"links": links, "supported": supported}
    dev["fabric"] = _fabric(nv, error_type, handle, dev)

    def recovery() -> Optional[str]:
        values = nv.nvmlDeviceGetFieldValues(handle, [NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])
        value = values[0]
        if int(getattr(value, "nvmlReturn", 0)) != 0:
            return None
        raw = getattr(value, "value", None)
        number = getattr(raw, "uiVal", getattr(raw, "ullVal", raw))
        code = _clamp(number)
        if code is None:
            return None
        return RECOVERY_ACTIONS.get(code, f"unknown_{min(code, 999)}")
    dev["recovery_action"] = q("recovery_action", recovery) if hasattr(nv, "nvmlDeviceGetFieldValues") else None


def _fabric(nv: Any, error_type: Type[BaseException], handle: Any, dev: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    info: Any = None
    try:
        if hasattr(nv, "nvmlDeviceGetGpuFabricInfoV"):
            # v3 adds the health summary; a driver that predates it answers ARGUMENT_VERSION_MISMATCH, and v2 is asked
            for name in ("c_nvmlGpuFabricInfo_v3_t", "c_nvmlGpuFabricInfo_v2_t"):
                if not hasattr(nv, name):
                    continue
                info = getattr(nv, name)()
                try:
                    nv.nvmlDeviceGetGpuFabricInfoV(handle, info)
                    break
                except error_type as exc:
                    if getattr(exc, "value", None) != NVML_ERROR_ARGUMENT_VERSION_MISMATCH \
                            or name == "c_nvmlGpuFabricInfo_v2_t":
                        raise
                    info = None
            if info is None:
                return None
        elif hasattr(nv, "nvmlDeviceGetGpuFabricInfo") and hasattr(nv, "c_nvmlGpuFabricInfo_t"):
            info = nv.c_nvmlGpuFabricInfo_t()
            nv.nvmlDeviceGetGpuFabricInfo(handle, info)
        else:
            return None
    except error_type as exc:
        if getattr(exc, "value", None) == NVML_ERROR_NOT_SUPPORTED:
            return {"state": "not_supported", "status": None, "clique_id": None, "cluster_uuid": None,
                    "health_mask": None, "health_summary": None}
        dev["errors"]["fabric"] = _text(exc)[:200]
        return None
    except (AttributeError, TypeError):
        return None
    state = _clamp(getattr(info, "state", None), 255)
    raw_uuid = getattr(info, "clusterUuid", None)
    try:
        uuid = bytes(bytearray(raw_uuid)).hex()[:64] if raw_uuid is not None else None
    except (TypeError, ValueError):
        uuid = _text(raw_uuid)[:64]
    mask = getattr(info, "healthMask", None)
    summary = _clamp(getattr(info, "healthSummary", None), 255)
    return {
        "state": FABRIC_STATES.get(state, "unknown") if state is not None else None,
        "status": _clamp(getattr(info, "status", None), 2 ** 31 - 1),
        "clique_id": _clamp(getattr(info, "cliqueId", None), 2 ** 32 - 1),
        "cluster_uuid": uuid,
        "health_mask": _clamp(mask, 2 ** 32 - 1) if mask is not None else None,
        "health_summary": FABRIC_SUMMARIES.get(summary, "unknown") if summary is not None else None,
    }


NVML_FACTS = obj(
    "NVML (nvidia-ml-py): driver version, each GPU's health",
    init_error=string("why nvmlInit failed (then devices is empty)"),
    init_error_code=integer("NVML's error code for it"),
    driver_version=string("the driver version NVML reports"),
    cuda_driver_version=string("the CUDA version the driver supports (12.4)"),
    device_count=count("GPUs NVML counts"),
    devices=array(obj(
        "",
        index=count("NVML's index"),
        unsupported=array(string(), "queries this GPU or nvidia-ml-py does not support"),
        errors=map_of(string("NVML's error"), "query -> why it failed (handle: the GPU could not be opened)"),
        name=string("the product name (NVIDIA H100 80GB HBM3)"),
        uuid=string("the GPU's UUID (GPU-...)"),
        brand=string("its NVML brand (nvmlDeviceGetBrand), as nvml.h names it in lower case: tesla, nvidia, geforce, "
                     "quadro, grid, titan, nvs, quadro_rtx, nvidia_rtx, geforce_rtx, titan_rtx, nvidia_vapps, nvidia_vpc, "
                     "nvidia_vcs, nvidia_vws, nvidia_cloud_gaming, unknown; other: a value this release does not know. "
                     "What the NVIDIA container runtime's brand= requirements compare", since="0.2.0"),
        bus_id=string("the PCI address, as sysfs writes it (0000:10:1c.0)"),
        memory_total_bytes=integer("GPU memory in all"),
        memory_used_bytes=integer("GPU memory in use"),
        compute_capability=string("the CUDA compute capability (9.0)"),
        persistence_mode=boolean("persistence mode is on"),
        ecc_mode=boolean("ECC is on (current mode)"),
        ecc_uncorrected_volatile=integer("uncorrectable ECC errors since the driver loaded"),
        ecc_uncorrected_aggregate=integer("uncorrectable ECC errors over the GPU's life"),
        retired_pages_pending=boolean("retired pages wait for a reset (pre-Ampere page retirement)"),
        remapped_rows=obj(
            "row remapping (Ampere and later)",
            correctable=integer("rows remapped for correctable errors"),
            uncorrectable=integer("rows remapped for uncorrectable errors"),
            pending=boolean("a remap waits for a GPU reset"),
            failure=boolean("a remap failed: the GPU has no spare rows left"),
        ),
        throttle_mask=integer("the current clock event (throttle) reasons, as NVML's bit mask"),
        throttle_reasons=array(string(), "the same, by name (gpu_idle, sw_power_cap, hw_slowdown, "
                                         "hw_thermal_slowdown...)"),
        pcie=obj(
            "the PCIe link",
            gen=integer("its current generation", range=(0, 64)),
            max_gen=integer("its maximum generation", range=(0, 64)),
            width=integer("its current width (lanes)", range=(0, 1024)),
            max_width=integer("its maximum width (lanes)", range=(0, 1024)),
        ),
        mig_mode=obj(
            "MIG mode",
            current=boolean("MIG is on"),
            pending=boolean("MIG is on after the next reset"),
        ),
        mig_devices=count("the MIG devices that exist on it (MIG on only; null: MIG off, or NVML could not say)",
                          since="0.2.0"),
        processes=array(obj(
            "",
            pid=integer("its process id"),
            used_memory_bytes=integer("GPU memory it uses"),
        ), "compute processes on the GPU (other users' only as root)"),
        temperature_c=integer("the GPU's temperature", range=(-273, 1000)),
        utilization_gpu=integer("percent of the last sample period a kernel ran", range=(0, 100)),
        **HOMOGENEITY_FIELDS,
        nvlink=obj(
            "NVLink: each link NVML answers for (it stops at the first link the GPU does not have)",
            links=array(obj(
                "",
                link=count("the link's number"),
                active=boolean("the link is up (nvmlDeviceGetNvLinkState)"),
                version=integer("its NVLink version (4 on H100)", range=(0, 64)),
                errors=obj(
                    "its error counters (nvmlDeviceGetNvLinkErrorCounter; null: NVML could not say)",
                    replay=integer("data link replays", range=(0, COUNTER_MAX)),
                    recovery=integer("data link recoveries", range=(0, COUNTER_MAX)),
                    crc_flit=integer("flit CRC errors", range=(0, COUNTER_MAX)),
                    crc_data=integer("data CRC errors", range=(0, COUNTER_MAX)),
                ),
            ), "one entry per link"),
            supported=boolean("the GPU answered for at least one NVLink link"),
            since="0.2.0",
        ),
        fabric=obj(
            "the GPU's NVSwitch fabric registration (nvmlDeviceGetGpuFabricInfoV; null: nvidia-ml-py or the driver "
            "is too old to say)",
            state=string("not_supported, not_started, in_progress, completed (unknown: a value this release does "
                         "not know)"),
            status=integer("NVML's return code for the registration (0: success)", range=(0, 2 ** 31 - 1)),
            clique_id=integer("the NVLink clique the GPU belongs to", range=(0, 2 ** 32 - 1)),
            cluster_uuid=string("the fabric cluster's UUID, in hex"),
            health_mask=integer("the fabric health mask (NVML_GPU_FABRIC_HEALTH_MASK_*)", range=(0, 2 ** 32 - 1)),
            health_summary=string("the driver's fabric health summary (nvmlGpuFabricInfo_v3): healthy, unhealthy, "
                                  "limited_capacity, not_supported; null: a driver or nvidia-ml-py before v3"),
            since="0.2.0",
        ),
        recovery_action=string("what the driver says this GPU needs (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION): none, "
                               "gpu_reset, node_reboot, drain_p2p, drain_and_reset, recover_imex_domain, bus_reset, "
                               "system_reboot; null: unsupported", since="0.2.0"),
    ), "one entry per GPU NVML sees"),
)


@probe("nvml", "GPU health through NVML: memory, ECC, row remapping, throttling, PCIe link, MIG, processes",
       root_adds="NVML queries that need access to /dev/nvidiactl (ECC counters, processes of other users)",
       provides=NVML_FACTS)
def nvml_probe(ctx: ProbeContext) -> Dict[str, Any]:
    if not ctx.host.kernel_live:
        raise Unavailable("NVML talks to the running driver; not under a sysroot")
    if not ctx.host.exists("/proc/driver/nvidia"):
        # nvmlInit could only answer "Driver Not Loaded": spare the import of pynvml and ctypes (~25 ms of every run on
        # a host without the NVIDIA kernel module: CI, image builds, CPU instances)
        raise Unavailable("the NVIDIA kernel module is not loaded (no /proc/driver/nvidia): NVML cannot initialise")
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise Unavailable(f"nvidia-ml-py is not installed: {exc}")
    return collect_nvml(pynvml)
