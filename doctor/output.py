"""Writing outputs safely: reports, facts, bundles, the status line, metrics, the login hook's files.

dl-doctor often runs as root and is told where to write by a command line, a unit file or a pipeline, sometimes in
a directory other users can write to. So a write:

* goes to a temporary file created with ``O_EXCL | O_NOFOLLOW`` beside the target (a name nobody can predict or
  pre-plant), whose mode is set on the descriptor, and is renamed over the target only if the target is a regular
  file or does not exist;
* writes *through* ``/dev/stdout``, ``/dev/stderr``, ``/dev/null``, ``/dev/fd/N`` and FIFOs, as pipelines expect
  (``--json /dev/stdout``, ``--html >(gzip > r.html.gz)``);
* refuses (:class:`OutputRefused`, exit 2 on the command line) a symbolic link, a directory, a socket, a block device
  or any other character device, saying which;
* gives a new file mode ``0600`` (private: reports, facts, bundles and JUnit carry the environment) or ``0644``
  (public: the status line and Prometheus metrics), less the umask; an existing file keeps its mode;
* removes the temporaries of an interrupted earlier run (a dead process's, in the same directory, ours).
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import secrets
import stat
from typing import Iterable, List, Optional, Union

PRIVATE_MODE = 0o600
PUBLIC_MODE = 0o644
_THROUGH = {"/dev/stdout", "/dev/stderr", "/dev/null"}
_FD_PATH = re.compile(r"^/(?:dev/fd|proc/self/fd)/\d{1,6}$")
_TMP = re.compile(r"^\..{0,200}\.dl-doctor-tmp-(\d{1,10})-[0-9a-f]{8}$")
TMP_MARK = ".dl-doctor-tmp-"


class OutputRefused(OSError):
    """The target is not something dl-doctor will replace or write through."""

    def __init__(self, path: str, why: str):
        super().__init__(errno.EINVAL, why, path)
        self.why = why

    def __str__(self) -> str:
        return f"{self.filename}: {self.why}"


def current_umask() -> int:
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write_fd(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _write_through(path: str, data: bytes) -> str:
    flags = os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags | os.O_NONBLOCK)  # a FIFO without a reader fails (ENXIO) instead of hanging
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise OutputRefused(path, "is a FIFO that nobody reads")
        raise
    try:
        fl = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, fl & ~os.O_NONBLOCK)
        _write_fd(fd, data)
    finally:
        os.close(fd)
    return "written through"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def clean_stale_temporaries(directory: str, limit: int = 10000) -> List[str]:
    """Remove our temporaries left by a run that was killed (its process is gone). Returns the names removed."""
    removed: List[str] = []
    euid = os.geteuid()
    try:
        with os.scandir(directory) as it:
            for n, entry in enumerate(it):
                if n >= limit:
                    break
                m = _TMP.match(entry.name) if TMP_MARK in entry.name else None
                if not m or int(m.group(1)) == os.getpid() or _pid_alive(int(m.group(1))):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode) and st.st_uid == euid:
                        os.unlink(entry.path)
                        removed.append(entry.name)
                except OSError:
                    continue
    except OSError:
        pass
    return removed


def write_file(path: str, data: Union[str, bytes], *, private: bool = True) -> str:
    """Write ``data`` to ``path`` safely (see the module's text). Returns "written" or "written through"."""
    if isinstance(data, str):
        data = data.encode("utf-8", errors="surrogateescape")
    if path in _THROUGH or _FD_PATH.match(path):
        return _write_through(path, data)
    try:
        st: Optional[os.stat_result] = os.lstat(path)
    except FileNotFoundError:
        st = None
    mode = (PRIVATE_MODE if private else PUBLIC_MODE) & ~current_umask()
    if st is not None:
        kind = st.st_mode
        if stat.S_ISFIFO(kind):
            return _write_through(path, data)
        if stat.S_ISLNK(kind):
            raise OutputRefused(path, "is a symbolic link; dl-doctor does not follow or replace links: name the "
                                      "file it points to")
        if stat.S_ISDIR(kind):
            raise OutputRefused(path, "is a directory")
        if stat.S_ISCHR(kind):
            raise OutputRefused(path, "is a character device; dl-doctor writes through only /dev/stdout, "
                                      "/dev/stderr, /dev/null, /dev/fd/N and FIFOs")
        if not stat.S_ISREG(kind):
            raise OutputRefused(path, "is not a regular file (a block device or a socket); not replacing it")
        mode = stat.S_IMODE(kind)
    directory = os.path.dirname(os.path.abspath(path)) or "."
    os.makedirs(directory, exist_ok=True)
    clean_stale_temporaries(directory)
    base = os.path.basename(path)[:100]
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(16):
        tmp = os.path.join(directory, f".{base}{TMP_MARK}{os.getpid()}-{secrets.token_hex(4)}")
        try:
            fd = os.open(tmp, flags, 0o600)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - 16 collisions of 32 random bits
        raise OSError(errno.EEXIST, "cannot create a temporary file", directory)
    try:
        try:
            _write_fd(fd, data)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        try:  # the target may have changed while we wrote: check again just before the rename
            now = os.lstat(path)
            if not stat.S_ISREG(now.st_mode):
                raise OutputRefused(path, "changed into something that is not a regular file while dl-doctor "
                                          "wrote; not replacing it")
        except FileNotFoundError:
            pass
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return "written"


def reserve_unique(base: str, suffix: str, limit: int = 1000) -> str:
    """The first of ``base``, ``base-2``, ``base-3``... for which ``base+suffix`` could be created (it is, empty).

    Two runs writing into one directory in the same second get different names; the placeholder is replaced by
    :func:`write_file` (it is a regular file of ours).
    """
    os.makedirs(os.path.dirname(os.path.abspath(base)) or ".", exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for n in range(1, limit + 1):
        candidate = base if n == 1 else f"{base}-{n}"
        try:
            os.close(os.open(candidate + suffix, flags, 0o600))
            return candidate
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, f"{limit} reports with this name already exist", base + suffix)


_REPORT_NAME = re.compile(r"^dl-doctor-.{1,120}-(\d{8}T\d{6}Z)(?:-(\d{1,4}))?\.(json|html)$")


def prune_reports(directory: str, keep: int, protect: Iterable[str] = ()) -> List[str]:
    """Keep the newest ``keep`` runs' reports (``dl-doctor-HOST-STAMP[-N].{json,html}``) in ``directory``."""
    protected = {os.path.abspath(p) for p in protect}
    runs = {}
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []
    for entry in entries:
        m = _REPORT_NAME.match(entry.name)
        if not m:
            continue
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
        except OSError:
            continue
        key = (m.group(1), int(m.group(2) or 1), entry.name.rsplit(".", 1)[0])
        runs.setdefault(key, []).append(entry.path)
    removed: List[str] = []
    for key in sorted(runs, reverse=True)[max(0, keep):]:
        for path in runs[key]:
            if os.path.abspath(path) in protected:
                continue
            try:
                os.unlink(path)
                removed.append(path)
            except OSError:
                pass
    return removed
