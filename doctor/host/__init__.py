"""The host layer: the only code that touches the machine.

``Host`` (``core``) reads every file, lists every directory and runs every command, live or under ``--sysroot``;
``spawn`` starts programs, ``trust`` decides which may start as root, ``devices`` opens live devices (kmsg, NVMe,
IMDS), ``output`` writes every file dl-doctor writes. ``from dl_doctor.host import Host`` is public (docs/plugins.md).
"""

from dl_doctor.host.core import (MAX_COMMAND_OUTPUT, CommandResult, CommandUnavailable, Host, NotARegularFile,
                                 UntrustedCommand, open_regular, parse_environ_block)

__all__ = ["Host", "CommandResult", "CommandUnavailable", "UntrustedCommand", "NotARegularFile", "open_regular",
           "parse_environ_block", "MAX_COMMAND_OUTPUT"]
