"""Python interpreters: the one running dl-doctor and those named with ``--python``."""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List

from doctor.probes import ProbeContext, Unavailable, probe

# Runs inside each interpreter: stdlib only, and valid on Python 3.6 (RHEL 8's
# platform-python), so no f-strings with '=' and no newer modules.
INTERPRETER_SCRIPT = r"""
import json, sys, os
print(json.dumps({
    "version": "%d.%d.%d" % sys.version_info[:3],
    "implementation": sys.implementation.name,
    "executable": sys.executable,
    "prefix": sys.prefix,
    "base_prefix": getattr(sys, "base_prefix", sys.prefix),
    "conda": os.path.isdir(os.path.join(sys.prefix, "conda-meta")),
}))
"""


def inspect_interpreter(ctx: ProbeContext, path: str, timeout: float) -> Dict[str, Any]:
    entry: Dict[str, Any] = {"path": path}
    try:
        result = ctx.host.run([path, "-I", "-c", INTERPRETER_SCRIPT], timeout=timeout)
    except OSError as exc:
        entry["error"] = f"cannot run: {exc.strerror or exc}"
        return entry
    if result.timed_out:
        entry["error"] = f"timed out after {timeout:g}s"
    elif result.returncode != 0:
        entry["error"] = f"exit {result.returncode}: {(result.stderr or result.stdout).strip()[-500:]}"
    else:
        try:
            entry.update(json.loads(result.stdout.strip().splitlines()[-1]))
            entry["in_venv"] = entry["prefix"] != entry["base_prefix"]
        except (ValueError, IndexError, KeyError) as exc:
            entry["error"] = f"unreadable output: {exc}"
    return entry


@probe("python", "Python interpreters: the running one and each --python PATH")
def python_probe(ctx: ProbeContext) -> Dict[str, Any]:
    requested: List[str] = list(ctx.options.get("python") or [])
    if not ctx.host.live:
        raise Unavailable("interpreters are not run under a sysroot")
    paths = [sys.executable] + [p for p in requested if p != sys.executable]
    timeout = max(1.0, float(ctx.options.get("timeout", 5.0)) * 0.8)
    with ThreadPoolExecutor(max_workers=min(8, len(paths))) as pool:
        entries = list(pool.map(lambda p: inspect_interpreter(ctx, p, timeout), paths))
    for entry in entries:
        entry["role"] = "dl-doctor" if entry["path"] == sys.executable else "requested"
    return {"interpreters": entries}
