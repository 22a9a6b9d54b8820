"""Cloud identity from DMI files (EC2 instance type). No network here; IMDS is a separate probe."""

from __future__ import annotations

from typing import Any, Dict, Optional

from dl_doctor.facts.contract import boolean, obj, string
from dl_doctor.probes import ProbeContext, Unavailable, probe

DMI = "/sys/class/dmi/id"


def is_ec2(dmi: Dict[str, Optional[str]], hypervisor_uuid: Optional[str]) -> bool:
    """EC2 per DMI: Nitro instances say sys_vendor 'Amazon EC2'; Xen ones have a hypervisor UUID 'ec2...'."""
    if (dmi.get("sys_vendor") or "").strip() == "Amazon EC2":
        return True
    return (hypervisor_uuid or "").strip().lower().startswith("ec2")


CLOUD_FACTS = obj(
    "DMI: cloud vendor and instance type",
    provider=string("aws on EC2, else null"),
    ec2=boolean("EC2 per DMI: sys_vendor Amazon EC2 (Nitro) or a hypervisor UUID starting ec2 (Xen)"),
    instance_type=string("the instance type from DMI product_name (Nitro instances only)"),
    instance_type_source=string("where instance_type came from (dmi product_name)"),
    board_asset_tag=string("DMI board_asset_tag on EC2 (the instance id on Nitro)"),
    dmi=obj(
        "the DMI strings read from /sys/class/dmi/id",
        sys_vendor=string("sys_vendor"),
        product_name=string("product_name"),
        product_version=string("product_version"),
        board_asset_tag=string("board_asset_tag"),
        bios_vendor=string("bios_vendor"),
        chassis_asset_tag=string("chassis_asset_tag"),
    ),
)


@probe("cloud", "cloud identity from DMI (/sys/class/dmi/id): EC2 and the instance type", provides=CLOUD_FACTS)
def cloud_probe(ctx: ProbeContext) -> Dict[str, Any]:
    host = ctx.host
    if not host.is_dir(DMI) and not host.is_dir("/sys/hypervisor"):
        raise Unavailable("no /sys/class/dmi/id (an image that has not booted, or no DMI in this container)")
    dmi: Dict[str, Optional[str]] = {}
    for name in ("sys_vendor", "product_name", "product_version", "board_asset_tag", "bios_vendor", "chassis_asset_tag"):
        text = host.try_read(f"{DMI}/{name}", 256)
        dmi[name] = text.strip() if text else None
    hv = host.try_read("/sys/hypervisor/uuid", 256)
    ec2 = is_ec2(dmi, hv.strip() if hv else None)
    instance_type = None
    if ec2 and "." in (dmi.get("product_name") or ""):
        instance_type = dmi["product_name"]  # Nitro: product_name is the instance type
    return {"provider": "aws" if ec2 else None, "ec2": ec2, "instance_type": instance_type,
            "instance_type_source": "dmi product_name" if instance_type else None,
            "board_asset_tag": dmi.get("board_asset_tag") if ec2 else None, "dmi": dmi}
