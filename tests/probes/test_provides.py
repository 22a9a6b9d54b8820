"""The facts contract is declared: every built-in probe's provides= types and explains each fact, the facts schema
and docs/facts.md are what the declarations generate, and facts files of earlier releases still validate (within
schema v1, types only widen)."""

import json
import sys
from pathlib import Path

import jsonschema
import pytest

from conftest import FIXTURES, snapshot
from dl_doctor.facts import fact_schema, schema as facts_schema
from dl_doctor.facts.contract import MISSING, Fact, array, conform, count, integer, map_of, narrowed, number, obj, \
    schema_of, string
from dl_doctor.facts.validate import InputError, check_schema
from dl_doctor.probes import probe
from dl_doctor.registry import from_modules, load_registry, unknown_fact

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "tools"))
import make_facts_doc  # noqa: E402
import make_facts_schema  # noqa: E402

sys.path.pop(0)

BUILTIN = make_facts_schema.builtin_probes()
# The facts schema as the release before the declarations shipped it (generated from recordings), at 792138c
OLD = json.loads((FIXTURES / "schemas" / "facts-v1@792138c.json").read_text(encoding="utf-8"))


def test_every_builtin_probe_declares_each_fact_with_a_type_and_a_meaning():
    assert {p.name for p in BUILTIN} >= {"os", "nvml", "python_envs", "verify", "security"}
    untyped = [p.name for p in BUILTIN if p.facts is None]
    assert untyped == []
    facts = [(p.name, path, f) for p in BUILTIN for path, f, _ in p.facts.walk(p.name)]
    assert len(facts) > 700
    assert [path for _, path, f in facts if not f.meaning] == []
    # typed: only a free fact (any) has no type, and no built-in fact is left free
    assert [path for _, path, f in facts if not f.types] == []


def test_the_committed_schema_and_facts_reference_are_what_the_declarations_generate():
    committed = (ROOT / "doctor" / "facts" / "facts-v1.json").read_text(encoding="utf-8")
    assert committed == make_facts_schema.render(), "run: python tests/tools/make_facts_schema.py"
    assert (ROOT / "docs" / "facts.md").read_text(encoding="utf-8") == make_facts_doc.render(), \
        "run: python tests/tools/make_facts_doc.py"
    jsonschema.Draft202012Validator.check_schema(facts_schema())


def test_within_schema_v1_no_fact_narrowed_and_none_disappeared():
    new = facts_schema()
    old_facts = OLD["properties"]["facts"]
    assert narrowed(old_facts, new["properties"]["facts"]) == []
    # and everything outside the facts is as it was
    strip = lambda s: {k: (v if k != "properties" else {p: q for p, q in v.items() if p != "facts"})  # noqa: E731
                       for k, v in s.items()}
    assert strip(new) == strip(OLD)
    # every probe the old schema named is still named, with every fact it named
    assert set(old_facts["properties"]) <= set(new["properties"]["facts"]["properties"])


def _recorded_documents():
    """Every facts document recorded under tests/fixtures: the machine snapshots and any other facts file, and the
    facts of each check fixture's base and cases."""
    for path in sorted(FIXTURES.rglob("*.json")):
        if "schemas" in path.parts:
            continue
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            continue
        if not isinstance(doc, dict):
            continue
        if doc.get("kind") == "dl-doctor-facts":
            yield path, "snapshot", doc
        for i, case in enumerate(doc.get("cases") or []):
            if isinstance(case, dict) and isinstance(case.get("facts"), dict):
                yield path, f"case {i}", case["facts"]
        if isinstance(doc.get("base"), dict):
            yield path, "base", doc["base"]


def test_facts_recorded_by_earlier_releases_validate():
    docs = list(_recorded_documents())
    assert len([d for d in docs if d[1] == "snapshot"]) >= 4 and len(docs) > 100
    schema = facts_schema()
    bad = []
    for path, what, doc in docs:
        try:
            if what == "snapshot":
                check_schema(doc, schema, path.name)
            else:
                check_schema(doc, schema["properties"]["facts"], f"{path.name} {what}")
        except InputError as exc:
            bad.append(str(exc))
    assert bad == []


def test_narrowed_names_each_way_a_schema_can_accept_less():
    old = schema_of(obj("x", a=Fact("integer|string", "a"), n=integer("n", range=(0, 10)), items=array(string(), "l"),
                        m=map_of(integer(), "m"), o=obj("o", k=string("k"))))
    assert narrowed(old, old) == []
    wider = schema_of(obj("x", a=Fact("number|string", "a"), n=integer("n", range=(-1, 11)),
                          items=array(string(null=True), "l"), m=map_of(number(), "m"), o=obj("o", k=string("k")),
                          extra=string("a fact added")))
    assert narrowed(old, wider) == []
    narrower = schema_of(obj("x", a=integer("a"), n=integer("n", range=(1, 10)), items=array(integer(), "l"),
                             m=map_of(string(), "m"), o=obj("o", other=string("other"))))
    assert narrowed(old, narrower) == [
        "facts.a: type ['integer', 'null', 'string'] narrowed to ['integer', 'null']",
        "facts.items[]: type ['string'] narrowed to ['integer']",
        "facts.m.*: type ['integer', 'null'] narrowed to ['null', 'string']",
        "facts.n: minimum 0 narrowed to 1",
        "facts.o.k: no longer declared"]
    assert narrowed({"type": ["object"]}, {"type": ["object"], "required": ["a"]}) == ["facts: adds required"]
    # an old fact that only had properties recorded (env variable names) is covered by a map's values
    recorded = {"type": ["object"], "properties": {"PATH": {"type": ["string", "null"]}}}
    assert narrowed(recorded, schema_of(map_of(string(), "env"))) == []
    assert narrowed(recorded, schema_of(map_of(integer(), "env"))) == [
        "facts.PATH: type ['null', 'string'] narrowed to ['integer', 'null']"]


def test_conform_keeps_what_has_the_declared_shape_and_drops_the_rest():
    node = schema_of(obj("v", n=number("n"), i=integer("i"), s=string("s"), b=Fact("boolean", "b"),
                         m=map_of(integer("v"), "m"), l=array(obj("", x=integer("x")), "l")))
    value = {"n": 1.5, "i": 3, "s": "x", "b": True, "m": {"a": 1, 2: 3, "c": "no"}, "l": [{"x": 1, "y": 2}, 5, {}],
             "other": 1}
    assert conform(value, node) == {"n": 1.5, "i": 3, "s": "x", "b": True, "m": {"a": 1, "2": 3},
                                    "l": [{"x": 1}, {}]}
    assert conform({"n": float("nan"), "i": True, "s": None, "b": 1, "m": [], "l": {}}, node) == {}
    assert conform({"n": 1e15, "i": 2 ** 70}, node) == {"i": 2 ** 70}
    assert conform([], node) is MISSING


def test_the_verify_checks_read_their_facts_through_the_verify_probes_declaration():
    verify = next(p for p in BUILTIN if p.name == "verify")
    node = fact_schema("verify")
    assert node == schema_of(verify.facts)
    assert "VERIFY_SHAPE" not in (ROOT / "checks" / "verify.py").read_text(encoding="utf-8")
    # the shape is there for conform, not enforced: only the top is typed
    assert set(node) == {"type", "description", "x-shape"}
    matmul = node["x-shape"]["properties"]["devices"]["items"]["properties"]["matmul"]
    assert matmul["additionalProperties"]["properties"]["tflops"]["type"] == ["number", "null"]
    assert conform({"cudnn": "9.1", "level": "quick", "devices": [{"index": "0"}, {"index": 1}]}, node) == \
        {"level": "quick", "devices": [{}, {"index": 1}]}


def test_a_facts_file_with_a_malformed_verify_part_still_loads_and_is_judged(tmp_path, run_cli):
    """The verify facts come from someone's interpreter: a facts file dl-doctor wrote with an odd part in them loads,
    and the verify checks judge what has the declared shape (as before the shape was declared); another probe's
    malformed fact is refused, one line naming it, exit 2."""
    base = json.loads((FIXTURES / "checks" / "DLD-VER-001.json").read_text(encoding="utf-8"))["base"]
    base["verify"]["cudnn"] = "9.1"
    base["verify"]["devices"][0]["matmul"] = {"fp16": "fast", "fp32": {"tflops": 60.0, "seconds": 0.5, "n": 4096,
                                                                        "iters": 10}}
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(snapshot(base)), encoding="utf-8")
    r = run_cli("check", str(path), "--only", "DLD-VER-001", "--json", "-", "--html", "/dev/null")
    assert r.returncode in (0, 1), r.stderr
    finding = json.loads(r.stdout)["findings"][0]
    assert finding["id"] == "DLD-VER-001" and finding["status"] in ("pass", "warn")
    path.write_text(json.dumps(snapshot(dict(base, nvml={"devices": "many"}))), encoding="utf-8")
    r = run_cli("check", str(path), "--only", "DLD-VER-001", "--json", "-", "--html", "/dev/null")
    assert r.returncode == 2 and "nvml.devices should be array or null, not string" in r.stderr


def test_a_plugin_declares_its_facts_typed_or_as_paths():
    typed = probe("acme", "ACME fleet settings", provides=obj(
        "ACME's fleet settings", max_temp_c=count("the hottest a GPU may run"),
        gpus=array(obj("", serial=string("its serial")), "ACME's GPUs")))(lambda ctx: {})
    assert typed.provides == ("max_temp_c", "gpus", "gpus[].serial")
    assert typed.facts.keys["max_temp_c"].range == (0, 65536)
    paths = probe("acme", "ACME fleet settings", provides=("max_temp_c", "source"))(lambda ctx: {})
    assert paths.provides == ("max_temp_c", "source") and paths.facts is None
    with pytest.raises(TypeError, match="must be an object"):
        probe("acme", "x", provides=string("one string"))
    with pytest.raises(TypeError, match="tuple of fact paths"):
        probe("acme", "x", provides="max_temp_c")

    import types

    module = types.ModuleType("acme_probe")
    module.spec = typed
    registry = from_modules([module])
    assert unknown_fact(registry, "acme.max_temp_c") is None
    assert unknown_fact(registry, "acme.gpus.serial") is None  # below a list: not known to be wrong
    assert unknown_fact(registry, "acme.max_tmp_c") == ("probe 'acme' has no fact 'max_tmp_c' there (did you mean "
                                                        "'max_temp_c'?)")


def test_a_builtin_typo_is_caught_from_the_declaration_and_a_maps_keys_are_any():
    registry = load_registry()
    assert unknown_fact(registry, "gpu_pci.gpu_cuont") == ("probe 'gpu_pci' has no fact 'gpu_cuont' there (did you "
                                                           "mean 'gpu_count'?)")
    assert unknown_fact(registry, "environment.variables.CUDA_HOME") is None
    assert unknown_fact(registry, "imds.imdsv1_allowed") is None  # never recorded, declared
    assert unknown_fact(registry, "nvidia_driver.kernel_module.versoin").startswith(
        "probe 'nvidia_driver' has no fact 'versoin' there")


def test_fact_rejects_what_it_cannot_mean():
    with pytest.raises(ValueError, match="unknown fact type 'str'"):
        Fact("str", "x")
    with pytest.raises(ValueError, match="a map needs values="):
        Fact("map", "x")
    with pytest.raises(TypeError, match="is not a Fact"):
        obj("x", a="string")
    assert map_of(array(string(null=True)), "m").type_text() == "map of array of string or null"
    assert count("c").type_text() == "integer (0–65536)"
