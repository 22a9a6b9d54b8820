"""Look at the reports as a person would: HTML screenshots at desktop and phone widths, the page printed to PDF, and
the Markdown summary, for four machines.

    .venv/bin/python tests/tools/look.py OUT_DIR

- healthy: the recorded healthy host tree;
- container: the g4dn Docker container with a 64 MiB /dev/shm;
- problems: the recorded p4d whose driver was upgraded without a reboot, with Xid 79 and Xid 13 in this boot's
  kernel log and an older cuDNN on LD_LIBRARY_PATH in its DLAMI environment;
- eight-envs: that report with eight environments of thirty libraries each, re-rendered by `dl-doctor report`.

Needs headless Chromium (Debian package chromium); writes OUT_DIR/<machine>-{desktop,phone}.png, .pdf, .md, .html.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

import machines  # noqa: E402
import trees  # noqa: E402
from conftest import build_tree  # noqa: E402
from elfkit import dlami as _dlami  # noqa: E402

DOCTOR = Path(sys.executable).parent / "dl-doctor"
BOOT = ("Nov 30 08:00:00 gpu1 kernel: Linux version 4.18.0-513.5.1.el8_9.x86_64\n"
        "Nov 30 08:00:09 gpu1 kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.129.03\n"
        "Nov 30 10:05:00 gpu1 kernel: NVRM: Xid (PCI:0000:10:1c): 79, pid=1911, GPU has fallen off the bus.\n"
        "Nov 30 10:06:00 gpu1 kernel: NVRM: Xid (PCI:0000:20:1c): 13, pid=4242, name=python, Graphics Exception\n")


def _run(root: Path, out: Path, name: str) -> Path:
    subprocess.run([str(DOCTOR), "run", "--sysroot", str(root), "--fail-on", "never", "--json", str(out / f"{name}.json"),
                    "--html", str(out / f"{name}.html"), "--markdown", str(out / f"{name}.md")],
                   check=True, capture_output=True)
    return out / f"{name}.json"


def _shoot(chromium: str, html: Path, out: Path, name: str, profile: Path) -> None:
    flags = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={profile}"]
    for label, size in (("desktop", "1280,3000"), ("phone", "390,3000")):
        subprocess.run(flags + [f"--window-size={size}", f"--screenshot={out / f'{name}-{label}.png'}", html.as_uri()],
                       capture_output=True, timeout=120)
    subprocess.run(flags + [f"--print-to-pdf={out / f'{name}.pdf'}", "--no-pdf-header-footer", html.as_uri()],
                   capture_output=True, timeout=120)


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "look").resolve()
    out.mkdir(parents=True, exist_ok=True)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _run(build_tree(work / "healthy", trees.healthy_host()), out, "healthy")
        _run(build_tree(work / "container", trees.g4dn_docker_64m()), out, "container")
        spec = machines.p4d_after_driver_upgrade()
        spec["var/log/messages"] = BOOT
        root = build_tree(work / "problems", spec)
        dlami = _dlami(work / "d", "libcudnn.so.9.0.0")
        shutil.copytree(dlami / "opt", root / "opt", dirs_exist_ok=True)
        shutil.copytree(dlami / "etc", root / "etc", dirs_exist_ok=True)
        problems = _run(root, out, "problems")
        report = json.loads(problems.read_text())
        envs = report["facts"]["python_envs"]["environments"]
        base = next(e for e in envs if e.get("consumers"))
        many = []
        for n in range(8):
            env = copy.deepcopy(base)
            env["name"], env["prefix"] = f"env{n}", f"/opt/conda/envs/env{n}"
            for c in env["consumers"]:
                c["libraries"] = [dict(c["libraries"][i % len(c["libraries"])], soname=f"libcuda_part{i}.so.{n % 3}")
                                  for i in range(30)]
            many.append(env)
        report["facts"]["python_envs"]["environments"] = many
        (out / "eight-envs.json").write_text(json.dumps(report))
        subprocess.run([str(DOCTOR), "report", str(out / "eight-envs.json"), "--html", str(out / "eight-envs.html"),
                        "--markdown", str(out / "eight-envs.md")], check=True, capture_output=True)
        if chromium:
            for name in ("healthy", "container", "problems", "eight-envs"):
                _shoot(chromium, out / f"{name}.html", out, name, work / "profile")
    for path in sorted(out.iterdir()):
        print(f"{path.stat().st_size:>9}  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
