"""What pip and conda themselves would say about an environment: every distribution's requirements met (pip's
Requires-Dist with markers and extras; conda's depends and constrains), no file claimed by two owners, and the
compiled files still the ones their RECORD lists.

The rules are pip's and conda's own:
- pip (``pip check``): a requirement counts where its environment marker holds for the environment (PEP 508; the
  marker variables are the environment's, not dl-doctor's), an ``extra == "X"`` requirement only where something
  installed requested ``name[X]``; the installed version is held against the specifier with PEP 440's rules,
  pre-releases allowed, a local label (``+cu124``) ignored where the specifier has none
  (https://packaging.python.org/en/latest/specifications/version-specifiers/).
- conda: ``depends`` and ``constrains`` are MatchSpecs, ``name [version [build]]``
  (https://docs.conda.io/projects/conda/en/latest/user-guide/concepts/pkg-specs.html#package-match-specifications
  and conda.models.match_spec): ``,`` is AND, ``|`` is OR, ``1.2.*`` and ``=1.2`` match the 1.2 series, ``==1.2``
  only 1.2; versions compare with conda's VersionOrder (conda.models.version). A constrains entry binds only where
  its package is installed.

A conflict fails only where the loaded code needs the requirement: compiled code against compiled code (a companion
or extension and the framework it links, a package built against NumPy 2's ABI with NumPy 1), or a requirement the
requirer enforces at import (IMPORT_ENFORCED). Anything else is a warning where compiled code is involved, and a
note (the check passes) between pure-Python packages, where conflicts are common and mostly harmless, and between
packages a resolver of their own installed (conda; apt or dnf: no INSTALLER), which relaxes what METADATA pins.
Files: a file two owners list is judged only where the two records say its content differs (namespace files identical
by hash are by design); a compiled file is held to its RECORD only where an installer that says so (pip, uv) wrote it.
"""

from __future__ import annotations

import fnmatch
import re
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Tuple

from dl_doctor.model import Facts, Fix, Result, check, fail, passed, skip, warn

# Requirements the requirer verifies when it is imported (it raises rather than run with another version), by the
# requirer's own code: transformers/dependency_versions_check.py (pkgs_to_check_at_runtime, an ImportError "X is
# required for a normal functioning of this module, but found X==V"); jax/_src/lib/__init__.py
# (check_jaxlib_version: "jaxlib version V is newer than and incompatible with jax version W"); tf_keras imports
# TensorFlow's internal modules of its own release (its Requires-Dist pins the release series).
IMPORT_ENFORCED = {
    "transformers": ("tokenizers", "huggingface-hub", "safetensors", "accelerate", "tqdm", "regex", "requests",
                     "packaging", "filelock", "numpy", "pyyaml"),
    "jax": ("jaxlib",),
    "tf-keras": ("tensorflow",),
    "diffusers": ("huggingface-hub",),
}
# a distribution's name in conda-forge where it differs (a requirement on the PyPI name is met by the conda package)
CONDA_NAMES = {"torch": ("pytorch",), "opencv-python": ("py-opencv", "opencv"),
               "opencv-python-headless": ("py-opencv", "opencv"), "tensorflow": ("tensorflow", "tensorflow-base"),
               "jaxlib": ("jaxlib",), "tables": ("pytables",), "faiss-cpu": ("faiss-cpu", "faiss")}
MACHINES = ("x86_64", "aarch64")

if TYPE_CHECKING:  # packaging's parsers are imported where a requirement is evaluated (the start-up budget,
    # tests/e2e/test_startup_imports.py)
    from packaging.markers import Marker
    from packaging.requirements import Requirement


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _envs(facts: Facts) -> List[Dict[str, Any]]:
    return [e for e in facts.get("python_envs.environments") or [] if not e.get("error") and e.get("packaging")]


def _label(env: Dict[str, Any]) -> str:
    return f"{env.get('name')} ({env.get('prefix')})"


def _python(env: Dict[str, Any]) -> str:
    return f"{env.get('python') or env.get('prefix', '') + '/bin/python'} -m pip"


def needs_packaging(facts: Facts) -> Optional[str]:
    if facts.has("python_envs") and not _envs(facts):
        return "no Python environment's packages were read"
    return None


# -- pip: PEP 508 requirements ----------------------------------------------------------------------------------

def marker_environments(pk: Dict[str, Any]) -> List[Dict[str, str]]:
    """The marker variables of the environment (every machine it might be, where the wheels do not say)."""
    py = str(pk.get("python_version") or "")
    if not re.fullmatch(r"3\.\d+(\.\d+)?", py):
        return []
    mm = ".".join(py.split(".")[:2])
    # where only X.Y is known (a conda env's lib/pythonX.Y), every patch release it might be
    fulls = [py] if py.count(".") == 2 else [mm + ".0", mm + ".99"]
    machines = [pk["platform_machine"]] if pk.get("platform_machine") else list(MACHINES)
    return [{"python_version": mm, "python_full_version": full, "os_name": "posix", "sys_platform": "linux",
             "platform_system": "Linux", "platform_machine": m, "platform_python_implementation": "CPython",
             "implementation_name": "cpython", "implementation_version": full, "platform_release": "",
             "platform_version": "", "extra": ""} for m in machines for full in fulls]


def _holds(marker: "Optional[Marker]", envs: List[Dict[str, str]], extras: Iterable[str] = ("",)) -> Optional[bool]:
    """Whether the marker holds on every candidate environment for one of ``extras`` (None: cannot tell)."""
    if marker is None:
        return True
    try:
        return any(all(marker.evaluate({**e, "extra": x}) for e in envs) for x in extras)
    except Exception:  # noqa: BLE001 - an unknown variable or an odd marker: not judged
        return None


_EXTRA_IN_MARKER = re.compile(r"""extra\s{0,8}==\s{0,8}["']([^"']{1,100})["']""")
_REQ_HEAD = re.compile(r"^\s{0,8}([A-Za-z0-9][A-Za-z0-9._-]{0,200})\s{0,8}(?:\[([^\]]{0,500})\])?")


def _requested_extras(dists: Dict[str, Dict[str, Any]]) -> Dict[str, set]:
    """The extras any requirement string names (``pkg[a,b]``), read from the text: a superset of what pip_conflicts
    counts as requested, so that requirements only an unrequested extra brings are not parsed at all (most of a
    torch environment's Requires-Dist lines are extras')."""
    out: Dict[str, set] = {}
    for d in dists.values():
        for text in d.get("requires") or []:
            m = _REQ_HEAD.match(str(text).split(";", 1)[0])
            if m and m.group(2):
                out.setdefault(_norm(m.group(1)), set()).update(_norm(x.strip()) for x in m.group(2).split(","))
    return out


def _requirements(d: Dict[str, Any], wanted: Iterable[str] = (), enforced: Iterable[str] = (),
                  every: bool = True) -> "List[Requirement]":
    """``d``'s requirements parsed; with ``every`` False, those gated by an extra nobody names are left out unless
    the requirer enforces them at import (``enforced``)."""
    from packaging.requirements import InvalidRequirement, Requirement

    out = []
    wanted, enforced = set(wanted), set(enforced)
    for text in d.get("requires") or []:
        if not every and ";" in str(text):
            extras = _EXTRA_IN_MARKER.findall(str(text).split(";", 1)[1])
            head = _REQ_HEAD.match(str(text))
            if extras and not any(_norm(x) in wanted for x in extras) and not (head and _norm(head.group(1)) in
                                                                               enforced):
                continue
        try:
            out.append(Requirement(str(text)))
        except InvalidRequirement:
            continue
    return out


def _installed(name: str, pk: Dict[str, Any]) -> Tuple[Optional[str], Optional[str], Optional[bool]]:
    """(version, how it is installed: pip|conda, compiled) of a requirement's target, or (None, None, None)."""
    d = (pk.get("distributions") or {}).get(name)
    if isinstance(d, dict):
        return d.get("version"), "pip", d.get("compiled")
    for cname in (name,) + CONDA_NAMES.get(name, ()):
        c = (pk.get("conda") or {}).get(cname)
        if isinstance(c, dict):
            return c.get("version"), "conda", c.get("compiled")
    return None, None, None


def _severity(requirer: str, req_compiled: Optional[bool], target: str, tgt_compiled: Optional[bool],
              missing: bool) -> str:
    if target in IMPORT_ENFORCED.get(requirer, ()):
        return "fail"
    if missing:
        # a companion without its framework cannot import; any other missing package is pip check's business
        return "warn" if req_compiled and target in ("torch", "tensorflow", "jaxlib") else "note"
    if req_compiled and tgt_compiled:
        # an nvidia-* library wheel keeps its soname across a release series (NVIDIA's minor version
        # compatibility): another build of it usually loads; the framework's own checks judge the libraries
        return "warn" if target.startswith("nvidia-") else "fail"
    if req_compiled or tgt_compiled:
        return "warn"
    return "note"


def pip_conflicts(env: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Every unmet requirement of the environment's distributions, as pip would list it, with its severity."""
    pk = env["packaging"]
    menvs = marker_environments(pk)
    if not menvs:
        return []
    dists = {k: v for k, v in (pk.get("distributions") or {}).items() if isinstance(v, dict)}
    named = _requested_extras(dists)
    parsed = {name: _requirements(d, named.get(name, ()), IMPORT_ENFORCED.get(name, ()), every=False)
              for name, d in dists.items()}
    requested: Dict[str, set] = {}
    for name, reqs in parsed.items():
        for r in reqs:
            if r.extras and _holds(r.marker, menvs) is True:
                requested.setdefault(_norm(r.name), set()).update(_norm(x) for x in r.extras)
    out = []
    conda_env = bool(pk.get("conda"))
    for name, reqs in sorted(parsed.items()):
        d = dists[name]
        extras = [""] + sorted(requested.get(name, ()))
        for r in reqs:
            uses_extra = r.marker is not None and "extra" in str(r.marker)
            target = _norm(r.name)
            holds = _holds(r.marker, menvs, extras if uses_extra else ("",))
            if holds is not True and uses_extra and target in IMPORT_ENFORCED.get(name, ()) and target in dists \
                    and _holds(r.marker, menvs, _extras_of(r)):
                # the requirer checks this one at import whichever extra installed it (jax and jaxlib)
                holds = True
            if holds is not True:
                continue
            if target == name:
                continue
            have, how, compiled = _installed(target, pk)
            if have is None:
                sev = _severity(name, d.get("compiled"), target, None, missing=True)
                if conda_env:
                    sev = "note"  # a conda package of another name may provide it
                out.append({"requirer": name, "requirer_version": d.get("version"), "requirement": _bare(r),
                            "marker": str(r.marker) if r.marker else None, "target": target, "installed": None,
                            "severity": sev})
                continue
            if not str(r.specifier):
                continue
            from packaging.version import InvalidVersion, Version

            try:
                ok = r.specifier.contains(Version(have), prereleases=True)
            except InvalidVersion:
                continue
            if ok:
                continue
            sev = _severity(name, d.get("compiled"), target, compiled, missing=False)
            tgt = dists.get(target) or {}
            if sev != "fail" and (how == "conda" or (_managed(d) and _managed(tgt))):
                # conda's solver, or the distribution's apt/dnf, chose the pair (they relax what METADATA pins)
                sev = "note"
            elif sev == "fail" and _managed(d) and _managed(tgt) and target not in IMPORT_ENFORCED.get(name, ()):
                sev = "warn"
            out.append({"requirer": name, "requirer_version": d.get("version"), "requirement": _bare(r),
                        "marker": str(r.marker) if r.marker else None, "target": target, "installed": have,
                        "severity": sev})
    return out


# installers whose own resolver chose the versions (their packages' METADATA keeps upstream's pins, which they relax);
# a distribution without an INSTALLER (Debian's dist-packages, egg-info) is counted with them
MANAGED = ("conda", "rpm", "debian", "dpkg", "apt", "spack", "nix", "portage")


def _managed(d: Dict[str, Any]) -> bool:
    return not d.get("installer") or str(d.get("installer")).lower() in MANAGED


def _bare(r: "Requirement") -> str:
    """The requirement without its marker, as pip names it (``torch==2.5.1``, ``jax-cuda12-plugin[with-cuda]``)."""
    return r.name + (f"[{','.join(sorted(r.extras))}]" if r.extras else "") + str(r.specifier)


def _extras_of(r: "Requirement") -> List[str]:
    """The extras a requirement's marker names (``extra == "cuda12"``)."""
    return _EXTRA_IN_MARKER.findall(str(r.marker or ""))


def _say(env: Dict[str, Any], c: Dict[str, Any]) -> str:
    req = f"{c['requirer']} {c['requirer_version']} requires {c['requirement']}"
    if c.get("installed") is None:
        return f"{_label(env)}: {req}, which is not installed"
    return f"{_label(env)}: {req}, but {c['target']} {c['installed']} is installed"


def _result(problems: List[Tuple[str, str, Dict[str, Any]]], fixes: List[str], notes: List[str],
            evidence: Dict[str, Any], summary: str, nothing: str, ok: str) -> Result:
    if any(s == "fail" for s, _, _ in problems) or any(s == "warn" for s, _, _ in problems):
        bad = [p for p in problems if p[0] in ("fail", "warn")]
        status = fail if any(s == "fail" for s, _, _ in bad) else warn
        evidence = {**evidence, "conflicts": [c for _, _, c in bad][:50], "notes": notes[:20]}
        return status("; ".join(m for _, m, _ in bad[:20]), evidence,
                      Fix(summary, tuple(dict.fromkeys(fixes))[:10]) if fixes else None,
                      headline=bad[0][1].split(": ", 1)[-1][:200])
    if not evidence.get("environments"):
        return skip(nothing)
    if notes:
        return passed(ok + "; notes (pure-Python or conda-provided, mostly harmless): " + "; ".join(notes[:10]),
                      {**evidence, "notes": notes[:50]})
    return passed(ok, evidence)


@check(
    id="DLD-PKG-001", slug="pip-requirement-conflict",
    title="Every installed distribution's requirements are met (what pip check would say)",
    problem="An installed package needs another version of a package the environment has",
    remedy="repair-software", drain=False,
    tags=("python", "packaging"), requires=("python_envs",), applies=(needs_packaging,),
    what="""Reads every distribution's METADATA Requires-Dist, evaluates its environment markers for the
    environment's Python and machine (an extra's requirements only where something installed requested that extra)
    and holds the installed version against the specifier with PEP 440's rules, as pip check does.""",
    why="""Installing one package with pip can replace another's dependency with a version it was not built or
    tested for (pip warns once and installs anyway). Where the requirer's compiled code links the other package's
    (torchvision, xformers or vllm and torch; a package built against NumPy 2 and NumPy 1), or the requirer
    verifies the version at import (transformers and tokenizers or huggingface-hub; jax and jaxlib), the import
    fails. Conflicts between pure-Python utilities are reported as notes only, and so are pairs conda or the
    distribution's package manager installed (their resolvers relax what METADATA pins; a compiled pair warns).""",
    fix="""Install the version the requirer asks for (the command in the finding), or upgrade the requirer to a
    release that supports the installed one; install companions in one pip command so the resolver sees both.""",
)
def pip_requirement_conflict(facts: Facts) -> Result:
    problems: List[Tuple[str, str, Dict[str, Any]]] = []
    fixes: List[str] = []
    notes: List[str] = []
    looked = []
    for env in _envs(facts):
        if not marker_environments(env["packaging"]):
            continue
        looked.append(env.get("prefix"))
        for c in pip_conflicts(env):
            text = _say(env, c)
            c = {**c, "environment": env.get("prefix")}
            if c["severity"] == "note":
                notes.append(text)
                continue
            problems.append((c["severity"], text, c))
            fixes.append(f"{_python(env)} install {_quote(c['requirement'])}")
    return _result(problems, fixes, notes, {"environments": looked},
                   "Install the versions the requirers ask for (or upgrade the requirer).",
                   "no environment with readable package metadata and a known Python version",
                   f"every requirement is met in {len(looked)} environment(s)")


def _quote(req: str) -> str:
    base = req.split(";", 1)[0].strip()
    return "'" + base.replace("'", "") + "'"


# -- conda: MatchSpecs -------------------------------------------------------------------------------------------

_SPLIT = re.compile(r"(\d+|[a-z]+)")


def conda_version_key(version: str) -> Optional[Tuple[int, List[List[Any]], List[List[Any]]]]:
    """conda's VersionOrder (conda.models.version): epoch, then components split on '.' and '_' and into runs
    of digits and letters; a component starting with a letter gets a leading 0; the local version after '+'."""
    v = version.strip().lower()
    if not v or len(v) > 100 or not re.fullmatch(r"[0-9a-z.+_!*-]+", v):
        return None
    epoch = 0
    if "!" in v:
        e, v = v.split("!", 1)
        if not e.isdigit():
            return None
        epoch = int(e)
    v, _, local = v.partition("+")

    def comps(text: str) -> List[List[Any]]:
        out: List[List[Any]] = []
        for part in re.split(r"[._-]", text):
            if not part:
                continue
            items: List[Any] = [int(x) if x.isdigit() else x for x in _SPLIT.findall(part)]
            if items and isinstance(items[0], str):
                items.insert(0, 0)
            out.append(items or [0])
        return out
    return epoch, comps(v), comps(local)


def _cmp_item(a: Any, b: Any) -> int:
    def rank(x: Any) -> Tuple[int, Any]:
        if isinstance(x, int):
            return (2, x)
        if x == "dev":
            return (0, "")
        if x == "post":
            return (4, "")
        if x == "*":
            return (0, "")
        return (1, x)
    ra, rb = rank(a), rank(b)
    return (ra > rb) - (ra < rb)


def _cmp_comps(a: List[List[Any]], b: List[List[Any]]) -> int:
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else [0]
        y = b[i] if i < len(b) else [0]
        for j in range(max(len(x), len(y))):
            c = _cmp_item(x[j] if j < len(x) else 0, y[j] if j < len(y) else 0)
            if c:
                return c
    return 0


def conda_compare(a: str, b: str) -> Optional[int]:
    ka, kb = conda_version_key(a), conda_version_key(b)
    if ka is None or kb is None:
        return None
    if ka[0] != kb[0]:
        return (ka[0] > kb[0]) - (ka[0] < kb[0])
    return _cmp_comps(ka[1], kb[1]) or _cmp_comps(ka[2], kb[2])


def _starts(version: str, prefix: str) -> Optional[bool]:
    kv, kp = conda_version_key(version), conda_version_key(prefix)
    if kv is None or kp is None:
        return None
    if kv[0] != kp[0]:
        return False
    comps = kp[1]
    if len(kv[1]) < len(comps):
        return _cmp_comps(kv[1], comps) == 0
    head = kv[1][:len(comps)]
    # the last component of the prefix matches as a prefix of the version's (1.2 matches 1.2, 1.2.0 and 1.2a0)
    return all(x == y for x, y in zip(head[:-1], comps[:-1])) and head[-1][:len(comps[-1])] == comps[-1]


def conda_version_match(spec: str, version: str) -> Optional[bool]:
    """Whether ``version`` satisfies a conda version spec (None: a spec this parser does not read)."""
    spec = spec.strip()
    if spec in ("", "*"):
        return True
    if "(" in spec or len(spec) > 300:
        return None
    alternatives = []
    for alt in spec.split("|"):
        terms = []
        for term in alt.split(","):
            r = _term(term.strip(), version)
            if r is None:
                return None
            terms.append(r)
        alternatives.append(all(terms))
    return any(alternatives)


def _term(term: str, version: str) -> Optional[bool]:
    m = re.fullmatch(r"(>=|<=|==|!=|~=|>|<|=)?\s*([0-9A-Za-z.+_!*-]+)", term)
    if not m:
        return None
    op, v = m.group(1) or "", m.group(2)
    if v.endswith(".*") or v.endswith("*"):
        base = v.rstrip("*").rstrip(".")
        if not base:
            return op != "!="
        r = _starts(version, base)
        if r is None:
            return None
        if op in ("", "=", "=="):
            return r
        if op == "!=":
            return not r
        op_cmp = conda_compare(version, base)
        return None if op_cmp is None else _ordered(op, op_cmp)
    if op == "=":
        return _starts(version, v)
    if op == "":  # a bare version: conda reads it exactly, conda-build fuzzily; either counts (conservative)
        c = conda_compare(version, v)
        s = _starts(version, v)
        return None if c is None or s is None else (c == 0 or s)
    if op == "~=":
        c = conda_compare(version, v)
        parts = v.split(".")
        s = _starts(version, ".".join(parts[:-1])) if len(parts) > 1 else True
        return None if c is None or s is None else (c >= 0 and bool(s))
    c = conda_compare(version, v)
    if c is None:
        return None
    if op == "==":
        return c == 0
    if op == "!=":
        return c != 0
    return _ordered(op, c)


def _ordered(op: str, c: int) -> bool:
    return {">=": c >= 0, "<=": c <= 0, ">": c > 0, "<": c < 0, "==": c == 0, "=": c == 0}.get(op, False)


def parse_match_spec(text: str) -> Optional[Tuple[str, str, Optional[str]]]:
    """(name, version spec, build spec) of a MatchSpec string: ``name``, ``name VERSION``, ``name VERSION BUILD``,
    ``name>=1.2``, ``name=1.2=BUILD``, ``channel::name ...``, ``name[version='..', build='..']``."""
    s = text.strip()
    if not s or len(s) > 300:
        return None
    if "::" in s:
        s = s.split("::", 1)[1]
    s = s.split("#", 1)[0].strip()
    brackets: Dict[str, str] = {}
    if "[" in s:
        if not s.endswith("]"):
            return None
        s, _, inner = s[:-1].partition("[")
        for m in re.finditer(r"(\w+)\s*=\s*[\"']?([^\"',\]]*(?:,[^\"',\]=]*)*)[\"']?", inner):
            brackets[m.group(1)] = m.group(2).strip()
    parts = s.split()
    if not parts:
        return None
    name = parts[0]
    version, build = "", None
    op = re.match(r"^([A-Za-z0-9_.\-]+)([<>=!~].*)$", name)
    if op:
        name, rest = op.group(1), op.group(2)
        if rest.startswith("=") and not rest.startswith("==") and rest.count("=") == 2:
            version, build = rest[1:].split("=", 1)
            version = "=" + version
        else:
            version = rest
    if len(parts) > 1:
        version = parts[1]
    if len(parts) > 2:
        build = parts[2]
    if len(parts) > 3:
        return None
    version = brackets.get("version", version)
    build = brackets.get("build", build)
    if version.startswith("==") and version.count("=") == 3:  # ==1.2=build
        version, build = version.rsplit("=", 1)
    return name.lower(), version, build


def conda_conflicts(env: Dict[str, Any]) -> List[Dict[str, Any]]:
    conda = {k: v for k, v in ((env["packaging"] or {}).get("conda") or {}).items() if isinstance(v, dict)}
    out = []
    for name, pkg in sorted(conda.items()):
        for kind in ("depends", "constrains"):
            for text in pkg.get(kind) or []:
                spec = parse_match_spec(text)
                if spec is None or spec[0].startswith("__"):
                    continue
                target, vspec, bspec = spec
                have = conda.get(target)
                if have is None:
                    if kind == "depends":
                        sev = "warn" if pkg.get("compiled") and target.startswith(
                            ("lib", "cuda", "pytorch", "tensorflow", "jaxlib", "numpy")) else "note"
                        out.append({"requirer": name, "requirer_version": pkg.get("version"), "kind": kind,
                                    "requirement": text, "target": target, "installed": None, "severity": sev})
                    continue
                ok = conda_version_match(vspec, str(have.get("version") or "")) if vspec else True
                if ok is None:
                    continue
                if ok and bspec and bspec != "*":
                    ok = fnmatch.fnmatchcase(str(have.get("build") or ""), bspec)
                if ok:
                    continue
                if pkg.get("compiled") and have.get("compiled"):
                    sev = "fail"
                elif not pkg.get("files"):
                    sev = "warn"  # a metapackage (pytorch-gpu, cudatoolkit mutexes): what the user asked for
                elif pkg.get("compiled") or have.get("compiled"):
                    sev = "warn"
                else:
                    sev = "note"
                out.append({"requirer": name, "requirer_version": pkg.get("version"), "kind": kind,
                            "requirement": text, "target": target,
                            "installed": f"{have.get('version')} {have.get('build')}", "severity": sev})
    return out


@check(
    id="DLD-PKG-002", slug="conda-requirement-conflict",
    title="Every conda package's depends and constrains are met (what conda's solver would say)",
    problem="A conda package needs another version of a package the environment has",
    remedy="repair-software", drain=False,
    tags=("python", "packaging", "conda"), requires=("python_envs",), applies=(needs_packaging,),
    what="""Reads each conda environment's conda-meta records and holds every package's depends and constrains
    (conda MatchSpecs: name, version spec, build string) against the packages installed, with conda's version
    ordering.""",
    why="""conda keeps an environment consistent only while conda alone changes it: pip installs, conda install
    --force, --no-deps or copying packages between environments leave a package with a dependency of another
    version or build (libstdcxx-ng older than a package built with a newer GCC: GLIBCXX not found; a CUDA
    pytorch build with pytorch-cpu's mutex; a cudatoolkit outside the range pytorch was built for).""",
    fix="""Let conda repair the environment: conda install the named package at the spec shown (or conda update
    --all); avoid pip installing over conda's packages.""",
)
def conda_requirement_conflict(facts: Facts) -> Result:
    problems: List[Tuple[str, str, Dict[str, Any]]] = []
    fixes: List[str] = []
    notes: List[str] = []
    looked = []
    for env in _envs(facts):
        if not (env["packaging"] or {}).get("conda"):
            continue
        looked.append(env.get("prefix"))
        for c in conda_conflicts(env):
            have = f"{c['target']} {c['installed']} is installed" if c["installed"] else f"{c['target']} is not installed"
            text = f"{_label(env)}: conda package {c['requirer']} {c['requirer_version']} " \
                   f"{'depends on' if c['kind'] == 'depends' else 'constrains'} {c['requirement']}, but {have}"
            c = {**c, "environment": env.get("prefix")}
            if c["severity"] == "note":
                notes.append(text)
                continue
            problems.append((c["severity"], text, c))
            fixes.append(f"conda install -p {env.get('prefix')} '{c['requirement']}'")
    return _result(problems, fixes, notes, {"environments": looked},
                   "Let conda bring the package to the spec its dependent needs.",
                   "no conda environment here", f"every depends and constrains is met in {len(looked)} conda "
                                                "environment(s)")


# -- files: two owners, and RECORD against the disk ----------------------------------------------------------------

@check(
    id="DLD-PKG-003", slug="file-owned-by-two-distributions",
    title="No file is installed by two distributions",
    problem="Two packages installed the same files: the last one overwrote the other's",
    remedy="repair-software", drain=False,
    tags=("python", "packaging"), requires=("python_envs",), applies=(needs_packaging,),
    what="""Compares the wheel RECORDs of every environment (and conda-meta's file lists, and conda's against
    pip's) for files two owners both list; namespace files identical by hash in both records (nvidia/__init__.py
    in every nvidia-*-cu12 wheel) are by design and not judged.""",
    why="""Two distributions of one module (onnxruntime and onnxruntime-gpu, opencv-python and
    opencv-python-headless, tensorflow and tensorflow-cpu, pip's numpy over conda's) write the same paths: the
    later install overwrote the earlier's files, the package is a mix of two builds (the CPU provider list only,
    cv2 import errors), and uninstalling either removes files the other needs.""",
    fix="""Uninstall both and install only the one you want (pip uninstall -y A B && pip install A); in a conda
    environment, remove the pip copy and let conda reinstall its own.""",
)
def file_owned_by_two(facts: Facts) -> Result:
    problems: List[Tuple[str, str, Dict[str, Any]]] = []
    fixes: List[str] = []
    notes: List[str] = []
    looked = []
    for env in _envs(facts):
        pk = env["packaging"]
        looked.append(env.get("prefix"))
        for s in pk.get("shared_files") or []:
            a, b = s.get("owners") or ["?", "?"]
            kinds = s.get("kinds") or ["pip", "pip"]
            if not (s.get("differing") or s.get("unknown")):
                continue  # identical in both records: namespace files, by design
            who = " and ".join(f"conda package {o} {_version(pk, o, k)}" if k == "conda" else f"{o} {_version(pk, o, k)}"
                               for o, k in zip((a, b), kinds))
            ex = ", ".join(p.rsplit("/site-packages/", 1)[-1] for p in (s.get("examples") or [])[:3])
            text = f"{_label(env)}: {who} both install {s.get('files')} file(s) ({ex})"
            if s.get("init_only"):
                notes.append(text + ": namespace __init__.py files only")
                continue
            if kinds == ["conda", "conda"] and (s.get("compiled_differing") or s.get("differing")):
                sev = "warn"  # conda's own path_conflict setting let one clobber the other (softlinks are left out)
                text += f"; {s.get('differing')} differ between the two: the later install overwrote the other's"
            elif s.get("compiled_differing"):
                sev = "fail"
                text += f"; {s['compiled_differing']} compiled file(s) differ between the two: one overwrote the other's"
            elif s.get("mixed_dirs"):
                sev = "fail"
                text += (f"; both put compiled code in {', '.join(d.rsplit('/site-packages/', 1)[-1] for d in s['mixed_dirs'][:2])}: "
                         "the package there is a mix of two builds")
            elif s.get("differing"):
                sev = "warn"
                text += f"; {s['differing']} differ between the two"
            elif s.get("compiled") and s.get("unknown"):
                sev = "warn"
                text += "; whose content the records do not say (one overwrote the other)"
            else:
                notes.append(text)
                continue
            problems.append((sev, text, {**s, "environment": env.get("prefix")}))
            pip_owners = [o for o, k in zip((a, b), kinds) if k == "pip"]
            if "conda" in kinds and pip_owners:
                conda_owner = [o for o, k in zip((a, b), kinds) if k == "conda"][0]
                fixes.append(f"{_python(env)} uninstall -y {pip_owners[0]} && conda install -p {env.get('prefix')} "
                             f"--force-reinstall {conda_owner}")
            elif len(pip_owners) == 2:
                fixes.append(f"{_python(env)} uninstall -y {a} {b} && {_python(env)} install {_keep(a, b)}")
            else:
                fixes.append(f"conda install -p {env.get('prefix')} --force-reinstall {a} {b}")
    return _result(problems, fixes, notes, {"environments": looked},
                   "Keep one of the two: uninstall both, then install the one you want.",
                   "no environment's packages were read", f"no file has two owners in {len(looked)} environment(s)")


def _version(pk: Dict[str, Any], name: str, kind: str) -> str:
    table = (pk.get("conda") if kind == "conda" else pk.get("distributions")) or {}
    return str((table.get(name) or {}).get("version") or "")


def _keep(a: str, b: str) -> str:
    """The one to keep: the GPU build over the CPU one, the full over the headless, else the second named."""
    for want in ("-gpu", "-cuda", "-headless"):
        if a.endswith(want) != b.endswith(want):
            chosen = a if a.endswith(want) else b
            return chosen if want != "-headless" else (b if chosen == a else a)
    return b


@check(
    id="DLD-PKG-004", slug="installed-file-modified",
    title="The compiled files of each distribution are the ones its RECORD lists",
    problem="A package's compiled files are not the ones it installed",
    remedy="repair-software", drain=False,
    tags=("python", "packaging"), requires=("python_envs",), applies=(needs_packaging,),
    what="""Holds every shared object and extension module a wheel's RECORD lists against the file there now: its
    size (a stat, by default), its sha256 (with --deep). RECORD lines without a real hash and size are not judged.""",
    why="""A compiled file gone since the install (pip uninstalled another owner of a shared file, a manual clean-up)
    fails the import; one of another size or hash than its RECORD says was overwritten (by another distribution of
    the same module, a manual copy, a partial upgrade) or patched after the install (patchelf, strip): the import
    fails with undefined symbols, or loads another build. A missing file fails; a changed one warns.""",
    fix="""Reinstall the distribution named (pip install --force-reinstall --no-deps NAME==VERSION), after removing
    whatever else installs those files.""",
)
def installed_file_modified(facts: Facts) -> Result:
    problems: List[Tuple[str, str, Dict[str, Any]]] = []
    fixes: List[str] = []
    looked = []
    checked = 0
    for env in _envs(facts):
        pk = env["packaging"]
        integ = pk.get("integrity") or {}
        checked += int(integ.get("checked") or 0)
        looked.append(env.get("prefix"))
        by_dist: Dict[str, List[Dict[str, Any]]] = {}
        for m in pk.get("modified") or []:
            by_dist.setdefault(str(m.get("distribution")), []).append(m)
        for name, items in sorted(by_dist.items()):
            version = ((pk.get("distributions") or {}).get(name) or {}).get("version")
            said = []
            for m in items[:3]:
                rel = str(m.get("path")).rsplit("/site-packages/", 1)[-1]
                if m.get("missing"):
                    said.append(f"{rel} is missing")
                elif m.get("sha256") == "differs":
                    said.append(f"{rel} has another sha256 than RECORD's")
                else:
                    said.append(f"{rel} is {m.get('size')} bytes, RECORD says {m.get('recorded_size')}")
            more = f" and {len(items) - 3} more" if len(items) > 3 else ""
            text = f"{_label(env)}: {name} {version}: " + ", ".join(said) + more
            # a file gone cannot load; one of another size or hash was overwritten, or patched (patchelf, strip)
            sev = "fail" if any(m.get("missing") for m in items) else "warn"
            problems.append((sev, text, {"distribution": name, "version": version, "files": items[:20],
                                         "environment": env.get("prefix")}))
            fixes.append(f"{_python(env)} install --force-reinstall --no-deps '{name}=={version}'")
    if not looked:
        return skip("no environment's packages were read")
    if not checked and not problems:
        return skip("no compiled file had a RECORD line with a real hash and size to compare",
                    {"environments": looked})
    return _result(problems, fixes, [], {"environments": looked, "checked": checked},
                   "Reinstall the distributions whose compiled files changed.", "",
                   f"{checked} compiled file(s) match their RECORD in {len(looked)} environment(s)")
