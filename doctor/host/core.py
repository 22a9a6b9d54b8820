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
import selectors
import signal
import stat
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

MAX_READ_BYTES = 4 * 1024 * 1024
MAX_SYMLINK_HOPS = 40
MAX_COMMAND_OUTPUT = 4 * 1024 * 1024  # per stream; the rest is read and dropped
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


class CommandUnavailable(RuntimeError):
    """Raised when a command cannot be run on this host (always, under a sysroot)."""


class UntrustedCommand(OSError):
    """The trust rule (doctor.trust) forbids running this program here; ``reason`` says why."""

    def __init__(self, program: str, reason: str):
        super().__init__(errno.EPERM, f"not run: {reason}", program)
        self.reason = reason


class NotARegularFile(OSError):
    """A probe asked to read something that is not a regular file (a FIFO, a device, a socket)."""

    def __init__(self, path: str, kind: str):
        super().__init__(errno.EINVAL, f"not a regular file ({kind})", path)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISDIR, "directory")):
        if test(mode):
            return name
    return "special file"


def open_regular(real_path: str) -> int:
    """A read-only descriptor on a regular file: opened non-blocking (a FIFO cannot hang the open), then checked."""
    fd = os.open(real_path, _OPEN_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFile(real_path, _kind(st.st_mode))
    except BaseException:
        os.close(fd)
        raise
    return fd


@dataclass
class CommandResult:
    argv: List[str]
    returncode: Optional[int]
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    # as root: the library and module path entries kept from the child because the trust rule does not pass them
    withheld: List[str] = field(default_factory=list)

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


_KERNEL_DIRS = ("proc", "sys", "dev")


@dataclass
class Host:
    """File, command and environment access rooted at ``sysroot`` (``None`` = live)."""

    sysroot: Optional[str] = None
    environ_override: Optional[Mapping[str, str]] = None
    command_timeout: float = 5.0
    commands: List[CommandRecord] = field(default_factory=list)
    # Set by `dl-doctor bundle`: keeps what the probes read and what commands printed (see doctor.bundle).
    capture: Optional[Any] = None
    # --run-as-owner: run another user's interpreter as that user instead of leaving it unrun (doctor.trust)
    run_as_owner: bool = False
    # --host-root: the files come from ``sysroot`` (the host's root mounted into a container) while the running
    # kernel's interfaces (/proc, /sys, /dev) are this machine's own; nothing under the root is executed
    live_kernel: bool = False

    def cached(self, key: Any, compute: Callable[[], Any]) -> Any:
        """A value computed once per Host (one run), however many probes or threads ask: parses that several
        probes share (the dpkg status file, ELF files, library resolutions). Never shared across two runs."""
        with self._lock:
            lock = self._cache_locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._cache:
                self._cache[key] = compute()
            return self._cache[key]

    def __post_init__(self) -> None:
        if self.sysroot is not None:
            root = os.path.realpath(self.sysroot)
            if not os.path.isdir(root):
                raise NotADirectoryError(f"sysroot is not a directory: {self.sysroot}")
            self.sysroot = root
        self._lock = threading.Lock()
        self._cache: Dict[Any, Any] = {}
        self._cache_locks: Dict[Any, threading.Lock] = {}
        self._environ: Optional[Dict[str, str]] = None
        self._environ_known = True

    # -- identity ---------------------------------------------------------

    @property
    def live(self) -> bool:
        return self.sysroot is None

    @property
    def as_root(self) -> bool:
        """dl-doctor runs as root on a running host (what some live readers need, and what the trust rule guards)."""
        return self.live and hasattr(os, "geteuid") and os.geteuid() == 0

    def process_ids(self) -> Optional[Tuple[int, int, List[int]]]:
        """This process's effective uid, gid and supplementary groups (live only; None under a sysroot, whose /proc is
        read instead)."""
        if not self.live or not hasattr(os, "geteuid"):
            return None
        egid = os.getegid()
        return os.geteuid(), egid, [egid] + [g for g in os.getgroups() if g != egid]

    @property
    def kernel_live(self) -> bool:
        """The running kernel's interfaces (/proc, /sys, /dev, NVML) are there to read: live, or --host-root."""
        return self.live or self.live_kernel

    @property
    def mode(self) -> str:
        return "live" if self.live else "host-root" if self.live_kernel else "sysroot"

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
        if self.live_kernel and path.split("/", 2)[1] in _KERNEL_DIRS:
            return os.path.normpath(path)  # the running kernel's /proc, /sys and /dev: this machine's own
        root = self.sysroot
        assert root is not None  # not live
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
        if self.live or (self.live_kernel and path.split("/", 2)[1] in _KERNEL_DIRS):
            return os.path.realpath(path)
        real = self.resolve(path)
        rel = os.path.relpath(real, self.sysroot)
        return "/" if rel == "." else "/" + rel

    # -- files ------------------------------------------------------------

    @staticmethod
    def _read_fd(fd: int, left: int) -> bytes:
        chunks: List[bytes] = []
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def read_bytes(self, path: str, max_bytes: int = MAX_READ_BYTES) -> bytes:
        """At most ``max_bytes`` of a regular file (FIFOs, devices and sockets raise :class:`NotARegularFile`)."""
        fd = open_regular(self.resolve(path))
        try:
            data = self._read_fd(fd, max_bytes)
        finally:
            os.close(fd)
        if self.capture is not None:
            self.capture.file(path, data, truncated=len(data) >= max_bytes)
        return data

    def read_tail(self, path: str, max_bytes: int) -> Tuple[bytes, bool]:
        """The last ``max_bytes`` of a regular file, and whether that is the whole file (logs: the end is newest)."""
        fd = open_regular(self.resolve(path))
        try:
            size = os.fstat(fd).st_size
            start = max(0, size - max_bytes)
            os.lseek(fd, start, os.SEEK_SET)
            data = self._read_fd(fd, min(size, max_bytes))
        finally:
            os.close(fd)
        if self.capture is not None:
            self.capture.file(path, data, truncated=start > 0)
        return data, start == 0

    def read_text(self, path: str, max_bytes: int = MAX_READ_BYTES) -> str:
        return self.read_bytes(path, max_bytes).decode("utf-8", errors="replace")

    def open_binary(self, path: str):
        """A read-only binary file object on a regular file (for parsers that seek, such as the ELF reader)."""
        return os.fdopen(open_regular(self.resolve(path)), "rb")

    def try_read(self, path: str, max_bytes: int = MAX_READ_BYTES) -> Optional[str]:
        """The file's text, or ``None`` when it does not exist or is not a file.

        Permission errors are raised: the caller decides whether lack of
        privilege matters.
        """
        try:
            return self.read_text(path, max_bytes)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, NotARegularFile):
            return None
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EISDIR, errno.ENODEV, errno.ENXIO,
                             errno.ENAMETOOLONG):
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
        """Sorted entries of a directory; ``[]`` when it does not exist or cannot be a directory (a link loop).

        Names that are not UTF-8 come back with surrogate escapes (as ``os.listdir`` gives them); the engine turns
        them into readable ``\\xNN`` text before anything is written.
        """
        try:
            return sorted(os.listdir(self.resolve(path)))
        except PermissionError:
            raise
        except OSError:
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

    def list_entries(self, path: str) -> List[Tuple[str, str]]:
        """``(name, kind)`` of a directory's entries, links not followed: kind is "dir", "file", "link" or
        "other"; ``[]`` when it cannot be listed."""
        out: List[Tuple[str, str]] = []
        try:
            with os.scandir(self.resolve(path)) as it:
                for entry in it:
                    try:
                        kind = ("link" if entry.is_symlink() else "dir" if entry.is_dir(follow_symlinks=False)
                                else "file" if entry.is_file(follow_symlinks=False) else "other")
                    except OSError:
                        kind = "other"
                    out.append((entry.name, kind))
        except OSError:
            return []
        return sorted(out)

    def uname(self) -> Optional[os.uname_result]:
        """The running kernel's uname (live or --host-root; a sysroot's kernel is not running)."""
        return os.uname() if self.kernel_live and hasattr(os, "uname") else None

    def hostname(self) -> Optional[str]:
        """The running system's host name (live only)."""
        if not self.live:
            return None
        # gethostname(2) is uname(2)'s nodename on Linux; os.uname spares a run the socket module
        return os.uname().nodename

    def scan_names(self, path: str, limit: int) -> Tuple[List[str], bool]:
        """At most ``limit`` entry names of a directory (sorted), and whether it holds more: a directory someone
        filled with 70,000 entries is read only as far as the caller's budget, never listed whole. ``([], False)``
        when it cannot be listed (a path with a NUL byte, from someone's .condarc, included); PermissionError is
        raised, as by :meth:`listdir`."""
        names: List[str] = []
        try:
            with os.scandir(self.resolve(path)) as it:
                for entry in it:
                    if len(names) >= limit:
                        return sorted(names), True
                    names.append(entry.name)
        except PermissionError:
            raise
        except (OSError, ValueError):
            return [], False
        return sorted(names), False

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
        """Look a program up (live only) where :mod:`doctor.spawn` would run it from: the session ``PATH``'s absolute
        entries (as root only those that pass the trust rule, then the system directories); never the current
        directory through an empty or relative entry."""
        if not self.live:
            return None
        from dl_doctor.host import spawn

        return spawn.which(name, None, self.as_root, self.search_dirs())

    def search_dirs(self) -> List[str]:
        """Where programs are looked up (doctor.spawn.search_dirs), judged once per run: as root each PATH directory
        goes through the trust rule, and probes look up a dozen programs."""
        from dl_doctor.host import spawn

        path = self.environ().get("PATH", os.defpath)
        return self.cached(("search_dirs", path, self.as_root), lambda: spawn.search_dirs(path, self.as_root))

    def run(self, argv: Sequence[str], timeout: Optional[float] = None,
            env: Optional[Mapping[str, str]] = None, *, startup_paths: Sequence[str] = (),
            requested: bool = False) -> CommandResult:
        """Run a command with a timeout and bounded output.  Never under a sysroot.

        Every command goes through :mod:`doctor.spawn`: looked up only where the trust rule allows, checked by it
        (:mod:`doctor.trust`; as root, a program that another user could have changed is not run:
        :class:`UntrustedCommand`), and executed through the descriptor that was checked, from ``/``.
        ``startup_paths`` name what an interpreter executes before the command line's code; ``requested`` marks a
        program the person running dl-doctor named (``--python``). The child gets a scrubbed environment (no
        secrets; as root, no library or module path another user controls: see ``CommandResult.withheld``), no
        terminal, its own process group (killed whole at the timeout), and at most ``MAX_COMMAND_OUTPUT`` bytes of
        each stream are kept.
        """
        from dl_doctor.host import spawn

        argv = [str(a) for a in argv]
        if not self.live:
            raise CommandUnavailable(f"commands are not run under a sysroot: {argv[0]}")
        limit = self.command_timeout if timeout is None else timeout
        start = time.monotonic()
        euid = os.geteuid() if hasattr(os, "geteuid") else None
        base_env = dict(env) if env is not None else self.environ()
        try:
            prepared = spawn.prepare(argv, base_env, euid=euid, startup_paths=startup_paths, requested=requested,
                                     run_as_owner=self.run_as_owner, dirs=self.search_dirs())
        except spawn.UntrustedProgram as exc:
            err = UntrustedCommand(str(exc.filename), exc.reason)
            self._record(CommandRecord(argv, None, 0.0, False, str(err.strerror)))
            if self.capture is not None:
                self.capture.command(CommandResult(argv, None, "", "", 0.0), str(err.strerror))
            raise err
        except OSError as exc:
            duration = time.monotonic() - start
            self._record(CommandRecord(argv, None, duration, False, str(exc)))
            if self.capture is not None:
                self.capture.command(CommandResult(argv, None, "", "", duration), str(exc))
            raise
        verdict = prepared.verdict
        try:
            proc = subprocess.Popen(prepared.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, **spawn.popen_kwargs(prepared))
        except (OSError, ValueError) as exc:
            duration = time.monotonic() - start
            self._record(CommandRecord(argv, None, duration, False, str(exc)))
            if self.capture is not None:
                self.capture.command(CommandResult(argv, None, "", "", duration), str(exc))
            if isinstance(exc, OSError):
                raise
            raise OSError(errno.EINVAL, str(exc), argv[0])
        finally:
            prepared.close()
        out, err_b, timed_out, truncated = _bounded_communicate(proc, start + limit)
        duration = time.monotonic() - start
        note = f"timed out after {limit:g}s" if timed_out else None
        if truncated:
            note = (note + "; " if note else "") + f"output beyond {MAX_COMMAND_OUTPUT} bytes dropped"
        if verdict.reason:
            note = (note + "; " if note else "") + verdict.reason
        if prepared.withheld:
            note = (note + "; " if note else "") + "withheld: " + "; ".join(prepared.withheld[:4])
        returncode = None if timed_out else proc.returncode
        self._record(CommandRecord(argv, returncode, duration, timed_out, note))
        result = CommandResult(argv, returncode, _decode(out), _decode(err_b), duration, timed_out,
                               withheld=list(prepared.withheld))
        if self.capture is not None:
            self.capture.command(result, note)
        return result

    def run_python(self, python: str, script: str, args: Sequence[str] = (), timeout: Optional[float] = None,
                   env: Optional[Mapping[str, str]] = None, *, startup_paths: Sequence[str] = (),
                   requested: bool = False) -> CommandResult:
        """Run ``script`` in the interpreter ``python``, isolated (``-I``: no current directory or script directory on
        its module path, no ``PYTHON*`` variables, no user site; ``-E -s`` for a Python 2.7, which lacks ``-I``), with
        :data:`doctor.spawn.PYTHON_PRELUDE` adding back the session's trusted ``PYTHONPATH`` and its user site."""
        from dl_doctor.host import spawn

        kwargs: Dict[str, Any] = dict(timeout=timeout, env=env, startup_paths=startup_paths, requested=requested)
        result = self.run(spawn.python_argv(python, script, args), **kwargs)
        if spawn.rejects_isolated_flag(result.returncode, result.stderr):
            result = self.run(spawn.python_argv(python, script, args, legacy=True), **kwargs)
        return result

    def _record(self, rec: CommandRecord) -> None:
        with self._lock:
            self.commands.append(rec)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (OSError, ProcessLookupError):
        try:
            proc.kill()
        except OSError:
            pass


def _bounded_communicate(proc: subprocess.Popen, deadline: float) -> Tuple[bytes, bytes, bool, bool]:
    """Read both pipes until EOF or the deadline, keeping at most MAX_COMMAND_OUTPUT bytes of each."""
    # keyed by the pipes (both set: the caller opened them with PIPE), then by the selector's file objects
    kept: Dict[Any, bytearray] = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    truncated = False
    timed_out = False
    sel = selectors.DefaultSelector()
    for pipe in kept:
        sel.register(pipe, selectors.EVENT_READ)
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in sel.select(timeout=min(left, 0.5)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf = kept[key.fileobj]
                room = MAX_COMMAND_OUTPUT - len(buf)
                if room > 0:
                    buf += chunk[:room]
                if len(chunk) > room:
                    truncated = True
        if not timed_out:
            try:
                proc.wait(timeout=max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
    finally:
        sel.close()
        if timed_out:
            _kill_group(proc)
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        for pipe in kept:
            pipe.close()
    return bytes(kept[proc.stdout]), bytes(kept[proc.stderr]), timed_out, truncated


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
