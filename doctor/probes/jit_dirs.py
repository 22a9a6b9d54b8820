"""The directories compile-and-load workflows write code to and load it from (Triton's cache, TorchInductor's, torch
C++ extensions', CuPy's kernel cache), for the user who runs the job: where each one resolves (its variable, or the
tool's default from the matrix's ``jit_dir`` table), whether it exists, and the mode, owner and POSIX access ACL of
the directory itself or of the nearest ancestor it would be created in. Mount flags and free space are the storage
probe's (mounts, disks). Nothing is written: no probe file, no directory created."""

from __future__ import annotations

import posixpath
import re
from typing import Any, Dict, List, Optional, Tuple

from dl_doctor.facts.contract import array, boolean, integer, obj, string
from dl_doctor.host import Host
from dl_doctor.host.trust import acl_writers
from dl_doctor.probes import ProbeContext, probe

_STATUS_UID = re.compile(r"^Uid:\s+(\d+)\s+(\d+)", re.M)
_STATUS_GROUPS = re.compile(r"^Groups:[ \t]*([0-9 \t]*)$", re.M)
MAX_DIRS = 32

_DIR = obj(
    "",
    name=string("the matrix's jit_dir entry"),
    tool=string("the tool that writes and loads it"),
    loads_code=boolean("the tool maps shared objects from it (a noexec mount refuses them)"),
    path=string("where it resolves for the job's user"),
    set_by=string("the environment variable that set it (null: the tool's default)"),
    exists=boolean("the directory exists"),
    kind=string("what the path is where it exists and is not a directory (file, link to nothing)"),
    real=string("the directory (or the ancestor it would be created in) with symbolic links resolved"),
    checked=string("the directory whose permissions decide: the path itself, or the nearest existing ancestor"),
    mode=integer("its permission bits (st_mode & 0o7777)", range=(0, 0o7777)),
    uid=integer("its owner", range=(0, 1 << 32)),
    gid=integer("its group", range=(0, 1 << 32)),
    acl_writers=array(string(), "who else may write it through its access ACL ('uid N', 'gid N')"),
)

JIT_FACTS = obj(
    "the directories compile-and-load workflows use, for the job's user",
    user=obj(
        "the user who runs the job",
        name=string("the user's name (LOGNAME/USER, or the password database)"),
        uid=integer("the user's uid", range=(0, 1 << 32)),
        gids=array(integer(range=(0, 1 << 32)), "the user's groups (the primary first)"),
        home=string("HOME"),
        root=boolean("the user is root (permission bits do not stop it; a read-only mount does)"),
        source=string("where the identity was read: process, SUDO_UID, /proc/self/status, owner of HOME"),
        getuser=string("what Python's getpass.getuser() returns for it (LOGNAME, USER, LNAME, USERNAME, then "
                       "/etc/passwd); null: nothing (it raises KeyError)"),
        getuser_from=string("where that name comes from"),
    ),
    tempdir=string("what Python's tempfile.gettempdir() resolves to (TMPDIR, TEMP, TMP, /tmp, /var/tmp, /usr/tmp)"),
    dirs=array(_DIR, "each directory of the matrix's jit_dir table, resolved"),
)


def _passwd(host: Host) -> List[List[str]]:
    text = host.try_read("/etc/passwd", 1 << 20) or ""
    return [line.split(":") for line in text.splitlines()[:20000] if line.count(":") >= 6]


def _groups_of(host: Host, name: Optional[str], primary: Optional[int]) -> List[int]:
    out = [primary] if primary is not None else []
    text = host.try_read("/etc/group", 1 << 20) or ""
    for line in text.splitlines()[:20000]:
        f = line.split(":")
        if len(f) >= 4 and name and name in f[3].split(",") and f[2].isdigit():
            out.append(int(f[2]))
    return list(dict.fromkeys(out))


def job_user(host: Host, environ: Dict[str, str]) -> Dict[str, Any]:
    """Who runs the job: live, this process (or the sudo caller); in a tree, the process /proc/self/status names, else
    the session's LOGNAME/USER as the owner of its HOME."""
    rows = _passwd(host)
    by_uid = {int(r[2]): r for r in rows if r[2].isdigit()}
    by_name = {r[0]: r for r in rows}
    uid: Optional[int] = None
    gids: List[int] = []
    source = None
    name = environ.get("LOGNAME") or environ.get("USER") or None
    ids = host.process_ids()
    if ids is not None:
        uid, source = ids[0], "process"
        if uid == 0 and (environ.get("SUDO_UID") or "").isdigit():
            uid, source = int(environ["SUDO_UID"]), "SUDO_UID"
            name = environ.get("SUDO_USER") or None
        gids = list(ids[2]) if source == "process" else []
    else:
        status = host.try_read("/proc/self/status", 65536) or ""
        m = _STATUS_UID.search(status)
        if m:
            uid, source = int(m.group(2)), "/proc/self/status"
            g = _STATUS_GROUPS.search(status)
            gids = [int(x) for x in (g.group(1).split() if g else []) if x.isdigit()]
            row = by_uid.get(uid)
            name = row[0] if row else (name if uid != 0 else "root")
        else:
            home = environ.get("HOME")
            try:
                st = host.stat(home) if home else None
            except OSError:
                st = None
            if st is not None:
                uid, source = st.st_uid, "owner of HOME"
                gids = [st.st_gid]
            else:  # a HOME the tree does not hold: the password database's user of that home
                row = next((r for r in rows if home and r[5].rstrip("/") == home.rstrip("/") and r[2].isdigit()), None)
                if row:
                    uid, source = int(row[2]), "the password database's user of HOME"
                    name = name or row[0]
            if not name and uid is not None and uid in by_uid:
                name = by_uid[uid][0]
    # getpass.getuser(), as the tools call it: LOGNAME, USER, LNAME, USERNAME, then the password database
    getuser_from = next((v for v in ("LOGNAME", "USER", "LNAME", "USERNAME") if environ.get(v)), None)
    getuser = environ.get(getuser_from) if getuser_from else None
    if getuser is None and uid is not None and uid in by_uid:
        getuser, getuser_from = by_uid[uid][0], "/etc/passwd"
    if not name and uid is not None and uid in by_uid:  # getpass.getuser(): the password database's name
        name = by_uid[uid][0]
    row = by_name.get(name or "") or (by_uid.get(uid) if uid is not None else None)
    primary = int(row[3]) if row and row[3].isdigit() else (gids[0] if gids else None)
    gids = list(dict.fromkeys(gids + _groups_of(host, name, primary)))
    home = environ.get("HOME") or (row[5] if row else None)
    root = name == "root" if name else uid == 0
    if source == "/proc/self/status" or host.live:
        root = uid == 0
    return {"name": name, "uid": uid, "gids": gids[:64], "home": home, "root": root, "source": source,
            "getuser": getuser, "getuser_from": getuser_from}


def tempdir(host: Host, environ: Dict[str, str]) -> str:
    for var in ("TMPDIR", "TEMP", "TMP"):
        v = environ.get(var)
        if v and v.startswith("/") and host.is_dir(v):
            return posixpath.normpath(v)
    for d in ("/tmp", "/var/tmp", "/usr/tmp"):
        if host.is_dir(d):
            return d
    return "/tmp"


def _expand(template: str, values: Dict[str, Optional[str]]) -> Optional[str]:
    out = template
    for k, v in values.items():
        if "{" + k + "}" in out:
            if not v:
                return None
            out = out.replace("{" + k + "}", v)
    return posixpath.normpath(out) if out.startswith("/") else None


def describe(host: Host, path: str) -> Dict[str, Any]:
    out: Dict[str, Any] = {"path": path, "exists": host.is_dir(path)}
    if not out["exists"] and host.lexists(path):
        out["kind"] = "file" if host.is_file(path) else "not a directory"
    probe_at = path
    while not host.is_dir(probe_at) and probe_at != "/":
        probe_at = posixpath.dirname(probe_at)
    out["checked"] = probe_at
    try:
        out["real"] = host.tree_path(probe_at)
        st = host.stat(probe_at)
        out.update(mode=st.st_mode & 0o7777, uid=st.st_uid, gid=st.st_gid)
        out["acl_writers"] = acl_writers(host.resolve(probe_at), follow=True)[:16]
    except OSError:
        pass
    return out


@probe("jit_dirs", "the directories Triton, TorchInductor, torch extensions and CuPy write code to and load it from",
       provides=JIT_FACTS)
def jit_dirs_probe(ctx: ProbeContext) -> Dict[str, Any]:
    host = ctx.host
    environ = host.environ()
    entries = ctx.matrix.entries("jit_dir") if ctx.matrix is not None and hasattr(ctx.matrix, "entries") else []
    user = job_user(host, environ)
    tmp = tempdir(host, environ)
    home = user.get("home")
    name = user.get("name") or ""
    values: Dict[str, Optional[str]] = {"home": home, "tmp": tmp, "user": re.sub(r'[\\/:*?"<>|]', "_", name) or None,
                                        "xdg_cache": environ.get("XDG_CACHE_HOME") or (f"{home}/.cache" if home else None)}
    inductor = environ.get("TORCHINDUCTOR_CACHE_DIR") or _expand("{tmp}/torchinductor_{user}", values)
    values["inductor"] = inductor
    dirs: List[Dict[str, Any]] = []
    for e in entries[:MAX_DIRS]:
        var = e.get("variable")
        value = environ.get(var) if var else None
        path = value if value and value.startswith("/") else _expand(str(e.get("default") or ""), values)
        if not path:
            continue
        d = describe(host, posixpath.normpath(path))
        d.update(name=e.get("name"), tool=e.get("tool"), loads_code=bool(e.get("loads_code")),
                 set_by=var if value else None)
        dirs.append(d)
    return {"user": user, "tempdir": tmp, "dirs": dirs}
