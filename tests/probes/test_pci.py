"""Where a PCI function sits (dl_doctor.probes.pci), read by both the topology and the links probes."""

from dl_doctor.host import Host
from dl_doctor.probes.links import links_probe
from dl_doctor.probes.pci import class_device_address, pci_chain, pci_path
from dl_doctor.probes import ProbeContext
from dl_doctor.probes.topology import collect_topology

from test_topology import nic, pci_device
from conftest import build_tree

HYPERV = "LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/47505500-0001-0000-3130-444531303244/pci0001:00"


def test_bare_metal_and_hyper_v_paths_start_at_the_last_host_bridge(tmp_path):
    spec = {}
    pci_device(spec, "pci0000:00/0000:00:01.0/0000:01:00.0")
    # Azure ND-series: the GPU's host bridge sits below its VMBus channel, not below /sys/devices
    pci_device(spec, f"{HYPERV}/0001:00:00.0")
    nic(spec, f"{HYPERV.replace('pci0001:00', 'pci0002:00')}/0002:00:00.0", rdma="mlx5_0", net="ib0")
    build_tree(tmp_path, spec)
    host = Host(sysroot=str(tmp_path))
    assert pci_path(host, "0000:01:00.0") == ["pci0000:00", "0000:00:01.0", "0000:01:00.0"]
    assert pci_chain(host, "0000:01:00.0") == ["0000:00:01.0", "0000:01:00.0"]
    assert pci_path(host, "0001:00:00.0") == ["pci0001:00", "0001:00:00.0"]
    assert class_device_address(host, "/sys/class/infiniband/mlx5_0") == "0002:00:00.0"
    topo = collect_topology(host)
    # the Hyper-V GPU and the HCA have no host bridge in common: they talk through the CPU
    gpu = {g["address"]: g for g in topo["gpus"]}["0001:00:00.0"]
    assert gpu["pci_path"] == "pci0001:00/0001:00:00.0"
    assert gpu["closest_rdma"]["address"] == "0002:00:00.0" and gpu["closest_rdma"]["closeness"] == "numa-node"
    pci = {d["bdf"]: d for d in links_probe.func(ProbeContext(host=host))["pci"]}
    assert pci["0001:00:00.0"]["chain"] == ["0001:00:00.0"] and pci["0000:01:00.0"]["upstream"] == "0000:00:01.0"


def test_a_path_that_does_not_end_at_its_address_or_names_no_bridge_is_unknown(tmp_path):
    spec = {}
    pci_device(spec, "pci0000:00/0000:00:02.0")
    # a link that lands on another function's directory, one outside any host bridge, one through a non-PCI node
    spec["sys/bus/pci/devices/0000:00:03.0"] = {"symlink": "../../../devices/pci0000:00/0000:00:02.0"}
    spec["sys/devices/platform/0000:00:04.0/vendor"] = "0x10de\n"
    spec["sys/bus/pci/devices/0000:00:04.0"] = {"symlink": "../../../devices/platform/0000:00:04.0"}
    spec["sys/devices/pci0000:00/evil/0000:00:05.0/vendor"] = "0x10de\n"
    spec["sys/bus/pci/devices/0000:00:05.0"] = {"symlink": "../../../devices/pci0000:00/evil/0000:00:05.0"}
    spec["sys/class/net/veth0/device"] = {"symlink": "../../../virtual/net/veth0"}
    build_tree(tmp_path, spec)
    host = Host(sysroot=str(tmp_path))
    assert pci_path(host, "0000:00:02.0") == ["pci0000:00", "0000:00:02.0"]
    for address in ("0000:00:03.0", "0000:00:04.0", "0000:00:05.0", "0000:00:06.0", "../../etc"):
        assert pci_path(host, address) is None and pci_chain(host, address) is None
    assert class_device_address(host, "/sys/class/net/veth0") is None
