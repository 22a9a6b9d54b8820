"""ELF dynamic sections (SONAME, DT_NEEDED, DT_RPATH, DT_RUNPATH) through pyelftools.

pyelftools handles 32/64-bit, both byte orders and the string tables; a hand-written reader
would have to. Files are opened through the Host, so sysroot confinement holds.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

from doctor.host import Host


def _split(value: str) -> List[str]:
    return [p for p in value.split(":") if p]


def read_dynamic(host: Host, path: str) -> Optional[Dict[str, Any]]:
    """``{"soname", "needed", "rpath", "runpath", "machine"}`` of an ELF file, or None if it is not one."""
    try:
        with host.open_binary(path) as fh:
            elf = ELFFile(fh)
            out: Dict[str, Any] = {"soname": None, "needed": [], "rpath": [], "runpath": [],
                                   "machine": elf["e_machine"]}
            for section in elf.iter_sections():
                if not isinstance(section, DynamicSection):
                    continue
                for tag in section.iter_tags():
                    if tag.entry.d_tag == "DT_NEEDED":
                        out["needed"].append(tag.needed)
                    elif tag.entry.d_tag == "DT_SONAME":
                        out["soname"] = tag.soname
                    elif tag.entry.d_tag == "DT_RPATH":
                        out["rpath"] += _split(tag.rpath)
                    elif tag.entry.d_tag == "DT_RUNPATH":
                        out["runpath"] += _split(tag.runpath)
            return out
    except (OSError, ELFError, ValueError):
        return None
