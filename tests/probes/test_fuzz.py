"""Property-based tests (Hypothesis): hostile input never costs more than its own facts.

* every parser of a host file takes arbitrary text or bytes without raising (it may find nothing);
* `check`, `diff` and `expect --from` on mutated facts files and reports end as a report (0/1) or one clear line
  with exit 2 — never a traceback, "could not run" or "interrupted" — and what they write is valid UTF-8/JSON/TOML.

About 10,000 generated inputs a run, derandomized so CI is repeatable (the examples differ between the tests).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, List

import pytest

pytestmark = pytest.mark.slow
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from conftest import FIXTURES  # noqa: E402

try:
    import tomllib  # type: ignore[import-not-found]
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

FAST = settings(max_examples=400, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))
SLOW = settings(max_examples=700, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))

# Text with what real hostile files hold: control characters, escapes, lone surrogates (names that were not UTF-8),
# digits that are not ASCII, long runs of separators.
hostile_chars = st.one_of(st.characters(), st.sampled_from(list("\x00\x1b\n\r\t =:,;\"'[]{}()#/\\.-_²٣\udcff\u202e")))
hostile_text = st.text(hostile_chars, max_size=400) | st.builds(
    lambda unit, n: unit * n, st.text(hostile_chars, min_size=1, max_size=4), st.integers(1, 2000))
hostile_bytes = st.binary(max_size=600) | st.builds(lambda t: t.encode("utf-8", "surrogatepass"), hostile_text)


def _parsers():
    from dl_doctor.host import parse_environ_block
    from dl_doctor.probes import cuda, ebs, kernel_log, kmod, network, nvidia, python_envs, storage, system

    text = {
        "cuda_h_version": cuda.cuda_h_version, "parse_diskstats": ebs.parse_diskstats,
        "parse_grubenv": kmod.parse_grubenv, "parse_bls_entry": kmod.parse_bls_entry,
        "parse_dnf_module": kmod.parse_dnf_module, "parse_dpkg_status": kmod.parse_dpkg_status,
        "kernel_sort_key": kmod.kernel_sort_key, "parse_limits_conf": network.parse_limits_conf,
        "parse_installed_packages": network.parse_installed_packages, "parse_proc_version": nvidia.parse_proc_version,
        "parse_proc_modules": nvidia.parse_proc_modules, "parse_gpu_information": nvidia.parse_gpu_information,
        "parse_version_py": python_envs.parse_version_py, "torch_preload_model": python_envs.torch_preload_model,
        "parse_mounts": storage.parse_mounts, "parse_os_release": system.parse_os_release,
        "parse_meminfo": system.parse_meminfo,
        "parse_kernel_log": lambda t: kernel_log.parse_kernel_log(t.splitlines()),
        "current_boot": lambda t: kernel_log.current_boot(t.splitlines()),
        "tmpfs_size_option": lambda t: storage.tmpfs_size_option(t.split(","), 1 << 30),
    }
    binary = {"parse_modinfo": kmod.parse_modinfo, "find_modinfo": kmod._find_modinfo,
              "parse_environ_block": parse_environ_block, "parse_ebs_stats_page": ebs.parse_ebs_stats_page}
    return text, binary


TEXT_PARSERS, BINARY_PARSERS = _parsers()


@pytest.mark.parametrize("name", sorted(TEXT_PARSERS))
def test_text_parsers_take_any_text(name):
    func = TEXT_PARSERS[name]

    @FAST
    @given(hostile_text)
    def prop(text):
        func(text)

    prop()


@pytest.mark.parametrize("name", sorted(BINARY_PARSERS))
def test_binary_parsers_take_any_bytes(name):
    func = BINARY_PARSERS[name]

    @FAST
    @given(hostile_bytes)
    def prop(data):
        func(data)

    prop()


# -- check / diff / expect --from on mutated inputs ---------------------------------------------------------------------

json_scalars = (st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70) | st.integers(-3, 300)
                | st.floats(allow_nan=False, allow_infinity=False) | hostile_text)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(hostile_text, inner, max_size=4), max_leaves=12)


def _paths(doc: Any, prefix: List[Any], out: List[List[Any]], limit: int = 4000) -> None:
    if len(out) >= limit:
        return
    out.append(prefix)
    if isinstance(doc, dict):
        for k, v in doc.items():
            _paths(v, prefix + [k], out, limit)
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:6]):
            _paths(v, prefix + [i], out, limit)


BASES = {name: json.loads((FIXTURES / "snapshots" / f"{name}.json").read_text())
         for name in ("p4d_rhel8_healthy", "g5_ubuntu2204", "p4d_driver_upgrade_no_reboot")}
PATHS = {name: [] for name in BASES}
for _name, _doc in BASES.items():
    _paths(_doc, [], PATHS[_name])


def _set(doc: Any, path: List[Any], value: Any) -> Any:
    if not path:
        return value
    node = doc
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return doc


@st.composite
def mutated(draw):
    name = draw(st.sampled_from(sorted(BASES)))
    doc = copy.deepcopy(BASES[name])
    for _ in range(draw(st.integers(1, 3))):
        paths: List[List[Any]] = []
        _paths(doc, [], paths)
        path = draw(st.sampled_from(paths))
        doc = _set(doc, path, draw(json_values))
    return doc


def _cli(argv: List[str]) -> tuple:
    """The real command line, in-process (a subprocess per example would cost ten times more)."""
    from dl_doctor.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def _assert_clean(code: int, err: str) -> None:
    assert code in (0, 1, 2), (code, err)
    assert "could not run" not in err and "interrupted" not in err and "Traceback" not in err, err
    if code == 2:
        lines = [l for l in err.splitlines() if l.strip()]
        assert len(lines) == 1 and lines[0].startswith("dl-doctor: error: "), err


@pytest.fixture(scope="module")
def workdir():
    with tempfile.TemporaryDirectory(prefix="dld-fuzz-") as d:
        yield Path(d)


def _write(path: Path, doc: Any) -> None:
    path.write_text(json.dumps(doc, ensure_ascii=True), encoding="utf-8")


def test_check_never_crashes_on_a_mutated_facts_file(workdir):
    facts, out = workdir / "facts.json", workdir / "out"

    @SLOW
    @given(mutated())
    def prop(doc):
        _write(facts, doc)
        code, _, err = _cli(["check", str(facts), "-q", "--no-color", "--output-dir", str(out),
                             "--json", str(out / "r.json"), "--html", str(out / "r.html"), "--junit",
                             str(out / "r.xml"), "--prometheus", str(out / "r.prom"), "--status-line",
                             str(out / "status")])
        _assert_clean(code, err)
        if code in (0, 1):
            json.loads((out / "r.json").read_text(encoding="utf-8"))
            assert (out / "status").read_text(encoding="utf-8").count("\n") == 1

    prop()


def test_diff_and_expect_never_crash_on_mutated_inputs(workdir):
    base, cur, toml = workdir / "base.json", workdir / "cur.json", workdir / "expect.toml"
    _write(base, BASES["p4d_rhel8_healthy"])

    @FAST
    @given(mutated())
    def prop(doc):
        _write(cur, doc)
        code, _, err = _cli(["diff", str(base), str(cur)])
        _assert_clean(code, err)
        code, _, err = _cli(["expect", "--from", str(cur), "-o", str(toml)])
        _assert_clean(code, err)
        if code == 0:
            tomllib.loads(toml.read_text(encoding="utf-8"))

    prop()


@pytest.mark.parametrize("doc,field", [
    ({"gpu_pci": {"gpu_count": 10 ** 8}}, "facts.gpu_pci.gpu_count"),
    ({"system": []}, "facts.system"),
    ({"system": {"hostname": ["x"]}}, "facts.system.hostname"),
    ({"nvml": {"devices": "many"}}, "facts.nvml.devices"),
    ({"gpu_pci": {"gpu_count": 10 ** 40}}, "facts.gpu_pci.gpu_count"),
])
def test_malformed_facts_are_one_line_naming_the_field(workdir, doc, field):
    snap = copy.deepcopy(BASES["g5_ubuntu2204"])
    for probe, value in doc.items():
        if isinstance(value, dict) and isinstance(snap["facts"].get(probe), dict):
            snap["facts"][probe].update(value)
        else:
            snap["facts"][probe] = value
    path = workdir / "bad.json"
    _write(path, snap)
    code, _, err = _cli(["check", str(path), "-q", "--output-dir", str(workdir / "o")])
    assert code == 2 and field in err and len(err.strip().splitlines()) == 1, err


def test_nan_deep_nesting_and_lone_surrogates_in_inputs(workdir):
    path = workdir / "nan.json"
    text = json.dumps(BASES["g5_ubuntu2204"]).replace('"gpu_count": 1', '"gpu_count": NaN')
    assert "NaN" in text
    path.write_text(text)
    code, _, err = _cli(["check", str(path), "-q", "--output-dir", str(workdir / "o")])
    assert code == 2 and "NaN" in err
    path.write_text("[" * 100000 + "]" * 100000)
    code, _, err = _cli(["check", str(path), "-q", "--output-dir", str(workdir / "o")])
    assert code == 2 and "nested too deeply" in err
    # a lone surrogate (valid as a JSON escape, not as UTF-8) is written back as readable text
    snap = copy.deepcopy(BASES["g5_ubuntu2204"])
    snap["facts"]["system"]["hostname"] = "host\udcff\x1b[2J"
    _write(path, snap)
    code, out, err = _cli(["check", str(path), "--no-color", "--json", str(workdir / "s.json"),
                           "--html", str(workdir / "s.html")])
    assert code in (0, 1), err
    assert json.loads((workdir / "s.json").read_text())["host"]["hostname"] == "host\\xff\x1b[2J"
    assert "\x1b" not in out and "host\\xff\\x1b[2J" in out


def test_truncated_and_corrupt_bundles_are_exit_2_not_interrupted(workdir):
    import gzip
    import tarfile

    good = workdir / "good.tar.gz"
    with tarfile.open(good, "w:gz") as tar:
        data = json.dumps(BASES["g5_ubuntu2204"]).encode()
        info = tarfile.TarInfo("b/facts.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    raw = good.read_bytes()
    for name, blob in (("trunc.tar.gz", raw[: len(raw) // 2]), ("corrupt.tar.gz", raw[:20] + b"\0" * 200 + raw[220:])):
        bad = workdir / name
        bad.write_bytes(blob)
        code, _, err = _cli(["check", str(bad), "-q", "--output-dir", str(workdir / "o")])
        _assert_clean(code, err)
        assert code == 2, err
    # a tar with a huge number of members before any facts: bounded
    many = workdir / "many.tar"
    with tarfile.open(many, "w") as tar:
        for n in range(20050):
            info = tarfile.TarInfo(f"b/x{n}")
            tar.addfile(info, io.BytesIO(b""))
    code, _, err = _cli(["check", str(many), "-q", "--output-dir", str(workdir / "o")])
    assert code == 2 and "more than 20000 members" in err


def test_a_privilege_entry_without_its_fields_is_bad_input_not_a_crash(workdir):
    """Found by the mutation above: privilege.limited [{}] reached the HTML template, which needs both fields."""
    doc = json.loads(json.dumps(BASES["p4d_rhel8_healthy"]))
    doc["privilege"] = {"euid": 0, "is_root": True, "limited": [{}]}
    facts = workdir / "privilege.json"
    _write(facts, doc)
    code, _, err = _cli(["check", str(facts), "-q", "--html", str(workdir / "p.html")])
    assert code == 2 and err.strip() == f"dl-doctor: error: {facts}: privilege.limited[0].probe is missing"


# -- structured config redaction ----------------------------------------------------------------------------------------

from dl_doctor.redact import Redactor, looks_secret_name  # noqa: E402

SECRET_KEYS = ["password", "api_key", "token", "client_secret", "DB_PASS", "hashed_password", "auth.token",
               "my-secret", "PrivateKey", "credentials"]
plain_keys = st.from_regex(r"\A[a-z][a-z_]{0,7}\Z").filter(lambda k: not looks_secret_name(k))
config_text = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=10)
config_scalars = config_text | st.integers(-10 ** 6, 10 ** 6) | st.booleans()
configs = st.recursive(st.dictionaries(plain_keys, config_scalars, max_size=4),
                       lambda inner: st.dictionaries(plain_keys, inner | st.lists(config_scalars, max_size=3)
                                                     | st.lists(inner, max_size=2), max_size=4), max_leaves=20)
tokens = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=8, max_size=40).filter(
    lambda t: t.strip() == t and any(c.isalnum() for c in t) and "REDACTED" not in t)


def _toml_key(key: str) -> str:
    return json.dumps(key, ensure_ascii=False)


def _toml_value(value: Any, literal: bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return f"'{value}'" if literal and "'" not in value and "\n" not in value else json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v, literal) for v in value) + "]"
    return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v, literal)}" for k, v in value.items()) + "}"


def _toml(doc: Dict[str, Any], literal: bool, prefix: tuple = ()) -> List[str]:
    """A small TOML writer (the standard library only reads TOML): scalars first, then one table per mapping."""
    lines = [f"{_toml_key(k)} = {_toml_value(v, literal)}" for k, v in doc.items() if not isinstance(v, dict)]
    for k, v in doc.items():
        if isinstance(v, dict):
            lines.append("[" + ".".join(_toml_key(p) for p in prefix + (k,)) + "]")
            lines += _toml(v, literal, prefix + (k,))
    return lines


@FAST
@given(doc=configs, path=st.lists(st.tuples(plain_keys, st.booleans()), max_size=4),
       key=st.sampled_from(SECRET_KEYS), token=tokens, in_list=st.booleans(),
       form=st.sampled_from(["json", "json-ascii", "json-indent", "toml", "toml-literal"]))
def test_a_secret_keys_value_never_survives_in_a_structured_config(doc, path, key, token, in_list, form):
    """Wherever a secret-named key sits in a JSON or TOML config (nested in tables, in lists of tables) and however
    its value is written, the redacted file does not hold the value, and is still a file of its kind."""
    doc = copy.deepcopy(doc)
    here = doc
    for name, through_list in path:
        child: Dict[str, Any] = {}
        here[name] = [child] if through_list else child
        here = child
    here[key] = [token] if in_list else token
    if form.startswith("json"):
        text = json.dumps(doc, ensure_ascii=form == "json-ascii", indent=2 if form == "json-indent" else None)
        name = "/home/u/.jupyter/jupyter_server_config.json"
    else:
        text = "\n".join(_toml(doc, literal=form == "toml-literal")) + "\n"
        name = "/etc/app/config.toml"
        assert tomllib.loads(text) == doc
    out = Redactor().file(name, text)
    assert token not in out
    (json.loads if form.startswith("json") else tomllib.loads)(out)  # masked in place: still JSON, still TOML


# -- fleet reports and preflight payloads: what other nodes (or their users) send ---------------------------------------

def _fleet_report(doc: Dict[str, Any]) -> Dict[str, Any]:
    from dl_doctor.facts.fleet_section import node_section

    return {"fleet_node": node_section(doc["facts"], []), "facts": doc["facts"], "findings": []}


FLEET_BASES = {name: _fleet_report(doc) for name, doc in BASES.items()}


@st.composite
def mutated_fleet_report(draw):
    doc = copy.deepcopy(FLEET_BASES[draw(st.sampled_from(sorted(FLEET_BASES)))])
    for _ in range(draw(st.integers(1, 3))):
        paths: List[List[Any]] = []
        _paths(doc["fleet_node"], ["fleet_node"], paths)
        if draw(st.booleans()):
            _paths(doc, [], paths, 200)
        doc = _set(doc, draw(st.sampled_from([p for p in paths if p])), draw(json_values))
    return doc


def test_fleet_never_crashes_on_mutated_reports(workdir):
    """A mutated report is compared or skipped with its reason; the good report beside it is always compared."""
    folder = workdir / "fleet"
    folder.mkdir()
    _write(folder / "good.json", FLEET_BASES["g5_ubuntu2204"])

    @FAST
    @given(mutated_fleet_report(), st.booleans())
    def prop(doc, indented):
        text = json.dumps(doc, indent=2 if indented else None, ensure_ascii=False)  # the head read or the whole
        (folder / "bad.json").write_text(text, encoding="utf-8", errors="surrogatepass")
        code, out, err = _cli(["fleet", str(folder), "--json", "-"])
        _assert_clean(code, err)
        assert code in (0, 1), err
        result = json.loads(out)
        skipped = {u["source"] for u in result["unreadable"]}
        assert result["nodes"] + len(skipped) == 2 and str(folder / "good.json") not in skipped

    prop()


def _history_report(doc: Dict[str, Any], started_at: str) -> Dict[str, Any]:
    return {"schema_version": "1", "tool": {"name": "dl-doctor", "version": "0.2.0"},
            "run": {"started_at": started_at, "mode": "live"}, "facts": copy.deepcopy(doc["facts"]),
            "findings": [{"id": "DLD-GPU-005", "status": "warn", "message": "ECC is off"}]}


@st.composite
def mutated_history_report(draw):
    doc = _history_report(BASES[draw(st.sampled_from(sorted(BASES)))], "2026-11-28T03:00:00Z")
    for _ in range(draw(st.integers(1, 3))):
        paths: List[List[Any]] = []
        _paths(doc, [], paths, 400)
        _paths(doc["facts"].get("nvml") if isinstance(doc.get("facts"), dict) else None, ["facts", "nvml"], paths)
        doc = _set(doc, draw(st.sampled_from([p for p in paths if p])), draw(json_values))
    return doc


def test_history_never_crashes_on_mutated_reports(workdir):
    """A mutated report is placed in the history or skipped with its reason; the good one beside it is always read."""
    folder = workdir / "history"
    folder.mkdir()
    _write(folder / "good.json", _history_report(BASES["p4d_rhel8_healthy"], "2026-11-28T02:00:00Z"))

    @settings(max_examples=150, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(mutated_history_report())
    def prop(doc):
        text = json.dumps(doc, ensure_ascii=False)
        (folder / "bad.json").write_text(text, encoding="utf-8", errors="surrogatepass")
        code, out, err = _cli(["history", str(folder), "--json", "-"])
        _assert_clean(code, err)
        assert code in (0, 1), err
        result = json.loads(out)
        runs = sum(len(h["runs"]) for h in result["hosts"])
        skipped = {u["source"] for u in result["skipped"]}
        assert str(folder / "good.json") not in skipped and runs + len(skipped) in (1, 2)

    prop()


def test_preflight_payloads_never_crash_a_rank():
    """Whatever a peer sends (any JSON, any bytes), every rank either gathers the nodes or names the peer, alike."""
    from fake_dist import FakeDist, FakeTorch, _mine, _payload

    from dl_doctor.integrations import fleet
    from dl_doctor.integrations import preflight

    section = st.builds(lambda doc: doc["fleet_node"], mutated_fleet_report())
    payloads = (st.builds(lambda s: _payload(1, section=s), section)
                | st.builds(lambda v: json.dumps({"identity": v, "section": {}}).encode(), json_values)
                | st.builds(lambda v: json.dumps(v).encode(), json_values) | hostile_bytes)

    @FAST
    @given(payloads)
    def prop(data):
        outcomes = []
        for rank in (0, 2):  # rank 1 sends ``data``; ranks 0 and 2 must reach the same outcome
            peers = {r: (len(p), p) for r, p in {0: _payload(0), 1: data, 2: _payload(2)}.items() if r != rank}
            try:
                nodes = preflight._payload_nodes(preflight._gather_json(FakeDist(rank, peers), FakeTorch(),
                                                                        _mine(rank)))
            except preflight.PreflightError as exc:
                assert "rank 1's payload" in str(exc)
                outcomes.append("refused")
                continue
            result = fleet.compare(fleet.Fleet(nodes=nodes))
            fleet.render_text(result)
            json.dumps(result, ensure_ascii=False).encode("utf-8")
            outcomes.append("gathered")
        assert outcomes in (["refused", "refused"], ["gathered", "gathered"])

    prop()
