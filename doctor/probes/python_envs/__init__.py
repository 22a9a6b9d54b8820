"""Every Python environment on the host: discovery, static inspection, a live probe, optional deep import,
and the raw loader inputs of every CUDA consumer (which file loads is judged from them: dl_doctor.facts.loading).

The probe (this module) assembles what its parts find: ``discovery`` (which environments, within per-owner budgets),
``static`` (what each environment's files say; reads files only and works under --sysroot: dist-info, conda-meta,
torch/version.py, wheel RECORDs, ELF dynamic sections, the consumer model) and ``live`` (the scripts run in each
interpreter: a stdlib-only one, valid on Python 3.6, RHEL 8's platform-python, that never imports the frameworks;
with --deep, the frameworks imported in a subprocess with a timeout, recording what was really mapped).
Verdicts are not facts: whether a torch is a CPU-only build is derived from them (dl_doctor.facts.derive).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Dict, List

from dl_doctor.host.trust import python_startup_paths
from dl_doctor.probes import ProbeContext, probe
# the parts, and the names the tests and the verify probe import from here
from dl_doctor.probes.python_envs.plugins import scan as plugin_scan
from dl_doctor.probes.python_envs.discovery import Discovery, _condarc_envs_dirs, discover  # noqa: F401
from dl_doctor.probes.python_envs import pkgmeta
from dl_doctor.probes.python_envs.provides import PYTHON_ENVS_FACTS
from dl_doctor.probes.python_envs.live import live_in_process, run_deep, run_deep_consumer, run_live
from dl_doctor.probes.python_envs.static import (_consumers, _read, inspect_static,  # noqa: F401
                                                 parse_version_py, site_dirs, torch_preload_model)
from dl_doctor.util.workers import map_daemon

DEFAULT_ENV_LIMIT = 32
# The share of the probe's time that discovery may take; inspecting what it found gets the rest.
DISCOVERY_SHARE = 0.25
# The share of the probe's time after which environments not yet inspected are reported as such (the engine drops a
# probe that overruns its time, and with it every environment).
INSPECTION_SHARE = 0.9


def inspect(ctx: ProbeContext, env: Dict[str, Any]) -> Dict[str, Any]:
    host = ctx.host
    out = dict(env)
    try:
        static, owned = inspect_static(host, env)
        out.update(static)
    except Exception as exc:  # noqa: BLE001 - one broken environment costs only itself
        out["error"] = f"static inspection failed: {type(exc).__name__}: {exc}"
        return out
    try:  # what pip and conda recorded: requirements, file owners, the compiled files' integrity
        out["packaging"] = pkgmeta.collect(host, env, out.get("site_packages") or [], out.get("python_version"),
                                           deep=bool(ctx.options.get("deep")))
    except Exception as exc:  # noqa: BLE001 - costs only its own facts
        out["packaging_error"] = f"{type(exc).__name__}: {exc}"
    ld = [d for d in host.environ().get("LD_LIBRARY_PATH", "").split(":") if d]
    sites_key = (host.sysroot, tuple(host.tree_path(s) for s in out.get("site_packages") or []), tuple(ld))
    dists = host.cached(("python_envs:dists", env["prefix"], tuple(out.get("site_packages") or [])), dict)
    torch = (out.get("frameworks") or {}).get("torch")
    # The consumer model reads files only: it runs while the live interpreter below starts (that wait releases the
    # GIL), from the site directories; sys.path entries the live probe adds with wheel libraries redo it afterwards.
    early: Dict[str, Any] = {}

    def consumers_from_sites() -> None:
        try:
            early["value"] = host.cached(("consumers",) + sites_key, lambda: _consumers(
                host, env, dists, owned, ld, None, torch, ctx.matrix))
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
    worker.join()
    sites = set(out.get("site_packages") or [])
    extra = [p for p in live_path or [] if p.startswith("/") and p not in sites and host.is_dir(f"{p}/nvidia")]
    try:
        if extra:  # wheel libraries on sys.path outside the site directories (a .pth, PYTHONPATH): redo with them
            out["consumers"], out["loader"] = host.cached(("consumers",) + key, lambda: _consumers(
                host, env, dists, owned, ld, live_path, torch, ctx.matrix))
        elif "error" in early:
            out["consumers_error"] = early["error"]
        else:
            out["consumers"], out["loader"] = early["value"]
    except Exception as exc:  # noqa: BLE001 - the consumer model costs only its own facts
        out["consumers_error"] = f"{type(exc).__name__}: {exc}"
    try:  # the plugins its host libraries open by name (dl_doctor.facts.plugins): costs only its own facts
        plugins = plugin_scan(host, out, ld, owned, ctx.matrix)
        if plugins:
            # a file the loader inputs already hold (the same record) is not written twice: the replay reads both
            loader_files = (out.get("loader") or {}).get("files") if isinstance(out.get("loader"), dict) else None
            if isinstance(loader_files, dict) and isinstance(plugins.get("files"), dict):
                plugins["files"] = {p: v for p, v in plugins["files"].items() if loader_files.get(p) != v}
            out["dlopen_plugins"] = plugins
    except Exception as exc:  # noqa: BLE001
        out["dlopen_plugins_error"] = f"{type(exc).__name__}: {exc}"
    if ctx.options.get("deep") and host.live and python and host.is_file(python) and out.get("consumers") \
            and env["kind"] != "user-site":
        startup = python_startup_paths(host, env.get("prefix") if env["kind"] in ("venv", "conda") else None,
                                       out.get("site_packages") or [])
        objects = (out.get("loader") or {}).get("objects") or {}
        out["deep_consumers"] = {c["distribution"]: run_deep_consumer(
            host, env, {**c, "callers": (objects.get(c["distribution"]) or {}).get("callers") or []},
            float(ctx.options.get("deep_timeout") or 120.0), startup) for c in out["consumers"][:16]}
    return out



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
       timeout_option="python_envs_timeout", provides=PYTHON_ENVS_FACTS)
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
