"""Small, valid ELF shared objects for sysroot trees: what the loader reads (SONAME, DT_NEEDED, DT_RPATH/RUNPATH,
DT_VERNEED, DT_VERDEF, the machine) and nothing else. 64-bit little-endian; x86_64 or aarch64.

The struct reader (dl_doctor.readers.elf) and pyelftools read these files the same way
(tests/probes/test_elf_reader.py)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Dict, Iterable, Optional, Sequence

MACHINE = {"x86_64": 62, "aarch64": 183}
DT = {"NEEDED": 1, "HASH": 4, "STRTAB": 5, "SYMTAB": 6, "STRSZ": 10, "SYMENT": 11, "SONAME": 14, "RPATH": 15,
      "RUNPATH": 29, "VERSYM": 0x6FFFFFF0,
      "VERDEF": 0x6FFFFFFC, "VERDEFNUM": 0x6FFFFFFD, "VERNEED": 0x6FFFFFFE, "VERNEEDNUM": 0x6FFFFFFF}
BASE = 0x1000  # the one PT_LOAD maps file offset 0 at this address


def elf_bytes(soname: Optional[str] = None, needed: Sequence[str] = (), rpath: Sequence[str] = (),
              runpath: Sequence[str] = (), machine: str = "x86_64", verdef: Sequence[str] = (),
              verneed: Optional[Dict[str, Sequence[str]]] = None, exports: Sequence[str] = (),
              imports: Sequence[str] = (), fatbin: Optional[bytes] = None) -> bytes:
    """``exports``: the symbols it defines; ``imports``: those it leaves undefined for the loader to bind (both
    unversioned, global): written as .dynsym with its DT_HASH table and DT_VERSYM, as ld.so reads them.
    ``fatbin``: the contents of a ``.nv_fatbin`` section (see :func:`fatbin`), written with a section header
    table (.shstrtab, .nv_fatbin) after everything the loader reads, as nvcc-built objects carry it."""
    body = _elf_body(soname, needed, rpath, runpath, machine, verdef, verneed, exports, imports)
    if fatbin is None:
        return body
    shstr = b"\0.shstrtab\0.nv_fatbin\0"
    fat_off = (len(body) + 7) & ~7
    str_off = fat_off + len(fatbin)
    sh_off = (str_off + len(shstr) + 7) & ~7
    out = bytearray(body) + b"\0" * (fat_off - len(body)) + fatbin + shstr
    out += b"\0" * (sh_off - len(out))
    sh = struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    sh += struct.pack("<IIQQQQIIQQ", 1, 3, 0, 0, str_off, len(shstr), 0, 0, 1, 0)  # .shstrtab
    sh += struct.pack("<IIQQQQIIQQ", 11, 1, 2, 0, fat_off, len(fatbin), 0, 0, 8, 0)  # .nv_fatbin (PROGBITS, ALLOC)
    out += sh
    out[0x28:0x30] = struct.pack("<Q", sh_off)
    out[0x3A:0x40] = struct.pack("<HHH", 64, 3, 1)
    return bytes(out)


FATBIN_MAGIC = 0xBA55ED50


def fatbin(*containers: Sequence[str]) -> bytes:
    """A ``.nv_fatbin`` section as nvcc writes it: per compilation unit a container (magic 0xBA55ED50, version 1,
    header size 16, size of what follows) of entries, each a 64-byte header (kind 1 = PTX, 2 = ELF cubin; header size;
    payload size; ...; the target architecture at offset 28) and its payload. Entries are written as 'sm_80' (a
    cubin) or 'compute_90' (PTX)."""
    out = bytearray()
    for entries in containers:
        body = bytearray()
        for e in entries:
            kind = 1 if e.startswith("compute_") else 2
            arch = int(e.split("_", 1)[1].rstrip("abf"))
            payload = (b"//\n.version 8.4\n.target " + e.encode() + b"\n") if kind == 1 else b"\x7fELF" + b"\0" * 28
            payload += b"\0" * (-len(payload) % 8)
            body += struct.pack("<HHIQIIHHIIIQQQ", kind, 0x0101, 64, len(payload), 0, 0, 4 if kind == 1 else 7,
                                8 if kind == 1 else 0, arch, 0, 0, 0x11 if kind == 1 else 0x1, 0, 0)
            body += payload
        out += struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(body)) + body
    return bytes(out)


def _elf_body(soname: Optional[str], needed: Sequence[str], rpath: Sequence[str], runpath: Sequence[str],
              machine: str, verdef: Sequence[str], verneed: Optional[Dict[str, Sequence[str]]],
              exports: Sequence[str], imports: Sequence[str]) -> bytes:
    strtab = bytearray(b"\0")
    index: Dict[str, int] = {}

    def s(text: str) -> int:
        if text not in index:
            index[text] = len(strtab)
            strtab.extend(text.encode() + b"\0")
        return index[text]

    verneed = verneed or {}
    tags = [(DT["NEEDED"], s(n)) for n in needed]
    if soname:
        tags.append((DT["SONAME"], s(soname)))
    if rpath:
        tags.append((DT["RPATH"], s(":".join(rpath))))
    if runpath:
        tags.append((DT["RUNPATH"], s(":".join(runpath))))
    names = [(f, list(v)) for f, v in verneed.items()]
    for f, v in names:
        s(f), [s(x) for x in v]
    for x in verdef:
        s(x)
    symbols = [(n, False) for n in imports] + [(n, True) for n in exports if n not in imports]
    for n, _ in symbols:
        s(n)
    # layout: header, 2 program headers, dynamic, strtab, verneed, verdef, dynsym, hash, versym
    n_tags = len(tags) + 2 + (2 if names else 0) + (2 if verdef else 0) + (4 if symbols else 0) + 1
    dyn_off = 64 + 2 * 56
    str_off = dyn_off + 16 * n_tags
    vn_off = str_off + len(strtab)
    vn = bytearray()
    for i, (f, versions) in enumerate(names):
        aux = bytearray()
        for j, v in enumerate(versions):
            aux += struct.pack("<IHHII", 0, 0, 2 + j, index[v], 16 if j < len(versions) - 1 else 0)
        nxt = 16 + len(aux) if i < len(names) - 1 else 0
        vn += struct.pack("<HHIII", 1, len(versions), index[f], 16, nxt) + aux
    vd_off = vn_off + len(vn)
    vd = bytearray()
    for i, v in enumerate(verdef):
        nxt = 28 if i < len(verdef) - 1 else 0
        vd += struct.pack("<HHHHIII", 1, 1 if i == 0 else 0, i + 1, 1, 0, 20, nxt) + struct.pack("<II", index[v], 0)
    sym_off = (vd_off + len(vd) + 7) // 8 * 8
    dynsym = bytearray(24)  # symbol 0: the null symbol
    for n, defined in symbols:
        dynsym += struct.pack("<IBBHQQ", index[n], 0x12, 0, 1 if defined else 0, BASE if defined else 0, 0)
    nbucket = max(1, len(symbols) // 2 + 1)
    buckets, chain = [0] * nbucket, [0] * (len(symbols) + 1)
    for i, (n, _) in enumerate(symbols, 1):
        b = _sysv_hash(n.encode()) % nbucket
        chain[i], buckets[b] = buckets[b], i
    hash_off = sym_off + len(dynsym)
    hashtab = struct.pack(f"<{2 + nbucket + len(chain)}I", nbucket, len(chain), *buckets, *chain)
    versym_off = hash_off + len(hashtab)
    versym = struct.pack(f"<{len(chain)}H", 0, *([1] * len(symbols)))
    tags = [(DT["STRTAB"], BASE + str_off), (DT["STRSZ"], len(strtab))] + tags
    if symbols:
        tags += [(DT["SYMTAB"], BASE + sym_off), (DT["SYMENT"], 24), (DT["HASH"], BASE + hash_off),
                 (DT["VERSYM"], BASE + versym_off)]
    if names:
        tags += [(DT["VERNEED"], BASE + vn_off), (DT["VERNEEDNUM"], len(names))]
    if verdef:
        tags += [(DT["VERDEF"], BASE + vd_off), (DT["VERDEFNUM"], len(verdef))]
    tags.append((0, 0))
    dyn = b"".join(struct.pack("<qQ", t, v) for t, v in tags)
    tail = b""
    if symbols:
        tail = b"\0" * (sym_off - vd_off - len(vd)) + bytes(dynsym) + hashtab + versym
    size = vd_off + len(vd) + len(tail)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8
    head = struct.pack("<HHIQQQIHHHHHH", 3, MACHINE[machine], 1, 0, 64, 0, 0, 64, 56, 2, 0, 0, 0)
    load = struct.pack("<IIQQQQQQ", 1, 5, 0, BASE, BASE, size, size, 0x1000)
    dynamic = struct.pack("<IIQQQQQQ", 2, 6, dyn_off, BASE + dyn_off, 0, len(dyn), len(dyn), 8)
    return ident + head + load + dynamic + dyn + bytes(strtab) + bytes(vn) + bytes(vd) + tail


def _sysv_hash(name: bytes) -> int:
    h = 0
    for c in name:
        h = ((h << 4) + c) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h


def write_elf(path: Path, **kwargs) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(elf_bytes(**kwargs))
    return path


def dist_info(site: Path, name: str, version: str, files: Iterable[str]) -> Path:
    """A wheel's .dist-info with a RECORD listing ``files`` (paths relative to site-packages)."""
    d = site / f"{name.replace('-', '_')}-{version}.dist-info"
    d.mkdir(parents=True, exist_ok=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (d / "INSTALLER").write_text("pip\n")
    (d / "RECORD").write_text("".join(f"{f},sha256=x,1\n" for f in files) + f"{d.name}/RECORD,,\n")
    return d


# -- sysroot trees of CUDA consumers (tests/e2e/test_consumer_trees.py; the DLAMI tree is shared with
# tests/checks/test_why.py and tests/reports/test_report_view.py) ---------------------------------------------------

SITE = "lib/python3.11/site-packages"
# what nvidia-*-cu12 wheels install: (distribution, version, directory, sonames)
CU12_WHEELS = [
    ("nvidia-cuda-runtime-cu12", "12.4.127", "cuda_runtime", ["libcudart.so.12"]),
    ("nvidia-cublas-cu12", "12.4.5.8", "cublas", ["libcublas.so.12", "libcublasLt.so.12"]),
    ("nvidia-cudnn-cu12", "9.1.0.70", "cudnn", ["libcudnn.so.9"]),
    ("nvidia-nccl-cu12", "2.21.5", "nccl", ["libnccl.so.2"]),
    ("nvidia-cufft-cu12", "11.2.1.3", "cufft", ["libcufft.so.11"]),
    ("nvidia-cusparse-cu12", "12.3.1.170", "cusparse", ["libcusparse.so.12"]),
    ("nvidia-cusolver-cu12", "11.6.1.9", "cusolver", ["libcusolver.so.11"]),
    ("nvidia-nvjitlink-cu12", "12.4.127", "nvjitlink", ["libnvJitLink.so.12"]),
]


def tree(root: Path, env_vars: Dict[str, str], machine: str = "x86_64") -> Path:
    (root / "etc").mkdir(parents=True, exist_ok=True)
    (root / "etc/os-release").write_text('ID=ubuntu\nVERSION_ID="22.04"\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\n')
    (root / "proc/self").mkdir(parents=True, exist_ok=True)
    (root / "proc/self/environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env_vars.items()))
    libdir = "x86_64-linux-gnu" if machine == "x86_64" else "aarch64-linux-gnu"
    for name in ("libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1"):
        write_elf(root / "lib" / libdir / name, soname=name, machine=machine)
    return root


def conda_env(root: Path, name: str = "pytorch", machine: str = "x86_64") -> Path:
    prefix = root / "opt/conda/envs" / name
    (prefix / "conda-meta").mkdir(parents=True, exist_ok=True)
    (prefix / "conda-meta/python-3.11.9-h955ad1f_0.json").write_text("{}")
    write_elf(prefix / "bin/python3.11", needed=["libc.so.6"], machine=machine)
    (prefix / "bin/python").symlink_to("python3.11")
    (root / "opt/conda/conda-meta").mkdir(parents=True, exist_ok=True)
    return prefix / SITE


def wheels(site: Path, wheels=CU12_WHEELS, machine: str = "x86_64") -> None:
    for dist, version, directory, sonames in wheels:
        files = []
        for soname in sonames:
            write_elf(site / "nvidia" / directory / "lib" / soname, soname=soname, needed=["libc.so.6"], machine=machine)
            files.append(f"nvidia/{directory}/lib/{soname}")
        dist_info(site, dist, version, files)


def torch_wheel(site: Path, machine: str = "x86_64", verneed: Optional[dict] = None) -> None:
    runpath = [f"$ORIGIN/../../nvidia/{d}/lib" for d in ("cuda_runtime", "cublas", "cudnn", "nccl")]
    write_elf(site / "torch/lib/libtorch_cuda.so", soname="libtorch_cuda.so", runpath=runpath, machine=machine,
              needed=["libcudart.so.12", "libcublas.so.12", "libcudnn.so.9", "libnccl.so.2", "libstdc++.so.6",
                      "libc.so.6"], verneed=verneed)
    write_elf(site / "torch/_C.cpython-311-x86_64-linux-gnu.so", needed=["libtorch_cuda.so", "libc.so.6"],
              runpath=["$ORIGIN/lib"], machine=machine)
    (site / "torch/version.py").write_text("__version__ = '2.5.1+cu124'\ncuda: Optional[str] = '12.4'\n")
    dist_info(site, "torch", "2.5.1+cu124", ["torch/lib/libtorch_cuda.so", "torch/_C.cpython-311-x86_64-linux-gnu.so",
                                             "torch/version.py"])


def dlami(tmp_path: Path, cudnn_file: str) -> Path:
    root = tree(tmp_path / "dlami", {"PATH": "/opt/conda/envs/pytorch/bin:/usr/bin",
                                      "CONDA_PREFIX": "/opt/conda/envs/pytorch",
                                      "LD_LIBRARY_PATH": "/usr/local/cuda/lib64:/usr/local/lib"})
    site = conda_env(root)
    wheels(site)
    torch_wheel(site)
    lib64 = root / "usr/local/cuda-12.4/lib64"
    write_elf(lib64 / cudnn_file, soname="libcudnn.so.9", needed=["libc.so.6"])
    (lib64 / "libcudnn.so.9").symlink_to(cudnn_file)
    write_elf(lib64 / "libcudart.so.12.4.131", soname="libcudart.so.12", needed=["libc.so.6"])
    (lib64 / "libcudart.so.12").symlink_to("libcudart.so.12.4.131")
    (root / "usr/local/cuda").symlink_to("cuda-12.4")
    return root
