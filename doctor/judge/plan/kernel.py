"""``--kernel RELEASE``: the machine after a new kernel is installed and booted (``dnf update kernel``, a new
linux-image), judged from the kmod facts: is there an NVIDIA module for it, and will it load.

Where the module comes from decides it (docs/plan.md):
- DKMS (or akmods) builds it when the kernel is installed, and only against that kernel's headers
  (``kmod.kernel_headers``): present, the module is there (DKMS's version of it); absent, none, and the step is to
  install the headers first;
- a precompiled module (a RHEL ``nvidia-driver:NNN`` stream, Ubuntu's linux-modules-nvidia-BRANCH-KERNEL, a
  kmod-nvidia package) exists for the kernel only where the repository has a build for it: the cached repository
  metadata (``kmod.repo_modules``) says so; without metadata it is unknown (``kmod.module_unknown``: the checks skip);
- RHEL's weak-updates link a kmod into a new kernel of the same minor release (its kABI): the matrix says which
  minor release a kernel belongs to (os.toml);
- NVIDIA's .run installer without DKMS rebuilds nothing.
With Secure Boot on, a DKMS build is signed with DKMS's key where one exists (DKMS 3 signs what it builds with
/var/lib/dkms/mok.pub, Ubuntu's DKMS with shim-signed's MOK); an unsigned module is refused (DLD-DRV-005).

Nothing here reads a host: facts and the matrix only."""

from __future__ import annotations

import re
from functools import cmp_to_key
from typing import Any, Dict, List, Mapping, Optional, Tuple

from dl_doctor.judge.distro import os_family, package_manager
from dl_doctor.fixes import root_command
from dl_doctor.judge.plan.change import Change, PlanInputError, WhatIf
from dl_doctor.model import Facts
from dl_doctor.versions import kernel_key

MAX_RELEASE = 128
# uname -r: 5.15.0-1051-aws, 4.18.0-513.5.1.el8_9.x86_64, 6.1.66-91.160.amzn2023.x86_64, 6.8.0-1008-aws+
_RELEASE = re.compile(r"[0-9]{1,4}\.[0-9]{1,4}(?:\.[0-9]{1,6})?(?:[-.+~_][A-Za-z0-9]{1,64}){0,16}\+?")
_DIST = re.compile(r"\.(?:el[0-9]{1,2}(?:_[0-9]{1,2})?|amzn[0-9]{1,4}|fc[0-9]{1,3})(?:\.[A-Za-z0-9_]{1,16})?$")
_ARCH = re.compile(r"\.(?:x86_64|aarch64|ppc64le|s390x)$")

DKMS_SIGNING = "https://github.com/dell/dkms/blob/master/README.md#module-signing"
NVIDIA_PRECOMPILED = "https://github.com/NVIDIA/yum-packaging-nvidia-driver/blob/main/docs/guide-rhel8.md"


def apply(w: WhatIf, value: str, matrix: Any, options: Mapping[str, Any]) -> Change:
    release = value if isinstance(value, str) else ""
    if len(release) > MAX_RELEASE or not _RELEASE.fullmatch(release):
        raise PlanInputError(f"--kernel {release[:60]!r}: not a kernel release as uname -r prints it "
                             f"(5.15.0-1051-aws, 4.18.0-513.5.1.el8_9.x86_64)")
    change = Change(kind="kernel", option=f"--kernel {release}")
    kmod = w.get("kmod")
    running = w.get("kmod.running_kernel")
    current = running or w.get("kmod.boot_default.kernel") or w.get("kernel.release")
    if release == current:
        change.summary = f"kernel {release}: already the {'running' if running else 'boot'} kernel"
        change.notes.append(f"{release} is already the {'running' if running else 'default boot'} kernel: nothing "
                            f"changes")
        return change
    change.summary = f"kernel {current or 'unknown'} -> {release}"
    if not isinstance(kmod, dict):
        change.unknown = True
        change.notes.append("these facts have no kmod facts (kernels and NVIDIA modules): what the new kernel means "
                            "for the NVIDIA module is unknown")
        return change
    facts = Facts(w.snapshot)
    base = current  # the kernel whose module the new one is modelled on

    # the kernel itself: installed, the default (an update makes the new kernel the default), running after the reboot
    w.set(change, "kernel.release", release)
    if running:
        w.set(change, "kmod.running_kernel", release)
    else:
        change.notes.append(f"no running kernel in these facts (an image): {release} is the kernel it boots")
    w.set(change, "kmod.boot_default", {"kernel": release, "source": "the kernel update (dl-doctor plan --kernel)"})
    newly_installed = release not in (w.get("kmod.installed_kernels") or [])
    for key in ("kernel.installed", "kmod.installed_kernels"):
        have = w.get(key)
        if isinstance(have, list) and release not in have:
            w.set(change, key, sorted(have + [release], key=cmp_to_key(_cmp)))
    pm = package_manager(facts)
    if newly_installed:
        change.step(f"Install kernel {release}", [pm.install(_kernel_package(facts, release))])

    entries, known, loads_note = _module_for(w, change, facts, matrix, release, base, pm)
    modules = [m for m in kmod.get("nvidia_modules") or [] if isinstance(m, dict)]
    if entries and not any(m.get("kernel") == release for m in modules):
        w.set(change, "kmod.nvidia_modules", modules + entries)
    if not known:
        w.set(change, "kmod.module_unknown", sorted(set((w.get("kmod.module_unknown") or []) + [release])))

    _running_modules(w, change, release, base, entries, known, bool(running))
    _loaded(w, change, facts, entries, known, bool(running), loads_note)
    if w.get("kernel_log.unknown_symbols"):
        w.drop(change, "kernel_log.unknown_symbols", "the module loader's refusals of this boot were of the old "
                                                     "kernel's modules")
    return change


def _cmp(a: str, b: str) -> int:
    ka, kb = kernel_key(a), kernel_key(b)
    return (ka > kb) - (ka < kb)


def _kernel_package(facts: Facts, release: str) -> str:
    return f"linux-image-{release}" if os_family(facts) == "debian" else f"kernel-{release}"


def _headers_packages(facts: Facts, release: str) -> List[str]:
    if os_family(facts) == "debian":
        return [f"linux-headers-{release}"]
    if os_family(facts) == "suse":
        return ["kernel-default-devel"]
    return [f"kernel-devel-{release}"]


def _base_module(modules: List[Dict[str, Any]], base: Optional[str]) -> Optional[Dict[str, Any]]:
    """The nvidia.ko of the current kernel the new one is modelled on (a real build before a weak-updates link)."""
    here = [m for m in modules if m.get("kernel") == base]
    return next((m for m in here if m.get("kind") != "weak-updates"), here[0] if here else None)


def _moved(module: Optional[Dict[str, Any]], base: Optional[str], release: str, kind: str,
           default_dir: str) -> Dict[str, Any]:
    """A module entry for ``release`` laid out as ``module`` is for ``base`` (or in ``default_dir``)."""
    path = (module or {}).get("path") or ""
    if base and path.startswith(f"/lib/modules/{base}/") and (module or {}).get("kind") != "weak-updates":
        path = f"/lib/modules/{release}/" + path[len(f"/lib/modules/{base}/"):]
    else:
        path = f"/lib/modules/{release}/{default_dir}/nvidia.ko"
    vermagic = (module or {}).get("vermagic") or ""
    parts = vermagic.split(" ", 1)
    entry = {"kernel": release, "path": path, "kind": kind,
             "vermagic": f"{release} {parts[1]}" if vermagic and len(parts) == 2 else (release if vermagic else None),
             "version": (module or {}).get("version"), "signed": (module or {}).get("signed")}
    for key in ("license", "depends", "name"):
        if (module or {}).get(key) is not None:
            entry[key] = module[key]  # type: ignore[index]
    return entry


def _module_for(w: WhatIf, change: Change, facts: Facts, matrix: Any, release: str, base: Optional[str],
                pm: Any) -> Tuple[List[Dict[str, Any]], bool, str]:
    """The NVIDIA module entries the new kernel gets, whether that is known, and a note on its signing."""
    modules = [m for m in facts.get("kmod.nvidia_modules") or [] if isinstance(m, dict)]
    here = [m for m in modules if m.get("kernel") == release]
    if here:
        change.notes.append(f"the tree already has an NVIDIA module for {release} ({here[0].get('path')})")
        return here, True, ""
    for log in facts.get("kmod.dkms.build_logs") or []:
        if isinstance(log, dict) and log.get("failed") and log.get("kernel") == release:
            change.notes.append(f"DKMS already tried to build nvidia {log.get('version')} for {release} and failed "
                                f"({log.get('path')}): no module")
            return [], True, ""
    old = _base_module(modules, base)
    stream = (facts.get("kmod.dnf_module") or {}).get("stream") or ""
    dkms = bool(facts.get("kmod.dkms.registered")) or stream.endswith("dkms")
    if dkms or facts.get("kmod.akmods"):
        return _built_here(w, change, facts, release, base, old, pm, "DKMS" if dkms else "akmods")
    family = os_family(facts)
    if family in ("rhel", "amzn") and old is not None and old.get("kind") in ("extra", "weak-updates"):
        link = _weak_link(change, facts, matrix, release, base, old)
        if link is not None:
            return [link], True, ""
    dpkg = [p for p in facts.get("kmod.dpkg_packages") or [] if isinstance(p, dict)]
    ubuntu = [p["package"] for p in dpkg if str(p.get("package", "")).startswith("linux-modules-nvidia-")]
    if stream or ubuntu or (family in ("rhel", "amzn") and old is not None and old.get("kind") == "extra"
                            and not facts.get("kmod.runfile_installer")):
        return _precompiled(change, facts, release, base, old, pm, stream, ubuntu)
    if facts.get("kmod.runfile_installer"):
        version = (old or {}).get("version") or facts.get("nvidia_driver.kernel_module.version") or "VERSION"
        change.notes.append(f"the driver was installed with NVIDIA's .run installer without DKMS: nothing builds the "
                            f"module for {release}")
        change.step(f"Re-run the NVIDIA installer after booting {release} (it builds the module for the running "
                    f"kernel), or reinstall it now with --dkms so that kernel updates rebuild it",
                    [pm.install(*_headers_packages(facts, release)),
                     f"sudo sh ./NVIDIA-Linux-$(uname -m)-{version}.run --silent --dkms"], order=90)
        return [], True, ""
    if not modules and not facts.get("nvidia_driver.userspace.libraries"):
        change.notes.append("no NVIDIA driver is installed: the new kernel needs no module")
        return [], True, ""
    change.notes.append(f"how the NVIDIA module was installed is not known from these facts (no DKMS, akmods, kmod "
                        f"stream, package or .run installer found): whether {release} gets a module is unknown")
    return [], False, ""


def _built_here(w: WhatIf, change: Change, facts: Facts, release: str, base: Optional[str],
                old: Optional[Dict[str, Any]], pm: Any, tool: str) -> Tuple[List[Dict[str, Any]], bool, str]:
    """DKMS or akmods: built at kernel install (akmods: at boot) against the new kernel's headers, if present."""
    headers = facts.get("kmod.kernel_headers")
    if headers is None:
        change.notes.append(f"these facts do not say which kernels' headers are installed (older facts): whether "
                            f"{tool} can build the module for {release} is unknown")
        return [], False, ""
    builds = [b for b in facts.get("kmod.dkms.builds") or [] if isinstance(b, dict)]
    version = next((b.get("version") for b in builds if b.get("kernel") == base), None) \
        or (builds[-1].get("version") if builds else None) or (old or {}).get("version") \
        or facts.get("nvidia_driver.kernel_module.version")
    if release not in headers:
        step = (f"Install the headers for {release} first (with the kernel, in one transaction), so that {tool} "
                f"builds the module when the kernel is installed")
        change.step(step, [pm.install(*_headers_packages(facts, release))], order=5)
        if not headers:
            # no kernel's headers in the facts, yet the module was built (and DKMS needs them, as its package
            # requires kernel-devel / linux-headers): a tree that does not show them
            change.notes.append(f"the facts show no kernel's headers, yet {tool} built the module for the running "
                                f"kernel: whether {release}'s headers will be there is not known")
            return [], False, ""
        else:
            change.notes.append(f"{tool} builds the module when {release} is installed only if its headers are "
                                f"there, and they are not (/lib/modules/{release}/build): no module")
            return [], True, ""
    entry = _moved(old, base, release, "dkms" if (old or {}).get("kind") == "dkms" else (old or {}).get("kind")
                   or "dkms", "updates/dkms")
    entry["version"] = version or entry.get("version")
    note = ""
    if tool == "DKMS":
        key = facts.get("kmod.dkms.signing_key")
        old_signed = (old or {}).get("signed")
        if key:
            entry["signed"] = True
            note = f"DKMS signs it with {key}"
        elif old_signed is not None:
            entry["signed"] = old_signed
            note = "DKMS signed the module it built for the current kernel" if old_signed else \
                "DKMS did not sign the module it built for the current kernel"
        elif "signing_key" in (facts.get("kmod.dkms") or {}):
            entry["signed"] = False
            note = ("no DKMS signing key in the tree (/var/lib/dkms/mok.pub, /var/lib/shim-signed/mok/MOK.der): "
                    "the module is unsigned (DKMS 2), or signed with a key DKMS 3 makes then, which is not enrolled")
        else:
            entry["signed"] = None
        change.sources.append(DKMS_SIGNING)
    entry["note"] = f"planned: {tool} {version or ''} built at kernel install (dl-doctor plan)".replace("  ", " ")
    change.notes.append(f"{tool} builds nvidia {version or '(version unknown)'} for {release}: its headers are "
                        f"installed")
    if tool == "DKMS" and version:
        dkms = facts.get("kmod.dkms")
        if isinstance(dkms, dict) and isinstance(dkms.get("builds"), list):
            w.set_in(change, dkms, "builds", builds + [{"version": version, "kernel": release}], "kmod.dkms.builds")
        change.step(f"After installing {release}, see that DKMS built the module for it",
                    [f"dkms status nvidia -k {release}"], order=90)
    return [entry], True, note


def _rhel_minor(matrix: Any, kernel: Optional[str]) -> Optional[Dict[str, Any]]:
    if not kernel or matrix is None or not hasattr(matrix, "rhel_release_for_kernel"):
        return None
    return matrix.rhel_release_for_kernel(kernel)


def _weak_link(change: Change, facts: Facts, matrix: Any, release: str, base: Optional[str],
               old: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """RHEL's weak-updates: a kmod built for one kernel is linked into a new kernel of the same minor release."""
    target = old.get("link_kernel") if old.get("kind") == "weak-updates" else old.get("kernel")
    new_minor, old_minor = _rhel_minor(matrix, release), _rhel_minor(matrix, target)
    if os_family(facts) != "rhel" or not new_minor or not old_minor:
        return None
    if new_minor.get("verified") is False or old_minor.get("verified") is False:
        change.verified = False
    if hasattr(matrix, "source_urls"):
        change.sources.extend(matrix.source_urls(new_minor, old_minor))
    if new_minor.get("release") != old_minor.get("release"):
        change.notes.append(f"{release} is RHEL {new_minor.get('release')}, the kmod was built for {target} (RHEL "
                            f"{old_minor.get('release')}): weak-updates do not link it across minor releases")
        return None
    real = old if old.get("kind") != "weak-updates" else None
    rel = (real or old).get("path", "").split("/extra/", 1)[-1] if real else old.get("path", "").split(
        "/weak-updates/", 1)[-1]
    entry = {"kernel": release, "path": f"/lib/modules/{release}/weak-updates/{rel.lstrip('/') or 'nvidia.ko'}",
             "kind": "weak-updates", "link": old.get("link") or old.get("path"), "link_kernel": target,
             "vermagic": old.get("vermagic"), "version": old.get("version"), "signed": old.get("signed"),
             "note": "planned: a weak-updates link (dl-doctor plan)"}
    change.notes.append(f"{release} and {target} are both RHEL {new_minor.get('release')} (one kABI): weak-modules "
                        f"links the kmod built for {target} into {release}")
    return entry


def _repo_kernel(release: str) -> str:
    """The kernel as a kmod package names it: RHEL's version-release without the dist tag and arch."""
    return _DIST.sub("", _ARCH.sub("", release))


def _precompiled(change: Change, facts: Facts, release: str, base: Optional[str], old: Optional[Dict[str, Any]],
                 pm: Any, stream: str, ubuntu: List[str]) -> Tuple[List[Dict[str, Any]], bool, str]:
    """A precompiled module: it exists for the kernel only where the repository has a build for it."""
    repo = facts.get("kmod.repo_modules")
    change.sources.append(NVIDIA_PRECOMPILED)
    if ubuntu:
        m = re.fullmatch(r"linux-modules-nvidia-([0-9]{2,4}(?:-(?:server|open)){0,2})-[0-9].*", ubuntu[0])
        branch = m.group(1) if m else None
        want = f"linux-modules-nvidia-{branch}-{release}" if branch else None
        what = f"{want}" if want else "linux-modules-nvidia-BRANCH-" + release

        def matches(p: Dict[str, Any]) -> bool:
            return p.get("package") == want

        def same_stream(p: Dict[str, Any]) -> bool:
            return p.get("branch") == branch
    else:
        branch = stream.split("-")[0] if stream[:1].isdigit() else None
        driver = (old or {}).get("version") or facts.get("nvidia_driver.kernel_module.version")
        kernel = _repo_kernel(release)
        what = f"kmod-nvidia-{driver or 'DRIVER'}-{kernel}"

        major = branch or (driver.split(".")[0] if driver else None)

        def matches(p: Dict[str, Any]) -> bool:
            # the same driver, or (the stream follows its branch) a later release that dnf installs with the kernel
            return p.get("kernel") == kernel and (major is None or str(p.get("branch")).split(".")[0] == major)

        def same_stream(p: Dict[str, Any]) -> bool:
            return major is None or str(p.get("branch")).split(".")[0] == major
    label = f"the nvidia-driver:{stream} stream" if stream else "the precompiled module package"
    if not isinstance(repo, dict) or not repo.get("sources"):
        change.notes.append(f"the module comes from {label}; no repository metadata is in these facts, so whether "
                            f"the repository has {what} is unknown")
        change.step(f"Before updating, check that the repository has {what}",
                    [f"apt-cache policy {what}" if ubuntu
                     else f"dnf list --showduplicates 'kmod-nvidia-*{_repo_kernel(release)}*'"],
                    order=20)
        return [], False, ""
    packages = [p for p in repo.get("packages") or [] if isinstance(p, dict)]
    hits = [p for p in packages if matches(p)]
    hit = next((p for p in hits if ubuntu or p.get("branch") == driver), hits[-1] if hits else None)
    if hit is None and repo.get("truncated"):
        change.notes.append(f"the repository metadata in these facts was read only in part: whether it has {what} is "
                            f"unknown")
        return [], False, ""
    if hit is None and not any(same_stream(p) for p in packages):
        change.notes.append(f"the repository metadata in these facts ({len(repo['sources'])} file(s)) lists no "
                            f"package of {label} at all (not the repository it came from, or not refreshed): "
                            f"whether {what} exists is unknown")
        return [], False, ""
    if hit is None:
        change.notes.append(f"the repository metadata lists packages of {label}, but none for {release} ({what}): "
                            f"no module for it (NVIDIA builds precompiled modules only for released kernels; dnf's "
                            f"nvidia plugin holds back a kernel that has none)")
        if ubuntu:
            fix: List[Any] = [pm.install(f"nvidia-dkms-{branch}" if branch else "nvidia-dkms-BRANCH",
                                         *_headers_packages(facts, release)),
                   f"# or keep the current kernel: sudo apt-mark hold linux-image-{base}"]
        else:
            fix = [root_command(f"dnf module switch-to -y nvidia-driver:{branch or 'latest'}-dkms"),
                   pm.install(*_headers_packages(facts, release)),
                   "# or keep the current kernel: sudo dnf update --exclude='kernel*'"]
        change.step(f"No precompiled module exists for {release}: switch to the DKMS packages (with its headers), "
                    f"or hold the kernel until one is published", fix, order=20)
        return [], True, ""
    entry = _moved(old, base, release, (old or {}).get("kind") or "extra",
                   "kernel/nvidia" if ubuntu else "extra")
    entry["version"] = (old or {}).get("version") if ubuntu else hit.get("branch")
    if not ubuntu and (old or {}).get("version") and hit.get("branch") != (old or {}).get("version"):
        change.notes.append(f"the repository's build for {release} is of driver {hit.get('branch')}, not "
                            f"{(old or {}).get('version')}: dnf installs it, and the driver's user space with it "
                            f"(plan --driver {hit.get('branch')} judges that)")
    entry["signed"] = True
    entry["note"] = f"planned: from {hit.get('package')} {hit.get('version')} (dl-doctor plan)"
    change.notes.append(f"the repository has {hit.get('package')} {hit.get('version')} for {release} "
                        f"({hit.get('source')}); precompiled modules are signed by their builder")
    change.step(f"Pin the kmod stream and install the module package built for {release} with the kernel",
                [pm.install(str(hit.get("package")))]
                + ([root_command(f"dnf module enable -y nvidia-driver:{stream}")] if stream else []),
                order=20)
    return [entry], True, "precompiled modules are signed"


def _running_modules(w: WhatIf, change: Change, release: str, base: Optional[str], entries: List[Dict[str, Any]],
                     known: bool, running: bool) -> None:
    """The running kernel's NVIDIA modules, moved to the new kernel; its modules.dep is not in these facts."""
    if not running:
        return
    if not known:
        w.set(change, "kmod.running_modules", None)
        return
    old = w.get("kmod.running_modules")
    old_mods = [m for m in (old or {}).get("modules") or [] if isinstance(m, dict)] \
        if isinstance(old, dict) and old.get("kernel") == base else []
    mods: List[Dict[str, Any]] = []
    for entry in entries:
        same = [m for m in old_mods] if old_mods else [{"name": "nvidia", "path": entry.get("path"), "depends": None}]
        for m in same:
            path = str(m.get("path") or "")
            name_file = path.rsplit("/", 1)[-1] or "nvidia.ko"
            new_path = entry["path"].rsplit("/", 1)[0] + "/" + name_file if m.get("name") != "nvidia" \
                else entry["path"]
            mods.append({"name": m.get("name") or "nvidia", "path": new_path, "vermagic": entry.get("vermagic"),
                         "version": entry.get("version"), "depends": m.get("depends"),
                         "note": "planned (dl-doctor plan)"})
        break
    w.set(change, "kmod.running_modules", {"kernel": release, "modules_dep": False, "modules_dep_entries": 0,
                                           "builtin_entries": 0, "modules": mods})
    change.notes.append(f"{release}'s modules.dep is not in these facts: what the kernel provides the NVIDIA modules "
                        f"is not judged")


def _loaded(w: WhatIf, change: Change, facts: Facts, entries: List[Dict[str, Any]], known: bool, running: bool,
            note: str) -> None:
    """Whether the nvidia module loads after the reboot: only where a module exists for the new kernel, and, with
    Secure Boot on, is signed by a key the kernel trusts."""
    module = w.get("nvidia_driver.kernel_module")
    if not running or not isinstance(module, dict) or module.get("loaded") is None:
        return
    sb = facts.get("kmod.secure_boot.enabled")
    loads: Optional[bool]
    entry = entries[0] if entries else None
    if not known:
        loads = None
    elif entry is None:
        loads = False
    elif sb and entry.get("signed") is False:
        loads = False
        change.notes.append(f"Secure Boot is on and the module for {entry['kernel']} is not signed: the kernel "
                            f"refuses it ({note})" if note else f"Secure Boot is on and the module for "
                            f"{entry['kernel']} is not signed: the kernel refuses it")
        change.step("Enroll DKMS's signing key (confirm it at the console on the next boot), or the module is "
                    "refused under Secure Boot",
                    [root_command("mokutil --import /var/lib/dkms/mok.pub",
                                  note="Ubuntu: /var/lib/shim-signed/mok/MOK.der")],
                    order=25)
    elif sb and (entry.get("signed") is None or not module.get("loaded")):
        loads = None  # signed by a key whose enrollment these facts cannot show
    else:
        loads = True
    w.set(change, "nvidia_driver.kernel_module.loaded", loads)
    if loads and entry and entry.get("version") and entry.get("version") != module.get("version"):
        w.set(change, "nvidia_driver.kernel_module.version", entry["version"])
    if loads is False:
        w.set(change, "nvidia_driver.kernel_module.version", None)
        mods = w.get("nvidia_driver.modules")
        if isinstance(mods, list):
            w.set(change, "nvidia_driver.modules", [m for m in mods if not str(m).startswith("nvidia")])
        for dev in w.get("gpu_pci.devices") or []:
            if isinstance(dev, dict) and dev.get("driver") == "nvidia":
                w.set_in(change, dev, "driver", None, f"gpu_pci.devices[{dev.get('bdf')}].driver")
        if w.get("nvml") is not None:
            w.drop(change, "nvml", "NVML needs the nvidia module, which does not load after the reboot")
    elif loads is None:
        w.set(change, "nvidia_driver.modules", None)
