#!/usr/bin/env python3
"""Build dl-doctor as one executable file (a zipapp) for AMI bakes and air-gapped hosts.

    python3 tools/build_zipapp.py                 # -> dist/dl-doctor.pyz
    python3 tools/build_zipapp.py -o /tmp/dl-doctor.pyz

It holds dl-doctor and its pinned runtime dependencies (tools/zipapp-requirements.txt) and runs on any Python >= 3.9
of the box: `python3 dl-doctor.pyz run` (or `./dl-doctor.pyz`). Reproducible: the same sources and pins give the
same bytes (files in sorted order, fixed timestamps from SOURCE_DATE_EPOCH or 2026-01-01, no byte code, no
install-time paths). Needs pip and the package index (or a wheel cache) once, at build time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAIN = """# dl-doctor zipapp entry point (kept to Python 3.6 syntax, to say what is wrong on RHEL 8's platform Python)
import sys

if sys.version_info < (3, 9):
    sys.stderr.write("dl-doctor: error: needs Python 3.9 or newer; this is %d.%d. On RHEL 8: sudo dnf install -y "
                     "python39 && python3.9 %s (or the DLAMI's /opt/conda/bin/python)\\n"
                     % (sys.version_info[0], sys.version_info[1], sys.argv[0]))
    sys.exit(2)

from dl_doctor.cli import main  # noqa: E402

main()
"""


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args], check=True)


def build(out: Path) -> Path:
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "1767225600"))  # 2026-01-01T00:00:00Z
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp) / "app"
        pip("install", "--no-compile", "--no-deps", "--target", str(stage), "--only-binary=:all:",
            "--python-version", "3.9", "--implementation", "cp", "--abi", "cp39", "--platform",
            "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64", "--platform", "any",
            "-r", str(ROOT / "tools" / "zipapp-requirements.txt"))
        pip("install", "--no-compile", "--no-deps", "--no-build-isolation", "--target", str(stage), str(ROOT))
        for junk in list(stage.rglob("__pycache__")) + list(stage.rglob("direct_url.json")) + list(stage.rglob("*.so")) \
                + [stage / "bin"]:
            if not junk.exists():
                continue
            shutil.rmtree(junk) if junk.is_dir() else junk.unlink()
        for record in stage.rglob("RECORD"):
            record.write_text("")  # lists install-time paths and the removed files; not needed to run
        (stage / "__main__.py").write_text(MAIN)
        out.parent.mkdir(parents=True, exist_ok=True)
        files = sorted(p for p in stage.rglob("*") if p.is_file())
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for path in files:
                info = zipfile.ZipInfo(str(path.relative_to(stage)), date_time=_stamp(epoch))
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                zf.writestr(info, path.read_bytes())
        data = out.read_bytes()
        out.write_bytes(b"#!/usr/bin/env python3\n" + data)  # a zip may carry a prefix: python reads from the end
        out.chmod(0o755)
    return out


def _stamp(epoch: int):
    import time

    t = time.gmtime(max(epoch, 315532800))  # the zip format starts in 1980
    return (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", default=str(ROOT / "dist" / "dl-doctor.pyz"))
    out = build(Path(parser.parse_args().output))
    print(f"{out} ({out.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
