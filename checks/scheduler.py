"""What the schedulers give a job of this node's GPUs: Slurm's gres.conf against the GPUs, device files and plugins
this node has; the device list Ray, Slurm or Kubernetes put in the job's environment."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

from dl_doctor import fixes
from dl_doctor.model import Facts, Fix, Result, check, fail, passed, skip, warn

_DEV = re.compile(r"^/dev/+nvidia(\d+)$")
# the GPU plugin each AutoDetect= value loads (slurm's gres.conf(5)): nvml -> gpu_nvml.so, nvidia -> gpu_nvidia.so
AUTODETECT_PLUGIN = {"nvml": "gpu_nvml.so", "nvidia": "gpu_nvidia.so", "rsmi": "gpu_rsmi.so",
                     "oneapi": "gpu_oneapi.so", "nrt": "gpu_nrt.so"}


def _records(slurm: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The gres.conf records that apply to this node (NodeName absent, or naming it)."""
    host = slurm.get("hostname")
    return [r for r in slurm.get("gres") or []
            if not (r.get("node_names") and host and host not in r["node_names"])]


def needs_slurm(facts: Facts) -> Optional[str]:
    if not facts.get("scheduler.slurm"):
        return "no Slurm configuration on this host"
    return None


def _gpu_count(facts: Facts) -> Optional[int]:
    n = facts.get("gpu_pci.gpu_count")
    return n if isinstance(n, int) else None


def _configured_gpus(slurm: Dict[str, Any]) -> Optional[int]:
    """The GPU count slurm.conf's NodeName line gives this node (Gres=gpu:4, gpu:a100:4), None where none names it."""
    host = slurm.get("hostname")
    for node in slurm.get("nodes") or []:
        if not host or host not in (node.get("names") or []):
            continue
        total = 0
        for item in str(node.get("gres") or "").split(","):
            parts = item.split("(")[0].split(":")
            if parts[0] == "gpu" and len(parts) >= 2 and parts[-1].isdigit():
                total += int(parts[-1])
        return total or None
    return None


def _reported_gpus(facts: Facts, records: List[Dict[str, Any]], autos: set, gpus: Optional[int]
                   ) -> "tuple[Optional[int], str]":
    """What slurmd will register for this node: its gres.conf File= devices; with AutoDetect, the GPUs NVML (else the
    PCI bus) shows. None where that is not decided from files (MIG, Count= only)."""
    files = sorted({f for r in records if str(r.get("name") or "").lower() == "gpu" for f in r.get("files") or []})
    if files:
        present = []
        for f in files:
            m = _DEV.match(f)
            if not (m and gpus is not None and int(m.group(1)) >= gpus):
                present.append(f)
        return len(present), f"{len(present)} device file(s) of gres.conf on this node"
    if autos & {"nvml", "nvidia"}:
        devs = facts.get("nvml.devices") or []
        if any((d.get("mig_mode") or {}).get("current") for d in devs):
            return None, "MIG"
        if devs:
            return len(devs), "the GPUs NVML shows, which AutoDetect registers"
        if gpus is not None:
            return gpus, "the GPUs on the PCI bus, which AutoDetect registers"
    return None, "unknown"


@check(
    id="DLD-SCHED-001", slug="slurm-gres-mismatch", title="Slurm's gres.conf describes GPUs this node has",
    remedy="fix-configuration", drain=True,
    problem="Slurm's GPU configuration does not match this node",
    tags=("scheduler", "slurm", "gpu"), requires=("scheduler",), applies=(needs_slurm,),
    what="""Reads slurm.conf, gres.conf and cgroup.conf where slurmd reads them (/etc/slurm, /etc/slurm-llnl, ...),
    takes the gres.conf records for this node (NodeName), and holds them against the node: every File= device
    (/dev/nvidia[0-7] expanded) against the GPUs on the PCI bus and, where the device nodes are known, against /dev;
    AutoDetect=nvml (or nvidia) against the plugin it loads (gpu_nvml.so) in the build's plugin directory; identical
    records. slurmd's own log lines about GRES are the evidence.""",
    why="""slurmd stats every File= at start and exits when one is missing ('fatal: can't stat gres.conf file
    /dev/nvidia0'): a CPU node given the GPU nodes' gres.conf, a node with fewer GPUs than the file names, or slurmd
    started at boot before the device nodes exist. AutoDetect=nvml on a Slurm built without NVML is fatal too ('We
    were configured to autodetect nvml functionality, but we weren't able to find that lib when Slurm was
    configured'), and so are duplicate records. The node stays down or drained and no job reaches its GPUs.""",
    fix="""Make gres.conf describe this node (a NodeName= per node type, File= only for the GPUs it has), install the
    Slurm build with NVML (the slurm-wlm/slurm package that ships gpu_nvml.so) or drop AutoDetect, and start slurmd
    after the NVIDIA device nodes exist (nvidia-persistenced, or After=nvidia-persistenced.service).""",
)
def slurm_gres(facts: Facts) -> Result:
    slurm = facts.get("scheduler.slurm") or {}
    records = _records(slurm)
    gpus = _gpu_count(facts)
    nodes = facts.get("nvidia_driver.device_nodes")
    plugins = set(slurm.get("plugins") or [])
    problems: List[str] = []
    heads: List[str] = []
    steps: List[Any] = []
    gres = slurm.get("gres_conf") or "gres.conf"
    evidence: Dict[str, Any] = {"scheduler.slurm.gres": records, "scheduler.slurm.autodetect": slurm.get("autodetect"),
                                "scheduler.slurm.plugins": sorted(plugins),
                                "scheduler.slurm.plugin_dirs": slurm.get("plugin_dirs"),
                                "gpu_pci.gpu_count": gpus, "device_nodes": nodes,
                                "scheduler.slurm.log_lines": (slurm.get("log_lines") or [])[-8:]}
    autos = {str(a).lower() for a in [slurm.get("autodetect")] + [r.get("autodetect") for r in records] if a}
    for auto in sorted(autos):
        plugin = AUTODETECT_PLUGIN.get(auto)
        if plugin and slurm.get("any_plugins") and plugin not in plugins:
            problems.append(f"{gres} says AutoDetect={auto} but this Slurm has no {plugin} in "
                            f"{', '.join(slurm.get('plugin_dirs') or ['its plugin directory'])}: it was built without "
                            f"{auto.upper()}, and slurmd exits at start")
            heads.append(f"AutoDetect={auto} without {plugin}")
            steps.append(f"# install a Slurm built with {auto.upper()} (its package ships {plugin}), or remove "
                         f"AutoDetect={auto} from {gres} and list File= per GPU")
    seen: Dict[tuple, Any] = {}
    for r in records:
        key = (str(r.get("name") or "").lower(), r.get("type"), tuple(r.get("files") or []), r.get("count"),
               tuple(r.get("node_names") or []))
        if key in seen:
            problems.append(f"{gres} has duplicate records '{r.get('line')}': slurmd refuses them ('gres.conf "
                            f"duplicate records for {r.get('name')}')")
            heads.append(f"duplicate gres.conf records for {r.get('name')}")
            steps.append(f"# keep one '{r.get('line')}' in {gres} (with AutoDetect, no Name= line is needed)")
            break
        seen[key] = r.get("line")
    for r in records:
        if str(r.get("name") or "").lower() != "gpu":
            continue
        for f in r.get("files") or []:
            m = _DEV.match(f)
            if not m:
                continue
            if gpus is not None and int(m.group(1)) >= gpus:
                have = f"{gpus} NVIDIA GPU{'s' if gpus != 1 else ''}" if gpus else "no NVIDIA GPU"
                problems.append(f"{gres} names {f} but this node has {have} on the PCI bus: slurmd cannot stat it "
                                f"('fatal: can't stat gres.conf file {f}')")
                heads.append(f"gres.conf names {f}, the node has {have}")
            elif isinstance(nodes, list) and f.rsplit("/", 1)[-1] not in nodes:
                problems.append(f"{gres} names {f} but /dev has no {f.rsplit('/', 1)[-1]} (the device nodes are made "
                                f"when the driver is first used): slurmd started now exits ('fatal: can't stat "
                                f"gres.conf file {f}')")
                heads.append(f"{f} of gres.conf does not exist yet")
                steps += [fixes.service("enable", "nvidia-persistenced", now=True),
                          "# and order slurmd after it: systemctl edit slurmd -> [Unit] After=nvidia-persistenced.service"]
    configured = _configured_gpus(slurm)
    reported, how = _reported_gpus(facts, records, autos, gpus)
    if configured is not None and reported is not None and configured > reported and not problems:
        problems.append(f"slurm.conf gives {slurm.get('hostname')} Gres=gpu:{configured} but slurmd will report "
                        f"{reported} ({how}): slurmctld drains the node ('gres/gpu count reported lower than "
                        f"configured ({reported} < {configured})')")
        heads.append(f"slurm.conf says {configured} GPUs, this node reports {reported}")
        steps.append(f"# make this node's slurm.conf line say Gres=gpu:{reported} (or give it the GPUs), then "
                     f"scontrol reconfigure and scontrol update NodeName={slurm.get('hostname')} State=RESUME")
    if gpus == 0 and any(str(r.get("name") or "").lower() == "gpu" for r in records) and not problems:
        problems.append(f"{gres} gives this node GPUs ({records[0].get('line')}) but it has none on the PCI bus")
    if problems:
        if gpus == 0:
            steps.insert(0, f"# a node without GPUs: give it no Name=gpu record (NodeName= on the GPU nodes' lines in "
                            f"{gres}), and no Gres=gpu in its slurm.conf NodeName line")
        steps.append("sudo slurmd -C   # what this node really has, in slurm.conf syntax")
        steps.append("sudo systemctl restart slurmd && sudo tail -20 " + (slurm.get("log_path") or
                                                                          "/var/log/slurm/slurmd.log"))
        return fail("; ".join(problems), evidence,
                    Fix("Make Slurm's GPU configuration describe this node.", tuple(dict.fromkeys(steps))),
                    headline=heads[0] if heads else None)
    fatal = [ln for ln in slurm.get("log_lines") or [] if "fatal" in ln.lower()]
    if fatal:
        return warn(f"slurmd logged: {fatal[-1]} (the configuration now looks consistent; restart slurmd)", evidence,
                    Fix("Restart slurmd and read its log.", ("sudo systemctl restart slurmd",
                                                             "sudo tail -20 " + (slurm.get("log_path") or ""))))
    if not records and not autos:
        return passed("Slurm has no GPU records for this node" + (f" ({gpus} GPUs not scheduled by Slurm)"
                                                                  if gpus else ""), **evidence)
    return passed(f"gres.conf describes this node's GPUs ({len(records)} record(s)"
                  + (f", AutoDetect={', '.join(sorted(autos))} with its plugin" if autos else "") + ")", **evidence)


_HIDDEN = ("", "-1", "NoDevFiles", "void", "none")


def _scheduler(env: Dict[str, str]) -> Optional[str]:
    if any(k in env for k in ("RAY_RAYLET_PID", "RAY_JOB_ID", "RAY_NODE_ID", "RAY_ADDRESS")):
        return "ray"
    if "SLURM_JOB_ID" in env or "SLURM_JOBID" in env:
        return "slurm"
    if "KUBERNETES_SERVICE_HOST" in env:
        return "kubernetes"
    return None


@check(
    id="DLD-SCHED-002", slug="scheduler-hid-gpus", title="The scheduler gave this job the GPUs it runs on",
    remedy="fix-configuration", drain=False,
    problem="The scheduler gave this job no GPU",
    tags=("scheduler", "gpu", "environment"), requires=("environment",),
    what="""Reads the job's environment: where a scheduler started it (Ray's RAY_* variables, Slurm's SLURM_JOB_ID,
    Kubernetes' KUBERNETES_SERVICE_HOST) on a node with NVIDIA GPUs, holds CUDA_VISIBLE_DEVICES and
    NVIDIA_VISIBLE_DEVICES against what the scheduler sets when it gives the job no GPU: Ray sets
    CUDA_VISIBLE_DEVICES to the empty string for a task or actor without num_gpus, Slurm to NoDevFiles for a job
    without --gres=gpu, the NVIDIA container runtime gives no GPU for NVIDIA_VISIBLE_DEVICES=void/none.""",
    why="""CUDA then sees no device: 'no CUDA-capable device is detected', torch.cuda.is_available() is False inside
    the task while it is True on the node. Nothing is broken on the node: the job did not ask for a GPU.""",
    fix="""Ask the scheduler for GPUs: @ray.remote(num_gpus=1) (or resources_per_trial={'gpu': 1}), sbatch
    --gres=gpu:N / --gpus=N, a resources.limits nvidia.com/gpu in the pod spec.""",
)
def scheduler_hid_gpus(facts: Facts) -> Result:
    env = facts.get("environment.variables") or {}
    gpus = _gpu_count(facts)
    who = _scheduler(env)
    evidence: Dict[str, Any] = {"scheduler": who, "CUDA_VISIBLE_DEVICES": env.get("CUDA_VISIBLE_DEVICES"),
                                "NVIDIA_VISIBLE_DEVICES": env.get("NVIDIA_VISIBLE_DEVICES"), "gpu_pci.gpu_count": gpus}
    if who is None:
        return skip("not started by a scheduler (no Ray, Slurm or Kubernetes variables in the environment)",
                    **evidence)
    if not gpus:
        return skip("no NVIDIA GPU on this node's PCI bus", **evidence)
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    nvd = env.get("NVIDIA_VISIBLE_DEVICES")
    if who == "ray" and cvd is not None and cvd.strip() == "" and \
            not env.get("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"):
        return warn(f"Ray set CUDA_VISIBLE_DEVICES to the empty string for this worker: the task or actor was "
                    f"scheduled without num_gpus, so CUDA sees none of the node's {gpus} GPUs", evidence,
                    Fix("Schedule the task or actor with GPUs.",
                        ("@ray.remote(num_gpus=1)   # or .options(num_gpus=1); Tune: resources_per_trial={'gpu': 1}",
                         "python -c 'import ray; ray.init(address=\"auto\"); print(ray.cluster_resources())'")))
    if who == "slurm" and cvd is not None and cvd.strip() in ("NoDevFiles", ""):
        return warn(f"Slurm set CUDA_VISIBLE_DEVICES={cvd!r} for job {env.get('SLURM_JOB_ID') or env.get('SLURM_JOBID')}: "
                    f"it was given no GPU of the node's {gpus} (no --gres=gpu or --gpus)", evidence,
                    Fix("Ask Slurm for GPUs.", ("sbatch --gres=gpu:1 job.sh   # or srun --gpus=1 ...",
                                                "scontrol show job $SLURM_JOB_ID | grep -i tres")))
    if who == "kubernetes" and nvd is not None and nvd.strip().lower() in ("void", "none", ""):
        return warn(f"NVIDIA_VISIBLE_DEVICES={nvd!r} in this pod: the NVIDIA container runtime gives it no GPU (the "
                    f"pod requests no nvidia.com/gpu)", evidence,
                    Fix("Request GPUs in the pod spec.", ("# in the container spec: resources.limits: {nvidia.com/gpu: 1}",)))
    return passed(f"{who} gave this job GPUs (CUDA_VISIBLE_DEVICES={cvd!r}, NVIDIA_VISIBLE_DEVICES={nvd!r})"
                  if cvd or nvd else f"{who} left every GPU visible", **evidence)
