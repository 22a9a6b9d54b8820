"""Every Python environment on the host: discovery, static inspection, a live probe, optional deep import,
and which CUDA libraries the framework would really load.

Static inspection reads files only (dist-info, conda-meta, torch/version.py, wheel RECORDs, ELF dynamic
sections) and works under --sysroot. The live probe runs a stdlib-only script in each interpreter (valid on
Python 3.6, RHEL 8's platform-python) and never imports the frameworks; --deep does, in a subprocess with a
timeout, and records what was really mapped (/proc/self/maps).
"""

from __future__ import annotations

import json
import posixpath
import re
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from dl_doctor.readers.consumers import lib_version
from dl_doctor.host import Host, UntrustedCommand
from dl_doctor.probes import ProbeContext, probe
from dl_doctor.host.trust import python_startup_paths
from dl_doctor.util.workers import map_daemon

DEFAULT_ENV_LIMIT = 32
FRAMEWORKS = ("torch", "torchvision", "torchaudio", "tensorflow", "jax", "jaxlib", "deepspeed", "apex", "xformers",
              "flash-attn", "triton", "numpy")
# Key CUDA libraries a framework loads, by soname prefix.
KEY_LIBS = {"cudart": "libcudart.so", "cublas": "libcublas.so", "cudnn": "libcudnn.so", "nccl": "libnccl.so",
            "nvjitlink": "libnvJitLink.so", "cusparse": "libcusparse.so"}
CONDA_ROOT_NAMES = ("anaconda3", "miniconda3", "miniforge3", "mambaforge", "conda")
SKIP_DIRS = {"node_modules", ".cache", "site-packages", "dist-packages", ".git", "proc", "sys", "__pycache__", "pkgs"}
_DIST = re.compile(r"^(?P<name>[A-Za-z0-9_.]+?)-(?P<version>[^-]+?)\.(dist-info|egg-info)$")
# One line of torch/version.py (`cuda: Optional[str] = '12.4'`), matched per line (lines are capped): no part of
# the pattern can scan past its line, and the annotation cannot overlap the spaces around it.
_VERSION_PY_LINE = re.compile(r"""(__version__|cuda|git_version)[ \t]*(?::[^=\n]{0,200})?=[ \t]*(['"]?)([^'"\n]{0,200})\2[ \t]*""")
MAX_VERSION_LINE = 1024
_PY_DIR = re.compile(r"^python(3\.\d+)$")
_PRELOAD_ITEM = re.compile(r"""\(\s*["'](\w+)["']\s*,\s*["'](lib[^"']+)["']\s*\)""")
_PRELOAD_DICT_ITEM = re.compile(r"""["'](\w+)["']\s*:\s*["'](lib[^"']+)["']""")

# Runs inside each interpreter: stdlib only, Python 3.6 syntax, imports no framework.
LIVE_SCRIPT = r"""
import os, site, sys
try:
    import importlib.util as iu
except ImportError:
    iu = None
def origin(name):
    try:
        spec = iu.find_spec(name) if iu else None
        return spec.origin if spec else None
    except Exception as exc:
        return "error: %s" % exc
sites = []
try:
    sites = list(site.getsitepackages())
except Exception:
    pass
pth = []
for d in sites + [getattr(site, "USER_SITE", None) or ""]:
    try:
        pth += [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(".pth")]
    except OSError:
        pass
doc = {
    "version": "%d.%d.%d" % sys.version_info[:3], "executable": sys.executable, "prefix": sys.prefix,
    "base_prefix": getattr(sys, "base_prefix", sys.prefix), "sys_path": sys.path,
    "user_site": getattr(site, "USER_SITE", None), "user_site_enabled": bool(getattr(site, "ENABLE_USER_SITE", False)),
    "site_packages": sites, "pythonpath": os.environ.get("PYTHONPATH"), "pth_files": pth,
    "origins": dict((n, origin(n)) for n in ("torch", "numpy", "tensorflow", "jax")),
}
# JSON written by hand for the only types above (importing json costs this interpreter a third of its start); the
# json module writes anything else, and Python 2's byte strings
def _q(s):
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"' or ch == '\\':
            out.append('\\' + ch)
        elif 0x20 <= o <= 0x7e:
            out.append(ch)
        elif o > 0xffff:
            o -= 0x10000
            out.append('\\u%04x\\u%04x' % (0xd800 | (o >> 10), 0xdc00 | (o & 0x3ff)))
        else:
            out.append('\\u%04x' % o)
    out.append('"')
    return "".join(out)
def _enc(v):
    if v is None or v is True or v is False:
        return {None: "null", True: "true", False: "false"}[v]
    if type(v) is str:
        return _q(v)
    if type(v) is list:
        return "[" + ", ".join([_enc(x) for x in v]) + "]"
    if type(v) is dict and all(type(k) is str for k in v):
        return "{" + ", ".join([_q(k) + ": " + _enc(x) for k, x in v.items()]) + "}"
    raise TypeError(type(v).__name__)
line = None
if sys.version_info[0] >= 3:
    try:
        line = _enc(doc)
    except Exception:
        line = None
if line is None:
    import json
    line = json.dumps(doc)
print(line)
"""

# --deep: import the framework for real, in its own process, and report what the loader did.
DEEP_SCRIPT = r"""
import json, sys
out = {"imported": False}
try:
    import torch
    out["imported"] = True
    out["version"] = torch.__version__
    out["cuda"] = torch.version.cuda
    try:
        out["cuda_available"] = bool(torch.cuda.is_available())
        out["device_count"] = torch.cuda.device_count()
    except Exception as exc:
        out["cuda_error"] = "%s: %s" % (type(exc).__name__, exc)
    try:
        out["arch_list"] = torch.cuda.get_arch_list()
    except Exception as exc:
        out["arch_list_error"] = str(exc)
    try:
        out["cudnn"] = torch.backends.cudnn.version()
    except Exception as exc:
        out["cudnn_error"] = str(exc)
    try:
        out["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
    except Exception as exc:
        out["nccl_error"] = str(exc)
except BaseException as exc:
    out["import_error"] = "%s: %s" % (type(exc).__name__, exc)
try:
    out["mapped"] = sorted(set(l.split()[-1] for l in open("/proc/self/maps") if ".so" in l.split()[-1]))
except OSError:
    out["mapped"] = None
print("DLDOCTOR-DEEP " + json.dumps(out))
"""


def _read(host: Host, path: str, max_bytes: int = 4 << 20) -> Optional[str]:
    """A file's text, or None where it is absent or this user may not read it (recorded as for _ls)."""
    try:
        return host.try_read(path, max_bytes)
    except PermissionError:
        host.cached("python_envs:denied", list).append(path)
        return None


def _ls(host: Host, path: str) -> List[str]:
    """A directory's entries, or none where this user may not look (another user's home, when not root): the
    environments there are left out and the report says what running as root would add."""
    try:
        return host.listdir(path)
    except PermissionError:
        host.cached("python_envs:denied", list).append(path)
        return []


# -- discovery -------------------------------------------------------------------
#
# Discovery is bounded per owner, with priority, so that no user can blind the report (one user's 70,000
# directories under ~/.conda/envs once made the probe time out and list no environment at all, root's included):
#
# * what the person running dl-doctor named (--python, dl-doctor's own interpreter) and what root and the system own
#   are looked at and kept first, then the environments the session has active, then other users' environments;
# * every owner has a budget of directory entries (MAX_ENTRIES_PER_OWNER): a listing reads at most what is left of
#   it (Host.scan_names), so a huge directory is never listed whole;
# * other users are scanned round-robin, one entry at a time, so each gets a fair share of the discovery time, and
#   share what --env-limit leaves after root's and the session's environments the same way;
# * discovery stops at its deadline and keeps what it has found; python_envs.discovery says, per owner, what was
#   found, what was kept and why the rest was cut.

# Directory entries (and environments.txt lines) discovery examines per owner where environments are listed (conda
# envs/ directories, envs_dirs, pipx, kernelspecs); the search for virtual environments in homes and /opt, which
# walks any directories (a dataset of 100,000 files), has a budget of its own, so it never eats the first one.
MAX_ENTRIES_PER_OWNER = 5000
MAX_WALK_ENTRIES_PER_OWNER = 5000
MAX_HOMES = 4096  # entries of /home looked at
# The share of the probe's time that discovery may take; inspecting what it found gets the rest.
DISCOVERY_SHARE = 0.25
# The share of the probe's time after which environments not yet inspected are reported as such (the engine drops a
# probe that overruns its time, and with it every environment).
INSPECTION_SHARE = 0.9
SYSTEM_CONDA_ROOTS = ("/opt/conda", "/opt/miniconda3", "/opt/anaconda3", "/usr/local/anaconda3",
                      "/usr/local/miniconda3")
# Why an owner's environments were not all kept (python_envs.discovery.owners[].cut_reason).
CUT_TIME, CUT_ENTRIES, CUT_SHARE = "time", "entry cap", "env-limit share"
# Priority tiers: what the operator named, root's and the system's, the session's active ones, other users'.
TIER_NAMED, TIER_ROOT, TIER_ACTIVE, TIER_USERS = 0, 1, 2, 3


def _env_kind(host: Host, prefix: str) -> Optional[str]:
    if host.is_dir(f"{prefix}/conda-meta"):
        return "conda"
    if host.is_file(f"{prefix}/pyvenv.cfg"):
        return "venv"
    return None


def _condarc_envs_dirs(text: str) -> List[str]:
    """``envs_dirs:`` entries of a .condarc (a YAML list, read without a YAML parser: ``- /path`` lines)."""
    out: List[str] = []
    inside = False
    for line in text.splitlines()[:2000]:
        stripped = line.strip()
        if line.startswith("envs_dirs:"):
            inside = True
            rest = line.split(":", 1)[1].strip()
            if rest.startswith("[") and rest.endswith("]"):  # envs_dirs: [/a, /b]
                out += [p.strip().strip("'\"") for p in rest[1:-1].split(",") if p.strip()]
                inside = False
            continue
        if inside:
            if stripped.startswith("- "):
                out.append(stripped[2:].strip().strip("'\""))
            elif stripped and not stripped.startswith("#"):
                inside = False
    return [p for p in out if p.startswith(("/", "~"))][:64]


def session_environments(host: Host) -> List[Tuple[str, Optional[str], str, bool]]:
    """Where the session's own Python lives: ``(prefix, python, found_by, active)``, most relevant first.

    The environment the user activated (``CONDA_PREFIX``, ``VIRTUAL_ENV``) and the first ``python3``/``python`` on
    ``PATH`` are *active*; then stacked conda environments (``CONDA_PREFIX_N``) and the root of ``CONDA_EXE`` (whose
    ``envs/`` discovery lists within its owner's budget). Under --sysroot the session is the tree's
    ``proc/self/environ``.
    """
    env = host.environ()
    out: List[Tuple[str, Optional[str], str, bool]] = []
    for var in ("CONDA_PREFIX", "VIRTUAL_ENV"):
        value = (env.get(var) or "").rstrip("/")
        if value.startswith("/"):
            out.append((value, f"{value}/bin/python", var, True))
    first_on_path = True
    for directory in [d for d in env.get("PATH", "").split(":") if d.startswith("/")][:64]:
        for exe in ("python3", "python"):
            path = f"{directory}/{exe}"
            if not host.is_file(path):
                continue
            prefix = posixpath.dirname(directory.rstrip("/")) if directory.rstrip("/").endswith("/bin") else directory
            if _env_kind(host, prefix):
                out.append((prefix, path, "PATH", first_on_path))
            first_on_path = False
            break
    stacked = sorted((k for k in env if re.fullmatch(r"CONDA_PREFIX_[0-9]{1,3}", k)), key=lambda k: int(k[13:]))
    for var in stacked:
        value = (env.get(var) or "").rstrip("/")
        if value.startswith("/"):
            out.append((value, f"{value}/bin/python", var, False))
    conda_exe = env.get("CONDA_EXE") or ""
    if conda_exe.startswith("/") and conda_exe.endswith("/bin/conda"):
        root = posixpath.dirname(posixpath.dirname(conda_exe))
        out.append((root, f"{root}/bin/python", "CONDA_EXE", False))
    return out


class _Owner:
    """One owner's share of discovery: the entries left to examine, what was found and kept, and why it stopped."""

    def __init__(self, uid: int, cap: int):
        self.uid = uid
        self.left = cap
        self.walk_left = MAX_WALK_ENTRIES_PER_OWNER
        self.scanned = 0
        self.walk_scanned = 0
        self.found = 0
        self.kept = 0
        self.where: Optional[str] = None  # the home (or first directory) discovery looked at for this owner
        self.cut: Optional[str] = None
        self.cut_at: Optional[str] = None  # the directory (or file) where the entry cap stopped discovery
        self.walk_cut_at: Optional[str] = None  # the same for the search for virtual environments

    def take(self, count: int = 1, where: Optional[str] = None) -> bool:
        """Spend ``count`` entries of the budget; False (and the cut noted) once it is spent."""
        if self.left < count:
            self.stopped(where)
            return False
        self.left -= count
        self.scanned += count
        return True

    def stopped(self, where: Optional[str]) -> None:
        self.cut = self.cut or CUT_ENTRIES
        self.cut_at = self.cut_at or where

    def facts(self) -> Dict[str, Any]:
        return {"uid": self.uid, "where": self.where, "entries_scanned": self.scanned, "found": self.found,
                "kept": self.kept, "cut_reason": self.cut, "cut_at": self.cut_at,
                "venv_search_entries": self.walk_scanned, "venv_search_cut_at": self.walk_cut_at}


class Discovery:
    """Finds candidate environments within per-owner budgets and a deadline, then keeps at most ``limit`` of them
    by priority (see the comment above). ``homes`` and ``conda_roots`` default to the host's (``/root``, ``/home/*``,
    the session's ``HOME``; /opt/conda and the like): tests and callers may name their own."""

    def __init__(self, ctx: ProbeContext, limit: int, *, deadline: float, entry_cap: int = MAX_ENTRIES_PER_OWNER,
                 homes: Optional[List[str]] = None, conda_roots: Optional[List[str]] = None):
        self.host, self.limit, self.deadline, self.cap = ctx.host, limit, deadline, entry_cap
        self.owners: Dict[int, _Owner] = {}
        self.found: List[Dict[str, Any]] = []
        self.by_prefix: Dict[str, List[Dict[str, Any]]] = {}
        self.homes = homes
        self.pending: Dict[int, List[Any]] = {}  # uid -> that owner's sources not yet done
        self.conda_roots = list(SYSTEM_CONDA_ROOTS if conda_roots is None else conda_roots)
        self.out_of_time = False
        # Set when the deadline passed while the scan was stuck in a call (a hung network home): nothing found after
        # that is added, so what is kept is what was found in time.
        self.closed = False
        self.lock = threading.Lock()

    # -- owners, bounded listings ------------------------------------------------

    def uid_of(self, path: str) -> int:
        """Whose ``path`` is: the first user other than root who owns it or a directory above it (that user can
        rename or replace what is below), else root's; one that cannot be told counts as root's (nothing is found
        there then anyway)."""
        parts = [p for p in path.split("/") if p][:64]
        for depth in range(1, len(parts) + 1):
            try:
                uid = self.host.stat("/" + "/".join(parts[:depth])).st_uid
            except (OSError, ValueError):
                return 0
            if uid != 0:
                return uid
        return 0

    def owner(self, uid: int, where: Optional[str] = None) -> _Owner:
        with self.lock:  # keep() and facts() may read the owners while a scan stuck past the deadline goes on
            if uid not in self.owners:
                self.owners[uid] = _Owner(uid, self.cap)
            owner = self.owners[uid]
        owner.where = owner.where or where
        return owner

    def ls(self, owner: _Owner, path: str, walk: bool = False) -> List[str]:
        """A directory's entries, at most what is left of the owner's budget (``walk``: of the venv search's): a
        huge directory is never listed whole. None where this user may not look (recorded: the report says what
        running as root would add)."""
        try:
            names, more = self.host.scan_names(path, max(0, owner.walk_left if walk else owner.left))
        except PermissionError:
            self.host.cached("python_envs:denied", list).append(path)
            return []
        if walk:
            owner.walk_left -= len(names)
            owner.walk_scanned += len(names)
            if more:
                owner.walk_cut_at = owner.walk_cut_at or path
        else:
            owner.take(len(names))
            if more:
                owner.stopped(path)
        return names

    # -- candidates ---------------------------------------------------------------

    def add(self, owner: _Owner, prefix: str, kind: str, python: Optional[str] = None, name: Optional[str] = None,
            role: Optional[str] = None, found_by: Optional[str] = None, active: bool = False,
            tier: Optional[int] = None) -> None:
        """One environment found (the same prefix found twice is one environment, found both ways)."""
        prefix = prefix.rstrip("/") or "/"
        tier = tier if tier is not None else TIER_ROOT if owner.uid == 0 else TIER_ACTIVE if active else TIER_USERS
        with self.lock:
            if not self.closed:
                self._add(owner, prefix, kind, python, name, role, found_by, active, tier)

    def _add(self, owner: _Owner, prefix: str, kind: str, python: Optional[str], name: Optional[str],
             role: Optional[str], found_by: Optional[str], active: bool, tier: int) -> None:
        for e in self.by_prefix.get(prefix, []):
            if e["kind"] == kind or kind in ("conda", "venv"):
                if found_by and found_by not in e["found_by"]:
                    e["found_by"].append(found_by)
                e["active"] = e["active"] or active
                e["_tier"] = min(e["_tier"], tier)
                return
        entry = {"prefix": prefix, "kind": kind, "python": python, "name": name or posixpath.basename(prefix),
                 "role": role, "found_by": [found_by] if found_by else [], "active": active,
                 "_tier": tier, "_owner": owner.uid, "_seq": len(self.found)}
        self.found.append(entry)
        self.by_prefix.setdefault(prefix, []).append(entry)
        owner.found += 1

    # -- sources: each a generator that yields once per entry it examined ---------------

    def conda_root(self, owner: _Owner, root: str):
        """A conda installation: its base environment and those in its ``envs/``."""
        if self.host.is_dir(f"{root}/conda-meta"):
            self.add(owner, root, "conda", f"{root}/bin/python", name=f"{posixpath.basename(root)} (base)")
        yield
        yield from self.envs_dir(owner, f"{root}/envs")

    def envs_dir(self, owner: _Owner, directory: str, found_by: Optional[str] = None):
        """The conda environments (a ``conda-meta/``) directly in ``directory``."""
        for name in self.ls(owner, directory):
            if self.host.is_dir(f"{directory}/{name}/conda-meta"):
                self.add(owner, f"{directory}/{name}", "conda", f"{directory}/{name}/bin/python", name=name,
                         found_by=found_by)
            yield

    def environments_txt(self, owner: _Owner, path: str):
        """The prefixes conda recorded in ``~/.conda/environments.txt`` (each line costs an entry: a file of
        100,000 lines is another way to fill the budget)."""
        for line in (_read(self.host, path, 1 << 20) or "").splitlines():
            if not owner.take(where=path):
                return
            line = line.strip()
            if line.startswith("/") and self.host.is_dir(f"{line}/conda-meta"):
                self.add(owner, line, "conda", f"{line}/bin/python")
            yield

    def condarc(self, owner: Optional[_Owner], rc: str, home: str):
        """The ``envs_dirs`` of a .condarc; ``~`` is ``home``. A system-wide one (``owner`` None) hands each
        directory to the budget of the directory's owner."""
        for envs_dir in _condarc_envs_dirs(_read(self.host, rc, 65536) or ""):
            envs_dir = envs_dir.replace("~", home, 1) if envs_dir.startswith("~") else envs_dir
            if not envs_dir.startswith("/"):  # ~ in a system-wide .condarc, and the session's HOME is relative
                continue
            spends = owner or self.owner(self.uid_of(envs_dir), envs_dir)
            yield from self.envs_dir(spends, envs_dir, found_by=f"envs_dirs in {rc}")

    def pipx(self, owner: _Owner, home: str):
        """The virtual environments pipx keeps for each application it installed."""
        for pipx in (f"{home}/.local/pipx/venvs", f"{home}/.local/share/pipx/venvs"):
            for name in self.ls(owner, pipx):
                if self.host.is_file(f"{pipx}/{name}/pyvenv.cfg"):
                    self.add(owner, f"{pipx}/{name}", "venv", f"{pipx}/{name}/bin/python", name=f"pipx {name}",
                             found_by="pipx")
                yield

    def kernels(self, owner: _Owner, directory: str):
        """Interpreters named by the Jupyter kernelspecs in ``directory``."""
        for name in self.ls(owner, directory)[:256]:
            text = _read(self.host, f"{directory}/{name}/kernel.json", 65536)
            yield
            if not text:
                continue
            try:
                argv = json.loads(text).get("argv")
            except (ValueError, AttributeError, RecursionError):
                continue
            if isinstance(argv, list) and argv and isinstance(argv[0], str) and argv[0].startswith("/"):
                bindir = posixpath.dirname(argv[0])
                prefix = posixpath.dirname(bindir) if bindir.endswith("/bin") else bindir
                kind = _env_kind(self.host, prefix)
                if kind:
                    self.add(owner, prefix, kind, argv[0], found_by=f"Jupyter kernel {name}")

    def env_kernels(self, owner: _Owner):
        """Kernelspecs inside the environments this owner has (at most ``limit`` of them: no more can be kept)."""
        prefixes = [e["prefix"] for e in self.found if e["_owner"] == owner.uid][:self.limit]
        for prefix in prefixes:
            yield from self.kernels(owner, f"{prefix}/share/jupyter/kernels")

    def walk_venvs(self, owner: _Owner, base: str, depth: int):
        """Virtual environments (a ``pyvenv.cfg``) up to ``depth`` levels below ``base``. A directory of another
        user's inside a root-owned tree (/opt/bob) is handed to that user's budget."""
        if depth < 0:
            return
        if self.host.is_file(f"{base}/pyvenv.cfg"):
            self.add(owner, base, "venv", f"{base}/bin/python")
            return
        for name in self.ls(owner, base, walk=True):
            yield
            if (name in SKIP_DIRS or name.startswith(".")) and name not in (".venv", ".virtualenvs", ".conda"):
                continue
            path = posixpath.join(base, name)
            if not self.host.is_dir(path) or self.host.readlink(path):
                continue
            uid = self.uid_of(path) if owner.uid == 0 else owner.uid
            if uid != owner.uid:
                self.pending.setdefault(uid, []).append(self.walk_venvs(self.owner(uid, path), path, depth - 1))
            else:
                yield from self.walk_venvs(owner, path, depth - 1)

    def user_site(self, owner: _Owner, home: str):
        """``~/.local/lib/python3.X``: what ``pip install --user`` put there (listed within the budget: the
        directory is the user's)."""
        for name in self.ls(owner, f"{home}/.local/lib"):
            if _PY_DIR.match(name) and self.host.is_dir(f"{home}/.local/lib/{name}/site-packages"):
                self.add(owner, f"{home}/.local/lib/{name}", "user-site", None, name=f"user site of {home}")
            yield

    def system_pythons(self, owner: _Owner):
        """The system's interpreters (root's directories: listed whole, as before)."""
        host = self.host
        for exe in ["/usr/libexec/platform-python"] + host.glob("/usr/bin/python3*") + host.glob("/usr/local/bin/python3*"):
            if re.search(r"(platform-python|python3(\.\d+)?)$", exe) and host.is_file(exe):
                prefix = "/usr/local" if exe.startswith("/usr/local/") else "/usr"
                self.add(owner, prefix, "system", exe, name=f"system ({prefix})")
            yield

    def home_sources(self, owner: _Owner, home: str):
        """Everything discovery looks at in one home, most likely first (the venv walk, the most costly, last)."""
        for root in [f"{home}/{n}" for n in CONDA_ROOT_NAMES] + [f"{home}/.conda"]:
            yield from self.conda_root(owner, root)
        yield from self.environments_txt(owner, f"{home}/.conda/environments.txt")
        yield from self.condarc(owner, f"{home}/.condarc", home)
        yield from self.pipx(owner, home)
        yield from self.kernels(owner, f"{home}/.local/share/jupyter/kernels")
        yield from self.user_site(owner, home)
        yield from self.walk_venvs(owner, home, 3)

    # -- the run -------------------------------------------------------------------

    def list_homes(self) -> List[str]:
        """``/root``, the first MAX_HOMES entries of ``/home`` and the session's ``HOME`` (or the homes given)."""
        if self.homes is not None:
            return [h for h in self.homes if self.host.is_dir(h)]
        root = self.owner(0, "/")
        try:
            names, more = self.host.scan_names("/home", MAX_HOMES)
        except PermissionError:
            self.host.cached("python_envs:denied", list).append("/home")
            names, more = [], False
        if more:
            root.stopped("/home")
        homes = ["/root"] + [f"/home/{n}" for n in names]
        env_home = self.host.environ().get("HOME")
        if env_home and env_home.startswith("/") and env_home not in homes:
            homes.append(env_home)
        return [h for h in homes if self.host.is_dir(h)]

    def step(self, sources: List[Any]) -> bool:
        """Advance the first of ``sources`` by one entry; False once all are done or time is up."""
        while sources:
            if time.monotonic() > self.deadline:
                self.out_of_time = True
                return False
            try:
                next(sources[0])
                return True
            except StopIteration:
                sources.pop(0)
        return False

    def scan_session(self) -> None:
        """The session's environments (session_environments); the ``envs/`` of its ``CONDA_EXE`` is listed with
        the sources of that directory's owner."""
        host = self.host
        for prefix, python, found_by, active in session_environments(host):
            kind = _env_kind(host, prefix)
            owner = self.owner(self.uid_of(prefix), prefix)
            if kind:
                self.add(owner, prefix, kind, python, found_by=found_by, active=active)
            if found_by == "CONDA_EXE":
                self.pending.setdefault(owner.uid, []).append(
                    self.envs_dir(owner, f"{prefix}/envs", found_by="CONDA_EXE envs/"))

    def scan(self) -> None:
        """Root's and the system's sources to the end, then other users' round-robin, one entry at a time."""
        root = self.owner(0, "/")
        homes = self.list_homes()
        for conda in self.conda_roots:
            uid = self.uid_of(conda)
            self.pending.setdefault(uid, []).append(self.conda_root(self.owner(uid, conda), conda))
        for home in homes:
            uid = self.uid_of(home)
            owner = self.owner(uid)
            if owner.where not in homes:  # a user is named by their home, not by where the session found them first
                owner.where = home
            self.pending.setdefault(uid, []).append(self.home_sources(owner, home))
        root_sources = self.pending.setdefault(0, [])
        root_sources.insert(0, self.system_pythons(root))
        env_home = self.host.environ().get("HOME") or "/root"
        for rc in ["/etc/conda/.condarc", "/etc/conda/condarc"] + [f"{r}/.condarc" for r in self.conda_roots]:
            root_sources.append(self.condarc(None, rc, env_home))
        for directory in ("/usr/share/jupyter/kernels", "/usr/local/share/jupyter/kernels"):
            root_sources.append(self.kernels(root, directory))
        root_sources.append(self.walk_venvs(root, "/opt", 3))
        while self.step(root_sources):
            pass
        if not self.out_of_time:
            root_sources.append(self.env_kernels(root))
            while self.step(root_sources):
                pass
        self.round_robin()
        self.mark_unfinished()

    def mark_unfinished(self) -> None:
        """Owners whose sources were not all done are cut by time."""
        for uid, sources in list(self.pending.items()):
            if sources:
                self.owners[uid].cut = self.owners[uid].cut or CUT_TIME

    def add_named(self, pythons: List[str]) -> None:
        """dl-doctor's own interpreter (live) and those named with --python: kept before any other."""
        named = self.owner(0, "/")
        if self.host.live:
            self.add(named, sys.prefix, "venv" if sys.prefix != getattr(sys, "base_prefix", sys.prefix)
                     else "interpreter", sys.executable, role="dl-doctor", tier=TIER_NAMED)
        for path in pythons:
            if path.endswith(("/bin/python", "/bin/python3")) or re.search(r"/bin/python3(\.\d+)?$", path):
                self.add(named, posixpath.dirname(posixpath.dirname(path)), "requested", path, role="requested",
                         tier=TIER_NAMED)
            else:
                self.add(named, posixpath.dirname(path), "requested", path, role="requested", tier=TIER_NAMED)

    def run(self, pythons: List[str]) -> None:
        """The session's environments, the named ones (``pythons``, add_named) and the scan, on a daemon thread
        waited for until the deadline: a directory that hangs (a stuck network home) costs the rest of the scan,
        never the probe."""
        def work() -> None:
            self.scan_session()
            self.add_named(pythons)
            self.scan()

        worker = threading.Thread(target=work, name="probe-python_envs:discovery", daemon=True)
        worker.start()
        worker.join(max(0.0, self.deadline - time.monotonic()) + 0.5)
        if worker.is_alive():
            with self.lock:
                self.closed = True
            self.out_of_time = True
            self.mark_unfinished()

    def round_robin(self) -> None:
        """Other users' sources, one entry of each user in turn (a source may hand new work to another user); an
        owner whose sources are done then has the kernelspecs inside their environments looked at."""
        kernels_queued = {0}
        while not self.out_of_time:
            for uid in sorted(set(self.owners) - kernels_queued):
                if not self.pending.get(uid):
                    kernels_queued.add(uid)
                    self.pending.setdefault(uid, []).append(self.env_kernels(self.owners[uid]))
            busy = [uid for uid in sorted(self.pending) if self.pending[uid]]
            if not busy:
                break
            for uid in busy:
                self.step(self.pending[uid])

    def keep(self) -> List[Dict[str, Any]]:
        """At most ``limit`` environments: the named, root's and the active ones first, then other users' in turn."""
        with self.lock:
            self.closed = True  # what a scan still stuck in a call finds later is not added
            owners = dict(self.owners)
        first = sorted((e for e in self.found if e["_tier"] < TIER_USERS), key=lambda e: (e["_tier"], e["_seq"]))
        kept = first[:self.limit]
        queues: Dict[int, List[Dict[str, Any]]] = {}
        for e in self.found:
            if e["_tier"] == TIER_USERS:
                queues.setdefault(e["_owner"], []).append(e)
        while len(kept) < self.limit and any(queues.values()):
            for uid in sorted(queues):
                if queues[uid] and len(kept) < self.limit:
                    kept.append(queues[uid].pop(0))
        for e in kept:
            owners[e["_owner"]].kept += 1
        for owner in owners.values():
            if owner.kept < owner.found:
                owner.cut = owner.cut or CUT_SHARE
        # the environments the session uses first, then those named with --python, then the rest by priority
        kept.sort(key=lambda e: (0 if e["active"] else 1 if e["role"] == "requested" else 2, e["_tier"], e["_seq"]))
        return [{k: v for k, v in e.items() if not k.startswith("_")} for e in kept]

    def facts(self) -> Dict[str, Any]:
        """``python_envs.discovery``: per owner what was scanned, found and kept, and why the rest was cut."""
        with self.lock:
            known = sorted(self.owners.items())
        owners = [o.facts() for uid, o in known if o.scanned or o.walk_scanned or o.found or o.cut][:MAX_HOMES]
        return {"entry_cap": self.cap, "out_of_time": self.out_of_time, "owners": owners}


def discover(ctx: ProbeContext, limit: int, *, deadline: Optional[float] = None,
             entry_cap: int = MAX_ENTRIES_PER_OWNER, homes: Optional[List[str]] = None,
             conda_roots: Optional[List[str]] = None) -> Tuple[List[Dict[str, Any]], bool, Dict[str, Any]]:
    """Candidate environments, at most ``limit``, the ones the session uses first (``active``); whether some were
    cut; and what discovery did per owner (``python_envs.discovery``). ``deadline`` is a time.monotonic() value."""
    run = Discovery(ctx, limit, deadline=time.monotonic() + 60.0 if deadline is None else deadline, entry_cap=entry_cap,
                    homes=homes, conda_roots=conda_roots)
    if ctx.options.get("no_env_scan"):
        run.add_named(ctx.options.get("python") or [])
    else:
        run.run(ctx.options.get("python") or [])
    kept = run.keep()
    facts = run.facts()
    truncated = len(kept) < len(run.found) or any(o["cut_reason"] for o in facts["owners"])
    return kept, truncated, facts


# -- static inspection -----------------------------------------------------------------

def site_dirs(host: Host, env: Dict[str, Any]) -> List[str]:
    prefix = env["prefix"]
    if env["kind"] == "user-site":
        return [f"{prefix}/site-packages"] if host.is_dir(f"{prefix}/site-packages") else []
    pats = [f"{prefix}/lib/python3*/site-packages", f"{prefix}/lib64/python3*/site-packages"]
    if env["kind"] == "system":
        pats += [f"{prefix}/lib/python3*/dist-packages", f"{prefix}/lib/python3/dist-packages"]
        if prefix == "/usr":  # the system interpreter also imports what (sudo) pip put under /usr/local
            pats += ["/usr/local/lib/python3*/site-packages", "/usr/local/lib64/python3*/site-packages",
                     "/usr/local/lib/python3*/dist-packages"]
    dirs = []
    for pat in pats:
        dirs += [d for d in host.glob(pat) if host.is_dir(d)]
    return list(dict.fromkeys(dirs))


def parse_version_py(text: str) -> Dict[str, Optional[str]]:
    """``__version__``, ``cuda`` and ``git_version`` from a framework's ``version.py`` (never executed)."""
    out: Dict[str, Optional[str]] = {}
    for line in text.splitlines():
        if len(line) > MAX_VERSION_LINE or not line.startswith(("__version__", "cuda", "git_version")):
            continue
        m = _VERSION_PY_LINE.fullmatch(line.rstrip())
        if m:
            value = m.group(3).strip()
            out[m.group(1)] = None if value in ("None", "") else value
    return out


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_distributions(host: Host, site: str) -> Dict[str, Dict[str, Any]]:
    dists: Dict[str, Dict[str, Any]] = {}
    for entry in _ls(host, site):
        m = _DIST.match(entry)
        if not m:
            continue
        name = normalize(m.group("name"))
        path = f"{site}/{entry}"
        installer = None
        if entry.endswith(".dist-info"):
            installer = (_read(host, f"{path}/INSTALLER", 256) or "").strip() or None
        dists.setdefault(name, {"name": name, "version": m.group("version"), "installer": installer,
                                "location": site, "metadata": path})
    return dists


def read_conda_meta(host: Host, prefix: str) -> Dict[str, Dict[str, Any]]:
    out: Dict[str, Dict[str, Any]] = {}
    for entry in _ls(host, f"{prefix}/conda-meta"):
        if not entry.endswith(".json"):
            continue
        parts = entry[:-5].rsplit("-", 2)
        if len(parts) != 3:
            continue
        name, version, build = parts
        out[normalize(name)] = {"name": normalize(name), "version": version, "build": build, "installer": "conda"}
    return out


def wheel_files(host: Host, dists: Dict[str, Dict[str, Any]]) -> Dict[str, Tuple[str, str]]:
    """Shared libraries installed by ``nvidia-*`` wheels: in-site path -> (distribution, version)."""
    owned: Dict[str, Tuple[str, str]] = {}
    for d in dists.values():
        if not (d["name"].startswith("nvidia-") or d["name"] == "cuda-toolkit") or not d["metadata"].endswith(".dist-info"):
            continue
        record = _read(host, f"{d['metadata']}/RECORD", 8 << 20) or ""
        for line in record.splitlines():
            rel = line.split(",", 1)[0]
            if ".so" in rel:
                owned[posixpath.normpath(f"{d['location']}/{rel}")] = (d["name"], d["version"])
    return owned


def inspect_static(host: Host, env: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Tuple[str, str]]]:
    """The environment's facts, and the map of wheel-owned libraries (kept out of the facts); the distributions
    with their metadata paths are kept on the side (``host.cached(("dists", prefix))``) for the consumer model."""
    sites = site_dirs(host, env)
    dists: Dict[str, Dict[str, Any]] = {}
    for site in sites:
        for name, d in read_distributions(host, site).items():
            dists.setdefault(name, d)
    conda = read_conda_meta(host, env["prefix"]) if host.is_dir(f"{env['prefix']}/conda-meta") else {}
    py = None
    for site in sites:
        m = _PY_DIR.match(posixpath.basename(posixpath.dirname(site)))
        if m:
            py = m.group(1)
            break
    cfg = _read(host, f"{env['prefix']}/pyvenv.cfg", 65536) if env["kind"] == "venv" else None
    if cfg:
        m = re.search(r"^version(?:_info)?\s*=\s*(\d+\.\d+(?:\.\d+)?)", cfg, re.M)
        py = m.group(1) if m else py
        env["include_system_site_packages"] = "include-system-site-packages = true" in cfg.lower()

    frameworks: Dict[str, Any] = {}
    for fw in FRAMEWORKS:
        key = normalize(fw)
        d = dists.get(key) or conda.get(key) or (conda.get("pytorch") if fw == "torch" else None)
        if d:
            frameworks[fw] = {"version": d["version"], "installer": d.get("installer"), "location": d.get("location")}
    torch_dir = next((f"{s}/torch" for s in sites if host.is_dir(f"{s}/torch")), None)
    if torch_dir:
        info = parse_version_py(_read(host, f"{torch_dir}/version.py", 65536) or "")
        t = frameworks.setdefault("torch", {})
        t.update(path=torch_dir, version=info.get("__version__") or t.get("version"), cuda=info.get("cuda"),
                 git_version=info.get("git_version"))
        conda_torch = conda.get("pytorch") or {}
        t["cpu_only"] = (t.get("cuda") is None or "+cpu" in (t.get("version") or "") or "cpu" in conda_torch.get("build", "")
                         or (conda.get("pytorch-mutex") or {}).get("build", "").startswith("cpu") or "cpuonly" in conda)
        init = _read(host, f"{torch_dir}/__init__.py", 4 << 20) or ""
        t["preload"] = torch_preload_model(init)
    tv_dir = next((f"{s}/torchvision" for s in sites if host.is_dir(f"{s}/torchvision")), None)
    if tv_dir and "torchvision" in frameworks:
        info = parse_version_py(_read(host, f"{tv_dir}/version.py", 65536) or "")
        frameworks["torchvision"].update(version=info.get("__version__") or frameworks["torchvision"]["version"],
                                         cuda=info.get("cuda"))

    owned = wheel_files(host, dists)
    host.cached(("python_envs:dists", env["prefix"], tuple(sites)), dict).update(dists)
    libs: Dict[str, List[Dict[str, Any]]] = {k: [] for k in KEY_LIBS}
    candidates = list(owned)
    for site in sites:
        if torch_dir and torch_dir.startswith(site):
            candidates += [f"{torch_dir}/lib/{n}" for n in _ls(host, f"{torch_dir}/lib")]
    if conda:
        candidates += [f"{env['prefix']}/lib/{n}" for n in _ls(host, f"{env['prefix']}/lib") if n.startswith("lib")]
    for path in sorted(set(candidates)):
        base = posixpath.basename(path)
        for key, prefix in KEY_LIBS.items():
            if base.startswith(prefix + ".") and not (key == "cublas" and base.startswith("libcublasLt")):
                version, how = lib_version(host, path, owned)
                libs[key].append({"path": path, "version": version, "version_source": how,
                                  "origin": "wheel" if path in owned else ("torch/lib" if "/torch/lib/" in path else "conda")})
    per_site = None
    if env["kind"] == "system":  # which copy lives where matters for RPM-owned vs pip-installed modules
        per_site = {site: {k: {"version": v["version"], "installer": v.get("installer")}
                           for k, v in read_distributions(host, site).items()} for site in sites}
    return ({"python_version": py, "site_packages": sites, "site_distributions": per_site, "distributions": {k: v["version"] for k, v in dists.items()},
             "installers": {k: v["installer"] for k, v in dists.items() if v.get("installer")},
             "conda_packages": {k: f"{v['version']} {v['build']}" for k, v in conda.items()} if conda else None,
             "frameworks": frameworks, "cuda_libraries": {k: v for k, v in libs.items() if v}}, owned)


def torch_preload_model(init_text: str) -> Dict[str, Any]:
    """How this torch preloads CUDA wheels by absolute path, read from its own __init__.py.

    ``always``: after libtorch_global_deps, when libcudart got loaded (2.14-era);
    ``on-failure``: only when libtorch_global_deps fails to load (older 2.x); ``none``.
    """
    start = init_text.find("def _load_global_deps")
    if start < 0 or "_preload_cuda_deps" not in init_text:
        return {"mode": "none", "libraries": []}
    body = init_text[start:start + 8000]
    cut = body.find("\nif ")
    body = body[:cut] if cut > 0 else body
    before_except = body.split("except OSError", 1)[0]
    mode = "always" if "_preload_cuda_deps(" in before_except else "on-failure"
    deps_at = init_text.find("def _preload_cuda_deps")
    items = _PRELOAD_ITEM.findall(init_text[deps_at:deps_at + 6000]) if deps_at >= 0 else []
    if not items:  # older releases keep the table inside _load_global_deps
        items = _PRELOAD_ITEM.findall(body) + _PRELOAD_DICT_ITEM.findall(body)
    return {"mode": mode, "libraries": [list(i) for i in items]}


def resolve_torch_libraries(host: Host, env: Dict[str, Any], static: Dict[str, Any], owned: Dict[str, Tuple[str, str]],
                            ld_library_path: List[str], sys_path: Optional[List[str]] = None) -> Optional[Dict[str, Any]]:
    """Which file each key CUDA library resolves to when this environment imports torch."""
    t = static["frameworks"].get("torch") or {}
    torch_dir = t.get("path")
    if not torch_dir or t.get("cpu_only"):
        return None
    python = env.get("python")
    executable = python if python and host.is_file(python) else None
    preload = t.get("preload") or {}
    prefixes = [pattern.split(".", 1)[0] for _, pattern in preload.get("libraries", [])]
    paths = sys_path or static["site_packages"]
    major = (t.get("cuda") or "").split(".")[0]

    from dl_doctor.readers.ldso import Loader  # with pyelftools: imported by the runs that resolve libraries

    def new_loader() -> "Loader":
        return Loader(host, ld_library_path=ld_library_path, executable=executable)

    # Only sys.path entries that hold wheel libraries can match torch's globs.
    bases = [b for b in paths if b and b.startswith("/") and host.is_dir(f"{b}/nvidia")]

    def preload_all(loader: "Loader") -> None:
        # torch's _preload_cuda_deps: the first match on sys.path, loaded by absolute path
        for folder, pattern in preload.get("libraries", []):
            for base in bases:
                hits = (host.glob(f"{base}/nvidia/{folder}/lib/{pattern}")
                        + (host.glob(f"{base}/nvidia/cu{major}/lib/{pattern}") if major else [])
                        + host.glob(f"{base}/{folder}/lib/{pattern}"))
                if hits:
                    loader.load(hits[0], via=f"preloaded by torch ({preload['mode']})")
                    break

    gdeps = f"{torch_dir}/lib/libtorch_global_deps.so"
    steps: List[str] = []
    loader = new_loader()
    if host.is_file(gdeps):
        loader.load(gdeps, via="dlopen (libtorch_global_deps)")
        steps.append("libtorch_global_deps.so")
        failed_on = [m for m, _ in loader.missing if any(m.startswith(p) for p in prefixes)]
        if failed_on and preload.get("mode") in ("always", "on-failure"):
            # CDLL raised OSError naming a CUDA library: torch preloads the wheels and tries again
            loader = new_loader()
            preload_all(loader)
            loader.load(gdeps, via="dlopen (libtorch_global_deps, retried)")
            steps.append(f"preload after failure ({', '.join(failed_on)})")
        elif preload.get("mode") == "always" and any(o.soname.startswith("libcudart.so") for o in loader.objects):
            preload_all(loader)
            steps.append("preload (always)")
    ext = next(iter(host.glob(f"{torch_dir}/_C.cpython-*.so") + host.glob(f"{torch_dir}/_C.so")), None)
    if ext:
        loader.load(ext, via="import torch._C")
        steps.append(posixpath.basename(ext))
    resolved: Dict[str, Any] = {}
    for key, prefix in KEY_LIBS.items():
        obj = next((o for o in loader.objects if o.soname.startswith(prefix + ".")
                    and not (key == "cublas" and o.soname.startswith("libcublasLt"))), None)
        if obj:
            version, how = lib_version(host, obj.path, owned)
            resolved[key] = {"soname": obj.soname, "path": obj.path, "version": version, "version_source": how,
                             "via": obj.via, "requested_by": obj.requested_by}
    return {"steps": steps, "libraries": resolved, "missing": [list(m) for m in loader.missing[:20]],
            "ld_library_path": ld_library_path, "loaded_count": len(loader.objects)}


# -- live and deep ---------------------------------------------------------------------------

# What the live script prints, field by field: a hostile or broken interpreter's other output is dropped.
_LIVE_SHAPE = {"version": str, "executable": str, "prefix": str, "base_prefix": str, "sys_path": list,
               "user_site": str, "user_site_enabled": bool, "site_packages": list, "pythonpath": str,
               "pth_files": list, "origins": dict}
_DEEP_SHAPE = {"imported": bool, "version": str, "cuda": str, "cuda_available": bool, "device_count": int,
               "cuda_error": str, "arch_list": list, "arch_list_error": str, "cudnn": int, "cudnn_error": str,
               "nccl": str, "nccl_error": str, "import_error": str, "mapped": list}
MAX_LIST_ITEMS = 4096


def _shaped(raw: Any, shape: Dict[str, type]) -> Dict[str, Any]:
    """Keep only the expected fields of the expected types; lists of strings, dicts of str -> str|None."""
    if not isinstance(raw, dict):
        raise ValueError(f"printed {type(raw).__name__}, not an object")
    out: Dict[str, Any] = {}
    dropped = []
    for key, kind in shape.items():
        if key not in raw or raw[key] is None:
            continue
        value = raw[key]
        if kind is int and isinstance(value, bool) or not isinstance(value, kind):
            dropped.append(key)
            continue
        if kind is list:
            value = [v for v in value[:MAX_LIST_ITEMS] if isinstance(v, str)]
        elif kind is dict:
            value = {str(k)[:200]: v for k, v in list(value.items())[:64] if v is None or isinstance(v, str)}
        elif kind is int and not -2**31 <= value < 2**31:
            dropped.append(key)
            continue
        out[key] = value
    if dropped:
        out["dropped_fields"] = dropped
    return out


def live_in_process(host: Host) -> Dict[str, Any]:
    """The live facts of dl-doctor's own interpreter, read in this process (what LIVE_SCRIPT prints, without
    starting another interpreter: part of the start-up budget)."""
    import importlib.util
    import site

    def origin(name: str) -> Optional[str]:
        try:
            spec = importlib.util.find_spec(name)
            return spec.origin if spec else None
        except Exception as exc:  # noqa: BLE001
            return f"error: {exc}"

    try:
        sites = list(site.getsitepackages())
    except Exception:  # noqa: BLE001
        sites = []
    pth: List[str] = []
    for d in sites + [getattr(site, "USER_SITE", None) or ""]:
        if d.startswith("/"):
            pth += [posixpath.join(d, f) for f in _ls(host, d) if f.endswith(".pth")]
    return _shaped({"version": "%d.%d.%d" % sys.version_info[:3], "executable": sys.executable,
                    "prefix": sys.prefix, "base_prefix": getattr(sys, "base_prefix", sys.prefix),
                    "sys_path": [p for p in sys.path if p], "user_site": getattr(site, "USER_SITE", None),
                    "user_site_enabled": bool(getattr(site, "ENABLE_USER_SITE", False)), "site_packages": sites,
                    "pythonpath": host.environ().get("PYTHONPATH"), "pth_files": pth,
                    "origins": {n: origin(n) for n in ("torch", "numpy", "tensorflow", "jax")}}, _LIVE_SHAPE)


def _run_python(host: Host, env: Dict[str, Any], script: str, timeout: float, startup: List[str], *args: str):
    python = env["python"]
    return host.run_python(python, script, args, timeout=timeout, startup_paths=startup,
                           requested=env.get("kind") == "requested")


# --deep, per CUDA consumer: import its package, then load each object that needs CUDA libraries and each library it
# opens by name, in that order, in one fresh process; one line per step, flushed, so a crash costs only what follows.
DEEP_CONSUMER_SCRIPT = r"""
import ctypes, json, os, sys
plan = json.loads(sys.argv[1])
def say(kind, name, error):
    sys.stdout.write("DLDOCTOR-STEP " + json.dumps({"kind": kind, "name": name, "error": error}) + "\n")
    sys.stdout.flush()
for module in plan.get("first", []) + ([plan["import"]] if plan.get("import") else []):
    try:
        __import__(module)
        say("import", module, "")
    except BaseException as exc:
        say("import", module, "%s: %s" % (type(exc).__name__, exc))
for path in plan.get("objects", []):
    try:
        ctypes.CDLL(path, mode=getattr(os, "RTLD_GLOBAL", 0))
        say("object", path, "")
    except OSError as exc:
        say("object", path, str(exc))
for name in plan.get("dlopen", []):
    try:
        ctypes.CDLL(name)
        say("dlopen", name, "")
    except OSError as exc:
        say("dlopen", name, str(exc))
try:
    maps = sorted(set(l.split()[-1] for l in open("/proc/self/maps") if ".so" in l.split()[-1]))
except OSError:
    maps = []
say("maps", json.dumps(maps[:4096]), "")
"""
_NOT_FOUND = re.compile(r"([\w.+-]{1,200}\.so[\w.]{0,40}): cannot open shared object file")


def run_deep_consumer(host: Host, env: Dict[str, Any], consumer: Dict[str, Any], timeout: float,
                      startup: List[str]) -> Dict[str, Any]:
    """What really happens when this consumer loads (the truth that wins over the static prediction)."""
    site = consumer.get("location") or ""
    plan = {"import": consumer.get("package") or None, "first": ["torch"] if consumer.get("links_torch") else [],
            "objects": [posixpath.join(site, rel) for rel in consumer.get("cuda_object_paths") or []],
            "dlopen": consumer.get("dlopen") or []}
    try:
        result = _run_python(host, env, DEEP_CONSUMER_SCRIPT, timeout, startup, json.dumps(plan))
    except UntrustedCommand as exc:
        return {"skipped": f"not imported as root: {exc.reason}"}
    except OSError as exc:
        return {"error": f"cannot run {env['python']}: {exc.strerror or exc}"}
    steps: List[Dict[str, str]] = []
    maps: List[str] = []
    for line in result.stdout.splitlines()[:10000]:
        if not line.startswith("DLDOCTOR-STEP "):
            continue
        try:
            step = json.loads(line[len("DLDOCTOR-STEP "):])
        except (ValueError, RecursionError):
            continue
        if not isinstance(step, dict) or not all(isinstance(step.get(k), str) for k in ("kind", "name", "error")):
            continue
        if step["kind"] == "maps":
            try:
                maps = [m for m in json.loads(step["name"]) if isinstance(m, str)][:4096]
            except (ValueError, RecursionError):
                maps = []
            continue
        name = step["name"][len(site) + 1:] if step["name"].startswith(site + "/") else step["name"]
        m = _NOT_FOUND.search(step["error"])
        steps.append({"kind": step["kind"], "name": name[:400], "error": step["error"][:600] or None,
                      "missing": m.group(1) if m else None})
    out: Dict[str, Any] = {"steps": steps, "mapped_cuda": [p for p in maps if re.search(
        r"/lib(cudart|cublas|cublasLt|cudnn\w*|nccl|cufft|curand|cusolver|cusparse|nvrtc|nvJitLink|nvinfer\w*)\.so",
        p)][:64]}
    if result.timed_out:
        out["error"] = f"timed out after {timeout:g}s"
    elif result.returncode != 0 and not maps:
        out["error"] = f"exit {result.returncode} (a crash while loading: the steps before it are kept)"
    return out


def run_live(host: Host, env: Dict[str, Any], timeout: float, startup: List[str]) -> Dict[str, Any]:
    python = env["python"]
    try:
        result = _run_python(host, env, LIVE_SCRIPT, timeout, startup)
    except UntrustedCommand as exc:
        return {"skipped": f"not run as root: {exc.reason}; inspected from its files only"}
    except OSError as exc:
        return {"error": f"cannot run {python}: {exc.strerror or exc}"}
    if result.timed_out:
        return {"error": f"timed out after {timeout:g}s"}
    if result.returncode != 0:
        return {"error": f"exit {result.returncode}: {(result.stderr or result.stdout).strip()[-400:]}"}
    try:
        live = _shaped(json.loads(result.stdout.strip().splitlines()[-1]), _LIVE_SHAPE)
    except (ValueError, IndexError, RecursionError) as exc:
        return {"error": f"unreadable output: {exc}"}
    if result.withheld:
        # as root: what the session's own PYTHONPATH / LD_LIBRARY_PATH / LD_PRELOAD would have added, and why not
        live["withheld_env"] = result.withheld
    return live


def run_deep(host: Host, env: Dict[str, Any], timeout: float, startup: List[str]) -> Dict[str, Any]:
    python = env["python"]
    try:
        result = _run_python(host, env, DEEP_SCRIPT, timeout, startup)
    except UntrustedCommand as exc:
        return {"skipped": f"not imported as root: {exc.reason}"}
    except OSError as exc:
        return {"error": f"cannot run {python}: {exc.strerror or exc}"}
    if result.timed_out:
        return {"error": f"import timed out after {timeout:g}s"}
    line = next((l for l in result.stdout.splitlines() if l.startswith("DLDOCTOR-DEEP ")), None)
    if line is None:
        return {"error": f"exit {result.returncode}: {(result.stderr or result.stdout).strip()[-600:]}"}
    try:
        out = _shaped(json.loads(line[len("DLDOCTOR-DEEP "):]), _DEEP_SHAPE)
    except (ValueError, RecursionError) as exc:
        return {"error": f"unreadable output: {exc}"}
    out["stderr_tail"] = result.stderr.strip()[-600:] or None
    return out


def inspect(ctx: ProbeContext, env: Dict[str, Any]) -> Dict[str, Any]:
    host = ctx.host
    out = dict(env)
    try:
        static, owned = inspect_static(host, env)
        out.update(static)
    except Exception as exc:  # noqa: BLE001 - one broken environment costs only itself
        out["error"] = f"static inspection failed: {type(exc).__name__}: {exc}"
        return out
    ld = [d for d in host.environ().get("LD_LIBRARY_PATH", "").split(":") if d]
    sites_key = (host.sysroot, tuple(host.tree_path(s) for s in out.get("site_packages") or []), tuple(ld))
    dists = host.cached(("python_envs:dists", env["prefix"], tuple(out.get("site_packages") or [])), dict)
    torch_mode = (((out.get("frameworks") or {}).get("torch") or {}).get("preload") or {}).get("mode")
    # The consumer model reads files only: it runs while the live interpreter below starts (that wait releases the
    # GIL), from the site directories; sys.path entries the live probe adds with wheel libraries redo it afterwards.
    early: Dict[str, Any] = {}

    def consumers_from_sites() -> None:
        try:
            early["value"] = host.cached(("consumers",) + sites_key, lambda: _consumers(
                host, env, dists, owned, ld, None, torch_mode))
        except Exception as exc:  # noqa: BLE001 - the consumer model costs only its own facts
            early["error"] = f"{type(exc).__name__}: {exc}"

    import threading

    worker = threading.Thread(target=consumers_from_sites, name="probe-python_envs:consumers", daemon=True)
    worker.start()
    timeout = float(ctx.options.get("env_timeout") or 10.0)
    python = env.get("python")
    if host.live and python and host.is_file(python) and env["kind"] != "user-site":
        startup = python_startup_paths(host, env.get("prefix") if env["kind"] in ("venv", "conda") else None,
                                       out.get("site_packages") or [])
        if env.get("role") == "dl-doctor" and python == sys.executable:
            out["live"] = live_in_process(host)
        else:
            out["live"] = run_live(host, env, timeout, startup)
        if ctx.options.get("deep") and "torch" in out["frameworks"]:
            out["deep"] = run_deep(host, env, float(ctx.options.get("deep_timeout") or 120.0), startup)
    live_path = (out.get("live") or {}).get("sys_path")
    # Environments that are the same files (the same site-packages, reached through links) load the same libraries.
    key = (host.sysroot, tuple(host.tree_path(s) for s in out.get("site_packages") or []), tuple(ld),
           tuple(p for p in (live_path or []) if "site-packages" in p or "dist-packages" in p))
    try:
        if not key[1]:
            out["resolution"] = resolve_torch_libraries(host, env, out, owned, ld, live_path)
        else:  # the same files are resolved once per run, however many threads ask (never across two runs)
            out["resolution"] = host.cached(("torch-resolution",) + key,
                                            lambda: resolve_torch_libraries(host, env, out, owned, ld, live_path))
    except Exception as exc:  # noqa: BLE001
        out["resolution_error"] = f"{type(exc).__name__}: {exc}"
    worker.join()
    sites = set(out.get("site_packages") or [])
    extra = [p for p in live_path or [] if p.startswith("/") and p not in sites and host.is_dir(f"{p}/nvidia")]
    try:
        if extra:  # wheel libraries on sys.path outside the site directories (a .pth, PYTHONPATH): redo with them
            out["consumers"] = host.cached(("consumers",) + key, lambda: _consumers(host, env, dists, owned, ld,
                                                                                   live_path, torch_mode))
        elif "error" in early:
            out["consumers_error"] = early["error"]
        else:
            out["consumers"] = early["value"]
    except Exception as exc:  # noqa: BLE001 - the consumer model costs only its own facts
        out["consumers_error"] = f"{type(exc).__name__}: {exc}"
    if ctx.options.get("deep") and host.live and python and host.is_file(python) and out.get("consumers") \
            and env["kind"] != "user-site":
        startup = python_startup_paths(host, env.get("prefix") if env["kind"] in ("venv", "conda") else None,
                                       out.get("site_packages") or [])
        out["deep_consumers"] = {c["distribution"]: run_deep_consumer(host, env, c, float(
            ctx.options.get("deep_timeout") or 120.0), startup) for c in out["consumers"][:16]}
    return out


def _consumers(host: Host, env: Dict[str, Any], dists: Dict[str, Dict[str, Any]], owned: Dict[str, Tuple[str, str]],
               ld: List[str], live_path: Optional[List[str]], torch_preload: Optional[str]) -> List[Dict[str, Any]]:
    from dl_doctor.app import load_matrix
    from dl_doctor.readers.consumers import scan

    python = env.get("python")
    return scan(host, sites=list(dists and {d["location"] for d in dists.values()} or []), dists=dists, owned=owned,
                ld_library_path=ld, sys_path=live_path or sorted({d["location"] for d in dists.values()}),
                executable=python if python and host.is_file(python) else None, matrix=load_matrix(()),
                torch_preload=torch_preload)




def _inspect_until(ctx: ProbeContext, envs: List[Dict[str, Any]], deadline: float) -> List[Dict[str, Any]]:
    """Every environment inspected, in priority order, until ``deadline``: one still being inspected then is kept
    with the reason instead of its facts (the engine would otherwise drop the whole probe, root's environments
    with the rest)."""
    done: Dict[int, Dict[str, Any]] = {}
    failure: List[BaseException] = []

    def one(index: int) -> None:
        done[index] = inspect(ctx, envs[index])

    def run_all() -> None:
        try:
            # Daemon workers: one stuck in a syscall can never keep the process alive after the reports are written.
            map_daemon(one, list(range(len(envs))), workers=8, name="probe-python_envs:")
        except BaseException as exc:  # noqa: BLE001 - raised in the probe below, as before
            failure.append(exc)

    worker = threading.Thread(target=run_all, name="probe-python_envs:inspect", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    if failure:
        raise failure[0]
    results = dict(done)
    return [results.get(i) or {**env, "error": "not inspected: the probe's time ran out first"}
            for i, env in enumerate(envs)]


@probe("python_envs", "every Python environment: frameworks, bundled CUDA libraries, which copy would load",
       timeout_option="python_envs_timeout")
def python_envs_probe(ctx: ProbeContext) -> Dict[str, Any]:
    started = time.monotonic()
    limit = int(ctx.options.get("env_limit") or DEFAULT_ENV_LIMIT)
    # the engine's limit for this probe (engine.collect: the larger of --timeout and the probe's own)
    budget = max(float(ctx.options.get("timeout") or 0), float(ctx.options.get("python_envs_timeout") or 0)) or 60.0
    envs, truncated, discovery = discover(ctx, limit, deadline=started + DISCOVERY_SHARE * budget)
    results = _inspect_until(ctx, envs, started + INSPECTION_SHARE * budget)
    discovery["not_inspected"] = sum(1 for e in results if str(e.get("error") or "").startswith("not inspected:"))
    denied = sorted({"/".join(d.split("/")[:3]) if d.startswith("/home/") else "/".join(d.split("/")[:2]) or "/"
                     for d in ctx.host.cached("python_envs:denied", list)})
    if denied:
        ctx.denied(f"the environments under {', '.join(denied[:5])}" + (f" and {len(denied) - 5} more" if len(denied) > 5
                                                                         else ""))
    pips = []
    for path in ctx.host.glob("/usr/bin/pip*") + ctx.host.glob("/usr/local/bin/pip*"):
        first = (_read(ctx.host, path, 512) or "").splitlines()[:1]
        pips.append({"path": path, "shebang": first[0][2:].strip() if first and first[0].startswith("#!") else None})
    on_path = ctx.host.which("pip") or ctx.host.which("pip3")
    return {"environments": results, "pip_commands": pips,
            "pip_on_path": ctx.host.tree_path(on_path) if on_path else None,
            "scan": {"limit": limit, "truncated": truncated, "env_scan": not ctx.options.get("no_env_scan"),
                     "deep": bool(ctx.options.get("deep"))},
            "discovery": discovery}
