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
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18

MESSAGES = {3: "Not Supported", 4: "Insufficient Permissions", 9: "Driver Not Loaded", 12: "NVML Shared Library Not Found",
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

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=p["pid"], usedGpuMemory=p["used"]) for p in self._get(h, "processes")]

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._get(h, "temperature")

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=self._get(h, "utilization"), memory=0)
