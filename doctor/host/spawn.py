"""The one way dl-doctor starts a program: every tool, every interpreter, the preflight's child dl-doctor.

Running as root on a machine other people use, everything that decides what a child executes must be root's
(doctor.trust decides; this module enforces it between the decision and the exec):

* **where a program is looked up**: as root only in :data:`SAFE_DIRS` and the absolute ``PATH`` directories that pass
  the trust rule (so a root-owned ``/opt/slurm/bin`` works); never an empty or relative ``PATH`` entry, which would
  mean the current directory. A program that is not found there is not run (ENOENT), never handed to ``execvp``.
* **what is executed is what was checked**: the program is opened once, its descriptor compared (device and inode)
  with the file the trust rule judged, and the child execs that descriptor (``/proc/self/fd/N``), so a link swapped
  after the check changes nothing. ``argv[0]`` stays the path the caller named (a venv's ``python`` finds its
  ``pyvenv.cfg`` through it). A ``#!`` script's interpreter is held to the rule too.
* **the environment**: :func:`doctor.trust.scrubbed_environ` (no secrets, proxies, ``BASH_ENV``); as root, each entry
  of ``PYTHONPATH``, ``PYTHONUSERBASE``, ``LD_LIBRARY_PATH`` and ``LD_PRELOAD`` is kept only if it passes the trust
  rule, and the child's ``PATH`` is the trusted search path. What was withheld is returned, for the facts.
* **the current directory** is ``/``, and an interpreter runs isolated (:data:`ISOLATED_FLAGS`): no current directory
  or script directory on its module path, no ``PYTHON*`` variables, no user site. :data:`PYTHON_PRELUDE` then adds
  back, inside the child, what the session would have given it (the ``PYTHONPATH`` entries that survived, the user
  site where Python would enable it), so the live facts stay those of the person's environment.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from dl_doctor.host import trust

# Where root looks programs up besides the trusted absolute PATH entries (the FHS system directories).
SAFE_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
# Variables that name files or directories a child loads code from: as root, each entry must pass the trust rule.
PATH_LIST_VARS = ("PYTHONPATH", "PYTHONUSERBASE", "LD_LIBRARY_PATH", "LD_PRELOAD")
# -I: isolated mode (Python 3.4+). Python 2.7 lacks it: -E -s there (and the current directory, /, is root's).
ISOLATED_FLAGS = ("-I",)
LEGACY_ISOLATED_FLAGS = ("-E", "-s")
MAX_SHEBANG = 256
_OPEN_PROGRAM = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)

# Run first in every interpreter dl-doctor starts (Python 2.7 and 3.x syntax): -I dropped PYTHONPATH and the user
# site; add back what this session would have given the interpreter, in Python's own order (PYTHONPATH first, the
# user site before the site-packages), so what the probe sees imported is what the person's own run imports.
PYTHON_PRELUDE = r'''
def _dld_session_path():
    import os, sys
    try:
        import site
    except ImportError:
        return
    env = os.environ
    alone = False
    cfg = os.path.join(sys.prefix, "pyvenv.cfg")
    if getattr(sys, "base_prefix", sys.prefix) != sys.prefix and os.path.isfile(cfg):
        alone = True
        try:
            for line in open(cfg):
                key, _, value = line.partition("=")
                if key.strip().lower() == "include-system-site-packages" and value.strip().lower() == "true":
                    alone = False
        except (IOError, OSError):
            pass
    same_ids = hasattr(os, "getuid") and os.getuid() == os.geteuid() and os.getgid() == os.getegid()
    if not env.get("PYTHONNOUSERSITE") and not alone and same_ids and hasattr(site, "getusersitepackages"):
        user_site = site.getusersitepackages()
        site.ENABLE_USER_SITE = True
        if os.path.isdir(user_site):
            before = list(sys.path)
            site.addsitedir(user_site)
            added = [p for p in sys.path if p not in before]
            sites = set(site.getsitepackages()) if hasattr(site, "getsitepackages") else set()
            at = next((i for i, p in enumerate(before) if p in sites), len(before))
            sys.path[:] = before[:at] + added + before[at:]
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p.startswith("/") and p not in sys.path]
    sys.path[0:0] = extra
_dld_session_path()
del _dld_session_path
'''


class UntrustedProgram(OSError):
    """The trust rule forbids running this program (or its ``#!`` interpreter); ``reason`` says why."""

    def __init__(self, program: str, reason: str):
        super().__init__(errno.EPERM, f"not run: {reason}", program)
        self.reason = reason


def search_dirs(path_value: Optional[str], as_root: bool) -> List[str]:
    """The directories a program name is looked up in: the session ``PATH``'s absolute entries (as root, those that
    pass the trust rule), then, as root, the system directories. Never an empty or relative entry."""
    out: List[str] = []
    for entry in (path_value if path_value is not None else os.defpath).split(os.pathsep):
        entry = entry.rstrip("/") or ("/" if entry else "")
        if not entry.startswith("/") or entry in out:
            continue
        if as_root and not trust.check([entry]).allowed:
            continue
        out.append(entry)
    if as_root:
        out += [d for d in SAFE_DIRS if d not in out]
    return out


def which(name: str, path_value: Optional[str], as_root: bool,
          dirs: Optional[Sequence[str]] = None) -> Optional[str]:
    """The absolute path of program ``name`` on the search path (:func:`search_dirs`, or ``dirs`` where the caller
    computed it already), or ``None``."""
    if "/" in name:
        return name
    if not name or name in (".", ".."):
        return None
    for directory in dirs if dirs is not None else search_dirs(path_value, as_root):
        candidate = f"{directory}/{name}" if directory != "/" else f"/{name}"
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def withhold_untrusted(env: Dict[str, str]) -> Tuple[Dict[str, str], List[str]]:
    """As root: keep only the entries of :data:`PATH_LIST_VARS` that pass the trust rule (an entry that does not exist
    is dropped too: another user might create it later). Returns the new environment and what was withheld, one line
    per entry (``"PYTHONPATH /home/a/lib: /home/a/lib (directory) is owned by uid 1001, not root"``)."""
    out = dict(env)
    withheld: List[str] = []
    for name in PATH_LIST_VARS:
        value = env.get(name)
        if value is None:
            continue
        separators = (":", " ") if name == "LD_PRELOAD" else (os.pathsep,)
        entries = [value]
        for sep in separators:
            entries = [part for item in entries for part in item.split(sep)]
        kept = []
        for entry in entries:
            if not entry:
                if value:
                    withheld.append(f"{name}: an empty entry (the current directory)")
                continue
            if not entry.startswith("/"):
                withheld.append(f"{name} {entry}: a relative entry (resolved against the current directory)")
                continue
            verdict = trust.check([entry])
            if verdict.allowed:
                kept.append(entry)
            else:
                withheld.append(f"{name} {entry}: {verdict.reason}")
        if kept:
            out[name] = (":" if name != "PYTHONPATH" else os.pathsep).join(kept)
        else:
            out.pop(name, None)
    return out, withheld[:64]


@dataclass
class Prepared:
    """A program ready to start: the descriptor to exec (or ``None``: exec ``executable`` by path), the environment,
    and what the checks said."""

    argv: List[str]
    executable: str
    fd: Optional[int]
    env: Dict[str, str]
    verdict: trust.Verdict
    withheld: List[str] = field(default_factory=list)
    run_as: Optional[Tuple[int, int, str, str]] = None  # uid, gid, home, user name

    def close(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None


def _shebang(fd: int) -> Optional[str]:
    """The interpreter a ``#!`` script names (its first word), or ``None`` for a binary."""
    try:
        head = os.pread(fd, MAX_SHEBANG, 0)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].strip()
    word = line.split(None, 1)[0] if line else b""
    return os.fsdecode(word) if word else ""


def _open_checked(path: str, verdict: trust.Verdict) -> Optional[int]:
    """Open the program the rule judged and make sure it is still that file; ``None`` when it cannot be read (a user's
    execute-only binary outside a root run: then it is executed by path, as the user could)."""
    target = verdict.target or path
    flags = _OPEN_PROGRAM | (getattr(os, "O_NOFOLLOW", 0) if verdict.target else 0)
    try:
        fd = os.open(target, flags)
    except PermissionError:
        if verdict.target:
            raise
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EACCES, "not a regular file", path)
        if verdict.identity is not None and (st.st_dev, st.st_ino) != verdict.identity:
            raise UntrustedProgram(path, f"{path} changed while it was being checked")
        os.set_inheritable(fd, False)
    except BaseException:
        os.close(fd)
        raise
    return fd


def prepare(argv: Sequence[str], environ: Mapping[str, str], *, euid: Optional[int], startup_paths: Sequence[str] = (),
            requested: bool = False, run_as_owner: bool = False, search_path: Optional[str] = None,
            dirs: Optional[Sequence[str]] = None) -> Prepared:
    """Find, check and open the program of ``argv``; raise :class:`FileNotFoundError` when it is not on the search
    path, :class:`UntrustedProgram` when the rule forbids it. ``environ`` is the environment to derive the child's
    from; ``search_path`` the ``PATH`` to look the program up in (default: ``environ``'s), or ``dirs`` its
    :func:`search_dirs`, computed once by the caller."""
    argv = [str(a) for a in argv]
    as_root = euid == 0
    path_value = search_path if search_path is not None else environ.get("PATH", os.defpath)
    named = argv[0]
    program = which(named, path_value, as_root, dirs)
    if program is None:
        raise FileNotFoundError(errno.ENOENT, "not found on the trusted search path" if as_root else
                                "not found on PATH", named)
    program = os.path.abspath(program)  # a relative path means dl-doctor's own current directory, not the child's
    if not os.path.lexists(program):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    verdict = trust.decide([program, *startup_paths], euid, requested=requested, run_as_owner=run_as_owner)
    if not verdict.allowed:
        raise UntrustedProgram(program, verdict.reason or "untrusted")
    fd = _open_checked(program, verdict)
    try:
        interpreter = _shebang(fd) if fd is not None else None
        if interpreter is not None and as_root:
            interp = os.path.join("/", interpreter)
            judged = trust.decide([interp], euid, requested=requested, run_as_owner=run_as_owner)
            if not judged.allowed or (judged.run_as is not None and judged.run_as != verdict.run_as):
                raise UntrustedProgram(program, f"its interpreter: {judged.reason or 'another owner'}")
        run_as = None
        home = user = None
        if verdict.run_as is not None:
            import pwd

            try:
                entry = pwd.getpwuid(verdict.run_as)
                home, user, gid = entry.pw_dir, entry.pw_name, entry.pw_gid
            except KeyError:
                home, user, gid = "/", str(verdict.run_as), verdict.run_as
            run_as = (verdict.run_as, gid, home, user)
        env = trust.scrubbed_environ(environ, home=home, user=user)
        withheld: List[str] = []
        if as_root:
            env, withheld = withhold_untrusted(env)
            env["PATH"] = os.pathsep.join(search_dirs(env.get("PATH"), True))
        executable = program
        if fd is not None:
            if os.path.isdir("/proc/self/fd"):
                executable = f"/proc/self/fd/{fd}"
            else:
                executable = verdict.target or program  # every directory to it is root's: it cannot be swapped
        return Prepared([named if "/" in named else program, *argv[1:]], executable, fd, env, verdict, withheld,
                        run_as)
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise


def popen_kwargs(prepared: Prepared) -> Dict[str, Any]:
    """The ``subprocess.Popen`` arguments that carry out ``prepared`` (besides the pipes)."""
    kwargs: Dict[str, Any] = {"executable": prepared.executable, "env": prepared.env, "cwd": "/",
                                 "close_fds": True, "start_new_session": True}
    if prepared.fd is not None and prepared.executable.startswith("/proc/self/fd/"):
        kwargs["pass_fds"] = (prepared.fd,)
    if prepared.run_as is not None:
        uid, gid, _, _ = prepared.run_as
        kwargs.update(user=uid, group=gid, extra_groups=[])
    return kwargs


def python_argv(python: str, script: str, args: Sequence[str] = (), legacy: bool = False) -> List[str]:
    """The command line that runs ``script`` isolated in ``python``, with :data:`PYTHON_PRELUDE` first."""
    flags = LEGACY_ISOLATED_FLAGS if legacy else ISOLATED_FLAGS
    return [python, *flags, "-c", PYTHON_PRELUDE + script, *args]


def rejects_isolated_flag(returncode: Optional[int], stderr: str) -> bool:
    """A Python too old for ``-I`` (2.7) says so and exits 2: run it again with ``-E -s``."""
    return returncode == 2 and "nknown option" in stderr and "-I" in stderr
