"""Plugins a host library opens by name at run time (dlopen), judged as its DT_NEEDED are: NCCL's net and tuner
plugins (aws-ofi-nccl on libfabric/EFA), ONNX Runtime's execution providers, cuDNN 9's sub-libraries. The names each
host tries and how it searches come from the matrix (compat_matrix/data/loading.toml); what loads is replayed with
the one loader model (dl_doctor.facts.plugins over dl_doctor.facts.loading)."""

from __future__ import annotations

import posixpath
import shlex
from typing import Any, Dict, List, Mapping, Optional, Tuple

from dl_doctor.checks.common import no_nvidia_gpu
from dl_doctor.facts.plugins import cuda_major_of, replay
from dl_doctor.model import Facts, Fix, Result, check, fail, passed, skip, warn


def _envs(facts: Facts) -> List[Dict[str, Any]]:
    return [e for e in facts.get("python_envs.environments") or [] if isinstance(e, dict) and not e.get("error")]


def needs_plugin_facts(facts: Facts) -> Optional[str]:
    if not any(isinstance(e.get("dlopen_plugins"), dict) for e in _envs(facts)):
        return "no environment has a host library that opens plugins (NCCL, ONNX Runtime, cuDNN 9)"
    if no_nvidia_gpu(facts):
        # every plugin family here drives a GPU (NCCL's transports, ONNX Runtime's CUDA and TensorRT providers, cuDNN,
        # TensorRT): on a host with no NVIDIA GPU none of them is ever opened, and a CPU run is what the host can do
        return "no NVIDIA GPU here: the plugins that drive one are never opened"
    return None


def _families(matrix: Any) -> Dict[str, Dict[str, Any]]:
    return {f["name"]: f for f in (matrix.entries("dlopen_plugin") if matrix is not None else [])}


def _owner(env: Mapping[str, Any], path: Optional[str]) -> Optional[Tuple[str, str]]:
    """(distribution, version) that installed ``path``: a consumer whose objects include it."""
    for c in env.get("consumers") or []:
        if not isinstance(c, Mapping) or not path:
            continue
        site = str(c.get("location") or "")
        for rel in c.get("cuda_object_paths") or []:
            if f"{site}/{rel}" == path:
                return str(c.get("distribution")), str(c.get("version"))
    return None


def _env_major(env: Mapping[str, Any], exclude: Optional[str]) -> Tuple[Optional[int], Optional[str]]:
    """The CUDA major of the environment's other CUDA consumers (torch first), and which one says so."""
    cs = [c for c in env.get("consumers") or [] if isinstance(c, Mapping) and c.get("distribution") != exclude
          and isinstance(c.get("cuda_major"), int)]
    cs.sort(key=lambda c: c.get("distribution") != "torch")
    return (cs[0]["cuda_major"], f"{cs[0]['distribution']} {cs[0].get('version')}") if cs else (None, None)


def _python(env: Mapping[str, Any]) -> str:
    return shlex.quote(str(env.get("python") or f"{env.get('prefix')}/bin/python"))


def _judge(env: Dict[str, Any], matrix: Any, seen: Optional[set] = None
           ) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]], int]:
    """(plugins not found that the host asks for, plugins found that cannot load or do not match, plugins judged)."""
    families = _families(matrix)
    hosts = replay(env.get("dlopen_plugins") or {}, matrix, env.get("loader"))
    found_by_host: Dict[Tuple[str, str], bool] = {}
    for h in hosts:
        found_by_host[(h["host"], h["family"])] = any(p.get("found") for p in h.get("plugins") or [])
    missing: List[Dict[str, Any]] = []
    broken: List[Dict[str, Any]] = []
    judged = 0
    seen = set() if seen is None else seen
    for h in hosts:
        fam = families.get(h["family"]) or {}
        when = fam.get("when")
        if h.get("unjudged"):
            continue
        for p in h.get("plugins") or []:
            key = (h["host_real"], p.get("real") or p.get("plugin"))
            if key in seen:
                continue
            seen.add(key)
            base = {"env": env, "host": h, "family": fam, "plugin": p}
            if not p.get("found"):
                if when == "present" or (when == "named" and not h.get("asked")) or \
                        p.get("plugin") in (fam.get("if_present") or []):
                    continue
                if fam.get("also") and found_by_host.get((h["host"], fam["also"])):
                    continue
                judged += 1
                missing.append(base)
                continue
            judged += 1
            faults: List[str] = []
            lost = [m for m in p.get("missing") or [] if not m.get("in_wheels")]
            for m in lost[:3]:
                faults.append(f"it needs {m['soname']}" + (f" (for {posixpath.basename(m['needed_by'])})"
                                                          if m.get("needed_by") and m["needed_by"] != p.get("real")
                                                          else "") + ", which is not found" +
                              (f" ({m['elsewhere']} is installed, in a directory no search looks in)"
                               if m.get("elsewhere") else ""))
            for u in (p.get("unmet_versions") or [])[:3]:
                faults.append(f"{posixpath.basename(u['object'])} needs {u['file']} version {u['version']}, which "
                              f"{u['provider']} does not define")
            major = cuda_major_of(p.get("needed") or [])
            owner = _owner(env, p.get("real"))
            env_major, env_by = _env_major(env, owner[0] if owner else None)
            if major is not None and env_major is not None and major != env_major and lost:
                faults.append(f"it is a CUDA {major} build (it needs {', '.join(n for n in p.get('needed') or [] if cuda_major_of([n]) == major)[:120]}) in a CUDA {env_major} environment ({env_by})")
            if fam.get("same_version"):
                a, b = _release(h.get("host_version")), _release(p.get("version"))
                if a and b and a != b:
                    faults.append(f"it is cuDNN {p.get('version')} ({p.get('version_from')}) while "
                                  f"{posixpath.basename(h['host_real'])} is {h.get('host_version')} "
                                  f"({h.get('host_version_from')}): the sub-libraries must be the same release")
            if faults:
                broken.append({**base, "faults": faults, "owner": owner, "major": major, "env_major": env_major})
    return missing, broken, judged


def _release(v: Optional[str]) -> Optional[Tuple[int, ...]]:
    import re

    m = re.match(r"(\d+)\.(\d+)\.(\d+)", v or "")
    return tuple(int(x) for x in m.groups()) if m else None


def _who(item: Mapping[str, Any]) -> str:
    h = item["host"]
    host = posixpath.basename(h["host"])
    v = f" {h['host_version']}" if h.get("host_version") else ""
    src = str(h.get("host_version_from") or "")
    return f"{host}{v}" + (f" ({src})" if src.startswith("wheel ") and "nvidia-" not in src else "")


@check(
    id="DLD-LOAD-001", slug="dlopen-plugin-not-found", title="The plugins a host library is asked to load are found",
    remedy="fix-configuration", drain=False,
    problem="A plugin the host library is asked to open is not where it looks",
    tags=("python", "cuda", "loader"), requires=("python_envs.environments",), applies=(needs_plugin_facts,),
    what="""For each host library in each environment that opens plugins by name (NCCL and NCCL_NET_PLUGIN /
    NCCL_TUNER_PLUGIN, libcudnn.so.9 and its sub-libraries), looks for every name the host tries, in its order, with
    the host's own search (its directory where it loads from there, its RUNPATH/RPATH, LD_LIBRARY_PATH, ld.so.cache,
    the default directories), as the loader model replays it.""",
    why="""A plugin the session names (NCCL_NET_PLUGIN=ofi) that is not found makes NCCL fall back to TCP sockets
    silently on an EFA or InfiniBand cluster; a cuDNN 9 sub-library that is not beside libcudnn.so.9 or on the search
    path fails every convolution ('Unable to load any of {libcudnn_ops.so.9.1.0, ...}'). A default plugin nobody names
    that is absent is normal and is not reported.""",
    fix="""Install the plugin, or put its directory on LD_LIBRARY_PATH (or name it by absolute path); unset the
    variable to use the host's built-in implementation; reinstall the library whose sub-libraries are missing.""",
)
def dlopen_plugin_not_found(facts: Facts, matrix: Any) -> Result:
    items: List[Dict[str, Any]] = []
    judged = 0
    seen: set = set()  # a system library is judged once, not once per environment
    for env in _envs(facts):
        missing, _, n = _judge(env, matrix, seen)
        items += missing
        judged += n
    if not judged:
        return skip("no host library is asked for a plugin (the defaults that are absent are normal)")
    if not items:
        return passed(f"{judged} plugin(s) the host libraries look for are found")
    msgs, cmds, evidence = [], [], []
    for it in items[:8]:
        h, p, fam, env = it["host"], it["plugin"], it["family"], it["env"]
        var = fam.get("variable")
        asked = f" ({var}={h.get('value')})" if var and h.get("value") else ""
        beside = p.get("beside_host")
        where = (f" ({beside} is beside it, but {posixpath.basename(h['host_real'])} has no RUNPATH there and the "
                 f"directory is not on LD_LIBRARY_PATH, in ld.so.cache or a default directory)" if beside else "")
        msgs.append(f"{fam.get('component')} {p['plugin']}{asked} is not found by {_who(it)} in {env.get('name')} "
                    f"({env.get('prefix')}): it tried {', '.join(p.get('names') or [])}{where}; "
                    f"{fam.get('fallback') or ''}".rstrip("; "))
        evidence.append({"host": h["host"], "plugin": p["plugin"], "names": p.get("names"),
                         "looked_in": (p.get("looked_in") or [])[:12], "variable": var, "value": h.get("value")})
        if beside:
            d = posixpath.dirname(beside)
            cmds.append(f"export LD_LIBRARY_PATH={shlex.quote(d)}:$LD_LIBRARY_PATH   # in the job's environment "
                        "(sudo drops it: sudo env LD_LIBRARY_PATH=... CMD)")
            cmds.append(f"echo {shlex.quote(d)} | sudo tee /etc/ld.so.conf.d/{posixpath.basename(p['plugin'])}.conf "
                        "&& sudo ldconfig   # or for every process")
        elif var:
            cmds.append(f"export LD_LIBRARY_PATH=/path/to/plugin/dir:$LD_LIBRARY_PATH   # the directory holding "
                        f"{(p.get('names') or [''])[-1]}; or {var}=/absolute/path/to/it")
            cmds.append(f"unset {var}   # to use {fam.get('fallback', 'the built-in implementation').split(' (')[0]}")
        else:
            d = posixpath.dirname(h["host_real"])
            cmds.append(f"ls -l {shlex.quote(d)}/{p['plugin']}*   # the sub-library is missing beside "
                        f"{posixpath.basename(h['host_real'])}: reinstall the package that installed it")
    optional = all(it["plugin"].get("optional") for it in items)
    return (warn if optional else fail)("; ".join(msgs), {"plugins": evidence},
                                        Fix("Make the plugin findable by the host's search, or stop asking for it.",
                                            tuple(dict.fromkeys(cmds))),
                                        headline=f"{items[0]['plugin']['plugin']} not found by {_who(items[0])}")


@check(
    id="DLD-LOAD-002", slug="dlopen-plugin-cannot-load", title="The plugins a host library loads can load and match it",
    remedy="repair-software", drain=False,
    problem="A plugin the host library opens cannot load, or does not match its host",
    tags=("python", "cuda", "loader"), requires=("python_envs.environments",), applies=(needs_plugin_facts,),
    what="""For every plugin a host library would open (the one its search finds: aws-ofi-nccl's libnccl-net*.so,
    ONNX Runtime's libonnxruntime_providers_*.so beside the package, cuDNN 9's sub-libraries), loads it as ld.so would
    (RTLD_NOW): its DT_NEEDED with its own RUNPATH and LD_LIBRARY_PATH, and the symbol versions it needs (DT_VERNEED)
    against the copies that load; then the CUDA major its CUDA sonames belong to against the environment's, and, for
    cuDNN, the sub-library's release against libcudnn.so.9's.""",
    why="""dlopen fails as a whole when one dependency or one symbol version is missing, and the host then goes on
    without the plugin: NCCL over TCP instead of EFA ('libfabric.so.1: version `FABRIC_1.7' not found'), ONNX Runtime
    on the CPU ('Failed to load library libonnxruntime_providers_cuda.so with error: libcublasLt.so.11'), cuDNN
    failing its calls. A library of the plugin's that is in the environment's nvidia-* wheels but found only after the
    framework preloads them is DLD-PY-011's, not a fault here.""",
    fix="""Install the dependency the plugin was built against (the EFA installer's libfabric/rdma-core, the CUDA
    major of the provider), or the build of the plugin made for this machine.""",
)
def dlopen_plugin_cannot_load(facts: Facts, matrix: Any) -> Result:
    items: List[Dict[str, Any]] = []
    judged = 0
    seen: set = set()
    for env in _envs(facts):
        _, broken, n = _judge(env, matrix, seen)
        items += broken
        judged += n
    if not judged:
        return skip("no plugin is loaded by the host libraries here")
    if not items:
        return passed(f"{judged} plugin(s) load with everything they need")
    msgs, cmds, evidence = [], [], []
    for it in items[:8]:
        h, p, fam, env = it["host"], it["plugin"], it["family"], it["env"]
        owner = it.get("owner")
        what = f"{owner[0]} {owner[1]}'s {posixpath.basename(p['real'])}" if owner else p["real"]
        msgs.append(f"{fam.get('component')} {what} (opened by {_who(it)} in {env.get('name')}) cannot be used: "
                    f"{'; '.join(it['faults'])}" + (f" — {fam['fallback']}" if fam.get("fallback") else ""))
        evidence.append({"host": h["host"], "plugin": p["real"], "found_via": p.get("via"),
                         "missing": [m["soname"] for m in p.get("missing") or [] if not m.get("in_wheels")],
                         "unmet_versions": p.get("unmet_versions"), "plugin_cuda_major": it.get("major"),
                         "environment_cuda_major": it.get("env_major"), "version": p.get("version"),
                         "host_version": h.get("host_version")})
        text = " ".join(it["faults"])
        if any("/opt/amazon/efa" in str(u.get("provider")) or "libfabric" in str(u.get("object")) or
               "libefa" in str(u.get("file")) for u in p.get("unmet_versions") or []):
            cmds += ["curl -O https://efa-installer.amazonaws.com/aws-efa-installer-latest.tar.gz",
                     "tar -xf aws-efa-installer-latest.tar.gz && cd aws-efa-installer && sudo ./efa_installer.sh -y"
                     "   # in a container image: run it in the final stage (it upgrades rdma-core in place)"]
        elif any(m.get("elsewhere") for m in p.get("missing") or []):
            d = posixpath.dirname(next(m["elsewhere"] for m in p["missing"] if m.get("elsewhere")))
            cmds.append(f"export LD_LIBRARY_PATH={shlex.quote(d)}:$LD_LIBRARY_PATH   # where the library it needs is "
                        "installed")
        elif owner and it.get("major") and it.get("env_major"):
            cmds.append(f"{_python(env)} -m pip install --upgrade {shlex.quote(owner[0])}   # a CUDA "
                        f"{it['env_major']} build (onnxruntime-gpu on PyPI: CUDA 12 from 1.19)")
        elif fam.get("same_version"):
            cmds.append(f"{_python(env)} -m pip install --force-reinstall "
                        f"'nvidia-cudnn-cu12=={h.get('host_version')}'   # or the system package of one release")
        else:
            cmds.append(f"ldd {shlex.quote(p['real'])}   # then install what it reports 'not found' ({text[:80]})")
    optional = all(it["plugin"].get("optional") or (it["family"].get("when") == "named" and not it["host"].get("asked"))
                   for it in items)
    first = items[0]
    return (warn if optional else fail)("; ".join(msgs), {"plugins": evidence},
                                        Fix("Give the plugin what it was built against, or install the build made for "
                                            "this machine.", tuple(dict.fromkeys(cmds))),
                                        headline=f"{posixpath.basename(first['plugin']['real'])} cannot load: "
                                                 f"{first['faults'][0]}")
