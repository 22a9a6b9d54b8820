"""GPU generation against the driver branch and CUDA builds; the EC2 instance type against the hardware;
NVSwitch systems and the fabric manager."""

from __future__ import annotations

from typing import Any, Dict, List

from dl_doctor import fixes, versions
from dl_doctor.checks.common import cuda_consumers, driver_branch, driver_version, needs_nvidia_gpu, nvidia_gpus, \
    package_manager
from dl_doctor.model import Facts, Fix, Result, check, fail, passed, skip, warn


@check(
    id="DLD-GPU-002", slug="gpu-unsupported-by-driver-or-cuda",
    remedy="repair-software", drain=True,
    problem="A GPU is not supported by the driver, its module flavour or a CUDA build here",
    title="The GPUs are supported by the driver branch, its kernel-module flavour and the CUDA builds here",
    tags=("gpu", "driver", "cuda"), requires=("gpu_pci",), applies=(needs_nvidia_gpu,),
    what="""Identifies each GPU by its PCI device ID in the compatibility matrix and holds its architecture against
    the driver branch (last branch that supports it), the kernel-module flavour (open modules need Turing or newer;
    Blackwell requires them) and the CUDA versions of the toolkits and framework builds found.""",
    why="""Old GPUs drop out of new software: Kepler (K80) ends with driver R470 and CUDA 11.x; Maxwell, Pascal and
    Volta (V100) end with R580 and CUDA 12.x. A driver or CUDA build past that point simply has no code for the GPU,
    and the open kernel modules do not drive pre-Turing GPUs at all.""",
    fix="""Keep the driver and CUDA builds inside the GPU's support window (for a V100: CUDA 12.x builds and an
    R580-or-older driver), use the right kernel-module flavour, or move to a newer GPU generation.""",
)
def gpu_unsupported(facts: Facts, matrix) -> Result:
    driver = driver_version(facts)
    branch = driver_branch(driver)
    flavor = facts.get("nvidia_driver.kernel_module.flavor")
    consumers = cuda_consumers(facts)
    problems: List[str] = []
    below: List[str] = []
    unknown: List[str] = []
    seen: Dict[str, Dict[str, Any]] = {}
    for g in nvidia_gpus(facts):
        entry = matrix.gpu_by_pci(g.get("device_id") or "")
        if entry is None:
            unknown.append(f"10de:{g.get('device_id')}")
            continue
        seen[entry["name"]] = info = matrix.gpu_info(entry)
        name, arch = info["name"], info["architecture"]
        last = info.get("last_driver_branch")
        if branch and last and branch > int(last):
            problems.append(f"{name} ({arch}) is supported up to driver branch R{last}; driver {driver} does not "
                            f"support it")
        if flavor == "open" and info.get("open_kernel_modules") == "unsupported":
            problems.append(f"{name} ({arch}) needs the proprietary kernel module; the open module is loaded")
        if flavor == "proprietary" and info.get("open_kernel_modules") == "required":
            problems.append(f"{name} ({arch}) requires the open kernel modules; the proprietary module is loaded")
        min_cuda = info.get("min_cuda")
        if min_cuda:  # needs no arch list: a build for an older CUDA has no native code for this architecture
            for c in consumers:
                if c.get("kind") in ("framework", "consumer") and not c.get("major_only") and \
                        versions.release(c["cuda"]) < versions.release(min_cuda):
                    below.append(f"{name} ({arch}) needs CUDA {min_cuda} or newer for native code; {c['what']} "
                                 f"({c['where']}) was built for CUDA {c['cuda']}: it runs only through PTX it may "
                                 f"not ship ('no kernel image is available for execution on the device')")
        max_cuda = info.get("max_cuda")
        if max_cuda:
            for c in consumers:
                if versions.release(c["cuda"]) > versions.release(max_cuda):
                    problems.append(f"{name} ({arch}) is supported by CUDA up to {max_cuda}; {c['what']} "
                                    f"({c['where']}) is CUDA {c['cuda']}")
    evidence = {"gpus": list(seen.values()), "unknown_pci_ids": unknown, "driver": driver,
                "kernel_module_flavor": flavor, "cuda_consumers": consumers}
    for info in evidence["gpus"]:
        info.pop("sources", None)
    if problems:
        family_fix = []
        if any("open kernel modules" in p for p in problems):
            family_fix.append("# install the open flavour: e.g. sudo dnf module install nvidia-driver:open-dkms / "
                              "sudo apt-get install nvidia-driver-<branch>-server-open")
        if any("proprietary kernel module" in p for p in problems):
            family_fix.append("# install the proprietary flavour of the driver (the -open packages do not drive "
                              "pre-Turing GPUs)")
        return fail("; ".join(dict.fromkeys(problems)), evidence,
                    Fix("Keep the driver branch and CUDA builds within what these GPUs support.",
                        tuple(family_fix + [
                            "dl-doctor matrix gpu " + (next(iter(seen)) if seen else "<gpu>") + "   # its support window",
                            "# e.g. PyTorch built for an older CUDA: pip install torch --index-url "
                            "https://download.pytorch.org/whl/cu<XY>"])))
    if not seen:
        return skip(f"GPU model{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} not in the compatibility matrix",
                    **evidence)
    if below:
        return warn("; ".join(dict.fromkeys(below)), evidence,
                    Fix("Install the framework build for a CUDA release that supports this GPU generation.",
                        ("dl-doctor matrix gpu " + next(iter(seen)) + "   # its minimum CUDA",
                         "# PyTorch: pip install torch --index-url https://download.pytorch.org/whl/cu128 (or newer)")))
    return passed(", ".join(f"{n} ({i['architecture']}, CC {i['compute_capability']})" for n, i in seen.items())
                  + " supported by " + (f"driver {driver}" if driver else "the installed software"), **evidence)


def _instance(facts: Facts, matrix):
    itype = facts.get("cloud.instance_type") or facts.get("imds.instance_type")
    return itype, (matrix.instance(itype) if itype else None)


def needs_known_instance(facts: Facts):
    if not (facts.get("cloud.instance_type") or facts.get("imds.instance_type")):
        return "not an EC2 instance of a known type (no instance type from DMI or IMDS)"
    return None


@check(
    id="DLD-GPU-003", slug="instance-gpu-mismatch",
    remedy="replace-hardware", drain=True,
    problem="The GPUs differ from what the instance type should have",
    title="The GPUs match what the EC2 instance type should have",
    tags=("gpu", "cloud", "hardware"), requires=("gpu_pci",), applies=(needs_known_instance,),
    what="""Holds the instance type (DMI product_name on Nitro, or IMDS) against the matrix: the expected GPU model and
    count, then what the PCI bus shows and what the driver initialised (NVML or /proc/driver/nvidia/gpus), naming the
    GPU that failed from RmInitAdapter or 'fallen off the bus' lines in the kernel log. A container (a pod) given part
    of the node's GPUs is held to the GPUs it was given.""",
    why="""A p4d with 7 working GPUs is a hardware problem, not a software one: training scripts that assume 8 ranks
    hang or crash. A GPU missing from the PCI bus, or present but failing to initialise, needs a reset, a reboot, or
    a new host (stop and start moves an EC2 instance).""",
    fix="""Reboot; if the GPU is still missing or failing, stop and start the instance to move it to another host,
    and open a support case with the kernel log lines.""",
)
def instance_gpu_mismatch(facts: Facts, matrix) -> Result:
    itype, expected = _instance(facts, matrix)
    if expected is None:
        return skip(f"instance type {itype} is not in the compatibility matrix")
    gpus = nvidia_gpus(facts)
    want_ids = [p.split(":")[1] for p in expected["gpu_pci_ids"]]
    matching = [g for g in gpus if g.get("device_id") in want_ids]
    driver_count = facts.get("nvml.device_count")
    if driver_count is None and facts.get("nvidia_driver.kernel_module.loaded"):
        driver_count = len(facts.get("nvidia_driver.proc_gpus") or []) or None
    failed = facts.get("kernel_log.init_failures") or []
    fallen = facts.get("kernel_log.fallen_off_bus") or []
    evidence = {"instance_type": itype, "expected": {k: expected[k] for k in ("gpu", "gpu_count", "gpu_pci_ids")},
                "pci_gpus": [{"bdf": g["bdf"], "device_id": g.get("device_id")} for g in gpus],
                "driver_visible": driver_count, "kernel_log.init_failures": failed, "kernel_log.fallen_off_bus": fallen}
    fix = Fix("Reboot; if GPUs are still missing, stop and start the instance (new host) and open a support case with "
              "the kernel log lines.",
              ("sudo dmesg | grep -iE 'NVRM|Xid|RmInitAdapter|fallen off' | tail -30", "lspci -d 10de: -nn",
               fixes.reboot(), "aws ec2 stop-instances --instance-ids <id> && aws ec2 start-instances --instance-ids <id>"))
    n = expected["gpu_count"]
    if len(gpus) < n or len(matching) < len(gpus):
        wrong = [f"10de:{g.get('device_id')}" for g in gpus if g.get("device_id") not in want_ids]
        detail = f" ({len(wrong)} of another model: {', '.join(wrong)})" if wrong else ""
        return fail(f"{itype} should have {n} x {expected['gpu']}; the PCI bus shows {len(matching)}{detail}",
                    evidence, fix)
    given = facts.get("nvidia_driver.runtime.given_gpus") if facts.get("system.container.in_container") else None
    if given and len(given) < n:
        # a pod (or container) given part of the node's GPUs: the driver shows it only those
        evidence["nvidia_driver.runtime.given_gpus"] = given
        mig = any(str(g).startswith("MIG-") for g in given) or any(
            (d.get("mig_mode") or {}).get("current") for d in facts.get("nvml.devices") or [])
        if driver_count is not None and driver_count < len(given) and not mig:  # MIG: several per GPU
            return fail(f"{itype}: this container was given {len(given)} of the node's {n} GPUs but the driver "
                        f"shows it only {driver_count}", evidence,
                        Fix("On the node (not in this container): " + fix.summary[0].lower() + fix.summary[1:],
                            ("# on the node, not in the container:",) + fix.steps))
        seen = f"; the driver shows it {driver_count}" if driver_count is not None else ""
        share = (f"{len(given)} MIG device(s)" if any(str(g).startswith("MIG-") for g in given)
                 else f"{len(given)} of them")
        return passed(f"{itype}: {len(matching)} x {expected['gpu']} on the PCI bus as expected; this container was "
                      f"given {share}{seen}", **evidence)
    if driver_count is not None and driver_count < n:
        named = ", ".join(sorted({f['bus'] for f in failed if f.get('bus')} | set(fallen)))
        why = f"; failing: {named}" if named else ""
        return fail(f"{itype}: all {n} GPUs are on the PCI bus but the driver initialised only {driver_count}{why}",
                    evidence, fix)
    seen = f"; the driver sees {driver_count}" if driver_count is not None else ""
    return passed(f"{itype}: {len(matching)} x {expected['gpu']} on the PCI bus as expected{seen}", **evidence)


_FABRIC_ERRORS = ("system not yet initialized", "cuda_error_system_not_ready", "error 802")


def _fabric_not_initialised(facts: Facts):
    """What says the NVSwitch fabric is not initialised: a CUDA error 802 a framework reported (--deep)."""
    for env in facts.get("python_envs.environments") or []:
        deep = (env or {}).get("deep") or {}
        for key in ("cuda_error", "import_error"):
            text = str(deep.get(key) or "")[:2000]
            if any(e in text.lower() for e in _FABRIC_ERRORS):
                return f"{env.get('path') or 'a Python environment'}: {text[:200]}"
    return None


def needs_nvswitch(facts: Facts):
    if (facts.get("gpu_pci.nvswitch_count") or 0) > 0:
        return None
    return "no NVSwitch on the PCI bus: the fabric manager is not needed"


@check(
    id="DLD-GPU-004", slug="fabric-manager-not-running",
    remedy="repair-software", drain=True,
    problem="The fabric manager is not running at the driver's version",
    title="NVSwitch systems run nvidia-fabricmanager of the driver's exact version",
    tags=("gpu", "nvswitch", "driver"), requires=("gpu_services",), applies=(needs_nvidia_gpu, needs_nvswitch),
    what="""On a host with NVSwitch devices (HGX A100/H100/H200/B200: p4d, p4de, p5, p5e, p5en, p6-b200) checks that
    nvidia-fabricmanager is installed, enabled, active, and the same version as the driver. Inside a container the
    fabric manager is the host's: the check skips unless a CUDA error 802 says the fabric is not initialised. A tree
    whose files do not record the fabric manager's version passes with the reason.""",
    why="""Without a running fabric manager the NVLink fabric is not initialised: CUDA fails with error 802 'system
    not yet initialized' and NCCL cannot use NVLink. The fabric manager refuses to start when its version differs
    from the driver's, which is exactly what happens after a driver update that did not update it too.""",
    fix="""Install the nvidia-fabricmanager package of the driver's exact version, enable and start it.""",
)
def fabric_manager(facts: Facts, matrix) -> Result:
    fm = facts.get("gpu_services.fabric_manager") or {}
    driver = driver_version(facts)
    version = (fm.get("version") or {}).get("version")
    evidence = {"gpu_services.fabric_manager": fm, "driver": driver,
                "gpu_pci.nvswitch_count": facts.get("gpu_pci.nvswitch_count")}
    branch = driver_branch(driver)
    pm = package_manager(facts)  # apt on Debian/Ubuntu, dnf on RHEL-likes and AL2023, yum on AL2, zypper on SUSE
    install = (pm.install(f"nvidia-fabricmanager-{branch}={driver}-1") if pm.name == "apt"
               else pm.install(f"nvidia-fabric-manager-{driver}"))
    start = fixes.service("enable", "nvidia-fabricmanager", now=True)
    if facts.get("system.container.in_container"):
        # the fabric manager runs on the host, where the NVSwitches are managed: a container has no unit of it, and
        # a package of it in the image neither runs nor says what the host runs
        stuck = _fabric_not_initialised(facts)
        if stuck:
            return fail(f"{stuck}: the NVSwitch fabric is not initialised; the fabric manager runs on the host, not in "
                        "this container", evidence,
                        Fix("On the host: install and start the fabric manager of the driver's exact version.",
                            ("# on the host, not in the container:", install, start,
                             "systemctl status nvidia-fabricmanager --no-pager")))
        own = f" (the image's own nvidia-fabricmanager {version} does not run here)" if version else ""
        return skip(f"inside a container: the fabric manager runs on the host (check it there); nothing here says "
                    f"the NVSwitch fabric is not initialised{own}", **evidence)
    problems = []
    if not fm.get("installed"):
        problems.append("nvidia-fabricmanager is not installed")
    else:
        if not fm.get("enabled"):
            problems.append("nvidia-fabricmanager is not enabled")
        if fm.get("active") not in (None, "active"):
            problems.append(f"nvidia-fabricmanager is {fm['active']}")
        if version and driver and version != driver:
            problems.append(f"nvidia-fabricmanager is {version} but the driver is {driver}")
            if version in (facts.get("nvidia_driver.userspace.versions") or []):
                return fail(f"nvidia-fabricmanager {version} matches the newly installed driver, but the loaded module "
                            f"is still {driver}: the fabric manager cannot start until the new module is loaded",
                            evidence, Fix("Reboot to load the new driver (see DLD-DRV-003); the fabric manager then "
                                          "starts with it.", (fixes.reboot(), "systemctl status nvidia-fabricmanager --no-pager")))
    if problems:
        return fail("; ".join(problems) + ": the NVSwitch fabric is not initialised (CUDA error 802)", evidence,
                    Fix("Install the fabric manager of the driver's exact version and start it.",
                        (install, start, "systemctl status nvidia-fabricmanager --no-pager",
                         "nvidia-smi -q | grep -A2 -i fabric")))
    state = f", {fm['active']}" if fm.get("active") else ""
    if not version and not facts.live:
        # a tree's package database may not name it (RPM installs), and the running one cannot be asked
        return passed(f"nvidia-fabricmanager is installed and enabled{state}; its version is not recorded in this "
                      f"tree (it is read from the running fabric manager on a live host)", **evidence)
    if not version:
        return warn(f"nvidia-fabricmanager is installed and enabled{state}, but its version could not be read to "
                    f"compare with the driver", evidence,
                    Fix("Check that its version equals the driver's.", ("nv-fabricmanager --version", "nvidia-smi")))
    return passed(f"nvidia-fabricmanager {version} installed and enabled{state}, same version as the driver", **evidence)
