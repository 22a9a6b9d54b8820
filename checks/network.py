"""EFA and NCCL networking, and memlock."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from dl_doctor import versions
from dl_doctor.fixes import load_module, root_command, write_file
from dl_doctor.model import Facts, Fix, Result, check, fail, passed, skip, warn


def _instance(facts: Facts, matrix):
    itype = facts.get("cloud.instance_type") or facts.get("imds.instance_type")
    return itype, (matrix.instance(itype) if itype else None)


def _plugin_version(facts: Facts) -> Optional[str]:
    installed = facts.get("network.efa_installed") or {}
    for key in ("aws-ofi-nccl", "libnccl-ofi", "aws-ofi-nccl-cuda"):
        if installed.get(key):
            return installed[key]
    return None


def _libfabric_version(facts: Facts) -> Optional[str]:
    installed = facts.get("network.efa_installed") or {}
    for key in ("libfabric-aws", "libfabric"):
        if installed.get(key):
            return installed[key].split("amzn")[0].rstrip(".")
    versions = [l.get("version") for l in facts.get("network.libfabric") or [] if l.get("version")]
    return versions[0] if versions else None


@check(
    id="DLD-NET-001", slug="efa-not-usable-by-nccl", title="EFA is present and NCCL can use it (libfabric, aws-ofi-nccl)",
    remedy="repair-software", drain=True,
    problem="NCCL cannot use EFA",
    tags=("network", "efa", "nccl"), requires=("network",),
    what="""Holds the instance type's EFA interfaces (matrix) against the EFA devices present (/sys/class/infiniband),
    then checks libfabric with its efa provider, the aws-ofi-nccl plugin and whether NCCL's dlopen of libnccl-net.so
    (or NCCL_NET_PLUGIN) would find it, and the plugin/libfabric versions against the matrix's known issues.""",
    why="""Without a working plugin NCCL silently falls back to TCP sockets: multi-node all-reduce runs at a fraction
    of the bandwidth EFA gives (3,200 Gbps on p5) and nothing fails. On an instance without EFA that fallback is the
    normal path, so it is not a failure there; on an EFA-capable instance launched without EFA, single-node jobs
    are fine too, so that passes with a note unless the session's FI_*/NCCL_NET settings show it was meant to use
    EFA.""",
    fix="""Launch with EFA interfaces, install the EFA installer (libfabric with the efa provider) and aws-ofi-nccl, and
    put the plugin's directory on LD_LIBRARY_PATH (or set NCCL_NET_PLUGIN).""",
)
def efa_usable(facts: Facts, matrix) -> Result:
    itype, inst = _instance(facts, matrix)
    devices = facts.get("network.efa_devices") or []
    expected = (inst or {}).get("efa_interfaces")
    evidence = {"instance_type": itype, "efa_interfaces_expected": expected, "efa_devices": devices,
                "libfabric": facts.get("network.libfabric"), "ofi_nccl_plugins": facts.get("network.ofi_nccl_plugins"),
                "nccl_plugin_lookup": facts.get("network.nccl_plugin_lookup"),
                "efa_installed": facts.get("network.efa_installed")}
    if not devices:
        if inst is not None and not expected:
            return skip(f"{itype} has no EFA: NCCL uses TCP sockets, and aws-ofi-nccl's 'no EFA' warnings are harmless",
                        **evidence)
        if expected:
            launch = Fix("Launch the instance with EFA network interfaces (InterfaceType=efa) in a cluster "
                         "placement group, for multi-node jobs.",
                         ("aws ec2 describe-instance-types --instance-types " + itype +
                          " --query 'InstanceTypes[].NetworkInfo.EfaInfo'",))
            # Without EFA a single node is fine (its GPUs talk over NVLink/PCIe): only a session set up to send
            # NCCL over EFA says multi-node traffic was meant to use it.
            env = facts.get("network.env") or {}
            meant = sorted(k for k, v in env.items() if (k == "FI_PROVIDER" and str(v).lower() == "efa")
                           or k.startswith("FI_EFA_") or (k == "NCCL_NET" and "ofi" in str(v).lower()))
            if meant:
                return warn(f"{itype} supports {expected} EFA interface(s) but none is attached, while the session "
                            f"is set up for EFA ({', '.join(f'{k}={env[k]}' for k in meant)}): multi-node NCCL "
                            f"traffic will use TCP sockets", {**evidence, "efa_settings": meant}, launch,
                            headline=f"No EFA attached to this {itype}, though the session is set up for it")
            return passed(f"no EFA interface is attached ({itype} supports {expected}): fine for single-node jobs, "
                          f"whose GPUs talk over NVLink/PCIe; multi-node NCCL traffic would use TCP sockets, so launch "
                          f"with EFA interfaces for multi-node training", evidence, launch)
        return skip("no EFA device on this host", **evidence)
    problems: List[str] = []
    installer = ("curl -O https://efa-installer.amazonaws.com/aws-efa-installer-latest.tar.gz && tar xf "
                 "aws-efa-installer-latest.tar.gz && cd aws-efa-installer && sudo ./efa_installer.sh -y")
    if not facts.get("network.libfabric"):
        problems.append("libfabric is not installed")
    elif not facts.get("network.efa_provider"):
        problems.append("libfabric has no efa provider (not the EFA installer's build)")
    if not facts.get("network.ofi_nccl_plugins"):
        problems.append("the aws-ofi-nccl plugin is not installed: NCCL will use TCP sockets over EFA's ENA")
    elif not (facts.get("network.nccl_plugin_lookup") or {}).get("found"):
        name = (facts.get("network.nccl_plugin_lookup") or {}).get("name")
        problems.append(f"NCCL cannot find {name}: the plugin's directory is not on LD_LIBRARY_PATH or in ld.so.conf")
    if problems:
        plugin_dir = ((facts.get("network.ofi_nccl_plugins") or [{}])[0].get("path") or "/opt/amazon/ofi-nccl/lib/x").rsplit("/", 1)[0]
        return fail(f"{len(devices)} EFA device(s), but " + "; ".join(problems), evidence,
                    Fix("Install the EFA software stack and make the plugin findable.",
                        (installer, f"export LD_LIBRARY_PATH={plugin_dir}:$LD_LIBRARY_PATH",
                         "NCCL_DEBUG=INFO torchrun ... 2>&1 | grep -E 'NET/OFI|NET/Socket'   # expect NET/OFI")))
    plugin_v, fabric_v = _plugin_version(facts), _libfabric_version(facts)
    family = itype.split(".")[0] if itype else None
    issues = matrix.known_issues("aws-ofi-nccl", plugin_v, {"libfabric": fabric_v}, family) if plugin_v else []
    if issues:
        return warn("; ".join(i["summary"] for i in issues), {**evidence, "known_issues": [i["id"] for i in issues]},
                    Fix(issues[0]["fix"], (installer,)))
    if expected and len(devices) < expected:
        return warn(f"{len(devices)} of the {expected} EFA interfaces of {itype} are attached: multi-node bandwidth is "
                    f"reduced", evidence, Fix("Attach all EFA interfaces at launch (one per network card).",
                                              ("fi_info -p efa -t FI_EP_RDM | grep -c domain",)))
    return passed(f"{len(devices)} EFA device(s), libfabric {fabric_v or '(version unknown)'} with efa, aws-ofi-nccl "
                  f"{plugin_v or '(version unknown)'} "
                  f"found by NCCL ({(facts.get('network.nccl_plugin_lookup') or {}).get('via')})", **evidence)


def _memlock(facts: Facts) -> Optional[Any]:
    r = (facts.get("limits.rlimits") or {}).get("memlock")
    if r:
        return r.get("soft")
    for entry in facts.get("limits.limits_conf") or []:
        if entry["item"] == "memlock" and entry["domain"] in ("*", "root") and entry["type"] in ("soft", "-"):
            return entry["value"]
    return None


def _memlock_text(value: Any, facts: Facts) -> str:
    """The limit as a person reads it: rlimits are bytes, limits.conf values KiB."""
    if isinstance(value, int) and (facts.get("limits.rlimits") or {}).get("memlock"):
        return f"{value} bytes ({value // 1024} KiB)"
    return f"{value} KiB" if str(value).isdigit() else str(value)


@check(
    id="DLD-NET-002", slug="memlock-limited", title="Locked memory is unlimited where RDMA needs it (EFA, InfiniBand, RoCE)",
    remedy="fix-configuration", drain=False,
    problem="Locked memory is limited where RDMA needs it unlimited",
    tags=("network", "efa", "rdma", "limits"), requires=("limits",),
    what="""Reads the session's RLIMIT_MEMLOCK (under a sysroot: the tree's /proc/self/limits where it has one, else
    the memlock entries of /etc/security/limits.conf and limits.d) on hosts with RDMA adapters (EFA, InfiniBand and
    RoCE HCAs in /sys/class/infiniband).""",
    why="""RDMA registers (pins) the communication buffers: with the default 64 KiB/8 MiB memlock limit, libfabric (EFA)
    and NCCL's InfiniBand transport cannot register memory ('ibv_reg_mr failed: Cannot allocate memory') and NCCL
    fails or falls back to sockets (NCCL's troubleshooting guide: InfiniBand needs the locked-memory limit raised).
    Containers keep their own default unless started with --ulimit memlock=-1; a new limits.conf applies only to new
    sessions.""",
    fix="""Set memlock unlimited: '* - memlock unlimited' in /etc/security/limits.d/, LimitMEMLOCK=infinity for systemd
    services and Slurm, --ulimit memlock=-1:-1 for containers; log in again.""",
)
def memlock(facts: Facts) -> Result:
    value = _memlock(facts)
    efa = facts.get("network.efa_devices") or []
    rdma = [d for d in facts.get("network.infiniband_devices") or [] if isinstance(d, dict) and d.get("name")
            and d.get("name") not in efa]
    ib = [d["name"] for d in rdma if str(d.get("link_layer") or "").lower() == "infiniband"]
    roce = [d["name"] for d in rdma if d["name"] not in ib]
    evidence: Dict[str, Any] = {"memlock": value, "efa_devices": efa, "rdma_devices": [d["name"] for d in rdma],
                                "rlimits_from": facts.get("limits.rlimits_from")}
    if not efa and not rdma:
        return skip("no RDMA adapter (EFA, InfiniBand, RoCE): the memlock limit does not gate NCCL here", **evidence)
    if value is None:
        return skip("the memlock limit is unknown here", **evidence)
    if str(value) in ("unlimited", "-1", "infinity"):
        return passed("memlock is unlimited", **evidence)
    in_container = facts.get("system.container.in_container")
    fix = Fix("Make locked memory unlimited for training processes.",
              ("docker run --ulimit memlock=-1:-1 ...",) if in_container else
              (write_file("/etc/security/limits.d/90-rdma-memlock.conf", "* - memlock unlimited\n"),
               "# log in again (or LimitMEMLOCK=infinity in systemd units / Slurm's PropagateResourceLimits)",
               "ulimit -l"))
    limit = _memlock_text(value, facts)
    if efa:
        return fail(f"memlock is limited to {limit} on an EFA host: libfabric cannot register memory for NCCL",
                    evidence, fix)
    if ib:
        return fail(f"memlock is limited to {limit} on an InfiniBand host ({', '.join(ib[:8])}): NCCL's IB transport "
                    "cannot register memory (ibv_reg_mr: Cannot allocate memory)", evidence, fix)
    # an Ethernet (RoCE) or unknown link layer: a cloud VM's SR-IOV NIC shows up here too, unused by NCCL unless RoCE
    # is set up; worth raising, not failing
    return warn(f"memlock is limited to {limit} with RDMA adapters ({', '.join(roce[:8])}): NCCL's IB/RoCE transport "
                "cannot register memory if it uses them", evidence, fix)


@check(
    id="DLD-NET-003", slug="nccl-env-misconfigured", title="NCCL and libfabric environment variables are sane",
    remedy="fix-configuration", drain=False,
    problem="Harmful NCCL or libfabric settings",
    tags=("network", "nccl", "environment"), requires=("network.env",),
    what="""Reads NCCL_* and FI_* variables of the session: transports disabled globally (NCCL_P2P_DISABLE,
    NCCL_SHM_DISABLE, NCCL_IB_DISABLE), NCCL_SOCKET_IFNAME naming interfaces that do not exist, FI_PROVIDER other than
    efa on an EFA host.""",
    why="""Launch scripts copy settings that once worked around a problem on another machine: NCCL_P2P_DISABLE=1 forces
    GPU-to-GPU traffic through host memory (a fraction of NVLink bandwidth), NCCL_SOCKET_IFNAME=eth0 on an ens5 host
    makes NCCL fail to find an interface, FI_PROVIDER=tcp on EFA hosts throws EFA away.""",
    fix="""Unset the variables unless a current, understood problem needs them; name existing interfaces (or an
    exclusion like ^lo,docker).""",
)
def nccl_env(facts: Facts, matrix) -> Result:
    env = facts.get("network.env") or {}
    interfaces = set(facts.get("network.interfaces") or [])
    efa = facts.get("network.efa_devices") or []
    problems, warnings, notes = [], [], []
    # GeForce GPUs have no PCIe peer-to-peer (the driver reports none): NCCL_P2P_DISABLE=1 costs nothing on them, and
    # is the usual guard against NCCL's P2P probe hanging on RTX 40-series pairs
    classes = {str((matrix.gpu_by_pci(g.get("device_id") or "") or {}).get("class"))
               for g in facts.get("gpu_pci.devices") or [] if g.get("kind") == "gpu"} if matrix is not None else set()
    no_p2p = classes == {"geforce"}
    for var in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"):
        if env.get(var) != "1":
            continue
        if var == "NCCL_P2P_DISABLE" and no_p2p:
            notes.append("NCCL_P2P_DISABLE=1 costs nothing here: GeForce GPUs have no peer-to-peer over PCIe")
        else:
            warnings.append(f"{var}=1 disables a transport for every job (costs bandwidth)")
    if efa and env.get("NCCL_IB_DISABLE") == "1" and env.get("NCCL_NET") == "Socket":
        warnings.append("NCCL_NET=Socket on an EFA host")
    ifname = env.get("NCCL_SOCKET_IFNAME")
    if ifname and interfaces and not ifname.startswith("^"):
        # NCCL's rule (src/misc/socket.cc, matchIfList): a comma-separated list of prefixes ('=' before the list:
        # exact names); NCCL takes every interface that matches any of them and fails only where none does. A list
        # that names each node's interface is how one launch environment serves differently named nodes.
        exact = ifname.startswith("=")
        names = [n.strip() for n in ifname.lstrip("=").split(",") if n.strip()]
        used = sorted(i for i in interfaces if any(i == n or (not exact and i.startswith(n)) for n in names))
        if not used:
            problems.append(f"NCCL_SOCKET_IFNAME={ifname} matches no interface here (interfaces: "
                            f"{', '.join(sorted(interfaces))}): NCCL finds no socket interface and fails at bootstrap")
        elif len(names) > 1:
            notes.append(f"NCCL_SOCKET_IFNAME={ifname} uses {', '.join(used)} here")
    if efa and env.get("FI_PROVIDER") and env["FI_PROVIDER"] != "efa":
        problems.append(f"FI_PROVIDER={env['FI_PROVIDER']} on an EFA host (expected efa)")
    evidence: Dict[str, Any] = {"nccl_fi_env": env, "interfaces": sorted(interfaces)}
    unset = " ".join(sorted({p.split("=")[0] for p in problems + warnings}))
    steps = [f"unset {unset}"]
    if any(p.startswith("NCCL_SOCKET_IFNAME=") for p in problems):
        routed = sorted(i for i in interfaces if i != "lo" and not i.startswith(("docker", "veth", "virbr")))
        if routed:
            steps.append(f"export NCCL_SOCKET_IFNAME={','.join(routed[:4])}   # or a list naming each node's interface")
    steps.append("NCCL_DEBUG=INFO torchrun ... 2>&1 | grep -E 'NCCL INFO (NET|Channel|P2P|Bootstrap)'")
    fix = Fix("Unset (or correct) these variables in the launch environment.", tuple(steps))
    if problems:
        return fail("; ".join(problems + warnings), evidence, fix)
    if warnings:
        return warn("; ".join(warnings), evidence, fix)
    return passed("no harmful NCCL/FI settings" + (f" ({', '.join(sorted(env))} set)" if env else "")
                  + (f"; note: {'; '.join(notes)}" if notes else ""), **evidence)


# RDMA import of dma-buf memory (ib_umem_dmabuf) is in mainline Linux since 5.12; NVIDIA recommends DMA-BUF over
# nvidia-peermem where the open kernel modules are used (GPU Operator, "GPUDirect RDMA and GPUDirect Storage"). The
# kernel figure is from the kernel's history, not from an NVIDIA table: unverified there.
DMABUF_MIN_KERNEL = (5, 12)


@check(
    id="DLD-NET-004", slug="gpudirect-rdma-unavailable",
    remedy="repair-software", drain=False,
    problem="GPUDirect RDMA is off (no nvidia-peermem, no DMA-BUF)",
    title="GPUDirect RDMA has a kernel path on an InfiniBand/RoCE host (nvidia-peermem or DMA-BUF)",
    tags=("network", "nccl", "driver", "rdma"), requires=("network", "nvidia_driver"),
    what="""On a host with InfiniBand or RoCE adapters (not EFA, which carries GPUDirect RDMA through its own
    driver) and the NVIDIA module loaded: whether nvidia_peermem is loaded (/proc/modules; in a tree, whether
    /etc/modules-load.d or /etc/modules loads it at boot), or DMA-BUF can stand in for it (the open kernel module on
    a kernel with RDMA dma-buf support), and whether this boot's kernel log shows nvidia_peermem failing to load
    (the InfiniBand stack without the peer-memory API).""",
    why="""Without a kernel path for GPUDirect RDMA, NCCL stages every inter-node transfer through host memory: the
    job runs, at a fraction of the network's bandwidth, and nothing fails. nvidia-peermem is shipped with the driver
    but loaded by nothing, and it only loads against MLNX_OFED/DOCA-OFED's peer-memory API.""",
    fix="""sudo modprobe nvidia-peermem, and load it at boot (echo nvidia-peermem | sudo tee
    /etc/modules-load.d/nvidia-peermem.conf); where it fails with 'Unknown symbol ib_register_peer_memory_client',
    install MLNX_OFED/DOCA-OFED and rebuild the NVIDIA modules, or use DMA-BUF with the open kernel modules.""",
)
def gpudirect_rdma(facts: Facts, matrix) -> Result:
    from dl_doctor.judge.logs import events

    devices = [d for d in facts.get("network.infiniband_devices") or [] if isinstance(d, dict)
               and d.get("driver") != "efa" and not str(d.get("name", "")).startswith(("efa", "rdmap"))]
    if not devices:
        return skip("no InfiniBand or RoCE adapter here (EFA carries GPUDirect RDMA through its own driver)")
    module = facts.get("nvidia_driver.kernel_module") or {}
    if module.get("loaded") is False:
        return skip("the NVIDIA module is not loaded (see DLD-GPU-001)")
    names = ", ".join(sorted(str(d.get("name"))[:40] for d in devices)[:8])
    modules = facts.get("nvidia_driver.modules")
    autoload = [a for a in facts.get("nvidia_driver.module_autoload") or [] if a.get("module") == "nvidia_peermem"]
    kernel = facts.get("kernel.release") or facts.get("kmod.running_kernel")
    ktuple = versions.release(kernel)[:2]
    dmabuf = module.get("flavor") == "open" and len(ktuple) == 2 and ktuple >= DMABUF_MIN_KERNEL
    peermem_sigs = [s for s in matrix.signatures() if s["id"] == "peermem-unknown-symbol"]
    failed = [e["line"] for e in events(facts.get("kernel_log.candidates") or [], peermem_sigs)]
    evidence = {"adapters": devices[:16], "nvidia_modules": modules, "autoload": autoload,
                "flavor": module.get("flavor"), "kernel": kernel, "peermem_load_failures": failed[-5:]}
    persist = write_file("/etc/modules-load.d/nvidia-peermem.conf", "nvidia-peermem\n")
    if modules is not None and "nvidia_peermem" in modules:
        return passed(f"nvidia_peermem is loaded: GPUDirect RDMA through {names}", **evidence)
    if dmabuf:
        return passed(f"DMA-BUF: the open NVIDIA kernel module on kernel {kernel} registers GPU memory with {names} "
                      f"without nvidia-peermem", **evidence)
    cause = "; dl-doctor why explains the failure" if failed else ""
    if failed:
        return warn(f"nvidia_peermem failed to load in this boot ({failed[-1][:200]}): the InfiniBand stack has no "
                    f"peer-memory API, so GPUDirect RDMA through {names} is off and NCCL stages transfers through "
                    f"host memory{cause}", evidence,
                    Fix("Install MLNX_OFED/DOCA-OFED, rebuild the NVIDIA modules against it, then load nvidia-peermem "
                        "(or move to the open kernel modules and DMA-BUF).",
                        (root_command("dkms autoinstall"), load_module("nvidia-peermem"), persist)))
    if modules is None:
        if autoload:
            return passed(f"nvidia_peermem is loaded at boot by {autoload[0]['file']}", **evidence)
        return warn(f"nothing loads nvidia-peermem at boot and DMA-BUF is not available here (flavour "
                    f"{module.get('flavor') or 'unknown'}, kernel {kernel or 'unknown'}): GPUDirect RDMA through "
                    f"{names} will be off", evidence,
                    Fix("Load nvidia-peermem at boot.", (persist,)))
    return warn(f"nvidia_peermem is not loaded and DMA-BUF is not available here (flavour "
                f"{module.get('flavor') or 'unknown'}, kernel {kernel or 'unknown'}): GPUDirect RDMA through {names} "
                f"is off, NCCL stages inter-node transfers through host memory", evidence,
                Fix("Load nvidia-peermem now and at boot.", (load_module("nvidia-peermem"), persist)))
