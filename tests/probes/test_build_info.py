"""A framework's build information as its files say it (never executed), and the matrix's fallbacks."""

from __future__ import annotations

from dl_doctor.facts.loading import dlopen_names
from dl_doctor.readers.consumers import read_build_info, release_major

TF = {"cuda": "cuda_version", "cudnn": "cudnn_version", "arch_list": "cuda_compute_capabilities"}


def test_tensorflow_build_info_with_its_arch_list():
    text = ("build_info = collections.OrderedDict([('cpu_compiler', '/dt9/usr/bin/gcc'), ('cuda_compute_capabilities', "
            "['sm_35', 'sm_50', 'compute_80']), ('cuda_version', '11.2'), ('cudnn_version', '8')])\n")
    assert read_build_info(text, TF) == {"arch_list": ["sm_35", "sm_50", "compute_80"], "cuda": "11.2", "cudnn": "8"}


def test_a_hostile_list_is_bounded():
    text = "cuda_compute_capabilities = [" + "'sm_80', " * 5000 + "]\n" + "x = [" + "[" * 100000 + "\n"
    out = read_build_info(text, TF)
    assert len(out.get("arch_list") or []) <= 64


def test_dlopen_per_release_and_cudnn_major():
    entry = {"dlopen": {"12": ["libcudart.so.12", "libcudnn.so.{cudnn_major}"],
                        "11": ["libcudart.so.11.0", "libcusolver.so.11"], "11.0": ["libcusolver.so.10"]}}
    assert dlopen_names(entry, {"cuda_major": 11, "build": {"cuda": "11.0"}}) == ["libcusolver.so.10"]
    assert dlopen_names(entry, {"cuda_major": 11, "build": {"cuda": "11.2"}}) == ["libcudart.so.11.0",
                                                                                 "libcusolver.so.11"]
    assert dlopen_names(entry, {"cuda_major": 12, "build": {"cuda": "12.3", "cudnn": "8"}}) == ["libcudart.so.12",
                                                                                               "libcudnn.so.8"]
    # a cuDNN the build does not state is unknown, not a missing libcudnn.so.N
    assert dlopen_names(entry, {"cuda_major": 12, "build": None}) == ["libcudart.so.12"]
    assert dlopen_names(entry, {"cuda_major": None}) == []


def test_the_cuda_major_of_a_release():
    since = {"2.1": 10, "2.4": 11, "2.15": 12}
    assert [release_major(since, v) for v in ("2.0.4", "2.3.0", "2.4.1", "2.14.1", "2.15.0", "2.21.0", "x")] == \
        [None, 10, 11, 11, 12, 12, None]
