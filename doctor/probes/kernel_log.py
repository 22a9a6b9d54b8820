"""NVIDIA lines in the kernel log of the current boot: Xid errors, adapter init failures, API mismatches."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from dl_doctor.host import MAX_COMMAND_OUTPUT, CommandUnavailable
from dl_doctor.host.devices import read_kmsg
from dl_doctor.facts.contract import array, boolean, integer, obj, string
from dl_doctor.probes import ProbeContext, Unavailable, probe

from dl_doctor.readers.syslog import MAX_LOG_BYTES  # noqa: E402

LOG_FILES = ("/var/log/kern.log", "/var/log/messages", "/var/log/syslog")
INTERESTING = re.compile(r"NVRM|nvidia|Xid|RmInitAdapter|fallen off the bus|nouveau|NVSwitch|nvidia-nvswitch|"
                         r"Key was rejected|module verification failed", re.I)
BOOT_MARKER = re.compile(r"kernel: (Linux version \d|Command line: )")
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.\d)?|[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})\): "
                  r"(?P<code>[0-9]{1,10})(?:, pid=(?P<pid>[^,]*))?(?:, name=(?P<name>[^,]*))?,?\s*(?P<text>.*)$")
_RMINIT = re.compile(r"NVRM: (?:GPU (?P<bus>[0-9A-Fa-f:.]+): )?RmInitAdapter failed!?\s*(?P<code>\([^)]*\))?")
# The driver prints the mismatch over two lines ("... the client has the version X, but" /
# "NVRM: this kernel module has the version Y.  Please").
_MISMATCH_CLIENT = re.compile(r"NVRM: API mismatch: the client has the version (?P<client>[\d.\-]+), but")
_MISMATCH_KERNEL = re.compile(r"this kernel module has the version (?P<kernel>[\d.]+)")
_MISMATCH_SPREAD = re.compile(r"has the version (?P<client>[\d.\-]{3,40}), but this kernel module has the version "
                              r"(?P<kernel>[\d.]{3,40})")
_FALLEN = re.compile(r"NVRM: GPU (?:at )?(?:PCI:)?(?P<bus>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.\d)?):?\s+"
                     r"(?:GPU\s+)?(?:has\s+)?fallen off the bus")
# the module loader's refusals (kernel/module/main.c): "MOD: Unknown symbol SYM (err -2)" (no module exports it) and
# "MOD: disagrees about version of symbol SYM" (its CRC differs: built against other headers)
_UNKNOWN_SYMBOL = re.compile(r"(?:\]\s|kernel: |^)(?P<module>[A-Za-z0-9_-]{1,64}): (?:(?P<unknown>Unknown symbol) "
                             r"(?P<symbol>[A-Za-z0-9_.$]{1,128})(?: \(err (?P<err>-?\d{1,4})\))?|"
                             r"disagrees about version of symbol (?P<crc>[A-Za-z0-9_.$]{1,128}))")
MAX_LINES = 400
MAX_SYMBOL_LINES = 200
# "NVRM: The NVIDIA GPU 0000:02:00.0 (PCI ID: 10de:1b82)" opens the driver's refusal of one GPU; the lines after it
# say why (the open module without a GSP, a GPU that needs the open module, a GPU this branch does not support)
_REFUSED_GPU = re.compile(r"NVRM: The NVIDIA GPU (?P<bus>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*"
                          r"(?:NVRM:\s*)?\(PCI ID: (?P<id>10de:[0-9A-Fa-f]{4})\)")
_REFUSAL_REASONS = (("not supported by open", "the open kernel module does not drive it (no GSP: GPUs before Turing)"),
                    ("requires use of the NVIDIA open", "it needs the open kernel module"),
                    ("is not supported by the", "this driver branch does not support it"),
                    ("fallen off the bus", "it has fallen off the bus"))


def current_boot(lines: List[str]) -> List[str]:
    """Lines after the last boot marker of a syslog file (all lines if there is none)."""
    last = 0
    for i, line in enumerate(lines):
        if BOOT_MARKER.search(line):
            last = i
    return lines[last:]


def parse_kernel_log(lines: List[str]) -> Dict[str, Any]:
    xids: List[Dict[str, Any]] = []
    init_failures: List[Dict[str, Any]] = []
    mismatches: List[Dict[str, str]] = []
    fallen: List[str] = []
    symbols: List[Dict[str, Any]] = []
    refused: List[Dict[str, Any]] = []
    opened: Optional[Dict[str, Any]] = None
    key_rejected = False
    pending_client: Optional[str] = None
    pending_window: Optional[List[str]] = None
    for line in lines:
        m = _REFUSED_GPU.search(line)
        if m:
            opened = {"bus": m.group("bus").lower(), "pci_id": m.group("id").lower(), "reason": None,
                      "line": line.strip()[-300:], "_left": 5}
            refused.append(opened)
        if opened is not None:
            for needle, reason in _REFUSAL_REASONS:
                if needle in line and opened["reason"] is None:
                    opened["reason"] = reason
            opened["_left"] -= 1
            if opened["_left"] <= 0 or opened["reason"]:
                opened = None
        m = _XID.search(line)
        if m:
            xids.append({"code": int(m.group("code")), "bus": m.group("bus").lower(),
                         "pid": (m.group("pid") or "").strip() or None, "text": m.group("text").strip(),
                         "line": line.strip()[-300:]})
            continue
        m = _RMINIT.search(line)
        if m:
            init_failures.append({"bus": (m.group("bus") or "").lower() or None, "code": m.group("code"),
                                  "line": line.strip()[-300:]})
            continue
        if "API mismatch: the client" in line and not _MISMATCH_CLIENT.search(line):
            # the newer drivers name the client process first and spread the versions over the next lines:
            # "API mismatch: the client 'kwin_wayland' (pid 1005)" / "has the version 595.84, but this kernel module
            # has" / "the version 595.80.  Please ..."
            pending_window = [line]
            continue
        if pending_window is not None:
            pending_window.append(line)
            text = " ".join(l.split("NVRM:", 1)[-1].strip() for l in pending_window)
            m = _MISMATCH_SPREAD.search(text)
            if m:
                mismatches.append({"client": m.group("client").rstrip("."), "kernel_module": m.group("kernel").rstrip(".")})
                pending_window = None
            elif len(pending_window) > 4:
                pending_window = None
            continue
        m = _MISMATCH_CLIENT.search(line)
        if m:
            pending_client = m.group("client")
            m2 = _MISMATCH_KERNEL.search(line)  # both halves on one line (some log shippers join them)
            if m2:
                mismatches.append({"client": pending_client.rstrip("."), "kernel_module": m2.group("kernel").rstrip(".")})
                pending_client = None
            continue
        m = _MISMATCH_KERNEL.search(line)
        if m and pending_client:
            mismatches.append({"client": pending_client.rstrip("."), "kernel_module": m.group("kernel").rstrip(".")})
            pending_client = None
            continue
        m = _FALLEN.search(line)
        if m:
            fallen.append(m.group("bus").lower())
        if "symbol" in line:
            m = _UNKNOWN_SYMBOL.search(line)
            if m and m.group("module").replace("-", "_").startswith(("nvidia", "nv_")) and len(symbols) < MAX_SYMBOL_LINES:
                symbols.append({"module": m.group("module").replace("-", "_"),
                                "symbol": m.group("symbol") or m.group("crc"),
                                "kind": "unknown" if m.group("unknown") else "version",
                                "err": int(m.group("err")) if m.group("err") else None, "line": line.strip()[-300:]})
        if "Key was rejected by service" in line or "module verification failed" in line:
            key_rejected = True
    return {"xids": xids, "init_failures": init_failures, "api_mismatches": mismatches,
            "fallen_off_bus": sorted(set(fallen)), "module_key_rejected": key_rejected, "unknown_symbols": symbols,
            "refused_gpus": [{k: v for k, v in r.items() if k != "_left"} for r in refused[-32:]]}


def kernel_journal(host) -> Optional[Tuple[List[str], str, Dict[str, Any]]]:
    """This boot's kernel messages from the systemd journal (``journalctl -k -b``; live, bounded output), as candidate
    lines, or None where there is no journal this user may read."""
    from dl_doctor.readers.syslog import boot_start, candidate_lines

    if not host.which("journalctl"):
        return None
    try:
        result = host.run(["journalctl", "-k", "-b", "--no-pager", "-o", "short", "-q"], timeout=5)
    except (OSError, CommandUnavailable):
        return None
    if result.returncode != 0 or not result.stdout.strip():
        return None
    text = result.stdout
    return (candidate_lines(text), "journalctl -k -b",
            {"source": "journalctl -k -b", "boot_start_seen": boot_start(text) is not None,
             "cut_by_cap": len(result.stdout.encode("utf-8", "replace")) >= MAX_COMMAND_OUTPUT, "bytes": len(text)})


KERNEL_LOG_FACTS = obj(
    "the kernel log of this boot: Xids, NVRM errors",
    source=string("where the log was read: /dev/kmsg, journalctl -k -b, journal, or a syslog file"),
    xids=array(obj(
        "",
        code=integer("the Xid number", range=(0, 4294967296)),
        bus=string("the GPU's PCI address, lower case"),
        pid=string("the pid= field, where printed"),
        text=string("the rest of the message"),
        line=string("the whole line (its last 300 characters)"),
    ), "NVRM: Xid lines, in order"),
    init_failures=array(obj(
        "",
        bus=string("the GPU's PCI address, where printed"),
        code=string("the failure code in parentheses, where printed"),
        line=string("the whole line (its last 300 characters)"),
    ), "RmInitAdapter failed lines: a GPU the driver could not initialise"),
    api_mismatches=array(obj(
        "",
        client=string("the user-space driver's version"),
        kernel_module=string("the kernel module's version"),
    ), "NVRM: API mismatch messages: user-space driver and kernel module of different versions"),
    fallen_off_bus=array(string(), "PCI addresses of GPUs that have fallen off the bus"),
    module_key_rejected=boolean("a module's signature was rejected (Key was rejected by service, module "
                                "verification failed)"),
    unknown_symbols=array(obj(
        "",
        module=string("the NVIDIA module the kernel refused ('-' read as '_')"),
        symbol=string("the symbol"),
        kind=string("unknown (no loaded module exports it: 'Unknown symbol') or version ('disagrees about version "
                    "of symbol': built against other kernel headers)"),
        err=integer("the loader's error number (-2: not found, -22: CRC mismatch)", range=(-4096, 4096)),
        line=string("the whole line (its last 300 characters)"),
    ), "the module loader's refusals of NVIDIA modules in this boot ('Unknown symbol', 'disagrees about version "
       "of symbol')", since="0.2.0"),
    refused_gpus=array(obj(
        "",
        bus=string("the GPU's PCI address"),
        pci_id=string("its PCI id (10de:xxxx)"),
        reason=string("why the driver refused it, from the lines after ('the open kernel module does not drive it', "
                      "'it needs the open kernel module', 'this driver branch does not support it'; null: not said)"),
        line=string("the line that names it"),
    ), "GPUs the driver refused in this boot ('NVRM: The NVIDIA GPU BUS (PCI ID: ...)' and the reason after it)",
       since="0.2.0"),
    lines=array(string(), "the NVIDIA-related lines of this boot (the last 400)"),
    truncated=boolean("there were more than 400 such lines"),
    boot=obj(
        "how far the boot's log was read: source (/dev/kmsg, journalctl -k -b, journal, a syslog file), "
        "boot_start_seen, cut_by_cap, bytes read; from a tree's journal also boot_id",
        source=string("where it was read"),
        boot_start_seen=boolean("the start of the boot is in what was read (nothing of the boot was lost)"),
        cut_by_cap=boolean("the read stopped at its size cap"),
        bytes=integer("characters of log text read"),
        bytes_read=integer("bytes of files read (syslog files, journal files)"),
        files=array(string(), "the files read (a syslog file and its rotations, journal files)"),
        records=integer("/dev/kmsg: records read"),
        first_sequence=integer("/dev/kmsg: the sequence number of the first record (0: the ring buffer still holds "
                               "the boot's start)"),
        boot_id=string("a tree's journal: the boot read"),
        entries=integer("a tree's journal: entries of that boot"),
        skipped_compressed=integer("a tree's journal: entries skipped as compressed"),
        errors=array(string(), "a tree's journal: the first problems reading it"),
        since="0.2.0",
    ),
    candidates=array(obj(
        "",
        line=string("the line (its last 300 characters)"),
        after_module_load=boolean("it comes after the boot's last NVIDIA module load"),
    ), "this boot's lines worth matching against the signature base, each with after_module_load (judged by "
       "DLD-LOG-001)", since="0.2.0"),
    candidates_dropped=integer("candidate lines left out beyond the kept ones (the oldest)", since="0.2.0"),
    suspends=array(obj(
        "",
        line=string("the line"),
        after_module_load=boolean("it comes after the boot's last NVIDIA module load"),
    ), "suspend and resume lines of this boot (the last 50)", since="0.2.0"),
    module_loaded=boolean("the log shows the NVIDIA module being loaded in this boot", since="0.2.0"),
)


@probe("kernel_log", "NVIDIA messages in the kernel log of this boot (Xid errors, RmInitAdapter, API mismatch), "
       "and the events the signature base knows, against the NVIDIA module load",
       root_adds="the kernel log (/dev/kmsg, /var/log/messages), where Xid errors and driver load failures appear",
       provides=KERNEL_LOG_FACTS)
def kernel_log_probe(ctx: ProbeContext) -> Dict[str, Any]:
    from dl_doctor.readers.syslog import candidate_lines, read_boot

    host = ctx.host
    lines: Optional[List[str]] = None
    source = None
    boot: Dict[str, Any] = {}
    if host.kernel_live:
        try:
            first: List[int] = []
            records, source = read_kmsg(host, first_seq=first), "/dev/kmsg"
            lines = candidate_lines("\n".join(records))
            boot = {"source": source, "boot_start_seen": bool(first) and first[0] == 0, "cut_by_cap": False,
                    "records": len(records), "first_sequence": first[0] if first else None}
        except PermissionError:
            # dmesg_restrict: the journal keeps the same kernel messages for the groups allowed to read it
            kmsg_journal = kernel_journal(host)
            if kmsg_journal is not None:
                lines, source, boot = kmsg_journal
            else:
                ctx.denied("the kernel log (/dev/kmsg): Xid errors and driver load failures of this boot")
        except (OSError, CommandUnavailable):
            lines = None
    if lines is None and not host.live:
        # a tree: its journal (read here, never by a host program) knows the boots exactly; the syslog files next
        from dl_doctor.readers.journal import boot_once

        journal = boot_once(host)
        if journal is not None and journal.entries:
            lines, source, boot = candidate_lines(journal.kernel_text()), "journal", journal.describe()
    if lines is None:
        try:
            log = read_boot(host, int(ctx.options.get("log_bytes") or 0) or MAX_LOG_BYTES)
        except PermissionError as exc:
            raise PermissionError(f"cannot read the kernel log files: {exc}")
        if log is not None:
            lines, source, boot = candidate_lines(log.text), log.source, log.describe()
    if lines is None and host.live:
        from dl_doctor.readers.journal import boot_once

        journal = boot_once(host)  # a live host whose ring buffer and journalctl are closed to this user
        if journal is not None and journal.entries:
            lines, source, boot = candidate_lines(journal.kernel_text()), "journal", journal.describe()
    if lines is None:
        raise Unavailable("no kernel log: /dev/kmsg is not readable here, no journal and no "
                          "/var/log/{kern.log,messages,syslog}")
    relevant = [l for l in lines if INTERESTING.search(l)]
    out = parse_kernel_log(relevant)
    out.update(source=source, lines=relevant[-MAX_LINES:], truncated=len(relevant) > MAX_LINES, boot=boot)
    from dl_doctor.readers.syslog import mark

    out.update(mark(lines))
    return out
