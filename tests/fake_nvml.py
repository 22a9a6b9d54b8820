"""A stand-in for the ``pynvml`` module, driven by recorded JSON (tests/fixtures/nvml/*.json).

It implements the functions ``doctor.probes.nvml.collect_nvml`` calls, with NVML's error
codes, so every health state can be exercised without a GPU.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18

MESSAGES = {3: "Not Supported", 6: "Not Found", 4: "Insufficient Permissions", 9: "Driver Not Loaded", 12: "NVML Shared Library Not Found",
            18: "Driver/library version mismatch"}


class NVMLError(Exception):
    def __init__(self, value: int):
        self.value = value
        super().__init__(MESSAGES.get(value, f"NVML error {value}"))

    def __str__(self) -> str:
        return MESSAGES.get(self.value, f"NVML error {self.value}")


class FakeNVML:
    NVMLError = NVMLError

    def __init__(self, recorded: Dict[str, Any]):
        self.rec = recorded
        self.initialised = False
        self.shutdowns = 0
        self.sampled: Dict[int, int] = {}  # per device: how many load samples were read
        self.pending_xids = []  # (device index, xid) raised as NVML events
        self.event_sets = 0
        self.freed = 0

    @classmethod
    def from_file(cls, path: Path) -> "FakeNVML":
        return cls(json.loads(Path(path).read_text()))

    # -- system ------------------------------------------------------------
    def nvmlInit(self):
        if self.rec.get("init_error"):
            raise NVMLError(self.rec["init_error"])
        self.initialised = True

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self):
        return self.rec["driver_version"]

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return self.rec["cuda_driver_version"]

    def nvmlDeviceGetCount(self):
        return len(self.rec["devices"])

    def nvmlDeviceGetHandleByIndex(self, i):
        return self.rec["devices"][i]

    # -- per device: recorded values, or an NVML error code ------------------
    @staticmethod
    def _get(dev, key):
        if key in dev.get("errors", {}):
            raise NVMLError(dev["errors"][key])
        if key in dev.get("not_supported", []):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return dev[key]

    def nvmlDeviceGetName(self, h):
        return self._get(h, "name").encode()  # older bindings return bytes

    def nvmlDeviceGetUUID(self, h):
        return self._get(h, "uuid")

    def nvmlDeviceGetBrand(self, h):
        if "brand" not in h and "brand" not in h.get("errors", {}):  # a recording without it: as a GPU that cannot say
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return self._get(h, "brand")  # nvmlBrandType_t: 2 tesla, 5 geforce, 14 nvidia...

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self._get(h, "bus_id").encode())

    def nvmlDeviceGetMemoryInfo(self, h):
        m = self._get(h, "memory")
        return SimpleNamespace(total=m["total"], used=m["used"], free=m["total"] - m["used"])

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return tuple(self._get(h, "cc"))

    def nvmlDeviceGetPersistenceMode(self, h):
        return self._get(h, "persistence")

    def nvmlDeviceGetEccMode(self, h):
        return self._get(h, "ecc")

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter_type):
        load = h.get("load")
        if load and counter_type == 0 and self.sampled.get(id(h)):  # after the watched run
            return load["ecc_after"]["uncorrected" if error_type == 1 else "corrected"]
        if error_type == 0 and counter_type == 0:
            return h.get("ecc_corrected_volatile", 0)
        return self._get(h, "ecc_volatile" if counter_type == 0 else "ecc_aggregate")

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):
        return self._get(h, "retired_pending")

    def nvmlDeviceGetRemappedRows(self, h):
        return tuple(self._get(h, "remapped_rows"))

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        return self._get(h, "throttle")

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._get(h, "pcie")["gen"]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._get(h, "pcie")["max_gen"]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._get(h, "pcie")["width"]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._get(h, "pcie")["max_width"]

    def nvmlDeviceGetMigMode(self, h):
        return self._get(h, "mig")

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        if "mig_devices" not in h:  # a recording without MIG devices: as a driver that cannot say
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, i):
        if i >= h["mig_devices"]:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return {"mig_of": h.get("uuid"), "index": i}

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=p["pid"], usedGpuMemory=p["used"]) for p in self._get(h, "processes")]

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._load(h, "temperature", None) if h.get("load") else self._get(h, "temperature")

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=self._get(h, "utilization"), memory=0)

    # -- under load (doctor/probes/verify/gpuwatch.py): device["load"] = {"sm_clock": [...], "throttle": [...], "power_mw": [...],
    # "temperature": [...], "ecc_after": {"corrected", "uncorrected"}, "xid": [...]}, read in turn, the last repeated
    def _load(self, h, key, default):
        load = h.get("load") or {}
        seq = load.get(key)
        if not seq:
            return default
        n = self.sampled.get(id(h), 0)
        return seq[min(n, len(seq) - 1)]

    def nvmlDeviceGetClockInfo(self, h, clock):
        value = self._load(h, "sm_clock", 1980)
        self.sampled[id(h)] = self.sampled.get(id(h), 0) + 1
        if self.sampled[id(h)] == 2:  # the Xid events of this device fire once sampling is under way
            self.pending_xids += [(self.rec["devices"].index(h), x) for x in (h.get("load") or {}).get("xid", [])]
        return value

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        return h.get("max_sm_clock", 1980)

    def nvmlDeviceGetPowerUsage(self, h):
        return self._load(h, "power_mw", 300000)

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return h.get("power_limit_mw", 700000)

    def nvmlDeviceGetTemperatureThreshold(self, h, kind):
        return h.get("slowdown_temp", 87)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._load(h, "throttle", self._get(h, "throttle"))

    def nvmlDeviceGetIndex(self, h):
        return self.rec["devices"].index(h)

    def nvmlEventSetCreate(self):
        if self.rec.get("events_unsupported"):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        self.event_sets += 1
        return object()

    def nvmlDeviceRegisterEvents(self, h, kinds, event_set):
        assert kinds & 0x8

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        if not self.pending_xids:
            raise NVMLError(10)  # NVML_ERROR_TIMEOUT
        index, xid = self.pending_xids.pop(0)
        return SimpleNamespace(device=self.rec["devices"][index], eventType=0x8, eventData=xid)

    def nvmlEventSetFree(self, event_set):
        self.freed += 1

    # -- issue 30 item 4: firmware, power limit, application clocks (device["firmware"] = {"vbios", "inforom",
    # "power_limit_mw", "power_default_limit_mw", "app_clocks": [graphics, memory]}); a recording without it: as a
    # GPU or driver that cannot say
    @staticmethod
    def _firmware(h, key):
        fw = h.get("firmware")
        if fw is None or key not in fw:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        value = fw[key]
        if isinstance(value, int) and value < 0:  # a recorded NVML error code
            raise NVMLError(-value)
        return value

    def nvmlDeviceGetVbiosVersion(self, h):
        return self._firmware(h, "vbios")

    def nvmlDeviceGetInforomImageVersion(self, h):
        return self._firmware(h, "inforom").encode()  # older bindings return bytes

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return self._firmware(h, "power_limit_mw")

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return self._firmware(h, "power_default_limit_mw")

    def nvmlDeviceGetApplicationsClock(self, h, clock):
        return self._firmware(h, "app_clocks")[0 if clock == 0 else 1]


# -- NVLink, the GPU fabric and the recovery action (issue 30): device["nvlink"] = [{"active", "version", "errors":
# {"replay", "recovery", "crc_flit", "crc_data"}}, ...] (absent: a GPU without NVLink), device["fabric"] = {"state",
# "status", "clique_id", "cluster_uuid" (hex), "health_mask", "health_summary" (absent: a driver before the v3
# structure, which answers ARGUMENT_VERSION_MISMATCH)} (absent: NOT_SUPPORTED), device["recovery_action"] = int.
# A recording with "old_bindings": true stands for an nvidia-ml-py without these functions.
_NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")


class _FabricInfo(SimpleNamespace):
    version = 2


class _FabricInfoV3(SimpleNamespace):
    version = 3


def _nvlink_link(h, link):
    links = h.get("nvlink") or []
    if link >= len(links):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED if not links else 2)  # 2: NVML_ERROR_INVALID_ARGUMENT
    return links[link]


def _fake_nvlink_state(self, h, link):
    return 1 if _nvlink_link(h, link).get("active", True) else 0


def _fake_nvlink_version(self, h, link):
    return _nvlink_link(h, link).get("version", 4)


def _fake_nvlink_error(self, h, link, counter):
    return _nvlink_link(h, link).get("errors", {}).get(_NVLINK_COUNTERS[counter], 0)


def _fake_fabric_v(self, h, info):
    fab = h.get("fabric")
    if fab is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if info.version == 3 and "health_summary" not in fab:
        raise NVMLError(25)  # NVML_ERROR_ARGUMENT_VERSION_MISMATCH: a driver before nvmlGpuFabricInfo_v3
    if info.version == 3:
        info.healthSummary = fab["health_summary"]
    info.state = fab.get("state", 3)
    info.status = fab.get("status", 0)
    info.cliqueId = fab.get("clique_id", 0)
    info.clusterUuid = bytes.fromhex(fab.get("cluster_uuid", "00" * 16))
    info.healthMask = fab.get("health_mask", 0)
    return 0


def _fake_field_values(self, h, fields):
    action = h.get("recovery_action")
    if action is None:
        return [SimpleNamespace(nvmlReturn=NVML_ERROR_NOT_SUPPORTED, value=SimpleNamespace(uiVal=0))]
    return [SimpleNamespace(nvmlReturn=0, value=SimpleNamespace(uiVal=action))]


class FakeNVMLFabric(FakeNVML):
    nvmlDeviceGetNvLinkState = _fake_nvlink_state
    nvmlDeviceGetNvLinkVersion = _fake_nvlink_version
    nvmlDeviceGetNvLinkErrorCounter = _fake_nvlink_error
    nvmlDeviceGetGpuFabricInfoV = _fake_fabric_v
    nvmlDeviceGetFieldValues = _fake_field_values
    c_nvmlGpuFabricInfo_v2_t = _FabricInfo
    c_nvmlGpuFabricInfo_v3_t = _FabricInfoV3
