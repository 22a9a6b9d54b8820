"""PyTorch's own reported failures (pytorch/pytorch, pytorch/vision, downstream trackers where the cause was torch's)."""

from __future__ import annotations

import healthy
from cases import Machine, case

PYTORCH_SITE = "opt/conda/envs/pytorch/lib/python3.11/site-packages"


def drop(spec, *prefixes: str) -> None:
    """Remove every path under these prefixes from a tree spec (a distribution's files and its dist-info)."""
    for path in [p for p in spec if p.startswith(prefixes)]:
        del spec[path]


@case("sdnext-3531-torchvision-for-newer-torch")
def sdnext_3531(broken: bool) -> Machine:
    """An xformers install took torch back to 2.4.1 and left torchvision 0.20.1, built for torch 2.5.1."""
    spec = healthy.dlami_ubuntu2204_g5()
    if broken:
        drop(spec, *(f"{PYTORCH_SITE}/{p}" for p in ("torch/", "torch-", "nvidia/", "nvidia_")))
        healthy.cu12_wheels(spec, PYTORCH_SITE, healthy.TORCH_241_CU124)
        healthy.torch(spec, PYTORCH_SITE, "2.4.1+cu124", "12.4", healthy.TORCH_241_CU124)
    return Machine(spec)
