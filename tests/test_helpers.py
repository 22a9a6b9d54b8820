"""The one helper each for versions and for the distribution's package-manager commands."""

import pytest

from dl_doctor import versions
from dl_doctor.checks.common import package_manager
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
    assert package_manager(facts_of(os_release)).install("nvidia-container-toolkit") == command


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

    for path in (Path(__file__).parents[1] / "checks").glob("*.py"):
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
