"""The terminal report, read as a doctor's report: who the patient is (host, GPUs, driver, CUDA), the problems worst
first (each its headline, its evidence and the fix to paste), the stack in a few lines, one line of pass and skip
counts (``verbose`` lists them), the report paths, and a last line that names the problems and the next command.

Prose wraps to the width; commands never wrap (they paste). Everything from the machine is escaped (``_shown``,
``safe_line``): a value cannot forge a line of its own or move the cursor."""

from __future__ import annotations

import os
import re
import shutil
from collections import Counter
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from dl_doctor.reports.present import heading, items
from dl_doctor.reports.text import safe_line, safe_text, safe_value  # noqa: F401 - part of this module's API

COLORS = {"fail": "31;1", "error": "35;1", "warn": "33;1", "pass": "32", "skip": "2", "dim": "2", "bold": "1",
          "well": "32;1"}
LABELS = {"fail": "FAIL", "error": "ERROR", "warn": "WARN", "pass": "PASS", "skip": "SKIP"}
ORDER = ("error", "fail", "warn", "skip", "pass")
PROBLEMS = ("error", "fail", "warn")
WIDTH = 100  # where the output is not a terminal and COLUMNS is not set
MIN_WIDTH, MAX_WIDTH = 40, 300
MAX_ENV_ROWS = 3  # environments with a CUDA framework shown in the stack block (the HTML report has them all)
NO_GPU_HERE = "No NVIDIA GPU here: this host cannot train on a GPU"
MARKS = {"bad": "✗", "warn": "!"}


def _paint(text: str, style: str, color: bool) -> str:
    return f"\033[{COLORS[style]}m{text}\033[0m" if color and text else text


def terminal_width(stream: Any = None) -> int:
    """The width prose wraps to: ``COLUMNS`` where it is set (a number), else the terminal's where the output is one,
    else WIDTH (a pipe, a file); always 40 to 300 columns."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return max(MIN_WIDTH, min(MAX_WIDTH, int(columns)))
    try:
        if stream is not None and stream.isatty():
            return max(MIN_WIDTH, min(MAX_WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns))
    except (AttributeError, ValueError, OSError):
        pass
    return WIDTH


_width = WIDTH


def _wrap(text: str, indent: str, hanging: Optional[str] = None) -> List[str]:
    """``text`` wrapped to the width (the first line after ``indent``, the others after ``hanging``); a path longer
    than the line breaks after a '/' instead of overflowing it."""
    width = max(MIN_WIDTH, _width)
    rest = indent if hanging is None else hanging
    room = max(20, width - len(rest))
    pieces = []  # (text, whether a space goes before it)
    for word in text.split(" "):
        spaced = True
        while len(word) > room and "/" in word[1:room]:
            cut = word.rfind("/", 1, room) + 1
            pieces.append((word[:cut], spaced))
            spaced, word = False, word[cut:]
        pieces.append((word, spaced))
    out: List[str] = []
    line, empty = indent, True
    for piece, spaced in pieces:
        add = (" " if spaced and not empty else "") + piece
        if not empty and len(line) + len(add) > width:
            out.append(line)
            line = rest + piece
        else:
            line += add
        empty = False
    out.append(line)
    return out


def _cut(text: str, room: int) -> str:
    """``text`` cut at a word boundary to at most ``room`` characters, with an ASCII "..." where it was cut."""
    if len(text) <= room:
        return text
    head = text[:max(0, room - 3)]
    if " " in head:
        head = head[:head.rfind(" ")]
    return head.rstrip(" ,;:·") + "..."


def headline(report: Dict[str, Any]) -> str:
    """The host in one line (host name, OS, kernel, GPUs, driver, container, where the facts come from): the title
    of the HTML report and the Markdown summary."""
    host = report.get("host", {})
    parts = [p for p in (host.get("hostname"), host.get("os"),
                         f"kernel {host['kernel']}" if host.get("kernel") else None) if p]
    gpus = host.get("nvidia_gpus")
    if gpus is not None:
        parts.append(f"{gpus} NVIDIA GPU{'s' if gpus != 1 else ''}" if gpus else "no NVIDIA GPU")
    if host.get("driver"):
        parts.append(f"driver {host['driver']}")
    if host.get("container"):
        parts.append(f"in a {host['container']} container")
    run = report.get("run", {})
    if run.get("mode") == "sysroot":
        parts.append(f"sysroot {run.get('sysroot')}")
    elif run.get("mode") == "facts":
        parts.append(f"facts collected {run.get('facts_collected_at')}")
    return " · ".join(parts)


def summary_line(report: Dict[str, Any]) -> str:
    """The counts of each status and the run's duration (one line)."""
    s = report.get("summary", {})
    counts = ", ".join(f"{s.get(k, 0)} {k}" for k in ("fail", "error", "warn", "pass", "skip"))
    return f"{counts}  ({report.get('run', {}).get('duration_s', 0):.2f} s)"


def _shown(report: Dict[str, Any]) -> Dict[str, Any]:
    """The parts of ``report`` the summary shows (not the facts, which are most of a report), escaped: every value
    one line, so a message or a host name cannot forge a PASS line of its own; a fix's commands keep their lines
    (a pod spec, a here-document), each printed indented under the fix."""
    shown = safe_value({k: report.get(k) for k in ("tool", "host", "run", "summary", "findings", "probe_errors",
                                                    "privilege") if k in report}, one_line=True)
    for finding, original in zip(shown.get("findings") or [], report.get("findings") or []):
        fix = original.get("fix") if isinstance(original, dict) else None
        if isinstance(fix, dict) and isinstance(fix.get("commands"), list):
            finding["fix"]["commands"] = [safe_text(str(c)) for c in fix["commands"]]
    return shown


# -- the facts the header and the stack block read -------------------------------------------------------------------

def _get(facts: Any, path: str) -> Any:
    node = facts
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def no_gpu_here(report: Dict[str, Any]) -> bool:
    """The host the facts are from is known to have no NVIDIA GPU (checks.common.no_nvidia_gpu: none on the PCI bus,
    none NVML counts, not WSL2), and its PCI bus was the one read: a live run, or facts a live run collected; never a
    sysroot, whose /sys is not the image's hardware."""
    run = report.get("run") or {}
    live = run.get("mode") == "live" or (run.get("mode") == "facts" and run.get("facts_mode") == "live")
    facts = report.get("facts") or {}
    return (live and _get(facts, "gpu_pci.gpu_count") == 0 and not _get(facts, "nvidia_driver.runtime.wsl")
            and not _get(facts, "nvml.device_count"))


def _gpus(report: Dict[str, Any], gpu_names: Optional[Mapping[str, str]]) -> Optional[str]:
    """The GPUs in a few words: ``8 × NVIDIA A100-SXM4-40GB`` (NVML's names, else the model of each PCI ID)."""
    facts = report.get("facts") or {}
    devices = [d for d in _get(facts, "nvml.devices") or [] if isinstance(d, dict)]
    names = Counter(str(d.get("name") or "GPU") for d in devices)
    if names:
        return ", ".join(f"{n} × {name}" for name, n in names.most_common())
    pci = [d for d in _get(facts, "gpu_pci.devices") or [] if isinstance(d, dict) and d.get("kind", "gpu") == "gpu"]
    if pci:
        ids = Counter(f"10de:{d.get('device_id')}" for d in pci)
        return ", ".join(f"{n} × {(gpu_names or {}).get(pci_id) or 'NVIDIA GPU ' + pci_id}"
                         for pci_id, n in ids.most_common())
    count = (report.get("host") or {}).get("nvidia_gpus")
    if isinstance(count, int) and count > 0:
        return f"{count} NVIDIA GPU{'s' if count != 1 else ''}"
    if count == 0:
        return "none on the PCI bus" if (report.get("run") or {}).get("mode") != "sysroot" else \
            "none on the tree's PCI bus"
    return None


def _header(report: Dict[str, Any], shown: Dict[str, Any], gpu_names: Optional[Mapping[str, str]],
            system: List[Dict[str, Any]], color: bool, short: bool = False) -> List[str]:
    """The host, then its GPUs, driver and CUDA (or that it has no NVIDIA GPU); ``short``: the host name, the GPUs,
    the driver and CUDA in one line where they fit (no tool version, OS or kernel)."""
    host, run = shown.get("host") or {}, shown.get("run") or {}
    version = (shown.get("tool") or {}).get("version", "")
    where = [p for p in (host.get("hostname"), host.get("os"),
                         f"kernel {host['kernel']}" if host.get("kernel") else None,
                         f"in a {host['container']} container" if host.get("container") else None) if p]
    if run.get("mode") == "sysroot":
        where.insert(0, f"sysroot {run.get('sysroot')}")
    elif run.get("mode") == "facts":
        where.append(f"facts collected {run.get('facts_collected_at')}")
    if short:
        where = [p for p in (where[0] if run.get("mode") == "sysroot" else None, host.get("hostname"),
                             where[-1] if run.get("mode") == "facts" else None) if p]
    first = _joined(([] if short else [f"dl-doctor {version}"]) + where)
    lines = [_paint(first[0], "bold", color)] + first[1:]
    if no_gpu_here(report):
        lines.append(_paint(NO_GPU_HERE, "bold", color))
        return lines
    facts = report.get("facts") or {}
    gpus = _gpus(report, gpu_names)
    if gpus is None:
        gpus = "not visible in a sysroot (an image's /sys is not its hardware)" if run.get("mode") == "sysroot" \
            else "unknown (the PCI bus could not be read)"
    gpu_node = next((n for n in system if n["layer"] == "GPUs"), None)
    parts = ["GPUs: " + safe_line(gpus) + _mark(gpu_node, color)]
    driver = host.get("driver") or _get(facts, "nvml.driver_version")
    if driver:
        parts.append(f"driver {safe_line(driver)}")
    cuda = _get(facts, "nvml.cuda_driver_version")
    if cuda:
        parts.append(f"CUDA {safe_line(cuda)}")
    if short:
        return [_paint(line, "bold", color) if i == 0 else line for i, line in enumerate(_joined(where + parts))]
    lines.extend(_joined(parts))
    return lines


def _joined(parts: List[str]) -> List[str]:
    """``parts`` joined with " · ", the lines broken between parts where they can be (a part longer than the line
    wraps on its own)."""
    lines: List[str] = []
    line = ""
    for i, part in enumerate(parts):
        room = _width - (0 if i == len(parts) - 1 else 2)  # a line that goes on ends in " ·"
        if line and len(line) + 3 + len(part) > room:
            lines.append(line + " ·")
            line = ""
        line = f"{line} · {part}" if line else part
    if line:
        lines.extend(_wrap(line, "") if len(line) > _width else [line])
    return lines


def _mark(node: Optional[Dict[str, Any]], color: bool) -> str:
    """`` ✗ DLD-DRV-003`` after a stack layer a finding is about (``!`` for a warning); nothing for a fine one."""
    if not node or node.get("state") not in MARKS:
        return ""
    style = "fail" if node["state"] == "bad" else "warn"
    finding = f" {safe_line(node['finding'])}" if node.get("finding") else ""
    return " " + _paint(MARKS[node["state"]] + finding, style, color)


# -- the stack block ------------------------------------------------------------------------------------------------

_LIBRARY_NAMES = (("libcudnn.so", "cuDNN"), ("libnccl.so", "NCCL"))


def _framework(fw: Dict[str, Any], color: bool) -> str:
    """``torch 2.4.1 for CUDA 12.4 (cuDNN 9.1.0.70, NCCL 2.20.5)``, a library that does not serve marked."""
    text = safe_line(f"{fw.get('name')} {fw.get('version') or ''}".strip())
    if fw.get("cuda"):
        text += f" for CUDA {safe_line(fw['cuda'])}"
    libs: List[str] = []
    named = set()
    for prefix, label in _LIBRARY_NAMES:
        lib = next((l for l in fw.get("libraries") or [] if str(l.get("soname") or "").startswith(prefix + ".")
                    or str(l.get("soname") or "") == prefix), None)
        if lib:
            named.add(id(lib))
            libs.append(f"{label} {safe_line(lib.get('version') or ('not found' if not lib.get('path') else '?'))}"
                        + _lib_mark(lib, color))
    odd = [l for l in fw.get("libraries") or [] if id(l) not in named and l.get("state") not in ("ok", "other")
           and l.get("state") != "optional"]
    for lib in odd[:2]:
        libs.append(safe_line(f"{lib.get('soname')} {lib.get('version') or ''}".strip()) + _lib_mark(lib, color))
    if len(odd) > 2:
        libs.append(f"{len(odd) - 2} more")
    return text + (f" ({', '.join(libs)})" if libs else "")


def _lib_mark(lib: Dict[str, Any], color: bool) -> str:
    state = lib.get("state")
    if state in ("ok", "other", None):
        return ""
    bad = state in ("missing", "wrong", "unmet")
    finding = f" {safe_line(lib['finding'])}" if lib.get("finding") else ""
    return " " + _paint(("✗" if bad else "!") + finding, "fail" if bad else "warn", color)


def _stack(model: Dict[str, Any], color: bool) -> List[str]:
    """A few lines: the driver (kernel module and user space), the CUDA toolkits, and each environment's CUDA
    frameworks with the cuDNN and NCCL they load (the broken ones first; the HTML report draws it all)."""
    nodes = {n["layer"]: n for n in model["system"]}
    rows: List[Tuple[str, str]] = []
    module, user = nodes.get("Kernel module"), nodes.get("User-space driver")
    if module and user:
        marked = module if module.get("state") in MARKS else user
        text = f"module {safe_line(module['label'])} · {safe_line(user['label'])}" + _mark(marked, color)
        rows.append(("driver", text))
    toolkits = nodes.get("CUDA toolkits")
    if toolkits:
        label = "none installed" if toolkits["label"] == "none" else f"toolkit {safe_line(toolkits['label'])}"
        rows.append(("CUDA", label + _mark(toolkits, color)))
    with_fw = [e for e in model["environments"] if e["frameworks"]]
    for env in with_fw[:MAX_ENV_ROWS]:
        python = f" · Python {safe_line(env['python'])}" if env.get("python") else ""
        rows.append((safe_line(env["name"]), "; ".join(_framework(fw, color) for fw in env["frameworks"]) + python))
    more = len(with_fw) - MAX_ENV_ROWS
    without = len(model["environments"]) - len(with_fw)
    tail = []
    if more > 0:
        tail.append(f"{more} more with a CUDA framework (the HTML report has them)")
    if without:
        tail.append(f"{without} without a CUDA framework")
    if tail and not with_fw:
        rows.append(("Python", f"{without} environment{'s' if without != 1 else ''}, none with a CUDA framework"))
    elif tail:
        rows.append(("", f"+ environments: {', '.join(tail)}"))
    if not rows:
        return []
    col = min(14, max(len(name) for name, _ in rows))
    lines: List[str] = []
    for i, (name, text) in enumerate(rows):
        lead = ("Stack: " if i == 0 else " " * 7)
        label = f"{name:<{col}}  " if len(name) <= col else name + "  "
        body = _wrap(text, lead + label, " " * (7 + col + 2))
        body[0] = _paint("Stack:", "bold", color) + body[0][6:] if i == 0 else body[0]
        lines.extend(body)
    return lines


# -- the counts and the last line -----------------------------------------------------------------------------------

def _reason(message: str) -> str:
    """A skip's reason in a few words, for the counts line."""
    if message.startswith("no NVIDIA GPU on the PCI bus"):
        return "no NVIDIA GPU"
    if message.startswith("WSL2:"):
        return "WSL2"
    m = re.match(r"not checked: '([^']+)' facts are not available", message)
    if m:
        return f"no {m.group(1)} facts"
    for sep in (": ", " (", "; ", ", "):
        if sep in message:
            message = message[:message.index(sep)]
    return _cut(message, 30)


def _counts(findings: List[Dict[str, Any]], color: bool) -> str:
    """``Checks: 18 passed, 69 skipped (26 no NVIDIA GPU, 7 no verify facts, 36 other)``, as many reasons as fit."""
    passed = sum(f["status"] == "pass" for f in findings)
    skips = [f for f in findings if f["status"] == "skip"]
    head = f"Checks: {passed} passed, {len(skips)} skipped"
    painted = (_paint("Checks:", "bold", color) + " " + _paint(f"{passed} passed", "pass", color) + ", "
               + _paint(f"{len(skips)} skipped", "skip", color))
    groups = Counter(_reason(str(f.get("message") or "")) for f in skips)
    shared = [(reason, n) for reason, n in groups.most_common() if n >= 2]
    parts: List[str] = []
    left = len(skips)
    for reason, n in shared:
        rest = left - n
        trial = parts + [f"{n} {reason}"] + ([f"{rest} other"] if rest else [])
        if len(head) + len(" (" + ", ".join(trial) + ")") > _width:
            break
        parts.append(f"{n} {reason}")
        left = rest
    if parts:
        if left:
            parts.append(f"{left} other")
        return painted + " (" + ", ".join(parts) + ")"
    return painted


def _last_line(problems: List[Dict[str, Any]], findings: List[Dict[str, Any]], html: bool, no_gpu: bool
               ) -> Tuple[str, str]:
    """The line that names the problems and the next command (and the style it is painted in), within the width
    where it can be: every problem's status and ID (else the first ones and "+N more"), the next command, then the
    worst one's headline and the HTML report where they fit."""
    passed = sum(f["status"] == "pass" for f in findings)
    skipped = sum(f["status"] == "skip" for f in findings)
    if not problems:
        if no_gpu:
            return f"No problem found, but no NVIDIA GPU here ({passed} passed, {skipped} skipped).", "well"
        return f"All is well: no problem found ({passed} passed, {skipped} skipped).", "well"
    first = problems[0]
    n = len(problems)
    head = f"{n} problem{'s' if n != 1 else ''}: "
    tail = f"; next: dl-doctor explain {first['id'].split(':')[0]}"
    def named(k: int) -> List[str]:  # the first k problems, each status said once: FAIL A, B, WARN C
        out, status = [], None
        for f in problems[:k]:
            out.append(f["id"] if f["status"] == status else f"{LABELS[f['status']]} {f['id']}")
            status = f["status"]
        return out + ([f"+{n - k} more"] if k < n else [])

    for k in range(n, 0, -1):  # the worst one is always named
        shown = named(k)
        if len(head + ", ".join(shown) + tail) <= _width:
            break
    text = ", ".join(shown)
    if html and len(head + text + tail) + len(", or open the HTML report") <= _width:
        tail += ", or open the HTML report"
    room = _width - len(head + text + tail) - 3  # " (" and ")" after the worst problem's ID
    if room >= 16:
        text = f"{shown[0]} ({_cut(heading(first), room)})" + text[len(shown[0]):]
    return head + text + tail, first["status"]


# -- the report -----------------------------------------------------------------------------------------------------

def _problem(f: Dict[str, Any], color: bool, verbose: bool) -> List[str]:
    """One problem: its headline (and the check's ID), its evidence as items, the fix's summary and its commands, each
    command whole on its own lines (never wrapped: it pastes as printed)."""
    ind = " " * 6
    status = f["status"]
    label = LABELS[status]
    head = _wrap(f"{label:<5} {heading(f)} · {f['id']}", "", ind)
    lines = []
    for i, h in enumerate(head):
        body = h[6:]
        if i == len(head) - 1 and body.endswith(" · " + f["id"]):  # the ID dim, after the headline
            body = _paint(body[:-len(f["id"]) - 3], "bold", color) + _paint(" · " + f["id"], "dim", color)
        elif body.startswith("· ") and i == len(head) - 1:
            body = _paint(body, "dim", color)
        else:
            body = _paint(body, "bold", color)
        lines.append((_paint(f"{label:<5}", status, color) + " " if i == 0 else ind) + body)
    if verbose and f.get("title"):
        lines.extend(_paint(l, "dim", color) for l in _wrap(f"{f['id']} checks: {f['title']}", ind))
    parts = items(f)
    if len(parts) == 1:
        lines.extend(_wrap(parts[0], ind))
    else:
        for part in parts:
            lines.extend(_wrap(part, ind + "- ", ind + "  "))
    fix = f.get("fix")
    if isinstance(fix, dict) and fix:
        if fix.get("summary"):
            lines.extend(_wrap("fix: " + str(fix["summary"]), ind))
        for cmd in fix.get("commands") or []:
            for cmd_line in str(cmd).splitlines():
                dim = cmd_line.lstrip().startswith("#")
                lines.append(ind + "  " + _paint(cmd_line, "dim", color) if dim else ind + "  " + cmd_line)
    return lines


def _listed(f: Dict[str, Any], idw: int, color: bool) -> List[str]:
    """A pass or a skip on its line (its message wrapped under itself): what ``verbose`` lists."""
    label = _paint(f"{LABELS[f['status']]:<5}", f["status"], color)
    pad = " " * (6 + idw + 1)
    body = _wrap(f"{f['id']:<{idw}} {f['message']}", " " * 6, pad)
    return [label + " " + body[0][6:]] + body[1:]


def terminal_height(stream: Any = None) -> Optional[int]:
    """The screen's rows the report should fit: ``LINES`` where it is set, else the terminal's where the output is one;
    None (no limit) for a pipe or a file."""
    lines = os.environ.get("LINES", "").strip()
    if lines.isdigit() and int(lines) > 0:
        return max(8, int(lines))
    try:
        if stream is not None and stream.isatty():
            return max(8, shutil.get_terminal_size((WIDTH, 24)).lines)
    except (AttributeError, ValueError, OSError):
        pass
    return None


_ANSI = re.compile("\033\\[[0-9;]*m")


def rows(text: str, width: int) -> int:
    """How many rows of a ``width``-column screen ``text`` takes (a line longer than the screen takes more than
    one: a command is never wrapped)."""
    return sum(max(1, -(-len(_ANSI.sub("", line)) // width)) for line in text.rstrip("\n").split("\n"))


def render(report: Dict[str, Any], color: bool = False, quiet: bool = False,
           paths: Sequence[str] = (), width: int = WIDTH, verbose: bool = False,
           gpu_names: Optional[Mapping[str, str]] = None, height: Optional[int] = None) -> str:
    """The terminal report. ``quiet``: only the problems and the last line; ``verbose``: every pass and skip too, and
    each problem's check. ``gpu_names``: the GPU model for a PCI ID (``10de:20b0``), from the run's matrix (the
    application supplies it: a report never loads the matrix). ``height``: the screen's rows; where the report would
    not fit them, the stack block, then the blank lines between the problems, then the OS and kernel are left out
    (and what could not be collected is one line), so the problems and the last line stay on one screen
    (``verbose`` output is never shortened)."""
    global _width
    _width = max(MIN_WIDTH, width)
    original = report
    shown = _shown(report)
    model: Optional[Dict[str, Any]] = None
    if not quiet and isinstance(original.get("facts"), dict) and original["facts"]:
        from dl_doctor.reports import stack

        model = stack.build(original)
    text = ""
    for compact in range(4):
        text = _render(original, shown, model, color=color, quiet=quiet, verbose=verbose,
                       paths=[safe_text(p) for p in paths], gpu_names=gpu_names, compact=compact)
        if height is None or verbose or rows(text, _width) <= height:
            break
    return text


def _render(original: Dict[str, Any], report: Dict[str, Any], model: Optional[Dict[str, Any]], *, color: bool,
            quiet: bool, verbose: bool, paths: List[str], gpu_names: Optional[Mapping[str, str]],
            compact: int) -> str:
    """The report at a level of compactness: 0 all of it, 1 without the stack block and with the facts that could
    not be collected (and those root would add) one line each, 2 also without the blank lines between the problems,
    3 also with the short header (and no blank line after it)."""
    lines: List[str] = []
    if not quiet:
        lines.extend(_header(original, report, gpu_names, model["system"] if model else [], color,
                             short=compact >= 3))
        if compact < 3:
            lines.append("")
    findings = sorted(report.get("findings") or [], key=lambda f: (ORDER.index(f["status"]), f["id"]))
    problems = [f for f in findings if f["status"] in PROBLEMS]
    for i, f in enumerate(problems):
        lines.extend(_problem(f, color, verbose))
        if compact < 2 or i == len(problems) - 1:
            lines.append("")
    if verbose and not quiet:
        listed = [f for f in findings if f["status"] == "pass"] + [f for f in findings if f["status"] == "skip"]
        idw = max([13] + [len(f["id"]) for f in listed if ":" not in f["id"] and len(f["id"]) <= 24])
        for f in listed:
            lines.extend(_listed(f, idw, color))
        if listed:
            lines.append("")

    if not quiet:
        errors = report.get("probe_errors") or []
        if errors and compact:  # one line where the screen is short (-v has them in full)
            lines.append(_cut("Facts that could not be collected: " + ", ".join(str(e.get("probe")) for e in errors)
                              + " (-v says why)", _width))
        elif errors:
            lines.append(_paint("Facts that could not be collected:", "bold", color))
            for err in errors:
                lines.extend(_wrap(f"- {err['probe']}: {err['error']}", "  ", "    "))
        limited = (report.get("privilege") or {}).get("limited") or []
        if limited and compact:
            lines.append(_cut("Run as root for facts from: " + ", ".join(
                str(item.get("probe")) for item in limited) + " (-v says what)", _width))
        elif limited:
            lines.extend(_wrap("Running as root would add: " + "; ".join(
                f"{item['would_add']} (probe {item['probe']})" for item in limited), "", "  "))
        load_errors = (report.get("run") or {}).get("load_errors") or []
        if load_errors:
            lines.append(_paint("Plugins that did not load:", "bold", color))
            for err in load_errors:
                lines.extend(_wrap(f"- {err}", "  ", "    "))
        if model and compact < 1:
            lines.extend(_stack(model, color))
        lines.append(_counts(findings, color))
        for path in paths:
            lines.append(f"Report: {path}")
    last, style = _last_line(problems, findings, html=not quiet and any(p.endswith(".html") for p in paths),
                             no_gpu=no_gpu_here(original))
    lines.append(_paint(last, style, color))
    return "\n".join(lines) + "\n"
