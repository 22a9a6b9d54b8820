"""`dl-doctor fleet`: many nodes' reports compared."""

from __future__ import annotations

import sys

import click

from dl_doctor import app
from dl_doctor.cli.base import check_outputs, cli, html_option, json_option, json_text, write_output


@cli.command("fleet")
@click.argument("paths", nargs=-1, required=True, metavar="REPORT|DIR|GLOB|TARBALL...")
@json_option("Write the comparison as JSON ('-' = alone on stdout).")
@html_option("Write the comparison as a self-contained HTML page.")
def fleet_cmd(paths, json_path, html_path) -> int:
    """Compare many nodes' reports: each node's failing checks, and every fact that differs between nodes of a group
    (driver, CUDA, torch and its CUDA, NCCL, cuDNN, aws-ofi-nccl, libfabric, GPU model and count, kernel, NCCL_*/FI_*/
    CUDA_* settings, instance type), naming the odd nodes out against the majority.

    An input that cannot be used (a FIFO, socket or device; not a report; malformed; over a limit) is skipped and
    named with the reason in the text and JSON output; the others are still compared.

    Exit codes: 0 the nodes agree and none fails; 1 they differ or one fails; 2 no report could be read."""
    from dl_doctor.integrations import fleet

    check_outputs(json_path, html_path)
    gathered = fleet.gather(paths)
    if not gathered.nodes:
        from dl_doctor.reports.text import safe_value

        why = "; ".join(f"{u['source']}: {u['error']}" for u in gathered.unreadable[:3])
        more = f"; and {len(gathered.unreadable) - 3} more" if len(gathered.unreadable) > 3 else ""
        raise app.InputProblem(safe_value("no dl-doctor report found in " + ", ".join(paths[:3]) +
                                          (f" ({why}{more})" if why else ""), True))
    result = fleet.compare(gathered)
    if html_path:
        write_output(html_path, _html(result))
    if json_path:
        write_output(json_path, json_text(result))
    if json_path != "-":
        from dl_doctor.reports.terminal import terminal_width

        click.echo(fleet.render_text(result, terminal_width(sys.stdout)), nl=False)
    return 0 if result["ok"] else 1


def _html(result) -> str:
    from dl_doctor.reports import html

    return html.render_fleet(result)
