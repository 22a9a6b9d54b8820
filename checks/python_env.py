"""Python environments and their framework stacks: builds, architectures, which CUDA libraries load,
companions, NumPy 2, the user site, CUDA_HOME/nvcc, RHEL 8 system Python."""

from __future__ import annotations

import shlex
from typing import Any, Dict, List, Optional, Tuple

from dl_doctor.checks.common import (consumers_with_loading, driver_version, first_heading, needs_nvidia_gpu,
                                     nvidia_gpus, os_family)
from dl_doctor import versions
from dl_doctor.checks.frameworks import needs_loading
from dl_doctor.facts.derive import torch_cpu_only
from dl_doctor.fixes import install, root_command
from dl_doctor.model import Facts, Fix, Result, check, fail, passed, skip, warn


def _envs(facts: Facts) -> List[Dict[str, Any]]:
    return [e for e in facts.get("python_envs.environments") or [] if not e.get("error")]


def _torch_envs(facts: Facts) -> List[Tuple[Dict[str, Any], Dict[str, Any]]]:
    return [(e, e["frameworks"]["torch"]) for e in _envs(facts) if (e.get("frameworks") or {}).get("torch")]


def _cpu_only(env: Dict[str, Any], torch: Dict[str, Any]) -> bool:
    """Whether the environment's torch is a CPU-only build: derived from its facts (dl_doctor.facts.derive), never
    the ``cpu_only`` an older facts file may still carry."""
    return torch_cpu_only(torch, env.get("conda_packages"))


def _label(env: Dict[str, Any]) -> str:
    return f"{env.get('name')} ({env.get('prefix')})"


def _pip_index(cuda: Optional[str]) -> str:
    return f"https://download.pytorch.org/whl/cu{cuda.replace('.', '')}" if cuda else "https://download.pytorch.org/whl/cpu"


def needs_torch(facts: Facts) -> Optional[str]:
    if facts.has("python_envs") and not _torch_envs(facts):
        return "no Python environment here has PyTorch"
    return None


def _best_variant(matrix, torch_version: str, driver: Optional[str]) -> Optional[str]:
    """The newest CUDA variant of this torch release that the driver supports fully."""
    info = matrix.torch(torch_version.split("+")[0]) if torch_version else None
    if not info:
        return None
    ok = [c for c in info["cuda_variants"] if not driver or matrix.driver_supports_cuda(driver, c)["support"] == "full"]
    return max(ok, key=versions.release) if ok else None


@check(
    id="DLD-PY-001", slug="cpu-only-framework-on-gpu-host", title="The framework build can use the GPUs",
    remedy="repair-software", drain=False,
    problem="A framework build cannot use the GPUs (CPU-only build)",
    tags=("python", "torch", "gpu"), requires=("python_envs",), applies=(needs_nvidia_gpu, needs_torch),
    what="""Reads each environment's torch build (torch/version.py: cuda = None, a +cpu version, conda's cpuonly or
    pytorch-mutex=cpu) on a host that has NVIDIA GPUs.""",
    why="""A CPU-only build installs and imports fine, then torch.cuda.is_available() is False and training runs on
    the CPU, hundreds of times slower. It happens when pip resolves torch from the CPU index, or conda picks the cpu
    variant.""",
    fix="""Reinstall the CUDA build for the driver: pip with the matching --index-url (cu121, cu124, cu126, ...), or
    conda without cpuonly and with pytorch-cuda.""",
)
def cpu_only(facts: Facts, matrix) -> Result:
    envs = _torch_envs(facts)
    cpu = [(e, t) for e, t in envs if _cpu_only(e, t)]
    cuda = [(e, t) for e, t in envs if not _cpu_only(e, t)]
    evidence: Dict[str, Any]
    evidence = {"cpu_only": [{"env": _label(e), "torch": t.get("version")} for e, t in cpu],
                "cuda_builds": [{"env": _label(e), "torch": t.get("version"), "cuda": t.get("cuda")} for e, t in cuda]}
    if not cpu:
        return passed("every PyTorch here is a CUDA build: " + ", ".join(f"{t.get('version')} in {e.get('name')}"
                                                                           for e, t in cuda), **evidence)
    e, t = cpu[0]
    variant = _best_variant(matrix, t.get("version") or "", driver_version(facts))
    base = (t.get("version") or "").split("+")[0]
    commands = [f"{e.get('prefix')}/bin/pip install --force-reinstall 'torch=={base}' --index-url {_pip_index(variant)}"]
    if e.get("kind") == "conda":
        commands = [f"conda remove -p {e.get('prefix')} cpuonly",
                    f"conda install -p {e.get('prefix')} pytorch pytorch-cuda={variant or '<cuda>'} -c pytorch -c nvidia"]
    fix = Fix(f"Install the CUDA {variant or ''} build of torch {base} in that environment.".replace("  ", " "),
              tuple(commands))
    names = ", ".join(f"{t.get('version')} in {_label(e)}" for e, t in cpu)
    if cuda:
        return warn(f"CPU-only PyTorch on a GPU host: {names} (other environments have CUDA builds)", evidence, fix)
    return fail(f"CPU-only PyTorch on a GPU host: {names}; torch.cuda.is_available() is False there", evidence, fix)


@check(
    id="DLD-PY-002", slug="framework-cuda-unusable", title="CUDA builds of the framework can reach a GPU",
    remedy="repair-software", drain=False,
    problem="A CUDA build of the framework cannot reach a GPU",
    tags=("python", "torch", "gpu"), requires=("python_envs",), applies=(needs_torch,),
    what="""For each CUDA build of torch, says whether it can use a GPU here and, if not, why: no NVIDIA GPU, no
    driver loaded, no libcuda, or (with --deep) the exact error torch.cuda.is_available() swallowed.""",
    why="""torch.cuda.is_available() just returns False; the reason (no driver, a container started without --gpus,
    a driver too old) is hidden in a warning most people never see, and training quietly runs on the CPU.""",
    fix="""Fix the reason named: load or install the NVIDIA driver, start the container with --gpus, or install a
    build for the CUDA version the driver supports.""",
)
def cuda_unusable(facts: Facts) -> Result:
    builds = [(e, t) for e, t in _torch_envs(facts) if not _cpu_only(e, t)]
    if not builds:
        return skip("no CUDA build of torch here")
    gpus = facts.get("gpu_pci.gpu_count")
    loaded = facts.get("nvidia_driver.kernel_module.loaded")
    libcuda = [l for l in facts.get("nvidia_driver.userspace.libraries") or [] if l.get("library") == "libcuda"]
    names = ", ".join(f"torch {t.get('version')} in {_label(e)}" for e, t in builds)
    evidence = {"builds": [{"env": _label(e), "torch": t.get("version"), "cuda": t.get("cuda"),
                            "deep": {k: (e.get("deep") or {}).get(k) for k in ("cuda_available", "device_count",
                                                                               "cuda_error", "import_error")}}
                           for e, t in builds], "gpu_pci.gpu_count": gpus, "driver_loaded": loaded,
                "libcuda": [l["path"] for l in libcuda]}
    if gpus == 0:
        # A CUDA build on a GPU-less host is deliberate far more often than not (image builds, CI, a CPU node of a
        # shared environment): it runs on the CPU there and needs nothing; the check has no GPU to judge it against.
        reason = "no NVIDIA GPU on the PCI bus" + ("" if libcuda else " and no NVIDIA driver (no libcuda.so)")
        return skip(f"{reason}: {names} is a CUDA build and runs on the CPU here (torch.cuda.is_available() is "
                    f"False); normal on a build host, in CI or on a CPU node", **evidence)
    if loaded is False or (gpus and not libcuda and facts.get("nvidia_driver.userspace") is not None):
        what = "the nvidia kernel module is not loaded" if loaded is False else "no libcuda.so (driver user space)"
        return fail(f"{names}: {what}, so these CUDA builds cannot use the {gpus} GPU(s) (see DLD-GPU-001)", evidence,
                    Fix("Get the NVIDIA driver loaded first.", ("nvidia-smi", "dl-doctor explain DLD-GPU-001")))
    broken = [(e, t) for e, t in builds if (e.get("deep") or {}).get("cuda_available") is False
              or (e.get("deep") or {}).get("import_error")]
    if broken:
        e, t = broken[0]
        deep = e.get("deep") or {}
        why = deep.get("import_error") or deep.get("cuda_error") or (deep.get("stderr_tail") or "").splitlines()[-1:] or             ["torch.cuda.is_available() returned False"]
        why = why if isinstance(why, str) else why[0]
        return fail(f"torch {t.get('version')} in {_label(e)} cannot use the GPUs: {why}", evidence,
                    Fix("Address the error torch reports.", (f"{e.get('python') or 'python'} -c 'import torch; "
                                                             f"print(torch.cuda.is_available())'",)))
    checked = [e for e, _ in builds if (e.get("deep") or {}).get("cuda_available")]
    how = "torch.cuda.is_available() is True (--deep)" if checked else "driver loaded and libcuda present"
    return passed(f"{names}: {how}", **evidence)


def _arch_entries(env: Dict[str, Any], torch: Dict[str, Any], matrix) -> Tuple[Optional[List[str]], str, bool]:
    """(entries like '8.0' / '9.0+PTX', where they came from, verified): torch.cuda.get_arch_list() (--deep), the
    .nv_fatbin of the wheel's libtorch_cuda (its own code), else the matrix's arch list for its release."""
    deep = env.get("deep") or {}
    if deep.get("arch_list"):
        out = []
        for a in deep["arch_list"]:
            cc = _cc_of(a)
            if cc:
                out.append(cc + ("+PTX" if str(a).startswith("compute_") else ""))
        return out, "torch.cuda.get_arch_list() (--deep)", True
    code = _device_code_entries(torch.get("device_code"))
    if code:
        return code
    variant = matrix.torch_variant(torch.get("version") or "", torch.get("cuda"))
    if variant and variant.get("arch_list"):
        return variant["arch_list"], f"compatibility matrix (torch {torch.get('version')})", \
            "arch_list" not in (variant.get("unverified") or [])
    return None, "unknown", False


def _cc_of(entry: Any) -> Optional[str]:
    """'sm_86' / 'compute_90' / 'sm_90a' / 86 / 120 -> '8.6' / '9.0' / '9.0a' / '8.6' / '12.0' (None: not an arch)."""
    text = str(entry)
    num = text.split("_", 1)[-1]
    suffix = ""
    if num[-1:].isalpha():
        num, suffix = num[:-1], num[-1]
    if not num.isdigit() or not 2 <= len(num) <= 3:
        return None
    return f"{num[:-1]}.{num[-1]}{suffix}"


def _device_code_entries(code: Optional[Dict[str, Any]]) -> Optional[Tuple[List[str], str, bool]]:
    """A build's own .nv_fatbin (python_envs device_code) as arch entries: SASS 'X.Y', PTX 'X.Y+PTX'. A walk that
    stopped early is a lower bound: it can show code for a GPU, never prove there is none (verified False)."""
    if not isinstance(code, dict) or not (code.get("sass") or code.get("ptx")):
        return None
    out = [c for c in (_cc_of(a) for a in code.get("sass") or []) if c]
    out += [c + "+PTX" for c in (_cc_of(a) for a in code.get("ptx") or []) if c]
    objects = ", ".join(str(o).rsplit("/", 1)[-1] for o in (code.get("objects") or [])[:3]) or "its objects"
    return out, f"the .nv_fatbin of {objects}", bool(code.get("complete"))


def _build_info_entries(build: Optional[Dict[str, Any]]) -> Optional[Tuple[List[str], str, bool]]:
    """A framework's own build-information arch list (TensorFlow's cuda_compute_capabilities: 'sm_80',
    'compute_90')."""
    items = (build or {}).get("arch_list")
    if not isinstance(items, list) or not items:
        return None
    out = []
    for a in items:
        cc = _cc_of(a)
        if cc:
            out.append(cc + ("+PTX" if str(a).startswith("compute_") else ""))
    return (out, f"its build information ({(build or {}).get('from')})", True) if out else None


def runs_on(cc: str, entries: List[str]) -> bool:
    """A cubin runs on the same major with minor >= its own; PTX is JIT-compiled for any newer GPU."""
    return _code_for(cc, entries) is not None


def _code_for(cc: str, entries: List[str]) -> Optional[str]:
    """What runs on a GPU of compute capability ``cc`` (NVIDIA's CUDA binary compatibility rule: a cubin for sm_XY runs
    on sm_XZ with Z >= Y, the same major; an arch-specific one, sm_90a, only on its own; PTX for compute_XY is
    JIT-compiled by the driver for any GPU of capability >= X.Y): 'sass', 'ptx', or None (nothing)."""
    want = versions.release(cc.rstrip("abcdefghijklmnopqrstuvwxyz"))[:2]
    if len(want) < 2:
        return None
    ptx = False
    for e in entries:
        base = e.replace("+PTX", "")
        plain = base.rstrip("abcdefghijklmnopqrstuvwxyz")
        have = versions.release(plain)[:2]
        if len(have) < 2:
            continue
        if (have == want) if base != plain else (have[0] == want[0] and have[1] <= want[1]):
            return "sass"
        if e.endswith("+PTX") and base == plain and have <= want:
            ptx = True
    return "ptx" if ptx else None


def gpu_capabilities(facts: Facts, matrix) -> Dict[str, str]:
    """GPU name -> compute capability: what NVML reports for each device, else the matrix's entry for its PCI ID."""
    out: Dict[str, str] = {}
    for d in facts.get("nvml.devices") or []:
        cc = d.get("compute_capability")
        if d.get("name") and isinstance(cc, str) and _cc_of(cc.replace(".", "")):
            out[str(d["name"])] = cc
    if out:
        return out
    for g in nvidia_gpus(facts):
        entry = matrix.gpu_by_pci(g.get("device_id") or "")
        if entry and entry.get("compute_capability"):
            out[entry["name"]] = entry["compute_capability"]
    return out


def _cuda_builds(facts: Facts, matrix) -> List[Tuple[Dict[str, Any], str, Optional[Tuple[List[str], str, bool]]]]:
    """(environment, 'what', (arch entries, source, verified) or None) for every CUDA build of every environment:
    torch, and every other CUDA consumer whose own files say what it carries (its .nv_fatbin, its build info)."""
    out: List[Tuple[Dict[str, Any], str, Optional[Tuple[List[str], str, bool]]]] = []
    for env in _envs(facts):
        t = (env.get("frameworks") or {}).get("torch")
        if t and not _cpu_only(env, t):
            entries, source, verified = _arch_entries(env, t, matrix)
            out.append((env, f"torch {t.get('version')}", (entries, source, verified) if entries is not None else None))
        for c in env.get("consumers") or []:
            if c.get("distribution") == "torch":
                continue
            arch = _device_code_entries(c.get("device_code")) or _build_info_entries(c.get("build"))
            if arch:
                out.append((env, f"{c['distribution']} {c.get('version') or ''}".strip(), arch))
    return out


def needs_cuda_build(facts: Facts) -> Optional[str]:
    if facts.has("python_envs") and not any(
            ((e.get("frameworks") or {}).get("torch") and not _cpu_only(e, e["frameworks"]["torch"]))
            or e.get("consumers") for e in _envs(facts)):
        return "no Python environment here has a CUDA build of a framework"
    return None


def _sm(cc: str) -> str:
    return "sm_" + cc.replace(".", "")


def _entry_names(entries: List[str]) -> str:
    return ", ".join(("compute_" if e.endswith("+PTX") else "sm_") + e.replace("+PTX", "").replace(".", "")
                     for e in entries)


@check(
    id="DLD-PY-003", slug="gpu-arch-missing-from-build", title="The framework build has code for these GPUs",
    remedy="repair-software", drain=False,
    problem="A framework build has no code for these GPUs",
    tags=("python", "torch", "gpu", "cuda"), requires=("python_envs", "gpu_pci"),
    applies=(needs_nvidia_gpu, needs_cuda_build),
    what="""Holds each GPU's compute capability (NVML, else PCI ID -> matrix) against the GPU code each CUDA build
    carries: torch.cuda.get_arch_list() with --deep; else the build's own files — the .nv_fatbin sections of its CUDA
    objects (torch's libtorch_cuda, a compiled extension's, CuPy's, vLLM's: what cuobjdump lists), TensorFlow's
    build_info cuda_compute_capabilities —; else, for torch, the matrix's arch list for that release and variant.
    NVIDIA's binary compatibility rule decides: a cubin for sm_XY runs on the same major at minor >= Y; PTX for
    compute_XY is JIT-compiled by the driver for any GPU >= X.Y.""",
    why="""A build without SASS for the GPU's architecture, and without PTX the driver could compile, fails at the
    first kernel with 'CUDA error: no kernel image is available for execution on the device' (torch for CUDA 10.2 on
    an RTX 3090, a build without sm_120 on an RTX 5090, a cu128 wheel or vLLM on a Pascal GPU). A build that has only
    PTX for the GPU runs after the driver JIT-compiles it (a delay at first use, cached after).""",
    fix="""Install a build whose arch list covers the GPU: a newer CUDA variant for new GPUs (sm_90 needs cu118+,
    sm_100/sm_120 need cu128+), an older one (cu126) for Maxwell, Pascal and, from 2.11, Volta; a source build
    (TORCH_CUDA_ARCH_LIST) for what no wheel carries.""",
)
def arch_missing(facts: Facts, matrix) -> Result:
    gpus = gpu_capabilities(facts, matrix)
    if not gpus:
        return skip("the GPUs' compute capabilities are not known (not in NVML's facts nor in the matrix)")
    problems: List[str] = []
    weak: List[str] = []
    notes: List[str] = []
    heads: List[str] = []
    unknown: List[str] = []
    ok: List[str] = []
    failing: List[str] = []
    evidence: Dict[str, Any] = {"gpus": gpus, "unknown_arch_lists": unknown, "builds": []}
    for env, what, arch in _cuda_builds(facts, matrix):
        if arch is None:
            unknown.append(f"{what} in {_label(env)}")
            continue
        entries, source, verified = arch
        evidence["builds"].append({"environment": env.get("prefix"), "build": what, "arch_list": entries,
                                   "source": source, "verified": verified})
        for name, cc in gpus.items():
            code = _code_for(cc, entries)
            if code == "sass":
                ok.append(f"{what} has SASS for {name} ({_sm(cc)})")
            elif code == "ptx":
                notes.append(f"{what} in {_label(env)} has only PTX for {name} ({_sm(cc)}): the driver JIT-compiles "
                             f"it at first use (a delay, then cached)")
            else:
                failing.append(what)
                row = (f"{what} in {_label(env)} has no code for {name} (compute capability {cc}, {_sm(cc)}): it "
                       f"carries {_entry_names(entries) or 'nothing'} per {source}, no SASS of major {cc.split('.')[0]} "
                       f"at or below {cc} and no PTX at or below it")
                (problems if verified else weak).append(row)
                heads.append(f"{what} has no code for {name} ({_sm(cc)})")
    archs = ";".join(sorted({cc for cc in gpus.values()}))
    others = sorted({w.split(" ")[0] for w in failing if not w.startswith("torch ")})
    torch_steps = ("dl-doctor matrix torch <version>   # arch_list per CUDA variant",
                   "pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/cu<XY>")
    rebuild = tuple(f"TORCH_CUDA_ARCH_LIST=\"{archs}\" pip install --no-build-isolation --no-binary {d} "
                    f"--force-reinstall {d}   # build it from source for this GPU" for d in others[:3])
    if others and len(others) == len(set(failing)):
        fix = Fix("Rebuild the extension for this GPU's architecture (its wheel has no code for it).", rebuild)
    else:
        fix = Fix("Install a build whose architectures cover this GPU.",
                  torch_steps + (rebuild or ("# a compiled extension: rebuild it for this GPU, e.g. TORCH_CUDA_ARCH_LIST="
                                             f"\"{archs}\" pip install --no-build-isolation <package>",)))
    if problems:
        return fail("; ".join(problems) + ": 'no kernel image is available for execution on the device'", evidence,
                    fix, headline=first_heading(heads, len(problems)))
    if weak:
        return warn("; ".join(weak) + " (the arch list is not verified: the matrix's, or a partial read of the "
                    "build's code; run with --deep to read it)", evidence, fix)
    if not ok and not notes:
        return skip("no CUDA build here with a known arch list", **evidence)
    return passed("; ".join(dict.fromkeys(ok + notes)), **evidence)


@check(
    id="DLD-PY-004", slug="cuda-library-shadowed",
    remedy="fix-configuration", drain=False,
    problem="A framework loads another copy of a CUDA library than its own, and that copy does not serve its build",
    title="The CUDA libraries that load serve each framework's build (cuDNN, NCCL, cuBLAS, cudart, nvJitLink, ...)",
    tags=("python", "torch", "cuda", "ldpath"), requires=("python_envs",), applies=(needs_loading,),
    what="""Reads the one resolution model (dl_doctor.facts.loading: glibc's search replayed on the recorded loader
    inputs after the framework's own preloading; with --deep, what /proc/self/maps showed wins) and, for every
    library that loads from another copy than the environment's own (nvidia-* wheels), its verdict: whether that
    copy serves the build, judged by what the loader and the library need (docs/frameworks.md) — the soname, every
    symbol version the consumer needs, the library family's runtime rule (cuDNN: the same major and a minor not below
    the build's), and versions compared only within one numbering scheme. A copy that serves passes with a note; an
    older copy of a family that keeps its ABI only forwards warns; one the rule refuses fails.""",
    why="""When LD_LIBRARY_PATH (or an RPATH-less library) lets an older system copy win, the framework fails at
    import or at the first call: 'undefined symbol: __nvJitLinkComplete_12_4', 'cuDNN version incompatibility',
    NCCL errors that only appear on some nodes. A newer copy of the same soname, or one whose version is counted in
    another scheme (NVTX's file libnvToolsExt.so.1.0.0 beside the wheel 12.4.99), serves and is not a problem.""",
    fix="""Remove the CUDA directories from LD_LIBRARY_PATH for this environment (or put the environment's first), and
    uninstall stray nvidia-*-cu11 wheels next to cu12 ones.""",
)
def library_shadowed(facts: Facts, matrix) -> Result:
    failing, older, notes, mixed = [], [], [], []
    heads: List[str] = []
    older_heads: List[str] = []
    searched: List[Dict[str, Any]] = []
    checked: List[str] = []
    stray: List[Tuple[Dict[str, Any], str]] = []
    for env, c in consumers_with_loading(facts, matrix):
        for lib in c.get("libraries") or []:
            checked.append(lib["soname"])
            own = lib.get("env_copy")
            verdict = lib.get("verdict")
            if not own or verdict in ("own", None) or lib.get("rule") == "cuda-major":
                continue  # the environment's own copy; another major is DLD-PY-012's
            text = (f"{c['distribution']} in {_label(env)}: {lib['soname']} loads from {lib['path']} "
                    f"(found via {lib.get('via')}), not the environment's own {own.get('path')}: {lib.get('reason')}")
            name = env.get("name") or _label(env)
            have = lib.get("version") or "of an unknown version"
            mine = own.get("version") or own.get("wheel_version") or "copy"
            if verdict in ("fails", "older"):
                searched.append({"environment": env.get("prefix"), "distribution": c["distribution"],
                                 "soname": lib["soname"], "loads": lib["path"], "via": lib.get("via"),
                                 "own": own.get("path"), "rule": lib.get("rule"), "search_order": lib.get("searched")})
            if verdict == "fails":
                failing.append(text)
                heads.append(f"{c['distribution']} in {name} loads {lib['soname']} {have} via {lib.get('via')}, "
                             f"not its own {mine}")
            elif verdict == "older":
                older.append(text)
                older_heads.append(f"{c['distribution']} in {name} loads an older {lib['soname']} ({have} via "
                                   f"{lib.get('via')}) than its own {mine}")
            else:
                notes.append(text)
    for env, t in _torch_envs(facts):
        dists = env.get("distributions") or {}
        major = (t.get("cuda") or "").split(".")[0]
        for lib in ("nccl", "cudnn", "cublas", "cuda-runtime"):
            flavours = sorted(k for k in dists if k.startswith(f"nvidia-{lib}-cu"))
            if len(flavours) > 1:
                mixed.append(f"{_label(env)}: {', '.join(flavours)}")
                stray += [(env, k) for k in flavours if major and not k.endswith(f"-cu{major}")]
    evidence: Dict[str, Any]
    heads += older_heads  # the worst first: a copy a rule refuses before an older one
    evidence = {"problems": failing + older, "loads": searched, "other_copies_that_serve": notes,
                "mixed_wheels": mixed,
                "LD_LIBRARY_PATH": (facts.get("environment.variables") or {}).get("LD_LIBRARY_PATH")}
    # only wheels that are installed, of another CUDA major than the environment's torch, are named for removal
    uninstall = [f"{env.get('python') or 'python'} -m pip uninstall -y {' '.join(n for e, n in stray if e is env)}"
                 for env in {id(e): e for e, _ in stray}.values()]
    fix = Fix("Let the environment's own CUDA libraries load: keep other CUDA directories off LD_LIBRARY_PATH.",
              ("echo $LD_LIBRARY_PATH", "unset LD_LIBRARY_PATH   # or drop the /usr/local/cuda*/lib64 entries from it",
               *uninstall))
    side_by_side = ("; CUDA library wheels of two CUDA majors side by side: " + "; ".join(mixed)) if mixed else ""
    if failing:
        return fail("; ".join(failing + older) + side_by_side, evidence, fix,
                    headline=first_heading(heads, len(failing + older)))
    if older:
        return warn("an older copy than the environment's own loads (it may lack symbols the build uses; --deep "
                    "loads it for real): " + "; ".join(older) + side_by_side, evidence, fix,
                    headline=first_heading(heads))
    if not checked:
        return skip("no CUDA library of a consumer here was resolved", **evidence)
    message = f"every CUDA library that loads serves its framework's build ({len(set(checked))} checked)"
    if notes:
        message += "; other copies than the environment's own load and serve: " + "; ".join(notes[:4]) + (
            f" (and {len(notes) - 4} more)" if len(notes) > 4 else "")
    if mixed:
        message += "; CUDA library wheels of two CUDA majors side by side (the right one loads): " + "; ".join(mixed)
    return passed(message, **evidence)


@check(
    id="DLD-PY-005", slug="torchvision-mismatch", title="torchvision and torchaudio match the installed torch",
    remedy="repair-software", drain=False,
    problem="torchvision or torchaudio does not match torch",
    tags=("python", "torch"), requires=("python_envs",), applies=(needs_torch,),
    what="""Holds torchvision's and torchaudio's versions against the companions the matrix lists for the installed
    torch, and torchvision's CUDA variant against torch's.""",
    why="""torchvision is built against one torch release; with another it fails at import with 'operator
    torchvision::nms does not exist' or undefined symbols, typically after 'pip install -U torch' alone.""",
    fix="""Install the matching pair in one command (pip install torch==X torchvision==Y from the same index).""",
)
def torchvision_mismatch(facts: Facts, matrix) -> Result:
    problems, ok = [], []
    for env, t in _torch_envs(facts):
        fw = env.get("frameworks") or {}
        info = matrix.torch((t.get("version") or "").split("+")[0])
        for comp in ("torchvision", "torchaudio"):
            have = fw.get(comp)
            if not have:
                continue
            want = (info or {}).get(comp)
            if want and versions.release(have.get("version"))[:2] != versions.release(want)[:2]:
                problems.append(f"{_label(env)}: {comp} {have.get('version')} was built for another torch; torch "
                                f"{t.get('version')} needs {comp} {want}")
            elif comp == "torchvision" and have.get("cuda") != t.get("cuda") and have.get("cuda") is not None \
                    and t.get("cuda") is not None:
                problems.append(f"{_label(env)}: torchvision is a CUDA {have.get('cuda')} build, torch a CUDA "
                                f"{t.get('cuda')} build")
            elif want:
                ok.append(f"{comp} {have.get('version')} with torch {t.get('version')}")
    evidence: Dict[str, Any] = {"problems": problems}
    if problems:
        env, t = _torch_envs(facts)[0]
        info = matrix.torch((t.get("version") or "").split("+")[0]) or {}
        base = (t.get("version") or "").split("+")[0]
        return fail("; ".join(problems), evidence,
                    Fix("Install torch and its companions together, from the same index.",
                        (f"pip install 'torch=={base}' 'torchvision=={info.get('torchvision')}' "
                         f"'torchaudio=={info.get('torchaudio')}' --index-url {_pip_index(t.get('cuda'))}",)))
    if not ok:
        return skip("no torchvision or torchaudio installed next to a torch the matrix knows")
    return passed("; ".join(ok), **evidence)


@check(
    id="DLD-PY-006", slug="numpy2-with-old-torch", title="NumPy is a version the installed torch was built for",
    remedy="repair-software", drain=False,
    problem="NumPy is a version torch was not built for",
    tags=("python", "torch", "numpy"), requires=("python_envs",), applies=(needs_torch,),
    what="Holds NumPy's major version against the matrix's NumPy 2 boundary for the installed torch release.",
    why="""torch releases before 2.3 were compiled against NumPy 1.x: with NumPy 2 they print 'A module that was
    compiled using NumPy 1.x cannot be run in NumPy 2' and tensor.numpy() raises 'Numpy is not available'.""",
    fix="Pin numpy<2 in that environment, or upgrade torch to 2.3 or later.",
)
def numpy2(facts: Facts, matrix) -> Result:
    problems, ok = [], []
    for env, t in _torch_envs(facts):
        np = ((env.get("frameworks") or {}).get("numpy") or {}).get("version")
        info = matrix.torch((t.get("version") or "").split("+")[0])
        if not np or not info:
            continue
        if versions.release(np)[:1] >= (2,) and info.get("numpy2") is False:
            problems.append(f"{_label(env)}: numpy {np} with torch {t.get('version')}")
        else:
            ok.append(f"numpy {np} with torch {t.get('version')}")
    evidence: Dict[str, Any] = {"problems": problems}
    if problems:
        # The boundary itself is marked unverified in the matrix: a warning, not a failure.
        return warn("NumPy 2 under a torch built for NumPy 1.x: " + "; ".join(problems), evidence,
                    Fix("Pin NumPy 1.x (or upgrade torch to 2.3+).", ("pip install 'numpy<2'",)))
    if not ok:
        return skip("no environment has both numpy and a torch the matrix knows")
    return passed("; ".join(ok), **evidence)


@check(
    id="DLD-PY-007", slug="user-site-shadows-env", title="The user site does not shadow an environment's packages",
    remedy="fix-configuration", drain=False,
    problem="The user site shadows an environment's packages",
    tags=("python", "environment"), requires=("python_envs",),
    what="""For each environment whose interpreter enables the user site (~/.local/lib/pythonX.Y/site-packages) and
    puts it before the environment's own site-packages on sys.path, lists the packages installed in both.""",
    why="""A 'pip install --user' (or a pip run outside any environment) puts packages into the user site, which conda
    environments and system Pythons search first: the environment's torch or numpy is silently replaced by another
    version, so a carefully built environment imports the wrong one.""",
    fix="""Remove the user-site copies (pip uninstall --user ...) or start Python with PYTHONNOUSERSITE=1 (conda:
    conda env config vars set PYTHONNOUSERSITE=1).""",
)
def user_site(facts: Facts) -> Result:
    envs = _envs(facts)
    user_sites = {e["prefix"] + "/site-packages": e for e in envs if e.get("kind") == "user-site"}
    problems, checked = [], 0
    for env in envs:
        live = env.get("live") or {}
        us = live.get("user_site")
        if not live or not live.get("user_site_enabled") or not us or us not in live.get("sys_path", []):
            continue
        checked += 1
        own = env.get("site_packages") or []
        path = live["sys_path"]
        first_own = min((path.index(s) for s in own if s in path), default=len(path))
        if path.index(us) > first_own:
            continue
        user = user_sites.get(us) or {}
        overlap = sorted(set(user.get("distributions") or {}) & set(env.get("distributions") or {}))
        if overlap:
            both = ", ".join(f"{n} {user['distributions'][n]} (user) over {env['distributions'][n]}" for n in overlap[:8])
            problems.append(f"{_label(env)}: {both}")
    evidence: Dict[str, Any] = {"problems": problems, "environments_checked": checked}
    if problems:
        return fail("packages in the user site shadow the environment's own: " + "; ".join(problems), evidence,
                    Fix("Remove the user-site copies, or disable the user site for that environment.",
                        ("python -m pip uninstall --user <package>", "export PYTHONNOUSERSITE=1")))
    if not checked:
        return skip("no live interpreter with the user site enabled was inspected")
    return passed(f"no user-site package shadows an environment's ({checked} interpreter(s) checked)", **evidence)


@check(
    id="DLD-PY-008", slug="cuda-home-mismatch",
    remedy="fix-configuration", drain=False,
    problem="CUDA_HOME, nvcc and /usr/local/cuda disagree",
    title="CUDA_HOME, nvcc and /usr/local/cuda agree with each other and with the framework's CUDA",
    tags=("cuda", "python", "build"), requires=("cuda_toolkits",),
    what="""Compares the CUDA version of CUDA_HOME, of the nvcc first on PATH and of the /usr/local/cuda link, and
    holds them against the CUDA major of each torch build found.""",
    why="""Building CUDA extensions (DeepSpeed ops, apex, flash-attn, custom kernels) uses CUDA_HOME or nvcc and checks
    it against torch.version.cuda: 'The detected CUDA version (11.8) mismatches the version that was used to compile
    PyTorch (12.1)', or a silent build against the wrong headers.""",
    fix="""Point CUDA_HOME and PATH at the toolkit whose major matches the framework build (and move the
    /usr/local/cuda link), or install that toolkit.""",
)
def cuda_home(facts: Facts) -> Result:
    toolkits = {t["path"]: t.get("version") for t in facts.get("cuda_toolkits.toolkits") or []}
    default = facts.get("cuda_toolkits.default") or {}
    home = facts.get("cuda_toolkits.cuda_home")
    nvcc = facts.get("cuda_toolkits.nvcc_on_path")

    def version_at(path: Optional[str]) -> Optional[str]:
        if not path:
            return None
        for root, v in toolkits.items():
            if path == root or path.startswith(root.rstrip("/") + "/"):
                return v
        return None

    seen = {"CUDA_HOME": (home, version_at(home)), "nvcc on PATH": (nvcc, version_at(nvcc)),
            "/usr/local/cuda": (default.get("target"), default.get("version"))}
    known = {k: v for k, v in seen.items() if v[1]}
    evidence: Dict[str, Any] = {k: {"path": p, "version": v} for k, (p, v) in seen.items()}
    if not toolkits:
        return skip("no CUDA toolkit is installed", **evidence)
    problems = []
    majors = {k: versions.release(v)[:2] for k, (_, v) in known.items()}
    if len(set(majors.values())) > 1:
        problems.append("they disagree: " + ", ".join(f"{k} -> CUDA {v}" for k, (_, v) in known.items()))
    fw = [(e, t) for e, t in _torch_envs(facts) if t.get("cuda")]
    build_tool = known.get("CUDA_HOME") or known.get("nvcc on PATH") or known.get("/usr/local/cuda")
    for env, t in fw:
        if build_tool and versions.release(build_tool[1])[:1] != versions.release(t["cuda"])[:1]:
            problems.append(f"torch {t.get('version')} in {_label(env)} is a CUDA {t['cuda']} build but extensions "
                            f"would build with CUDA {build_tool[1]} ({build_tool[0]})")
    if problems:
        want = fw[0][1]["cuda"] if fw else None
        match = next((p for p, v in toolkits.items() if want and versions.release(v)[:1] == versions.release(want)[:1]), None)
        commands = ([f"export CUDA_HOME={match}", f"export PATH={match}/bin:$PATH",
                     root_command(f"ln -sfn {shlex.quote(match)} /usr/local/cuda")] if match else
                    [f"# install a CUDA {want} toolkit, then point CUDA_HOME and PATH at it"])
        return warn("; ".join(problems), evidence, Fix("Make CUDA_HOME, nvcc and the framework agree.", tuple(commands)))
    summary = ", ".join(f"{k} = CUDA {v}" for k, (_, v) in known.items()) or "only one toolkit, not on PATH"
    return passed(summary, **evidence)


@check(
    id="DLD-PY-010", slug="rhel8-system-python-polluted", title="RHEL 8's system Python is left to RPM",
    remedy="repair-software", drain=False,
    problem="pip changed RHEL 8's system Python",
    tags=("python", "rhel"), requires=("python_envs", "os"),
    what="""On RHEL 8 (and rebuilds), looks for distributions pip installed into the platform Python's directories:
    RPM-owned site-packages with INSTALLER=pip, packages under /usr/local/lib*/python3.6/site-packages (sudo pip3)
    that shadow RPM-owned modules, and a pip on PATH that belongs to the system Python.""",
    why="""dnf and yum run on /usr/libexec/platform-python. 'sudo pip3 install' puts newer requests, urllib3, six or
    python-dateutil into /usr/local/lib/python3.6/site-packages, which that interpreter imports first; dnf then
    breaks with ImportError or version conflicts, and the system cannot be updated.""",
    fix="""Remove what pip put into the system directories (sudo pip3 uninstall ..., then dnf reinstall the RPMs it
    shadowed) and use conda environments or venvs for ML work.""",
)
def rhel8_system_python(facts: Facts, matrix) -> Result:
    if os_family(facts) != "rhel" or not str(facts.get("os.version_id") or "").startswith("8"):
        return skip("not RHEL 8 (or a rebuild)")
    sp = next((e for e in matrix.entries("system_python") if e["os"] == "rhel8"), None)
    if sp is None:
        return skip("the matrix has no RHEL 8 system Python entry")
    rpm_dirs, pip_dirs = set(sp["rpm_dirs"]), set(sp["pip_install_dirs"])
    rpm_owned: Dict[str, Dict[str, Any]] = {}
    local: Dict[str, Dict[str, Any]] = {}
    for env in _envs(facts):
        for site, dists in (env.get("site_distributions") or {}).items():
            if site in rpm_dirs:
                rpm_owned.update(dists)
            elif site in pip_dirs:
                local.update(dists)
    overwritten = sorted(n for n, d in rpm_owned.items() if (d.get("installer") or "").lower() == "pip")
    shadowing = sorted(n for n in local if n in rpm_owned)
    pip_path = facts.get("python_envs.pip_on_path")
    pip_entry = next((p for p in facts.get("python_envs.pip_commands") or [] if p["path"] == pip_path), None)
    system_pip = bool(pip_entry and (pip_entry.get("shebang") or "").startswith(("/usr/bin/python3",
                                                                                 "/usr/libexec/platform-python")))
    evidence: Dict[str, Any]
    evidence = {"rpm_dirs_written_by_pip": overwritten, "usr_local_shadowing_rpm": shadowing,
                "usr_local_packages": sorted(local), "pip_on_path": pip_entry}
    fix = Fix("Take pip's files out of the system Python and reinstall the RPMs.",
              tuple([root_command("pip3 uninstall -y "
                                  + " ".join(map(shlex.quote, shadowing or overwritten or sorted(local))))] +
                    [install(*(f"python3-{n}" for n in (shadowing or overwritten)), manager="dnf", reinstall=True)]
                    if (shadowing or overwritten) else []) +
              ("dnf --version   # check that dnf runs again",))
    if overwritten or shadowing:
        parts = []
        if shadowing:
            parts.append(f"pip-installed copies in /usr/local shadow RPM-owned modules: {', '.join(shadowing)}")
        if overwritten:
            parts.append(f"pip overwrote RPM-owned packages: {', '.join(overwritten)}")
        return fail("; ".join(parts) + " (dnf/yum run on this interpreter)", evidence, fix)
    if local or system_pip:
        parts = []
        if local:
            parts.append(f"sudo pip installed into the system Python: {', '.join(sorted(local)[:10])}")
        if system_pip:
            parts.append(f"'pip' on PATH ({pip_path}) belongs to the system Python")
        return warn("; ".join(parts), evidence, Fix("Use a conda environment or venv instead of the system Python.",
                                                    ("python3 -m venv ~/venvs/ml && . ~/venvs/ml/bin/activate",)))
    return passed("the system Python's directories hold only RPM-installed packages", **evidence)


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else "?"


def _owner_label(owner: Dict[str, Any]) -> str:
    uid = owner.get("uid")
    return "root and the system" if uid == 0 else f"uid {uid} ({owner.get('where') or '?'})"


def _discovery_cuts(discovery: Dict[str, Any]) -> Tuple[List[str], List[str], List[str]]:
    """What discovery could not look at (the time ran out, an entry cap), what --env-limit left out, and where the
    search for virtual environments stopped early: one phrase per owner."""
    unseen, limited, walk = [], [], []
    for owner in [o for o in discovery.get("owners") or [] if isinstance(o, dict)][:64]:
        label, reason = _owner_label(owner), owner.get("cut_reason")
        found, kept = _count(owner.get("found")), _count(owner.get("kept"))
        if reason == "time":
            unseen.append(f"{label}: the discovery time ran out before all of it was looked at "
                          f"({kept} of the {found} environments found so far kept)")
        elif reason == "entry cap":
            unseen.append(f"{label}: stopped after {_count(discovery.get('entry_cap'))} directory entries, in "
                          f"{owner.get('cut_at') or '?'} ({kept} of the {found} environments found so far kept)")
        elif reason == "env-limit share":
            limited.append(f"{label} {kept} of {found}")
        if owner.get("venv_search_cut_at"):
            walk.append(str(owner["venv_search_cut_at"]))
    return unseen, limited, walk


@check(
    id="DLD-PY-015", slug="environments-not-all-looked-at", title="Every Python environment on the host was looked at",
    remedy="none", drain=False,
    problem="Some Python environments were not looked at",
    tags=("python", "environment", "security"), requires=("python_envs.discovery",),
    what="""Reads what environment discovery did per owner (python_envs.discovery): root's and the system's
    environments are looked at first, then the session's active ones, then other users' in turn, each user within a
    budget of directory entries and a share of the time and of --env-limit. Warns when an owner's environments were
    cut by that budget or by the time, or when environments found were not inspected before the probe's time ran
    out; environments left out by --env-limit alone are named in the passing message.""",
    why="""The checks of Python environments judge only the environments the report lists. A directory with tens of
    thousands of entries (another user's ~/.conda/envs, by mistake or to blind the report) or a slow network home
    would otherwise cost the time of every environment, root's included; now it costs only that owner's, and this
    says which ones were not looked at, so a clean report is not mistaken for a complete one.""",
    fix="""Look at what fills the directory named (remove what is not an environment), then run again with a longer
    --timeout or a larger --env-limit to look at the rest.""",
)
def environments_looked_at(facts: Facts) -> Result:
    discovery = facts.get("python_envs.discovery") or {}
    scan = facts.get("python_envs.scan") or {}
    unseen, limited, walk = _discovery_cuts(discovery)
    not_inspected = discovery.get("not_inspected")
    not_inspected = not_inspected if isinstance(not_inspected, int) and not_inspected > 0 else 0
    if not_inspected:
        unseen.append(f"{not_inspected} environment(s) found were not inspected before the probe's time ran out")
    evidence: Dict[str, Any]
    evidence = {"owners": discovery.get("owners"), "not_inspected": not_inspected, "entry_cap": discovery.get(
        "entry_cap"), "env_limit": scan.get("limit")}
    if unseen:
        dirs = [o.get("cut_at") for o in discovery.get("owners") or [] if isinstance(o, dict) and o.get("cut_at")]
        cmds = [f"sudo find {shlex.quote(str(d))} -mindepth 1 -maxdepth 1 | wc -l" for d in dirs[:3]]
        cmds.append(f"sudo dl-doctor run --timeout 120 --env-limit {max(64, 2 * (scan.get('limit') or 32))}")
        more = f"; and {len(unseen) - 8} more" if len(unseen) > 8 else ""
        return warn("not every Python environment was looked at: " + "; ".join(unseen[:8]) + more, evidence,
                    Fix("Look at what fills the directories named, then run again with more time or a larger "
                        "--env-limit.", tuple(cmds)))
    if limited:
        owners = [o for o in discovery.get("owners") or [] if isinstance(o, dict)]
        kept, found = (sum(o[k] for o in owners if isinstance(o.get(k), int)) for k in ("kept", "found"))
        message = (f"every place where environments are kept was looked at; --env-limit {scan.get('limit')} kept "
                   f"{_count(kept)} of the {_count(found)} found, shared by owner: " + ", ".join(limited))
    else:
        message = "every Python environment found was looked at"
    if walk:
        message += "; the search for virtual environments stopped early in " + ", ".join(walk[:5])
    return passed(message, **evidence)
