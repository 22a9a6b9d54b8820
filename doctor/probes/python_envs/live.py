"""The live probe and --deep: scripts run in each environment's own interpreter through Host.run_python (under
the trust rule, docs/security.md), and their output cut to the expected shape. The live script is stdlib-only and
valid on Python 3.6 (RHEL 8's platform-python) and never imports a framework; --deep does, in a subprocess with a
timeout, and records what was really mapped (/proc/self/maps)."""

from __future__ import annotations

import json
import posixpath
import re
import sys
from typing import Any, Dict, List, Optional, Type

from dl_doctor.host import Host, UntrustedCommand
from dl_doctor.probes.python_envs.static import _ls
from dl_doctor.readers.elf import read_dynamic

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


# -- live and deep ---------------------------------------------------------------------------

# What the live script prints, field by field: a hostile or broken interpreter's other output is dropped.
_LIVE_SHAPE = {"version": str, "executable": str, "prefix": str, "base_prefix": str, "sys_path": list,
               "user_site": str, "user_site_enabled": bool, "site_packages": list, "pythonpath": str,
               "pth_files": list, "origins": dict}
_DEEP_SHAPE = {"imported": bool, "version": str, "cuda": str, "cuda_available": bool, "device_count": int,
               "cuda_error": str, "arch_list": list, "arch_list_error": str, "cudnn": int, "cudnn_error": str,
               "nccl": str, "nccl_error": str, "import_error": str, "mapped": list}
MAX_LIST_ITEMS = 4096


def _shaped(raw: Any, shape: Dict[str, Type[Any]]) -> Dict[str, Any]:
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
os.environ.update(plan.get("environ") or {})
for module in plan.get("first", []) + ([plan["import"]] if plan.get("import") else []):
    try:
        imported = __import__(module)
        if module == plan.get("import") and plan.get("call"):
            getattr(imported, plan["call"])()
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
        error = str(exc)
        for d in (plan.get("dlopen_dirs") or {}).get(name, []):
            if os.path.exists(os.path.join(d, name)):
                try:
                    ctypes.CDLL(os.path.join(d, name))
                    error = ""
                except OSError as again:
                    error = str(again)
                break
        say("dlopen", name, error)
try:
    maps = sorted(set(l.split()[-1] for l in open("/proc/self/maps") if ".so" in l.split()[-1]))
except OSError:
    maps = []
say("maps", json.dumps(maps[:4096]), "")
"""
_NOT_FOUND = re.compile(r"([\w.+-]{1,200}\.so[\w.]{0,40}): cannot open shared object file")

# A package whose import alone does not do what the framework does before it opens its libraries: its start-up does.
# jax-cuda*-pjrt's package is the namespace jax_plugins; jax imports jax_plugins.xla_cuda* and calls its
# initialize() -- which preloads the nvidia-* wheel libraries by absolute path, then registers xla_cuda_plugin.so,
# whose RPATH names the same directories -- when its backends start (jax._src.xla_bridge.discover_pjrt_plugins),
# not at import. Importing jax_plugins alone and opening libcudart.so.12 by name from the interpreter finds none
# of them: the false 'not found' of issue 25. JAX_PLATFORMS=cpu: the plugins still initialize (the libraries
# load) but no GPU client is made, so a GPU in use loses no memory to --deep.
_START = {"jax_plugins": {"import": "jax", "call": "devices", "environ": {"JAX_PLATFORMS": "cpu"}}}


def _dlopen_dirs(host: Host, site: str, consumer: Dict[str, Any]) -> Dict[str, List[str]]:
    """soname -> the directories the object that opens it by name searches: its DT_RPATH and DT_RUNPATH, $ORIGIN
    expanded. glibc's dlopen searches the calling object's own paths (ld.so(8)); ctypes.CDLL(name) from the
    interpreter searches the interpreter's, so a library that TensorFlow's libtensorflow_framework.so.2 opens through
    its RUNPATH (the nvidia-* wheels of tensorflow[and-cuda], at its first GPU use: never without a driver) would
    read as 'not found'. The deep script tries the interpreter's search first (LD_LIBRARY_PATH, ld.so.cache, the
    defaults), then these directories, and the real loader decides whether the file there loads. The caller of a
    soname is the one the consumer model named; one the model found otherwise gets every caller's directories."""
    wanted = list(consumer.get("dlopen") or [])
    own: Dict[str, List[str]] = {}
    # the objects that open them by name (the loader inputs' callers), each for every name it may open
    callers = [(name, c) for c in consumer.get("callers") or [] if isinstance(c, str) for name in wanted[:64]]
    for lib in consumer.get("libraries") or []:  # facts of 0.2 development builds: the prediction's caller
        if isinstance(lib, dict) and isinstance(lib.get("requested_by"), str) and \
                str(lib.get("via") or "").startswith("dlopen"):
            callers.append((str(lib.get("soname")), lib["requested_by"]))
    for soname, caller in callers[:256]:
        if soname not in wanted:
            continue
        path = caller if caller.startswith("/") else posixpath.join(site, caller)
        dyn = read_dynamic(host, path)
        if not dyn:
            continue
        origin = posixpath.dirname(path)
        dirs = [d.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)
                for d in list(dyn.get("rpath") or []) + list(dyn.get("runpath") or [])]
        found = list(dict.fromkeys(posixpath.normpath(d) for d in dirs if d.startswith("/")))
        own[soname] = list(dict.fromkeys(own.get(soname, []) + found))[:64]
    every = list(dict.fromkeys(d for dirs in own.values() for d in dirs))[:64]
    return {name: own.get(name) or every for name in wanted if own.get(name) or every}


def run_deep_consumer(host: Host, env: Dict[str, Any], consumer: Dict[str, Any], timeout: float,
                      startup: List[str]) -> Dict[str, Any]:
    """What really happens when this consumer loads (the truth that wins over the static prediction)."""
    site = consumer.get("location") or ""
    plan = {"import": consumer.get("package") or None, "first": ["torch"] if consumer.get("links_torch") else [],
            "objects": [posixpath.join(site, rel) for rel in consumer.get("cuda_object_paths") or []],
            "dlopen": consumer.get("dlopen") or []}
    plan.update(_START.get(consumer.get("package") or "", {}))
    plan["dlopen_dirs"] = _dlopen_dirs(host, site, consumer)
    try:
        result = _run_python(host, env, DEEP_CONSUMER_SCRIPT, timeout, startup, json.dumps(plan))
    except UntrustedCommand as exc:
        return {"skipped": f"not imported as root: {exc.reason}"}
    except OSError as exc:
        return {"error": f"cannot run {env['python']}: {exc.strerror or exc}"}
    steps: List[Dict[str, Optional[str]]] = []
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

