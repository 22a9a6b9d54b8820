"""Writes the systemd journal files the tests read (tests/fixtures/journal/*.journal.gz) with systemd's own writer.

    python tests/tools/make_journal_fixtures.py [/path/to/systemd-journal-remote]

systemd-journal-remote (Debian package systemd-journal-remote, which needs libmicrohttpd12) turns the Journal
Export Format (https://systemd.io/JOURNAL_EXPORT_FORMAT/) into journal files, so the fixtures are real journal files
in the format of that systemd (252 here): compact with keyed hashes by default, the classic layout of systemd before
246 with SYSTEMD_JOURNAL_COMPACT=0 SYSTEMD_JOURNAL_KEYED_HASH=0.
The files are stored gzip-compressed (the writer pre-allocates 8 MiB of zeroes).

The lines are verbatim in form from public reports:
- the fabric manager refusing a driver of another version, with systemd's lines about the unit:
  https://github.com/akash-network/website/pull/632, https://github.com/NVIDIA/gpu-operator/issues/544
- the Xid 79 line of shared/reference/failure_cases.md (https://github.com/akash-network/support/issues/209)
- nvidia_peermem without the InfiniBand peer-memory API: https://github.com/NVIDIA/gpu-operator/issues/2868
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "journal"
OLD_BOOT = "0b0e0b0e0b0e0b0e0b0e0b0e0b0e0b0e"
BOOT = "5eed5eed5eed5eed5eed5eed5eed5eed"
T0 = 1_764_489_600_000_000  # 2025-11-30 08:00:00 UTC, in microseconds


def kernel(boot, t, mono, message):
    return {"__REALTIME_TIMESTAMP": t, "__MONOTONIC_TIMESTAMP": mono, "_BOOT_ID": boot, "_TRANSPORT": "kernel",
            "SYSLOG_IDENTIFIER": "kernel", "PRIORITY": "6", "_HOSTNAME": "gpu1", "MESSAGE": message}


def service(boot, t, mono, unit, ident, message, transport="stdout"):
    return {"__REALTIME_TIMESTAMP": t, "__MONOTONIC_TIMESTAMP": mono, "_BOOT_ID": boot, "_TRANSPORT": transport,
            "_SYSTEMD_UNIT": unit, "SYSLOG_IDENTIFIER": ident, "PRIORITY": "6", "_HOSTNAME": "gpu1", "MESSAGE": message}


def systemd(boot, t, mono, unit, message):
    return {"__REALTIME_TIMESTAMP": t, "__MONOTONIC_TIMESTAMP": mono, "_BOOT_ID": boot, "_TRANSPORT": "journal",
            "_SYSTEMD_UNIT": "init.scope", "UNIT": unit, "SYSLOG_IDENTIFIER": "systemd", "PRIORITY": "6",
            "_HOSTNAME": "gpu1", "MESSAGE": message}


def boot(boot_id, t, driver="535.161.07"):
    return [kernel(boot_id, t, 1000, "Linux version 5.15.0-1051-aws (buildd@lcy02-amd64-045) (gcc 11.4.0) #56-Ubuntu"),
            kernel(boot_id, t + 1000, 2000, "Command line: BOOT_IMAGE=/boot/vmlinuz-5.15.0-1051-aws ro"),
            kernel(boot_id, t + 9_000_000, 9_000_000,
                   f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {driver}  Sat Feb 17 22:55:48 UTC 2024")]


def noise(boot_id, t, mono, n):
    """Entries of other services, as a real journal holds (they must be read past, not kept)."""
    out = []
    for i in range(n):
        out.append(service(boot_id, t + i * 1000, mono + i * 1000, "ssh.service", "sshd",
                           f"Accepted publickey for ubuntu from 10.0.0.{i % 250} port {40000 + i} ssh2: ED25519 "
                           f"SHA256:x{i}", transport="syslog"))
        if i % 100 == 99:  # the kernel's own chatter, kept with the kernel's lines
            out.append(kernel(boot_id, t + i * 1000 + 1, mono + i * 1000 + 1, f"ena 0000:00:05.0 eth0: link up {i}"))
    return out


FM = "nvidia-fabricmanager.service"
SCENARIOS = {
    # an earlier boot with a suspend and an Xid; this boot: the fabric manager refused the driver, then an Xid 79
    "fm_failed_xid79": [
        *boot(OLD_BOOT, T0 - 86_400_000_000),
        kernel(OLD_BOOT, T0 - 86_000_000_000, 400_000_000, "PM: suspend entry (deep)"),
        kernel(OLD_BOOT, T0 - 85_000_000_000, 401_000_000,
               "NVRM: Xid (PCI:0000:10:1c): 79, pid=1911, GPU has fallen off the bus."),
        *boot(BOOT, T0, driver="550.120"),
        *noise(BOOT, T0 + 1_000_000, 10_000_000, 4000),
        systemd(BOOT, T0 + 20_000_000, 20_000_000, FM, "Starting NVIDIA fabric manager service..."),
        service(BOOT, T0 + 20_100_000, 20_100_000, FM, "nv-fabricmanager",
                "fabric manager NVIDIA GPU driver interface version 550.127.05 don't match with driver version "
                "550.120. Please update with matching NVIDIA driver package."),
        systemd(BOOT, T0 + 20_200_000, 20_200_000, FM,
                "nvidia-fabricmanager.service: Control process exited, code=exited, status=1/FAILURE"),
        systemd(BOOT, T0 + 20_300_000, 20_300_000, FM, "nvidia-fabricmanager.service: Failed with result 'exit-code'."),
        systemd(BOOT, T0 + 20_400_000, 20_400_000, FM, "Failed to start NVIDIA fabric manager service."),
        kernel(BOOT, T0 + 30_000_000, 30_000_000,
               "nvidia_peermem: Unknown symbol ib_register_peer_memory_client (err -22)"),
        # a payload over 512 bytes: systemd stores it compressed (zstd), which this reader skips and counts
        service(BOOT, T0 + 40_000_000, 40_000_000, "cron.service", "CRON", "x" * 2000),
        kernel(BOOT, T0 + 50_000_000, 50_000_000,
               "NVRM: Xid (PCI:0000:10:1c): 79, pid=1911, GPU has fallen off the bus."),
    ],
    # the recorded p5 (driver 550.54.15) after the fabric manager package alone was upgraded (dl-doctor's why test)
    "p5_fm_upgraded": [
        *boot(BOOT, T0, driver="550.54.15"),
        *noise(BOOT, T0 + 1_000_000, 10_000_000, 200),
        systemd(BOOT, T0 + 20_000_000, 20_000_000, FM, "Starting NVIDIA fabric manager service..."),
        service(BOOT, T0 + 20_100_000, 20_100_000, FM, "nv-fabricmanager",
                "fabric manager NVIDIA GPU driver interface version 550.127.05 don't match with driver version "
                "550.54.15. Please update with matching NVIDIA driver package."),
        systemd(BOOT, T0 + 20_200_000, 20_200_000, FM,
                "nvidia-fabricmanager.service: Control process exited, code=exited, status=1/FAILURE"),
        systemd(BOOT, T0 + 20_300_000, 20_300_000, FM, "nvidia-fabricmanager.service: Failed with result 'exit-code'."),
        systemd(BOOT, T0 + 20_400_000, 20_400_000, FM, "Failed to start NVIDIA fabric manager service."),
    ],
    # one healthy boot: the module loaded, the fabric manager started, nothing else of note
    "healthy": [
        *boot(BOOT, T0),
        *noise(BOOT, T0 + 10_000_000, 10_000_000, 50),
        systemd(BOOT, T0 + 20_000_000, 20_000_000, FM, "Starting NVIDIA fabric manager service..."),
        systemd(BOOT, T0 + 21_000_000, 21_000_000, FM, "Started NVIDIA fabric manager service."),
    ],
}


def export(entries):
    out = []
    for e in entries:
        out.extend(f"{k}={v}" for k, v in e.items())
        out.append("")
    return ("\n".join(out) + "\n").encode()


def write(remote: str, name: str, entries, compact: bool) -> Path:
    # the classic layout is also written without keyed hashes, as systemd before 246 wrote it (Ubuntu 20.04)
    env = dict(os.environ, SYSTEMD_JOURNAL_COMPACT="1" if compact else "0",
               SYSTEMD_JOURNAL_KEYED_HASH="1" if compact else "0")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "system.journal"
        subprocess.run([remote, "-o", str(path), "-"], input=export(entries), env=env, check=True,
                       capture_output=True)
        out = HERE / f"{name}{'' if compact else '.classic'}.journal.gz"
        out.write_bytes(gzip.compress(path.read_bytes(), 9, mtime=0))
        return out


def main() -> int:
    remote = sys.argv[1] if len(sys.argv) > 1 else "/lib/systemd/systemd-journal-remote"
    HERE.mkdir(parents=True, exist_ok=True)
    for name, entries in SCENARIOS.items():
        for compact in ((True, False) if name != "p5_fm_upgraded" else (True,)):
            print(write(remote, name, entries, compact))
    return 0


if __name__ == "__main__":
    sys.exit(main())
