"""Rebuild compat_matrix/data/builtin.json from the TOML files (run after editing them; a test says when it is due).

    python tests/tools/make_matrix_snapshot.py
"""

import json
from pathlib import Path

from dl_doctor import compat_matrix

OUT = Path(__file__).resolve().parents[2] / "compat_matrix" / "data" / compat_matrix.SNAPSHOT

if __name__ == "__main__":
    OUT.write_text(json.dumps(compat_matrix.build_snapshot(), ensure_ascii=False, sort_keys=True,
                              separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"{OUT}: written")
