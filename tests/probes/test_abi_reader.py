"""dl_doctor.readers.abi: framework imports against the exports of what resolves, and the symbol versions of every
compiled object, on real ELF files written by tests/elfkit.py."""

from __future__ import annotations

from pathlib import Path

from elfkit import write_elf

from dl_doctor.facts.loading import Loader
from dl_doctor.host import Host
from dl_doctor.readers import abi
from dl_doctor.readers.ldso import HostView

OLD = "_ZN3c105ErrorC2ENS_14SourceLocationESs"
NEW = "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"


def test_names():
    assert abi.namespace("_ZN3c104cuda9SetDeviceEi") == "c10"
    assert abi.namespace("_ZNK2at10TensorBase8data_ptrIfEEPT_v") == "at"
    assert abi.namespace("_Z20cutlass_moe_mm_sm100RN2at6TensorE") is None  # vLLM's own kernel, not torch's
    assert abi.namespace("_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEC1Ev") is None
    assert abi.demangle("_ZN3c104cuda9SetDeviceEi") == "c10::cuda::SetDevice"
    assert abi.demangle(OLD) == "c10::Error::Error"
    assert abi.demangle("_ZNK5torch8autograd4Node4nameB5cxx11Ev") == "torch::autograd::Node::name"
    assert abi.other_abi(OLD) == NEW and abi.other_abi(NEW) == OLD
    assert abi.other_abi("_ZNK5torch8autograd4Node4nameB5cxx11Ev") == "_ZNK5torch8autograd4Node4nameEv"
    assert abi.other_abi("_ZN3c104cuda9SetDeviceEi") is None


def _tree(tmp_path: Path, torch_exports, ext_imports, torch_table: bool = True) -> Path:
    lib = tmp_path / "site/torch/lib"
    write_elf(lib / "libc10.so", soname="libc10.so", exports=torch_exports if torch_table else ())
    write_elf(tmp_path / "site/ext.so", needed=["libc10.so"], runpath=["$ORIGIN/torch/lib"], imports=ext_imports)
    return tmp_path / "site"


def _judge(site: Path):
    host = Host()
    loader = Loader(HostView(host))
    loader.load(str(site / "ext.so"))
    return abi.check_process(host, loader, [str(site / "ext.so")], str(site))


def test_a_missing_framework_import_is_named_with_its_other_abi(tmp_path):
    site = _tree(tmp_path, [NEW, "_ZN3c104cuda9SetDeviceEa"], [OLD, "_ZN3c104cuda9SetDeviceEi", "PyObject_Repr"])
    got = _judge(site)
    assert got["symbols"] == 2 and got["unresolved_count"] == 2  # PyObject_Repr is not torch's: not judged
    by = {u["symbol"]: u for u in got["unresolved"]}
    assert by[OLD]["other_abi"] == {"symbol": NEW, "exported_by": "libc10.so"} and not by[OLD]["cxx11"]
    assert by["_ZN3c104cuda9SetDeviceEi"]["other_abi"] is None


def test_every_import_exported_is_quiet(tmp_path):
    got = _judge(_tree(tmp_path, [OLD, "_ZN3c104cuda9SetDeviceEi"], [OLD, "_ZN3c104cuda9SetDeviceEi"]))
    assert got["unresolved"] == [] and got["objects"] == 1


def test_a_framework_library_without_a_symbol_table_is_unknown_not_broken(tmp_path):
    got = _judge(_tree(tmp_path, [], [OLD], torch_table=False))
    assert got["unresolved"] == [] and got["objects"] == 0 and "no readable symbol table" in got["unknown"][0]


def test_an_object_whose_library_is_missing_is_left_to_the_loading_checks(tmp_path):
    write_elf(tmp_path / "site/ext.so", needed=["libc10.so"], imports=[OLD])
    got = _judge(tmp_path / "site")
    assert got["unresolved"] == [] and "does not load" in got["unknown"][0]


def test_a_cxx_import_whose_other_abi_its_own_library_exports(tmp_path):
    """Transformer Engine's case: the extension (pre-cxx11, as torch) and its common library (cxx11)."""
    old = "_ZN18transformer_engine6getenvIiEET_RKSsRKS1_"
    new = old.replace("Ss", "NSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE")
    lib = tmp_path / "site"
    write_elf(lib / "torch/lib/libc10.so", soname="libc10.so", exports=[OLD])
    write_elf(lib / "libte.so", soname="libte.so", exports=[new])
    write_elf(lib / "ext.so", needed=["libte.so", "libc10.so"], runpath=["$ORIGIN", "$ORIGIN/torch/lib"],
              imports=[old, OLD, "_ZN9somewhere4elseERKSs"])
    got = _judge(lib)
    assert [u["symbol"] for u in got["unresolved"]] == [old]  # found nowhere in either spelling: left alone
    assert got["unresolved"][0]["other_abi"]["exported_by"] == "libte.so"


def test_compiled_versions_load_the_environment_as_one_process(tmp_path):
    root = tmp_path
    write_elf(root / "usr/lib/libstdc++.so.6", soname="libstdc++.so.6",
              verdef=["libstdc++.so.6", "GLIBCXX_3.4", "GLIBCXX_3.4.25"])
    site = root / "venv/site"
    write_elf(site / "pkg/_ext.so", needed=["libstdc++.so.6"], verneed={"libstdc++.so.6": ["GLIBCXX_3.4.29"]})
    write_elf(site / "plain/_c.so", needed=["libstdc++.so.6"])
    host = Host(sysroot=str(root))
    out = abi.compiled_versions(host, {
        "pkg": {"version": "1.0", "location": "/venv/site", "paths": ["/venv/site/pkg/_ext.so"]},
        "plain": {"version": "2.0", "location": "/venv/site", "paths": ["/venv/site/plain/_c.so"]}},
        {"ld_library_path": ["/usr/lib"]}, "EM_X86_64")
    assert out == [{"distribution": "pkg", "version": "1.0", "object": "pkg/_ext.so", "file": "libstdc++.so.6",
                    "needs": "GLIBCXX_3.4.29", "provider": "/usr/lib/libstdc++.so.6"}]
