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
PINS = {"2.1": healthy.TORCH_241_CU124, "2.2": healthy.TORCH_241_CU124, "2.3": healthy.TORCH_241_CU124, "2.4": healthy.TORCH_241_CU124,
        "2.5": healthy.TORCH_251_CU124, "2.6": healthy.TORCH_251_CU124, "2.7": healthy.TORCH_270_CU128,
        "2.8": healthy.TORCH_270_CU128}


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
    if "+cu" in version:
        tag = version.split("+cu", 1)[1][:3]
        cuda = f"{tag[:2]}.{tag[2:]}"
    healthy.elf = elf
    try:
        healthy.cu12_wheels(spec, site, PINS[mm])
        healthy.torch(spec, site, version, cuda, PINS[mm])
    finally:
        healthy.elf = plain


def extension(spec, site: str, dist: str, version: str, obj: str, imports: Sequence[str], requires: Sequence[str],
              package: Optional[str] = None, needed: Sequence[str] = NEEDED, runpath: Sequence[str] = (),
              tag: str = "cp311-cp311-linux_x86_64") -> None:
    """A distribution holding one compiled object that imports ``imports``."""
    module = package or dist.replace("-", "_").lower()
    files = {f"{module}/__init__.py": f"__version__ = '{version}'\n",
             obj: healthy.elf(None, needed=list(needed), runpath=list(runpath), imports=list(imports),
                              exports=[f"PyInit_{obj.rsplit('/', 1)[-1].split('.')[0]}"],
                              verneed={"libstdc++.so.6": ["GLIBCXX_3.4.19", "CXXABI_1.3.9"]})}
    healthy.dist(spec, site, dist, version, files, requires=list(requires), tag=tag)


def machine(torch: str, torch_cxx11: bool, dist: str, version: str, obj: str, symbol: str, broken: bool,
            ext_cxx11: Optional[bool] = None, requires: Sequence[str] = ("torch",), exported_elsewhere: bool = False,
            package: Optional[str] = None, lib: str = "libc10.so", twin_version: Optional[str] = None,
            companion: Optional[str] = None, companion_needed: Sequence[str] = (),
            obj_needed: Sequence[str] = NEEDED, twin_requires: Optional[Sequence[str]] = None,
            tag_obj: str = "linux_x86_64") -> Machine:
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
    def common_of(needed: Sequence[str], cxx11: bool) -> List[str]:  # what an object imports from what it links
        return [string_abi(n, cxx11) for lib, names in COMMON.items() if lib in needed for n in names[:2]]

    common = common_of(obj_needed, ext_abi if broken else torch_cxx11)
    imports = list(dict.fromkeys(([symbol] if broken or exported_elsewhere else []) + common))
    extension(spec, SITE, dist, version if broken or not twin_version else twin_version, obj, imports,
              requires if broken or twin_requires is None else twin_requires, package=package, needed=obj_needed,
              tag=f"cp311-cp311-{tag_obj}")
    if companion:  # another object of the same distribution (torch-scatter's _scatter_cuda.so beside _version_cuda.so)
        key = next(k for k in spec if k.endswith("/RECORD") and f"/{dist.replace('-', '_')}-" in k)
        spec[f"{SITE}/{companion}"] = healthy.elf(None, needed=list(companion_needed or NEEDED),
                                                  imports=common_of(companion_needed or NEEDED, ext_abi if broken else torch_cxx11))
        spec[key] = f"{companion},sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,1\n" + spec[key]
    return Machine(spec)


def register(case_id: str, **kw) -> None:
    case(case_id)(lambda broken, kw=kw: machine(broken=broken, **kw))


FA = "flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so"

# flash-attn: a prebuilt wheel for another torch, or of the other C++ string ABI
register("flash-attention-1644-pre-cxx11-wheel-under-torch-2.7", torch="2.7.0+cu128", torch_cxx11=True,
         dist="flash-attn", version="2.7.4.post1", obj=FA, symbol="_ZN3c105ErrorC2ENS_14SourceLocationESs",
         ext_cxx11=False, package="flash_attn")

# flash-attn of the other C++ string ABI (the cxx11abiTRUE build) under torch's pre-cxx11 pip wheels
register("flash-attention-940-cxx11-build-under-torch-2.3", torch="2.3.0+cu121", torch_cxx11=False,
         dist="flash-attn", version="2.5.7", obj=FA, ext_cxx11=True, package="flash_attn",
         symbol=f"_ZN3c105ErrorC2ENS_14SourceLocationE{CXX11}")
register("flash-attention-1832-cxx11-build-under-torch-2.6", torch="2.6.0+cu124", torch_cxx11=False,
         dist="flash-attn", version="2.6.3", obj=FA, ext_cxx11=True, package="flash_attn",
         symbol=f"_ZN3c105ErrorC2ENS_14SourceLocationE{CXX11}")
# the cxx11abiFALSE wheel of flash-attn 2.8.2 that imports cxx11 names all the same
register("flash-attention-1783-abifalse-wheel-imports-cxx11", torch="2.6.0+cu124", torch_cxx11=False,
         dist="flash-attn", version="2.8.2", obj=FA, ext_cxx11=True, package="flash_attn",
         symbol=f"_ZN3c105ErrorC2ENS_14SourceLocationE{CXX11}")

# sgl-kernel: built against a pre-cxx11 torch, run under a cxx11 one; built for torch 2.7.1 (cxx11) under an older
# pre-cxx11 one; built for torch 2.7 (c10::cuda::SetDevice(signed char)) under torch 2.8
SGL = "sgl_kernel/common_ops.abi3.so"
register("sglang-5100-sgl-kernel-pre-cxx11-under-cxx11-torch", torch="2.7.0+cu128", torch_cxx11=True,
         dist="sgl-kernel", version="0.0.8", obj=SGL, ext_cxx11=False, symbol="_ZN5torch3jit17parseSchemaOrNameERKSsb")
register("deepresearch-83-sgl-kernel-0.2.5-cxx11-under-older-torch", torch="2.5.1+cu124", torch_cxx11=False,
         dist="sgl-kernel", version="0.2.5", obj=SGL, ext_cxx11=True,
         symbol=f"_ZN3c108ListType3getERK{CXX11}NS_4Type24SingletonOrSharedTypePtrIS9_EE")
register("rllm-8-sgl-kernel-setdevice-under-torch-2.8", torch="2.8.0+cu128", torch_cxx11=True,
         dist="sgl-kernel", version="0.3.9.post2", obj=SGL, symbol="_ZN3c104cuda9SetDeviceEa", lib="libc10_cuda.so")

# vLLM's wheel built against torch 2.5.1 (pre-cxx11) under a cxx11 torch (an RTX 50 machine's cu128 torch)
register("vllm-13608-c-abi3-pre-cxx11-under-cxx11-torch", torch="2.7.0+cu128", torch_cxx11=True,
         dist="vllm", version="0.7.3", obj="vllm/_C.abi3.so", ext_cxx11=False,
         symbol="_ZN5torch3jit17parseSchemaOrNameERKSsb", requires=("torch==2.5.1",), twin_version="0.9.0",
         twin_requires=("torch==2.7.0",))

# apex built for torch < 2.4 (c10::optional in at::_ops signatures) under a torch whose ops take std::optional
register("ai-toolkit-242-apex-for-older-torch", torch="2.5.1+cu124", torch_cxx11=False, dist="apex", version="0.1",
         obj="fused_layer_norm_cuda.cpython-311-x86_64-linux-gnu.so", package="apex", lib="libtorch_cpu.so",
         symbol="_ZN2at4_ops19empty_memory_format4callEN3c108ArrayRefINS2_6SymIntEEENS2_8optionalINS2_10ScalarTypeEE"
                "ENS6_INS2_6LayoutEEENS6_INS2_6DeviceEEENS6_IbEENS6_INS2_12MemoryFormatEEE")

# Transformer Engine built in NVIDIA's container (cxx11) left under a pip torch (pre-cxx11)
register("mochi-30-transformer-engine-cxx11-under-pip-torch", torch="2.4.1+cu124", torch_cxx11=False,
         dist="transformer-engine", version="1.7.0", package="transformer_engine",
         obj="transformer_engine_extensions.cpython-311-x86_64-linux-gnu.so", ext_cxx11=True,
         symbol=f"_ZN5torch3jit17parseSchemaOrNameERK{CXX11}", lib="libtorch_python.so")

# xFasterTransformer's torch op library, built against torch 2.0 (torch::Library's constructor of then), on 2.2.0
register("xfastertransformer-233-built-for-torch-2.0", torch="2.2.0+cu121", torch_cxx11=False,
         dist="xfastertransformer", version="1.3.1", obj="xfastertransformer/libxfastertransformer_pt.so",
         symbol="_ZN5torch7LibraryC1ENS0_4KindESsN3c108optionalINS2_11DispatchKeyEEEPKcj",
         requires=("torch==2.0.1",), lib="libtorch_cpu.so", twin_version="1.4.0",
         twin_requires=("torch>=2.2",))


# -- NVIDIA's container: its own torch (a pre-release, cxx11 ABI) in the system Python, an extension in the user site

NGC_SITE = "usr/local/lib/python3.10/dist-packages"
NGC_TORCH = "2.5.0a0+e000cf0ad9.nv24.10"


def torch_dist_with_symbols(spec, site: str, version: str, cuda: str, cxx11: bool, runpath: Sequence[str],
                            python_tag: str, installer: str, cuda_needed: Sequence[str],
                            stdcxx: Optional[Dict[str, List[str]]] = None) -> None:
    """A torch distribution not from pytorch.org's wheels (NVIDIA's container, conda-forge), its libraries with their
    symbol tables, replacing the one in the tree."""
    drop(spec, f"{site}/torch/", f"{site}/torch-")
    ex = {lib: [string_abi(n, cxx11) for n in names] for lib, names in COMMON.items()}
    rp = list(runpath) + ["$ORIGIN"]
    e = healthy.elf
    files = {
        "torch/lib/libtorch_cuda.so": e("libtorch_cuda.so", runpath=rp, exports=ex["libtorch_cuda.so"],
                                        needed=list(cuda_needed) + ["libc10_cuda.so", "libc10.so", "libtorch_cpu.so",
                                                                    "libstdc++.so.6", "libc.so.6"], verneed=stdcxx),
        "torch/lib/libc10_cuda.so": e("libc10_cuda.so", runpath=rp, exports=ex["libc10_cuda.so"],
                                      needed=["libcudart.so.12", "libc10.so", "libc.so.6"]),
        "torch/lib/libc10.so": e("libc10.so", runpath=rp, exports=ex["libc10.so"],
                                 needed=["libstdc++.so.6", "libc.so.6"]),
        "torch/lib/libtorch_cpu.so": e("libtorch_cpu.so", runpath=rp, exports=ex["libtorch_cpu.so"],
                                       needed=["libc10.so", "libstdc++.so.6", "libc.so.6"]),
        "torch/lib/libtorch.so": e("libtorch.so", runpath=rp, exports=ex["libtorch.so"],
                                   needed=["libtorch_cuda.so", "libtorch_cpu.so", "libc.so.6"]),
        "torch/lib/libtorch_python.so": e("libtorch_python.so", runpath=rp, exports=ex["libtorch_python.so"],
                                          needed=["libtorch.so", "libc10.so", "libstdc++.so.6", "libc.so.6"]),
        f"torch/_C.cpython-{python_tag}-x86_64-linux-gnu.so": e(None, runpath=["$ORIGIN/lib"] + list(runpath),
                                                                needed=["libtorch_python.so", "libc.so.6"]),
        "torch/__init__.py": "import ctypes\n",
        "torch/version.py": f"__version__ = '{version}'\ndebug = False\ncuda = '{cuda}'\n"
                            "git_version = 'e000cf0ad980e5d140dc895a646174e9b945cf26'\nhip = None\n"}
    healthy.dist(spec, site, "torch", version, files, tag=f"cp{python_tag}-cp{python_tag}-linux_x86_64",
                 installer=installer)


def ngc_torch_with_symbols(spec) -> None:
    """The NGC image's torch (NVIDIA builds torch with _GLIBCXX_USE_CXX11_ABI=1)."""
    torch_dist_with_symbols(spec, NGC_SITE, NGC_TORCH, "12.6", True, [], "310", "",
                            ["libcudart.so.12", "libcublas.so.12", "libcudnn.so.9", "libnccl.so.2",
                             "libnvToolsExt.so.1"])


@case("flash-attention-709-user-site-wheel-under-ngc-torch")
def flash_attention_709(broken: bool) -> Machine:
    """NVIDIA's PyTorch container: 'pip install flash-attn --upgrade' as a user went to ~/.local and fetched the
    prebuilt wheel made for pytorch.org's torch; the image's own pre-release torch does not export a c10 symbol it
    imports. Twin: flash-attn built in the container against its torch."""
    spec = healthy.ngc_cuda_compat()
    ngc_torch_with_symbols(spec)
    user_site = "root/.local/lib/python3.10/site-packages"
    common = [string_abi(n, True) for lib, names in COMMON.items() for n in names[:2]]
    imports = (["_ZNK3c1017SymbolicShapeMeta18init_is_contiguousEv"] if broken else []) + common
    extension(spec, user_site, "flash-attn", "2.3.6", "flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so", imports,
              ["torch", "einops"], package="flash_attn", tag="cp310-cp310-linux_x86_64")
    return Machine(spec)


# -- conda-forge's pytorch (built with the cxx11 ABI, like every conda-forge C++ package) and a pip wheel from PyG

CF_PREFIX = "opt/miniforge3/envs/pt"
CF_SITE = f"{CF_PREFIX}/lib/python3.11/site-packages"


@case("pytorch-scatter-470-pyg-wheel-under-conda-forge-torch")
def pytorch_scatter_470(broken: bool) -> Machine:
    """conda-forge's pytorch 2.4.0 (cxx11 ABI) with torch-scatter's wheel from data.pyg.org (built against
    pytorch.org's pre-cxx11 torch). Twin: torch-scatter from conda-forge, built against that torch."""
    spec = healthy.conda_forge_lab_server()
    meta = next(k for k in spec if k.startswith(f"{CF_PREFIX}/conda-meta/pytorch-"))
    spec[meta] = spec[meta].replace('"2.5.1"', '"2.4.0"').replace("cuda126_py311hc5b8c95_305",
                                                                  "cuda126_py311h1234567_301")
    spec[meta.replace("2.5.1-cuda126_py311hc5b8c95_305", "2.4.0-cuda126_py311h1234567_301")] = spec.pop(meta)
    torch_dist_with_symbols(spec, CF_SITE, "2.4.0", "12.6", True, ["$ORIGIN/../../../.."], "311", "conda",
                            ["libcudart.so.12", "libcublas.so.12", "libcublasLt.so.12", "libcudnn.so.9",
                             "libnccl.so.2", "libcusparse.so.12", "libcufft.so.11", "libcurand.so.10",
                             "libcusolver.so.11", "libnvToolsExt.so.1"],
                            stdcxx={"libstdc++.so.6": ["GLIBCXX_3.4.32", "CXXABI_1.3.15"]})
    common_py = [string_abi(n, not broken) for lib in ("libc10.so", "libtorch_cpu.so")
                 for n in COMMON[lib][:2]]
    cuda_needed = ["libc10.so", "libtorch_cpu.so", "libtorch_cuda.so", "libc10_cuda.so", "libcudart.so.12",
                   "libstdc++.so.6", "libgcc_s.so.1", "libc.so.6"]
    version_needed = ["libc10.so", "libtorch_cpu.so", "libstdc++.so.6", "libgcc_s.so.1", "libc.so.6"]
    imports = ([string_abi("_ZN5torch3jit17parseSchemaOrNameERKSsb", not broken)] if broken else []) + common_py
    files = {"torch_scatter/__init__.py": "__version__ = '2.1.2'\n",
             "torch_scatter/_version_cuda.so": healthy.elf(None, needed=version_needed, imports=imports),
             "torch_scatter/_scatter_cuda.so": healthy.elf(None, needed=cuda_needed, imports=common_py)}
    version = "2.1.2+pt24cu121" if broken else "2.1.2"
    healthy.dist(spec, CF_SITE, "torch-scatter", version, files, tag="cp311-cp311-linux_x86_64",
                 installer="pip" if broken else "conda")
    return Machine(spec)


# -- written before any check was changed for them (blind)

register("mambavision-106-mmcv-wheel-for-older-torch", torch="2.4.1+cu124", torch_cxx11=False, dist="mmcv",
         version="2.2.0", obj="mmcv/_ext.cpython-311-x86_64-linux-gnu.so", lib="libtorch_cpu.so",
         requires=("addict", "mmengine>=0.3.0", "numpy", "packaging", "Pillow", "pyyaml", "yapf"),
         symbol="_ZN2at4_ops10zeros_like4callERKNS_6TensorEN3c108optionalINS5_10ScalarTypeEEENS6_INS5_6LayoutEEENS6"
                "_INS5_6DeviceEEENS6_IbEENS6_INS5_12MemoryFormatEEE")
register("pytorch-152790-cu126-torch-exports-cxx11-only", torch="2.6.0+cu126", torch_cxx11=True,
         dist="flash-attn", version="2.7.4.post1", obj=FA, ext_cxx11=False, package="flash_attn",
         symbol="_ZN3c105ErrorC2ENS_14SourceLocationESs")
register("exllamav2-522-flash-attn-for-torch-2.2-under-2.3.1", torch="2.3.1+cu121", torch_cxx11=False,
         dist="flash-attn", version="2.5.6", obj=FA, package="flash_attn", lib="libc10_cuda.so",
         symbol="_ZN3c104cuda9SetDeviceEi")


@case("flashinfer-911-torch2.5-wheel-under-ngc-24.08")
def flashinfer_911(broken: bool) -> Machine:
    """nvcr.io/nvidia/pytorch:24.08 (torch 2.5.0a0, cxx11 ABI) with flashinfer-python from flashinfer.ai's
    cu124/torch2.5 index (built against pytorch.org's pre-cxx11 torch 2.5). Twin: flashinfer's JIT build against the
    container's torch (its AOT kernels rebuilt in the image)."""
    spec = healthy.ngc_cuda_compat()
    version = "2.5.0a0+872d972e41.nv24.08"
    torch_dist_with_symbols(spec, NGC_SITE, version, "12.6", True, [], "310", "",
                            ["libcudart.so.12", "libcublas.so.12", "libcudnn.so.9", "libnccl.so.2",
                             "libnvToolsExt.so.1"])
    spec[f"{NGC_SITE}/torch/version.py"] = spec[f"{NGC_SITE}/torch/version.py"]
    common = [string_abi(n, not broken) for lib, names in COMMON.items() for n in names[:2]]
    imports = ([string_abi("_ZN5torch3jit17parseSchemaOrNameERKSsb", False)] if broken else []) + common
    extension(spec, NGC_SITE, "flashinfer-python", "0.2.2.post1" if broken else "0.2.3",
              "flashinfer/flashinfer_kernels.abi3.so", imports, ["torch", "ninja", "numpy"], package="flashinfer",
              tag="cp38-abi3-linux_x86_64")
    return Machine(spec)

register("flashinfer-382-wheel-for-torch-2.4-under-2.3.1", torch="2.3.1+cu121", torch_cxx11=False,
         dist="flashinfer", version="0.1.2+cu121torch2.4", obj="flashinfer/_kernels.cpython-311-x86_64-linux-gnu.so",
         symbol="_ZN3c1021throwNullDataPtrErrorEv", package="flashinfer", twin_version="0.1.2+cu121torch2.3")


@case("audio-3335-torchaudio-cxx11-under-defaults-channel-torch")
def audio_3335(broken: bool) -> Machine:
    """A CPU conda environment mixing distributors: pytorch 1.13.1 from Anaconda's defaults channel (pre-cxx11
    names) and torchaudio 0.13.1 built against the pytorch channel's torch, whose C++ it links (cxx11 names:
    torch::autograd::Node::name[abi:cxx11]). Twin: torchaudio from the same channel as torch."""
    spec = healthy.cpu_only()
    drop(spec, "home/ubuntu/.venv")
    prefix = "home/ubuntu/miniconda3/envs/audio"
    site = healthy.conda_env(spec, prefix, python="3.8.16", build="h7a1cb2a_3")
    healthy.conda_pkg(spec, prefix, "pytorch", "1.13.1", "cpu_py38h92724a6_0", channel="defaults")
    exports = {lib: [string_abi(n, False) for n in names] for lib, names in COMMON.items()}
    exports["libtorch_cpu.so"] = exports["libtorch_cpu.so"] + ["_ZNK5torch8autograd4Node4nameEv"]
    plain = healthy.elf

    def elf(soname=None, needed=("libc.so.6",), machine="x86_64", **kw):
        if soname in exports:
            kw["exports"] = exports[soname]
        return plain(soname, needed=needed, machine=machine, **kw)

    healthy.elf = elf
    try:
        healthy.torch(spec, site, "1.13.1", None, python_tag="38")
    finally:
        healthy.elf = plain
    cxx11 = broken
    imports = [string_abi(n, cxx11) for lib in ("libc10.so", "libtorch_cpu.so") for n in COMMON[lib][:2]]
    imports = (["_ZNK5torch8autograd4Node4nameB5cxx11Ev"] if broken else ["_ZNK5torch8autograd4Node4nameEv"]) + imports
    lib = healthy.elf(None, needed=["libc10.so", "libtorch.so", "libtorch_cpu.so", "libstdc++.so.6", "libc.so.6"],
                      runpath=["$ORIGIN/../../torch/lib"], imports=imports)
    healthy.dist(spec, site, "torchaudio", "0.13.1", {"torchaudio/__init__.py": "", "torchaudio/lib/libtorchaudio.so": lib,
                                                      "torchaudio/version.py": "__version__ = '0.13.1'\n"},
                 requires=["torch==1.13.1"], tag="cp38-cp38-linux_x86_64", installer="conda")
    healthy.conda_pkg(spec, prefix, "torchaudio", "0.13.1", "py38_cpu" if broken else "cpu_py38h7f8d0b4_0",
                      channel="pytorch" if broken else "defaults")
    spec["proc/self/environ"] = healthy.environ({"PATH": f"/{prefix}/bin:/usr/local/bin:/usr/bin:/bin",
                                                 "HOME": "/home/ubuntu", "USER": "ubuntu", "CONDA_PREFIX": f"/{prefix}",
                                                 "CONDA_DEFAULT_ENV": "audio", "LANG": "C.UTF-8"})
    return Machine(spec)


# -- xformers' wheels pin the torch they were built for (Requires-Dist: torch==X): pip left another torch

register("fooocus-2517-xformers-0.0.20-under-torch-2.1.0", torch="2.1.0+cu121", torch_cxx11=False, dist="xformers",
         version="0.0.20", obj="xformers/_C.so", symbol="_ZN3c1019UndefinedTensorImpl10_singletonE",
         exported_elsewhere=True, requires=("numpy", "pyre-extensions==0.0.29", "torch==2.0.1"),
         twin_version="0.0.23", twin_requires=("numpy", "torch==2.1.0"), tag_obj="manylinux2014_x86_64")
register("sd-1click-colab-77-xformers-for-torch-2.0.1-on-colab", torch="2.1.0+cu121", torch_cxx11=False,
         dist="xformers", version="0.0.20", obj="xformers/_C.so", symbol="_ZN3c1019UndefinedTensorImpl10_singletonE",
         exported_elsewhere=True, requires=("numpy", "pyre-extensions==0.0.29", "torch==2.0.1"),
         twin_version="0.0.22.post7", twin_requires=("numpy", "torch==2.1.0"), tag_obj="manylinux2014_x86_64")


@case("transformer-engine-756-extension-and-common-library-of-two-abis")
def transformer_engine_756(broken: bool) -> Machine:
    """Transformer Engine built from its main branch against pip's torch 2.2.2 (pre-cxx11): its torch extension is
    compiled with torch's -D_GLIBCXX_USE_CXX11_ABI=0, its common library libtransformer_engine.so with the default
    (=1), and the extension now links transformer_engine::getenv<int>(const std::string&, const int&) from it.
    Twin: TE 1.5 (the fix: getenv compiled into the extension itself)."""
    spec = healthy.dlami_ubuntu2204_g5()
    drop(spec, *(f"{SITE}/{p}" for p in ("torch/", "torch-", "nvidia/", "nvidia_", "torchvision", "torchaudio",
                                         "flash_attn", "flash-attn", "xformers", "bitsandbytes")))
    torch_with_symbols(spec, SITE, "2.2.2+cu121", False)
    getenv_old = "_ZN18transformer_engine6getenvIiEET_RKSsRKS1_"
    getenv_new = f"_ZN18transformer_engine6getenvIiEET_RK{CXX11}RKS1_"
    common = [string_abi(n, False) for names in COMMON.values() for n in names[:2]]
    lib = healthy.elf("libtransformer_engine.so", needed=["libcudart.so.12", "libcublas.so.12", "libstdc++.so.6",
                                                          "libc.so.6"],
                      exports=[getenv_new, "nvte_fused_attn_fwd", "nvte_cublas_gemm"])
    ext = healthy.elf(None, needed=["libtransformer_engine.so"] + NEEDED, runpath=["$ORIGIN"],
                      imports=([getenv_old] if broken else []) + ["nvte_fused_attn_fwd"] + common,
                      exports=["PyInit_transformer_engine_extensions"])
    version = "1.6.0.dev0+a1b2c3d" if broken else "1.5.0"
    healthy.dist(spec, SITE, "transformer-engine", version, {
        "transformer_engine/__init__.py": f"__version__ = '{version}'\n",
        "libtransformer_engine.so": lib,
        "transformer_engine_extensions.cpython-311-x86_64-linux-gnu.so": ext},
        requires=["pydantic", "importlib-metadata>=1.0", "packaging", "torch", "flash-attn<=2.5.6,>=2.0.6"],
        tag="cp311-cp311-linux_x86_64")
    return Machine(spec)

register("flash-attention-975-cxx11abitrue-wheel-under-torch-2.4", torch="2.4.1+cu124", torch_cxx11=False,
         dist="flash-attn", version="2.6.0+cu122torch2.4cxx11abiTRUE", obj=FA, ext_cxx11=True, package="flash_attn",
         symbol=f"_ZN3c105ErrorC2ENS_14SourceLocationE{CXX11}", twin_version="2.6.0+cu122torch2.4cxx11abiFALSE")


@case("nixpkgs-162286-torchvision-wheel-under-distro-built-torch")
def nixpkgs_162286(broken: bool) -> Machine:
    """A venv whose torch 1.12.0 was built on the machine (the distribution's compiler: the cxx11 ABI) and whose
    torchvision 0.13.0 is pip's wheel, built against pytorch.org's pre-cxx11 torch: torchvision/image.so imports
    c10::Error's constructor with std::string ('Ss'). Twin: torchvision compiled on the machine too."""
    spec = healthy.cpu_only()
    drop(spec, "home/ubuntu/.venv")
    spec["usr/bin/python3.10"] = healthy.elf(None)
    spec["usr/lib/python3.10/os.py"] = ""
    prefix = "home/octopus/workdir"
    spec[f"{prefix}/pyvenv.cfg"] = "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.10.6\n"
    spec[f"{prefix}/bin/python3"] = {"symlink": "/usr/bin/python3.10"}
    spec[f"{prefix}/bin/python"] = {"symlink": "python3"}
    site = f"{prefix}/lib/python3.10/site-packages"
    exports = {lib: [string_abi(n, True) for n in names] for lib, names in COMMON.items()}
    plain = healthy.elf

    def elf(soname=None, needed=("libc.so.6",), machine="x86_64", **kw):
        if soname in exports:
            kw["exports"] = exports[soname]
        return plain(soname, needed=needed, machine=machine, **kw)

    healthy.elf = elf
    try:
        healthy.torch(spec, site, "1.12.0", None, python_tag="310")
    finally:
        healthy.elf = plain
    imports = [string_abi(n, not broken) for lib in ("libc10.so", "libtorch_cpu.so") for n in COMMON[lib][:2]]
    if broken:
        imports = ["_ZN3c105ErrorC2ENS_14SourceLocationESs"] + imports
    image = healthy.elf(None, needed=["libc10.so", "libtorch_cpu.so", "libjpeg.so.8", "libpng16.so.16",
                                      "libstdc++.so.6", "libc.so.6"], runpath=["$ORIGIN/../torch/lib"],
                        imports=imports)
    spec["usr/lib/x86_64-linux-gnu/libjpeg.so.8"] = healthy.elf("libjpeg.so.8")
    spec["usr/lib/x86_64-linux-gnu/libpng16.so.16"] = healthy.elf("libpng16.so.16")
    healthy.dist(spec, site, "torchvision", "0.13.0", {
        "torchvision/__init__.py": "", "torchvision/image.so": image,
        "torchvision/version.py": "__version__ = '0.13.0'\ngit_version = 'da3794e9'\ncuda = None\n"},
        requires=["numpy", "requests", "torch==1.12.0", "pillow!=8.3.*,>=5.3.0"],
        tag="cp310-cp310-manylinux1_x86_64" if broken else "cp310-cp310-linux_x86_64",
        installer="pip")
    spec["proc/self/environ"] = healthy.environ({"PATH": f"/{prefix}/bin:/usr/local/bin:/usr/bin:/bin",
                                                 "HOME": "/home/octopus", "USER": "octopus",
                                                 "VIRTUAL_ENV": f"/{prefix}", "LANG": "C.UTF-8"})
    return Machine(spec)


@case("pytorch-scatter-462-pyg-wheel-under-ngc-torch")
def pytorch_scatter_462(broken: bool) -> Machine:
    """nvcr.io/nvidia/pytorch:24.05 (torch 2.4.0a0, built with the cxx11 ABI) with torch-scatter 2.1.2 from
    data.pyg.org's torch-2.4.0+cu124 index (built against pytorch.org's pre-cxx11 torch). Twin: torch-scatter built
    from source in the container."""
    spec = healthy.ngc_cuda_compat()
    torch_dist_with_symbols(spec, NGC_SITE, "2.4.0a0+07cecf4168.nv24.05", "12.4", True, [], "310", "",
                            ["libcudart.so.12", "libcublas.so.12", "libcudnn.so.9", "libnccl.so.2",
                             "libnvToolsExt.so.1"])
    version_needed = ["libc10.so", "libtorch_cpu.so", "libstdc++.so.6", "libgcc_s.so.1", "libc.so.6"]
    cuda_needed = ["libc10.so", "libtorch_cpu.so", "libtorch_cuda.so", "libc10_cuda.so", "libcudart.so.12",
                   "libstdc++.so.6", "libgcc_s.so.1", "libc.so.6"]
    common = [string_abi(n, not broken) for lib in ("libc10.so", "libtorch_cpu.so") for n in COMMON[lib][:2]]
    imports = ([string_abi("_ZN5torch3jit17parseSchemaOrNameERKSsb", False)] if broken else []) + common
    files = {"torch_scatter/__init__.py": "__version__ = '2.1.2'\n",
             "torch_scatter/_version_cuda.so": healthy.elf(None, needed=version_needed, imports=imports),
             "torch_scatter/_scatter_cuda.so": healthy.elf(None, needed=cuda_needed, imports=common)}
    healthy.dist(spec, NGC_SITE, "torch-scatter", "2.1.2+pt24cu124" if broken else "2.1.2", files,
                 tag="cp310-cp310-linux_x86_64")
    return Machine(spec)
