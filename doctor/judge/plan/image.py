"""``--image FILE``: a container image this host would run, judged the way the NVIDIA container runtime judges it.

The document is what ``docker inspect IMAGE`` prints (a JSON array of one object with ``Config.Env``,
``Config.Labels``, ``RepoTags``) or an OCI image config (``{"config": {"Env": [...], "Labels": {...}}}``); the CLI
reads and parses the file, this module validates its shape. The after-state is the container the NVIDIA runtime
would start from it on this host: the image's NVIDIA_*/CUDA_* variables in ``cuda_toolkits.container_env`` (what
DLD-CUDA-001 judges with dl_doctor.facts.requirements: NVIDIA_REQUIRE_*, NVIDIA_DISABLE_REQUIRE, a legacy image's
CUDA_VERSION), inside a container whose driver is the host's, mounted in by the runtime. What the image's own file
system holds (its libraries, its Python environments, its cuda-compat package) is not in its config: unknown."""

from __future__ import annotations

import re
from typing import Any, Dict, Mapping, Optional, Tuple

from dl_doctor.facts import requirements
from dl_doctor.judge.plan.change import Change, PlanInputError, WhatIf

MAX_ENV = 4096          # Env entries read
MAX_ENTRY = 65536       # characters of one Env entry
MAX_LABELS = 1024
MAX_NAME = 256
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$")
_SAFE = re.compile(r"[^\x20-\x7e]")
NAME_LABELS = ("org.opencontainers.image.ref.name", "org.opencontainers.image.title", "com.nvidia.build.ref")


def _clean(text: str, limit: int = MAX_NAME) -> str:
    return _SAFE.sub("?", text[:limit])


def config_of(document: Any) -> Tuple[Mapping[str, Any], Mapping[str, Any], str]:
    """(its config object, the object around it, the shape's name) of a docker inspect array, one docker inspect
    object, or an OCI image config; PlanInputError (one line) for anything else."""
    doc = document
    shape = "docker inspect"
    if isinstance(doc, list):
        items = [d for d in doc if isinstance(d, dict)]
        if not doc:
            raise PlanInputError("--image: the document is an empty array (docker inspect found no image)")
        if len(doc) > 1:
            raise PlanInputError(f"--image: the document describes {len(doc)} images; give the docker inspect output "
                                 "of one")
        if not items:
            raise PlanInputError("--image: the array's entry is not an object (expected docker inspect output)")
        doc = items[0]
    if not isinstance(doc, dict):
        raise PlanInputError("--image: not a docker inspect array or an OCI image config (a JSON object or array)")
    config = doc.get("Config")
    if config is None and "config" in doc:
        config, shape = doc.get("config"), "OCI image config"
    if config is None and ("Env" in doc or "Labels" in doc):
        config, shape = doc, "image config"  # the Config object on its own (docker inspect -f '{{json .Config}}')
    if not isinstance(config, dict):
        raise PlanInputError("--image: no Config (docker inspect) or config (OCI image config) object with Env in it")
    env = config.get("Env")
    if env is not None and not isinstance(env, list):
        raise PlanInputError("--image: Config.Env is not a list of NAME=VALUE strings")
    labels = config.get("Labels")
    if labels is not None and not isinstance(labels, dict):
        raise PlanInputError("--image: Config.Labels is not an object")
    return config, doc, shape


def environment(config: Mapping[str, Any]) -> Tuple[Dict[str, str], int]:
    """The image's Env as a mapping (later entries win, as in a container), and how many entries were left out
    (not strings, no '=', a bad name, too long, past MAX_ENV)."""
    env: Dict[str, str] = {}
    skipped = 0
    entries = config.get("Env") or []
    for i, item in enumerate(entries):
        if i >= MAX_ENV:
            skipped += len(entries) - MAX_ENV
            break
        if not isinstance(item, str) or "=" not in item or len(item) > MAX_ENTRY:
            skipped += 1
            continue
        name, value = item.split("=", 1)
        if not _NAME.match(name):
            skipped += 1
            continue
        env[name] = value
    return env, skipped


def labels_of(config: Mapping[str, Any]) -> Dict[str, str]:
    raw = config.get("Labels") or {}
    out: Dict[str, str] = {}
    for k, v in list(raw.items())[:MAX_LABELS]:
        if isinstance(k, str) and isinstance(v, str) and len(k) <= MAX_NAME:
            out[k] = v[:MAX_NAME]
    return out


def image_name(doc: Mapping[str, Any], labels: Mapping[str, str], given: Optional[str] = None) -> str:
    """RepoTags' first, else a name label, else the image id's start, else the file's name."""
    tags = doc.get("RepoTags")
    if isinstance(tags, list):
        for t in tags:
            if isinstance(t, str) and t:
                return _clean(t)
    for key in NAME_LABELS:
        if labels.get(key):
            return _clean(labels[key])
    digest = doc.get("Id") or doc.get("id")
    if isinstance(digest, str) and digest:
        return _clean(digest.split(":")[-1][:12])
    return _clean(given) if given else "(unnamed image)"


def _engine(w: WhatIf) -> Optional[str]:
    toolkit = w.get("gpu_services.container_toolkit") or {}
    if not isinstance(toolkit, dict):
        return None
    if toolkit.get("docker_installed"):
        return "docker"
    if toolkit.get("containerd_nvidia_runtime"):
        return "containerd"
    return None


def apply(w: WhatIf, value: Any, matrix: Any, options: Mapping[str, Any]) -> Change:
    """The container the NVIDIA runtime would start from this image on this host (``value``: the parsed document;
    ``options["image_file"]``: the file's name, for an image with no tag or id)."""
    given = options.get("image_file") if isinstance(options.get("image_file"), str) else None
    config, doc, shape = config_of(value)
    env, skipped = environment(config)
    labels = labels_of(config)
    name = image_name(doc, labels, given)
    selected = requirements.runtime_env(env)
    cuda = requirements.image_cuda(selected)
    change = Change(kind="image", option=f"--image {given or name}",
                    summary=f"image {name}" + (f" (CUDA {cuda})" if cuda else " (no CUDA_VERSION or NVIDIA_REQUIRE_CUDA)"))
    # the container's environment replaces whatever container this report was taken in
    before = w.get("cuda_toolkits.container_env")
    if isinstance(before, dict):
        for key in sorted(k for k in before if k not in selected):
            w.drop(change, f"cuda_toolkits.container_env.{key}", "not in the image's Env")
    if not isinstance(w.get("cuda_toolkits.container_env"), dict):
        w.set(change, "cuda_toolkits.container_env", {})
    for key, val in selected.items():
        w.set(change, f"cuda_toolkits.container_env.{key}", val)
    # the container: the NVIDIA runtime mounts the host's driver (libraries, device nodes) into it
    w.set(change, "system.container.in_container", True)
    w.set(change, "system.container.evidence", [f"{requirements.PLANNED_CONTAINER} {name}"])  # what-if: not running
    engine = _engine(w)
    if engine:
        w.set(change, "system.container.kind", engine)
    w.set(change, "nvidia_driver.runtime.by", "container-runtime")
    # what the runtime's check will say, for the change record (the check itself is DLD-CUDA-001's)
    host = requirements.host_from_facts(w.get, matrix)
    verdict = requirements.evaluate(selected, host)
    change.sources = ["https://github.com/NVIDIA/libnvidia-container/blob/main/src/cli/dsl.c",
                      "https://github.com/NVIDIA/nvidia-container-toolkit/blob/main/internal/config/image/cuda_image.go"]
    if verdict.status == "disabled":
        change.notes.append(f"{verdict.disabled_by}: the runtime checks none of the image's NVIDIA_REQUIRE_* variables")
    elif verdict.status == "none":
        change.notes.append("the image sets no NVIDIA_REQUIRE_* and no CUDA_VERSION: the runtime checks nothing "
                            "against the driver")
    elif verdict.status in ("unsatisfied", "invalid"):
        change.notes.append(f"the NVIDIA runtime (legacy mode, docker --gpus) would refuse to start it: "
                            f"'{verdict.error}'")
    elif verdict.status == "satisfied" and verdict.forward_compat:
        alt = verdict.satisfied_by.get("NVIDIA_REQUIRE_CUDA") or ""
        change.notes.append(f"the runtime would start it through NVIDIA_REQUIRE_CUDA's alternative '{alt}': its CUDA "
                            f"{cuda} code needs the image's forward-compatibility package (data-center GPUs only)")
    if verdict.legacy:
        change.notes.append(f"a legacy image (CUDA_VERSION, no NVIDIA_REQUIRE_CUDA): the runtime requires "
                            f"cuda>={requirements.major_minor(selected.get('CUDA_VERSION')) or '?'}")
    for why in verdict.unknown:
        change.notes.append(f"unknown: {why}")
    missing = requirements.missing_facts(host)
    if missing and verdict.status not in ("disabled", "none"):
        change.notes.append("not known of this host: " + ", ".join(missing))
        if verdict.status == "unknown":
            change.unknown = True
    change.notes.extend(verdict.notes)
    change.notes.append(f"from its {shape}: only its environment and labels are known; the image's own libraries, "
                        "Python environments and cuda-compat package are not (the host's own stay in the what-if "
                        "copy and are judged as before)")
    cdi = (w.get("gpu_services.container_toolkit") or {}).get("cdi_specs") \
        if isinstance(w.get("gpu_services.container_toolkit"), dict) else None
    if cdi:
        change.notes.append("this host has CDI specifications: a container started through CDI (--device "
                            "nvidia.com/gpu=..., the runtime's cdi mode) is not checked against NVIDIA_REQUIRE_*")
    if skipped:
        change.notes.append(f"{skipped} Env entries were left out (not NAME=VALUE strings, or past the bounds)")
    if verdict.status in ("unsatisfied", "invalid") and cuda:
        entry = matrix.toolkit(cuda) if matrix is not None and hasattr(matrix, "toolkit") else None
        need = entry.get("min_driver") if isinstance(entry, dict) else None
        if need:
            change.step(f"upgrade the driver to {need} or newer before running {name} (CUDA {cuda})", order=30)
    return change

