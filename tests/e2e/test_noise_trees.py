"""Healthy machines that used to draw warnings nobody would act on (issue 25, item 4): each is a sysroot tree run
as a user would, `dl-doctor run --sysroot TREE --fail-on warn`, and the checks named here must not warn."""

import json

import pytest

import elfkit
from conftest import FIXTURES, build_tree
from machines import BUILDERS, p4d_rhel8_healthy
from trees import HOST_MOUNTS, MEMINFO_64G, non_nvidia_pci


def _findings(run_cli, root, *extra):
    r = run_cli("run", "--sysroot", str(root), "--fail-on", "warn", "--json", "-", *extra)
    return r, {f["id"]: f for f in json.loads(r.stdout)["findings"]}


def cpu_only_ci_host(root):
    """A CPU-only CI build host with a conda env holding the CUDA build of torch (on purpose: it builds images)."""
    build_tree(root, {"proc/mounts": HOST_MOUNTS, "proc/meminfo": MEMINFO_64G,
                      "proc/sys/kernel/osrelease": "6.8.0-1015-aws\n", "proc/modules": "ena 143360 0 - Live 0x0\n",
                      "var/log/kern.log": "Nov 29 09:00:00 ci-build-3 kernel: [    0.000000] Linux version "
                                          "6.8.0-1015-aws (buildd@lcy02)\n",
                      **non_nvidia_pci("0000:00:05.0")})
    elfkit.tree(root, {"PATH": "/opt/conda/envs/pytorch/bin:/usr/bin", "CONDA_PREFIX": "/opt/conda/envs/pytorch",
                       "HOME": "/root"})
    site = elfkit.conda_env(root)
    elfkit.wheels(site)
    elfkit.torch_wheel(site)
    return root


def test_cpu_only_host_with_a_cuda_build_is_green(run_cli, tmp_path):
    r, f = _findings(run_cli, cpu_only_ci_host(tmp_path / "cpu"))
    assert f["DLD-PY-002"]["status"] == "skip"
    assert f["DLD-PY-002"]["message"].startswith("no NVIDIA GPU on the PCI bus and no NVIDIA driver")
    # no module load to count from: the pass says what it read, not 'since the NVIDIA module was loaded'
    assert f["DLD-LOG-001"]["status"] == "pass"
    assert "no NVIDIA GPU here" in f["DLD-LOG-001"]["message"]
    assert "since the NVIDIA module was loaded" not in f["DLD-LOG-001"]["message"]
    assert {k: v["status"] for k, v in f.items() if v["status"] in ("warn", "fail", "error")} == {}
    assert r.returncode == 0


def test_p4d_535_with_a_cu124_torch_is_served_by_minor_version_compatibility(run_cli, tmp_path):
    """Driver 535 (CUDA 12.2) and torch 2.5.1+cu124, whose wheels carry sm_80 SASS for the A100s: no PTX JIT."""
    root = build_tree(tmp_path / "p4d", p4d_rhel8_healthy())
    site = elfkit.conda_env(root)
    elfkit.wheels(site)
    elfkit.torch_wheel(site)
    _, f = _findings(run_cli, root, "--only", "DLD-CUDA-001")
    cuda = f["DLD-CUDA-001"]
    assert cuda["status"] == "pass", cuda["message"]
    assert "through CUDA minor-version compatibility (same CUDA major, driver >= 525.60.13)" in cuda["message"]
    assert "has SASS for every GPU here (NVIDIA A100" in cuda["message"]


@pytest.mark.parametrize("name", ["p4d_rhel8_healthy", "p5_48xlarge", "g5_ubuntu2204"])
def test_healthy_machine_trees_are_green_under_fail_on_warn(run_cli, tmp_path, name):
    """The healthy machines of tests/machines.py as sysroot trees: nothing warns. The p4d and p5 were launched
    without EFA interfaces and nothing in them is set up for EFA: DLD-NET-001 passes with a note."""
    r, f = _findings(run_cli, build_tree(tmp_path / name, BUILDERS[name]()))
    assert {k: v["message"] for k, v in f.items() if v["status"] in ("warn", "fail", "error")} == {}
    assert r.returncode == 0
    if name != "g5_ubuntu2204":
        assert f["DLD-NET-001"]["status"] == "pass"
        assert "fine for single-node jobs" in f["DLD-NET-001"]["message"]


@pytest.mark.parametrize("name", ["p4d_rhel8_healthy", "p5_48xlarge"])
def test_healthy_snapshots_draw_no_warning(run_cli, name):
    """The recorded snapshots of the same machines (with NVML): no warning either."""
    r = run_cli("check", str(FIXTURES / "snapshots" / f"{name}.json"), "--fail-on", "warn", "--json", "-")
    report = json.loads(r.stdout)
    assert {f["id"]: f["message"] for f in report["findings"] if f["status"] in ("warn", "fail", "error")} == {}
    assert r.returncode == 0


def test_the_cloud_images_admin_user_in_the_docker_group_is_not_reported(run_cli, tmp_path):
    """Docker's post-install step adds the login user to the docker group; on a cloud image that user is in sudo
    already (root-equivalent anyway). Another user in the group still warns."""
    base = {"etc/os-release": 'ID=ubuntu\nVERSION_ID="22.04"\n', "usr/bin/dockerd": "",
            "etc/passwd": "root:x:0:0:root:/root:/bin/bash\nubuntu:x:1000:1000::/home/ubuntu:/bin/bash\n"}
    group = "root:x:0:\nadm:x:4:syslog,ubuntu\nsudo:x:27:ubuntu\ndocker:x:999:ubuntu{}\n"
    r = run_cli("run", "--sysroot", str(build_tree(tmp_path / "ok", {**base, "etc/group": group.format("")})),
                "--only", "DLD-SEC-003", "--json", "-")
    report = json.loads(r.stdout)
    assert report["facts"]["security"]["docker"]["administrators"] == ["ubuntu"]
    sec = {f["id"]: f for f in report["findings"]}["DLD-SEC-003"]
    assert sec["status"] == "pass" and "(ubuntu) are administrators already" in sec["message"]
    r = run_cli("run", "--sysroot", str(build_tree(tmp_path / "bad", {**base, "etc/group": group.format(",intern")})),
                "--only", "DLD-SEC-003", "--json", "-")
    sec = {f["id"]: f for f in json.loads(r.stdout)["findings"]}["DLD-SEC-003"]
    assert sec["status"] == "warn" and "docker group (root-equivalent): intern" in sec["message"]
