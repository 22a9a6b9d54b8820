"""``dl-doctor plan --kernel RELEASE`` on sysroot trees: the facts after the kernel update, judged by the same
checks as a real machine after the update and the reboot would be."""

import gzip
import lzma
from pathlib import Path

import pytest

import machines
from conftest import build_tree
from dl_doctor import app
from dl_doctor.engine import collect, evaluate
from dl_doctor.fixes import render_live
from dl_doctor.host import Host
from dl_doctor.judge.plan import kernel
from dl_doctor.judge.plan.change import PlanInputError, WhatIf
from dl_doctor.registry import load_registry
from machines import RHEL_K, UBUNTU_K, module_blob

SAME_MINOR = "4.18.0-477.10.1.el8_8.x86_64"   # RHEL 8.8, as RHEL_K
NEXT_MINOR = "4.18.0-513.5.1.el8_9.x86_64"    # RHEL 8.9
NEW_UBUNTU = "5.15.0-1055-aws"
IDS = ("DLD-DRV-001", "DLD-DRV-002", "DLD-DRV-005", "DLD-DRV-007", "DLD-GPU-001")


def _collect(tmp_path: Path, spec):
    root = build_tree(tmp_path / "root", spec)
    return collect([p for p in load_registry().probes if p.name != "nvml"], Host(sysroot=str(root)), {}, timeout=20)


def _judge(snapshot):
    findings = evaluate(snapshot, app.registry().checks, app.load_matrix(()))
    return {f.id: f for f in findings if f.id in IDS}


def _plan(tmp_path, spec, release):
    before = _collect(tmp_path, spec)
    w = WhatIf(before)
    change = kernel.apply(w, release, app.load_matrix(()), {})
    return _judge(before), _judge(w.snapshot), change, w


def _commands(step):
    """A step's commands as the live machine pastes them (steps hold typed fix steps, rendered for the target)."""
    return [c if isinstance(c, str) else render_live(c) for c in step["commands"]]


def _status(findings):
    return {i: f.status.value for i, f in findings.items()}


def _dkms_rhel():
    """The p4d on RHEL 8.8 with DKMS (its module under extra/, as DKMS installs it there) and the current kernel's
    headers installed."""
    spec = machines.p4d_rhel8_healthy()
    spec[f"lib/modules/{RHEL_K}/build/Makefile"] = "# kernel headers\n"
    return spec


def test_dkms_with_the_headers_of_the_new_kernel_keeps_the_module(tmp_path):
    spec = _dkms_rhel()
    # `dnf update kernel kernel-devel` done, not rebooted: the new kernel and its headers are in the tree
    spec[f"boot/vmlinuz-{NEXT_MINOR}"] = ""
    spec[f"lib/modules/{NEXT_MINOR}/modules.dep"] = ""
    spec[f"lib/modules/{NEXT_MINOR}/build/Makefile"] = "# kernel headers\n"
    before, after, change, w = _plan(tmp_path, spec, NEXT_MINOR)
    assert _status(before)["DLD-DRV-001"] == "pass"
    assert _status(after)["DLD-DRV-001"] == "pass" and _status(after)["DLD-GPU-001"] == "pass"
    assert w.get("kmod.running_kernel") == NEXT_MINOR and w.get("kmod.boot_default.kernel") == NEXT_MINOR
    planned = [m for m in w.get("kmod.nvidia_modules") if m["kernel"] == NEXT_MINOR]
    assert planned and planned[0]["version"] == "535.104.05"
    assert planned[0]["path"] == f"/lib/modules/{NEXT_MINOR}/extra/nvidia.ko.xz"
    assert {"version": "535.104.05", "kernel": NEXT_MINOR} in w.get("kmod.dkms.builds")
    assert not any("headers" in s["text"] for s in change.steps)


def test_dkms_without_the_headers_fails_and_the_first_step_installs_them(tmp_path):
    before, after, change, w = _plan(tmp_path, _dkms_rhel(), NEXT_MINOR)
    assert _status(before)["DLD-DRV-001"] == "pass"
    drv = after["DLD-DRV-001"]
    assert drv.status.value == "fail"
    assert f"no NVIDIA kernel module for the running kernel {NEXT_MINOR}" in drv.message
    assert f"the headers for {NEXT_MINOR} are not installed" in drv.message
    assert after["DLD-GPU-001"].status.value == "fail"  # the module does not load after the reboot
    assert w.get("nvidia_driver.kernel_module.loaded") is False and w.get("nvml") is None
    first = sorted(change.steps, key=lambda s: s["order"])[0]
    assert first["text"].startswith(f"Install the headers for {NEXT_MINOR} first")
    assert _commands(first) == [f"sudo dnf install -y kernel-devel-{NEXT_MINOR}"]
    kernel_step = next(s for s in change.steps if s["text"] == f"Install kernel {NEXT_MINOR}")
    assert first["order"] < kernel_step["order"]


def _stream_rhel(stream="535"):
    """RHEL 8.8 with the precompiled nvidia-driver:535 stream: a kmod under extra/, no DKMS."""
    spec = machines.p4d_rhel8_healthy()
    for key in [k for k in spec if k.startswith("var/lib/dkms/")]:
        del spec[key]
    spec["etc/dnf/modules.d/nvidia-driver.module"] = (f"[nvidia-driver]\nname=nvidia-driver\nstream={stream}\n"
                                                      "profiles=\nstate=enabled\n")
    return spec


def _primary(*kernels, driver="535.104.05"):
    body = "".join(
        f'<package type="rpm">\n  <name>kmod-nvidia-{driver}-{k}</name>\n  <arch>x86_64</arch>\n'
        f'  <version epoch="3" ver="{driver}" rel="3.el8_9"/>\n  <summary>NVIDIA driver kernel module</summary>\n'
        f'</package>\n' for k in kernels)
    return gzip.compress(('<?xml version="1.0" encoding="UTF-8"?>\n<metadata packages="%d">\n%s</metadata>\n'
                          % (len(kernels), body)).encode())


REPODATA = "var/cache/dnf/cuda-rhel8-x86_64-0123456789abcdef/repodata/abc123-primary.xml.gz"


def test_precompiled_stream_whose_repository_lacks_the_kernel_fails(tmp_path):
    spec = _stream_rhel()
    spec[REPODATA] = _primary("4.18.0-477.27.1", "4.18.0-477.10.1")
    before, after, change, w = _plan(tmp_path, spec, NEXT_MINOR)
    repo = w.get("kmod.repo_modules")
    assert repo["sources"] == ["/" + REPODATA]
    assert {p["kernel"] for p in repo["packages"]} == {"4.18.0-477.27.1", "4.18.0-477.10.1"}
    assert _status(before)["DLD-DRV-001"] == "pass"
    assert _status(after)["DLD-DRV-001"] == "fail"
    assert "switch-to" in after["DLD-DRV-001"].fix.commands[0]
    step = next(s for s in change.steps if s["text"].startswith("No precompiled module exists"))
    assert "sudo dnf module switch-to -y nvidia-driver:535-dkms" in _commands(step)


def test_precompiled_stream_whose_repository_has_the_kernel_passes_with_the_pin_step(tmp_path):
    spec = _stream_rhel()
    spec[REPODATA] = _primary("4.18.0-477.27.1", "4.18.0-513.5.1")
    before, after, change, w = _plan(tmp_path, spec, NEXT_MINOR)
    assert _status(after)["DLD-DRV-001"] == "pass" and _status(after)["DLD-GPU-001"] == "pass"
    step = next(s for s in change.steps if s["text"].startswith("Pin the kmod stream"))
    assert _commands(step) == ["sudo dnf install -y kmod-nvidia-535.104.05-4.18.0-513.5.1",
                                "sudo dnf module enable -y nvidia-driver:535"]
    assert next(m for m in w.get("kmod.nvidia_modules") if m["kernel"] == NEXT_MINOR)["signed"] is True


def test_precompiled_stream_without_repository_metadata_is_unknown_not_a_failure(tmp_path):
    before, after, change, w = _plan(tmp_path, _stream_rhel(), NEXT_MINOR)
    assert w.get("kmod.repo_modules") is None
    assert w.get("kmod.module_unknown") == [NEXT_MINOR]
    status = _status(after)
    assert status["DLD-DRV-001"] == "skip" and status["DLD-DRV-002"] == "skip"
    assert status["DLD-GPU-001"] == "skip"  # whether the module loads is unknown
    assert not any(f.status.value == "fail" for f in after.values())
    assert any("no repository metadata" in n for n in change.notes)


def test_ubuntu_precompiled_package_from_the_apt_lists(tmp_path):
    spec = machines.g5_ubuntu2204()
    lists = "var/lib/apt/lists/archive.ubuntu.com_ubuntu_dists_jammy-updates_restricted_binary-amd64_Packages"
    spec[lists] = "".join(
        f"Package: linux-modules-nvidia-535-server-{k}\nArchitecture: amd64\nVersion: {k}.56\n\n"
        for k in (UBUNTU_K, "5.15.0-1051-gcp", "5.15.0-1052-aws"))
    before, after, change, w = _plan(tmp_path, spec, NEW_UBUNTU)
    # only the installed branch and kernel flavour are kept
    assert {p["kernel"] for p in w.get("kmod.repo_modules")["packages"]} == {UBUNTU_K, "5.15.0-1052-aws"}
    assert _status(before)["DLD-DRV-001"] == "pass" and _status(after)["DLD-DRV-001"] == "fail"
    spec[lists] += f"Package: linux-modules-nvidia-535-server-{NEW_UBUNTU}\nVersion: {NEW_UBUNTU}.57\n"
    before, after, change, w = _plan(tmp_path / "2", spec, NEW_UBUNTU)
    assert _status(after)["DLD-DRV-001"] == "pass"
    step = next(s for s in change.steps if s["text"].startswith("Pin the kmod stream"))
    assert _commands(step) == [f"sudo apt-get install -y linux-modules-nvidia-535-server-{NEW_UBUNTU}"]


def test_runfile_install_without_dkms_fails_and_says_to_rerun_the_installer(tmp_path):
    spec = machines.p4d_rhel8_healthy()
    for key in [k for k in spec if k.startswith("var/lib/dkms/") or k.startswith("etc/dnf/")]:
        del spec[key]
    spec["usr/bin/nvidia-uninstall"] = ""
    spec[f"lib/modules/{RHEL_K}/kernel/drivers/video/nvidia.ko"] = module_blob("535.104.05", RHEL_K)
    del spec[f"lib/modules/{RHEL_K}/extra/nvidia.ko.xz"]
    before, after, change, w = _plan(tmp_path, spec, SAME_MINOR)
    assert _status(before)["DLD-DRV-001"] == "pass" and _status(after)["DLD-DRV-001"] == "fail"
    step = next(s for s in change.steps if s["text"].startswith("Re-run the NVIDIA installer"))
    assert "sudo sh ./NVIDIA-Linux-$(uname -m)-535.104.05.run --silent --dkms" in _commands(step)


def test_rhel_weak_updates_same_minor_passes_another_minor_fails(tmp_path):
    spec = _stream_rhel()  # a precompiled kmod under extra/, no repository metadata
    before, after, change, w = _plan(tmp_path, spec, SAME_MINOR)
    link = next(m for m in w.get("kmod.nvidia_modules") if m["kernel"] == SAME_MINOR)
    assert link["kind"] == "weak-updates" and link["link_kernel"] == RHEL_K
    assert link["path"] == f"/lib/modules/{SAME_MINOR}/weak-updates/nvidia.ko.xz"
    assert _status(after)["DLD-DRV-001"] == "pass" and _status(after)["DLD-DRV-007"] != "fail"
    assert change.verified is False  # os.toml's RHEL 8.8 kernel entry is not verified

    spec[REPODATA] = _primary("4.18.0-477.27.1")
    before, after, change, w = _plan(tmp_path / "2", spec, NEXT_MINOR)
    assert not any(m["kernel"] == NEXT_MINOR for m in w.get("kmod.nvidia_modules"))
    assert _status(after)["DLD-DRV-001"] == "fail"
    assert any("do not link it across minor releases" in n for n in change.notes)


def test_a_weak_updates_link_of_the_same_minor_on_a_tree_passes_the_checks(tmp_path):
    """The rule the plan relies on, on a real tree: the link's vermagic names the other kernel of one kABI."""
    spec = _stream_rhel()
    spec["proc/sys/kernel/osrelease"] = SAME_MINOR + "\n"
    spec["proc/modules"] = "xfs 1556480 2 - Live 0x0\n"
    del spec["proc/driver/nvidia/version"]
    del spec["sys/module/nvidia/version"]
    spec[f"boot/vmlinuz-{SAME_MINOR}"] = ""
    spec[f"lib/modules/{SAME_MINOR}/modules.dep"] = ""
    spec[f"lib/modules/{SAME_MINOR}/weak-updates/nvidia.ko.xz"] = {"symlink": f"/lib/modules/{RHEL_K}/extra/nvidia.ko.xz"}
    status = _status(_judge(_collect(tmp_path, spec)))
    assert status["DLD-DRV-001"] == "pass" and status["DLD-DRV-007"] != "fail"


def test_secure_boot_with_an_unsigned_dkms_build(tmp_path):
    spec = _dkms_rhel()
    spec["sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"] = b"\x06\x00\x00\x00\x01"
    # today's module was signed by the vendor (loaded under Secure Boot); DKMS has no signing key in the tree
    spec[f"boot/vmlinuz-{NEXT_MINOR}"] = ""
    spec[f"lib/modules/{NEXT_MINOR}/build/Makefile"] = "# kernel headers\n"
    before, after, change, w = _plan(tmp_path, spec, NEXT_MINOR)
    assert w.get("kmod.dkms.signing_key") is None
    assert _status(before)["DLD-DRV-005"] == "pass"
    planned = next(m for m in w.get("kmod.nvidia_modules") if m["kernel"] == NEXT_MINOR)
    assert planned["signed"] is True  # DKMS signed the module it built for the current kernel
    # with no key and an unsigned build of the current kernel, the new build is unsigned too
    spec[f"lib/modules/{RHEL_K}/extra/nvidia.ko.xz"] = lzma.compress(module_blob("535.104.05", RHEL_K, signed=False))
    before, after, change, w = _plan(tmp_path / "2", spec, NEXT_MINOR)
    assert after["DLD-DRV-005"].status.value == "fail" and "is not signed" in after["DLD-DRV-005"].message
    assert after["DLD-DRV-001"].status.value == "pass"  # the module exists; Secure Boot refuses it
    assert any(_commands(s)[0].startswith("sudo mokutil --import /var/lib/dkms/mok.pub") for s in change.steps)
    # DKMS's key in the tree: the build is signed
    spec["var/lib/dkms/mok.pub"] = b"0\x82"
    before, after, change, w = _plan(tmp_path / "3", spec, NEXT_MINOR)
    assert w.get("kmod.dkms.signing_key") == "/var/lib/dkms/mok.pub"
    assert after["DLD-DRV-005"].status.value != "fail"


def test_the_same_kernel_changes_nothing_and_a_bad_release_is_refused(tmp_path):
    snap = _collect(tmp_path, machines.p4d_rhel8_healthy())
    w = WhatIf(snap)
    change = kernel.apply(w, RHEL_K, app.load_matrix(()), {})
    assert change.edits == [] and "already the running kernel" in change.notes[0]
    for bad in ("", "latest", "../../etc", "5.15.0 -1051", "5." + "1" * 200, "5.15.0-1051-aws\n", "5.15;rm"):
        with pytest.raises(PlanInputError):
            kernel.apply(WhatIf(snap), bad, None, {})


def test_hostile_repository_metadata_costs_only_its_own_facts(tmp_path):
    spec = _stream_rhel()
    spec[REPODATA] = b"\x1f\x8b\x08\x00garbage" + b"\0" * 100
    spec["var/cache/dnf/cuda-other-0123/repodata/x-primary.xml"] = ("<name>kmod-nvidia" * 5000) + "</package>"
    snap = _collect(tmp_path, spec)
    repo = snap["facts"]["kmod"]["repo_modules"]
    assert repo["truncated"] is True and repo["packages"] == []
    assert snap["facts"]["kmod"]["running_kernel"] == RHEL_K


def test_a_stream_whose_build_for_the_kernel_is_a_later_driver_of_the_branch(tmp_path):
    """nvidia-driver:535 follows its branch: dnf installs the kernel's kmod of 535.129.03 (and that user space)."""
    spec = _stream_rhel()
    spec[REPODATA] = _primary("4.18.0-477.27.1") + b""
    spec["var/cache/dnf/cuda-rhel8-x86_64-fedcba/repodata/def-primary.xml.gz"] = _primary("4.18.0-513.5.1",
                                                                                         driver="535.129.03")
    before, after, change, w = _plan(tmp_path, spec, NEXT_MINOR)
    assert _status(after)["DLD-DRV-001"] == "pass"
    assert next(m for m in w.get("kmod.nvidia_modules") if m["kernel"] == NEXT_MINOR)["version"] == "535.129.03"
    assert any("plan --driver 535.129.03" in n for n in change.notes)
    step = next(s for s in change.steps if s["text"].startswith("Pin the kmod stream"))
    assert _commands(step)[0] == "sudo dnf install -y kmod-nvidia-535.129.03-4.18.0-513.5.1"


def test_a_long_apt_list_is_read_whole_and_a_partial_read_is_unknown(tmp_path):
    spec = machines.g5_ubuntu2204()
    lists = "var/lib/apt/lists/archive.ubuntu.com_ubuntu_dists_jammy-updates_restricted_binary-amd64_Packages"
    # every flavour of every branch: thousands of stanzas before the one that matters
    spec[lists] = "".join(f"Package: linux-modules-nvidia-{b}-5.15.0-{n}-{f}\nVersion: 5.15.0-{n}.1\n\n"
                          for b in ("470", "535", "550-server") for n in range(1000, 1700) for f in ("gcp", "azure"))
    spec[lists] += f"Package: linux-modules-nvidia-535-server-{UBUNTU_K}\nVersion: {UBUNTU_K}.56\n\n"
    before = _collect(tmp_path, spec)
    repo = before["facts"]["kmod"]["repo_modules"]
    assert repo["truncated"] is False and [p["kernel"] for p in repo["packages"]] == [UBUNTU_K]
    w = WhatIf(before)
    kernel.apply(w, NEW_UBUNTU, app.load_matrix(()), {})
    assert _status(_judge(w.snapshot))["DLD-DRV-001"] == "fail"  # the branch is listed, this kernel is not
    before["facts"]["kmod"]["repo_modules"]["truncated"] = True
    w = WhatIf(before)
    change = kernel.apply(w, NEW_UBUNTU, app.load_matrix(()), {})
    assert _status(_judge(w.snapshot))["DLD-DRV-001"] == "skip"
    assert any("read only in part" in n for n in change.notes)


def test_secure_boot_dkms_build_without_a_key_and_an_unreadable_current_module(tmp_path):
    """Nothing says how DKMS signs (the current module's signature unknown) and the tree has no DKMS key: unsigned."""
    spec = _dkms_rhel()
    spec["sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"] = b"\x06\x00\x00\x00\x01"
    spec[f"boot/vmlinuz-{NEXT_MINOR}"] = ""
    spec[f"lib/modules/{NEXT_MINOR}/build/Makefile"] = "# kernel headers\n"
    snap = _collect(tmp_path, spec)
    for m in snap["facts"]["kmod"]["nvidia_modules"]:
        m["signed"] = None
    w = WhatIf(snap)
    change = kernel.apply(w, NEXT_MINOR, app.load_matrix(()), {})
    planned = next(m for m in w.get("kmod.nvidia_modules") if m["kernel"] == NEXT_MINOR)
    assert planned["signed"] is False and w.get("nvidia_driver.kernel_module.loaded") is False
    assert _status(_judge(w.snapshot))["DLD-DRV-005"] == "fail"
    assert any("no DKMS signing key in the tree" in n for n in change.notes)
    assert "https://github.com/dell/dkms/blob/master/README.md#module-signing" in change.sources
