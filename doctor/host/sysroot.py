"""Is a ``--sysroot`` directory a root filesystem at all? One look before any probe runs.

A bake that mounts the wrong partition (the image's ``/boot``, its EFI system partition) or none (an empty mount
point) would otherwise be inspected as a machine with nothing installed: every check skips and the run is green.
A root filesystem has ``etc/os-release``, ``usr/lib/os-release`` or at least a ``usr/`` directory; a tree with none of
them is refused with one line that says what is there instead. Every name is looked up through :class:`Host`, whose
paths resolve inside the tree (a link never leads out of it), and the top level is listed only as far as
:data:`SCAN_LIMIT` entries.
"""

from __future__ import annotations

import fnmatch
from typing import List, Optional, Sequence

from dl_doctor.host.core import Host

SCAN_LIMIT = 200  # entries of the top level read, however many it holds
SHOW = 6  # names quoted in the message
PEEK_DIRS = 8  # subdirectories looked into for a root filesystem one level down, or a user's home

_BOOT_FILES = ("vmlinuz*", "vmlinux*", "initrd*", "initramfs*", "System.map*", "symvers-*", "config-*", "Image*",
               "zImage*", "uImage*", "memtest86*")
_BOOT_DIRS = ("grub", "grub2", "loader", "efi", "extlinux", "syslinux")
_HOME_MARKS = (".bashrc", ".bash_profile", ".profile", ".zshrc", ".ssh", ".bash_history", ".cache", ".config",
               ".local", ".conda", ".condarc", ".jupyter", ".viminfo")


def is_root_filesystem(host: Host) -> bool:
    return host.exists("/etc/os-release") or host.exists("/usr/lib/os-release") or host.is_dir("/usr")


def problem(host: Host, shown: Optional[str] = None) -> Optional[str]:
    """``None`` for a tree that looks like a root filesystem, else one line for the user: what was looked for and
    what this tree looks like instead. ``shown``: the path as the user gave it (default: the resolved one)."""
    if host.live or host.live_kernel:
        return None
    where = f"--sysroot {shown or host.sysroot}"
    try:
        if is_root_filesystem(host):
            return None
        names, more = host.scan_names("/", SCAN_LIMIT)
    except OSError as exc:  # the tree's top cannot be read (permissions): nothing in it can be judged
        return f"{where}: cannot read it ({exc.strerror or exc})"
    head = f"{where}: no etc/os-release, usr/lib/os-release or usr/ here"
    return f"{head}; {_looks_like(host, names, more, shown or host.sysroot or '')}"


def _looks_like(host: Host, names: List[str], more: bool, shown: str) -> str:
    real = [n for n in names if n not in ("lost+found", ".", "..")]
    if not real:
        what = "an empty filesystem (only lost+found/)" if names else "the directory is empty"
        return f"{what}: is the image's root filesystem mounted here?"
    dirs = {n for n in real if host.is_dir("/" + n)}  # at most SCAN_LIMIT look-ups

    def label(name: str) -> str:
        return name + "/" if name in dirs else name

    kernels = [label(n) for n in real if n not in dirs and _matches(n, _BOOT_FILES)]
    efi = [n for n in sorted(dirs) if n.lower() == "efi"]
    loaders = [label(n) for n in real if n in dirs and n.lower() in _BOOT_DIRS and n.lower() != "efi"]
    if kernels or (loaders and not efi):
        found = kernels + loaders
        return f"this looks like a /boot partition ({_list(found, len(found))}): mount the image's root filesystem"
    if efi:
        return f"this looks like an EFI system partition ({efi[0]}/): mount the image's root filesystem"
    below = _root_below(host, sorted(dirs))
    if below:
        return f"but {below}/ holds a root filesystem: did you mean --sysroot {shown.rstrip('/')}/{below}?"
    home = [n for n in real if n in _HOME_MARKS]
    if home:
        return (f"this looks like a home directory ({_list([label(n) for n in home], len(home))}): mount the image's "
                "root filesystem")
    homes = _homes_below(host, sorted(dirs))
    if homes:
        return (f"this looks like a /home volume (home directories {_list([n + '/' for n in homes], len(homes))}): "
                "mount the image's root filesystem")
    count = f"{len(real)}{'+' if more else ''} entries"
    return (f"this is not a root filesystem ({count}: {_list([label(n) for n in real], len(real), more)}): "
            "mount the image's root filesystem")


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _list(names: List[str], total: int, more: bool = False) -> str:
    shown = ", ".join(names[:SHOW])
    rest = total - min(total, SHOW)
    if rest or more:
        shown += f", and {rest}{'+' if more else ''} more" if rest else ", and more"
    return shown


def _root_below(host: Host, dirs: List[str]) -> Optional[str]:
    """A subdirectory that is a root filesystem itself (``--sysroot /mnt`` for ``/mnt/image``)."""
    for name in dirs[:PEEK_DIRS]:
        if host.exists(f"/{name}/etc/os-release") or host.exists(f"/{name}/usr/lib/os-release"):
            return name
    return None


def _homes_below(host: Host, dirs: List[str]) -> List[str]:
    found: List[str] = []
    for name in dirs[:PEEK_DIRS]:
        if any(host.lexists(f"/{name}/{mark}") for mark in _HOME_MARKS[:6]):
            found.append(name)
    return found
