"""The ``dl-doctor`` command line.

``dl-doctor`` alone is ``dl-doctor run``.  Exit codes: 0 nothing at or above ``--fail-on``; 1 findings at or above
it; 2 usage error, bad input or dl-doctor itself could not run (always a one-line message, never a traceback; set
``DL_DOCTOR_DEBUG=1`` to see one); 130 interrupted (Ctrl-C, SIGINT: the one line ``dl-doctor: interrupted``, at any
point of the run). A reader that closes stdout early (``dl-doctor list | head -1``) ends nothing: the rest of the
output goes nowhere, quietly, and the exit code is the one the run would have had.

Commands live in one module per family (``core``, ``image``, ``login``, ``matrix``, ``fleet``, ``why``); what they
do lives in :mod:`dl_doctor.app`. This module maps every kind of failure to its exit code, in one place. It imports
nothing of its own until :func:`main` runs (click and the commands then; a family other than ``core`` only when one
of its commands is asked for: :class:`dl_doctor.cli.base.DefaultRunGroup`).
"""

from __future__ import annotations

import gc
import os
import sys
from typing import Any, Optional, Sequence

__all__ = ["cli", "main"]


def __getattr__(name: str) -> Any:
    """``dl_doctor.cli.cli``: the click group, with the core commands on it (the others load when asked for)."""
    if name == "cli":
        from dl_doctor.cli import core  # noqa: F401 - registers the core commands on the group
        from dl_doctor.cli.base import cli

        return cli
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _error_line(text: object) -> str:
    """An error as one escaped line: messages quote file names, fields and values from files other people wrote."""
    from dl_doctor.reports.text import safe_line

    return safe_line(" ".join(str(text).split()))


# The program's own pace for the cyclic garbage collector. A run allocates a few hundred thousand objects that live
# until it ends (modules, facts, the report) and makes few cycles; at the default pace (a collection every 700
# allocations) the collector spends some 7 % of a default run's CPU time scanning them.
GC_THRESHOLD = (100_000, 10, 10)


def main(argv: Optional[Sequence[str]] = None) -> None:
    """The program (``argv`` None: ``sys.argv``, the ``dl-doctor`` script and ``python -m dl_doctor``) or the command
    line embedded in another program (``argv`` given: the collector and stdout are left as that program set them)."""
    program = argv is None
    try:
        if program:  # before click and the commands are imported: their objects are most of those the collector sees
            gc.set_threshold(*GC_THRESHOLD)
            _pipe_safe_stdout()
        try:
            code = _run(argv)
        finally:
            if program:
                # the process ends here: the interpreter's last full collection would only free memory the OS takes
                # back anyway (some 7 % of a run again); files are closed where they are written
                gc.freeze()
    except KeyboardInterrupt:  # also while the commands are imported, before click is there to catch it
        code = INTERRUPTED
    except BrokenPipeError:  # stdout is not ours (embedded) and its reader went away
        _quiet_stdout()
        code = 0
    if code == INTERRUPTED:
        _interrupted(program)
    if program:
        import signal

        try:  # the work is done: an interrupt now would only be a traceback from the interpreter's shutdown
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        except ValueError:  # pragma: no cover - not the main thread
            pass
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _quiet_stdout()
    sys.exit(code)


INTERRUPTED = 130


def _interrupted(program: bool) -> None:
    """Ctrl-C: one line, exit 130. Further interrupts are ignored while it is said; the program then ends at once
    (os._exit), not waiting on probe threads or subprocesses, and so never with a traceback from the shutdown."""
    import signal

    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except (ValueError, OSError):  # not the main thread of an embedding program
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    try:  # on a terminal the "^C" the terminal echoed keeps its own line
        sys.stderr.write(("\n" if sys.stderr.isatty() else "") + "dl-doctor: interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    if program:
        os._exit(INTERRUPTED)


def _quiet_stdout() -> None:
    """The reader of stdout went away: what is still to be written goes to /dev/null (what the Python documentation
    recommends for EPIPE), so nothing is reported when the interpreter flushes stdout at its end."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


class _PipeSafeRaw:
    """File descriptor 1 for a text stream: once its reader is gone (EPIPE), every later write goes to /dev/null
    and counts as written, so no command fails half-way through its output and each keeps its exit code."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, data: Any) -> int:
        try:
            return os.write(self.fd, data)
        except BrokenPipeError:
            _quiet_stdout()
            return len(data)


def _pipe_safe_stdout() -> None:
    """Put :class:`_PipeSafeRaw` under sys.stdout (the program's own fd 1 only; same encoding and buffering)."""
    import io

    out: Any = sys.stdout  # a TextIOWrapper of fd 1 here; typed loosely, its attributes are checked below
    if out is None or out is not sys.__stdout__:
        return
    try:
        fd = out.fileno()
    except (OSError, ValueError, AttributeError):
        return

    class Raw(io.RawIOBase):
        def __init__(self) -> None:
            super().__init__()
            self._w = _PipeSafeRaw(fd)

        def writable(self) -> bool:
            return True

        def write(self, data: Any) -> int:  # type: ignore[override]
            return self._w.write(data)

        def fileno(self) -> int:
            return fd

        def isatty(self) -> bool:
            return os.isatty(fd)

        def close(self) -> None:  # fd 1 stays open for the rest of the process (and its children)
            pass

    try:
        out.flush()
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(Raw(), 1 << 16), encoding=out.encoding,
                                      errors=out.errors, line_buffering=out.line_buffering,
                                      write_through=getattr(out, "write_through", False))
    except (OSError, ValueError, AttributeError, LookupError):
        return


def _run(argv: Optional[Sequence[str]]) -> int:
    import click

    from dl_doctor.app import InputProblem
    from dl_doctor.cli import core  # noqa: F401 - registers the core commands on the group
    from dl_doctor.cli.base import cli

    debug = bool(os.environ.get("DL_DOCTOR_DEBUG"))
    try:
        # the context is made and invoked here, not through cli.main(): that prints a blank line for Ctrl-C and
        # turns it (and any EOFError) into its Abort, where main() says "interrupted" once, on its own
        with cli.make_context("dl-doctor", list(argv) if argv is not None else sys.argv[1:]) as ctx:
            code = cli.invoke(ctx)
    except click.exceptions.Exit as exc:  # --help, --version
        code = exc.exit_code
    except InputProblem as exc:
        click.echo(f"dl-doctor: error: {_error_line(exc)}", err=True)
        code = 2
    except click.ClickException as exc:
        message = _error_line(exc.format_message())
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            message += f" (see '{exc.ctx.command_path} --help')"
        # Bad input is exit 2; an answer of "no such entry" (dl-doctor matrix) is exit 1.
        code = getattr(exc, "dl_doctor_exit", 2)
        click.echo(f"dl-doctor: {'error: ' if code == 2 else ''}{message}", err=True)
    except (click.exceptions.Abort, KeyboardInterrupt):
        code = INTERRUPTED  # main() says it, once
    except BrokenPipeError:
        _quiet_stdout()
        code = 0
    except Exception as exc:  # noqa: BLE001 - never a traceback for users
        if debug:
            import traceback

            traceback.print_exc()
        click.echo(f"dl-doctor: error: dl-doctor could not run: {type(exc).__name__}: {_error_line(exc)} "
                   f"(set DL_DOCTOR_DEBUG=1 for details)", err=True)
        code = 2
    return code if isinstance(code, int) else 0
