"""EFA / NCCL plugin / limits probes on trees and verbatim files."""

import json

from dl_doctor.probes.network import parse_installed_packages, parse_limits_conf

# Layout of /opt/amazon/efa_installed_packages as the EFA installer writes it (RHEL 8 flavour).
INSTALLED = """# EFA installer version: 1.30.0
# Debug packages installed: no
# Packages installed:
efa-config-1.15-1.amzn1.noarch
efa-nv-peermem-1.1.1-1.amzn1.x86_64
efa-profile-1.5-1.amzn1.noarch
libfabric-aws-1.19.0amzn4.0-1.el8.x86_64
libnccl-ofi-1.7.4-1.el8.x86_64
openmpi40-aws-4.1.6-2.el8.x86_64
rdma-core-46.0-1.amzn1.x86_64
"""


def test_installed_packages():
    pkgs = parse_installed_packages(INSTALLED)
    assert pkgs["efa-installer"] == "1.30.0"
    assert pkgs["libfabric-aws"].startswith("1.19.0amzn4.0") and pkgs["libnccl-ofi"] == "1.7.4"


def test_limits_conf():
    text = ("# /etc/security/limits.conf\n*               soft    core            0\n"
            "* - memlock unlimited   # EFA\n@ml hard nofile 1048576\nbroken line\n")
    assert parse_limits_conf(text) == [
        {"domain": "*", "type": "soft", "item": "core", "value": "0"},
        {"domain": "*", "type": "-", "item": "memlock", "value": "unlimited"},
        {"domain": "@ml", "type": "hard", "item": "nofile", "value": "1048576"}]


def test_efa_stack_on_a_tree(run_cli, tree):
    spec = {"etc/os-release": "ID=rhel\nID_LIKE=fedora\n",
            "sys/class/dmi/id/sys_vendor": "Amazon EC2\n", "sys/class/dmi/id/product_name": "p4d.24xlarge\n",
            "opt/amazon/efa_installed_packages": INSTALLED,
            "opt/amazon/efa/lib/libfabric.so.1.19.0": "", "opt/amazon/efa/lib/libfabric.so.1": {"symlink": "libfabric.so.1.19.0"},
            "opt/amazon/ofi-nccl/lib/libnccl-net.so": "not an ELF",
            "etc/security/limits.d/efa.conf": "* soft memlock unlimited\n* hard memlock unlimited\n",
            "sys/class/net/ens32/mtu": "9001\n", "sys/class/net/lo/mtu": "65536\n",
            "proc/self/environ": b"PATH=/usr/bin\0LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib\0NCCL_SOCKET_IFNAME=eth0\0"}
    for i in range(4):
        spec[f"sys/class/infiniband/rdmap{16 + i}s0/device/driver"] = {"symlink": "../../../bus/pci/drivers/efa"}
    spec["sys/bus/pci/drivers/efa/.keep"] = ""
    r = run_cli("run", "--sysroot", str(tree(spec)), "--json", "-", "--only", "network")
    report = json.loads(r.stdout)
    net = report["facts"]["network"]
    assert net["efa_devices"] == ["rdmap16s0", "rdmap17s0", "rdmap18s0", "rdmap19s0"]
    assert net["efa_installed"]["libnccl-ofi"] == "1.7.4"
    f = {x["id"]: x for x in report["findings"]}
    # the plugin file is there but is not an ELF library: NCCL's dlopen would fail too
    assert f["DLD-NET-001"]["status"] == "fail" and "NCCL cannot find libnccl-net.so" in f["DLD-NET-001"]["message"]
    assert f["DLD-NET-002"]["status"] == "pass"  # limits.d says unlimited
    assert f["DLD-NET-003"]["status"] == "fail" and "NCCL_SOCKET_IFNAME=eth0 matches no interface" in f["DLD-NET-003"]["message"]
