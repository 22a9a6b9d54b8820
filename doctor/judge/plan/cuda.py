"""``--cuda VERSION``: the toolkit that /usr/local/cuda points to moves to another CUDA release (installed beside the
others, as NVIDIA's packages and runfiles install it: /usr/local/cuda-X.Y, the link repointed)."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping

from dl_doctor import versions
from dl_doctor.judge.plan.change import Change, PlanInputError, WhatIf

LINK = "/usr/local/cuda"
_VERSION = re.compile(r"^\d{1,2}\.\d{1,2}(?:\.\d{1,3})?$")


def parse(value: str, matrix: Any) -> Dict[str, Any]:
    text = (value or "").strip()
    if len(text) > 16 or not _VERSION.match(text):
        raise PlanInputError(f"--cuda: '{text[:40]}' is not a CUDA version (like 12.4 or 12.4.1)")
    info = matrix.cuda(text)
    if info is None:
        raise PlanInputError(f"--cuda: CUDA {text} is not in the matrix; nearest known: "
                             + ", ".join(matrix.closest("cuda", text)))
    return {"version": text, "major_minor": versions.major_minor(text), "info": info}


def _under(path: Any, roots: List[str]) -> bool:
    return isinstance(path, str) and any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _retarget_loader(w: WhatIf, change: Change, old_target: str, old_major: Any, new: str) -> None:
    """The libraries an environment finds through /usr/local/cuda (LD_LIBRARY_PATH, ld.so.conf.d): the same sonames
    when the CUDA major stays (their versions move), none of the old toolkit's when it changes (a CUDA 13 toolkit has
    no libcudart.so.12; what it has instead was never recorded, so nothing is assumed found there)."""
    roots = [LINK] + ([old_target] if old_target and old_target != LINK else [])
    same_major = old_major is not None and old_major == versions.major(new)
    for n, env in enumerate(w.environments()):
        record = env.get("loader")
        if not isinstance(record, dict):
            continue
        files: Dict[str, Any] = record["files"] if isinstance(record.get("files"), dict) else {}
        hit = [p for p in files if _under(p, roots)]
        if not hit:
            continue
        label = f"python_envs.environments[{n}].loader"
        if same_major:
            table = record.setdefault("versions", {})
            if isinstance(table, dict):
                for p in hit:
                    if p in table:
                        table[p] = [new, "plan: --cuda"]
            change.edits.append({"key": f"{label}.versions", "from": f"{len(hit)} files of CUDA {old_major}",
                                 "to": f"CUDA {new}"})
            continue
        for table_name in ("files", "versions", "owners", "links"):
            table = record.get(table_name)
            if isinstance(table, dict):
                for p in [p for p in table if _under(p, roots)]:
                    del table[p]
        for table_name in ("cache", "globs"):
            table = record.get(table_name)
            if isinstance(table, dict):
                for key, hits in table.items():
                    if isinstance(hits, list):
                        table[key] = [h for h in hits if not _under(h, roots)]
        change.edits.append({"key": f"{label}.files", "from": f"{len(hit)} files under {LINK}", "to": None,
                             "why": f"a CUDA {versions.major(new)} toolkit has none of CUDA {old_major}'s sonames"})
        change.notes.append(f"{env.get('name') or env.get('prefix')}: the loader found {len(hit)} libraries through "
                            f"{LINK}; after the move it finds none of them there (what CUDA {new} puts there is "
                            f"not recorded)")


def apply(w: WhatIf, value: str, matrix: Any, options: Mapping[str, Any]) -> Change:
    parsed = parse(value, matrix)
    new, mm, info = parsed["version"], parsed["major_minor"], parsed["info"]
    default = w.get("cuda_toolkits.default") if isinstance(w.get("cuda_toolkits.default"), dict) else None
    old = (default or {}).get("version")
    old_target = str((default or {}).get("target") or "")
    change = Change("cuda", f"--cuda {new}", verified=bool(info.get("verified", True)),
                    sources=list(info.get("sources") or []))
    change.summary = f"/usr/local/cuda: CUDA {old or 'none'} -> {new} (needs driver >= {info['min_driver']})"
    if old and versions.major_minor(old) == mm and (len(new.split(".")) < 3 or old == new):
        change.notes.append(f"/usr/local/cuda is CUDA {old} already: nothing changes")
        return change
    target = f"/usr/local/cuda-{mm}"
    toolkits = w.get("cuda_toolkits.toolkits")
    toolkits = [t for t in toolkits if isinstance(t, dict)] if isinstance(toolkits, list) else []
    same = next((t for t in toolkits if t.get("path") == target), None)
    if same is not None:
        n = toolkits.index(same)
        w.set_in(change, same, "version", new, f"cuda_toolkits.toolkits[{n}].version")
    else:
        toolkits.append({"path": target, "version": new, "source": "plan: --cuda", "nvcc": True})
        w.set(change, "cuda_toolkits.toolkits", toolkits)
    w.set(change, "cuda_toolkits.default", {"path": LINK, "link": target, "target": target, "version": new})
    nvcc = w.get("cuda_toolkits.nvcc_on_path")
    if _under(nvcc, [LINK] + ([old_target] if old_target else [])):
        w.set(change, "cuda_toolkits.nvcc_on_path", f"{LINK}/bin/nvcc")
    _retarget_loader(w, change, old_target, versions.major(old) if old else None, new)
    if old:
        change.notes.append(f"the CUDA {old} toolkit stays installed in {old_target or 'its directory'}")
    from dl_doctor.judge.distro import package_manager
    from dl_doctor.model import Facts

    package = f"cuda-toolkit-{mm.replace('.', '-')}"
    change.step(f"Install CUDA toolkit {new} (it needs driver >= {info['min_driver']}) and point {LINK} at "
                f"{target}", [package_manager(Facts(w.snapshot)).install(package, note="NVIDIA's CUDA repository"),
                              f"sudo ln -sfn {target} {LINK}"])
    return change
