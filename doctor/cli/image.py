"""Commands for image pipelines and support tickets: `expect --from`, `diff`, `bundle`."""

from __future__ import annotations

import json
import os
import sys
import time

import click

from dl_doctor import app
from dl_doctor.cli.base import (check_outputs, cli, collect_options, collect_opts, json_option, json_text,
                                markdown_option, matrix_overlay_option, use_color, write_output)


@cli.command("expect")
@click.option("--from", "source", required=True, metavar="REPORT.json",
              help="A known-good report (or facts file) to pin.")
@click.option("-o", "--output", metavar="EXPECT.toml", help="Write here instead of standard output.")
@click.option("--package", "packages", multiple=True, metavar="NAME",
              help="Also pin this distribution in each environment (repeatable; torch-adjacent ones are pinned "
                   "by default).")
def expect_cmd(source, output, packages) -> int:
    """Write golden-stack expectations (for --expect) from a known-good run."""
    from dl_doctor.judge.expect import DEFAULT_PACKAGES, to_toml
    from dl_doctor.model import Facts
    from dl_doctor.facts.flat import stack

    check_outputs(output)
    snapshot = app.load_snapshot(source)
    text = to_toml(stack(Facts(snapshot)), sorted(set(DEFAULT_PACKAGES) | set(packages)))
    if output:
        app.write_or_refuse(output, text, private=False)
        click.echo(f"Expectations: {output}", err=True)
    else:
        sys.stdout.write(text)
    return 0


@cli.command("diff")
@click.argument("baseline", metavar="BASELINE.json")
@click.argument("current", metavar="CURRENT.json")
@json_option("Write the drift as JSON here ('-' = stdout, instead of the text).")
@markdown_option("Write the drift as a Markdown table for a ticket or pull request ('-' = stdout, instead of the "
                 "text); host names, addresses and user names are redacted there.")
@click.option("--ignore", multiple=True, metavar="PATTERN",
              help="Leave out versions or findings whose key or ID matches this glob (repeatable), e.g. "
                   "'kernel', 'environments.*.packages.pip', 'DLD-DISK-*'.")
def diff_cmd(baseline, current, json_path, markdown_path, ignore) -> int:
    """Drift between two reports (or facts files): versions and findings. Exit 1 when anything drifted."""
    from dl_doctor.judge.diff import diff
    from dl_doctor.reports.drift import render_text

    check_outputs(json_path, markdown_path)
    reg = app.registry()
    base_snap, base_findings = app.snapshot_and_findings(baseline, reg)
    cur_snap, cur_findings = app.snapshot_and_findings(current, reg)
    patterns = [p for item in ignore for p in item.split(",") if p.strip()]
    result = diff(base_snap, cur_snap, base_findings, cur_findings, patterns)
    if json_path:
        write_output(json_path, json_text({"baseline": baseline, "current": current, **result}))
    if markdown_path:
        from dl_doctor.redact import redactor_for
        from dl_doctor.reports.drift import render_markdown

        public = {"baseline": baseline, "current": current, **result}
        for snap in (base_snap, cur_snap):  # what either machine names of itself
            public = redactor_for(snap, True).value(public)
        write_output(markdown_path, render_markdown(public, public["baseline"], public["current"]))
    if "-" not in (json_path, markdown_path):
        click.echo(render_text(result, baseline, current), nl=False)
    return 1 if result["drift"] else 0


@cli.command("bundle")
@collect_options
@click.option("-o", "--output", required=True, metavar="FILE.tar.gz", help="Where to write the bundle.")
@click.option("--redact", is_flag=True, help="Also mask host names, IP/MAC addresses, user names and home paths.")
@click.option("--expect", "expect_file", metavar="EXPECT.toml", help="Golden-stack expectations, as for `run`.")
@click.option("-q", "--quiet", is_flag=True, help="Print only problems and the summary line.")
@click.option("--no-color", is_flag=True, help="No colour.")
@matrix_overlay_option
def bundle_cmd(output, redact, quiet, no_color, **kw) -> int:
    """Run, then pack the reports, the facts and the raw probe outputs (redacted) for a support ticket."""
    from dl_doctor.host.capture import Capture
    from dl_doctor.integrations.bundle import build
    from dl_doctor.engine import exit_code, utc_now
    from dl_doctor.redact import redactor_for
    from dl_doctor.reports import html as html_report
    from dl_doctor.reports import terminal

    started, t0 = utc_now(), time.monotonic()
    judge = app.JudgeOptions(redact=redact, overlays=tuple(kw.pop("overlays") or ()),
                             expect_file=kw.pop("expect_file"))
    reg = app.registry()
    app.validate_inputs(reg, judge)
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise app.InputProblem(f"cannot write {output}: {parent} is not a directory")
    capture = Capture()
    snapshot = app.collect_facts(reg, collect_opts(kw), capture=capture, overlays=judge.overlays)
    report, findings = app.judge(snapshot, reg, judge, mode=snapshot["mode"], started=started, t0=t0,
                                 extra_options={"bundle": True})
    red = redactor_for(snapshot, redact)
    hostname = red.text(report.get("host", {}).get("hostname") or "")
    top = f"dl-doctor-bundle-{app.safe_name(hostname)}-{started.strftime('%Y%m%dT%H%M%SZ')}"
    data, manifest = build(capture, snapshot, report, lambda rep: html_report.render(
        rep, gpu_names=app.gpu_names(rep, judge.overlays)), red, top)
    app.write_or_refuse(output, data, private=True)  # for the ticket, not for every user on the host
    rep = json.loads(json.dumps(red.value(report)))
    click.echo(terminal.render(rep, color=use_color(no_color), quiet=quiet, paths=[],
                               width=terminal.terminal_width(sys.stdout)), nl=False)
    archived = sum(1 for f in manifest["files"] if f.get("archived_as"))
    click.echo(f"Bundle: {output} ({archived} files, {len(manifest['commands'])} commands, "
               f"{len(data) / 1024:.0f} KiB; {manifest['redaction']['redactions']} redactions"
               f"{', extended' if redact else ''})", err=quiet)
    return exit_code(findings, "fail")


