"""Compiled torch extensions against the torch that loads (issue 27, the ABI family): reported 'undefined symbol:
_ZN3c10...' failures, each rebuilt as the DLAMI g5 machine with the reporter's torch and extension, their real
symbol tables (.dynsym with DT_HASH: what the extension imports, what torch's libraries export) and the healthy twin
(the extension rebuilt against the installed torch: it imports only what that torch exports)."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import healthy
from cases import Machine, case

SITE = "opt/conda/envs/pytorch/lib/python3.11/site-packages"
CXX11 = "NSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
PINS = {"2.4": healthy.TORCH_241_CU124, "2.5": healthy.TORCH_251_CU124, "2.6": healthy.TORCH_251_CU124,
        "2.7": healthy.TORCH_270_CU128, "2.8": healthy.TORCH_270_CU128}


def drop(spec, *prefixes: str) -> None:
    for path in [p for p in spec if p.startswith(prefixes)]:
        del spec[path]


def string_abi(name: str, cxx11: bool) -> str:
    """A symbol as the given _GLIBCXX_USE_CXX11_ABI spells std::string in it (the names below are written pre-cxx11)."""
    return name.replace("Ss", CXX11) if cxx11 else name


# What torch's libraries export that extensions import (real names, written with the pre-cxx11 std::string 'Ss'),
# per library; each torch exports these in its own string ABI.
COMMON = {
    "libc10.so": ["_ZN3c106detail14torchCheckFailEPKcS2_jRKSs", "_ZN3c105ErrorC2ENS_14SourceLocationESs",
                  "_ZN3c1019UndefinedTensorImpl10_singletonE", "_ZN3c1013MessageLoggerC1EPKcii",
                  "_ZNK3c1010TensorImpl36is_contiguous_nondefault_policy_implENS_12MemoryFormatE"],
    "libc10_cuda.so": ["_ZN3c104cuda20getCurrentCUDAStreamEa", "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_ib"],
    "libtorch_cpu.so": ["_ZN2at4_ops5empty4callEN3c108ArrayRefINS2_6SymIntEEENS2_8optionalINS2_10ScalarTypeEEENS6_INS2_"
                        "6LayoutEEENS6_INS2_6DeviceEEENS6_IbEENS6_INS2_12MemoryFormatEEE",
                        "_ZNK2at10TensorBase8data_ptrIfEEPT_v", "_ZN2at4_ops6select3callERKNS_6TensorEll"],
    "libtorch_python.so": ["_ZN5torch3jit17parseSchemaOrNameERKSsb", "_ZN5torch6detail19wrap_tensor_to_pythonEv"],
    "libtorch.so": ["_ZN5torch8autograd12VariableInfoC1Ev"],
    "libtorch_cuda.so": ["_ZN2at4cuda26getCurrentDevicePropertiesEv", "_ZN2at4cuda19getCurrentCUDABlasHandleEv"],
}
NEEDED = ["libc10.so", "libtorch.so", "libtorch_cpu.so", "libtorch_python.so", "libc10_cuda.so", "libtorch_cuda.so",
          "libcudart.so.12", "libstdc++.so.6", "libgcc_s.so.1", "libc.so.6"]


def torch_with_symbols(spec, site: str, version: str, cxx11: bool, extra: Optional[Dict[str, List[str]]] = None,
                       without: Sequence[str] = ()) -> None:
    """healthy.torch, its libraries carrying their exports (COMMON in this torch's string ABI, plus ``extra``, less
    ``without``)."""
    exports = {lib: [string_abi(n, cxx11) for n in names] for lib, names in COMMON.items()}
    for lib, names in (extra or {}).items():
        exports.setdefault(lib, []).extend(names)
    exports = {lib: [n for n in names if n not in without] for lib, names in exports.items()}
    plain = healthy.elf

    def elf(soname=None, needed=("libc.so.6",), machine="x86_64", **kw):
        if soname in exports:
            kw["exports"] = exports[soname]
        return plain(soname, needed=needed, machine=machine, **kw)

    mm = ".".join(version.split(".")[:2])
    cuda = "12.8" if mm in ("2.7", "2.8") else "12.4"
    healthy.elf = elf
    try:
        healthy.cu12_wheels(spec, site, PINS[mm])
        healthy.torch(spec, site, version, cuda, PINS[mm])
    finally:
        healthy.elf = plain


def extension(spec, site: str, dist: str, version: str, obj: str, imports: Sequence[str], requires: Sequence[str],
              package: Optional[str] = None, needed: Sequence[str] = NEEDED, runpath: Sequence[str] = (),
              tag: str = "cp311-cp311-linux_x86_64") -> None:
    module = package or dist.replace("-", "_")
    files = {f"{module}/__init__.py": f"__version__ = '{version}'\n",
             obj: healthy.elf(None, needed=list(needed), runpath=list(runpath), imports=list(imports),
                              exports=[f"PyInit_{obj.rsplit('/', 1)[-1].split('.')[0]}"],
                              verneed={"libstdc++.so.6": ["GLIBCXX_3.4.19", "CXXABI_1.3.9"]})}
    healthy.dist(spec, site, dist, version, files, requires=list(requires), tag=tag)


def machine(torch: str, torch_cxx11: bool, dist: str, version: str, obj: str, symbol: str, broken: bool,
            ext_cxx11: Optional[bool] = None, requires: Sequence[str] = ("torch",), exported_elsewhere: bool = False,
            package: Optional[str] = None, lib: str = "libc10.so") -> Machine:
    """The DLAMI g5 with torch ``torch`` and one extension. Broken: the extension imports ``symbol`` (the reporter's),
    which this torch does not export, and the common framework symbols in its own string ABI (``ext_cxx11``; the
    same as torch's unless the case is the ABI flag). Twin: the extension rebuilt against this torch."""
    mm = ".".join(torch.split(".")[:2])
    # a CUDA 12.8 torch on the DLAMI of CUDA 12.8 (its LD_LIBRARY_PATH names that toolkit), the others on the g5's
    spec = healthy.dlami_al2023_p6_b200() if mm in ("2.7", "2.8") else healthy.dlami_ubuntu2204_g5()
    drop(spec, *(f"{SITE}/{p}" for p in ("torch/", "torch-", "nvidia/", "nvidia_", "torchvision", "torchaudio",
                                         "flash_attn", "flash-attn", "xformers", "bitsandbytes")))
    ext_abi = torch_cxx11 if ext_cxx11 is None else ext_cxx11
    extra = {lib: [symbol]} if (exported_elsewhere and not broken) else None
    torch_with_symbols(spec, SITE, torch, torch_cxx11, extra=extra)
    common = [string_abi(n, ext_abi if broken else torch_cxx11) for names in COMMON.values() for n in names[:2]]
    imports = list(dict.fromkeys(common + ([symbol] if broken or exported_elsewhere else [])))
    extension(spec, SITE, dist, version, obj, imports, requires, package=package)
    return Machine(spec)


def register(case_id: str, **kw) -> None:
    case(case_id)(lambda broken, kw=kw: machine(broken=broken, **kw))


FA = "flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so"

# flash-attn: a prebuilt wheel for another torch, or of the other C++ string ABI
register("flash-attention-1644-pre-cxx11-wheel-under-torch-2.7", torch="2.7.0+cu128", torch_cxx11=True,
         dist="flash-attn", version="2.7.4.post1", obj=FA, symbol="_ZN3c105ErrorC2ENS_14SourceLocationESs",
         ext_cxx11=False, package="flash_attn")
