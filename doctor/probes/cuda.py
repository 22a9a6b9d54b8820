"""CUDA toolkits installed on the host: /usr/local/cuda-*, the /usr/local/cuda link, CUDA_HOME, nvcc."""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Tuple

from dl_doctor.facts import requirements
from dl_doctor.facts.contract import array, boolean, obj, string
from dl_doctor.probes import ProbeContext, probe

_CUDA_H = re.compile(r"^#define[ \t]{1,16}CUDA_VERSION[ \t]{1,16}([0-9]{1,9})", re.M)
_VERSION_TXT = re.compile(r"CUDA Version\s+(\d+\.\d+(?:\.\d+)?)")
_NVCC = re.compile(r"release (\d+\.\d+), V(\d+\.\d+\.\d+)")
_DIST = re.compile(r"^nvidia_cuda_(?:nvcc|runtime)-(\d+\.\d+)\.\d+\.dist-info$")


def cuda_h_version(text: str) -> Optional[str]:
    """``#define CUDA_VERSION 12020`` -> ``12.2``."""
    m = _CUDA_H.search(text)
    if not m:
        return None
    n = int(m.group(1))
    return f"{n // 1000}.{(n % 1000) // 10}"


def toolkit_version(ctx: ProbeContext, root: str) -> Tuple[Optional[str], Optional[str]]:
    host = ctx.host
    text = host.try_read(f"{root}/version.json", 1 << 20)
    if text:
        try:
            doc = json.loads(text)
            cuda = doc.get("cuda") if isinstance(doc, dict) else None
            version = cuda.get("version") if isinstance(cuda, dict) else None
            if isinstance(version, str) and version:
                return version[:64], "version.json"
            ctx.bad_input(f"{root}/version.json", "no \"cuda\": {\"version\": ...} in it")
        except (ValueError, RecursionError) as exc:
            ctx.bad_input(f"{root}/version.json", f"not JSON: {exc}")
    text = host.try_read(f"{root}/version.txt", 4096)
    if text:
        m = _VERSION_TXT.search(text)
        if m:
            return m.group(1), "version.txt"
    text = host.try_read(f"{root}/include/cuda.h", 1 << 20)
    if text and cuda_h_version(text):
        return cuda_h_version(text), "include/cuda.h"
    for name in host.listdir(f"{root}/dist-info"):
        m = _DIST.match(name)
        if m:
            return m.group(1), f"dist-info/{name}"
    if host.live and host.exists(f"{root}/bin/nvcc"):
        try:
            result = host.run([host.resolve(f"{root}/bin/nvcc"), "--version"], timeout=5)
        except OSError:  # not runnable here, or not by root (doctor.trust): the version stays unknown
            return None, None
        m = _NVCC.search(result.stdout)
        if m:
            return m.group(2), "nvcc --version"
    return None, None


CUDA_TOOLKITS_FACTS = obj(
    "CUDA toolkits (/usr/local/cuda-*, CUDA_HOME, nvcc on PATH) and their versions",
    toolkits=array(obj(
        "",
        path=string("the toolkit's directory (a /usr/local/cuda-* directory, CUDA_HOME or CUDA_PATH, the link's "
                    "target)"),
        version=string("its CUDA version (null: none of the sources below says)"),
        source=string("where the version was read: version.json, version.txt, include/cuda.h, dist-info/..., "
                      "nvcc --version"),
        nvcc=boolean("it has bin/nvcc"),
    ), "one entry per toolkit directory found"),
    default=obj(
        "the /usr/local/cuda link (null: there is none)",
        path=string("/usr/local/cuda"),
        link=string("what the link points to, as written (null: a directory, not a link)"),
        target=string("the directory it resolves to"),
        version=string("that toolkit's version"),
    ),
    cuda_home=string("CUDA_HOME, else CUDA_PATH, of the session"),
    nvcc_on_path=string("the nvcc that PATH finds"),
    container_env=obj(
        "the CUDA variables a CUDA container image sets, those that are set; also every other NVIDIA_REQUIRE_* (at "
        "most 32, each cut at 8192 characters), which the NVIDIA container runtime ANDs with NVIDIA_REQUIRE_CUDA",
        NVIDIA_REQUIRE_CUDA=string("the image's driver requirement (cuda>=12.2 brand=...)"),
        NVIDIA_REQUIRE_DRIVER=string("a driver requirement (driver>=535)", since="0.2.0"),
        NVIDIA_REQUIRE_ARCH=string("a GPU architecture requirement (arch>=7.0)", since="0.2.0"),
        NVIDIA_REQUIRE_BRAND=string("a GPU brand requirement (brand=tesla)", since="0.2.0"),
        NVIDIA_DISABLE_REQUIRE=string("set true: the runtime checks none of the NVIDIA_REQUIRE_* variables",
                                      since="0.2.0"),
        CUDA_VERSION=string("the image's CUDA version"),
        NV_CUDA_CUDART_VERSION=string("the image's cudart package version"),
        NVIDIA_VISIBLE_DEVICES=string("the GPUs the container runtime exposes"),
        NVIDIA_DRIVER_CAPABILITIES=string("the driver capabilities the container runtime mounts"),
    ),
)


@probe("cuda_toolkits", "CUDA toolkits: /usr/local/cuda-*, the /usr/local/cuda link, CUDA_HOME and nvcc on PATH",
       provides=CUDA_TOOLKITS_FACTS)
def cuda_toolkits_probe(ctx: ProbeContext) -> Dict[str, Any]:
    host = ctx.host
    env = host.environ()
    roots: List[str] = [p for p in host.glob("/usr/local/cuda-*") if host.is_dir(p)]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        value = env.get(var)
        if value and value.startswith("/") and host.is_dir(value):
            real = host.tree_path(value)
            if real not in roots:
                roots.append(real)
    toolkits = []
    for root in sorted(set(roots)):
        version, source = toolkit_version(ctx, root)
        toolkits.append({"path": root, "version": version, "source": source,
                         "nvcc": host.exists(f"{root}/bin/nvcc")})
    link = host.readlink("/usr/local/cuda")
    default = None
    if link is not None or host.is_dir("/usr/local/cuda"):
        target = host.tree_path("/usr/local/cuda") if host.exists("/usr/local/cuda") else None
        default = {"path": "/usr/local/cuda", "link": link, "target": target,
                   "version": next((t["version"] for t in toolkits if t["path"] == target), None)}
        if target and not any(t["path"] == target for t in toolkits):
            version, source = toolkit_version(ctx, target)
            toolkits.append({"path": target, "version": version, "source": source,
                             "nvcc": host.exists(f"{target}/bin/nvcc")})
            default["version"] = version
    nvcc = host.which("nvcc")
    return {
        "toolkits": toolkits,
        "default": default,
        "cuda_home": env.get("CUDA_HOME") or env.get("CUDA_PATH"),
        "nvcc_on_path": host.tree_path(nvcc) if nvcc else None,
        "container_env": requirements.runtime_env(env),
    }

