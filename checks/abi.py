"""Every compiled object against what it would load: the framework C++ symbols a compiled extension imports against
the exports of the framework libraries that resolve for it (the probe's answer, dl_doctor.readers.abi, made on the
one resolution of dl_doctor.facts.loading), and the C++ ABI flag (_GLIBCXX_USE_CXX11_ABI) of both sides."""

from __future__ import annotations

import shlex
from typing import Any, Dict, List, Optional

from dl_doctor.checks.common import consumers_with_loading, first_heading
from dl_doctor.model import Facts, Fix, Result, check, fail, passed, skip

MAX_SHOWN = 3


def _envs(facts: Facts) -> List[Dict[str, Any]]:
    return [e for e in facts.get("python_envs.environments") or [] if isinstance(e, dict) and not e.get("error")]


def needs_extension_facts(facts: Facts) -> Optional[str]:
    if not facts.has("python_envs"):
        return None
    envs = _envs(facts)
    if envs and all("consumers" not in e for e in envs):
        return "these facts predate the consumer model (dl-doctor 0.2.0); collect them again"
    return None


def _label(env: Dict[str, Any]) -> str:
    return f"{env.get('name')} ({env.get('prefix')})"


def _python(env: Dict[str, Any]) -> str:
    return shlex.quote(env.get("python") or f"{env.get('prefix')}/bin/python")


def _own_torch(env: Dict[str, Any]) -> Optional[str]:
    torch = (env.get("frameworks") or {}).get("torch") or {}
    if torch.get("version"):
        return str(torch["version"])
    c = next((x for x in env.get("consumers") or [] if isinstance(x, dict) and x.get("distribution") == "torch"), None)
    return str(c["version"]) if c and c.get("version") else None


def torch_for(env: Dict[str, Any], envs: List[Dict[str, Any]]) -> Optional[str]:
    """The torch an environment's extensions run with: its own; for a user site (~/.local/lib/pythonX.Y, on the
    sys.path of every interpreter of that version that is not a venv), the one torch those interpreters' environments
    hold (None where there is none, or several different ones: which one runs is not known)."""
    own = _own_torch(env)
    if own or env.get("kind") != "user-site":
        return own
    found = {_own_torch(e) for e in envs if e is not env and e.get("kind") not in ("venv", "user-site")
             and e.get("python_version") == env.get("python_version")} - {None}
    return next(iter(found)) if len(found) == 1 else None


def _abi_note(unresolved: List[Dict[str, Any]]) -> Optional[str]:
    """The C++ ABI flag, where the framework exports the missing names built with the other flag."""
    flipped = [u for u in unresolved if isinstance(u.get("other_abi"), dict) and u["other_abi"].get("exported_by")]
    if not flipped:
        return None
    u = flipped[0]
    mine, theirs = ("1", "0") if u.get("cxx11") else ("0", "1")
    return (f"a C++ ABI flag mismatch: it was built with _GLIBCXX_USE_CXX11_ABI={mine} "
            f"({'std::__cxx11::basic_string' if mine == '1' else 'the pre-cxx11 std::string'} in its symbols), "
            f"{u['other_abi']['exported_by']}, which it links, with _GLIBCXX_USE_CXX11_ABI={theirs} (it exports "
            f"{u['other_abi']['symbol']})")


@check(
    id="DLD-ABI-001", slug="extension-undefined-symbol",
    remedy="repair-software", drain=False,
    problem="A compiled extension imports framework symbols the installed framework does not export",
    title="Every framework C++ symbol a compiled extension imports (c10::, at::, torch::) is exported by the framework "
          "libraries that load for it",
    tags=("python", "torch", "frameworks", "abi"), requires=("python_envs",), applies=(needs_extension_facts,),
    what="""For every installed distribution whose objects link torch (flash-attn, xformers, vLLM, sgl-kernel, apex,
    Transformer Engine, DeepSpeed ops, bitsandbytes, torch-scatter, detectron2, mmcv, torchvision...), reads the C++
    symbols of torch's namespaces (c10::, at::, torch::, caffe2::) each of its objects leaves undefined (.dynsym) and
    looks each one up, as ld.so does (the hash table of each library), in the libraries its DT_NEEDED closure
    resolves to on this machine (libc10.so, libtorch_cpu.so, libtorch_python.so...). A symbol none of them exports
    fails the import with 'undefined symbol'. Where the framework exports the same symbol built with the other
    _GLIBCXX_USE_CXX11_ABI (std::__cxx11::basic_string against std::string), the finding names the ABI flag.""",
    why="""'ImportError: .../flash_attn_2_cuda...so: undefined symbol: _ZN3c104cuda9SetDeviceEi' is what a compiled
    extension built against another torch prints on import: torch's C++ API changes every release, and pip upgrades
    torch without rebuilding what was compiled against it. The same error comes from an extension built with the
    other C++ string ABI (flash-attn's cxx11abiTRUE wheel under a pre-cxx11 torch, or the reverse), whatever the
    versions say. The files show it before anything is imported.""",
    fix="""Install the extension's build for the installed torch (its release for this torch, the wheel with the
    matching cxx11abi flag), or rebuild it against this torch (pip install --no-build-isolation --no-binary), or
    install the torch it was built for.""",
)
def extension_undefined_symbol(facts: Facts, matrix) -> Result:
    problems: List[str] = []
    heads: List[str] = []
    commands: List[str] = []
    evidence: Dict[str, Any] = {"unresolved": []}
    ok: List[str] = []
    unknown: List[str] = []
    envs = _envs(facts)
    pairs = [(env, c) for env, c in consumers_with_loading(facts, matrix)]
    for env in envs:  # torch extensions that need no CUDA library (the loader inputs' extensions_abi)
        for name, abi in sorted(((env.get("loader") or {}).get("extensions_abi") or {}).items()):
            if isinstance(abi, dict):
                pairs.append((env, {"distribution": name, "version": abi.get("version"), "abi": abi}))
    for env, c in pairs:
        abi = c.get("abi")
        if not isinstance(abi, dict):
            continue
        unresolved = [u for u in abi.get("unresolved") or [] if isinstance(u, dict) and u.get("symbol")]
        name = f"{c['distribution']} {c.get('version') or ''}".strip()
        if not unresolved:
            if abi.get("objects"):
                ok.append(f"{name} ({env.get('name')})")
            unknown += [f"{name}: {u}" for u in abi.get("unknown") or []]
            continue
        torch = torch_for(env, envs)
        total = abi.get("unresolved_count") or len(unresolved)
        shown = "; ".join(f"{u.get('object')} imports {u.get('name') or u['symbol']} ({u['symbol']})"
                          for u in unresolved[:MAX_SHOWN])
        libs = ", ".join(unresolved[0].get("libraries") or []) or "its libraries"
        note = _abi_note(unresolved)
        built = c.get("built_for_torch")
        cause = note or (f"built against another torch (its wheel names torch {built})" if built and torch and
                         not torch.startswith(built) else "built against another torch than the installed one")
        problems.append(f"{name} in {_label(env)}: {shown}{f' (and {total - MAX_SHOWN} more)' if total > MAX_SHOWN else ''}"
                        f", which none of {libs} (torch {torch or 'not found'}) exports — {cause}")
        heads.append(f"{c['distribution']} cannot import: undefined symbol {unresolved[0]['symbol'][:80]}")
        evidence["unresolved"].append({"environment": env.get("prefix"), "distribution": c["distribution"],
                                       "version": c.get("version"), "torch": torch, "unresolved": unresolved[:MAX_SHOWN],
                                       "count": total, "abi_flag": note})
        version = str(c.get("version") or "").split("+")[0]
        commands.append(f"{_python(env)} -m pip install --force-reinstall --no-deps --no-build-isolation --no-binary "
                        f"{shlex.quote(c['distribution'])} {shlex.quote(c['distribution'] + '==' + version)}"
                        f"   # rebuild it against torch {torch or ''} (or install its release built for this torch)")
        if note:
            commands.append(f"{_python(env)} -c 'import torch; print(torch._C._GLIBCXX_USE_CXX11_ABI)'"
                            f"   # the flag a prebuilt wheel must match (flash-attn: cxx11abiTRUE/FALSE)")
    if unknown:
        evidence["unknown"] = unknown[:10]
    if problems:
        return fail("; ".join(problems), evidence,
                    Fix("Install the extension's build for the installed torch (or rebuild it against it).",
                        tuple(dict.fromkeys(commands)) + (
                            "nm -D --undefined-only <the .so> | c++filt | grep -E 'c10::|at::|torch::'   # what it "
                            "imports",)),
                    headline=first_heading(heads, len(problems)))
    if ok:
        return passed(f"every framework symbol they import is exported by the torch that loads: {', '.join(ok)}",
                      **evidence)
    return skip("no compiled extension imports framework symbols from a symbol table that could be read")
