"""How software is installed on the distribution a facts snapshot describes: its family, its package manager and
the NVIDIA driver's install steps. Pure functions of facts, shared by the checks' fixes and the plan's steps
(``dl_doctor.checks.common`` re-exports them)."""

from __future__ import annotations

from typing import Optional

from dl_doctor import fixes
from dl_doctor.fixes import Step
from dl_doctor.model import Facts


def os_family(facts: Facts) -> Optional[str]:
    """``rhel`` (RHEL, Rocky, Alma, CentOS, Fedora), ``amzn``, ``debian`` (Debian, Ubuntu), ``suse`` or None."""
    ids = [facts.get("os.id") or ""] + list(facts.get("os.id_like") or [])
    ids = [i.lower() for i in ids if i]
    if "amzn" in ids:
        return "amzn"
    if any(i in ("rhel", "centos", "fedora", "rocky", "almalinux", "ol") for i in ids):
        return "rhel"
    if any(i in ("debian", "ubuntu") for i in ids):
        return "debian"
    if any("suse" in i for i in ids):
        return "suse"
    if facts.get("os.redhat_release"):
        return "rhel"
    return None


class PackageManager:
    """The distribution's package manager, for fixes: ``package_manager(facts).install("pkg")`` is a typed step,
    rendered for the machine the facts describe (inside an image: ``dnf --installroot``, ``chroot DIR apt-get``)."""

    def __init__(self, name: Optional[str]):
        self.name = name

    @property
    def known(self) -> bool:
        return self.name is not None

    def install(self, *packages: str, note: str = "") -> Step:
        return fixes.install(*packages, manager=self.name, note=note)

    def reinstall(self, *packages: str, note: str = "") -> Step:
        return fixes.install(*packages, manager=self.name, reinstall=True, note=note)


def package_manager(facts: Facts) -> PackageManager:
    """apt on Debian and Ubuntu (and their derivatives: Linux Mint, Pop!_OS...), dnf on RHEL-likes and Amazon
    Linux 2023, yum on Amazon Linux 2, zypper on SUSE; unknown otherwise (fixes then name the packages only)."""
    family = os_family(facts)
    if family == "debian":
        return PackageManager("apt")
    if family == "amzn":
        return PackageManager("yum" if str(facts.get("os.version_id") or "").split(".")[0] == "2" else "dnf")
    if family == "rhel":
        return PackageManager("dnf")
    if family == "suse":
        return PackageManager("zypper")
    return PackageManager(None)


def driver_install_commands(facts: Facts, branch: Optional[int]) -> list:
    """Steps that install an NVIDIA driver of ``branch`` (or newer) on this distribution."""
    family = os_family(facts)
    b = str(branch) if branch else "<branch>"
    if family in ("rhel", "amzn"):
        return [fixes.root_command(f"dnf module install -y nvidia-driver:{b}-dkms",
                                   note=f"or: sudo dnf module switch-to -y nvidia-driver:{b}-dkms"),
                fixes.reboot()]
    if family == "debian":
        return [fixes.install(f"nvidia-driver-{b}-server", manager="apt",
                              note="ubuntu-drivers list --gpgpu shows the choices"),
                fixes.reboot()]
    return [f"# install an NVIDIA data center driver of branch R{b} or newer for this distribution, then reboot"]
