"""Commands for image pipelines: ``dl-doctor expect --from`` and ``dl-doctor diff``."""

from __future__ import annotations

import json
import sys
from typing import Any, Dict, List, Mapping, Optional, Tuple

import click

from doctor.cli import UsageProblem, _matrix, _registry, cli, load_snapshot
from doctor.model import Facts


def _snapshot_and_findings(path: str) -> Tuple[Dict[str, Any], List[Mapping[str, Any]]]:
    """A report brings its findings; a bare facts file gets today's checks run on it."""
    snapshot = load_snapshot(path)
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    if isinstance(doc.get("findings"), list):
        return snapshot, doc["findings"]
    from doctor.engine import evaluate

    findings = evaluate(snapshot, _registry().checks, _matrix(()))
    return snapshot, [f.to_dict() for f in findings]


@cli.command("expect")
@click.option("--from", "source", required=True, metavar="REPORT.json",
              help="A known-good report (or facts file) to pin.")
@click.option("-o", "--output", metavar="EXPECT.toml", help="Write here instead of standard output.")
@click.option("--package", "packages", multiple=True, metavar="NAME",
              help="Also pin this distribution in each environment (repeatable; torch-adjacent ones are pinned "
                   "by default).")
def expect_cmd(source, output, packages) -> int:
    """Write golden-stack expectations (for --expect) from a known-good run."""
    from doctor.expect import DEFAULT_PACKAGES, to_toml
    from doctor.stack import stack
    from reports import write_atomic

    snapshot = load_snapshot(source)
    text = to_toml(stack(Facts(snapshot)), sorted(set(DEFAULT_PACKAGES) | set(packages)))
    if output:
        try:
            write_atomic(output, text)
        except OSError as exc:
            raise UsageProblem(f"cannot write {output}: {exc.strerror or exc}")
        click.echo(f"Expectations: {output}", err=True)
    else:
        sys.stdout.write(text)
    return 0


@cli.command("diff")
@click.argument("baseline", metavar="BASELINE.json")
@click.argument("current", metavar="CURRENT.json")
@click.option("--json", "as_json", is_flag=True, help="Print the drift as JSON.")
@click.option("--ignore", multiple=True, metavar="PATTERN",
              help="Leave out versions or findings whose key or ID matches this glob (repeatable), e.g. "
                   "'kernel', 'environments.*.packages.pip', 'DLD-DISK-*'.")
def diff_cmd(baseline, current, as_json, ignore) -> int:
    """Drift between two reports (or facts files): versions and findings. Exit 1 when anything drifted."""
    from doctor.diff import diff, render_text

    base_snap, base_findings = _snapshot_and_findings(baseline)
    cur_snap, cur_findings = _snapshot_and_findings(current)
    patterns = [p for item in ignore for p in item.split(",") if p.strip()]
    result = diff(base_snap, cur_snap, base_findings, cur_findings, patterns)
    if as_json:
        click.echo(json.dumps({"baseline": baseline, "current": current, **result}, indent=2, sort_keys=False))
    else:
        click.echo(render_text(result, baseline, current), nl=False)
    return 1 if result["drift"] else 0
