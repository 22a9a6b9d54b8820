#!/usr/bin/env python3
"""Build dl-doctor as one executable file (a zipapp) for AMI bakes and air-gapped hosts.

    python3 tools/build_zipapp.py                 # -> dist/dl-doctor.pyz
    python3 tools/build_zipapp.py -o /tmp/dl-doctor.pyz

It holds dl-doctor and its pinned runtime dependencies (tools/zipapp-requirements.txt) and runs on any Python >= 3.9
of the box: `python3 dl-doctor.pyz run` (or `./dl-doctor.pyz`). Reproducible: the same sources and pins give the
same bytes (files in sorted order, fixed timestamps from SOURCE_DATE_EPOCH or 2026-01-01, no byte code, no
install-time paths). Needs pip and the package index (or a wheel cache) once, at build time, for the pinned
dependencies; dl-doctor itself is staged from the source tree as setup.cfg lays it out (its packages, package data
and entry points), so the building Python needs no setuptools or wheel.
"""

from __future__ import annotations

import argparse
import configparser
import os
import re
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


class BuildError(Exception):
    """A reason the zipapp cannot be built, said in one line."""


def pip(*args: str) -> None:
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as exc:
        raise BuildError(f"cannot start pip: {exc}")
    if proc.returncode != 0:
        text = (proc.stderr or proc.stdout or "").strip()
        if "No module named pip" in text:
            raise BuildError(f"{sys.executable} has no pip (python3 -m ensurepip, or your distribution's python3-pip)")
        last = text.splitlines()[-1] if text else f"exit status {proc.returncode}"
        raise BuildError(f"pip could not fetch the pinned dependencies (tools/zipapp-requirements.txt): {last}")


def stage_project(stage: Path) -> None:
    """dl-doctor as setup.cfg installs it: each package's modules and package data under its install name, and a
    dist-info whose entry_points.txt registers the built-in probes and checks (as an installed wheel's does)."""
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "setup.cfg", encoding="utf-8")
    options = cfg["options"]
    mapping = dict(_pairs(options.get("package_dir", "")))
    data = dict((name, [g.strip() for g in globs.split(",") if g.strip()])
                for name, globs in cfg.items("options.package_data"))
    for package in options.get("packages", "").split():
        source = _source_dir(package, mapping)
        target = stage.joinpath(*package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        files = set(source.glob("*.py"))
        for pattern in data.get(package, []):
            files.update(p for p in source.glob(pattern) if p.is_file())
        for path in sorted(files):
            dest = target / path.relative_to(source)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
    version = _version(_source_dir("dl_doctor", mapping) / "__init__.py")
    info = stage / f"dl_doctor-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: dl-doctor\nVersion: {version}\n"
                                   f"Requires-Python: {options.get('python_requires', '>=3.9')}\n", encoding="utf-8")
    lines = []
    for group, body in cfg.items("options.entry_points"):
        lines.append(f"[{group}]")
        lines.extend(f"{name} = {value}" for name, value in _pairs(body))
        lines.append("")
    (info / "entry_points.txt").write_text("\n".join(lines), encoding="utf-8")
    (info / "top_level.txt").write_text("dl_doctor\n", encoding="utf-8")


def _pairs(body: str):
    """``name = value`` lines of a setup.cfg value (comments and blank lines skipped)."""
    for line in body.splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            name, value = line.split("=", 1)
            yield name.strip(), value.strip()


def _source_dir(package: str, mapping) -> Path:
    parts = package.split(".")
    for i in range(len(parts), 0, -1):  # the longest mapped prefix: dl_doctor.checks = checks, dl_doctor = doctor
        prefix = ".".join(parts[:i])
        if prefix in mapping:
            return ROOT.joinpath(mapping[prefix], *parts[i:])
    return ROOT.joinpath(*parts)


def _version(init: Path) -> str:
    found = re.search(r"^__version__\s*=\s*[\"']([^\"']+)[\"']", init.read_text(encoding="utf-8"), re.M)
    if not found:
        raise BuildError(f"no __version__ in {init}")
    return found.group(1)


def build(out: Path) -> Path:
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "1767225600"))  # 2026-01-01T00:00:00Z
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp) / "app"
        pip("install", "--no-compile", "--no-deps", "--target", str(stage), "--only-binary=:all:",
            "--python-version", "3.9", "--implementation", "cp", "--abi", "cp39", "--platform",
            "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64", "--platform", "any",
            "-r", str(ROOT / "tools" / "zipapp-requirements.txt"))
        stage_project(stage)
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
    try:
        out = build(Path(parser.parse_args().output))
    except (BuildError, OSError) as exc:
        print(f"build_zipapp: error: {exc}", file=sys.stderr)
        return 2
    print(f"{out} ({out.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
