"""NCCL's host network as reported: the interface it is told to use, and the locked memory RDMA registers."""

from __future__ import annotations

import healthy
from cases import Machine, case, paired

LIMITS = ("Limit                     Soft Limit           Hard Limit           Units     \n"
          "Max cpu time              unlimited            unlimited            seconds   \n"
          "Max file size             unlimited            unlimited            bytes     \n"
          "Max data size             unlimited            unlimited            bytes     \n"
          "Max stack size            8388608              unlimited            bytes     \n"
          "Max core file size        0                    unlimited            bytes     \n"
          "Max resident set          unlimited            unlimited            bytes     \n"
          "Max processes             4125987              4125987              processes \n"
          "Max open files            1048576              1048576              files     \n"
          "Max locked memory         {memlock:<20} {memlock:<20} bytes     \n"
          "Max address space         unlimited            unlimited            bytes     \n"
          "Max file locks            unlimited            unlimited            locks     \n"
          "Max pending signals       4125987              4125987              signals   \n"
          "Max msgqueue size         819200               819200               bytes     \n"
          "Max nice priority         0                    0                    \n"
          "Max realtime priority     0                    0                    \n"
          "Max realtime timeout      unlimited            unlimited            us        \n")


def _with_env(spec: healthy.Spec, **changes: str) -> None:
    """The session's environment (proc/self/environ) with ``changes``."""
    pairs = [kv.split("=", 1) for kv in spec["proc/self/environ"].decode().split("\0") if "=" in kv]
    env = dict(pairs)
    env.update(changes)
    spec["proc/self/environ"] = healthy.environ(env)


@case("nccl-tests-206-ib-memlock-8192")
def nccl_tests_206(broken: bool) -> Machine:
    """An 8x H100 InfiniBand node whose shell had `ulimit -l` 8192 KiB (limits.conf edited, not yet in effect):
    NCCL's IB transport could not register memory (ibv_reg_mr_iova2: Cannot allocate memory)."""
    spec = healthy.nvswitch_hgx_h100()
    for i in range(8):  # ConnectX-7 ports in InfiniBand mode
        spec[f"sys/class/infiniband/mlx5_{i}/ports/1/link_layer"] = "InfiniBand\n"
    spec["proc/self/limits"] = LIMITS.format(memlock="8388608" if broken else "unlimited")
    return paired("nvswitch_hgx_h100", spec)


@case("nccl-1837-socket-ifname-names-no-interface")
def nccl_1837(broken: bool) -> Machine:
    """NCCL_SOCKET_IFNAME=eth2 on a node whose interfaces are bond0, eno1np0, ...: NCCL found no interface and
    failed at bootstrap with an address of no family."""
    spec = healthy.nvswitch_hgx_h100()
    _with_env(spec, NCCL_SOCKET_IFNAME="eth2" if broken else "bond0")
    return paired("nvswitch_hgx_h100", spec)


@case("nccl-tests-219-socket-ifname-other-nodes-name")
def nccl_tests_219(broken: bool) -> Machine:
    """Two servers whose NICs are named enp4s0 and enp6s0; NCCL_SOCKET_IFNAME=enp4s0 was exported on both, so the
    enp6s0 node found no interface (the fix: NCCL_SOCKET_IFNAME=enp4s0,enp6s0, or a prefix)."""
    spec = healthy.geforce_workstation()
    for path in [p for p in spec if p.startswith("sys/class/net/enp5s0/")]:
        spec[path.replace("enp5s0", "enp6s0")] = spec.pop(path)
    _with_env(spec, NCCL_SOCKET_IFNAME="enp4s0" if broken else "enp4s0,enp6s0")
    return Machine(spec)
