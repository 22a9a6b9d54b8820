"""Every CUDA consumer in every environment: the libraries each framework distribution needs and whether they load,
the CUDA major of what loads against the build, and symbol versions (the consumer model, dl_doctor.readers.consumers)."""

from __future__ import annotations

import posixpath
import shlex
from typing import Any, Dict, List, Optional, Sequence, Tuple

from dl_doctor import versions
from dl_doctor.checks.common import consumers_with_loading, first_heading, no_nvidia_gpu
from dl_doctor.facts import loading
from dl_doctor.model import Facts, Fix, Result, check, fail, passed, skip, warn


def _envs(facts: Facts) -> List[Dict[str, Any]]:
    return [e for e in facts.get("python_envs.environments") or [] if not e.get("error")]


_consumers = consumers_with_loading



def needs_consumers(facts: Facts) -> Optional[str]:
    if not facts.has("python_envs"):
        return None
    envs = _envs(facts)
    if envs and all("consumers" not in e for e in envs):
        return "these facts predate the consumer model (dl-doctor 0.2.0); collect them again"
    if not any(e.get("consumers") for e in envs):
        return "no installed distribution needs CUDA libraries"
    return None


def needs_loading(facts: Facts) -> Optional[str]:
    """For checks of what loads: consumers, or dl-doctor 0.1's torch resolution in older facts."""
    envs = _envs(facts)
    if facts.has("python_envs") and any(e.get("resolution") for e in envs):
        return None
    return needs_consumers(facts)


def _label(env: Dict[str, Any]) -> str:
    return f"{env.get('name')} ({env.get('prefix')})"


def _python(env: Dict[str, Any]) -> str:
    return shlex.quote(env.get("python") or f"{env.get('prefix')}/bin/python")


def _cuda_tag(consumer: Dict[str, Any]) -> str:
    cuda = (consumer.get("build") or {}).get("cuda") or ""
    return "".join(cuda.split(".")[:2]) if cuda else str(consumer.get("cuda_major") or "")


def install_command(matrix, env: Dict[str, Any], consumer: Dict[str, Any], sonames: List[str],
                    framework_fix: bool = True) -> List[str]:
    """The commands that give this environment the libraries ``sonames`` for this consumer's build: the framework's
    documented extra where the matrix has one, else the nvidia-* wheels of its CUDA major (pinned to the build's
    CUDA minor where the library's version follows CUDA's)."""
    entry = matrix.consumer(consumer["distribution"]) if matrix is not None else None
    python = _python(env)
    if framework_fix and entry and entry.get("install"):
        try:
            return [line.format(python=python, version=consumer.get("version") or "", name=consumer["distribution"],
                                site=shlex.quote(consumer.get("location") or ""), cuda_tag=_cuda_tag(consumer),
                                cuda_major=consumer.get("cuda_major") or "") for line in entry["install"]]
        except (KeyError, IndexError, ValueError):
            pass
    major = consumer.get("cuda_major")
    cuda = (consumer.get("build") or {}).get("cuda")
    wheels: List[str] = []
    unknown: List[str] = []
    for soname in sonames:
        known = matrix.wheel_for(soname, major) if matrix is not None else None
        if not known:
            unknown.append(soname)
            continue
        pin = f"=={known['pin']}" if known.get("pin") else ""
        if known.get("version_follows_cuda") and cuda and versions.major_minor(cuda):
            pin = f"=={versions.major_minor(cuda)}.*"
        wheels.append(f"'{known['wheel']}{pin}'")
    out = [f"{python} -m pip install {' '.join(dict.fromkeys(wheels))}"] if wheels else []
    if unknown:
        out.append(f"# no wheel known for {', '.join(unknown)}: install the CUDA {major or ''} toolkit that has it")
    return out


def _gpu_path_only(m: Dict[str, Any], plugins: Sequence[str]) -> bool:
    """A missing library that only the GPU path loads: one the framework opens by name when it starts using CUDA
    (TensorFlow, CuPy), or one a plugin needs that the framework opens by dlopen (ONNX Runtime's CUDA provider;
    compat_matrix/data/loading.toml), not one its import needs."""
    if m.get("how") == "dlopen":
        return True
    base = posixpath.basename(str(m.get("needed_by") or ""))
    return any(base.startswith(p) for p in plugins)


@check(
    id="DLD-PY-011", slug="framework-libraries-missing",
    remedy="repair-software", drain=False,
    problem="A framework cannot find CUDA libraries it needs",
    title="Every framework finds the CUDA libraries it needs (torch, TensorFlow, JAX, ONNX Runtime, CuPy, "
          "CTranslate2, compiled extensions)",
    tags=("python", "cuda", "ldpath", "frameworks"), requires=("python_envs",), applies=(needs_consumers,),
    what="""For every installed distribution whose ELF objects need CUDA libraries (read from its RECORD and their
    DT_NEEDED), or that opens them by name at run time (the matrix's consumer data), simulates glibc's search from each
    object — its RPATH/RUNPATH, LD_LIBRARY_PATH, ld.so.cache, the default directories — after the preloading the
    framework itself does (torch, jax and CuPy load nvidia-* wheel libraries by absolute path; onnxruntime only on
    request), and names every library that will not be found, with its distribution, the object that needs it and
    where the loader looked.""",
    why="""A framework whose CUDA libraries do not load fails at import or, worse, silently runs on the CPU
    (TensorFlow, ONNX Runtime fall back), or fails at the first GPU call: 'libcublasLt.so.12: cannot open shared
    object file', 'Could not load library libcudnn_ops.so.9', 'CUDAExecutionProvider not available'. It happens when a
    GPU framework is installed without its CUDA wheels, or beside a framework of another CUDA major.""",
    fix="""Install the CUDA libraries of the framework's own CUDA major into that environment (the exact pip command
    is in the finding), or call the framework's documented preload (onnxruntime.preload_dlls(), or import torch
    first) where it finds them in the environment's wheels; optional providers (TensorRT) only warn.""",
)
def framework_libraries(facts: Facts, matrix) -> Result:
    failing, warnings, ok = [], [], []
    # a host with no NVIDIA GPU runs a CUDA build on the CPU: the libraries only the GPU path loads are not needed
    # there (TensorFlow and ONNX Runtime fall back; torch's import, which links them, still fails without them)
    no_gpu = no_nvidia_gpu(facts)
    plugins = [str(n).split(".so")[0] for e in (matrix.entries("dlopen_plugin") if matrix is not None else [])
               for n in e.get("plugins") or []]
    cpu_notes: List[str] = []
    heads: List[str] = []
    commands: List[str] = []
    evidence: Dict[str, Any] = {"missing": [], "opt_in_preload": [], "optional_missing": []}
    for env, c in _consumers(facts, matrix):
        build = f"CUDA {c['cuda_major']}" if c.get("cuda_major") else "CUDA build not known"
        who = f"{c['distribution']} {c.get('version') or ''} ({build}) in {_label(env)}"
        required = [m for m in c.get("missing") or [] if not m.get("optional")]
        if no_gpu and required and all(_gpu_path_only(m, plugins) for m in required):
            evidence["missing"] += [{"environment": env.get("prefix"), "distribution": c["distribution"],
                                     "soname": m["soname"], "needed_by": m.get("needed_by"), "how": m.get("how"),
                                     "looked_in": m.get("looked_in"), "gpu_path_only": True} for m in required]
            cpu_notes.append(f"{c['distribution']} ({env.get('name')}) runs on the CPU here: "
                             f"{', '.join(sorted({m['soname'] for m in required})[:4])} not found, needed only to use "
                             "a GPU, and this host has no NVIDIA GPU")
            continue
        optional = [m for m in c.get("missing") or [] if m.get("optional")]
        fixed = set(c.get("fixed_by_preload") or [])
        sonames = sorted({m["soname"] for m in required})
        if c.get("other_machine"):
            failing.append(f"{who}: {', '.join(c['other_machine'][:5])} built for another architecture than this "
                           f"host's {c.get('machine')} (a wheel for the wrong platform)")
            commands.append(f"{_python(env)} -m pip install --force-reinstall '{c['distribution']}=={c.get('version')}'"
                            f"   # pip picks the wheel of this platform")
            continue
        for m in required:
            evidence["missing"].append({"environment": env.get("prefix"), "distribution": c["distribution"],
                                        "soname": m["soname"], "needed_by": m.get("needed_by"), "how": m.get("how"),
                                        "looked_in": m.get("looked_in"), "in_wheels": m.get("in_wheels"),
                                        "other_versions": m.get("other_versions")})
        if sonames and set(sonames) <= fixed and c.get("preload_call"):
            warnings.append(f"{who}: {', '.join(sonames)} are in the environment's wheels but are found only after "
                            f"{c['preload_call'].split('#')[0].strip()} (or importing torch first)")
            evidence["opt_in_preload"].append(c["distribution"])
            call = c["preload_call"].split("#")[0].strip()
            dirs = sorted({m["in_wheels"].rsplit("/", 1)[0] for m in required if m.get("in_wheels")})
            commands.append(f"{call}   # Python: first lines of your program (or import torch before it)")
            if dirs:
                commands.append(f"export LD_LIBRARY_PATH={':'.join(shlex.quote(d) for d in dirs)}:$LD_LIBRARY_PATH"
                                f"   # or, without changing the program: the wheels' directories")
        elif sonames:
            first = required[0]
            how = "opened with dlopen by" if first.get("how") == "dlopen" else "needed by"
            pairs, where = [], []
            for m in required:
                names = sorted({o.rsplit("/", 1)[-1] for o in m.get("other_versions") or []}, key=lambda n: (len(n), n))
                if names:
                    pairs.append(f"{names[0]} for {m['soname']}")
                    where += [o.rsplit("/", 1)[0] for o in m["other_versions"][:1]]
            found = (f"; the loader finds other releases only: {', '.join(pairs[:4])} (in "
                     f"{', '.join(dict.fromkeys(where[:2]))}): another CUDA release's libraries, which this {build} "
                     f"build never loads" if pairs else "")
            failing.append(f"{who}: {', '.join(sonames)} not found ({first['soname']} {how} "
                           f"{first.get('needed_by') or 'the package'}){found}")
            heads.append(f"{c['distribution']} in {env.get('name') or _label(env)} cannot find "
                         f"{', '.join(sonames[:3])}{' …' if len(sonames) > 3 else ''}")
            commands += install_command(matrix, env, c, sonames)
        elif optional:
            names = sorted({m["soname"] for m in optional})
            warnings.append(f"{who}: optional {', '.join(names)} not found (a provider or feature that needs them "
                            f"will not load; the rest does)")
            evidence["optional_missing"].append({"distribution": c["distribution"], "sonames": names})
            commands += install_command(matrix, env, c, names, framework_fix=False)
        else:
            ok.append(f"{c['distribution']} ({env.get('name')})")
        truth = c.get("truth") or {}
        if truth.get("differences"):
            evidence.setdefault("deep_differs", []).append({"distribution": c["distribution"],
                                                            "differences": truth["differences"]})
        if truth.get("import_errors") and not sonames:
            warnings.append(f"{who}: --deep: " + "; ".join(truth["import_errors"][:3]))
            commands.append(f"{_python(env)} -m pip check   # what the import is missing")
    if evidence.get("deep_differs"):
        evidence["note"] = "--deep imported the frameworks: where the real loader and the prediction differed, the " \
                           "real loader's answer is reported"
    fix = Fix("Give each framework the CUDA libraries of its own build, in its own environment.",
              tuple(dict.fromkeys(commands)))
    if failing:
        return fail("; ".join(failing), evidence, fix, headline=first_heading(heads, len(failing)))
    if warnings:
        return warn("; ".join(warnings), evidence, fix)
    notes = f"; note: {'; '.join(cpu_notes)}" if cpu_notes else ""
    if not ok and cpu_notes:
        return passed("no NVIDIA GPU here, so the CUDA libraries only a GPU needs are not needed" + notes, **evidence)
    return passed(f"every CUDA library loads for {', '.join(ok)}" + notes, **evidence)


@check(
    id="DLD-PY-012", slug="framework-cuda-major",
    remedy="fix-configuration", drain=False,
    problem="A CUDA library that loads does not match the framework's build",
    title="The CUDA libraries that load are of each framework's CUDA major",
    tags=("python", "cuda", "ldpath", "frameworks"), requires=("python_envs",), applies=(needs_consumers,),
    what="""For each CUDA consumer, reads from the one resolution model (dl_doctor.facts.loading) the CUDA major of
    every library copy that loads (its wheel's -cuNN, an nvidia/cuNN directory, its soname) against the build's: a
    copy from another CUDA major's wheel (nvidia-cudnn-cu12 under a CUDA 13 build: the soname is the same) fails; two
    frameworks in one environment built for different CUDA majors warn. Which other copy of the same major wins is
    DLD-PY-004's.""",
    why="""Sonames such as libcudnn.so.9 and libnccl.so.2 are the same for CUDA 12 and 13 builds; the loader takes
    whichever comes first and the failure appears later as 'CUDNN_STATUS_VERSION_MISMATCH', 'undefined symbol' or an
    NCCL error on some nodes. Two frameworks of different CUDA majors in one process load two runtimes or fail.""",
    fix="""Install the library wheels of the framework's own CUDA major, keep other CUDA directories off
    LD_LIBRARY_PATH for this environment, or give frameworks of different CUDA majors their own environments.""",
)
def framework_cuda_major(facts: Facts, matrix) -> Result:
    problems, mixed = [], []
    loads: List[Dict[str, Any]] = []
    heads: List[str] = []
    commands: List[str] = []
    by_env: Dict[str, List[Dict[str, Any]]] = {}
    for env, c in _consumers(facts, matrix):
        by_env.setdefault(str(env.get("prefix")), []).append(c)
        major = c.get("cuda_major")
        for lib in c.get("libraries") or []:
            if lib.get("rule") != "cuda-major":
                continue
            problems.append(f"{c['distribution']} in {_label(env)} (CUDA {major}) loads {lib['soname']} of "
                            f"CUDA {lib.get('cuda_major')} from {lib['path']} (found via {lib.get('via')})")
            loads.append({"environment": env.get("prefix"), "distribution": c["distribution"],
                          "soname": lib["soname"], "loads": lib["path"], "via": lib.get("via"),
                          "search_order": lib.get("searched")})
            heads.append(f"{c['distribution']} in {env.get('name') or _label(env)} (a CUDA {major} build) "
                         f"loads CUDA {lib.get('cuda_major')}'s {lib['soname']}")
            commands += install_command(matrix, env, c, [lib["soname"]], framework_fix=False)
    for env in _envs(facts):
        consumers = by_env.get(str(env.get("prefix"))) or []
        majors = sorted({(c.get("cuda_major"), c["distribution"]) for c in consumers
                         if isinstance(c.get("cuda_major"), int)})
        if len({m for m, _ in majors}) > 1:
            mixed.append(f"{_label(env)}: " + ", ".join(f"{d} (CUDA {m})" for m, d in majors))
    evidence: Dict[str, Any] = {"problems": problems, "loads": loads, "mixed_majors": mixed}
    fix = Fix("Let each framework load the CUDA libraries of its own build.",
              tuple(dict.fromkeys(commands + ["echo $LD_LIBRARY_PATH   # drop CUDA directories that shadow the "
                                              "environment's own libraries"])))
    if problems:
        return fail("; ".join(problems), evidence, fix, headline=first_heading(heads, len(problems)))
    if mixed:
        return warn("frameworks built for different CUDA majors in one environment (each needs its own runtime; "
                    "keep them in separate processes or environments): " + "; ".join(mixed), evidence, fix)
    return passed("every CUDA library that loads is of its framework's CUDA major", **evidence)


def needs_compiled(facts: Facts) -> Optional[str]:
    """For the symbol-version check: a CUDA consumer, or another compiled object whose versions were judged."""
    if any((e.get("loader") or {}).get("unmet_versions") for e in _envs(facts) if isinstance(e.get("loader"), dict)):
        return None
    return needs_consumers(facts)


@check(
    id="DLD-PY-013", slug="symbol-versions",
    remedy="repair-software", drain=False,
    problem="A loaded library lacks a symbol version the framework needs",
    title="Every symbol version a framework's libraries need is defined by the copy that loads (GLIBCXX, CUDA)",
    tags=("python", "cuda", "ldpath", "frameworks"), requires=("python_envs",), applies=(needs_compiled,),
    what="""For every object the loader would load for a CUDA consumer, holds the symbol versions it needs (DT_VERNEED:
    GLIBCXX_3.4.30 from libstdc++.so.6, libnvJitLink.so.12's versioned symbols, libcudart.so.12) against the versions
    the copy that resolves defines (DT_VERDEF). A copy of the right soname that lacks a needed version fails to load,
    as ld.so does. The environment's other compiled objects (every distribution's ELF objects, from its RECORD) are
    loaded the same way, after the interpreter, and held to the same rule: a wheel tagged manylinux_2_28 that needs
    GLIBCXX_3.4.29 fails on RHEL 8's libstdc++ as surely as torch does. With --deep, each consumer is loaded for real and an 'undefined symbol' (a compiled extension
    built against another torch) is reported too.""",
    why="""'version `GLIBCXX_3.4.30' not found (required by ...)' is the classic conda-versus-system libstdc++ failure,
    and an older libnvJitLink of the same soname fails the same way ('version `libnvJitLink.so.12' not found'); the
    file is found, so a check of names alone passes.""",
    fix="""Let the newer copy win: the environment's own libstdc++ (conda install libstdcxx-ng / the nvidia-*
    wheel the build needs) ahead of the older one, or remove the directory that holds the older copy from
    LD_LIBRARY_PATH.""",
)
def symbol_versions(facts: Facts, matrix) -> Result:
    problems = []
    commands: List[str] = []
    for env, c in _consumers(facts, matrix):
        for text in (c.get("truth") or {}).get("undefined_symbols") or []:
            problems.append(f"{c['distribution']} {c.get('version') or ''} in {_label(env)} (--deep): {text}"
                            + (" — built against another torch than the installed one" if c.get("links_torch") else ""))
            if c.get("links_torch"):
                commands.append(f"{_python(env)} -m pip install --force-reinstall --no-deps --no-binary "
                                f"{c['distribution']} '{c['distribution']}=={c.get('version')}'   # rebuild against "
                                f"this torch (or install the release built for it)")
        for u in c.get("unmet_versions") or []:
            problems.append(f"{c['distribution']} in {_label(env)}: {u['object']} needs {u['version']} from "
                            f"{u['file']}, which {u['provider']} does not define")
    for env in _envs(facts):  # the environment's other compiled objects (dl_doctor.readers.abi)
        for u in ((env.get("loader") or {}).get("unmet_versions") or []):
            if isinstance(u, dict) and u.get("needs"):
                problems.append(f"{u.get('distribution')} {u.get('version') or ''} in {_label(env)}: {u.get('object')} "
                                f"needs {u['needs']} from {u.get('file')}, which {u.get('provider')} does not define")
    if problems:
        return fail("; ".join(problems[:10]) + (f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""),
                    {"unmet": problems},
                    Fix("Let a copy that defines the needed versions load first, or rebuild what was built against "
                        "another library.",
                        tuple(commands) + ("echo $LD_LIBRARY_PATH   # the directory of the older copy comes first",
                         "strings -a <provider> | grep -E '^(GLIBCXX|CXXABI|libnvJitLink)'   # what it defines")))
    return passed("every needed symbol version is defined by the copy that loads")


@check(
    id="DLD-PY-014", slug="extension-built-for-torch",
    remedy="repair-software", drain=False,
    problem="A compiled torch extension was built for another torch",
    title="Compiled torch extensions (flash-attn, xformers, bitsandbytes, DeepSpeed ops, apex, vLLM) were built for "
          "the installed torch",
    tags=("python", "torch", "frameworks"), requires=("python_envs",), applies=(needs_consumers,),
    what="""For every installed distribution whose CUDA objects link against torch (libc10, libtorch*), holds what its
    wheel says it was built for — the torch its METADATA requires, the torch named in its version (flash-attn's
    '+cu123torch2.4'), and the CUDA major — against the torch installed in the same environment.""",
    why="""A compiled extension built against another torch fails at import with 'undefined symbol: _ZN3c10...'
    (the C++ ABI of torch changes every release), usually right after 'pip install -U torch' upgraded torch alone;
    one built for another CUDA major loads a second CUDA runtime or fails.""",
    fix="""Install the extension release built for the installed torch (or rebuild it from source against it:
    pip install --no-binary), or install the torch it was built for.""",
)
def extension_torch(facts: Facts, matrix) -> Result:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    problems, ok = [], []
    commands: List[str] = []
    for env, c in _consumers(facts, matrix):
        if not (c.get("links_torch") or c.get("requires_torch")):
            continue
        torch_c = next((x for x in env.get("consumers") or [] if x.get("distribution") == "torch"), None)
        installed = ((env.get("frameworks") or {}).get("torch") or {}).get("version") or (torch_c or {}).get("version")
        if not installed and env.get("kind") == "user-site":  # a user site runs with its interpreters' torch
            from dl_doctor.checks.abi import torch_for

            installed = torch_for(env, _envs(facts))
            if not installed:
                continue  # no one torch those interpreters hold: which one runs is not known
        name = f"{c['distribution']} {c.get('version') or ''} in {_label(env)}"
        if not installed:
            problems.append(f"{name} links against torch, which is not installed there")
            continue
        base = versions.parse((installed or "").split("+")[0])
        reasons = []
        spec = c.get("requires_torch")
        if spec and spec != "any":
            try:
                if base is not None and not SpecifierSet(spec).contains(base, prereleases=True):
                    reasons.append(f"requires torch {spec}")
            except InvalidSpecifier:
                pass
        built = c.get("built_for_torch")
        if built and versions.major_minor(installed) != built:
            reasons.append(f"was built for torch {built}")
        torch_major = (torch_c or {}).get("cuda_major")
        if isinstance(torch_major, int) and isinstance(c.get("cuda_major"), int) and c["cuda_major"] != torch_major:
            reasons.append(f"was built for CUDA {c['cuda_major']}, torch for CUDA {torch_major}")
        if reasons:
            problems.append(f"{name} {' and '.join(reasons)}; torch {installed} is installed")
            commands.append(f"{_python(env)} -m pip install --force-reinstall --no-deps --no-binary {c['distribution']} "
                            f"'{c['distribution']}=={c.get('version', '').split('+')[0]}'   # rebuild against this torch")
        else:
            ok.append(c["distribution"])
    if problems:
        return fail("; ".join(problems), {"problems": problems},
                    Fix("Use the extension build made for the installed torch.", tuple(commands) or
                        ("pip list | grep -i -E 'torch|flash|xformers|bitsandbytes|deepspeed|apex|vllm'",)))
    if not ok:
        return skip("no compiled torch extension is installed")
    return passed(f"built for the installed torch: {', '.join(ok)}")
