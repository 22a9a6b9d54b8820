"""The training box's own security posture: sshd's effective settings, Jupyter/code-server configurations and
running servers, the Docker daemon's listeners and group, what listens beyond loopback, and the signs of a miner.

Everything is read from files (so an image under --sysroot is judged too); the live parts (/proc/net, the running
processes) are read only on a running host. Nothing found here is executed: a Jupyter config is a Python file, and it
is read as text.
"""

from __future__ import annotations

import json
import posixpath
import re
from typing import Any, Dict, List, Optional, Tuple

from dl_doctor.facts.contract import Fact, array, boolean, integer, map_of, obj, string
from dl_doctor.probes import ProbeContext, probe

MAX_CONFIG = 1 << 20
MAX_INCLUDES = 64
MAX_HOMES = 200
MAX_PIDS = 4096
MAX_FD_LINKS = 50_000
MAX_ARGV = 40

# -- sshd ----------------------------------------------------------------------------------------------------------

SSHD_KEYS = ("permitrootlogin", "passwordauthentication", "kbdinteractiveauthentication",
             "challengeresponseauthentication", "permitemptypasswords", "pubkeyauthentication", "port",
             "listenaddress", "usepam")


def parse_sshd(host, path: str = "/etc/ssh/sshd_config", depth: int = 0,
               state: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """sshd's effective settings from its files, as sshd reads them: the first value of a keyword wins, Include
    (globs, relative to /etc/ssh) is read where it stands, and a Match block's settings are only reported."""
    state = state if state is not None else {"settings": {}, "sources": {}, "match_blocks": [], "files": [],
                                             "errors": []}
    if depth > 8 or len(state["files"]) > MAX_INCLUDES:
        return state
    try:
        text = host.try_read(path, MAX_CONFIG)
    except PermissionError:
        state["errors"].append(f"{path}: permission denied")
        return state
    if text is None:
        return state
    state["files"].append(path)
    in_match: Optional[Dict[str, Any]] = None
    for number, raw in enumerate(text.splitlines()[:20000], 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = re.split(r"[\s=]+", line, maxsplit=1)
        key = parts[0].lower()
        value = parts[1].strip().strip('"') if len(parts) > 1 else ""
        if key == "match":
            in_match = {"criteria": value[:200], "file": path, "line": number, "settings": {}}
            state["match_blocks"].append(in_match)
            continue
        if key == "include" and in_match is None:
            for pattern in value.split()[:16]:
                full = pattern if pattern.startswith("/") else posixpath.join("/etc/ssh", pattern)
                for inc in sorted(host.glob(full))[:MAX_INCLUDES]:
                    parse_sshd(host, inc, depth + 1, state)
            continue
        if key not in SSHD_KEYS:
            continue
        if in_match is not None:
            in_match["settings"].setdefault(key, value[:200])
        elif key not in state["settings"]:
            state["settings"][key] = value[:200]
            state["sources"][key] = f"{path}:{number}"
    return state


# -- Jupyter and code-server ------------------------------------------------------------------------------------------

# blanks are [ \t] (not \s, which would cross lines and go quadratic on a file of newlines)
_PY_SETTING = re.compile(r"^[ \t]*c\.(ServerApp|NotebookApp|IdentityProvider|PasswordIdentityProvider)\."
                         r"(ip|token|password|hashed_password|allow_root|certfile|keyfile|password_required|open_browser"
                         r"|allow_remote_access)[ \t]*=[ \t]*(.{0,300})$", re.M)


def _literal(text: str) -> Any:
    t = text.strip().rstrip(";").strip()
    if t in ("True", "False"):
        return t == "True"
    m = re.match(r"""^[urbf]*(['"])(.*)\1$""", t)
    if m:
        return m.group(2)
    return t[:200]


def parse_jupyter_config(path: str, text: str) -> Dict[str, Any]:
    """The settings that decide exposure, from a jupyter_*_config.py (read as text, never run) or .json."""
    settings: Dict[str, Any] = {}
    if path.endswith(".json"):
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            return {"error": "not valid JSON"}
        for section in ("ServerApp", "NotebookApp", "IdentityProvider", "PasswordIdentityProvider"):
            part = doc.get(section) if isinstance(doc, dict) else None
            if isinstance(part, dict):
                for k, v in part.items():
                    if isinstance(k, str) and isinstance(v, (str, bool, int)):
                        settings[k.lower()] = v if not isinstance(v, str) else v[:200]
        return settings
    for m in _PY_SETTING.finditer(text):
        settings.setdefault(m.group(2).lower(), _literal(m.group(3)))
    return settings


def _homes(host) -> List[Tuple[str, str]]:
    """(user, home) from /etc/passwd, plus /root and /home/* directories."""
    out: Dict[str, str] = {}
    for line in (host.try_read("/etc/passwd", MAX_CONFIG) or "").splitlines()[:5000]:
        parts = line.split(":")
        if len(parts) >= 6 and parts[5].startswith("/") and parts[5] not in ("/", "/nonexistent"):
            out.setdefault(parts[5], parts[0])
    for d in ["/root"] + [f"/home/{n}" for n in host.listdir("/home")[:MAX_HOMES]]:
        out.setdefault(d, posixpath.basename(d))
    return [(user, home) for home, user in sorted(out.items())][:MAX_HOMES]


def jupyter_configs(host) -> List[Dict[str, Any]]:
    dirs = ["/etc/jupyter", "/usr/local/etc/jupyter", "/opt/conda/etc/jupyter"]
    dirs += host.glob("/opt/conda/envs/*/etc/jupyter") + host.glob("/opt/*/etc/jupyter")
    owners = {}
    for user, home in _homes(host):
        dirs.append(f"{home}/.jupyter")
        owners[f"{home}/.jupyter"] = user
    out = []
    for d in dict.fromkeys(dirs):
        for name in host.listdir(d):
            if re.match(r"^jupyter_(server|notebook|lab)_config\.(py|json)$", name):
                path = f"{d}/{name}"
                try:
                    text = host.try_read(path, MAX_CONFIG)
                except PermissionError:
                    continue
                if text is not None:
                    out.append({"path": path, "user": owners.get(d), **{"settings": parse_jupyter_config(path, text)}})
    return out[:200]


def code_server_configs(host) -> List[Dict[str, Any]]:
    out = []
    for user, home in _homes(host):
        path = f"{home}/.config/code-server/config.yaml"
        try:
            text = host.try_read(path, 65536)
        except PermissionError:
            continue
        if text is None:
            continue
        settings = {}
        for line in text.splitlines()[:200]:
            m = re.match(r"^\s*(bind-addr|auth|cert|password|hashed-password)\s*:\s*(.{0,200})$", line)
            if m:
                settings[m.group(1)] = m.group(2).strip().strip("'\"")
        out.append({"path": path, "user": user,
                    "settings": {k: ("(set)" if "password" in k and v else v) for k, v in settings.items()}})
    return out


# -- Docker ---------------------------------------------------------------------------------------------------------

def docker_facts(host) -> Dict[str, Any]:
    hosts: List[Dict[str, Any]] = []
    text = host.try_read("/etc/docker/daemon.json", MAX_CONFIG)
    tls = False
    if text:
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            doc = None
        if isinstance(doc, dict):
            tls = bool(doc.get("tlsverify") or doc.get("tls"))
            for h in doc.get("hosts") or [] if isinstance(doc.get("hosts"), list) else []:
                hosts.append({"address": str(h)[:200], "from": "/etc/docker/daemon.json"})
    for unit in (["/lib/systemd/system/docker.service", "/usr/lib/systemd/system/docker.service",
                  "/etc/systemd/system/docker.service"] + sorted(host.glob("/etc/systemd/system/docker.service.d/*.conf"))):
        body = host.try_read(unit, MAX_CONFIG)
        for line in (body or "").splitlines():
            if line.strip().startswith("ExecStart="):
                for m in re.finditer(r"(?:-H|--host)[= ]+(\S+)", line):
                    hosts.append({"address": m.group(1)[:200], "from": unit})
                if "--tlsverify" in line or "--tls " in line or line.rstrip().endswith("--tls"):
                    tls = True
    group = None
    admins: List[str] = []
    for line in (host.try_read("/etc/group", MAX_CONFIG) or "").splitlines():
        parts = line.split(":")
        if len(parts) >= 4 and parts[0] == "docker":
            group = [u for u in parts[3].split(",") if u][:200]
        elif len(parts) >= 4 and parts[0] in ("sudo", "wheel", "admin"):
            admins += [u for u in parts[3].split(",") if u and u not in admins][:200]
    privileged = []
    for cfg in sorted(host.glob("/var/lib/docker/containers/*/hostconfig.json"))[:64]:
        try:
            doc = json.loads(host.try_read(cfg, MAX_CONFIG) or "{}")
        except (ValueError, RecursionError, PermissionError):
            continue
        if not isinstance(doc, dict):
            continue
        binds = [b for b in doc.get("Binds") or [] if isinstance(b, str) and b.split(":")[0] == "/"]
        if doc.get("Privileged") or binds:
            privileged.append({"container": cfg.split("/")[-2][:12], "privileged": bool(doc.get("Privileged")),
                               "host_root_mounted": bool(binds)})
    installed = any(host.exists(p) for p in ("/usr/bin/dockerd", "/usr/sbin/dockerd"))
    return {"installed": installed, "hosts": hosts, "tls": tls, "docker_group": group, "administrators": admins[:200],
            "containers": privileged}


# -- sockets and processes (live) ----------------------------------------------------------------------------------

def _addr(hex_addr: str) -> Tuple[str, int]:
    ip_hex, port_hex = hex_addr.split(":")
    port = int(port_hex, 16)
    if len(ip_hex) == 8:
        b = bytes.fromhex(ip_hex)[::-1]
        return ".".join(str(x) for x in b), port
    words = [bytes.fromhex(ip_hex[i:i + 8])[::-1].hex() for i in range(0, 32, 8)]
    full = "".join(words)
    groups = [full[i:i + 4] for i in range(0, 32, 4)]
    import ipaddress

    return str(ipaddress.IPv6Address(":".join(groups))), port


def listening(host) -> List[Dict[str, Any]]:
    """TCP sockets in LISTEN and bound UDP sockets, from /proc/net, with the owning process where readable."""
    inodes: Dict[str, Dict[str, Any]] = {}
    for table, proto in (("/proc/net/tcp", "tcp"), ("/proc/net/tcp6", "tcp6"), ("/proc/net/udp", "udp"),
                         ("/proc/net/udp6", "udp6")):
        for line in (host.try_read(table, 4 << 20) or "").splitlines()[1:20000]:
            f = line.split()
            if len(f) < 10:
                continue
            state = f[3]
            if proto.startswith("tcp") and state != "0A":
                continue
            if proto.startswith("udp") and state != "07":
                continue
            try:
                ip, port = _addr(f[1])
            except ValueError:
                continue
            inodes.setdefault(f[9], {"proto": proto, "address": ip, "port": port, "process": None})
    # the owners only of what listens beyond loopback on a notebook, dashboard or daemon port (usually none), within
    # a bounded walk of /proc/*/fd: the walk is the costly part, and the other listeners need no owner
    from dl_doctor.util.ports import RISKY_PORTS

    wanted = {i for i, e in inodes.items() if e["port"] in RISKY_PORTS and e["address"] not in ("127.0.0.1", "::1")
              and not e["address"].startswith("127.")}
    left = MAX_FD_LINKS
    for pid in ([n for n in host.listdir("/proc") if n.isdigit()][:MAX_PIDS] if wanted else []):
        for fd in host.listdir(f"/proc/{pid}/fd")[:4096]:
            left -= 1
            if left < 0 or not wanted:
                break
            target = host.readlink(f"/proc/{pid}/fd/{fd}") or ""
            if target.startswith("socket:[") and target[8:-1] in wanted:
                comm = (host.try_read(f"/proc/{pid}/comm", 256) or "").strip()
                inodes[target[8:-1]]["process"] = {"pid": int(pid), "name": comm[:64]}
                wanted.discard(target[8:-1])
        if left < 0 or not wanted:
            break
    return sorted(inodes.values(), key=lambda e: (e["port"], e["proto"]))[:500]


MINER_NAMES = ("xmrig", "t-rex", "trex", "lolminer", "nbminer", "ethminer", "phoenixminer", "gminer", "nanominer",
               "teamredminer", "cpuminer", "minerd", "xmr-stak", "bminer", "srbminer", "kawpowminer", "nheqminer")
SUSPECT_DIRS = ("/tmp/", "/dev/shm/", "/var/tmp/")


def processes(host) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """One pass over /proc: (processes that look like miners or run from /tmp, /var/tmp or /dev/shm; notebook and
    code servers with their command lines). A command line is read only for a process whose name can be one."""
    suspects: List[Dict[str, Any]] = []
    servers: List[Dict[str, Any]] = []
    for pid in [n for n in host.listdir("/proc") if n.isdigit()][:MAX_PIDS]:
        comm = (host.try_read(f"/proc/{pid}/comm", 256) or "").strip()
        exe = host.readlink(f"/proc/{pid}/exe") or ""
        if not comm and not exe:
            continue
        deleted = exe.endswith(" (deleted)")
        path = exe[:-len(" (deleted)")] if deleted else exe
        name = posixpath.basename(path).lower() or comm.lower()
        reasons = []
        if any(m in name or m in comm.lower() for m in MINER_NAMES):
            reasons.append("a miner's name")
        if path.startswith(SUSPECT_DIRS):
            where = "/dev/shm" if path.startswith("/dev/shm/") else "/" + path.split("/")[1]
            reasons.append(f"runs from {where}" + (" (deleted)" if deleted else ""))
        if reasons and len(suspects) < 50:
            suspects.append({"pid": int(pid), "name": comm[:64], "exe": exe[:300], "reasons": reasons})
        if comm.startswith(("python", "jupyter", "code-server", "node")) and len(servers) < 50:
            raw = host.try_read(f"/proc/{pid}/cmdline", 65536) or ""
            argv = raw.split("\0")[:-1] if raw.endswith("\0") else raw.split("\0")
            text = " ".join(argv)
            if "jupyter" in text and any(w in text for w in ("notebook", "lab", "server")) or "code-server" in text:
                servers.append({"pid": int(pid), "argv": _masked_argv(argv)})
    return suspects, servers


def _masked_argv(argv: List[str]) -> List[str]:
    """Another user's command line as the facts keep it: redacted as the one line it is, before it is cut to size
    (``--NotebookApp.token VALUE`` keeps its token out of every output, --redact or not, which no argument masked
    alone could); empty arguments are kept, since an empty token is what the notebook check looks for."""
    from dl_doctor.redact import Redactor

    return [a[:200] for a in Redactor().command(argv[:MAX_ARGV])[:MAX_ARGV]]


def sshd_live(host) -> Optional[Dict[str, str]]:
    """``sshd -T`` (sshd's own answer, Match blocks not applied), on a running host as root only, and only through
    Host.run's trust rule (a root-owned sshd in a root-owned directory); None where it cannot be run safely."""
    if not host.as_root:
        return None
    exe = next((p for p in ("/usr/sbin/sshd", "/usr/bin/sshd") if host.is_file(p)), None)
    if exe is None:
        return None
    try:
        r = host.run([exe, "-T"], timeout=3)
    except OSError:
        return None
    if r.returncode != 0:
        return None
    out = {}
    for line in r.stdout.splitlines()[:2000]:
        key, _, value = line.strip().partition(" ")
        if key in SSHD_KEYS and key not in out:
            out[key] = value[:200]
    return out or None


SECURITY_FACTS = obj(
    "the box's own security posture: sshd, Jupyter and code-server, Docker, listening sockets, suspicious processes",
    sshd=obj(
        "sshd's effective settings from its files (first value wins; Include read where it stands; Match blocks "
        "reported apart): settings, sources (file:line), match_blocks, files",
        installed=boolean("/usr/sbin/sshd exists or its configuration does"),
        settings=map_of(string("its value as written"), "keyword (lower case) -> the value that wins, outside Match "
                                                         "blocks (passwordauthentication, permitrootlogin, port...)"),
        sources=map_of(string("file:line"), "keyword -> where its winning value is written"),
        match_blocks=array(obj(
            "",
            criteria=string("the Match line's criteria"),
            file=string("the file"),
            line=integer("its line number"),
            settings=map_of(string("its value"), "keyword -> value inside the block"),
        ), "Match blocks, whose settings apply only to what they match"),
        files=array(string(), "the files read, in order (sshd_config and its Includes)"),
        errors=array(string(), "files that could not be read"),
        effective_live=map_of(string("its value"), "sshd -T's answer, keyword -> value (live, as root, through the "
                                                    "trust rule; null: not run)"),
    ),
    jupyter_configs=array(obj(
        "",
        path=string("the jupyter_{server,notebook,lab}_config.py or .json file"),
        user=string("whose home it is in (null: a system directory)"),
        settings=map_of(Fact("string|boolean|integer", "its value"),
                        "setting (lower case: ip, token, password, allow_root, certfile...) -> value, read as text, "
                        "never run; error: the JSON is not valid"),
    ), "Jupyter configuration files in the system's and each home's Jupyter directories"),
    code_server_configs=array(obj(
        "",
        path=string("~/.config/code-server/config.yaml"),
        user=string("whose it is"),
        settings=map_of(string("its value (a password only as (set))"), "bind-addr, auth, cert, password, "
                                                                         "hashed-password -> value"),
    ), "code-server configurations in each home"),
    docker=obj(
        "Docker's exposure",
        installed=boolean("dockerd exists"),
        hosts=array(obj(
            "",
            address=string("what it listens on (unix://, tcp://0.0.0.0:2375...)"),
            keys={"from": string("where it is set: daemon.json or a docker.service unit")},
        ), "the daemon's -H/--host settings and daemon.json hosts"),
        tls=boolean("TLS is on (tlsverify in daemon.json or --tlsverify)"),
        docker_group=array(string(), "members of the docker group (null: no such group)"),
        administrators=array(string(), "members of the sudo, wheel and admin groups (/etc/group): users who are "
                             "root already", since="0.2.0"),
        containers=array(obj(
            "",
            container=string("the container id (12 characters)"),
            privileged=boolean("it runs privileged"),
            host_root_mounted=boolean("it bind-mounts the host's /"),
        ), "containers that run privileged or mount the host's root (their hostconfig.json)"),
    ),
    listening=array(obj(
        "",
        proto=string("tcp, tcp6, udp or udp6"),
        address=string("the local address"),
        port=integer("the local port"),
        process=obj(
            "its owner, looked for only beyond loopback on a risky port (null: not looked for or not found)",
            pid=integer("its process id"),
            name=string("its name (comm)"),
        ),
    ), "TCP listeners and bound UDP sockets from /proc/net (live), with the owner of each one beyond loopback "
       "where readable"),
    jupyter_processes=array(obj(
        "",
        pid=integer("its process id"),
        argv=array(string(), "its command line, redacted (tokens masked)"),
    ), "Jupyter and code-server processes running (live; null: not looked at)"),
    suspicious_processes=array(obj(
        "",
        pid=integer("its process id"),
        name=string("its name (comm)"),
        exe=string("its executable"),
        reasons=array(string(), "why it is suspicious: a miner's name, runs from /tmp..."),
    ), "processes with a miner's name or running from /tmp, /var/tmp or /dev/shm (live)"),
    since="0.2.0",
)


@probe("security", "the box's own security posture: sshd settings, Jupyter and code-server, Docker's listeners "
       "and group, sockets listening beyond loopback, processes that look like miners",
       root_adds="other users' Jupyter configs and processes, the owners of listening sockets", provides=SECURITY_FACTS)
def security_probe(ctx: ProbeContext) -> Dict[str, Any]:
    host = ctx.host
    sshd = parse_sshd(host)
    out: Dict[str, Any] = {
        "sshd": {"installed": host.exists("/usr/sbin/sshd") or bool(sshd["files"]), **sshd,
                 "effective_live": sshd_live(host) if sshd["files"] else None},
        "jupyter_configs": jupyter_configs(host),
        "code_server_configs": code_server_configs(host),
        "docker": docker_facts(host),
        "listening": None,
        "jupyter_processes": None,
        "suspicious_processes": None,
    }
    if host.kernel_live:
        out["listening"] = listening(host)
        out["suspicious_processes"], out["jupyter_processes"] = processes(host)
    return out
