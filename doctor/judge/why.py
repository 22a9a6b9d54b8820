"""`why`: error text or a whole log against the signature base, the objects the text names, and the machine's facts.

Four steps (docs/why.md):

1. **Match.** The curated signature base (``compat_matrix/data/signatures*.toml``), the counted catalogs of status
   codes (``compat_matrix/catalogs``: CUDA runtime and driver, NVML, cuDNN, cuBLAS..., NCCL) and the Xid table:
   an ``NVRM: Xid`` line is parsed (its code and PCI address) and read against ``xid.toml``.
2. **Entities.** What the text names: sonames, symbols and symbol versions (and who required them), Xid codes with
   their GPU's PCI address, GPU architectures, status codes, paths, Python packages and modules, the two versions of
   a library a version check printed.
3. **Ask the machine.** Each entity against the facts (live, a tree or a report): which file each environment loads
   for that soname and why (the one resolution model, ``facts.loading``), which GPU sits at that PCI address with its
   ECC and this boot's Xid record, which GPUs have that architecture, which environments install that package.
4. **Rank.** Causes by the evidence (``compat_matrix.signatures.rank``); a text that matches nothing gets the
   machine's warn/fail findings ranked by how much they bear on the text, or, with no machine, the nearest
   signatures. A log is read as a whole: every distinct match counted, with its first and last time, ranked by
   severity and then recency.

Everything here is pure: the facts and findings come in as data (the app collects them).
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from dl_doctor.compat_matrix.signatures import MAX_TEXT, Match, compile_pattern, gated_in

MAX_LINE = 2000          # a line is read (for entities and times) up to this many characters
MAX_LINES_SAMPLE = 5     # lines kept per event
MAX_OCCURRENCES = 20000  # occurrences counted per signature in one log
MAX_ENTITIES = 40
SEVERITY_ORDER = {"fail": 0, "warn": 1, "info": 2}
GATE_PREFIX = 9          # a catalog pattern's gate: the first characters of its first literal


# -- 1. the signatures: curated, counted catalogs, the Xid table -------------------------------------------------------

def xid_severity(entry: Optional[Mapping[str, Any]]) -> str:
    """fail for an Xid that points at the GPU, the driver, the fabric or the system (or one the table lacks: unknown is
    not benign), warn for one that follows an application's own error, info for the driver's clean-up notes."""
    if not entry:
        return "fail"
    kind = entry.get("kind")
    points = entry.get("points_at")
    if kind == "informational":
        return "info"
    if kind == "application" or points == "application":
        return "fail" if entry.get("drain") else "warn"
    return "fail"


def xid_signature(code: int, entry: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    name = (entry or {}).get("name") or "an Xid dl-doctor's table does not list"
    points = (entry or {}).get("points_at") or (entry or {}).get("kind") or "unknown"
    return {"id": f"xid-{code}", "where": ["kernel-log"], "patterns": [], "severity": xid_severity(entry),
            "meaning": f"Xid {code}: {name} (points at: {points})", "causes": [f"xid-{code}"],
            "source": list((entry or {}).get("source") or []), "reported_by": "DLD-GPU-008",
            "xid": {"code": code, "name": name, "points_at": points, "kind": (entry or {}).get("kind"),
                    "action": (entry or {}).get("action"), "remedy": (entry or {}).get("remedy"),
                    "drain": (entry or {}).get("drain")}}


def xid_cause(code: int, entry: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """The cause an Xid line stands for: what the table says it implicates and what to do. DLD-GPU-008 (this boot's
    Xids) confirms it only when its finding holds this very code."""
    name = (entry or {}).get("name") or "an Xid dl-doctor's table does not list"
    points = (entry or {}).get("points_at") or (entry or {}).get("kind") or "unknown"
    action = (entry or {}).get("action") or ("Collect nvidia-bug-report.sh and look the code up in NVIDIA's Xid "
                                             "catalog (https://docs.nvidia.com/deploy/xid-errors/)")
    return {"id": f"xid-{code}", "summary": f"Xid {code}, {name}: it points at the {points}",
            "checks": ["DLD-GPU-008"], "fix": action,
            "confirmed_when": {"DLD-GPU-008": [f"Xid {code} x"]}}


_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{1,8}(?::[0-9A-Fa-f]{1,4}){1,2}(?:\.[0-7])?)\): (\d{1,5})\b")
_XID_BARE = re.compile(r"\bXid[ :]+(\d{1,5})\b", re.IGNORECASE)


def _norm_bus(bus: str) -> str:
    """0000:3b:00.0 style, lower case (NVRM prints 0000:3b:00 without the function)."""
    bus = bus.lower()
    parts = bus.split(":")
    if len(parts) == 2:
        bus = "0000:" + bus
    if "." not in bus.rsplit(":", 1)[-1]:
        bus += ".0"
    return bus


def xid_events(lines: Sequence[str]) -> List[Tuple[int, int, Optional[str]]]:
    """(line index, code, PCI address) of every Xid line."""
    out: List[Tuple[int, int, Optional[str]]] = []
    for n, line in enumerate(lines):
        if "xid" not in line and "Xid" not in line and "XID" not in line:
            continue
        text = line[:MAX_LINE]
        m = _XID.search(text)
        if m:
            out.append((n, int(m.group(2)), _norm_bus(m.group(1))))
            continue
        m = _XID_BARE.search(text)
        if m and ("nvrm" in text.lower() or "gpu" in text.lower()):
            out.append((n, int(m.group(1)), None))
    return out


# -- 2. entities ----------------------------------------------------------------------------------------------------------

_SONAME = re.compile(r"(?<![\w.+-])(lib[A-Za-z0-9_+-]{1,64}(?:\.[A-Za-z_][A-Za-z0-9_+-]{0,31})?\.so(?:\.\d{1,6}){0,4})"
                     r"(?![\w+-])")
_VERSION_NOT_FOUND = re.compile(r"version [`'\u2018]([A-Za-z_][A-Za-z0-9_.]{0,63})['\u2019] not found"
                                r"(?: \(required by ([^)\s]{1,512})\))?")
_UNDEFINED = re.compile(r"undefined symbol: ([A-Za-z_.$][A-Za-z0-9_.$@]{0,255})(?:, version ([A-Za-z0-9_.]{1,64}))?")
_ARCH = re.compile(r"\b(sm|compute)_(\d{2,3}[a-z]?)\b")
_CAPABILITY = re.compile(r"(?:CUDA|compute) capability (?:sm_)?(\d{1,2})\.?(\d)\b")
_NO_MODULE = re.compile(r"No module named '([A-Za-z_][A-Za-z0-9_.]{0,127})'")
_PIP_NO_DIST = re.compile(r"No matching distribution found for ([A-Za-z0-9][A-Za-z0-9_.\-]{0,127})"
                          r"(?:\s*(?:==|>=|<=|~=|!=|<|>)\s*([A-Za-z0-9_.*+!-]{1,64}))?")
_PATH = re.compile(r"(?<![\w.:/-])(/(?:[A-Za-z0-9_.+@-]{1,255}/){1,32}[A-Za-z0-9_.+@-]{1,255})")
_VERSION_PAIR = re.compile(r"compiled against \(?(\d{1,3}(?:[., ]{1,2}\d{1,4}){0,3})\)? but linked against "
                           r"\(?(\d{1,3}(?:[., ]{1,2}\d{1,4}){0,3})\)?")
_NUMPY_ABI = re.compile(r"compiled using NumPy (\d{1,2}\.[0-9x]{1,4}) cannot be run in\s{1,4}NumPy (\d{1,2}(?:\.\d{1,4}){0,3})")
_LOADED_RUNTIME = re.compile(
    r"Loaded runtime (CuDNN|cuDNN|NCCL|CUDA) library: (\d{1,3}(?:\.\d{1,4}){0,3})"
    r"[^\n0-9]{0,60}?compiled with: (\d{1,3}(?:\.\d{1,4}){0,3})")


def _dotted(v: str) -> str:
    return ".".join(p for p in re.split(r"[., ]+", v.strip()) if p)


def entities(text: str, codes: Iterable[Mapping[str, Any]] = ()) -> List[Dict[str, Any]]:
    """The objects ``text`` names, each once, in the order the text names them (at most MAX_ENTITIES)."""
    out: List[Dict[str, Any]] = []
    seen = set()

    def add(kind: str, value: str, **extra: Any) -> None:
        key = (kind, value)
        if key in seen or len(out) >= MAX_ENTITIES:
            return
        seen.add(key)
        out.append({"kind": kind, "value": value, **{k: v for k, v in extra.items() if v is not None}})

    for c in codes:
        add("code", str(c.get("name")), catalog=c.get("catalog"), number=c.get("value"), string=c.get("string"),
            **{"class": c.get("class")})
    lines = text.splitlines()[-4000:]
    for n, code, bus in xid_events(lines):
        add("xid", str(code), bus=bus, line=n + 1)
    for raw in lines:
        line = raw[:MAX_LINE]
        for m in _VERSION_NOT_FOUND.finditer(line):
            add("symbol_version", m.group(1), required_by=m.group(2))
        for m in _UNDEFINED.finditer(line):
            add("symbol", m.group(1), version=m.group(2))
        for m in _LOADED_RUNTIME.finditer(line):
            add("versions", m.group(1).lower(), loaded=_dotted(m.group(2)), built=_dotted(m.group(3)))
        for m in _VERSION_PAIR.finditer(line):
            low = line[:m.start()].lower()
            lib = next((k for k in ("cudnn", "nccl", "cublas", "numpy", "cuda") if k in low), "library")
            add("versions", lib, built=_dotted(m.group(1)), loaded=_dotted(m.group(2)))
        for m in _NUMPY_ABI.finditer(line):
            add("versions", "numpy", built=m.group(1), loaded=m.group(2))
        for m in _SONAME.finditer(line):
            add("soname", m.group(1))
        for m in _ARCH.finditer(line):
            add("arch", f"sm_{m.group(2)}")
        for m in _CAPABILITY.finditer(line):
            add("arch", f"sm_{m.group(1)}{m.group(2)}")
        for m in _NO_MODULE.finditer(line):
            add("module", m.group(1))
        for m in _PIP_NO_DIST.finditer(line):
            add("package", m.group(1).lower(), version=m.group(2))
        for m in _PATH.finditer(line):
            if m.group(1).count("/") >= 2:
                add("path", m.group(1))
    return out


# -- 3. the machine's answer about each entity ----------------------------------------------------------------------------

def _stem(soname: str) -> str:
    return soname.split(".so", 1)[0]


def _get(data: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(data, Mapping):
            return None
        data = data.get(part)
    return data


def _env_label(env: Mapping[str, Any]) -> str:
    return str(env.get("name") or env.get("prefix") or "an environment")


def ask_soname(soname: str, facts: Mapping[str, Any], loading: Mapping[str, Any]) -> List[str]:
    """Which file each environment's consumers load for ``soname`` (or the family it names), found how, and the
    model's verdict; what will not load and where the loader looked; the driver's own copy."""
    stem = _stem(soname)
    exact = soname != stem + ".so"
    answers: List[str] = []
    envs = {e.get("prefix"): e for e in _get(facts, "python_envs.environments") or [] if isinstance(e, Mapping)}
    for env in loading.get("environments") or []:
        if not isinstance(env, Mapping):
            continue
        label = _env_label(envs.get(env.get("prefix")) or env)
        for c in env.get("consumers") or []:
            if not isinstance(c, Mapping):
                continue
            who = f"{c.get('distribution')} {c.get('version') or ''}".strip()
            for lib in c.get("libraries") or []:
                name = str(lib.get("soname") or "")
                if (name == soname) if exact and name.startswith(stem + ".so.") else _stem(name) == stem:
                    verdict = lib.get("verdict") or "unknown"
                    line = (f"{label}: {who} loads {name} from {lib.get('path')} (found via {lib.get('via')}): "
                            f"{verdict}")
                    if lib.get("reason") and verdict not in ("own",):
                        line += f" ({lib['reason']})"
                    own = lib.get("env_copy")
                    own_path = own.get("path") if isinstance(own, Mapping) else own
                    if own_path and own_path != lib.get("path"):
                        ver = own.get("version") if isinstance(own, Mapping) else None
                        line += f"; the environment's own copy is {own_path}" + (f" ({ver})" if ver else "")
                    answers.append(line)
            for miss in c.get("missing") or []:
                name = str(miss.get("soname") or "")
                if _stem(name) == stem:
                    looked = ", ".join(str(x) for x in (miss.get("looked_in") or [])[:4])
                    line = (f"{label}: {who} cannot load {name} (needed by {miss.get('needed_by')}"
                            f"{', optional' if miss.get('optional') else ''}); the loader looked in {looked or '?'}")
                    if miss.get("in_wheels"):
                        line += f"; a copy sits in the wheels at {miss['in_wheels']}, where the loader does not look"
                    answers.append(line)
            for unmet in c.get("unmet_versions") or []:
                if isinstance(unmet, Mapping) and stem in (_stem(str(unmet.get("provider") or "")),
                                                           _stem(str(unmet.get("object") or "").rsplit("/", 1)[-1])):
                    answers.append(f"{label}: {who}: {unmet.get('object')} needs {unmet.get('version')} from "
                                   f"{unmet.get('provider')}, which the copy that loads ({unmet.get('file') or '?'}) "
                                   f"does not define")
    for lib in _get(facts, "nvidia_driver.userspace.libraries") or []:
        if isinstance(lib, Mapping) and _stem(str(lib.get("name") or lib.get("soname") or
                                                  str(lib.get("path") or "").rsplit("/", 1)[-1])) == stem:
            by = lib.get("provided_by")
            answers.append(f"the driver's {lib.get('path')} is version {lib.get('version') or 'unknown'}"
                           + (f" (provided by {by})" if by else ""))
    return answers[:12]


def ask_symbol_version(version: str, required_by: Optional[str], facts: Mapping[str, Any],
                       loading: Mapping[str, Any]) -> List[str]:
    """A symbol version (GLIBC_2.34, GLIBCXX_3.4.30, libcudart.so.12, ...): which object of which environment needs
    it and which copy of the provider loads without it (the model's unmet versions); the system it runs on."""
    answers = []
    for env in loading.get("environments") or []:
        if not isinstance(env, Mapping):
            continue
        for c in env.get("consumers") or []:
            for unmet in (c.get("unmet_versions") or []) if isinstance(c, Mapping) else []:
                if isinstance(unmet, Mapping) and unmet.get("version") == version:
                    answers.append(f"{_env_label(env)}: {unmet.get('object')} needs {version} from "
                                   f"{unmet.get('provider')}, and the copy that loads ({unmet.get('file') or '?'}) "
                                   f"does not define it")
    os_name = " ".join(str(x) for x in (_get(facts, "os.id"), _get(facts, "os.version_id")) if x)
    if os_name and version.split("_", 1)[0] in ("GLIBC", "GLIBCXX", "CXXABI"):
        answers.append(f"this system is {os_name}" + (f"; {required_by} needs {version}" if required_by else ""))
    return answers[:8]


def _version_key(v: str) -> Tuple[int, ...]:
    out = []
    for p in v.split("."):
        digits = "".join(ch for ch in p if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def ask_xid(code: int, bus: Optional[str], facts: Mapping[str, Any], matrix: Any) -> List[str]:
    """The table's word on the code; the GPU at that address (name, serial, ECC); this boot's record of Xids there."""
    answers = []
    entry = matrix.xid(code) if matrix is not None else None
    if entry:
        answers.append(f"Xid {code} is '{entry.get('name')}': points at the {entry.get('points_at') or entry.get('kind')}"
                       f"; {entry.get('action')}")
    else:
        answers.append(f"Xid {code} is not in dl-doctor's Xid table")
    if bus:
        gpu = next((d for d in _get(facts, "nvml.devices") or [] if isinstance(d, Mapping)
                    and _norm_bus(str(d.get("bus_id") or "0")[-12:]) == bus), None)
        if gpu is None:
            gpu = next((d for d in _get(facts, "gpu_pci.devices") or [] if isinstance(d, Mapping)
                        and d.get("kind") in (None, "gpu") and _norm_bus(str(d.get("bdf") or "0")) == bus), None)
        if gpu is not None:
            parts = [str(gpu.get("name") or f"a GPU (PCI device {gpu.get('device_id') or '?'}, driver "
                                              f"{gpu.get('driver') or 'none'})")]
            if gpu.get("serial"):
                parts.append(f"serial {gpu['serial']}")
            for key, what in (("ecc_uncorrected_volatile", "uncorrectable ECC errors since the driver loaded"),
                              ("ecc_uncorrected_aggregate", "uncorrectable ECC errors over its life"),
                              ("retired_pages_pending", "retired pages wait for a reset")):
                if gpu.get(key) not in (None, False, 0):
                    parts.append(f"{gpu[key]} {what}" if not isinstance(gpu[key], bool) else what)
            rows: Mapping[str, Any] = gpu["remapped_rows"] if isinstance(gpu.get("remapped_rows"), Mapping) else {}
            if rows.get("uncorrectable"):
                parts.append(f"{rows['uncorrectable']} rows remapped for uncorrectable errors")
            if rows.get("pending"):
                parts.append("a row remap waits for a GPU reset")
            if rows.get("failure"):
                parts.append("a row remap FAILED: no spare rows left (replace the GPU)")
            if gpu.get("ecc_mode") is False:
                parts.append("ECC is off")
            answers.append(f"the GPU at {bus}: " + ", ".join(parts))
        elif _get(facts, "nvml.devices") or _get(facts, "gpu_pci.devices"):
            answers.append(f"no GPU of this machine sits at {bus}: the line comes from another machine (or the GPU "
                           f"fell off the bus)")
    record = [x for x in _get(facts, "kernel_log.xids") or [] if isinstance(x, Mapping)]
    if _get(facts, "kernel_log") is not None:
        same = [x for x in record if x.get("code") == code and (bus is None or not x.get("bus")
                                                                 or _norm_bus(str(x["bus"])) == bus)]
        where = f" on {bus}" if bus else ""
        if same:
            answers.append(f"this boot's kernel log holds Xid {code}{where} {len(same)} time(s)")
        else:
            others = sorted({int(x["code"]) for x in record if isinstance(x.get("code"), int)})
            answers.append(f"this boot's kernel log holds no Xid {code}{where}"
                           + (f" (it holds Xid {', '.join(map(str, others))})" if others else ""))
    return answers


def ask_arch(arch: str, facts: Mapping[str, Any]) -> List[str]:
    """The GPUs with that architecture, and which frameworks' builds carry code for it."""
    answers = []
    cc = arch[3:]
    gpus = [d for d in _get(facts, "nvml.devices") or [] if isinstance(d, Mapping)]
    have = [d for d in gpus if str(d.get("compute_capability") or "").replace(".", "") == cc.rstrip("a")]
    if gpus:
        names = sorted({str(d.get("name")) for d in gpus})
        ccs = sorted({str(d.get("compute_capability")) for d in gpus})
        answers.append(f"this machine's GPUs: {', '.join(names)} (compute capability {', '.join(ccs)})"
                       + (f": {arch} is theirs" if have else f": none is {arch}"))
    for env in _get(facts, "python_envs.environments") or []:
        if not isinstance(env, Mapping):
            continue
        archs = _get(env, "deep.arch_list")
        if isinstance(archs, list) and archs:
            built = arch in archs or f"sm_{cc.rstrip('a')}" in archs
            torch = (env.get("distributions") or {}).get("torch") if isinstance(env.get("distributions"), Mapping) else None
            answers.append(f"{_env_label(env)}: torch {torch or ''} has kernels for {', '.join(map(str, archs[:12]))}"
                           f" (--deep): {arch} {'is' if built else 'is NOT'} among them")
    return answers[:8]


def ask_package(name: str, facts: Mapping[str, Any]) -> List[str]:
    """Which environments install that distribution (or a module of that name), at which version."""
    answers = []
    norm = name.lower().replace("_", "-")
    top = norm.split(".")[0]
    for env in _get(facts, "python_envs.environments") or []:
        if not isinstance(env, Mapping):
            continue
        dists = env.get("distributions") or {}
        if not isinstance(dists, Mapping):
            continue
        hit = next(((k, v) for k, v in dists.items() if str(k).lower().replace("_", "-") in (norm, top)), None)
        py = env.get("python_version") or env.get("version")
        if hit:
            answers.append(f"{_env_label(env)} (Python {py or '?'}) has {hit[0]} {hit[1] if isinstance(hit[1], str) else ''}".rstrip())
        else:
            answers.append(f"{_env_label(env)} (Python {py or '?'}) does not install {name}")
    return answers[:8]


def ask_versions(entity: Mapping[str, Any], facts: Mapping[str, Any], loading: Mapping[str, Any]) -> List[str]:
    lib = entity["value"]
    stems = {"cudnn": "libcudnn", "nccl": "libnccl", "cuda": "libcudart", "cublas": "libcublas"}
    answers = []
    if lib in stems:
        answers = ask_soname(stems[lib] + ".so", facts, loading)
    return [f"the text says it was built with {entity.get('built')} and loaded {entity.get('loaded')}"] + answers


def ask(entities_found: Sequence[Mapping[str, Any]], facts: Optional[Mapping[str, Any]],
        loading: Optional[Mapping[str, Any]], matrix: Any) -> List[Dict[str, Any]]:
    """The machine's answer about each entity (nothing without facts); entities it has nothing to say about are left
    out."""
    if facts is None:
        return []
    loading = loading or {}
    out = []
    for e in entities_found:
        kind, value = e["kind"], e["value"]
        try:
            if kind == "soname":
                lines = ask_soname(value, facts, loading)
                envs = _get(facts, "python_envs.environments")
                if not lines and isinstance(envs, list):
                    lines = [f"none of the {len(envs)} Python environment(s) found here loads or needs {value}: the "
                             f"error comes from another environment (--python PATH names it) or another machine"]
            elif kind == "symbol_version":
                lines = ask_symbol_version(value, e.get("required_by"), facts, loading)
            elif kind == "symbol" and ".so" in str(e.get("version") or ""):  # ", version libnvJitLink.so.12"
                lines = ask_soname(str(e["version"]), facts, loading)
            elif kind == "xid":
                lines = ask_xid(int(value), e.get("bus"), facts, matrix)
            elif kind == "arch":
                lines = ask_arch(value, facts)
            elif kind in ("package", "module"):
                lines = ask_package(value, facts)
            elif kind == "versions":
                lines = ask_versions(e, facts, loading)
            else:
                lines = []
        except (TypeError, ValueError, KeyError, AttributeError):  # a hostile or odd facts file costs this answer only
            lines = []
        if lines:
            out.append({"entity": dict(e), "answers": lines})
    return out


# -- 4a. a log as a whole ---------------------------------------------------------------------------------------------------

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_ISO = re.compile(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(?:[.,]\d{1,9})?(Z|[+-]\d\d:?\d\d)?")
_SYSLOG = re.compile(r"([A-Z][a-z]{2}) {1,2}(\d{1,2}) (\d\d:\d\d:\d\d)\b")
_DMESG = re.compile(r"\[\s{0,12}(\d{1,10}\.\d{1,9})\]")
_DMESG_T = re.compile(r"\[(?:[A-Z][a-z]{2} )?([A-Z][a-z]{2}) {1,2}(\d{1,2}) (\d\d:\d\d:\d\d) (\d{4})\]")


def line_time(line: str) -> Optional[Any]:
    """The time a log line carries at its start: an ISO string (RFC 3339 / journalctl -o short-iso / Python logging,
    dmesg -T with its year), 'Mon DD HH:MM:SS' (syslog and journalctl's short format carry no year), or dmesg's
    seconds since boot (a float); None where the line has none."""
    head = line[:80]
    m = _ISO.match(head.lstrip("[ "))
    if m:
        return f"{m.group(1)}T{m.group(2)}{m.group(3) or ''}"
    m = _DMESG_T.match(head)
    if m and m.group(1).lower() in _MONTHS:
        return f"{m.group(4)}-{_MONTHS.index(m.group(1).lower()) + 1:02d}-{int(m.group(2)):02d}T{m.group(3)}"
    m = _SYSLOG.match(head)
    if m and m.group(1).lower() in _MONTHS:
        return f"{m.group(1)} {int(m.group(2)):02d} {m.group(3)}"
    m = _DMESG.match(head)
    if m:
        return float(m.group(1))
    return None


def _line_starts(text: str) -> List[int]:
    starts = [0]
    at = text.find("\n")
    while at >= 0:
        starts.append(at + 1)
        at = text.find("\n", at + 1)
    return starts


def log_events(text: str, signatures: Sequence[Mapping[str, Any]], matrix: Any) -> List[Dict[str, Any]]:
    """Every distinct match in a log: ``{signature, severity, meaning, count, first, last, first_line, last_line,
    lines}``, ranked by severity (fail, warn, info) and then recency (the later last occurrence first)."""
    import bisect

    text = text[-MAX_TEXT:]
    hay = text.lower()
    starts = _line_starts(text)
    lines = text.split("\n")
    found: Dict[str, Dict[str, Any]] = {}

    def note(sig: Mapping[str, Any], n: int, severity: str) -> None:
        ev = found.get(sig["id"])
        if ev is None:
            ev = found[sig["id"]] = {"signature": sig["id"], "severity": severity, "meaning": sig.get("meaning"),
                                     "count": 0, "first_line": n + 1, "last_line": n + 1, "lines": [],
                                     "_sig": sig, "_specificity": 0}
        ev["count"] += 1
        ev["last_line"] = n + 1
        if len(ev["lines"]) < MAX_LINES_SAMPLE and all(x["n"] != n + 1 for x in ev["lines"]):
            ev["lines"].append({"n": n + 1, "text": lines[n][:300]})

    from dl_doctor.judge.logs import CORRECTED_AER, corrected_aer

    # each line counts for its most specific signature only (as DLD-LOG-001 judges it): an Xid line parsed exactly
    # is not also 'GPU has fallen off the bus', a specific error not also the generic 'undefined symbol'
    per_line: Dict[int, List[Tuple[int, Mapping[str, Any]]]] = {}
    gates: Dict[str, bool] = {}
    for sig in signatures:
        if not sig.get("patterns") or not gated_in(sig, hay, gates):
            continue
        spec_at: Dict[int, int] = {}
        for raw in sig.get("patterns") or []:
            pattern = compile_pattern(raw)
            for start, _end in pattern.finditer(hay, MAX_OCCURRENCES):
                n = bisect.bisect_right(starts, start) - 1
                spec_at[n] = max(spec_at.get(n, 0), pattern.specificity)
        for n, spec in spec_at.items():
            per_line.setdefault(n, []).append((spec, sig))
    xids = {n: (code, bus) for n, code, bus in xid_events(lines)}
    for n in sorted(set(per_line) | set(xids)):
        if n in xids:
            code, bus = xids[n]
            entry = matrix.xid(code) if matrix is not None else None
            sig = xid_signature(code, entry)
            note(sig, n, sig["severity"])
            ev = found[sig["id"]]
            ev["_specificity"] = 1000  # a parsed Xid is exact
            if bus and bus not in ev.setdefault("gpus", []):
                ev["gpus"].append(bus)
            continue
        hits = per_line[n]
        top = max(spec for spec, _ in hits)
        for spec, sig in hits:
            if spec != top:
                continue
            if corrected_aer(dict(sig), lines[n]):
                sig = CORRECTED_AER
            note(sig, n, str(sig.get("severity") or "fail"))
            ev = found[str(sig["id"])]
            ev["_specificity"] = max(int(ev["_specificity"]), spec)
    out = []
    for ev in found.values():
        ev["first"] = line_time(lines[ev["first_line"] - 1])
        ev["last"] = line_time(lines[ev["last_line"] - 1])
        out.append(ev)
    # a line two signatures match counts for the more specific one only where both say the same (a generic
    # 'undefined symbol' under 'undefined symbol: __nvJitLink...'): the generic one keeps the lines only it matched
    out.sort(key=lambda e: (SEVERITY_ORDER.get(e["severity"], 0), -e["last_line"], -e["_specificity"]))
    return out


def public_event(ev: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in ev.items() if not k.startswith("_")}


# -- 4b. no dead ends ------------------------------------------------------------------------------------------------------

_STOP = frozenset("""the and for with that this from was were are not but has have had its it's into onto than then
there their they them you your our out off all any can could would should will may might been being one two also
error errors failed failure warning warn fail info line file found cannot could unable while when what which where
how why does did done none null true false value values runtime""".split())
_WORDS = re.compile(r"[a-z][a-z0-9_+.-]{2,63}")


def words(text: str) -> set:
    return {w.strip(".-_") for w in _WORDS.findall(text[-65536:].lower()) if w.strip(".-_") not in _STOP
            and len(w.strip(".-_")) >= 3}


def related_findings(text: str, found_entities: Sequence[Mapping[str, Any]],
                     findings: Sequence[Mapping[str, Any]], limit: int = 6) -> List[Dict[str, Any]]:
    """The machine's warn/fail findings ranked by how much they bear on ``text``: the objects it names (a soname, an
    Xid, a package) found in the finding count most, then shared words, rarer words more; a failure before a warning
    where the text says nothing of either."""
    bad = [f for f in findings if isinstance(f, Mapping) and f.get("status") in ("fail", "warn", "error")]
    if not bad:
        return []
    mine = words(text)
    docs = []
    for f in bad:
        body = " ".join(str(x) for x in (f.get("id"), f.get("title"), f.get("headline"), f.get("message")) if x)
        try:
            body += " " + json.dumps(f.get("evidence"), default=str)[:20000]
        except (TypeError, ValueError):
            pass
        docs.append((f, body.lower(), words(body)))
    df: Dict[str, int] = {}
    for _, _, ws in docs:
        for w in ws & mine:
            df[w] = df.get(w, 0) + 1
    ranked: List[Dict[str, Any]] = []
    for f, body, ws in docs:
        shared = sorted(ws & mine)
        score = sum(1.0 / df[w] for w in shared)
        objects = [str(e["value"]) for e in found_entities
                   if (f"xid {e['value']}" if e["kind"] == "xid" else str(e["value"]).lower()) in body
                   and e["kind"] != "path"]
        score += 3.0 * len(set(objects))
        ranked.append({"id": f.get("id"), "status": f.get("status"), "title": f.get("title"),
                       "message": str(f.get("headline") or f.get("message") or "")[:300],
                       "fix": ((f.get("fix") or {}).get("summary") if isinstance(f.get("fix"), Mapping) else None),
                       "score": round(score, 2), "shared": (sorted(set(objects)) + shared)[:8]})
    ranked.sort(key=lambda r: (-float(r["score"]), 0 if r["status"] == "fail" else 1, str(r["id"])))
    return ranked[:limit]


def nearest_signatures(text: str, signatures: Sequence[Mapping[str, Any]], causes: Mapping[str, Any],
                       limit: int = 3) -> List[Dict[str, Any]]:
    """With no machine to ask: the signatures whose words the text shares most (weighted by how rare each word is
    across the base), as possibilities."""
    mine = words(text)
    if not mine:
        return []
    docs = []
    for sig in signatures:
        body = " ".join(list(sig.get("patterns") or []) + [str(sig.get("meaning") or "")])
        docs.append((sig, words(body.replace("*", " ").replace("{n}", " ").replace("{w}", " "))))
    df: Dict[str, int] = {}
    for _, ws in docs:
        for w in ws:
            df[w] = df.get(w, 0) + 1
    ranked = []
    for sig, ws in docs:
        shared = ws & mine
        if not shared:
            continue
        score = sum(1.0 / df[w] for w in shared) / (1 + 0.1 * len(ws))
        if len(shared) < 2 and score < 0.5:
            continue
        first = next((causes.get(c) for c in sig.get("causes") or [] if c in causes), None)
        ranked.append({"signature": sig["id"], "meaning": sig.get("meaning"), "score": round(score, 3),
                       "shared": sorted(shared)[:8], "cause": (first or {}).get("summary"),
                       "fix": (first or {}).get("fix")})
    ranked.sort(key=lambda r: (-r["score"], r["signature"]))
    return ranked[:limit]


# -- the whole diagnosis -----------------------------------------------------------------------------------------------------

def base(matrix: Any) -> Tuple[List[Dict[str, Any]], Dict[str, Dict[str, Any]]]:
    """Every signature and cause ``why`` knows: the curated base, the counted catalogs (where installed), the Xid
    table's codes."""
    from dl_doctor.compat_matrix import catalogs

    sigs = list(matrix.signatures())
    for sig in catalogs.signatures():
        # a thousand codes share a few dozen opening words (cudaerror, cuda_erro, cudnn_sta, cuda erro[r: ]): each
        # opening is looked for once per text, and a code's patterns only where its opening is there
        sig["gate"] = sorted({compile_pattern(p).items[0][1][:GATE_PREFIX] for p in sig.get("patterns") or []})
        sigs.append(sig)
    return sigs, dict(matrix.causes())


def narrow(matches: Sequence[Match], text: str) -> List[Match]:
    """The catalogs' own narrowing (a code named inside a longer code's name; the runtime's twin of a driver code),
    and on a line both match, the curated signature (written from real reports, its causes in their order) before the
    catalog's code."""
    from dl_doctor.compat_matrix import catalogs

    kept = catalogs.narrow(matches, text)
    curated = [m for m in kept if not str(m.signature.get("id", "")).startswith("code:")]

    def covered(code_match: Match) -> bool:
        """A curated signature on the same line whose pattern holds this code's name or string: the same error,
        written up from real reports (a wrapper such as 'NCCL error in:' is not: the code says more)."""
        code = code_match.signature.get("code") or {}
        words = [str(x).lower() for x in (code.get("name"), code.get("string")) if x]
        return any(m.excerpt == code_match.excerpt and any(wd in m.pattern.text.lower() for wd in words)
                   for m in curated)

    later = [m for m in kept if str(m.signature.get("id", "")).startswith("code:") and covered(m)]
    return [m for m in kept if m not in later] + later


def xid_matches(text: str, matrix: Any) -> List[Match]:
    """A Match per distinct Xid code in ``text`` (the first line that names it), the most serious first."""
    lines = text[-MAX_TEXT:].split("\n")
    seen: Dict[int, Tuple[int, Optional[str]]] = {}
    for n, code, bus in xid_events(lines):
        seen.setdefault(code, (n, bus))
    out = []
    for code, (n, _bus) in seen.items():
        entry = matrix.xid(code)
        out.append(Match(xid_signature(code, entry), compile_pattern("xid"), lines[n].strip()[:300]))
    out.sort(key=lambda m: SEVERITY_ORDER.get(m.signature["severity"], 0))
    return out
