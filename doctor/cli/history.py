"""``dl-doctor history``: a machine's saved reports in order, and what changed from each run to the next
(docs/login-and-monitoring.md)."""

from __future__ import annotations

import os

import click

from dl_doctor import app
from dl_doctor.cli.base import check_outputs, cli, html_option, json_option, json_text, markdown_option, write_output


@cli.command("history")
@click.argument("dirs", nargs=-1, metavar="[DIR|REPORT]...")
@json_option("Write the history as JSON here ('-' = alone on stdout; reports/schema/history-v1.json).")
@markdown_option("Write the history as Markdown here, for a ticket ('-' = alone on stdout); host names, addresses and "
                 "user names are redacted there.")
@html_option("Write the history as a self-contained HTML page here.")
@click.option("--fail-on", type=click.Choice(["warn", "fail", "error", "never"]), default="warn", show_default=True,
              help="Exit 1 when a host's newest run is worse than the one before at or above this level: a finding "
                   "that appeared or got worse, a new Xid or a risen error counter (warn).")
def history_cmd(dirs, json_path, markdown_path, html_path, fail_on) -> int:
    """The runs of each host in the reports under DIR (default: the login timer's report directory,
    /var/lib/dl-doctor/reports), ordered by their own timestamps, and what changed from each run to the next:
    kernel, driver, modules and packages (the comparison of `dl-doctor diff`), findings that appeared or cleared,
    Xids the kernel logged since, and error counters that rose. Counters that reset at a reboot are compared only
    between runs of one boot. Files that are not reports, or are damaged, are listed and skipped.

    Exit codes: 0 no host's newest run is worse than the one before (at or above --fail-on), 1 one is, 2 bad input
    (a DIR that does not exist, no readable report, an output that cannot be written)."""
    from dl_doctor.integrations.history import DEFAULT_DIR, gather
    from dl_doctor.judge.history import history
    from dl_doctor.reports.history import render_html, render_markdown, render_text

    check_outputs(json_path, markdown_path, html_path)
    paths = list(dirs) or [DEFAULT_DIR]
    for path in paths:
        if not any(ch in path for ch in "*?[") and not os.path.lexists(path):
            hint = " (the login timer writes its reports there: sudo dl-doctor install-login-hook)" if not dirs else ""
            raise app.InputProblem(f"{path} does not exist{hint}")
    found = gather(paths)
    if not found.records and found.skipped:
        first = found.skipped[0]
        hint = ("; the login timer's reports are private to root: sudo dl-doctor history"
                if "ermission denied" in first["error"] else "")
        raise app.InputProblem(f"no readable dl-doctor report in {', '.join(paths)[:300]} ({len(found.skipped)} "
                               f"skipped; {first['source'][:200]}: {first['error'][:200]}){hint}")
    result = history(found.records, found.skipped, fail_on=fail_on)
    if json_path:
        write_output(json_path, json_text(result))
    if markdown_path:
        from dl_doctor.redact import redactor_for

        public = result
        for name in {str(r["names"]) : r["names"] for r in found.records}.values():  # what each machine names of itself
            public = redactor_for(name, True).value(public)
        write_output(markdown_path, render_markdown(public))
    if html_path:
        write_output(html_path, render_html(result))
    if "-" not in (json_path, markdown_path):
        click.echo(render_text(result), nl=False)
    return int(result["exit_code"])
