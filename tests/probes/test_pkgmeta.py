"""The packaging facts (dl_doctor.probes.python_envs.pkgmeta): RECORD rows, placeholders read as unknown, files two
owners list, compiled files against their RECORD (size by default, sha256 under --deep), conda-meta."""

from __future__ import annotations

import base64
import hashlib
import json

from dl_doctor.host import Host
from dl_doctor.probes.python_envs import pkgmeta

SITE = "/venv/lib/python3.12/site-packages"


def _line(rel: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{rel},sha256={digest},{len(data)}\n"


def _wheel(root, name, version, files, requires=(), write=True):
    site = root / SITE.lstrip("/")
    d = site / f"{name.replace('-', '_')}-{version}.dist-info"
    d.mkdir(parents=True, exist_ok=True)
    if write:
        for rel, data in files.items():
            (site / rel).parent.mkdir(parents=True, exist_ok=True)
            (site / rel).write_bytes(data)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                + "".join(f"Requires-Dist: {r}\n" for r in requires) + "\nRequires-Dist: not-a-header\n")
    (d / "INSTALLER").write_text("pip\n")
    (d / "WHEEL").write_text("Wheel-Version: 1.0\nTag: cp312-cp312-manylinux_2_17_x86_64\n")
    (d / "RECORD").write_text("".join(_line(r, b) for r, b in files.items()) + f"{d.name}/RECORD,,\n")


def _collect(root, deep=False):
    (root / "venv/bin").mkdir(parents=True, exist_ok=True)
    host = Host(sysroot=str(root))
    return pkgmeta.collect(host, {"prefix": "/venv", "kind": "venv"}, [SITE], "3.12", deep=deep)


def test_record_rows_and_placeholders():
    rows = pkgmeta.parse_record(
        "a.so,sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,12\n"  # the empty digest with a size: a placeholder
        "b.so,sha256=x,1\n"  # tests/elfkit.py's placeholder
        "c.so,,\n"
        + _line("d.so", b"abc") + '"e,f.py",sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0\n')
    assert rows[0] == ("a.so", None, None)
    assert rows[1] == ("b.so", None, None)
    assert rows[2] == ("c.so", None, None)
    # digests stay as RECORD writes them (urlsafe base64 without padding)
    assert rows[3] == ("d.so", _b64(b"abc"), 3)
    assert rows[4] == ("e,f.py", _b64(b""), 0)
    assert pkgmeta._same(_b64(b"abc"), hashlib.sha256(b"abc").hexdigest())  # against conda's hex
    assert not pkgmeta._same(_b64(b"abc"), hashlib.sha256(b"abd").hexdigest())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def test_metadata_header_only_and_egg_requires():
    reqs, name = pkgmeta.metadata_requires("Name: x\nRequires-Dist: a>=1\nRequires-Dist: b; extra == 'c'\n\nRequires-Dist: body")
    assert (reqs, name) == (["a>=1", "b; extra == 'c'"], "x")
    assert pkgmeta.egg_requires("a>=1\n[gpu]\nb\n[:python_version < '3.8']\nc\n") == [
        "a>=1", 'b; extra == "gpu"', "c; (python_version < '3.8')"]


def test_two_owners_sizes_and_namespace_files(tmp_path):
    cpu_so, gpu_so = b"\x7fELF cpu build", b"\x7fELF gpu build, larger"
    _wheel(tmp_path, "onnxruntime-gpu", "1.23.2", {"onnxruntime/__init__.py": b"x = 1\n", "onnxruntime/capi/s.so": gpu_so,
                                                   "nvidia/__init__.py": b""}, write=False)
    _wheel(tmp_path, "onnxruntime", "1.23.2", {"onnxruntime/__init__.py": b"x = 1\n", "onnxruntime/capi/s.so": cpu_so},
           requires=["numpy>=1.21.6"])
    _wheel(tmp_path, "nvidia-cublas-cu12", "12.4.5.8", {"nvidia/__init__.py": b""})
    (tmp_path / SITE.lstrip("/") / "nvidia/__init__.py").write_bytes(b"")
    pk = _collect(tmp_path)
    assert pk["platform_machine"] == "x86_64"
    assert pk["distributions"]["onnxruntime"]["requires"] == ["numpy>=1.21.6"]  # the header block only
    pair = next(s for s in pk["shared_files"] if set(s["owners"]) == {"onnxruntime", "onnxruntime-gpu"})
    assert (pair["files"], pair["differing"], pair["identical"], pair["compiled_differing"]) == (2, 1, 1, 1)
    assert pair["mixed_dirs"] == [f"{SITE}/onnxruntime/capi"]
    ns = next(s for s in pk["shared_files"] if "nvidia-cublas-cu12" in s["owners"])
    assert (ns["identical"], ns["differing"], ns["unknown"]) == (1, 0, 0)
    # the GPU wheel's RECORD says another size than the CPU build on disk
    assert pk["modified"] == [{"distribution": "onnxruntime-gpu", "path": f"{SITE}/onnxruntime/capi/s.so",
                               "recorded_size": len(gpu_so), "size": len(cpu_so), "missing": False}]


def test_deep_compares_sha256_of_same_size_files(tmp_path):
    _wheel(tmp_path, "torch", "2.5.1", {"torch/lib/libc10.so": b"AAAA"})
    (tmp_path / SITE.lstrip("/") / "torch/lib/libc10.so").write_bytes(b"BBBB")
    assert _collect(tmp_path)["modified"] == []  # the default run only stats
    deep = _collect(tmp_path, deep=True)
    assert deep["modified"][0]["sha256"] == "differs" and deep["integrity"]["hashed"] == 1


def test_missing_file_and_placeholders_are_unknown(tmp_path):
    _wheel(tmp_path, "a", "1.0", {"a/x.so": b"123"})
    (tmp_path / SITE.lstrip("/") / "a/x.so").unlink()
    d = tmp_path / SITE.lstrip("/") / "b-1.0.dist-info"
    d.mkdir(parents=True)
    (d / "RECORD").write_text("b/y.so,sha256=x,1\n")
    (d / "INSTALLER").write_text("pip\n")
    pk = _collect(tmp_path)
    assert pk["modified"] == [{"distribution": "a", "path": f"{SITE}/a/x.so", "recorded_size": 3, "size": None,
                               "missing": True}]
    assert pk["integrity"]["unknown"] == 1


def test_only_what_an_installer_wrote_is_held_to_its_record(tmp_path):
    """Debian's dist-packages keep upstream's RECORD (no INSTALLER) for files the package build stripped."""
    _wheel(tmp_path, "cryptography", "38.0.4", {"cryptography/_rust.abi3.so": b"unstripped build"})
    site = tmp_path / SITE.lstrip("/")
    (site / "cryptography/_rust.abi3.so").write_bytes(b"stripped")
    (site / "cryptography-38.0.4.dist-info/INSTALLER").unlink()
    assert _collect(tmp_path)["modified"] == []
    (site / "cryptography-38.0.4.dist-info/INSTALLER").write_text("debian\n")
    assert _collect(tmp_path)["modified"] == []


def test_conda_meta_and_pip_over_conda(tmp_path):
    meta = tmp_path / "venv/conda-meta"
    meta.mkdir(parents=True)
    rel = "lib/python3.12/site-packages/cytoolz/itertoolz.so"
    meta.joinpath("cytoolz-0.8.2-py_0.json").write_text(json.dumps({
        "name": "cytoolz", "version": "0.8.2", "build": "py_0", "depends": ["python >=3.12", "toolz >=0.8.0"],
        "constrains": [], "files": [rel], "paths_data": {"paths": [{"_path": rel, "sha256": "0" * 64,
                                                                     "size_in_bytes": 5}]}}))
    meta.joinpath("broken-1-0.json").write_text("{not json")
    _wheel(tmp_path, "cytoolz", "0.12.3", {"cytoolz/itertoolz.so": b"new build"})
    pk = _collect(tmp_path)
    assert pk["conda"]["cytoolz"]["depends"] == ["python >=3.12", "toolz >=0.8.0"]
    assert "_paths" not in pk["conda"]["cytoolz"]
    pair = pk["shared_files"][0]
    assert pair["kinds"] == ["conda", "pip"] and pair["differing"] == 1 and pair["compiled_differing"] == 1


def test_a_line_csv_refuses_costs_only_the_rows_after_it():
    rows = pkgmeta.parse_record(_line("a.so", b"1") + "b" * 200000 + ",x,1\n" + _line("c.so", b"2") + "d\0,e\n")
    assert rows[0][0] == "a.so"
