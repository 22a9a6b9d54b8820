"""Real-wheel environments recorded as trees (tests/tools/record_env_tree.py), so CI, which builds none of them,
still holds them to the gate of tests/e2e/test_real_wheel_envs.py (issue 25, item 5).

tests/fixtures/envs/NAME.json (.json.gz above 300 KB) is what dl-doctor reads in the real environment NAME (its .dist-info files, framework
version files, and every ELF object's dynamic section), recorded from the environments in
~/.cache/dl-doctor-test-envs (jax-cuda12: a complete ``pip install 'jax[cuda12]'`` (jax 0.10.2); tf-cuda12: a
complete ``pip install 'tensorflow[and-cuda]'`` (TensorFlow 2.21.0); both built by hand and recorded 2026-12-02; the others: tests/setup_torch_envs.sh's and tests/setup_framework_envs.sh's). The builder writes it back as a venv in a sysroot tree
with real ELF objects (tests/elfkit.py). Where the real environment is on this machine, the round trip is checked:
the tree's consumer model is the real environment's.
Re-record with: python tests/tools/record_env_tree.py ~/.cache/dl-doctor-test-envs/NAME tests/fixtures/envs/NAME.json
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from dl_doctor.facts.loading import env_consumers

from elfkit import write_elf

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from record_env_tree import build, load, record  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "envs"
ENVS = Path(os.environ.get("DL_DOCTOR_TEST_ENVS", Path.home() / ".cache" / "dl-doctor-test-envs"))
RECORDED = sorted(p.name.split(".json")[0] for p in FIXTURES.glob("*.json*"))
# env -> {check id: status} expected at warn or fail (tests/e2e/test_real_wheel_envs.py EXPECTED: the tree is the
# environment on a host with no CUDA library of its own, which torch-ort-cu130's real host has in ld.so.cache)
EXPECTED = {
    "jax-cuda12": {}, "torch-2.14.1-cu130": {}, "tf-cuda12": {},
    "ort-1.22.0-cu12": {"DLD-PY-011": "fail"}, "cupy-14.2.0-cu12": {"DLD-PY-011": "fail"},
    "ct2-4.8.5": {"DLD-PY-011": "fail"},  # --no-deps: without their CUDA wheels
    "torch-ort-cu130": {"DLD-PY-011": "warn"},  # onnxruntime finds the wheels after preload_dlls() / import torch
    "torch-ort12-cu130": {"DLD-PY-011": "fail", "DLD-PY-012": "warn"},  # a CUDA 12 provider beside CUDA 13 torch
}
# the consumers each tree must show
CONSUMERS = {"jax-cuda12": {"jax-cuda12-pjrt"}, "torch-2.14.1-cu130": {"torch"}, "tf-cuda12": {"tensorflow"},
             "ort-1.22.0-cu12": {"onnxruntime-gpu"}, "cupy-14.2.0-cu12": {"cupy-cuda12x"}, "ct2-4.8.5": {"ctranslate2"},
             "torch-ort-cu130": {"torch", "onnxruntime-gpu"}, "torch-ort12-cu130": {"torch", "onnxruntime-gpu"}}


def _fixture(name: str) -> dict:
    return load(next(FIXTURES.glob(f"{name}.json*")))


def _run(run_cli, root: Path) -> dict:
    r = run_cli("run", "--sysroot", str(root), "--json", "-", "--fail-on", "never", timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _env(report: dict, prefix: str) -> dict:
    return next(e for e in report["facts"]["python_envs"]["environments"] if e["prefix"] == prefix)


def test_the_recorded_fixtures_are_there():
    assert set(EXPECTED) <= set(RECORDED), RECORDED
    for name in RECORDED:
        assert (FIXTURES / f"{name}.json.gz").exists() or (FIXTURES / f"{name}.json").stat().st_size < 300_000


@pytest.mark.parametrize("name", RECORDED)
def test_a_recorded_environment_tree_has_only_its_listed_findings(run_cli, tmp_path, name):
    root = tmp_path / "tree"
    prefix = "/" + str(build(_fixture(name), root).relative_to(root))
    report = _run(run_cli, root)
    env = _env(report, prefix)
    consumers = {c["distribution"]: c for c in env_consumers(report["loading"], env)}
    assert CONSUMERS[name] <= set(consumers), sorted(consumers)
    for c in consumers.values() if not EXPECTED[name] else ():  # a healthy one: every library found, its own
        assert not c["missing"] and c["libraries"], (c["distribution"], c["missing"])
        assert all(lib["path"].startswith(prefix + "/") for lib in c["libraries"]), c["libraries"]
    got = {f["id"]: f["status"] for f in report["findings"]
           if f["id"].startswith("DLD-PY-") and f["status"] in ("warn", "fail")}
    assert got == EXPECTED[name], {f["id"]: f["message"] for f in report["findings"] if f["id"] in got}


def _consumer_view(report: dict, env: dict) -> dict:
    """The consumers with their loading (the one resolution model) and the frameworks, with the environment's
    prefix taken out of every path."""
    prefix = env["prefix"]
    text = json.dumps({"consumers": env_consumers(report["loading"], env), "frameworks": env.get("frameworks")},
                      sort_keys=True)
    return json.loads(text.replace(prefix + "/", "PREFIX/"))


@pytest.mark.parametrize("name", RECORDED)
def test_a_recorded_tree_reads_as_the_real_environment(run_cli, tmp_path, name):
    """The recorder's round trip, where the real environment is on this machine: recorded again now and built
    back, the tree gives the consumer model (every library's path, how it was found, its version and owner), the
    frameworks and the torch resolution that the real environment gives."""
    real = ENVS / name
    if not (real / "bin" / "python").exists():
        pytest.skip(f"no {name} environment at {ENVS}")
    r = run_cli("run", "--no-env-scan", "--python", str(real / "bin" / "python"), "--json", "-", "--fail-on",
                "never", timeout=300)
    truth_report = json.loads(r.stdout)
    truth = next(e for e in truth_report["facts"]["python_envs"]["environments"] if e.get("role") == "requested")
    host = sorted({lib["path"] for c in env_consumers(truth_report["loading"], truth) for lib in c["libraries"]
                   if not lib["path"].startswith(str(real) + "/")})
    if host:
        pytest.skip(f"this machine provides {', '.join(host)} to the environment (the tree is the environment on a "
                    f"host without them)")
    spec = record(real)
    root = tmp_path / "tree"
    prefix = "/" + str(build(spec, root).relative_to(root))
    tree_report = _run(run_cli, root)
    tree = _env(tree_report, prefix)
    assert _consumer_view(tree_report, tree) == _consumer_view(truth_report, truth)
    # and where this environment holds the recorded distributions, the fixture is this recording
    fixture = _fixture(name)
    if sorted(p for p in fixture["texts"] if p.endswith("/METADATA")) == \
            sorted(p for p in spec["texts"] if p.endswith("/METADATA")):
        assert fixture["elf"] == spec["elf"] and fixture["texts"] == spec["texts"]


def _older_nvjitlink_tree(tmp_path: Path) -> tuple:
    """The recorded torch 2.14.1 cu130 venv with an older CUDA 13.0 toolkit's libnvJitLink (13.0.39; the wheel's
    is 13.5.37) on LD_LIBRARY_PATH: issue 25's case, in a tree."""
    root = tmp_path / "tree"
    prefix = build(_fixture("torch-2.14.1-cu130"), root, {"LD_LIBRARY_PATH": "/usr/local/cuda-13.0/lib64"})
    lib64 = root / "usr/local/cuda-13.0/lib64"
    write_elf(lib64 / "libnvJitLink.so.13.0.39", soname="libnvJitLink.so.13", needed=["libc.so.6"],
              verdef=["libnvJitLink.so.13", "libnvJitLink.so.13"])
    (lib64 / "libnvJitLink.so.13").symlink_to("libnvJitLink.so.13.0.39")
    return root, "/" + str(prefix.relative_to(root))


def test_an_older_nvjitlink_on_ld_library_path_is_not_what_torch_loads(run_cli, tmp_path):
    """torch 2.14's _preload_cuda_deps loads the wheel's libnvJitLink by absolute path before anything needs it by
    name (the real import maps it: tests/e2e/test_real_wheel_envs.py): DLD-PY-004 says so."""
    root, prefix = _older_nvjitlink_tree(tmp_path)
    report = _run(run_cli, root)
    env = _env(report, prefix)
    wheel = f"{prefix}/lib/python3.11/site-packages/nvidia/cu13/lib/libnvJitLink.so.13"
    torch = next(c for c in env_consumers(report["loading"], env) if c["distribution"] == "torch")
    assert {lib["soname"]: lib["path"] for lib in torch["libraries"]}["libnvJitLink.so.13"] == wheel
    assert env["loader"]["ld_library_path"] == ["/usr/local/cuda-13.0/lib64"]
    assert next(f for f in report["findings"] if f["id"] == "DLD-PY-004")["status"] == "pass"


def test_an_older_nvjitlink_on_ld_library_path_is_no_py012_finding_in_a_tree(run_cli, tmp_path):
    root, prefix = _older_nvjitlink_tree(tmp_path)
    report = _run(run_cli, root)
    env = _env(report, prefix)
    torch = next(c for c in env_consumers(report["loading"], env) if c["distribution"] == "torch")
    wheel = f"{prefix}/lib/python3.11/site-packages/nvidia/cu13/lib/libnvJitLink.so.13"
    assert {lib["soname"]: lib["path"] for lib in torch["libraries"]}["libnvJitLink.so.13"] == wheel
    finding = next(f for f in report["findings"] if f["id"] == "DLD-PY-012")
    assert finding["status"] == "pass", finding["message"]
