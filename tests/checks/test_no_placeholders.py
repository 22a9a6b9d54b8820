"""A finding never shows '?' where a name or a value is unknown (issue 25): it leaves the part out or says what is
not known. Each case gives a check the facts with that part missing."""

import re

import pytest

from dl_doctor import compat_matrix, testing
from dl_doctor.registry import load_registry

REGISTRY = {s.id: s for s in load_registry().checks}
MATRIX = compat_matrix.load(site=False)
PLACEHOLDER = re.compile(r"(^|[\s(\[,:])\?($|[\s)\],;:])")

CASES = [
    ("DLD-CLOUD-001", {"cloud": {"ec2": True},
                       "imds": {"life_cycle": "spot", "spot_instance_action": {"action": "stop"},
                                "scheduled_events": [{"Code": "system-reboot"}]}},
     "a spot interruption is scheduled: stop; scheduled system-reboot"),
    ("DLD-DISK-001", {"disks": {"volumes": [{"paths": ["/data"], "roles": ["mount"], "free_bytes": 1 << 30,
                                             "total_bytes": 1 << 40}]}},
     "low disk space: /data: only 1.0 GiB free"),
    ("DLD-GPU-008", {"gpu_pci": {"gpu_count": 1}, "kernel_log": {"xids": [{"code": 79, "bus": None, "line": "x"}]}},
     "Xid 79 x1 on a GPU the line does not name"),
    ("DLD-GPU-005", {"gpu_pci": {"gpu_count": 1}, "nvml": {"devices": [{"index": 0, "persistence_mode": False}]}},
     "persistence mode is off on 1 of 1 GPUs"),
    ("DLD-VER-003", {"verify": {"framework": "torch", "python": "/usr/bin/python3", "errors": {"allreduce": "boom"}}},
     "the all-reduce failed: boom"),
]


@pytest.mark.parametrize("check_id,facts,message", CASES, ids=[c[0] for c in CASES])
def test_unknown_parts_are_left_out_not_shown_as_question_marks(check_id, facts, message):
    finding = testing.run_case(REGISTRY[check_id], {"facts": facts}, MATRIX)
    assert message in finding.message, finding.message
    for text in (finding.message, finding.headline or "", " ".join(str(v) for v in finding.evidence.values())
                 if check_id == "DLD-GPU-005" else ""):
        assert not PLACEHOLDER.search(text), text
