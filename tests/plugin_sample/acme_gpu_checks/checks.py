"""ACME's own rule: the GPUs must run below the fleet's temperature ceiling."""

from dl_doctor.model import Facts, Fix, check, fail, passed


@check(id="ACME-TEMP-001", slug="gpu-above-fleet-ceiling", title="GPUs run below the ACME fleet's ceiling",
       tags=("acme", "gpu"), requires=("acme.max_temp_c", "nvml.devices"),
       what="Each GPU's temperature (NVML) against max_temp_c in /etc/acme/fleet.conf.",
       why="ACME's fleet throttles jobs on hot GPUs; a hot node slows the whole job it is part of.",
       fix="Check the node's airflow and fans; drain it from the scheduler until it is cool.")
def gpu_above_fleet_ceiling(facts: Facts):
    ceiling = facts.get("acme.max_temp_c")
    hot = [d for d in facts.get("nvml.devices") or [] if (d.get("temperature_c") or 0) > ceiling]
    if hot:
        return fail(f"{len(hot)} GPU(s) above {ceiling} °C", {"acme.max_temp_c": ceiling,
                    "hot": [d.get("index") for d in hot]},
                    Fix("Drain the node and check its cooling", ("sudo scontrol update NodeName=$(hostname -s) "
                                                                  "State=DRAIN Reason=ACME-TEMP-001",)))
    return passed(f"every GPU is at or below {ceiling} °C", {"acme.max_temp_c": ceiling})
