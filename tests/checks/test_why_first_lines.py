"""The curated signature base against real first error lines (tests/fixtures/why_first_lines.json): from the text
alone the expected cause ranks first (or the expected signature matches first), and healthy log lines match no
fail-severity signature. Lines only the status-code catalogs or the Xid table answer (``by: catalog``) must get a
first cause that names their concept. Every line is ranked as `why` ranks it (curated base, catalogs, Xid table)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dl_doctor import compat_matrix
from dl_doctor.compat_matrix.signatures import match, rank

HERE = Path(__file__).parents[1]
LINES = json.loads((HERE / "fixtures" / "why_first_lines.json").read_text())["lines"]
MATRIX = compat_matrix.load(site=False)
SIGS = MATRIX.signatures()
OWN = [e for e in LINES if not e.get("by")]


def _diagnose(text):
    """What `why --text-only` ranks: the curated base, the status-code catalogs and the Xid table together."""
    from dl_doctor.judge import why as w

    signatures, causes = w.base(MATRIX)
    matches = w.xid_matches(text, MATRIX) + w.narrow(match(text, signatures), text)
    for m in matches:
        if m.signature.get("xid"):
            code = m.signature["xid"]["code"]
            causes[f"xid-{code}"] = w.xid_cause(code, MATRIX.xid(code))
    return matches, rank(matches, causes)


def _first(text):
    matches, causes = _diagnose(text)
    return (matches[0].signature["id"] if matches else None), (causes[0]["id"] if causes else None)


def test_the_corpus_is_large_real_and_well_formed():
    assert len(LINES) >= 120
    sigs = {s["id"] for s in SIGS}
    causes = MATRIX.causes()
    for e in LINES:
        assert e["source"].startswith("https://"), e
        assert e["text"].strip(), e
        if e.get("by"):
            assert e["by"] == "catalog" and e.get("concept"), e
            continue
        assert ("expect" in e) != ("signature" in e), e
        assert e.get("expect") in causes if "expect" in e else e["signature"] in sigs, e
    texts = [e["text"] for e in LINES]
    assert len(set(texts)) == len(texts)
    # the texts the issue names are all here
    for needle in ("uncorrectable ECC error encountered", "an illegal memory access was encountered",
                   "NVRM: Xid (PCI:0000:3b:00): 48", "CUDNN_STATUS_NOT_INITIALIZED", "CUDNN_STATUS_INTERNAL_ERROR",
                   "compiled using NumPy 1.x cannot be run in", "Found no NVIDIA driver on your system"):
        assert any(needle in t for t in texts), needle


def test_the_expected_cause_or_signature_comes_first_from_the_text_alone():
    misses = []
    for e in OWN:
        sig, cause = _first(e["text"])
        got = sig if "signature" in e else cause
        want = e.get("signature") or e.get("expect")
        if got != want:
            misses.append((e["text"][:90], want, sig, cause))
    assert len(misses) <= len(OWN) // 20, "\n".join(map(str, misses))


def test_every_area_of_the_issue_is_covered():
    areas = {
        "nccl": ["nccl-cuda-failure", "nccl-ibv-reg-mr", "nccl-socket-connect-failed", "nccl-network-not-found",
                 "nccl-shm", "nccl-unhandled-system-error", "torch-nccl-watchdog-timeout", "nccl-no-socket-interface"],
        "nvrm": ["module-signature", "module-signature-taint", "fallen-off-bus", "rminit-failed",
                 "nvrm-pci-region-invalid", "nvrm-gpu-not-supported-branch", "nvrm-gpu-needs-open-modules"],
        "container": ["ncc-load-nvml-failed", "docker-no-gpu-driver", "cdi-unresolvable", "oci-hook-failed",
                      "k8s-insufficient-gpu", "ncc-requirement-cuda", "nvml-unknown-error"],
        "frameworks": ["torch-no-nvidia-driver", "cudnn-incompatibility", "arch-not-compatible", "torch-nccl-error",
                       "torch-libtorch-cuda-missing", "tf-could-not-load", "tf-cannot-dlopen-gpu", "tf-trt-not-found",
                       "jax-backend-init-failed", "jax-cuda-jaxlib-missing", "xla-dnn-init-failed",
                       "ort-cuda-provider-load-failed", "ort-cuda-provider-unavailable", "cupy-failed-to-load",
                       "ct2-library-not-found", "ptxas-unknown-arch", "triton-no-ldconfig", "python-h-missing",
                       "inductor-gcc-failed"],
        "loader": ["cannot-open-shared-object", "glibc-missing", "glibcxx-missing", "undefined-symbol",
                   "loader-wrong-elf-class", "loader-static-tls", "numpy2-abi", "numpy-multiarray-import"],
        "installers": ["pip-resolution-impossible", "pip-no-matching-distribution", "pip-unsupported-wheel",
                       "conda-unsatisfiable", "conda-no-cuda-virtual-package"],
        "distributed": ["c10d-store-timeout", "torchrun-rendezvous-timeout", "torchrun-child-failed",
                        "torchrun-child-sigkill"],
    }
    hit = {s for e in OWN for s in (m.signature["id"] for m in match(e["text"], SIGS))}
    missing = {area: [s for s in ids if s not in hit] for area, ids in areas.items()}
    assert not any(missing.values()), missing


def test_log_signatures_carry_a_severity_and_every_new_signature_cites_a_source():
    for sig in SIGS:
        if {"kernel-log", "journal"} & set(sig["where"]):
            assert sig.get("severity") in ("fail", "warn", "info"), sig["id"]
        assert sig.get("source"), sig["id"]
    urls = MATRIX.source_urls(*SIGS)
    assert all(u.startswith("https://") for u in urls), [u for u in urls if not u.startswith("https://")]


# -- precision: healthy lines -------------------------------------------------------------------------------------

HEALTHY = [
    "[    4.812233] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.86.15  Fri Jan 24 08:34:51 UTC 2025",
    "[    4.812233] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  (dvs-builder@U16-I3-B07-4-1)",
    "[    4.805101] nvidia-nvlink: Nvlink Core is being initialized, major device number 508",
    "[    4.991020] nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  570.86.15  Fri Jan 24 08:16:13 UTC 2025",
    "[    5.002211] [drm] [nvidia-drm] [GPU ID 0x00000100] Loading driver",
    "[    5.112002] nvidia_uvm: module uses symbols nvUvmInterfaceDisableAccessCntr from proprietary module nvidia, inheriting taint.",
    "[    4.770002] nvidia: module license 'NVIDIA' taints kernel.",
    "[    4.770004] Disabling lock debugging due to kernel taint",
    "[    4.771305] nvidia: module verification failed: signature and/or required key missing - tainting kernel",
    "systemd[1]: Started NVIDIA Persistence Daemon.",
    "nvidia-persistenced[1432]: Started (1432)",
    "nvidia-persistenced[1432]: device 0000:3b:00.0 - persistence mode enabled.",
    "nv-fabricmanager[2211]: Successfully configured all the available NVSwitches to route GPU NVLink traffic.",
    "systemd[1]: Started NVIDIA fabric manager service.",
    "node1:2345:2345 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.12<0>",
    "node1:2345:2345 [0] NCCL INFO NET/Plugin: Loaded net plugin Libfabric (v8)",
    "node1:2345:2345 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)",
    "node1:2345:2400 [0] NCCL INFO Channel 00/32 :    0   1   2   3   4   5   6   7",
    "node1:2345:2400 [0] NCCL INFO Connected all rings",
    "node1:2345:2400 [0] NCCL INFO comm 0x55d0c7a0 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 10100 commId 0x3f2a - Init COMPLETE",
    "node1:2345:2400 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0",
    "node1:2345:2400 [0] NCCL INFO cudaDriverVersion 12080",
    "Collecting torch==2.5.1\n  Downloading torch-2.5.1-cp311-cp311-manylinux1_x86_64.whl (906.4 MB)\nInstalling collected packages: nvidia-cudnn-cu12, torch\nSuccessfully installed nvidia-cudnn-cu12-9.1.0.70 torch-2.5.1",
    "Requirement already satisfied: numpy in ./venv/lib/python3.11/site-packages (2.1.3)",
    "Looking in indexes: https://download.pytorch.org/whl/cu124",
    "I tensorflow/core/common_runtime/gpu/gpu_device.cc:1928] Created device /job:localhost/replica:0/task:0/device:GPU:0 with 78910 MB memory:  -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:19:00.0, compute capability: 9.0",
    "I tensorflow/stream_executor/platform/default/dso_loader.cc:53] Successfully opened dynamic library libcudart.so.11.0",
    "I tensorflow/core/platform/cpu_feature_guard.cc:182] This TensorFlow binary is optimized to use available CPU instructions in performance-critical operations.",
    "INFO:torch.distributed.elastic.agent.server.api:[default] Starting worker group",
    "[2024-05-01 10:11:12,345] torch.distributed.run: [WARNING] Setting OMP_NUM_THREADS environment variable for each process to be 1 in default",
    "Epoch 3/10: 100%|██████████| 1563/1563 [02:11<00:00, 11.9it/s, loss=0.412]",
    "torch 2.5.1+cu124 CUDA available: True, devices: 8, cuDNN 90100",
    "Status: Downloaded newer image for nvcr.io/nvidia/pytorch:24.05-py3",
    "NVIDIA-SMI 570.86.15              Driver Version: 570.86.15      CUDA Version: 12.8",
    "kubelet: Successfully pulled image \"nvcr.io/nvidia/k8s-device-plugin:v0.17.0\"",
    "I0315 10:21:33.200000 1 main.go:317] Starting GRPC server for 'nvidia.com/gpu'",
    "I0315 10:21:33.200000 1 server.go:165] Registered device plugin for 'nvidia.com/gpu' with Kubelet",
    "ldconfig -p | grep libcuda\n\tlibcuda.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcuda.so.1",
    "[   10.241103] NVRM: Persistence mode is deprecated and will be removed in a future release. Please use nvidia-persistenced instead.",
    # nvidia-smi -q on a healthy A100/H100: the section header is not a pending remap
    "    Remapped Rows\n        Correctable Error                 : 0\n        Uncorrectable Error               : 0\n"
    "        Pending                           : No\n        Remapping Failure Occurred        : No",
]


@pytest.mark.parametrize("line", HEALTHY, ids=[f"healthy-{i}" for i in range(len(HEALTHY))])
def test_a_healthy_line_matches_no_fail_or_warn_signature(line):
    loud = [(m.signature["id"], m.signature.get("severity")) for m in match(line, SIGS)
            if m.signature.get("severity") in ("fail", "warn")]
    assert not loud, loud


def test_the_taint_note_gives_only_the_info_signature_and_the_refusal_is_a_failure():
    taint = "[    4.771305] nvidia: module verification failed: signature and/or required key missing - tainting kernel"
    got = [(m.signature["id"], m.signature.get("severity")) for m in match(taint, SIGS)]
    assert got == [("module-signature-taint", "info")]
    top = rank(match(taint, SIGS), MATRIX.causes())[0]
    assert top["id"] == "module-loaded-tainted" and "Not a failure" in top["summary"]
    refused = "modprobe: ERROR: could not insert 'nvidia': Key was rejected by service"
    m = match(refused, SIGS)[0]
    assert m.signature["id"] == "module-signature" and m.signature["severity"] == "fail"
    assert rank(match(refused, SIGS), MATRIX.causes())[0]["id"] == "secure-boot-rejects-module"


def test_healthy_lines_match_no_signature_with_a_cause_at_all_except_info_ones():
    """Stronger than fail/warn: a healthy line is not even a 'possible' cause (info signatures say 'not a failure')."""
    noisy = []
    for line in HEALTHY:
        for m in match(line, SIGS):
            if m.signature.get("severity") != "info":
                noisy.append((line[:60], m.signature["id"]))
    assert not noisy, noisy


def test_an_xid_on_pci_bus_79_is_not_xid_79():
    """'Xid * 79' read the bus number (or a pid) as the Xid code: an application Xid 13 on the GPU at 0000:79:00 was
    'the GPU fell off the bus'."""
    line = "NVRM: Xid (PCI:0000:79:00): 13, pid=1279, name=python, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0)"
    assert "fallen-off-bus" not in [m.signature["id"] for m in match(line, SIGS)]
    line = "NVRM: Xid (PCI:0000:74:00): 31, pid=7474, name=python, Ch 00000008, intr 00000000. MMU Fault"
    assert "nvlink-error" not in [m.signature["id"] for m in match(line, SIGS)]
    assert [m.signature["id"] for m in match("NVRM: Xid (PCI:0000:a1:00): 79, pid='<unknown>', name=<unknown>, "
                                               "GPU has fallen off the bus.", SIGS)][:1] == ["fallen-off-bus"]


def test_an_nvcc_compile_error_is_not_a_full_tmp():
    """Every nvcc diagnostic names its /tmp/tmpxft_* file: only with 'No space left on device' is it a full disk."""
    line = '/tmp/tmpxft_00003f2a_00000000-6_kernel.cudafe1.cpp(12): error: identifier "foo" is undefined'
    assert not match(line, SIGS)
    full = "nvcc error   : '/tmp/tmpxft_00003f2a_00000000-6_kernel.cudafe1.cpp': No space left on device"
    assert rank(match(full, SIGS), MATRIX.causes())[0]["id"] == "tmp-full"


def test_the_healthy_lines_as_one_log_match_only_info_signatures():
    """Gaps ('*') span lines: joined, the healthy lines must still match nothing that reads as a problem."""
    loud = [(m.signature["id"], m.excerpt[:80]) for m in match("\n".join(HEALTHY), SIGS)
            if m.signature.get("severity") != "info"]
    assert not loud, loud


def test_the_healthy_corpus_logs_match_no_failure():
    """Every log of every healthy machine tree (tests/healthy.py), line by line: no fail signature, and no warn but
    the PCIe errors the hardware corrected (DLD-LOG-001 counts those; a few are normal)."""
    import healthy

    loud = []
    for name, entry in healthy.HEALTHY.items():
        for path, value in entry["tree"]().items():
            if not (isinstance(value, str) and ("log" in path or "journal" in path)):
                continue
            for line in value.splitlines():
                for m in match(line, SIGS):
                    sev = m.signature.get("severity")
                    if sev == "fail" or sev == "warn" and not (m.signature["id"] == "pcie-aer" and "Corrected" in line):
                        loud.append((name, m.signature["id"], line[:100]))
    assert not loud, loud


UNRELATED = [
    "docker: Error response from daemon: network mynet not found.",
    "Error: network mynet not found",
    "ssh: connect to host 10.0.0.5 port 22: Connection refused",
    "curl: (7) Failed to connect to example.com port 443 after 12 ms: Connection refused",
    "redis.exceptions.ConnectionError: Error 111 connecting to localhost:6379. Connection refused.",
    "FileNotFoundError: [Errno 2] No such file or directory: 'data/train.csv'",
    "bash: ./run.sh: cannot execute: required file not found",
    "RuntimeError: Error(s) in loading state_dict for ResNet: Missing key(s) in state_dict: \"fc.weight\"",
    "ValueError: Expected input batch_size (32) to match target batch_size (16).",
    "requests.exceptions.ReadTimeout: HTTPSConnectionPool(host='pypi.org', port=443): Read timed out. (read timeout=15)",
    "kernel: EXT4-fs (nvme1n1): mounted filesystem with ordered data mode. Quota mode: none.",
    "systemd[1]: Started Docker Application Container Engine.",
    "WARNING: Running pip as the 'root' user can result in broken permissions and conflicting behaviour with the "
    "system package manager.",
    "Building wheel for flash-attn (setup.py) ... done\nSuccessfully built flash-attn",
    "Downloading nvidia_cudnn_cu12-9.1.0.70-py3-none-manylinux2014_x86_64.whl (664.8 MB)",
    "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.4, V12.4.131",
    "| NVIDIA-SMI 550.127.05             Driver Version: 550.127.05     CUDA Version: 12.4     |",
    "Traceback (most recent call last):\n  File \"train.py\", line 10, in <module>\n    import wandb\n"
    "ModuleNotFoundError: No module named 'wandb'",
    "Collecting package metadata (repodata.json): done\nSolving environment: done",
    "error: subprocess-exited-with-error\n  × python setup.py egg_info did not run successfully.",
    "make: *** [Makefile:12: all] Error 2",
]


@pytest.mark.parametrize("line", UNRELATED, ids=[f"unrelated-{i}" for i in range(len(UNRELATED))])
def test_an_unrelated_error_matches_no_signature(line):
    """The curated patterns' generic words (network ... not found, Connection refused, No such file or directory,
    not found, Error) match only in their own context."""
    assert not match(line, SIGS), [m.signature["id"] for m in match(line, SIGS)]


@pytest.mark.parametrize("entry", [e for e in LINES if e.get("by") == "catalog"], ids=lambda e: e["text"][:60])
def test_a_status_code_or_xid_line_gets_a_first_cause_that_names_its_concept(entry):
    matches, causes = _diagnose(entry["text"])
    assert matches and causes, entry["text"]
    said = (causes[0]["summary"] + " " + matches[0].signature["meaning"]).lower().replace("-", " ")
    assert entry["concept"].lower().replace("-", " ") in said, (matches[0].signature["id"], causes[0]["summary"])
