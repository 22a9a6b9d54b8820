"""The trust rule: which programs a dl-doctor run may execute, and as whom.

dl-doctor runs as root (the daily timer, ``sudo dl-doctor``, image bakes) on machines that other people log into,
and it finds interpreters in their home directories. Running such a file as root would run their code as root. So,
when the effective user is root, a program is run only when *everything that decides what it executes* is
controlled by root alone:

* the program file (after every symbolic link), owned by root and writable by nobody else;
* every directory on the way to it, and to each link it passes, owned by root and not writable by group or others
  (the rule sudo applies to its own paths); a sticky world-writable directory such as ``/tmp`` is accepted on the
  way, because others cannot rename what they do not own there, and a group-writable one only when the group is
  root's (gid 0);
* for an interpreter, what it executes at start-up: the environment's prefix and ``pyvenv.cfg``, each
  site-packages directory, every ``.pth`` file there and the modules their ``import`` lines name, and
  ``sitecustomize``/``usercustomize`` (see :func:`python_startup_paths`).

Otherwise the program is not run; the probe inspects the environment's files statically and the report says why.
``--python PATH`` names an interpreter the person running dl-doctor chose: it is run whatever its owner, but, like
every program dl-doctor starts, with a scrubbed environment (:func:`scrubbed_environ`). With ``--run-as-owner``, an
interpreter whose files are controlled by one other user (and root) is run as that user instead, with that user's
uid, primary gid and no supplementary groups, which keeps the live facts without lending it root.

Not root: the rule does not apply (a user runs their own files; another user's interpreter runs with the caller's
own privilege, as it would if they started it themselves).

This module decides; :meth:`doctor.host.Host.run` enforces it for every command any probe runs.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import struct
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

MAX_LINK_HOPS = 40
MAX_PTH_BYTES = 64 * 1024
MAX_STARTUP_PATHS = 512

# Variables a child needs to behave as it does for the user (where libraries and modules come from); everything else,
# and anything with a secret-looking name, stays behind.
_KEEP_EXACT = {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "LD_LIBRARY_PATH", "LD_PRELOAD",
               "VIRTUAL_ENV", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_MODULE_LOADING",
               "SLURM_CONF"}  # scontrol (--engine slurm --drain) finds its cluster through it
_KEEP_PREFIXES = ("LC_", "PYTHON", "CUDA_", "NVIDIA_", "CONDA_", "TORCH_", "XLA_", "TF_", "JAX_", "NCCL_", "FI_",
                  "OMP_", "MKL_", "OPENBLAS_", "CUDNN_", "ORT_", "TRITON_")


@dataclass
class Verdict:
    """Whether a program may be run, and as whom (``run_as`` None = as this process)."""

    allowed: bool
    reason: Optional[str] = None
    run_as: Optional[int] = None
    owners: Set[int] = field(default_factory=set)
    checked: int = 0
    # the program as judged: the path reached after every link, and its (st_dev, st_ino); the spawner opens that
    # path and execs the descriptor only if it is still the same file (doctor.spawn)
    target: Optional[str] = None
    identity: Optional[Tuple[int, int]] = None

    def to_dict(self) -> Dict[str, object]:
        out: Dict[str, object] = {"allowed": self.allowed, "checked_paths": self.checked}
        if self.reason:
            out["reason"] = self.reason
        if self.run_as is not None:
            out["run_as_uid"] = self.run_as
        return out


class _Untrusted(Exception):
    def __init__(self, reason: str, owner: Optional[int] = None, owner_only: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.owner = owner
        # True when the only problem is that one non-root user owns (and alone may write) the object
        self.owner_only = owner_only


# POSIX ACLs (acl_ea.h): the access ACL is a 4-byte version header, then 8-byte entries (tag, perm, id).
_ACL_XATTR = "system.posix_acl_access"
_ACL_USER, _ACL_GROUP, _ACL_MASK = 0x02, 0x08, 0x10
_ACL_WRITE = 0x02
MAX_ACL_BYTES = 64 * 1024


def acl_writers(path: str, follow: bool = False) -> List[str]:
    """Who, besides the owner and the owning group, may write ``path`` through its access ACL: ``["uid 1001",
    "gid 50"]`` (named entries with the write bit that the mask leaves in force). ``[]`` when there is no ACL or the
    file system has none. Symbolic links are not followed (a link has no ACL of its own) unless ``follow``
    (``/proc/self/fd/N``, for a descriptor opened with ``O_PATH``)."""
    try:
        raw = os.getxattr(path, _ACL_XATTR, follow_symlinks=follow)
    except (OSError, AttributeError):
        return []  # no ACL (ENODATA), no ACL support (ENOTSUP), or no xattrs on this platform
    raw = raw[:MAX_ACL_BYTES]
    entries = [struct.unpack_from("<HHI", raw, off) for off in range(4, len(raw) - 7, 8)]
    mask = next((perm for tag, perm, _ in entries if tag == _ACL_MASK), _ACL_WRITE)
    out = []
    for tag, perm, ident in entries:
        if perm & _ACL_WRITE and mask & _ACL_WRITE:
            if tag == _ACL_USER:
                out.append(f"uid {ident}")
            elif tag == _ACL_GROUP:
                out.append(f"gid {ident}")
    return out


def _judge(path: str, st: os.stat_result, allowed_owners: Set[int], what: str) -> None:
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        # a link's mode bits are always 0777 and mean nothing; only its owner can replace it (in a sticky directory)
        if st.st_uid not in allowed_owners:
            raise _Untrusted(f"{path} ({what}) is owned by uid {st.st_uid}, not root", owner=st.st_uid,
                             owner_only=True)
        return
    # Named ACL entries that grant write: a user (other than root and the allowed owners) or a group other than
    # root's controls the object as surely as the mode bits' "others" would.
    acl = [w for w in acl_writers(path)
           if not (w.startswith("uid ") and int(w[4:]) in allowed_owners) and w != "gid 0"]
    if st.st_uid not in allowed_owners:
        # Owned by another user: only they (and root) may change it, unless group/others may write too
        writable_by_others = (bool(mode & stat.S_IWOTH) or (bool(mode & stat.S_IWGRP) and st.st_gid != 0)
                              or any(w != f"uid {st.st_uid}" for w in acl))
        raise _Untrusted(f"{path} ({what}) is owned by uid {st.st_uid}, not root", owner=st.st_uid,
                         owner_only=not writable_by_others)
    if stat.S_ISDIR(mode) and (mode & stat.S_ISVTX):
        return  # sticky: others cannot replace what they do not own inside it
    if mode & stat.S_IWOTH:
        raise _Untrusted(f"{path} ({what}) is writable by every user")
    if mode & stat.S_IWGRP and st.st_gid != 0:
        raise _Untrusted(f"{path} ({what}) is writable by group {st.st_gid}")
    if acl:
        raise _Untrusted(f"{path} ({what}) is writable by {acl[0]} through its ACL")


def _walk(path: str, allowed_owners: Set[int], seen: Dict[str, None], counter: List[int]) -> Tuple[str, os.stat_result]:
    """Check every directory from / to ``path``, each symbolic link on the way and the object itself, following links
    by hand; return the path reached (no link left in it) and its ``lstat``, for the caller to open and compare."""
    if not path.startswith("/"):
        path = os.path.abspath(path)
    pending = [c for c in path.split("/") if c]
    pending.reverse()
    current = "/"
    hops = 0
    st = os.lstat("/")
    _judge("/", st, allowed_owners, "directory")
    counter[0] += 1
    while pending:
        comp = pending.pop()
        if comp == ".":
            continue
        if comp == "..":
            current = os.path.dirname(current) or "/"
            st = os.lstat(current)
            continue
        candidate = os.path.join(current, comp)
        st = os.lstat(candidate)
        counter[0] += 1
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > MAX_LINK_HOPS:
                raise OSError(errno.ELOOP, "too many levels of symbolic links", path)
            # Whoever owns the link controls where it leads: in a sticky directory its owner may replace it, so a
            # link another user owns is that user's choice of program (its directory was judged already).
            if candidate not in seen:
                _judge(candidate, st, allowed_owners, "symbolic link")
                seen[candidate] = None
            target = os.readlink(candidate)
            if target.startswith("/"):
                current = "/"
            pending.extend(reversed([c for c in target.split("/") if c]))
            continue
        what = "directory" if stat.S_ISDIR(st.st_mode) else "file"
        if candidate not in seen:
            _judge(candidate, st, allowed_owners, what)
            seen[candidate] = None
        current = candidate
    return current, st


def check(paths: Sequence[str], allowed_owners: Iterable[int] = (0,)) -> Verdict:
    """Judge ``paths`` (the program first, then what it executes at start-up) for a run by ``allowed_owners``."""
    owners = set(allowed_owners)
    seen: Dict[str, None] = {}
    counter = [0]
    target: Optional[str] = None
    identity: Optional[Tuple[int, int]] = None
    for index, path in enumerate(paths[:MAX_STARTUP_PATHS]):
        try:
            reached, st = _walk(path, owners, seen, counter)
            if index == 0:
                target, identity = reached, (st.st_dev, st.st_ino)
        except _Untrusted as exc:
            verdict = Verdict(False, exc.reason, checked=counter[0])
            if exc.owner is not None and exc.owner_only:
                verdict.owners = {exc.owner}
            return verdict
        except FileNotFoundError:
            if index == 0:
                return Verdict(False, f"{path} does not exist", checked=counter[0])
            continue  # an optional start-up file that is not there executes nothing
        except OSError as exc:
            return Verdict(False, f"{path} cannot be checked: {exc.strerror or exc}", checked=counter[0])
    if len(paths) > MAX_STARTUP_PATHS:
        return Verdict(False, f"more than {MAX_STARTUP_PATHS} start-up files to check", checked=counter[0])
    return Verdict(True, checked=counter[0], target=target, identity=identity)


def decide(paths: Sequence[str], euid: Optional[int], *, requested: bool = False,
           run_as_owner: bool = False) -> Verdict:
    """The rule: not root → run; root → run if root controls every path; else (opt-in) as their single owner."""
    if euid != 0:
        return Verdict(True, None)
    if requested:
        verdict = check(paths)
        # the person running dl-doctor named it: run it, but say what they chose
        return Verdict(True, None if verdict.allowed else f"named with --python although {verdict.reason}",
                       checked=verdict.checked)
    verdict = check(paths)
    if verdict.allowed or not run_as_owner or len(verdict.owners) != 1:
        return verdict
    owner = next(iter(verdict.owners))
    as_owner = check(paths, allowed_owners=(0, owner))
    if as_owner.allowed:
        return Verdict(True, f"run as its owner, uid {owner} (--run-as-owner)", run_as=owner,
                       checked=as_owner.checked, target=as_owner.target, identity=as_owner.identity)
    return as_owner


# -- what an interpreter executes at start-up ------------------------------------------------------------------------

_PTH_IMPORT = re.compile(r"^\s*import[ \t]+([A-Za-z_][A-Za-z0-9_]{0,100})")
_PTH_DUNDER = re.compile(r"""__import__\(\s*['"]([A-Za-z_][A-Za-z0-9_]{0,100})['"]""")


def python_startup_paths(host, prefix: Optional[str], site_dirs: Sequence[str]) -> List[str]:
    """Files and directories that a Python interpreter of ``prefix`` executes before any script runs.

    ``host`` is a live :class:`~doctor.host.Host`; what cannot be listed is left out (it executes nothing).
    """
    out: List[str] = []
    if prefix:
        out += [prefix, f"{prefix}/pyvenv.cfg"]
    for site in site_dirs:
        out.append(site)
        names = host.listdir(site)
        for name in names:
            if name.endswith(".pth"):
                pth = f"{site}/{name}"
                out.append(pth)
                try:
                    text = host.read_text(pth, MAX_PTH_BYTES)
                except OSError:
                    continue
                for line in text.splitlines():
                    if not line.lstrip().startswith("import"):
                        continue
                    for module in _PTH_IMPORT.findall(line) + _PTH_DUNDER.findall(line):
                        out += [f"{site}/{module}.py", f"{site}/{module}"]
        for module in ("sitecustomize", "usercustomize"):
            if f"{module}.py" in names or module in names:
                out += [f"{site}/{module}.py", f"{site}/{module}"]
    return list(dict.fromkeys(out))


# Never handed on, whatever their prefix: a shell's start-up file (BASH_ENV, ENV), proxies (their URLs carry
# passwords; CONDA_PROXY_SERVERS_* is kept by the CONDA_ prefix otherwise).
_NEVER = {"BASH_ENV", "ENV"}
_NEVER_PARTS = ("PROXY",)


def scrubbed_environ(environ: Mapping[str, str], home: Optional[str] = None, user: Optional[str] = None) -> Dict[str, str]:
    """The environment a child gets: what decides how libraries and modules load, never a secret.

    A variable is dropped when its name looks secret, names a proxy or a shell start-up file, or when its value holds
    something the redaction rules mask (a channel token in ``CONDA_CHANNELS``, a password in a URL): the child needs
    none of them to show how libraries load, and ``--run-as-owner`` would hand them to another user."""
    from dl_doctor.redact import Redactor, looks_secret_name

    red = Redactor()
    out = {}
    for k, v in environ.items():
        if not (k in _KEEP_EXACT or k.startswith(_KEEP_PREFIXES)) or k in _NEVER or looks_secret_name(k):
            continue
        if any(part in k.upper() for part in _NEVER_PARTS) or red.text(v) != v:
            continue
        out[k] = v
    out.setdefault("PATH", os.defpath)
    if home is not None:
        out["HOME"] = home
    if user is not None:
        out["USER"] = out["LOGNAME"] = user
    return out
