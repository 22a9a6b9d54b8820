"""Python processes running now, and the CUDA libraries each has really mapped (live only).

What a training job loaded is the truth the static prediction is held to: for every process whose executable is a
Python interpreter, the CUDA-family libraries in ``/proc/PID/maps`` (only processes whose maps this user may read;
root reads all). Nothing is run and nothing is attached to: the files are read through the Host.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any, Dict, List

from dl_doctor.facts.contract import array, integer, obj, string
from dl_doctor.probes import ProbeContext, Unavailable, probe

MAX_PIDS = 8192          # /proc entries looked at
MAX_PROCESSES = 256      # Python processes reported
MAX_MAPS_BYTES = 8 << 20
CUDA_LIBRARY = re.compile(r"/(lib(?:cuda|cudart|cublas|cublasLt|cudnn[a-z_]{0,24}|nccl|nvJitLink|nvrtc|cusparse|cufft|"
                          r"curand|cusolver|cupti|nvidia-ml|nvToolsExt|nvinfer|nvonnxparser|ctranslate2|"
                          r"onnxruntime_providers_cuda|tensorflow_framework|xla_extension)[^/\s]{0,64}\.so[^/\s]{0,32})$")
_PYTHON = re.compile(r"^python(?:[0-9](?:\.[0-9]{1,2})?)?$")


def mapped_cuda_libraries(maps: str) -> List[str]:
    """The CUDA-family shared objects in a ``/proc/PID/maps`` text, each once, in the order they appear."""
    seen: Dict[str, None] = {}
    for line in maps.splitlines():
        path = line.rsplit(None, 1)[-1] if " /" in line else ""
        if path.startswith("/") and CUDA_LIBRARY.search(path):
            seen.setdefault(path, None)
    return list(seen)


PYTHON_PROCESSES_FACTS = obj(
    "Python processes running now (live only)",
    processes=array(obj(
        "",
        pid=integer("its process id"),
        exe=string("its executable (/proc/PID/exe)"),
        cmdline=string("its command line (the first 1000 characters)"),
        cuda_libraries=array(string(), "the CUDA-family libraries it has mapped: what really loaded"),
    ), "one entry per Python process whose maps could be read (at most 256)"),
    unreadable=integer("Python processes whose maps this user may not read"),
    since="0.2.0",
)


@probe("python_processes", "Python processes running now and the CUDA libraries each has mapped (/proc/PID/maps)",
       root_adds="the maps of other users' processes", provides=PYTHON_PROCESSES_FACTS)
def python_processes_probe(ctx: ProbeContext) -> Dict[str, Any]:
    host = ctx.host
    if not host.kernel_live:
        raise Unavailable("processes belong to a running system, not a sysroot")
    out: List[Dict[str, Any]] = []
    unreadable = 0
    pids = [n for n in host.listdir("/proc") if n.isascii() and n.isdigit()][:MAX_PIDS]
    for pid in pids:
        exe = host.readlink(f"/proc/{pid}/exe")
        if not exe or not _PYTHON.match(posixpath.basename(exe.replace(" (deleted)", ""))):
            continue
        try:
            maps = host.read_text(f"/proc/{pid}/maps", MAX_MAPS_BYTES)
        except OSError:
            unreadable += 1
            continue
        cmdline = (host.try_read(f"/proc/{pid}/cmdline", 4096) or "").replace("\0", " ").strip()
        out.append({"pid": int(pid), "exe": exe, "cmdline": cmdline[:1000],
                    "cuda_libraries": mapped_cuda_libraries(maps)})
        if len(out) >= MAX_PROCESSES:
            break
    if unreadable:
        ctx.denied(f"the mapped libraries of {unreadable} Python process(es) of other users")
    return {"processes": out, "unreadable": unreadable}
