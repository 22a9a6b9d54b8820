"""Reads /etc/acme/fleet.conf (``max_temp_c = 85``) through the Host, so --sysroot and bundles work for free."""

from dl_doctor.probes import ProbeContext, Unavailable, probe


@probe("acme", "ACME fleet settings (/etc/acme/fleet.conf)", provides=("max_temp_c", "source"))
def acme_probe(ctx: ProbeContext):
    text = ctx.host.try_read("/etc/acme/fleet.conf", 4096)
    if text is None:
        raise Unavailable("no /etc/acme/fleet.conf")
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "max_temp_c" and value.strip().isascii() and value.strip().isdigit():
            return {"max_temp_c": int(value.strip()), "source": "/etc/acme/fleet.conf"}
    ctx.bad_input("/etc/acme/fleet.conf", "no max_temp_c = N line")
    return {"max_temp_c": None, "source": "/etc/acme/fleet.conf"}
