"""What pip and conda themselves recorded about one environment's packages: each distribution's requirements
(METADATA ``Requires-Dist``, egg-info ``requires.txt``), each conda package's ``depends`` and ``constrains``
(conda-meta/*.json), which files two of them both claim (wheel RECORDs, conda-meta ``files``), and whether the
compiled files a RECORD lists are still the files it recorded (their size; their sha256 under --deep).

Reads files only (works under --sysroot) and never judges: dl_doctor.checks.packaging evaluates the requirements
with pip's and conda's rules. Every read is bounded: METADATA's header block only, RECORDs and conda-meta files
under a byte cap, at most MAX_DISTS distributions and MAX_STATS files looked at per environment.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import posixpath
import re
from collections import Counter
from itertools import chain
from typing import Any, Dict, List, Optional, Tuple

from dl_doctor.host import Host

MAX_DISTS = 2000
MAX_REQUIRES = 200  # requirement lines kept per distribution
MAX_METADATA = 256 << 10  # the header block of METADATA is read, within this
MAX_RECORD = 16 << 20
MAX_CONDA_META = 32 << 20
MAX_TOTAL = 512 << 20  # RECORD and conda-meta bytes read per environment
MAX_STATS = 50000  # compiled files stat()ed per environment
MAX_HASH_BYTES = 8 << 30  # --deep: bytes hashed per environment
MAX_SHARED = 200  # owner pairs kept
MAX_EXAMPLES = 5
MAX_MODIFIED = 200

# A wheel RECORD line's hash: sha256=urlsafe-base64 without padding (PEP 376 / the binary distribution format);
# 43 characters for sha256. Anything else (a placeholder) reads as unknown, never as a mismatch.
_HASH = re.compile(r"^sha256=([A-Za-z0-9_-]{43})$")
# RECORD's digests stay as RECORD writes them (urlsafe base64, no padding): decoding 15,000 of them per torch env
# cost more than the rest of the probe; conda's are hex, and a pair of the two is compared by _same()
EMPTY_SHA256 = base64.urlsafe_b64encode(hashlib.sha256(b"").digest()).rstrip(b"=").decode()
# an ELF shared object or a Python extension module, by name
_COMPILED = re.compile(r"\.so(\.[0-9][0-9A-Za-z.]*)?$")
_DIST = re.compile(r"^(?P<name>[A-Za-z0-9_.]+?)-(?P<version>[^-]+?)\.(?P<kind>dist-info|egg-info)$")
NOT_PIP = ("conda", "rpm", "debian", "dpkg", "apt", "spack", "nix", "portage")
_TAG_ARCH = re.compile(r"(x86_64|aarch64|ppc64le|s390x)$")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def compiled_path(path: str) -> bool:
    # ".so" is in every compiled file's name: the test in front keeps the regex off the other 90% of RECORD's rows
    return ".so" in path and bool(_COMPILED.search(path))


def _read(host: Host, path: str, cap: int) -> Optional[str]:
    try:
        return host.try_read(path, cap)
    except PermissionError:
        return None


def metadata_requires(text: str) -> Tuple[List[str], Optional[str]]:
    """The Requires-Dist lines of a METADATA header block (continuation lines folded), and its Name."""
    head = text.split("\n\n", 1)[0]
    out: List[str] = []
    name = None
    for line in head.splitlines():
        if line.startswith("Requires-Dist:") and len(out) < MAX_REQUIRES:
            out.append(line[len("Requires-Dist:"):].strip()[:500])
        elif line.startswith("Name:") and name is None:
            name = line[5:].strip()[:200]
    return out, name


def egg_requires(text: str) -> List[str]:
    """requires.txt of an egg-info (setuptools): ``[extra]``, ``[:marker]`` and ``[extra:marker]`` sections, as
    Requires-Dist strings."""
    out: List[str] = []
    section = ""
    for raw in text.splitlines()[:2000]:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            continue
        extra, _, marker = section.partition(":")
        conds = []
        if extra.strip():
            conds.append(f'extra == "{extra.strip()}"')
        if marker.strip():
            conds.append(f"({marker.strip()})")
        out.append(line + ("; " + " and ".join(conds) if conds else ""))
        if len(out) >= MAX_REQUIRES:
            break
    return out


def _record_lines(text: str, site: str) -> Tuple[List[str], List[str]]:
    """A RECORD's rows as (full paths, the raw lines), without parsing the rest of each line: a line without a quote
    is its path up to the first comma from the right two; a quoted one goes through csv."""
    paths: List[str] = []
    raw: List[str] = []
    for line in text.splitlines():
        if '"' in line:
            try:
                fields = next(csv.reader([line]), [])
            except csv.Error:
                continue
            rel = fields[0] if fields else ""
        else:
            rel = line.rsplit(",", 2)[0]
        if not rel or len(rel) > 4096:
            continue
        # normpath only where a row can need it (../../bin/x, ./x, a//b)
        paths.append(posixpath.normpath(f"{site}/{rel}") if rel.startswith(".") or "/." in rel or "//" in rel
                     else f"{site}/{rel}")
        raw.append(line)
    return paths, raw


def parse_record(text: str) -> List[Tuple[str, Optional[str], Optional[int]]]:
    """A RECORD's rows: (path, sha256 as RECORD writes it (urlsafe base64) or None where the line has no valid one,
    size or None). RECORD is CSV; a line without a quote is split on its last two commas (what csv would give, at a
    fraction of the cost: torch's RECORD has 15,000 lines), a quoted one goes through csv."""
    rows: List[Tuple[str, Optional[str], Optional[int]]] = []
    for line in text.splitlines():
        if '"' in line:
            try:
                fields = next(csv.reader([line]), [])
            except csv.Error:  # a line csv refuses (a field over its limit, a NUL): that row only
                continue
            fields = [f.strip() for f in fields]
        else:
            fields = line.rsplit(",", 2)
        if not fields or not fields[0] or len(fields[0]) > 4096:
            continue
        h = fields[1].strip() if len(fields) > 1 else ""
        digest = h[7:] if len(h) == 50 and _HASH.match(h) else None
        size: Optional[int] = None
        if digest is None:
            pass  # a line without a real hash (a placeholder) says nothing about the file
        elif len(fields) > 2 and fields[2].isdigit() and len(fields[2]) < 16:
            size = int(fields[2])
            if digest == EMPTY_SHA256 and size:
                digest, size = None, None  # the empty file's digest with a size: a placeholder, not a record
        rows.append((fields[0], digest, size))
    return rows


def _conda_records(host: Host, prefix: str) -> Dict[str, Dict[str, Any]]:
    out: Dict[str, Dict[str, Any]] = {}
    budget = MAX_TOTAL
    for entry in host.listdir(f"{prefix}/conda-meta")[:MAX_DISTS]:
        if not entry.endswith(".json") or budget <= 0:
            continue
        text = _read(host, f"{prefix}/conda-meta/{entry}", min(MAX_CONDA_META, budget))
        budget -= len(text or "")
        try:
            doc = json.loads(text) if text else None
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
            continue
        files = [f for f in doc.get("files") or [] if isinstance(f, str)]
        hashes: Dict[str, Tuple[Optional[str], Optional[int]]] = {}
        softlinks: set = set()
        paths_data: Dict[str, Any] = doc["paths_data"] if isinstance(doc.get("paths_data"), dict) else {}
        for item in (paths_data.get("paths") or [])[:200000]:
            if isinstance(item, dict) and isinstance(item.get("_path"), str) and item.get("path_type") == "softlink":
                softlinks.add(item["_path"])  # a link is where its target is: not a second copy of a file
            elif isinstance(item, dict) and isinstance(item.get("_path"), str):
                digest = item.get("sha256") if isinstance(item.get("sha256"), str) and re.fullmatch(
                    r"[0-9a-f]{64}", item.get("sha256") or "") else None
                size = item.get("size_in_bytes") if isinstance(item.get("size_in_bytes"), int) else None
                hashes[item["_path"]] = (digest, size if digest else None)
        out[doc["name"]] = {
            "version": str(doc.get("version") or ""), "build": str(doc.get("build") or ""),
            "depends": [str(d)[:300] for d in (doc.get("depends") or [])[:MAX_REQUIRES] if isinstance(d, str)],
            "constrains": [str(d)[:300] for d in (doc.get("constrains") or [])[:MAX_REQUIRES] if isinstance(d, str)],
            "files": len(files), "compiled": any(compiled_path(f) for f in files),
            "_paths": [f for f in files if f not in softlinks],
            "_hashes": hashes}
    return out


def collect(host: Host, env: Dict[str, Any], sites: List[str], python_version: Optional[str],
            deep: bool = False) -> Dict[str, Any]:
    """The environment's packaging facts (python_envs.environments[].packaging)."""
    prefix = env["prefix"]
    dists: Dict[str, Dict[str, Any]] = {}
    records: Dict[str, List[Tuple[str, Optional[str], Optional[int]]]] = {}
    lines: Dict[str, Tuple[List[str], List[str]]] = {}
    truncated = False
    budget = MAX_TOTAL
    arch: Optional[str] = None
    for site in sites:
        for entry in host.listdir(site):
            m = _DIST.match(entry)
            if not m:
                continue
            name = normalize(m.group("name"))
            if name in dists:
                continue
            if len(dists) >= MAX_DISTS:
                truncated = True
                break
            path = f"{site}/{entry}"
            d: Dict[str, Any] = {"version": m.group("version"), "location": site}
            if m.group("kind") == "dist-info":
                requires, _ = metadata_requires(_read(host, f"{path}/METADATA", MAX_METADATA) or "")
                d["installer"] = ((_read(host, f"{path}/INSTALLER", 256) or "").strip() or None)
                wheel = _read(host, f"{path}/WHEEL", 4096) or ""
                for line in wheel.splitlines():
                    t = _TAG_ARCH.search(line.strip()) if line.startswith("Tag:") else None
                    if t and arch is None:
                        arch = t.group(1)
                record_text = _read(host, f"{path}/RECORD", min(MAX_RECORD, budget)) if budget > 0 else None
                budget -= len(record_text or "")
                truncated = truncated or budget <= 0
                # the rows are parsed in full only where they are judged (compiled files, files another owner
                # lists too, the RECORD's own row): their paths first, a torch env has 20,000 of them
                lines[name] = _record_lines(record_text or "", site)
                d["record"] = bool(lines[name])
                d["dist_info"] = path
            else:
                text = _read(host, f"{path}/requires.txt", 1 << 20) if host.is_dir(path) else None
                requires = egg_requires(text or "")
                d["compiled"] = None
            d["requires"] = requires
            dists[name] = d
    conda = _conda_records(host, prefix) if host.is_dir(f"{prefix}/conda-meta") else None
    # every path's owners counted at C speed; rows are parsed only where a path is listed twice or is compiled
    counts = Counter(chain.from_iterable(paths for paths, _ in lines.values()))
    if conda:
        counts.update(posixpath.normpath(f"{prefix}/{rel}") for c in conda.values() for rel in c.get("_paths") or [])
    for name, (paths, raw) in lines.items():
        keep = [i for i, p in enumerate(paths) if counts[p] > 1 or (".so" in p and compiled_path(p))
                or p.endswith(".dist-info/RECORD")]
        rows = parse_record("\n".join(raw[i] for i in keep))
        records[name] = [(paths[i], h, s) for i, (_, h, s) in zip(keep, rows)] if len(rows) == len(keep) else \
            [(posixpath.normpath(f"{dists[name]['location']}/{p}"), h, s) for p, h, s in rows]
        dists[name]["compiled"] = any(compiled_path(p) for p, _, _ in records[name])

    shared = _shared_files(dists, records, conda, prefix)
    # conda relocates prefixes inside binaries, distributions strip theirs (Debian's dist-packages keep upstream's
    # RECORD, without an INSTALLER): only what an installer that says so (pip, uv...) wrote is held to its RECORD
    modified, integrity = _integrity(host, {n: r for n, r in records.items() if dists[n].get("installer") and str(
        dists[n].get("installer")).lower() not in NOT_PIP}, deep)
    for c in (conda or {}).values():
        c.pop("_paths", None)
        c.pop("_hashes", None)
    for d in dists.values():
        d.pop("dist_info", None)
    return {"python_version": python_version, "platform_machine": arch,
            "platform_from": "the wheels' platform tags" if arch else None,
            "distributions": dists, "conda": conda, "shared_files": shared, "modified": modified,
            "integrity": integrity, "truncated": truncated}


def _shared_files(dists: Dict[str, Dict[str, Any]], records: Dict[str, List[Tuple[str, Optional[str], Optional[int]]]],
                  conda: Optional[Dict[str, Dict[str, Any]]], prefix: str) -> List[Dict[str, Any]]:
    """Files two owners both list: wheel RECORDs against each other, conda packages against each other, and a
    conda package against a wheel that pip installed over it. Per pair of owners: how many files, how many of
    those the two records say differ (both hashes known and unequal), are identical, or cannot tell."""
    owner_of: Dict[str, List[Tuple[str, str, Optional[str], Optional[int]]]] = {}
    conda_owned_dist_infos = set()
    if conda:
        for cname, c in conda.items():
            for rel in c.get("_paths") or []:
                if ".dist-info/" in rel or ".egg-info" in rel:
                    conda_owned_dist_infos.add(posixpath.normpath(f"{prefix}/{rel}").split(".dist-info/")[0])
                if "__pycache__/" in rel or rel.endswith(".pyc"):
                    continue
                digest, size = (c.get("_hashes") or {}).get(rel, (None, None))
                owner_of.setdefault(posixpath.normpath(f"{prefix}/{rel}"), []).append(("conda", cname, digest, size))
    for name, rows in records.items():
        d = dists[name]
        # a conda package's own dist-info (conda-forge python packages install one) is that package, not a second
        # owner: its files are left out of the comparison with conda
        by_conda = str(d.get("installer") or "").lower() == "conda" or bool(conda_owned_dist_infos) and any(
            p.endswith(".dist-info/RECORD") and p.rsplit(".dist-info/", 1)[0] in conda_owned_dist_infos
            for p, _, _ in rows)
        for path, digest, size in rows:
            if "__pycache__/" in path or path.endswith(".pyc") or ".dist-info/" in path or ".egg-info/" in path:
                continue
            owners = owner_of.setdefault(path, [])
            if by_conda:
                owners[:] = [o for o in owners if o[0] != "conda"]
                if any(o[0] == "conda" for o in owners):
                    continue
            owners.append(("pip", name, digest, size))
    # where each owner has compiled files: two builds of one extension package in one directory (cv2/,
    # onnxruntime/capi/) are a mix whichever file names differ
    compiled_dirs: Dict[Tuple[str, str], set] = {}
    for name, rows in records.items():
        compiled_dirs[("pip", name)] = {posixpath.dirname(p) for p, _, _ in rows if compiled_path(p)}
    for cname, c in (conda or {}).items():
        compiled_dirs[("conda", cname)] = {posixpath.dirname(posixpath.normpath(f"{prefix}/{r}"))
                                           for r in c.get("_paths") or [] if compiled_path(r)}
    pairs: Dict[Tuple[str, str, str, str], Dict[str, Any]] = {}
    for path, owners in owner_of.items():
        if len(owners) < 2:
            continue
        for i in range(len(owners)):
            for j in range(i + 1, len(owners)):
                a, b = sorted([owners[i], owners[j]], key=lambda o: (o[0], o[1]))
                if a[:2] == b[:2]:
                    continue
                key = (a[0], a[1], b[0], b[1])
                entry = pairs.get(key)
                if entry is None:
                    if len(pairs) >= MAX_SHARED:
                        continue
                    mixed = sorted(compiled_dirs.get(a[:2], set()) & compiled_dirs.get(b[:2], set()))
                    entry = pairs[key] = {"owners": [a[1], b[1]], "kinds": [a[0], b[0]], "files": 0,
                                          "differing": 0, "identical": 0, "unknown": 0, "compiled_differing": 0,
                                          "compiled": 0, "init_only": True, "examples": [],
                                          "mixed_dirs": mixed[:MAX_EXAMPLES]}
                entry["files"] += 1
                known = a[2] is not None and b[2] is not None
                same = a[2] is not None and b[2] is not None and _same(a[2], b[2])
                if known and (not same or (a[3] is not None and b[3] is not None and a[3] != b[3])):
                    entry["differing"] += 1
                    if compiled_path(path):
                        entry["compiled_differing"] += 1
                elif known:
                    entry["identical"] += 1
                else:
                    entry["unknown"] += 1
                if compiled_path(path):
                    entry["compiled"] += 1
                if not same:
                    # a namespace package's __init__.py (pkgutil or pkg_resources style) is a line or two
                    if posixpath.basename(path) != "__init__.py" or (a[3] or 0) > 1024 or (b[3] or 0) > 1024:
                        entry["init_only"] = False
                    if len(entry["examples"]) < MAX_EXAMPLES:
                        entry["examples"].append(path)
    return sorted(pairs.values(), key=lambda e: (-e["compiled_differing"], -e["differing"], e["owners"]))


def _integrity(host: Host, records: Dict[str, List[Tuple[str, Optional[str], Optional[int]]]],
               deep: bool) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """The compiled files each RECORD lists, against the files there now: missing, another size (stat), another
    sha256 (--deep only). A RECORD line without a real hash and size is not judged (unknown)."""
    modified: List[Dict[str, Any]] = []
    checked = unknown = hashed = stats = 0
    hash_budget = MAX_HASH_BYTES
    truncated = False
    for name, rows in sorted(records.items()):
        for path, digest, size in rows:
            if not compiled_path(path):
                continue
            if digest is None or size is None:
                unknown += 1
                continue
            if stats >= MAX_STATS:
                truncated = True
                break
            stats += 1
            try:
                st = host.stat(path)
            except FileNotFoundError:
                st = None
            except OSError:
                unknown += 1
                continue
            checked += 1
            item: Optional[Dict[str, Any]] = None
            if st is None:
                if not host.lexists(path):
                    item = {"distribution": name, "path": path, "recorded_size": size, "size": None, "missing": True}
            elif st.st_size != size:
                item = {"distribution": name, "path": path, "recorded_size": size, "size": st.st_size,
                        "missing": False}
            elif deep and st.st_size <= hash_budget:
                hash_budget -= st.st_size
                got = _sha256(host, path)
                if got is not None:
                    hashed += 1
                    if got != digest:
                        item = {"distribution": name, "path": path, "recorded_size": size, "size": st.st_size,
                                "missing": False, "sha256": "differs"}
            if item and len(modified) < MAX_MODIFIED:
                modified.append(item)
    return modified, {"checked": checked, "unknown": unknown, "hashed": hashed, "deep": deep, "truncated": truncated}


def _same(a: str, b: str) -> bool:
    """Two sha256 digests, each RECORD's base64 or conda's hex, are the same."""
    if len(a) == len(b):
        return a == b
    b64, hexa = (a, b) if len(a) < len(b) else (b, a)
    try:
        return base64.urlsafe_b64decode(b64 + "=").hex() == hexa
    except (ValueError, TypeError):
        return False


def _sha256(host: Host, path: str) -> Optional[str]:
    h = hashlib.sha256()
    try:
        with host.open_binary(path) as fh:
            while True:
                chunk = fh.read(1 << 20)
                if not chunk:
                    break
                h.update(chunk)
    except OSError:
        return None
    return base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()  # as RECORD writes it
