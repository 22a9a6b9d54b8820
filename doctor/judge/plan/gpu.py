"""``--gpu MODEL`` and ``--instance-type TYPE``: the same software on other GPUs (another instance type: its GPUs,
their count, NVSwitch and EFA interfaces, as the matrix records them)."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from dl_doctor.judge.plan.change import Change, PlanInputError, WhatIf


def _gpu_entry(matrix: Any, query: str) -> Dict[str, Any]:
    text = (query or "").strip()
    if not text or len(text) > 64:
        raise PlanInputError("--gpu: give a GPU model (H100, A10G, 10de:2330)")
    found = matrix.find_gpus(text)
    if not found:
        close = matrix.closest("gpu", text)
        raise PlanInputError(f"--gpu: no GPU '{text}' in the matrix" + (f"; closest: {', '.join(close)}" if close
                                                                        else ""))
    if len(found) > 1:
        raise PlanInputError(f"--gpu: '{text}' matches {len(found)} GPUs: "
                             + ", ".join(e["name"] for e in found[:6]) + "; name one")
    return dict(found[0])


def _bound_driver(w: WhatIf) -> Optional[str]:
    """The kernel driver the new GPUs are bound to: the one the current GPUs have, else nvidia where the module is
    loaded."""
    for d in w.get("gpu_pci.devices") or []:
        if isinstance(d, dict) and d.get("kind") == "gpu":
            return d.get("driver")
    return "nvidia" if w.get("nvidia_driver.kernel_module.loaded") else None


def _swap(w: WhatIf, change: Change, entry: Dict[str, Any], count: Optional[int], nvswitch: Optional[bool]) -> None:
    device_id = entry["pci_device_ids"][0]
    old = [d for d in w.get("gpu_pci.devices") or [] if isinstance(d, dict) and d.get("kind") == "gpu"]
    others = [d for d in w.get("gpu_pci.devices") or [] if isinstance(d, dict) and d.get("kind") != "gpu"
              and not (nvswitch is not None and d.get("kind") == "nvswitch")]
    n = count if count is not None else max(1, len(old))
    driver = _bound_driver(w)
    gpus: List[Dict[str, Any]] = []
    for i in range(n):
        keep = old[i] if i < len(old) else {}
        bdf = keep.get("bdf") or f"0000:{0x10 + i:02x}:00.0"
        gpus.append({"class": "030200", "bdf": bdf, "vendor_id": "10de", "device_id": device_id, "kind": "gpu",
                     "driver": keep.get("driver", driver) if keep else driver})
    if nvswitch:
        others += [{"class": "068000", "bdf": "0000:c0:00.0", "vendor_id": "10de", "kind": "nvswitch",
                    "driver": driver}]
        change.notes.append("the matrix records that this instance has NVSwitches, not how many: one is modelled "
                            "(what the fabric manager's checks need)")
    w.set(change, "gpu_pci.devices", gpus + others)
    w.set(change, "gpu_pci.gpu_count", n)
    if nvswitch is not None:
        w.set(change, "gpu_pci.nvswitch_count", 1 if nvswitch else 0)
    bdfs = [g["bdf"] for g in gpus]
    if isinstance(w.get("nvidia_driver.proc_gpus"), list) and w.get("nvidia_driver.proc_gpus"):
        w.set(change, "nvidia_driver.proc_gpus", [{"bdf": b, "model": entry["name"]} for b in bdfs])
    nvml = w.get("nvml")
    if isinstance(nvml, dict) and not nvml.get("init_error") and isinstance(nvml.get("devices"), list):
        devices = []
        for i, b in enumerate(bdfs):
            dev: Dict[str, Any] = {"index": i, "name": entry["name"], "bus_id": b,
                                   "compute_capability": entry.get("compute_capability")}
            if entry.get("memory_mib"):
                dev["memory_total_bytes"] = int(entry["memory_mib"]) * 1024 * 1024
            devices.append(dev)
        w.set(change, "nvml.devices", devices)
        w.set(change, "nvml.device_count", n)
        change.notes.append("the new GPUs' health (ECC, remapped rows, clocks, processes) is not known: it is "
                            "judged on the machine")
    for key in ("verify",):
        w.drop(change, key, "the workloads ran on the old GPUs")
    for i, env in enumerate(w.environments()):
        if isinstance(env.get("deep"), dict):
            w.drop_in(change, env, "deep", f"python_envs.environments[{i}].deep", "--deep ran on the old GPUs")


def _builds_for(w: WhatIf, change: Change, entry: Dict[str, Any], matrix: Any) -> None:
    """For each environment whose torch build has no code for the new GPU: the build of the same release that has,
    else the first newer release with one ("take the cu128 wheel instead"), from the matrix's arch lists."""
    from dl_doctor import versions
    from dl_doctor.judge.plan.change import ORDER

    if not hasattr(matrix, "torch_on_gpu"):
        return
    releases = sorted((p for e in matrix.entries("torch") for p in (e.get("patches") or [e.get("version")]) if p),
                      key=versions.release)
    for env in w.environments():
        torch = (env.get("frameworks") or {}).get("torch") if isinstance(env.get("frameworks"), dict) else None
        if not isinstance(torch, dict) or not torch.get("cuda") or not torch.get("version"):
            continue
        version = str(torch["version"])
        mine = matrix.torch_on_gpu(version, entry["name"]) if "+" in version else None
        if not mine or not mine.get("builds") or mine["builds"][0].get("serves") is not False:
            continue  # it serves, or the matrix cannot say
        base = version.split("+")[0]
        pick = None
        for candidate in [base] + [r for r in releases if versions.release(r) > versions.release(base)]:
            answer = matrix.torch_on_gpu(candidate, entry["name"])
            serving = [b for b in (answer or {}).get("builds") or [] if b.get("serves")]
            if serving:
                pick = (candidate, serving[-1])
                break
        where = env.get("name") or env.get("prefix")
        if pick is None:
            change.notes.append(f"{where}: no torch release the matrix knows has a build for {entry['name']}")
            continue
        release, build = pick
        change.installs.append("torch")
        python = env.get("python") or f"{env.get('prefix')}/bin/python"
        change.step(f"{where}: torch {version} has no code for {entry['name']}; take torch {release}+{build['name']} "
                    f"instead (SASS or PTX for compute capability {entry.get('compute_capability')}; "
                    f"dl-doctor matrix torch {release} --gpu '{entry['name']}')",
                    [f"{python} -m pip install 'torch=={release}' --index-url "
                     f"https://download.pytorch.org/whl/{build['name']}"], order=ORDER["install"])


def apply_gpu(w: WhatIf, value: str, matrix: Any, options: Mapping[str, Any]) -> Change:
    entry = _gpu_entry(matrix, value)
    info = matrix.gpu_info(entry)
    before = sorted({str(d.get("device_id")) for d in w.get("gpu_pci.devices") or []
                     if isinstance(d, dict) and d.get("kind") == "gpu"})
    names = [(matrix.gpu_by_pci(d) or {}).get("name") or f"10de:{d}" for d in before]
    change = Change("gpu", f"--gpu {value.strip()}", verified=bool(info.get("verified", True)),
                    sources=list(info.get("sources") or []))
    change.summary = (f"GPUs: {', '.join(names) or 'none'} -> {entry['name']} (compute capability "
                      f"{entry.get('compute_capability')}, {entry.get('architecture')})")
    if before == [entry["pci_device_ids"][0]]:
        change.notes.append(f"the GPUs are {entry['name']} already: nothing changes")
        return change
    _swap(w, change, entry, None, None)
    _builds_for(w, change, entry, matrix)
    if w.get("cloud.instance_type"):  # another GPU is another machine: not this instance type
        w.drop(change, "cloud.instance_type", f"{w.get('cloud.instance_type')} has other GPUs (--instance-type names "
                                              f"the instance to plan for)")
    return change


def apply_instance(w: WhatIf, value: str, matrix: Any, options: Mapping[str, Any]) -> Change:
    text = (value or "").strip()
    info = matrix.instance(text) if text and len(text) <= 64 else None
    if info is None:
        close = matrix.closest("instance", text[:64])
        raise PlanInputError(f"--instance-type: no instance type '{text[:64]}' in the matrix"
                             + (f"; closest: {', '.join(close)}" if close else ""))
    entry = matrix.tables["gpu"].get((info["gpu"],))
    if entry is None:
        raise PlanInputError(f"--instance-type: the matrix does not know {text}'s GPU ({info['gpu']})")
    change = Change("instance-type", f"--instance-type {info['instance_type']}",
                    verified=bool(info.get("verified", True)), sources=list(info.get("sources") or []))
    change.summary = (f"instance {w.get('cloud.instance_type') or 'unknown'} -> {info['instance_type']}: "
                      f"{info['gpu_count']} x {entry['name']}"
                      + (", NVSwitch" if info.get("nvswitch") else "")
                      + (f", {info['efa_interfaces']} EFA interfaces" if info.get("efa_interfaces") else ""))
    _swap(w, change, dict(entry), int(info["gpu_count"]), bool(info.get("nvswitch")))
    _builds_for(w, change, dict(entry), matrix)
    w.set(change, "cloud.instance_type", info["instance_type"])
    if w.get("cloud.provider") is None:
        w.set(change, "cloud.provider", "aws")
        w.set(change, "cloud.ec2", True)
    efa = info.get("efa_interfaces")
    if isinstance(efa, int) and isinstance(w.get("network"), dict):
        names = [f"rdmap{i}s0" for i in range(efa)]
        others = [d for d in w.get("network.infiniband_devices") or []
                  if isinstance(d, dict) and d.get("driver") != "efa"]
        w.set(change, "network.infiniband_devices",
              others + [{"name": n, "driver": "efa", "link_layer": None} for n in names])
        w.set(change, "network.efa_devices", names)
        change.notes.append(f"{efa} EFA interfaces, as the matrix records them (the instance's, not this machine's)")
    elif isinstance(w.get("network"), dict):
        w.drop(change, "network.efa_devices", "the instance's EFA interfaces are not in the matrix")
    return change
