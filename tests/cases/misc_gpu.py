"""The GPUs' own configuration as reported: MIG mode."""

from __future__ import annotations

import healthy
from cases import Machine, case, nvml_fixture

MIG_NODES = (["nvidia-caps", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools"] + [f"nvidia{i}" for i in range(8)]
             + ["nvidiactl"])


@case("magic-castle-276-mig-on-without-instances")
def magic_castle_276(broken: bool) -> Machine:
    """An A100 node with MIG mode enabled but no MIG configuration applied (no GPU instances): slurmd's NVML
    autodetection finds no MIG device and exits; CUDA sees no device either."""
    spec = healthy.mig_a100()
    if broken:  # the node's MIG layout was never applied: nothing selected for nvidia-mig-parted
        del spec["etc/nvidia-mig-manager/selected"]
    return Machine(spec, nvml=nvml_fixture("mig_a100_80gb", devices={"mig_devices": 0 if broken else 7}),
                   device_nodes=MIG_NODES)
