"""The one helper each for versions and for the distribution's package-manager commands."""

import pytest

from dl_doctor import versions
from dl_doctor.checks.common import package_manager
from dl_doctor.fixes import render_live
from dl_doctor.model import Facts
from dl_doctor.testing import snapshot


def facts_of(os_release):
    return Facts(snapshot({"os": os_release}))


@pytest.mark.parametrize("os_release,command", [
    ({"id": "ubuntu", "id_like": ["debian"]}, "sudo apt-get install -y nvidia-container-toolkit"),
    ({"id": "linuxmint", "id_like": ["ubuntu", "debian"]}, "sudo apt-get install -y nvidia-container-toolkit"),
    ({"id": "rhel", "id_like": ["fedora"]}, "sudo dnf install -y nvidia-container-toolkit"),
    ({"id": "rocky", "id_like": ["rhel", "centos", "fedora"]}, "sudo dnf install -y nvidia-container-toolkit"),
    ({"id": "amzn", "version_id": "2"}, "sudo yum install -y nvidia-container-toolkit"),
    ({"id": "amzn", "version_id": "2023"}, "sudo dnf install -y nvidia-container-toolkit"),
    ({"id": "sles", "id_like": ["suse"]}, "sudo zypper install -y nvidia-container-toolkit"),
    ({"id": "arch"}, "# install with this distribution's package manager: nvidia-container-toolkit"),
])
def test_package_manager_per_distribution(os_release, command):
    assert render_live(package_manager(facts_of(os_release)).install("nvidia-container-toolkit")) == command


def test_the_container_toolkit_fix_no_longer_tells_mint_or_sles_to_run_dnf():
    from dl_doctor import compat_matrix
    from dl_doctor.checks.containers import container_toolkit as container_toolkit_missing
    from dl_doctor.engine import run_check

    base = {"gpu_pci": {"gpu_count": 1, "devices": []},
            "gpu_services": {"container_toolkit": {"docker_installed": True, "binaries": []}}}
    for os_release, want in (({"id": "linuxmint", "id_like": ["ubuntu"]}, "apt-get"), ({"id": "sles", "id_like": ["suse"]}, "zypper")):
        finding = run_check(container_toolkit_missing, Facts(snapshot({**base, "os": os_release})),
                            compat_matrix.load(site=False))
        assert finding.status.value in ("warn", "fail"), finding.message
        assert any(want in c for c in finding.fix.commands) and not any("dnf" in c for c in finding.fix.commands)


def test_no_check_reads_os_id_to_choose_commands():
    from pathlib import Path

    for path in (Path(__file__).parents[2] / "checks").glob("*.py"):
        if path.name == "common.py":
            continue
        text = path.read_text()
        assert 'facts.get("os.id")' not in text or path.name == "system.py", path.name  # system.py only shows it


@pytest.mark.parametrize("text,parsed,mm,major", [
    ("2.4.0+cu124", "2.4.0+cu124", "2.4", 2), ("535.104.05", "535.104.5", "535.104", 535), ("12.4.131", "12.4.131", "12.4", 12),
    ("12", "12", None, 12), ("9.1.0.70", "9.1.0.70", "9.1", 9), ("r535", None, None, None), (None, None, None, None),
    ("12.4-custom build", "12.4", "12.4", 12), ("x" * 500, None, None, None),
])
def test_versions(text, parsed, mm, major):
    v = versions.parse(text)
    assert (str(v) if v is not None else None) == parsed
    assert versions.major_minor(text) == mm and versions.major(text) == major


def test_version_order_and_kernels():
    assert versions.at_least("535.104.05", "525.60.13") is True and versions.at_least("12.2", "12.4") is False
    assert versions.at_least("junk", "1.0") is None
    kernels = ["5.15.0-1051-aws", "5.15.0-105-generic", "5.15.0-1009-aws", "4.18.0-513.el8.x86_64"]
    assert sorted(kernels, key=versions.kernel_key)[-1] == "5.15.0-1051-aws"


@pytest.mark.parametrize("text,release", [
    ("2.4.0+cu124", (2, 4, 0)), ("12.4", (12, 4)), ("535.104.05", (535, 104, 5)), ("5.15.0-1051-aws", (5, 15, 0)),
    ("2.4.0rc1", (2, 4, 0)),  # the checks' own parser read the "0rc1" as 1 (its digits joined)
    ("v2.1", (2, 1)), ("12.x", (12,)), ("", ()), (None, ()), ("junk", ()), ("x" * 500, ()),
])
def test_release_numbers(text, release):
    assert versions.release(text) == release
    assert () < (0,) and sorted([(12, 4), (), (9, 1)]) == [(), (9, 1), (12, 4)]  # junk sorts below every version


def _fabric_manager_fix(os_release):
    from dl_doctor import compat_matrix
    from dl_doctor.checks.gpu_support import fabric_manager
    from dl_doctor.engine import run_check

    facts = {"os": os_release, "gpu_pci": {"gpu_count": 8, "nvswitch_count": 4, "devices": []},
             "nvidia_driver": {"kernel_module": {"version": "535.104.05", "loaded": True}},
             "gpu_services": {"fabric_manager": {"installed": False, "enabled": False, "active": None, "version": None}}}
    finding = run_check(fabric_manager, Facts(snapshot(facts)), compat_matrix.load(site=False))
    assert finding.status.value == "fail", finding.message
    return finding.fix.commands[0]


@pytest.mark.parametrize("os_release,command", [
    ({"id": "ubuntu", "id_like": ["debian"]}, "sudo apt-get install -y nvidia-fabricmanager-535=535.104.05-1"),
    ({"id": "rhel", "id_like": ["fedora"], "version_id": "8.9"}, "sudo dnf install -y nvidia-fabric-manager-535.104.05"),
    ({"id": "amzn", "version_id": "2"}, "sudo yum install -y nvidia-fabric-manager-535.104.05"),
    ({"id": "amzn", "version_id": "2023"}, "sudo dnf install -y nvidia-fabric-manager-535.104.05"),
    ({"id": "sles", "id_like": ["suse"]}, "sudo zypper install -y nvidia-fabric-manager-535.104.05"),
    ({"id": "arch"}, "# install with this distribution's package manager: nvidia-fabric-manager-535.104.05"),
])
def test_the_fabric_manager_fix_uses_the_distributions_package_manager(os_release, command):
    """It chose apt on Debian and dnf on every other system: SLES was told to run dnf, Amazon Linux 2 too."""
    assert _fabric_manager_fix(os_release) == command


def test_the_checks_parse_versions_with_the_one_parser():
    from dl_doctor import compat_matrix
    from dl_doctor.checks.cuda import driver_too_old_for_cuda
    from dl_doctor.checks.python_env import runs_on
    from dl_doctor.engine import run_check
    from dl_doctor.facts.loading import _cmp

    assert runs_on("8.6", ["8.0"]) and not runs_on("9.0", ["8.0"]) and runs_on("9.0", ["8.6+PTX"])
    # the one resolution model compares two copies' versions (in one numbering scheme) to MAJOR.MINOR.PATCH
    assert _cmp("9.1.0.70", "9.1.0.2") == 0 and _cmp("9.2.1", "9.1.0") == 1
    assert _cmp("9.1.0", "9.2.1") == -1 and _cmp("12.1.0", "11.8.0") == 1
    assert _cmp("9.1.0-1", "9.1.0.1") == 0  # a packaging revision is a part, as before
    # a local part is not read as -1 (2.4.0+cu124 is not older than 2.4.0); strings that are not versions compare
    # as nothing (None: unknown), never as equal or older
    assert _cmp("2.4.0+cu124", "2.4.0") == 0 and _cmp("abc", "xyz") is None and _cmp("abc", "abc") is None
    # fixed: a forward-compatibility library whose version is not dotted integers failed the check (int("15-1"))
    facts = {"nvidia_driver": {"kernel_module": {"version": "535.104.05"},
                               "forward_compat_libs": [{"active": True, "version": "550.54.15-1", "path": "/x"}]},
             "cuda_toolkits": {"toolkits": [{"version": "12.4.1", "path": "/usr/local/cuda-12.4"}]}}
    finding = run_check(driver_too_old_for_cuda, Facts(snapshot(facts)), compat_matrix.load(site=False))
    assert finding.status.value != "error", finding.message


def test_fixes_for_an_image_change_the_tree_and_leave_the_running_system_for_its_boot():
    from dl_doctor import fixes
    from dl_doctor.model import Fix

    fix = Fix("Install the toolkit and restart Docker.", (fixes.install("nvidia-container-toolkit", manager="apt"),
                                                          fixes.service("restart", "docker"),
                                                          fixes.load_module("nvidia"), "sudo apt-get install -y x",
                                                          "# a note stays"))
    out = fixes.for_target(fix, fixes.Target("image", root="/mnt/ami"))
    assert out.commands == ("sudo chroot /mnt/ami apt-get install -y nvidia-container-toolkit",
                            "# boot the image, then: sudo systemctl restart docker",
                            "# boot the image, then: sudo modprobe nvidia",
                            "# boot the image, then: sudo apt-get install -y x",  # free text is never run here
                            "# a note stays")
    assert out.steps == fix.steps and "marked for when the image boots" in out.summary


def test_an_unbooted_image_gets_image_fixes(run_cli, tree):
    """The image's boot kernel has no NVIDIA module: the fix builds it inside the tree, and nothing asks to
    modprobe on a machine that is not running."""
    import json as _json

    import machines

    new_k = "4.18.0-553.el8_10.x86_64"
    spec = {k: v for k, v in machines.p4d_rhel8_healthy().items() if not k.startswith(("proc/", "sys/"))}
    spec[f"boot/vmlinuz-{new_k}"] = ""
    spec[f"lib/modules/{new_k}/modules.dep"] = ""
    spec["boot/grub2/grubenv"] = f"saved_entry=0123abcd-{new_k}\n"
    spec[f"boot/loader/entries/0123abcd-{new_k}.conf"] = f"linux /vmlinuz-{new_k}\n"
    root = tree(spec)
    r = run_cli("run", "--sysroot", str(root), "--json", "-", "--only", "DLD-DRV-002")
    finding = _json.loads(r.stdout)["findings"][0]
    assert finding["status"] == "fail", finding["message"]
    commands = finding["fix"]["commands"]
    assert "These facts come from an image" in finding["fix"]["summary"]
    assert any(c.startswith(f"sudo chroot {root} ") for c in commands), commands
    assert not any("modprobe" in c and not c.lstrip().startswith("#") for c in commands), commands
