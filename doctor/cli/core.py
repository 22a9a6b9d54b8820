"""`run`, `collect`, `check`, `list`, `explain`: thin wrappers over :mod:`dl_doctor.app`."""

from __future__ import annotations

import sys
import time
from typing import Any, List, Optional

import click

from dl_doctor import app
from dl_doctor.cli.base import (check_outputs, cli, collect_options, collect_opts, html_option, json_option,
                                json_text, judge_opts, markdown_option, output_opts, report_options, use_color,
                                write_output)


def _engine_setup(kw, out) -> None:
    """An engine mode writes reports only where the user asked for them (a health check runs every few minutes)."""
    if not kw.get("engine"):
        if kw.get("drain") or kw.get("node_name"):
            raise click.UsageError("--drain and --node go with --engine slurm")
        return
    if "-" in (out.json_path, out.markdown_path, out.html_path):
        raise app.InputProblem(f"--engine {kw['engine']} owns stdout: write --json/--markdown/--html to a file")
    if (kw.get("drain") or kw.get("node_name")) and kw["engine"] != "slurm":
        raise click.UsageError("--drain and --node go with --engine slurm")
    if out.json_path is None:
        out.json_path = "/dev/null"
    if out.html_path is None:
        out.html_path = "/dev/null"


def emit_engine(outcome: app.Outcome, kw) -> int:
    """The engine's contract: npd (<= 80 characters, 0 OK / 1 problem / 2 unknown), nhc (FAIL/WARN lines), slurm (one
    line; --drain acts through scontrol)."""
    import os

    from dl_doctor.integrations import cluster
    from dl_doctor.engine import exit_code
    from dl_doctor.host import Host
    from dl_doctor.reports.text import safe_line

    engine, fail_on = kw["engine"], kw.get("fail_on", "fail")
    for problem in outcome.problems:
        click.echo(f"dl-doctor: error: {safe_line(problem)}", err=True)
    if outcome.problems:
        if engine == "npd":
            click.echo("dl-doctor: could not run (see its stderr)")
        return 2
    code = exit_code(outcome.findings, fail_on)
    if engine == "npd":
        click.echo(cluster.npd_line(outcome.report, failing=code == 1))
        return code
    if engine == "nhc":
        for line in cluster.nhc_lines(outcome.report):
            click.echo(line)
        return code
    node = kw.get("node_name") or os.environ.get("SLURMD_NODENAME") or (os.uname().nodename.split(".")[0])
    try:
        result = cluster.slurm(Host(), outcome.report, node, act=bool(kw.get("drain")))
    except cluster.ToolMissing as exc:
        raise app.InputProblem(str(exc))
    except (RuntimeError, OSError) as exc:
        raise app.InputProblem(f"slurm: {exc}")
    s = outcome.report.get("summary") or {}
    line = (f"dl-doctor: {s.get('fail', 0)} fail, {s.get('warn', 0)} warn on {safe_line(result['node'])}; "
            f"slurm: {result['action']}" + (f" ({safe_line(result['reason'])})" if result.get("reason") else ""))
    click.echo(line)
    return code


def emit(outcome: app.Outcome, *, stdout_kind: Optional[str], quiet: bool, no_color: bool, fail_on: str,
         verbose: Optional[bool] = None) -> int:
    """Print the terminal report (or the JSON on stdout) and the problems; the exit code. ``verbose`` (every pass and
    skip listed) and the matrix overlays that name the GPUs come from the command's options where not given."""
    from dl_doctor.engine import exit_code
    from dl_doctor.reports import terminal

    ctx = click.get_current_context(silent=True)
    params = ctx.params if ctx is not None else {}
    if verbose is None:
        verbose = bool(params.get("verbose"))
    if stdout_kind:
        sys.stdout.write(outcome.json_text if stdout_kind == "json" else
                         (outcome.html_text if stdout_kind == "html" else outcome.markdown_text) or "")
        sys.stdout.flush()
        if not quiet:
            for path in outcome.written:
                click.echo(f"Report: {terminal.safe_line(path)}", err=True)
    else:
        names = {} if quiet else app.gpu_names(outcome.report, tuple(params.get("overlays") or ()))
        click.echo(terminal.render(outcome.report, color=use_color(no_color), quiet=quiet, verbose=verbose,
                                   width=terminal.terminal_width(sys.stdout), paths=outcome.written,
                                   height=terminal.terminal_height(sys.stdout), gpu_names=names), nl=False)
    for problem in outcome.problems:
        click.echo(f"dl-doctor: error: {terminal.safe_line(problem)}", err=True)
    return 2 if outcome.problems else exit_code(outcome.findings, fail_on)


@cli.command("run")
@collect_options
@report_options
def run_cmd(**kw) -> int:
    """Collect facts from this host (or --sysroot), run every check and write the reports."""
    from dl_doctor.engine import utc_now

    started, t0 = utc_now(), time.monotonic()
    collect, judge, out = collect_opts(kw), judge_opts(kw), output_opts(kw)
    _engine_setup(kw, out)  # first: an engine names its outputs (no archive), then they are held to the rules
    out.validate()
    reg = app.registry()
    app.validate_inputs(reg, judge)
    # the report's head start begins once the probes are under way: starting their threads goes faster without it
    head_start: List[Any] = []
    snapshot = app.collect_facts(reg, collect, overlays=judge.overlays,
                                 on_started=lambda: head_start.append(app.prewarm(out)))
    # ...and ends before this thread imports the renderers itself: two threads importing the same modules at once can
    # hand one of them a partly initialised module (Python accepts that to break a concurrent import cycle)
    for thread in head_start:
        thread.join()
    outcome = app.write_outputs(snapshot, reg, judge, out, mode=snapshot["mode"], started=started, t0=t0,
                                extra_options=collect.report_options())
    if kw.get("engine"):
        return emit_engine(outcome, kw)
    return emit(outcome, stdout_kind=out.stdout_kind, quiet=kw["quiet"], no_color=kw["no_color"],
                fail_on=judge.fail_on)


@cli.command("collect")
@collect_options
@click.option("-o", "--output", required=True, metavar="FACTS.json", help="Where to write the facts ('-' = stdout).")
@click.option("--redact", is_flag=True, help="Also mask host names, IP/MAC addresses, user names and home paths.")
def collect_cmd(output, redact, **kw) -> int:
    """Collect facts only, for `dl-doctor check` later or elsewhere."""
    from dl_doctor.redact import redact as redact_document
    from dl_doctor.reports import to_json

    check_outputs(output)
    snapshot = app.collect_facts(app.registry(), collect_opts(kw))
    text = to_json(redact_document(snapshot, extended=redact))
    if output == "-":
        sys.stdout.write(text)
        return 0
    app.write_or_refuse(output, text, private=True)
    click.echo(f"Facts: {output} ({len(snapshot['facts'])} probes, {len(snapshot['probe_errors'])} errors)", err=True)
    return 0


@cli.command("check")
@click.argument("facts_file", metavar="FACTS.json")
@report_options
def check_cmd(facts_file, **kw) -> int:
    """Run today's checks on facts collected earlier (a facts file, a JSON report or a bundle)."""
    from dl_doctor.engine import utc_now

    started, t0 = utc_now(), time.monotonic()
    judge, out = judge_opts(kw), output_opts(kw, archive=False)  # reports only where asked for
    _engine_setup(kw, out)  # first: an engine names its outputs (no archive), then they are held to the rules
    out.validate()
    reg = app.registry()
    snapshot = app.load_snapshot(facts_file)
    outcome = app.write_outputs(snapshot, reg, judge, out, mode="facts", started=started, t0=t0,
                                extra_options={"facts_file": facts_file})
    if kw.get("engine"):
        return emit_engine(outcome, kw)
    return emit(outcome, stdout_kind=out.stdout_kind, quiet=kw["quiet"], no_color=kw["no_color"],
                fail_on=judge.fail_on)


@cli.command("list")
@json_option("Write the checks as JSON here ('-' = stdout, instead of the table).")
def list_cmd(json_path) -> int:
    """List every registered check: ID, slug, title, tags."""
    from dl_doctor.reports.text import safe_line

    check_outputs(json_path)
    reg = app.registry()
    checks = sorted(reg.checks, key=lambda s: s.id)
    if json_path:
        write_output(json_path, json_text([{"id": s.id, "slug": s.slug, "title": s.title,
                                            "problem": s.problem or s.title, "remedy": s.remedy, "drain": s.drain,
                                            "tags": list(s.tags), "requires": list(s.requires), "module": s.module}
                                           for s in checks]))
    if json_path != "-":
        for s in checks:
            # a plugin's check names itself: its text is escaped like any other
            click.echo(f"{safe_line(s.id):<14} {safe_line(s.slug):<28} {safe_line(s.title)}  "
                       f"[{safe_line(', '.join(s.tags))}]")
    for err in reg.load_errors:
        click.echo(f"dl-doctor: warning: {safe_line(err)}", err=True)
    return 0


@cli.command("explain")
@click.argument("key", metavar="ID|SLUG")
@json_option("Write the check's spec and explanation as JSON here ('-' = stdout, instead of the text).")
def explain_cmd(key, json_path) -> int:
    """Explain a check: what it checks, why it matters, how to fix it."""
    import textwrap

    from dl_doctor.model import Explanation
    from dl_doctor.reports.text import safe_line, safe_text

    check_outputs(json_path)
    reg = app.registry()
    spec = reg.find_check(key)
    if spec is None:
        hint = reg.closest_checks(key)
        raise app.InputProblem(f"unknown check '{key}'" + (f" (did you mean {', '.join(hint)}?)" if hint else "")
                               + "; see 'dl-doctor list'")
    if json_path:
        write_output(json_path, json_text({
            "id": spec.id, "slug": spec.slug, "title": spec.title, "problem": spec.problem or spec.title,
            "remedy": spec.remedy, "drain": spec.drain, "tags": list(spec.tags), "requires": list(spec.requires),
            "module": spec.module,
            "explanation": {attr: getattr(spec.explanation, attr) for attr, _ in Explanation.SECTIONS},
            "headings": {attr: heading for attr, heading in Explanation.SECTIONS}}))
        if json_path == "-":
            return 0
    click.echo(f"{safe_line(spec.id)} ({safe_line(spec.slug)}): {safe_line(spec.title)}")
    click.echo(f"tags: {safe_line(', '.join(spec.tags))}"
               + (f"; needs facts: {safe_line(', '.join(spec.requires))}" if spec.requires else ""))
    click.echo(f"when it finds a problem: {safe_line(spec.problem or spec.title)}; remedy {safe_line(spec.remedy)}"
               + ("; a failure drains the node" if spec.drain else ""))
    for attr, heading in Explanation.SECTIONS:
        click.echo("")
        click.echo(heading)
        click.echo(textwrap.fill(safe_text(getattr(spec.explanation, attr)), width=88, initial_indent="  ",
                                 subsequent_indent="  "))
    return 0


@cli.command("report")
@click.argument("source", metavar="REPORT.json|BUNDLE")
@html_option()
@markdown_option("Write the Markdown summary here ('-' = stdout); host names, addresses and users are redacted.")
@click.option("--max-chars", "max_chars", type=click.IntRange(2000, 10_000_000), default=65536, show_default=True,
              metavar="N", help="The Markdown summary's size limit.")
@click.option("--redact", is_flag=True, help="Also redact host names, addresses and users in the HTML and JSON.")
@json_option("Write the report again as JSON here, as read and validated ('-' = stdout).")
def report_cmd(source, html_path, markdown_path, max_chars, redact, json_path) -> int:
    """Render a saved report or a support bundle again: as HTML, as a Markdown summary for a ticket, as JSON.

    Exit codes: 0 written, 2 bad input or a file that could not be written."""
    if not html_path and not markdown_path and not json_path:
        raise app.InputProblem("say what to write: --html PATH, --markdown PATH|- and/or --json PATH|- "
                               "('-' for stdout)")
    check_outputs(markdown_path, json_path, html_path)
    report = app.load_report(source)
    written = []
    if json_path:
        from dl_doctor.redact import redact as do_redact
        from dl_doctor.reports import to_json

        written.append((json_path, to_json(do_redact(report, extended=True, snapshot=report) if redact else report)))
    if markdown_path:
        from dl_doctor.redact import for_public
        from dl_doctor.reports.markdown import render as markdown_render

        written.append((markdown_path, markdown_render(for_public(report, report, False), max_chars)))
    if html_path:
        from dl_doctor.redact import redact as do_redact
        from dl_doctor.reports import html

        shown = do_redact(report, extended=True, snapshot=report) if redact else report
        written.append((html_path, html.render(shown, gpu_names=app.gpu_names(shown))))
    done = [write_output(path, text) for path, text in sorted(written, key=lambda w: w[0] == "-")]
    for path in done:  # beside a document on stdout, the files written are named on stderr
        if path is not None:
            from dl_doctor.reports.text import safe_line

            click.echo(f"Report: {safe_line(path)}", err="-" in (json_path, markdown_path))
    return 0


@cli.command("verify")
@click.option("--python", "python_path", metavar="PATH",
              help="The environment whose torch or JAX runs the workloads (default: the active conda environment or "
                   "virtualenv, else python3 on PATH).")
@click.option("--quick", "level", flag_value="quick", default=True, help="About ten seconds on an 8-GPU node (default).")
@click.option("--long", "level", flag_value="long", help="Larger matrices, more iterations, bigger copies, every GPU "
              "pair's all-reduce, dcgmi diag -r 2.")
@click.option("--framework", type=click.Choice(["auto", "torch", "jax"]), default="auto", show_default=True,
              help="The framework whose workloads run: auto takes the first of torch and jax the environment has.")
@click.option("--dcgm-level", type=click.IntRange(0, 4), metavar="0-4",
              help="dcgmi diag -r LEVEL where DCGM is installed (default 1, 2 with --long; 3 takes about fifteen "
                   "minutes; 0 runs none).")
@click.option("--include-busy", is_flag=True, help="Also test GPUs that other compute processes use (NVML); by "
              "default they are left alone and the findings say so.")
@json_option("Write the JSON report here ('-' = alone on stdout).")
@html_option()
@markdown_option("Also write a Markdown summary to paste into a ticket ('-' = alone on stdout).")
@click.option("--output-dir", default="dl-doctor-reports", show_default=True, metavar="DIR",
              help="Where the reports not named by --json/--html go; created if missing.")
@click.option("--fail-on", type=click.Choice(["fail", "warn", "never"]), default="fail", show_default=True)
@click.option("--no-color", is_flag=True, help="No colour.")
@click.option("-q", "--quiet", is_flag=True, help="Print only the problems and the last line.")
@click.option("-v", "--verbose", is_flag=True, help="Also list every check that passed or was skipped.")
def verify_cmd(python_path, level, framework, include_busy, **kw) -> int:
    """Prove the GPUs work and perform: short, bounded workloads in an environment's own torch or JAX (a matmul per
    GPU and dtype against its dense peak, a cuDNN convolution, host copies, an NCCL all-reduce across the GPUs), with
    NVML watched meanwhile (clocks, throttling, power, temperature, ECC and Xid), and dcgmi diag and health where DCGM
    is installed. GPUs that others' compute processes use are left alone unless --include-busy. On a host without a
    CUDA device the framework is proven on the CPU and each GPU part says why it was skipped.

    Exit codes: 0 every workload passed (or skipped), 1 a finding at or above --fail-on, 2 bad input."""
    from dl_doctor.app import CollectOptions, JudgeOptions, OutputOptions
    from dl_doctor.engine import utc_now

    started, t0 = utc_now(), time.monotonic()
    collect = CollectOptions(pythons=(python_path,) if python_path else (), no_env_scan=True, verify=level,
                             include_busy=include_busy, framework=framework, dcgm_level=kw["dcgm_level"])
    judge = JudgeOptions(fail_on=kw["fail_on"], only=("verify",))
    out = OutputOptions(json_path=kw["json_path"], html_path=kw["html_path"], output_dir=kw["output_dir"],
                        markdown_path=kw["markdown_path"])
    out.validate()
    reg = app.registry()
    app.validate_inputs(reg, judge)
    snapshot = app.collect_facts(reg, collect)
    outcome = app.write_outputs(snapshot, reg, judge, out, mode=snapshot["mode"], started=started, t0=t0,
                                extra_options=collect.report_options())
    return emit(outcome, stdout_kind=out.stdout_kind, quiet=kw["quiet"], no_color=kw["no_color"], fail_on=kw["fail_on"])
