"""Host access: sysroot confinement, environment, commands."""

import errno
import os
import sys

import pytest

from dl_doctor.host import CommandUnavailable, Host, parse_environ_block


def test_absolute_symlink_resolves_inside_the_tree(tree):
    root = tree({"etc/real-hostname": "tree-host\n", "etc/hostname": {"symlink": "/etc/real-hostname"}})
    host = Host(sysroot=str(root))
    assert host.read_text("/etc/hostname") == "tree-host\n"


def test_symlink_to_etc_hostname_reads_the_trees_file_not_the_hosts(tree):
    # A link whose target exists on the real host must still resolve in the tree.
    root = tree({"etc/hostname": "image-host\n", "srv/name": {"symlink": "/etc/hostname"}})
    host = Host(sysroot=str(root))
    assert host.read_text("/srv/name") == "image-host\n"
    assert host.tree_path("/srv/name") == "/etc/hostname"


def test_absolute_symlink_to_a_file_only_on_the_real_host_is_missing(tree):
    assert os.path.exists("/etc/passwd")
    root = tree({"etc/passwd-link": {"symlink": "/etc/passwd"}})
    host = Host(sysroot=str(root))
    assert host.try_read("/etc/passwd-link") is None
    assert not host.exists("/etc/passwd-link")


def test_dotdot_cannot_climb_out_of_the_tree(tree):
    root = tree({"etc/os-release": "ID=tree\n", "a/up": {"symlink": "../../../../../../etc/os-release"}})
    host = Host(sysroot=str(root))
    assert host.read_text("/a/up") == "ID=tree\n"
    assert host.read_text("/../../../etc/os-release") == "ID=tree\n"


def test_relative_symlinks_and_directory_links(tree):
    root = tree({"usr/local/cuda-13.0/version.json": "{}", "usr/local/cuda": {"symlink": "cuda-13.0"},
                 "sys/bus/pci/devices/0000:00:1e.0": {"symlink": "../../../devices/pci0000:00/0000:00:1e.0"},
                 "sys/devices/pci0000:00/0000:00:1e.0/vendor": "0x10de\n"})
    host = Host(sysroot=str(root))
    assert host.read_text("/usr/local/cuda/version.json") == "{}"
    assert host.readlink("/usr/local/cuda") == "cuda-13.0"
    assert host.read_text("/sys/bus/pci/devices/0000:00:1e.0/vendor") == "0x10de\n"


def test_symlink_loop_is_an_error_not_a_hang(tree):
    root = tree({"a": {"symlink": "/b"}, "b": {"symlink": "/a"}})
    host = Host(sysroot=str(root))
    with pytest.raises(OSError) as err:
        host.resolve("/a/x")
    assert err.value.errno == errno.ELOOP
    assert host.try_read("/a") is None


def test_glob_lists_in_tree_paths(tree):
    root = tree({"lib/modules/4.18.0-477.el8.x86_64/extra/nvidia.ko": "", "lib/modules/5.14.0/x": "",
                 "lib/modules/.hidden/x": ""})
    host = Host(sysroot=str(root))
    assert host.glob("/lib/modules/*") == ["/lib/modules/4.18.0-477.el8.x86_64", "/lib/modules/5.14.0"]
    assert host.glob("/lib/modules/*/extra/nvidia*.ko") == ["/lib/modules/4.18.0-477.el8.x86_64/extra/nvidia.ko"]
    assert host.glob("/nope/*") == []


def test_sysroot_environment_comes_from_proc_self_environ(tree):
    root = tree({"proc/self/environ": b"PATH=/usr/bin\0CUDA_HOME=/usr/local/cuda\0EMPTY=\0"})
    host = Host(sysroot=str(root))
    assert host.environ() == {"PATH": "/usr/bin", "CUDA_HOME": "/usr/local/cuda", "EMPTY": ""}
    assert host.environ_known


def test_sysroot_without_environ_is_unknown_not_the_real_environment(tree):
    host = Host(sysroot=str(tree({})))
    assert host.environ() == {}
    assert not host.environ_known


def test_no_commands_under_a_sysroot(tree):
    host = Host(sysroot=str(tree({})))
    with pytest.raises(CommandUnavailable):
        host.run(["true"])
    assert host.which("sh") is None


def test_commands_time_out_and_are_recorded():
    host = Host(command_timeout=0.3)
    result = host.run([sys.executable, "-c", "import time; time.sleep(10)"])
    assert result.timed_out and result.returncode is None and not result.ok
    ok = host.run([sys.executable, "-c", "print('hi')"])
    assert ok.ok and ok.stdout == "hi\n"
    assert [r.timed_out for r in host.commands] == [True, False]


def test_sysroot_must_be_a_directory(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(NotADirectoryError):
        Host(sysroot=str(f))


def test_parse_environ_block_skips_malformed_items():
    assert parse_environ_block(b"A=1\0garbage\0\0B=x=y\0") == {"A": "1", "B": "x=y"}
