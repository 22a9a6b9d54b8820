"""Python processes running now, and the CUDA libraries each has really mapped (live only).

What a training job loaded is the truth the static prediction is held to: for every process whose executable is a
Python interpreter, the CUDA-family libraries in ``/proc/PID/maps`` (only processes whose maps this user may read;
root reads all). Nothing is run and nothing is attached to: the files are read through the Host.
"""

from __future__ import annotations

import posixpath
import re
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from dl_doctor.facts.contract import array, boolean, count, integer, number, obj, string
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


# -- issue 30 item 5: work hung on a GPU (processes in uninterruptible sleep holding /dev/nvidia*) -----------------
MAX_STAT_PIDS = 16384    # /proc entries whose stat is read (a host with more is scanned that far and says so)
MAX_FDS = 4096           # descriptors looked at per candidate process
MAX_HUNG = 64            # hung processes reported
MAX_COMM = 64            # the kernel's comm is 16 bytes; a fake or hostile one is cut here
MAX_CMDLINE = 512
SECOND_SAMPLE_AFTER_S = 1.0


def parse_stat(text: str) -> Optional[Tuple[str, str, str]]:
    """(comm, state, start time) from a ``/proc/PID/stat`` line, or None. The comm sits between the first ``(`` and
    the *last* ``)``: it may itself hold ``)``, spaces and newlines."""
    start, end = text.find("("), text.rfind(")")
    if start < 0 or end < start:
        return None
    rest = text[end + 1:].split()
    if len(rest) < 20 or len(rest[0]) != 1:
        return None
    return text[start + 1:end][:MAX_COMM], rest[0], rest[19]  # field 3 is the state, field 22 the start time


def _gpu_files(host: Any, pid: str) -> Optional[List[str]]:
    """The /dev/nvidia* files a process holds open, or None when its descriptors cannot be read (another user's
    process without root)."""
    try:
        fds, _ = host.scan_names(f"/proc/{pid}/fd", MAX_FDS)
    except PermissionError:
        return None
    held: Dict[str, None] = {}
    for fd in fds:
        target = host.readlink(f"/proc/{pid}/fd/{fd}")
        if target and target.startswith("/dev/nvidia") and len(target) < 64:
            held.setdefault(target, None)
    return sorted(held)


def _d_state(host: Any, pids: List[str]) -> Tuple[Dict[str, Tuple[str, str]], int]:
    """The given pids now in state D: pid -> (comm, start time); and how many stats could not be read."""
    out: Dict[str, Tuple[str, str]] = {}
    unreadable = 0
    for pid in pids:
        text = host.try_read(f"/proc/{pid}/stat", 4096)
        parsed = parse_stat(text) if text is not None else None
        if parsed is None:
            unreadable += 1  # it ended meanwhile, or a stat file this release cannot read
            continue
        if parsed[1] == "D":
            out[pid] = (parsed[0], parsed[2])
    return out, unreadable


def sample_hung(host: Any, sleep: Callable[[float], None], interval: float = SECOND_SAMPLE_AFTER_S) -> Dict[str, Any]:
    """Processes in uninterruptible sleep holding /dev/nvidia* in two samples ``interval`` seconds apart. The second
    sample is taken only when the first finds a candidate, so a healthy machine pays for one pass over /proc."""
    names, truncated = host.scan_names("/proc", MAX_STAT_PIDS * 4)
    pids = [n for n in names if n.isascii() and n.isdigit()]
    truncated = truncated or len(pids) > MAX_STAT_PIDS
    pids = pids[:MAX_STAT_PIDS]
    first, _ = _d_state(host, pids)
    candidates: Dict[str, Dict[str, Any]] = {}
    fd_unreadable = 0
    for pid, (comm, started) in first.items():
        files = _gpu_files(host, pid)
        if files is None:
            fd_unreadable += 1
        elif files:
            candidates[pid] = {"comm": comm, "started": started, "devices": files}
    out: Dict[str, Any] = {"scanned": len(pids), "truncated": truncated, "d_state": len(first),
                           "fd_unreadable": fd_unreadable, "candidates": len(candidates), "samples": 1,
                           "interval_s": None, "hung": []}
    if not candidates:
        return out
    sleep(interval)
    second, _ = _d_state(host, sorted(candidates, key=int))
    out["samples"], out["interval_s"] = 2, interval
    for pid in sorted(candidates, key=int):
        seen = candidates[pid]
        if pid not in second or second[pid][1] != seen["started"]:  # it woke, ended, or the pid was reused
            continue
        cmdline = (host.try_read(f"/proc/{pid}/cmdline", 4096) or "").replace("\0", " ").strip()
        wchan = (host.try_read(f"/proc/{pid}/wchan", 256) or "").strip()
        out["hung"].append({"pid": int(pid), "comm": seen["comm"], "cmdline": cmdline[:MAX_CMDLINE],
                            "wchan": wchan[:64] if wchan and wchan != "0" else None, "devices": seen["devices"]})
        if len(out["hung"]) >= MAX_HUNG:
            break
    return out


GPU_HUNG_FACTS = obj(
    "Processes hung in uninterruptible sleep (state D) holding /dev/nvidia*, in two samples a second apart (live only)",
    scanned=count("processes whose state was read"),
    truncated=boolean("/proc held more processes than are scanned (16384)"),
    d_state=count("processes in state D in the first sample (holding a GPU or not)"),
    fd_unreadable=count("processes in state D whose open files this user may not read (unknown, not hung)"),
    candidates=count("processes in state D holding /dev/nvidia* in the first sample"),
    samples=count("samples taken: 1 when the first found no candidate, else 2"),
    interval_s=number("seconds between the samples (null: one sample)"),
    hung=array(obj(
        "",
        pid=integer("its process id"),
        comm=string("its command name (/proc/PID/stat, as the kernel keeps it: 15 characters)"),
        cmdline=string("its command line (the first 512 characters)"),
        wchan=string("the kernel function it waits in (/proc/PID/wchan; null: not readable)"),
        devices=array(string(), "the /dev/nvidia* files it holds open"),
    ), "processes in state D in both samples, holding /dev/nvidia* (at most 64)"),
    since="0.2.0",
)


@probe("gpu_hung_processes", "Processes stuck in uninterruptible sleep holding /dev/nvidia* (two samples, live only)",
       root_adds="the open files of other users' processes", provides=GPU_HUNG_FACTS)
def gpu_hung_processes_probe(ctx: ProbeContext) -> Dict[str, Any]:
    if not ctx.host.kernel_live:
        raise Unavailable("processes belong to a running system, not a sysroot")
    out = sample_hung(ctx.host, time.sleep)
    if out["fd_unreadable"]:
        ctx.denied(f"the open files of {out['fd_unreadable']} process(es) of other users in uninterruptible sleep")
    return out
