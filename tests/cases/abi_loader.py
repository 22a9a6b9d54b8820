"""Symbol versions against the copy that loads (issue 27, the ABI family): libstdc++ of a conda environment against
the system's, glibc too old for a wheel — each rebuilt with the real DT_VERNEED/DT_VERDEF of the objects involved,
and its healthy twin."""

from __future__ import annotations

import healthy
from cases import Machine, case

UBUNTU2004 = ('NAME="Ubuntu"\nVERSION="20.04.6 LTS (Focal Fossa)"\nID=ubuntu\nID_LIKE=debian\n'
              'PRETTY_NAME="Ubuntu 20.04.6 LTS"\nVERSION_ID="20.04"\nVERSION_CODENAME=focal\nUBUNTU_CODENAME=focal\n')


@case("pytorch-157709-conda-libstdcxx-link-missing")
def pytorch_157709(broken: bool) -> Machine:
    """A conda environment whose libstdcxx-ng left lib/libstdc++.so.6.0.34 without its libstdc++.so.6 link: the
    loader, finding no libstdc++.so.6 in the env's lib/, takes Ubuntu 20.04's (GLIBCXX up to 3.4.28) for
    conda-forge's torch, which needs GLIBCXX_3.4.30. Twin: the link is there."""
    spec = healthy.conda_forge_lab_server()
    spec["etc/os-release"] = UBUNTU2004
    libdir = healthy.LIBDIR["x86_64"]
    for key in [k for k in spec if k.startswith(f"{libdir}/libstdc++.so.6")]:
        del spec[key]
    healthy.glibc(spec, libdir, glibcxx="GLIBCXX_3.4.28")
    prefix = "opt/miniforge3/envs/pt"
    for key in [k for k in spec if k.startswith(f"{prefix}/lib/libstdc++.so")]:
        del spec[key]
    healthy.so(spec, f"{prefix}/lib", "libstdc++.so.6.0.34", "libstdc++.so.6",
               verdef=["libstdc++.so.6", "GLIBCXX_3.4"] + [f"GLIBCXX_3.4.{n}" for n in range(1, 34)]
               + ["CXXABI_1.3", "CXXABI_1.3.9", "CXXABI_1.3.15"])
    meta = next(k for k in spec if k.startswith(f"{prefix}/conda-meta/libstdcxx-ng-"))
    spec[meta] = spec[meta].replace("libstdc++.so.6.0.33", "libstdc++.so.6.0.34").replace("14.2.0", "15.1.0")
    site = f"{prefix}/lib/python3.11/site-packages"
    lib = f"{site}/torch/lib/libtorch_cuda.so"
    spec[lib] = spec[lib].replace(b"GLIBCXX_3.4.32", b"GLIBCXX_3.4.30")  # same length: the table stays valid
    if broken:
        del spec[f"{prefix}/lib/libstdc++.so.6"]
    return Machine(spec)


@case("xgrammar-821-manylinux-2-28-wheel-needs-glibcxx-3.4.29")
def xgrammar_821(broken: bool) -> Machine:
    """RHEL 8 (libstdc++ of GCC 8: GLIBCXX up to 3.4.25) with a venv of AppStream's python3.11: the xgrammar wheel
    tagged manylinux_2_28 links std::__cxx11::basic_ostringstream's GCC 11 constructor (GLIBCXX_3.4.29). Twin: a
    wheel whose objects need only what manylinux_2_28 allows."""
    spec = healthy.dlami_rhel8_p4d()
    spec["usr/bin/python3.11"] = healthy.elf(None, needed=("libpython3.11.so.1.0", "libc.so.6"))
    healthy.so(spec, "usr/lib64", "libpython3.11.so.1.0", "libpython3.11.so.1.0")
    spec["usr/lib64/python3.11/os.py"] = ""
    venv = "home/ec2-user/venv"
    spec[f"{venv}/pyvenv.cfg"] = "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.9\n"
    spec[f"{venv}/bin/python3"] = {"symlink": "/usr/bin/python3.11"}
    spec[f"{venv}/bin/python"] = {"symlink": "python3"}
    site = f"{venv}/lib/python3.11/site-packages"
    top = "GLIBCXX_3.4.29" if broken else "GLIBCXX_3.4.22"
    obj = healthy.elf(None, needed=("libstdc++.so.6", "libm.so.6", "libgcc_s.so.1", "libc.so.6"),
                      verneed={"libstdc++.so.6": ["GLIBCXX_3.4.21", top, "CXXABI_1.3.9"],
                               "libc.so.6": ["GLIBC_2.17", "GLIBC_2.2.5"]})
    version = "0.1.23" if broken else "0.1.24"
    healthy.dist(spec, site, "xgrammar", version, {
        "xgrammar/__init__.py": f"__version__ = '{version}'\n",
        "xgrammar/xgrammar_bindings.cpython-311-x86_64-linux-gnu.so": obj},
        requires=["pydantic", "torch>=1.10.0", "transformers>=4.38.0", "ninja"],
        tag="cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64")
    return Machine(spec)


CENTOS7 = ('NAME="CentOS Linux"\nVERSION="7 (Core)"\nID="centos"\nID_LIKE="rhel fedora"\nVERSION_ID="7"\n'
           'PRETTY_NAME="CentOS Linux 7 (Core)"\nANSI_COLOR="0;31"\nCPE_NAME="cpe:/o:centos:centos:7"\n')


@case("blake3-py-5-manylinux1-wheel-needs-glibc-2.18-on-centos7")
def blake3_py_5(broken: bool) -> Machine:
    """CentOS 7.7 (glibc 2.17) with a Python 3.8.2 built into /opt/python and a venv of it: blake3 0.1.4's wheel
    is tagged manylinux1 but its extension needs GLIBC_2.18 (a Rust toolchain's __cxa_thread_atexit_impl). Twin:
    blake3 built on the machine (needs only glibc 2.17's versions)."""
    spec = healthy.cpu_only()
    drop = [k for k in spec if k.startswith(("home/ubuntu/.venv", "var/lib/dpkg", "usr/lib/x86_64-linux-gnu/",
                                              "etc/ld.so.conf.d/x86_64"))]
    for k in drop:
        del spec[k]
    spec["etc/os-release"] = CENTOS7
    spec["etc/centos-release"] = "CentOS Linux release 7.7.1908 (Core)\n"
    spec["etc/ld.so.conf.d/libc.conf"] = "/usr/local/lib\n"
    glibc_versions = ["GLIBC_2.2.5"] + [f"GLIBC_2.{n}" for n in range(3, 18)]
    for name in ("libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1"):
        spec[f"usr/lib64/{name}"] = healthy.elf(name, needed=(), verdef=[name] + glibc_versions)
    spec["usr/lib64/libgcc_s.so.1"] = healthy.elf("libgcc_s.so.1", verdef=["libgcc_s.so.1", "GCC_3.0", "GCC_4.2.0"])
    spec["lib64"] = {"symlink": "usr/lib64"}
    spec["opt/python/3.8.2/bin/python3.8"] = healthy.elf(None, needed=("libpthread.so.0", "libdl.so.2", "libutil.so.1",
                                                                       "libm.so.6", "libc.so.6"))
    spec["usr/lib64/libutil.so.1"] = healthy.elf("libutil.so.1", verdef=["libutil.so.1", "GLIBC_2.2.5"])
    spec["opt/python/3.8.2/lib/python3.8/os.py"] = ""
    venv = "opt/util/py38"
    spec[f"{venv}/pyvenv.cfg"] = "home = /opt/python/3.8.2/bin\ninclude-system-site-packages = false\nversion = 3.8.2\n"
    spec[f"{venv}/bin/python3.8"] = {"symlink": "/opt/python/3.8.2/bin/python3.8"}
    spec[f"{venv}/bin/python"] = {"symlink": "python3.8"}
    site = f"{venv}/lib/python3.8/site-packages"
    needs = ["GLIBC_2.2.5", "GLIBC_2.3", "GLIBC_2.14"] + (["GLIBC_2.18"] if broken else [])
    obj = healthy.elf(None, needed=("libgcc_s.so.1", "libpthread.so.0", "libdl.so.2", "libc.so.6"),
                      verneed={"libc.so.6": needs, "libgcc_s.so.1": ["GCC_3.0"]})
    healthy.dist(spec, site, "blake3", "0.1.4", {"blake3.cpython-38-x86_64-linux-gnu.so": obj},
                 tag="cp38-cp38-manylinux1_x86_64" if broken else "cp38-cp38-linux_x86_64")
    spec["proc/self/environ"] = healthy.environ({"PATH": f"/{venv}/bin:/usr/local/bin:/usr/bin:/bin", "HOME": "/root",
                                                 "USER": "root", "VIRTUAL_ENV": f"/{venv}", "LANG": "en_US.UTF-8"})
    return Machine(spec)


@case("ragflow-4466-system-cuda-12.1-nvjitlink-on-ld-library-path")
def ragflow_4466(broken: bool) -> Machine:
    """LD_LIBRARY_PATH=/usr/local/cuda-12.1/lib64: that toolkit's libnvJitLink.so.12 (12.1) is found before the
    nvidia-nvjitlink-cu12 wheel's for the wheel's libcusparse.so.12, which needs nvJitLink symbols of its own minor
    ('__nvJitLinkAddData_12_1, version libnvJitLink.so.12'). Twin: LD_LIBRARY_PATH does not name the old toolkit."""
    spec = healthy.dlami_ubuntu2204_g5()
    healthy.so(spec, "usr/local/cuda-12.1/targets/x86_64-linux/lib", "libnvJitLink.so.12.1.105", "libnvJitLink.so.12",
               needed=["libc.so.6"])
    raw = spec["proc/self/environ"]
    env = dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)
    if broken:
        env["LD_LIBRARY_PATH"] = "/usr/local/cuda-12.1/lib64:"
    else:
        env.pop("LD_LIBRARY_PATH", None)
    spec["proc/self/environ"] = healthy.environ(env)
    return Machine(spec)


@case("pytorch-134929-conda-lib-nvjitlink-on-ld-library-path")
def pytorch_134929(broken: bool) -> Machine:
    """A notebook container whose /opt/conda/lib holds conda's libnvJitLink.so.12 of CUDA 12.1, and a notebook that
    sets LD_LIBRARY_PATH=/opt/conda/lib before importing torch: the wheel's libcusparse.so.12 (CUDA 12.4) takes
    that older nvJitLink. Twin: the notebook leaves LD_LIBRARY_PATH alone."""
    spec = healthy.docker_pytorch_nvidia_runtime()
    healthy.so(spec, "opt/conda/lib", "libnvJitLink.so.12.1.105", "libnvJitLink.so.12", needed=["libc.so.6"])
    healthy.conda_pkg(spec, "opt/conda", "cuda-nvjitlink", "12.1.105", "hd3aeb46_0", channel="nvidia",
                      files=["lib/libnvJitLink.so.12.1.105", "lib/libnvJitLink.so.12"])
    raw = spec["proc/self/environ"]
    env = dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)
    if broken:
        env["LD_LIBRARY_PATH"] = "/opt/conda/lib:" + env.get("LD_LIBRARY_PATH", "")
        env["CUDA_HOME"] = "/opt/conda"
    spec["proc/self/environ"] = healthy.environ(env)
    return Machine(spec)



OL79 = ('NAME="Oracle Linux Server"\nVERSION="7.9"\nID="ol"\nID_LIKE="fedora"\nVERSION_ID="7.9"\n'
        'PRETTY_NAME="Oracle Linux Server 7.9"\nCPE_NAME="cpe:/o:oracle:linux:7:9:server"\n')


@case("youtokentome-113-conda-env-on-oracle-linux-7")
def youtokentome_113(broken: bool) -> Machine:
    """Oracle Linux 7.9 (libstdc++ of GCC 4.8.5: GLIBCXX up to 3.4.19) and a conda environment with its own newer
    libstdc++ in lib/: youtokentome's extension (no RUNPATH) finds the system's, and needs GLIBCXX_3.4.20. Twin: the
    workaround of the thread, LD_LIBRARY_PATH=$CONDA_PREFIX/lib, so the environment's copy loads."""
    spec = healthy.cpu_only()
    for k in [k for k in spec if k.startswith(("home/ubuntu/.venv", "var/lib/dpkg", "usr/lib/x86_64-linux-gnu/",
                                              "etc/ld.so.conf.d/x86_64"))]:
        del spec[k]
    spec["etc/os-release"] = OL79
    spec["etc/oracle-release"] = "Oracle Linux Server release 7.9\n"
    glibc_versions = ["GLIBC_2.2.5"] + [f"GLIBC_2.{n}" for n in range(3, 18)]
    for name in ("libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1"):
        spec[f"usr/lib64/{name}"] = healthy.elf(name, needed=(), verdef=[name] + glibc_versions)
    healthy.so(spec, "usr/lib64", "libstdc++.so.6.0.19", "libstdc++.so.6",
               verdef=["libstdc++.so.6", "GLIBCXX_3.4"] + [f"GLIBCXX_3.4.{n}" for n in range(1, 20)]
               + ["CXXABI_1.3", "CXXABI_1.3.7"])
    spec["usr/lib64/libgcc_s.so.1"] = healthy.elf("libgcc_s.so.1", verdef=["libgcc_s.so.1", "GCC_3.0", "GCC_4.2.0"])
    spec["lib64"] = {"symlink": "usr/lib64"}
    prefix = "home/timothee/.conda/envs/tmp1"
    site = healthy.conda_env(spec, prefix, python="3.10.13", build="h955ad1f_0")
    obj = healthy.elf(None, needed=("libstdc++.so.6", "libm.so.6", "libgcc_s.so.1", "libc.so.6"),
                      verneed={"libstdc++.so.6": ["GLIBCXX_3.4", "GLIBCXX_3.4.9", "GLIBCXX_3.4.20", "CXXABI_1.3"],
                               "libc.so.6": ["GLIBC_2.2.5", "GLIBC_2.14"]})
    healthy.dist(spec, site, "youtokentome", "1.0.6", {
        "_youtokentome_cython.cpython-310-x86_64-linux-gnu.so": obj, "youtokentome/__init__.py": "",
        "youtokentome/youtokentome.py": "import _youtokentome_cython\n"},
        requires=["Click>=7.0"], tag="cp310-cp310-linux_x86_64")
    env = {"PATH": f"/{prefix}/bin:/usr/local/bin:/usr/bin:/bin", "HOME": "/home/timothee", "USER": "timothee",
           "CONDA_PREFIX": f"/{prefix}", "CONDA_DEFAULT_ENV": "tmp1", "LANG": "en_US.UTF-8"}
    if not broken:
        env["LD_LIBRARY_PATH"] = f"/{prefix}/lib"
    spec["proc/self/environ"] = healthy.environ(env)
    return Machine(spec)


UBUNTU1804 = ('NAME="Ubuntu"\nVERSION="18.04.6 LTS (Bionic Beaver)"\nID=ubuntu\nID_LIKE=debian\n'
              'PRETTY_NAME="Ubuntu 18.04.6 LTS"\nVERSION_ID="18.04"\nVERSION_CODENAME=bionic\nUBUNTU_CODENAME=bionic\n')


@case("pytorch-aarch64-16-torch-wheel-needs-glibc-2.28-on-ubuntu-18.04")
def pytorch_aarch64_16(broken: bool) -> Machine:
    """An aarch64 host on Ubuntu 18.04 (glibc 2.27) with a miniconda environment: the community torch 1.6.0 aarch64
    wheel's libtorch_python.so needs GLIBC_2.28. Twin: a torch 1.6.0 build whose objects need glibc 2.17's versions
    (the manylinux2014 build)."""
    spec = healthy.grace_hopper()
    spec["etc/os-release"] = UBUNTU1804
    libdir = healthy.LIBDIR["aarch64"]
    versions = [f"GLIBC_2.{n}" for n in range(17, 28)]
    for name in ("libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1"):
        spec[f"{libdir}/{name}"] = healthy.elf(name, needed=(), machine="aarch64", verdef=[name] + versions)
    prefix = "www/miniconda3/envs/vits"
    site = healthy.conda_env(spec, prefix, python="3.7.10", machine="aarch64", build="h10a5ad8_0")
    plain = healthy.elf

    def elf(soname=None, needed=("libc.so.6",), machine="x86_64", **kw):
        if soname == "libtorch_python.so":
            kw["verneed"] = {"libc.so.6": ["GLIBC_2.17"] + (["GLIBC_2.28"] if broken else [])}
        return plain(soname, needed=needed, machine=machine, **kw)

    healthy.elf = elf
    try:
        healthy.torch(spec, site, "1.6.0", None, machine="aarch64", python_tag="37")
    finally:
        healthy.elf = plain
    # conda records the environments it creates (the first measurement's tree lacked this file: no check looked there)
    spec["home/ubuntu/.conda/environments.txt"] = "/www/miniconda3\n/www/miniconda3/envs/vits\n"
    return Machine(spec)
