"""Plugins a host library opens by name at run time (dlopen), judged as the loader would judge its DT_NEEDED.

The families (NCCL's net and tuner plugins, ONNX Runtime's execution providers, cuDNN 9's sub-libraries) and the
names each host tries come from the matrix (``dlopen_plugin``, compat_matrix/data/loading.toml). :func:`resolve`
replays one host's loads with dl_doctor.facts.loading's :class:`~dl_doctor.facts.loading.Loader` (the one model of
what loads): the host and its dependencies, then each plugin name by the host's own search, then what the plugin
itself needs (DT_NEEDED, DT_VERNEED). The python_envs probe runs it over the live files through the recording view
(dl_doctor.readers.ldso.HostView) and keeps the answers (``dlopen_plugins``); the checks replay it on them
(:class:`~dl_doctor.facts.loading.RecordedView`), so the prediction and the judgement are the same by construction.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from dl_doctor.facts.loading import DRIVER_LIBRARIES, Loader, RecordedView

_MAJOR = re.compile(r"lib(cudart|cublas|cublasLt|nvrtc|nvJitLink|cupti|cufft|cusparse|cusolver)\.so\.(\d+)")
_CUDA_MAJOR_OF = {"cufft": {10: 11, 11: 12, 12: 13}, "cusolver": {10: 11, 11: 12, 12: 13}, "cusparse": {11: 11, 12: 12}}


def cuda_major_of(needed: Sequence[str]) -> Optional[int]:
    """The CUDA major an object was built for, from the CUDA runtime and math-library sonames it needs (libcudart.so.11.0
    and libcublas(Lt).so.11 are CUDA 11); None where they disagree or it needs none."""
    majors = set()
    for n in needed:
        m = _MAJOR.fullmatch(n) or _MAJOR.match(n)
        if m and m.group(1) in ("cudart", "cublas", "cublasLt", "nvrtc", "nvJitLink", "cupti"):
            majors.add(int(m.group(2)))
    return majors.pop() if len(majors) == 1 else None


def version_parts(version: Optional[str]) -> Optional[Tuple[str, str, str]]:
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", version or "")
    return (m.group(1), m.group(2), m.group(3)) if m else None


def names_for(family: Mapping[str, Any], value: Optional[str], host_version: Optional[str]
              ) -> Tuple[List[Tuple[str, List[str]]], bool]:
    """The plugins a host looks for, each with the names it tries in order, and whether the session asked for one
    (its variable names one): ``([(plugin, [name, ...]), ...], asked)``. An ``off`` value: nothing is looked for."""
    var = family.get("variable")
    if var:
        if value is not None and value.strip() in (family.get("off") or []):
            return [], True
        if value:
            names = [n.replace("{value}", value) for n in family.get("named") or ["{value}"]]
            return [(value, list(dict.fromkeys(names)))], True
        return [(n, [n]) for n in family.get("default") or []], False
    out = []
    parts = version_parts(host_version)
    for plugin in family.get("plugins") or []:
        templates = family.get("versioned") or []
        if templates:
            names = []
            for t in templates:
                if parts is None and ("{minor}" in t or "{patch}" in t):
                    continue
                major = parts[0] if parts else "9"
                names.append(t.replace("{name}", plugin).replace("{major}", major)
                             .replace("{minor}", parts[1] if parts else "").replace("{patch}", parts[2] if parts else ""))
            out.append((plugin, names))
        else:
            out.append((plugin, [plugin]))
    return out, False


def _beside(loader: Loader, view: Any, host: str, name: str) -> Optional[str]:
    candidate = posixpath.join(posixpath.dirname(view.real(host)), name)
    return candidate if loader._usable(candidate) else None  # noqa: SLF001 - the loader's own usability rule


def resolve(view: Any, ld_library_path: Sequence[str], family: Mapping[str, Any], host: str, value: Optional[str],
            wheel_dirs: Sequence[str] = (), sites: Sequence[str] = (), version: Optional[str] = None,
            version_dist: Optional[str] = None) -> Dict[str, Any]:
    """One host's plugins: which file each name finds (and how), what that file needs that does not load, the symbol
    versions it needs that the copy loaded does not define, and its version."""
    machine = getattr(view, "machine", None) or "EM_X86_64"
    loader = Loader(view, ld_library_path=list(ld_library_path), machine=machine if isinstance(machine, str) else
                    "EM_X86_64")
    root = loader.load(host, via="host")
    host_version, host_version_from = view.version(view.real(host))
    if version:  # the release of the distribution that installed the host (its file name names none)
        host_version, host_version_from = version, f"wheel {version_dist}" if version_dist else "its distribution"
    out: Dict[str, Any] = {"family": family.get("name"), "host": host, "host_real": view.real(host),
                           "host_version": host_version, "host_version_from": host_version_from, "value": value,
                           "plugins": []}
    if root is None:
        out["error"] = "the host is not a readable ELF object"
        return out
    host_objects = {o.path for o in loader.objects}
    groups, asked = names_for(family, value, host_version)
    floor, ceiling = family.get("host_min_version"), family.get("host_max_version")
    release = tuple(int(x) for x in version_parts(host_version) or ())
    if (floor or ceiling) and (not release or (floor and release < tuple(int(x) for x in str(floor).split("."))) or
                               (ceiling and release[:len(str(ceiling).split("."))] >
                                tuple(int(x) for x in str(ceiling).split(".")))):
        groups = []  # a release outside the one the rule was seen for, or an unknown one: not judged
        out["unjudged"] = f"{posixpath.basename(host)} {host_version or '(version unknown)'}: outside " \
                          f"{floor or ''}..{ceiling or ''}"
    out["asked"] = asked
    search = family.get("search") or "dlopen"
    since = family.get("if_present_from")
    if since:
        parts = version_parts(host_version)
        known = parts is not None and tuple(int(x) for x in parts[:2]) >= tuple(int(x) for x in str(since).split(".")[:2])
        if not known:  # a release not known to load them: they are not looked for
            groups = [(p, n) for p, n in groups if p not in (family.get("if_present") or [])]
    for plugin, names in groups:
        found, how, tried = None, None, []
        for name in names:
            tried.append(name)
            if "/" in name:
                hit = name if loader._usable(name) else None  # noqa: SLF001
                how_ = "path"
            elif search == "path":
                hit = _beside(loader, view, host, name)
                how_ = "beside the host"
                if hit is None:
                    continue
            else:
                hit = _beside(loader, view, host, name) if search == "beside" else None
                how_ = "the host's directory"
                if hit is None:
                    hit, how_ = loader.search(name, host)
            if hit:
                found, how = hit, how_
                break
        row: Dict[str, Any] = {"plugin": plugin, "names": tried, "found": found, "via": how,
                               "optional": any(fnmatch.fnmatchcase(plugin, p) for p in family.get("optional") or [])}
        if found is None:
            there = [posixpath.join(posixpath.dirname(view.real(host)), n) for n in tried if "/" not in n]
            row["beside_host"] = next((t for t in there if view.is_file(t)), None)  # there, but not searched
            row["looked_in"] = ([posixpath.dirname(view.real(host)) + " (the host's directory)"]
                                if search in ("beside", "path") else []) + \
                (loader.search_order(host)[:16] if search != "path" else [])
        else:
            before = len(loader.missing)
            obj = loader.load(found, via=f"dlopen by {posixpath.basename(host)}", loader=host)
            real = view.real(found)
            row["real"] = real
            version, version_from = view.version(real)
            row["version"], row["version_from"] = version, version_from
            if obj is not None:
                row["needed"] = list(obj.dynamic.get("needed") or [])[:64]
                row["machine"] = obj.dynamic.get("machine")
            missing = []
            for soname, requester in loader.missing[before:]:
                if soname in DRIVER_LIBRARIES:
                    continue
                in_wheels = next((f"{d}/{soname}" for d in wheel_dirs if view.is_file(f"{d}/{soname}")), None)
                # installed in the environment, but where no search looks (a package's own lib directory)
                elsewhere = None if in_wheels else next(
                    (hit for site in sites[:4] for pattern in (f"{site}/*/{soname}", f"{site}/*/lib/{soname}")
                     for hit in view.glob(pattern)[:1]), None)
                missing.append({"soname": soname, "needed_by": requester, "in_wheels": in_wheels,
                                "elsewhere": elsewhere})
            row["missing"] = missing[:16]
            row["unmet_versions"] = [{"object": o, "file": f, "version": v, "provider": p}
                                     for o, f, v, p in loader.unmet_versions() if o not in host_objects][:16]
        out["plugins"].append(row)
    if family.get("same_version") and not any(p.get("found") for p in out["plugins"]):
        # none of the sub-libraries is anywhere: a facts file that recorded the host alone cannot tell a lone
        # libcudnn.so.9 from a capture that left its neighbours out, so this host is not judged (unknown)
        out["unjudged"] = "none of its sub-libraries was found anywhere"
    return out


def replay(record: Mapping[str, Any], matrix: Any, loader: Optional[Mapping[str, Any]] = None) -> List[Dict[str, Any]]:
    """Every host of one environment's record (``dlopen_plugins``), resolved again from the facts; ``loader``: the
    environment's loader inputs, whose files the record does not repeat."""
    if not isinstance(record, Mapping):
        return []
    if isinstance(loader, Mapping) and isinstance(loader.get("files"), Mapping):
        mine: Mapping[str, Any] = record["files"] if isinstance(record.get("files"), Mapping) else {}
        theirs: Mapping[str, Any] = loader["files"]
        record = {**record, "files": {**theirs, **mine}}
    families = {f.get("name"): f for f in (matrix.entries("dlopen_plugin") if matrix is not None else [])}
    view = RecordedView(record)
    ld = [d for d in record.get("ld_library_path") or [] if isinstance(d, str)]
    wheels = [d for d in record.get("wheel_dirs") or [] if isinstance(d, str)]
    sites = [d for d in record.get("sites") or [] if isinstance(d, str)]
    out = []
    for h in record.get("hosts") or []:
        if not isinstance(h, Mapping) or h.get("family") not in families or not isinstance(h.get("host"), str):
            continue
        value = h.get("value") if isinstance(h.get("value"), str) else None
        version = h.get("version") if isinstance(h.get("version"), str) else None
        dist = h.get("version_dist") if isinstance(h.get("version_dist"), str) else None
        out.append(resolve(view, ld, families[h["family"]], h["host"], value, wheels, sites, version, dist))
    return out
