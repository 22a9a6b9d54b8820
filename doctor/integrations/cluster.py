"""dl-doctor inside the engines clusters already run: Slurm (HealthCheckProgram, Prolog, Epilog), LBNL NHC and
Kubernetes node-problem-detector. Each engine gets the output and exit-code contract it expects (docs/clusters.md);
they all decide from the findings' remediation (docs/remediation.md).

Talking to Slurm is the one thing here that changes the machine's state, and only where the user asks for it
(``--drain``): the node is drained through Slurm's own ``scontrol`` with a reason that starts with ``dld:`` and the
check ID (what ``sinfo -R`` shows), and resumed only when it was dl-doctor that drained it.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional, Tuple

from dl_doctor.reports.present import heading
from dl_doctor.reports.text import short

ENGINES = ("slurm", "nhc", "npd")
PREFIX = "dld:"           # owned by dl-doctor: a drain reason that starts with it was set by dl-doctor
NPD_MAX = 80              # node-problem-detector keeps at most 80 characters of a custom plugin's output
REASON_MAX = 120
NHC_MAX = 400
# What no engine's line may carry: control characters (a line break would forge a line of the contract), the
# invisible marks that reorder what a terminal shows, lone surrogates (bytes that were not UTF-8), and the characters
# a shell gives a meaning inside double quotes (" ` $ \). NHC passes its message on quoted ("$NOTE"), and
# dl-doctor runs scontrol with an argument vector, no shell; scontrol strips a double quote that begins or ends the
# reason. Apostrophes mean nothing in any of them and are kept: "the driver's version", not "the driver s version".
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                      "\ud800-\udfff\"`$\\\\]")


class ToolMissing(RuntimeError):
    """The engine's own tool (Slurm's scontrol) is not where dl-doctor may run it from: one line, for the user."""


def _clean(text: str, limit: int) -> str:
    """One line for an engine: unsafe characters made spaces, cut at a word boundary with ASCII '...'."""
    return short(_CONTROL.sub(" ", str(text)), limit)


def problems(report: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The failing findings first (those that drain first of all), then the warnings; errors count as failures."""
    order = {"fail": 0, "error": 0, "warn": 1}
    found = [f for f in report.get("findings") or [] if f.get("status") in order]
    return sorted(found, key=lambda f: (order[f["status"]], not (f.get("remediation") or {}).get("drain"), f["id"]))


def draining(report: Dict[str, Any]) -> List[Dict[str, Any]]:
    return [f for f in report.get("findings") or [] if f.get("status") == "fail"
            and (f.get("remediation") or {}).get("drain")]


def _heading(f: Dict[str, Any]) -> str:
    """The finding's headline (the problem in a few words, reports/present.py), never the long message."""
    return heading(f) or str(f.get("message") or "")


def npd_line(report: Dict[str, Any], failing: bool) -> str:
    """node-problem-detector's custom-plugin output: at most 80 characters, beginning with the check ID."""
    found = problems(report)
    if not failing or not found:
        return f"dl-doctor: OK ({(report.get('summary') or {}).get('pass', 0)} checks passed)"[:NPD_MAX]
    f = found[0]
    return _clean(f"{f['id']} {_heading(f)}", NPD_MAX)


def nhc_lines(report: Dict[str, Any]) -> List[str]:
    """One line per problem, 'FAIL ID heading' or 'WARN ID heading': the .nhc function dies on the first FAIL and
    logs the WARNs."""
    out = []
    for f in problems(report):
        label = "WARN" if f["status"] == "warn" else "FAIL"
        out.append(_clean(f"{label} {f['id']} {_heading(f)}", NHC_MAX))
    return out


def drain_reason(f: Dict[str, Any]) -> str:
    """'dld:DLD-GPU-006 Uncorrectable ECC errors ...': the prefix and the check ID in the first 20 characters."""
    return _clean(f"{PREFIX}{f['id'].split(':')[0]} {_heading(f)}", REASON_MAX)


def _missing_tool(host, name: str) -> str:
    """Why ``--drain`` cannot run Slurm's ``name``: not on PATH at all, or (as root) only in a directory another
    user could write to, where dl-doctor does not run programs from (docs/security.md)."""
    from dl_doctor.host import spawn

    anywhere = spawn.which(name, host.environ().get("PATH", os.defpath), False)
    if anywhere:
        return (f"--drain needs Slurm's {name}: {anywhere} is not on the trusted search path (as root, dl-doctor "
                f"runs programs only from directories only root can change)")
    return f"--drain needs Slurm's {name}, which is not on PATH"


def parse_node(text: str) -> Tuple[Optional[str], Optional[str]]:
    """(state, reason) from ``scontrol show node NAME -o`` (the reason without its '[user@time]' suffix)."""
    state = re.search(r"(?:^|\s)State=(\S+)", text)
    reason = re.search(r"(?:^|\s)Reason=(.*?)(?:\s\[[^\]]*\])?\s*$", text.strip())
    return (state.group(1) if state else None), (reason.group(1).strip() if reason else None)


def slurm(host, report: Dict[str, Any], node: str, act: bool) -> Dict[str, Any]:
    """What Slurm should do with ``node`` and, when ``act``, do it with scontrol: drain it for a failing finding that
    drains (not over another's drain), resume it when it is healthy and the drain is dl-doctor's own."""
    drains = draining(report)
    out: Dict[str, Any] = {"node": node, "draining_findings": [f["id"] for f in drains], "action": "none"}
    if not act:
        out["action"] = "would-drain" if drains else "none"
        if drains:
            out["reason"] = drain_reason(drains[0])
        return out
    try:
        shown = host.run(["scontrol", "show", "node", node, "-o"], timeout=10)
    except FileNotFoundError:
        raise ToolMissing(_missing_tool(host, "scontrol"))
    if shown.returncode != 0:
        raise RuntimeError(f"scontrol show node {node}: {(shown.stderr or shown.stdout).strip()[:300]}")
    state, reason = parse_node(shown.stdout)
    out.update(state=state, previous_reason=reason)
    drained = bool(state and "DRAIN" in state.upper())
    ours = bool(reason and reason.startswith(PREFIX))
    if drains:
        new = drain_reason(drains[0])
        out["reason"] = new
        if drained and not ours:
            out["action"] = "left-alone"  # someone else drained it, for their own reason: keep theirs
            return out
        if drained and reason == new:
            out["action"] = "already-drained"
            return out
        r = host.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={new}"], timeout=10)
        if r.returncode != 0:
            raise RuntimeError(f"scontrol update (drain): {(r.stderr or r.stdout).strip()[:300]}")
        out["action"] = "drained"
        return out
    if drained and ours:
        r = host.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], timeout=10)
        if r.returncode != 0:
            raise RuntimeError(f"scontrol update (resume): {(r.stderr or r.stdout).strip()[:300]}")
        out["action"] = "resumed"
    elif drained:
        out["action"] = "left-alone"
    return out
