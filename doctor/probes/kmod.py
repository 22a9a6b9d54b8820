"""Kernels and NVIDIA kernel modules on disk: per-kernel modules, boot default, DKMS/akmods/kmod
streams, nouveau blacklists, Secure Boot. Files only, so it works on a mounted image."""

from __future__ import annotations

import lzma
import posixpath
import re
from functools import cmp_to_key
from typing import Any, Callable, Dict, List, Optional, Tuple

from dl_doctor.facts.contract import array, boolean, integer, obj, string
from dl_doctor.probes import ProbeContext, Unavailable, probe

MODULE_NAMES = ("nvidia.ko", "nvidia.ko.xz", "nvidia.ko.gz", "nvidia.ko.zst")
MAX_MODULE_BYTES = 256 * 1024 * 1024        # a module file (compressed or not) larger than this is not read
MAX_DECOMPRESSED_BYTES = 512 * 1024 * 1024  # real nvidia.ko are ~20-120 MiB; past this the stream is abandoned
CHUNK = 1 << 20
SIGNATURE_MAGIC = b"~Module signature appended~\n"
SECURE_BOOT_VAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
_MODINFO = re.compile(rb"(?:^|\0)(vermagic|version|signer|sig_id|license)=([^\0]{1,200})")


from dl_doctor.versions import kernel_key as kernel_sort_key  # noqa: E402 - the one place kernels are ordered


def _cmp(a: str, b: str) -> int:
    ka, kb = kernel_sort_key(a), kernel_sort_key(b)
    return (ka > kb) - (ka < kb)


def newest_kernel(releases: List[str]) -> Optional[str]:
    return sorted(releases, key=cmp_to_key(_cmp))[-1] if releases else None


def parse_modinfo(data: bytes) -> Dict[str, Any]:
    """``vermagic``/``version``/``signer`` from a module's .modinfo strings, and whether it is signed."""
    info: Dict[str, Any] = {}
    for m in _MODINFO.finditer(data):
        key = m.group(1).decode()
        info.setdefault(key, m.group(2).decode("utf-8", "replace").strip())
    info["signed"] = data.endswith(SIGNATURE_MAGIC)
    return info


def classify_module_path(path: str) -> str:
    if "/weak-updates/" in path:
        return "weak-updates"
    if "/updates/dkms/" in path:
        return "dkms"
    if "/extra/" in path:
        return "extra"
    if "/updates/" in path:
        return "updates"
    return "kernel"


def parse_grubenv(text: str) -> Dict[str, str]:
    out = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out[k.strip()] = v.strip()
    return out


def parse_bls_entry(text: str) -> Dict[str, str]:
    """A Boot Loader Specification entry (``linux /vmlinuz-4.18.0-513.el8.x86_64`` ...)."""
    out = {}
    for line in text.splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) == 2:
            out[parts[0]] = parts[1]
    return out


def parse_dnf_module(text: str) -> Dict[str, str]:
    out = {}
    for line in text.splitlines():
        if "=" in line:
            k, _, v = line.partition("=")
            out[k.strip()] = v.strip()
    return out


DPKG_PREFIXES = ("nvidia", "libnvidia", "linux-modules-nvidia", "cuda", "linux-image", "dkms", "nvidia-container")


def parse_dpkg_status(text: str, prefixes=DPKG_PREFIXES) -> List[Dict[str, str]]:
    """Installed packages of interest from ``/var/lib/dpkg/status``.

    A host's status file holds thousands of packages: the ``Package:`` lines of interest are found with one regular
    expression scan for their literal start (a pattern anchored at every line start with re.M costs several
    milliseconds of each run on a desktop's 1 MB file), and only their stanzas are parsed.
    """
    out = []
    names = "|".join(re.escape(p) for p in prefixes)
    heads = re.compile(r"\nPackage: (?:%s)" % names)
    starts = [0] if re.match(r"Package: (?:%s)" % names, text) else []
    starts += [m.start() + 1 for m in heads.finditer(text)]
    for start in starts:
        end = text.find("\n\n", start)
        block = text[start: end if end >= 0 else len(text)]
        fields: Dict[str, str] = {}
        for line in block.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue
            k, _, v = line.partition(":")
            fields[k] = v.strip()
        name = fields.get("Package", "")
        if name.startswith(prefixes) and "installed" in fields.get("Status", "").split():
            out.append({"package": name, "version": fields.get("Version", "")})
    return out


def dpkg_packages(host) -> Optional[List[Dict[str, str]]]:
    """The packages of interest in the host's dpkg status file, parsed once per run (kmod and gpu_services ask)."""
    def parse():
        text = host.try_read("/var/lib/dpkg/status", 64 * 1024 * 1024)
        return parse_dpkg_status(text) if text else None

    return host.cached("dpkg_packages", parse)


class _ZstdUnsupported(Exception):
    pass


def _zstd_stream(fh):
    """A zstd frame's content in chunks (RFC 8878): raw and RLE blocks are read here; a compressed block needs the
    zstandard module (used where installed), else _ZstdUnsupported."""
    import struct

    head = fh.read(6)
    if len(head) < 5 or struct.unpack("<I", head[:4])[0] != 0xFD2FB528:
        raise ValueError("not a zstd frame")
    try:
        import zstandard  # type: ignore[import-not-found]
    except ImportError:
        zstandard = None
    if zstandard is not None:
        fh.seek(0)
        reader = zstandard.ZstdDecompressor().stream_reader(fh)
        total = 0
        while True:
            chunk = reader.read(CHUNK)
            if not chunk:
                return
            total += len(chunk)
            if total > MAX_DECOMPRESSED_BYTES:
                raise _TooLarge()
            yield chunk
    fhd = head[4]
    single = bool(fhd & 0x20)
    did = (0, 1, 2, 4)[fhd & 3]
    fcs = (0 if not single else 1, 2, 4, 8)[fhd >> 6]
    skip = (0 if single else 1) + did + fcs
    rest = head[5:] + fh.read(max(0, skip - 1))
    if len(rest) < skip:
        raise EOFError("zstd frame header ends early")
    total = 0
    while True:
        bh = fh.read(3)
        if len(bh) < 3:
            raise EOFError("zstd block header ends early")
        word = bh[0] | bh[1] << 8 | bh[2] << 16
        last, btype, size = word & 1, (word >> 1) & 3, word >> 3
        if btype == 2:
            raise _ZstdUnsupported()
        if btype == 3:
            raise ValueError("reserved zstd block type")
        total += size
        if total > MAX_DECOMPRESSED_BYTES:
            raise _TooLarge()
        if btype == 0:
            left = size
            while left:
                data = fh.read(min(left, CHUNK))
                if not data:
                    raise EOFError("zstd block ends early")
                left -= len(data)
                yield data
        else:
            byte = fh.read(1)
            if not byte:
                raise EOFError("zstd block ends early")
            yield byte * size
        if last:
            return


def _decompressed(fh, kind: str):
    """The module's bytes in chunks, decompressed as a stream (never whole in memory), at most MAX_DECOMPRESSED_BYTES."""
    import zlib

    if kind == "zst":
        yield from _zstd_stream(fh)
        return

    d: Any  # zlib's or lzma's decompressor: they differ (unconsumed_tail, needs_input), each is used as itself
    if kind == "gz":
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif kind == "xz":
        d = lzma.LZMADecompressor()
    total = 0
    while True:
        data = fh.read(CHUNK)
        if kind == "raw":
            if not data:
                return
            yield data
            continue
        if not data:
            if kind == "gz" and not d.eof:
                raise EOFError("compressed stream ends early")
            if kind == "xz" and not d.eof:
                raise EOFError("compressed stream ends early")
            return
        while data:
            if kind == "gz":
                out = d.decompress(data, CHUNK)
                data = d.unconsumed_tail
            else:
                out = d.decompress(data, CHUNK)
                data = b""
                while not d.eof and not d.needs_input:
                    total += len(out)
                    if total > MAX_DECOMPRESSED_BYTES:
                        raise _TooLarge()
                    yield out
                    out = d.decompress(b"", CHUNK)
            total += len(out)
            if total > MAX_DECOMPRESSED_BYTES:
                raise _TooLarge()
            if out:
                yield out
            if getattr(d, "eof", False):
                return


_MODINFO_KEYS = (b"vermagic", b"version", b"signer", b"sig_id", b"license", b"depends", b"name")
_EMPTY_ALLOWED = (b"depends",)  # modpost always writes depends= (empty for a module that needs none)


def _find_modinfo(data: bytes) -> Dict[str, str]:
    """The first ``\\0key=value\\0`` of each .modinfo key, found with bytes.find (fast on any input)."""
    out: Dict[str, str] = {}
    for key in _MODINFO_KEYS:
        at = data.find(b"\0" + key + b"=")
        if at < 0:
            continue
        start = at + len(key) + 2
        end = data.find(b"\0", start, start + 201)
        value = data[start:end if end >= 0 else start + 200]
        if value or (key in _EMPTY_ALLOWED and end == start):
            out[key.decode()] = value.decode("utf-8", "replace").strip()
    return out


class _TooLarge(Exception):
    pass


def _module_info(ctx: ProbeContext, path: str) -> Dict[str, Any]:
    """vermagic/version/signer of a module file, read as a stream with bounded memory and size."""
    host = ctx.host
    kind = "xz" if path.endswith(".xz") else "gz" if path.endswith(".gz") else "zst" if path.endswith(".zst") else "raw"
    info: Dict[str, Any] = {}
    tail = b""
    try:
        if host.stat(path).st_size > MAX_MODULE_BYTES:
            return {"note": "too large to read"}
        with host.open_binary(path) as fh:
            for chunk in _decompressed(fh, kind):
                window = tail + chunk
                if len(info) < len(_MODINFO_KEYS):
                    for key, value in _find_modinfo(window).items():
                        info.setdefault(key, value)
                tail = window[-1024:]
    except _ZstdUnsupported:
        return {**info, "note": "zstd-compressed blocks; read only with the zstandard module installed"}
    except _TooLarge:
        ctx.bad_input(path, f"decompresses to more than {MAX_DECOMPRESSED_BYTES >> 20} MiB; read no further")
        info["note"] = (f"decompresses to more than {MAX_DECOMPRESSED_BYTES >> 20} MiB (a real module is far "
                        f"smaller): stopped there; whether it is signed is unknown")
        info["signed"] = None
        return info
    except (OSError, lzma.LZMAError, EOFError, ValueError) as exc:
        ctx.bad_input(path, f"unreadable module: {exc}")
        return {**info, "note": f"unreadable: {exc}"}
    except Exception as exc:  # noqa: BLE001 - zlib.error and friends: a corrupt file costs only its own facts
        ctx.bad_input(path, f"unreadable module: {type(exc).__name__}: {exc}")
        return {**info, "note": f"unreadable: {type(exc).__name__}: {exc}"}
    info["signed"] = tail.endswith(SIGNATURE_MAGIC)
    return info


def _find_modules(ctx: ProbeContext, kernel: str) -> List[str]:
    """nvidia.ko* below /lib/modules/KERNEL, not following directory symlinks (build/, source/)."""
    host = ctx.host
    base = f"/lib/modules/{kernel}"
    found: List[str] = []
    stack = [(base, 0)]
    while stack:
        directory, depth = stack.pop()
        for name, kind in host.list_entries(directory):
            path = f"{directory}/{name}"
            if name in MODULE_NAMES:
                found.append(path)
            elif kind == "dir" and depth < 6 and name not in ("build", "source"):
                stack.append((path, depth + 1))
    return sorted(found)


MAX_MODULES_DEP_BYTES = 16 << 20
_KO_SUFFIXES = (".ko", ".ko.xz", ".ko.gz", ".ko.zst")


def module_name(path: str) -> str:
    """The kernel's name of a module file: its base name without .ko[.xz|.gz|.zst], '-' read as '_' (the kernel
    treats them alike)."""
    base = path.rsplit("/", 1)[-1]
    for suffix in _KO_SUFFIXES[::-1]:
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    return base.replace("-", "_")


def parse_modules_dep(text: str) -> Dict[str, Dict[str, Any]]:
    """modules.dep (depmod's ``path: dep dep``) as name -> {path, deps (names)}; the first entry of a name wins, as
    in modprobe."""
    out: Dict[str, Dict[str, Any]] = {}
    for line in text.splitlines():
        path, sep, rest = line.partition(":")
        if not sep or not path.strip():
            continue
        name = module_name(path.strip())
        out.setdefault(name, {"path": path.strip()[:512], "deps": [module_name(d) for d in rest.split()[:256]]})
    return out


def _nvidia_module_files(ctx: ProbeContext, kernel: str) -> List[str]:
    """Every nvidia*.ko* below /lib/modules/KERNEL (nvidia, -uvm, -modeset, -drm, -peermem, -fs...)."""
    host = ctx.host
    found: List[str] = []
    stack = [(f"/lib/modules/{kernel}", 0)]
    while stack and len(found) < 64:
        directory, depth = stack.pop()
        for name, kind in host.list_entries(directory):
            path = f"{directory}/{name}"
            if name.startswith(("nvidia", "nv_peer_mem")) and name.endswith(_KO_SUFFIXES):
                found.append(path)
            elif kind == "dir" and depth < 6 and name not in ("build", "source"):
                stack.append((path, depth + 1))
    return sorted(found)


def module_set(ctx: ProbeContext, kernel: Optional[str]) -> Optional[Dict[str, Any]]:
    """The running kernel's NVIDIA modules with what each needs (.modinfo depends=, vermagic) against what the
    kernel's modules.dep and modules.builtin provide (None: no running kernel, or no /lib/modules for it)."""
    host = ctx.host
    if not kernel or not host.is_dir(f"/lib/modules/{kernel}"):
        return None
    base = f"/lib/modules/{kernel}"
    dep_text = host.try_read(f"{base}/modules.dep", MAX_MODULES_DEP_BYTES)
    dep = parse_modules_dep(dep_text) if dep_text else {}
    builtin_text = host.try_read(f"{base}/modules.builtin", MAX_MODULES_DEP_BYTES) or ""
    builtin = {module_name(line.strip()) for line in builtin_text.splitlines() if line.strip()}
    known = bool(dep)  # an empty or missing modules.dep says nothing about what the kernel has
    modules: List[Dict[str, Any]] = []
    for path in _nvidia_module_files(ctx, kernel):
        info = _module_info(ctx, path)
        name = (info.get("name") or module_name(path)).replace("-", "_")
        depends = None if "depends" not in info else [d.replace("-", "_") for d in info["depends"].split(",") if d]
        entry: Dict[str, Any] = {"name": name, "path": path, "vermagic": info.get("vermagic"),
                                 "version": info.get("version"), "depends": depends, "note": info.get("note")}
        if known:
            rel = path[len(base) + 1:]
            listed = dep.get(name)
            entry["listed"] = listed is not None
            entry["listed_path"] = listed["path"] if listed else None
            entry["shadowed"] = bool(listed and listed["path"] != rel)
            edges = set(listed["deps"]) if listed else set()
            entry["missing"] = sorted(d for d in depends or [] if d not in dep and d not in builtin)
            entry["unlisted"] = sorted(d for d in depends or [] if listed and d in dep and d not in edges)
        modules.append(entry)
    return {"kernel": kernel, "modules_dep": known, "modules_dep_entries": len(dep), "builtin_entries": len(builtin),
            "modules": modules}


DKMS_SIGNING_KEYS = ("/var/lib/dkms/mok.pub", "/var/lib/shim-signed/mok/MOK.der")
MAX_METADATA_BYTES = 256 * 1024 * 1024   # one repository metadata file, decompressed; past this it is read no further
MAX_METADATA_FILES = 48
MAX_REPO_PACKAGES = 2000
_RECORD_MAX = 16384                      # one package's record (an apt stanza, an rpm <package>) as far as it is read
_APT_KMOD = re.compile(r"linux-modules-nvidia-([0-9]{2,4}(?:-(?:server|open)){0,2})-([0-9][A-Za-z0-9.+~-]{0,100})")
_RPM_KMOD = re.compile(r"kmod-nvidia(?:-open)?-([0-9]{2,4}\.[0-9]{1,4}(?:\.[0-9]{1,4})?)-([0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,4}-"
                       r"[0-9][0-9.]{0,40})")
_RPM_NAME = re.compile(rb"<name>([^<]{1,200})</name>")
_RPM_VERSION = re.compile(rb'<version epoch="[0-9]{0,10}" ver="([^"<>]{1,100})" rel="([^"<>]{1,100})"')
_FLAVOUR = re.compile(r"[0-9]{1,6}\.[0-9]{1,6}\.[0-9]{1,6}-[0-9]{1,6}-([a-z][a-z0-9-]{0,40})")  # bounded: linear


def _metadata_records(ctx: ProbeContext, path: str, needle: bytes, end: bytes,
                      keep: Callable[[bytes], Optional[Dict[str, Any]]]) -> Tuple[List[Dict[str, Any]], bool]:
    """What ``keep`` makes of the records of a package-metadata file that start with ``needle`` (up to ``end``, at
    most _RECORD_MAX bytes), read as a stream (.gz, .xz, .zst or plain) and at most MAX_METADATA_BYTES; and whether
    it was cut short."""
    kind = "xz" if path.endswith(".xz") else "gz" if path.endswith(".gz") else "zst" if path.endswith(".zst") else "raw"
    out: List[Dict[str, Any]] = []

    def add(record: bytes) -> None:
        entry = keep(record)
        if entry is not None:
            out.append(entry)

    buf, total = b"\n", 0
    try:
        with ctx.host.open_binary(path) as fh:
            for chunk in _decompressed(fh, kind):
                total += len(chunk)
                buf += chunk
                start = 0
                while True:
                    at = buf.find(needle, start)
                    if at < 0:
                        buf = buf[max(start, len(buf) - len(needle) + 1):]
                        break
                    stop = buf.find(end, at, at + _RECORD_MAX)
                    if stop < 0 and len(buf) - at < _RECORD_MAX:
                        buf = buf[at:]
                        break
                    stop = stop if stop >= 0 else at + _RECORD_MAX
                    add(buf[at:stop])
                    start = stop
                if total > MAX_METADATA_BYTES or len(out) > MAX_REPO_PACKAGES:
                    return out, True
            at = buf.find(needle)
            if at >= 0:
                add(buf[at:at + _RECORD_MAX])
    except _TooLarge:
        return out, True
    except (_ZstdUnsupported, OSError, lzma.LZMAError, EOFError, ValueError) as exc:
        ctx.bad_input(path, f"unreadable repository metadata: {type(exc).__name__}")
        return out, True
    except Exception as exc:  # noqa: BLE001 - zlib.error and friends: a corrupt file costs only its own facts
        ctx.bad_input(path, f"unreadable repository metadata: {type(exc).__name__}")
        return out, True
    return out, False


def _repo_dir(path: str) -> str:
    """The repository's cache directory name of a metadata file (cuda-rhel8-x86_64-1a2b3c), lower case."""
    directory = path.split("/repodata/")[0] if "/repodata/" in path else path.rsplit("/", 1)[0]
    return directory.rsplit("/", 1)[-1].lower()


def repo_modules(ctx: ProbeContext, dpkg: Optional[List[Dict[str, str]]], stream: Optional[Dict[str, Any]],
                 rpm_kmods: bool = False) -> Optional[Dict[str, Any]]:
    """The precompiled NVIDIA module packages the cached repository metadata offers, per kernel (None: none read).

    apt: linux-modules-nvidia-BRANCH-KERNEL of the branches installed, for the kernel flavours installed (the lists
    name thousands: every flavour of every branch), from the restricted component's lists; rpm: kmod-nvidia-DRIVER-
    KERNEL, of the stream's branch when the stream names one, from the metadata of NVIDIA's (cuda/nvidia)
    repositories. Read only where such a module is in use: a precompiled dnf stream, an installed
    linux-modules-nvidia package, or (``rpm_kmods``) a non-DKMS module in a kernel's extra/."""
    host = ctx.host
    packages: List[Dict[str, Any]] = []
    sources: List[str] = []
    truncated = False
    installed = [m for m in (_APT_KMOD.fullmatch(p.get("package", "")) for p in dpkg or []) if m]
    if installed:
        branches = {m.group(1) for m in installed}
        flavours = {f.group(1) for f in (_FLAVOUR.fullmatch(m.group(2)) for m in installed) if f}
        # Ubuntu publishes linux-modules-nvidia-* in its restricted component; other lists are not read
        for path in sorted(p for p in host.glob("/var/lib/apt/lists/*_Packages")
                           if "_restricted_" in p.rsplit("/", 1)[-1])[:MAX_METADATA_FILES]:
            def apt(record: bytes, path: str = path) -> Optional[Dict[str, Any]]:
                fields: Dict[str, str] = {}
                for line in record.decode("utf-8", "replace").splitlines():
                    key, sep, value = line.partition(": ")
                    if sep and key in ("Package", "Version"):
                        fields.setdefault(key, value.strip()[:200])
                m = _APT_KMOD.fullmatch(fields.get("Package", ""))
                flavour = _FLAVOUR.fullmatch(m.group(2)) if m else None
                if m and m.group(1) in branches and (not flavours or (flavour and flavour.group(1) in flavours)):
                    return {"package": m.group(0), "version": fields.get("Version"), "kernel": m.group(2),
                            "branch": m.group(1), "source": path}
                return None

            found, cut = _metadata_records(ctx, path, b"\nPackage: linux-modules-nvidia-", b"\n\n", apt)
            sources.append(path)
            truncated |= cut
            packages.extend(found)
    name = (stream or {}).get("stream") or ""
    if (name and not name.endswith("dkms")) or rpm_kmods:
        branch = name.split("-")[0] if name[:1].isdigit() else None
        paths = sorted(set(host.glob("/var/cache/dnf/*/repodata/*primary.xml*")
                           + host.glob("/var/cache/yum/*/*/*/*primary.xml*")
                           + host.glob("/var/cache/yum/*/*/*/repodata/*primary.xml*")))
        # NVIDIA's precompiled kmods come from its CUDA repositories (cuda-rhel8-x86_64, cuda-amzn2023-x86_64): the
        # distribution's own repositories (BaseOS, AppStream: hundreds of MB of metadata) are not read
        paths = [p for p in paths if not p.endswith((".sqlite", ".bz2"))
                 and any(w in _repo_dir(p) for w in ("cuda", "nvidia"))]
        for path in paths[:MAX_METADATA_FILES]:
            def rpm(record: bytes, path: str = path) -> Optional[Dict[str, Any]]:
                nm, ver = _RPM_NAME.search(record), _RPM_VERSION.search(record)
                m = _RPM_KMOD.fullmatch(nm.group(1).decode("ascii", "replace")) if nm else None
                if m and (branch is None or m.group(1).split(".")[0] == branch):
                    return {"package": m.group(0),
                            "version": f"{ver.group(1).decode('utf-8', 'replace')}-"
                                       f"{ver.group(2).decode('utf-8', 'replace')}" if ver else None,
                            "kernel": m.group(2), "branch": m.group(1), "source": path}
                return None

            found, cut = _metadata_records(ctx, path, b"<name>kmod-nvidia", b"</package>", rpm)
            sources.append(path)
            truncated |= cut
            packages.extend(found)
    if not sources:
        return None
    if len(packages) > MAX_REPO_PACKAGES:
        packages, truncated = packages[-MAX_REPO_PACKAGES:], True
    return {"sources": sources, "packages": packages, "truncated": truncated}


KMOD_FACTS = obj(
    "kernels and NVIDIA modules on disk: boot default, DKMS/akmods, Secure Boot, nouveau",
    running_kernel=string("the running kernel (/proc/sys/kernel/osrelease, uname -r; in a tree, what it holds)"),
    installed_kernels=array(string(), "kernels with a boot image (/boot/vmlinuz-*, /lib/modules/*/vmlinuz), oldest "
                                      "first"),
    boot_default=obj(
        "the kernel the next boot starts",
        kernel=string("its release"),
        source=string("how it was found: grubenv's saved_entry (and its BLS entry), the /boot/vmlinuz link, or the "
                      "newest installed kernel"),
    ),
    nvidia_modules=array(obj(
        "",
        kernel=string("the /lib/modules directory it is in"),
        path=string("the module file (nvidia.ko, .ko.xz, .ko.gz, .ko.zst)"),
        kind=string("where it was installed from its path: kernel, updates, extra, dkms, weak-updates"),
        link=string("the symbolic link's target, when the file is a link (weak-updates)"),
        link_kernel=string("the kernel of the /lib/modules directory the link points into"),
        vermagic=string("its vermagic: the kernel it was built for (read for the running and default kernels)"),
        version=string("its version (modinfo)"),
        signer=string("who signed it (modinfo)"),
        sig_id=string("its signature type (modinfo)"),
        license=string("its license (modinfo)"),
        signed=boolean("it ends with a module signature (null: not known)"),
        note=string("why it was not read in full (zstd, too large, unreadable)"),
        depends=string("its depends= (the modules it needs, comma-separated; modinfo)", since="0.2.0"),
        name=string("its name= (modinfo)", since="0.2.0"),
    ), "every nvidia.ko* below /lib/modules/*"),
    running_modules=obj(
        "the running kernel's NVIDIA modules (nvidia, nvidia-uvm, -modeset, -drm, -peermem...) against what the "
        "kernel's modules.dep and modules.builtin provide (null: no running kernel, or no /lib/modules for it)",
        kernel=string("the running kernel"),
        modules_dep=boolean("its modules.dep was read and lists modules (false: missing or empty: what the kernel "
                            "provides is not known)"),
        modules_dep_entries=integer("modules modules.dep lists"),
        builtin_entries=integer("modules modules.builtin lists"),
        modules=array(obj(
            "",
            name=string("the module's name (name=, else the file's; '-' read as '_')"),
            path=string("the module file"),
            vermagic=string("its vermagic"),
            version=string("its version"),
            depends=array(string(), "the modules its .modinfo depends= names (null: not read)"),
            note=string("why it was not read in full"),
            listed=boolean("modules.dep lists a module of this name"),
            listed_path=string("the file modules.dep lists for it (relative to the kernel's directory)"),
            shadowed=boolean("modules.dep lists another file for this name (modprobe loads that one)"),
            missing=array(string(), "modules it depends on that the kernel has neither in modules.dep nor built in"),
            unlisted=array(string(), "modules it depends on that modules.dep has, but not among its dependencies "
                                     "(modules.dep is stale: modprobe will not load them first)"),
        ), "every nvidia*.ko* of the running kernel"),
        since="0.2.0",
    ),
    dkms=obj(
        "DKMS's NVIDIA module",
        registered=boolean("/var/lib/dkms/nvidia exists"),
        builds=array(obj(
            "",
            version=string("the module version"),
            kernel=string("the kernel it is built for"),
        ), "the builds DKMS has (/var/lib/dkms/nvidia/VERSION/KERNEL)"),
        signing_key=string("the certificate DKMS signs the modules it builds with, where one exists: "
                           "/var/lib/dkms/mok.pub (DKMS 3's default), /var/lib/shim-signed/mok/MOK.der (Ubuntu's "
                           "shim-signed key, which Ubuntu's DKMS uses) (null: none)", since="0.2.0"),
        build_logs=array(obj(
            "",
            path=string("the make.log (VERSION/build/make.log: the last build; VERSION/KERNEL/ARCH/log/make.log)"),
            version=string("the module version"),
            kernel=string("the kernel the build was for (from the log)"),
            failed=boolean("the log has compiler, linker or make errors"),
            errors=array(string(), "its first error lines"),
            error_count=integer("error lines in it"),
        ), "DKMS's make.log files of the NVIDIA module", since="0.2.0"),
    ),
    akmods=boolean("akmods builds the NVIDIA module (its cache or sources exist)"),
    kernel_headers=array(string(), "kernels whose headers (build tree) are installed: /lib/modules/KERNEL/build/Makefile "
                                   "(what DKMS and akmods compile the module against)", since="0.2.0"),
    dnf_module=obj(
        "the nvidia-driver DNF module stream (null: none is set)",
        stream=string("the enabled stream (latest-dkms, 535-dkms, open-dkms...)"),
        state=string("its state (enabled, disabled)"),
    ),
    runfile_installer=boolean("NVIDIA's .run installer was used (nvidia-uninstall or its log exists)"),
    dpkg_packages=array(obj(
        "",
        package=string("the package name"),
        version=string("its version"),
    ), "installed dpkg packages of NVIDIA, CUDA, linux-image and dkms (null: no dpkg status file)"),
    nouveau=obj(
        "the nouveau driver",
        loaded=boolean("nouveau is in /proc/modules (null: not known)"),
        blacklisted=boolean("some modprobe.d file or the kernel command line blacklists it"),
        blacklist_sources=array(string(), "which files or command line arguments do"),
    ),
    module_unknown=array(string(), "kernels for which whether an NVIDIA module exists is not known: set only by "
                                   "dl-doctor plan, for a new kernel whose module would come from a repository these "
                                   "facts do not show (DLD-DRV-001, -002 and -005 skip them)", since="0.2.0"),
    repo_modules=obj(
        "the precompiled NVIDIA kernel-module packages (one per kernel) the configured repositories offer, from the "
        "package manager's cached metadata: Ubuntu's restricted apt lists (linux-modules-nvidia-BRANCH-KERNEL of the "
        "branches and kernel flavours installed), the dnf/yum primary.xml of NVIDIA's cuda repositories "
        "(kmod-nvidia-DRIVER-KERNEL); read only where such a module is in use (null: no metadata read)",
        sources=array(string(), "the metadata files read"),
        packages=array(obj(
            "",
            package=string("the package name"),
            version=string("its version (apt Version:, rpm ver-rel)"),
            kernel=string("the kernel it is built for, from its name (apt: the release; rpm: version-release without "
                          "the dist tag and arch)"),
            branch=string("the driver branch or version it carries (535-server, 535.104.05)"),
            source=string("the metadata file that lists it"),
        ), "one entry per package (at most 2000)"),
        truncated=boolean("more packages matched than were kept, or a file was larger than what is read of it"),
        since="0.2.0",
    ),
    secure_boot=obj(
        "the Secure Boot state from the EFI variable",
        enabled=boolean("Secure Boot is on (null: not known)"),
        source=string("where the state comes from (efivars SecureBoot, legacy BIOS boot, ...)"),
    ),
)


@probe("kmod", "installed kernels, the NVIDIA module built for each, boot default, DKMS/akmods, nouveau, Secure Boot",
       provides=KMOD_FACTS)
def kmod_probe(ctx: ProbeContext) -> Dict[str, Any]:
    host = ctx.host
    if not host.is_dir("/lib/modules") and not host.is_dir("/boot"):
        raise Unavailable("no /lib/modules or /boot (not a root filesystem)")
    module_dirs = [k for k in host.listdir("/lib/modules") if host.is_dir(f"/lib/modules/{k}")]
    boot_images = [n[len("vmlinuz-"):] for n in host.listdir("/boot") if n.startswith("vmlinuz-")
                   and "rescue" not in n]
    installed = sorted({k for k in module_dirs if k in boot_images or host.exists(f"/lib/modules/{k}/vmlinuz")}
                       | set(boot_images), key=cmp_to_key(_cmp))

    # NVIDIA modules per kernel; read module metadata for the kernels that matter most.
    running = (host.try_read("/proc/sys/kernel/osrelease", 256) or "").strip() or None
    if host.kernel_live and not running:
        uname = host.uname()
        assert uname is not None  # kernel_live
        running = uname.release
    modules: List[Dict[str, Any]] = []
    for kernel in module_dirs:
        for path in _find_modules(ctx, kernel):
            entry: Dict[str, Any] = {"kernel": kernel, "path": path, "kind": classify_module_path(path)}
            link = host.readlink(path)
            if link:
                entry["link"] = link
                m = re.search(r"/lib/modules/([^/]+)/", link if link.startswith("/") else
                              posixpath.normpath(posixpath.join(posixpath.dirname(path), link)))
                entry["link_kernel"] = m.group(1) if m else None
            modules.append(entry)

    default = _boot_default(ctx, installed)
    running_modules = module_set(ctx, running)
    interesting = {running, default.get("kernel")}
    for entry in modules:
        if entry["kernel"] in interesting:
            entry.update(_module_info(ctx, entry["path"]))

    dkms = []
    build_logs: List[Dict[str, Any]] = []
    for version in host.listdir("/var/lib/dkms/nvidia")[:32]:
        for kernel in host.listdir(f"/var/lib/dkms/nvidia/{version}")[:64]:
            if host.is_dir(f"/var/lib/dkms/nvidia/{version}/{kernel}") and kernel not in ("source", "build"):
                dkms.append({"version": version, "kernel": kernel})
                for arch in host.listdir(f"/var/lib/dkms/nvidia/{version}/{kernel}")[:4]:
                    log = _dkms_make_log(ctx, f"/var/lib/dkms/nvidia/{version}/{kernel}/{arch}/log/make.log", version)
                    if log:
                        build_logs.append(log)
        log = _dkms_make_log(ctx, f"/var/lib/dkms/nvidia/{version}/build/make.log", version)
        if log:
            build_logs.append(log)
    dnf_stream = None
    text = host.try_read("/etc/dnf/modules.d/nvidia-driver.module")
    if text:
        info = parse_dnf_module(text)
        dnf_stream = {"stream": info.get("stream"), "state": info.get("state")}
    packages = dpkg_packages(host)

    return {
        "running_kernel": running,
        "installed_kernels": installed,
        "boot_default": default,
        "nvidia_modules": modules,
        "running_modules": running_modules,
        "dkms": {"registered": host.is_dir("/var/lib/dkms/nvidia"), "builds": dkms, "build_logs": build_logs,
                 "signing_key": next((k for k in DKMS_SIGNING_KEYS if host.is_file(k)), None)},
        # kernels whose build tree (headers) DKMS and akmods compile against is installed: /lib/modules/K/build
        "kernel_headers": sorted(k for k in module_dirs if host.is_file(f"/lib/modules/{k}/build/Makefile")),
        "akmods": host.is_dir("/var/cache/akmods/nvidia") or bool(host.glob("/usr/src/akmods/nvidia-kmod*")),
        "dnf_module": dnf_stream,
        "runfile_installer": host.exists("/usr/bin/nvidia-uninstall") or host.exists("/var/log/nvidia-installer.log"),
        "dpkg_packages": packages,
        "nouveau": _nouveau(ctx),
        "secure_boot": _secure_boot(ctx),
        "repo_modules": repo_modules(ctx, packages, dnf_stream, rpm_kmods=not host.is_dir("/var/lib/dkms/nvidia") and any(
            m["kind"] == "extra" for m in modules)),
    }


_MAKELOG_KERNEL = re.compile(r"(?:for kernel |KERNEL_UNAME=|/lib/modules/|linux-headers-)([0-9][A-Za-z0-9._+~-]{2,100}?)"
                             r"(?:[ /'\s)]|$)")
_MAKELOG_ERROR = re.compile(r"(?:\berror:|\*\*\* \[[^\]\n]{0,512}\] Error \d|undefined!|ERROR: modpost)")


def _dkms_make_log(ctx: ProbeContext, path: str, version: str) -> Optional[Dict[str, Any]]:
    """A DKMS build's make.log (the build directory's, of the last build; or a kernel's log/make.log): the kernel it
    built for, whether it failed, its first compiler/linker errors."""
    text = ctx.host.try_read(path, 4 << 20)
    if not text:
        return None
    lines = text.splitlines()
    kernel = None
    for line in lines[:200]:
        m = _MAKELOG_KERNEL.search(line)
        if m:
            kernel = m.group(1).rstrip(".")
            break
    errors = [l.strip()[:300] for l in lines if _MAKELOG_ERROR.search(l)]
    return {"path": path, "version": version, "kernel": kernel, "failed": bool(errors),
            "errors": errors[:5], "error_count": len(errors)}


def _boot_default(ctx: ProbeContext, installed: List[str]) -> Dict[str, Any]:
    host = ctx.host
    env_text = host.try_read("/boot/grub2/grubenv") or host.try_read("/boot/grub/grubenv")
    env = parse_grubenv(env_text) if env_text else {}
    saved = env.get("saved_entry")
    if saved:
        entry_text = host.try_read(f"/boot/loader/entries/{saved}.conf")
        if entry_text:
            linux = parse_bls_entry(entry_text).get("linux", "")
            m = re.search(r"vmlinuz-(\S+)", linux)
            if m:
                return {"kernel": m.group(1), "source": f"/boot/grub2/grubenv saved_entry -> /boot/loader/entries/{saved}.conf"}
        for kernel in installed:
            if saved.endswith(kernel):
                return {"kernel": kernel, "source": "/boot/grub2/grubenv saved_entry"}
    link = host.readlink("/boot/vmlinuz")
    if link:
        m = re.search(r"vmlinuz-(\S+)$", link)
        if m:
            return {"kernel": m.group(1), "source": "/boot/vmlinuz symlink"}
    newest = newest_kernel(installed)
    return {"kernel": newest, "source": "newest installed kernel (no explicit default found)" if newest else None}


def _nouveau(ctx: ProbeContext) -> Dict[str, Any]:
    host = ctx.host
    sources: List[str] = []
    for pattern in ("/etc/modprobe.d/*.conf", "/usr/lib/modprobe.d/*.conf", "/lib/modprobe.d/*.conf",
                    "/run/modprobe.d/*.conf"):
        for path in host.glob(pattern):
            text = host.try_read(path, 65536) or ""
            for line in text.splitlines():
                words = line.split("#", 1)[0].split()
                if words[:2] == ["blacklist", "nouveau"] or (words[:2] == ["install", "nouveau"] and
                                                             any(w.endswith(("/false", "/true")) for w in words[2:])):
                    sources.append(path)
    cmdline = host.try_read("/proc/cmdline", 65536) or ""
    for token in cmdline.split():
        key, _, value = token.partition("=")
        if key in ("modprobe.blacklist", "rd.driver.blacklist", "module_blacklist") and "nouveau" in value.split(","):
            sources.append(f"/proc/cmdline {token}")
        if token == "nouveau.modeset=0":
            sources.append(f"/proc/cmdline {token}")
    modules = host.try_read("/proc/modules")
    loaded = None if modules is None else any(line.split()[:1] == ["nouveau"] for line in modules.splitlines())
    return {"loaded": loaded, "blacklisted": bool(sources), "blacklist_sources": sorted(set(sources))}


def _secure_boot(ctx: ProbeContext) -> Dict[str, Any]:
    host = ctx.host
    try:
        raw = host.read_bytes(SECURE_BOOT_VAR, 64)
        return {"enabled": len(raw) >= 5 and raw[4] == 1, "source": "efivars SecureBoot"}
    except FileNotFoundError:
        pass
    except OSError as exc:
        return {"enabled": None, "source": f"efivars unreadable: {exc.strerror}"}
    if host.is_dir("/sys/firmware"):
        if not host.is_dir("/sys/firmware/efi"):
            return {"enabled": False, "source": "legacy BIOS boot (no /sys/firmware/efi)"}
        return {"enabled": None, "source": "EFI without a SecureBoot variable"}
    return {"enabled": None, "source": None}
