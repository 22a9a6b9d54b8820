"""NVML watched while `dl-doctor verify`'s workload runs: which GPUs others use (left alone unless asked), and, per
GPU, the SM clock, throttle reasons, power, temperature, ECC counter deltas and Xid events seen during the run.

``GpuWatch(nv)`` takes the ``pynvml`` module or anything with the same functions (tests/fake_nvml.py), like
``collect_nvml``. Sampling runs in a thread of dl-doctor's own process, which never creates a CUDA context; every
NVML call that fails costs only its own figure.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List, Optional

from dl_doctor.probes.nvml import normalize_bus_id, throttle_names

NVML_CLOCK_SM = 1
NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_EVENT_TYPE_XID_CRITICAL_ERROR = 0x8
NVML_ERROR_TIMEOUT = 10
MAX_SAMPLES = 6000  # per GPU: ten minutes at 0.1 s
MAX_XIDS = 100


def normalize_uuid(uuid: Any) -> Optional[str]:
    """NVML's ``GPU-3a5c...`` and torch's ``3a5c...`` as one spelling."""
    if uuid is None:
        return None
    text = uuid.decode("ascii", "replace") if isinstance(uuid, bytes) else str(uuid)
    text = text.strip().lower()
    return text[4:] if text.startswith("gpu-") else text


class GpuWatch:
    def __init__(self, nv: Any, interval: float = 0.1):
        self.nv = nv
        self.err = getattr(nv, "NVMLError", Exception)
        self.interval = interval
        self.devices: List[Dict[str, Any]] = []
        self.handles: List[Any] = []
        self.events = None
        self.xid_reason: Optional[str] = None
        self.xids: List[Dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._open = False

    def _q(self, fn, *args) -> Any:
        try:
            return fn(*args)
        except (self.err, AttributeError, TypeError, ValueError):
            return None

    def open(self) -> Optional[str]:
        """Initialise NVML and read each GPU's identity, processes and ECC counters; None, or why it could not."""
        nv = self.nv
        try:
            nv.nvmlInit()
        except self.err as exc:
            return f"NVML could not initialise: {exc}"
        self._open = True
        count = self._q(nv.nvmlDeviceGetCount) or 0
        for i in range(int(count)):
            h = self._q(nv.nvmlDeviceGetHandleByIndex, i)
            if h is None:
                continue
            pci = self._q(nv.nvmlDeviceGetPciInfo, h)
            link = (self._q(nv.nvmlDeviceGetCurrPcieLinkGeneration, h), self._q(nv.nvmlDeviceGetCurrPcieLinkWidth, h))
            procs = self._q(nv.nvmlDeviceGetComputeRunningProcesses, h)
            name = self._q(nv.nvmlDeviceGetName, h)
            dev = {"index": i, "uuid": normalize_uuid(self._q(nv.nvmlDeviceGetUUID, h)),
                   "name": name.decode("utf-8", "replace") if isinstance(name, bytes) else name,
                   "bus_id": normalize_bus_id(pci.busId) if pci is not None else None,
                   "pcie": {"gen": link[0], "width": link[1]},
                   "processes": ([{"pid": int(p.pid), "used_memory_bytes": int(p.usedGpuMemory or 0)}
                                  for p in procs][:32] if procs is not None else None),
                   "ecc_before": self._ecc(h), "max_sm_clock_mhz": self._q(nv.nvmlDeviceGetMaxClockInfo, h,
                                                                           NVML_CLOCK_SM),
                   "power_limit_w": _watts(self._q(nv.nvmlDeviceGetEnforcedPowerLimit, h)),
                   "slowdown_temp_c": self._q(nv.nvmlDeviceGetTemperatureThreshold, h,
                                              NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
                   "samples": 0, "sm_clock_mhz": [], "power_w": [], "temperature_c": [], "throttle": {}}
            self.devices.append(dev)
            self.handles.append(h)
        self._register_xids()
        return None

    def _ecc(self, h) -> Dict[str, Optional[int]]:
        nv = self.nv
        return {"corrected": self._q(nv.nvmlDeviceGetTotalEccErrors, h, NVML_MEMORY_ERROR_TYPE_CORRECTED,
                                     NVML_VOLATILE_ECC),
                "uncorrected": self._q(nv.nvmlDeviceGetTotalEccErrors, h, NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                       NVML_VOLATILE_ECC)}

    def _register_xids(self) -> None:
        nv = self.nv
        kind = getattr(nv, "nvmlEventTypeXidCriticalError", NVML_EVENT_TYPE_XID_CRITICAL_ERROR)
        try:
            self.events = nv.nvmlEventSetCreate()
        except (self.err, AttributeError) as exc:
            self.xid_reason = f"NVML events are not available: {exc}"
            return
        failed = []
        for dev, h in zip(self.devices, self.handles):
            try:
                nv.nvmlDeviceRegisterEvents(h, kind, self.events)
            except self.err as exc:
                failed.append(f"GPU {dev['index']}: {exc}")
        if failed:
            self.xid_reason = "Xid events not watched on " + "; ".join(failed[:8])

    def busy(self) -> Dict[str, str]:
        """uuid -> a GPU left alone and why: compute processes already on it (they are not dl-doctor's: its workload
        has not started)."""
        out = {}
        for dev in self.devices:
            procs = dev.get("processes") or []
            if procs and dev.get("uuid"):
                pids = ", ".join(str(p["pid"]) for p in procs[:5])
                out[dev["uuid"]] = f"GPU {dev['index']} ({len(procs)} compute process(es): pid {pids})"
        return out

    def _sample(self) -> None:
        nv = self.nv
        for dev, h in zip(self.devices, self.handles):
            if dev["samples"] >= MAX_SAMPLES:
                continue
            dev["samples"] += 1
            clock = self._q(nv.nvmlDeviceGetClockInfo, h, NVML_CLOCK_SM)
            if clock is not None:
                dev["sm_clock_mhz"].append(int(clock))
            power = _watts(self._q(nv.nvmlDeviceGetPowerUsage, h))
            if power is not None:
                dev["power_w"].append(power)
            temp = self._q(nv.nvmlDeviceGetTemperature, h, NVML_TEMPERATURE_GPU)
            if temp is not None:
                dev["temperature_c"].append(int(temp))
            reasons = (getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
                       or getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
            mask = self._q(reasons, h) if reasons else None
            for reason in throttle_names(int(mask)) if mask is not None else []:
                dev["throttle"][reason] = dev["throttle"].get(reason, 0) + 1
        self._poll_xids()

    def _poll_xids(self) -> None:
        if self.events is None:
            return
        nv = self.nv
        wait = getattr(nv, "nvmlEventSetWait_v2", None) or getattr(nv, "nvmlEventSetWait", None)
        for _ in range(MAX_XIDS):
            try:
                data = wait(self.events, 0)
            except self.err:
                return  # NVML_ERROR_TIMEOUT: nothing pending
            except (AttributeError, TypeError):
                return
            if len(self.xids) >= MAX_XIDS:
                return
            index = self._q(nv.nvmlDeviceGetIndex, data.device)
            self.xids.append({"gpu": index, "xid": int(getattr(data, "eventData", 0) or 0),
                              "at": round(time.monotonic(), 3)})

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._sample()
            except Exception:  # noqa: BLE001 - a sampler fault costs only the samples
                return
            self._stop.wait(self.interval)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="dl-doctor-gpuwatch", daemon=True)
        self._thread.start()

    def stop(self) -> Dict[str, Any]:
        """Stop sampling and summarise: per GPU, what was seen during the run."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._sample()  # one last sample, and the Xid events raised at the very end
        gpus = []
        for dev, h in zip(self.devices, self.handles):
            after = self._ecc(h)
            before = dev["ecc_before"]
            delta = {k: (after[k] - before[k]) if after.get(k) is not None and before.get(k) is not None else None
                     for k in ("corrected", "uncorrected")}
            gpus.append({
                "index": dev["index"], "uuid": dev["uuid"], "name": dev["name"], "samples": dev["samples"],
                "sm_clock_mhz": _range(dev["sm_clock_mhz"]), "max_sm_clock_mhz": dev["max_sm_clock_mhz"],
                "power_w": _range(dev["power_w"]), "power_limit_w": dev["power_limit_w"],
                "temperature_c": _range(dev["temperature_c"]), "slowdown_temp_c": dev["slowdown_temp_c"],
                "throttle": dict(dev["throttle"]), "ecc_delta": delta,
                "xid": [x["xid"] for x in self.xids if x["gpu"] == dev["index"]]})
        self.close()
        return {"ran": True, "interval_s": self.interval, "gpus": gpus, "xid_watch": self.xid_reason or "watched",
                "xid_unattributed": [x["xid"] for x in self.xids if x["gpu"] is None][:20]}

    def close(self) -> None:
        if self.events is not None:
            self._q(self.nv.nvmlEventSetFree, self.events)
            self.events = None
        if self._open:
            self._open = False
            self._q(self.nv.nvmlShutdown)

    def identities(self) -> List[Dict[str, Any]]:
        return [{k: d[k] for k in ("index", "uuid", "name", "bus_id", "pcie", "processes")} for d in self.devices]


def _watts(milliwatts: Any) -> Optional[float]:
    return round(int(milliwatts) / 1000.0, 1) if milliwatts is not None else None


def _range(values: List[Any]) -> Optional[Dict[str, Any]]:
    return {"min": min(values), "max": max(values)} if values else None
