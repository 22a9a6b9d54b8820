"""`dl-doctor fleet`: recorded node reports with planted differences (one node on another driver, one with another
NCCL setting, one failing), merged through the installed CLI; the fast path (the fleet section at the head of each
report) against the slow one (a whole report or a facts file)."""

from __future__ import annotations

import json
import tarfile

import pytest

import machines
from dl_doctor.integrations import fleet
from dl_doctor.facts.validate import InputError



def _env_block(env):
    return b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())


@pytest.fixture(scope="module")
def node_reports(tmp_path_factory, request):
    """Five p5 nodes: node-3 runs another driver, node-4 another NCCL_SOCKET_IFNAME, node-5 lost its fabric manager
    unit and so fails; the others agree."""
    from conftest import CliRunner, build_tree

    run_cli = CliRunner(tmp_path_factory.mktemp("cli"), request)
    out = tmp_path_factory.mktemp("reports")
    for n in range(1, 6):
        driver = "550.127.05" if n == 3 else "550.54.15"
        spec = machines.p5_48xlarge() if n != 3 else _p5_with_driver(driver)
        host = f"node-{n}.cluster.internal"
        spec["proc/sys/kernel/hostname"] = spec["etc/hostname"] = host + "\n"
        env = {"PATH": "/usr/bin", "NCCL_SOCKET_IFNAME": "ens" if n != 4 else "eth0", "FI_PROVIDER": "efa"}
        spec["proc/self/environ"] = _env_block(env)
        if n == 5:
            for key in [k for k in spec if "fabricmanager" in k]:
                del spec[key]
        root = build_tree(tmp_path_factory.mktemp(f"node{n}"), spec)
        r = run_cli("run", "--sysroot", str(root), "--json", str(out / f"node-{n}.json"), "--html", "/dev/null",
                    "--fail-on", "never", timeout=300)
        assert r.returncode == 0, r.stderr
    return out


def _p5_with_driver(driver):
    spec = machines.p5_48xlarge()
    text = json.dumps({k: (v if isinstance(v, (str, dict)) else None) for k, v in spec.items()})
    assert "550.54.15" in text
    new = {}
    for k, v in spec.items():
        k2 = k.replace("550.54.15", driver)
        if isinstance(v, str):
            v = v.replace("550.54.15", driver)
        elif isinstance(v, dict) and "symlink" in v:
            v = {"symlink": v["symlink"].replace("550.54.15", driver)}
        elif isinstance(v, bytes) and k.endswith(".ko.xz"):
            v = machines.lzma.compress(machines.module_blob(driver, k.split("/")[2]))
        new[k2] = v
    return new


def _fleet(run_cli, *args):
    return run_cli("fleet", *map(str, args), timeout=300)


def test_the_odd_nodes_are_named_against_the_majority_in_text_json_and_html(run_cli, node_reports, tmp_path):
    r = _fleet(run_cli, node_reports, "--json", tmp_path / "f.json", "--html", tmp_path / "f.html")
    assert r.returncode == 1, r.stderr
    text = r.stdout
    assert "5 nodes in 1 group" in text
    assert "DIFFERS driver: 4 nodes have 550.54.15; node-3.cluster.internal = 550.127.05" in text
    assert "DIFFERS env.NCCL_SOCKET_IFNAME: 4 nodes have ens; node-4.cluster.internal = eth0" in text
    # the failing check with its headline (the problem), not a bare ID; a fact a node lacks is "unknown", not None
    assert ("FAIL DLD-GPU-004 The fabric manager is not running at the driver's version (1 node: "
            "node-5.cluster.internal)") in text
    assert "node-5.cluster.internal = unknown" in text and "None" not in text
    result = json.loads((tmp_path / "f.json").read_text())
    [group] = result["groups"]
    diffs = {d["fact"]: d for d in group["differences"]}
    assert diffs["driver"]["majority"] == "550.54.15" and diffs["driver"]["odd"] == [
        {"node": "node-3.cluster.internal", "value": "550.127.05"}]
    assert diffs["env.NCCL_SOCKET_IFNAME"]["odd"] == [{"node": "node-4.cluster.internal", "value": "eth0"}]
    assert "env.FI_PROVIDER" not in diffs and "instance_type" not in diffs  # the same everywhere
    assert result["failing_by_check"]["DLD-GPU-004"] == ["node-5.cluster.internal"] and result["ok"] is False
    html = (tmp_path / "f.html").read_text()
    assert "<script" not in html and "node-3.cluster.internal" in html and "550.127.05" in html
    assert 'title="DLD-GPU-004 fails on node-5.cluster.internal"' in html


def test_agreeing_healthy_nodes_exit_0_and_bad_input_exits_2(run_cli, node_reports, tmp_path):
    for n in (1, 2):
        (tmp_path / f"node-{n}.json").write_bytes((node_reports / f"node-{n}.json").read_bytes())
    r = _fleet(run_cli, tmp_path)
    assert r.returncode == 0 and "OK: the nodes agree and none fails" in r.stdout, r.stdout
    (tmp_path / "empty").mkdir()
    r = _fleet(run_cli, tmp_path / "empty")
    assert r.returncode == 2 and "no dl-doctor report found" in r.stderr and "Traceback" not in r.stderr


def test_a_tarball_and_a_glob_and_slow_path_documents_merge_the_same(run_cli, node_reports, tmp_path):
    tar = tmp_path / "reports.tar.gz"
    with tarfile.open(tar, "w:gz") as t:
        for p in sorted(node_reports.glob("*.json")):
            t.add(p, arcname=f"run/{p.name}")
    a = json.loads(_fleet(run_cli, node_reports, "--json", "-").stdout)
    b = json.loads(_fleet(run_cli, tar, "--json", "-").stdout)
    c = json.loads(_fleet(run_cli, str(node_reports / "node-*.json"), "--json", "-").stdout)
    assert a["groups"] == b["groups"] == c["groups"]
    # a report without the fleet section (an older dl-doctor) is read whole and summarised the same way
    old = tmp_path / "old"
    old.mkdir()
    for p in node_reports.glob("*.json"):
        doc = json.loads(p.read_text())
        del doc["fleet_node"]
        (old / p.name).write_text(json.dumps(doc))
    d = json.loads(_fleet(run_cli, old, "--json", "-").stdout)
    assert d["groups"] == a["groups"] and d["failing_by_check"] == a["failing_by_check"]


def test_the_head_read_finds_the_section_and_a_cut_one_falls_back(node_reports):
    data = (node_reports / "node-3.json").read_bytes()
    assert data.find(b'\n  "fleet_node": ') < fleet.HEAD_BYTES
    section = fleet.read_section(data[:fleet.HEAD_BYTES])
    assert section["compare"]["driver"] == "550.127.05"
    cut = data[:data.find(b'\n  "fleet_node": ') + 40]  # the section cut mid-way: the whole file is read instead
    assert fleet.read_section(cut, lambda: data)["compare"]["driver"] == "550.127.05"
    with pytest.raises(InputError, match="not a JSON file"):  # the reason, for the list of skipped inputs
        fleet.read_section(b"not json", lambda: b"not json")
    assert fleet.read_section(b'{"kind": "something else"}') is None


def test_two_reports_with_one_host_name_stay_two_nodes(run_cli, node_reports, tmp_path):
    for n in (1, 2):
        doc = json.loads((node_reports / f"node-{n}.json").read_text())
        doc["fleet_node"]["identity"]["hostname"] = "[HOST-1]"  # --redact gives every host the same placeholder
        (tmp_path / f"r{n}.json").write_text(json.dumps(doc, indent=2))
    result = json.loads(_fleet(run_cli, tmp_path, "--json", "-").stdout)
    assert sorted(result["groups"][0]["nodes"]) == ["r1", "r2"]


def test_four_runs_of_one_host_are_named_by_their_files_with_headlines_and_plurals(run_cli, node_reports, tmp_path):
    """One host name in four reports (a.json..d.json: one host's runs, or a fleet whose names collide): each node is
    its file, as docs/clusters.md promises, not "gpu-7#1".."gpu-7#4"; a fact a node lacks or has empty reads as such
    (never None, never blank); a tie names the nodes of every value; one node is "1 node"."""
    picks = {"a": 1, "b": 2, "c": 3, "d": 5}  # c runs another driver; d lost its fabric manager and fails
    for name, n in picks.items():
        doc = json.loads((node_reports / f"node-{n}.json").read_text())
        section = doc["fleet_node"]
        section["identity"]["hostname"] = "gpu-7"
        section["compare"]["env.FI_EFA_USE_DEVICE_RDMA"] = "1" if name in "ab" else "0"   # two against two
        if name == "b":
            section["compare"]["env.NCCL_DEBUG"] = ""                                       # set, but empty
        (tmp_path / f"{name}.json").write_text(json.dumps(doc, indent=2))
    r = _fleet(run_cli, tmp_path, "--json", tmp_path / "f.json", "--html", tmp_path / "f.html")
    assert r.returncode == 1, r.stderr
    text = r.stdout
    result = json.loads((tmp_path / "f.json").read_text())
    assert result["groups"][0]["nodes"] == ["a", "b", "c", "d"]
    assert "#1" not in text and "gpu-7" not in text
    assert "4 nodes in 1 group" in text and "p5.48xlarge: 4 nodes" in text
    assert "DIFFERS driver: 3 nodes have 550.54.15; c = 550.127.05" in text
    assert "DIFFERS fabric_manager: 2 nodes have 550.54.15; c = 550.127.05; d = unknown" in text
    assert "DIFFERS env.NCCL_DEBUG: not set on 3 nodes; b = (empty)" in text
    assert "DIFFERS env.FI_EFA_USE_DEVICE_RDMA (no majority): a, b = 1; c = 0; d = 0" in text
    assert ("  FAIL DLD-GPU-004 The fabric manager is not running at the driver's version (1 node: d)"
            in text.splitlines())
    assert text.rstrip().endswith("NOT OK: 5 differing facts; 1 failing node")
    assert "None" not in text and " = ;" not in text and not any(l.rstrip().endswith("=") for l in text.splitlines())
    assert result["checks"]["DLD-GPU-004"] == {
        "headline": "The fabric manager is not running at the driver's version", "status": "fail"}
    html = (tmp_path / "f.html").read_text()
    assert "The fabric manager is not running at the driver&#39;s version" in html
    assert "None" not in html and ('<span class="mono">1</span> (2 nodes: no majority, <span class="mono">a</span>, '
                                   '<span class="mono">b</span>)') in html
    assert "<title>dl-doctor fleet — 4 nodes</title>" in html and ">unknown<" in html and ">(empty)<" in html
    # a group of one: "1 node", in the text and on the page
    one = tmp_path / "one"
    one.mkdir()
    (one / "a.json").write_bytes((tmp_path / "a.json").read_bytes())
    r = _fleet(run_cli, one, "--html", tmp_path / "one.html")
    assert "1 node in 1 group" in r.stdout and "p5.48xlarge: 1 node\n" in r.stdout
    page = (tmp_path / "one.html").read_text()
    assert "(1 node)" in page and "1 nodes" not in page and "<title>dl-doctor fleet — 1 node</title>" in page


def test_node_names_stay_apart_by_file_then_path_then_number():
    def node(host, source, file_name=None):
        section = {"identity": {"hostname": host}, "compare": {}, "failing": []}
        return fleet.Node(host or fleet._file_name(source), source, section,
                          fleet._file_name(source) if file_name is None else file_name)

    nodes = [node("gpu-7", "x/a.json"), node("gpu-7", "y/a.json"), node("gpu-8", "z/b.json"),
             node("gpu-9", "z/c.json"), node("gpu-9", "z/c.json"), node("n", "rank 1", ""), node("n", "rank 2", "")]
    assert fleet.unique_names(nodes) == ["x/a.json", "y/a.json", "gpu-8", "c#1", "c#2", "n#1", "n#2"]


def test_a_planted_nccl_library_version_is_named_against_the_majority(run_cli, node_reports, tmp_path):
    """One node's torch loads another NCCL than the other four (planted in the recorded reports' fleet sections)."""
    for p in sorted(node_reports.glob("node-[1234].json")):
        doc = json.loads(p.read_text())
        nccl = "2.18.1" if p.name == "node-2.json" else "2.21.5"
        doc["fleet_node"]["compare"]["python.pytorch.torch.libnccl"] = nccl
        (tmp_path / p.name).write_text(json.dumps(doc, indent=2))
    r = _fleet(run_cli, tmp_path, "--json", tmp_path / "f.json")
    assert "DIFFERS python.pytorch.torch.libnccl: 3 nodes have 2.21.5; node-2.cluster.internal = 2.18.1" in r.stdout
    diff = next(d for d in json.loads((tmp_path / "f.json").read_text())["groups"][0]["differences"]
                if d["fact"] == "python.pytorch.torch.libnccl")
    assert diff["majority"] == "2.21.5" and diff["odd"] == [{"node": "node-2.cluster.internal", "value": "2.18.1"}]


# -- inputs another user controls: each bad one is skipped with its reason, and the others are still compared ------


def _good_pair(node_reports, into):
    for n in (1, 2):
        (into / f"node-{n}.json").write_bytes((node_reports / f"node-{n}.json").read_bytes())


def _with_section(node_reports, section):
    doc = json.loads((node_reports / "node-1.json").read_text())
    doc["fleet_node"] = section
    return json.dumps(doc, indent=2)


def test_fifos_sockets_and_devices_are_skipped_without_blocking(run_cli, node_reports, tmp_path):
    import os
    import socket as sockets

    _good_pair(node_reports, tmp_path)
    os.mkfifo(tmp_path / "fifo.json")  # nobody writes it: opening it for reading would block forever
    listener = sockets.socket(sockets.AF_UNIX)
    listener.bind(str(tmp_path / "sock.json"))
    (tmp_path / "zero.json").symlink_to("/dev/zero")  # a link to a device: caught on the opened descriptor
    try:
        r = run_cli("fleet", str(tmp_path), str(tmp_path / "fifo.json"), "--json", str(tmp_path / "f.out"), timeout=60)
    finally:
        listener.close()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 nodes in 1 group" in r.stdout and "OK: the nodes agree" in r.stdout
    assert f"SKIPPED {tmp_path}/fifo.json: it is a FIFO, not a regular file" in r.stdout
    assert f"SKIPPED {tmp_path}/sock.json: it is a socket, not a regular file" in r.stdout
    assert f"SKIPPED {tmp_path}/zero.json: cannot read {tmp_path}/zero.json: it is a device" in r.stdout
    skipped = {u["source"]: u["error"] for u in json.loads((tmp_path / "f.out").read_text())["unreadable"]}
    assert "FIFO" in skipped[f"{tmp_path}/fifo.json"] and "socket" in skipped[f"{tmp_path}/sock.json"]


@pytest.mark.parametrize("name,content,reason", [
    ("list.json", lambda r: _with_section(r, []), "fleet_node is an array, not an object"),
    ("compare.json", lambda r: _with_section(r, {"compare": ["driver"]}), "fleet_node.compare is an array"),
    ("value.json", lambda r: _with_section(r, {"compare": {"driver": {"v": 1}}}),
     "fleet_node.compare.driver is an object, not a value"),
    ("failing.json", lambda r: _with_section(r, {"compare": {}, "failing": ["DLD-GPU-004"]}),
     "fleet_node.failing[0] is not a failing check"),
    ("identity.json", lambda r: _with_section(r, {"identity": "node-9"}), "fleet_node.identity is a string"),
    ("deep.json", lambda r: '{\n  "fleet_node": ' + "[" * 5000 + "]" * 5000 + "\n}", "nested too deeply"),
    ("many.json", lambda r: '{\n  "fleet_node": {"compare": {}, "x": [' + "[]," * 1_200_000 + "[]]}}",
     "more than 500000 values"),
    ("cut.json", lambda r: (r / "node-1.json").read_text()[:900], "not a JSON file"),
    ("facts.json", lambda r: json.dumps({"kind": "dl-doctor-facts", "facts": {"network": {"efa_devices": 7}}}),
     "its facts have an unexpected shape"),
])
def test_a_malformed_report_costs_only_itself(run_cli, node_reports, tmp_path, name, content, reason):
    """Each of these ended the whole comparison with "could not run: AttributeError" (or hung, or took gigabytes)."""
    _good_pair(node_reports, tmp_path)
    (tmp_path / name).write_text(content(node_reports))
    r = _fleet(run_cli, tmp_path, "--json", tmp_path / "f.out")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "could not run" not in r.stderr and "2 nodes in 1 group" in r.stdout
    [bad] = json.loads((tmp_path / "f.out").read_text())["unreadable"]
    assert bad["source"] == str(tmp_path / name) and reason in bad["error"], bad
    assert f"SKIPPED {tmp_path / name}: " in r.stdout and reason in r.stdout


def test_an_input_over_the_size_limit_is_refused_before_it_is_read(run_cli, node_reports, tmp_path):
    _good_pair(node_reports, tmp_path)
    with open(tmp_path / "huge.json", "wb") as fh:  # sparse: no disk used, and the head holds no section
        fh.truncate((64 << 20) + 1)
    r = _fleet(run_cli, tmp_path, "--json", "-")
    assert r.returncode == 0, r.stderr
    [bad] = json.loads(r.stdout)["unreadable"]
    assert bad["error"] == "the report is 67108865 bytes, over the 64 MiB limit for an input"


def test_only_bad_inputs_exit_2_naming_them_on_one_line(run_cli, tmp_path):
    import os

    os.mkfifo(tmp_path / "a.json")
    (tmp_path / "b.json").write_text('{"fleet_node": 1}')
    r = _fleet(run_cli, tmp_path)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "a.json: it is a FIFO" in r.stderr and "b.json: fleet_node is an integer, not an object" in r.stderr


def test_tarball_members_are_bounded_in_number_and_size(node_reports, tmp_path, monkeypatch):
    import io

    tar = tmp_path / "reports.tar"
    with tarfile.open(tar, "w") as t:
        for n in (1, 2):
            t.add(node_reports / f"node-{n}.json", arcname=f"run/node-{n}.json")
        big = tarfile.TarInfo("run/big.json")
        big.size = 3 << 20
        t.addfile(big, io.BytesIO(b" " * big.size))
        for n in range(20):
            t.addfile(tarfile.TarInfo(f"run/x{n}.txt"), io.BytesIO(b""))
    monkeypatch.setattr(fleet, "MAX_DOCUMENT_BYTES", 2 << 20)
    from dl_doctor.facts import tarball

    monkeypatch.setattr(tarball, "FLEET_MAX_MEMBERS", 10)
    got = fleet.gather([str(tar)])
    assert [n.source for n in got.nodes] == [f"{tar}:run/node-1.json", f"{tar}:run/node-2.json"]
    assert got.unreadable == [
        {"source": f"{tar}:run/big.json", "error": "3145728 bytes, over the 2 MiB limit"},
        {"source": str(tar), "error": "more than 10 members; the rest was not read"}]
    monkeypatch.setattr(tarball, "FLEET_MAX_MEMBERS", 1000)
    with tarfile.open(tar) as t:  # the limit falls inside the second report: it is neither read nor skipped
        second = t.getmember("run/node-2.json")
    monkeypatch.setattr(tarball, "FLEET_MAX_BYTES", second.offset_data + 10)
    got = fleet.gather([str(tar)])
    assert len(got.nodes) == 1 and got.unreadable == [
        {"source": str(tar), "error": "past the first 0 MiB of the archive; the rest was not read"}]


def test_the_nodes_together_are_bounded_too(node_reports, monkeypatch):
    """Each section is bounded, and so is their sum: past MAX_FLEET_CHARS a node is named as not compared, never
    held (200,000 inputs of 4,096 long facts each would otherwise all be kept)."""
    from dl_doctor.integrations import fleet

    whole = fleet.gather([str(node_reports)])
    assert len(whole.nodes) == 5 and not whole.unreadable
    one = whole.chars // 5
    monkeypatch.setattr(fleet, "MAX_FLEET_CHARS", one * 2 + one // 2)
    cut = fleet.gather([str(node_reports)])
    assert len(cut.nodes) == 2 and len(cut.unreadable) == 3
    assert all("not compared: the nodes before it already hold" in u["error"] for u in cut.unreadable)
    result = fleet.compare(cut)
    assert result["nodes"] == 2 and len(result["unreadable"]) == 3


def test_the_fabric_is_compared_across_nodes_a_port_down_and_a_narrow_link_stand_out():
    import copy
    from pathlib import Path

    from dl_doctor.facts.fleet_section import node_section

    base = json.loads((Path(__file__).parents[1] / "fixtures" / "checks" / "_links_p5_like.json").read_text())
    base["nvml"] = {"devices": [{"index": i, "nvlink": {"links": [{"link": k, "active": True} for k in range(18)]}}
                                for i in range(2)]}
    nodes = []
    for n in range(1, 5):
        facts = copy.deepcopy(base)
        if n == 2:
            facts["links"]["rdma_ports"][1]["state_code"] = 1
        if n == 3:
            facts["links"]["pci"][2]["width"] = 8
        if n == 4:
            facts["nvml"]["devices"][1]["nvlink"]["links"][5]["active"] = False
        section = node_section(facts, [])
        nodes.append(fleet.Node(name=f"node-{n}", source=f"node-{n}.json", section=section))
    assert nodes[0].section["compare"]["rdma.ports_active"] == "2 of 2"
    assert nodes[0].section["compare"]["rdma.rate_gbps"] == "100"
    result = fleet.compare(fleet.Fleet(nodes=nodes))
    diffs = {d["fact"]: d for g in result["groups"] for d in g["differences"]}
    assert diffs["rdma.ports_active"]["majority"] == "2 of 2"
    assert diffs["rdma.ports_active"]["odd"] == [{"node": "node-2", "value": "1 of 2"}]
    assert diffs["pcie.narrow_links"]["odd"] == [{"node": "node-3", "value": "1"}]
    assert diffs["nvlink.links_active"]["odd"] == [{"node": "node-4", "value": "35 of 36"}]
    assert "rdma.rate_gbps" not in diffs and not result["ok"]
