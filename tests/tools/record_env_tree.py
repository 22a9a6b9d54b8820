"""Record a real Python environment as a compact spec of what dl-doctor reads there, and build a sysroot tree back
from such a spec (issue 25: the real-wheel environments gate CI, which has none of them).

    python tests/tools/record_env_tree.py ENV_PREFIX OUT.json[.gz]

What is recorded, paths relative to the prefix:
  * every .dist-info: METADATA's header fields (Name, Version, Requires-Dist, Requires-Python), WHEEL,
    INSTALLER, and the RECORD lines of ELF objects (.so files) and of the files recorded as text;
  * the framework files the probes read: torch/version.py and torch/__init__.py (the preload mode), every
    top-level package's version.py (jax, jaxlib, jax_plugins/*), the build information files the matrix names
    (TensorFlow's build_info.py, onnxruntime's build_and_package_info.py), pyvenv.cfg, .pth files;
  * for every ELF object: SONAME, DT_NEEDED, DT_RPATH, DT_RUNPATH, the machine, DT_VERNEED and DT_VERDEF, as
    dl_doctor.readers.elf.read_dynamic reads them, and the architectures of the GPU code its .nv_fatbin carries
    (read_fatbin; the builder writes real ELF objects with those sections, tests/elfkit.py);
  * symbolic links inside the prefix (bin/ left out: the tree's interpreter is a stand-in).

``build(spec, root)`` writes the environment into a sysroot tree as a venv at /home/u/NAME (or a conda env at
/opt/conda/envs/NAME), with PATH and VIRTUAL_ENV / CONDA_PREFIX in the tree's /proc/self/environ, a stand-in
interpreter, and the system libraries the objects need that the recording host had in its system directories
(libc.so.6, libstdc++.so.6, libgcc_s.so.1 ..., never a CUDA or driver library: "system" in the spec) in
/lib/<triplet>, defining every symbol version the recorded objects need from them: a healthy host's glibc.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: elfkit

from elfkit import fatbin, write_elf  # noqa: E402

SCHEMA = 1
ELF_KEYS = ("soname", "needed", "rpath", "runpath", "machine", "verneed", "verdef")
MACHINES = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64"}
TRIPLET = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}
# files the probes read as text, relative to site-packages (besides every top-level package's version.py)
FRAMEWORK_FILES = ("torch/version.py", "torch/__init__.py", "torchvision/version.py",
                   "tensorflow/python/platform/build_info.py", "onnxruntime/capi/build_and_package_info.py")
_SO = re.compile(r"\.so(\.[0-9][0-9.]*)?$")


def _is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False


_HEADERS = re.compile(r"^(Metadata-Version|Name|Version|Requires-Python|Requires-Dist|Provides-Extra):", re.I)


def _metadata_head(text: str) -> str:
    """The header fields a reader uses (a License field can hold the whole license text: left out)."""
    head = text.split("\n\n", 1)[0].splitlines()
    return "".join(f"{line}\n" for line in head if _HEADERS.match(line))


def record(prefix: Path) -> Dict[str, Any]:
    """The spec of the environment at ``prefix`` (see the module docstring)."""
    from dl_doctor.host import Host
    from dl_doctor.readers.consumers import DRIVER_LIBRARIES, is_cuda_library
    from dl_doctor.readers.elf import read_dynamic, read_fatbin

    host = Host()
    prefix = prefix.resolve()
    sites = sorted(prefix.glob("lib/python3*/site-packages"))
    if not sites:
        raise SystemExit(f"record_env_tree: no lib/python3*/site-packages under {prefix}")
    site = sites[0]
    texts: Dict[str, str] = {}
    elf: Dict[str, Dict[str, Any]] = {}
    links: Dict[str, str] = {}

    def rel(p: Path) -> str:
        return str(p.relative_to(prefix))

    for name in ("pyvenv.cfg",):
        if (prefix / name).is_file():
            texts[name] = (prefix / name).read_text()
    for p in sorted(site.glob("*.pth")):
        if p.stat().st_size < 65536:
            texts[rel(p)] = p.read_text(errors="replace")
    wanted = [site / f for f in FRAMEWORK_FILES] + sorted(site.glob("*/version.py")) + \
        sorted(site.glob("jax_plugins/*/version.py"))
    for p in wanted:
        if p.is_file():
            texts[rel(p)] = p.read_text(errors="replace")
    for root, dirs, files in os.walk(prefix):
        dirs.sort()
        base = Path(root)
        if "__pycache__" in base.parts:
            continue
        for name in sorted(files) + [d for d in dirs if (base / d).is_symlink()]:
            p = base / name
            if p.is_symlink():
                if rel(p).startswith("bin/"):
                    continue  # the interpreter is a stand-in in the tree
                target = os.readlink(p)
                if not target.startswith("/") or target.startswith(str(prefix) + "/"):
                    links[rel(p)] = os.path.relpath(target, p.parent) if target.startswith("/") else target
                continue
            if not p.is_file() or rel(p).startswith("bin/"):
                continue  # the interpreter is a stand-in in the tree
            if _SO.search(name) or _is_elf(p):
                dyn = read_dynamic(host, str(p))
                if dyn is not None:
                    elf[rel(p)] = {k: dyn[k] for k in ELF_KEYS if dyn.get(k)}
                    code = read_fatbin(host, str(p))
                    if code and code.get("section") and code.get("complete"):
                        # the GPU code it carries, by architecture (the tree's object gets a .nv_fatbin of those)
                        elf[rel(p)]["fatbin"] = {"sass": code.get("sass") or [], "ptx": code.get("ptx") or []}
    recorded = set(elf) | set(texts)
    for info in sorted(prefix.rglob("*.dist-info")):
        if not info.is_dir():
            continue
        for name in ("WHEEL", "INSTALLER"):
            if (info / name).is_file():
                texts[rel(info / name)] = (info / name).read_text(errors="replace")
        if (info / "METADATA").is_file():
            texts[rel(info / "METADATA")] = _metadata_head((info / "METADATA").read_text(errors="replace"))
        if (info / "RECORD").is_file():
            owner = info.parent  # RECORD paths are relative to the directory that holds the .dist-info
            keep = []
            for line in (info / "RECORD").read_text(errors="replace").splitlines():
                path = line.split(",", 1)[0]
                full = os.path.normpath(owner / path)
                if _SO.search(path) or (full.startswith(str(prefix) + "/") and
                                        os.path.relpath(full, prefix) in recorded):
                    keep.append(line)
            texts[rel(info / "RECORD")] = "".join(f"{line}\n" for line in keep)
    system = _system_needs(elf, links)
    triplet = TRIPLET.get(os.uname().machine, "x86_64-linux-gnu")
    dirs = [f"/lib/{triplet}", f"/usr/lib/{triplet}", "/lib64", "/usr/lib64", "/lib", "/usr/lib"]
    # the host's own libraries (glibc, libstdc++, libgcc_s): found in the system directories of the recording
    # host, never a CUDA or driver library (one the environment lacks stays missing in the tree)
    system = {n: v for n, v in system.items() if not is_cuda_library(n) and n not in DRIVER_LIBRARIES
              and any(os.path.exists(f"{d}/{n}") for d in dirs)}
    python = prefix / "bin" / "python"
    exe = read_dynamic(host, str(python.resolve())) if python.exists() else None
    version = re.search(r"^version\s*=\s*(\S+)", texts.get("pyvenv.cfg", ""), re.M)
    return {"schema": SCHEMA, "name": prefix.name, "recorded_from": str(prefix),
            "kind": "conda" if (prefix / "conda-meta").is_dir() else "venv",
            "site": rel(site), "python": {"version": version.group(1) if version else None,
                                          "machine": (exe or {}).get("machine") or "EM_X86_64"},
            "texts": texts, "elf": elf, "links": links, "system": system}


def load(path: Path) -> Dict[str, Any]:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _system_needs(elf: Dict[str, Dict[str, Any]], links: Dict[str, str]) -> Dict[str, List[str]]:
    """soname -> the symbol versions the recorded objects need from it, for every needed library the environment
    does not hold."""
    have = {e.get("soname") for e in elf.values()} | {Path(p).name for p in elf} | {Path(p).name for p in links}
    out: Dict[str, set] = {}
    for e in elf.values():
        for n in e.get("needed") or []:
            if n not in have:
                out.setdefault(n, set())
        for n, versions in (e.get("verneed") or {}).items():
            if n not in have:
                out.setdefault(n, set()).update(versions)
    return {k: sorted(v) for k, v in sorted(out.items())}


def build(spec: Dict[str, Any], root: Path, env_vars: Dict[str, str] = None) -> Path:
    """Write the recorded environment into the sysroot tree ``root``; returns the environment's prefix there."""
    machine = MACHINES.get(spec["python"]["machine"], "x86_64")
    name = spec["name"]
    if spec["kind"] == "conda":
        prefix = root / "opt/conda/envs" / name
        environ = {"PATH": f"/opt/conda/envs/{name}/bin:/usr/bin:/bin", "CONDA_PREFIX": f"/opt/conda/envs/{name}"}
        (root / "opt/conda/conda-meta").mkdir(parents=True, exist_ok=True)
        (prefix / "conda-meta").mkdir(parents=True, exist_ok=True)
    else:
        prefix = root / "home/u" / name
        environ = {"PATH": f"/home/u/{name}/bin:/usr/bin:/bin", "VIRTUAL_ENV": f"/home/u/{name}"}
    environ.update(env_vars or {})
    (root / "etc").mkdir(parents=True, exist_ok=True)
    (root / "etc/os-release").write_text('ID=ubuntu\nVERSION_ID="22.04"\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\n')
    (root / "proc/self").mkdir(parents=True, exist_ok=True)
    (root / "proc/self/environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in environ.items()))
    libdir = root / "lib" / TRIPLET[machine]
    for soname, versions in spec["system"].items():
        write_elf(libdir / soname, soname=soname, machine=machine, verdef=[soname] + versions if versions else ())
    for rel, text in spec["texts"].items():
        path = prefix / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for rel, dyn in spec["elf"].items():
        write_elf(prefix / rel, soname=dyn.get("soname"), needed=dyn.get("needed") or (),
                  rpath=dyn.get("rpath") or (), runpath=dyn.get("runpath") or (),
                  machine=MACHINES.get(dyn.get("machine"), machine), verdef=dyn.get("verdef") or (),
                  verneed=dyn.get("verneed") or None,
                  fatbin=fatbin([f"sm_{a}" for a in dyn["fatbin"]["sass"]] +
                                [f"compute_{a}" for a in dyn["fatbin"]["ptx"]]) if dyn.get("fatbin") else None)
    for rel, target in spec["links"].items():
        path = prefix / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_symlink() and not path.exists():
            path.symlink_to(target)
    version = spec["python"].get("version") or "3.11"
    exe = prefix / "bin" / ("python" + ".".join(version.split(".")[:2]))
    if not exe.exists():
        write_elf(exe, needed=["libc.so.6"], machine=machine)
    for alias in ("python", "python3"):
        if not (prefix / "bin" / alias).is_symlink() and not (prefix / "bin" / alias).exists():
            (prefix / "bin" / alias).symlink_to(exe.name)
    return prefix


def main(argv: List[str]) -> int:
    if len(argv) != 2:
        print("usage: record_env_tree.py ENV_PREFIX OUT.json[.gz]", file=sys.stderr)
        return 2
    prefix, out = Path(argv[0]), Path(argv[1])
    if not (prefix / "bin").is_dir():
        print(f"record_env_tree: {prefix} is no environment (no bin/)", file=sys.stderr)
        return 2
    text = json.dumps(record(prefix), indent=0, sort_keys=True, separators=(",", ":")) + "\n"
    data = gzip.compress(text.encode(), mtime=0) if out.name.endswith(".gz") else text.encode()
    out.write_bytes(data)
    print(f"{out}: {len(data)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
