"""Running Python processes and the CUDA libraries they really mapped (live)."""

from __future__ import annotations

import ctypes.util
import json
import shutil
import subprocess
import sys
import time

import pytest

from dl_doctor.host import Host
from dl_doctor.probes import ProbeContext, Unavailable
from dl_doctor.probes.processes import mapped_cuda_libraries, python_processes_probe


def test_maps_parsing_keeps_cuda_family_libraries_once():
    maps = ("7f00-7f01 r-xp 00000000 08:01 1 /opt/conda/envs/t/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9\n"
            "7f01-7f02 r--p 00001000 08:01 1 /opt/conda/envs/t/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9\n"
            "7f02-7f03 r-xp 00000000 08:01 2 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
            "7f03-7f04 r-xp 00000000 08:01 3 /usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05\n"
            "7f04-7f05 rw-p 00000000 00:00 0 [heap]\n"
            "7f05-7f06 r-xp 00000000 08:01 4 /x/torch/lib/libcudart-9335f6a2.so.12\n")
    assert mapped_cuda_libraries(maps) == [
        "/opt/conda/envs/t/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9",
        "/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05", "/x/torch/lib/libcudart-9335f6a2.so.12"]


def test_a_running_python_process_shows_what_it_loaded(tmp_path):
    libm = ctypes.util.find_library("m")
    real = next((p for p in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6",
                             "/lib64/libm.so.6", "/usr/lib64/libm.so.6", "/lib/aarch64-linux-gnu/libm.so.6")
                 if libm and __import__("os").path.exists(p)), None)
    if real is None:
        pytest.skip("no libm to stand in for a CUDA library")
    fake = tmp_path / "libcudart.so.12"
    shutil.copy(real, fake)
    child = subprocess.Popen([sys.executable, "-c", f"import ctypes, time; ctypes.CDLL({str(fake)!r}); "
                              "print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        facts = python_processes_probe.func(ProbeContext(host=Host()))
        mine = next(p for p in facts["processes"] if p["pid"] == child.pid)
        assert str(fake) in mine["cuda_libraries"] and "ctypes.CDLL" in mine["cmdline"]
    finally:
        child.kill()
        child.wait()


def test_no_processes_under_a_sysroot(tmp_path):
    with pytest.raises(Unavailable):
        python_processes_probe.func(ProbeContext(host=Host(sysroot=str(tmp_path))))
