"""A GPU container as a captured tree: 64 MiB /dev/shm, cgroup v2 limits; what the runtime put there (the driver's
libraries and device nodes bind-mounted from the host, a pod's share of the node's GPUs, WSL2's Windows driver, the
host's fabric manager) is judged as the host's."""

import json
from typing import Any, Dict, List

import machines
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


# -- what the runtime put there is the host's ----------------------------------------------------------------------

DRV = "535.129.03"
LIB = "/usr/lib/x86_64-linux-gnu"
PYTORCH_ENV = (b"PATH=/opt/conda/bin:/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/bin:/bin\0HOME=/root\0"
               b"NVIDIA_VISIBLE_DEVICES=all\0NVIDIA_DRIVER_CAPABILITIES=compute,utility\0"
               b"NVIDIA_REQUIRE_CUDA=cuda>=12.1 brand=tesla,driver>=470,driver<471\0CUDA_VERSION=12.1.0\0"
               b"LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64\0")
# docker run --gpus all --shm-size=16g: the image's overlay root, and what Docker itself mounts
CONTAINER_MOUNTINFO = (
    "1503 1278 0:312 / / rw,relatime master:589 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/A:"
    "/var/lib/docker/overlay2/l/B,upperdir=/var/lib/docker/overlay2/c/diff,workdir=/var/lib/docker/overlay2/c/work\n"
    "1504 1503 0:315 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n"
    "1505 1503 0:316 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755,inode64\n"
    "1507 1503 0:318 / /sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs ro\n"
    "1510 1505 0:319 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=16777216k,inode64\n"
    "1511 1503 259:1 /var/lib/docker/containers/3f2a/resolv.conf /etc/resolv.conf rw,relatime - ext4 /dev/nvme0n1p1 rw\n"
    "1512 1503 259:1 /var/lib/docker/containers/3f2a/hostname /etc/hostname rw,relatime - ext4 /dev/nvme0n1p1 rw\n")
CONTAINER_MOUNTS = ("overlay / overlay rw,relatime,lowerdir=/a:/b,upperdir=/c,workdir=/d 0 0\n"
                    "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n"
                    "shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=16777216k,inode64 0 0\n")
DRIVER_FILES = [f"{LIB}/libcuda.so.{DRV}", f"{LIB}/libnvidia-ml.so.{DRV}", f"{LIB}/libnvidia-ptxjitcompiler.so.{DRV}",
                "/usr/bin/nvidia-smi", "/usr/bin/nvidia-persistenced"]


def _bind(n: int, path: str) -> str:
    """A file bind mount from the host's root file system: ROOT is the host's path."""
    return f"{1600 + n} 1503 259:1 {path} {path} ro,nosuid,nodev,relatime master:1 - ext4 /dev/nvme0n1p1 rw\n"


def _dev(n: int, node: str) -> str:
    return f"{1700 + n} 1505 0:5 /{node} /dev/{node} ro,nosuid,noexec master:2 - devtmpfs udev rw,size=32G,mode=755\n"


def runtime_mountinfo(gpus: List[int], legacy: bool = True, files: List[str] = DRIVER_FILES) -> str:
    """/proc/self/mountinfo of a container started by nvidia-container-cli (legacy: it also bind-mounts the device
    nodes, masks /proc/driver/nvidia and mounts the host's persistenced socket) or from a CDI spec (the device nodes
    are created, not mounted)."""
    text = CONTAINER_MOUNTINFO + "".join(_bind(i, p) for i, p in enumerate(files))
    if legacy:
        text += "".join(_dev(i, n) for i, n in enumerate(["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"]
                                                          + [f"nvidia{g}" for g in gpus]))
        text += ("1800 1504 0:320 / /proc/driver/nvidia rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,mode=555\n"
                 "1801 1800 0:22 /driver/nvidia/params /proc/driver/nvidia/params ro,nosuid,nodev,noexec - proc proc rw\n"
                 "1802 1503 0:25 /nvidia-persistenced/socket /run/nvidia-persistenced/socket rw,nosuid,nodev,noexec "
                 "- tmpfs tmpfs rw,size=6G,mode=755\n")
    return text


def pytorch_container(gpus: List[int] = (0,)) -> Dict[str, Any]:
    """A healthy official PyTorch container (docker run --gpus all --shm-size=16g) on a g4dn, captured with its
    own mount table: libcuda and libnvidia-ml are the host's, bind-mounted by nvidia-container-cli."""
    spec = trees.g4dn_docker_64m()
    spec["proc/self/environ"] = PYTORCH_ENV
    spec["proc/mounts"] = CONTAINER_MOUNTS
    spec["proc/self/mountinfo"] = runtime_mountinfo(list(gpus))
    spec["proc/driver/nvidia/version"] = trees.NVRM_535.replace("535.104.05", DRV)
    for lib in ("libcuda", "libnvidia-ml"):
        spec[f"{LIB[1:]}/{lib}.so.{DRV}"] = "\x7fELF"
        spec[f"{LIB[1:]}/{lib}.so.1"] = {"symlink": f"{lib}.so.{DRV}"}
    spec["usr/bin/nvidia-smi"] = ""
    spec["usr/local/cuda-12.1/version.json"] = '{"cuda": {"name": "CUDA SDK", "version": "12.1.105"}}'
    spec["usr/local/cuda"] = {"symlink": "/usr/local/cuda-12.1"}
    return spec


P4D_UUIDS = [f"GPU-5b1e0c3a-7d2f-4c1e-9a6b-0000000000{n:02d}" for n in range(8)]
P4D_BUSES = ("10:1c", "10:1d", "20:1c", "20:1d", "90:1c", "90:1d", "a0:1c", "a0:1d")


def pod_on_p4d(given: List[int] = (2, 5)) -> Dict[str, Any]:
    """A Kubernetes pod on a p4d.24xlarge node given two of its eight A100s (nvidia.com/gpu: 2) by the NVIDIA device
    plugin: NVIDIA_VISIBLE_DEVICES names their UUIDs, only their /dev/nvidiaN nodes are mounted and
    /proc/driver/nvidia/gpus is masked to them, while sysfs (not namespaced) shows the node's whole PCI bus."""
    spec = pytorch_container(gpus=list(given))
    del spec[".dockerenv"]
    for key in [k for k in spec if k.startswith("sys/")]:
        del spec[key]
    machines.dmi(spec, "p4d.24xlarge")
    for bus in P4D_BUSES:
        machines.pci(spec, f"0000:{bus}.0", "20b0")
    for n in range(6):
        machines.pci(spec, f"0000:1{n + 1}:00.0", "1af1", cls="0x068000", driver="")
    for g in given:
        spec[f"proc/driver/nvidia/gpus/0000:{P4D_BUSES[g]}.0/information"] = (
            f"Model:           NVIDIA A100-SXM4-40GB\nGPU UUID:        {P4D_UUIDS[g]}\n"
            f"Bus Location:    0000:{P4D_BUSES[g]}.0\nDevice Minor:    {g}\n")
    visible = ",".join(P4D_UUIDS[g] for g in given).encode()
    spec["proc/self/environ"] = (PYTORCH_ENV.replace(b"NVIDIA_VISIBLE_DEVICES=all", b"NVIDIA_VISIBLE_DEVICES=" + visible)
                                 + b"KUBERNETES_SERVICE_HOST=10.100.0.1\0KUBERNETES_SERVICE_PORT=443\0")
    spec["proc/1/cgroup"] = "0::/kubepods.slice/kubepods-pod1234.slice/cri-containerd-abcd.scope\n"
    spec["proc/meminfo"] = "MemTotal:       1073741824 kB\nMemAvailable:   1000000000 kB\nSwapTotal:             0 kB\n"
    spec["sys/fs/cgroup/memory.max"] = f"{128 * GIB}\n"
    spec["sys/fs/cgroup/cpu.max"] = "1200000 100000\n"  # 12 CPUs for the 2 GPUs it was given
    return spec


WSL_MOUNTS = ("/dev/sdc / ext4 rw,relatime,discard,errors=remount-ro,data=ordered 0 0\n"
              "none /usr/lib/wsl/drivers 9p ro,nosuid,nodev,noatime,dirsync,aname=drivers;fmask=222;dmask=222,mmap,"
              "access=client,msize=65536,trans=fd,rfd=7,wfd=7 0 0\n"
              "none /usr/lib/wsl/lib overlay rw,nosuid,nodev,noatime,lowerdir=/gpu_lib_packaged:/gpu_lib_inbox,"
              "upperdir=/gpu_lib/rw/upper,workdir=/gpu_lib/rw/work 0 0\n"
              "proc /proc proc rw,nosuid,nodev,noexec,noatime 0 0\n"
              "none /dev/shm tmpfs rw,nosuid,nodev,noatime 0 0\n")
WSL_KERNEL = "5.15.133.1-microsoft-standard-WSL2"


def wsl2_ubuntu() -> Dict[str, Any]:
    """Ubuntu 22.04 under WSL2 on a GeForce workstation: the Windows driver reaches it through /dev/dxg and its
    /usr/lib/wsl/lib (libcuda.so.1.1, libnvidia-ml.so.1); no nvidia kernel module, no NVIDIA PCI function."""
    spec: Dict[str, Any] = {
        "etc/os-release": trees.UBUNTU2204_OS_RELEASE,
        "etc/hostname": "DESKTOP-7K3Q2\n",
        "etc/wsl.conf": "[boot]\nsystemd=true\n",
        "etc/ld.so.conf.d/ld.wsl.conf": "/usr/lib/wsl/lib\n",
        "proc/mounts": WSL_MOUNTS,
        "proc/meminfo": trees.MEMINFO_64G,
        "proc/sys/kernel/osrelease": WSL_KERNEL + "\n",
        "proc/sys/kernel/hostname": "DESKTOP-7K3Q2\n",
        "proc/version": f"Linux version {WSL_KERNEL} (root@1c602f52c2e4) (gcc (GCC) 11.2.0) #1 SMP\n",
        "proc/modules": "",
        "proc/self/environ": b"PATH=/usr/local/bin:/usr/bin:/bin:/usr/lib/wsl/lib\0HOME=/home/dev\0USER=dev\0"
                             b"WSL_DISTRO_NAME=Ubuntu-22.04\0WSL_INTEROP=/run/WSL/1_interop\0",
        # WSL ships the kernel's modules: nvidia is never among them
        f"lib/modules/{WSL_KERNEL}/modules.dep": "",
        f"lib/modules/{WSL_KERNEL}/kernel/.keep": "",
        "dev/dxg": "",
        "usr/lib/wsl/lib/libcuda.so.1.1": "\x7fELF",
        "usr/lib/wsl/lib/libcuda.so.1": {"symlink": "libcuda.so.1.1"},
        "usr/lib/wsl/lib/libcuda.so": {"symlink": "libcuda.so.1.1"},
        "usr/lib/wsl/lib/libnvidia-ml.so.1": "\x7fELF",
        "usr/lib/wsl/lib/libdxcore.so": "\x7fELF",
        "usr/lib/wsl/lib/nvidia-smi": "",
        "usr/local/cuda-12.4/version.json": '{"cuda": {"name": "CUDA SDK", "version": "12.4.131"}}',
        "usr/local/cuda": {"symlink": "/usr/local/cuda-12.4"},
    }
    # WSL2's PCI bus: Hyper-V's virtual GPU (Microsoft Basic Render Driver, vendor 1414), no NVIDIA function
    real = ("sys/devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/f4a2b5c1-0000-0000-0000-000000000000/pci0000:00/"
            "0000:00:00.0")
    spec["sys/bus/pci/devices/a1b2:00:00.0"] = {"symlink": "/" + real}
    spec[f"{real}/vendor"] = "0x1414\n"
    spec[f"{real}/device"] = "0x008e\n"
    spec[f"{real}/class"] = "0x030200\n"
    return spec


def _run(run_cli, root, *args):
    r = run_cli("run", "--sysroot", str(root), "--json", "-", *args)
    report = json.loads(r.stdout)
    return r, report, {x["id"]: x for x in report["findings"]}


def _loud(findings):
    return {k: (f["status"], f["message"]) for k, f in findings.items() if f["status"] in ("warn", "fail")}


def test_a_healthy_pytorch_container_under_the_nvidia_runtime_is_green(run_cli, tree):
    """libcuda bind-mounted by nvidia-container-cli (its mount is in the tree's /proc/self/mountinfo) is the host's
    driver: never 'the image ships its own driver library', never an rm of it."""
    r, report, f = _run(run_cli, tree(pytorch_container()), "--fail-on", "warn")
    assert r.returncode == 0, _loud(f)
    ctr = f["DLD-CTR-001"]
    assert ctr["status"] == "pass"
    assert ctr["message"].startswith("the driver libraries here are the host's, mounted by the NVIDIA container "
                                     "runtime when the container started (libcuda.so.535.129.03")
    libs = report["facts"]["nvidia_driver"]["userspace"]["libraries"]
    assert {l["path"]: l["provided_by"] for l in libs} == {
        f"{LIB}/libcuda.so.{DRV}": "container-runtime", f"{LIB}/libnvidia-ml.so.{DRV}": "container-runtime"}
    runtime = report["facts"]["nvidia_driver"]["runtime"]
    assert runtime["source"] == "/proc/self/mountinfo" and runtime["by"] == "container-runtime"
    assert runtime["given_gpus"] == ["nvidia0"] and runtime["host_services"] == ["nvidia-persistenced"]
    assert {"path": f"{LIB}/libcuda.so.{DRV}", "root": f"{LIB}/libcuda.so.{DRV}", "fstype": "ext4"} in runtime["mounts"]


def test_a_libcuda_baked_into_the_image_still_fails(run_cli, tree):
    """The same tree with libcuda a file of the image (on the overlay root, no mount of its own): reported as before,
    while the runtime's libnvidia-ml beside it is not named."""
    spec = pytorch_container()
    spec["proc/self/mountinfo"] = runtime_mountinfo([0], files=[p for p in DRIVER_FILES if "libcuda" not in p])
    _, report, f = _run(run_cli, tree(spec), "--only", "DLD-CTR-001")
    ctr = f["DLD-CTR-001"]
    assert ctr["status"] == "fail" and "the image ships its own driver library" in ctr["message"]
    assert ctr["fix"]["commands"][0].endswith(f"rm -f {LIB}/libcuda.so.{DRV}   # in the Dockerfile, after the step that "
                                              "copied it")
    assert {l["library"]: l["provided_by"] for l in report["facts"]["nvidia_driver"]["userspace"]["libraries"]} == {
        "libcuda": "image", "libnvidia-ml": "container-runtime"}


def test_proc_self_mounts_is_enough_to_see_the_bind_mount(run_cli, tree):
    """Without mountinfo, /proc/self/mounts names the file mount (no root field): still the host's."""
    spec = pytorch_container()
    del spec["proc/self/mountinfo"]
    spec["proc/self/mounts"] = CONTAINER_MOUNTS + "".join(
        f"/dev/nvme0n1p1 {p} ext4 ro,nosuid,nodev,relatime 0 0\n" for p in DRIVER_FILES)
    _, report, f = _run(run_cli, tree(spec), "--only", "DLD-CTR-001")
    assert f["DLD-CTR-001"]["status"] == "pass", f["DLD-CTR-001"]["message"]
    runtime = report["facts"]["nvidia_driver"]["runtime"]
    assert runtime["source"] == "/proc/self/mounts" and runtime["mounts"][0]["root"] is None


def test_podman_with_cdi(run_cli, tree):
    """podman --device nvidia.com/gpu=all: the CDI spec mounts the libraries, creates the device nodes and sets
    NVIDIA_VISIBLE_DEVICES=void."""
    spec = pytorch_container()
    del spec[".dockerenv"]
    spec["run/.containerenv"] = "engine=\"podman-4.9.3\"\n"
    spec["proc/self/environ"] = PYTORCH_ENV.replace(b"NVIDIA_VISIBLE_DEVICES=all", b"NVIDIA_VISIBLE_DEVICES=void")
    spec["proc/self/mountinfo"] = runtime_mountinfo([0], legacy=False)
    r, report, f = _run(run_cli, tree(spec), "--fail-on", "warn")
    assert r.returncode == 0, _loud(f)
    assert "the host's, mounted by CDI" in f["DLD-CTR-001"]["message"]
    assert {l["provided_by"] for l in report["facts"]["nvidia_driver"]["userspace"]["libraries"]} == {"cdi"}


def test_gke_mounts_the_node_driver_directory(run_cli, tree):
    """GKE's device plugin mounts the node's driver installation at /usr/local/nvidia (a directory of the host's):
    the libraries there are the host's, not the image's."""
    spec = pod_on_p4d()
    for key in [k for k in spec if k.startswith(LIB[1:] + "/lib")]:
        del spec[key]
    for lib in ("libcuda", "libnvidia-ml"):
        spec[f"usr/local/nvidia/lib64/{lib}.so.{DRV}"] = "\x7fELF"
        spec[f"usr/local/nvidia/lib64/{lib}.so.1"] = {"symlink": f"{lib}.so.{DRV}"}
    spec["proc/self/mountinfo"] = CONTAINER_MOUNTINFO + (
        "1600 1503 8:1 /home/kubernetes/bin/nvidia /usr/local/nvidia ro,relatime - ext4 /dev/sda1 rw\n")
    _, report, f = _run(run_cli, tree(spec), "--only", "DLD-CTR-001")
    assert f["DLD-CTR-001"]["status"] == "pass", f["DLD-CTR-001"]["message"]
    assert "the host's, mounted by the NVIDIA container runtime" in f["DLD-CTR-001"]["message"]
    assert {l["provided_by"] for l in report["facts"]["nvidia_driver"]["userspace"]["libraries"]} == {
        "container-runtime"}


def test_a_container_started_without_gpus_still_fails(run_cli, tree):
    """Its own mount table shows nothing of the driver in a CUDA image: started without --gpus."""
    spec = pytorch_container()
    spec["proc/self/mountinfo"] = CONTAINER_MOUNTINFO
    for key in [k for k in spec if "libcuda" in k or "libnvidia-ml" in k or k == "usr/bin/nvidia-smi"]:
        del spec[key]
    _, _, f = _run(run_cli, tree(spec), "--only", "DLD-CTR-001")
    ctr = f["DLD-CTR-001"]
    assert ctr["status"] == "fail" and ctr["message"].endswith("it was started without --gpus"), ctr["message"]
    assert any("--gpus all" in c for c in ctr["fix"]["commands"])


def test_a_pod_is_judged_against_the_gpus_it_was_given(run_cli, tree):
    """Two of the node's eight A100s: not 'the driver initialised only 2' against the p4d, not '12 CPUs for 8 GPUs',
    not 'a 128 GiB limit for 320 GiB of GPU memory', not 'fabric manager not installed' (it runs on the node)."""
    r, report, f = _run(run_cli, tree(pod_on_p4d()))
    assert report["facts"]["system"]["container"]["kind"] == "kubernetes"
    assert report["facts"]["nvidia_driver"]["runtime"]["given_gpus"] == ["nvidia2", "nvidia5"]
    assert f["DLD-GPU-003"]["status"] == "pass"
    assert f["DLD-GPU-003"]["message"] == ("p4d.24xlarge: 8 x NVIDIA A100 SXM4 40GB on the PCI bus as expected; this "
                                           "container was given 2 of them; the driver shows it 2")
    assert (f["DLD-CTR-003"]["status"], f["DLD-CTR-003"]["message"]) == ("pass", "12 CPUs for 2 GPU(s)")
    assert (f["DLD-MEM-002"]["status"], f["DLD-MEM-002"]["message"]) == (
        "pass", "the container's memory limit 128 GiB for 80.0 GiB of GPU memory")
    assert f["DLD-GPU-004"]["status"] == "skip"
    assert f["DLD-GPU-004"]["message"].startswith("inside a container: the fabric manager runs on the host")
    assert f["DLD-CTR-001"]["status"] == "pass"
    assert {k for k, v in f.items() if v["status"] == "fail"} == set(), _loud(f)


def test_a_pod_whose_driver_shows_fewer_gpus_than_it_was_given_fails(run_cli, tree):
    spec = pod_on_p4d()
    del spec[f"proc/driver/nvidia/gpus/0000:{P4D_BUSES[5]}.0/information"]
    _, _, f = _run(run_cli, tree(spec), "--only", "DLD-GPU-003")
    assert f["DLD-GPU-003"]["status"] == "fail"
    assert "was given 2 of the node's 8 GPUs but the driver shows it only 1" in f["DLD-GPU-003"]["message"]


def test_the_device_plugin_list_counts_when_no_device_node_is_seen(run_cli, tree):
    """A tree without a mount table: NVIDIA_VISIBLE_DEVICES (the device plugin's UUIDs) says what the pod was given."""
    spec = pod_on_p4d()
    del spec["proc/self/mountinfo"]
    _, report, f = _run(run_cli, tree(spec), "--only", "DLD-GPU-003,DLD-CTR-003")
    assert report["facts"]["nvidia_driver"]["runtime"]["given_gpus"] == [P4D_UUIDS[2], P4D_UUIDS[5]]
    assert f["DLD-GPU-003"]["status"] == "pass" and f["DLD-CTR-003"]["status"] == "pass"


def test_wsl2_uses_the_windows_driver(run_cli, tree):
    """/usr/lib/wsl/lib is the Windows driver's; there is no nvidia kernel module in WSL2 to miss."""
    r, report, f = _run(run_cli, tree(wsl2_ubuntu()), "--fail-on", "warn")
    assert r.returncode == 0, _loud(f)
    driver = report["facts"]["nvidia_driver"]
    assert driver["runtime"]["wsl"] is True and driver["runtime"]["by"] == "wsl"
    assert driver["userspace"]["libraries"] == [
        {"library": "libcuda", "version": None, "path": "/usr/lib/wsl/lib/libcuda.so.1.1", "provided_by": "wsl"},
        {"library": "libnvidia-ml", "version": None, "path": "/usr/lib/wsl/lib/libnvidia-ml.so.1", "provided_by": "wsl"}]
    for check in ("DLD-GPU-001", "DLD-DRV-001", "DLD-DRV-003"):
        assert f[check]["status"] == "skip" and f[check]["message"].startswith("WSL2: the GPU and its driver are the "
                                                                               "Windows host's"), f[check]
    # an image of the distribution without a captured /sys: still not 'module not loaded' or 'no module for the kernel'
    spec = {k: v for k, v in wsl2_ubuntu().items() if not k.startswith("sys/")}
    r, _, f = _run(run_cli, tree(spec, "no-sys"), "--fail-on", "warn")
    assert r.returncode == 0, _loud(f)
    assert f["DLD-DRV-001"]["status"] == "skip" and "WSL2" in f["DLD-DRV-001"]["message"]


def test_an_image_cannot_show_the_fabric_managers_version(run_cli, tree):
    """A p4d tree whose fabric manager is installed and enabled but whose version no file records (an RPM install):
    a pass with the reason, not a warning; a missing fabric manager on the NVSwitch host still fails."""
    spec = machines.p4d_rhel8_healthy()
    del spec["usr/share/doc/nvidia-fabricmanager-535.104.05/README"]
    _, _, f = _run(run_cli, tree(spec), "--only", "DLD-GPU-004")
    fm = f["DLD-GPU-004"]
    assert fm["status"] == "pass" and "its version is not recorded in this tree" in fm["message"], fm["message"]
    for key in [k for k in spec if "fabricmanager" in k]:
        del spec[key]
    _, _, f = _run(run_cli, tree(spec, "no-fm"), "--only", "DLD-GPU-004")
    assert f["DLD-GPU-004"]["status"] == "fail" and "nvidia-fabricmanager is not installed" in f["DLD-GPU-004"]["message"]
