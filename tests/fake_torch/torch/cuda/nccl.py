import json
import os
import time

_CONF = json.load(open(os.path.join(os.path.dirname(__file__), "../..", "fake_torch.json")))


def all_reduce(tensors):
    devices = sorted(int(t.device.split(":")[1]) for t in tensors)
    if devices in _CONF.get("broken_pairs", []):
        raise RuntimeError("NCCL error: unhandled system error")
    slow = any(d in _CONF.get("slow_gpus", []) for d in devices)
    time.sleep(0.02 if slow else 0.0005)
    for t in tensors:
        t.value = len(tensors)
