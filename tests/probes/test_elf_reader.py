"""The struct ELF reader (dl_doctor.readers.elf) against pyelftools, the reference, on real files: every shared library of
the torch test environments (where they exist) and of /usr/lib, and crafted 32-bit / big-endian / broken ones."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from dl_doctor.readers import elf
from dl_doctor.host import Host

elftools = pytest.importorskip("elftools")
from elftools.elf.dynamic import DynamicSegment  # noqa: E402
from elftools.elf.elffile import ELFFile  # noqa: E402

ENVS = Path(os.environ.get("DL_DOCTOR_TEST_ENVS", Path.home() / ".cache" / "dl-doctor-test-envs"))


def reference(path: Path):
    with open(path, "rb") as fh:
        if fh.read(4) != b"\x7fELF":
            return None
        fh.seek(0)
        f = ELFFile(fh)
        out = {"soname": None, "needed": [], "rpath": [], "runpath": [], "machine": f["e_machine"], "verneed": {},
               "verdef": []}
        from elftools.elf.gnuversions import GNUVerDefSection, GNUVerNeedSection
        for section in f.iter_sections():
            if isinstance(section, GNUVerNeedSection):
                for verneed, auxes in section.iter_versions():
                    out["verneed"].setdefault(verneed.name, []).extend(
                        a.name for a in auxes if not a.entry["vna_flags"] & 0x2)
            elif isinstance(section, GNUVerDefSection):
                for _verdef, auxes in section.iter_versions():
                    first = next(iter(auxes), None)
                    if first is not None:
                        out["verdef"].append(first.name)
        for seg in f.iter_segments():
            if isinstance(seg, DynamicSegment):
                for tag in seg.iter_tags():
                    kind = tag.entry.d_tag
                    if kind == "DT_NEEDED":
                        out["needed"].append(tag.needed)
                    elif kind == "DT_SONAME":
                        out["soname"] = tag.soname
                    elif kind == "DT_RPATH":
                        out["rpath"] += [p for p in tag.rpath.split(":") if p]
                    elif kind == "DT_RUNPATH":
                        out["runpath"] += [p for p in tag.runpath.split(":") if p]
                break
        return out


def _libraries(limit: int = 400):
    found = []
    roots = [ENVS, Path("/usr/lib"), Path("/usr/lib64"), Path("/usr/local/cuda/lib64")]
    for root in roots:
        if not root.is_dir():
            continue
        for dirpath, _, files in os.walk(root):
            for name in sorted(files):
                if ".so" in name and not os.path.islink(os.path.join(dirpath, name)):
                    found.append(Path(dirpath) / name)
            if len(found) >= limit:
                return found
    return found


LIBS = _libraries()


def test_there_are_real_libraries_to_compare():
    assert len(LIBS) >= 20


@pytest.mark.parametrize("path", LIBS, ids=lambda p: str(p)[-60:])
def test_same_answer_as_pyelftools(path):
    try:
        want = reference(path)
    except Exception:  # noqa: BLE001 - pyelftools cannot read it either: ours must not crash
        want = "unreadable"
    got = elf.read_dynamic(Host(), str(path))
    if want == "unreadable":
        return
    assert got == want


def _elf(wide: bool, order: str, needed=("libc.so.6",), soname="libx.so.1", runpath="$ORIGIN:/opt/lib") -> bytes:
    strtab = b"\0"
    index = {}
    for s in (*needed, soname, runpath):
        index[s] = len(strtab)
        strtab += s.encode() + b"\0"
    eh, ph = (64, 56) if wide else (52, 32)
    dyn_fmt = order + ("qQ" if wide else "iI")
    entries = [(5, 0), (10, len(strtab))] + [(1, index[n]) for n in needed] + [(14, index[soname]), (29, index[runpath]), (0, 0)]
    dyn_off = eh + 2 * ph
    str_off = dyn_off + struct.calcsize(dyn_fmt) * len(entries)
    entries[0] = (5, 0x1000 + str_off)  # DT_STRTAB is a virtual address: the PT_LOAD maps it
    dyn = b"".join(struct.pack(dyn_fmt, t, v) for t, v in entries)
    size = str_off + len(strtab)
    ident = b"\x7fELF" + bytes([2 if wide else 1, 1 if order == "<" else 2, 1, 0]) + b"\0" * 8
    if wide:
        head = struct.pack(order + "HHIQQQIHHHHHH", 3, 62, 1, 0, eh, 0, 0, eh, ph, 2, 0, 0, 0)
        load = struct.pack(order + "IIQQQQQQ", 1, 5, 0, 0x1000, 0x1000, size, size, 0x1000)
        dynamic = struct.pack(order + "IIQQQQQQ", 2, 6, dyn_off, 0x1000 + dyn_off, 0, len(dyn), len(dyn), 8)
    else:
        head = struct.pack(order + "HHIIIIIHHHHHH", 3, 20, 1, 0, eh, 0, 0, eh, ph, 2, 0, 0, 0)
        load = struct.pack(order + "IIIIIIII", 1, 0, 0x1000, 0x1000, size, size, 5, 0x1000)
        dynamic = struct.pack(order + "IIIIIIII", 2, dyn_off, 0x1000 + dyn_off, 0, len(dyn), len(dyn), 6, 4)
    return ident + head + load + dynamic + dyn + strtab


@pytest.mark.parametrize("wide,order", [(True, "<"), (True, ">"), (False, "<"), (False, ">")])
def test_crafted_layouts_match_pyelftools(tmp_path, wide, order):
    path = tmp_path / "lib.so"
    path.write_bytes(_elf(wide, order, needed=("libc.so.6", "libm.so.6")))
    got = elf.read_dynamic(Host(), str(path))
    assert got == reference(path)
    assert got["needed"] == ["libc.so.6", "libm.so.6"] and got["soname"] == "libx.so.1"
    assert got["runpath"] == ["$ORIGIN", "/opt/lib"]


def test_broken_files_are_not_elves_we_can_read(tmp_path):
    good = _elf(True, "<")
    for name, data in (("short", good[:30]), ("header-only", good[:64]), ("garbage-ph", good[:64] + b"\xff" * 200),
                       ("not-elf", b"MZ" + good[2:])):
        (tmp_path / name).write_bytes(data)
        got = elf.read_dynamic(Host(), str(tmp_path / name))
        assert got is None or got["needed"] == [], name


def test_the_tree_kit_writes_what_pyelftools_reads(tmp_path):
    """tests/elfkit.py (the sysroot trees' ELF files) against the reference. The kit writes no section headers (the
    loader needs none), so pyelftools cannot see its version sections; those are compared with what was written."""
    from elfkit import write_elf

    path = write_elf(tmp_path / "libx.so.1", soname="libx.so.1", needed=["libstdc++.so.6", "libcudart.so.12"],
                     runpath=["$ORIGIN/../nvidia/cudnn/lib"], machine="aarch64",
                     verneed={"libstdc++.so.6": ["GLIBCXX_3.4.30", "CXXABI_1.3.9"], "libcudart.so.12": ["libcudart.so.12"]},
                     verdef=["libx.so.1", "LIBX_1.0"])
    got = elf.read_dynamic(Host(), str(path))
    want = reference(path)
    assert {k: v for k, v in got.items() if not k.startswith("ver")} == {k: v for k, v in want.items()
                                                                        if not k.startswith("ver")}
    assert got["machine"] == "EM_AARCH64" and got["verdef"] == ["libx.so.1", "LIBX_1.0"]
    assert got["verneed"] == {"libstdc++.so.6": ["GLIBCXX_3.4.30", "CXXABI_1.3.9"], "libcudart.so.12": ["libcudart.so.12"]}


# -- the dynamic symbol table (.dynsym through DT_SYMTAB and DT_HASH / DT_GNU_HASH, as ld.so reads it) -----------------

def reference_symbols(path: Path):
    with open(path, "rb") as fh:
        if fh.read(4) != b"\x7fELF":
            return None
        fh.seek(0)
        f = ELFFile(fh)
        for seg in f.iter_segments():
            if isinstance(seg, DynamicSegment):
                tags = {t.entry.d_tag for t in seg.iter_tags()}
                if "DT_SYMTAB" not in tags or not ({"DT_HASH", "DT_GNU_HASH"} & tags):
                    return None
                return [(s.name, s["st_shndx"] != "SHN_UNDEF") for s in seg.iter_symbols()]
        return None


@pytest.mark.parametrize("path", LIBS[:120], ids=lambda p: str(p)[-60:])
def test_symbols_same_as_pyelftools(path):
    try:
        want = reference_symbols(path)
    except Exception:  # noqa: BLE001 - pyelftools cannot read it either
        return
    got = elf.symbol_table(Host(), str(path))
    if want is None:
        return
    assert got == want
    defined = [n for n, d in want if d and n][:300]
    imported = sorted({n for n, d in want if not d and n} - {n for n, d in want if d})[:50]
    answer = elf.exported(Host(), str(path), defined + imported)
    # every exported name is found through the hash table (GNU or SysV), no imported one is
    assert all(answer[n] for n in defined)
    assert not any(answer[n] for n in imported)


def test_the_tree_kit_writes_symbols_pyelftools_reads(tmp_path):
    from elfkit import write_elf

    path = write_elf(tmp_path / "libx.so", soname="libx.so", needed=["libc10.so"],
                     exports=["_ZN3c104cuda9SetDeviceEi", "_ZN2at4_ops5zeros4callEv"],
                     imports=["_ZN3c105ErrorC2ENS_14SourceLocationESs", "PyObject_Repr"])
    want = reference_symbols(path)
    assert elf.symbol_table(Host(), str(path)) == want
    assert elf.undefined_symbols(Host(), str(path)) == {
        "names": ["_ZN3c105ErrorC2ENS_14SourceLocationESs", "PyObject_Repr"], "truncated": False}
    assert elf.exported(Host(), str(path), ["_ZN3c104cuda9SetDeviceEi", "_ZN2at4_ops5zeros4callEv", "PyObject_Repr",
                                            "absent"]) == {"_ZN3c104cuda9SetDeviceEi": True,
                                                           "_ZN2at4_ops5zeros4callEv": True,
                                                           "PyObject_Repr": False, "absent": False}
    # without a symbol table the answer is unknown, not 'exports nothing'
    bare = write_elf(tmp_path / "libbare.so", soname="libbare.so")
    assert elf.exported(Host(), str(bare), ["x"]) is None and elf.undefined_symbols(Host(), str(bare)) is None


def test_hostile_symbol_tables_cost_only_their_own_answer(tmp_path):
    from elfkit import elf_bytes

    good = elf_bytes(soname="libx.so", exports=["a", "b"], imports=["c"])
    for n, cut in enumerate((200, 300, len(good) - 10, len(good) - 30)):
        path = tmp_path / f"cut{n}.so"
        path.write_bytes(good[:cut])
        elf.undefined_symbols(Host(), str(path))
        elf.exported(Host(), str(path), ["a"])
    # a hash table whose chain loops on itself ends at the bound
    data = bytearray(good)
    path = tmp_path / "loop.so"
    path.write_bytes(bytes(data).replace(b"\x02\x00\x00\x00\x04\x00\x00\x00", b"\x02\x00\x00\x00\x04\x00\x00\x00", 1))
    assert elf.exported(Host(), str(path), ["zz"]) in ({"zz": False}, None)
