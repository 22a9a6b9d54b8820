"""``dl-doctor plan``: what an upgrade will break, before you make it (docs/plan.md)."""

from __future__ import annotations

import sys
from typing import Any, List, Tuple

import click

from dl_doctor import app
from dl_doctor.cli.base import (check_outputs, cli, collect_options, collect_opts, json_option, json_text,
                                markdown_option, matrix_overlay_option, use_color, write_output)


def _requests(kw) -> List[Tuple[str, Any]]:
    out: List[Tuple[str, Any]] = []
    if kw.get("kernel"):
        out.append(("kernel", kw["kernel"]))
    if kw.get("driver"):
        out.append(("driver", kw["driver"]))
    elif kw.get("driver_flavor"):
        raise app.InputProblem("--driver-flavor goes with --driver VERSION")
    if kw.get("cuda"):
        out.append(("cuda", kw["cuda"]))
    if kw.get("gpu"):
        out.append(("gpu", kw["gpu"]))
    if kw.get("instance_type"):
        out.append(("instance-type", kw["instance_type"]))
    if kw.get("image"):
        out.append(("image", _image(kw["image"])))  # read before anything is collected: a bad file is exit 2 first
    for value in kw.get("installs") or ():
        out.append(("install", value))
    return out


def _image(path: str) -> Any:
    """The image configuration in ``path`` (``docker inspect`` output or an OCI image config), read bounded."""
    from dl_doctor.facts.validate import InputError, load_json_file

    try:
        return load_json_file(path, f"--image {path}")
    except InputError as exc:
        raise app.InputProblem(str(exc))
    except FileNotFoundError:
        raise app.InputProblem(f"--image: cannot read {path}: no such file")
    except OSError as exc:
        raise app.InputProblem(f"--image: cannot read {path}: {exc.strerror or exc}")


@cli.command("plan")
@click.option("--report", "report_path", metavar="FILE", help="Plan on a saved report, facts file or support bundle "
              "instead of collecting facts.")
@click.option("--driver", metavar="VERSION", help="The driver (user-space libraries and kernel module) at this "
              "version, e.g. 570.133.20; a point release of a branch the matrix knows.")
@click.option("--driver-flavor", type=click.Choice(["open", "proprietary"]), help="With --driver: the kernel "
              "module's flavour after the change (default: as now).")
@click.option("--kernel", metavar="RELEASE", help="A new running kernel (uname -r of the kernel you will boot).")
@click.option("--cuda", metavar="VERSION", help="/usr/local/cuda moved to this CUDA toolkit release.")
@click.option("--install", "installs", multiple=True, metavar="ENV:REQUIREMENT",
              help="A package change in one environment (its name or prefix), e.g. venv:torch==2.9.0+cu130 "
                   "(repeatable).")
@click.option("--image", metavar="FILE", help="A container image's config: the JSON `docker inspect IMAGE` prints, "
              "or an OCI image config; judged against this host as the NVIDIA container runtime does.")
@click.option("--gpu", metavar="MODEL", help="The same software on another GPU (what `dl-doctor matrix gpu` takes).")
@click.option("--instance-type", metavar="TYPE", help="The same software on another EC2 instance type (its GPUs, "
              "NVSwitch and EFA as the matrix records them).")
@json_option("Write the plan as JSON here ('-' = alone on stdout).")
@markdown_option("Write the plan as Markdown here, for a ticket or a pull request ('-' = alone on stdout).")
@click.option("--fail-on", type=click.Choice(["fail", "warn", "never"]), default="fail", show_default=True,
              help="Exit 1 when a finding gets worse to at or above this level (or a change cannot be made).")
@click.option("-q", "--quiet", is_flag=True, help="Print only what gets worse and the last line.")
@click.option("--no-color", is_flag=True, help="No colour.")
@matrix_overlay_option
@collect_options
def plan_cmd(report_path, json_path, markdown_path, fail_on, quiet, no_color, overlays, **kw) -> int:
    """What an upgrade will break, before you make it: applies the change to a what-if copy of this machine's facts
    (a --sysroot image, a saved --report), judges both with the same checks and lists every finding whose status
    changes, and the steps that make the change safe, in order. Nothing on the host is changed or run.

    Exit codes: 0 nothing gets worse at --fail-on, 1 a finding gets worse to at or above --fail-on (failures that exist
    before the change do not count; a worsening that rests only on an unverified matrix entry is reported without
    exit 1) or a change cannot be made as asked, 2 bad input (no change option, an unknown version, an ambiguous
    environment)."""
    from dl_doctor.integrations.plan import make_plan
    from dl_doctor.judge.plan import PlanInputError
    from dl_doctor.reports.plan import render_markdown, render_text
    from dl_doctor.reports import terminal

    check_outputs(json_path, markdown_path)
    if json_path == "-" and markdown_path == "-":
        raise app.InputProblem("--json - and --markdown - both want stdout: write one of them to a file")
    if report_path and (kw.get("sysroot") or kw.get("host_root")):
        raise click.UsageError("--report and --sysroot/--host-root exclude each other (a saved report, or a tree)")
    requests = _requests(kw)
    if not requests:
        raise app.InputProblem("say what changes: --driver, --kernel, --cuda, --install ENV:REQ, --image, --gpu or "
                               "--instance-type (see dl-doctor plan --help)")
    reg = app.registry()
    matrix = app.load_matrix(tuple(overlays or ()))
    options = {"driver_flavor": kw.get("driver_flavor"), "image_file": kw.get("image")}
    if report_path:
        snapshot = app.load_snapshot(report_path, bundle_member="facts.json")
        source = f"report {report_path}"
    else:
        # the change options are checked before any probe runs: a typo costs no collection
        from dl_doctor.judge.plan import what_if

        from dl_doctor.judge.plan import install

        early = [r for r in requests if r[0] != "install"]  # an environment is known from the facts only
        try:
            for kind, value in requests:
                if kind == "install":
                    install.parse(value)
        except PlanInputError as exc:
            raise app.InputProblem(str(exc))
        if early:
            try:
                what_if({"facts": {}}, early, matrix, options)
            except PlanInputError as exc:
                raise app.InputProblem(str(exc))
            except Exception:  # noqa: BLE001 - only the options are checked here; the facts come next
                pass
        snapshot = app.collect_facts(reg, collect_opts(kw), overlays=tuple(overlays or ()))
        source = f"sysroot {kw['sysroot']}" if kw.get("sysroot") else "this host"
    try:
        doc, code = make_plan(snapshot, requests, reg.checks, matrix, fail_on=fail_on, options=options, source=source)
    except PlanInputError as exc:
        raise app.InputProblem(str(exc))
    if json_path:
        write_output(json_path, json_text(doc))
    if markdown_path:
        from dl_doctor.redact import for_public

        write_output(markdown_path, render_markdown(for_public(doc, snapshot, False)))
    if "-" not in (json_path, markdown_path):
        text = render_text(doc, width=terminal.terminal_width(sys.stdout), quiet=quiet)
        if use_color(no_color):
            text = text.replace("Plan: not safe", click.style("Plan: not safe", fg="red", bold=True)) \
                .replace("Plan: safe", click.style("Plan: safe", fg="green", bold=True))
        click.echo(text, nl=False)
    return code
