"""Reported failures whose cause is in what pip and conda recorded: a requirement another install broke (Hugging Face's
import-time version checks, a companion's torch pin, jax and jaxlib, TensorFlow and Keras), two distributions of one
module installed over each other (onnxruntime and onnxruntime-gpu, the opencv-python variants, tensorflow and
tensorflow-gpu), and pip clobbering a conda package's files.

Every wheel here is written with a real RECORD (sha256 and size of the bytes written), as pip writes it, so the
integrity check can hold the files to it; where a later install overwrote a path, the tree holds the later bytes.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any, Dict, Iterable, Optional, Sequence

import healthy
from packaging.version import Version
from cases import Machine, case

Spec = Dict[str, Any]
VENV = "home/ubuntu/.venv"
VENV_SITE = f"{VENV}/lib/python3.12/site-packages"
CONDA_SITE = "opt/conda/envs/pytorch/lib/python3.11/site-packages"  # dlami_ubuntu2204_g5's pytorch env


def _b(content: Any) -> bytes:
    return content if isinstance(content, bytes) else str(content).encode()


def record_line(rel: str, content: Any) -> str:
    data = _b(content)
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{rel},sha256={digest},{len(data)}\n"


def wheel(spec: Spec, site: str, name: str, version: str, files: Dict[str, Any], requires: Sequence[str] = (),
          tag: str = "cp312-cp312-manylinux_2_17_x86_64", installer: str = "pip", write: bool = True) -> None:
    """A wheel as pip installs it: its files (unless ``write`` is False: a later install overwrote them), and its
    .dist-info with METADATA (these Requires-Dist lines), WHEEL, INSTALLER and a RECORD with real hashes."""
    site = site.strip("/")
    if write:
        for rel, content in files.items():
            spec[f"{site}/{rel}"] = content
    d = f"{name.replace('-', '_')}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires) + "\n"
    own = {f"{d}/METADATA": meta,
           f"{d}/WHEEL": f"Wheel-Version: 1.0\nGenerator: bdist_wheel (0.43.0)\nRoot-Is-Purelib: false\nTag: {tag}\n",
           f"{d}/INSTALLER": installer + "\n"}
    for rel, content in own.items():
        spec[f"{site}/{rel}"] = content
    spec[f"{site}/{d}/RECORD"] = "".join(record_line(r, c) for r, c in {**files, **own}.items()) + f"{d}/RECORD,,\n"


def pure(spec: Spec, site: str, name: str, version: str, requires: Sequence[str] = (), module: Optional[str] = None) -> None:
    module = module or name.replace("-", "_").lower()
    wheel(spec, site, name, version, {f"{module}/__init__.py": f"__version__ = '{version}'\n"}, requires,
          tag="py3-none-any")


def ext(spec: Spec, site: str, name: str, version: str, module: str, so: str, requires: Sequence[str] = (),
        needed: Iterable[str] = ("libc.so.6",), extra: Optional[Dict[str, Any]] = None,
        tag: str = "cp312-cp312-manylinux_2_17_x86_64") -> None:
    """A wheel with one extension module (``module/so``) and its __init__.py."""
    files = {f"{module}/__init__.py": f"__version__ = '{version}'\n",
             f"{module}/{so}": healthy.elf(None, needed=list(needed), runpath=["$ORIGIN"])}
    files.update(extra or {})
    wheel(spec, site, name, version, files, requires, tag=tag)


def venv_machine() -> Spec:
    """cpu_only's build host with its venv (Python 3.12) emptied of torch: the packages each case installs."""
    spec = healthy.cpu_only()
    for path in [p for p in spec if p.startswith(f"{VENV_SITE}/")]:
        del spec[path]
    return spec


# -- Hugging Face: transformers checks its pins at import (dependency_versions_check.py) -----------------------------

HF_DEPS = {"filelock": "3.16.1", "numpy": "1.26.4", "packaging": "24.2", "pyyaml": "6.0.2", "regex": "2024.11.6",
           "requests": "2.32.3", "tqdm": "4.67.1"}


def transformers_env(spec: Spec, site: str, version: str, pins: Dict[str, str], have: Dict[str, str]) -> None:
    """transformers VERSION with its Requires-Dist (``pins``: the Hugging Face ones, as its METADATA writes them)
    and the packages installed (``have``: tokenizers, huggingface-hub, safetensors -> version)."""
    requires = [f"{n}{spec_}" for n, spec_ in pins.items()] + [
        "filelock", "numpy>=1.17", "packaging>=20.0", "pyyaml>=5.1", "regex!=2019.12.17", "requests", "tqdm>=4.27",
        'torch; extra == "torch"']
    pure(spec, site, "transformers", version, requires)
    for name, ver in HF_DEPS.items():
        module = {"pyyaml": "yaml"}.get(name)
        if name == "numpy":
            ext(spec, site, "numpy", ver, "numpy/core", "_multiarray_umath.cpython-312-x86_64-linux-gnu.so")
        else:
            pure(spec, site, name, ver, module=module)
    for name, ver in have.items():
        if name == "tokenizers":
            ext(spec, site, "tokenizers", ver, "tokenizers", "tokenizers.abi3.so",
                requires=["huggingface-hub<1.0,>=0.16.4"] if Version(ver) >= Version("0.15") else [],
                tag="cp37-abi3-manylinux_2_17_x86_64")
        elif name == "safetensors":
            ext(spec, site, "safetensors", ver, "safetensors", "_safetensors_rust.abi3.so",
                tag="cp38-abi3-manylinux_2_17_x86_64")
        else:
            pure(spec, site, name, ver, requires=["filelock", "fsspec>=2023.5.0", "requests", "tqdm>=4.42.1"]
                 if name == "huggingface-hub" else (), module="huggingface_hub" if name == "huggingface-hub" else None)
    if "huggingface-hub" in have:
        pure(spec, site, "fsspec", "2024.10.0")


def _hf(broken: bool, version: str, pins: Dict[str, str], bad: Dict[str, str], good: Dict[str, str],
        base: Optional[Dict[str, str]] = None) -> Machine:
    spec = venv_machine()
    transformers_env(spec, VENV_SITE, version, pins, {**(base or {}), **(bad if broken else good)})
    return Machine(spec)


@case("transformers-27580-tokenizers-too-new")
def transformers_27580(broken: bool) -> Machine:
    """transformers 4.33.3 checks tokenizers<0.14 at import; another install brought tokenizers 0.15.0."""
    return _hf(broken, "4.33.3", {"huggingface-hub": " (<1.0,>=0.15.1)", "tokenizers": " (!=0.11.3,<0.14,>=0.11.1)",
                                   "safetensors": " (>=0.3.1)"},
               {"tokenizers": "0.15.0"}, {"tokenizers": "0.13.3"},
               {"huggingface-hub": "0.19.4", "safetensors": "0.4.1"})


@case("ballonstranslator-474-tokenizers-too-old")
def ballons_474(broken: bool) -> Machine:
    """transformers 4.35.2 needs tokenizers>=0.14,<0.15; the bundled environment kept tokenizers 0.13.3."""
    return _hf(broken, "4.35.2", {"huggingface-hub": "<1.0,>=0.16.4", "tokenizers": "<0.15,>=0.14",
                                   "safetensors": ">=0.3.1"},
               {"tokenizers": "0.13.3"}, {"tokenizers": "0.14.1"}, {"huggingface-hub": "0.17.3", "safetensors": "0.4.0"})


@case("transformers-11799-tokenizers-rc-too-old")
def transformers_11799(broken: bool) -> Machine:
    """transformers 4.6.1 needs tokenizers>=0.10.1,<0.11; an old tokenizers 0.8.1rc1 stayed in the environment."""
    return _hf(broken, "4.6.1", {"huggingface-hub": " (==0.0.8)", "tokenizers": " (<0.11,>=0.10.1)",
                                  "sacremoses": ""},
               {"tokenizers": "0.8.1rc1"}, {"tokenizers": "0.10.3"}, {"huggingface-hub": "0.0.8", "sacremoses": "0.0.45"})


@case("huggingface-hub-2377-hub-too-old")
def hfhub_2377(broken: bool) -> Machine:
    """transformers 4.37.2 needs huggingface-hub>=0.19.3,<1.0; huggingface-hub 0.17.1 was installed (another
    package pinned it)."""
    return _hf(broken, "4.37.2", {"huggingface-hub": "<1.0,>=0.19.3", "tokenizers": "<0.19,>=0.14",
                                   "safetensors": ">=0.4.1"},
               {"huggingface-hub": "0.17.1"}, {"huggingface-hub": "0.23.4"},
               {"tokenizers": "0.15.2", "safetensors": "0.4.2"})


@case("hunyuan3d-winportable-105-tokenizers-too-old")
def hunyuan_105(broken: bool) -> Machine:
    """transformers 4.56.2 needs tokenizers>=0.22.0,<=0.23.0; tokenizers 0.21.4 was left from an earlier install."""
    return _hf(broken, "4.56.2", {"huggingface-hub": "<1.0,>=0.34.0", "tokenizers": "<=0.23.0,>=0.22.0",
                                   "safetensors": ">=0.4.3"},
               {"tokenizers": "0.21.4"}, {"tokenizers": "0.22.1"},
               {"huggingface-hub": "0.35.3", "safetensors": "0.6.2"})


# -- a compiled companion pinned to another torch ------------------------------------------------------------------

def torch_site(spec: Spec, torch_version: str, pins: Dict[str, str], companions: Dict[str, tuple]) -> None:
    """dlami_ubuntu2204_g5's pytorch env with this torch (and its nvidia-* pins) and these compiled companions:
    name -> (version, module, extension file, Requires-Dist lines)."""
    from cases.pytorch import drop

    drop(spec, *(f"{CONDA_SITE}/{p}" for p in ("torch/", "torch-", "nvidia/", "nvidia_", "torchvision", "torchaudio",
                                               "xformers")))
    healthy.cu12_wheels(spec, CONDA_SITE, pins)
    healthy.torch(spec, CONDA_SITE, torch_version, "12.4", pins)
    for name, (ver, module, so, requires) in companions.items():
        wheel(spec, CONDA_SITE, name, ver, {
            f"{module}/__init__.py": "", f"{module}/version.py": f"__version__ = '{ver}'\n",
            f"{module}/{so}": healthy.elf(None, runpath=["$ORIGIN/../torch/lib"],
                                          needed=["libc10.so", "libtorch_cpu.so", "libc.so.6"])},
              requires, tag="cp311-cp311-manylinux2014_x86_64")


@case("xformers-1052-torch-downgraded-under-torchvision")
def xformers_1052(broken: bool) -> Machine:
    """pip install xformers 0.0.26.post1 replaced torch 2.3.1+cu121 with 2.3.0; torchvision 0.18.1+cu121 pins
    torch==2.3.1."""
    spec = healthy.dlami_ubuntu2204_g5()
    torch_v = "2.3.0" if broken else "2.3.1+cu121"
    torch_site(spec, torch_v, healthy.TORCH_241_CU124, {
        "torchvision": ("0.18.1+cu121", "torchvision", "_C.so", ["numpy", "torch==2.3.1", "pillow!=8.3.*,>=5.3.0"]),
        **({"xformers": ("0.0.26.post1", "xformers", "_C.so", ["numpy", "torch==2.3.0"])} if broken else {})})
    pure(spec, CONDA_SITE, "pillow", "10.4.0", module="PIL")
    return Machine(spec)


@case("xformers-752-xformers-pulls-torch-2.0.0")
def xformers_752(broken: bool) -> Machine:
    """xformers 0.0.19 pinned torch==2.0.0 and replaced torch 2.0.1+cu118; torchvision 0.15.2+cu118 pins
    torch==2.0.1."""
    spec = healthy.dlami_ubuntu2204_g5()
    torch_v = "2.0.0" if broken else "2.0.1+cu118"
    comps = {"torchvision": ("0.15.2+cu118", "torchvision", "_C.so", ["numpy", "requests", "torch==2.0.1",
                                                                       "pillow!=8.3.*,>=5.3.0"])}
    if broken:
        comps["xformers"] = ("0.0.19", "xformers", "_C.so", ["numpy", "pyre-extensions==0.0.29", "torch==2.0.0"])
    else:
        comps["xformers"] = ("0.0.20", "xformers", "_C.so", ["numpy", "pyre-extensions==0.0.29", "torch==2.0.1"])
    torch_site(spec, torch_v, healthy.TORCH_241_CU124, comps)
    for n, v, m in (("pillow", "10.4.0", "PIL"), ("pyre-extensions", "0.0.29", None)):
        pure(spec, CONDA_SITE, n, v, module=m)
    return Machine(spec)


@case("diad-49-xformers-needs-torch-2.0.0")
def diad_49(broken: bool) -> Machine:
    """xformers 0.0.18 (pins torch==2.0.0) installed next to torch 1.12.1."""
    spec = healthy.dlami_ubuntu2204_g5()
    torch_site(spec, "1.12.1" if broken else "2.0.0", healthy.TORCH_241_CU124, {
        "xformers": ("0.0.18", "xformers", "_C.so", ["numpy", "pyre-extensions==0.0.23", "torch==2.0.0"])})
    pure(spec, CONDA_SITE, "pyre-extensions", "0.0.23")
    return Machine(spec)


@case("vllm-1807-built-for-torch-2.1.0")
def vllm_1807(broken: bool) -> Machine:
    """vllm 0.2.2 (built with torch 2.1.0, Requires-Dist torch>=2.1.0) with torch 2.0.1 reinstalled over it:
    'undefined symbol: _ZN3c104cuda9SetDeviceEi'."""
    spec = healthy.dlami_ubuntu2204_g5()
    torch_site(spec, "2.0.1" if broken else "2.1.0", healthy.TORCH_241_CU124, {
        "vllm": ("0.2.2", "vllm", "quantization_ops.cpython-311-x86_64-linux-gnu.so",
                 ["ninja", "psutil", "ray>=2.5.1", "sentencepiece", "numpy", "torch>=2.1.0", "transformers>=4.34.0",
                  "xformers>=0.0.22.post7", "fastapi", "uvicorn[standard]", "pydantic==1.10.13"])})
    return Machine(spec)


@case("vllm-13116-xformers-built-for-torch-2.6.0")
def vllm_13116(broken: bool) -> Machine:
    """xformers 0.0.29.post3 (pins torch==2.6.0) next to vllm 0.7.2's torch 2.5.1: 'xFormers was built for
    PyTorch 2.6.0+cu124 ... (you have 2.5.1+cu121)'."""
    spec = healthy.dlami_ubuntu2204_g5()
    xf = ("0.0.29.post3", "xformers", "_C.so", ["numpy", "torch==2.6.0"]) if broken else \
        ("0.0.28.post3", "xformers", "_C.so", ["numpy", "torch==2.5.1"])
    torch_site(spec, "2.5.1+cu121", healthy.TORCH_241_CU124, {
        "xformers": xf, "vllm": ("0.7.2", "vllm", "_C.abi3.so", ["numpy<2.0.0", "torch==2.5.1",
                                                                 "xformers==0.0.28.post3; platform_system == \"Linux\" and platform_machine == \"x86_64\""])})
    return Machine(spec)


@case("easyr1-27-vllm-pins-torch-2.5.1")
def easyr1_27(broken: bool) -> Machine:
    """vllm 0.7.3 pins torch==2.5.1; the environment's torch is 2.4.0+cu124."""
    spec = healthy.dlami_ubuntu2204_g5()
    torch_site(spec, "2.4.0+cu124" if broken else "2.5.1+cu124", healthy.TORCH_241_CU124, {
        "vllm": ("0.7.3", "vllm", "_C.abi3.so", ["numpy<2.0.0", "torch==2.5.1", "torchvision==0.20.1"]),
        "torchvision": ("0.20.1+cu124" if not broken else "0.19.0+cu124", "torchvision", "_C.so",
                        ["numpy", "torch==2.5.1+cu124" if not broken else "torch==2.4.0+cu124"])})
    return Machine(spec)


# -- jax checks jaxlib at import (jax/_src/lib/__init__.py) ---------------------------------------------------------

def _jax(broken: bool, jax: str, jaxlib_bad: str) -> Machine:
    spec = venv_machine()
    jaxlib = jaxlib_bad if broken else jax
    pure(spec, VENV_SITE, "jax", jax, [f"jaxlib=={jax}; extra == \"cpu\"", "numpy>=1.22", "opt-einsum", "scipy>=1.9",
                                       "ml-dtypes>=0.1.0"])
    ext(spec, VENV_SITE, "jaxlib", jaxlib, "jaxlib", "xla_extension.so", requires=["numpy>=1.22", "scipy>=1.9",
                                                                                   "ml-dtypes>=0.1.0"],
        needed=["libstdc++.so.6", "libc.so.6"])
    for n, v, m in (("opt-einsum", "3.4.0", "opt_einsum"), ("ml-dtypes", "0.4.1", "ml_dtypes")):
        pure(spec, VENV_SITE, n, v, module=m)
    ext(spec, VENV_SITE, "numpy", "1.26.4", "numpy/core", "_multiarray_umath.cpython-312-x86_64-linux-gnu.so")
    ext(spec, VENV_SITE, "scipy", "1.14.1", "scipy/linalg", "_fblas.cpython-312-x86_64-linux-gnu.so",
        requires=["numpy<2.3,>=1.23.5"])
    return Machine(spec)


@case("jax-17638-jaxlib-newer-than-jax")
def jax_17638(broken: bool) -> Machine:
    """jaxlib 0.4.14 under jax 0.4.6: 'jaxlib version 0.4.14 is newer than and incompatible with jax version 0.4.6'."""
    return _jax(broken, "0.4.6", "0.4.14")


@case("octo-125-jaxlib-0.4.31-jax-0.4.20")
def octo_125(broken: bool) -> Machine:
    """jaxlib 0.4.31 installed under the jax 0.4.20 the project pins."""
    return _jax(broken, "0.4.20", "0.4.31")


@case("transcan-4-jaxlib-0.4.12-jax-0.4.11")
def transcan_4(broken: bool) -> Machine:
    """A jaxlib 0.4.12 built from source under the jax 0.4.11 of requirements.txt."""
    return _jax(broken, "0.4.11", "0.4.12")


@case("af2-conformations-17-jaxlib-0.4.7-jax-0.3.25")
def af2_17(broken: bool) -> Machine:
    """Colab's jaxlib 0.4.7 under the notebook's jax 0.3.25."""
    return _jax(broken, "0.3.25", "0.4.7")


@case("making-it-rain-140-jaxlib-0.5.1-jax-0.3.25")
def making_it_rain_140(broken: bool) -> Machine:
    """Colab's jaxlib 0.5.1 under the notebook's jax 0.3.25."""
    return _jax(broken, "0.3.25", "0.5.1")


# -- TensorFlow and Keras --------------------------------------------------------------------------------------------

@case("keras-19390-keras3-under-tensorflow-2.13")
def keras_19390(broken: bool) -> Machine:
    """pip install keras brought Keras 3.1.1 under TensorFlow 2.13.1, which requires keras<2.14,>=2.13.1 (a CPU
    build host: tensorflow-cpu, the same package and pins)."""
    spec = venv_machine()
    ext(spec, VENV_SITE, "tensorflow-cpu", "2.13.1", "tensorflow", "libtensorflow_framework.so.2",
        requires=["absl-py>=1.0.0", "keras<2.14,>=2.13.1", "numpy<=1.24.3,>=1.22", "tensorboard<2.14,>=2.13",
                  "typing-extensions<4.6.0,>=3.6.6"], needed=["libstdc++.so.6", "libc.so.6"],
        tag="cp311-cp311-manylinux_2_17_x86_64")
    pure(spec, VENV_SITE, "keras", "3.1.1" if broken else "2.13.1",
         ["absl-py", "numpy", "rich", "namex", "h5py", "optree", "ml-dtypes"] if broken else [])
    for n, v, m in (("absl-py", "2.1.0", "absl"), ("tensorboard", "2.13.0", None),
                    ("typing-extensions", "4.5.0", "typing_extensions")):
        pure(spec, VENV_SITE, n, v, module=m)
    ext(spec, VENV_SITE, "numpy", "1.24.3", "numpy/core", "_multiarray_umath.cpython-312-x86_64-linux-gnu.so")
    return Machine(spec)


def tf_pair(spec: Spec, site: str, version: str, first: str, second: Optional[str]) -> None:
    """Two TensorFlow distributions of one release installed into one site (``second`` after ``first``): both
    write tensorflow/, the later one's files are on disk."""
    def files(flavor: str) -> Dict[str, Any]:
        needed = ["libcudart.so.10.0", "libstdc++.so.6", "libc.so.6"] if flavor.endswith("gpu") else \
            ["libstdc++.so.6", "libc.so.6"]
        return {"tensorflow/__init__.py": "from tensorflow.python import *\n",
                "tensorflow/libtensorflow_framework.so.1": healthy.elf("libtensorflow_framework.so.1", needed=needed),
                "tensorflow/python/_pywrap_tensorflow_internal.so": healthy.elf(
                    None, needed=["libtensorflow_framework.so.1"] + needed, runpath=["$ORIGIN/.."]),
                "tensorflow/python/platform/build_info.py":
                    f"is_cuda_build = {flavor.endswith('gpu')}\ncuda_version_number = '10.0'\n"}
    major, minor = version.split(".")[:2]
    reqs = ["absl-py>=0.7.0", "numpy<2.0,>=1.16.0", "protobuf>=3.6.1",
            f"tensorboard<{major}.{int(minor) + 1}.0,>={major}.{minor}.0"]
    wheel(spec, site, first, version, files(first), reqs, tag="cp36-cp36m-manylinux1_x86_64",
          write=second is None)
    if second:
        wheel(spec, site, second, version, files(second), reqs, tag="cp36-cp36m-manylinux1_x86_64")
    for n, v, m in (("absl-py", "0.8.1", "absl"), ("protobuf", "3.10.0", "google/protobuf"),
                    ("tensorboard", f"{major}.{minor}.0", None)):
        pure(spec, site, n, v, module=m)


@case("baselines-146-setup-installs-cpu-tensorflow-over-gpu")
def baselines_146(broken: bool) -> Machine:
    """pip install -e . of baselines installed tensorflow (CPU) over tensorflow-gpu: the GPUs go unused."""
    spec = venv_machine()
    tf_pair(spec, VENV_SITE, "1.14.0", "tensorflow-gpu", "tensorflow" if broken else None)
    ext(spec, VENV_SITE, "numpy", "1.17.4", "numpy/core", "_multiarray_umath.cpython-312-x86_64-linux-gnu.so")
    pure(spec, VENV_SITE, "baselines", "0.1.5", ["gym<0.16.0,>=0.15.4", "scipy", "tqdm", "joblib", "cloudpickle"]
         + (["tensorflow>=1.4.0"] if broken else []))
    return Machine(spec)


@case("donkeycar-346-tensorflow-shadows-tensorflow-gpu")
def donkeycar_346(broken: bool) -> Machine:
    """tensorflow and tensorflow-gpu both installed (tensorflow last): TensorFlow runs on the CPU."""
    spec = venv_machine()
    tf_pair(spec, VENV_SITE, "1.10.0", "tensorflow-gpu", "tensorflow" if broken else None)
    ext(spec, VENV_SITE, "numpy", "1.16.4", "numpy/core", "_multiarray_umath.cpython-312-x86_64-linux-gnu.so")
    return Machine(spec)


# -- ONNX Runtime: onnxruntime and onnxruntime-gpu write the same onnxruntime/ -----------------------------------------

def ort_files(flavor: str, version: str, py: str = "312") -> Dict[str, Any]:
    gpu = flavor == "onnxruntime-gpu"
    files = {"onnxruntime/__init__.py": f"__version__ = '{version}'\nfrom onnxruntime.capi._pybind_state import *\n",
             "onnxruntime/capi/_pybind_state.py": "from .onnxruntime_pybind11_state import *\n",
             f"onnxruntime/capi/onnxruntime_pybind11_state.cpython-{py}-x86_64-linux-gnu.so": healthy.elf(
                 None, needed=["libstdc++.so.6", "libc.so.6"] + (["libonnxruntime_providers_shared.so"] if gpu else []),
                 runpath=["$ORIGIN"]),
             "onnxruntime/capi/libonnxruntime_providers_shared.so": healthy.elf(
                 "libonnxruntime_providers_shared.so", needed=["libc.so.6"] + (["libstdc++.so.6"] if gpu else [])),
             "onnxruntime/capi/build_and_package_info.py": f"package_name = '{flavor}'\n__version__ = '{version}'\n"
                                                           + ("cuda_version = '12.2'\n" if gpu else "")}
    if gpu:
        files["onnxruntime/capi/libonnxruntime_providers_cuda.so"] = healthy.elf(
            "libonnxruntime_providers_cuda.so", runpath=["$ORIGIN"],
            needed=["libonnxruntime_providers_shared.so", "libcublas.so.12", "libcudart.so.12", "libc.so.6"])
    return files


ORT_REQUIRES = ["coloredlogs", "flatbuffers", "numpy>=1.21.6", "packaging", "protobuf", "sympy"]


def ort_env(spec: Spec, site: str, version: str, order: Sequence[str], removed: Sequence[str] = (),
            py: str = "312") -> None:
    """onnxruntime distributions installed in ``order`` (the last one's files on disk); ``removed``: uninstalled
    afterwards (pip removes the files its RECORD lists, those the other one needs with them)."""
    for i, flavor in enumerate(order):
        files = ort_files(flavor, version, py)
        wheel(spec, site, flavor, version, files, ORT_REQUIRES, tag=f"cp{py}-cp{py}-manylinux_2_27_x86_64",
              write=False)
    for flavor in order:  # in install order: a path the later one also writes holds the later bytes
        for rel, content in ort_files(flavor, version, py).items():
            spec[f"{site}/{rel}"] = content
    for flavor in removed:
        for rel in ort_files(flavor, version, py):
            spec.pop(f"{site}/{rel}", None)
        d = f"{site}/{flavor.replace('-', '_')}-{version}.dist-info/"
        for p in [p for p in spec if p.startswith(d)]:
            del spec[p]
    for n, v, m in (("coloredlogs", "15.0.1", None), ("flatbuffers", "24.3.25", None), ("packaging", "24.2", None),
                    ("protobuf", "5.28.3", "google/protobuf"), ("sympy", "1.13.3", None)):
        pure(spec, site, n, v, module=m)
    ext(spec, site, "numpy", "1.26.4", "numpy/core", f"_multiarray_umath.cpython-{py}-x86_64-linux-gnu.so")


ORT_SITE = "opt/conda/envs/onnx/lib/python3.11/site-packages"  # frameworks_side_by_side's ONNX Runtime env


def _ort(broken: bool, version: str, order: Sequence[str], removed: Sequence[str] = ()) -> Machine:
    """frameworks_side_by_side's onnx env (its CUDA 12 wheels) with these onnxruntime installs instead of its own."""
    spec = healthy.frameworks_side_by_side()
    for path in [p for p in spec if p.startswith((f"{ORT_SITE}/onnxruntime", f"{ORT_SITE}/numpy"))]:
        del spec[path]
    ort_env(spec, ORT_SITE, version, order if broken else ["onnxruntime-gpu"], removed if broken else (), py="311")
    return Machine(spec)


@case("onnxruntime-26996-cpu-and-gpu-packages")
def ort_26996(broken: bool) -> Machine:
    """onnxruntime 1.23.2 installed after onnxruntime-gpu 1.23.2 (a library depending on both): the CPU build's
    files win, CUDAExecutionProvider is not available."""
    return _ort(broken, "1.23.2", ["onnxruntime-gpu", "onnxruntime"])


@case("onnxruntime-6183-colab-both-packages")
def ort_6183(broken: bool) -> Machine:
    """onnxruntime-gpu and onnxruntime 1.6.0 both installed on Colab: only CPUExecutionProvider."""
    return _ort(broken, "1.6.0", ["onnxruntime-gpu", "onnxruntime"])


@case("animatediff-cli-206-onnxruntime-and-gpu-1.16.1")
def animatediff_206(broken: bool) -> Machine:
    """onnxruntime 1.16.1 (pulled by rembg) and onnxruntime-gpu 1.16.1 in one venv: 'Specified provider
    'CUDAExecutionProvider' is not in available provider names'."""
    return _ort(broken, "1.16.1", ["onnxruntime-gpu", "onnxruntime"])


@case("onnxruntime-3326-uninstalled-cpu-package-took-gpu-files")
def ort_3326(broken: bool) -> Machine:
    """onnxruntime-gpu installed over onnxruntime, then pip uninstall onnxruntime removed the files both listed:
    onnxruntime-gpu's package is left without its __init__.py and extension ('module 'onnxruntime' has no
    attribute 'InferenceSession'')."""
    return _ort(broken, "1.2.0", ["onnxruntime", "onnxruntime-gpu"], removed=["onnxruntime"])


# -- opencv-python variants: four distributions of one cv2 package ---------------------------------------------------

def cv2_files(flavor: str, version: str) -> Dict[str, Any]:
    new = tuple(int(x) for x in version.split(".")[:2]) >= (4, 5)
    so = "cv2/cv2.abi3.so" if new else "cv2/cv2.cpython-312-x86_64-linux-gnu.so"
    gui = not flavor.endswith("-headless")
    files = {"cv2/__init__.py": ("import importlib\nimport os\nimport sys\n\n__all__ = []\n\n"
                                 "def bootstrap():\n    from . import load_config_py3\n" * 20) if new else
             "from .cv2 import *\nfrom .data import *\n",
             so: healthy.elf(None, needed=["libc.so.6"] + (["libQt5Gui-c55b4ac8.so.5"] if gui else []),
                             runpath=["$ORIGIN/../opencv_python.libs"]),
             "cv2/data/__init__.py": "import os\nhaarcascades = os.path.join(os.path.dirname(__file__), '')\n",
             "cv2/data/haarcascade_frontalface_default.xml": "<?xml version=\"1.0\"?>\n<opencv_storage/>\n"}
    if new:
        files["cv2/config.py"] = "import os\nBINARIES_PATHS = [os.path.join(os.path.dirname(__file__), '..')]\n"
        files["cv2/load_config_py3.py"] = "import os\n"
        files["cv2/mat_wrapper/__init__.py"] = "__all__ = []\n" + f"# {flavor} {version}\n"
    return files


def cv2_env(spec: Spec, site: str, installs: Sequence[tuple]) -> None:
    """(distribution, version) installed in order: the later one's files over the earlier's."""
    for i, (flavor, version) in enumerate(installs):
        wheel(spec, site, flavor, version, cv2_files(flavor, version), ["numpy>=1.21.2"],
              tag="cp37-abi3-manylinux_2_17_x86_64", write=False)
    for flavor, version in installs:
        for rel, content in cv2_files(flavor, version).items():
            spec[f"{site}/{rel}"] = content
    ext(spec, site, "numpy", "1.26.4", "numpy/core", "_multiarray_umath.cpython-312-x86_64-linux-gnu.so")


def _cv2(broken: bool, installs: Sequence[tuple], keep: tuple, extra: Optional[Dict[str, Sequence[str]]] = None) -> Machine:
    spec = venv_machine()
    cv2_env(spec, VENV_SITE, installs if broken else [keep])
    for name, requires in (extra or {}).items():
        pure(spec, VENV_SITE, name, "1.4.21" if name == "albumentations" else "2.0.13",
             [r for r in requires if broken or keep[0] in r or "opencv" not in r])
    return Machine(spec)


@case("opencv-python-591-registermattype-mixed-cv2")
def opencv_591(broken: bool) -> Machine:
    """opencv-python 4.1.2.30 and opencv-python-headless 4.5.5.64 (pulled by tf-models-official) in one site:
    'cannot import name '_registerMatType' from 'cv2.cv2''."""
    return _cv2(broken, [("opencv-python", "4.1.2.30"), ("opencv-python-headless", "4.5.5.64")],
                ("opencv-python-headless", "4.5.5.64"))


@case("comfyui-impact-pack-395-cv2-mat-wrapper")
def impact_395(broken: bool) -> Machine:
    """The node pack installed opencv-python-headless next to the opencv-python other nodes use: 'partially
    initialized module 'cv2' has no attribute 'mat_wrapper''."""
    return _cv2(broken, [("opencv-python", "4.8.1.78"), ("opencv-python-headless", "4.9.0.80")],
                ("opencv-python", "4.8.1.78"))


@case("opencv-python-467-python-and-headless-conflict")
def opencv_467(broken: bool) -> Machine:
    """A library requiring opencv-python-headless installed next to opencv-python: both own cv2/."""
    return _cv2(broken, [("opencv-python", "4.5.4.60"), ("opencv-python-headless", "4.5.5.62")],
                ("opencv-python", "4.5.4.60"))


@case("albumentationsx-124-headless-over-opencv-python")
def albumentationsx_124(broken: bool) -> Machine:
    """pip install albumentationsx added opencv-python-headless 4.12.0.88 over opencv-python 4.12.0.88:
    cv2.imshow stops working."""
    return _cv2(broken, [("opencv-python", "4.12.0.88"), ("opencv-python-headless", "4.12.0.88")],
                ("opencv-python", "4.12.0.88"), {"albumentationsx": ["opencv-python-headless>=4.9.0.80", "numpy>=1.24.4"]})


@case("kohya-ss-1267-opencv-python-and-headless")
def kohya_1267(broken: bool) -> Machine:
    """requirements.txt asks for opencv-python and albumentations, which depends on opencv-python-headless: the
    later install overwrote cv2/."""
    return _cv2(broken, [("opencv-python", "4.7.0.68"), ("opencv-python-headless", "4.8.0.74")],
                ("opencv-python", "4.7.0.68"))


@case("sygil-webui-1808-opencv-module-conflicts")
def sygil_1808(broken: bool) -> Machine:
    """opencv-python-headless from requirements.txt, opencv-python from gfpgan/basicsr: one cv2, two owners."""
    return _cv2(broken, [("opencv-python-headless", "4.7.0.72"), ("opencv-python", "4.8.0.76")],
                ("opencv-python", "4.8.0.76"))


# -- a package built against NumPy 2's ABI says so: numpy>=2 ----------------------------------------------------------

OPENCV_4_12_REQUIRES = ['numpy<2.0; python_version < "3.9"', 'numpy<2.3.0,>=2; python_version >= "3.9"']


def _opencv_numpy(broken: bool, numpy_bad: str, numpy_good: str, headless: bool = True) -> Machine:
    spec = venv_machine()
    names = ["opencv-python"] + (["opencv-python-headless"] if headless else [])
    for name in names:  # opencv-python installed, then opencv-python-headless of the same release (identical files
        # but the GUI library: the later install's on disk)
        wheel(spec, VENV_SITE, name, "4.12.0.88", cv2_files(name, "4.12.0.88"), OPENCV_4_12_REQUIRES,
              tag="cp37-abi3-manylinux2014_x86_64", write=name == names[-1])
    ext(spec, VENV_SITE, "numpy", numpy_bad if broken else numpy_good, "numpy/core",
        "_multiarray_umath.cpython-312-x86_64-linux-gnu.so")
    return Machine(spec)


@case("opencv-python-1122-numpy2-build-with-numpy-1.26")
def opencv_1122(broken: bool) -> Machine:
    """opencv-python 4.12.0.88 is built against NumPy 2 (Requires-Dist numpy<2.3.0,>=2 on Python 3.9+); NumPy
    1.26.0 stayed installed."""
    return _opencv_numpy(broken, "1.26.0", "2.2.6", headless=False)


@case("comfyui-11724-numpy-2.4-over-opencv-pin")
def comfyui_11724(broken: bool) -> Machine:
    """numpy 2.4.0 installed over opencv-python 4.12.0.88's numpy<2.3.0,>=2 pin."""
    return _opencv_numpy(broken, "2.4.0", "2.2.6", headless=False)


# -- conda: pip over conda's files -----------------------------------------------------------------------------------

def conda_meta(spec: Spec, prefix: str, name: str, version: str, build: str, files: Dict[str, Any],
               depends: Sequence[str] = (), constrains: Sequence[str] = (), write: bool = True) -> None:
    """A conda package: its files (prefix-relative) and conda-meta JSON with files and paths_data (sha256, size)."""
    prefix = prefix.strip("/")
    if write:
        for rel, content in files.items():
            spec[f"{prefix}/{rel}"] = content
    spec[f"{prefix}/conda-meta/{name}-{version}-{build}.json"] = json.dumps({
        "name": name, "version": version, "build": build, "build_number": 0,
        "channel": "https://conda.anaconda.org/conda-forge", "subdir": "linux-64",
        "depends": list(depends), "constrains": list(constrains), "files": list(files),
        "paths_data": {"paths_version": 1, "paths": [
            {"_path": rel, "path_type": "hardlink", "sha256": hashlib.sha256(_b(c)).hexdigest(),
             "size_in_bytes": len(_b(c))} for rel, c in files.items()]},
        "requested_spec": name})


@case("conda-pack-35-pip-clobbered-conda-files")
def conda_pack_35(broken: bool) -> Machine:
    """pip installed cytoolz over conda's cytoolz 0.8.2 in a conda environment: conda-pack reports 'Files managed
    by conda were found to have been deleted/overwritten'."""
    spec = healthy.dlami_ubuntu2204_g5()
    prefix = "opt/conda/envs/pytorch"
    sp = "lib/python3.11/site-packages"
    conda_files = {f"{sp}/cytoolz/__init__.py": "from .itertoolz import *\n",
                   f"{sp}/cytoolz/itertoolz.cpython-311-x86_64-linux-gnu.so": healthy.elf(None, needed=["libc.so.6"]),
                   f"{sp}/cytoolz-0.8.2.dist-info/INSTALLER": "conda\n"}
    conda_meta(spec, prefix, "cytoolz", "0.8.2", "py311h5eee18b_0", conda_files,
               depends=["python >=3.11,<3.12.0a0", "toolz >=0.8.0"])
    if broken:
        for rel in conda_files:
            spec.pop(f"{prefix}/{rel}", None)
        wheel(spec, f"{prefix}/{sp}", "cytoolz", "0.12.3", {
            "cytoolz/__init__.py": "from .itertoolz import *\n__version__ = '0.12.3'\n",
            "cytoolz/itertoolz.cpython-311-x86_64-linux-gnu.so": healthy.elf(None, needed=["libpthread.so.0",
                                                                                           "libc.so.6"])},
              ["toolz>=0.8.0"], tag="cp311-cp311-manylinux_2_17_x86_64")
    else:
        spec[f"{prefix}/{sp}/cytoolz-0.8.2.dist-info/METADATA"] = "Metadata-Version: 2.1\nName: cytoolz\nVersion: 0.8.2\n"
    conda_meta(spec, prefix, "toolz", "0.12.1", "pyhd8ed1ab_0", {f"{sp}/toolz/__init__.py": "__version__ = '0.12.1'\n"})
    return Machine(spec)


@case("conda-3353-two-packages-one-bin-script")
def conda_3353(broken: bool) -> Machine:
    """Two conda packages each install bin/NAME: conda install silently overwrote the first one's script."""
    spec = healthy.dlami_ubuntu2204_g5()
    prefix = "opt/conda/envs/pytorch"
    conda_meta(spec, prefix, "fastq-tools", "0.8", "h5bf99c6_2", {"bin/fastq-grep": "#!/bin/sh\necho fastq-tools\n"},
               write=not broken)
    if broken:
        conda_meta(spec, prefix, "ngs-utils", "1.2", "py_0", {"bin/fastq-grep": "#!/usr/bin/env python\nprint('ngs')\n"})
    return Machine(spec)


@case("pytorch-cpu-feedstock-65-old-pytorch-cpu-beside-pytorch")
def pytorch_cpu_65(broken: bool) -> Machine:
    """conda-forge's old pytorch-cpu 1.1.0 (a full build, before it became a metapackage) solved in next to
    pytorch 1.9.0: both packages install site-packages/torch/."""
    spec = healthy.dlami_ubuntu2204_g5()
    prefix = "opt/conda/envs/allennlp"
    site = healthy.conda_env(spec, "/" + prefix, python="3.7.10", build="hffdb5ce_100_cpython")
    sp = "lib/python3.7/site-packages"

    def torch_files(version: str, build_tag: str) -> Dict[str, Any]:
        return {f"{sp}/torch/__init__.py": f"__version__ = '{version}'\n",
                f"{sp}/torch/version.py": f"__version__ = '{version}'\ncuda = None\n",
                f"{sp}/torch/_C.cpython-37m-x86_64-linux-gnu.so": healthy.elf(
                    None, needed=["libtorch_python.so", "libc.so.6"], runpath=["$ORIGIN/lib"]),
                f"{sp}/torch/lib/libtorch_python.so": healthy.elf("libtorch_python.so", needed=[
                    "libtorch_cpu.so" if version >= "1.9" else "libtorch.so", "libc.so.6"]),
                f"{sp}/torch-{version}.dist-info/INSTALLER": "conda\n",
                f"{sp}/torch-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n\n",
                f"{sp}/torch-{version}.dist-info/build_tag": build_tag}
    old = torch_files("1.1.0", "py37h6de7cb9_0")
    new = torch_files("1.9.0", "cpu_py37hc5e437f_1")
    if broken:
        conda_meta(spec, prefix, "pytorch-cpu", "1.1.0", "py37h6de7cb9_0", old,
                   depends=["python >=3.7,<3.8.0a0", "numpy >=1.14.6,<2.0a0", "libgcc-ng >=7.3.0"], write=True)
        for rel in [r for r in old if "dist-info" in r]:
            spec.pop(f"{prefix}/{rel}", None)  # the later install's dist-info is the one left
    else:
        conda_meta(spec, prefix, "pytorch-cpu", "1.9.0", "cpu_py37h1a3d4e5_1", {}, depends=["pytorch 1.9.0 cpu*"])
    conda_meta(spec, prefix, "pytorch", "1.9.0", "cpu_py37hc5e437f_1", new,
               depends=["python >=3.7,<3.8.0a0", "numpy >=1.19.5,<2.0a0", "libgcc-ng >=9.3.0", "libstdcxx-ng >=9.3.0"])
    conda_meta(spec, prefix, "numpy", "1.21.1", "py37h038b26d_0", {f"{sp}/numpy/__init__.py": "__version__ = '1.21.1'\n"},
               depends=["python >=3.7,<3.8.0a0"])
    del site
    return Machine(spec)


@case("pytorch-builder-958-tarball-without-its-cudatoolkit")
def pytorch_builder_958(broken: bool) -> Machine:
    """The smoke test installed the pytorch build's tarball directly (conda install PATH.tar.bz2 solves nothing):
    its depends cudatoolkit >=11.1,<11.2 was not met by the environment's cudatoolkit, and the next conda command
    found the environment inconsistent."""
    spec = healthy.dlami_ubuntu2204_g5()
    prefix = "opt/conda/envs/testenv"
    healthy.conda_env(spec, "/" + prefix, python="3.10.2", build="h12debd9_2_cpython")
    sp = "lib/python3.10/site-packages"
    conda_meta(spec, prefix, "cudatoolkit", "11.6.0" if broken else "11.1.74", "habf752d_9" if broken else "h6bb024c_0",
               {"lib/libcudart.so.11.0": healthy.elf("libcudart.so.11.0")}, depends=["__glibc >=2.17"])
    conda_meta(spec, prefix, "pytorch", "1.12.0.dev20220207", "py3.10_cuda11.1_cudnn8_0", {
        f"{sp}/torch/__init__.py": "__version__ = '1.12.0.dev20220207'\n",
        f"{sp}/torch/lib/libtorch_cuda.so": healthy.elf("libtorch_cuda.so", needed=["libcudart.so.11.0", "libc.so.6"],
                                                        runpath=["$ORIGIN/../../../.."])},
        depends=["blas * mkl", "cudatoolkit >=11.1,<11.2", "mkl >=2018", "ninja", "python >=3.10,<3.11.0a0",
                 "pytorch-mutex 1.0 cuda", "typing_extensions"])
    conda_meta(spec, prefix, "pytorch-mutex", "1.0", "cuda", {})
    for name, version, build in (("blas", "1.0", "mkl"), ("mkl", "2021.4.0", "h06a4308_640"), ("ninja", "1.10.2", "h06a4308_5"),
                                 ("typing_extensions", "4.1.1", "pyh06a4308_0")):
        conda_meta(spec, prefix, name, version, build, {})
    return Machine(spec)


@case("tensorflow-text-39-text-pinned-to-tf-2.0.0b0")
def tensorflow_text_39(broken: bool) -> Machine:
    """tensorflow-text 1.0.0b0 is built for (and pins) tensorflow==2.0.0b0; tensorflow 2.0.0b1 was installed over
    it. TF Text's ops link TensorFlow's C++ ABI, which changes between releases."""
    spec = venv_machine()
    tf = "2.0.0b1" if broken else "2.0.0b0"
    ext(spec, VENV_SITE, "tensorflow", tf, "tensorflow", "libtensorflow_framework.so.2",
        requires=["absl-py>=0.7.0", "numpy<2.0,>=1.16.0", "protobuf>=3.6.1"], needed=["libstdc++.so.6", "libc.so.6"],
        tag="cp36-cp36m-manylinux2010_x86_64",  # the 2.0 betas' tensorflow wheel is the CPU build
        extra={"tensorflow/python/platform/build_info.py": "is_rocm_build = False\nis_cuda_build = False\n"})
    ext(spec, VENV_SITE, "tensorflow-text", "1.0.0b0", "tensorflow_text/python/ops",
        "_normalize_ops.so", requires=["tensorflow==2.0.0b0"],
        needed=["libtensorflow_framework.so.2", "libstdc++.so.6", "libc.so.6"], tag="cp36-cp36m-manylinux1_x86_64")
    for n, v, m in (("absl-py", "0.7.1", "absl"), ("protobuf", "3.8.0", "google/protobuf")):
        pure(spec, VENV_SITE, n, v, module=m)
    ext(spec, VENV_SITE, "numpy", "1.16.4", "numpy/core", "_multiarray_umath.cpython-312-x86_64-linux-gnu.so")
    return Machine(spec)


@case("caikit-nlp-147-accelerate-too-old-for-transformers")
def caikit_147(broken: bool) -> Machine:
    """caikit-nlp pinned accelerate 0.18.0; transformers 4.31.0 checks accelerate>=0.20.3 at import wherever
    accelerate is installed (its Requires-Dist has the pin under the torch extra)."""
    spec = venv_machine()
    transformers_env(spec, VENV_SITE, "4.31.0", {"huggingface-hub": "<1.0,>=0.14.1",
                                                 "tokenizers": "!=0.11.3,<0.14,>=0.11.1", "safetensors": ">=0.3.1"},
                     {"huggingface-hub": "0.16.4", "tokenizers": "0.13.3", "safetensors": "0.3.2"})
    meta = f"{VENV_SITE}/transformers-4.31.0.dist-info/METADATA"
    spec[meta] = spec[meta].replace('Requires-Dist: torch; extra == "torch"\n',
                                    'Requires-Dist: torch!=1.12.0,>=1.9; extra == "torch"\n'
                                    'Requires-Dist: accelerate>=0.20.3; extra == "torch"\n')
    record = f"{VENV_SITE}/transformers-4.31.0.dist-info/RECORD"
    spec[record] = "".join(record_line("transformers-4.31.0.dist-info/METADATA", spec[meta])
                           if line.startswith("transformers-4.31.0.dist-info/METADATA,") else line + "\n"
                           for line in spec[record].splitlines())
    pure(spec, VENV_SITE, "accelerate", "0.18.0" if broken else "0.21.0",
         ["numpy>=1.17", "packaging>=20.0", "psutil", "pyyaml", "torch>=1.6.0"])
    pure(spec, VENV_SITE, "psutil", "5.9.5")
    return Machine(spec)
