"""Fixes act on the machine that was inspected: every built-in fix, rendered for each target.

A fix is typed steps (write a file, install a package, reload a service...); the engine renders them for the
machine the facts describe. For an image (``--sysroot`` without /proc/mounts) and for a node seen through
``--host-root``, whatever changes something runs inside that root, and what needs the running system is only an
instruction (a comment); for a tree captured from another machine every line is an instruction for that machine.
Nothing is ever a bare command that would change the machine doing the inspection.
"""

from __future__ import annotations

import json
import shlex

import pytest

from conftest import FIXTURES, build_tree
from dl_doctor import compat_matrix, fixes, testing
from dl_doctor.model import Fix
from dl_doctor.registry import load_registry

MATRIX = compat_matrix.load(site=False)
BUILTIN = sorted((s for s in load_registry().checks if s.module.startswith("dl_doctor.checks.")), key=lambda s: s.id)
IMAGE = fixes.Target("image", root="/mnt/img")
NODE = fixes.Target("host-root", root="/host")
CAPTURED = fixes.Target("captured", host="gpu-node-7")


def _fixture_fixes():
    """The fix of every built-in check's fixture case that has one, as the check wrote it (for the live machine)."""
    out = []
    for spec in BUILTIN:
        for case in testing.load_cases(FIXTURES / "checks" / f"{spec.id}.json"):
            finding = testing.run_case(spec, case, MATRIX)
            if finding.fix is not None:
                out.append((f"{spec.id}:{case['name']}", finding.fix))
    return out


FIXES = _fixture_fixes()
SEPARATORS = {"|", "&&", "||", ";", "&"}


def _segments(line: str):
    """The simple commands of one rendered line (comments dropped), each as its words."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words, out = [], []
    for token in lexer:
        if token in SEPARATORS:
            out.append(words)
            words = []
        else:
            words.append(token)
    return out + [words]


def _acts_only_inside(line: str, root: str) -> bool:
    """Every command of ``line`` is harmless here (printf) or runs in ``root``; output goes only to /dev/null."""
    for words in _segments(line):
        for n, word in enumerate(words):
            if word in (">", ">>") and words[n + 1: n + 2] != ["/dev/null"]:
                return False
        if words[:1] == ["printf"]:
            continue
        inside = (words[:3] == ["sudo", "chroot", root] or words[:3] == ["sudo", "systemctl", f"--root={root}"]
                  or (words[:2] in (["sudo", "dnf"], ["sudo", "yum"]) and words[2:3] == [f"--installroot={root}"])
                  or words[:4] == ["sudo", "zypper", "--root", root])
        if not inside:
            return False
    return True


def test_the_fixtures_exercise_the_changing_step_kinds():
    """Not a vacuous test: the built-in fixes the fixtures produce hold every kind that changes a machine."""
    kinds = {s.kind for _, fix in FIXES for s in fix.steps}
    assert kinds >= {"write", "install", "service", "load-module", "root-command", "reboot", "initramfs",
                     "kernel-arg", "command"}, kinds


@pytest.mark.parametrize("name,fix", FIXES, ids=[n for n, _ in FIXES])
def test_every_builtin_fix_acts_on_the_inspected_machine(name, fix):
    assert fixes.for_target(fix, fixes.LIVE) is fix
    assert fix.commands == tuple(fixes.render_live(s) for s in fix.steps)
    for target in (IMAGE, NODE):
        out = fixes.for_target(fix, target)
        assert out.steps == fix.steps and len(out.commands) == len(fix.steps)
        for line in "\n".join(out.commands).splitlines():
            assert line.lstrip().startswith("#") or _acts_only_inside(line, target.root), (target.kind, line)
        for step, line in zip(out.steps, out.commands):
            unknown_manager = step.kind in ("install", "remove") and step.manager is None
            if step.kind in ("write", "edit", "module-option", "install", "remove", "kernel-arg", "initramfs",
                             "root-command") and not unknown_manager:
                assert target.root in line and not line.startswith("#"), (step, line)  # done, inside the root
            if step.kind in ("command", "load-module", "reboot") or (
                    step.kind == "service" and step.action not in ("enable", "disable", "mask", "unmask")):
                assert line.startswith("#"), (step, line)  # the running system's business: an instruction
    captured = fixes.for_target(fix, CAPTURED)
    for line in "\n".join(captured.commands).splitlines():
        assert line.startswith("#"), line
    assert all(c.startswith(("# on gpu-node-7: ", "#")) for c in captured.commands)


def test_the_report_carries_the_steps_beside_the_rendered_commands():
    fix = Fix("Harden sshd.", (fixes.write_file("/etc/ssh/sshd_config.d/00-hardening.conf", "PermitRootLogin no\n"),
                               fixes.service("reload", "sshd", check="sshd -t"), "nvidia-smi"))
    doc = fixes.for_target(fix, IMAGE).to_dict()
    assert doc["steps"] == [{"kind": "write", "path": "/etc/ssh/sshd_config.d/00-hardening.conf",
                             "content": "PermitRootLogin no\n"},
                            {"kind": "service", "names": ["sshd"], "action": "reload", "check": "sshd -t"},
                            {"kind": "command", "text": "nvidia-smi"}]
    assert doc["commands"] == [
        "printf 'PermitRootLogin no\\n' | sudo chroot /mnt/img tee /etc/ssh/sshd_config.d/00-hardening.conf >/dev/null",
        "# boot the image, then: sudo sshd -t && sudo systemctl reload sshd",
        "# boot the image, then: nvidia-smi"]


def test_a_plugins_free_text_fix_still_works_and_is_never_bare_off_the_live_machine():
    fix = Fix("Drain the node.", ("sudo scontrol update nodename=$(hostname) state=drain",))
    assert fix.commands == ("sudo scontrol update nodename=$(hostname) state=drain",)
    assert [s.kind for s in fix.steps] == ["command"]
    for target in (IMAGE, NODE, CAPTURED):
        assert all(c.startswith("#") for c in fixes.for_target(fix, target).commands)


def test_free_text_over_several_lines_stays_comments_everywhere():
    fix = Fix("x", ("kubectl apply -f - <<EOF\nkind: Pod\nEOF\rrm -rf /",))
    for target in (IMAGE, NODE, CAPTURED):
        lines = "\n".join(fixes.for_target(fix, target).commands).splitlines()
        assert len(lines) >= 3 and all(line.startswith("#") for line in lines), lines


def test_a_root_command_with_shell_syntax_is_kept_as_free_text():
    """``chroot DIR a && b`` would run b here: such a command is never rendered inside the root."""
    step = fixes.root_command("ldconfig && rm -rf /etc/ld.so.conf.d/x")
    assert step.kind == "command"
    assert fixes.render(step, IMAGE) == "# boot the image, then: sudo ldconfig && rm -rf /etc/ld.so.conf.d/x"


def test_package_steps_per_manager_act_on_the_tree():
    assert fixes.render(fixes.install("a", manager="dnf"), IMAGE) == "sudo dnf --installroot=/mnt/img install -y a"
    assert fixes.render(fixes.install("a", manager="yum"), NODE) == "sudo yum --installroot=/host install -y a"
    assert fixes.render(fixes.remove("a", manager="zypper"), IMAGE) == "sudo zypper --root /mnt/img remove -y a"
    assert fixes.render(fixes.install("a b", manager="apt"), IMAGE) == "sudo chroot /mnt/img apt-get install -y 'a b'"
    assert fixes.render(fixes.install("a", manager="pacman"), IMAGE) == \
        "# install with this distribution's package manager: a"
    assert fixes.render(fixes.service("enable", "x", now=True), IMAGE) == \
        "sudo systemctl --root=/mnt/img enable x   # it starts when the image boots"


def test_a_modprobe_option_and_the_initramfs_are_built_for_every_kernel_of_the_image():
    """dracut without a version builds for the kernel running here, not the image's."""
    assert fixes.render(fixes.initramfs("rhel"), IMAGE) == "sudo chroot /mnt/img dracut --force --regenerate-all"
    assert fixes.render(fixes.initramfs("debian"), IMAGE) == "sudo chroot /mnt/img update-initramfs -u -k all"
    assert fixes.render(fixes.module_option("nvidia", "NVreg_EnableGpuFirmware=0"), NODE) == (
        "printf 'options nvidia NVreg_EnableGpuFirmware=0\\n' | sudo chroot /host tee /etc/modprobe.d/nvidia.conf "
        ">/dev/null")


@pytest.mark.parametrize("hostname,shown", [("gpu-node-7.example.com", "gpu-node-7.example.com"),
                                            ("evil\nsudo rm -rf /", "the machine the tree was captured from"),
                                            ("gpu-node-7\n", "the machine the tree was captured from"),
                                            ("$(reboot)", "the machine the tree was captured from"),
                                            (7, "the machine the tree was captured from")])
def test_a_captured_tree_is_named_by_its_hostname_only_when_it_is_a_host_name(hostname, shown):
    target = fixes.target_of({"mode": "sysroot", "sysroot": "/srv/capture",
                              "facts": {"mounts": {}, "system": {"hostname": hostname}}})
    assert target == fixes.Target("captured", root="/srv/capture", host=shown)


def test_the_target_follows_the_facts():
    assert fixes.target_of({"mode": "live", "facts": {}}).live
    assert fixes.target_of({"mode": "sysroot", "sysroot": "/mnt/x", "facts": {}}) == fixes.Target("image", "/mnt/x")
    assert fixes.target_of({"mode": "host-root", "sysroot": "/host", "facts": {"mounts": {}}}) == \
        fixes.Target("host-root", "/host")


# --- the two reported commands, through the CLI: the sshd drop-in (tee) and the sshd reload ---

SSHD_TREE = {"etc/os-release": 'ID=ubuntu\nID_LIKE=debian\nVERSION_ID="22.04"\n', "usr/sbin/sshd": "",
             "etc/passwd": "root:x:0:0:root:/root:/bin/bash\n",
             "etc/ssh/sshd_config": "Include /etc/ssh/sshd_config.d/*.conf\nPermitRootLogin yes\n"
                                    "PasswordAuthentication yes\n"}


def _sshd_fix(run_cli, *args):
    r = run_cli("run", *args, "--only", "DLD-SEC-001", "--json", "-", "--fail-on", "never", "--no-env-scan",
                timeout=300)
    assert r.returncode == 0, r.stderr
    finding = json.loads(r.stdout)["findings"][0]
    assert finding["status"] == "fail", finding["message"]
    return finding["fix"]


def _assert_nothing_bare_changes_this_machine(commands, root):
    for line in commands:
        assert "sudo tee /etc" not in line and not line.startswith(("sudo systemctl reload", "sudo sshd")), line
        assert line.startswith("#") or _acts_only_inside(line, root), line


def test_sshd_hardening_under_sysroot_changes_the_image(run_cli, tmp_path):
    root = build_tree(tmp_path / "img", SSHD_TREE)
    fix = _sshd_fix(run_cli, "--sysroot", str(root))
    _assert_nothing_bare_changes_this_machine(fix["commands"], str(root))
    assert fix["commands"][0].endswith(f"| sudo chroot {root} tee /etc/ssh/sshd_config.d/00-hardening.conf >/dev/null")
    # Ubuntu's unit is ssh; nothing runs in an image, so the reload waits for its boot
    assert fix["commands"][1] == "# boot the image, then: sudo sshd -t && sudo systemctl reload ssh"
    assert [s["kind"] for s in fix["steps"]] == ["write", "service", "command"]


def test_sshd_hardening_under_host_root_changes_the_node(run_cli, tmp_path):
    root = build_tree(tmp_path / "node", SSHD_TREE)
    fix = _sshd_fix(run_cli, "--host-root", str(root))
    _assert_nothing_bare_changes_this_machine(fix["commands"], str(root))
    assert f"sudo chroot {root} tee /etc/ssh/sshd_config.d/00-hardening.conf" in fix["commands"][0]
    assert fix["commands"][1] == "# on the node: sudo sshd -t && sudo systemctl reload ssh"


def test_sshd_hardening_of_a_captured_tree_is_for_the_machine_it_came_from(run_cli, tmp_path):
    root = build_tree(tmp_path / "cap", {**SSHD_TREE, "proc/mounts": "/dev/root / ext4 rw 0 0\n",
                                         "etc/hostname": "gpu-node-7\n"})
    fix = _sshd_fix(run_cli, "--sysroot", str(root))
    assert all(c.startswith("#") for c in fix["commands"]), fix["commands"]
    assert fix["commands"][0].startswith("# on gpu-node-7: printf ")
    assert "captured from gpu-node-7" in fix["summary"]


def test_a_report_of_an_image_validates_with_its_steps_and_a_step_needs_a_kind():
    import copy

    import jsonschema

    from dl_doctor.engine import build_report, evaluate, utc_now
    from dl_doctor.reports import schema

    spec = next(s for s in BUILTIN if s.id == "DLD-DRV-004")
    case = next(c for c in testing.load_cases(FIXTURES / "checks" / "DLD-DRV-004.json") if c["expect"] == "fail")
    snap = testing.snapshot(case["facts"], mode="sysroot")
    report = build_report(snap, evaluate(snap, [spec], MATRIX), mode="sysroot", started_at=utc_now(), duration_s=0.1)
    fix = report["findings"][0]["fix"]
    assert [s["kind"] for s in fix["steps"]] == ["write", "initramfs", "reboot"]
    assert fix["commands"][0].endswith("| sudo chroot /mnt tee /etc/modprobe.d/blacklist-nouveau.conf >/dev/null")
    jsonschema.validate(report, schema())
    bad = copy.deepcopy(report)
    del bad["findings"][0]["fix"]["steps"][0]["kind"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema())


def test_a_step_of_an_unknown_kind_or_service_action_is_refused():
    with pytest.raises(ValueError):
        fixes.Step("format-disk")
    with pytest.raises(ValueError):
        fixes.service("isolate", "rescue.target")


def test_a_saved_report_read_again_keeps_its_steps(run_cli, tmp_path):
    """`report`, `why --report` and `diff` read a saved report through load_report: the steps survive, in shape."""
    from dl_doctor.app import load_report

    root = build_tree(tmp_path / "img", SSHD_TREE)
    out = tmp_path / "r.json"
    r = run_cli("run", "--sysroot", str(root), "--only", "DLD-SEC-001", "--json", str(out), "--html", "/dev/null",
                "--fail-on", "never", "--no-env-scan", "-q", timeout=300)
    assert r.returncode == 0, r.stderr
    saved = json.loads(out.read_text())["findings"][0]["fix"]
    doc = json.loads(out.read_text())
    doc["findings"][0]["fix"]["steps"].append({"kind": "write", "path": {"nested": "no"}, "names": ["a", 3]})
    doc["findings"][0]["fix"]["steps"].append("not a step")
    out.write_text(json.dumps(doc))
    fix = load_report(str(out))["findings"][0]["fix"]
    assert fix["steps"][:len(saved["steps"])] == saved["steps"]
    assert fix["steps"][len(saved["steps"]):] == [{"kind": "write", "names": ["a"]}]
