"""Write docs/facts.md, the reference of every fact the built-in probes provide, from their provides= declarations
(dl_doctor.facts.contract; tests/probes/test_provides.py fails when it is out of date):

    python tests/tools/make_facts_doc.py
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_facts_schema import builtin_probes  # noqa: E402

OUT = Path(__file__).resolve().parents[2] / "docs" / "facts.md"
SINCE = "0.1.0"  # a fact without since= was there in the first release


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    lines = ["# Facts", "",
             "Every fact the built-in probes provide, generated from their `provides=` declarations",
             "(`dl_doctor.facts.contract`) by `tests/tools/make_facts_doc.py`; the facts schema",
             "(`doctor/facts/facts-v1.json`) is generated from the same declarations. A check names the facts it needs",
             "in `requires=` by these paths (a path no probe provides is refused at load, see",
             "[plugins.md](plugins.md)); `[]` is an item of a list, `*` any key of a map. `null` is always possible",
             "(unknown; an item of a list only where its type says so), and a probe that cannot know its facts here",
             "leaves them out with the reason in `unavailable`. Counts carry their ranges.", ""]
    for spec in builtin_probes():
        lines += [f"## `{spec.name}`", "", f"{spec.description} (probe in `{spec.module}`).", "",
                  "| fact | type | meaning | since |", "|---|---|---|---|"]
        body: List[str] = []
        for path, fact, since in spec.facts.walk(spec.name, SINCE):
            body.append(f"| `{path}` | {_cell(fact.type_text())} | {_cell(fact.meaning)} | {since} |")
        lines += body + [""]
    lines += LOADING
    return "\n".join(lines)


# The one place where the report says which file loads: derived from the facts above, never collected.
LOADING = [
    "## The report's `loading`: which file each CUDA consumer loads (derived)", "",
    "Not a fact: the one resolution model, computed once per run by `dl_doctor.facts.loading.model(facts, matrix)`",
    "from `python_envs.environments[].loader` (the raw loader inputs) and the matrix, with `--deep`'s truth",
    "(`deep`, `deep_consumers`) applied. Every check of loading (DLD-PY-004, 011, 012, 013, 014) and every view",
    "reads it; `dl-doctor check FACTS.json` recomputes it from the facts alone. How a copy is judged to serve a",
    "build: [frameworks.md](frameworks.md#how-a-copy-is-judged-to-serve-a-build).", "",
    "| field | meaning |", "|---|---|",
    "| `loading.version` | the model's version (1) |",
    "| `loading.environments[].prefix`, `.name` | the environment (as in `python_envs.environments`) |",
    "| `loading.environments[].consumers[].distribution`, `.version`, `.cuda_major` | the consumer and its build's "
    "CUDA major |",
    "| `…consumers[].steps` | the framework's import sequence as simulated (libtorch_global_deps.so, preload "
    "(always), _C…) |",
    "| `…consumers[].preload`, `.preload_applied`, `.preload_call`, `.fixed_by_preload` | how its framework preloads "
    "wheel libraries, whether that is in the prediction, the opt-in call, what that call would fix |",
    "| `…consumers[].libraries[]` | each CUDA library that loads: `soname`, `path` (the file), `via` (how it was "
    "found: preloaded by …, RPATH/RUNPATH of …, LD_LIBRARY_PATH, ld.so.cache, default directories, seen in "
    "/proc/self/maps (--deep)), `searched` (the search order tried), `version` and `version_source`, `wheel` and "
    "`wheel_version`, `cuda_major`, `requested_by`, `env_copy` (the environment's own copy where another won), "
    "`predicted` (--deep saw another file than predicted) |",
    "| `…libraries[].verdict`, `.reason`, `.rule`, `.source` | whether that copy serves the build: `own`, `serves`, "
    "`older`, `fails` or `unknown`, why, by which rule (DT_VERNEED, cuda-major, cudnn-minor, nvjitlink, "
    "not-older, soname, abi, --deep) and its matrix source |",
    "| `…consumers[].missing[]` | what will not load: `soname`, `needed_by`, `optional`, `how` (DT_NEEDED, dlopen, "
    "seen by --deep), `looked_in` (where the loader looked, in order), `in_wheels` (a copy in the environment's "
    "wheels the loader does not reach) |",
    "| `…consumers[].unmet_versions[]` | symbol versions an object needs that the copy that loads does not define |",
    "| `…consumers[].truth` | --deep: `differences` from the prediction, `import_errors`, `undefined_symbols`, "
    "`mapped` |",
    "| `…consumers[].unrecorded` | names the facts never searched for (replayed with a newer matrix): unknown |",
    "",
]


if __name__ == "__main__":
    OUT.write_text(render(), encoding="utf-8")
    print(f"{OUT}: written")
    sys.exit(0)
