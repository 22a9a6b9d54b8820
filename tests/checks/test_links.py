"""RDMA ports, PCIe links, AER and ACS (the `links` probe, DLD-NET-005..010) on sysfs trees in the kernel's own
formats (drivers/infiniband/core/sysfs.c: ``4: ACTIVE``, ``5: LinkUp``, ``100 Gb/sec (4X EDR)``;
drivers/pci/pci-sysfs.c: ``16.0 GT/s PCIe``; drivers/pci/pcie/aer.c: ``NAME COUNT`` lines and ``TOTAL_ERR_*``)."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

import pytest

from dl_doctor.probes.links import acs_control, parse_aer, parse_rate, parse_speed, parse_state

AER_FATAL = ["Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt", "RxOF", "MalfTLP",
             "ECRC", "UnsupReq", "ACSViol", "UncorrIntErr", "BlockedTLP", "AtomicOpBlocked", "TLPBlockedErr",
             "PoisonTLPBlocked"]
AER_COR = ["RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr", "CorrIntErr", "HeaderOF"]
ACS_ON = 0x001D  # SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+ (what lspci shows with ACS enabled)


def aer_text(names: List[str], total_name: str, counts: Optional[Dict[str, int]] = None) -> str:
    counts = counts or {}
    lines = [f"{n} {counts.get(n, 0)}" for n in names]
    lines.append(f"{total_name} {sum(counts.values())}")
    return "\n".join(lines) + "\n"


def config_space(acs: Optional[int], size: int = 4096) -> bytes:
    """A bridge's configuration space with an ACS extended capability at 0x100 (after an AER one at 0x100 when
    ``acs`` is given: the list is walked)."""
    data = bytearray(size)
    if size >= 0x200 and acs is not None:
        data[0x100:0x104] = (0x0001 | (1 << 16) | (0x150 << 20)).to_bytes(4, "little")  # AER, next 0x150
        data[0x150:0x154] = (0x000D | (1 << 16) | (0 << 20)).to_bytes(4, "little")       # ACS, last
        data[0x156:0x158] = acs.to_bytes(2, "little")
    return bytes(data)


def pci_tree(groups: int = 2, gpus_per: int = 2, nics_per: int = 1, *, nic_kind: str = "efa",
             ports: Optional[Dict[str, Dict[str, str]]] = None, device: Optional[Dict[str, Dict[str, Any]]] = None,
             acs: Optional[int] = 0, uptime: str = "86400.00 170000.00\n") -> Dict[str, Any]:
    """A p5/HGX-like tree: per group a root port, a PCIe switch (upstream + one downstream port per device), GPUs
    and RDMA NICs below it. ``ports``/``device`` override files by device name / PCI address."""
    spec: Dict[str, Any] = {"proc/uptime": uptime, "sys/bus/pci/drivers/efa/.keep": "",
                            "sys/bus/pci/drivers/mlx5_core/.keep": ""}
    n_nic = 0
    for g in range(groups):
        bus = 0x10 * (g + 1)
        root = f"0000:{bus:02x}:01.0"
        up = f"0000:{bus + 1:02x}:00.0"
        base = f"sys/devices/pci0000:{bus:02x}/{root}/{up}"
        for bridge, path in ((root, f"sys/devices/pci0000:{bus:02x}/{root}"), (up, base)):
            spec[f"{path}/max_link_speed"] = "32.0 GT/s PCIe\n"
            spec[f"{path}/max_link_width"] = "16\n"
            spec[f"sys/bus/pci/devices/{bridge}"] = {"symlink": f"../../../{path[4:]}"}
        kinds = ["gpu"] * gpus_per + ["nic"] * nics_per
        for i, kind in enumerate(kinds):
            down = f"0000:{bus + 2:02x}:{i:02x}.0"
            dev = f"0000:{bus + 3 + i:02x}:00.0"
            dpath = f"{base}/{down}"
            spec[f"{dpath}/max_link_speed"] = "32.0 GT/s PCIe\n"
            spec[f"{dpath}/max_link_width"] = "16\n"
            spec[f"{dpath}/config"] = config_space(acs)
            spec[f"sys/bus/pci/devices/{down}"] = {"symlink": f"../../../{dpath[4:]}"}
            path = f"{dpath}/{dev}"
            files = {"vendor": "0x10de\n" if kind == "gpu" else ("0x1d0f\n" if nic_kind == "efa" else "0x15b3\n"),
                     "device": "0x2330\n" if kind == "gpu" else ("0xefa1\n" if nic_kind == "efa" else "0x101b\n"),
                     "class": "0x030200\n" if kind == "gpu" else ("0x020000\n" if nic_kind != "ib" else "0x020700\n"),
                     "current_link_speed": "32.0 GT/s PCIe\n", "max_link_speed": "32.0 GT/s PCIe\n",
                     "current_link_width": "16\n", "max_link_width": "16\n",
                     "aer_dev_fatal": aer_text(AER_FATAL, "TOTAL_ERR_FATAL"),
                     "aer_dev_nonfatal": aer_text(AER_FATAL, "TOTAL_ERR_NONFATAL"),
                     "aer_dev_correctable": aer_text(AER_COR, "TOTAL_ERR_COR")}
            files.update((device or {}).get(dev, {}))
            for name, content in files.items():
                spec[f"{path}/{name}"] = content
            spec[f"sys/bus/pci/devices/{dev}"] = {"symlink": f"../../../{path[4:]}"}
            if kind == "nic":
                name = (f"rdmap{n_nic}s0" if nic_kind == "efa" else f"mlx5_{n_nic}")
                n_nic += 1
                driver = "efa" if nic_kind == "efa" else "mlx5_core"
                spec[f"{path}/driver"] = {"symlink": f"../../../../../../bus/pci/drivers/{driver}"}
                ib = f"{path}/infiniband/{name}"
                spec[f"sys/class/infiniband/{name}"] = {"symlink": f"../../{ib[4:]}"}
                spec[f"{ib}/device"] = {"symlink": "../../../" + dev}
                port = {"state": "4: ACTIVE\n", "phys_state": "5: LinkUp\n",
                        "rate": "100 Gb/sec (4X EDR)\n" if nic_kind == "efa" else "400 Gb/sec (4X NDR)\n",
                        "link_layer": {"efa": "Unspecified\n", "ib": "InfiniBand\n", "roce": "Ethernet\n"}[nic_kind]}
                if nic_kind != "efa":
                    for counter in ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors",
                                    "port_xmit_discards", "port_rcv_data", "port_xmit_data"):
                        port[f"counters/{counter}"] = "0\n"
                port.update((ports or {}).get(name, {}))
                for fname, content in port.items():
                    spec[f"{ib}/ports/1/{fname}"] = content
    return spec


@pytest.fixture
def links_run(run_cli, tree):
    made = []

    def go(spec: Dict[str, Any]) -> Dict[str, Any]:
        made.append(1)
        r = run_cli("run", "--sysroot", str(tree(spec, f"root{len(made)}")), "--json", "-", "--only", "rdma,pcie")
        assert r.returncode in (0, 1), r.stderr
        report = json.loads(r.stdout)
        return {"facts": report["facts"].get("links"), "findings": {f["id"]: f for f in report["findings"]}}
    return go


def status(result: Dict[str, Any]) -> Dict[str, str]:
    ids = {f"DLD-NET-{n:03d}" for n in range(5, 11)}
    return {k: v["status"] for k, v in result["findings"].items() if k in ids}


def test_the_kernels_formats_parse():
    assert parse_state("4: ACTIVE\n") == (4, "ACTIVE") and parse_state("5: LinkUp") == (5, "LinkUp")
    assert parse_state("garbage") == (None, None) and parse_state(None) == (None, None)
    assert parse_rate("100 Gb/sec (4X EDR)\n") == (100.0, "4X EDR")
    assert parse_rate("53.125 Gb/sec (1X HDR)") == (53.125, "1X HDR") and parse_rate("Unknown") == (None, None)
    assert parse_speed("16.0 GT/s PCIe\n") == 16.0 and parse_speed("2.5 GT/s") == 2.5
    assert parse_speed("Unknown") is None and parse_speed("") is None
    aer = parse_aer(aer_text(AER_COR, "TOTAL_ERR_COR", {"RxErr": 3, "BadTLP": 2}))
    assert aer == {"total": 5, "nonzero": {"RxErr": 3, "BadTLP": 2}}
    assert parse_aer(None) is None and parse_aer("not aer\n") is None
    assert acs_control(config_space(ACS_ON)) == ACS_ON and acs_control(config_space(0)) == 0
    assert acs_control(config_space(ACS_ON)[:64]) is None  # what an unprivileged read returns
    assert acs_control(config_space(None)) is None  # no extended capability


def test_a_healthy_p5_like_tree_is_quiet(links_run):
    res = links_run(pci_tree())
    links = res["facts"]
    assert len(links["rdma_ports"]) == 2 and {p["state"] for p in links["rdma_ports"]} == {"ACTIVE"}
    assert links["rdma_ports"][0]["rate_gbps"] == 100.0 and links["rdma_ports"][0]["rate"] == "4X EDR"
    gpu = next(d for d in links["pci"] if d["kind"] == "gpu")
    assert gpu["speed_gts"] == 32.0 and gpu["width"] == 16 and gpu["upstream_max_width"] == 16
    assert gpu["aer"]["fatal"]["total"] == 0 and len(gpu["chain"]) == 4
    assert links["acs_known"] is True and links["acs"] and not any(b["redirect"] for b in links["acs"])
    assert status(res) == {"DLD-NET-005": "pass", "DLD-NET-006": "pass", "DLD-NET-007": "skip",
                           "DLD-NET-008": "pass", "DLD-NET-009": "pass", "DLD-NET-010": "pass"}


def test_an_efa_port_down_fails_and_names_it(links_run):
    res = links_run(pci_tree(ports={"rdmap1s0": {"state": "1: DOWN\n", "phys_state": "3: Disabled\n"}}))
    f = res["findings"]["DLD-NET-005"]
    assert f["status"] == "fail" and "rdmap1s0 port 1 (EFA): DOWN, Disabled" in f["message"]
    assert f["remediation"] == {"action": "replace-hardware", "drain": True}
    assert any("ibstat" in c for c in f["fix"]["commands"])


def test_a_spare_roce_port_down_is_not_a_fault_unless_nccl_names_it(links_run, tmp_path):
    spec = pci_tree(nic_kind="roce", ports={"mlx5_1": {"state": "1: DOWN\n", "phys_state": "2: Polling\n"}})
    res = links_run(spec)
    assert res["findings"]["DLD-NET-005"]["status"] == "pass"
    assert "mlx5_1 port 1" in res["findings"]["DLD-NET-005"]["message"]
    spec["proc/self/environ"] = b"PATH=/usr/bin\0NCCL_IB_HCA=mlx5_0,mlx5_1\0"
    assert links_run(spec)["findings"]["DLD-NET-005"]["status"] == "fail"


def test_an_infiniband_port_down_among_up_peers_fails(links_run):
    res = links_run(pci_tree(nic_kind="ib", ports={"mlx5_0": {"state": "1: DOWN\n", "phys_state": "2: Polling\n"}}))
    assert res["findings"]["DLD-NET-005"]["status"] == "fail"


def test_a_port_slower_than_its_peers_warns(links_run):
    res = links_run(pci_tree(groups=4, nic_kind="ib", ports={"mlx5_2": {"rate": "200 Gb/sec (4X HDR)\n"}}))
    f = res["findings"]["DLD-NET-006"]
    assert f["status"] == "warn" and "mlx5_2 port 1 at 200 Gb/s (4X HDR)" in f["message"] and "at 400 Gb/s" in f["message"]
    assert status(links_run(pci_tree(groups=4, nic_kind="ib")))["DLD-NET-006"] == "pass"


def test_link_errors_above_the_matrix_threshold_warn(links_run):
    res = links_run(pci_tree(nic_kind="ib", ports={"mlx5_0": {"counters/symbol_error": "5123\n",
                                                               "counters/port_xmit_discards": "40\n"}}))
    f = res["findings"]["DLD-NET-007"]
    assert f["status"] == "warn" and "mlx5_0 port 1: symbol_error 5123 (above 10)" in f["message"]
    assert "port_xmit_discards" not in f["message"]  # congestion discards, no threshold: not a link error
    twin = links_run(pci_tree(nic_kind="ib", ports={"mlx5_0": {"counters/symbol_error": "3\n"}}))
    assert twin["findings"]["DLD-NET-007"]["status"] == "pass"


def test_a_nic_trained_at_x8_of_x16_warns_and_an_idle_gpus_lower_speed_does_not(links_run):
    nic, gpu = "0000:15:00.0", "0000:13:00.0"
    res = links_run(pci_tree(device={nic: {"current_link_width": "8\n"},
                                     gpu: {"current_link_speed": "2.5 GT/s PCIe\n"}}))
    f = res["findings"]["DLD-NET-008"]
    assert f["status"] == "warn" and f"RDMA NIC {nic}: x8 of x16" in f["message"] and gpu not in f["message"]
    assert any(nic in c for c in f["fix"]["commands"])
    # a Gen5 NIC in a Gen4 slot trained at what the slot does: not degraded
    spec = pci_tree(device={nic: {"current_link_speed": "16.0 GT/s PCIe\n"}})
    spec = {k: ("16.0 GT/s PCIe\n" if k.endswith("0000:12:02.0/max_link_speed") else v) for k, v in spec.items()}
    assert links_run(spec)["findings"]["DLD-NET-008"]["status"] == "pass"


def test_aer_fatal_fails_nonfatal_warns_correctable_only_above_the_rate(links_run):
    gpu = "0000:13:00.0"
    fatal = links_run(pci_tree(device={gpu: {"aer_dev_fatal": aer_text(AER_FATAL, "TOTAL_ERR_FATAL",
                                                                           {"CmpltTO": 1})}}))
    f = fatal["findings"]["DLD-NET-009"]
    assert f["status"] == "fail" and f"GPU {gpu}: 1 fatal (CmpltTO)" in f["message"]
    assert f["remediation"]["drain"] is True
    nonfatal = links_run(pci_tree(device={gpu: {"aer_dev_nonfatal": aer_text(AER_FATAL, "TOTAL_ERR_NONFATAL",
                                                                                {"UnsupReq": 2})}}))
    assert nonfatal["findings"]["DLD-NET-009"]["status"] == "warn"
    # 500 correctable errors in a day: a healthy link's noise, below 8 a minute
    some = links_run(pci_tree(device={gpu: {"aer_dev_correctable": aer_text(AER_COR, "TOTAL_ERR_COR",
                                                                             {"RxErr": 500})}}))
    assert some["findings"]["DLD-NET-009"]["status"] == "pass"
    many = links_run(pci_tree(uptime="600.0 1000.0\n",
                              device={gpu: {"aer_dev_correctable": aer_text(AER_COR, "TOTAL_ERR_COR",
                                                                             {"BadTLP": 9000})}}))
    f = many["findings"]["DLD-NET-009"]
    assert f["status"] == "warn" and "9000 correctable in 10 min (900.0/min" in f["message"]


def test_acs_redirect_between_peers_warns_and_unreadable_config_is_unknown(links_run):
    res = links_run(pci_tree(acs=ACS_ON))
    f = res["findings"]["DLD-NET-010"]
    assert f["status"] == "warn" and "0000:12:00.0 (above 0000:13:00.0)" in f["message"]
    assert any("setpci -s 0000:12:00.0 ECAP_ACS+0x6.w=0000" in c for c in f["fix"]["commands"])
    spec = {k: (v[:64] if k.endswith("/config") else v) for k, v in pci_tree(acs=ACS_ON).items()}
    assert links_run(spec)["findings"]["DLD-NET-010"]["status"] == "skip"  # not root: unknown, not a problem


def test_peers_under_different_root_ports_need_no_acs_check(links_run):
    res = links_run(pci_tree(groups=2, gpus_per=1, nics_per=0, acs=ACS_ON))
    assert res["facts"]["acs"] == [] and res["findings"]["DLD-NET-010"]["status"] == "skip"


def test_a_host_without_rdma_or_links_skips(links_run):
    res = links_run({"proc/uptime": "5.0 5.0\n"})
    assert res["facts"]["rdma_ports"] == [] and res["facts"]["pci"] == []
    assert set(status(res).values()) == {"skip"}


def test_hostile_sysfs_costs_only_its_own_facts(links_run):
    nic = "0000:15:00.0"
    res = links_run(pci_tree(
        ports={"rdmap0s0": {"state": "\x1b[31m4: ACTIVE" + "A" * 5000, "rate": "9" * 4000 + " Gb/sec",
                            "phys_state": "-1: LinkUp\n"}},
        device={nic: {"current_link_width": "1" * 100, "aer_dev_fatal": "TOTAL_ERR_FATAL " + "9" * 50 + "\n" * 10000,
                      "current_link_speed": "NaN GT/s"}}))
    port = next(p for p in res["facts"]["rdma_ports"] if p["device"] == "rdmap0s0")
    assert port["rate_gbps"] is None and port["phys_state"] is None and port["state"] is None
    dev = next(d for d in res["facts"]["pci"] if d["bdf"] == nic)
    assert dev["width"] is None and dev["speed_gts"] is None and dev["aer"]["fatal"] is None
    assert res["findings"]["DLD-NET-005"]["status"] == "pass"  # a port whose state cannot be read is not judged


def test_prometheus_metrics_for_ports_and_links(links_run):
    from prometheus_client.parser import text_string_to_metric_families

    from dl_doctor.reports import prometheus

    facts = links_run(pci_tree(nic_kind="ib", ports={"mlx5_1": {"state": "1: DOWN\n", "counters/symbol_error": "77\n"}},
                               device={"0000:13:00.0": {"aer_dev_correctable": aer_text(AER_COR, "TOTAL_ERR_COR",
                                                                                         {"RxErr": 4})}}))["facts"]
    report = {"tool": {}, "host": {}, "run": {}, "summary": {}, "findings": [], "facts": {"links": facts}}
    families = {f.name: f for f in text_string_to_metric_families(prometheus.render(report))}
    up = {s.labels["device"]: s.value for s in families["dl_doctor_rdma_port_up"].samples}
    assert up == {"mlx5_0": 1.0, "mlx5_1": 0.0}
    errors = {(s.labels["device"], s.labels["counter"]): s.value for s in families["dl_doctor_rdma_port_errors"].samples}
    assert errors[("mlx5_1", "symbol_error")] == 77.0 and errors[("mlx5_0", "symbol_error")] == 0.0
    aer = {(s.labels["bdf"], s.labels["severity"]): s.value for s in families["dl_doctor_pcie_aer_errors"].samples}
    assert aer[("0000:13:00.0", "correctable")] == 4.0 and aer[("0000:13:00.0", "fatal")] == 0.0
    widths = {s.labels["bdf"]: s.value for s in families["dl_doctor_pcie_link_width"].samples}
    assert widths["0000:15:00.0"] == 16.0 and len(widths) == 6
    # a report without links facts adds no family
    bare = {f.name for f in text_string_to_metric_families(prometheus.render({**report, "facts": {}}))}
    assert not any(n.startswith(("dl_doctor_rdma", "dl_doctor_pcie")) for n in bare)
