#!/usr/bin/env python3
"""What the login snippet adds to a login: bash --login -i with and without it, in a throw-away HOME.

Prints the median of RUNS logins each way (interleaved) and their ratio; the peer is the same login without the
snippet. The snippet uses shell built-ins only (tests/integrations/test_login_hook.py runs it with an empty PATH),
so the difference should vanish in the noise.
Run: .venv/bin/python benchmarks/login_hook.py [RUNS]
"""

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dl_doctor.integrations.login_hook import profile_snippet


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        status = tmp / "status"
        status.write_text("dl-doctor 2026-11-29 16:15 UTC: OK (30 pass, 5 skipped). Details: run dl-doctor\n")
        snippet = tmp / "dl-doctor.sh"
        snippet.write_text(profile_snippet(str(status)))
        homes = {}
        for name, profile in (("without", ":\n"), ("with", f'. "{snippet}"\n')):
            home = tmp / name
            home.mkdir()
            (home / ".bash_profile").write_text(profile)
            homes[name] = home
        times = {"with": [], "without": []}
        for _ in range(runs):
            for name, home in homes.items():
                t = time.perf_counter()
                subprocess.run(["bash", "--login", "-i", "-c", "exit 0"], env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
                               stdin=subprocess.DEVNULL, capture_output=True, check=True)
                times[name].append((time.perf_counter() - t) * 1000)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"login without snippet: median {med['without']:.2f} ms; with: {med['with']:.2f} ms; "
          f"ratio {med['with'] / med['without']:.3f} ({runs} runs each)")


if __name__ == "__main__":
    main()
