"""The host area's kernel facts: a module's .modinfo (raw, .xz, .zst) and modules.dep, the kernel log's module
refusals, refused GPUs and the newer API mismatch lines."""

import lzma
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import healthy  # noqa: E402
from cases.host_driver import ko  # noqa: E402
from dl_doctor.probes.kernel_log import parse_kernel_log  # noqa: E402
from dl_doctor.probes.kmod import _find_modinfo, module_name, parse_modules_dep  # noqa: E402


def test_modinfo_of_a_real_elf_module_in_every_compression(tmp_path):
    blob = ko("nvidia-drm", "550.127.05", "6.8.0-49-generic", depends=("drm", "drm_kms_helper", "nvidia-modeset"))
    assert blob[:4] == b"\x7fELF"
    info = _find_modinfo(blob)
    assert info["depends"] == "drm,drm_kms_helper,nvidia-modeset" and info["name"] == "nvidia-drm"
    assert info["vermagic"].startswith("6.8.0-49-generic ")
    assert _find_modinfo(ko("nvidia", "550.127.05", "6.8.0-49-generic"))["depends"] == ""  # written even when empty
    from dl_doctor.probes.kmod import _decompressed

    for data, kind in ((lzma.compress(blob), "xz"), (healthy.zstd_raw(blob), "zst")):
        path = tmp_path / f"m.{kind}"
        path.write_bytes(data)
        with open(path, "rb") as fh:
            assert b"".join(_decompressed(fh, kind)) == blob


def test_modules_dep_names_and_edges():
    dep = parse_modules_dep("updates/dkms/nvidia.ko.zst: kernel/drivers/char/ipmi/ipmi_msghandler.ko.zst\n"
                            "kernel/drivers/char/ipmi/ipmi_msghandler.ko.zst:\nnot a line\n")
    assert dep["nvidia"]["deps"] == ["ipmi_msghandler"] and "ipmi_msghandler" in dep
    assert module_name("/lib/modules/k/updates/dkms/nvidia-uvm.ko.xz") == "nvidia_uvm"


def test_kernel_log_refusals_refused_gpus_and_spread_mismatch():
    lines = ["Oct  8 14:02:11 h kernel: [    4.009675] nvidia: Unknown symbol ipmi_create_user (err -2)",
             "[ 1.2] nvidia_peermem: disagrees about version of symbol ib_register_peer_memory_client",
             "[ 1.3] e1000e: Unknown symbol foo (err -2)",
             "[ 4.1] NVRM: The NVIDIA GPU 0000:02:00.0 (PCI ID: 10de:1b82)",
             "[ 4.1] NVRM: installed in this system is not supported by open",
             "[ 9.4] NVRM: API mismatch: the client 'kwin_wayland' (pid 1005)",
             "[ 9.4] NVRM: has the version 595.84, but this kernel module has",
             "[ 9.4] NVRM: the version 595.80.  Please make sure that this"]
    out = parse_kernel_log(lines)
    assert [(s["module"], s["kind"], s["err"]) for s in out["unknown_symbols"]] == [
        ("nvidia", "unknown", -2), ("nvidia_peermem", "version", None)]  # another driver's refusal is not ours
    assert out["refused_gpus"][0]["bus"] == "0000:02:00.0" and "no GSP" in out["refused_gpus"][0]["reason"]
    assert out["api_mismatches"] == [{"client": "595.84", "kernel_module": "595.80"}]
