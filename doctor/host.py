"""The one way probes read the host.

Every file a probe reads, every command it runs and the session environment it
inspects go through a :class:`Host`.  A host is rooted either at ``/`` (the live
machine) or at a *sysroot* directory (a mounted image, a captured tree).  Under a
sysroot:

* paths are resolved inside the tree: an absolute symlink such as
  ``etc/hostname -> /etc/hostname`` is followed to ``DIR/etc/hostname``, never to
  the real host's file, and ``..`` cannot climb out of the tree;
* no command is run (the binaries belong to another machine);
* the session environment comes from ``DIR/proc/self/environ`` when the tree has
  one (NUL-separated, as in ``/proc``).

Probes never call ``open`` or ``subprocess`` themselves, so a sysroot works for
every probe for free.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import posixpath
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

MAX_READ_BYTES = 4 * 1024 * 1024
MAX_SYMLINK_HOPS = 40


class CommandUnavailable(RuntimeError):
    """Raised when a command cannot be run on this host (always, under a sysroot)."""


@dataclass
class CommandResult:
    argv: List[str]
    returncode: Optional[int]
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


@dataclass
class CommandRecord:
    argv: List[str]
    returncode: Optional[int]
    duration_s: float
    timed_out: bool
    error: Optional[str] = None


@dataclass
class Host:
    """File, command and environment access rooted at ``sysroot`` (``None`` = live)."""

    sysroot: Optional[str] = None
    environ_override: Optional[Mapping[str, str]] = None
    command_timeout: float = 5.0
    commands: List[CommandRecord] = field(default_factory=list)
    # Set by `dl-doctor bundle`: keeps what the probes read and what commands printed (see doctor.bundle).
    capture: Optional[Any] = None

    def __post_init__(self) -> None:
        if self.sysroot is not None:
            root = os.path.realpath(self.sysroot)
            if not os.path.isdir(root):
                raise NotADirectoryError(f"sysroot is not a directory: {self.sysroot}")
            self.sysroot = root
        self._lock = threading.Lock()
        self._environ: Optional[Dict[str, str]] = None
        self._environ_known = True

    # -- identity ---------------------------------------------------------

    @property
    def live(self) -> bool:
        return self.sysroot is None

    @property
    def mode(self) -> str:
        return "live" if self.live else "sysroot"

    # -- paths ------------------------------------------------------------

    def resolve(self, path: str, follow_last: bool = True) -> str:
        """Return the real filesystem path for ``path`` as seen inside the host.

        Live hosts use the path unchanged.  Under a sysroot every symlink is
        resolved by hand, relative to the tree, so nothing escapes it.
        """
        if not path.startswith("/"):
            raise ValueError(f"host paths are absolute: {path!r}")
        if self.live:
            return path
        root = self.sysroot
        pending = [c for c in path.split("/") if c]
        pending.reverse()  # a stack: next component at the end
        resolved: List[str] = []
        hops = 0
        while pending:
            comp = pending.pop()
            if comp == ".":
                continue
            if comp == "..":
                if resolved:
                    resolved.pop()
                continue
            candidate = os.path.join(root, *resolved, comp)
            is_last = not pending
            if (follow_last or not is_last) and os.path.islink(candidate):
                hops += 1
                if hops > MAX_SYMLINK_HOPS:
                    raise OSError(errno.ELOOP, "too many levels of symbolic links", path)
                target = os.readlink(candidate)
                if target.startswith("/"):
                    resolved = []
                pending.extend(reversed([c for c in target.split("/") if c]))
                continue
            resolved.append(comp)
        return os.path.join(root, *resolved)

    def tree_path(self, path: str) -> str:
        """The in-host path (``/etc/x``) that ``resolve`` lands on, for evidence."""
        if self.live:
            return os.path.realpath(path)
        real = self.resolve(path)
        rel = os.path.relpath(real, self.sysroot)
        return "/" if rel == "." else "/" + rel

    # -- files ------------------------------------------------------------

    def read_bytes(self, path: str, max_bytes: int = MAX_READ_BYTES) -> bytes:
        with open(self.resolve(path), "rb") as fh:
            data = fh.read(max_bytes)
        if self.capture is not None:
            self.capture.file(path, data, truncated=len(data) >= max_bytes)
        return data

    def read_text(self, path: str, max_bytes: int = MAX_READ_BYTES) -> str:
        return self.read_bytes(path, max_bytes).decode("utf-8", errors="replace")

    def open_binary(self, path: str):
        """A read-only binary file object (for parsers that seek, such as the ELF reader)."""
        return open(self.resolve(path), "rb")

    def try_read(self, path: str, max_bytes: int = MAX_READ_BYTES) -> Optional[str]:
        """The file's text, or ``None`` when it does not exist or is not a file.

        Permission errors are raised: the caller decides whether lack of
        privilege matters.
        """
        try:
            return self.read_text(path, max_bytes)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EISDIR, errno.ENODEV, errno.ENXIO):
                return None
            raise

    def exists(self, path: str) -> bool:
        try:
            return os.path.exists(self.resolve(path))
        except OSError:
            return False

    def lexists(self, path: str) -> bool:
        try:
            return os.path.lexists(self.resolve(path, follow_last=False))
        except OSError:
            return False

    def is_file(self, path: str) -> bool:
        try:
            return os.path.isfile(self.resolve(path))
        except OSError:
            return False

    def is_dir(self, path: str) -> bool:
        try:
            return os.path.isdir(self.resolve(path))
        except OSError:
            return False

    def listdir(self, path: str) -> List[str]:
        """Sorted entries of a directory; ``[]`` when it does not exist."""
        try:
            return sorted(os.listdir(self.resolve(path)))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def readlink(self, path: str) -> Optional[str]:
        """The raw target of a symlink (as stored), or ``None``."""
        try:
            return os.readlink(self.resolve(path, follow_last=False))
        except OSError:
            return None

    def stat(self, path: str) -> os.stat_result:
        return os.stat(self.resolve(path))

    def statvfs(self, path: str) -> os.statvfs_result:
        return os.statvfs(self.resolve(path))

    def access(self, path: str, mode: int) -> bool:
        try:
            return os.access(self.resolve(path), mode)
        except OSError:
            return False

    def glob(self, pattern: str) -> List[str]:
        """In-host paths matching a shell pattern, component by component, sorted."""
        if not pattern.startswith("/"):
            raise ValueError(f"host patterns are absolute: {pattern!r}")
        current = ["/"]
        for comp in [c for c in pattern.split("/") if c]:
            nxt: List[str] = []
            for base in current:
                if any(ch in comp for ch in "*?["):
                    for name in self.listdir(base):
                        if name.startswith(".") and not comp.startswith("."):
                            continue
                        if fnmatch.fnmatchcase(name, comp):
                            nxt.append(posixpath.join(base, name))
                else:
                    candidate = posixpath.join(base, comp)
                    if self.lexists(candidate):
                        nxt.append(candidate)
            current = nxt
            if not current:
                break
        return sorted(current)

    def read_kmsg(self, max_records: int = 20000) -> List[str]:
        """The kernel ring buffer of the current boot from ``/dev/kmsg`` (live only; non-blocking).

        Raises ``PermissionError`` where ``dmesg_restrict`` keeps it from this user.
        """
        if not self.live:
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
                lines.append(message.split("\n", 1)[0])
        finally:
            os.close(fd)
        return lines

    def nvme_log_page(self, device: str, log_id: int, length: int = 4096) -> bytes:
        """NVMe Get Log Page (admin opcode 0x02) on a controller such as /dev/nvme1. Live only; needs root."""
        if not self.live:
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

    def http(self, method: str, url: str, headers: Optional[Mapping[str, str]] = None,
             timeout: float = 1.0) -> Tuple[int, str]:
        """One small HTTP request (the EC2 metadata service is the only caller). Live only.

        Returns (status, body); raises OSError on connection failures and timeouts.
        """
        if not self.live:
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

    # -- environment --------------------------------------------------------

    def environ(self) -> Dict[str, str]:
        """The session environment: this process's, or ``DIR/proc/self/environ``."""
        if self.environ_override is not None:
            return dict(self.environ_override)
        if self.live:
            return dict(os.environ)
        if self._environ is None:
            raw = None
            try:
                raw = self.read_bytes("/proc/self/environ")
            except OSError:
                raw = None
            self._environ_known = raw is not None
            self._environ = parse_environ_block(raw or b"")
        return dict(self._environ)

    @property
    def environ_known(self) -> bool:
        if self.environ_override is not None or self.live:
            return True
        self.environ()
        return self._environ_known

    # -- commands -----------------------------------------------------------

    def which(self, name: str) -> Optional[str]:
        """Look a program up on the session ``PATH`` (live only)."""
        if not self.live:
            return None
        return shutil.which(name, path=self.environ().get("PATH", os.defpath))

    def run(self, argv: Sequence[str], timeout: Optional[float] = None,
            env: Optional[Mapping[str, str]] = None) -> CommandResult:
        """Run a command with a timeout.  Never under a sysroot."""
        argv = [str(a) for a in argv]
        if not self.live:
            raise CommandUnavailable(f"commands are not run under a sysroot: {argv[0]}")
        limit = self.command_timeout if timeout is None else timeout
        start = time.monotonic()
        try:
            proc = subprocess.run(
                argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=limit,
                env=dict(env) if env is not None else None, check=False,
            )
        except subprocess.TimeoutExpired as exc:
            duration = time.monotonic() - start
            self._record(CommandRecord(argv, None, duration, True, f"timed out after {limit:g}s"))
            result = CommandResult(argv, None, _decode(exc.stdout), _decode(exc.stderr), duration, True)
            if self.capture is not None:
                self.capture.command(result, f"timed out after {limit:g}s")
            return result
        except OSError as exc:
            duration = time.monotonic() - start
            self._record(CommandRecord(argv, None, duration, False, str(exc)))
            if self.capture is not None:
                self.capture.command(CommandResult(argv, None, "", "", duration), str(exc))
            raise
        duration = time.monotonic() - start
        self._record(CommandRecord(argv, proc.returncode, duration, False))
        result = CommandResult(argv, proc.returncode, _decode(proc.stdout), _decode(proc.stderr), duration)
        if self.capture is not None:
            self.capture.command(result)
        return result

    def _record(self, rec: CommandRecord) -> None:
        with self._lock:
            self.commands.append(rec)


def _decode(data) -> str:
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    return data.decode("utf-8", errors="replace")


def parse_environ_block(raw: bytes) -> Dict[str, str]:
    """Parse a NUL-separated ``KEY=VALUE`` block as found in ``/proc/PID/environ``."""
    env: Dict[str, str] = {}
    for item in raw.split(b"\0"):
        if not item or b"=" not in item:
            continue
        key, _, value = item.partition(b"=")
        env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env
