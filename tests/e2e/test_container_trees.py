"""A GPU container as a captured tree: 64 MiB /dev/shm, cgroup v2 limits."""

import json

import trees

GIB = 1024 ** 3


def test_docker_container_limits(run_cli, tree):
    spec = trees.g4dn_docker_64m()
    spec["sys/fs/cgroup/memory.max"] = f"{8 * GIB}\n"
    spec["sys/fs/cgroup/cpu.max"] = "100000 100000\n"
    r = run_cli("run", "--sysroot", str(tree(spec)), "--json", "-")
    report = json.loads(r.stdout)
    assert report["facts"]["system"]["cgroup"] == {"version": 2, "memory_limit_bytes": 8 * GIB, "cpu_limit": 1.0}
    f = {x["id"]: x for x in report["findings"]}
    assert f["DLD-MEM-001"]["status"] == "fail"
    assert any("--shm-size=" in c for c in f["DLD-MEM-001"]["fix"]["commands"])
    assert f["DLD-CTR-003"]["status"] == "warn" and "1 CPU(s) for 1 GPU(s)" in f["DLD-CTR-003"]["message"]
    # 8 GiB container limit against a 16 GiB T4
    assert f["DLD-MEM-002"]["status"] == "warn"
    assert f["DLD-MEM-002"]["message"].startswith("the container's memory limit is 8.0 GiB but the GPUs have 16.0 GiB")


def test_cgroup_v1_unlimited(run_cli, tree):
    spec = trees.g4dn_docker_64m()
    spec["sys/fs/cgroup/memory/memory.limit_in_bytes"] = "9223372036854771712\n"
    spec["sys/fs/cgroup/cpu/cpu.cfs_quota_us"] = "-1\n"
    spec["sys/fs/cgroup/cpu/cpu.cfs_period_us"] = "100000\n"
    report = json.loads(run_cli("run", "--sysroot", str(tree(spec)), "--json", "-", "--only", "container").stdout)
    assert report["facts"]["system"]["cgroup"] == {"version": 1, "memory_limit_bytes": None, "cpu_limit": None}


def test_a_container_tree_is_judged_by_its_files_not_skipped(run_cli, tree):
    """Device nodes cannot be seen in a tree, but a driver library baked into the image can: it fails; without one
    the image is fine (the runtime injects the host's libraries at start)."""
    spec = trees.g4dn_docker_64m()
    report = json.loads(run_cli("run", "--sysroot", str(tree(spec)), "--json", "-", "--only", "DLD-CTR-001").stdout)
    f = {x["id"]: x for x in report["findings"]}
    assert f["DLD-CTR-001"]["status"] == "pass", f["DLD-CTR-001"]["message"]
    spec["usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05"] = "\x7fELF"
    spec["usr/lib/x86_64-linux-gnu/libcuda.so.1"] = {"symlink": "libcuda.so.535.104.05"}
    report = json.loads(run_cli("run", "--sysroot", str(tree(spec, "baked")), "--json", "-", "--only",
                                "DLD-CTR-001").stdout)
    f = {x["id"]: x for x in report["findings"]}
    assert f["DLD-CTR-001"]["status"] == "fail"
    assert "the image ships its own driver library" in f["DLD-CTR-001"]["message"]
