"""The NVIDIA container runtime's image requirements (``NVIDIA_REQUIRE_*``), parsed and judged the way it judges them.

One parser and one evaluator, shared by DLD-CUDA-001 (a container's own environment) and ``dl-doctor plan --image``
(an image's config). Pure: it reads an environment mapping and a :class:`Host` built from facts, never a host.

What the runtime does (read in its sources; nothing here is copied from them):

- Which variables. nvidia-container-runtime-hook (NVIDIA/nvidia-container-toolkit
  ``internal/config/image/cuda_image.go``, ``GetRequirements``) passes every ``NVIDIA_REQUIRE_*`` variable except
  ``NVIDIA_REQUIRE_JETPACK*`` to ``nvidia-container-cli configure`` as one ``--require=`` each, in no fixed order; they
  are ANDed (``configure.c`` evaluates each in turn and stops at the first that fails). ``NVIDIA_DISABLE_REQUIRE``
  set to a value Go's ``strconv.ParseBool`` reads as true (``1 t T TRUE true True``) drops them all; so does
  ``disable-require = true`` in the host's config.toml (not visible from an image). A *legacy* image -- a non-empty
  ``CUDA_VERSION`` and no (or an empty) ``NVIDIA_REQUIRE_CUDA`` -- gets ``cuda>=MAJOR.MINOR`` of ``CUDA_VERSION``
  (``IsLegacy``, ``legacyVersion``: a semantic version; one that does not parse fails the hook).
- The expression language (NVIDIA/libnvidia-container ``src/cli/dsl.c``, ``dsl_evaluate``): a requirement is split
  at single spaces into alternatives (ORed) and each alternative at commas into constraints (ANDed); empty pieces
  are skipped. Alternatives are tried left to right and the first whose constraints all hold satisfies it; inside
  one, the first constraint that fails ends it. An alternative made only of empty pieces ends the evaluation with
  the result of the one before it (true at the start). A constraint is NAME OPERATOR VALUE: the name is what comes
  before the first of ``<>=!`` (``cuda``, ``driver``, ``arch``, ``brand``, matched case-insensitively), the operator
  the run of those characters after it, which must be one of ``= != < <= > >=`` (``==`` is not one; a lone ``!``
  is read as ``!=``), the value the rest, never empty. ``cuda``, ``driver`` and ``arch`` compare versions: dotted
  numbers, component by component, trailing ``.0`` ignored; a value with anything but digits and dots is an error.
  ``brand`` compares strings case-insensitively, with ``=`` and ``!=`` only. Anything else -- an unknown name, a
  malformed constraint -- is ``invalid expression``, but only when the evaluation reaches it.
- What it compares against (``src/cli/configure.c``): ``cuda`` is the host driver's CUDA version
  (``nvmlSystemGetCudaDriverVersion``, as MAJOR.MINOR), ``driver`` the driver's version, ``arch`` each visible GPU's
  compute capability, ``brand`` its NVML brand (``nvmlDeviceGetBrand``, named by ``src/driver.c``: Quadro, Tesla,
  NVS, GRID, GeForce, TITAN and, since libnvidia-container 1.9.0, the newer NVML brands -- the CUDA images name them
  vapps, vpc, vcs, vws, cloudgaming, quadrortx, nvidiartx, nvidia -- else Unknown). Every requirement is evaluated
  for every visible GPU; with none visible, ``arch`` and ``brand`` hold.
- What it says (``dsl.c``, ``configure.c``): ``nvidia-container-cli: requirement error: unsatisfied condition:
  FIRST`` where FIRST is the requirement's text up to its first space, followed, when it begins with ``cuda>=``, by
  ``, please update your driver to a newer version, or use an earlier cuda container``; or ``requirement error:
  invalid expression``. The container does not start.
- Where it is checked: only in the legacy mode (the hook and nvidia-container-cli: ``docker run --gpus``,
  ``--runtime=nvidia`` with the default ``mode = "auto"`` on a host without CDI specs). The CDI mode does not
  evaluate ``NVIDIA_REQUIRE_*`` (NVIDIA/nvidia-container-toolkit#1470); the CSV mode (Jetson) checks ``cuda`` and
  ``arch`` only.
- The image's forward-compatibility libraries play no part in the check: it runs before any library is mounted,
  against the host driver's CUDA version. The CUDA images (nvidia/cuda) instead list, after ``cuda>=X.Y``,
  alternatives ``brand=B,driver>=R,driver<R+1`` for the data-center driver branches whose CUDA their cuda-compat
  package serves; a container started through one of those runs CUDA code only through that package, which works on
  data-center GPUs alone (CUDA error 804 elsewhere).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

MAX_TEXT = 8192            # a requirement's text that is judged (the CUDA images' NVIDIA_REQUIRE_CUDA is ~2,400)
MAX_VARIABLES = 32         # NVIDIA_REQUIRE_* variables judged
MAX_ALTERNATIVES = 256
MAX_CONSTRAINTS = 16       # per alternative
MAX_GPUS = 64

RULES = ("cuda", "driver", "arch", "brand")
OPERATORS = ("=", "!=", "<", "<=", ">", ">=")   # libnvidia-container's, in its order
_OP_CHARS = "<>=!"
_TRUE = ("1", "t", "T", "TRUE", "true", "True")  # Go strconv.ParseBool's true
_SEMVER = re.compile(r"^v?(\d{1,9})(?:\.(\d{1,9}))?(?:\.(\d{1,9}))?(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$")
_VERSION = re.compile(r"^[0-9.]{1,64}$")
RUNTIME_ERROR = "nvidia-container-cli: requirement error: "
PLANNED_CONTAINER = "dl-doctor plan --image"  # system.container.evidence of a plan's what-if container (not running)
CUDA_HINT = ", please update your driver to a newer version, or use an earlier cuda container"

# NVML's nvmlBrandType_t -> the brand nvidia-container-cli compares (libnvidia-container src/driver.c, 1.9.0+).
NVML_BRANDS = {0: "unknown", 1: "quadro", 2: "tesla", 3: "nvs", 4: "grid", 5: "geforce", 6: "titan",
               7: "nvidia_vapps", 8: "nvidia_vpc", 9: "nvidia_vcs", 10: "nvidia_vws", 11: "nvidia_cloud_gaming",
               12: "quadro_rtx", 13: "nvidia_rtx", 14: "nvidia", 15: "geforce_rtx", 16: "titan_rtx"}
_RUNTIME_BRAND = {"unknown": "Unknown", "quadro": "Quadro", "tesla": "Tesla", "nvs": "NVS", "grid": "GRID",
                  "geforce": "GeForce", "titan": "TITAN", "nvidia_vapps": "VApps", "nvidia_vpc": "VPC",
                  "nvidia_vcs": "VCS", "nvidia_vws": "VWS", "nvidia_cloud_gaming": "CloudGaming",
                  "quadro_rtx": "QuadroRTX", "nvidia_rtx": "NvidiaRTX", "nvidia": "Nvidia",
                  "geforce_rtx": "GeForceRTX", "titan_rtx": "TitanRTX"}


def runtime_brand(nvml_brand: Optional[str]) -> Optional[str]:
    """The brand name nvidia-container-cli compares for an NVML brand fact (``tesla`` -> ``Tesla``; one NVML
    added later -> ``Unknown``, as the runtime names it); None when the fact is missing."""
    if not isinstance(nvml_brand, str) or not nvml_brand:
        return None
    return _RUNTIME_BRAND.get(nvml_brand, "Unknown")


# -- parsing -----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Constraint:
    text: str
    name: str = ""          # lower-cased rule name
    op: str = ""
    value: str = ""
    error: str = ""         # why the runtime calls it an invalid expression ("" : valid)


@dataclass(frozen=True)
class Alternative:
    text: str
    constraints: Tuple[Constraint, ...]   # empty: an alternative of empty pieces only (',,')

    @property
    def names(self) -> List[str]:
        return [c.name for c in self.constraints]


@dataclass(frozen=True)
class Requirement:
    variable: str
    text: str
    alternatives: Tuple[Alternative, ...]
    truncated: bool = False

    @property
    def first(self) -> str:
        """What the runtime quotes when it fails: the text up to the first space."""
        return self.text.split(" ", 1)[0]


def parse_constraint(text: str) -> Constraint:
    n = 0
    while n < len(text) and text[n] not in _OP_CHARS:
        n += 1
    if n == 0:
        return Constraint(text, error="no constraint name before the operator")
    if n == len(text):
        return Constraint(text, name=text.lower(), error="no operator")
    name, rest = text[:n], text[n:]
    run = 0
    while run < len(rest) and rest[run] in _OP_CHARS:
        run += 1
    ops = rest[:run]
    # libnvidia-container compares the operator run's length against each operator in its order: a run that is a
    # prefix of one ('!') takes it, a run longer than any ('==', '>==') takes none
    op = next((o for o in OPERATORS if o[:run] == ops and len(ops) <= len(o)), None)
    value = rest[run:]
    lname = name.lower()
    if op is None:
        return Constraint(text, name=lname, op=ops, value=value, error=f"{ops!r} is not an operator")
    if not value:
        return Constraint(text, name=lname, op=op, error="no value")
    if lname not in RULES:
        return Constraint(text, name=lname, op=op, value=value, error=f"{name!r} is not a constraint the runtime "
                                                                        "knows (cuda, driver, arch, brand)")
    if lname == "brand":
        if op not in ("=", "!="):
            return Constraint(text, name=lname, op=op, value=value, error="brand takes = or != only")
    elif not _VERSION.match(value):
        return Constraint(text, name=lname, op=op, value=value, error=f"{value[:32]!r} is not a version")
    return Constraint(text, name=lname, op=op, value=value)


def parse(text: str, variable: str = "NVIDIA_REQUIRE_CUDA") -> Requirement:
    """A requirement as the runtime splits it (bounded: MAX_TEXT characters, MAX_ALTERNATIVES alternatives of
    MAX_CONSTRAINTS constraints; what is cut is marked ``truncated``)."""
    text = str(text)
    truncated = len(text) > MAX_TEXT
    text = text[:MAX_TEXT]
    alternatives: List[Alternative] = []
    for piece in text.split(" "):
        if not piece:
            continue
        if len(alternatives) >= MAX_ALTERNATIVES:
            truncated = True
            break
        parts = [p for p in piece.split(",") if p]
        if len(parts) > MAX_CONSTRAINTS:
            truncated = True
            parts = parts[:MAX_CONSTRAINTS]
        alternatives.append(Alternative(piece, tuple(parse_constraint(p) for p in parts)))
    return Requirement(variable, text, tuple(alternatives), truncated)


# -- versions ----------------------------------------------------------------------------------------------------------

def compare_version(have: str, op: str, want: str) -> bool:
    """libnvidia-container's dotted-number comparison (both sides digits and dots): component by component, the
    first that differs decides; then a side with anything left but dots and zeros is the greater."""
    a = [p for p in have.split(".") if p != ""]
    b = [p for p in want.split(".") if p != ""]
    i = 0
    while i < len(a) and i < len(b):
        x, y = int(a[i]), int(b[i])
        if x != y:
            if op == "=":
                return False
            if op == "!=":
                return True
            return x < y if op in ("<", "<=") else x > y
        i += 1
    rest_a = any(int(p) for p in a[i:]) if i < len(a) else False
    rest_b = any(int(p) for p in b[i:]) if i < len(b) else False
    if op == "!=":
        return rest_a or rest_b
    if not rest_a and not rest_b:
        return op in ("=", "<=", ">=")
    if op == "=":
        return False
    if op in ("<", "<="):
        return not rest_a and rest_b
    return rest_a and not rest_b


def major_minor(version: Any) -> Optional[str]:
    """``CUDA_VERSION`` as the hook reads it for a legacy image: a semantic version -> MAJOR.MINOR; None if it is
    not one (the hook then fails)."""
    m = _SEMVER.match(str(version).strip()) if isinstance(version, str) else None
    if not m:
        return None
    return f"{int(m.group(1))}.{int(m.group(2) or 0)}"


# -- the host ------------------------------------------------------------------------------------------------------------

@dataclass
class GPU:
    name: str
    arch: Optional[str] = None      # compute capability, 8.0
    brand: Optional[str] = None     # NVML brand fact (tesla, nvidia, geforce...)
    arch_from: str = ""


@dataclass
class Host:
    driver: Optional[str] = None
    cuda: Optional[str] = None      # the driver's CUDA version, MAJOR.MINOR
    cuda_from: str = ""
    gpus: List[GPU] = field(default_factory=list)
    gpus_known: bool = False        # the list is the host's GPUs (NVML, or the PCI bus)

    def to_dict(self) -> Dict[str, Any]:
        return {"driver": self.driver, "cuda": self.cuda, "cuda_from": self.cuda_from,
                "gpus": [{"name": g.name, "arch": g.arch, "brand": g.brand,
                          "runtime_brand": runtime_brand(g.brand)} for g in self.gpus]}


def _clean_version(v: Any) -> Optional[str]:
    return v if isinstance(v, str) and _VERSION.match(v) and any(c.isdigit() for c in v) else None


def host_from_facts(get: Callable[[str], Any], matrix: Any = None) -> Host:
    """What the runtime would compare against, from facts (``get``: a dotted-path reader, Facts.get or
    WhatIf.get): the driver (its kernel module, else NVML), its CUDA version (NVML's, else the matrix's newest
    CUDA for that driver), each GPU's compute capability (NVML's, else the matrix's for its PCI ID) and NVML
    brand (unknown without NVML: a tree, a report without it)."""
    driver = _clean_version(get("nvidia_driver.kernel_module.version")) or _clean_version(get("nvml.driver_version"))
    host = Host(driver=driver)
    cuda = _clean_version(get("nvml.cuda_driver_version"))
    nvml_driver = _clean_version(get("nvml.driver_version"))
    if cuda and (not driver or not nvml_driver or nvml_driver == driver):
        host.cuda, host.cuda_from = cuda, "NVML (nvmlSystemGetCudaDriverVersion)"
    elif driver and matrix is not None:
        best = (matrix.driver(driver) or {}).get("max_cuda")
        if isinstance(best, str):
            host.cuda, host.cuda_from = best, f"the matrix's newest CUDA for driver {driver}"
    devices = get("nvml.devices")
    if isinstance(devices, list) and devices:
        for d in devices[:MAX_GPUS]:
            if not isinstance(d, dict):
                continue
            cc = _clean_version(d.get("compute_capability"))
            brand = d.get("brand") if isinstance(d.get("brand"), str) else None
            host.gpus.append(GPU(str(d.get("name") or f"GPU {d.get('index')}")[:128], cc, brand[:32] if brand else None,
                                 "NVML" if cc else ""))
        host.gpus_known = bool(host.gpus)
    if not host.gpus:
        pci = get("gpu_pci.devices")
        for g in (pci if isinstance(pci, list) else [])[:MAX_GPUS]:
            if not isinstance(g, dict) or g.get("kind") != "gpu":
                continue
            entry = matrix.gpu_by_pci(str(g.get("device_id") or "")) if matrix is not None else None
            name = entry["name"] if entry else f"10de:{g.get('device_id')}"
            cc = entry.get("compute_capability") if entry else None
            host.gpus.append(GPU(str(name)[:128], _clean_version(cc), None, "the matrix (PCI ID)" if cc else ""))
        host.gpus_known = bool(host.gpus)
    return host


# -- evaluation ----------------------------------------------------------------------------------------------------------

T, F, U = "true", "false", "unknown"


def _constraint(c: Constraint, host: Host, gpu: Optional[GPU]) -> str:
    """true / false / unknown (a fact it needs is missing)."""
    if c.name == "cuda":
        have = host.cuda
    elif c.name == "driver":
        have = host.driver
    elif c.name == "arch":
        if gpu is None:
            return T if host.gpus_known else U   # no visible device: the runtime assumes it holds
        have = gpu.arch
    else:  # brand
        if gpu is None:
            return T if host.gpus_known else U
        brand = runtime_brand(gpu.brand)
        if brand is None:
            return U
        equal = brand.lower() == c.value.lower()
        return T if equal == (c.op == "=") else F
    if have is None:
        return U
    return T if compare_version(have, c.op, c.value) else F


@dataclass
class Outcome:
    """One requirement for one GPU (or none): satisfied / unsatisfied / invalid / unknown."""
    status: str
    by: Optional[Alternative] = None      # the alternative that satisfied it
    uncertain_before: bool = False        # an earlier alternative's result was unknown
    why: str = ""


def evaluate_one(req: Requirement, host: Host, gpu: Optional[GPU]) -> Outcome:
    """dsl_evaluate's walk, three-valued: an alternative whose constraints need a missing fact is unknown, and an
    outcome that an unknown alternative could change is unknown (never a failure)."""
    evaluated = False    # an alternative was evaluated (the runtime's `ret` starts true)
    unknown = False      # an alternative so far was unknown
    may_error = False    # ... and one of those reaches an invalid constraint if its unknown constraints hold
    for alt in req.alternatives:
        if not alt.constraints:
            break        # only empty pieces: the runtime leaves its loop with the result it has
        evaluated = True
        result, invalid = T, None
        for c in alt.constraints:
            if c.error:
                if result == T:
                    invalid = c
                else:
                    may_error = True
                    result = U
                break
            r = _constraint(c, host, gpu)
            if r == F:
                result = F
                break
            if r == U:
                result = U
        if invalid is not None:
            if unknown:
                return Outcome("unknown", why=f"an alternative before {invalid.text!r} (not a valid constraint: "
                                              f"{invalid.error}) needs a fact that is not known")
            return Outcome("invalid", why=f"{invalid.text!r}: {invalid.error}")
        if result == T:
            if may_error:
                return Outcome("unknown", why="an earlier alternative may reach an invalid constraint")
            return Outcome("satisfied", by=alt, uncertain_before=unknown)
        if result == U:
            unknown = True
    if not evaluated:
        return Outcome("satisfied")
    if unknown:
        return Outcome("unknown", why="a fact an alternative needs is not known")
    return Outcome("unsatisfied")


@dataclass
class Verdict:
    """Every NVIDIA_REQUIRE_* of an image on this host, as the runtime would judge it."""
    status: str                     # satisfied, unsatisfied, invalid, unknown, disabled, none
    requirements: List[Requirement] = field(default_factory=list)
    legacy: bool = False            # cuda>=X.Y taken from CUDA_VERSION
    disabled_by: Optional[str] = None
    failed: Optional[Requirement] = None
    error: Optional[str] = None     # the runtime's own message
    satisfied_by: Dict[str, str] = field(default_factory=dict)   # variable -> alternative
    unknown: List[str] = field(default_factory=list)             # why parts are unknown
    notes: List[str] = field(default_factory=list)
    host: Optional[Host] = None
    image_cuda: Optional[str] = None
    forward_compat: bool = False    # NVIDIA_REQUIRE_CUDA held only through an alternative without cuda (brand/driver)

    def to_dict(self) -> Dict[str, Any]:
        return {"status": self.status, "legacy": self.legacy, "disabled_by": self.disabled_by,
                "requirements": {r.variable: r.text[:512] + ("..." if len(r.text) > 512 else "")
                                 for r in self.requirements},
                "failed": self.failed.variable if self.failed else None, "error": self.error,
                "satisfied_by": dict(self.satisfied_by), "unknown": list(self.unknown), "notes": list(self.notes),
                "image_cuda": self.image_cuda, "forward_compat": self.forward_compat,
                "host": self.host.to_dict() if self.host else None}


RUNTIME_ENV = ("CUDA_VERSION", "NV_CUDA_CUDART_VERSION", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
               "NVIDIA_DISABLE_REQUIRE")


def runtime_env(env: Mapping[str, Any]) -> Dict[str, str]:
    """The variables of a container's environment (or an image's Env) that the NVIDIA container runtime reads, as
    the facts record them (cuda_toolkits.container_env): NVIDIA_REQUIRE_CUDA, the named ones and every other
    NVIDIA_REQUIRE_* (bounded: MAX_VARIABLES of them, each value cut at MAX_TEXT characters; a name or value that
    is not a string is left out)."""
    required = sorted(k for k, v in env.items() if isinstance(k, str) and k.startswith("NVIDIA_REQUIRE_")
                      and len(k) <= 128 and isinstance(v, str))[:MAX_VARIABLES]
    named = [k for k in RUNTIME_ENV if isinstance(env.get(k), str)]
    keys = ["NVIDIA_REQUIRE_CUDA"] * ("NVIDIA_REQUIRE_CUDA" in required) + named + \
        [k for k in required if k != "NVIDIA_REQUIRE_CUDA"]
    return {k: str(env[k])[:MAX_TEXT] for k in keys}


def disabled(env: Mapping[str, Any]) -> bool:
    value = env.get("NVIDIA_DISABLE_REQUIRE")
    return isinstance(value, str) and value in _TRUE


def image_cuda(env: Mapping[str, Any]) -> Optional[str]:
    """The CUDA release an image is built for: CUDA_VERSION (MAJOR.MINOR), else the floor of NVIDIA_REQUIRE_CUDA's
    ``cuda>=`` (``cuda=``, ``cuda>``)."""
    mm = major_minor(env.get("CUDA_VERSION")) if isinstance(env.get("CUDA_VERSION"), str) else None
    if mm:
        return mm
    return require_cuda(env.get("NVIDIA_REQUIRE_CUDA"))


def require_cuda(text: Any) -> Optional[str]:
    """The CUDA floor an NVIDIA_REQUIRE_CUDA names: the value of its first ``cuda>=`` (``cuda=``, ``cuda>``)
    constraint (``cuda>=12.2 brand=tesla,driver>=470,...`` -> ``12.2``)."""
    if not isinstance(text, str) or not text:
        return None
    for alt in parse(text).alternatives:
        for c in alt.constraints:
            if c.name == "cuda" and not c.error and c.op in (">=", "=", ">"):
                parts = c.value.strip(".").split(".")
                return ".".join((parts + ["0"])[:2]) if parts and parts[0] else None
    return None


def requirements_of(env: Mapping[str, Any]) -> Tuple[List[Requirement], bool, List[str]]:
    """The requirements the hook passes on (sorted by name; the runtime's order is a Go map's), whether the cuda
    one is the legacy CUDA_VERSION's, and notes on what was left out."""
    notes: List[str] = []
    names = sorted(k for k, v in env.items() if isinstance(k, str) and k.startswith("NVIDIA_REQUIRE_")
                   and not k.startswith("NVIDIA_REQUIRE_JETPACK") and isinstance(v, str))
    if len(names) > MAX_VARIABLES:
        notes.append(f"{len(names) - MAX_VARIABLES} more NVIDIA_REQUIRE_* variables were not judged")
        names = names[:MAX_VARIABLES]
    reqs = [parse(env[n], n) for n in names if env[n].strip()]
    legacy = False
    cuda_version = env.get("CUDA_VERSION")
    if isinstance(cuda_version, str) and cuda_version and not env.get("NVIDIA_REQUIRE_CUDA"):
        legacy = True
        mm = major_minor(cuda_version)
        if mm:
            reqs.append(parse(f"cuda>={mm}", "CUDA_VERSION"))
        else:
            notes.append(f"CUDA_VERSION {cuda_version[:64]!r} is not a semantic version: the hook cannot read it "
                         "(it fails with 'invalid CUDA version')")
    for r in reqs:
        if r.truncated:
            notes.append(f"{r.variable} is longer than dl-doctor judges (its first {MAX_TEXT} characters, "
                         f"{MAX_ALTERNATIVES} alternatives)")
    return reqs, legacy, notes


def evaluate(env: Mapping[str, Any], host: Host) -> Verdict:
    """How the NVIDIA container runtime (legacy mode) judges an image's environment on ``host``."""
    env = {k: v for k, v in env.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(env, Mapping) \
        else {}
    reqs, legacy, notes = requirements_of(env)
    verdict = Verdict("none", reqs, legacy=legacy, notes=notes, host=host, image_cuda=image_cuda(env))
    if disabled(env):
        verdict.status, verdict.disabled_by = "disabled", f"NVIDIA_DISABLE_REQUIRE={env['NVIDIA_DISABLE_REQUIRE']}"
        return verdict
    if not reqs:
        if legacy and any("not a semantic version" in n for n in notes):
            verdict.status = "unknown"
            verdict.unknown.append("CUDA_VERSION cannot be read as the hook reads it")
        return verdict
    targets: Sequence[Optional[GPU]] = host.gpus if host.gpus else [None]
    statuses: List[str] = []
    for req in reqs:
        worst: Optional[Outcome] = None
        for gpu in targets:
            out = evaluate_one(req, host, gpu)
            if out.status in ("unsatisfied", "invalid"):
                worst = out
                break
            if out.status == "unknown":
                if worst is None or worst.status == "satisfied":
                    worst = out
            elif worst is None:
                worst = out
        assert worst is not None
        statuses.append(worst.status)
        if worst.status in ("unsatisfied", "invalid") and verdict.failed is None:
            verdict.failed = req
            verdict.error = RUNTIME_ERROR + ("invalid expression" if worst.status == "invalid" else
                                             "unsatisfied condition: " + req.first
                                             + (CUDA_HINT if req.first.startswith("cuda>=") else ""))
            if worst.why:
                verdict.notes.append(f"{req.variable}: {worst.why}")
        elif worst.status == "unknown":
            verdict.unknown.append(f"{req.variable}: {worst.why or 'a fact it needs is not known'}")
        elif worst.status == "satisfied":
            if worst.by is not None:
                verdict.satisfied_by[req.variable] = worst.by.text
                if req.variable in ("NVIDIA_REQUIRE_CUDA", "CUDA_VERSION") and "cuda" not in worst.by.names \
                        and not worst.uncertain_before:
                    verdict.forward_compat = True
    if verdict.failed is not None:
        verdict.status = "invalid" if "invalid expression" in (verdict.error or "") else "unsatisfied"
    elif "unknown" in statuses:
        verdict.status = "unknown"
    else:
        verdict.status = "satisfied"
    return verdict


def missing_facts(host: Host) -> List[str]:
    """The host facts the evaluation could not have (for a note)."""
    out = []
    if not host.driver:
        out.append("the driver version")
    if not host.cuda:
        out.append("the driver's CUDA version")
    if not host.gpus:
        out.append("the GPUs")
    elif any(g.brand is None for g in host.gpus):
        out.append("the GPUs' NVML brand (NVML is read on a live host only)")
    if any(g.arch is None for g in host.gpus):
        out.append("a GPU's compute capability")
    return out
