"""The ``dl-doctor`` command line.

``dl-doctor`` alone is ``dl-doctor run``.  Exit codes: 0 nothing at or above ``--fail-on``; 1 findings at or above
it; 2 usage error, bad input or dl-doctor itself could not run (always a one-line message, never a traceback; set
``DL_DOCTOR_DEBUG=1`` to see one).

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
    line embedded in another program (``argv`` given: the collector is left as that program set it)."""
    program = argv is None
    if program:  # before click and the commands are imported: their objects are most of those the collector sees
        gc.set_threshold(*GC_THRESHOLD)
    try:
        code = _run(argv)
    finally:
        if program:
            # the process ends here: the interpreter's last full collection would only free memory the OS takes
            # back anyway (some 7 % of a run again); files are closed where they are written
            gc.freeze()
    sys.exit(code)


def _run(argv: Optional[Sequence[str]]) -> int:
    import click

    from dl_doctor.app import InputProblem
    from dl_doctor.cli import core  # noqa: F401 - registers the core commands on the group
    from dl_doctor.cli.base import cli

    debug = bool(os.environ.get("DL_DOCTOR_DEBUG"))
    try:
        code = cli.main(args=list(argv) if argv is not None else None, prog_name="dl-doctor", standalone_mode=False)
    except click.exceptions.Exit as exc:  # pragma: no cover - click returns it in non-standalone mode
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
    except click.exceptions.Abort:
        click.echo("dl-doctor: interrupted", err=True)
        code = 130
    except KeyboardInterrupt:
        click.echo("dl-doctor: interrupted", err=True)
        code = 130
    except BrokenPipeError:
        code = 0
    except Exception as exc:  # noqa: BLE001 - never a traceback for users
        if debug:
            import traceback

            traceback.print_exc()
        click.echo(f"dl-doctor: error: dl-doctor could not run: {type(exc).__name__}: {_error_line(exc)} "
                   f"(set DL_DOCTOR_DEBUG=1 for details)", err=True)
        code = 2
    return code if isinstance(code, int) else 0
