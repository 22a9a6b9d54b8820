"""What the node's workload schedulers are told about its GPUs, from their files: Slurm's slurm.conf, gres.conf and
cgroup.conf as slurmd reads them, the plugins its build installed, and slurmd's log; Ray and Kubernetes leave their
marks in the session environment (the environment probe's). Reads files only: works under --sysroot."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

from dl_doctor.facts.contract import array, boolean, obj, string
from dl_doctor.probes import ProbeContext, Unavailable, probe

SLURM_DIRS = ("/etc/slurm", "/etc/slurm-llnl", "/usr/local/etc/slurm", "/usr/local/etc", "/opt/slurm/etc")
# Where each distribution's slurm packages (or a default --prefix build) put the plugins, when slurm.conf has no
# PluginDir: RPM (lib64/slurm), Debian's slurm-wlm (lib/<triplet>/slurm-wlm), a source build (/usr/local/lib/slurm).
PLUGIN_DIRS = ("/usr/lib64/slurm", "/usr/lib/slurm", "/usr/lib/x86_64-linux-gnu/slurm-wlm",
               "/usr/lib/x86_64-linux-gnu/slurm", "/usr/lib/aarch64-linux-gnu/slurm-wlm",
               "/usr/lib/aarch64-linux-gnu/slurm", "/usr/local/lib/slurm", "/opt/slurm/lib/slurm",
               "/opt/slurm/lib64/slurm")
MAX_CONF = 1 << 20
MAX_RECORDS = 512
MAX_LOG = 256 << 10
_KV = re.compile(r"([A-Za-z][A-Za-z0-9_]{0,40})=(\S{0,1000})")
_LOG_LINE = re.compile(r"(fatal|error).{0,40}(gres|gpu|nvml|/dev/nvidia|cgroup|device)|gres|nvml|/dev/nvidia",
                       re.IGNORECASE)
_BRACKET = re.compile(r"^(.*?)\[([0-9,\-]{1,200})\](.*)$")


def expand(pattern: str, limit: int = 256) -> List[str]:
    """Slurm's bracket ranges in one name: '/dev/nvidia[0-3,5]' -> nvidia0..3, nvidia5; 'gpu[01-02]' keeps the zero
    padding. A name without brackets is itself."""
    m = _BRACKET.match(pattern)
    if not m:
        return [pattern]
    head, body, tail = m.groups()
    out: List[str] = []
    for part in body.split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return [pattern]
        width = len(lo) if lo.startswith("0") else 0
        for n in range(int(lo), int(hi or lo) + 1):
            for rest in expand(tail, limit):
                out.append(f"{head}{str(n).zfill(width)}{rest}")
                if len(out) >= limit:
                    return out
    return out


def expand_list(value: str, limit: int = 256) -> List[str]:
    """A comma-separated Slurm list whose items may hold bracket ranges ('/dev/nvidia0,/dev/nvidia[2-3]')."""
    items, depth, cur = [], 0, ""
    for ch in value[:4000]:
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        depth += ch == "["
        depth -= ch == "]"
        cur += ch
    items.append(cur)
    out: List[str] = []
    for item in items:
        if item:
            out += expand(item, limit)
    return out[:limit]


def parse_conf(text: str) -> List[Dict[str, str]]:
    """slurm.conf/gres.conf/cgroup.conf lines as key=value records (comments and continuation lines handled), keys as
    written; bounded."""
    out: List[Dict[str, str]] = []
    pending = ""
    for raw in text.splitlines()[:20000]:
        line = raw.split("#", 1)[0].rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = (pending + line).strip(), ""
        if not line:
            continue
        rec = {k: v for k, v in _KV.findall(line[:8192])}
        if rec:
            rec["_line"] = line[:300]
            out.append(rec)
        if len(out) >= MAX_RECORDS:
            break
    return out


def _get(rec: Dict[str, str], key: str) -> Optional[str]:
    for k, v in rec.items():
        if k.lower() == key.lower():
            return v
    return None


SLURM_FACTS = obj(
    "Slurm's view of this node's GPUs, from its configuration files (null: no Slurm configuration here)",
    slurm=obj(
        "Slurm's configuration as slurmd on this node reads it",
        config_dir=string("the directory slurm.conf was read from"),
        slurm_conf=string("its path"),
        gres_types=array(string(), "slurm.conf GresTypes"),
        plugin_dir=string("slurm.conf PluginDir (null: not set, the build's default)"),
        slurmd_log=string("slurm.conf SlurmdLogFile"),
        nodes=array(obj("", names=array(string(), "NodeName, expanded"), gres=string("its Gres= value")),
                    "slurm.conf node lines"),
        gres_conf=string("gres.conf's path (null: none)"),
        autodetect=string("gres.conf's global AutoDetect= (nvml, nvidia, rsmi, off; null: not set)"),
        gres=array(obj(
            "",
            line=string("the record as written (comments stripped)"),
            name=string("Name="),
            type=string("Type="),
            node_names=array(string(), "NodeName=, expanded (empty: every node)"),
            files=array(string(), "File= (or Files=), expanded"),
            count=string("Count="),
            autodetect=string("AutoDetect= on this record"),
        ), "gres.conf records"),
        constrain_devices=boolean("cgroup.conf ConstrainDevices=yes"),
        cgroup_conf=string("cgroup.conf's path (null: none)"),
        plugin_dirs=array(string(), "the plugin directories that exist (PluginDir, else the distributions' defaults)"),
        plugins=array(string(), "gres_*.so and gpu_*.so plugins found in them"),
        any_plugins=boolean("a plugin directory holds Slurm plugins at all (so a plugin's absence is known)"),
        log_lines=array(string(), "slurmd's log lines about GRES, GPUs, NVML, devices or cgroups (the last 40)"),
        log_path=string("the slurmd log read"),
        hostname=string("the node's host name, as slurmd matches NodeName"),
    ),
)


def _read(host, path: str, cap: int = MAX_CONF) -> Optional[str]:
    try:
        return host.try_read(path, cap)
    except (PermissionError, OSError):
        return None


def read_slurm(host) -> Optional[Dict[str, Any]]:
    conf_dir, text = None, None
    for d in SLURM_DIRS:
        text = _read(host, f"{d}/slurm.conf")
        if text is not None:
            conf_dir = d
            break
    if conf_dir is None or text is None:
        return None
    records = parse_conf(text)
    glob: Dict[str, str] = {}
    nodes = []
    for rec in records:
        name = _get(rec, "NodeName")
        if name is not None:
            nodes.append({"names": expand_list(name, 1024)[:1024], "gres": _get(rec, "Gres")})
            continue
        if _get(rec, "PartitionName") is None:
            for k, v in rec.items():
                if k != "_line":
                    glob.setdefault(k.lower(), v)
    gres_path = f"{conf_dir}/gres.conf"
    gres_text = _read(host, gres_path)
    gres, autodetect = [], None
    for rec in parse_conf(gres_text or ""):
        auto = _get(rec, "AutoDetect")
        if auto is not None and _get(rec, "Name") is None and _get(rec, "NodeName") is None:
            autodetect = auto
            continue
        files = _get(rec, "File") or _get(rec, "Files")
        gres.append({"line": rec["_line"], "name": _get(rec, "Name"), "type": _get(rec, "Type"),
                     "node_names": expand_list(_get(rec, "NodeName") or "", 1024),
                     "files": expand_list(files, 256) if files else [], "count": _get(rec, "Count"),
                     "autodetect": auto})
    cgroup_path = f"{conf_dir}/cgroup.conf"
    cgroup_text = _read(host, cgroup_path)
    constrain = None
    if cgroup_text is not None:
        constrain = False
        for rec in parse_conf(cgroup_text):
            value = _get(rec, "ConstrainDevices")
            if value is not None:
                constrain = value.lower() == "yes"
    plugin_dir = glob.get("plugindir")
    candidates = [p for p in (plugin_dir or "").split(":") if p.startswith("/")] or list(PLUGIN_DIRS)
    dirs, plugins, any_plugins = [], [], False
    for d in candidates:
        if not host.is_dir(d):
            continue
        dirs.append(d)
        try:
            names = host.listdir(d)[:4000]
        except (PermissionError, OSError):
            continue
        any_plugins = any_plugins or any(n.endswith(".so") for n in names)
        plugins += sorted(n for n in names if n.startswith(("gres_", "gpu_")) and n.endswith(".so"))
    log_path = glob.get("slurmdlogfile") or "/var/log/slurm/slurmd.log"
    lines: List[str] = []
    for path in dict.fromkeys((log_path, "/var/log/slurm/slurmd.log", "/var/log/slurmd.log",
                               "/var/log/slurm-llnl/slurmd.log")):
        try:
            data, _ = host.read_tail(path, MAX_LOG)
        except (OSError, PermissionError, ValueError):
            continue
        found = [ln[:400] for ln in data.decode("utf-8", "replace").splitlines() if _LOG_LINE.search(ln[:400])]
        if found or not lines:
            lines, log_path = found[-40:], path
        if found:
            break
    hostname = None
    for path in ("/proc/sys/kernel/hostname", "/etc/hostname"):
        t = _read(host, path, 256)
        if t and t.strip():
            hostname = t.strip().splitlines()[0].split(".")[0]
            break
    return {"config_dir": conf_dir, "slurm_conf": f"{conf_dir}/slurm.conf",
            "gres_types": [t for t in (glob.get("grestypes") or "").split(",") if t],
            "plugin_dir": plugin_dir, "slurmd_log": glob.get("slurmdlogfile"), "nodes": nodes[:256],
            "gres_conf": gres_path if gres_text is not None else None, "autodetect": autodetect,
            "gres": gres[:MAX_RECORDS], "constrain_devices": constrain,
            "cgroup_conf": cgroup_path if cgroup_text is not None else None, "plugin_dirs": dirs,
            "plugins": sorted(set(plugins)), "any_plugins": any_plugins, "log_lines": lines,
            "log_path": log_path if lines else None, "hostname": hostname}


@probe("scheduler", "Slurm's GPU configuration on this node (slurm.conf, gres.conf, cgroup.conf, its plugins, "
       "slurmd's log)", provides=SLURM_FACTS)
def scheduler_probe(ctx: ProbeContext) -> Dict[str, Any]:
    slurm = read_slurm(ctx.host)
    if slurm is None:
        raise Unavailable("no Slurm configuration (slurm.conf) on this host")
    return {"slurm": slurm}
