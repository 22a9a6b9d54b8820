"""One bounded tar reader (dl_doctor.facts.tarball) for every archive given as input: a support bundle read by
check/diff/report, and a tarball of node reports read by fleet. One set of limits, checked on each member's header
before the member is read or skipped."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from dl_doctor.facts import tarball
from dl_doctor.integrations import bundle, fleet


def _tar(path, entries, mode="w"):
    with tarfile.open(path, mode) as tar:
        for name, data, size in entries:
            info = tarfile.TarInfo(name)
            info.size = size if size is not None else len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


def test_bundle_and_fleet_share_the_reader_each_with_its_limits(tmp_path, monkeypatch):
    report = json.dumps({"fleet_node": {"version": "1", "identity": {"hostname": "n1"}, "compare": {},
                                        "failing": []}}).encode()
    many = _tar(tmp_path / "many.tar", [(f"b/x{n}", b"", None) for n in range(6)] +
                [("b/facts.json", b"{}", None), ("b/report.json", report, None)])
    monkeypatch.setattr(tarball, "MAX_MEMBERS", 5)
    with pytest.raises(bundle.BundleError, match=r"many.tar has more than 5 members before facts.json; not a "):
        bundle.read_member(many, "facts.json")
    assert [n.name for n in fleet.gather([many]).nodes] == ["n1"]  # a fleet tarball has a fleet's room
    monkeypatch.setattr(tarball, "FLEET_MAX_MEMBERS", 5)
    got = fleet.gather([many])
    assert not got.nodes and got.unreadable == [
        {"source": many, "error": "more than 5 members; the rest was not read"}]
    monkeypatch.setattr(tarball, "MAX_MEMBERS", 20_000)
    monkeypatch.setattr(tarball, "FLEET_MAX_MEMBERS", 50_000)
    assert bundle.read_member(many, "facts.json") == {} and [n.name for n in fleet.gather([many]).nodes] == ["n1"]


def test_a_declared_huge_member_is_refused_from_its_header_before_it_is_skipped(tmp_path, monkeypatch):
    """The bundle reader checked only where a member starts: a member declaring 1 GiB in front of facts.json was
    skipped (inflated, for a compressed archive) before the limit was seen. Now, as fleet did, it stops at the
    header whose member ends past the limit."""
    path = tmp_path / "huge.tar"
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("b/raw/blob")
        info.size = 1 << 30
        tar.addfile(info)  # a header only: the archive is cut, and never read that far
    monkeypatch.setattr(tarball, "MAX_BYTES", 1 << 20)
    with pytest.raises(bundle.BundleError, match="facts.json not found in the first 1 MiB"):
        bundle.read_member(str(path), "facts.json")


def test_the_limits_are_one_set():
    assert (tarball.MAX_MEMBERS, tarball.MAX_BYTES) == (20_000, 256 << 20)
    assert (tarball.FLEET_MAX_MEMBERS, tarball.FLEET_MAX_BYTES) == (50_000, 16 << 30)  # as fleet had before
    assert not hasattr(fleet, "MAX_TAR_MEMBERS") and not hasattr(bundle, "MAX_READ_MEMBERS")
    assert bundle.is_bundle.__module__ == "dl_doctor.integrations.bundle" and tarball.is_tar(__file__) is False
