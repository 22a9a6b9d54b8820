"""The training box's own security posture: SSH, Jupyter and code-server, Docker, what listens beyond loopback, IMDS,
and the signs of someone else's miner on the GPUs."""

from __future__ import annotations

import shlex
from typing import Any, Dict, List, Optional

from dl_doctor.checks.common import os_family
from dl_doctor.fixes import root_command, service, write_file
from dl_doctor.model import Facts, Fix, Result, check, fail, passed, skip, warn

SSHD_DROPIN = write_file("/etc/ssh/sshd_config.d/00-hardening.conf",
                         "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no"
                         "\nPermitEmptyPasswords no\n")


def _sshd_unit(facts: Facts) -> str:
    """Debian and Ubuntu name the unit ssh (sshd is only an alias there, absent under socket activation)."""
    return "ssh" if os_family(facts) == "debian" else "sshd"


def _yes(value: Optional[str]) -> bool:
    return str(value or "").strip().lower() in ("yes", "true", "1")


@check(
    id="DLD-SEC-001", slug="ssh-allows-root-or-passwords",
    problem="sshd lets root or passwords in",
    remedy="fix-configuration", drain=False,
    title="sshd refuses root logins with a password and password authentication",
    tags=("security", "ssh"), requires=("security.sshd",),
    what="""Reads sshd's effective settings from its files as sshd does: sshd_config and the files it Includes, where
    they stand, the first value of a keyword winning; OpenSSH's defaults where nothing is set (PasswordAuthentication
    yes, PermitRootLogin prohibit-password). Match blocks that turn passwords or root logins back on are reported as
    such. A cloud image's drop-ins (60-cloudimg-settings.conf) count like any other file.""",
    why="""A GPU instance with a public address is scanned for SSH within minutes; a password that can be guessed
    turns it into someone else's miner, billed to you.""",
    fix="""Put the hardening first (sshd keeps the first value it reads): a drop-in named 00-... in
    /etc/ssh/sshd_config.d/ (Include at the top of sshd_config), check it with sshd -t and reload sshd.""",
)
def ssh_posture(facts: Facts) -> Result:
    sshd = facts.get("security.sshd") or {}
    if not sshd.get("files"):
        return skip("no sshd configuration here (/etc/ssh/sshd_config)")
    s = dict(sshd.get("settings") or {})
    sources = dict(sshd.get("sources") or {})
    for k, v in (sshd.get("effective_live") or {}).items():  # sshd -T's own answer, where it could be asked
        if s.get(k) != v:
            s[k] = v
            sources[k] = "sshd -T"
    root = (s.get("permitrootlogin") or "prohibit-password").lower()
    password = _yes(s.get("passwordauthentication", "yes"))
    kbd = _yes(s.get("kbdinteractiveauthentication", s.get("challengeresponseauthentication", "no")))
    empty = _yes(s.get("permitemptypasswords", "no"))
    where = lambda k: f" ({sources[k]})" if k in sources else " (OpenSSH's default)"  # noqa: E731
    problems, notes = [], []
    if root == "yes":
        problems.append(f"PermitRootLogin yes{where('permitrootlogin')}: root can log in with a password")
    if empty and (password or kbd):
        problems.append(f"PermitEmptyPasswords yes{where('permitemptypasswords')}: accounts without a password "
                        f"can log in")
    if password:
        notes.append(f"PasswordAuthentication yes{where('passwordauthentication')}")
    if kbd:
        notes.append("KbdInteractiveAuthentication yes" + where("kbdinteractiveauthentication"
                                                                 if "kbdinteractiveauthentication" in s
                                                                 else "challengeresponseauthentication"))
    for m in sshd.get("match_blocks") or []:
        ms = m.get("settings") or {}
        if _yes(ms.get("passwordauthentication")) or (ms.get("permitrootlogin") or "").lower() == "yes":
            notes.append(f"Match {m.get('criteria')} ({m.get('file')}:{m.get('line')}) turns "
                         + " and ".join(k for k in ("passwordauthentication", "permitrootlogin")
                                        if _yes(ms.get(k)) or (ms.get(k) or "").lower() == "yes") + " back on")
    evidence: Dict[str, Any]
    evidence = {"settings": s, "sources": sources, "files": sshd.get("files"), "match_blocks": sshd.get("match_blocks")}
    fix = Fix("Refuse root and password logins (keys only): a drop-in read before the others, then reload sshd.",
              (SSHD_DROPIN, service("reload", _sshd_unit(facts), check="sshd -t"),
               "# keep a second session open until a key login works"))
    if problems:
        return fail("; ".join(problems + notes), evidence, fix)
    if notes:
        return warn("; ".join(notes) + ": passwords can be guessed over SSH", evidence, fix)
    return passed(f"root logins {root}, passwords off ({', '.join(sshd['files'][:3])})", **evidence)


def _public(ip: Any) -> bool:
    """Whether a listen address reaches beyond this machine ('*', '0.0.0.0', '', a non-loopback address)."""
    import ipaddress  # here: checks load on every run, and few runs get this far

    text = str(ip or "localhost").strip().strip("'\"").strip("[]")
    if text == "localhost":
        return False
    try:
        return not ipaddress.ip_address(text).is_loopback
    except ValueError:
        return True  # '*', '', a host name: not loopback


def _argv_settings(argv: List[str]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for a in argv:
        if a.startswith("--") and "=" in a:
            k, v = a[2:].split("=", 1)
            out[k.split(".")[-1].lower()] = v.strip("'\"")
        elif a == "--allow-root":
            out["allow_root"] = True
    return out


@check(
    id="DLD-SEC-002", slug="notebook-server-exposed",
    problem="A notebook or code server is open to the network",
    remedy="fix-configuration", drain=False,
    title="Jupyter and code-server listen on loopback, or ask for a token or password over TLS",
    tags=("security", "jupyter"), requires=("security",),
    what="""Reads every Jupyter configuration (system, each user's ~/.jupyter, each environment's etc/jupyter; read
    as text, never run) and code-server's config.yaml, and on a running host the command lines of running servers:
    listening beyond loopback with an empty token and no password fails; --allow-root, or no TLS on a non-loopback
    address, warns.""",
    why="""A notebook server is a shell: one listening on 0.0.0.0 without a token is found by scanners within hours
    and used to mine on the GPUs. The guides that set these boxes up say --ip=0.0.0.0 --allow-root.""",
    fix="""Keep it on 127.0.0.1 and reach it through an SSH tunnel (ssh -L 8888:127.0.0.1:8888 host), or set a
    password and a certificate; never an empty token.""",
)
def notebook_exposed(facts: Facts) -> Result:
    sec = facts.get("security") or {}
    items: List[Dict[str, Any]] = []
    for c in sec.get("jupyter_configs") or []:
        items.append({"where": c.get("path"), "settings": c.get("settings") or {}})
    for p in sec.get("jupyter_processes") or []:
        items.append({"where": f"process {p.get('pid')}: {' '.join(p.get('argv') or [])[:200]}",
                      "settings": _argv_settings(p.get("argv") or []), "process": True})
    problems, notes = [], []
    for it in items:
        s = it["settings"]
        public = "ip" in s and _public(s.get("ip"))
        no_token = "token" in s and s.get("token") in ("", None)
        no_password = not (s.get("password") or s.get("hashed_password"))
        if public and no_token and no_password:
            problems.append(f"{it['where']}: listens on {s.get('ip') or 'every address'} with an empty token and "
                            f"no password")
        elif public and not s.get("certfile"):
            notes.append(f"{it['where']}: listens on {s.get('ip') or 'every address'} without TLS")
        if s.get("allow_root") is True and not facts.get("system.container.in_container"):
            # in a container root is the image's only user (the official images start Jupyter with --allow-root)
            notes.append(f"{it['where']}: allow_root (the notebook runs as root)")
    for c in sec.get("code_server_configs") or []:
        s = c.get("settings") or {}
        bind = str(s.get("bind-addr") or "127.0.0.1:8080")
        host = bind.rsplit(":", 1)[0]
        if _public(host) and str(s.get("auth", "password")).lower() == "none":
            problems.append(f"{c.get('path')}: code-server on {bind} with auth: none")
        elif _public(host) and not s.get("cert") or str(s.get("cert")).lower() == "false" and _public(host):
            notes.append(f"{c.get('path')}: code-server on {bind} without TLS")
    evidence: Dict[str, Any]
    evidence = {"checked": [it["where"] for it in items][:50],
                "code_server": [c.get("path") for c in sec.get("code_server_configs") or []]}
    fix = Fix("Bind notebook servers to loopback and tunnel over SSH, or require a password and TLS.",
              ("# in jupyter_server_config.py (jupyter_notebook_config.py: NotebookApp):",
               "c.ServerApp.ip = '127.0.0.1'",
               "c.ServerApp.allow_root = False",
               "# then, from your laptop: ssh -N -L 8888:127.0.0.1:8888 user@host",
               "# code-server: bind-addr: 127.0.0.1:8080 and auth: password in ~/.config/code-server/config.yaml"))
    if problems:
        return fail("; ".join(problems + notes), evidence, fix)
    if notes:
        return warn("; ".join(notes), evidence, fix)
    if not items and not sec.get("code_server_configs"):
        return passed("no Jupyter or code-server configuration or running server found", **evidence)
    return passed(f"{len(items)} Jupyter configuration(s) or server(s): none open to the network", **evidence)


@check(
    id="DLD-SEC-003", slug="docker-daemon-exposed",
    problem="Docker gives root away (a TCP socket without TLS, or users in the docker group)",
    remedy="fix-configuration", drain=False,
    title="The Docker daemon listens only on its Unix socket (or TCP with TLS) and the docker group is empty",
    tags=("security", "docker", "container"), requires=("security.docker",),
    what="""Reads /etc/docker/daemon.json (hosts, tls/tlsverify) and the docker unit's ExecStart -H flags, the
    members of the docker group (/etc/group), and, where readable, the containers configured privileged or with the
    host's / mounted.""",
    why="""Docker on TCP without TLS is root on the host for anyone who can reach the port; miners look for 2375
    first. A user in the docker group is root-equivalent; one who is in sudo, wheel or admin already is root anyway
    (a cloud image's default user), so only the others are reported.""",
    fix="""Remove tcp:// hosts (or configure tlsverify with client certificates), and keep the docker group for
    administrators only.""",
)
def docker_exposed(facts: Facts) -> Result:
    d = facts.get("security.docker") or {}
    if not d.get("installed") and not d.get("hosts"):
        return skip("Docker is not installed")
    tcp = [h for h in d.get("hosts") or [] if str(h.get("address", "")).startswith("tcp://")]
    problems, notes = [], []
    for h in tcp:
        addr = h["address"][len("tcp://"):]
        local = not _public(addr.rsplit(":", 1)[0])
        if not d.get("tls") and not local:
            problems.append(f"the daemon listens on {h['address']} without TLS ({h.get('from')})")
        elif not d.get("tls"):
            notes.append(f"the daemon listens on {h['address']} without TLS ({h.get('from')}; loopback only)")
    admins = d.get("administrators")
    everyone = [u for u in d.get("docker_group") or [] if u != "root"]
    # a member who is in sudo/wheel/admin is root already (a cloud image's ubuntu or ec2-user): the group gives
    # them nothing new
    members = [u for u in everyone if admins is None or u not in admins]
    if members:
        notes.append(f"users in the docker group (root-equivalent): {', '.join(members[:20])}")
    for c in d.get("containers") or []:
        what = " and ".join(w for w, on in (("privileged", c.get("privileged")),
                                            ("with the host's / mounted", c.get("host_root_mounted"))) if on)
        notes.append(f"container {c.get('container')} is configured {what}")
    evidence = {"hosts": d.get("hosts"), "tls": d.get("tls"), "docker_group": d.get("docker_group"),
                "administrators": admins,
                "containers": d.get("containers")}
    fix = Fix("Keep the daemon on its Unix socket (or TLS with client certificates); keep the docker group small.",
              ("# /etc/docker/daemon.json: remove the tcp:// entries from \"hosts\" (and -H tcp://... from the unit)",
               service("daemon-reload"), service("restart", "docker"),
               *(root_command(f"gpasswd -d {shlex.quote(u)} docker") for u in members[:5])))
    if problems:
        return fail("; ".join(problems + notes), evidence, fix)
    if notes:
        return warn("; ".join(notes), evidence, fix)
    where = "its TCP socket requires TLS" if tcp else "it listens on its Unix socket only"
    group = (f"the docker group's users ({', '.join(everyone[:20])}) are administrators already (sudo/wheel)"
             if everyone else "the docker group has no user")
    return passed(f"the Docker daemon: {where}; {group}", **evidence)


from dl_doctor.util.ports import RISKY_PORTS  # noqa: E402 - shared with the probe


@check(
    id="DLD-SEC-004", slug="services-listening-publicly",
    problem="Services that should stay local listen beyond loopback",
    remedy="fix-configuration", drain=False,
    title="Notebook, dashboard and daemon ports listen on loopback only",
    tags=("security", "network"), requires=("security",),
    what="""On a running host, reads the listening TCP sockets from /proc/net/tcp and tcp6 (and the owning processes
    where readable) and names those beyond loopback on ports that belong to notebooks, dashboards and daemons
    (Jupyter 8888, TensorBoard 6006, the Ray dashboard 8265, Docker 2375, code-server 8080, MLflow 5000, Gradio,
    Streamlit, Redis). sshd, and NCCL/MPI ports on cluster interfaces, are expected.""",
    why="""A dashboard or notebook on 0.0.0.0 is as open as the security group lets it be; the next change to the
    group exposes it to the internet.""",
    fix="""Bind the service to 127.0.0.1 and reach it through an SSH tunnel.""",
)
def listening_publicly(facts: Facts) -> Result:
    sockets = facts.get("security.listening")
    if sockets is None:
        return skip("listening sockets are seen only on a running host (/proc/net), not in a tree")
    risky = []
    for s in sockets:
        if s.get("proto", "").startswith("tcp") and s.get("port") in RISKY_PORTS and _public(s.get("address")):
            who = (s.get("process") or {}).get("name")
            risky.append(f"{RISKY_PORTS[s['port']]} port {s['port']} on {s['address']}" + (f" ({who})" if who else ""))
    public = sorted({f"{s['address']}:{s['port']}" for s in sockets if s.get("proto", "").startswith("tcp")
                     and _public(s.get("address"))})[:50]
    evidence = {"beyond_loopback": public, "ec2_public_ip": facts.get("imds.public_ipv4")}
    if risky:
        ip = facts.get("imds.public_ipv4")
        exposed = f" (this instance's public address is {ip}: only its security group stands between them and the " \
                  f"internet)" if ip else ""
        return warn("; ".join(risky) + exposed, evidence, Fix("Bind these services to 127.0.0.1 and tunnel over SSH.",
                                                     ("ss -ltnp   # who listens where",
                                                      "# e.g. tensorboard --host 127.0.0.1; ray start --dashboard-host 127.0.0.1",
                                                      "ssh -N -L 6006:127.0.0.1:6006 user@host   # from your laptop")))
    return passed(f"{len(public)} TCP listener(s) beyond loopback, none on a notebook, dashboard or daemon port",
                  **evidence)


@check(
    id="DLD-SEC-005", slug="miner-signs",
    problem="Processes that look like someone else's miner",
    remedy="replace-hardware", drain=False,
    title="No process looks like a cryptominer or runs from /tmp or /dev/shm",
    tags=("security", "gpu"), requires=("security",),
    what="""On a running host, names processes whose name is a known miner's (xmrig, t-rex, lolminer, nbminer,
    ethminer, ...) or whose executable runs from /tmp, /var/tmp or /dev/shm (or was deleted there). A daemon left
    running on an upgraded binary elsewhere is not a sign. Reported with the evidence; nothing is killed.""",
    why="""A stolen GPU box mines first and is noticed on the bill; the process table says so long before.""",
    fix="""Investigate before you kill: preserve the binary and its network connections, rotate the credentials
    that let it in (SSH keys, notebook tokens, the instance role), and rebuild the instance from a known image.""",
)
def miner_signs(facts: Facts) -> Result:
    procs = facts.get("security.suspicious_processes")
    if procs is None:
        return skip("processes are seen only on a running host")
    if not procs:
        return passed("no process looks like a miner or runs from /tmp or /dev/shm")
    text = "; ".join(f"pid {p['pid']} {p.get('name')} ({', '.join(p.get('reasons') or [])}: {p.get('exe')})"
                     for p in procs[:10])
    return warn(text, {"processes": procs}, Fix("Investigate, preserve the evidence, then rebuild from a known image.",
                                                 tuple(f"sudo ls -l /proc/{p['pid']}/exe /proc/{p['pid']}/cwd; "
                                                       f"sudo cat /proc/{p['pid']}/cmdline | tr '\\\\0' ' '"
                                                       for p in procs[:3])))


@check(
    id="DLD-SEC-006", slug="imdsv1-allowed",
    problem="The instance still answers IMDSv1",
    remedy="fix-configuration", drain=False,
    title="The instance metadata service requires tokens (IMDSv2)",
    tags=("security", "ec2", "cloud"), requires=("imds",),
    what="""On EC2 (per the DMI files), one token-less request for the instance id says whether IMDSv1 is still
    allowed; the instance role's name is read from the listing (its credentials never are).""",
    why="""With IMDSv1 a server-side request forgery in any web app on the box (a notebook, a dashboard) reads the
    instance role's credentials; IMDSv2's token and hop limit stop that. A container that reaches IMDS at all (a hop
    limit of 2 or more) can read them too.""",
    fix="""Require tokens: aws ec2 modify-instance-metadata-options --http-tokens required, with a hop limit of 1
    (2 where containers need IMDS).""",
)
def imdsv1_allowed(facts: Facts) -> Result:
    allowed = facts.get("imds.imdsv1_allowed")
    role = facts.get("imds.instance_role")
    if allowed is None:
        return skip("not known whether IMDSv1 answers (these facts predate 0.2.0, or the request failed)")
    iid = facts.get("imds.instance_id") or "<instance-id>"
    evidence = {"imdsv1_allowed": allowed, "instance_role": role}
    fix = Fix("Require IMDSv2 tokens (and a hop limit of 1 unless containers need IMDS).",
              (f"aws ec2 modify-instance-metadata-options --instance-id {iid} --http-tokens required "
               f"--http-put-response-hop-limit 1",))
    if allowed:
        who = f" and the instance role {role} is one request away" if role else ""
        return warn(f"IMDSv1 answers token-less requests{who}", evidence, fix)
    if facts.get("system.container.in_container") and role:
        return warn(f"this container reaches IMDS (the hop limit lets containers through) and the instance role "
                    f"{role} with it", evidence, fix)
    return passed("IMDSv2 only (token-less requests are refused)" + (f"; instance role {role}" if role else ""),
                  **evidence)
