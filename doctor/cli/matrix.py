"""``dl-doctor matrix ...``: ask the compatibility matrix directly.

Each query prints a short answer, or with ``--json PATH|-`` writes an object with the keys the
command-line contract names. No entry for the question: exit 1 and one line naming
the closest known entries.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import click

from dl_doctor.app import InputProblem
from dl_doctor.app import load_matrix as _matrix
from dl_doctor.cli.base import check_outputs, cli, json_option, json_text, matrix_overlay_option, write_output


class NoEntry(click.ClickException):
    """No matrix entry answers the question: exit 1."""

    exit_code = 1
    dl_doctor_exit = 1


@cli.group("matrix")
def matrix_group() -> None:
    """Query the driver / CUDA / GPU / framework / EC2 compatibility matrix."""


def _answer(kind: str, query: str, overlays, json_path: Optional[str],
            lookup: Callable[[Any], Optional[Dict[str, Any]]], human: Callable[[Dict[str, Any]], str]) -> int:
    check_outputs(json_path)
    m = _matrix(overlays)
    try:
        result = lookup(m)
    except ValueError:
        result = None
    if result is None:
        close = m.closest(kind, query)
        raise NoEntry(f"no {kind} entry for '{query}' in the matrix"
                      + (f"; closest: {', '.join(close)}" if close else ""))
    if json_path:
        write_output(json_path, json_text(result))
    if json_path != "-":
        from dl_doctor.reports.text import safe_line, safe_text

        # an overlay's entry (--matrix-overlay, a site file) is text someone else wrote: escaped (the answer keeps
        # its own lines)
        click.echo(safe_text(human(result)))
        if not result.get("verified", True):
            click.echo("note: this entry is marked unverified in the matrix")
        for src in result.get("sources", []):
            click.echo(f"  source: {safe_line(src)}")
    return 0


def _query_options(func):
    func = json_option("Write the answer as JSON here ('-' = stdout, instead of the text).")(func)
    return matrix_overlay_option(func)


def _valid_version(text: str, what: str) -> str:
    from packaging.version import InvalidVersion, Version

    try:
        Version(text)
    except InvalidVersion:
        raise InputProblem(f"'{text}' is not a {what} version")
    return text


@matrix_group.command("cuda")
@click.argument("version")
@_query_options
def matrix_cuda(version, json_path, overlays) -> int:
    """Minimum driver for a CUDA toolkit (12.4 or 12.4.1)."""
    _valid_version(version, "CUDA")

    def human(r):
        text = f"CUDA {r['cuda']}: driver >= {r['min_driver']} for full support"
        if r.get("update"):
            text += f" ({r['update']['version']}: >= {r['update']['min_driver']})"
        if r.get("min_driver_minor_compat"):
            text += f"; >= {r['min_driver_minor_compat']} with minor-version compatibility (limited feature set)"
        return text

    return _answer("cuda", version, overlays, json_path, lambda m: m.cuda(version), human)


@matrix_group.command("driver")
@click.argument("version")
@_query_options
def matrix_driver(version, json_path, overlays) -> int:
    """Newest CUDA a driver supports (what nvidia-smi prints as 'CUDA Version')."""
    _valid_version(version, "driver")
    return _answer("driver", version, overlays, json_path, lambda m: m.driver(version),
                   lambda r: f"driver {r['driver']}: CUDA up to {r['max_cuda']}")


@matrix_group.command("gpu")
@click.argument("query")
@_query_options
def matrix_gpu(query, json_path, overlays) -> int:
    """A GPU by name fragment (H100) or PCI ID (10de:2330)."""

    def human(r):
        window = f"CUDA {r['min_cuda'] or '?'} .. {r['max_cuda'] or 'current'}"
        text = (f"{r['name']}: compute capability {r['compute_capability']}, {r['architecture']}; {window}; "
                f"PCI {', '.join(r['pci_ids'])}")
        if r.get("last_driver_branch"):
            text += f"; last driver branch R{r['last_driver_branch']}"
        if r.get("other_matches"):
            text += f"\nalso matching: {', '.join(r['other_matches'])}"
        return text

    return _answer("gpu", query, overlays, json_path, lambda m: m.gpu(query), human)


@matrix_group.command("torch")
@click.argument("version")
@click.option("--gpu", "gpu", metavar="MODEL",
              help="On this GPU (what 'matrix gpu' accepts): the builds that serve it, the minimum driver, images.")
@_query_options
def matrix_torch(version, gpu, json_path, overlays) -> int:
    """A PyTorch release: CUDA variants, Python, cuDNN, NCCL, arch lists, companions; with --gpu, on that GPU."""
    _valid_version(version.split("+")[0], "PyTorch")
    if gpu is not None:
        return _torch_on_gpu(version, gpu, json_path, overlays)

    def human(r):
        lines = [f"torch {r['torch']}: CUDA variants {', '.join(r['cuda_variants'])}; Python {', '.join(r['python'])}; "
                 f"torchvision {r['torchvision']}, torchaudio {r['torchaudio']}; NumPy 2: {'yes' if r['numpy2'] else 'no'}"]
        for cuda in r["cuda_variants"]:
            arch = r["arch_list"].get(cuda)
            lines.append(f"  cu{cuda.replace('.', '')}: cuDNN {r['cudnn'].get(cuda) or '?'}, NCCL {r['nccl'].get(cuda) or '?'}, "
                         f"arch {';'.join(arch) if arch else '?'}")
        return "\n".join(lines)

    return _answer("torch", version, overlays, json_path, lambda m: m.torch(version), human)


def _torch_on_gpu(version: str, gpu: str, json_path: Optional[str], overlays) -> int:
    """``matrix torch VERSION --gpu MODEL``: exit 1 naming the closest entries when the release or the GPU is not
    in the matrix; else 0, also when no build serves the GPU (the answer says so)."""

    def lookup(m):
        release = m.torch_release(version)
        if release is None:
            return None
        if "+" in version and not any(va["name"] == version.split("+", 1)[1].lower() for va in release["variant"]):
            names = ", ".join(f"{version.split('+')[0]}+{va['name']}" for va in release["variant"])
            raise NoEntry(f"no build '{version}' in the matrix; builds of this release: {names}")
        if not m.find_gpus(gpu):
            close = m.closest("gpu", gpu)
            raise NoEntry(f"no gpu entry for '{gpu}' in the matrix" + (f"; closest: {', '.join(close)}" if close else ""))
        result = m.torch_on_gpu(version, gpu)
        if result is None:  # an entry with no compute capability (an NVSwitch)
            raise NoEntry(f"'{gpu}' has no compute capability in the matrix (not a GPU that runs CUDA code)")
        return result

    def human(r):
        head = f"torch {r['torch']} on {r['gpu']} (compute capability {r['compute_capability']}, {r['architecture']}): "
        minor = r.get("min_driver_minor_compat")
        if r["serving"] and r["min_driver"]:
            head += f"minimum driver {r['min_driver']}"
            if minor and minor != r["min_driver"]:
                head += f" ({minor} with minor-version compatibility, limited feature set)"
        elif r["serving"]:
            head += (f"minimum driver {minor or '?'}, through minor-version compatibility only (limited feature "
                     "set; full support needs a driver past the GPU's last branch)")
        if r["serving"]:
            head += f"; builds that serve it: {', '.join('cu' + c.replace('.', '') for c in r['serving'])}"
        elif any(b["serves"] is None for b in r["builds"]):
            head += "no build known to serve it (some arch lists are not in the matrix)"
        else:
            head += "no CUDA build of this release serves this GPU"
        lines = [head]
        if r.get("gpu_min_driver"):
            lines.append(f"  the GPU needs driver >= {r['gpu_min_driver']['driver']} "
                         f"(CUDA {r['gpu_min_driver']['cuda']}, the first to support it)")
        if r.get("last_driver_branch"):
            lines.append(f"  the GPU's last driver branch: R{r['last_driver_branch']}")
        for b in r["builds"]:
            state = {True: "serves", False: "does not serve", None: "unknown"}[b["serves"]]
            text = f"  {b['name']}: {state}: {b['why']}"
            if b["serves"]:
                drivers = []
                if b["min_driver"]:
                    drivers.append(f"driver >= {b['min_driver']}")
                if b["min_driver_minor_compat"]:
                    drivers.append(f">= {b['min_driver_minor_compat']} with minor-version compatibility")
                text += f"; {', '.join(drivers)}" if drivers else ""
            text += f"; cuDNN {b['cudnn'] or '?'}, NCCL {b['nccl'] or '?'}"
            if not b["verified"]:
                text += " (arch list unverified)"
            lines.append(text)
        if r["images"]:
            lines.append(f"images with torch {'.'.join(r['torch'].split('.')[:2])} (images.toml):")
        for i in r["images"]:
            state = {True: "satisfies", False: "does not satisfy", None: "unknown"}[i["satisfies"]]
            stack = ", ".join(x for x in (f"torch {i['torch']}", f"CUDA {i['cuda']}" if i["cuda"] else None,
                                          i.get("os"), i.get("arch")) if x)
            lines.append(f"  {i['kind']} {i['name']} {i['release']} ({stack}): {state}: {i['why']}"
                         + ("" if i["verified"] else " (entry unverified)"))
        return "\n".join(lines)

    return _answer("torch", version, overlays, json_path, lookup, human)


@matrix_group.command("instance")
@click.argument("instance_type")
@_query_options
def matrix_instance(instance_type, json_path, overlays) -> int:
    """An EC2 instance type: GPUs, GPU memory, EFA interfaces, NVSwitch."""
    return _answer("instance", instance_type, overlays, json_path, lambda m: m.instance(instance_type),
                   lambda r: (f"{r['instance_type']}: {r['gpu_count']} x {r['gpu']} ({r['gpu_memory_gib']} GiB each); "
                              f"EFA interfaces {r['efa_interfaces'] if r['efa_interfaces'] is not None else 'unknown'}; "
                              f"NVSwitch {'yes (nvidia-fabricmanager required)' if r['nvswitch'] else 'no'}"))


@matrix_group.command("xid")
@click.argument("code")
@_query_options
def matrix_xid(code, json_path, overlays) -> int:
    """An NVIDIA Xid code: meaning, what it points at, NVIDIA's resolution bucket, the action."""
    text = code.strip()
    if not text.isdigit() or not 0 < int(text) < 10000:
        raise InputProblem(f"'{code}' is not an Xid code (a number like 48)")

    def human(r):
        facts = [f"kind {r['kind']}"]
        if r.get("points_at"):
            facts.append(f"points at the {r['points_at']}")
        if r.get("resolution"):
            facts.append(f"NVIDIA: {r['resolution']}")
        if r.get("remedy"):
            facts.append(f"remedy {r['remedy']}" + (", drain" if r.get("drain") else ""))
        if r.get("since"):
            facts.append(f"defined since driver {r['since']}")
        named = r["name"] if r.get("mnemonic") in (None, r["name"]) else f"{r['name']} ({r['mnemonic']})"
        lines = [f"Xid {r['code']}: {named}; " + "; ".join(facts), r["action"]]
        if r.get("unverified"):
            lines.append(f"unverified: {', '.join(r['unverified'])}")
        return "\n".join(lines)

    return _answer("xid", text, overlays, json_path, lambda m: m.xid(int(text)), human)


@matrix_group.command("validate")
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False))
@json_option("Write the result as JSON here ('-' = stdout, instead of the text).")
def matrix_validate(files, json_path) -> int:
    """Validate matrix files (default: the built-in data, its error-code catalogs and site overlays); exit 1 on errors."""
    from dl_doctor import compat_matrix
    from dl_doctor.reports.text import safe_line

    check_outputs(json_path)
    paths = list(files) or compat_matrix.site_overlay_files()
    errors = compat_matrix.validate_files(paths)
    if not files:  # the built-in data: the error-code catalogs too (compat_matrix/catalogs)
        from dl_doctor.compat_matrix import catalogs

        errors += [f"catalogs/{e}" for e in catalogs.validate()]
    if json_path:
        write_output(json_path, json_text({"files": list(paths), "builtin": not files, "valid": not errors,
                                           "errors": errors}))
        if json_path == "-":
            return 1 if errors else 0
    for err in errors:
        click.echo(safe_line(err))
    if errors:
        return 1
    names = ", ".join(paths) if paths else "the built-in matrix"
    click.echo(f"valid: {names}")
    return 0
