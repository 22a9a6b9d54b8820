"""`why`: an error message, a log or a dmesg capture to its likely cause, with this machine's evidence."""

from __future__ import annotations

import json
import sys

import click

from dl_doctor import app
from dl_doctor.cli.base import cli


@cli.command("why")
@click.argument("text", required=False)
@click.option("--log", "log", metavar="FILE", help="read the error from a log (a training log, pip log, dmesg capture; "
              "- for stdin; .gz too); its last 16 MiB are read")
@click.option("--report", metavar="FILE|BUNDLE", help="judge against a report, facts file or bundle someone sent "
              "instead of this machine")
@click.option("--sysroot", metavar="DIR", help="judge against a mounted image or tree")
@click.option("--text-only", is_flag=True, help="rank from the text alone; collect nothing")
@click.option("--timeout", type=float, default=app.DEFAULT_TIMEOUT, show_default=True,
              help="seconds for the probes the deciding checks need")
@click.option("--json", "as_json", is_flag=True, help="the diagnosis as JSON on stdout")
def why_cmd(text, log, report, sysroot, text_only, timeout, as_json) -> int:
    """Say what an error message means on this machine: its likely cause, the evidence and the fix.

    Exit codes: 0 a diagnosis (or none matched), 1 this machine's evidence confirms a cause, 2 bad input.
    """
    from dl_doctor.reports.text import safe_line

    body = app.read_why_input(text, log)
    result = app.why(body, report=report, evidence=not text_only,
                     collect=None if text_only else app.CollectOptions(sysroot=sysroot, timeout=timeout))
    confirmed = any(c["verdict"] == "confirmed" for c in result["causes"])
    if as_json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return 1 if confirmed else 0
    if not result["matched"]:
        click.echo("No known signature matches this text. Run 'dl-doctor run' for the whole machine, or paste the "
                   "first error line (not the traceback's last).")
        return 0
    # every value printed is one escaped line: the log's own line, the evidence, a report's path, even the signature
    # base (a site can add to it) cannot move the cursor, retitle the window or forge a line
    for m in result["matched"][:3]:
        click.echo(f"Matched {safe_line(m['signature'])}: {safe_line(m['meaning'])}")
        click.echo(f"  in: {safe_line(m['line'])}")
    where = result.get("evidence_from")
    click.echo(f"\nLikely causes ({'with evidence from ' + safe_line(where) if where else 'from the text alone'}):")
    for n, c in enumerate(result["causes"][:6], 1):
        click.echo(f"{n}. [{safe_line(c['verdict'])}] {safe_line(c['summary'])}")
        for e in c["evidence"][:3]:
            click.echo(f"     evidence: {safe_line(e)}")
        if n <= 3 or c["verdict"] == "confirmed":
            click.echo(f"     fix: {safe_line(c['fix'])}")
        if c["checks"]:
            click.echo(f"     decided by: {safe_line(', '.join(c['checks']))} (dl-doctor explain ID)")
    return 1 if confirmed else 0
