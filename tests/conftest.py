"""Shared test helpers: sysroot trees, snapshots, and the one CLI runner (run_cli) for the installed `dl-doctor`."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import pytest

HERE = Path(__file__).parent
# The sample plugin is a separate package with its own tests; tests/e2e/test_plugins.py installs it and runs them.
collect_ignore = ["plugin_sample"]
FIXTURES = HERE / "fixtures"


def build_tree(root: Path, spec: Dict[str, Any]) -> Path:
    """Create a sysroot tree.

    ``spec`` maps in-tree paths to file contents (str/bytes), to ``{"symlink": target}``,
    or to ``{"dir": True}`` (with ``"mode"``: its permission bits).

    A root filesystem has an ``etc/os-release``, a ``usr/lib/os-release`` or a ``usr/`` directory (dl-doctor refuses
    a --sysroot with none of them as the wrong partition): a spec with none of them gets an empty ``usr/``, which
    adds no fact. ``{"usr": None}`` in the spec leaves it out (a tree that is not a root filesystem).
    """
    spec = dict(spec)
    if spec.get("usr", True) is None:
        del spec["usr"]
    elif not any(rel.lstrip("/").startswith(("usr/", "etc/os-release")) or rel.strip("/") == "usr" for rel in spec):
        spec["usr"] = {"dir": True}
    for rel, content in spec.items():
        path = root / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, dict) and "symlink" in content:
            os.symlink(content["symlink"], path)
        elif isinstance(content, dict) and content.get("dir"):
            path.mkdir(parents=True, exist_ok=True)
            if "mode" in content:
                path.chmod(content["mode"])
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def host_has_nvidia_gpu() -> bool:
    """An NVIDIA display or 3D controller on this machine's PCI bus (vendor 0x10de, class 0x03xxxx)."""
    for dev in Path("/sys/bus/pci/devices").glob("*"):
        try:
            if (dev / "vendor").read_text().strip() == "0x10de" and \
                    (dev / "class").read_text().strip().startswith("0x03"):
                return True
        except OSError:
            continue
    return False


@pytest.fixture
def tree(tmp_path):
    def make(spec: Dict[str, Any], name: str = "root") -> Path:
        root = tmp_path / name
        root.mkdir(exist_ok=True)
        return build_tree(root, spec)
    return make


from dl_doctor.testing import snapshot  # noqa: E402,F401 - the one helper, shared with plugins


def dl_doctor_exe() -> str:
    """The installed console script (the one in this interpreter's bin directory)."""
    candidate = Path(sys.executable).parent / "dl-doctor"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("dl-doctor")
    if not found:
        pytest.fail("the dl-doctor console script is not installed; install with pip install -e '.[test]'")
    return found


def validate_report(doc: Dict[str, Any]) -> None:
    import jsonschema

    from dl_doctor.facts import schema as facts_schema
    from dl_doctor.reports import schema

    if doc.get("kind") == "dl-doctor-facts":
        jsonschema.validate(doc, facts_schema())
    else:
        jsonschema.validate(doc, schema())


class CliResult:
    def __init__(self, returncode: int, stdout: str, stderr: str, outdir: Path, validated: List[str]):
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.outdir = outdir
        self.validated = validated  # what the runner validated against the schemas: paths, "stdout", "PATH:member"

    def reports(self, ext: str) -> List[Path]:
        return sorted(self.outdir.glob(f"*.{ext}")) if self.outdir.exists() else []

    def json_report(self) -> Dict[str, Any]:
        files = self.reports("json")
        assert len(files) == 1, f"expected one JSON report in {self.outdir}, found {files}"
        return json.loads(files[0].read_text())


def _to_corpus(request, n: int, doc: Dict[str, Any], label: str = "") -> None:
    """With DLD_REPORT_CORPUS set, keep each report for tests/tools/report_corpus.py --compare."""
    corpus = os.environ.get("DLD_REPORT_CORPUS")
    if not corpus:
        return
    sys.path.insert(0, str(HERE / "tools"))
    from report_corpus import write

    write(Path(corpus), f"cli-{Path(str(request.node.fspath)).stem}-{request.node.name}-{n}{label}", doc)


def _is_report(doc: Any) -> bool:
    return isinstance(doc, dict) and (("findings" in doc and "schema_version" in doc)
                                      or doc.get("kind") == "dl-doctor-facts")


# the options whose value is a file dl-doctor writes (a report, facts, a bundle)
_OUTPUT_OPTIONS = ("--json", "-o", "--output")
_BUNDLE_MEMBERS = ("report.json", "facts.json")


class CliRunner:
    """The one way tests run the installed ``dl-doctor`` (the ``run_cli`` fixture).

    * The environment is clean: PATH, HOME (``tmp_path/home``) and LANG=C.UTF-8; anything else is passed with ``env``
      (a value of None removes a variable).
    * The working directory is ``tmp_path`` unless ``cwd`` names another (an attack that needs a directory).
    * ``run`` and ``check`` get ``--output-dir tmp_path/outN`` unless the test gives one or passes ``outdir=False``
      (then the default, ``dl-doctor-reports`` in the working directory, is where the runner looks).
    * Every JSON report the command produced is validated against the report or the facts schema: the output
      directory's, the files named by ``--json``/``-o``/``--output`` (new or changed by this run), the ``report.json``
      and ``facts.json`` inside a bundle it wrote, and a report printed on stdout.
    * ``prefix`` runs the command under another (``systemd-run ...``, ``unshare ...``, ``ip netns exec ...``); ``exe``
      names another entry point (a copy of the script, or ``[sys.executable, "-m", "dl_doctor"]``); ``umask`` sets
      the child's; ``tty=True`` gives it a pseudo-terminal for stdin, stdout and stderr (their text comes back as
      ``stdout``); ``popen`` starts it without waiting (the caller waits, then hands the process to ``finish``).
    """

    def __init__(self, tmp_path: Path, request):
        self.tmp_path = tmp_path
        self.request = request
        self.n = 0
        (tmp_path / "home").mkdir(exist_ok=True)

    # -- building the command ------------------------------------------------------------------------------------
    def env(self, extra: Optional[Dict[str, Optional[str]]] = None) -> Dict[str, str]:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.tmp_path / "home"),
               "LANG": "C.UTF-8"}
        for key, value in (extra or {}).items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = str(value)
        return env

    def _prepare(self, args, outdir, cwd, prefix, exe):
        self.n += 1
        args = [str(a) for a in args]
        cwd = Path(cwd) if cwd is not None else self.tmp_path
        given = _option_value(args, "--output-dir")
        wants_outdir = not args or args[0] in ("run", "check") or (
            args[0].startswith("-") and args[0] not in ("--version", "--help", "-h"))
        argv = [*(map(str, exe) if isinstance(exe, (list, tuple)) else [str(exe) if exe else dl_doctor_exe()]), *args]
        if given is not None:
            out = cwd / given
        elif outdir is False:
            out = cwd / "dl-doctor-reports"
        else:
            out = Path(outdir) if outdir else self.tmp_path / f"out{self.n}"
            if wants_outdir:
                argv += ["--output-dir", str(out)]
        outputs = [cwd / v for v in _option_values(args, _OUTPUT_OPTIONS) if v != "-" and not v.startswith("/dev/")]
        before = {p: _identity(p) for p in [*outputs, *(out.glob("*.json") if out.is_dir() else [])]}
        return [*map(str, prefix), *argv], cwd, out, outputs, before

    # -- running it ---------------------------------------------------------------------------------------------
    def __call__(self, *args, env: Optional[Dict[str, Optional[str]]] = None, cwd: Optional[Path] = None,
                 timeout: float = 120, outdir=None, input: Optional[str] = None, prefix: Sequence[str] = (),
                 exe=None, umask: Optional[int] = None, tty: bool = False) -> CliResult:
        argv, cwd, out, outputs, before = self._prepare(args, outdir, cwd, prefix, exe)
        if tty:
            code, stdout, stderr = _run_on_a_tty(argv, self.env(env), cwd, timeout, umask)
        else:
            proc = subprocess.run(argv, capture_output=True, text=True, env=self.env(env), cwd=str(cwd),
                                  timeout=timeout, input=input, preexec_fn=_umask_setter(umask))
            code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        return self._result(code, stdout, stderr, out, outputs, before)

    def popen(self, *args, env: Optional[Dict[str, Optional[str]]] = None, cwd: Optional[Path] = None, outdir=None,
              prefix: Sequence[str] = (), exe=None, umask: Optional[int] = None,
              **popen_kwargs) -> subprocess.Popen:
        """Start the command and return at once; ``finish(proc)`` validates what it wrote once it has ended."""
        argv, cwd, out, outputs, before = self._prepare(args, outdir, cwd, prefix, exe)
        popen_kwargs.setdefault("stdout", subprocess.PIPE)
        popen_kwargs.setdefault("stderr", subprocess.PIPE)
        popen_kwargs.setdefault("text", True)
        proc = subprocess.Popen(argv, env=self.env(env), cwd=str(cwd), preexec_fn=_umask_setter(umask),
                                **popen_kwargs)
        proc._dld_pending = (out, outputs, before)  # type: ignore[attr-defined]
        return proc

    def finish(self, proc: subprocess.Popen, stdout: str = "", stderr: str = "") -> CliResult:
        assert proc.returncode is not None, "finish() a process that has ended"
        out, outputs, before = proc._dld_pending  # type: ignore[attr-defined]
        return self._result(proc.returncode, stdout, stderr, out, outputs, before)

    # -- validating what it produced --------------------------------------------------------------------------------
    def _result(self, code, stdout, stderr, out, outputs, before) -> CliResult:
        validated: List[str] = []
        n = self.n

        def check(doc: Any, where: str, label: str) -> None:
            if not _is_report(doc):
                return
            try:
                validate_report(doc)
            except Exception as exc:  # jsonschema.ValidationError, with where it came from
                pytest.fail(f"the report in {where} does not match its schema: {exc}")
            validated.append(where)
            _to_corpus(self.request, n, doc, label)

        if out.is_dir():
            for path in sorted(out.glob("*.json")):
                if path in before and before[path] == _identity(path) or not _regular(path):
                    continue  # unchanged by this run, or a planted FIFO or link (never opened)
                check(json.loads(path.read_text()), str(path), "")
        text = stdout.lstrip() if isinstance(stdout, str) else ""
        if text.startswith("{"):
            try:
                doc = json.JSONDecoder().raw_decode(text)[0]
            except ValueError:
                doc = None  # not a document on stdout (a listing, say): nothing to validate
            check(doc, "stdout", "")
        for k, path in enumerate(p for p in outputs if p.parent != out or p.suffix != ".json"):
            if before.get(path) == _identity(path) or not _regular(path):
                continue  # unchanged (refused, say) or not a regular file
            if tarfile.is_tarfile(str(path)):
                with tarfile.open(str(path)) as tar:
                    for member in tar.getmembers():
                        if member.isfile() and member.name.split("/")[-1] in _BUNDLE_MEMBERS:
                            data = tar.extractfile(member).read()
                            check(json.loads(data), f"{path}:{member.name}", f"-o{k}-{Path(member.name).stem}")
            elif path.suffix == ".json":
                check(json.loads(path.read_text()), str(path), f"-o{k}")
        return CliResult(code, stdout, stderr, out, validated)


def _option_values(args: Sequence[str], names: Sequence[str]) -> List[str]:
    """The values given to any of ``names`` (``--opt VALUE`` or ``--opt=VALUE``)."""
    values = []
    for i, arg in enumerate(args):
        if arg in names and i + 1 < len(args):
            values.append(args[i + 1])
        elif "=" in arg and arg.split("=", 1)[0] in names and arg.startswith("--"):
            values.append(arg.split("=", 1)[1])
    return values


def _option_value(args: Sequence[str], name: str) -> Optional[str]:
    values = _option_values(args, (name,))
    return values[-1] if values else None


def _identity(path: Path):
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode)


def _regular(path: Path) -> bool:
    identity = _identity(path)
    return identity is not None and stat.S_ISREG(identity[3])


def _umask_setter(umask: Optional[int]):
    return None if umask is None else (lambda: os.umask(umask))


def _run_on_a_tty(argv, env, cwd, timeout, umask):
    import pty
    import time

    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=str(cwd),
                            preexec_fn=_umask_setter(umask))
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the last holder of the terminal closed it
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(max(1.0, deadline - time.monotonic()))
    os.close(master)
    return proc.returncode, b"".join(chunks).decode("utf-8", "replace"), ""


@pytest.fixture
def run_cli(tmp_path, request) -> CliRunner:
    """Run the installed `dl-doctor` in a clean environment under tmp_path; validate every report it produces."""
    return CliRunner(tmp_path, request)


def set_access_acl(path, user_uid: int, mask: int = 7) -> bool:
    """Give ``path`` a POSIX access ACL that grants ``user_uid`` rwx (with that ``mask``), as the kernel stores it:
    version 2, then (tag, perm, id) entries. False where the file system has no ACLs."""
    import struct

    entries = [(0x01, 7, 0xFFFFFFFF), (0x02, 7, user_uid), (0x04, 5, 0xFFFFFFFF), (0x10, mask, 0xFFFFFFFF),
               (0x20, 5, 0xFFFFFFFF)]
    raw = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)
    try:
        os.setxattr(str(path), "system.posix_acl_access", raw)
    except OSError:
        return False
    return True
