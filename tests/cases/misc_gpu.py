"""The GPUs' own configuration as reported: MIG mode."""

from __future__ import annotations

import healthy
from cases import Machine, case, nvml_fixture

MIG_NODES = (["nvidia-caps", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools"] + [f"nvidia{i}" for i in range(8)]
             + ["nvidiactl"])


def g5_12xlarge_nvml() -> dict:
    """The recorded A10G (tests/fixtures/nvml/g5_ubuntu.json) as a g5.12xlarge's four, on the tree's PCI buses."""
    import copy

    doc = nvml_fixture("g5_ubuntu")
    one = doc["devices"][0]
    doc["devices"] = []
    for i, bus in enumerate(("1B", "1C", "1D", "1E")):
        dev = copy.deepcopy(one)
        dev.update(bus_id=f"00000000:00:{bus}.0", uuid=f"GPU-00000000-aaaa-bbbb-cccc-00000000000{i}")
        doc["devices"].append(dev)
    return doc


@case("magic-castle-276-mig-on-without-instances")
def magic_castle_276(broken: bool) -> Machine:
    """An A100 node with MIG mode enabled but no MIG configuration applied (no GPU instances): slurmd's NVML
    autodetection finds no MIG device and exits; CUDA sees no device either."""
    spec = healthy.mig_a100()
    if broken:  # the node's MIG layout was never applied: nothing selected for nvidia-mig-parted
        del spec["etc/nvidia-mig-manager/selected"]
    return Machine(spec, nvml=nvml_fixture("mig_a100_80gb", devices={"mig_devices": 0 if broken else 7}),
                   device_nodes=MIG_NODES)


@case("fastmri-challenge-238-zombie-holds-gpu-memory")
def fastmri_238(broken: bool) -> Machine:
    """A shared training node: a finished participant's zombie process still holds most of the GPU's memory, so the
    next job runs out of memory at its first allocation (the administrators killed the zombie)."""
    spec = healthy.dlami_ubuntu2204_g5()
    machine = Machine(spec, nvml=g5_12xlarge_nvml())
    if broken:
        dev = machine.nvml["devices"][0]
        dev["processes"] = [{"pid": 48213, "used": 7_650_000_000}]
        dev["memory"] = dict(dev["memory"], used=7_720_000_000)
    return machine
