"""`why`: an error message, a log or a dmesg capture to its likely cause, with this machine's evidence."""

from __future__ import annotations

import click

from dl_doctor import app
from dl_doctor.cli.base import check_outputs, cli, json_option, json_text, write_output


def _when(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.1f} s after boot"
    return str(value)


@cli.command("why")
@click.argument("text", required=False)
@click.option("--log", "log", metavar="FILE", help="read the error from a log (a training log, pip log, dmesg capture; "
              "- for stdin; .gz too); its last 16 MiB are read, as a whole: every distinct match, counted")
@click.option("--report", metavar="FILE|BUNDLE", help="judge against a report, facts file or bundle someone sent "
              "instead of this machine")
@click.option("--sysroot", metavar="DIR", help="judge against a mounted image or tree")
@click.option("--python", "pythons", multiple=True, metavar="PATH",
              help="the interpreter of the environment the error came from, beside those found (repeatable)")
@click.option("--text-only", is_flag=True, help="rank from the text alone; collect nothing")
@click.option("--timeout", type=float, default=app.DEFAULT_TIMEOUT, show_default=True,
              help="seconds for the probes")
@json_option("write the diagnosis as JSON here ('-' = stdout, instead of the text)")
def why_cmd(text, log, report, sysroot, pythons, text_only, timeout, json_path) -> int:
    """Say what an error message means on this machine: its likely cause, the evidence and the fix.

    Exit codes: 0 a diagnosis (or none matched), 1 this machine's evidence confirms a cause, 2 bad input.
    """
    from dl_doctor.reports.text import safe_line

    check_outputs(json_path)
    body = app.read_why_input(text, log)
    result = app.why(body, report=report, evidence=not text_only, log=log is not None,
                     collect=None if text_only else app.CollectOptions(sysroot=sysroot, timeout=timeout,
                                                                        pythons=tuple(pythons)))
    confirmed = any(c["verdict"] == "confirmed" for c in result["causes"])
    if json_path:
        write_output(json_path, json_text(result))
        if json_path == "-":
            return 1 if confirmed else 0
    # every value printed is one escaped line: the log's own line, the evidence, a report's path, even the signature
    # base (a site can add to it) cannot move the cursor, retitle the window or forge a line
    where = result.get("evidence_from")
    if not result["matched"]:
        click.echo("No known signature matches this text.")
        if result["related"]:
            click.echo(f"\nFindings on {safe_line(where)} that may bear on it (most related first):")
            for n, r in enumerate(result["related"], 1):
                shared = f" (shares: {', '.join(r['shared'][:5])})" if r["shared"] else ""
                click.echo(f"{n}. [{safe_line(r['status'])}] {safe_line(r['id'])}: {safe_line(r['message'])}"
                           f"{safe_line(shared)}")
                if r.get("fix") and n <= 3:
                    click.echo(f"     fix: {safe_line(r['fix'])}")
            click.echo("\n(dl-doctor explain ID for any of them; dl-doctor run for the whole machine)")
        elif result["nearest"]:
            click.echo("\nThe nearest known errors (possibilities, from shared words only):")
            for n, r in enumerate(result["nearest"], 1):
                click.echo(f"{n}. possibly {safe_line(r['signature'])}: {safe_line(r['meaning'])}")
                if r.get("cause"):
                    click.echo(f"     if so, likely: {safe_line(r['cause'])}")
            click.echo("\nRun it on the machine (or with --report) to have its findings weighed, or paste the first "
                       "error line (not the traceback's last).")
        elif where:
            click.echo(f"\nNothing on {safe_line(where)} warns or fails. Paste the first error line (not the "
                       "traceback's last).")
        else:
            click.echo("Run 'dl-doctor run' for the whole machine, or paste the first error line (not the "
                       "traceback's last).")
        return 0
    if result.get("events"):
        click.echo(f"{len(result['events'])} distinct known error(s) in the log, the most serious and recent first:")
        for e in result["events"][:8]:
            span = _when(e["first"]) if e["first"] == e["last"] else f"{_when(e['first'])} .. {_when(e['last'])}"
            span = f" [{span}]" if span.strip(" .") else f" [lines {e['first_line']}..{e['last_line']}]"
            gpus = f" on {', '.join(e['gpus'][:4])}" if e.get("gpus") else ""
            click.echo(f"  {safe_line(e['severity']):4} x{e['count']:<5} {safe_line(e['signature'])}{safe_line(gpus)}"
                       f"{safe_line(span)}: {safe_line(e['meaning'] or '')}")
            click.echo(f"         e.g. line {e['lines'][0]['n']}: {safe_line(e['lines'][0]['text'])}")
        if len(result["events"]) > 8:
            click.echo(f"  ... and {len(result['events']) - 8} more (--json lists them all)")
    else:
        for m in result["matched"][:3]:
            click.echo(f"Matched {safe_line(m['signature'])}: {safe_line(m['meaning'])}")
            click.echo(f"  in: {safe_line(m['line'])}")
    if result["machine"]:
        click.echo(f"\nWhat {safe_line(where)} says about what the text names:")
        for a in result["machine"][:6]:
            e = a["entity"]
            click.echo(f"  {safe_line(e['kind'])} {safe_line(e['value'])}:")
            for line in a["answers"][:4]:
                click.echo(f"    - {safe_line(line)}")
    if not result["causes"]:
        click.echo("\nNothing to fix for these lines: what they say is informational (a notice, a state, not a "
                   "failure). If something did fail, paste its first error line.")
        return 0
    click.echo(f"\nLikely causes ({'with evidence from ' + safe_line(where) if where else 'from the text alone'}):")
    for n, c in enumerate(result["causes"][:6], 1):
        click.echo(f"{n}. [{safe_line(c['verdict'])}] {safe_line(c['summary'])}")
        for e in c["evidence"][:3]:
            click.echo(f"     evidence: {safe_line(e)}")
        if c.get("ambiguous_with"):
            click.echo(f"     the evidence does not tell this apart from: {safe_line(', '.join(c['ambiguous_with']))}")
        if n <= 3 or c["verdict"] == "confirmed":
            click.echo(f"     fix: {safe_line(c['fix'])}")
            for cmd in (c.get("commands") or [])[:6]:
                click.echo(f"       $ {safe_line(cmd)}")
        if c["checks"]:
            click.echo(f"     decided by: {safe_line(', '.join(c['checks']))} (dl-doctor explain ID)")
    return 1 if confirmed else 0
