"""The environments the user really uses, found from the session (issue: every CUDA consumer, part 1)."""

from __future__ import annotations

import json

from conftest import build_tree


def _conda(prefix: str) -> dict:
    return {f"{prefix.lstrip('/')}/conda-meta/history": "", f"{prefix.lstrip('/')}/lib/python3.11/site-packages/.keep": ""}


def _venv(prefix: str) -> dict:
    return {f"{prefix.lstrip('/')}/pyvenv.cfg": "home = /usr/bin\nversion = 3.11.7\n",
            f"{prefix.lstrip('/')}/bin/python3": "", f"{prefix.lstrip('/')}/lib/python3.11/site-packages/.keep": ""}


def test_session_environments_are_found_first_and_marked_active(run_cli, tmp_path):
    environ = {"CONDA_PREFIX": "/data/odd/place/train", "CONDA_PREFIX_1": "/srv/mc",
               "CONDA_EXE": "/srv/mc/bin/conda", "PATH": "/work/proj/.venv/bin:/usr/bin:/bin", "HOME": "/home/ana"}
    spec = {"etc/os-release": 'ID=ubuntu\nVERSION_ID="22.04"\nPRETTY_NAME="Ubuntu 22.04"\n',
            "proc/self/environ": "\0".join(f"{k}={v}" for k, v in environ.items()) + "\0",
            **_conda("/data/odd/place/train"), **_conda("/srv/mc"), **_conda("/srv/mc/envs/eval"),
            **_venv("/work/proj/.venv"),
            "home/ana/.condarc": "channels:\n  - conda-forge\nenvs_dirs:\n  - /scratch/envs\n  - ~/more-envs\n",
            **_conda("/scratch/envs/big"), **_conda("/home/ana/more-envs/small"),
            "usr/local/share/jupyter/kernels/kenv/kernel.json": json.dumps(
                {"argv": ["/data/kenv/bin/python", "-m", "ipykernel_launcher", "-f", "{connection_file}"]}),
            **_venv("/data/kenv"),
            **_venv("/home/ana/.local/share/pipx/venvs/black")}
    root = build_tree(tmp_path / "root", spec)
    r = run_cli("run", "--sysroot", str(root), "--json", "-", "--html", str(tmp_path / "r.html"), "--only",
                "DLD-PY-001")
    assert r.returncode in (0, 1), r.stderr
    envs = json.loads(r.stdout)["facts"]["python_envs"]["environments"]
    by_prefix = {e["prefix"]: e for e in envs}
    # the activated ones first, marked active, with how they were found
    assert [e["prefix"] for e in envs[:2]] == ["/data/odd/place/train", "/work/proj/.venv"]
    assert by_prefix["/data/odd/place/train"]["active"] and by_prefix["/data/odd/place/train"]["found_by"] == ["CONDA_PREFIX"]
    assert by_prefix["/work/proj/.venv"]["active"] and "PATH" in by_prefix["/work/proj/.venv"]["found_by"]
    assert not by_prefix["/srv/mc"]["active"]
    assert set(by_prefix["/srv/mc"]["found_by"]) >= {"CONDA_PREFIX_1", "CONDA_EXE"}
    assert by_prefix["/srv/mc/envs/eval"]["found_by"] == ["CONDA_EXE envs/"]
    assert by_prefix["/scratch/envs/big"]["found_by"] == ["envs_dirs in /home/ana/.condarc"]
    assert "/home/ana/more-envs/small" in by_prefix
    assert by_prefix["/data/kenv"]["found_by"] == ["Jupyter kernel kenv"]
    assert by_prefix["/home/ana/.local/share/pipx/venvs/black"]["found_by"] == ["pipx"]
    html = (tmp_path / "r.html").read_text()
    assert html.index("/data/odd/place/train") < html.index("/srv/mc/envs/eval")


def test_condarc_envs_dirs_forms():
    from dl_doctor.probes.python_envs import _condarc_envs_dirs

    assert _condarc_envs_dirs("envs_dirs:\n  - /a\n  - '~/b'\n# c\npkgs_dirs:\n  - /p\n") == ["/a", "~/b"]
    assert _condarc_envs_dirs("envs_dirs: [/x, \"/y\"]\n") == ["/x", "/y"]
    assert _condarc_envs_dirs("envs_dirs:\n  - relative/path\n") == []


def test_an_unprivileged_run_keeps_the_environments_it_can_see(tree):
    """Not root: another user's home cannot be listed. The probe keeps the rest and says what root would add."""
    from dl_doctor.host import Host
    from dl_doctor.probes import ProbeContext
    from dl_doctor.probes.python_envs import python_envs_probe

    root = tree({"etc/os-release": "ID=ubuntu\n", **_venv("/home/ana/work/.venv"), **_venv("/home/bob/.venv"),
                 "root/.conda/environments.txt": "/opt/x\n"})

    class Unprivileged(Host):
        def listdir(self, path):
            if path.startswith(("/root", "/home/bob")):
                raise PermissionError(13, "Permission denied", path)
            return super().listdir(path)

        def try_read(self, path, max_bytes=4 << 20):
            if path.startswith(("/root", "/home/bob")):
                raise PermissionError(13, "Permission denied", path)
            return super().try_read(path, max_bytes)

    ctx = ProbeContext(host=Unprivileged(sysroot=str(root)))
    facts = python_envs_probe.func(ctx)
    prefixes = [e["prefix"] for e in facts["environments"]]
    assert "/home/ana/work/.venv" in prefixes and "/home/bob/.venv" not in prefixes
    assert ctx.denials == ["the environments under /home/bob, /root"]
