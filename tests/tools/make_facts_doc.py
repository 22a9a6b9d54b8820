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
    return "\n".join(lines)


if __name__ == "__main__":
    OUT.write_text(render(), encoding="utf-8")
    print(f"{OUT}: written")
    sys.exit(0)
