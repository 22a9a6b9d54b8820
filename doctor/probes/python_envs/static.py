"""Static inspection of one Python environment: what its files say (dist-info, conda-meta, torch/version.py,
the nvidia-* wheels' RECORDs, the CUDA libraries bundled in it, torch's preload table), and every CUDA consumer with the raw
loader inputs of its libraries (dl_doctor.readers.consumers; which file loads is judged from them by
dl_doctor.facts.loading). Reads files only: works under --sysroot."""

from __future__ import annotations

import posixpath
import re
from typing import Any, Dict, List, Optional, Tuple

from dl_doctor.facts.derive import torch_cpu_only
from dl_doctor.host import Host
from dl_doctor.readers.consumers import lib_version

FRAMEWORKS = ("torch", "torchvision", "torchaudio", "tensorflow", "jax", "jaxlib", "deepspeed", "apex", "xformers",
              "flash-attn", "triton", "numpy")
# Key CUDA libraries a framework loads, by soname prefix.
KEY_LIBS = {"cudart": "libcudart.so", "cublas": "libcublas.so", "cudnn": "libcudnn.so", "nccl": "libnccl.so",
            "nvjitlink": "libnvJitLink.so", "cusparse": "libcusparse.so"}
_DIST = re.compile(r"^(?P<name>[A-Za-z0-9_.]+?)-(?P<version>[^-]+?)\.(dist-info|egg-info)$")
# One line of torch/version.py (`cuda: Optional[str] = '12.4'`), matched per line (lines are capped): no part of
# the pattern can scan past its line, and the annotation cannot overlap the spaces around it.
_VERSION_PY_LINE = re.compile(r"""(__version__|cuda|git_version)[ \t]*(?::[^=\n]{0,200})?=[ \t]*(['"]?)([^'"\n]{0,200})\2[ \t]*""")
MAX_VERSION_LINE = 1024
_PY_DIR = re.compile(r"^python(3\.\d+)$")
_PRELOAD_ITEM = re.compile(r"""\(\s*["'](\w+)["']\s*,\s*["'](lib[^"']+)["']\s*\)""")
_PRELOAD_DICT_ITEM = re.compile(r"""["'](\w+)["']\s*:\s*["'](lib[^"']+)["']""")


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
    d: Optional[Dict[str, Any]]  # a distribution here, the framework's below (or None)
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
        from dl_doctor.readers.consumers import device_code
        torch_cuda = sorted(f"{torch_dir}/lib/{n}" for n in _ls(host, f"{torch_dir}/lib")
                            if n.startswith("libtorch_cuda") and n.endswith(".so"))
        code = device_code(host, torch_cuda, posixpath.dirname(torch_dir)) if torch_cuda else None
        if code:
            t["device_code"] = code
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


def _consumers(host: Host, env: Dict[str, Any], dists: Dict[str, Dict[str, Any]], owned: Dict[str, Tuple[str, str]],
               ld: List[str], live_path: Optional[List[str]], torch: Optional[Dict[str, Any]],
               matrix: Any) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """The consumers of one environment and its raw loader inputs (dl_doctor.readers.consumers.scan); ``matrix`` is
    the run's (ProbeContext.matrix: its consumer table names the libraries each consumer opens by name), None
    without one; ``torch`` the environment's torch facts (its preload model, read from its __init__.py)."""
    from dl_doctor.readers.consumers import scan

    python = env.get("python")
    return scan(host, sites=list(dists and {d["location"] for d in dists.values()} or []), dists=dists, owned=owned,
                ld_library_path=ld, sys_path=live_path or sorted({d["location"] for d in dists.values()}),
                executable=python if python and host.is_file(python) else None, matrix=matrix,
                torch=torch if torch and not torch_cpu_only(torch, None) else None)
