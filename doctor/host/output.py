"""Writing outputs safely: reports, facts, bundles, the status line, metrics, the login hook's files.

dl-doctor often runs as root and is told where to write by a command line, a unit file or a pipeline, sometimes in
a directory other users can write to. So a write:

* resolves the target's directory once, one component at a time, to a descriptor, and does everything else relative
  to it: renaming a directory or swapping in a link half-way through a write leads nowhere else;
* goes to a temporary file created with ``O_EXCL | O_NOFOLLOW`` beside the target (a name nobody can predict or
  pre-plant), whose mode is set on the descriptor, and is renamed over the target only if the target is a regular
  file of this user's or does not exist;
* writes *through* ``/dev/stdout``, ``/dev/stderr``, ``/dev/null``, ``/dev/fd/N`` and this user's FIFOs, as
  pipelines expect (``--json /dev/stdout``, ``--html >(gzip > r.html.gz)``);
* refuses (:class:`OutputRefused`, exit 2 on the command line) a symbolic link, a directory, a socket, a block device
  or any other character device, and anything another user owns (their file would hand its mode to root's report,
  their FIFO would receive it), saying which;
* gives the file dl-doctor's own mode, whatever an earlier file had: ``0600`` (private: reports, facts, bundles and
  JUnit carry the environment) or ``0644`` (public: the status line and Prometheus metrics), less the umask;
* never creates the directory of a named target (``--json /no/such/dir/r.json`` is an error naming the directory);
  only the report archive (``--output-dir``, :func:`reserve_unique`) and the login hook's own directories are
  created, each ``0755`` less the umask, set explicitly (a umask of 000 never makes one world-writable);
* removes the temporaries of an interrupted earlier run (a dead process's, in the same directory, ours).

The report archive (``--output-dir``, where default names are reserved and ``--keep-reports`` prunes) is held to a
stricter rule when dl-doctor runs as root: see :func:`open_directory`.
"""

from __future__ import annotations

import errno
import fcntl
import os
import pwd
import re
import secrets
import stat
from typing import Iterable, List, Optional, Tuple, Union

PRIVATE_MODE = 0o600
PUBLIC_MODE = 0o644
DIR_MODE = 0o755
_THROUGH = {"/dev/stdout", "/dev/stderr", "/dev/null"}
_FD_PATH = re.compile(r"^/(?:dev/fd|proc/self/fd)/\d{1,6}$")
_TMP = re.compile(r"^\..{0,200}\.dl-doctor-tmp-(\d{1,10})-[0-9a-f]{8}$")
_USER_NAME = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._-]{0,31}$")
TMP_MARK = ".dl-doctor-tmp-"
MAX_LINK_HOPS = 40
MAX_ENTRIES = 100_000  # a directory scanned for temporaries or old reports: more entries than this are not looked at
# A directory is held by an O_PATH descriptor: it needs no read permission (a drop directory of mode 1733 still
# works), and every *at() call takes it; listing one opens a readable descriptor of its own (_names).
_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_READ_DIR = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


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


def owner_text(uid: int) -> str:
    """``uid 1001 (alice)``: the number always (it is what decides), the name when it is a plain one."""
    try:
        name = pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return f"uid {uid}"
    return f"uid {uid} ({name})" if _USER_NAME.match(name) else f"uid {uid}"


def _not_ours(path: str, uid: int, what: str = "") -> OutputRefused:
    return OutputRefused(path, f"is {what}owned by {owner_text(uid)}, not by this user")


def _uncontrolled(st: os.stat_result, fd: Optional[int] = None) -> Optional[str]:
    """Why another user controls this directory (None: only this user and root do).

    Others control a directory they own, one they may write to without the sticky bit (they can rename what root
    put there), and one a group other than root's (or another user) may write to, by its mode or by its ACL (read
    through ``fd``, the directory's descriptor): the rule sudo and the trust rule apply.
    """
    if st.st_uid not in (0, os.geteuid()):
        return f"owned by {owner_text(st.st_uid)}, not by this user"
    if st.st_mode & stat.S_ISVTX:
        return None  # sticky: others cannot rename or remove what they do not own inside it
    if st.st_mode & stat.S_IWOTH:
        return "writable by every user (and not sticky)"
    if st.st_mode & stat.S_IWGRP and st.st_gid != 0:
        return f"writable by group {st.st_gid} (and not sticky)"
    if fd is not None:
        from dl_doctor.host.trust import acl_writers

        others = [w for w in acl_writers(f"/proc/self/fd/{fd}", follow=True) if w not in ("uid 0", "gid 0")]
        if others:
            return f"writable by {others[0]} through its ACL (and not sticky)"
    return None


def _make_directory(parent: int, name: str, mode: int) -> None:
    """Create ``name`` under ``parent`` with exactly ``mode``: private while it is created, then chmod'ed on its own
    descriptor (the umask never widens or decides it)."""
    os.mkdir(name, 0o700, dir_fd=parent)
    fd = os.open(name, _READ_DIR | os.O_NOFOLLOW, dir_fd=parent)
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _hop(hops: int, path: str) -> int:
    """One more link followed (or one more turn lost to a race): at most MAX_LINK_HOPS, as the kernel's own 40."""
    if hops >= MAX_LINK_HOPS:
        raise OSError(errno.ELOOP, "too many levels of symbolic links", path)
    return hops + 1


def open_directory(path: str, *, create: bool = False, guard: bool = False, mode: Optional[int] = None) -> int:
    """A descriptor for directory ``path``, resolved one component at a time (the caller closes it).

    Symbolic links on the way are followed by hand; ``create`` makes what is missing (``mode``, by default ``0755``
    less the umask). With ``guard``, and when the effective user is root, the directory is the report archive and
    another user may not control where it is: a link on the way must be root's and lie in a directory only root
    controls (else its owner, or whoever may write beside it, chose where root's reports go), and the directory
    reached must be one only root controls (see :func:`_uncontrolled`). Raises :class:`OutputRefused` then.
    """
    guard = guard and os.geteuid() == 0
    mode = (DIR_MODE & ~current_umask()) if mode is None else mode
    pending = [c for c in path.split("/") if c not in ("", ".")]
    pending.reverse()
    where = "/" if path.startswith("/") else "."
    fd = os.open(where, _DIR_FLAGS)
    hops = 0
    try:
        while pending:
            name = pending.pop()
            here = os.path.join(where, name) if where != "." else name
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    _make_directory(fd, name, mode)
                except FileExistsError:
                    hops = _hop(hops, path)  # made by someone else meanwhile: judged on the next turn
                pending.append(name)
                continue
            if stat.S_ISLNK(st.st_mode):
                hops = _hop(hops, path)
                if guard:
                    if st.st_uid not in (0, os.geteuid()):
                        raise _not_ours(here, st.st_uid, "a symbolic link ")
                    why = _uncontrolled(os.fstat(fd), fd)
                    if why:
                        raise OutputRefused(here, f"is a symbolic link in a directory {why}")
                target = os.readlink(name, dir_fd=fd)
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", _DIR_FLAGS)
                    where = "/"
                pending.extend(reversed([c for c in target.split("/") if c not in ("", ".")]))
                continue
            if not stat.S_ISDIR(st.st_mode):
                raise OSError(errno.ENOTDIR, "not a directory", here)
            try:
                new = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                hops = _hop(hops, path)  # replaced by a link since the stat: judge it again
                pending.append(name)
                continue
            os.close(fd)
            fd = new
            where = here  # as named, for messages: "a/.." stays "a/.."
        if guard:
            why = _uncontrolled(os.fstat(fd), fd)
            if why:
                raise OutputRefused(where, f"is a directory {why}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def make_directories(path: str, mode: int) -> None:
    """``os.makedirs`` with an explicit ``mode`` for each directory it creates, whatever the umask."""
    os.close(open_directory(path, create=True, mode=mode))


WRITE_CHUNK = 1 << 20


def _write_fd(fd: int, data: Union[str, bytes]) -> None:
    """Write all of ``data``; text is encoded a piece at a time, so a large report never exists twice in memory (as
    text and as its bytes)."""
    if isinstance(data, str):
        for start in range(0, len(data), WRITE_CHUNK):
            _write_fd(fd, data[start:start + WRITE_CHUNK].encode("utf-8", errors="surrogateescape"))
        return
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _write_through(path: str, data: Union[str, bytes], dir_fd: Optional[int] = None) -> str:
    """Write into a stream that is already there. With ``dir_fd`` the path is a FIFO found in that directory: what
    is opened must still be a FIFO of this user's (it is checked on the descriptor, before a byte is written)."""
    flags = os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    name = path if dir_fd is None else os.path.basename(path)
    if dir_fd is not None:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(name, flags | os.O_NONBLOCK, dir_fd=dir_fd)  # no reader: fails (ENXIO) instead of hanging
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise OutputRefused(path, "is a FIFO that nobody reads")
        if exc.errno == errno.ELOOP:
            raise OutputRefused(path, "changed into a symbolic link while dl-doctor wrote; not following it")
        raise
    try:
        if dir_fd is not None:
            st = os.fstat(fd)
            if not stat.S_ISFIFO(st.st_mode):
                raise OutputRefused(path, "changed from a FIFO into something else while dl-doctor wrote; not "
                                          "writing into it")
            if st.st_uid != os.geteuid():
                raise _not_ours(path, st.st_uid, "a FIFO ")
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


def _names(dir_fd: int, limit: int = MAX_ENTRIES) -> List[str]:
    """The first ``limit`` names in the directory (none when it cannot be listed: a drop directory of mode 1733)."""
    try:
        fd = os.open(".", _READ_DIR, dir_fd=dir_fd)
    except OSError:
        return []
    try:
        with os.scandir(fd) as it:
            return [entry.name for _, entry in zip(range(limit), it)]
    except OSError:
        return []
    finally:
        os.close(fd)


def _own_regular_file(dir_fd: int, name: str) -> bool:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()


def _clean_stale(dir_fd: int, limit: int = MAX_ENTRIES) -> List[str]:
    removed: List[str] = []
    for name in _names(dir_fd, limit):
        m = _TMP.match(name) if TMP_MARK in name else None
        if not m or int(m.group(1)) == os.getpid() or _pid_alive(int(m.group(1))):
            continue
        if _own_regular_file(dir_fd, name):
            try:
                os.unlink(name, dir_fd=dir_fd)
                removed.append(name)
            except OSError:
                continue
    return removed


def clean_stale_temporaries(directory: str, limit: int = MAX_ENTRIES) -> List[str]:
    """Remove our temporaries left by a run that was killed (its process is gone). Returns the names removed."""
    try:
        fd = open_directory(directory)
    except OSError:
        return []
    try:
        return _clean_stale(fd, limit)
    finally:
        os.close(fd)


def _split(path: str) -> Tuple[str, str]:
    """The directory to open and the name in it; a path that names no file in a directory is refused."""
    directory, name = os.path.split(path)
    if name in ("", ".", ".."):
        raise OutputRefused(path, "is a directory")
    return directory or ".", name


def _judge_target(path: str, st: os.stat_result) -> None:
    """Refuse what is not a regular file of this user's (a FIFO of this user's is judged by the caller)."""
    kind = st.st_mode
    if stat.S_ISLNK(kind):
        raise OutputRefused(path, "is a symbolic link; dl-doctor does not follow or replace links: name the "
                                  "file it points to")
    if stat.S_ISDIR(kind):
        raise OutputRefused(path, "is a directory")
    if stat.S_ISCHR(kind):
        raise OutputRefused(path, "is a character device; dl-doctor writes through only /dev/stdout, "
                                  "/dev/stderr, /dev/null, /dev/fd/N and FIFOs")
    if st.st_uid != os.geteuid():
        raise _not_ours(path, st.st_uid)
    if not stat.S_ISREG(kind) and not stat.S_ISFIFO(kind):
        raise OutputRefused(path, "is not a regular file (a block device or a socket); not replacing it")


def missing_directory(path: str) -> Optional[str]:
    """Why the directory ``path`` would be written into cannot take it: it does not exist or is not a directory
    (None: it is one, or ``path`` writes through). Named targets' directories are never created."""
    if path in _THROUGH or _FD_PATH.match(path):
        return None
    directory = os.path.dirname(path) or "."
    if os.path.isdir(directory):
        return None
    if os.path.lexists(directory) or any(os.path.exists(p) and not os.path.isdir(p) for p in _parents(directory)):
        return f"{directory} is not a directory"
    return f"directory {directory} does not exist"


def _parents(directory: str) -> List[str]:
    out: List[str] = []
    while directory and directory not in ("/", "."):
        directory = os.path.dirname(directory)
        if directory:
            out.append(directory)
    return out


def write_file(path: str, data: Union[str, bytes], *, private: bool = True, mode: Optional[int] = None,
               guard_dir: bool = False, create_dir: bool = False) -> str:
    """Write ``data`` to ``path`` safely (see the module's text). Returns "written" or "written through".

    ``mode`` replaces the private/public mode less the umask (the login hook's files must be readable by every
    shell whatever the umask of the image bake); ``guard_dir`` holds the directory to the report archive's rule.
    The directory must exist (``FileNotFoundError``/``NotADirectoryError`` naming it) unless ``create_dir``.
    """
    if path in _THROUGH or _FD_PATH.match(path):
        return _write_through(path, data)
    directory, name = _split(path)
    mode = ((PRIVATE_MODE if private else PUBLIC_MODE) & ~current_umask()) if mode is None else mode
    try:
        dir_fd = open_directory(directory, create=create_dir, guard=guard_dir)
    except (FileNotFoundError, NotADirectoryError) as exc:
        why = missing_directory(path) or f"directory {directory}: {exc.strerror or exc}"
        raise type(exc)(exc.errno, why, path) from None
    try:
        try:
            st: Optional[os.stat_result] = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None:
            _judge_target(path, st)
            if stat.S_ISFIFO(st.st_mode):
                return _write_through(path, data, dir_fd=dir_fd)
        _clean_stale(dir_fd)
        _replace(dir_fd, path, name, data, mode)
    finally:
        os.close(dir_fd)
    return "written"


def _replace(dir_fd: int, path: str, name: str, data: Union[str, bytes], mode: int) -> None:
    """Write a fresh temporary beside ``name`` and rename it over ``name`` (checked again just before)."""
    for _ in range(16):
        tmp = f".{name[:100]}{TMP_MARK}{os.getpid()}-{secrets.token_hex(4)}"
        try:
            fd = os.open(tmp, _NEW_FILE, 0o600, dir_fd=dir_fd)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - 16 collisions of 32 random bits
        raise OSError(errno.EEXIST, "cannot create a temporary file", os.path.dirname(path) or ".")
    try:
        try:
            _write_fd(fd, data)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        try:  # the target may have changed while we wrote
            now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if not stat.S_ISREG(now.st_mode):
                raise OutputRefused(path, "changed into something that is not a regular file while dl-doctor "
                                          "wrote; not replacing it")
            if now.st_uid != os.geteuid():
                raise _not_ours(path, now.st_uid)
        except FileNotFoundError:
            pass
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def reserve_unique(base: str, suffix: str, limit: int = 1000) -> str:
    """The first of ``base``, ``base-2``, ``base-3``... for which ``base+suffix`` could be created (it is, empty).

    Two runs writing into one directory in the same second get different names; the placeholder is replaced by
    :func:`write_file` (it is a regular file of ours). The directory is the report archive: it is created if need
    be and held to its rule (:func:`open_directory` with ``guard``).
    """
    directory, name = _split(base)
    dir_fd = open_directory(directory, create=True, guard=True)
    try:
        for n in range(1, limit + 1):
            candidate = name if n == 1 else f"{name}-{n}"
            try:
                os.close(os.open(candidate + suffix, _NEW_FILE, 0o600, dir_fd=dir_fd))
                return base if n == 1 else f"{base}-{n}"
            except FileExistsError:
                continue
    finally:
        os.close(dir_fd)
    raise OSError(errno.EEXIST, f"{limit} reports with this name already exist", base + suffix)


_REPORT_NAME = re.compile(r"^dl-doctor-.{1,120}-(\d{8}T\d{6}Z)(?:-(\d{1,4}))?\.(json|html)$")


def prune_reports(directory: str, keep: int, protect: Iterable[str] = ()) -> List[str]:
    """Keep the newest ``keep`` runs' reports (``dl-doctor-HOST-STAMP[-N].{json,html}``) in ``directory``.

    Only this user's regular files are removed, by name relative to the directory's descriptor, in a directory held
    to the report archive's rule: a file another user put there, or a link to root's own archive, is never pruned.
    """
    protected = {os.path.abspath(p) for p in protect}
    try:
        dir_fd = open_directory(directory, guard=True)
    except FileNotFoundError:
        return []
    try:
        return _prune(dir_fd, directory, keep, protected)
    finally:
        os.close(dir_fd)


def _prune(dir_fd: int, directory: str, keep: int, protected: set) -> List[str]:
    runs: dict = {}
    for name in _names(dir_fd):
        m = _REPORT_NAME.match(name)
        if m and _own_regular_file(dir_fd, name):
            key = (m.group(1), int(m.group(2) or 1), name.rsplit(".", 1)[0])
            runs.setdefault(key, []).append(name)
    removed: List[str] = []
    for key in sorted(runs, reverse=True)[max(0, keep):]:
        for name in runs[key]:
            path = os.path.join(directory, name)
            if os.path.abspath(path) in protected:
                continue
            try:
                os.unlink(name, dir_fd=dir_fd)
                removed.append(path)
            except OSError:
                pass
    return removed
