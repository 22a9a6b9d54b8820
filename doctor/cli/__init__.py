"""The ``dl-doctor`` command line.

``dl-doctor`` alone is ``dl-doctor run``.  Exit codes: 0 nothing at or above ``--fail-on``; 1 findings at or above
it; 2 usage error, bad input or dl-doctor itself could not run (always a one-line message, never a traceback; set
``DL_DOCTOR_DEBUG=1`` to see one).

Commands live in one module per family (``core``, ``image``, ``login``, ``matrix``); what they do lives in
:mod:`dl_doctor.app`. This module maps every kind of failure to its exit code, in one place.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Optional, Sequence

import click

from dl_doctor.app import InputProblem
from dl_doctor.cli import core, fleet, image, login, matrix, why  # noqa: F401 - each registers its commands on the group
from dl_doctor.cli.base import cli

__all__ = ["cli", "main"]


def _error_line(text: object) -> str:
    """An error as one escaped line: messages quote file names, fields and values from files other people wrote."""
    from dl_doctor.reports.text import safe_line

    return safe_line(" ".join(str(text).split()))


def main(argv: Optional[Sequence[str]] = None) -> None:
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
            traceback.print_exc()
        click.echo(f"dl-doctor: error: dl-doctor could not run: {type(exc).__name__}: {_error_line(exc)} "
                   f"(set DL_DOCTOR_DEBUG=1 for details)", err=True)
        code = 2
    sys.exit(code if isinstance(code, int) else 0)
