"""The driver against everything that needs CUDA from it; forward-compatibility libraries."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from dl_doctor import versions
from dl_doctor.facts import requirements
from dl_doctor.checks.common import (cuda_consumers, driver_branch, driver_install_commands, driver_version, needs_nvidia_gpu,
                           nvidia_gpus)
from dl_doctor.model import Facts, Fix, Result, check, fail, passed, skip, warn

# CUDA minor-version compatibility (https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html):
# code built with any CUDA 12.x runs on a driver of the 12 major's floor (R525) or newer, with one hard limit: the
# driver cannot JIT-compile PTX from a newer toolkit ('the provided PTX was compiled with an unsupported toolchain').
# A build that carries a cubin (SASS) for every GPU here never JIT-compiles, so it is served; a GPU that only has PTX
# in the build is the failure. The floors are the matrix's minor_compat entries.


def _active_compat(facts: Facts) -> List[Dict[str, Any]]:
    return [c for c in facts.get("nvidia_driver.forward_compat_libs") or [] if c.get("active")]


def _sass_ccs(env: Dict[str, Any], torch: Dict[str, Any], matrix) -> Tuple[Optional[List[str]], str]:
    """The compute capabilities a torch build carries SASS (cubins) for, and where that came from.

    torch.cuda.get_arch_list() (--deep) lists 'sm_80' (a cubin) apart from 'compute_80' (PTX only), so only the sm_
    entries count (an arch-specific 'sm_90a' is kept with its suffix); the matrix's arch_list lists the capabilities
    with SASS, '+PTX' marking the one also shipped as PTX."""
    deep = [a for a in (env.get("deep") or {}).get("arch_list") or [] if isinstance(a, str)]
    if deep:
        out = []
        for a in deep:
            m = re.match(r"^sm_(\d+)(\d)([a-z]?)$", a)
            if m:
                out.append(f"{m.group(1)}.{m.group(2)}{m.group(3)}")
        return out, "torch.cuda.get_arch_list() (--deep)"
    code = _fatbin_sass(torch.get("device_code"))
    if code:
        return code
    variant = matrix.torch_variant(torch.get("version") or "", torch.get("cuda"))
    if variant and variant.get("arch_list"):
        return [a.replace("+PTX", "") for a in variant["arch_list"]], f"the matrix's arch list for torch " \
            f"{torch.get('version')}"
    return None, "unknown"


def _fatbin_sass(code: Any) -> Optional[Tuple[List[str], str]]:
    """The compute capabilities a build's own .nv_fatbin carries SASS for (python_envs device_code), where the walk
    read every entry (a partial walk cannot prove a cubin absent)."""
    if not isinstance(code, dict) or not code.get("complete") or not (code.get("sass") or code.get("ptx")):
        return None
    out = []
    for a in code.get("sass") or []:
        n = str(a)
        if n.isdigit() and 2 <= len(n) <= 3:
            out.append(f"{n[:-1]}.{n[-1]}")
    objects = ", ".join(str(o).rsplit("/", 1)[-1] for o in (code.get("objects") or [])[:3]) or "its objects"
    return out, f"the .nv_fatbin of {objects}"


def _has_sass(cc: str, sass: List[str]) -> bool:
    """A cubin runs on its own major at the same or a higher minor; an arch-specific one ('9.0a') only on its own."""
    want = versions.release(cc)[:2]
    for entry in sass:
        base = entry.rstrip("abcdefghijklmnopqrstuvwxyz")
        have = versions.release(base)[:2]
        if len(have) < 2 or len(want) < 2:
            continue
        if entry != base:
            if have == want:
                return True
        elif have[0] == want[0] and have[1] <= want[1]:
            return True
    return False


def _minor_compat_verdict(facts: Facts, matrix, row: Dict[str, Any], gpus: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Whether a consumer served only through minor-version compatibility would need PTX JIT on a GPU here:
    {"jit": [GPU names without SASS], "ok": [...], "source": ..., "known": bool}."""
    if row.get("kind") == "consumer":
        for env in facts.get("python_envs.environments") or []:
            if (env.get("prefix") or env.get("name")) != row.get("where"):
                continue
            for c in env.get("consumers") or []:
                if not str(row["what"]).startswith(f"{c.get('distribution')} {c.get('version') or ''}".strip()):
                    continue
                found = _fatbin_sass(c.get("device_code"))
                if found is None or not gpus or any(not g.get("cc") for g in gpus):
                    return {"known": False, "jit": [], "ok": [], "source": found[1] if found else None}
                sass, source = found
                jit = [f"{g['name']} (sm_{g['cc'].replace('.', '')})" for g in gpus if not _has_sass(g["cc"], sass)]
                ok = [f"{g['name']} (sm_{g['cc'].replace('.', '')})" for g in gpus if _has_sass(g["cc"], sass)]
                return {"known": True, "jit": list(dict.fromkeys(jit)), "ok": list(dict.fromkeys(ok)),
                        "source": source}
        return {"known": False, "jit": [], "ok": [], "source": None}
    if row.get("kind") != "framework":
        return {"known": False, "jit": [], "ok": [], "source": None}
    for env in facts.get("python_envs.environments") or []:
        torch = (env.get("frameworks") or {}).get("torch") or {}
        if (env.get("path") or env.get("name")) != row.get("where") or f"torch {torch.get('version')}" != row["what"]:
            continue
        found_sass, source = _sass_ccs(env, torch, matrix)
        if found_sass is None or not gpus or any(not g.get("cc") for g in gpus):
            return {"known": False, "jit": [], "ok": [], "source": source}
        sass = found_sass
        jit = [f"{g['name']} (sm_{g['cc'].replace('.', '')})" for g in gpus if not _has_sass(g["cc"], sass)]
        ok = [f"{g['name']} (sm_{g['cc'].replace('.', '')})" for g in gpus if _has_sass(g["cc"], sass)]
        return {"known": True, "jit": list(dict.fromkeys(jit)), "ok": list(dict.fromkeys(ok)), "source": source}
    return {"known": False, "jit": [], "ok": [], "source": None}


def _reported_model(facts: Facts, bdf: str) -> Optional[str]:
    """The model the driver itself reports for a GPU (/proc/driver/nvidia/gpus/BDF/information, else NVML's name
    at that address)."""
    for g in facts.get("nvidia_driver.proc_gpus") or []:
        if isinstance(g, dict) and str(g.get("bdf", "")).lower() == bdf.lower() and g.get("model"):
            return str(g["model"])[:128]
    for d in facts.get("nvml.devices") or []:
        if isinstance(d, dict) and str(d.get("bus_id", "")).lower().endswith(bdf.lower()[-12:]) and d.get("name"):
            return str(d["name"])[:128]
    return None


def container_requirements(facts: Facts, matrix) -> Optional[requirements.Verdict]:
    """How the NVIDIA container runtime judges the container's image (its NVIDIA_REQUIRE_*, NVIDIA_DISABLE_REQUIRE,
    a legacy image's CUDA_VERSION) on this host; None where no such variable is recorded, or outside a container
    (a host's own session may set CUDA_VERSION: no container runtime judges it)."""
    if not facts.get("system.container.in_container"):
        return None
    env = facts.get("cuda_toolkits.container_env") or {}
    if not isinstance(env, dict) or not any(isinstance(k, str) and (k.startswith("NVIDIA_REQUIRE_") or k == "CUDA_VERSION")
                                            for k in env):
        return None
    return requirements.evaluate(env, requirements.host_from_facts(facts.get, matrix))


def _running_container(facts: Facts) -> bool:
    """dl-doctor runs inside this container (a plan's what-if container is not running)."""
    evidence = facts.get("system.container.evidence") or []
    return bool(facts.get("system.container.in_container")) and not any(
        isinstance(e, str) and e.startswith(requirements.PLANNED_CONTAINER) for e in evidence)


def _refusal(verdict: requirements.Verdict) -> str:
    failed = verdict.failed.variable if verdict.failed else "NVIDIA_REQUIRE_*"
    return (f"the NVIDIA container runtime refuses to start a container of this image here ({failed}: "
            f"'{verdict.error}'); one that runs was started with that check bypassed (the runtime's CDI mode does not "
            f"evaluate NVIDIA_REQUIRE_*; NVIDIA_DISABLE_REQUIRE=true or disable-require turn it off)")


def _gpu_classes(facts: Facts, matrix) -> List[Dict[str, Any]]:
    out = []
    for g in nvidia_gpus(facts):
        entry = matrix.gpu_by_pci(g.get("device_id") or "")
        name = entry["name"] if entry else _reported_model(facts, g["bdf"])
        cls = entry["class"] if entry else None
        if cls is None and name and "geforce" in name.lower():
            cls = "geforce"  # the driver's own model name: a GeForce board, whatever its PCI id
        out.append({"bdf": g["bdf"], "device_id": g.get("device_id"), "name": name, "class": cls,
                    "cc": entry.get("compute_capability") if entry else None})
    return out


@check(
    id="DLD-CUDA-001", slug="driver-too-old-for-cuda",
    remedy="repair-software", drain=False,
    problem="The driver is too old for the CUDA version in use",
    title="The driver supports the CUDA versions installed here",
    tags=("cuda", "driver", "gpu"), requires=("cuda_toolkits",), applies=(needs_nvidia_gpu,),
    what="""Finds everything that needs a CUDA version from the driver — CUDA toolkits, framework builds in the Python
    environments, a container image's NVIDIA_REQUIRE_CUDA/CUDA_VERSION — and asks the compatibility matrix whether the
    running driver supports each fully, only through minor-version compatibility, or not at all (forward-compatibility
    libraries taken into account). Inside a container (or a plan's), it also judges the image's NVIDIA_REQUIRE_*
    the way the NVIDIA container runtime does (docs/container-requirements.md): whether the runtime would start it,
    and whether it starts only through a brand/driver alternative that needs the image's forward-compatibility
    package.""",
    why="""A CUDA program built for a newer CUDA than the driver supports fails at start with 'CUDA driver version is
    insufficient for CUDA runtime version' or 'The NVIDIA driver on your system is too old'. Minor-version
    compatibility lets a 12.x build run on any R525+ driver, but the driver cannot JIT-compile PTX from a newer
    toolkit: a build with SASS (cubins) for every GPU here is served and passes with a note; one that would need PTX
    JIT for a GPU here warns.""",
    fix="""Upgrade the driver to at least the minimum the newest consumer needs, or use builds for the CUDA version the
    driver supports (for PyTorch, the matching --index-url wheel variant).""",
)
def driver_too_old_for_cuda(facts: Facts, matrix) -> Result:
    driver = driver_version(facts)
    consumers = cuda_consumers(facts)
    if not driver:
        return skip("no NVIDIA driver version is known (see DLD-GPU-001)")
    max_cuda = (matrix.driver(driver) or {}).get("max_cuda")
    if not consumers:
        runtime = container_requirements(facts, matrix)
        if runtime is not None and runtime.status in ("unsatisfied", "invalid"):
            return fail(f"driver {driver} (CUDA {max_cuda}): {_refusal(runtime)}",
                        {"driver": driver, "container_requirements": runtime.to_dict()},
                        Fix(f"Run the image on a host that meets its {runtime.failed.variable if runtime.failed else 'requirements'}"
                            ", or use an image built for this one.", ()))
        return passed(f"driver {driver}; nothing here needs a specific CUDA version", driver=driver)
    compat = _active_compat(facts)
    compat_supported = compat and all(g["class"] in matrix.forward_compat_classes() for g in _gpu_classes(facts, matrix))
    effective = max((c["version"] for c in compat), key=versions.release) \
        if compat_supported else driver
    rows, worst = [], "full"
    for c in consumers:
        support = matrix.driver_supports_cuda(effective, c["cuda"])
        rows.append({**c, "support": support["support"], "min_driver": support.get("min_driver"),
                     "min_driver_minor_compat": support.get("min_driver_minor_compat")})
    runtime = container_requirements(facts, matrix)
    refused = runtime is not None and runtime.status in ("unsatisfied", "invalid")
    fc_rows = []
    if runtime is not None and runtime.forward_compat and not refused:
        # the runtime starts it through a brand/driver alternative: its CUDA code runs through the image's cuda-compat
        for r in rows:
            if r["kind"] == "container" and r["support"] in ("none", "minor-compat"):
                r["support"] = "forward-compat"
                fc_rows.append(r)
    for r in rows:
        if r["support"] == "none":
            worst = "none"
        elif r["support"] == "minor-compat" and worst == "full":
            worst = "minor-compat"
    evidence: Dict[str, Any]
    evidence = {"driver": driver, "driver_max_cuda": max_cuda, "consumers": rows,
                "forward_compat_used": effective if effective != driver else None}
    if runtime is not None:
        evidence["container_requirements"] = runtime.to_dict()
    need = [r for r in rows if r["support"] not in ("full", "forward-compat") and r.get("min_driver")]
    target = max((r["min_driver"] for r in need), key=versions.release, default=None)
    fix = None
    if target:
        commands = list(driver_install_commands(facts, driver_branch(target)))
        if max_cuda:
            commands.append(f"# or use builds for CUDA {max_cuda}, e.g. PyTorch: pip install torch --index-url "
                            f"https://download.pytorch.org/whl/cu{max_cuda.replace('.', '')}")
        fix = Fix(f"Install driver {target} or newer (branch R{driver_branch(target)}), or use builds for CUDA "
                  f"{max_cuda} or older.", tuple(commands))
    via = f" (through the cuda-compat libraries {effective})" if effective != driver else ""
    if refused and runtime is not None:
        container = next((r for r in rows if r["kind"] == "container"), None)
        if fix is None and container and container.get("min_driver"):
            fix = Fix(f"Install driver {container['min_driver']} or newer, or use an image built for CUDA {max_cuda} "
                      "or older.", tuple(driver_install_commands(facts, driver_branch(container["min_driver"]))))
        elif fix is None:
            fix = Fix(f"Run the image on a host that meets its {runtime.failed.variable if runtime.failed else 'requirements'}"
                      ", or use an image built for this one.", ())
    if worst == "none":
        bad = [r for r in rows if r["support"] == "none"]
        listed = "; ".join(f"{r['what']} ({r['where']}) needs driver >= {r['min_driver']}" for r in bad)
        refusal = f"; {_refusal(runtime)}" if refused and runtime is not None else ""
        return fail(f"driver {driver} supports CUDA up to {max_cuda}{via}: {listed}{refusal}", evidence, fix)
    if refused and runtime is not None:
        container = next((r for r in rows if r["kind"] == "container"), None)
        if _running_container(facts) and container and container["support"] in ("full", "minor-compat"):
            # this container runs, and the driver serves its CUDA: only starting another one the legacy way fails
            return warn(f"driver {driver} (CUDA {max_cuda}) serves this container's CUDA {container['cuda']} "
                        f"({'fully' if container['support'] == 'full' else 'through minor-version compatibility'}), "
                        f"but {_refusal(runtime)}: a container of it started with docker run --gpus will not start",
                        evidence, fix)
        return fail(f"driver {driver} (CUDA {max_cuda}): {_refusal(runtime)}", evidence, fix)
    fc_note = ""
    if fc_rows and runtime is not None:
        gpus = _gpu_classes(facts, matrix)
        classes = matrix.forward_compat_classes()
        unsupported = [g for g in gpus if g["class"] and g["class"] not in classes]
        unknown_class = [g for g in gpus if not g["class"]]
        r = fc_rows[0]
        alt = runtime.satisfied_by.get("NVIDIA_REQUIRE_CUDA") or runtime.satisfied_by.get("CUDA_VERSION") or ""
        runs = (f"{r['what']} starts here (NVIDIA_REQUIRE_CUDA holds through its alternative '{alt}'), but driver "
                f"{driver} supports CUDA up to {max_cuda}: its CUDA {r['cuda']} code runs only through the image's "
                f"CUDA forward-compatibility libraries (the cuda-compat package, /usr/local/cuda/compat)")
        if unsupported:
            names = ", ".join(f"{g['name'] or '10de:' + str(g['device_id'])} ({g['class']})" for g in unsupported)
            return fail(f"{runs}, and {names} does not support forward compatibility: CUDA fails with error 804 "
                        "('forward compatibility was attempted on non supported HW')", evidence,
                        Fix(f"Install driver {r['min_driver']} or newer (branch R{driver_branch(r['min_driver'])}), "
                            f"or use an image built for CUDA {max_cuda} or older.",
                            tuple(driver_install_commands(facts, driver_branch(r["min_driver"])))))
        which = (f"; whether {', '.join(str(g['name'] or g['device_id']) for g in unknown_class)} is one is not "
                 "known" if unknown_class else
                 f": {', '.join(dict.fromkeys(str(g['name']) for g in gpus))} "
                 + ("is one" if len(set(str(g['name']) for g in gpus)) == 1 else "are"))
        fc_note = (f"{runs}, which work on data-center GPUs only ({', '.join(classes)}){which}; full support needs "
                   f"driver >= {r['min_driver']}")
    if worst == "minor-compat":
        gpus = _gpu_classes(facts, matrix)
        part = [r for r in rows if r["support"] == "minor-compat"]
        jit, notes = [], []
        for r in part:
            verdict = _minor_compat_verdict(facts, matrix, r, gpus)
            r["sass"] = verdict
            if verdict["jit"]:
                jit.append(f"{r['what']} ({r['where']}) has no SASS for {', '.join(verdict['jit'])} per "
                           f"{verdict['source']}: its kernels there would be JIT-compiled from CUDA {r['cuda']} PTX, "
                           f"which driver {driver} cannot do ('the provided PTX was compiled with an unsupported "
                           f"toolchain')")
            elif verdict["known"]:
                notes.append(f"{r['what']} ({r['where']}) has SASS for every GPU here ({', '.join(verdict['ok'])}, "
                             f"per {verdict['source']}): no PTX JIT is needed")
            elif r.get("kind") == "framework":
                notes.append(f"{r['what']} ({r['where']}): whether it has SASS for every GPU here is not known "
                             f"(--deep reads its arch list); only a GPU it ships PTX alone for would fail")
            else:
                notes.append(f"{r['what']} ({r['where']}): what it compiles or runs needs SASS for the GPUs here "
                             f"(nvcc -arch=sm_XY); PTX from CUDA {r['cuda']} cannot be JIT-compiled by this driver")
        floor = next((r.get("min_driver_minor_compat") for r in part if r.get("min_driver_minor_compat")), None)
        rule = (f"CUDA minor-version compatibility (same CUDA major, driver >= {floor})" if floor
                else "CUDA minor-version compatibility")
        fc = f"; {fc_note}" if fc_note else ""
        if jit:
            return warn(f"driver {driver} (CUDA {max_cuda}) serves these builds only through {rule}, and "
                        + "; ".join(jit) + f"; full support needs driver >= {target}{fc}", evidence, fix)
        full = [r["what"] for r in rows if r["support"] == "full"]
        also = f"; fully supports {', '.join(full)}" if full else ""
        return passed(f"driver {driver} (CUDA {max_cuda}){via} runs "
                      + ", ".join(r["what"] for r in part) + f" through {rule}: " + "; ".join(notes)
                      + f"{also} (full support, with JIT of newer PTX, needs driver >= {target}){fc}", **evidence)
    if fc_note:
        full = [r["what"] for r in rows if r["support"] == "full"]
        also = f"; driver {driver} (CUDA {max_cuda}){via} fully supports {', '.join(full)}" if full else ""
        return passed(fc_note + also, **evidence)
    listed = ", ".join(r["what"] for r in rows)
    return passed(f"driver {driver} (CUDA {max_cuda}){via} fully supports {listed}", **evidence)


@check(
    id="DLD-CUDA-002", slug="cuda-compat-on-unsupported-gpu",
    remedy="fix-configuration", drain=False,
    problem="CUDA forward-compatibility libraries on a GPU that does not support them",
    title="CUDA forward-compatibility libraries are only used on GPUs that support them",
    tags=("cuda", "driver", "container"), requires=("nvidia_driver", "gpu_pci"), applies=(needs_nvidia_gpu,),
    what="""Finds the cuda-compat libcuda (/usr/local/cuda*/compat) and whether it is active (on LD_LIBRARY_PATH or in
    ld.so.conf), and holds the GPUs against the classes forward compatibility supports (data center GPUs and Jetson).""",
    why="""Forward compatibility lets a newer CUDA run on an older data center driver. On GeForce and most workstation
    GPUs the compat libcuda refuses with 'Error 804: forward compatibility was attempted on non supported HW', so
    a CUDA image that ships it fails on such a host even though the host driver alone would be fine.""",
    fix="""Take the compat directory off LD_LIBRARY_PATH (or out of ld.so.conf.d) and upgrade the host driver to one
    that supports the image's CUDA version, or use an image built for the driver's CUDA version.""",
)
def cuda_compat_unsupported(facts: Facts, matrix) -> Result:
    compat = facts.get("nvidia_driver.forward_compat_libs") or []
    active = [c for c in compat if c.get("active")]
    gpus = _gpu_classes(facts, matrix)
    evidence = {"forward_compat_libs": compat, "gpus": gpus, "supported_classes": matrix.forward_compat_classes()}
    if not active:
        return passed("no CUDA forward-compatibility library is in use" + (" (present but inactive)" if compat else ""),
                      **evidence)
    supported = matrix.forward_compat_classes()
    unsupported = [g for g in gpus if g["class"] not in supported]
    if not unsupported:
        return passed(f"forward compatibility ({active[0]['path']}) is in use on supported GPUs", **evidence)
    names = ", ".join(f"{g['name'] or '10de:' + str(g['device_id'])} ({g['class'] or 'unknown class'})" for g in unsupported)
    directory = active[0]["path"].rsplit("/", 1)[0]
    host = facts.get("nvidia_driver.kernel_module.version")
    placed = f" ({active[0]['path']}, from {active[0]['origin']})" if active[0].get("origin") else ""
    return fail(f"cuda-compat libcuda {active[0]['version']}{placed} is active"
                + (f" over the host driver {host}" if host else "") +
                f" but {names} does not support forward compatibility: CUDA fails with error 804", evidence,
                Fix("Stop using the compat library and upgrade the host driver instead.",
                    (f"export LD_LIBRARY_PATH=$(echo \"$LD_LIBRARY_PATH\" | tr ':' '\\n' | grep -v '{directory}' | paste -sd:)",
                     f"grep -rl '{directory}' /etc/ld.so.conf.d/ | xargs -r sudo rm && sudo ldconfig")))


def _toolkit_of(facts: Facts, path: Optional[str]) -> Optional[Dict[str, Any]]:
    for t in facts.get("cuda_toolkits.toolkits") or []:
        root = str(t.get("path") or "")
        if path and root and (path == root or path.startswith(root.rstrip("/") + "/")):
            return t
    return None


def needs_ptx_emitter(facts: Facts) -> Optional[str]:
    if not facts.get("cuda_toolkits.toolkits"):
        return "no CUDA toolkit is installed: nothing here compiles PTX with one"
    return None


@check(
    id="DLD-CUDA-003", slug="jit-ptx-newer-than-driver",
    remedy="repair-software", drain=False,
    problem="A JIT compiler emits PTX the driver cannot load",
    title="PTX compiled at run time is of a CUDA release the driver can load",
    tags=("cuda", "driver", "python"), requires=("cuda_toolkits", "python_envs"),
    applies=(needs_nvidia_gpu, needs_ptx_emitter),
    what="""Finds the libraries that compile kernels to PTX at run time with a CUDA toolkit's compiler (the matrix's
    emits_ptx: numba.cuda with the toolkit's NVVM) and the toolkit they use (CUDA_HOME, else /usr/local/cuda; an
    environment with its own nvidia-cuda-nvcc wheel or conda toolkit is left out), and holds that toolkit's CUDA
    release against the newest the driver supports. The PTX is handed to the driver to JIT-compile; CUDA minor-version
    compatibility does not cover PTX from a newer toolkit.""",
    why="""PTX carries the ISA version of the toolkit that wrote it (CUDA 12.5 writes .version 8.5); a driver of an
    older CUDA (550: CUDA 12.4, PTX ISA 8.4) refuses it: 'CUDA_ERROR_UNSUPPORTED_PTX_VERSION', 'the provided PTX was
    compiled with an unsupported toolchain', 'Unsupported .version 8.5; current version is 8.4'. Every kernel fails
    though everything installs and imports.""",
    fix="""Point CUDA_HOME at a toolkit no newer than the driver's CUDA (or install one), upgrade the driver, or let
    numba link the PTX itself (pip install pynvjitlink-cu12 and NUMBA_CUDA_ENABLE_PYNVJITLINK=1).""",
)
def jit_ptx_newer_than_driver(facts: Facts, matrix) -> Result:
    driver = driver_version(facts)
    if not driver:
        return skip("no NVIDIA driver version is known (see DLD-GPU-001)")
    max_cuda = (matrix.driver(driver) or {}).get("max_cuda")
    home = facts.get("cuda_toolkits.cuda_home")
    default = facts.get("cuda_toolkits.default") or {}
    toolkit = _toolkit_of(facts, home) if home else None
    if toolkit is None and not home and default.get("version"):
        toolkit = {"path": default.get("target") or "/usr/local/cuda", "version": default.get("version")}
    via = "CUDA_HOME" if home else "/usr/local/cuda"
    emitters, own, linked = [], [], []
    for env in facts.get("python_envs.environments") or []:
        dists = env.get("distributions") or {}
        for name, version in dists.items():
            entry = matrix.consumer(name)
            if not entry or entry.get("emits_ptx") != "toolkit":
                continue
            who = f"{name} {version} in {env.get('name')} ({env.get('prefix')})"
            if any(d.startswith("nvidia-cuda-nvcc") for d in dists) or \
                    any(str(k).startswith("cudatoolkit") or str(k) == "cuda-nvcc" for k in env.get("conda_packages") or {}):
                own.append(who)  # it finds the environment's own compiler first: not the system toolkit
            elif any(d in dists for d in entry.get("ptx_linkers") or []):
                linked.append(who)
            else:
                emitters.append(who)
    evidence: Dict[str, Any] = {"driver": driver, "driver_max_cuda": max_cuda, "toolkit": toolkit, "found_via": via,
                                "emitters": emitters, "with_own_compiler": own, "with_ptx_linker": linked}
    if not emitters:
        if own or linked:
            return passed("what compiles PTX at run time here uses its environment's own compiler or links the PTX "
                          "itself: " + ", ".join(own + linked), **evidence)
        return skip("nothing installed here compiles PTX at run time with a CUDA toolkit", **evidence)
    if not toolkit or not toolkit.get("version") or not max_cuda:
        return skip(f"{', '.join(emitters)}: the toolkit it would use or the driver's CUDA is not known", **evidence)
    tk = versions.major_minor(str(toolkit["version"])) or str(toolkit["version"])
    if versions.release(tk) <= versions.release(max_cuda):
        return passed(f"{', '.join(emitters)} compile PTX with CUDA {tk} ({toolkit.get('path')}, via {via}); driver "
                      f"{driver} loads PTX up to CUDA {max_cuda}", **evidence)
    older = [t for t in facts.get("cuda_toolkits.toolkits") or []
             if t.get("version") and versions.release(versions.major_minor(str(t["version"])) or "0") <=
             versions.release(max_cuda)]
    commands: List[Any] = []
    if older:
        best = max(older, key=lambda t: versions.release(str(t["version"])))
        commands.append(f"export CUDA_HOME={best['path']}   # CUDA {best['version']}: PTX this driver loads")
    commands += driver_install_commands(facts, driver_branch((matrix.toolkit(tk) or {}).get("min_driver")))
    commands.append("pip install pynvjitlink-cu12 && export NUMBA_CUDA_ENABLE_PYNVJITLINK=1   # or let numba link it")
    return warn(f"{', '.join(emitters)} compile kernels to PTX with CUDA {tk} ({toolkit.get('path')}, via {via}), "
                f"but driver {driver} loads PTX only up to CUDA {max_cuda}: every such kernel fails with "
                f"CUDA_ERROR_UNSUPPORTED_PTX_VERSION ('the provided PTX was compiled with an unsupported toolchain')",
                evidence, Fix(f"Compile the PTX with a toolkit of CUDA {max_cuda} or older, or upgrade the driver.",
                              tuple(commands)),
                headline=f"PTX from CUDA {tk}, driver {driver} loads up to CUDA {max_cuda}")


def _build_toolkit(facts: Facts) -> Optional[Tuple[str, str, str]]:
    """(path, version, how it is chosen) of the toolkit whose nvcc builds CUDA code here: CUDA_HOME's (what
    torch.utils.cpp_extension and CMake's FindCUDAToolkit take first), else the nvcc first on PATH, else
    /usr/local/cuda."""
    home = facts.get("cuda_toolkits.cuda_home")
    nvcc = facts.get("cuda_toolkits.nvcc_on_path")
    for path, how in ((home, "CUDA_HOME"), (nvcc, "the nvcc on PATH")):
        t = _toolkit_of(facts, path) if path else None
        if t and t.get("version"):
            return str(t.get("path")), str(t["version"]), how
    default = facts.get("cuda_toolkits.default") or {}
    if not home and (not nvcc or str(nvcc).startswith("/usr/local/cuda/")) and default.get("version"):
        return str(default.get("target") or "/usr/local/cuda"), str(default["version"]), "/usr/local/cuda"
    return None


def _gpu_first_cuda(facts: Facts, matrix) -> Dict[str, Tuple[str, str, str]]:
    """GPU name -> (compute capability, architecture, the first CUDA release that compiles for it), where the matrix
    states that release as verified: by PCI ID, else NVML's compute capability."""
    out: Dict[str, Tuple[str, str, str]] = {}
    archs = {cc: a for a in matrix.entries("architecture") for cc in a.get("compute_capabilities") or []}
    for d in facts.get("nvml.devices") or []:
        cc, name = d.get("compute_capability"), d.get("name")
        arch = archs.get(cc) if isinstance(cc, str) else None
        if name and arch and arch.get("min_cuda") and "min_cuda" not in (arch.get("unverified") or []):
            out[str(name)] = (cc, arch["name"], arch["min_cuda"])
    if out:
        return out
    for g in nvidia_gpus(facts):
        entry = matrix.gpu_by_pci(g.get("device_id") or "")
        if not entry:
            continue
        arch = matrix.architecture(entry.get("architecture") or "") or {}
        first = entry.get("min_cuda") or arch.get("min_cuda")
        if first and "min_cuda" not in (arch.get("unverified") or []) + (entry.get("unverified") or []):
            out[entry["name"]] = (entry.get("compute_capability") or "?", entry["architecture"], first)
    return out


@check(
    id="DLD-CUDA-004", slug="toolkit-older-than-gpu",
    remedy="repair-software", drain=False,
    problem="The CUDA toolkit that builds code here cannot compile for these GPUs",
    title="The CUDA toolkit that builds code here can compile for these GPUs",
    tags=("cuda", "gpu", "build"), requires=("cuda_toolkits",), applies=(needs_nvidia_gpu,),
    what="""Takes the toolkit whose nvcc builds CUDA code here (CUDA_HOME's, else the nvcc first on PATH, else
    /usr/local/cuda) and holds its release against the first CUDA release that compiles for each GPU's architecture
    (the matrix's architecture table: Ada and Hopper from 11.8, Blackwell from 12.8).""",
    why="""nvcc refuses an architecture newer than itself: 'nvcc fatal : Unsupported gpu architecture compute_89'
    (CUDA 11.5 on an RTX 4090), 'compute_120' (CUDA 12.4 on an RTX 5090). Every extension build (torch extensions,
    pointnet2, tiny-cuda-nn, flash-attn from source) and every CMake project that targets the native architecture
    fails, although the framework wheels, built elsewhere, run.""",
    fix="""Install a toolkit of at least that release and point CUDA_HOME and PATH at it (or target an older
    architecture explicitly, TORCH_CUDA_ARCH_LIST / CMAKE_CUDA_ARCHITECTURES, at the cost of running PTX or older
    SASS).""",
)
def toolkit_older_than_gpu(facts: Facts, matrix) -> Result:
    tk = _build_toolkit(facts)
    gpus = _gpu_first_cuda(facts, matrix)
    evidence: Dict[str, Any] = {"build_toolkit": list(tk) if tk else None,
                                "gpus": {n: {"compute_capability": c, "architecture": a, "first_cuda": f}
                                         for n, (c, a, f) in gpus.items()}}
    if not tk:
        return skip("no CUDA toolkit builds code here (no CUDA_HOME, nvcc on PATH or /usr/local/cuda)", **evidence)
    if not gpus:
        return skip("the first CUDA release of these GPUs' architectures is not known", **evidence)
    path, version, how = tk
    mm = versions.major_minor(version) or version
    short = [(n, c, a, f) for n, (c, a, f) in gpus.items() if versions.release(mm) < versions.release(f)]
    if not short:
        return passed(f"CUDA {mm} ({path}, {how}) compiles for " + ", ".join(
            f"{n} (sm_{c.replace('.', '')})" for n, (c, _, _) in gpus.items()), **evidence)
    newer = [t for t in facts.get("cuda_toolkits.toolkits") or [] if t.get("version") and
             all(versions.release(str(t["version"])) >= versions.release(f) for _, _, _, f in short)]
    need = max((f for _, _, _, f in short), key=versions.release)
    steps: List[Any] = []
    if newer:
        best = max(newer, key=lambda t: versions.release(str(t["version"])))
        steps += [f"export CUDA_HOME={best['path']}", f"export PATH={best['path']}/bin:$PATH"]
    else:
        steps.append(f"# install the CUDA {need} toolkit (or newer) for this distribution, then point CUDA_HOME and "
                     f"PATH at it")
    steps.append("nvcc --list-gpu-arch   # what this nvcc can target")
    rows = [f"{n} ({a}, sm_{c.replace('.', '')}) needs CUDA {f} or newer" for n, c, a, f in short]
    return warn(f"the nvcc that builds code here is CUDA {mm} ({path}, {how}): " + "; ".join(rows) +
                f": builds for it fail ('nvcc fatal : Unsupported gpu architecture compute_"
                f"{short[0][1].replace('.', '')}')", evidence,
                Fix(f"Build with a CUDA {need}+ toolkit.", tuple(steps)),
                headline=f"nvcc {mm} cannot compile for {short[0][0]} (sm_{short[0][1].replace('.', '')})")
