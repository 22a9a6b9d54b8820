import os
import json

_CONF = json.load(open(os.path.join(os.path.dirname(__file__), "../..", "fake_torch.json")))
_GPUS = _CONF.get("gpus", [])


def is_available():
    return bool(_GPUS)


def device_count():
    return len(_GPUS)


class _Props:
    def __init__(self, g):
        self.name, self.major, self.minor = g["name"], g["cc"][0], g["cc"][1]
        self.uuid = g["uuid"]


def get_device_properties(i):
    return _Props(_GPUS[i])


def synchronize(device=None):
    pass
