"""The directories compile-and-load workflows write kernels to and load them from (Triton, TorchInductor, torch C++
extensions and the DeepSpeed ops built with them, CuPy), judged for the user who runs the job: a noexec mount under a
directory the tool maps shared objects from, and a directory (or the ancestor it would be created in) that user
cannot write, by mode, owner, access ACL or a read-only mount. Nothing is ever written to find out."""

from __future__ import annotations

import re
import shlex
from typing import Any, Dict, List, Mapping, Optional, Tuple

from dl_doctor import versions
from dl_doctor.model import Facts, Fix, Result, check, fail, passed, skip, warn


def _installed(facts: Facts) -> Dict[str, str]:
    """Every distribution of every environment (normalized name -> a version)."""
    out: Dict[str, str] = {}
    for env in facts.get("python_envs.environments") or []:
        if isinstance(env, dict) and isinstance(env.get("distributions"), dict):
            for k, v in env["distributions"].items():
                out.setdefault(re.sub(r"[-_.]+", "-", str(k)).lower(), str(v))
    return out


def _entries(matrix: Any) -> Dict[str, Dict[str, Any]]:
    return {e["name"]: e for e in (matrix.entries("jit_dir") if matrix is not None else [])}


def _in_use(d: Mapping[str, Any], entry: Mapping[str, Any], installed: Mapping[str, str]) -> Optional[str]:
    """The installed distribution that uses this directory (None: no tool here uses it)."""
    for name in entry.get("distributions") or []:
        v = installed.get(name)
        if v is None:
            continue
        if entry.get("min_version") and versions.release(v)[:2] < versions.release(str(entry["min_version"]))[:2]:
            continue
        if entry.get("name") == "triton-under-inductor" and not _uses_inductor(installed):
            continue
        return f"{name} {v}"
    return None


def _uses_inductor(installed: Mapping[str, str]) -> bool:
    v = installed.get("torch")
    return bool(v) and versions.release(v)[:1] >= (2,)


def _dirs(facts: Facts, matrix: Any) -> List[Tuple[Dict[str, Any], str]]:
    entries = _entries(matrix)
    installed = _installed(facts)
    out, seen = [], set()
    for d in facts.get("jit_dirs.dirs") or []:
        if not isinstance(d, dict) or not isinstance(d.get("path"), str):
            continue
        entry = entries.get(str(d.get("name"))) or {}
        user = _in_use(d, entry, installed) or (("the directory exists" if d.get("exists") else None)
                                                if d.get("name") == "torch-extensions" and installed.get("torch") else None)
        if user is None or d["path"] in seen:
            continue
        seen.add(d["path"])
        out.append((d, user))
    return out


def mount_of(path: str, entries: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    best = None
    for e in entries:
        mp = e.get("mountpoint")
        if isinstance(mp, str) and (path == mp or path.startswith(mp.rstrip("/") + "/")):
            if best is None or len(mp) >= len(best["mountpoint"]):
                best = e
    return best


def writable_by(user: Mapping[str, Any], d: Mapping[str, Any]) -> Optional[str]:
    """Why the job's user cannot create entries in ``d['checked']`` (None: it can; also None when unknown)."""
    if user.get("root") or not isinstance(d.get("mode"), int) or not isinstance(user.get("uid"), int):
        return None
    mode, uid, gids = d["mode"], user["uid"], [g for g in user.get("gids") or [] if isinstance(g, int)]
    acl = [a for a in d.get("acl_writers") or [] if isinstance(a, str)]
    if f"uid {uid}" in acl or any(f"gid {g}" in acl for g in gids):
        return None
    if d.get("uid") == uid:
        cls, bits = "its owner", (mode >> 6) & 7
    elif d.get("gid") in gids:
        cls, bits = "its group", (mode >> 3) & 7
    else:
        cls, bits = "others", mode & 7
    if bits & 3 == 3:
        return None
    return (f"{d['checked']} is mode {mode:04o} (owner uid {d.get('uid')}, group gid {d.get('gid')}): "
            f"{user.get('name') or 'the user'} (uid {uid}) is {cls} there, without write and search permission")


PROCESS_IDENTITY = ("process", "SUDO_UID", "/proc/self/status")


def _nameless(facts: Facts, user: Mapping[str, Any], matrix: Any) -> Optional[Result]:
    """TorchInductor names its default cache directory after getpass.getuser(): a process whose uid has no name (no
    LOGNAME/USER/LNAME/USERNAME, no /etc/passwd entry: `docker run --user N`, OpenShift's arbitrary uids) makes torch
    raise KeyError: 'getpwuid(): uid not found: N'. Judged only for an identity read from the process itself."""
    torch_v = _installed(facts).get("torch")
    if user.get("source") not in PROCESS_IDENTITY or user.get("getuser") or not isinstance(user.get("uid"), int) \
            or user.get("root") or not torch_v or versions.release(torch_v)[:1] < (2,):
        return None
    entry = _entries(matrix).get("torchinductor") or {}
    span = [versions.release(str(v))[:2] for v in entry.get("unnamed_at_import") or []]
    release = versions.release(torch_v)[:2]
    if len(span) == 2 and release >= span[1]:
        return None  # the releases that no longer raise
    at_import = len(span) == 2 and span[0] <= release < span[1]
    uid = user["uid"]
    set_dir = any(isinstance(d, dict) and d.get("name") == "torchinductor" and d.get("set_by")
                  for d in facts.get("jit_dirs.dirs") or [])
    msg = (f"the job runs as uid {uid}, which has no name: no LOGNAME/USER/LNAME/USERNAME in its environment and no "
           f"/etc/passwd entry, so getpass.getuser() raises KeyError: 'getpwuid(): uid not found: {uid}' where "
           f"TorchInductor (torch {torch_v}) derives its cache directory, /tmp/torchinductor_<user>" +
           (" (at import in this release)" if at_import else " (at the first torch.compile)"))
    fix = Fix("Give the job's uid a name (USER in its environment, or an /etc/passwd entry), or name the cache.",
              (f"export USER=uid{uid}   # in the container's entrypoint or the pod's env (getpass.getuser reads it "
               "first)", "export TORCHINDUCTOR_CACHE_DIR=/tmp/torchinductor   # some torch releases still call "
               "getpass.getuser() at import", f"echo 'app:x:{uid}:0::/tmp:/sbin/nologin' >> /etc/passwd   # at image "
               "build or in the entrypoint (OpenShift: a writable /etc/passwd or nss_wrapper)"))
    if set_dir and not at_import:
        return None  # the directory is named: getpass.getuser() is not asked
    return (fail if at_import else warn)(msg, {"uid": uid, "identity_from": user.get("source"), "torch": torch_v},
                                       fix, headline=f"uid {uid} has no user name: getpass.getuser() raises KeyError")


def _who(user: Mapping[str, Any]) -> str:
    return f"{user.get('name') or 'the job user'} (uid {user.get('uid')})"


@check(
    id="DLD-JIT-001", slug="jit-dir-noexec", title="Compiled kernels can be loaded from where they are written",
    remedy="fix-configuration", drain=False,
    problem="A compile-and-load directory is on a noexec mount",
    tags=("storage", "python", "loader"), requires=("jit_dirs.dirs", "mounts.entries"),
    what="""For every directory a tool installed here compiles shared objects into and then loads them from
    (TorchInductor's TORCHINDUCTOR_CACHE_DIR, default $TMPDIR/torchinductor_<user>, with Triton's cache under it;
    Triton's TRITON_CACHE_DIR, default ~/.triton/cache; torch C++ extensions' TORCH_EXTENSIONS_DIR, where DeepSpeed
    builds its ops), finds the mount that holds it (/proc/self/mounts) and its flags.""",
    why="""On a noexec mount the kernel refuses to map a file executable, so dlopen of the .so the tool just built
    fails: 'failed to map segment from shared object' (docker's --tmpfs /tmp and many hardened /tmp and /dev/shm
    mounts are noexec). torch.compile then fails on its first kernel.""",
    fix="""Point the tool's directory at an exec-capable filesystem (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR,
    TORCH_EXTENSIONS_DIR, or TMPDIR), or mount the filesystem without noexec.""",
)
def jit_dir_noexec(facts: Facts, matrix: Any) -> Result:
    mounts = [m for m in facts.get("mounts.entries") or [] if isinstance(m, dict)]
    dirs = [(d, u) for d, u in _dirs(facts, matrix) if d.get("loads_code")]
    if not dirs:
        return skip("no tool here compiles code and loads it from a directory (Triton, TorchInductor, extensions)")
    bad = []
    for d, used_by in dirs:
        m = mount_of(str(d.get("real") or d.get("checked") or d["path"]), mounts)
        if m and "noexec" in (m.get("options") or []):
            bad.append((d, used_by, m))
    if not bad:
        return passed(f"{len(dirs)} compile-and-load director{'y is' if len(dirs) == 1 else 'ies are'} on mounts "
                      "that allow executable mappings", dirs=[d["path"] for d, _ in dirs])
    msgs, cmds = [], []
    exec_dir = "/var/tmp" if not any(b[2]["mountpoint"] == "/var/tmp" for b in bad) else "$HOME/.cache"
    for d, used_by, m in bad:
        var = {"torchinductor": "TORCHINDUCTOR_CACHE_DIR", "triton-under-inductor": "TRITON_CACHE_DIR",
               "triton": "TRITON_CACHE_DIR", "torch-extensions": "TORCH_EXTENSIONS_DIR"}.get(str(d.get("name")))
        msgs.append(f"{d['tool']} ({used_by}) writes and loads shared objects in {d['path']}, on {m['mountpoint']} "
                    f"({m.get('fstype')}, mounted {','.join(m.get('options') or [])}): noexec refuses them "
                    "('failed to map segment from shared object')")
        if var:
            leaf = d["path"].rstrip("/").split("/")[-1]
            cmds.append(f"export {var}={exec_dir}/{leaf}   # a directory on a filesystem mounted without noexec")
    mps = sorted({m["mountpoint"] for _, _, m in bad})
    for mp in mps:
        cmds.append(f"sudo mount -o remount,exec {shlex.quote(mp)}   # or drop noexec in /etc/fstab (docker: "
                    f"--tmpfs {mp}:exec)")
    # a directory already there (the tool has run) or named by its variable is in use: the next compile fails; one
    # not yet created fails the first torch.compile / kernel launch (a warning)
    result = fail if any(d.get("exists") or d.get("set_by") for d, _, _ in bad) else warn
    return result("; ".join(msgs), {"dirs": [{"path": d["path"], "tool": d.get("tool"), "mountpoint": m["mountpoint"],
                                              "options": m.get("options"), "exists": d.get("exists")}
                                             for d, _, m in bad]},
                Fix("Move the kernel caches to an exec-capable filesystem, or remount without noexec.",
                    tuple(dict.fromkeys(cmds))),
                headline=f"{mps[0]} is mounted noexec under {bad[0][0]['path']}")


@check(
    id="DLD-JIT-002", slug="jit-dir-not-writable", title="The job's user can write the kernel and extension caches",
    remedy="fix-configuration", drain=False,
    problem="A compile-and-load directory is not writable by the user who runs the job",
    tags=("storage", "python"), requires=("jit_dirs.dirs", "jit_dirs.user"),
    what="""For every cache directory a tool installed here writes compiled code to (Triton, TorchInductor, torch
    C++ extensions, CuPy's kernel cache), resolved for the user who runs the job (its variable or the tool's
    default under HOME or TMPDIR), checks the directory, or the nearest ancestor it would be created in, for that
    user: owner, group and mode bits, the POSIX access ACL, and whether the mount is read-only.""",
    why="""The tools create their cache on first use and fail with 'PermissionError: [Errno 13] Permission denied'
    when they cannot: a HOME the container's user does not own (/app, /), a /tmp/torchinductor_<user> or
    /tmp/torch_extensions another user created first, a read-only home on HPC compute nodes.""",
    fix="""Set the tool's cache variable (TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, TORCH_EXTENSIONS_DIR,
    CUPY_CACHE_DIR) to a directory the user owns, or give the user the directory (chown).""",
)
def jit_dir_not_writable(facts: Facts, matrix: Any) -> Result:
    user = facts.get("jit_dirs.user") or {}
    mounts = [m for m in facts.get("mounts.entries") or [] if isinstance(m, dict)]
    dirs = _dirs(facts, matrix)
    nameless = _nameless(facts, user, matrix)
    if not dirs and not nameless:
        return skip("no tool here caches compiled code (Triton, TorchInductor, torch extensions, CuPy)")
    if not isinstance(user.get("uid"), int) and not user.get("root"):
        return skip("the user who runs the job is not known")
    bad = []
    for d, used_by in dirs:
        why = None
        m = mount_of(str(d.get("real") or d.get("checked") or d["path"]), mounts)
        if m and "ro" in (m.get("options") or []):
            why = f"{m['mountpoint']} is mounted read-only ({m.get('fstype')} {','.join(m.get('options') or [])})"
        elif d.get("kind"):
            why = f"{d['path']} exists and is a {d['kind']}, not a directory"
        else:
            why = writable_by(user, d)
        if why:
            bad.append((d, used_by, why))
    if not bad and nameless:
        return nameless
    if not bad:
        return passed(f"{len(dirs)} cache director{'y' if len(dirs) == 1 else 'ies'} writable by {_who(user)}",
                      dirs=[d["path"] for d, _ in dirs])
    msgs, cmds = [], []
    if nameless is not None:  # both: the nameless uid first, the directories it cannot write after
        msgs.append(nameless.message)
        cmds += list(nameless.fix.commands if nameless.fix else ())
    for d, used_by, why in bad:
        msgs.append(f"{d['tool']} ({used_by}) cache {d['path']} is not writable by {_who(user)}: {why}")
        var = {"torchinductor": "TORCHINDUCTOR_CACHE_DIR", "triton-under-inductor": "TRITON_CACHE_DIR",
               "triton": "TRITON_CACHE_DIR", "torch-extensions": "TORCH_EXTENSIONS_DIR",
               "cupy-kernel-cache": "CUPY_CACHE_DIR"}.get(str(d.get("name")))
        leaf = d["path"].rstrip("/").split("/")[-1]
        if var:
            cmds.append(f"export {var}=/tmp/$(id -un)/{leaf}   # a directory the job's user owns")
        if " is mode " in str(why) and user.get("name"):
            cmds.append(f"sudo chown -R {shlex.quote(str(user['name']))}: {shlex.quote(d['checked'])}   # or give "
                        "the user its own directory")
    result = fail if any(d.get("exists") or d.get("set_by") for d, _, _ in bad) else warn
    return result("; ".join(msgs), {"user": {"name": user.get("name"), "uid": user.get("uid"),
                                           "source": user.get("source")},
                                  "dirs": [{"path": d["path"], "tool": d.get("tool"), "checked": d.get("checked"),
                                            "mode": d.get("mode"), "uid": d.get("uid"), "reason": w}
                                           for d, _, w in bad]},
                Fix("Give each tool a cache directory the job's user can write.", tuple(dict.fromkeys(cmds))),
                headline=f"{bad[0][0]['path']} not writable by {_who(user)}")
