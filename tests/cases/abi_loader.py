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
