"""The image-pipeline recipes in docs/ami-pipelines.md, run as written: Packer's ``inline`` lines in one ``/bin/sh -e``
script, as Packer runs them, on a PATH whose ``python3`` is RHEL 8's 3.6 and beside it a Python >= 3.9."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ami-pipelines.md"


def packer_inline() -> list:
    text = DOC.read_text(encoding="utf-8")
    block = text[text.index("```hcl"):]
    block = block[:block.index("```", 6)]
    inline = re.search(r"inline\s*=\s*\[(.*?)\n\s*\]", block, re.S)
    assert inline, "the Packer block has no inline = [...]"
    # HCL strings here are JSON strings (double quotes, backslash escapes)
    return json.loads("[" + inline.group(1).rstrip().rstrip(",") + "]")


def test_the_packer_recipe_ships_the_zipapp_not_a_pip_install_into_the_platform_python():
    lines = packer_inline()
    assert not [l for l in lines if "pip install" in l], lines
    assert any("/tmp/dl-doctor.pyz run" in l for l in lines)
    assert "dist/dl-doctor.pyz" in DOC.read_text(encoding="utf-8")


@pytest.mark.skipif(not shutil.which("sh"), reason="no /bin/sh")
def test_the_packer_lines_pick_a_python_of_at_least_3_9_over_rhel8s_3_6(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # RHEL 8's platform python3: 3.6, found first on PATH
    old = bin_dir / "python3"
    old.write_text("#!/bin/sh\n# Python 3.6\nexit 1\n")
    old.chmod(0o755)
    # a Python >= 3.9 under one of the names the recipe tries: this interpreter
    (bin_dir / "python3.11").symlink_to(sys.executable)
    _tools(bin_dir)
    stub = tmp_path / "dl-doctor.pyz"
    record = tmp_path / "ran.json"
    stub.write_text("import json, sys\n"
                    f"json.dump({{'version': list(sys.version_info[:2]), 'argv': sys.argv[1:]}}, open({str(record)!r}, 'w'))\n")
    script = "\n".join(line.replace("/tmp/dl-doctor.pyz", str(stub)) for line in packer_inline())
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    proc = subprocess.run(["/bin/sh", "-e", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    ran = json.loads(record.read_text())
    assert tuple(ran["version"]) >= (3, 9)
    assert ran["argv"][:3] == ["run", "--expect", "/tmp/expect.toml"] and "--junit" in ran["argv"]


@pytest.mark.skipif(Path("/opt/conda/bin/python").exists(), reason="this host has the DLAMI's conda Python")
def test_the_packer_lines_stop_with_a_reason_where_no_python_is_new_enough(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    old = bin_dir / "python3"
    old.write_text("#!/bin/sh\nexit 1\n")
    old.chmod(0o755)
    _tools(bin_dir)
    script = "\n".join(packer_inline())
    proc = subprocess.run(["/bin/sh", "-e", "-c", script], env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "needs Python >= 3.9" in proc.stderr, (proc.returncode, proc.stderr)


def _tools(bin_dir: Path) -> None:
    """The programs the recipe calls besides Python (sudo and dnf only on RHEL 8), and nothing else on PATH."""
    grep = shutil.which("grep")
    if not grep:
        pytest.skip("no grep")
    (bin_dir / "grep").symlink_to(grep)


def test_the_readmes_using_it_commands_find_dl_doctor_as_the_readme_says():
    """README: the install line puts dl-doctor in .venv/bin; "Using it" says how it gets on PATH, and its first
    command then runs as written, in a shell that had no dl-doctor on PATH before."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    install = re.search(r"```sh\n(python3 -m venv \.venv[^\n]*)\n```", readme)
    assert install and ".venv/bin/dl-doctor" in install.group(1)
    using = readme[readme.index("## Using it"):]
    block = using[using.index("```sh\n") + 6:using.index("\n```", using.index("```sh\n"))].splitlines()
    export = block[0].split("#", 1)[0].strip()
    assert export.startswith("export PATH=") and ".venv/bin" in export, block[0]
    first = block[1].split("#", 1)[0].strip()
    assert first == "dl-doctor", block[1]
    if not (ROOT / ".venv" / "bin" / "dl-doctor").exists():
        pytest.skip("no .venv here (the README's install line was not run in this checkout)")
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}
    proc = subprocess.run(["/bin/sh", "-c", f"{export} && command -v dl-doctor && dl-doctor --version"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == str(ROOT / ".venv" / "bin" / "dl-doctor")
    assert proc.stdout.splitlines()[1].startswith("dl-doctor ")
