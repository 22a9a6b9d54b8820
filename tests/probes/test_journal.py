"""The systemd journal of a tree (--sysroot), read by dl-doctor's own reader, and what the checks make of it.

The journal files are real: systemd 252's writer (systemd-journal-remote) made them from the export streams in
tests/tools/make_journal_fixtures.py, in the compact layout (systemd's default since 252) and the classic one; the
lines in them are verbatim in form from the public reports cited there. Where journalctl is installed, what this
reader finds is compared with what systemd's own reader prints for the same file.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from dl_doctor.readers import journal
from dl_doctor.host import Host

FIXTURES = Path(__file__).parents[1] / "fixtures" / "journal"
BOOT = "5eed5eed5eed5eed5eed5eed5eed5eed"
MISMATCH = ("fabric manager NVIDIA GPU driver interface version 550.127.05 don't match with driver version 550.120. "
            "Please update with matching NVIDIA driver package.")


def _journal_bytes(name: str) -> bytes:
    return gzip.decompress((FIXTURES / f"{name}.journal.gz").read_bytes())


def _tree(root: Path, name: str = "fm_failed_xid79", data: bytes = None, extra: dict = None) -> Path:
    d = root / "var/log/journal/4f1c3b2a9d8e7f6a5b4c3d2e1f0a9b8c"
    d.mkdir(parents=True)
    (d / "system.journal").write_bytes(data if data is not None else _journal_bytes(name))
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/os-release").write_text('ID=ubuntu\nVERSION_ID="22.04"\n')
    for rel, content in (extra or {}).items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, dict):
            p.symlink_to(content["symlink"])
        else:
            p.write_text(content)
    return root


@pytest.mark.parametrize("name", ["fm_failed_xid79", "fm_failed_xid79.classic"])
def test_this_boots_kernel_and_unit_lines_are_read_from_both_layouts(tmp_path, name):
    read = journal.read_boot(Host(sysroot=str(_tree(tmp_path, name))))
    assert read.boot_id == BOOT and read.start_seen and not read.cut_by_cap and read.errors == []
    kernel = read.kernel_text().splitlines()
    assert kernel[0].startswith("kernel: Linux version 5.15.0-1051-aws")
    assert "kernel: NVRM: Xid (PCI:0000:10:1c): 79, pid=1911, GPU has fallen off the bus." == kernel[-1]
    assert not any("PM: suspend" in line for line in kernel)  # the earlier boot's suspend is not this boot's
    assert sum("Xid" in line for line in kernel) == 1          # nor its Xid
    unit = read.unit_lines("nvidia-fabricmanager.service")
    assert unit[1] == MISMATCH and unit[-1] == "Failed to start NVIDIA fabric manager service."
    assert journal.unit_state(unit) == "failed"
    assert not any(e.fields.get("SYSLOG_IDENTIFIER") == "sshd" for e in read.entries)  # read past, not kept
    # the kernel's and the units' entries are found through the data hash table (SipHash in the compact file,
    # Jenkins' lookup3 in the classic one): the other entries and the 2,000-byte zstd line are never read
    used = len(_journal_bytes(name).rstrip(b"\0"))
    assert read.skipped_compressed == 0 and read.bytes_read < used / 2


@pytest.mark.parametrize("name", ["fm_failed_xid79", "fm_failed_xid79.classic"])
def test_without_a_usable_hash_table_every_entry_is_read_and_filtered(tmp_path, name):
    data = bytearray(_journal_bytes(name))
    struct.pack_into("<Q", data, 112, 0)  # data_hash_table_size
    read = journal.read_boot(Host(sysroot=str(_tree(tmp_path, data=bytes(data)))))
    indexed = journal.read_boot(Host(sysroot=str(_tree(tmp_path / "i", name))))
    assert [e.fields for e in read.entries] == [e.fields for e in indexed.entries]
    assert read.skipped_compressed == 1 and read.bytes_read > indexed.bytes_read


def test_the_hashes_are_systemds():
    """SipHash-2-4 against the paper's test vector; both hashes against the hash every DATA object of the fixtures
    stores (systemd computed those)."""
    assert journal.siphash24(bytes(range(16)), bytes(range(15))) == 0xA129CA6149BE45E5
    for name, keyed in (("healthy", True), ("healthy.classic", False), ("fm_failed_xid79.classic", False)):
        data = _journal_bytes(name)
        file_id, header_size = data[24:40], struct.unpack_from("<Q", data, 88)[0]
        tail, = struct.unpack_from("<Q", data, 136)
        checked, at = 0, header_size
        compact = not name.endswith("classic")
        while at <= tail:
            kind, flags, size = struct.unpack_from("<BB6xQ", data, at)
            if kind == journal.OBJ_DATA and not flags:
                stored, = struct.unpack_from("<Q", data, at + 16)
                payload = data[at + (72 if compact else 64):at + size]
                h = journal.siphash24(file_id, payload) if keyed else journal.jenkins_hash64(payload)
                assert h == stored, payload
                checked += 1
            at += (size + 7) & ~7
        assert checked > 50


@pytest.mark.skipif(shutil.which("journalctl") is None, reason="journalctl is not installed")
@pytest.mark.parametrize("name", ["fm_failed_xid79", "healthy.classic"])
def test_the_reader_agrees_with_journalctl(tmp_path, name):
    root = _tree(tmp_path, name)
    path = next(root.glob("var/log/journal/*/system.journal"))
    out = subprocess.run(["journalctl", "--file", str(path), "-b", "-o", "json", "--output-fields",
                          "MESSAGE,_TRANSPORT,_SYSTEMD_UNIT,UNIT,SYSLOG_IDENTIFIER"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    theirs = [json.loads(line) for line in out.stdout.splitlines()]
    wanted = [e for e in theirs if e.get("_TRANSPORT") == "kernel"
              or any(str(e.get(k, "")).startswith("nvidia") for k in ("_SYSTEMD_UNIT", "UNIT", "SYSLOG_IDENTIFIER"))]
    ours = journal.read_boot(Host(sysroot=str(root))).entries
    assert [e.fields.get("MESSAGE") for e in ours] == [e.get("MESSAGE") for e in wanted]
    assert [e.realtime for e in ours] == [int(e["__REALTIME_TIMESTAMP"]) for e in wanted]


@pytest.mark.parametrize("name", ["fm_failed_xid79", "fm_failed_xid79.classic"])
def test_the_byte_budget_keeps_the_newest_entries_and_says_it_was_cut(tmp_path, name):
    root = _tree(tmp_path, name)
    full = journal.read_boot(Host(sysroot=str(root)))
    assert full.bytes_read >= 4 * journal.BLOCK and len(full.entries) > 40
    read = journal.read_boot(Host(sysroot=str(root)), max_bytes=full.bytes_read // 2)
    assert read.cut_by_cap and not read.start_seen
    assert read.bytes_read <= full.bytes_read // 2
    assert 0 < len(read.entries) < len(full.entries)
    assert [e.realtime for e in read.entries] == [e.realtime for e in full.entries][-len(read.entries):]
    few = journal.read_boot(Host(sysroot=str(root)), max_entries=5)
    assert few.cut_by_cap and len(few.entries) <= 5


def test_corrupt_truncated_and_hostile_files_cost_only_their_entries(tmp_path):
    good = _journal_bytes("fm_failed_xid79")
    cases = {
        "zeros": bytes(len(good)),
        "truncated": good[:len(good) // 3],
        "header only": good[:272],
        "not a journal": b"LPKSHHRX" + good[8:],
        "unknown incompatible flag": good[:12] + struct.pack("<I", 1 << 20) + good[16:],
        "entries counted in billions": good[:152] + struct.pack("<Q", 1 << 60) + good[160:],
        "entry array pointing at itself": None,
    }
    # the first entry array's next pointer set to its own offset: a loop the reader must not follow forever
    ea, = struct.unpack_from("<Q", good, 176)
    looped = bytearray(good)
    struct.pack_into("<Q", looped, ea + 16, ea)
    cases["entry array pointing at itself"] = bytes(looped)
    rng = random.Random(12)
    for i in range(20):  # flipped bytes all over the arena
        noisy = bytearray(good)
        for _ in range(200):
            noisy[rng.randrange(272, len(good))] = rng.randrange(256)
        cases[f"noise {i}"] = bytes(noisy)
    for name, data in cases.items():
        root = _tree(tmp_path / name.replace(" ", "_"), data=data)
        read = journal.read_boot(Host(sysroot=str(root)), seconds=5)
        assert read is not None, name
        for e in read.entries:
            assert isinstance(e.fields.get("MESSAGE", ""), str), name
    read = journal.read_boot(Host(sysroot=str(_tree(tmp_path / "z", data=cases["zeros"]))))
    assert read.entries == [] and "not a journal" in read.errors[0]


def test_a_fifo_or_a_link_out_of_the_tree_named_like_a_journal_is_not_followed(tmp_path):
    root = _tree(tmp_path / "t")
    d = next(root.glob("var/log/journal/*"))
    os.mkfifo(d / "system@0005-0001.journal")
    outside = tmp_path / "outside.journal"
    outside.write_bytes(_journal_bytes("healthy"))
    (d / "system@0005-0002.journal").symlink_to(outside)
    read = journal.read_boot(Host(sysroot=str(root)))
    assert read.boot_id == BOOT and any("Xid" in e.fields.get("MESSAGE", "") for e in read.entries)
    assert any("system@0005-0001.journal" in err for err in read.errors)


def _run(run_cli, root: Path, only: str):
    r = run_cli("run", "--sysroot", str(root), "--json", "-", "--fail-on", "never", "--only", only, timeout=300)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    return {f["id"]: f for f in report["findings"]}, report["facts"]


UNITS = {"lib/systemd/system/nvidia-fabricmanager.service": "[Unit]\n",
         "etc/systemd/system/multi-user.target.wants/nvidia-fabricmanager.service":
             {"symlink": "/lib/systemd/system/nvidia-fabricmanager.service"},
         "sys/class/infiniband/mlx5_0/device/driver": {"symlink": "../../../../bus/pci/drivers/mlx5_core"},
         "sys/bus/pci/drivers/mlx5_core/.keep": "", "sys/module/nvidia/version": "550.120\n"}


def test_a_tree_with_only_a_journal_is_judged_from_it(run_cli, tmp_path):
    """An image whose logs live only in the journal (no kern.log): the Xid of this boot fails, the earlier boot's
    suspend is not an event, the fabric manager's failure comes with its reason, nvidia-peermem's failure warns."""
    f, facts = _run(run_cli, _tree(tmp_path / "t", extra=UNITS), "DLD-GPU-008,DLD-LOG-001,DLD-LOG-002,DLD-NET-004")
    assert facts["kernel_log"]["source"] == "journal"
    assert facts["kernel_log"]["boot"]["boot_id"] == BOOT and facts["kernel_log"]["boot"]["boot_start_seen"]
    assert f["DLD-GPU-008"]["status"] == "fail" and "79" in f["DLD-GPU-008"]["message"]
    assert f["DLD-LOG-001"]["status"] == "pass", f["DLD-LOG-001"]["message"]
    assert facts["kernel_log"]["suspends"] == []
    log2 = f["DLD-LOG-002"]
    assert log2["status"] == "fail", log2["message"]
    assert "nvidia-fabricmanager is failed (the journal of the tree's last boot)" in log2["message"]
    assert "not the loaded driver's version" in log2["message"]
    fm = facts["gpu_services"]["fabric_manager"]
    assert fm["journal_state"] == "failed" and MISMATCH in fm["journal_tail"]
    net = f["DLD-NET-004"]
    assert net["status"] == "warn" and "nvidia_peermem failed to load in this boot" in net["message"]


def test_a_healthy_journal_gives_no_finding(run_cli, tmp_path):
    f, facts = _run(run_cli, _tree(tmp_path / "t", "healthy", extra={
        **UNITS, "etc/modules-load.d/nvidia-peermem.conf": "# GPUDirect RDMA\nnvidia-peermem\n"}),
        "DLD-GPU-008,DLD-LOG-001,DLD-LOG-002,DLD-NET-004")
    assert {k: v["status"] for k, v in f.items()} == {"DLD-GPU-008": "pass", "DLD-LOG-001": "pass",
                                                      "DLD-LOG-002": "pass", "DLD-NET-004": "pass"}
    assert facts["gpu_services"]["fabric_manager"]["journal_state"] == "active"
    assert "loaded at boot by /etc/modules-load.d/nvidia-peermem.conf" in f["DLD-NET-004"]["message"]
