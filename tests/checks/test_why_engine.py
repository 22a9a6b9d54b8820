"""`why`'s engine (dl_doctor.judge.why): the objects a text names, the machine's answer about each, a log read as a
whole (counts, first and last times, severity before recency), the related findings of a text that matches nothing,
and verdicts that never confirm two causes on the same evidence."""

from __future__ import annotations

import json

import pytest

from dl_doctor import compat_matrix
from dl_doctor.compat_matrix.signatures import match, rank
from dl_doctor.judge import why as w

MATRIX = compat_matrix.load(site=False)


def _kinds(text):
    return {(e["kind"], e["value"]) for e in w.entities(text)}


# -- entities ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("ImportError: libcudnn.so.8: cannot open shared object file: No such file or directory",
     {("soname", "libcudnn.so.8")}),
    ("/usr/lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.30' not found (required by "
     "/opt/conda/lib/python3.10/site-packages/torch/lib/libtorch_python.so)",
     {("symbol_version", "GLIBCXX_3.4.30"), ("soname", "libstdc++.so.6")}),
    ("libcusparse.so.12: undefined symbol: __nvJitLinkComplete_12_4, version libnvJitLink.so.12",
     {("symbol", "__nvJitLinkComplete_12_4"), ("soname", "libcusparse.so.12"), ("soname", "libnvJitLink.so.12")}),
    ("NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, name=python, An uncorrectable double bit error", {("xid", "48")}),
    ("NVIDIA H100 80GB HBM3 with CUDA capability sm_90 is not compatible with the current PyTorch installation.",
     {("arch", "sm_90")}),
    ("ModuleNotFoundError: No module named 'flash_attn'", {("module", "flash_attn")}),
    ("ERROR: No matching distribution found for torch==2.1.0+cu121", {("package", "torch")}),
    ("RuntimeError: cuDNN version incompatibility: PyTorch was compiled against (9, 1, 0) but linked against "
     "(9, 0, 0)", {("versions", "cudnn")}),
])
def test_entities_name_the_objects_a_text_names(text, expected):
    assert expected <= _kinds(text), w.entities(text)


def test_an_xid_entity_carries_its_gpu_address_normalised():
    found = [e for e in w.entities("kernel: NVRM: Xid (PCI:0000:3B:00): 79, pid='<unknown>', GPU has fallen off the bus.")
             if e["kind"] == "xid"]
    assert found == [{"kind": "xid", "value": "79", "bus": "0000:3b:00.0", "line": 1}]


def test_the_two_versions_of_a_version_check_are_read_in_their_roles():
    (e,) = [e for e in w.entities("Loaded runtime CuDNN library: 8.5.0 but source was compiled with: 8.6.0.") if
            e["kind"] == "versions"]
    assert (e["loaded"], e["built"]) == ("8.5.0", "8.6.0")
    (e,) = [e for e in w.entities("PyTorch was compiled against (9, 1, 0) but linked against (9, 0, 0)"
                                  " cuDNN") if e["kind"] == "versions"] or [None]  # noqa: E501 - the library first
    assert e is None or e["built"] == "9.1.0"


def test_entities_are_bounded_on_a_hostile_text():
    text = " ".join(f"lib{n}.so.1" for n in range(10000))
    assert len(w.entities(text)) == w.MAX_ENTITIES


# -- the machine's answer ------------------------------------------------------------------------------------------------

FACTS = {
    "nvml": {"devices": [
        {"index": 0, "name": "NVIDIA A100-SXM4-40GB", "bus_id": "00000000:10:1C.0", "serial": "1324120000001",
         "compute_capability": "8.0", "ecc_mode": True, "ecc_uncorrected_volatile": 3,
         "remapped_rows": {"uncorrectable": 1, "pending": True, "failure": False}},
        {"index": 1, "name": "NVIDIA A100-SXM4-40GB", "bus_id": "00000000:10:1D.0", "compute_capability": "8.0"}]},
    "kernel_log": {"source": "kern.log", "xids": [
        {"code": 48, "bus": "0000:10:1c", "line": "NVRM: Xid (PCI:0000:10:1c): 48, pid=7, name=python, DBE"},
        {"code": 48, "bus": "0000:10:1c", "line": "NVRM: Xid (PCI:0000:10:1c): 48, pid=7, name=python, DBE"}]},
}


def test_an_xid_is_asked_about_the_gpu_at_its_address_and_this_boots_record():
    answers = w.ask_xid(48, "0000:10:1c.0", FACTS, MATRIX)
    text = "\n".join(answers)
    assert "Double-bit ECC" in answers[0]
    assert "NVIDIA A100-SXM4-40GB" in text and "serial 1324120000001" in text
    assert "3 uncorrectable ECC errors since the driver loaded" in text and "row remap waits" in text
    assert "holds Xid 48 on 0000:10:1c.0 2 time(s)" in text
    other = "\n".join(w.ask_xid(48, "0000:90:1c.0", FACTS, MATRIX))
    assert "no GPU of this machine sits at 0000:90:1c.0" in other and "holds no Xid 48 on 0000:90:1c.0" in other


LOADING = {"version": 1, "environments": [{"prefix": "/opt/conda", "name": "base", "consumers": [
    {"distribution": "torch", "version": "2.3.1", "cuda_major": 12,
     "libraries": [{"soname": "libcudnn.so.9", "path": "/usr/local/cuda/lib64/libcudnn.so.9.0.0",
                    "via": "LD_LIBRARY_PATH", "verdict": "older",
                    "reason": "9.0.0 is older than the 9.1.0 torch was built with",
                    "env_copy": "/opt/conda/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9"}],
     "missing": [{"soname": "libnccl.so.2", "needed_by": "libtorch_cuda.so", "looked_in": ["/usr/local/cuda/lib64"],
                  "in_wheels": "/opt/conda/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"}],
     "unmet_versions": [{"object": "libcusparse.so.12", "version": "libnvJitLink.so.12",
                         "provider": "libnvJitLink.so.12", "file": "/usr/local/cuda-12.1/lib64/libnvJitLink.so.12"}]}]}]}
ENV_FACTS = {"python_envs": {"environments": [{"prefix": "/opt/conda", "name": "base", "python_version": "3.11",
                                               "distributions": {"torch": "2.3.1", "numpy": "2.0.1"}}]},
             "os": {"id": "ubuntu", "version_id": "22.04"}}


def test_a_soname_is_asked_which_copy_each_environment_loads():
    (line,) = w.ask_soname("libcudnn.so.9", ENV_FACTS, LOADING)
    assert line.startswith("base: torch 2.3.1 loads libcudnn.so.9 from /usr/local/cuda/lib64/libcudnn.so.9.0.0 "
                           "(found via LD_LIBRARY_PATH): older (9.0.0 is older")
    assert "environment's own copy is /opt/conda" in line
    (miss,) = w.ask_soname("libnccl.so.2", ENV_FACTS, LOADING)
    assert "cannot load libnccl.so.2" in miss and "where the loader does not look" in miss
    assert w.ask_soname("libcublas.so.12", ENV_FACTS, LOADING) == []


def test_ask_answers_each_entity_it_can_and_leaves_out_the_rest():
    text = ("libcusparse.so.12: undefined symbol: __nvJitLinkComplete_12_4, version libnvJitLink.so.12\n"
            "ModuleNotFoundError: No module named 'numpy'")
    answers = {(a["entity"]["kind"], a["entity"]["value"]): a["answers"] for a in
               w.ask(w.entities(text), ENV_FACTS, LOADING, MATRIX)}
    unmet = ("libcusparse.so.12 needs libnvJitLink.so.12 from libnvJitLink.so.12, which the copy that loads "
             "(/usr/local/cuda-12.1/lib64/libnvJitLink.so.12) does not define")
    for soname in ("libnvJitLink.so.12", "libcusparse.so.12"):  # the one that needs it and the one that lacks it
        assert any(unmet in x for x in answers[("soname", soname)]), answers
    # a soname no environment loads or needs is said to be so, not guessed at
    (none,) = w.ask(w.entities("libcufft.so.11: cannot open shared object file"), ENV_FACTS, LOADING, MATRIX)
    assert none["answers"] == ["none of the 1 Python environment(s) found here loads or needs libcufft.so.11: the "
                               "error comes from another environment (--python PATH names it) or another machine"]
    assert answers[("module", "numpy")] == ["base (Python 3.11) has numpy 2.0.1"]
    assert w.ask(w.entities(text), None, None, MATRIX) == []  # text alone: nothing to ask


def test_a_hostile_facts_file_costs_only_its_answers():
    bad = {"nvml": {"devices": "not a list"}, "kernel_log": {"xids": [{"code": "x"}, 7]},
           "python_envs": {"environments": [None, {"prefix": 3, "distributions": ["a"]}]}}
    out = w.ask(w.entities("NVRM: Xid (PCI:0000:10:1c): 48, pid=7\nNo module named 'torch'"), bad,
                {"environments": [None, {"consumers": [None, {"libraries": [None]}]}]}, MATRIX)
    assert [a["entity"]["kind"] for a in out] == ["xid"]


# -- a log read as a whole --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("line,when", [
    ("Dec  1 10:05:00 ip-10-0-0-1 kernel: NVRM: Xid", "Dec 01 10:05:00"),
    ("2026-12-01T10:05:00.123456+00:00 ip kernel: NVRM", "2026-12-01T10:05:00+00:00"),
    ("[ 4242.123456] NVRM: Xid (PCI:0000:3b:00): 48", 4242.123456),
    ("[Tue Dec  1 10:05:00 2026] NVRM: Xid", "2026-12-01T10:05:00"),
    ("2026-12-01 10:05:00,123 - root - ERROR - CUDA error", "2026-12-01T10:05:00"),
    ("RuntimeError: CUDA error: out of memory", None),
])
def test_line_times(line, when):
    assert w.line_time(line) == when


TAINT = "nvidia: module verification failed: signature and/or required key missing - tainting kernel"


def test_a_log_counts_each_distinct_match_with_its_first_and_last_time_and_a_fatal_xid_outranks_a_taint_note():
    log = "\n".join([
        "[   12.000001] nvidia: loading out-of-tree module taints kernel.",
        f"[   12.000002] {TAINT}",
        "[ 4242.500000] NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, name=python, An uncorrectable double bit error",
        "[ 4242.600000] NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, name=python, An uncorrectable double bit error",
        "[ 4300.000000] NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, name=python, An uncorrectable double bit error",
        "[ 4300.100000] NVRM: Xid (PCI:0000:3b:00): 45, pid=1234, name=python, Ch 00000008",
        f"[ 4400.000000] {TAINT}",  # a later taint note (a module reloaded) is still below the Xids
    ])
    events = w.log_events(log, MATRIX.signatures(), MATRIX)
    first = events[0]
    assert (first["signature"], first["severity"], first["count"]) == ("xid-48", "fail", 3)
    assert (first["first"], first["last"], first["first_line"], first["last_line"]) == (4242.5, 4300.0, 3, 5)
    assert first["gpus"] == ["0000:3b:00.0"] and [x["n"] for x in first["lines"]] == [3, 4, 5]
    by_id = {e["signature"]: e for e in events}
    assert by_id["xid-45"]["severity"] == "info"
    taint = [e for e in events if any(x["text"].endswith("tainting kernel") for x in e["lines"])]
    assert taint and all(SEV[e["severity"]] > SEV["fail"] for e in taint), taint
    assert events.index(by_id["xid-48"]) < min(events.index(e) for e in taint)
    json.dumps([w.public_event(e) for e in events])  # the events are JSON as they are


SEV = w.SEVERITY_ORDER


def test_a_log_event_counts_a_line_once_and_a_log_of_near_misses_costs_its_bound():
    log = "\n".join(["Bus error (core dumped)"] * 3 + ["x" * 100] * 10)
    events = [e for e in w.log_events(log, MATRIX.signatures(), MATRIX)]
    assert events and all(e["count"] == 3 for e in events if e["lines"][0]["n"] == 1)
    hostile = ("NVRM: Xid " * 200000)[: 1 << 20]
    assert w.log_events(hostile, MATRIX.signatures(), MATRIX) == []


# -- no dead ends ------------------------------------------------------------------------------------------------------------

FINDINGS = [
    {"id": "DLD-MEM-001", "status": "fail", "title": "/dev/shm is large enough", "message": "/dev/shm is 64 MB",
     "evidence": {"mounts./dev/shm": 67108864}, "fix": {"summary": "docker run --shm-size=16g"}},
    {"id": "DLD-PY-004", "status": "fail", "title": "CUDA libraries are not shadowed",
     "message": "torch in base: libcudnn.so.9 loads from /usr/local/cuda/lib64 (found via LD_LIBRARY_PATH)",
     "evidence": {"LD_LIBRARY_PATH": "/usr/local/cuda/lib64"}, "fix": {"summary": "unset LD_LIBRARY_PATH"}},
    {"id": "DLD-SYS-002", "status": "warn", "title": "CPU frequency governor", "message": "powersave", "evidence": {}},
    {"id": "DLD-GPU-001", "status": "pass", "title": "GPUs", "message": "8 GPUs", "evidence": {}},
]


def test_a_text_that_matches_nothing_gets_the_findings_that_bear_on_it_first():
    text = "my training script dies at step 3 when it opens libcudnn.so.9 from the system CUDA"
    related = w.related_findings(text, w.entities(text), FINDINGS)
    assert [r["id"] for r in related] == ["DLD-PY-004", "DLD-MEM-001", "DLD-SYS-002"]
    assert "libcudnn.so.9" in related[0]["shared"] and related[0]["score"] > related[1]["score"]
    assert all(r["status"] != "pass" for r in related)
    assert w.related_findings(text, [], [f for f in FINDINGS if f["status"] == "pass"]) == []


def test_text_alone_gets_the_nearest_signatures_as_possibilities():
    near = w.nearest_signatures("nvidia-smi couldn't talk to the nvidia driver kernel module",
                                MATRIX.signatures(), MATRIX.causes())
    assert near and near[0]["signature"] == "nvidia-smi-no-driver", near
    assert w.nearest_signatures("the weather is lovely today", MATRIX.signatures(), MATRIX.causes()) == []


# -- verdicts ----------------------------------------------------------------------------------------------------------------

def _f(id_, status, message="", fix=None):
    return {"id": id_, "status": status, "message": message, "fix": {"summary": fix, "commands": ["cmd"]} if fix else None}


def test_two_causes_decided_by_one_failing_check_are_not_both_confirmed():
    text = "Failed to initialize NVML: Driver/library version mismatch"
    plain = {"DLD-DRV-003": _f("DLD-DRV-003", "fail", "Driver/library version mismatch: the loaded kernel module is "
                                                        "535.104.05, the user-space driver is 550.54.15")}
    ranked = rank(match(text, MATRIX.signatures()), MATRIX.causes(), plain)
    verdicts = {c["id"]: c["verdict"] for c in ranked}
    assert list(verdicts.values()).count("confirmed") <= 1, verdicts
    # the finding's fix says which: reboot (the module on disk already matches) or rebuild it first
    reboot = {"DLD-DRV-003": _f("DLD-DRV-003", "fail", plain["DLD-DRV-003"]["message"],
                                "Reboot so the module matching the user space is loaded (or reload the modules).")}
    ranked = rank(match(text, MATRIX.signatures()), MATRIX.causes(), reboot)
    assert [c["id"] for c in ranked if c["verdict"] == "confirmed"] == ["driver-upgraded-not-rebooted"]
    assert ranked[0]["fix"].startswith("Reboot so the module") and ranked[0]["commands"] == ["cmd"]
    assert ranked[0]["fix_from"] == "DLD-DRV-003"
    rebuild = {"DLD-DRV-003": _f("DLD-DRV-003", "fail", plain["DLD-DRV-003"]["message"],
                                 "The module on disk for 4.18.0-513 is still 535.104.05: rebuild it for 550.54.15 first")}
    ranked = rank(match(text, MATRIX.signatures()), MATRIX.causes(), rebuild)
    assert [c["id"] for c in ranked if c["verdict"] == "confirmed"] == ["kmod-for-other-kernel"]
    assert {c["id"]: c["verdict"] for c in ranked}["driver-upgraded-not-rebooted"] == "possible"


def test_causes_the_evidence_cannot_tell_apart_are_likely_and_name_each_other():
    causes = {"a": {"id": "a", "summary": "A", "fix": "fa", "checks": ["X"]},
              "b": {"id": "b", "summary": "B", "fix": "fb", "checks": ["X"]},
              "c": {"id": "c", "summary": "C", "fix": "fc", "checks": ["X", "Y"]}}
    from dl_doctor.compat_matrix.signatures import Match, compile_pattern

    m = [Match({"id": "s", "causes": ["a", "b"]}, compile_pattern("s"), "s")]
    ranked = rank(m, causes, {"X": _f("X", "fail", "broken")})
    assert {c["id"]: (c["verdict"], c.get("ambiguous_with")) for c in ranked} == {"a": ("likely", ["b"]),
                                                                                  "b": ("likely", ["a"])}
    # more failing checks point at c: c is confirmed, a only likely
    m = [Match({"id": "s", "causes": ["a", "c"]}, compile_pattern("s"), "s")]
    ranked = rank(m, causes, {"X": _f("X", "fail"), "Y": _f("Y", "fail")})
    assert [(c["id"], c["verdict"]) for c in ranked] == [("c", "confirmed"), ("a", "likely")]
    # a pass argues against; a skip does not
    ranked = rank(m, causes, {"X": _f("X", "pass", "fine"), "Y": _f("Y", "skip")})
    assert {c["id"]: c["verdict"] for c in ranked} == {"a": "unlikely", "c": "unlikely"}
    ranked = rank(m, causes, {"X": _f("X", "skip"), "Y": _f("Y", "skip")})
    assert {c["id"]: c["verdict"] for c in ranked} == {"a": "possible", "c": "possible"}


def test_a_log_line_counts_for_its_most_specific_signature_and_corrected_pcie_errors_are_notes():
    log = "\n".join([
        "[ 100.0] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "[ 101.0] pcieport 0000:00:03.1: AER: Corrected error received: 0000:3b:00.0",
        "[ 101.1] pcieport 0000:00:03.1: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
        "[ 102.0] pcieport 0000:00:03.1: AER: Uncorrected (Fatal) error received: 0000:3b:00.0"])
    events = {e["signature"]: e for e in w.log_events(log, MATRIX.signatures(), MATRIX)}
    assert events["xid-79"]["count"] == 1 and "fallen-off-bus" not in events  # the Xid line is the Xid's
    assert events["pcie-aer-corrected"]["severity"] == "info" and events["pcie-aer-corrected"]["count"] == 2
    assert events["pcie-aer"]["count"] == 1 and events["pcie-aer"]["lines"][0]["n"] == 4
