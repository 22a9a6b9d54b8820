"""The plugins an environment's host libraries open by name (NCCL, ONNX Runtime, cuDNN 9): the loader's inputs for
them, recorded while dl_doctor.facts.plugins resolves each host here, so that the checks replay the same search
(facts: ``dlopen_plugins`` of each environment). Reads files only, through the Host (works under --sysroot)."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from dl_doctor.facts.plugins import resolve
from dl_doctor.host import Host
from dl_doctor.readers.consumers import lib_version
from dl_doctor.readers.ldso import HostView

MAX_HOSTS = 32


def scan(host: Host, env: Mapping[str, Any], ld_library_path: Sequence[str], owned: Dict[str, Tuple[str, str]],
         matrix: Any) -> Optional[Dict[str, Any]]:
    families = matrix.entries("dlopen_plugin") if matrix is not None and hasattr(matrix, "entries") else []
    sites = [s for s in env.get("site_packages") or [] if isinstance(s, str) and s.startswith("/")]
    prefix = env.get("prefix") if isinstance(env.get("prefix"), str) else None
    environ = host.environ()
    loader_rec: Mapping[str, Any] = env["loader"] if isinstance(env.get("loader"), Mapping) else {}
    machine = str(loader_rec["machine"]) if isinstance(loader_rec.get("machine"), str) else "EM_X86_64"
    wheel_dirs = [d for d in loader_rec.get("wheel_dirs") or [] if isinstance(d, str)]
    view = HostView(host, owned, machine=machine, version_of=lib_version)
    hosts: List[Dict[str, Any]] = []
    seen = set()
    for family in families:
        for pattern in family.get("hosts") or []:
            bases = sites if "{site}" in pattern else ([prefix] if prefix and "{prefix}" in pattern else
                                                       [] if "{" in pattern else [""])
            for base in bases:
                expanded = pattern.replace("{site}", base).replace("{prefix}", base)
                paths = sorted(host.glob(expanded))[:4] if any(c in expanded for c in "*?[") else [expanded]
                for path in paths:
                    if (family["name"], path) in seen or not host.is_file(path) or len(hosts) >= MAX_HOSTS:
                        continue
                    seen.add((family["name"], path))
                    dyn = view.dynamic(path)
                    unless = family.get("host_unless_needed")
                    if dyn is None or (unless and not path.endswith("/" + unless) and unless in dyn["needed"]):
                        continue
                    var = family.get("variable")
                    value = environ.get(var) if var else None
                    dists: Mapping[str, Any] = env["distributions"] if isinstance(env.get("distributions"),
                                                                                   Mapping) else {}
                    dist = next((d for d in family.get("host_dists") or [] if dists.get(d)), None)
                    version = str(dists[dist]) if dist else None
                    resolve(view, ld_library_path, family, path, value, wheel_dirs, sites, version, dist)
                    hosts.append({"family": family["name"], "host": path, "value": value, "version": version,
                                  "version_dist": dist})
    if not hosts:
        return None
    record = view.record()
    record.update(ld_library_path=list(ld_library_path), wheel_dirs=wheel_dirs, sites=sites, machine=machine,
                  hosts=hosts)
    return record
