"""The compatibility matrix: entries against their sources, queries, validation, overlays."""

import json
import textwrap

import pytest

from dl_doctor import compat_matrix
from dl_doctor.compat_matrix import MatrixError, load, validate_files

M = load(site=False)


# -- a sample of every table, against the values the sources give --------------------

@pytest.mark.parametrize("cuda,min_driver,minor", [
    ("12.4", "550.54.14", "525.60.13"),    # CUDA 13.2.2 release notes, Table 3
    ("12.2", "535.54.03", "525.60.13"),
    ("11.8", "520.61.05", "450.80.02"),
    ("13.0", "580.65.06", "580"),
    ("13.2", "595.45.04", "580"),
    ("10.2", "440.33", None),
])
def test_cuda_min_driver(cuda, min_driver, minor):
    r = M.cuda(cuda)
    assert (r["cuda"], r["min_driver"], r["min_driver_minor_compat"]) == (cuda, min_driver, minor)
    assert r["sources"] and r["verified"]


def test_cuda_update_releases_name_their_own_floor():
    r = M.cuda("12.2.2")
    assert r["cuda"] == "12.2" and r["min_driver"] == "535.54.03"
    assert r["update"] == {"version": "12.2.2", "min_driver": "535.104.05"}


@pytest.mark.parametrize("driver,max_cuda", [
    ("535.104.05", "12.2"), ("550.54.14", "12.4"), ("550.54.13", "12.3"), ("580.65.06", "13.0"),
    ("470.82.01", "11.4"), ("450.80.02", "11.0"), ("525.60.13", "12.0"), ("595.71.05", "13.2"),
])
def test_driver_max_cuda(driver, max_cuda):
    assert M.driver(driver)["max_cuda"] == max_cuda


def test_unverified_entries_are_marked():
    r = M.driver("610.43.02")
    assert r["max_cuda"] == "13.3" and r["verified"] is False


def test_driver_support_levels():
    assert M.driver_supports_cuda("550.54.14", "12.4")["support"] == "full"
    assert M.driver_supports_cuda("535.104.05", "12.4")["support"] == "minor-compat"
    assert M.driver_supports_cuda("535.104.05", "13.0")["support"] == "none"
    assert M.driver_supports_cuda("470.82.01", "12.1")["support"] == "none"
    assert M.driver_supports_cuda("535.104.05", "99.0")["support"] == "unknown"


@pytest.mark.parametrize("query,name,cc,arch,min_cuda,max_cuda", [
    ("H100", "NVIDIA H100 SXM5 80GB", "9.0", "Hopper", "11.8", None),
    ("10de:2330", "NVIDIA H100 SXM5 80GB", "9.0", "Hopper", "11.8", None),
    ("K80", "Tesla K80", "3.7", "Kepler", None, "11.8"),
    ("M60", "Tesla M60", "5.2", "Maxwell", None, "12.9"),
    ("T4", "Tesla T4", "7.5", "Turing", "10.0", None),
    ("V100", "Tesla V100 SXM2 16GB", "7.0", "Volta", "9.0", "12.9"),
    ("A10G", "NVIDIA A10G", "8.6", "Ampere", "11.1", None),
    ("2237", "NVIDIA A10G", "8.6", "Ampere", "11.1", None),
    ("A100", "NVIDIA A100 SXM4 40GB", "8.0", "Ampere", "11.0", None),
    ("A100-SXM4-80GB", "NVIDIA A100 SXM4 80GB", "8.0", "Ampere", "11.0", None),
    ("20b5", "NVIDIA A100 PCIe 80GB", "8.0", "Ampere", "11.0", None),
    ("L4", "NVIDIA L4", "8.9", "Ada Lovelace", "11.8", None),
    ("L40S", "NVIDIA L40S", "8.9", "Ada Lovelace", "11.8", None),
    ("H100 PCIe", "NVIDIA H100 PCIe", "9.0", "Hopper", "11.8", None),
    ("H200", "NVIDIA H200 SXM 141GB", "9.0", "Hopper", "11.8", None),
    ("B200", "NVIDIA B200", "10.0", "Blackwell", "12.8", None),
    ("GB200", "NVIDIA GB200", "10.0", "Blackwell", "12.8", None),
    ("RTX 3090", "NVIDIA GeForce RTX 3090", "8.6", "Ampere", "11.1", None),
    ("RTX 4090", "NVIDIA GeForce RTX 4090", "8.9", "Ada Lovelace", "11.8", None),
    ("RTX 5090", "NVIDIA GeForce RTX 5090", "12.0", "Blackwell", "12.8", None),
])
def test_gpus(query, name, cc, arch, min_cuda, max_cuda):
    r = M.gpu(query)
    assert (r["name"], r["compute_capability"], r["architecture"], r["min_cuda"], r["max_cuda"]) == \
        (name, cc, arch, min_cuda, max_cuda)
    assert r["sources"]


def test_gpu_support_windows_and_forward_compat():
    assert M.gpu("K80")["last_driver_branch"] == "470"
    assert M.gpu("V100")["last_driver_branch"] == "580"
    assert M.gpu("B200")["open_kernel_modules"] == "required"
    assert M.gpu("V100")["open_kernel_modules"] == "unsupported"
    assert M.gpu("H100")["forward_compat"] is True
    assert M.gpu("RTX 4090")["forward_compat"] is False  # cuda-compat: datacenter GPUs only
    assert "min_cuda" in M.gpu("T4")["unverified"]
    assert M.gpu_by_pci("22a3")["class"] == "nvswitch"


def test_torch_contract_example():
    r = M.torch("2.4.1")
    assert r["torch"] == "2.4.1" and r["cuda_variants"] == ["11.8", "12.1", "12.4"]
    assert r["python"] == ["3.8", "3.9", "3.10", "3.11", "3.12"]
    assert r["cudnn"] == {"11.8": "9.1.0.70", "12.1": "9.1.0.70", "12.4": "9.1.0.70"}
    assert r["nccl"]["12.4"] == "2.20.5"
    assert r["torchvision"] == "0.19.1" and r["torchaudio"] == "2.4.1"
    assert "3.7" in r["arch_list"]["11.8"] and "3.7" not in r["arch_list"]["12.4"]


@pytest.mark.parametrize("version,tv,ta", [("2.0.0", "0.15.1", "2.0.1"), ("2.0.1", "0.15.2", "2.0.2"),
                                           ("1.13.1", "0.14.1", "0.13.1"), ("2.9.1", "0.24.1", "2.9.1"),
                                           ("2.14.1", "0.29.1", "2.14.1")])
def test_torch_companions(version, tv, ta):
    r = M.torch(version)
    assert (r["torchvision"], r["torchaudio"]) == (tv, ta)


def test_torch_arch_lists_decide_sm_support():
    assert "7.0" not in M.torch_variant("2.7.1", "12.8")["arch_list"]     # pytorch#147607 dropped sm_70
    assert "7.0" in M.torch_variant("2.8.0", "12.8")["arch_list"]         # re-added (pytorch#160269)
    assert "12.0" in M.torch_variant("2.7.0", "12.8")["arch_list"]
    assert not any(a.startswith("12.0") for a in M.torch_variant("2.6.0", "12.6")["arch_list"])
    assert "12.0+PTX" in M.torch_variant("2.13.0", "13.0")["arch_list"]
    v214 = M.torch_variant("2.14.1+cu130", "13.0")
    assert (v214["cudnn"], v214["nccl"]) == ("9.24.0.43", "2.30.7")       # the wheel's own METADATA
    assert v214["arch_list"] == ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"]


# -- the inverse query: a torch release on a GPU (matrix torch VERSION --gpu GPU) -----------------------------

def test_torch_on_gpu_hopper_every_build_serves():
    r = M.torch_on_gpu("2.5.1", "H100")
    assert (r["torch"], r["gpu"], r["compute_capability"]) == ("2.5.1", "NVIDIA H100 SXM5 80GB", "9.0")
    builds = {b["cuda"]: b for b in r["builds"]}
    assert set(builds) == {"11.8", "12.1", "12.4"} and r["serving"] == ["11.8", "12.1", "12.4"]
    assert all(b["serves"] and b["sass"] == "9.0" and b["ptx"] is None for b in builds.values())
    # per build: the toolkit's floors, never below the GPU's own (Hopper: CUDA 11.8, driver 520.61.05)
    assert (builds["12.4"]["min_driver"], builds["12.4"]["min_driver_minor_compat"]) == ("550.54.14", "525.60.13")
    assert (builds["11.8"]["min_driver"], builds["11.8"]["min_driver_minor_compat"]) == ("520.61.05", "520.61.05")
    assert r["gpu_min_driver"] == {"cuda": "11.8", "driver": "520.61.05"}
    assert r["min_driver"] == "520.61.05"                      # the lowest over the builds that serve it
    assert (builds["12.1"]["cudnn"], builds["12.1"]["nccl"]) == ("9.1.0.70", "2.21.5")
    assert builds["12.4"]["verified"] is False                 # its arch list is marked unverified
    assert r["verified"] is False                              # torch 2.5 is verified = false in torch.toml
    ngc = {i["release"]: i for i in r["images"] if i["kind"] == "ngc"}
    assert set(ngc) == {"24.10", "24.09"}                      # images of the 2.5 line only
    assert ngc["24.10"]["satisfies"] is True and ngc["24.10"]["min_driver"] == "560.35.03"   # CUDA 12.6.2's floor
    assert ngc["24.10"]["torch_match"] == "minor" and ngc["24.10"]["verified"] is False
    assert "https://docs.nvidia.com/deeplearning/frameworks/pytorch-release-notes/rel-24-10.html" in r["sources"]


def test_torch_on_gpu_blackwell_before_its_builds():
    r = M.torch_on_gpu("2.5.1", "B200")
    assert r["compute_capability"] == "10.0" and r["serving"] == [] and r["min_driver"] is None
    assert all(b["serves"] is False and "no code for compute capability 10.0" in b["why"] for b in r["builds"])
    # an image of CUDA 12.6 on Blackwell: unknown (PTX only, which the matrix does not know it ships), not "fails"
    assert {i["satisfies"] for i in r["images"]} == {None}
    assert r["gpu_min_driver"] == {"cuda": "12.8", "driver": "570.26"}


def test_torch_on_gpu_blackwell_cu128():
    r = M.torch_on_gpu("2.7.1", "B200")
    builds = {b["name"]: b for b in r["builds"]}
    assert r["serving"] == ["12.8"] and builds["cu128"]["sass"] == "10.0"
    assert builds["cu126"]["serves"] is False
    assert builds["cu118"]["serves"] is None and "arch list" in builds["cu118"]["why"]   # not in the matrix: unknown
    assert (r["min_driver"], r["min_driver_minor_compat"]) == ("570.26", "570.26")     # the GPU's floor dominates


def test_torch_on_gpu_old_gpu_dropped_from_arch_lists():
    r = M.torch_on_gpu("2.5.1", "K80")
    builds = {b["name"]: b for b in r["builds"]}
    assert builds["cu121"]["serves"] is False and builds["cu124"]["serves"] is False     # 3.7 dropped from 12.x
    # cu118 still has sm_37, but its full-support driver (520) is past Kepler's last branch (R470):
    # minor-version compatibility (>= 450.80.02) is the only way
    assert builds["cu118"]["serves"] is True and builds["cu118"]["min_driver"] is None
    assert builds["cu118"]["min_driver_minor_compat"] == "450.80.02" and "R470" in builds["cu118"]["why"]
    assert (r["min_driver"], r["min_driver_minor_compat"], r["last_driver_branch"]) == (None, "450.80.02", "470")
    assert {i["satisfies"] for i in r["images"]} == {False}   # CUDA 12.6 containers: no Kepler
    assert M.torch_on_gpu("2.7.1", "K80")["serving"] == []


def test_arch_code_for_sass_and_ptx():
    assert M.arch_code_for("8.9", ["8.0", "8.6", "9.0"]) == {"sass": "8.6", "ptx": None}    # same major, minor <=
    assert M.arch_code_for("10.0", ["8.0", "9.0+PTX"]) == {"sass": None, "ptx": "9.0"}     # PTX of an older cc
    assert M.arch_code_for("12.1", ["10.0", "12.0+PTX"]) == {"sass": "12.0", "ptx": "12.0"}
    assert M.arch_code_for("7.5", ["8.0+PTX", "9.0"]) == {"sass": None, "ptx": None}       # PTX of a newer cc: no


def test_ptx_only_build_needs_full_support():
    gpu = M.gpu("B200")
    b = M._build_on_gpu({"name": "cu130", "cuda": "13.0", "arch_list": ["8.0", "9.0+PTX"]}, gpu, "570.26", None)
    assert b["serves"] is True and (b["sass"], b["ptx"]) == (None, "9.0")
    assert (b["min_driver"], b["min_driver_minor_compat"]) == ("580.65.06", None)   # no JIT through minor compat


def test_torch_on_gpu_one_build():
    r = M.torch_on_gpu("2.5.1+cu124", "H100")
    assert [b["name"] for b in r["builds"]] == ["cu124"] and r["min_driver"] == "550.54.14"
    assert M.torch_on_gpu("2.5.1+cu130", "H100") is None          # no such build of 2.5.1


def test_torch_on_gpu_unknown_entries():
    assert M.torch_on_gpu("2.5.9", "H100") is None
    assert M.torch_on_gpu("2.5.1", "Radeon") is None
    assert M.torch_on_gpu("2.5.1", "NVSwitch (H100)") is None      # no compute capability


def test_images_table_cites_and_flags():
    images = M.entries("image")
    assert 5 <= len(images) <= 12 and all(e.get("source") for e in images)
    dlami = {(e["name"], e["release"]): e for e in images if e["kind"] == "dlami"}
    al2023 = dlami[("Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.6.0 (Amazon Linux 2023)", "20260103")]
    assert (al2023["torch"], al2023["cuda"], al2023["driver"]) == ("2.6.0", "12.6", "580.105.08")
    # NGC entries read only in third-party copies are marked
    assert all(e.get("verified") is False for e in images if e["kind"] == "ngc" and e["release"] != "25.12")
    r = M.torch_on_gpu("2.9.0", "B200")
    amis = [i for i in r["images"] if i["kind"] == "dlami"]
    assert amis and all(i["satisfies"] is True and "P6-B200" in i["why"] for i in amis)  # AWS lists P6-B200


def test_numpy2_boundary():
    assert M.torch("2.2.2")["numpy2"] is False and M.torch("2.3.0")["numpy2"] is True


def test_cudnn_and_nccl_tables():
    cudnn = {(e["version"], e["cuda_major"]): e for e in M.entries("cudnn")}
    assert cudnn[("9.17.0", 13)]["min_driver"] == "580.65.06"
    assert cudnn[("9.17.0", 13)]["compute_capabilities"] == ["7.5", "12.0"]
    assert ("9.17.0", 11) not in cudnn
    assert cudnn[("8.9.5", 12)]["cuda"] == ["12.0", "12.1", "12.2"]
    nccl = {e["version"]: e for e in M.entries("nccl")}
    assert "11.8" not in nccl["2.19.3"]["cuda"]


@pytest.mark.parametrize("itype,gpu,count,gib,efa,nvswitch", [
    ("p4d.24xlarge", "NVIDIA A100 SXM4 40GB", 8, 40.0, 4, True),
    ("p4de.24xlarge", "NVIDIA A100 SXM4 80GB", 8, 80.0, 4, True),
    ("p5.48xlarge", "NVIDIA H100 SXM5 80GB", 8, 80.0, 32, True),
    ("p5e.48xlarge", "NVIDIA H200 SXM 141GB", 8, 141.0, 32, True),
    ("p5en.48xlarge", "NVIDIA H200 SXM 141GB", 8, 141.0, 16, True),
    ("p6-b200.48xlarge", "NVIDIA B200", 8, 179.1, 8, True),
    ("g5.48xlarge", "NVIDIA A10G", 8, 22.4, 1, False),
    ("g6e.48xlarge", "NVIDIA L40S", 8, 44.7, 4, False),
    ("g4dn.metal", "Tesla T4", 8, 16.0, 1, False),
    ("p3dn.24xlarge", "Tesla V100 SXM2 32GB", 8, 32.0, 1, False),
    ("p3.16xlarge", "Tesla V100 SXM2 16GB", 8, 16.0, 0, False),
])
def test_instances(itype, gpu, count, gib, efa, nvswitch):
    r = M.instance(itype)
    assert (r["gpu"], r["gpu_count"], r["gpu_memory_gib"], r["efa_interfaces"], r["nvswitch"]) == \
        (gpu, count, gib, efa, nvswitch)
    assert M.gpu(r["gpu"])["name"] == gpu  # every instance names a known GPU


def test_smaller_sizes_are_marked_as_secondary():
    r = M.instance("g5.12xlarge")
    assert r["gpu_count"] == 4 and "gpu_count" in r["unverified"]
    assert M.instance("p3.2xlarge")["verified"] is False


@pytest.mark.parametrize("vtype,size,iops,mibps,burst", [
    ("gp2", 100, 300, 128, 3000),      # 3 IOPS/GiB, 128 MiB/s up to 170 GiB, burst 3000 below 1 TiB
    ("gp2", 20, 100, 128, 3000),       # floor of 100 IOPS
    ("gp2", 6000, 16000, 250, None),   # ceiling of 16,000 IOPS
    ("gp3", 500, 3000, 125, None),     # baseline 3000 IOPS / 125 MiB/s
    ("st1", 2048, 500, 80.0, None),    # 40 MiB/s per TiB
    ("sc1", 16384, 250, 192.0, None),  # 12 MiB/s per TiB
])
def test_ebs_limits(vtype, size, iops, mibps, burst):
    r = M.ebs_limits(vtype, size)
    assert (r["iops"], r["throughput_mibps"], r["burst_iops"]) == (iops, mibps, burst)


def test_ebs_provisioned():
    assert M.ebs_limits("gp3", 1000, iops=16000, throughput_mibps=1000)["throughput_mibps"] == 1000
    assert M.ebs_limits("gp3", 10, iops=16000)["iops"] == 5000  # 500 IOPS per GiB
    assert M.ebs_limits("io2", 100, iops=10000)["throughput_mibps"] == pytest.approx(2560)  # 0.256 MiB/s per IOPS
    assert M.ebs_limits("io2", 100, iops=20000)["throughput_mibps"] == 4000                # capped
    assert M.ebs_limits("io1", 100, iops=20000)["iops"] == 5000                            # 50 IOPS per GiB


def test_rhel_and_system_python():
    assert M.rhel_release_for_kernel("4.18.0-553.16.1.el8_10.x86_64")["release"] == "8.10"
    assert M.rhel_release_for_kernel("4.18.0-477.27.1.el8_8.x86_64")["verified"] is False
    py = M.entries("system_python")[0]
    assert py["platform_python"] == "/usr/libexec/platform-python" and py["version"] == "3.6"


def test_known_issues():
    hit = M.known_issues("aws-ofi-nccl", "1.9.0", {"libfabric": "1.17.1"})
    assert [k["id"] for k in hit] == ["KI-001"]
    assert M.known_issues("aws-ofi-nccl", "1.9.0", {"libfabric": "1.19.0"}) == []
    assert M.known_issues("aws-ofi-nccl", "1.9.0") == []  # the other component's version is unknown
    assert [k["id"] for k in M.known_issues("aws-ofi-nccl", "1.14.0", instance_family="p6-b200")] == ["KI-003"]
    assert [k["id"] for k in M.known_issues("torch", "2.2.2", {"numpy": "2.0.1"})] == ["KI-005"]
    assert M.known_issues("torch", "2.3.0", {"numpy": "2.0.1"}) == []


# -- coverage: every version the issue names answers ---------------------------------------

CUDA_VERSIONS = ["10.2"] + [f"11.{i}" for i in range(9)] + [f"12.{i}" for i in (0, 1, 2, 3, 4, 5, 6, 8, 9)] + \
    ["13.0", "13.1", "13.2"]
TORCH_VERSIONS = ["1.13", "2.0", "2.1", "2.2", "2.3", "2.4", "2.5", "2.6", "2.7", "2.8", "2.9", "2.10", "2.11",
                  "2.12", "2.13", "2.14"]
FAMILIES = ["g4dn.xlarge", "g5.xlarge", "g6.xlarge", "g6e.xlarge", "p3.2xlarge", "p3dn.24xlarge", "p4d.24xlarge",
            "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge"]


def test_coverage():
    for v in CUDA_VERSIONS:
        assert M.cuda(v), v
    for v in TORCH_VERSIONS:
        r = M.torch(v)
        assert r and r["cuda_variants"] and r["python"], v
    for t in FAMILIES:
        assert M.instance(t)["gpu_count"] >= 1, t
    for g in ("K80", "M60", "T4", "V100", "A10G", "A100", "L4", "L40S", "H100", "H200", "B200", "GB200",
              "RTX 3090", "RTX 4090", "RTX 5090"):
        assert M.gpu(g)["compute_capability"], g


def test_every_entry_cites_a_known_source():
    for table, rows in M.tables.items():
        for entry in rows.values():
            keys = entry["source"] if isinstance(entry["source"], list) else [entry["source"]]
            assert keys and all(k in M.sources for k in keys), (table, entry)
    for key, src in M.sources.items():
        assert src["url"], key


# -- validation -------------------------------------------------------------------------------

def _write(tmp_path, text, name="overlay.toml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return str(p)


@pytest.mark.parametrize("body,needle", [
    ('[[toolkit]]\nversion = "13.5"\nsource = ["cuda_rn_13_2_2"]\n', "toolkit[0] (version '13.5'): field 'min_driver': missing"),
    ('[[toolkit]]\nversion = "13.5"\nmin_driver = "six hundred"\nsource = ["cuda_rn_13_2_2"]\n',
     "field 'min_driver': 'six hundred' is not a driver version"),
    ('[[toolkit]]\nversion = "13.5"\nmin_driver = "620.1"\n', "field 'source': missing"),
    ('[[toolkit]]\nversion = "13.5"\nmin_driver = "620.1"\nsource = ["nowhere"]\n', "unknown source key(s) nowhere"),
    ('[[toolkits]]\nversion = "13.5"\n', "unknown table 'toolkits' (did you mean 'toolkit'?)"),
    ('[[toolkit]]\nversion = "13.5"\nmin_driver = "620.1"\nmin_drivr = "1"\nsource = ["cuda_minor"]\n',
     "field 'min_drivr': unknown field (did you mean 'min_driver'?)"),
    ('[[toolkit]]\nversion = "13.5"\nmin_driver = "620.1"\nsource = ["cuda_minor"]\n'
     '[[toolkit]]\nversion = "13.5"\nmin_driver = "620.2"\nsource = ["cuda_minor"]\n', "duplicate entry"),
    ('[sources.x]\nurl = "a"\n[sources.x]\nurl = "b"\n', "not valid TOML"),
    ('[[gpu]]\nname = "X"\npci_device_ids = ["XYZ1"]\narchitecture = "Hopper"\nclass = "datacenter"\nsource = ["pciids"]\n',
     "is not a 4-digit lower-case hex PCI device ID"),
    ('[[known_issue]]\nid = "KI-900"\ncomponent = "nccl"\nversions = "newer than 2"\nsummary = "s"\nfix = "f"\n'
     'source = ["nccl_342"]\n', "is not a version specifier"),
])
def test_broken_files_name_file_entry_and_field(tmp_path, body, needle):
    path = _write(tmp_path, "schema_version = 1\n" + body)
    errors = validate_files([path])
    assert any(needle in e for e in errors), errors
    assert all(e.startswith("overlay.toml") for e in errors), errors
    with pytest.raises(MatrixError):
        compat_matrix._CACHE.clear()
        load([path], site=False)


def test_schema_version_is_required(tmp_path):
    errors = validate_files([_write(tmp_path, '[[toolkit]]\nversion = "13.5"\nmin_driver = "620.1"\nsource = ["cuda_minor"]\n')])
    assert errors == ["overlay.toml: schema_version must be 1 (found None)"]


def test_builtin_matrix_is_valid():
    assert validate_files([]) == []


# -- overlays -----------------------------------------------------------------------------------

OVERLAY = """\
    schema_version = 1
    [sources.acme-wiki]
    url = "https://wiki.example.com/gpu/cuda"

    [[toolkit]]
    version = "13.9"
    min_driver = "640.10"
    source = ["acme-wiki"]

    [[toolkit]]
    version = "12.4"
    min_driver = "550.99.99"
    source = ["acme-wiki"]
    note = "our internal rebuild needs a newer driver"
"""


def test_overlay_adds_and_overrides(tmp_path):
    path = _write(tmp_path, OVERLAY)
    m = load([path], site=False)
    assert m.cuda("13.9")["min_driver"] == "640.10"
    assert m.cuda("12.4")["min_driver"] == "550.99.99"
    assert m.cuda("12.4")["sources"][0] == "https://wiki.example.com/gpu/cuda"
    assert m.driver("641.0")["max_cuda"] == "13.9"
    assert m.info()["overlays"] == [path]
    assert load(site=False).cuda("12.4")["min_driver"] == "550.54.14"  # the built-in data is untouched


def test_one_cache_keyed_by_the_files_as_they_are(tmp_path, monkeypatch):
    """compat_matrix.load is the one loader and holds the one cache: the application's load_matrix is the same
    object; an overlay edited in place, or a file added to the site directory, is read again (the key was the
    paths alone, and the application kept a second cache keyed by the --matrix-overlay paths only)."""
    import os

    from dl_doctor import app

    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setenv("DL_DOCTOR_MATRIX_DIR", str(site))
    path = _write(tmp_path, OVERLAY)
    first = load([path])
    assert load([path]) is first and app.load_matrix([path]) is first
    assert first.cuda("13.9")["min_driver"] == "640.10"
    edited = _write(tmp_path, OVERLAY.replace('"640.10"', '"640.20"'))
    assert edited == path
    os.utime(path, ns=(1, 1))  # the same path, another file identity, whatever the clock's resolution
    second = app.load_matrix([path])
    assert second is not first and second.cuda("13.9")["min_driver"] == "640.20"
    assert load([path]) is second
    (site / "10-site.toml").write_text(textwrap.dedent(OVERLAY).replace("13.9", "13.8"))
    with_site = app.load_matrix([path])
    assert with_site.cuda("13.8") is not None and with_site.info()["overlays"] == [str(site / "10-site.toml"), path]
    (site / "10-site.toml").write_text("schema_version = 2\n")
    with pytest.raises(app.InputProblem, match="schema_version must be 1"):
        app.load_matrix([path])
    assert load([path], site=False) is not None and len(compat_matrix._CACHE) <= compat_matrix.MAX_CACHED


def test_cli_queries_and_overlays(run_cli, tmp_path):
    r = run_cli("matrix", "cuda", "12.4", "--json", "-")
    assert {k: json.loads(r.stdout)[k] for k in ("cuda", "min_driver", "min_driver_minor_compat")} == \
        {"cuda": "12.4", "min_driver": "550.54.14", "min_driver_minor_compat": "525.60.13"}
    assert json.loads(run_cli("matrix", "driver", "535.104.05", "--json", "-").stdout)["max_cuda"] == "12.2"
    gpu = json.loads(run_cli("matrix", "gpu", "10de:2330", "--json", "-").stdout)
    assert (gpu["compute_capability"], gpu["architecture"], gpu["min_cuda"], gpu["max_cuda"]) == ("9.0", "Hopper", "11.8", None)
    inst = json.loads(run_cli("matrix", "instance", "p4d.24xlarge", "--json", "-").stdout)
    assert (inst["gpu_count"], inst["efa_interfaces"], inst["nvswitch"]) == (8, 4, True)
    torch = json.loads(run_cli("matrix", "torch", "2.4.1", "--json", "-").stdout)
    assert torch["torchvision"] == "0.19.1"
    human = run_cli("matrix", "cuda", "12.4")
    assert human.stdout.startswith("CUDA 12.4: driver >= 550.54.14") and "source: https://" in human.stdout

    missing = run_cli("matrix", "cuda", "12.7")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "dl-doctor: no cuda entry for '12.7' in the matrix; closest: 12.8, 12.6, 12.9"
    assert run_cli("matrix", "gpu", "Radeon").returncode == 1
    assert run_cli("matrix", "cuda", "twelve").returncode == 2

    overlay = _write(tmp_path, OVERLAY)
    o = run_cli("matrix", "cuda", "13.9", "--json", "-", "--matrix-overlay", overlay)
    assert json.loads(o.stdout)["min_driver"] == "640.10"
    site = tmp_path / "matrix.d"
    site.mkdir()
    (site / "10-acme.toml").write_text(textwrap.dedent(OVERLAY))
    s = run_cli("matrix", "cuda", "13.9", "--json", "-", env={"DL_DOCTOR_MATRIX_DIR": str(site)})
    assert json.loads(s.stdout)["min_driver"] == "640.10"
    rep = run_cli("run", "--only", "DLD-SYS-001", "--json", "-", "--matrix-overlay", overlay)
    assert json.loads(rep.stdout)["run"]["matrix"]["overlays"] == [overlay]


IMAGE_OVERLAY = """
schema_version = 1
[sources.site_images]
url = "https://example.com/our-image-notes"
[[image]]
kind = "ngc"
name = "registry.example.com/pytorch"
release = "25.06-site"
torch = "2.7.0a0+79aa17489c"
cuda = "12.9"
source = ["site_images"]
[[image]]
kind = "ngc"
name = "registry.example.com/pytorch"
release = "25.07-site"
torch = "2.7.1"
cuda = "12.9"
driver = "580"
source = ["site_images"]
"""


def test_cli_torch_on_gpu(run_cli, tmp_path):
    r = run_cli("matrix", "torch", "2.5.1", "--gpu", "H100", "--json", "-")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {"torch", "gpu", "compute_capability", "min_driver", "builds", "images", "sources", "verified"} <= set(doc)
    assert {"cuda", "serves", "why", "sass", "ptx", "cudnn", "nccl", "min_driver",
            "min_driver_minor_compat"} <= set(doc["builds"][0])
    assert doc["min_driver"] == "520.61.05" and [b["cuda"] for b in doc["builds"] if b["serves"]] == ["11.8", "12.1", "12.4"]
    human = run_cli("matrix", "torch", "2.5.1", "--gpu", "H100")
    assert human.stdout.startswith("torch 2.5.1 on NVIDIA H100 SXM5 80GB (compute capability 9.0, Hopper): "
                                   "minimum driver 520.61.05; builds that serve it: cu118, cu121, cu124")
    assert "  cu124: serves: SASS for 9.0; driver >= 550.54.14, >= 525.60.13 with minor-version compatibility" \
        in human.stdout
    assert "ngc nvcr.io/nvidia/pytorch 24.10" in human.stdout and "source: https://" in human.stdout

    # the answer exists (exit 0), and it is that no build serves the GPU
    b200 = run_cli("matrix", "torch", "2.5.1", "--gpu", "B200")
    assert b200.returncode == 0
    assert b200.stdout.splitlines()[0].endswith("no CUDA build of this release serves this GPU")
    assert b200.stdout.count(": does not serve: no code for compute capability 10.0") == 3
    new = run_cli("matrix", "torch", "2.7.1", "--gpu", "B200")
    assert new.returncode == 0 and "minimum driver 570.26; builds that serve it: cu128" in new.stdout
    k80 = json.loads(run_cli("matrix", "torch", "2.5.1", "--gpu", "K80", "--json", "-").stdout)
    assert [b["serves"] for b in k80["builds"]] == [True, False, False]

    unknown_gpu = run_cli("matrix", "torch", "2.5.1", "--gpu", "Radeon")
    assert unknown_gpu.returncode == 1 and unknown_gpu.stderr.startswith("dl-doctor: no gpu entry for 'Radeon'")
    no_build = run_cli("matrix", "torch", "2.5.1+cu130", "--gpu", "H100")
    assert no_build.returncode == 1
    assert no_build.stderr.strip() == ("dl-doctor: no build '2.5.1+cu130' in the matrix; builds of this release: "
                                       "2.5.1+cu118, 2.5.1+cu121, 2.5.1+cu124")
    unknown_torch = run_cli("matrix", "torch", "2.5.9", "--gpu", "H100")
    assert unknown_torch.returncode == 1
    assert unknown_torch.stderr.strip() == "dl-doctor: no torch entry for '2.5.9' in the matrix; closest: 2.5.1, 2.5.0, 2.4.1"
    # without --gpu: the release's own answer, as before
    plain = json.loads(run_cli("matrix", "torch", "2.5.1", "--json", "-").stdout)
    assert "builds" not in plain and plain["cuda_variants"] == ["11.8", "12.1", "12.4"]

    # a site's own image notes, through an overlay, validated like the built-in table
    overlay = _write(tmp_path, IMAGE_OVERLAY, "images.toml")
    site = json.loads(run_cli("matrix", "torch", "2.7.1", "--gpu", "B200", "--json", "-",
                              "--matrix-overlay", overlay).stdout)
    mine = [i for i in site["images"] if i["release"] == "25.06-site"]
    assert mine and mine[0]["satisfies"] is True and mine[0]["min_driver"] == "575.51.03"   # CUDA 12.9's floor
    stated = next(i for i in site["images"] if i["release"] == "25.07-site")
    assert stated["min_driver"] == "580" and "its release notes" in stated["why"]           # the floor it states
    assert stated["torch_match"] == "exact"
    bad = _write(tmp_path, IMAGE_OVERLAY.replace('kind = "ngc"', 'kind = "docker"'), "bad-images.toml")
    assert run_cli("matrix", "validate", bad).returncode == 1


def test_cli_validate(run_cli, tmp_path):
    good = _write(tmp_path, OVERLAY, "good.toml")
    ok = run_cli("matrix", "validate", good)
    assert ok.returncode == 0 and "valid" in ok.stdout
    bad = _write(tmp_path, 'schema_version = 1\n[[toolkit]]\nversion = "x"\n[[gpux]]\n', "bad.toml")
    r = run_cli("matrix", "validate", bad)
    assert r.returncode == 1
    lines = r.stdout.strip().splitlines()
    assert len(lines) >= 3 and all(l.startswith("bad.toml") for l in lines)
    assert run_cli("matrix", "validate").returncode == 0
    broken_run = run_cli("run", "--matrix-overlay", bad)
    assert broken_run.returncode == 2 and "invalid compatibility matrix: bad.toml" in broken_run.stderr
    assert len(broken_run.stderr.strip().splitlines()) == 1


def test_the_json_snapshot_is_built_from_the_toml_files_as_they_are():
    """compat_matrix/data/builtin.json must be rebuilt (tests/tools/make_matrix_snapshot.py) after any TOML edit."""
    import json as _json
    from importlib import resources

    from dl_doctor import compat_matrix as cm

    snap = _json.loads(resources.files("dl_doctor.compat_matrix").joinpath("data/builtin.json").read_text())
    assert snap["digest"] == cm.builtin_digest(), "run: python tests/tools/make_matrix_snapshot.py"
    fresh = cm.build_snapshot()
    assert snap == _json.loads(_json.dumps(fresh)), "run: python tests/tools/make_matrix_snapshot.py"
    from_snapshot = cm._builtin_from_snapshot()
    from_toml, errors = cm._load_documents([], True, use_snapshot=False)
    assert not errors and [(d.tables, d.sources) for d in from_snapshot] == [(d.tables, d.sources) for d in from_toml]


def test_a_stale_snapshot_is_not_used(tmp_path, monkeypatch):
    from dl_doctor import compat_matrix as cm

    files = cm.builtin_files()
    copy = tmp_path / "cuda.toml"
    copy.write_text(open(next(f for f in files if f.endswith("cuda.toml"))).read() + "\n# edited\n")
    monkeypatch.setattr(cm, "builtin_files", lambda: sorted([f for f in files if not f.endswith("cuda.toml")]
                                                             + [str(copy)]))
    assert cm._builtin_from_snapshot() is None
