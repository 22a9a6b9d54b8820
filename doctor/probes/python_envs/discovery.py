"""Finding the Python environments on the host: the session's, the named ones (--python), root's and the
system's, then other users', within per-owner budgets and a deadline (the comment below says how)."""

from __future__ import annotations

import json
import posixpath
import re
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from dl_doctor.host import Host
from dl_doctor.probes import ProbeContext
from dl_doctor.probes.python_envs.static import _PY_DIR, _read

CONDA_ROOT_NAMES = ("anaconda3", "miniconda3", "miniforge3", "mambaforge", "conda")
SKIP_DIRS = {"node_modules", ".cache", "site-packages", "dist-packages", ".git", "proc", "sys", "__pycache__", "pkgs"}


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

