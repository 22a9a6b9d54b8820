"""``--install ENV:REQUIREMENT``: one package changes in one Python environment, judged from what the matrix knows of
the release (its CUDA build, arch list, cuDNN, NumPy and Python needs, its companions)."""

from __future__ import annotations

import re
from typing import Any, Dict, Mapping, Optional, Tuple

from dl_doctor import versions
from dl_doctor.judge.plan.change import Change, PlanInputError, WhatIf

# distributions whose release the plan can model, and how: torch from the matrix's release table; torchvision and
# torchaudio as the companions that table lists; numpy by version alone (what the matrix knows of it is torch's rule)
MODELLED = ("torch", "torchvision", "torchaudio", "numpy")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def find_env(w: WhatIf, ref: str) -> Tuple[int, Dict[str, Any]]:
    """The environment ``ref`` names: its prefix (a path) or its name; exit 2 when none or several match."""
    envs = [(n, e) for n, e in enumerate(w.environments()) if not e.get("error")]
    ref = ref.rstrip("/") if ref not in ("/",) else ref
    by_prefix = [(n, e) for n, e in envs if str(e.get("prefix") or "").rstrip("/") == ref]
    if by_prefix:
        return by_prefix[0]
    by_name = [(n, e) for n, e in envs if e.get("name") == ref]
    if len(by_name) == 1:
        return by_name[0]
    if len(by_name) > 1:
        raise PlanInputError(f"--install: '{ref}' names {len(by_name)} environments; give the prefix of one: "
                             + ", ".join(str(e.get("prefix")) for _, e in by_name[:8]))
    known = ", ".join(f"{e.get('name') or '?'} ({e.get('prefix')})" for _, e in envs[:8]) or "none recorded"
    raise PlanInputError(f"--install: no Python environment '{ref}' in the facts; environments: {known}")


def parse(text: str) -> Tuple[str, Any]:
    from packaging.requirements import InvalidRequirement, Requirement

    spec = (text or "").strip()
    ref, sep, req_text = spec.rpartition(":")
    if not sep or not ref or not req_text or len(spec) > 512:
        raise PlanInputError(f"--install: '{spec[:80]}' is not ENV:REQUIREMENT (like venv:torch==2.9.0+cu130)")
    try:
        req = Requirement(req_text)
    except InvalidRequirement as exc:
        raise PlanInputError(f"--install: '{req_text[:80]}' is not a requirement: {str(exc).splitlines()[0][:160]}")
    return ref, req


def _frameworks(env: Dict[str, Any]) -> Dict[str, Any]:
    if not isinstance(env.get("frameworks"), dict):
        env["frameworks"] = {}
    return env["frameworks"]


def _pinned(req: Any) -> Optional[str]:
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return specs[0].version
    return None


def _cuda_of_local(local: Optional[str]) -> Tuple[bool, Optional[str]]:
    """(known, CUDA major.minor) of a local version label: cu130 -> 13.0, cu118 -> 11.8, cpu -> None."""
    if local is None:
        return False, None
    if local == "cpu":
        return True, None
    m = re.fullmatch(r"cu(\d{2,3})", local)
    if not m:
        raise PlanInputError(f"--install: '+{local}' is not a PyTorch build label (cu126, cu130, cpu)")
    digits = m.group(1)
    return True, f"{digits[:-1]}.{digits[-1]}"


def _forget_cuda_needs(w: WhatIf, change: Change, env: Dict[str, Any], record: Dict[str, Any], label: str) -> None:
    """The new wheel has torch's own libraries under the same names (libc10.so, libtorch_cuda.so: what extensions
    find through it), but which CUDA libraries they need, and where those come from, is the new wheel's: not
    recorded, so not judged (what an extension built for the old torch needs stays, and is judged)."""
    from dl_doctor.facts.loading import is_cuda_library

    path = ((env.get("frameworks") or {}).get("torch") or {}).get("path")
    files = record.get("files")
    if not isinstance(path, str) or not path or not isinstance(files, dict):
        return
    root = path.rstrip("/") + "/"
    dropped = 0
    for name, dyn in files.items():
        if isinstance(name, str) and name.startswith(root) and isinstance(dyn, dict) and \
                isinstance(dyn.get("needed"), list):
            keep = [n for n in dyn["needed"] if not (isinstance(n, str) and is_cuda_library(n))]
            dropped += len(dyn["needed"]) - len(keep)
            dyn["needed"] = keep
            if isinstance(dyn.get("verneed"), dict):
                dyn["verneed"] = {k: v for k, v in dyn["verneed"].items() if not is_cuda_library(str(k))}
    if dropped:
        change.edits.append({"key": f"{label}.loader.files", "from": f"{dropped} CUDA libraries torch's files need",
                             "to": None, "why": "the new wheel's CUDA libraries are pip's to install: judged after"})


def _torch(w: WhatIf, n: int, env: Dict[str, Any], req: Any, matrix: Any, change: Change) -> None:
    pin = _pinned(req)
    found = _frameworks(env).get("torch")
    current: Dict[str, Any] = found if isinstance(found, dict) else {}
    if pin is None:
        raise PlanInputError("--install: say which torch release and build (torch==2.9.0+cu130): pip would take the "
                             "newest the index has, which a plan cannot know")
    base, _, local = pin.partition("+")
    info = matrix.torch(base)
    if info is None:
        raise PlanInputError(f"--install: torch {base} is not in the matrix; nearest known: "
                             + ", ".join(matrix.closest("torch", base)))
    named, cuda = _cuda_of_local(local or None)
    if not named:  # no build label: the CUDA build the environment has now, where the release has it
        cuda = versions.major_minor(current.get("cuda")) if current.get("cuda") else None
        if cuda is None or cuda not in info["cuda_variants"]:
            raise PlanInputError(f"--install: say which build of torch {base}: "
                                 + ", ".join(f"torch=={base}+cu{c.replace('.', '')}" for c in info["cuda_variants"])
                                 + f" or torch=={base}+cpu")
    if cuda is not None and cuda not in info["cuda_variants"]:
        raise PlanInputError(f"--install: torch {base} has no cu{cuda.replace('.', '')} build; its builds: "
                             + ", ".join(f"cu{c.replace('.', '')}" for c in info["cuda_variants"]))
    label = f"python_envs.environments[{n}]"
    version = f"{base}+cu{cuda.replace('.', '')}" if cuda else f"{base}+cpu"
    change.summary = (f"{env.get('name') or env.get('prefix')}: torch {current.get('version') or 'none'} -> {version}"
                      + (f" (CUDA {cuda}, cuDNN {info['cudnn'].get(cuda) or '?'})" if cuda else " (CPU build)"))
    change.verified = bool(info.get("verified", True))
    change.sources = list(info.get("sources") or [])
    unverified = (info.get("unverified") or {}).get(cuda or "", []) + list((info.get("unverified") or {})
                                                                         .get("release") or [])
    if unverified:
        change.notes.append(f"the matrix marks these of torch {base} unverified: {', '.join(sorted(set(unverified)))}")
    py = env.get("python_version")
    if isinstance(py, str) and versions.major_minor(py) and versions.major_minor(py) not in info["python"]:
        change.blockers.append(f"torch {base} has no wheel for Python {versions.major_minor(py)} (it is built for "
                               f"{', '.join(info['python'])}): pip would find no matching distribution")
    frameworks = _frameworks(env)
    old = dict(frameworks["torch"]) if isinstance(frameworks.get("torch"), dict) else {}
    new_torch = {k: v for k, v in old.items() if k in ("installer", "location", "path")}
    new_torch.update({"version": version, "cuda": cuda, "cpu_only": cuda is None})
    w.set_in(change, frameworks, "torch", new_torch, f"{label}.frameworks.torch")
    change.edits.append({"key": f"{label}.frameworks.torch.version", "from": old.get("version"), "to": version})
    dists = env.get("distributions")
    if isinstance(dists, dict):
        w.set_in(change, dists, "torch", base, f"{label}.distributions.torch")
    pkg = ((env.get("packaging") or {}).get("distributions") or {}).get("torch")
    if isinstance(pkg, dict):
        w.set_in(change, pkg, "version", base, f"{label}.packaging.distributions.torch.version")
        w.drop_in(change, pkg, "requires", f"{label}.packaging.distributions.torch.requires",
                  "the new wheel's requirements are not recorded")
    consumers = env.get("consumers")
    for c in consumers if isinstance(consumers, list) else []:
        if isinstance(c, dict) and c.get("distribution") == "torch":
            fresh = {k: v for k, v in c.items() if k in ("distribution", "known_as", "location", "machine", "package",
                                                        "preload", "dlopen")}
            fresh.update({"version": version, "cuda_major": versions.major(cuda) if cuda else None,
                          "cuda_major_from": "matrix", "build": {"from": "plan: the matrix's release table",
                                                                 "cuda": cuda}})
            c.clear()
            c.update(fresh)
            change.edits.append({"key": f"{label}.consumers[torch]", "from": "(recorded)", "to": "(from the matrix)",
                                 "why": "the new wheel's files are not recorded: which libraries it loads is judged "
                                        "after the install"})
    record = env.get("loader")
    if isinstance(record, dict):
        objects = record.get("objects")
        if isinstance(objects, dict) and "torch" in objects:
            w.drop_in(change, objects, "torch", f"{label}.loader.objects.torch", "the old wheel's objects")
        if isinstance(record.get("torch"), dict):
            w.drop_in(change, record["torch"], "preload", f"{label}.loader.torch.preload",
                      "the new release's preloading is not recorded")
            w.set_in(change, record["torch"], "cuda", cuda, f"{label}.loader.torch.cuda")
        _forget_cuda_needs(w, change, env, record, label)
    for key in ("deep",):
        w.drop_in(change, env, key, f"{label}.{key}", "--deep ran the old torch")
    deep_consumers = env.get("deep_consumers")
    if isinstance(deep_consumers, dict) and "torch" in deep_consumers:
        w.drop_in(change, deep_consumers, "torch", f"{label}.deep_consumers.torch", "--deep ran the old torch")
    python = env.get("python") or f"{env.get('prefix')}/bin/python"
    companions = [f"{comp}=={info[comp]}" for comp in ("torchvision", "torchaudio")
                  if (frameworks.get(comp) and info.get(comp) and len(versions.release(info[comp])) >= 3)]
    change.installs += ["torch"] + [c.split("==")[0] for c in companions]
    index = f"https://download.pytorch.org/whl/{'cu' + cuda.replace('.', '') if cuda else 'cpu'}"
    change.step(f"Install torch {version} in {env.get('name') or env.get('prefix')}"
                + (f" with its companions ({', '.join(companions)})" if companions else ""),
                [f"{python} -m pip install 'torch=={base}' " + " ".join(f"'{c}'" for c in companions)
                 + f" --index-url {index}"])


def _simple(w: WhatIf, n: int, env: Dict[str, Any], name: str, req: Any, matrix: Any, change: Change) -> None:
    pin = _pinned(req)
    if pin is None:
        raise PlanInputError(f"--install: say which {name} version ({name}==X.Y.Z): pip would take the newest the "
                             f"index has, which a plan cannot know")
    if versions.parse(pin) is None:
        raise PlanInputError(f"--install: '{pin}' is not a {name} version")
    if name in ("torchvision", "torchaudio"):
        known = sorted({str(e.get(name)) for e in matrix.entries("torch") if e.get(name)}, key=versions.release)
        if versions.major_minor(pin) not in {versions.major_minor(k) for k in known}:
            near = sorted(known, key=lambda k: tuple(abs(a - b) for a, b in zip(
                versions.release(k) + (0, 0), versions.release(pin) + (0, 0))))[:3]
            raise PlanInputError(f"--install: {name} {pin} is not in the matrix (as a companion of a torch release); "
                                 f"nearest known: {', '.join(near)}")
    label = f"python_envs.environments[{n}]"
    frameworks = _frameworks(env)
    old = dict(frameworks[name]) if isinstance(frameworks.get(name), dict) else {}
    new = {k: v for k, v in old.items() if k in ("installer", "location", "cuda")}
    new["version"] = pin
    w.set_in(change, frameworks, name, new, f"{label}.frameworks.{name}")
    dists = env.get("distributions")
    if isinstance(dists, dict):
        w.set_in(change, dists, name, pin, f"{label}.distributions.{name}")
    change.summary = f"{env.get('name') or env.get('prefix')}: {name} {old.get('version') or 'none'} -> {pin}"
    python = env.get("python") or f"{env.get('prefix')}/bin/python"
    change.installs.append(name)
    change.step(f"Install {name} {pin} in {env.get('name') or env.get('prefix')}",
                [f"{python} -m pip install '{name}=={pin}'"])


def apply(w: WhatIf, value: str, matrix: Any, options: Mapping[str, Any]) -> Change:
    ref, req = parse(value)
    n, env = find_env(w, ref)
    name = _norm(req.name)
    change = Change("install", f"--install {value.strip()}")
    if name == "pytorch":
        name = "torch"
    if name == "torch":
        _torch(w, n, env, req, matrix, change)
    elif name in MODELLED:
        _simple(w, n, env, name, req, matrix, change)
    else:
        known = matrix.consumer(name)
        change.unknown = True
        change.summary = f"{env.get('name') or env.get('prefix')}: {req} (not judged)"
        change.notes.append(f"the matrix has no release data for {name}"
                            + (" (it knows it as a CUDA consumer, not its releases)" if known else "")
                            + ": what this install changes is unknown; run dl-doctor after it")
    return change

