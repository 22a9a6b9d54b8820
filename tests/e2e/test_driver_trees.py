"""Driver and kernel-module states on sysroot trees, through the installed `dl-doctor`."""

import json

import machines
from machines import RHEL_K

NEW_K = "4.18.0-513.5.1.el8_9.x86_64"


def _run(run_cli, tree, spec, *ids):
    r = run_cli("run", "--sysroot", str(tree(spec)), "--json", "-", *[a for i in ids for a in ("--only", i)])
    report = json.loads(r.stdout)
    return {f["id"]: f for f in report["findings"]}, report


def test_kernel_updated_module_only_for_the_old_kernel(run_cli, tree):
    spec = machines.p4d_rhel8_healthy()
    # rebooted into a new kernel: nvidia did not load, DKMS never built for it
    spec["proc/sys/kernel/osrelease"] = NEW_K + "\n"
    spec["proc/modules"] = "xfs 1556480 2 - Live 0x0\n"
    del spec["proc/driver/nvidia/version"]
    del spec["sys/module/nvidia/version"]
    spec[f"boot/vmlinuz-{NEW_K}"] = ""
    spec[f"lib/modules/{NEW_K}/modules.dep"] = ""
    spec["boot/grub2/grubenv"] = f"saved_entry=0123abcd-{NEW_K}\n"
    spec[f"boot/loader/entries/0123abcd-{NEW_K}.conf"] = f"linux /vmlinuz-{NEW_K}\n"
    f, report = _run(run_cli, tree, spec, "DLD-DRV-001", "DLD-GPU-001")
    drv = f["DLD-DRV-001"]
    assert drv["status"] == "fail"
    assert drv["message"] == f"no NVIDIA kernel module for the running kernel {NEW_K}; modules exist only for {RHEL_K}"
    # the tree was captured from the running machine: its fix is for that machine, never for this one
    on = f"# on {report['host']['hostname']}: "
    assert on + f"sudo dkms autoinstall -k {NEW_K}" in drv["fix"]["commands"]
    assert on + f"sudo dnf install -y kernel-devel-{NEW_K} kernel-headers-{NEW_K}" in drv["fix"]["commands"]
    assert f["DLD-GPU-001"]["status"] == "fail"


def test_next_boot_kernel_without_module_warns_before_the_reboot(run_cli, tree):
    spec = machines.p4d_rhel8_healthy()
    spec[f"boot/vmlinuz-{NEW_K}"] = ""
    spec[f"lib/modules/{NEW_K}/modules.dep"] = ""
    spec["boot/grub2/grubenv"] = f"saved_entry=0123abcd-{NEW_K}\n"
    spec[f"boot/loader/entries/0123abcd-{NEW_K}.conf"] = f"linux /vmlinuz-{NEW_K}\n"
    f, report = _run(run_cli, tree, spec, "DLD-DRV-002")
    assert report["facts"]["kmod"]["boot_default"]["kernel"] == NEW_K
    # a captured tree is judged like the machine it came from would be on reboot: no module -> the image breaks
    assert f["DLD-DRV-002"]["status"] == "fail"
    assert f"the next boot kernel {NEW_K} has no NVIDIA module yet" in f["DLD-DRV-002"]["message"]


def test_weak_updates_only(run_cli, tree):
    spec = machines.p4d_rhel8_healthy()
    spec["proc/sys/kernel/osrelease"] = NEW_K + "\n"
    spec["proc/modules"] = "xfs 1556480 2 - Live 0x0\n"
    del spec["proc/driver/nvidia/version"]
    del spec["sys/module/nvidia/version"]
    spec[f"lib/modules/{NEW_K}/weak-updates/nvidia/nvidia.ko.xz"] = {
        "symlink": f"/lib/modules/{RHEL_K}/extra/nvidia.ko.xz"}
    f, report = _run(run_cli, tree, spec, "DLD-DRV-001")
    mods = {m["kernel"]: m for m in report["facts"]["kmod"]["nvidia_modules"]}
    assert mods[NEW_K]["kind"] == "weak-updates" and mods[NEW_K]["link_kernel"] == RHEL_K
    # the weak-updates link resolves inside the tree, to the other kernel's build: its vermagic says so
    assert mods[NEW_K]["vermagic"].startswith(RHEL_K)
    assert f["DLD-DRV-001"]["status"] == "fail" and f"was built for {RHEL_K}" in f["DLD-DRV-001"]["message"]


def test_nouveau_holds_the_gpu(run_cli, tree):
    spec = machines.p4d_rhel8_healthy()
    del spec["usr/lib/modprobe.d/dist-blacklist.conf"]
    spec["proc/modules"] = "nouveau 2531328 0 - Live 0x0\nxfs 1 1 - Live 0x0\n"
    del spec["proc/driver/nvidia/version"]
    del spec["sys/module/nvidia/version"]
    spec["/sys/devices/pci0000:00/0000:10:1c.0/driver"] = {"symlink": "../../../bus/pci/drivers/nouveau"}
    spec["sys/bus/pci/drivers/nouveau/.keep"] = ""
    f, _ = _run(run_cli, tree, spec, "DLD-DRV-004", "DLD-GPU-001")
    assert f["DLD-DRV-004"]["status"] == "fail"
    assert f["DLD-DRV-004"]["message"].startswith("nouveau is bound to 0000:10:1c.0")
    assert "(nouveau is loaded and holds them)" in f["DLD-GPU-001"]["message"]


def test_secure_boot_with_an_unsigned_module(run_cli, tree):
    spec = machines.p4d_secure_boot_unsigned_module()
    f, report = _run(run_cli, tree, spec, "DLD-DRV-005")
    assert report["facts"]["kmod"]["secure_boot"]["enabled"] is True
    assert f["DLD-DRV-005"]["status"] == "fail" and "is not signed" in f["DLD-DRV-005"]["message"]


def test_cuda13_toolkit_on_a_535_driver_and_a_v100(run_cli, tree):
    spec = machines.p4d_rhel8_healthy()
    machines.cuda(spec, "13.0.2")
    for bus in ("10:1c", "10:1d"):
        spec[f"/sys/devices/pci0000:00/0000:{bus}.0/device"] = "0x1db1\n"
    f, _ = _run(run_cli, tree, spec, "DLD-CUDA-001", "DLD-GPU-002")
    assert f["DLD-CUDA-001"]["status"] == "fail"
    assert "CUDA toolkit 13.0.2 (/usr/local/cuda-13.0) needs driver >= 580.65.06" in f["DLD-CUDA-001"]["message"]
    assert f["DLD-GPU-002"]["status"] == "fail"
    assert "Tesla V100 SXM2 16GB (Volta) is supported by CUDA up to 12.9" in f["DLD-GPU-002"]["message"]


def test_unbooted_image_skips_runtime_state_but_checks_the_boot_kernel(run_cli, tree):
    spec = {k: v for k, v in machines.p4d_rhel8_healthy().items() if not k.startswith(("proc/", "sys/"))}
    f, report = _run(run_cli, tree, spec)
    assert report["probe_errors"] == []
    assert f["DLD-DRV-002"]["status"] == "pass"  # the image's boot kernel has its module
    assert f["DLD-GPU-001"]["status"] == "skip" and f["DLD-MEM-001"]["status"] == "skip"
    assert {"gpu_pci", "mounts"} <= set(report["unavailable"])


def test_an_image_with_the_open_module_but_no_gsp_firmware(run_cli, tree):
    """A p5 image (open kernel modules) baked without the firmware package: every GPU would fail to initialise."""
    spec = machines.p5_48xlarge()
    for key in [k for k in spec if k.startswith("lib/firmware/nvidia/")]:
        del spec[key]
    f, _ = _run(run_cli, tree, spec, "DLD-DRV-006")
    assert f["DLD-DRV-006"]["status"] == "fail"
    assert "needs /lib/firmware/nvidia/550.54.15/gsp_*.bin" in f["DLD-DRV-006"]["message"]
    assert any("nvidia-kmod-common" in c for c in f["DLD-DRV-006"]["fix"]["commands"])
