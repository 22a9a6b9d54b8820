"""A stand-in for torch with CUDA devices, for running dl-doctor verify's workload through its GPU branch on a machine
without a GPU (tests/probes/test_verify.py). It computes nothing: it follows the calls the workload makes and answers
with the shapes torch would. fake_torch.json beside the torch directory says which devices there are and what fails
(the tests copy this tree and write it)."""

import json
import os
import time

__version__ = "2.7.1+cu126"
_CONF = json.load(open(os.path.join(os.path.dirname(__file__), "..", "fake_torch.json")))


class version:  # noqa: N801
    cuda = "12.6"


class _dtype:
    def __init__(self, name):
        self.name = name


float32, float16, bfloat16, uint8 = _dtype("float32"), _dtype("float16"), _dtype("bfloat16"), _dtype("uint8")
float8_e4m3fn = _dtype("float8_e4m3fn")


class Tensor:
    def __init__(self, value=1.0, device="cpu"):
        self.value, self.device, self.grad = value, device, None

    def to(self, dtype):
        return self

    def t(self):
        return self

    def __matmul__(self, other):
        broken = _CONF.get("matmul_error")
        if broken and self.device == broken:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        time.sleep(0.0005)
        return Tensor(self.value, self.device)

    def sum(self):
        return self

    def backward(self):
        pass

    def pin_memory(self):
        return self

    def copy_(self, other, non_blocking=False):
        return self

    def __getitem__(self, item):
        return self

    def __eq__(self, other):
        return Tensor(self.value == other, self.device)

    def all(self):
        return self

    def item(self):
        return self.value


def randn(*shape, device="cpu", requires_grad=False):
    t = Tensor(1.0, device)
    t.grad = Tensor(True, device)
    return t


def empty(size, dtype=None, device="cpu"):
    return Tensor(0, device)


def ones(numel, device="cpu"):
    return Tensor(1.0, device)


def tensor(value, device="cpu"):
    return Tensor(value, device)


def isfinite(t):
    return Tensor(True, t.device)


def _scaled_mm(a, b, scale_a=None, scale_b=None, out_dtype=None):
    return Tensor(1.0, a.device)


class _NS:
    pass


backends = _NS()
backends.cuda = _NS()
backends.cuda.matmul = _NS()
backends.cuda.matmul.allow_tf32 = False
backends.cudnn = _NS()
backends.cudnn.enabled = True
backends.cudnn.version = lambda: 90100

nn = _NS()
nn.functional = _NS()
nn.functional.conv2d = lambda x, w, padding=0: Tensor(1.0, x.device)

from torch import cuda  # noqa: E402,F401
