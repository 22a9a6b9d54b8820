"""The login status line: a profile.d snippet that prints the last cached result, and the systemd units that cache it.

Login never runs dl-doctor: the snippet reads one line with shell built-ins (no process is started), and only in
interactive shells, so scp, rsync and Ansible sessions see nothing. A systemd service runs dl-doctor (at low
priority) and writes the reports and the status line under /var/lib/dl-doctor; its timer runs it after each boot
and daily, or only once per boot with ``--boot``.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Any, Dict, List, Mapping, Optional, Sequence

STATE_DIR = "/var/lib/dl-doctor"
STATUS_FILE = f"{STATE_DIR}/status"
PROFILE_SNIPPET = "/etc/profile.d/dl-doctor.sh"
SERVICE = "/etc/systemd/system/dl-doctor.service"
TIMER = "/etc/systemd/system/dl-doctor.timer"
TIMER_LINK = "/etc/systemd/system/timers.target.wants/dl-doctor.timer"
MARKER = "# Installed by `dl-doctor install-login-hook`"


KEEP_REPORTS = 30


def profile_snippet(status_file: str = STATUS_FILE) -> str:
    q = shlex.quote(status_file)
    return f"""{MARKER}; remove with `dl-doctor uninstall-login-hook`.
# Prints the status the last dl-doctor run cached. Never runs dl-doctor: shell built-ins only, interactive shells
# only. Silence it with DL_DOCTOR_LOGIN=0 or ~/.hushlogin.
case $- in
  *i*)
    if [ "${{DL_DOCTOR_LOGIN:-1}}" != 0 ] && [ ! -e "${{HOME:-/nonexistent}}/.hushlogin" ] && [ -r {q} ]; then
      IFS= read -r dl_doctor_status < {q} && printf '%s\\n' "$dl_doctor_status"
      unset dl_doctor_status
    fi
    ;;
esac
"""


class UnitValueError(ValueError):
    """A value that cannot be written into a systemd unit (control characters)."""


def systemd_quote(value: str) -> str:
    """One ExecStart= word: systemd's specifiers (%), variables ($) and C escapes (\\) neutralised; quoted when it
    holds a space, a quote or a semicolon (a lone ``;`` would start another command)."""
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise UnitValueError(f"{value!r} contains a control character (a newline?); it cannot go into a unit file")
    escaped = value.replace("\\", "\\\\").replace("%", "%%").replace("$", "$$")
    if not value or any(ch in value for ch in " \"';"):
        return '"' + escaped.replace('"', '\\"') + '"'
    return escaped


# The sandbox of the cached run: read-only everywhere but its state directory (and a metrics directory, if any),
# yet still able to see the hardware. Not PrivateDevices (hides /dev/nvidia*), ProtectKernelLogs (hides the kernel
# log), ProtectProc=invisible (hides other processes' maps), ProtectKernelModules (hides /lib/modules) or
# PrivateNetwork (hides IMDS).
SANDBOX = """ProtectSystem=strict
ProtectHome=read-only
PrivateTmp=yes
NoNewPrivileges=yes
RestrictSUIDSGID=yes
LockPersonality=yes
RestrictRealtime=yes
RestrictNamespaces=yes
ProtectClock=yes
ProtectHostname=yes
ProtectKernelTunables=yes
ProtectControlGroups=yes
SystemCallArchitectures=native
UMask=0022"""


def service_unit(exe: str, extra_args: Sequence[str] = (), writable: Sequence[str] = ()) -> str:
    args = ["run", "--quiet", "--no-color", "--fail-on", "never", "--output-dir", f"{STATE_DIR}/reports",
            "--keep-reports", str(KEEP_REPORTS), "--status-line", STATUS_FILE, *extra_args]
    exec_start = " ".join(systemd_quote(a) for a in [exe, *args])
    rw = "".join(f"\nReadWritePaths={systemd_quote(w)}" for w in writable)
    return f"""{MARKER}
[Unit]
Description=dl-doctor: check this deep-learning machine and cache the result for the login status
After=nvidia-persistenced.service nvidia-fabricmanager.service network-online.target
Wants=network-online.target

[Service]
Type=oneshot
ExecStart={exec_start}
StateDirectory=dl-doctor
StateDirectoryMode=0755
{SANDBOX}{rw}
Nice=10
IOSchedulingClass=idle
TimeoutStartSec=15min
"""


def timer_unit(boot_only: bool) -> str:
    when = "OnBootSec=2min" if boot_only else "OnBootSec=2min\nOnUnitActiveSec=1d"
    what = "once per boot" if boot_only else "after boot and daily"
    return f"""{MARKER}
[Unit]
Description=Run dl-doctor {what}

[Timer]
{when}
Unit=dl-doctor.service

[Install]
WantedBy=timers.target
"""


def _path(root: str, path: str, follow_last: bool = True) -> str:
    """``path`` inside ``root`` with every symbolic link resolved inside it: nothing leads out of a mounted image."""
    if os.path.realpath(root) == "/":
        return path
    from dl_doctor.host import Host

    return Host(sysroot=root).resolve(path, follow_last=follow_last)


# Read by the shell of every user, and by systemd: exactly these modes, whatever the umask of the image bake (under
# umask 000 a directory would be world-writable, under 077 no user's shell could read the snippet).
FILE_MODE = 0o644
DIR_MODE = 0o755


def _write(root: str, path: str, text: str) -> str:
    from dl_doctor.host.output import make_directories, write_file

    target = _path(root, path)
    make_directories(os.path.dirname(target), DIR_MODE)
    write_file(target, text, mode=FILE_MODE)
    return path


def _ours(target: str) -> bool:
    from dl_doctor.host import open_regular

    try:
        with os.fdopen(open_regular(target), "rb") as fh:
            return MARKER.encode() in fh.read(4096)
    except OSError:
        return False


def install(root: str, exe: str, systemd: bool = True, boot_only: bool = False,
            extra_args: Sequence[str] = (), writable: Sequence[str] = ()) -> List[str]:
    """Write the snippet (and units); refuse to overwrite files that are not ours. Returns the paths written.

    Under ``root`` (a mounted image) every path is resolved inside the root, so an absolute link in the image
    writes into the image, never into this host's /etc.
    """
    from dl_doctor.host.output import make_directories

    paths = [PROFILE_SNIPPET] + ([SERVICE, TIMER] if systemd else [])
    unit = service_unit(exe, extra_args, writable) if systemd else ""  # a bad value fails before anything is written
    for path in paths:
        target = _path(root, path)
        if os.path.lexists(target) and not _ours(target):
            raise FileExistsError(f"{path} exists and was not written by dl-doctor; not overwriting it")
    written = [_write(root, PROFILE_SNIPPET, profile_snippet())]
    if systemd:
        written.append(_write(root, SERVICE, unit))
        written.append(_write(root, TIMER, timer_unit(boot_only)))
        link = _path(root, TIMER_LINK, follow_last=False)  # what `systemctl enable` does; works on an image too
        make_directories(os.path.dirname(link), DIR_MODE)
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink("../dl-doctor.timer", link)
        written.append(TIMER_LINK)
    return written


def uninstall(root: str) -> List[str]:
    removed: List[str] = []
    link = _path(root, TIMER_LINK, follow_last=False)
    if os.path.islink(link) and os.readlink(link) == "../dl-doctor.timer":
        os.unlink(link)
        removed.append(TIMER_LINK)
    for path in (PROFILE_SNIPPET, SERVICE, TIMER):
        target = _path(root, path, follow_last=False)
        if os.path.lexists(target) and not os.path.islink(target) and _ours(target):
            os.unlink(target)
            removed.append(path)
    return removed


# -- what changed since the previous run (the status line's "new since DATE") -----------------------------------------

_REPORT = re.compile(r"^(dl-doctor-.{1,120}-)(\d{8}T\d{6}Z)(?:-(\d{1,4}))?\.json$")
MAX_LISTED = 10000  # names of the report directory looked at
MAX_TRIED = 3       # earlier reports read before giving up (one damaged by a full disk is passed over)


def previous_report(current: str) -> Optional[Dict[str, Any]]:
    """The report of the run before the one archived as ``current`` (``DIR/dl-doctor-HOST-STAMP[-N].json``, which
    need not exist yet): the newest earlier JSON report of the same host in the same directory that is this user's
    own regular file and reads as a report; None when there is none."""
    from dl_doctor.facts.validate import InputError, load_json_file

    directory, name = os.path.split(current)
    mine = _REPORT.match(name)
    if not mine:
        return None
    key = (mine.group(2), int(mine.group(3) or 1))
    try:
        with os.scandir(directory or ".") as it:
            names = [e.name for _, e in zip(range(MAX_LISTED), it)]
    except OSError:
        return None
    earlier = []
    for other in names:
        m = _REPORT.match(other)
        if m and m.group(1) == mine.group(1) and (m.group(2), int(m.group(3) or 1)) < key:
            earlier.append(((m.group(2), int(m.group(3) or 1)), other))
    for _, other in sorted(earlier, reverse=True)[:MAX_TRIED]:
        path = os.path.join(directory, other)
        try:
            st = os.lstat(path)
            if not os.path.isfile(path) or os.path.islink(path) or st.st_uid != os.geteuid():
                continue
            doc = load_json_file(path)
        except (OSError, InputError, ValueError, RecursionError):
            continue
        if isinstance(doc, dict) and isinstance(doc.get("findings"), list) and isinstance(doc.get("facts"), dict):
            return doc
    return None


def changed(previous: Mapping[str, Any], report: Mapping[str, Any]) -> bool:
    """Whether ``report`` found something ``previous`` did not, in the sense of `dl-doctor history`
    (doctor/judge/history.py ``is_new``): a version that drifted (the comparison of ``dl-doctor diff``), a finding
    that is new at warn, fail or error (or worse than it was), an Xid the kernel logged since, or an error counter
    that rose."""
    from dl_doctor.judge.history import is_new, record

    try:
        return is_new(record(previous, "previous"), record(report, "current"))
    except Exception:  # noqa: BLE001 - an old report of another shape: the status line is written, nothing claimed
        return False


def new_since(current: str, report: Mapping[str, Any]) -> Optional[str]:
    """The UTC date of the previous run (``2026-11-28``) when this run, archived as ``current``, found something it
    did not; None when nothing is new, or there is no previous run to compare with."""
    from dl_doctor.reports.status import run_date

    previous = previous_report(current)
    if previous is None or not changed(previous, report):
        return None
    return run_date(previous) or "the previous run"
