"""Compile the HTML report's template ahead of time (reports/templates_compiled/), so a run loads a module instead of
compiling ~200 lines of Jinja in every process (about 20 ms of the start-up budget).

    python tests/tools/make_compiled_template.py

Writes the module Jinja generates and a stamp: the template's SHA-256 and the Jinja version. At run time the compiled
module is used only when both still match (reports/html.py); otherwise the template is compiled as before. A test
fails when the committed module is stale.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "reports" / "templates" / "report.html.j2"
TARGET = ROOT / "reports" / "templates_compiled"


def build(target: Path) -> None:
    import jinja2

    from dl_doctor.reports import html

    env = html._source_environment()
    with tempfile.TemporaryDirectory() as tmp:
        env.compile_templates(tmp, zip=None, ignore_errors=False, filter_func=lambda n: n == "report.html.j2")
        target.mkdir(parents=True, exist_ok=True)
        for old in target.glob("tmpl_*.py"):
            old.unlink()
        for f in Path(tmp).glob("tmpl_*.py"):
            shutil.copy(f, target / f.name)
    stamp = {"template_sha256": hashlib.sha256(TEMPLATE.read_bytes()).hexdigest(), "jinja2": jinja2.__version__}
    (target / "stamp.json").write_text(json.dumps(stamp, indent=1) + "\n")


if __name__ == "__main__":
    build(Path(sys.argv[1]) if len(sys.argv) > 1 else TARGET)
    print(f"{TARGET}: written")
