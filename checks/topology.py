"""The node's make-up (issue 30 items 4 and 5): GPUs of one model that differ in firmware, power limit or application
clocks; processes hung on a GPU in uninterruptible sleep; the NIC closest to each GPU and the NCCL settings that
contradict it."""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Tuple

from dl_doctor.checks.common import needs_nvidia_gpu
from dl_doctor.checks.gpu_health import HEALTH, _label
from dl_doctor.model import Facts, Fix, Result, check, fail, passed, skip, warn

Value = Any


def _groups(facts: Facts) -> Dict[str, List[Dict[str, Any]]]:
    """The GPUs NVML sees, by model name (a GPU whose name is unknown is in no group)."""
    out: Dict[str, List[Dict[str, Any]]] = {}
    for dev in facts.get("nvml.devices") or []:
        if isinstance(dev, dict) and isinstance(dev.get("name"), str) and dev.get("name"):
            out.setdefault(dev["name"], []).append(dev)
    return out


def _clocks(dev: Dict[str, Any]) -> Optional[Tuple[int, int]]:
    ac = dev.get("applications_clocks_mhz")
    if not isinstance(ac, dict) or not isinstance(ac.get("graphics"), int) or not isinstance(ac.get("memory"), int):
        return None
    return ac["graphics"], ac["memory"]


def differing(facts: Facts, value: Callable[[Dict[str, Any]], Value]) -> Tuple[int, List[Dict[str, Any]]]:
    """(how many models had at least two GPUs with the value known, one entry per model whose GPUs differ: its name,
    the majority value (None on a tie), and the odd ones out with their values)."""
    compared = 0
    found: List[Dict[str, Any]] = []
    for name, devs in sorted(_groups(facts).items()):
        known = [(d, value(d)) for d in devs if value(d) is not None]
        if len(known) < 2:
            continue
        compared += 1
        counts = Counter(v for _, v in known)
        if len(counts) == 1:
            continue
        (top, n), *rest = counts.most_common()
        majority = top if not rest or rest[0][1] < n else None
        odd = [(d, v) for d, v in known if majority is None or v != majority]
        found.append({"model": name, "majority": majority, "majority_count": n if majority is not None else None,
                      "of": len(known), "odd": odd})
    return compared, found


def _describe(found: List[Dict[str, Any]], show: Callable[[Value], str]) -> str:
    parts = []
    for g in found:
        odd = ", ".join(f"{_label(d)}: {show(v)}" for d, v in g["odd"])
        if g["majority"] is None:
            parts.append(f"the {g['of']} {g['model']} GPUs split evenly ({odd})")
        else:
            parts.append(f"{odd} where {g['majority_count']} of {g['of']} {g['model']} GPUs have {show(g['majority'])}")
    return "; ".join(parts)


def _evidence(found: List[Dict[str, Any]], show: Callable[[Value], str]) -> Dict[str, Any]:
    return {"differing": [{"model": g["model"], "majority": None if g["majority"] is None else show(g["majority"]),
                           "odd": {_label(d): show(v) for d, v in g["odd"]}} for g in found]}


def _text(key: str) -> Callable[[Dict[str, Any]], Optional[str]]:
    return lambda d: d.get(key) if isinstance(d.get(key), str) and d.get(key) else None


def _ids(found: List[Dict[str, Any]]) -> str:
    return ",".join(str(d.get("index")) for g in found for d, _ in g["odd"])


@check(
    id="DLD-GPU-020", slug="gpu-firmware-differs", title="GPUs of one model run one VBIOS and InfoROM",
    remedy="replace-hardware", drain=False,
    problem="GPUs of one model run different VBIOS or InfoROM versions",
    tags=("gpu", "hardware", "firmware", "homogeneity"), **HEALTH,
    what="""Compares the VBIOS version and InfoROM image version NVML reports for every GPU of one model (same
    product name) in the node.""",
    why="""The GPUs of one node are flashed together; one with another VBIOS or InfoROM was swapped in or missed an
    update. Firmware sets clocks, power and error handling, so that GPU can behave apart from its peers (a slower rank
    holds back every collective), and vendors' support asks for matching firmware before they look further.""",
    fix="""Bring the odd GPU to the firmware of its peers with the vendor's firmware update (NVIDIA's nvfwupd or the
    server vendor's package); on a cloud instance open a ticket or move the instance.""",
)
def firmware_differs(facts: Facts) -> Result:
    vbios_n, vbios = differing(facts, _text("vbios_version"))
    info_n, info = differing(facts, _text("inforom_image_version"))
    if not vbios_n and not info_n:
        return skip("no two GPUs of one model report their VBIOS or InfoROM version")
    evidence = {"vbios": _evidence(vbios, str), "inforom": _evidence(info, str)}
    if vbios or info:
        what = "; ".join(([f"VBIOS: {_describe(vbios, str)}"] if vbios else [])
                         + ([f"InfoROM image: {_describe(info, str)}"] if info else []))
        return warn(f"GPUs of one model run different firmware: {what}", evidence,
                    Fix("Update the odd GPU's firmware to its peers' (or have the provider replace it).",
                        (f"nvidia-smi -i {_ids(vbios + info)} -q | grep -iE 'VBIOS|Image Version'",
                         "nvidia-smi --query-gpu=index,name,vbios_version,inforom.img --format=csv")),
                    headline="GPU firmware differs between GPUs of one model")
    return passed("every GPU of one model runs the same VBIOS and InfoROM image", evidence)


def _watts(mw: Value) -> str:
    return f"{mw / 1000:g} W"


@check(
    id="DLD-GPU-021", slug="gpu-power-limit-differs", title="GPUs of one model share one power limit",
    remedy="fix-configuration", drain=False,
    problem="GPUs of one model have different power limits",
    tags=("gpu", "performance", "homogeneity"), **HEALTH,
    what="""Compares the power management limit NVML reports for every GPU of one model in the node, beside each
    GPU's default limit.""",
    why="""A GPU capped below its peers (nvidia-smi -pl, a power-capping policy, a BMC setting) runs its kernels
    slower, and in data-parallel training every step waits for the slowest rank: one capped GPU slows the whole job.""",
    fix="""Set the odd GPU's limit back to its peers' (usually its default) with nvidia-smi -pl, and find what set it
    (a site script, a power-capping service, the BMC).""",
)
def power_limit_differs(facts: Facts) -> Result:
    limit = lambda d: d.get("power_limit_mw") if isinstance(d.get("power_limit_mw"), int) else None  # noqa: E731
    n, found = differing(facts, limit)
    if not n:
        return skip("no two GPUs of one model report their power limit")
    evidence = _evidence(found, _watts)
    if found:
        steps = []
        for g in found:
            for d, _ in g["odd"]:
                target = g["majority"] if g["majority"] is not None else d.get("power_default_limit_mw")
                if isinstance(target, int):
                    steps.append(f"sudo nvidia-smi -i {d.get('index')} -pl {target // 1000}")
        return warn(f"GPUs of one model have different power limits: {_describe(found, _watts)}", evidence,
                    Fix("Give the odd GPU its peers' power limit.",
                        tuple(steps) + ("nvidia-smi -q -d POWER",)),
                    headline="a GPU's power limit differs from its peers'")
    return passed("every GPU of one model has the same power limit", evidence)


def _mhz(pair: Value) -> str:
    return f"{pair[0]} MHz graphics / {pair[1]} MHz memory"


@check(
    id="DLD-GPU-022", slug="gpu-application-clocks-differ", title="GPUs of one model share their application clocks",
    remedy="fix-configuration", drain=False,
    problem="GPUs of one model have different application clocks",
    tags=("gpu", "performance", "homogeneity"), **HEALTH,
    what="Compares the application clocks (graphics and memory) NVML reports for every GPU of one model.",
    why="""Application clocks are what a GPU runs kernels at; one set apart (nvidia-smi -ac on one GPU, a leftover
    from benchmarking) makes that GPU slower or faster than its peers, and a synchronous job runs at its slowest
    rank's pace.""",
    fix="Reset the odd GPU's application clocks (nvidia-smi -rac) or set them to its peers' (nvidia-smi -ac).",
)
def application_clocks_differ(facts: Facts) -> Result:
    n, found = differing(facts, _clocks)
    if not n:
        return skip("no two GPUs of one model report their application clocks")
    evidence = _evidence(found, _mhz)
    if found:
        steps = []
        for g in found:
            for d, _ in g["odd"]:
                if g["majority"] is not None:
                    steps.append(f"sudo nvidia-smi -i {d.get('index')} -ac {g['majority'][1]},{g['majority'][0]}")
                else:
                    steps.append(f"sudo nvidia-smi -i {d.get('index')} -rac")
        return warn(f"GPUs of one model have different application clocks: {_describe(found, _mhz)}", evidence,
                    Fix("Give the odd GPU its peers' application clocks.",
                        tuple(steps) + ("nvidia-smi -q -d CLOCK",)),
                    headline="a GPU's application clocks differ from its peers'")
    return passed("every GPU of one model has the same application clocks", evidence)


# -- hung work ------------------------------------------------------------------------------------------------------
# Kernel functions of the NVIDIA modules a process waits in when the driver, not storage or the network, holds it
# (nvidia.ko's os_* and nv_* wrappers, nvidia-uvm's uvm_*): /proc/PID/wchan names one of these for a wedged GPU.
NVIDIA_WAIT_PREFIXES = ("nv_", "nvidia_", "uvm_", "os_acquire", "os_wait", "_nv", "rm_", "nvkms")


def _printable(text: Any, limit: int = 120) -> str:
    raw = str(text or "")[:limit]
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256 else "?" for c in raw)


def _who(p: Dict[str, Any]) -> str:
    return f"PID {p.get('pid')} ({_printable(p.get('comm'), 32)})"


@check(
    id="DLD-GPU-023", slug="gpu-hung-process", title="No process hangs on a GPU in uninterruptible sleep",
    remedy="reboot", drain=True,
    problem="A process holding a GPU hangs in uninterruptible sleep",
    tags=("gpu", "hardware", "hang"), requires=("gpu_hung_processes",), applies=(needs_nvidia_gpu,),
    what="""Reads every process's state in /proc/PID/stat; for those in uninterruptible sleep (D) it lists the
    /dev/nvidia* files they hold (/proc/PID/fd: all processes as root, your own otherwise) and samples them again a
    second later. Only a process in state D in both samples, holding a GPU, counts; its wait channel
    (/proc/PID/wchan) tells a wait in the NVIDIA driver from one in storage or the network. Live only.""",
    why="""A process in uninterruptible sleep cannot be killed, not even with SIGKILL: it waits inside the kernel. One
    that waits in the NVIDIA driver while holding a GPU means the GPU or driver stopped answering (an Xid, a fallen-off
    GPU, a GSP timeout); every new job on that GPU hangs too, and nvidia-smi itself may block. A wait elsewhere
    (a checkpoint write to slow NFS) can also last seconds: that is worth a second look, not a drain.""",
    fix="""Check the kernel log for Xid errors (dmesg); the process cannot be killed while in D state. Drain the node;
    when the process has ended, reset the GPU (nvidia-smi -r), otherwise reboot.""",
)
def hung_process(facts: Facts) -> Result:
    hung = [p for p in facts.get("gpu_hung_processes.hung") or [] if isinstance(p, dict)]
    unread = facts.get("gpu_hung_processes.fd_unreadable") or 0
    evidence = {"hung": [{**p, "comm": _printable(p.get("comm"), 32), "cmdline": _printable(p.get("cmdline"))}
                         for p in hung],
                "gpu_hung_processes.fd_unreadable": unread,
                "gpu_hung_processes.truncated": facts.get("gpu_hung_processes.truncated")}
    in_driver = [p for p in hung if str(p.get("wchan") or "").startswith(NVIDIA_WAIT_PREFIXES)]
    elsewhere = [p for p in hung if p not in in_driver]

    def detail(p: Dict[str, Any]) -> str:
        wchan = f", waiting in {_printable(p.get('wchan'), 64)}" if p.get("wchan") else ""
        return f"{_who(p)} holding {', '.join(_printable(d, 32) for d in p.get('devices') or [])}{wchan}"

    commands = ("sudo dmesg -T | grep -iE 'NVRM|Xid' | tail -n 20",
                "ps -o pid,stat,wchan:32,etime,cmd -p " + ",".join(str(p.get("pid")) for p in hung or [{"pid": 0}]),
                "# the process cannot be killed in state D; once it has ended: sudo nvidia-smi -r  (else reboot)")
    if in_driver:
        return fail("hung work on the GPU: " + "; ".join(detail(p) for p in in_driver)
                    + " (uninterruptible sleep in the NVIDIA driver in two samples a second apart: the GPU likely "
                    "stopped answering)", evidence,
                    Fix("Drain the node, read the kernel log for Xids, reset the GPU when the process has ended or "
                        "reboot.", commands), headline="a process hangs on the GPU (uninterruptible sleep)")
    if elsewhere:
        return warn("a process holding a GPU stayed in uninterruptible sleep for over a second: "
                    + "; ".join(detail(p) for p in elsewhere)
                    + (" (its wait channel is not in the NVIDIA driver: slow storage or network I/O does this too; "
                       "look again)" if any(p.get("wchan") for p in elsewhere)
                       else " (its wait channel is not readable: run as root to tell the driver from slow I/O)"),
                    evidence, Fix("Look again in a minute; if it is still in state D, read the kernel log.",
                                  commands), remedy="none", drain=False)
    checked = facts.get("gpu_hung_processes.scanned")
    note = f"; the open files of {unread} process(es) in state D could not be read (run as root)" if unread else ""
    return passed(f"no process holding a GPU hangs in uninterruptible sleep ({checked} processes checked{note})",
                  evidence)


# -- the NIC closest to each GPU, and NCCL's choices -----------------------------------------------------------------
# NCCL's path types, nearest first (NCCL's documentation of NCCL_NET_GDR_LEVEL / NCCL_P2P_LEVEL:
# https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html)
NCCL_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS")
NCCL_PATH = {"pcie-switch": "PXB", "root-complex": "PHB", "numa-node": "PHB", "other": "SYS"}


def _hca_filter(value: str) -> Callable[[str], bool]:
    """NCCL_IB_HCA's rule (``mlx5_0:1,mlx5_1``, ``^mlx5_3``, ``=mlx5_0``): whether NCCL would use a device name."""
    text = value.strip()
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    names = [item.split(":", 1)[0].strip() for item in text.split(",")[:64] if item.strip()]

    def listed(dev: str) -> bool:
        return any(dev == n if exact else dev.startswith(n) for n in names)
    return (lambda dev: not listed(dev)) if exclude else listed


def _gpu_name(gpu: Dict[str, Any]) -> str:
    return f"GPU {_printable(gpu.get('address'), 16)}"


@check(
    id="DLD-GPU-024", slug="gpu-nic-locality", title="NCCL can reach a NIC close to each GPU",
    remedy="fix-configuration", drain=False,
    problem="NCCL's settings or the node's topology keep GPUs away from their closest NIC",
    tags=("gpu", "network", "nccl", "topology"), requires=("topology",), applies=(needs_nvidia_gpu,),
    what="""Finds, from the PCI paths in sysfs, the RDMA device (EFA, InfiniBand, RoCE) closest to each GPU: on the
    GPU's PCIe switch, on its root complex, on its NUMA node, or farther; and compares that with NCCL_NET_GDR_LEVEL
    and NCCL_IB_HCA from the session's environment.""",
    why="""NCCL uses GPUDirect RDMA (the NIC reads and writes GPU memory directly) only when the NIC is within the
    distance NCCL_NET_GDR_LEVEL allows (PIX/PXB: through PCIe switches only; PHB: through the CPU; SYS: across CPU
    sockets), and NCCL's automatic choice keeps it to NICs near the GPU. A GPU whose nearest NIC sits behind the CPU
    or on another socket sends through host memory and the CPU interconnect: lower bandwidth for that rank, and a
    synchronous job runs at its slowest rank's pace. A setting that disables GPUDirect RDMA, or an NCCL_IB_HCA that
    leaves out the NIC on a GPU's switch, costs the same on a node built for it.""",
    fix="""Unset NCCL_NET_GDR_LEVEL (NCCL chooses from the topology) and let NCCL_IB_HCA include the NIC on each GPU's
    PCIe switch; a GPU without any NIC near it on a node with one NIC per GPU points at a missing device.""",
)
def nic_locality(facts: Facts) -> Result:
    gpus = [g for g in facts.get("topology.gpus") or [] if isinstance(g, dict)]
    nics = [n for n in facts.get("topology.nics") or [] if isinstance(n, dict)]
    rdma = [n for n in nics if n.get("rdma")]
    if not gpus:
        return skip("no NVIDIA GPU found on the PCI bus in sysfs")
    if not rdma:
        return skip("no RDMA device (EFA, InfiniBand, RoCE): NCCL uses TCP sockets, and where the NIC sits does not "
                    "decide GPUDirect RDMA")
    env = facts.get("network.env") or {}
    env = env if isinstance(env, dict) else {}
    where: Dict[str, List[str]] = {}
    for g in gpus:
        how = (g.get("closest_rdma") or {}).get("closeness")
        where.setdefault(how or "unknown", []).append(_gpu_name(g))
    evidence: Dict[str, Any] = {"closest_rdma": {_gpu_name(g): g.get("closest_rdma") for g in gpus},
                                "numa_node": {_gpu_name(g): g.get("numa_node") for g in gpus},
                                "env": {k: env.get(k) for k in ("NCCL_NET_GDR_LEVEL", "NCCL_IB_HCA") if k in env}}
    problems: List[str] = []
    near = [g for g in gpus if (g.get("closest_rdma") or {}).get("closeness") == "pcie-switch"]
    level = str(env.get("NCCL_NET_GDR_LEVEL") or "").strip().upper()
    if level == "LOC" and near:
        problems.append(f"NCCL_NET_GDR_LEVEL=LOC turns GPUDirect RDMA off, though {len(near)} of {len(gpus)} GPUs "
                        "have an RDMA device on their PCIe switch")
    hca = env.get("NCCL_IB_HCA")
    if isinstance(hca, str) and hca.strip():
        uses = _hca_filter(hca)
        ib_names = {n.get("address"): [r for r in n.get("rdma") or [] if not str(r).startswith("efa")] for n in rdma}
        left_out = sorted({f"{_printable(name, 32)} ({_gpu_name(g)})" for g in near
                           for name in ib_names.get((g.get("closest_rdma") or {}).get("address"), [])
                           if not uses(str(name))})
        if left_out:
            problems.append(f"NCCL_IB_HCA={_printable(hca, 80)} leaves out the RDMA device on a GPU's PCIe switch: "
                            + ", ".join(left_out[:8]) + ": NCCL sends those GPUs' traffic through a NIC behind the CPU")
    far = [g for g in gpus if (g.get("closest_rdma") or {}).get("closeness") == "other"]
    if far and len(rdma) >= len(gpus):
        problems.append(f"{', '.join(_gpu_name(g) for g in far)} {'has' if len(far) == 1 else 'have'} no RDMA "
                        f"device on {'its' if len(far) == 1 else 'their'} NUMA node although the node has "
                        f"{len(rdma)} RDMA devices for {len(gpus)} GPUs: NCCL crosses the CPU interconnect (SYS) "
                        "and GPUDirect RDMA stays off for it; a NIC may be missing")
    summary = "; ".join(f"{how}: {', '.join(names)}" for how, names in sorted(where.items()))
    if problems:
        return warn("; ".join(problems), evidence,
                    Fix("Let NCCL choose from the topology, and check that every NIC the node should have is there.",
                        ("unset NCCL_NET_GDR_LEVEL   # NCCL picks the GPUDirect RDMA distance from the topology",
                         "nvidia-smi topo -m", "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH <your job>  "
                         "# shows 'GPU Direct RDMA Enabled' per NIC")),
                    headline="NCCL cannot use the NIC next to some GPUs")
    behind = [g for g in gpus if (g.get("closest_rdma") or {}).get("closeness") in ("root-complex", "numa-node",
                                                                                    "other")]
    note = ""
    if behind:
        note = (f"; {len(behind)} GPU(s) have no RDMA device on their PCIe switch (NCCL path "
                + "/".join(sorted({NCCL_PATH[(g.get('closest_rdma') or {})['closeness']] for g in behind}))
                + "): their traffic goes through the CPU and NCCL's automatic choice keeps GPUDirect RDMA off for "
                "them; that is how this node is built")
    return passed(f"closest RDMA device per GPU: {summary}{note}", evidence)
