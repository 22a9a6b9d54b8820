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
from typing import Any, Dict, List, Optional, Tuple

from dl_doctor.consumers import lib_version
from dl_doctor.host import Host, UntrustedCommand
from dl_doctor.probes import ProbeContext, probe
from dl_doctor.trust import python_startup_paths
from dl_doctor.workers import map_daemon

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
import json, os, site, sys
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
print(json.dumps({
    "version": "%d.%d.%d" % sys.version_info[:3], "executable": sys.executable, "prefix": sys.prefix,
    "base_prefix": getattr(sys, "base_prefix", sys.prefix), "sys_path": sys.path,
    "user_site": getattr(site, "USER_SITE", None), "user_site_enabled": bool(getattr(site, "ENABLE_USER_SITE", False)),
    "site_packages": sites, "pythonpath": os.environ.get("PYTHONPATH"), "pth_files": pth,
    "origins": dict((n, origin(n)) for n in ("torch", "numpy", "tensorflow", "jax")),
}))
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

def _homes(host: Host) -> List[str]:
    homes = ["/root"] + [f"/home/{n}" for n in _ls(host, "/home")]
    env_home = host.environ().get("HOME")
    if env_home and env_home not in homes:
        homes.append(env_home)
    return [h for h in homes if host.is_dir(h)]


def _walk_pyvenv(host: Host, base: str, depth: int, found: List[str], limit: int) -> None:
    if depth < 0 or len(found) >= limit:
        return
    if host.is_file(f"{base}/pyvenv.cfg"):
        found.append(base)
        return
    for name in _ls(host, base):
        if name in SKIP_DIRS or name.startswith("."):
            if name not in (".venv", ".virtualenvs", ".conda"):
                continue
        path = posixpath.join(base, name)
        if host.is_dir(path) and not host.readlink(path):
            _walk_pyvenv(host, path, depth - 1, found, limit)


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
    ``PATH`` are *active*; then stacked conda environments (``CONDA_PREFIX_N``), the root of ``CONDA_EXE`` and its
    ``envs/``. Under --sysroot the session is the tree's ``proc/self/environ``.
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
        for name in _ls(host, f"{root}/envs"):
            out.append((f"{root}/envs/{name}", f"{root}/envs/{name}/bin/python", "CONDA_EXE envs/", False))
    return out


def kernelspec_interpreters(host: Host, homes: List[str], prefixes: List[str]) -> List[Tuple[str, str]]:
    """``(python, kernel name)`` from Jupyter kernelspecs: system, per-user and per-environment kernel directories."""
    dirs = ["/usr/share/jupyter/kernels", "/usr/local/share/jupyter/kernels"]
    dirs += [f"{h}/.local/share/jupyter/kernels" for h in homes]
    dirs += [f"{p}/share/jupyter/kernels" for p in prefixes]
    out: List[Tuple[str, str]] = []
    for directory in dict.fromkeys(dirs):
        for name in _ls(host, directory)[:256]:
            text = _read(host, f"{directory}/{name}/kernel.json", 65536)
            if not text:
                continue
            try:
                argv = json.loads(text).get("argv")
            except (ValueError, AttributeError, RecursionError):
                continue
            if isinstance(argv, list) and argv and isinstance(argv[0], str) and argv[0].startswith("/"):
                out.append((argv[0], name))
    return out


def discover(ctx: ProbeContext, limit: int) -> Tuple[List[Dict[str, Any]], bool]:
    """Candidate environments, the ones the session uses first (``active``), at most ``limit``."""
    host = ctx.host
    out: List[Dict[str, Any]] = []

    def add(prefix: str, kind: str, python: Optional[str] = None, name: Optional[str] = None, role: Optional[str] = None,
            found_by: Optional[str] = None, active: bool = False):
        prefix = prefix.rstrip("/") or "/"
        for e in out:
            if e["prefix"] == prefix and (e["kind"] == kind or kind in ("conda", "venv")):
                if found_by and found_by not in e["found_by"]:
                    e["found_by"].append(found_by)
                e["active"] = e["active"] or active
                return
        out.append({"prefix": prefix, "kind": kind, "python": python, "name": name or posixpath.basename(prefix),
                    "role": role, "found_by": [found_by] if found_by else [], "active": active})

    if not ctx.options.get("no_env_scan"):
        for prefix, python, found_by, active in session_environments(host):
            kind = _env_kind(host, prefix)
            if kind:
                add(prefix, kind, python, found_by=found_by, active=active)

    if host.live:
        add(sys.prefix, "venv" if sys.prefix != getattr(sys, "base_prefix", sys.prefix) else "interpreter",
            sys.executable, role="dl-doctor")
    for path in ctx.options.get("python") or []:
        if path.endswith(tuple(f"/bin/{n}" for n in ("python", "python3"))) or re.search(r"/bin/python3(\.\d+)?$", path):
            add(posixpath.dirname(posixpath.dirname(path)), "requested", path, role="requested")
        else:
            add(posixpath.dirname(path), "requested", path, role="requested")
    if ctx.options.get("no_env_scan"):
        return out[:limit], False

    homes = _homes(host)
    conda_roots = ["/opt/conda", "/opt/miniconda3", "/opt/anaconda3", "/usr/local/anaconda3", "/usr/local/miniconda3"]
    for home in homes:
        conda_roots += [f"{home}/{n}" for n in CONDA_ROOT_NAMES] + [f"{home}/.conda"]
    env_files = [f"{home}/.conda/environments.txt" for home in homes]
    for root in conda_roots:
        if host.is_dir(f"{root}/conda-meta"):
            add(root, "conda", f"{root}/bin/python", name=f"{posixpath.basename(root)} (base)")
        for name in _ls(host, f"{root}/envs"):
            if host.is_dir(f"{root}/envs/{name}/conda-meta"):
                add(f"{root}/envs/{name}", "conda", f"{root}/envs/{name}/bin/python", name=name)
    for listing in env_files:
        for line in (_read(host, listing, 1 << 20) or "").splitlines():
            line = line.strip()
            if line.startswith("/") and host.is_dir(f"{line}/conda-meta"):
                add(line, "conda", f"{line}/bin/python")
    for rc in [f"{h}/.condarc" for h in homes] + ["/etc/conda/.condarc", "/etc/conda/condarc"] + \
            [f"{r}/.condarc" for r in conda_roots]:
        for envs_dir in _condarc_envs_dirs(_read(host, rc, 65536) or ""):
            # ~ is the home of the .condarc's owner (a user's), or the session's HOME (a system-wide one)
            home = posixpath.dirname(rc) if posixpath.dirname(rc) in homes else (host.environ().get("HOME") or "/root")
            envs_dir = envs_dir.replace("~", home, 1) if envs_dir.startswith("~") else envs_dir
            for name in _ls(host, envs_dir):
                if host.is_dir(f"{envs_dir}/{name}/conda-meta"):
                    add(f"{envs_dir}/{name}", "conda", f"{envs_dir}/{name}/bin/python", name=name,
                        found_by=f"envs_dirs in {rc}")
    for home in homes:
        for pipx in (f"{home}/.local/pipx/venvs", f"{home}/.local/share/pipx/venvs"):
            for name in _ls(host, pipx):
                if host.is_file(f"{pipx}/{name}/pyvenv.cfg"):
                    add(f"{pipx}/{name}", "venv", f"{pipx}/{name}/bin/python", name=f"pipx {name}", found_by="pipx")
    for python, kernel in kernelspec_interpreters(host, homes, [e["prefix"] for e in out]):
        bindir = posixpath.dirname(python)
        prefix = posixpath.dirname(bindir) if bindir.endswith("/bin") else bindir
        kind = _env_kind(host, prefix)
        if kind:
            add(prefix, kind, python, found_by=f"Jupyter kernel {kernel}")
    venvs: List[str] = []
    for base in homes + ["/opt"]:
        _walk_pyvenv(host, base, 3, venvs, limit * 2)
    for v in venvs:
        add(v, "venv", f"{v}/bin/python")
    for exe in ["/usr/libexec/platform-python"] + host.glob("/usr/bin/python3*") + host.glob("/usr/local/bin/python3*"):
        if re.search(r"(platform-python|python3(\.\d+)?)$", exe) and host.is_file(exe):
            prefix = "/usr/local" if exe.startswith("/usr/local/") else "/usr"
            add(prefix, "system", exe, name=f"system ({prefix})")
    for home in homes:
        for d in host.glob(f"{home}/.local/lib/python3.*/site-packages"):
            add(posixpath.dirname(d), "user-site", None, name=f"user site of {home}")
    # the environments the session uses first, then those named with --python, then the rest as found
    out.sort(key=lambda e: (0 if e.get("active") else 1 if e.get("role") == "requested" else 2))
    truncated = len(out) > limit
    return out[:limit], truncated


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

    from dl_doctor.ldso import Loader  # with pyelftools: imported by the runs that resolve libraries

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
    from dl_doctor.consumers import scan

    python = env.get("python")
    return scan(host, sites=list(dists and {d["location"] for d in dists.values()} or []), dists=dists, owned=owned,
                ld_library_path=ld, sys_path=live_path or sorted({d["location"] for d in dists.values()}),
                executable=python if python and host.is_file(python) else None, matrix=load_matrix(()),
                torch_preload=torch_preload)




@probe("python_envs", "every Python environment: frameworks, bundled CUDA libraries, which copy would load",
       timeout_option="python_envs_timeout")
def python_envs_probe(ctx: ProbeContext) -> Dict[str, Any]:
    limit = int(ctx.options.get("env_limit") or DEFAULT_ENV_LIMIT)
    envs, truncated = discover(ctx, limit)
    # Daemon workers: one stuck in a syscall can never keep the process alive after the reports are written.
    results = map_daemon(lambda e: inspect(ctx, e), envs, workers=8, name="probe-python_envs:")
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
            "scan": {"limit": limit, "truncated": truncated,
                                              "env_scan": not ctx.options.get("no_env_scan"),
                                              "deep": bool(ctx.options.get("deep"))}}
