"""``--driver VERSION``: the user-space driver and the kernel module at another version (``--driver-flavor``)."""

from __future__ import annotations

import posixpath
import re
from typing import Any, Dict, List, Mapping, Optional

from dl_doctor import versions
from dl_doctor.judge.plan.change import Change, PlanInputError, WhatIf

_DRIVER = re.compile(r"^\d{3,4}\.\d{1,4}(?:\.\d{1,4})?$")
DRIVER_LIBRARIES = ("libcuda", "libnvidia-ml")
# whose copy of the driver libraries follows the host's driver: the host's own, and the NVIDIA container runtime's
# and CDI's bind mounts of them (an image's own copy, WSL2's and another volume's do not)
FOLLOWS_HOST = (None, "host", "container-runtime", "cdi")


def known_branches(matrix: Any) -> List[int]:
    """The driver branches the matrix knows: those of the toolkits' driver floors and the architectures' last
    branches."""
    out = set()
    for entry in matrix.entries("toolkit"):
        for v in [entry.get("min_driver")] + [u.get("min_driver") for u in entry.get("updates") or []]:
            b = versions.major(v)
            if b:
                out.add(b)
    for entry in matrix.entries("architecture"):
        if isinstance(entry.get("last_driver_branch"), int):
            out.add(entry["last_driver_branch"])
    return sorted(out)


def parse(value: str, matrix: Any) -> Dict[str, Any]:
    text = (value or "").strip()
    if len(text) > 32 or not _DRIVER.match(text):
        raise PlanInputError(f"--driver: '{text[:40]}' is not an NVIDIA driver version (like 550.90.07 or 570.133)")
    branch = versions.major(text)
    branches = known_branches(matrix)
    # a branch between two the matrix knows (R565 between the CUDA 12.6 and 12.8 floors) is judged by the floors
    # below it; one newer than all of them is a driver the matrix cannot speak for
    if not branches or branch is None or branch > branches[-1]:
        near = sorted(branches, key=lambda b: abs(b - (branch or 0)))[:3]
        raise PlanInputError(f"--driver: branch R{branch} is not in the matrix (newer than every branch it knows); "
                             "nearest known branches: " + ", ".join(f"R{b}" for b in sorted(near)))
    entry = matrix.driver(text)
    if entry is None:
        raise PlanInputError(f"--driver: {text} is older than every CUDA release the matrix knows; "
                             + "; ".join(matrix.closest("driver", text)))
    return {"version": text, "branch": branch, "entry": entry}


def _renamed(path: str, old: Optional[str], new: str) -> str:
    base = posixpath.basename(path)
    if old and old in base:
        return posixpath.join(posixpath.dirname(path), base.replace(old, new))
    m = re.match(r"^(lib[\w-]+\.so)\.\d[\d.]*$", base)
    return posixpath.join(posixpath.dirname(path), f"{m.group(1)}.{new}") if m else path


def _library_dir(w: WhatIf) -> str:
    ids = [str(w.get("os.id") or "")] + [str(i) for i in w.get("os.id_like") or [] if isinstance(i, str)]
    return "/usr/lib/x86_64-linux-gnu" if any(i in ("debian", "ubuntu") for i in ids) else "/usr/lib64"


def _fabric_manager(w: WhatIf, change: Change, old: Optional[str], new: str, branch: Optional[int]) -> None:
    """The fabric manager is its own package, locked to the driver's exact version. Within a branch the package
    manager's upgrade moves both (nvidia-fabricmanager-BRANCH on Ubuntu, the module stream's fm profile on RHEL); to
    another branch it is another package, installed on purpose: it stays where it is, and DLD-GPU-004 says so."""
    fm = w.get("gpu_services.fabric_manager")
    version = (fm.get("version") or {}) if isinstance(fm, dict) and isinstance(fm.get("version"), dict) else {}
    have = version.get("version")
    if not isinstance(have, str) or have == new:
        return
    if old and versions.major(have) == versions.major(old) == branch:
        w.set_in(change, version, "version", new, "gpu_services.fabric_manager.version.version")
        change.notes.append(f"the fabric manager ({have}) is upgraded with the driver: same branch R{branch}")
    else:
        change.notes.append(f"the fabric manager stays {have}: another branch's fabric manager is another package")


def apply(w: WhatIf, value: str, matrix: Any, options: Mapping[str, Any]) -> Change:
    parsed = parse(value, matrix)
    new, entry = parsed["version"], parsed["entry"]
    flavor = options.get("driver_flavor")
    old = w.get("nvidia_driver.kernel_module.version") or w.get("nvml.driver_version")
    old_flavor = w.get("nvidia_driver.kernel_module.flavor")
    change = Change("driver", f"--driver {new}" + (f" --driver-flavor {flavor}" if flavor else ""),
                    verified=bool(entry.get("verified", True)), sources=list(entry.get("sources") or []))
    change.summary = (f"driver {old or 'none'} -> {new} (CUDA {entry['max_cuda']})"
                      + (f", {old_flavor or 'unknown'} -> {flavor} kernel module" if flavor and flavor != old_flavor
                         else ""))
    if old == new and (not flavor or flavor == old_flavor):
        change.notes.append(f"driver {new} is what the facts already record: nothing changes")
        return change

    by = w.get("nvidia_driver.runtime.by")
    if w.get("nvidia_driver.runtime.wsl"):
        return _wsl(w, change, new, entry)
    # the kernel module: after the install and a reboot (or a module reload) it is the new version
    w.set(change, "nvidia_driver.kernel_module.version", new)
    running = w.get("kmod.running_kernel") or w.get("kernel.release")
    if running and running in (w.get("kmod.module_unknown") or []):
        change.notes.append(f"whether the module loads into {running} is not known (see the kernel change)")
    else:
        w.set(change, "nvidia_driver.kernel_module.loaded", True)
    if flavor:
        w.set(change, "nvidia_driver.kernel_module.flavor", flavor)
    elif not old_flavor:
        change.notes.append("the kernel module's flavour (open or proprietary) is not recorded: --driver-flavor says")
    for key in ("build", "gcc"):
        w.drop(change, f"nvidia_driver.kernel_module.{key}", "the new module's build line is not known before it is "
                                                             "built")
    if isinstance(w.get("nvml"), dict) and not w.get("nvml.init_error"):
        w.set(change, "nvml.driver_version", new)
        w.set(change, "nvml.cuda_driver_version", entry["max_cuda"])

    # the user-space driver: the host's libraries (and the container runtime's mounts of them) follow the module
    libs = w.get("nvidia_driver.userspace.libraries")
    kept: List[str] = []
    if isinstance(libs, list) and libs:
        for n, lib in enumerate(libs):
            if not isinstance(lib, dict):
                continue
            if lib.get("provided_by") in FOLLOWS_HOST and lib.get("library") in DRIVER_LIBRARIES:
                w.set_in(change, lib, "path", _renamed(str(lib.get("path") or ""), lib.get("version"), new),
                         f"nvidia_driver.userspace.libraries[{n}].path")
                w.set_in(change, lib, "version", new, f"nvidia_driver.userspace.libraries[{n}].version")
            elif lib.get("version"):
                kept.append(str(lib["version"]))
                change.notes.append(f"{lib.get('path')} ({lib.get('provided_by')}) is not the host driver's: it "
                                    f"keeps version {lib.get('version')}")
    else:
        base = _library_dir(w)
        w.set(change, "nvidia_driver.userspace.libraries",
              [{"library": name, "version": new, "path": f"{base}/{name}.so.{new}", "provided_by": "host"}
               for name in DRIVER_LIBRARIES])
    w.set(change, "nvidia_driver.userspace.versions", sorted(set([new] + kept), key=versions.release))

    # the module files on disk: every installed NVIDIA module is replaced by the new version's
    for where in ("kmod.nvidia_modules", "kmod.running_modules.modules"):
        mods = w.get(where)
        for n, mod in enumerate(mods if isinstance(mods, list) else []):
            if isinstance(mod, dict) and mod.get("version") and mod.get("version") != new:
                w.set_in(change, mod, "version", new, f"{where}[{n}].version")
    builds = w.get("kmod.dkms.builds")
    if isinstance(builds, list) and builds:
        headers = set(h for h in w.get("kmod.kernel_headers") or [] if isinstance(h, str))
        kernels = sorted({str(b.get("kernel")) for b in builds if isinstance(b, dict) and b.get("kernel")})
        rebuilt = [k for k in kernels if not headers or k in headers]
        w.set(change, "kmod.dkms.builds", [{"version": new, "kernel": k} for k in rebuilt])
        lost = [k for k in kernels if k not in rebuilt]
        if lost:
            change.notes.append("DKMS cannot rebuild the module for " + ", ".join(lost)
                                + " (no kernel headers recorded for it)")
    firmware = w.get("nvidia_driver.gsp_firmware")
    if isinstance(firmware, dict) and firmware:
        files = sorted({f for v in firmware.values() if isinstance(v, list) for f in v if isinstance(f, str)})
        w.set(change, "nvidia_driver.gsp_firmware", {new: files})
        change.notes.append(f"the driver package installs its GSP firmware under /lib/firmware/nvidia/{new}")
    _fabric_manager(w, change, old, new, parsed["branch"])
    change.notes.append(f"the matrix's driver {new}: CUDA up to {entry['max_cuda']}"
                        + ("" if change.verified else " (an entry marked unverified)"))
    from dl_doctor.judge.distro import driver_install_commands
    from dl_doctor.model import Facts

    if by in ("container-runtime", "cdi"):  # the container's driver is the host's, mounted in
        change.notes.append("the driver here is the host's, mounted by the container runtime: it changes on the host")
        change.step(f"On the host: install driver {new} (branch R{parsed['branch']}) and reboot it; the container "
                    f"gets the new libraries when it is started again",
                    [f"# on the host, not in the container: install the NVIDIA driver {new}, reboot, restart the "
                     f"container"])
        return change
    commands = list(driver_install_commands(Facts(w.snapshot), parsed["branch"]))
    change.step(f"Install driver {new} (branch R{parsed['branch']}) and reboot, before the framework wheels and "
                f"toolkits that need it", commands)
    return change


def _wsl(w: WhatIf, change: Change, new: str, entry: Mapping[str, Any]) -> Change:
    """WSL2: the driver is the Windows host's (no kernel module here; libcuda comes from /usr/lib/wsl/lib)."""
    if isinstance(w.get("nvml"), dict) and not w.get("nvml.init_error"):
        w.set(change, "nvml.driver_version", new)
        w.set(change, "nvml.cuda_driver_version", entry["max_cuda"])
    change.notes.append("WSL2: the driver is the Windows host's; /usr/lib/wsl/lib follows it (no Linux driver is "
                        "installed in the distribution)")
    change.step(f"Install the NVIDIA driver {new} on Windows (not in the WSL2 distribution), then `wsl --shutdown`",
                ["# on Windows: install the NVIDIA driver, then run: wsl --shutdown"])
    return change
