"""Fixes for an image inspected through ``--sysroot``: nothing there is running.

A check writes its fix for a running machine (``sudo modprobe nvidia``, ``sudo apt-get install ...``). When the facts
come from an image that has not booted (a tree without ``/proc/mounts``; a tree captured from a running machine keeps
the fixes for that machine), the engine passes every fix through :func:`for_image`: commands that change files are run inside
the tree (``sudo chroot /mnt/image apt-get install ...``, or the same line in the image's build recipe); commands
that act on a running system (loading modules, mounts, services, sysctl, reboot) are dropped, and the summary says
that they take effect when the image boots.
"""

from __future__ import annotations

import re
import shlex
from typing import Optional

from dl_doctor.model import Fix

# Commands that change files of the system: run inside the tree.
_CHANGES_FILES = re.compile(r"^(?:sudo\s+)?(apt-get|apt|dpkg|dnf|yum|zypper|rpm|dkms|akmods|dracut|update-initramfs|"
                            r"grubby|grub2-mkconfig|update-grub|ubuntu-drivers|pip3?|python3? -m pip|ldconfig|"
                            r"systemctl (?:enable|disable|mask|unmask)|update-alternatives|ln|rm|mkdir|tee|sed)\b")
# Commands that act on the running system: meaningless against a mounted tree.
_RUNNING = re.compile(r"^(?:sudo\s+)?(modprobe|rmmod|insmod|mount|umount|swapon|swapoff|sysctl -w|nvidia-smi|reboot|"
                      r"systemctl (?:start|stop|restart|reload|daemon-reload)|service |ulimit|dmesg|journalctl|kill|"
                      r"docker run|nvidia-ctk runtime|echo .*> ?/(?:proc|sys)/)")


def for_image(fix: Optional[Fix], sysroot: Optional[str]) -> Optional[Fix]:
    if fix is None:
        return None
    root = shlex.quote(sysroot or "/mnt/image")
    commands = []
    dropped = 0
    for cmd in fix.commands:
        text = cmd.strip()
        if text.startswith("#"):
            commands.append(cmd)
        elif _RUNNING.match(text):
            dropped += 1
        elif _CHANGES_FILES.match(text):
            inner = re.sub(r"^sudo\s+", "", text)
            commands.append(f"sudo chroot {root} {inner}   # or add '{inner}' to the image's build")
        else:
            commands.append(cmd)
    note = (" These facts come from an image, not a running machine: change the tree (or the image's build) with the "
            "commands below" + ("; what loads modules, mounts or restarts services takes effect when the image boots."
                                if dropped else "."))
    return Fix(fix.summary.rstrip() + note, tuple(commands) or ("# rebuild the image with this change",))
