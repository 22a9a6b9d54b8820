"""Cloud identity: EC2 spot interruptions and scheduled maintenance."""

from __future__ import annotations

from dl_doctor.model import Facts, Fix, Result, check, passed, warn


def needs_imds(facts: Facts):
    if not facts.get("cloud.ec2") and not facts.has("imds"):
        return "not an EC2 instance (per DMI)"
    return None


@check(
    id="DLD-CLOUD-001", slug="ec2-interruption-or-maintenance",
    remedy="replace-hardware", drain=True,
    problem="A spot interruption or scheduled maintenance is pending",
    title="No spot interruption or scheduled maintenance is pending for this instance",
    tags=("cloud", "ec2"), requires=("imds",), applies=(needs_imds,),
    what="""Asks the instance metadata service (IMDSv2, only on EC2) for the spot instance-action notice and the
    scheduled maintenance events of this instance.""",
    why="""A spot interruption notice gives two minutes before the instance is stopped or terminated; a scheduled
    reboot or retirement ends a long run at a fixed time. Starting (or continuing) a multi-hour job without a recent
    checkpoint then loses the work.""",
    fix="""Checkpoint now and plan the restart: for spot, let the job save on the notice; for scheduled events,
    reschedule the event or move the job (stop and start moves an EBS-backed instance to new hardware).""",
)
def interruption(facts: Facts) -> Result:
    action = facts.get("imds.spot_instance_action")
    events = facts.get("imds.scheduled_events") or []
    life = facts.get("imds.life_cycle")
    evidence = {"imds.life_cycle": life, "imds.spot_instance_action": action, "imds.scheduled_events": events,
                "imds.instance_type": facts.get("imds.instance_type")}
    problems = []
    if action:
        what = f"{action['action']}" if action.get("action") else "the instance is reclaimed"
        when = f" at {action['time']}" if action.get("time") else ""
        problems.append(f"a spot interruption is scheduled: {what}{when}")
    for ev in events if isinstance(events, list) else []:
        if str(ev.get("State", "active")).lower() not in ("completed", "canceled"):
            desc = f" ({ev['Description']})" if ev.get("Description") else ""
            window = " - ".join(str(ev[k]) for k in ("NotBefore", "NotAfter") if ev.get(k))
            problems.append(f"scheduled {ev.get('Code') or 'event'}{desc}" + (f" {window}" if window else ""))
    if problems:
        return warn("; ".join(problems), evidence,
                    Fix("Checkpoint now; reschedule or move the work.",
                        ("aws ec2 describe-instance-status --instance-ids "
                         f"{facts.get('imds.instance_id') or '<id>'} --include-all-instances",
                         "# save a checkpoint; for spot, handle the 2-minute notice in the training loop")))
    kind = f"{life} " if life else ""
    return passed(f"no interruption notice or scheduled event for this {kind}instance "
                  f"({facts.get('imds.instance_type') or 'type unknown'})", **evidence)
