"""One shape validator (dl_doctor.facts.shape): the facts contract's check (validate.check_schema) and the cut the
verify checks read their facts through (checks.verify.conform) are one walker over one JSON Schema subset."""

from __future__ import annotations

import math

import pytest

from dl_doctor.facts import fact_schema, shape
from dl_doctor.facts.contract import conform
from dl_doctor.facts.validate import InputError, check_schema

_MISSING = object()
NUM = float
# The verify checks' own schema before the facts contract declared it (checks/verify.py at 792138c): the reference the
# declared shape and the one cut must agree with.
_GPU_WATCH = {"index": int, "samples": int, "throttle": {"*": int}, "ecc_delta": {"corrected": NUM, "uncorrected": NUM},
              "xid": [int], "temperature_c": {"min": NUM, "max": NUM}, "slowdown_temp_c": NUM,
              "power_w": {"min": NUM, "max": NUM}, "power_limit_w": NUM, "sm_clock_mhz": {"min": NUM, "max": NUM},
              "max_sm_clock_mhz": NUM, "name": str, "uuid": str}
VERIFY_SHAPE = {
    "framework": str, "version": str, "cuda": str, "cudnn": int, "level": str, "python": str, "error": str,
    "no_gpu": str, "include_busy": bool, "errors": {"*": str}, "skipped": {"*": str}, "left_alone": {"*": str},
    "devices": [{"index": int, "cuda_index": int, "uuid": str, "name": str, "capability": str, "fp8": str,
                 "matmul": {"*": {"tflops": NUM, "seconds": NUM, "n": int, "iters": int}}, "conv": {"ok": bool},
                 "copy_gbps": {"h2d": NUM, "d2h": NUM}, "copy_pinned": bool}],
    "allreduce": {"gpus": [int], "bytes": int, "iters": int, "seconds": NUM, "algbw_gbps": NUM, "busbw_gbps": NUM,
                  "correct": bool},
    "pairs": [{"gpus": [int], "busbw_gbps": NUM, "correct": bool, "error": str}],
    "busbw_expectation": {"gbps": NUM, "via": str, "unverified": bool, "floor_gbps": NUM, "floor_ratio": NUM},
    "nvml_gpus": [{"index": int, "uuid": str, "name": str, "bus_id": str, "pcie": {"gen": int, "width": int}}],
    "watch": {"ran": bool, "reason": str, "interval_s": NUM, "gpus": [_GPU_WATCH], "xid_watch": str,
              "xid_unattributed": [int]},
    "dcgm": {"ran": bool, "reason": str, "command": str, "exit": int, "shape": str, "version": str,
             "runtime_error": str, "truncated": bool,
             "results": [{"category": str, "test": str, "gpu": str, "status": str, "messages": [str]}]},
    "dcgm_health": {"ran": bool, "reason": str, "command": str, "exit": int, "watches_off": bool, "overall": str,
                    "incidents": [{"entity": str, "system": str, "status": str, "message": str}]},
}


def _conform_before(value, sh):
    """checks.verify.conform as it was (the reference the one validator must agree with)."""
    if isinstance(sh, dict):
        if not isinstance(value, dict):
            return _MISSING
        pairs = ((str(k), _conform_before(v, sh["*"])) for k, v in value.items() if isinstance(k, (str, int))) \
            if "*" in sh else ((k, _conform_before(value[k], sub)) for k, sub in sh.items() if k in value)
        return {k: v for k, v in pairs if v is not _MISSING}
    if isinstance(sh, list):
        if not isinstance(value, list):
            return _MISSING
        return [x for x in (_conform_before(v, sh[0]) for v in value) if x is not _MISSING]
    if sh is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
        return value if ok and abs(value) < 1e15 else _MISSING
    if sh is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _MISSING
    return value if isinstance(value, sh) else _MISSING


ODD = [None, True, False, 0, -1, 7, 2 ** 70, 1.5, math.nan, math.inf, -math.inf, 1e15, -1e15, 9.99e14, "", "x",
       [], {}, [1, "a", None, 2.5, True], {"a": 1}, {1: "int key"}, {(1, 2): "tuple key"}]


def _values():
    yield from ODD
    yield {"framework": "torch", "version": 2, "cudnn": True, "errors": {"import": "x", "n": 3, 5: "five"},
           "devices": [{"index": 0, "matmul": {"bf16": {"tflops": math.nan, "seconds": 1, "n": "8"}}}, "junk",
                       {"index": True, "copy_gbps": {"h2d": 1e16, "d2h": 3.5}, "conv": {"ok": 1}}],
           "allreduce": {"gpus": [0, 1, "2", None], "busbw_gbps": -2.0, "correct": False},
           "watch": {"gpus": [{"throttle": {"hw_slowdown": 3, "x": 1.0}, "xid": [79, "79"]}], "ran": "yes"},
           "dcgm": {"results": [{"messages": ["a", 1, None]}], "exit": 1.0}, "extra": {"kept": False}}
    for v in ODD:
        yield {k: v for k in VERIFY_SHAPE}
        yield {"devices": [v, {"matmul": v, "conv": v}], "watch": {"gpus": [v]}, "errors": v}


def test_the_cut_of_the_declared_verify_facts_agrees_with_the_verify_conform_it_replaces():
    declared = fact_schema("verify")
    for value in _values():
        want = _conform_before(value, VERIFY_SHAPE)
        got = conform(value, declared)
        assert (got is shape.MISSING) == (want is _MISSING) and (want is _MISSING or repr(got) == repr(want)), value
        if want is not _MISSING:
            assert list(got) == list(want)  # the same key order: evidence and reports keep theirs


def test_the_contract_check_and_the_cut_judge_a_node_alike():
    sch = {"type": "object", "required": ["a"], "properties": {
        "a": {"type": ["integer", "null"], "minimum": 0, "maximum": 10},
        "b": {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}},
        "c": {"type": "number", "exclusiveMinimum": -1e15, "exclusiveMaximum": 1e15}}}
    ok = {"a": 3, "b": ["x", "y"], "c": 2.5}
    check_schema(ok, sch, "f.json")
    assert shape.cut(ok, sch) == ok
    for doc, message in [
        ({"a": "3"}, "f.json: a should be integer or null, not string"),
        ({"a": 11}, "f.json: a = 11 is above 10"),
        ({"a": -1}, "f.json: a = -1 is below 0"),
        ({"a": 1, "b": ["z"]}, "f.json: b[0] should be one of x, y"),
        ({"b": []}, "f.json: a is missing"),
        ({"a": 1, "c": 1e15}, "f.json: c = 1000000000000000.0 is not below 1000000000000000.0"),
        ({"a": 1, "c": math.nan}, "f.json: c = nan is not above -1000000000000000.0"),
    ]:
        with pytest.raises(InputError) as exc:
            check_schema(doc, sch, "f.json")
        assert str(exc.value) == message
    assert shape.cut({"a": 1, "b": ["z", "x"], "c": math.nan}, sch) == {"a": 1, "b": ["x"]}
    assert shape.cut({"b": []}, sch) is shape.MISSING  # what the contract refuses, the cut leaves out


def test_a_reader_cuts_by_type_only_and_never_keeps_null():
    """What the contract refuses on load (a range, an enum, a missing key) a reader of an unenforced fact keeps;
    null and non-finite numbers it drops."""
    node = {"type": "object", "required": ["a"], "properties": {
        "a": {"type": ["integer", "null"], "minimum": 0}, "s": {"type": "string", "enum": ["x"]},
        "n": {"type": ["number", "null"]}, "any": {}}}
    assert conform({"a": -5, "s": "y", "n": 2.5, "any": [1]}, node) == {"a": -5, "s": "y", "n": 2.5, "any": [1]}
    assert conform({"a": None, "n": math.inf, "any": None}, node) == {}
    assert conform(None, node) is shape.MISSING
    assert shape.reading_schema(node) is shape.reading_schema(node)  # derived once per declared node
