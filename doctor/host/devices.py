"""Live-only device access that is not a file read: the kernel ring buffer, an NVMe admin command, and the one HTTP
client (the EC2 metadata service). Each takes the run's :class:`~dl_doctor.host.Host` and refuses a sysroot; these
and ``host.py`` are the only modules that touch the OS for probes (tests/e2e/test_plugins.py holds probes to it).
"""

from __future__ import annotations

import errno
import os
from typing import List, Mapping, Optional, Tuple

from dl_doctor.host import CommandUnavailable, Host


def read_kmsg(host: Host, max_records: int = 20000, first_seq: Optional[List[int]] = None) -> List[str]:
    """The kernel ring buffer of the current boot from ``/dev/kmsg`` (live only; non-blocking). ``first_seq``, when
    given, receives the first record's sequence number: above 0, the boot's start was overwritten.

    Raises ``PermissionError`` where ``dmesg_restrict`` keeps it from this user.
    """
    if not host.kernel_live:
        raise CommandUnavailable("/dev/kmsg belongs to the running kernel, not a sysroot")
    lines: List[str] = []
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    try:
        while len(lines) < max_records:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # a record was overwritten while reading; go on
                    continue
                raise
            if not record:
                break
            header, _, message = record.decode("utf-8", "replace").partition(";")
            if first_seq is not None and not first_seq:
                fields = header.split(",")
                first_seq.append(int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else -1)
            lines.append(message.split("\n", 1)[0])
    finally:
        os.close(fd)
    return lines


def nvme_log_page(host: Host, device: str, log_id: int, length: int = 4096) -> bytes:
    """NVMe Get Log Page (admin opcode 0x02) on a controller such as /dev/nvme1. Live only; needs root."""
    if not host.live:
        raise CommandUnavailable("no devices under a sysroot")
    import ctypes
    import fcntl
    import struct

    buf = ctypes.create_string_buffer(length)
    numd = length // 4
    # struct nvme_admin_cmd (linux/nvme_ioctl.h), 72 bytes; NVME_IOCTL_ADMIN_CMD = _IOWR('N', 0x41, ...)
    cmd = struct.pack("<BBHIIIQQII6III", 0x02, 0, 0, 1, 0, 0, 0, ctypes.addressof(buf), 0, length,
                      log_id | (numd << 16), 0, 0, 0, 0, 0, 0, 0)
    fd = os.open(device, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, 0xC0484E41, bytearray(cmd))
    finally:
        os.close(fd)
    return buf.raw


def http(host: Host, method: str, url: str, headers: Optional[Mapping[str, str]] = None,
     timeout: float = 1.0) -> Tuple[int, str]:
    """One small HTTP request (the EC2 metadata service is the only caller). Live only.

    Returns (status, body); raises OSError on connection failures and timeouts.
    """
    if not host.live:
        raise CommandUnavailable("no network access under a sysroot")
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, method=method, headers=dict(headers or {}))
    # no proxies: the metadata service is link-local, and a proxy would see the token
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=timeout) as resp:
            return resp.status, resp.read(1 << 20).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(1 << 16).decode("utf-8", "replace") if exc.fp else ""
    except urllib.error.URLError as exc:
        reason = exc.reason
        raise reason if isinstance(reason, OSError) else OSError(str(reason))
