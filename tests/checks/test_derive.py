"""Verdicts derived from recorded facts (dl_doctor.facts.derive), never stored beside them."""

from __future__ import annotations

import pytest

from dl_doctor.facts.derive import torch_cpu_only


@pytest.mark.parametrize("torch, conda, cpu", [
    ({"version": "2.4.1+cu124", "cuda": "12.4"}, None, False),
    ({"version": "2.13.0+cpu", "cuda": None}, None, True),  # torch/version.py: cuda = None
    ({"version": "2.4.1+cpu", "cuda": "12.4"}, None, True),  # the version says so
    ({"version": "2.1.2", "cuda": "12.1"}, {"pytorch": "2.1.2 py3.10_cpu_0"}, True),  # conda's cpu build
    ({"version": "2.1.2", "cuda": "12.1"}, {"pytorch-mutex": "1.0 cpu"}, True),
    ({"version": "2.1.2", "cuda": "12.1"}, {"pytorch-mutex": "1.0 cuda"}, False),
    ({"version": "2.1.2", "cuda": "12.1"}, {"cpuonly": "2.0 0"}, True),
    ({"version": "2.1.2", "cuda": "12.1"}, {"pytorch": "2.1.2 py3.10_cuda12.1_cudnn8.9.2_0"}, False),
    # torch/version.py was not read (a distribution without its files): nothing says CPU-only
    ({"version": "2.4.1", "installer": "pip"}, None, False),
    # the derivation counts, not what an older facts file stored
    ({"version": "2.4.1+cu124", "cuda": "12.4", "cpu_only": True}, None, False),
    ({"version": "2.4.1+cpu", "cuda": None, "cpu_only": False}, None, True),
    (None, None, False),
    ("2.4.1", None, False),
    ({"version": 7, "cuda": "12.4"}, {"pytorch": 3}, False),  # malformed values cost nothing
])
def test_torch_cpu_only_is_derived_from_the_torch_and_conda_facts(torch, conda, cpu):
    assert torch_cpu_only(torch, conda) is cpu
