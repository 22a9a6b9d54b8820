"""The operating system and kernel: identification, and the kernel settings multi-GPU training depends on."""

from __future__ import annotations

from typing import Any, List

from dl_doctor.checks.common import os_family
from dl_doctor.fixes import kernel_arg, reboot, write_file
from dl_doctor.model import Facts, Fix, Result, check, passed, warn


@check(
    id="DLD-SYS-001", slug="os-unidentified", title="Operating system and kernel identified",
    remedy="none", drain=False,
    problem="The operating system or kernel could not be identified",
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
def os_identified(facts: Facts, matrix=None) -> Result:
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
        release = _rhel_release_of_kernel(facts, matrix, kernel)
        if release is not None:
            evidence["kernel_rhel_release"] = release["release"]
            system = str(facts.get("os.version_id") or "")
            if release["release"] != system and release.get("verified", True) and system:
                return warn(f"{pretty}; but the running kernel {kernel} is RHEL {release['release']}'s: the system was "
                            f"updated without a reboot, or the kernel is held back (NVIDIA's precompiled kmod streams "
                            f"and DKMS builds follow the release's kernel)", evidence,
                            Fix("Boot the release's kernel (or pin the release to the kernel you keep).",
                                ("grubby --default-kernel", reboot("into the newest installed kernel"),
                                 f"# or keep {kernel}: sudo subscription-manager release --set="
                                 f"{release['release']}")))
            note = "" if release.get("verified", True) else ", unverified"
            return passed(f"{pretty}; kernel {kernel} (RHEL {release['release']}'s{note})", **evidence)
        return passed(f"{pretty}; kernel {kernel}", **evidence)
    installed = facts.get("kernel.installed") or []
    if not facts.live:
        evidence["kernel.installed"] = installed
        kernels = ", ".join(installed) if installed else "none found in /lib/modules"
        return passed(f"{pretty}; no running kernel (sysroot); installed kernels: {kernels}", **evidence)
    return warn(f"{pretty}; the running kernel could not be read", evidence,
                Fix("Check that /proc is mounted.", ("uname -r", "mount | grep ' /proc '")))


@check(
    id="DLD-SYS-002", slug="kernel-settings-hurt-training",
    remedy="fix-configuration", drain=False,
    problem="Kernel settings or limits hold back multi-GPU training",
    title="Kernel settings and limits suit multi-GPU training",
    tags=("system", "kernel", "performance"), requires=("limits",),
    what="""Reads the IOMMU flags on the kernel command line, automatic NUMA balancing, the CPU frequency governor and
    the open-files limit.""",
    why="""With the IOMMU in translation mode (intel_iommu=on / amd_iommu=on without iommu=pt), GPU peer-to-peer traffic
    through the PCIe switches stalls and NCCL hangs or crawls; the 'powersave' governor slows data loading; a
    1,024 open-files limit breaks DataLoader workers ('Too many open files'). Automatic NUMA balancing migrates pages
    under running GPU jobs.""",
    fix="""Add iommu=pt to the kernel command line (or disable the IOMMU), set the governor to performance, raise nofile
    to 65536 or more (below 8192 is reported); automatic NUMA balancing (the kernel's default) is only noted: turning it
    off (sysctl kernel.numa_balancing=0) is a tuning choice on multi-socket GPU hosts.""",
)
def kernel_settings(facts: Facts) -> Result:
    iommu = facts.get("limits.iommu_cmdline") or []
    problems = []
    cmds: List[Any] = []
    enabled = any(t in ("intel_iommu=on", "amd_iommu=on", "amd_iommu=force") for t in iommu)
    if enabled and "iommu=pt" not in iommu and (facts.get("gpu_pci.gpu_count") or 0) > 1:
        problems.append(f"the IOMMU translates DMA ({' '.join(iommu)}) on a {facts.get('gpu_pci.gpu_count')}-GPU host: "
                        "peer-to-peer traffic can hang NCCL")
        cmds.append(kernel_arg("iommu=pt", os_family(facts)))
    gov = facts.get("limits.cpu_governor")
    cpufreq = facts.get("limits.cpufreq_driver")
    dynamic = cpufreq in ("intel_pstate", "amd-pstate-epp")  # their "powersave" is a dynamic policy, not a floor
    if gov == "powersave" and not dynamic:
        problems.append("the CPU frequency governor is powersave")
        cmds.append("sudo cpupower frequency-set -g performance")
    nofile = ((facts.get("limits.rlimits") or {}).get("nofile") or {}).get("soft")
    if isinstance(nofile, int) and nofile < 8192:
        problems.append(f"the open-files limit is {nofile} (DataLoader workers need more)")
        cmds.append(write_file("/etc/security/limits.d/90-nofile.conf", "* - nofile 1048576\n",
                               note="then log in again"))
    notes = []
    if gov == "powersave" and dynamic:
        notes.append(f"the CPU governor is {cpufreq}'s powersave, a dynamic policy that raises the clock under load "
                     f"(not the legacy lowest-frequency governor); performance gains little for training")
    if facts.get("limits.numa_balancing") == 1 and (facts.get("limits.numa_nodes") or 1) > 1 and \
            (facts.get("gpu_pci.gpu_count") or 0) > 0:
        # the kernel's default on every multi-socket host, and jobs run fine with it: a tuning note, not a problem
        notes.append("automatic NUMA balancing is on (the kernel's default); turning it off "
                     "(sysctl kernel.numa_balancing=0) can steady the step times of long jobs")
    evidence = {"iommu_cmdline": iommu, "cpu_governor": gov, "nofile": nofile,
                "numa_balancing": facts.get("limits.numa_balancing"), "numa_nodes": facts.get("limits.numa_nodes"),
                "transparent_hugepage": facts.get("limits.transparent_hugepage")}
    if problems:
        return warn("; ".join(problems + notes), evidence, Fix("Adjust these settings for GPU training.", tuple(cmds)))
    return passed("IOMMU, CPU governor, open-files limit and NUMA balancing are fine for training"
                  + (f"; note: {'; '.join(notes)}" if notes else ""), **evidence)


def _rhel_release_of_kernel(facts: Facts, matrix, kernel: str):
    """The RHEL minor release whose GA kernel this is (compatibility matrix, os.toml), on RHEL-family systems."""
    if matrix is None or os_family(facts) != "rhel" or not hasattr(matrix, "rhel_release_for_kernel"):
        return None
    return matrix.rhel_release_for_kernel(kernel)
