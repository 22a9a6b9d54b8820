"""Rebuild the driver half of tests/fixtures/xid_source_codes.json from NVIDIA's open-gpu-kernel-modules.

    python tests/tools/make_xid_source_codes.py GIT_DIR [RELEASE]

GIT_DIR is a clone (or bare mirror) of https://github.com/NVIDIA/open-gpu-kernel-modules; RELEASE is the tag counted
against (default: the newest tag). The driver's Xid enumeration is src/common/sdk/nvidia/inc/nverror.h: every
``#define NAME (N)`` but the range marker ROBUST_CHANNEL_LAST_ERROR and the ROBUST_CHANNEL_ERROR_RECOVERY_LEVEL_*
levels (aliases such as INFOROM_DRAM_RETIREMENT_EVENT name another define, not a number, and are left out). For each
code it also records the lowest-numbered release whose nverror.h defines it (``first_release``) and the release from
which every later one does (``every_release_from``; they differ where a code was backported to an older branch).
The fixture's ``docs_catalog`` half (NVIDIA's Xid catalog, transcribed from its web page) is kept as it is.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

HEADER = "src/common/sdk/nvidia/inc/nverror.h"
OUT = Path(__file__).resolve().parents[1] / "fixtures" / "xid_source_codes.json"
DEFINE = re.compile(r"^#define\s+(\w+)\s+\((\d+)\)", re.M)


def _key(tag):
    return tuple(int(x) for x in re.findall(r"\d+", tag))


def codes(text):
    found = {}
    for name, number in DEFINE.findall(text):
        if name == "ROBUST_CHANNEL_LAST_ERROR" or name.startswith("ROBUST_CHANNEL_ERROR_RECOVERY_LEVEL_"):
            continue
        found.setdefault(int(number), name)
    return found


def dump(doc):
    """The fixture's text: one line per code, so a diff shows the codes that changed."""
    parts = []
    for half, body in doc.items():
        head = {k: v for k, v in (body or {}).items() if k != "codes"}
        rows = ",\n".join("   " + json.dumps(row, ensure_ascii=False) for row in (body or {}).get("codes", []))
        text = json.dumps(head, indent=1, ensure_ascii=False)[:-2]
        parts.append(f' "{half}": {text},\n  "codes": [\n{rows}\n  ]\n }}')
    return "{\n" + ",\n".join(parts) + "\n}\n"


def main(git_dir, release=None):
    def git(*args):
        return subprocess.run(["git", "--git-dir", git_dir, *args], capture_output=True, text=True)

    tags = sorted((t for t in git("tag").stdout.split() if re.fullmatch(r"\d+(\.\d+)+", t)), key=_key)
    release = release or tags[-1]
    per_tag = {}
    for tag in tags:
        shown = git("show", f"{tag}:{HEADER}")
        if shown.returncode == 0:
            per_tag[tag] = set(codes(shown.stdout))
    known = [t for t in tags if t in per_tag and _key(t) <= _key(release)]
    names = codes(git("show", f"{release}:{HEADER}").stdout)
    commit = git("rev-parse", f"{release}^{{commit}}").stdout.strip()
    rows = []
    for code, name in sorted(names.items()):
        first = next(t for t in known if code in per_tag[t])
        i = len(known)
        while i > 0 and code in per_tag[known[i - 1]]:
            i -= 1
        rows.append({"code": code, "name": name, "first_release": first, "every_release_from": known[i]})
    old = json.loads(OUT.read_text()) if OUT.exists() else {}
    doc = {"driver": {"source": f"https://github.com/NVIDIA/open-gpu-kernel-modules/blob/{release}/{HEADER}",
                      "release": release, "commit": commit, "first_open_release": known[0], "count": len(rows),
                      "codes": rows},
           "docs_catalog": old.get("docs_catalog")}
    OUT.write_text(dump(doc))
    print(f"{OUT}: {len(rows)} codes at {release}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
