"""A machine's history (``dl-doctor history``): its saved reports ordered by their own timestamps, per host, and what
changed from each run to the next. Pure: it reads report documents already loaded and checked, never the host.

Between two runs of one host it says what the drift comparison of ``dl-doctor diff`` says (doctor/judge/diff.py:
kernel, driver, modules, packages per environment; findings that appeared, cleared or moved), the Xids the kernel
logged since, and the error counters that rose. Counters that reset at a reboot (``scope="boot"``) are compared only
between runs of one boot (``system.boot``: the kernel's boot id); across a reboot, or where either run's boot is
unknown, they are not compared, and the timeline shows the reboot. Lifetime counters (``scope="life"``: kept in the
GPU's InfoROM) are compared across reboots.

The counters are data: :data:`COUNTERS` lists each one's fact path (``[]`` is each item of a list, told apart by its
``uuid``, ``bus_id``... see :data:`ITEM_KEYS`; ``*`` each key of a map), what to call it, its scope and the level of
its rise. A probe that records another counter appends a row.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from dl_doctor.judge.diff import diff_versions, versions

HISTORY_VERSION = "1"
RANK = {"warn": 1, "fail": 2, "error": 3}
FAIL_ON = {"warn": 1, "fail": 2, "error": 3, "never": None}
XID_LEVEL = "warn"       # a new Xid: the checks rate it in their own findings (DLD-GPU-*), which move too
BOOT_TIME_SLACK_S = 60   # two boot times this close are one boot, where neither run knows its boot id
MAX_XIDS = 200           # Xids kept of one run
MAX_COUNTERS = 10000     # counter values kept of one run


@dataclass(frozen=True)
class Counter:
    path: str            # "nvml.devices[].ecc_uncorrected_volatile"
    label: str           # what a person calls it
    scope: str = "boot"  # "boot": resets at a reboot (or a driver reload); "life": kept over reboots
    level: str = "warn"  # the level of its rise, for --fail-on; "info": shown, never a worsening (healthy links count
    # some: the checks judge their rate)


COUNTERS: Tuple[Counter, ...] = (
    # NVML: volatile counts reset each time the driver loads; aggregate counts and remapped rows persist on the GPU
    Counter("nvml.devices[].ecc_uncorrected_volatile", "uncorrectable ECC errors since the driver loaded"),
    Counter("nvml.devices[].ecc_uncorrected_aggregate", "uncorrectable ECC errors over the GPU's life", "life"),
    Counter("nvml.devices[].remapped_rows.uncorrectable", "rows remapped for uncorrectable errors", "life"),
    Counter("nvml.devices[].remapped_rows.correctable", "rows remapped for correctable errors", "life"),
    # RDMA port error counters (links probe): kept by the HCA until cleared or its driver reloads. Link faults
    # worsen; discards (congestion) and anything else are shown only
    *(Counter(f"links.rdma_ports[].counters.{name}", f"RDMA port {name}")
      for name in ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
                   "local_link_integrity_errors", "excessive_buffer_overrun_errors")),
    Counter("links.rdma_ports[].counters.port_xmit_discards", "RDMA port transmit discards", level="info"),
    # the kernel's AER counters: since boot
    Counter("links.pci[].aer.fatal.total", "fatal PCIe errors (AER)", level="fail"),
    Counter("links.pci[].aer.nonfatal.total", "non-fatal PCIe errors (AER)"),
    Counter("links.pci[].aer.correctable.total", "correctable PCIe errors (AER)", level="info"),
    # NVLink error counters (NVML): since the driver loaded; healthy links count some CRC errors
    Counter("nvml.devices[].nvlink.links[].errors.*", "NVLink error counter", level="info"),
)

# what tells the items of a list apart, first found first (a GPU's UUID outlives its bus address)
ITEM_KEYS = ("uuid", "serial", "guid", "bus_id", "pci_bus_id", "bdf", "address", "bus", "device", "name", "port", "link", "index", "id")


# -- one report -----------------------------------------------------------------------------------------------------

def parse_time(value: Any) -> Optional[_dt.datetime]:
    """An ISO 8601 timestamp (``2026-11-28T02:00:03Z``) as an aware UTC datetime; a naive one is read as UTC."""
    if not isinstance(value, str) or not value or len(value) > 64:
        return None
    try:
        when = _dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return when.replace(tzinfo=_dt.timezone.utc) if when.tzinfo is None else when.astimezone(_dt.timezone.utc)


def _get(facts: Mapping[str, Any], path: str) -> Any:
    cur: Any = facts
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    return cur


def _item_name(item: Any, position: int) -> str:
    if isinstance(item, Mapping):
        for key in ITEM_KEYS:
            value = item.get(key)
            if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
                return str(value)[:120]
    return f"#{position}"


def expand(facts: Any, path: str) -> Iterator[Tuple[str, Any]]:
    """(concrete path, value) for every place ``path`` names: ``nvml.devices[].x`` gives ``nvml.devices[GPU-1].x``
    for each device, ``a.*.b`` one path per key of the map ``a``."""
    def walk(cur: Any, parts: List[str], done: str) -> Iterator[Tuple[str, Any]]:
        if not parts:
            yield done, cur
            return
        part, rest = parts[0], parts[1:]
        many = part.endswith("[]")
        name = part[:-2] if many else part
        if name == "*":
            if isinstance(cur, Mapping):
                for key in sorted(k for k in cur if isinstance(k, str)):
                    yield from walk(cur[key], rest, f"{done}.{key[:120]}" if done else key[:120])
            return
        nxt = cur.get(name) if isinstance(cur, Mapping) else None
        here = f"{done}.{name}" if done else name
        if not many:
            if nxt is not None:
                yield from walk(nxt, rest, here)
            return
        if isinstance(nxt, list):
            for n, item in enumerate(nxt):
                yield from walk(item, rest, f"{here}[{_item_name(item, n)}]")

    yield from walk(facts, path.split("."), "")


def counters(facts: Mapping[str, Any], table: Sequence[Counter] = COUNTERS) -> Dict[str, Dict[str, Any]]:
    """Every counter of :data:`COUNTERS` the facts hold: concrete path -> ``{"value", "label", "scope", "level"}``."""
    out: Dict[str, Dict[str, Any]] = {}
    for spec in table:
        for where, value in expand(facts, spec.path):
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0 and len(out) < MAX_COUNTERS:
                out[where] = {"value": value, "label": spec.label, "scope": spec.scope, "level": spec.level}
    return out


def xids(facts: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The Xids of the run's kernel log (``kernel_log.xids``), each with the key that tells it from the others (its
    whole line, which carries the kernel's timestamp)."""
    out = []
    for x in (_get(facts, "kernel_log.xids") or [])[:MAX_XIDS] if isinstance(_get(facts, "kernel_log.xids"), list) \
            else []:
        if not isinstance(x, Mapping) or not isinstance(x.get("code"), int):
            continue
        item = {"code": x["code"], "bus": str(x.get("bus") or "")[:40], "text": str(x.get("text") or "")[:300]}
        item["key"] = str(x.get("line") or "")[:300] or f"{item['code']}|{item['bus']}|{x.get('pid')}|{item['text']}"
        out.append(item)
    return out


def record(doc: Mapping[str, Any], source: str) -> Dict[str, Any]:
    """What the history keeps of one report (a checked report document: ``run``, ``facts``, ``findings``)."""
    facts: Mapping[str, Any] = doc["facts"] if isinstance(doc.get("facts"), Mapping) else {}
    run: Mapping[str, Any] = doc["run"] if isinstance(doc.get("run"), Mapping) else {}
    tool: Mapping[str, Any] = doc["tool"] if isinstance(doc.get("tool"), Mapping) else {}
    mode = run.get("facts_mode") or ("sysroot" if run.get("mode") == "sysroot" else "live")
    findings = [{"id": str(f["id"])[:200], "status": str(f.get("status"))[:20],
                 "message": str(f.get("message") or "")[:500]}
                for f in doc.get("findings") or [] if isinstance(f, Mapping) and isinstance(f.get("id"), str)]
    boot = _get(facts, "system.boot")
    boot = boot if isinstance(boot, Mapping) else {}
    env = _get(facts, "environment.variables")
    env = env if isinstance(env, Mapping) else {}
    return {
        "source": source,
        "started_at": str(run.get("started_at")),
        "when": parse_time(run.get("started_at")),
        "tool_version": str(tool.get("version") or "")[:40],
        "identity": {"hostname": _hostname(_get(facts, "system.hostname")),
                     "instance_id": _text(_get(facts, "imds.instance_id") or _get(facts, "cloud.instance_id"))},
        "boot": {"id": boot.get("id") if isinstance(boot.get("id"), str) else None,
                 "time": boot.get("time") if isinstance(boot.get("time"), int) else None},
        "versions": versions({"kind": "dl-doctor-facts", "mode": mode, "facts": facts}),
        "findings": findings,
        "xids": xids(facts),
        "log_source": _text(_get(facts, "kernel_log.source")),
        "counters": counters(facts),
        # what the Markdown's redaction needs to know of the machine (its names, its users), nothing more
        "names": {"facts": {"system": {"hostname": _text(_get(facts, "system.hostname"))},
                            "environment": {"variables": {k: str(env[k])[:200] for k in
                                                          ("USER", "LOGNAME", "SUDO_USER", "USERNAME", "HOME")
                                                          if isinstance(env.get(k), str)}}}},
    }


def _hostname(value: Any) -> Optional[str]:
    """The host name, unless a report redacted it: every redacted report calls its own host ``[HOST-1]``, which
    tells no node from another (its file's name does)."""
    name = _text(value)
    return None if name is None or name.startswith("[HOST-") else name


def _text(value: Any) -> Optional[str]:
    return str(value)[:200] if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value) else None


# -- two runs of one host -------------------------------------------------------------------------------------------

def same_boot(before: Mapping[str, Any], after: Mapping[str, Any]) -> Optional[bool]:
    """True: one boot; False: a reboot between them; None: unknown (a run without the boot's facts)."""
    a, b = before["boot"], after["boot"]
    if a.get("id") and b.get("id"):
        return bool(a["id"] == b["id"])
    if a.get("time") is not None and b.get("time") is not None:
        return abs(a["time"] - b["time"]) <= BOOT_TIME_SLACK_S
    return None


def compare(before: Mapping[str, Any], after: Mapping[str, Any]) -> Dict[str, Any]:
    """What changed from the run ``before`` to the run ``after`` (records of one host), and what got worse."""
    drift = diff_versions(before["versions"], after["versions"], before["findings"], after["findings"])
    boot = same_boot(before, after)
    new_xids = _new_xids(before, after)
    rose: List[Dict[str, Any]] = []
    not_compared = 0
    for where, now in sorted(after["counters"].items()):
        was = before["counters"].get(where)
        if was is None:
            continue
        if now["scope"] == "boot" and boot is not True:
            not_compared += 1  # reset by the reboot (or not known to be one boot): a lower number is no recovery
            continue
        if now["value"] > was["value"]:
            rose.append({"counter": where, "label": now["label"], "from": was["value"], "to": now["value"],
                         "scope": now["scope"], "level": now["level"]})
    worse: List[Dict[str, Any]] = []
    f = drift["findings"]
    for item in f["appeared"]:
        worse.append({"kind": "finding", "what": item["id"], "level": item["status"]})
    for item in f["changed"]:
        if RANK.get(item["status"], 0) > RANK.get(item["was"], 0):
            worse.append({"kind": "finding", "what": item["id"], "level": item["status"]})
    for x in new_xids:
        worse.append({"kind": "xid", "what": f"Xid {x['code']}" + (f" on {x['bus']}" if x["bus"] else ""),
                      "level": XID_LEVEL})
    for c in rose:
        if c["level"] in RANK:  # an "info" counter's rise is shown, not a worsening
            worse.append({"kind": "counter", "what": c["counter"], "level": c["level"]})
    level = max((w["level"] for w in worse), key=lambda s: RANK.get(s, 0), default=None)
    versions_moved = any(drift["versions"][k] for k in ("added", "removed", "changed"))
    return {
        "from": before["started_at"], "to": after["started_at"],
        "from_source": before["source"], "to_source": after["source"],
        "boot": "same" if boot else "reboot" if boot is False else "unknown",
        "counters_not_compared": not_compared,
        "versions": drift["versions"], "findings": drift["findings"],
        "xids": new_xids, "counters": rose,
        "worse": worse, "worst": level,
        # the notion of "new" of the login status line (login_hook.new_since): a version moved, or something worse
        "new": bool(versions_moved or worse),
    }


def _new_xids(before: Mapping[str, Any], after: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The Xids of ``after``'s log that ``before``'s did not hold: told apart by their whole line where both runs read
    one log (the line carries the kernel's timestamp); where they read different ones (the journal, then a syslog
    file: the same record is written differently), by code, bus and text, as many times as ``before`` held each."""
    if before.get("log_source") == after.get("log_source"):
        seen = {x["key"] for x in before["xids"]}
        return [{k: x[k] for k in ("code", "bus", "text")} for x in after["xids"] if x["key"] not in seen]
    left: Dict[Tuple[Any, ...], int] = {}
    for x in before["xids"]:
        left[(x["code"], x["bus"], x["text"])] = left.get((x["code"], x["bus"], x["text"]), 0) + 1
    out = []
    for x in after["xids"]:
        loose = (x["code"], x["bus"], x["text"])
        if left.get(loose):
            left[loose] -= 1
        else:
            out.append({k: x[k] for k in ("code", "bus", "text")})
    return out


def is_new(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Whether the run ``after`` found something ``before`` did not (what the login line calls "new since")."""
    return bool(compare(before, after)["new"])


# -- many runs of many hosts ----------------------------------------------------------------------------------------

def _file_host(source: str) -> str:
    """The host in the name the login timer's runs give their reports (``dl-doctor-HOST-20261128T020003Z.json``),
    else the file's name."""
    import re

    base = source
    for ext in (".tar:", ".tar.gz:", ".tgz:"):
        if ext in source:  # a member of a tarball: a bundle's directory names it, else the member's own name
            member = source.rsplit(ext, 1)[1]
            base = member[:-len("/report.json")] if member.endswith("/report.json") else member
            break
    base = base.rstrip("/").rsplit("/", 1)[-1]
    m = re.match(r"^dl-doctor-(.{1,120})-[0-9]{8}T[0-9]{6}Z(?:-[0-9]{1,4})?\.json$", base)
    if m:
        return m.group(1)
    return base[:-5] if base.endswith(".json") else base


def group(records: Sequence[Mapping[str, Any]]) -> List[Tuple[str, List[Mapping[str, Any]]]]:
    """The records per host: by instance id where a report has one; a report without one joins the host of its host
    name where exactly one host has that name, else stands on its host name (or its file's name). Each host's runs
    in the order of their own timestamps; a run seen twice (a report and its bundle) counts once."""
    strong: Dict[str, List[Mapping[str, Any]]] = {}
    weak: Dict[str, List[Mapping[str, Any]]] = {}
    for r in records:
        ident = r["identity"]
        if ident.get("instance_id"):
            strong.setdefault(f"instance:{ident['instance_id']}", []).append(r)
        else:
            weak.setdefault(f"host:{ident.get('hostname') or _file_host(r['source'])}", []).append(r)
    by_name: Dict[str, List[str]] = {}
    for key, rs in strong.items():
        for name in {r["identity"].get("hostname") for r in rs if r["identity"].get("hostname")}:
            by_name.setdefault(f"host:{name}", []).append(key)
    for key in list(weak):
        owners = by_name.get(key) or []
        if len(owners) == 1:
            strong[owners[0]].extend(weak.pop(key))
    hosts = {**strong, **weak}
    out = []
    names = [_display(key, rs) for key, rs in hosts.items()]
    for (key, rs), name in zip(hosts.items(), names):
        if names.count(name) > 1 and key.startswith("instance:"):
            name = f"{name} ({key[len('instance:'):]})"
        ordered: List[Mapping[str, Any]] = []
        seen = set()
        for r in sorted(rs, key=lambda r: (r["when"], r["source"])):
            if r["when"] in seen:
                continue
            seen.add(r["when"])
            ordered.append(r)
        out.append((name, ordered))
    return sorted(out, key=lambda kv: kv[0])


def _display(key: str, rs: Sequence[Mapping[str, Any]]) -> str:
    names = [r["identity"].get("hostname") for r in rs if r["identity"].get("hostname")]
    if names:
        return str(max(sorted(set(names)), key=names.count))
    return key.split(":", 1)[1] if key.startswith("host:") else _file_host(rs[0]["source"])


def _summary(r: Mapping[str, Any]) -> Dict[str, int]:
    return {k: sum(1 for f in r["findings"] if f["status"] == k) for k in ("fail", "error", "warn")}


def history(records: Sequence[Mapping[str, Any]], skipped: Sequence[Mapping[str, str]] = (),
            fail_on: str = "warn") -> Dict[str, Any]:
    """The history document (reports/schema/history-v1.json): each host's runs and the changes between them, the
    inputs skipped, and ``exit_code`` 1 when some host's newest run is worse than the one before at or above
    ``fail_on``."""
    threshold = FAIL_ON[fail_on]
    hosts = []
    worse_hosts = []
    for name, rs in group(records):
        transitions = [compare(a, b) for a, b in zip(rs, rs[1:])]
        newest = transitions[-1]["worst"] if transitions else None
        if threshold is not None and newest is not None and RANK.get(newest, 0) >= threshold:
            worse_hosts.append(name)
        hosts.append({
            "host": name,
            "identity": rs[-1]["identity"],
            "runs": [{"started_at": r["started_at"], "source": r["source"], "tool_version": r["tool_version"],
                      "boot_id": r["boot"]["id"], "boot_time": r["boot"]["time"], "summary": _summary(r)}
                     for r in rs],
            "transitions": transitions,
            "newest_worst": newest,
        })
    return {"kind": "dl-doctor-history", "version": HISTORY_VERSION, "fail_on": fail_on,
            "hosts": hosts, "skipped": [dict(s) for s in skipped],
            "worse": worse_hosts, "exit_code": 1 if worse_hosts else 0}
