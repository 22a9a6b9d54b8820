"""Real reported failures (issue 27), each rebuilt as the machine it happened on, with its healthy twin.

``index.json`` lists the cases (tests/cases/test_index.py holds its shape): ``id``, ``url`` (the public thread where
the root cause was found), ``component``, ``class``, ``symptom`` (the reporter's verbatim error), ``root_cause``,
``checks`` (the check IDs, and the `why` cause IDs, that name it), ``names`` (what the naming finding must say:
the versions of both sides of a mismatch, the component, the fault; each a case-insensitive substring of its
message, headline, fix or evidence) and ``blind`` (the tree was written before any check was written or changed for
it: the figure that predicts machines no one described).

Each case's machine is built by a function in a component module here (``tests/cases/<module>.py``), registered
with ``@case("ID")``. It takes ``broken`` (True: the machine as reported; False: its healthy twin, the same machine
with the fault fixed) and returns a :class:`Machine`: the sysroot tree (a tests/conftest.py build_tree() spec, in the
formats the machine really has: ELF objects, dist-info with RECORD, conda-meta, dpkg/rpm databases, .ko files with
.modinfo, each distro's logs), and where the fault lives in what only the live machine shows (NVML, /dev), the
recorded NVML and device listing it is paired with, as tests/e2e/test_healthy_corpus.py pairs them.

:func:`judge` runs every probe on the tree and every check on its facts, then `why SYMPTOM` against that report.
A case passes (tests/e2e/test_reported_cases.py) when a warn/fail finding among ``checks`` says every ``names``
substring and `why` ranks a cause first that ``checks`` names (the cause itself, or the check that confirmed it);
its twin passes when none of ``checks`` warns or fails and nothing fails at all. tests/cases/measure.py prints
those figures for any installed dl-doctor (the blind figures before and after a change).
"""

from __future__ import annotations

import copy
import importlib
import json
import pkgutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

HERE = Path(__file__).parent
INDEX = HERE / "index.json"
Spec = Dict[str, Any]

# the disks as the probes would have measured them on the machine (the tree's own host disks are the test machine's,
# whose free space is not the case's): tests/machines.py's
from machines import FIXED_DISKS  # noqa: E402


@dataclass
class Machine:
    """A case's machine: its tree, and what only the live machine had (None: the tree is the whole story)."""

    spec: Spec
    nvml: Optional[Dict[str, Any]] = None  # a recorded NVML document (tests/fixtures/nvml format)
    device_nodes: Optional[List[str]] = None  # /dev/nvidia* names
    disks: Optional[Dict[str, Any]] = None  # the storage probe's facts, where the case is about a disk

    @property
    def tree_only(self) -> bool:
        """Everything the case needs is in the tree (`dl-doctor why --sysroot TREE` alone can see it)."""
        return self.nvml is None and self.device_nodes is None and self.disks is None


Builder = Callable[[bool], Machine]
BUILDERS: Dict[str, Builder] = {}


def case(case_id: str) -> Callable[[Builder], Builder]:
    def register(fn: Builder) -> Builder:
        if case_id in BUILDERS:
            raise ValueError(f"case {case_id} is built twice")
        BUILDERS[case_id] = fn
        return fn
    return register


def load_builders() -> Dict[str, Builder]:
    for info in pkgutil.iter_modules([str(HERE)]):
        if not info.name.startswith(("test_", "_", "measure")):
            importlib.import_module(f"{__name__}.{info.name}")
    return BUILDERS


def index() -> List[Dict[str, Any]]:
    return json.loads(INDEX.read_text())


def nvml_fixture(name: str, **edits: Any) -> Dict[str, Any]:
    """A recorded NVML document (tests/fixtures/nvml/NAME.json), with top-level ``edits``; per-device edits go in
    ``devices`` as a dict of field -> value applied to every device, or a list of per-device dicts."""
    doc = json.loads((HERE.parent / "fixtures" / "nvml" / f"{name}.json").read_text())
    per_device = edits.pop("devices", None)
    doc.update(edits)
    if isinstance(per_device, dict):
        for dev in doc["devices"]:
            dev.update(copy.deepcopy(per_device))
    elif isinstance(per_device, list):
        for dev, change in zip(doc["devices"], per_device):
            dev.update(copy.deepcopy(change))
    return doc


def paired(name: str, spec: Spec, **more: Any) -> Machine:
    """A healthy-corpus machine's pairing (tests/healthy.py HEALTHY[name]: its recorded NVML and /dev listing) around
    ``spec`` (that machine's tree, changed as the case needs)."""
    import healthy

    entry = healthy.HEALTHY[name]
    nvml = nvml_fixture(entry["nvml"]) if entry.get("nvml") else None
    return Machine(spec, nvml=nvml, device_nodes=entry.get("device_nodes"), **more)


@dataclass
class Outcome:
    findings: List[Dict[str, Any]]
    why: Dict[str, Any] = field(default_factory=dict)

    def bad(self) -> List[Dict[str, Any]]:
        return [f for f in self.findings if f["status"] in ("warn", "fail", "error")]


def snapshot_of(root: Path, machine: Machine) -> Dict[str, Any]:
    """The tree's facts as `dl-doctor collect` would have written them on the machine."""
    from dl_doctor import compat_matrix
    from dl_doctor.engine import collect
    from dl_doctor.host import Host
    from dl_doctor.registry import load_registry

    registry = load_registry()
    probes = [p for p in registry.probes if not (machine.nvml is not None and p.name == "nvml")]
    host = Host(sysroot=str(root))
    snap = collect(probes, host, {}, timeout=30, matrix=compat_matrix.load(site=False))
    snap["facts"]["disks"] = copy.deepcopy(machine.disks or FIXED_DISKS)
    if machine.nvml is not None:
        import sys

        sys.path.insert(0, str(HERE.parent))
        from fake_nvml import FakeNVML

        from dl_doctor.probes import Unavailable
        from dl_doctor.probes.nvml import collect_nvml

        snap["unavailable"].pop("nvml", None)
        try:
            snap["facts"]["nvml"] = collect_nvml(FakeNVML(copy.deepcopy(machine.nvml)))
            snap["probes"]["nvml"] = {"status": "ok", "duration_s": 0.1}
        except Unavailable as exc:
            snap["unavailable"]["nvml"] = str(exc)
    if machine.device_nodes is not None and isinstance(snap["facts"].get("nvidia_driver"), dict):
        snap["facts"]["nvidia_driver"]["device_nodes"] = list(machine.device_nodes)
    return snap


def build(root: Path, spec: Spec) -> Path:
    """The tree of a spec (tests/conftest.py build_tree)."""
    import sys

    sys.path.insert(0, str(HERE.parent))
    from conftest import build_tree

    return build_tree(root, spec)


def judge(record: Dict[str, Any], broken: bool, workdir: Optional[Path] = None) -> Outcome:
    """Every probe on the case's tree (or its twin), every check, then `why` on the symptom against that report."""
    from dl_doctor import app
    from dl_doctor import compat_matrix
    from dl_doctor.engine import evaluate
    from dl_doctor.registry import load_registry

    machine = load_builders()[record["id"]](broken)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        root = build(Path(tmp) / "root", machine.spec)
        snap = snapshot_of(root, machine)
        findings = [f.to_dict() for f in evaluate(snap, load_registry().checks, compat_matrix.load(site=False))]
        report = Path(tmp) / "report.json"
        doc = dict(snap)
        doc["findings"] = findings
        report.write_text(json.dumps(doc, default=str))
        answer = app.why(record["symptom"], report=str(report))
    return Outcome(findings, answer)


def naming_finding(record: Dict[str, Any], outcome: Outcome) -> Optional[Dict[str, Any]]:
    """The warn/fail finding among the case's checks that says everything ``names`` asks for, if any."""
    wanted = [n.lower() for n in record.get("names") or []]
    for f in outcome.bad():
        if f["id"] not in record["checks"] or f["status"] == "error":
            continue
        said = json.dumps([f.get("message"), f.get("headline"), f.get("fix"), f.get("evidence")],
                          default=str).lower()
        if all(n in said for n in wanted):
            return f
    return None


def why_first(record: Dict[str, Any], outcome: Outcome) -> Optional[str]:
    """What `why` ranked first, as the case's ``checks`` name it: the cause itself, or a check among ``checks`` whose
    finding confirmed it (None: nothing ranked, or something the case does not name)."""
    causes = outcome.why.get("causes") or []
    if not causes:
        return None
    first = causes[0]
    if first.get("id") in record["checks"]:
        return first["id"]
    if first.get("verdict") in ("confirmed", "likely"):
        for line in first.get("evidence") or []:
            ident = str(line).split(" ", 1)[0]
            if ident in record["checks"]:
                return ident
    return None


def verdict(record: Dict[str, Any], workdir: Optional[Path] = None) -> Dict[str, Any]:
    """The case and its twin judged: what the tests assert and measure.py counts."""
    broken = judge(record, True, workdir)
    twin = judge(record, False, workdir)
    named = naming_finding(record, broken)
    first = why_first(record, broken)
    twin_bad = [f["id"] for f in twin.bad() if f["id"] in record["checks"] or f["status"] == "fail"]
    return {"id": record["id"], "named": named["id"] if named else None, "why_first": first,
            "why_ranked": [c.get("id") for c in (broken.why.get("causes") or [])[:3]],
            "bad": [(f["id"], f["status"], f.get("message", "")[:160]) for f in broken.bad()],
            "twin_bad": twin_bad, "passes": bool(named and first and not twin_bad)}


def select(ids: Sequence[str] = ()) -> List[Dict[str, Any]]:
    records = index()
    return [r for r in records if not ids or r["id"] in ids]
