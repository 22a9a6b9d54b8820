"""Operating system and kernel identification."""

from __future__ import annotations

from dl_doctor.model import Facts, Fix, Result, check, passed, warn


@check(
    id="DLD-SYS-001", slug="os-unidentified", title="Operating system and kernel identified",
    tags=("system", "os"), requires=("os",),
    what="""Reads the distribution from /etc/os-release (falling back to /etc/redhat-release)
    and the running kernel from /proc/sys/kernel/osrelease, and reports both.""",
    why="""Every later judgement depends on them: which driver packages exist (a RHEL 8
    precompiled kmod stream or an Ubuntu DKMS package), which kernel a module must be built
    for, and which package manager a fix should use. An unidentifiable system means dl-doctor
    can only give generic advice.""",
    fix="""Make sure /etc/os-release exists (it is owned by the distribution's release package:
    redhat-release, system-release or base-files). Under --sysroot, point at the image's root
    filesystem, not at a boot or data partition.""",
)
def os_identified(facts: Facts) -> Result:
    pretty = facts.get("os.pretty_name") or facts.get("os.redhat_release") or facts.get("os.system_release")
    if not pretty and facts.get("os.id"):
        pretty = f"{facts.get('os.id')} {facts.get('os.version_id') or ''}".strip()
    kernel = facts.get("kernel.release")
    evidence = {"os.id": facts.get("os.id"), "os.version_id": facts.get("os.version_id"),
                "os.source": facts.get("os.source"), "kernel.release": kernel}
    if not pretty:
        return warn("cannot identify the operating system: no /etc/os-release or release file", evidence,
                    Fix("Restore the distribution's release file.",
                        ("cat /etc/os-release", "rpm -qf /etc/os-release || dpkg -S /etc/os-release")))
    if kernel:
        return passed(f"{pretty}; kernel {kernel}", **evidence)
    installed = facts.get("kernel.installed") or []
    if not facts.live:
        evidence["kernel.installed"] = installed
        kernels = ", ".join(installed) if installed else "none found in /lib/modules"
        return passed(f"{pretty}; no running kernel (sysroot); installed kernels: {kernels}", **evidence)
    return warn(f"{pretty}; the running kernel could not be read", evidence,
                Fix("Check that /proc is mounted.", ("uname -r", "mount | grep ' /proc '")))
