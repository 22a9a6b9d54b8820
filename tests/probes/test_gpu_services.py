"""The gpu_services probe's unit states: asked of systemd only where systemd runs."""

from dl_doctor.host import Host
from dl_doctor.host.core import CommandResult
from dl_doctor.probes import ProbeContext
from dl_doctor.probes.gpu_services import _unit


class _Live(Host):
    """A live host whose files are a dict and whose systemctl answers 'inactive' (what a container would print)."""

    def __init__(self, systemd_running: bool):
        super().__init__()
        self.systemd_running = systemd_running
        self.asked = []

    def exists(self, path):
        return path == "/usr/lib/systemd/system/nvidia-persistenced.service"

    def is_dir(self, path):
        return path == "/run/systemd/system" and self.systemd_running

    def glob(self, pattern):
        return []

    def which(self, name):
        return "/usr/bin/systemctl" if name == "systemctl" else None

    def run(self, argv, timeout=None, **kw):
        self.asked.append(argv)
        return CommandResult(argv=list(argv), returncode=3, stdout="inactive\n", stderr="", duration_s=0.0,
                             timed_out=False)


def test_a_container_without_systemd_reports_no_unit_state():
    """An image's unit file in a container that does not run systemd: no state (not 'inactive', which would read as
    a stopped service), and systemctl is not asked."""
    host = _Live(systemd_running=False)
    unit = _unit(ProbeContext(host), "nvidia-persistenced.service")
    assert unit["installed"] is True and unit["active"] is None and host.asked == []


def test_a_host_running_systemd_is_asked():
    host = _Live(systemd_running=True)
    unit = _unit(ProbeContext(host), "nvidia-persistenced.service")
    assert unit["active"] == "inactive" and host.asked == [["systemctl", "is-active", "nvidia-persistenced.service"]]
