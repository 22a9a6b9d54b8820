"""Boot-aware kernel-log reading and DLD-LOG-001 on sysroot trees, through the installed CLI.

Sample lines are verbatim in form from public reports and the distributions' own syslog format:
the module load line (NVIDIA's 'NVRM: loading NVIDIA UNIX x86_64 Kernel Module'), the OOM killer
(https://www.kernel.org/doc/gorman/html/understand/understand016.html; 'Out of memory: Killed process N (python)'),
systemd-sleep's 'PM: suspend entry (deep)', and the Xid line of shared/reference/failure_cases.md
(xid79-gpu-fallen-off-bus, https://github.com/akash-network/support/issues/209).
"""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

BOOT = ["Nov 30 08:00:00 gpu1 kernel: Linux version 5.15.0-1051-aws (buildd@lcy02-amd64-045) (gcc 11.4.0) #56-Ubuntu",
        "Nov 30 08:00:00 gpu1 kernel: Command line: BOOT_IMAGE=/boot/vmlinuz-5.15.0-1051-aws root=LABEL=cloudimg-rootfs ro"]
LOAD = "Nov 30 08:00:09 gpu1 kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.161.07  Sat Feb 17 22:55:48 UTC 2024"
SUSPEND = ["Nov 30 09:12:00 gpu1 kernel: PM: suspend entry (deep)", "Nov 30 09:40:00 gpu1 kernel: PM: suspend exit"]
OOM = "Nov 30 10:01:02 gpu1 kernel: Out of memory: Killed process 48211 (python) total-vm:182737492kB, anon-rss:61542256kB"
XID13 = ("Nov 30 10:05:00 gpu1 kernel: NVRM: Xid (PCI:0000:10:1c): 13, pid=4242, name=python, Graphics Exception: "
         "ESR 0x405840=0x0")


def _tree(root: Path, files: dict) -> Path:
    (root / "etc").mkdir(parents=True, exist_ok=True)
    (root / "etc/os-release").write_text('ID=ubuntu\nVERSION_ID="22.04"\n')
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        elif isinstance(content, dict) and "symlink" in content:
            p.symlink_to(content["symlink"])
        else:
            p.write_text(content)
    return root


def _run(run_cli, root: Path):
    r = run_cli("run", "--sysroot", str(root), "--json", "-", "--fail-on", "never", "--only", "DLD-LOG-001,DLD-GPU-008",
                timeout=300)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    return {f["id"]: f for f in report["findings"]}, report["facts"]["kernel_log"]


def _log(*lines: str) -> str:
    return "\n".join(lines) + "\n"


def test_a_suspend_in_a_previous_boot_is_not_an_event(run_cli, tmp_path):
    old = [l.replace("Nov 30", "Nov 22") for l in BOOT + [LOAD] + SUSPEND]
    root = _tree(tmp_path / "t", {"var/log/kern.log": _log(*old, *BOOT, LOAD)})
    f, facts = _run(run_cli, root)
    assert f["DLD-LOG-001"]["status"] == "pass", f["DLD-LOG-001"]["message"]
    assert facts["boot"]["boot_start_seen"] is True and facts["module_loaded"] is True
    assert facts["suspends"] == []


def test_a_suspend_after_the_module_load_without_the_driver_units_warns(run_cli, tmp_path):
    root = _tree(tmp_path / "t", {"var/log/kern.log": _log(*BOOT, LOAD, *SUSPEND)})
    f, _ = _run(run_cli, root)
    assert f["DLD-LOG-001"]["status"] == "warn"
    assert "suspended after the NVIDIA module was loaded" in f["DLD-LOG-001"]["message"]
    assert any("nvidia-suspend.service" in c for c in f["DLD-LOG-001"]["fix"]["commands"])
    units = {"lib/systemd/system/nvidia-suspend.service": "[Unit]\n", "lib/systemd/system/nvidia-resume.service": "[Unit]\n",
             "etc/systemd/system/systemd-suspend.service.wants/nvidia-suspend.service":
                 {"symlink": "/lib/systemd/system/nvidia-suspend.service"},
             "etc/systemd/system/systemd-suspend.service.wants/nvidia-resume.service":
                 {"symlink": "/lib/systemd/system/nvidia-resume.service"}}
    root = _tree(tmp_path / "u", {"var/log/kern.log": _log(*BOOT, LOAD, *SUSPEND), **units})
    f, _ = _run(run_cli, root)
    assert f["DLD-LOG-001"]["status"] == "pass", f["DLD-LOG-001"]["message"]


def test_the_oom_killer_taking_python_warns_with_its_cause(run_cli, tmp_path):
    root = _tree(tmp_path / "t", {"var/log/kern.log": _log(*BOOT, LOAD, OOM)})
    f, facts = _run(run_cli, root)
    assert f["DLD-LOG-001"]["status"] == "warn"
    assert "Killed process 48211 (python)" in f["DLD-LOG-001"]["message"]
    assert any("Killed process 48211" in c["line"] and c["after_module_load"] for c in facts["candidates"])
    assert f["DLD-LOG-001"]["evidence"]["events"][0]["cause"].startswith("The kernel's OOM killer")


def test_an_application_xid_is_left_to_the_xid_check(run_cli, tmp_path):
    root = _tree(tmp_path / "t", {"var/log/kern.log": _log(*BOOT, LOAD, XID13)})
    f, facts = _run(run_cli, root)
    assert f["DLD-LOG-001"]["status"] == "pass"
    assert facts["xids"][0]["code"] == 13
    # an application's own fault (Xid 13: a bad kernel launch) is not the machine's: no failing finding
    assert f["DLD-GPU-008"]["status"] in ("pass", "warn"), f["DLD-GPU-008"]["message"]


def test_rotated_and_compressed_logs_are_read_back_to_the_boot_start_and_no_further(run_cli, tmp_path):
    older_boot = [l.replace("Nov 30", "Nov 20") for l in BOOT + [LOAD, OOM]]
    root = _tree(tmp_path / "t", {
        "var/log/kern.log.2.gz": gzip.compress(_log(*older_boot).encode()),
        "var/log/kern.log.1": _log(*BOOT, LOAD),
        "var/log/kern.log": _log("Nov 30 09:00:00 gpu1 kernel: eth0: link up", *SUSPEND),
    })
    f, facts = _run(run_cli, root)
    assert facts["boot"]["files"] == ["/var/log/kern.log", "/var/log/kern.log.1"]
    assert facts["boot"]["boot_start_seen"] is True and facts["boot"]["cut_by_cap"] is False
    assert not [c for c in facts["candidates"] if "Out of memory" in c["line"]]  # the Nov 20 boot OOM
    assert f["DLD-LOG-001"]["status"] == "warn"  # the suspend after this boot's module load


def test_a_log_larger_than_the_cap_is_read_from_its_end_and_says_so(run_cli, tmp_path):
    """A 24 MiB kern.log whose boot started at its beginning: the 16 MiB cap reads the end, judges it, and says the
    boot's start was cut off. (A 1 GiB log measured by hand: 0.30 s for the probe, 16 MiB read.)"""
    root = _tree(tmp_path / "t", {})
    path = root / "var/log/kern.log"
    path.parent.mkdir(parents=True)
    filler = ("Nov 30 08:30:00 gpu1 kernel: eth0: rx packet " + "x" * 60 + "\n").encode()
    with open(path, "wb") as fh:
        fh.write(_log(*BOOT, LOAD).encode())
        fh.write(filler * ((24 << 20) // len(filler)))
        fh.write(_log(OOM).encode())
    start = time.perf_counter()
    f, facts = _run(run_cli, root)
    elapsed = time.perf_counter() - start
    assert facts["boot"]["cut_by_cap"] is True and facts["boot"]["boot_start_seen"] is False
    assert facts["boot"]["bytes_read"] == 16 << 20
    assert "cut off the start of this boot" in f["DLD-LOG-001"]["message"]
    assert f["DLD-LOG-001"]["status"] == "warn"  # the OOM at the end is judged
    assert elapsed < 120  # bounded; about a second here


def test_a_failed_unit_brings_its_journal_tail_and_a_healthy_one_costs_no_journal_call():
    """gpu_services' unit reading, with a stand-in for systemd (systemctl, journalctl) behind the Host interface."""
    from dl_doctor.probes.gpu_services import _unit

    calls = []

    class FakeHost:
        live = True

        def exists(self, path):
            return path == "/usr/lib/systemd/system/nvidia-fabricmanager.service"

        def is_dir(self, path):  # systemd runs here
            return path == "/run/systemd/system"

        def lexists(self, path):
            return True

        def glob(self, pattern):
            return ["/etc/systemd/system/multi-user.target.wants"]

        def listdir(self, path):
            return ["nvidia-fabricmanager.service"]

        def cached(self, key, compute):
            return compute()

        def which(self, name):
            return f"/usr/bin/{name}"

        def run(self, argv, timeout=None):
            calls.append(argv[0])

            class R:
                stdout = ("failed\n" if argv[0] == "systemctl" else
                          "Starting NVIDIA fabric manager service...\nnvidia-fabricmanager.service: Failed with "
                          "result 'exit-code'.\n")
            return R()

    class Ctx:
        host = FakeHost()

    unit = _unit(Ctx, "nvidia-fabricmanager.service")
    assert unit["active"] == "failed" and unit["enabled"] is True
    assert unit["journal_tail"][-1] == "nvidia-fabricmanager.service: Failed with result 'exit-code'."
    assert calls == ["systemctl", "journalctl"]
    calls.clear()
    FakeHost.run = lambda self, argv, timeout=None: (calls.append(argv[0]), type("R", (), {"stdout": "active\n"}))[1]
    unit = _unit(Ctx, "nvidia-fabricmanager.service")
    assert unit["active"] == "active" and "journal_tail" not in unit and calls == ["systemctl"]


def test_where_dmesg_is_restricted_the_kernel_journal_is_read(monkeypatch):
    """kernel.dmesg_restrict keeps /dev/kmsg from a user that the journal lets read kernel messages (adm,
    systemd-journal): the probe reads 'journalctl -k -b' instead and does not report the log as denied."""
    from dl_doctor.probes import kernel_log

    def denied(host, **kw):
        raise PermissionError("dmesg_restrict")

    monkeypatch.setattr(kernel_log, "read_kmsg", denied)
    journal = "\n".join(BOOT + [LOAD, OOM]) + "\n"

    class FakeHost:
        live = True
        kernel_live = True
        sysroot = None

        def which(self, name):
            return "/usr/bin/journalctl"

        def run(self, argv, timeout=None):
            assert argv[:4] == ["journalctl", "-k", "-b", "--no-pager"]
            return type("R", (), {"stdout": journal, "returncode": 0})()

    notes = []

    class Ctx:
        host = FakeHost()
        options = {}

        def denied(self, what):
            notes.append(what)

    out = kernel_log.kernel_log_probe.func(Ctx())
    assert out["source"] == "journalctl -k -b" and out["boot"]["boot_start_seen"] is True
    assert any("Killed process 48211" in c["line"] and c["after_module_load"] for c in out["candidates"])
    assert notes == []


def test_a_fifo_or_a_broken_gz_planted_among_the_logs_costs_only_itself(run_cli, tmp_path):
    import os

    root = _tree(tmp_path / "t", {"var/log/kern.log.1": _log(*BOOT, LOAD, OOM),
                                  "var/log/kern.log.2.gz": b"\x1f\x8bnot gzip"})
    os.mkfifo(root / "var/log/kern.log")  # nobody writes: a reader that opened it would hang
    f, facts = _run(run_cli, root)
    assert facts["boot"]["files"] == ["/var/log/kern.log.1"] and facts["boot"]["boot_start_seen"] is True
    assert f["DLD-LOG-001"]["status"] == "warn"
