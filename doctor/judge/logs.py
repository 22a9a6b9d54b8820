"""The kernel log's candidate lines (recorded by the kernel_log probe, doctor/readers/syslog.py) judged against the
signature base: pure, so a report is judged again with newer signatures."""

from __future__ import annotations

from typing import Any, Dict, Iterable, List

# PCIe AER errors the hardware corrected (a link-level retry): a few in a boot are normal on healthy machines
CORRECTED_AER = {"id": "pcie-aer-corrected", "where": ["kernel-log"], "patterns": [], "severity": "info",
                 "meaning": "PCIe errors the hardware corrected (link-level retries): a few in a boot are normal; "
                            "many mean a link that keeps retrying", "causes": [], "source": ["fc_pcie_aer_errors_gpu_unreachable"]}


def corrected_aer(sig: Dict[str, Any], line: str) -> bool:
    """A line of the pcie-aer signature that reports an error the hardware corrected (not an uncorrected one)."""
    return sig.get("id") == "pcie-aer" and "Corrected" in line and "Uncorrected" not in line


def events(candidates: Iterable[Dict[str, Any]], signatures: Iterable[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The candidate lines that a kernel-log signature matches: ``{"event", "line", "after_module_load"}``."""
    from dl_doctor.compat_matrix.signatures import match

    kernel_sigs = [s for s in signatures if "kernel-log" in (s.get("where") or [])]
    out: List[Dict[str, Any]] = []
    for c in candidates:
        line = c.get("line") if isinstance(c, dict) else None
        if not isinstance(line, str):
            continue
        for m in match(line, kernel_sigs)[:1]:
            out.append({"event": m.signature["id"], "line": line, "after_module_load": bool(c.get("after_module_load"))})
    return out
