"""The reported cases' figures for the dl-doctor installed in this Python: how many are named (a finding among the
case's checks says what `names` asks) and ranked first by `why`, and how many twins stay quiet.

    python tests/cases/measure.py [--blind] [--json OUT] [ID...]

Run it with an older checkout's interpreter to measure before a change (the cases' trees need nothing from the code
they judge): the closing note of issue 27 gives the blind cases' figures before and after."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cases  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("ids", nargs="*")
    ap.add_argument("--blind", action="store_true", help="only the cases written before their checks")
    ap.add_argument("--json", dest="out")
    args = ap.parse_args()
    records = [r for r in cases.select(args.ids) if r.get("blind") or not args.blind]
    rows = []
    for r in records:
        try:
            v = cases.verdict(r)
        except Exception as exc:  # noqa: BLE001 - an older dl-doctor may not read a newer tree: that counts as a miss
            v = {"id": r["id"], "named": None, "why_first": None, "twin_bad": [], "passes": False,
                 "error": f"{type(exc).__name__}: {exc}"}
        rows.append(v)
        mark = "PASS" if v["passes"] else "miss"
        print(f"{mark}  {r['id']:<48} named={v['named']} why={v['why_first']} twin={v['twin_bad']}"
              + (f" error={v['error']}" if v.get("error") else ""))
    n = len(rows)
    named = sum(1 for v in rows if v["named"])
    first = sum(1 for v in rows if v["why_first"])
    quiet = sum(1 for v in rows if not v["twin_bad"])
    both = sum(1 for v in rows if v["passes"])
    print(f"{n} cases: {named} named, {first} ranked first by why, {quiet} twins quiet, {both} pass all three")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
