"""The EC2 instance metadata service (IMDSv2), asked only when the DMI files say this host is EC2.

No request is sent anywhere else, and none at all on other hosts or under a sysroot: the DMI
check comes first. Token first (PUT), then a handful of GETs, each with a short timeout: the metadata, the instance
role's name (the listing only: credentials are never requested), and one token-less GET of the instance id that says
whether IMDSv1 is still allowed.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

from dl_doctor.host.devices import http
from dl_doctor.facts.contract import array, boolean, map_of, obj, string
from dl_doctor.probes import ProbeContext, Unavailable, probe
from dl_doctor.probes.cloud import DMI, is_ec2

DEFAULT_ENDPOINT = "http://169.254.169.254"
PATHS = {
    "instance_type": "meta-data/instance-type",
    "instance_id": "meta-data/instance-id",
    "availability_zone": "meta-data/placement/availability-zone",
    "region": "meta-data/placement/region",
    "life_cycle": "meta-data/instance-life-cycle",
    "spot_instance_action": "meta-data/spot/instance-action",
    "scheduled_events": "meta-data/events/maintenance/scheduled",
    "public_ipv4": "meta-data/public-ipv4",
}


def imds_collect(host, endpoint: str, timeout: float) -> Dict[str, Any]:
    """Ask IMDSv2. Raises Unavailable when the service does not answer (IMDS disabled, a container without hops)."""
    try:
        status, token = http(host, "PUT", f"{endpoint}/latest/api/token",
                                  {"X-aws-ec2-metadata-token-ttl-seconds": "60"}, timeout=timeout)
    except OSError as exc:
        raise Unavailable(f"the instance metadata service did not answer ({exc}); IMDS may be disabled, or the hop "
                          f"limit too low for a container")
    if status != 200 or not token:
        raise Unavailable(f"IMDSv2 token request answered HTTP {status}")
    out: Dict[str, Any] = {"endpoint": endpoint, "errors": {}}
    for key, path in PATHS.items():
        try:
            status, body = http(host, "GET", f"{endpoint}/latest/{path}", {"X-aws-ec2-metadata-token": token},
                                     timeout=timeout)
        except OSError as exc:
            out["errors"][key] = str(exc)
            out[key] = None
            continue
        if status == 404:
            out[key] = None
        elif status != 200:
            out["errors"][key] = f"HTTP {status}"
            out[key] = None
        elif key in ("spot_instance_action", "scheduled_events"):
            try:
                out[key] = json.loads(body) if body.strip() else None
            except ValueError:
                out["errors"][key] = "not JSON"
                out[key] = None
        else:
            out[key] = body.strip() or None
    # the instance role's name, never its credentials: the listing names the role, only a GET of that name would
    # return keys, and that request is never made
    try:
        status, body = http(host, "GET", f"{endpoint}/latest/meta-data/iam/security-credentials/",
                            {"X-aws-ec2-metadata-token": token}, timeout=timeout)
        out["instance_role"] = body.strip().splitlines()[0][:128] if status == 200 and body.strip() else None
    except OSError:
        out["instance_role"] = None
    # IMDSv1 still allowed: a token-less request to a harmless path is answered (v2-only answers 401)
    try:
        status, _ = http(host, "GET", f"{endpoint}/latest/meta-data/instance-id", {}, timeout=timeout)
        out["imdsv1_allowed"] = status == 200
    except OSError:
        out["imdsv1_allowed"] = None
    return out


IMDS_FACTS = obj(
    "EC2 instance metadata (only on EC2)",
    endpoint=string("the metadata service asked (http://169.254.169.254, or --imds-endpoint)"),
    errors=map_of(string("the error"), "what could not be read -> why (a timeout, HTTP 500, not JSON)"),
    instance_type=string("meta-data/instance-type"),
    instance_id=string("meta-data/instance-id"),
    availability_zone=string("meta-data/placement/availability-zone"),
    region=string("meta-data/placement/region"),
    life_cycle=string("meta-data/instance-life-cycle: on-demand, spot or scheduled"),
    spot_instance_action=obj(
        "meta-data/spot/instance-action: the spot interruption notice (null: none)",
        action=string("terminate, stop or hibernate"),
        time=string("when (UTC, ISO 8601)"),
    ),
    scheduled_events=array(obj(
        "",
        Code=string("instance-reboot, system-reboot, system-maintenance, instance-retirement, instance-stop"),
        Description=string("the event's description"),
        EventId=string("the event's id"),
        NotBefore=string("the start of its window"),
        NotAfter=string("the end of its window"),
        State=string("active, completed or canceled"),
    ), "meta-data/events/maintenance/scheduled (null: none)"),
    public_ipv4=string("meta-data/public-ipv4 (null: the instance has none)"),
    instance_role=string("the instance role's name from the credentials listing (credentials are never requested)",
                         since="0.2.0"),
    imdsv1_allowed=boolean("a token-less request for the instance id was answered", since="0.2.0"),
)


@probe("imds", "EC2 instance metadata (IMDSv2): instance type, zone, spot life-cycle, interruption and scheduled events",
       provides=IMDS_FACTS)
def imds_probe(ctx: ProbeContext) -> Dict[str, Any]:
    host = ctx.host
    if not host.live:
        raise Unavailable("the instance metadata service belongs to a running instance, not a sysroot")
    dmi: Dict[str, Optional[str]] = {}
    for name in ("sys_vendor", "product_name"):
        text = host.try_read(f"{DMI}/{name}", 256)
        dmi[name] = text.strip() if text else None
    hv = host.try_read("/sys/hypervisor/uuid", 256)
    if not is_ec2(dmi, hv.strip() if hv else None):
        raise Unavailable("the DMI files do not say this is an EC2 instance; the metadata service was not contacted")
    endpoint = ctx.options.get("imds_endpoint") or DEFAULT_ENDPOINT
    return imds_collect(host, endpoint, float(ctx.options.get("imds_timeout") or 1.0))
