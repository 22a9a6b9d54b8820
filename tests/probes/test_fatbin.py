"""The GPU code an ELF object carries (its .nv_fatbin), read by walking the fat binary headers, bounded."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

from dl_doctor.host import Host
from dl_doctor.readers.elf import read_dynamic, read_fatbin

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from elfkit import elf_bytes, fatbin  # noqa: E402

sys.path.pop(0)


def _tree(tmp_path, **files):
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    return Host(sysroot=str(tmp_path))


def test_sass_and_ptx_of_every_container(tmp_path):
    host = _tree(tmp_path, a=elf_bytes("liba.so", ["libcudart.so.12"],
                                       fatbin=fatbin(["sm_80", "sm_90", "compute_90"], ["sm_70"])))
    assert read_fatbin(host, "/a") == {"sass": [70, 80, 90], "ptx": [90], "complete": True, "section": True}
    assert read_dynamic(host, "/a")["needed"] == ["libcudart.so.12"]  # the loader's view is unchanged


def test_an_object_without_device_code_says_so(tmp_path):
    host = _tree(tmp_path, b=elf_bytes("libb.so"), c=b"not an elf")
    assert read_fatbin(host, "/b")["section"] is False
    assert read_fatbin(host, "/c") is None


def test_a_malformed_fatbin_is_a_lower_bound_not_a_crash(tmp_path):
    good = fatbin(["sm_80"])
    broken = good + struct.pack("<IHHQ", 0x12345678, 1, 16, 1 << 40)  # a container of another magic
    huge = fatbin(["sm_86"])[:16] + struct.pack("<HHIQ", 2, 0x0101, 0, 0) + b"\0" * 24  # header size 0
    host = _tree(tmp_path, d=elf_bytes("libd.so", fatbin=broken), e=elf_bytes("libe.so", fatbin=huge))
    assert read_fatbin(host, "/d") == {"sass": [80], "ptx": [], "complete": False, "section": True}
    assert read_fatbin(host, "/e")["complete"] is False


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "fatbin"


def test_the_sections_nvcc_writes(tmp_path):
    """.nv_fatbin sections cut from objects CUDA 13.0's nvcc built (nvcc -shared a.cu b.cu -gencode ...): plain, and
    compressed (-Xfatbin -compress-all). An arch-specific cubin (sm_90a) reads as its architecture."""
    plain = (FIXTURES / "nvcc13-sm80-sm90a-compute90-sm120.bin").read_bytes()
    packed = (FIXTURES / "nvcc13-compressed-sm75-sm86-compute86.bin").read_bytes()
    host = _tree(tmp_path, p=elf_bytes("libp.so", fatbin=plain), q=elf_bytes("libq.so", fatbin=packed))
    assert read_fatbin(host, "/p") == {"sass": [80, 90, 120], "ptx": [90], "complete": True, "section": True}
    assert read_fatbin(host, "/q") == {"sass": [75, 86], "ptx": [86], "complete": True, "section": True}
