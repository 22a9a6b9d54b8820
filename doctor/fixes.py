"""Fixes as typed steps, rendered for the machine that was inspected.

A check describes what to change (write this file, install that package, reload this service) instead of writing
shell for the machine dl-doctor happens to run on. The engine renders every step for the *target*, the machine the
facts describe:

- ``live``: the running machine itself; the commands are the ones a person pastes there.
- ``image``: ``--sysroot`` on a tree that has not booted (no ``/proc/mounts``). What changes files runs inside the
  tree (``sudo chroot DIR ...``, ``dnf --installroot=DIR``, ``systemctl --root=DIR enable``); what needs a running
  system (reload, restart, modprobe, reboot) and every free-text command become ``# boot the image, then: ...``.
- ``captured``: a tree captured from a running machine (``--sysroot`` with ``/proc/mounts``). Every step is that
  machine's command, written as ``# on HOST: ...``: nothing of it is for the machine doing the inspection.
- ``host-root``: a container looking at its node through ``--host-root``. What changes files runs in the node's root
  (``sudo chroot /host ...``); what needs the running node becomes ``# on the node: ...``.

Free text stays a step of its own kind (``command``), so ``Fix(summary, ("nvidia-smi",))`` keeps working; off the
live machine it is never emitted as a bare command, because it would change the machine doing the inspection.
Every rendered command is one line: a control character in a value is escaped, so no value can start a line of its
own under a ``#``.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, replace
from typing import Any, Dict, Mapping, Optional, Tuple

KINDS = ("command", "write", "edit", "install", "remove", "service", "kernel-arg", "module-option", "load-module",
         "initramfs", "root-command", "reboot")
MANAGERS = ("apt", "dnf", "yum", "zypper")
# systemctl verbs that change the unit files only (done inside a tree) and those that need a running systemd
_UNIT_FILE_ACTIONS = ("enable", "disable", "mask", "unmask")
_RUNTIME_ACTIONS = ("start", "stop", "restart", "reload", "try-restart", "daemon-reload")
_BINARY = {"apt": "apt-get", "dnf": "dnf", "yum": "yum", "zypper": "zypper"}
_VERBS = {"install": {"apt": "install -y", "dnf": "install -y", "yum": "install -y", "zypper": "install -y"},
          "reinstall": {"apt": "install --reinstall -y", "dnf": "reinstall -y", "yum": "reinstall -y",
                        "zypper": "install -f -y"},
          "remove": {"apt": "remove -y", "dnf": "remove -y", "yum": "remove -y", "zypper": "remove -y"}}
# how a package manager on this machine acts on a tree (apt has no such option that also runs the packages'
# scripts inside it, so it runs inside the tree)
_TREE_OPTION = {"dnf": "--installroot={root}", "yum": "--installroot={root}", "zypper": "--root {root}"}
_SHELL_SYNTAX = re.compile(r"[$`|;&<>(){}\n\\]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# a host name as DNS spells it; anything else in a captured tree's hostname file is not shown
_HOSTNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,62}(?:\.[A-Za-z0-9-]{1,63}){0,8}")


@dataclass(frozen=True)
class Step:
    """One change of a known kind (or free text, kind ``command``), described rather than written as shell.

    Only the fields of its kind are set; :meth:`to_dict` names only those, for the report's ``fix.steps``.
    """

    kind: str
    text: str = ""                 # command, root-command: the command; edit: the sed expression
    path: str = ""                 # write, edit, module-option: the file (as the target sees it: /etc/...)
    content: str = ""              # write, module-option: what the file holds
    append: bool = False           # write: add to the end instead of replacing
    names: Tuple[str, ...] = ()    # install, remove: packages; service: units; load-module: modules
    manager: Optional[str] = None  # install, remove: apt, dnf, yum, zypper, or None when the distribution is unknown
    action: str = ""               # service: enable, disable, start, stop, restart, reload; install: "reinstall"
    now: bool = False              # service enable: start it too (a running system only)
    check: str = ""                # service: a command that must succeed first (sshd -t)
    family: Optional[str] = None   # kernel-arg, initramfs: os family (debian: GRUB and update-initramfs)
    note: str = ""                 # a comment after the command

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fix step kind {self.kind!r} (one of {', '.join(KINDS)})")

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"kind": self.kind}
        for name in ("text", "path", "content", "append", "names", "manager", "action", "now", "check", "family",
                     "note"):
            value = getattr(self, name)
            if value not in ("", (), False, None):
                out[name] = list(value) if isinstance(value, tuple) else value
        return out


# --- building steps (what checks and plugins call) ---

def command(text: str) -> Step:
    """Free text, pasted as written on the live machine; anywhere else only shown as an instruction."""
    return Step("command", text=text)


def write_file(path: str, content: str, *, append: bool = False, note: str = "") -> Step:
    """Put ``content`` into ``path`` (or add it at the end, ``append=True``); the path as the target sees it."""
    return Step("write", path=path, content=content, append=append, note=note)


def edit_file(path: str, sed: str, *, note: str = "") -> Step:
    """Edit ``path`` in place with one sed (-E) expression."""
    return Step("edit", path=path, text=sed, note=note)


def install(*packages: str, manager: Optional[str] = None, reinstall: bool = False, note: str = "") -> Step:
    """Install (or reinstall) packages with the distribution's manager; None names them only."""
    return Step("install", names=packages, manager=manager if manager in MANAGERS else None,
                action="reinstall" if reinstall else "", note=note)


def remove(*packages: str, manager: Optional[str] = None, note: str = "") -> Step:
    return Step("remove", names=packages, manager=manager if manager in MANAGERS else None, note=note)


def service(action: str, *units: str, now: bool = False, check: str = "", note: str = "") -> Step:
    """``systemctl ACTION UNITS``; ``check`` must succeed first (``sshd -t`` before a reload)."""
    if action not in _UNIT_FILE_ACTIONS + _RUNTIME_ACTIONS:
        raise ValueError(f"unknown service action {action!r}")
    return Step("service", action=action, names=units, now=now, check=check, note=note)


def kernel_arg(arg: str, family: Optional[str] = None, *, note: str = "") -> Step:
    """Add ``arg`` to every boot entry's kernel command line: grubby, or GRUB's defaults on Debian and Ubuntu."""
    return Step("kernel-arg", text=arg, family=family, note=note)


def module_option(module: str, options: str, path: str = "", *, note: str = "") -> Step:
    """``options MODULE OPTIONS`` in a modprobe.d file (``/etc/modprobe.d/MODULE.conf`` unless named)."""
    return Step("module-option", names=(module,), text=options, content=f"options {module} {options}\n",
                path=path or f"/etc/modprobe.d/{module}.conf", note=note)


def load_module(*modules: str, note: str = "") -> Step:
    return Step("load-module", names=modules, note=note)


def initramfs(family: Optional[str] = None, *, note: str = "") -> Step:
    """Rebuild the initramfs (update-initramfs on Debian and Ubuntu, dracut elsewhere), after a modprobe.d change."""
    return Step("initramfs", family=family, note=note)


def root_command(text: str, *, note: str = "") -> Step:
    """A command (without sudo) that changes only the system's files, so it can run inside the inspected root:
    ``dkms autoinstall``, ``grubby --set-default ...``, ``apt-mark hold ...``, ``ldconfig``.

    It must be one simple command: ``chroot DIR a && b`` or ``chroot DIR a $(b)`` would run ``b`` on the machine
    doing the inspection. Anything with shell syntax is kept as free text instead (``sudo TEXT``), which off the
    live machine is only shown as an instruction.
    """
    if _SHELL_SYNTAX.search(text):
        return Step("command", text=_with_note(f"sudo {text}", note))
    return Step("root-command", text=text, note=note)


def reboot(note: str = "") -> Step:
    return Step("reboot", note=note)


def as_step(item: Any) -> Step:
    """A Fix's command: a Step as it is, free text as a ``command`` step."""
    if isinstance(item, Step):
        return item
    return command(str(item))


# --- targets ---

@dataclass(frozen=True)
class Target:
    """The machine the facts describe, as fixes see it."""

    kind: str                  # live, image, captured, host-root
    root: str = "/"            # image, host-root: where its files are on the inspecting machine
    host: str = ""             # captured: the machine's name, or a description

    @property
    def live(self) -> bool:
        return self.kind == "live"


LIVE = Target("live")


def target_of(snapshot: Mapping[str, Any]) -> Target:
    """Where the facts come from: the running machine, an image, a captured tree, or a node through --host-root."""
    mode = snapshot.get("mode")
    root = snapshot.get("sysroot") if isinstance(snapshot.get("sysroot"), str) and snapshot.get("sysroot") else None
    facts: Dict[str, Any] = snapshot["facts"] if isinstance(snapshot.get("facts"), dict) else {}
    if mode == "host-root":
        return Target("host-root", root=root or "/host")
    if mode != "sysroot":
        return LIVE
    if "mounts" not in facts:  # nothing ever ran in the tree: an image that has not booted
        return Target("image", root=root or "/mnt/image")
    system: Dict[str, Any] = facts["system"] if isinstance(facts.get("system"), dict) else {}
    name = system.get("hostname")
    host = name if isinstance(name, str) and _HOSTNAME.fullmatch(name) else "the machine the tree was captured from"
    return Target("captured", root=root or "/", host=host)


# --- rendering ---

def _q(value: str) -> str:
    return shlex.quote(value)


def _words(names: Tuple[str, ...]) -> str:
    return " ".join(_q(n) for n in names)


def _printf(content: str) -> str:
    """``printf`` arguments that reproduce ``content`` on one line (newlines as \\n, no format directives)."""
    escaped = content.replace("\\", "\\\\").replace("%", "%%")
    escaped = "".join(ch if ch >= " " and ch != "\x7f" else ("\\n" if ch == "\n" else f"\\{ord(ch):03o}")
                      for ch in escaped)
    return "printf " + _q(escaped)


def _with_note(line: str, note: str) -> str:
    return f"{line}   # {note}" if note else line


def _one_line(line: str) -> str:
    """Control characters (a newline from a value that came from the facts) escaped: one command, one line."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}" if ord(m.group(0)) < 0x100
                        else f"\\u{ord(m.group(0)):04x}", line)


def _verb(step: Step) -> str:
    return "remove" if step.kind == "remove" else "reinstall" if step.action == "reinstall" else "install"


def _package_line(step: Step, root: Optional[str] = None) -> str:
    """The manager's command on the machine, or acting on the tree at ``root``."""
    if step.manager is None:
        return f"# {_verb(step)} with this distribution's package manager: {' '.join(step.names)}"
    tail = f"{_VERBS[_verb(step)][step.manager]} {_words(step.names)}"
    if root is None:
        return f"sudo {_BINARY[step.manager]} {tail}"
    if step.manager in _TREE_OPTION:
        return f"sudo {_BINARY[step.manager]} {_TREE_OPTION[step.manager].format(root=_q(root))} {tail}"
    return f"sudo chroot {_q(root)} {_BINARY[step.manager]} {tail}"


def _kernel_arg_line(step: Step, run: str) -> str:
    """``run`` prefixes each command: ``sudo `` on the machine, ``sudo chroot ROOT `` inside a tree."""
    arg = step.text
    if step.family == "debian":
        literal = re.sub(r"([/&\\])", r"\\\1", arg)  # sed's replacement: the argument as written
        sed = f"s/^(GRUB_CMDLINE_LINUX=\")/\\1{literal} /"
        return f"{run}sed -i -E {_q(sed)} /etc/default/grub && {run}update-grub"
    return f"{run}grubby --update-kernel=ALL --args={_q(arg)}"


def _initramfs_line(step: Step, run: str, every_kernel: bool) -> str:
    if step.family == "debian":
        return f"{run}update-initramfs -u" + (" -k all" if every_kernel else "")
    # dracut with no version builds for the kernel running here, which inside a tree is not the tree's
    return f"{run}dracut --force" + (" --regenerate-all" if every_kernel else "")


def render_live(step: Step) -> str:
    """The command a person pastes on the running machine the facts describe."""
    if step.kind == "command":
        return step.text
    line = _file_change(step, "sudo ", every_kernel=False) or _running_system_line(step)
    return _one_line(_with_note(line, step.note))


def _running_system_line(step: Step) -> str:
    """The live host's command for a step that does not change files (packages, services, modules, reboot)."""
    if step.kind in ("install", "remove"):
        return _package_line(step)
    if step.kind == "service":
        verb = f"{step.action} --now" if step.now and step.action in ("enable", "disable") else step.action
        line = f"sudo systemctl {verb} {_words(step.names)}".rstrip()
        return f"sudo {step.check} && {line}" if step.check else line
    if step.kind == "load-module":
        return " && ".join(f"sudo modprobe {_q(m)}" for m in step.names)
    return "sudo reboot"


def _file_change(step: Step, run: str, every_kernel: bool) -> Optional[str]:
    """The steps that change files, run through ``run`` (``sudo `` on the live host, ``sudo chroot ROOT `` inside an
    image or the node's root); ``None`` for the other kinds."""
    if step.kind in ("write", "module-option"):
        tee = "tee -a" if step.append else "tee"
        return f"{_printf(step.content)} | {run}{tee} {_q(step.path)} >/dev/null"
    if step.kind == "edit":
        return f"{run}sed -i -E {_q(step.text)} {_q(step.path)}"
    if step.kind == "kernel-arg":
        return _kernel_arg_line(step, run)
    if step.kind == "initramfs":
        return _initramfs_line(step, run, every_kernel=every_kernel)
    if step.kind == "root-command":
        return f"{run}{step.text}"
    return None


def _comment(prefix: str, text: str) -> str:
    """A command for another machine, shown as an instruction: every line of it a comment (a comment stays the
    comment it is), its control characters escaped."""
    lines = text.splitlines() or [""]
    out = [lines[0] if lines[0].lstrip().startswith("#") else f"# {prefix}: {lines[0]}"]
    out += [line if line.lstrip().startswith("#") else f"#   {line}" for line in lines[1:]]
    return "\n".join(_one_line(line) for line in out)


def _in_root(step: Step, target: Target) -> str:
    """``step`` for the files under ``target.root`` (an image, or the node's root): changes run inside that tree;
    what needs the running system is an instruction for it ("boot the image, then: ...", "on the node: ...")."""
    root, image = target.root, target.kind == "image"
    line = _file_change(step, f"sudo chroot {_q(root)} ", every_kernel=True)
    if line is not None:
        return _one_line(_with_note(line, step.note))
    if step.kind in ("install", "remove"):
        line = _package_line(step, root)
    elif step.kind == "service" and step.action in _UNIT_FILE_ACTIONS:
        line = f"sudo systemctl --root={_q(root)} {step.action} {_words(step.names)}"
        if step.now:
            line += "   # it starts when the image boots" if image else \
                f"   # on the node: sudo systemctl start {_words(step.names)}"
    elif step.kind == "reboot" and image:  # an image's next boot is its first
        return _one_line("# boot the image" + (f": {step.note}" if step.note else ""))
    else:  # free text, services to (re)start, modules to load, the node's reboot: the running system's business
        return _comment("boot the image, then" if image else "on the node", render_live(step))
    return _one_line(_with_note(line, step.note))


def render(step: Step, target: Target) -> str:
    """One step as the command (or instruction) for ``target``."""
    if target.live:
        return render_live(step)
    if target.kind == "captured":
        return _comment(f"on {target.host}", render_live(step))
    return _in_root(step, target)


_NOTES = {
    "image": " These facts come from an image, not a running machine: the commands below change the tree at {root} "
             "(or add them to the image's build); what needs a running system is marked for when the image boots.",
    "host-root": " These facts come from the node through --host-root: the commands below change the node's files "
                 "at {root}; what needs the running node is marked 'on the node' (run it there, or through "
                 "nsenter -t 1 -m -- in a container that shares the node's PID namespace).",
    "captured": " These facts come from a tree captured from {host}: every command below is for that machine, not "
                "this one.",
}


def for_target(fix: Any, target: Target) -> Any:
    """``fix`` with its commands rendered for ``target`` (the steps stay as they are); None stays None."""
    if target.live or not isinstance(getattr(fix, "steps", None), tuple):
        return fix  # None, or what a plugin returned that is not a Fix
    commands = tuple(render(s, target) for s in fix.steps)
    note = _NOTES[target.kind].format(root=target.root, host=target.host)
    return replace(fix, summary=str(fix.summary).rstrip() + note, commands=commands, steps=fix.steps)
