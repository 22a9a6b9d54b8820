"""The version inventory names GPUs with what the application supplies (reports never load the matrix) and says
which torch is a CPU build from the facts, not from a stored verdict."""

from __future__ import annotations

import subprocess
import sys

from dl_doctor.reports.inventory import gpu_ids, inventory

A100 = "NVIDIA A100 SXM4 40GB"


def _report(**facts):
    return {"facts": {"gpu_pci": {"gpu_count": 2, "devices": [{"kind": "gpu", "device_id": "20b0"},
                                                               {"kind": "gpu", "device_id": "20b0"},
                                                               {"kind": "nvswitch", "device_id": "1af1"}]},
                      **facts}}


def test_gpu_models_are_the_callers_and_the_id_is_kept_without_them():
    rows = dict(inventory(_report(), {"10de:20b0": A100}))
    assert rows["NVIDIA GPUs"] == f"2 × {A100} (10de:20b0)"
    assert dict(inventory(_report()))["NVIDIA GPUs"] == "2 × 10de:20b0"
    assert gpu_ids(_report()) == ["10de:20b0"]


def test_the_application_names_the_gpus_from_the_runs_matrix(tmp_path):
    from dl_doctor import app

    assert app.gpu_names(_report()) == {"10de:20b0": A100}
    assert app.gpu_names({"facts": {}}) == {}
    overlay = tmp_path / "acme.toml"
    overlay.write_text('schema_version = 1\n[sources.acme]\nurl = "https://wiki.example.com/gpus"\n\n[[gpu]]\n'
                       'name = "ACME X1"\npci_device_ids = ["2ffe"]\narchitecture = "Hopper"\n'
                       'class = "datacenter"\ncompute_capability = "9.0"\nsource = ["acme"]\n')
    report = {"facts": {"gpu_pci": {"devices": [{"kind": "gpu", "device_id": "2ffe"}]}}}
    assert app.gpu_names(report) == {}  # the built-in matrix does not know it: the ID alone is shown
    assert app.gpu_names(report, (str(overlay),)) == {"10de:2ffe": "ACME X1"}


def test_a_cpu_build_is_derived_not_read_from_a_stored_verdict():
    env = {"name": "pt", "kind": "conda", "prefix": "/opt/conda/envs/pt", "python_version": "3.10",
           "frameworks": {"torch": {"version": "2.1.2", "cuda": "12.1", "cpu_only": False}},
           "conda_packages": {"pytorch": "2.1.2 py3.10_cpu_0"}}
    rows = dict(inventory({"facts": {"python_envs": {"environments": [env]}}}))
    assert rows["Python env pt (conda)"].startswith("Python 3.10, torch 2.1.2 (CPU build)")
    env["frameworks"]["torch"].update(cpu_only=True)
    env["conda_packages"] = {"pytorch": "2.1.2 py3.10_cuda12.1_0"}
    rows = dict(inventory({"facts": {"python_envs": {"environments": [env]}}}))
    assert rows["Python env pt (conda)"].startswith("Python 3.10, torch 2.1.2 (CUDA 12.1)")


def test_reports_do_not_import_the_matrix():
    code = ("import sys; import dl_doctor.reports.inventory, dl_doctor.reports.html; "
            "print('dl_doctor.compat_matrix' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
