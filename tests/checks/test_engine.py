"""The engine: probe isolation (timeouts, crashes, privilege), check isolation, selection, exit codes."""

import threading
import time

import pytest

from conftest import snapshot
from dl_doctor.engine import collect, evaluate, exit_code, run_check
from dl_doctor.host import Host
from dl_doctor.model import Facts, Finding, Fix, Status, check, fail, passed, warn
from dl_doctor.probes import Unavailable, probe
from dl_doctor.registry import Registry, from_modules

RELEASE = threading.Event()


@probe("quick", "returns at once")
def quick(ctx):
    return {"value": 1, "tuple": (1, 2)}


@probe("hangs", "never returns until released")
def hangs(ctx):
    RELEASE.wait(30)
    return {"late": True}


@probe("crashes", "raises")
def crashes(ctx):
    raise RuntimeError("boom")


@probe("denied", "needs root", root_adds="the kernel log (/var/log/messages)")
def denied(ctx):
    raise PermissionError(13, "Permission denied", "/var/log/messages")


@probe("partly", "partly denied")
def partly(ctx):
    ctx.denied("NVML health facts")
    return {"ok": True}


@probe("unknown", "unknown here")
def unknown(ctx):
    raise Unavailable("no /proc in the sysroot")


@probe("badtype", "returns a list")
def badtype(ctx):
    return [1, 2]


@probe("unserialisable", "returns an object")
def unserialisable(ctx):
    return {"x": object()}


def _collect(*probes, timeout=5.0):
    return collect(list(probes), Host(), {}, timeout=timeout)


def test_a_hanging_probe_is_cut_at_its_timeout_and_costs_only_its_own_facts():
    RELEASE.clear()
    start = time.monotonic()
    snap = _collect(quick, hangs, timeout=0.5)
    elapsed = time.monotonic() - start
    RELEASE.set()
    assert elapsed < 5
    assert snap["facts"] == {"quick": {"value": 1, "tuple": [1, 2]}}
    [err] = snap["probe_errors"]
    assert err["probe"] == "hangs" and err["kind"] == "timeout" and "timed out after 0.5s" in err["error"]
    assert snap["probes"]["hangs"]["status"] == "timeout"
    assert snap["probes"]["quick"]["status"] == "ok"


def test_crashing_probe_is_recorded_with_its_exception():
    snap = _collect(quick, crashes)
    [err] = snap["probe_errors"]
    assert err["kind"] == "exception" and "RuntimeError: boom" in err["error"] and "test_engine.py" in err["error"]
    assert "quick" in snap["facts"] and "crashes" not in snap["facts"]


def test_permission_denied_says_what_root_would_add():
    snap = _collect(denied, partly)
    assert [e["kind"] for e in snap["probe_errors"]] == ["permission"]
    limited = {item["probe"]: item["would_add"] for item in snap["privilege"]["limited"]}
    assert limited == {"denied": "the kernel log (/var/log/messages)", "partly": "NVML health facts"}
    assert snap["facts"]["partly"] == {"ok": True}
    assert snap["probes"]["partly"]["status"] == "denied"


def test_unavailable_is_unknown_not_an_error():
    snap = _collect(unknown)
    assert snap["probe_errors"] == []
    assert snap["unavailable"] == {"unknown": "no /proc in the sysroot"}


def test_probe_results_must_be_json_dictionaries():
    snap = _collect(badtype, unserialisable)
    errors = {e["probe"]: e["error"] for e in snap["probe_errors"]}
    assert "not a dictionary" in errors["badtype"]
    assert "not JSON-serialisable" in errors["unserialisable"]


# -- checks ---------------------------------------------------------------------

@check(id="TST-001", slug="needs-quick", title="Needs quick", tags=("test",), requires=("quick.value",),
       what="A test check that needs quick.value.", why="Tests the engine's skip logic.",
       fix="Nothing to fix, it is a test.")
def needs_quick(facts):
    return passed(f"value is {facts.get('quick.value')}", value=facts.get("quick.value"))


@check(id="TST-002", slug="raises", title="Raises", tags=("test",),
       what="A test check that raises.", why="Tests the engine's error handling.", fix="Nothing to fix, it is a test.")
def raises(facts):
    raise KeyError("missing-key")


@check(id="TST-003", slug="uses-matrix", title="Uses matrix", tags=("test", "matrix"),
       what="A test check that asks for the matrix.", why="Tests keyword injection.", fix="Nothing to fix, a test.")
def uses_matrix(matrix):
    return warn(f"matrix is {matrix}", fix=Fix("do x", ("echo x",)))


@check(id="TST-004", slug="not-applicable", title="Not applicable", tags=("test",),
       applies=(lambda facts: "does not apply here",),
       what="A test check with a precondition.", why="Tests preconditions.", fix="Nothing to fix, it is a test.")
def not_applicable(facts):
    return fail("should not run")


@check(id="TST-005", slug="bad-return", title="Bad return", tags=("test",),
       what="A test check returning garbage.", why="Tests result validation.", fix="Nothing to fix, it is a test.")
def bad_return(facts):
    return "pass"


def test_missing_facts_skip_with_the_probes_reason():
    snap = snapshot({}, probe_errors=[{"probe": "quick", "error": "timed out after 5s", "duration_s": 5}])
    f = run_check(needs_quick, Facts(snap))
    assert f.status is Status.SKIP
    assert "probe 'quick' failed: timed out after 5s" in f.message
    assert f.evidence == {"missing_facts": ["quick.value"]}


def test_unavailable_facts_skip_with_the_reason():
    f = run_check(needs_quick, Facts(snapshot({}, unavailable={"quick": "no /proc"})))
    assert f.status is Status.SKIP and "not available: no /proc" in f.message


def test_present_facts_run_the_check():
    f = run_check(needs_quick, Facts(snapshot({"quick": {"value": 7}})))
    assert (f.status, f.message, f.evidence) == (Status.PASS, "value is 7", {"value": 7})


def test_a_crashing_check_becomes_an_error_finding():
    f = run_check(raises, Facts(snapshot({})))
    assert f.status is Status.ERROR and "KeyError" in f.message and "missing-key" in f.evidence["exception"]


def test_checks_get_only_the_arguments_they_name():
    f = run_check(uses_matrix, Facts(snapshot({})), matrix="M")
    assert f.status is Status.WARN and f.message == "matrix is M" and f.fix.commands == ("echo x",)


def test_precondition_skips_and_bad_results_are_errors():
    assert run_check(not_applicable, Facts(snapshot({}))).message == "does not apply here"
    assert run_check(bad_return, Facts(snapshot({}))).status is Status.ERROR


def test_findings_sorted_worst_first():
    findings = evaluate(snapshot({"quick": {"value": 1}}), [needs_quick, raises, uses_matrix, not_applicable])
    assert [f.status.value for f in findings] == ["error", "warn", "skip", "pass"]


def _finding(status):
    return Finding("X-1", "x", "x", status, "", {}, None, ())


@pytest.mark.parametrize("statuses,fail_on,code", [
    ([Status.PASS, Status.SKIP], "fail", 0),
    ([Status.WARN], "fail", 0),
    ([Status.WARN], "warn", 1),
    ([Status.FAIL], "fail", 1),
    ([Status.ERROR], "fail", 1),
    ([Status.FAIL, Status.ERROR], "never", 0),
])
def test_exit_codes(statuses, fail_on, code):
    assert exit_code([_finding(s) for s in statuses], fail_on) == code


def test_registry_selection_and_duplicates():
    import sys

    reg = from_modules([sys.modules[__name__]])
    assert {s.id for s in reg.select(only=["matrix"])} == {"TST-003"}
    assert {s.id for s in reg.select(only=["tst-001", "raises"])} == {"TST-001", "TST-002"}
    assert "TST-003" not in {s.id for s in reg.select(skip=["uses-matrix"])}
    assert reg.unknown_selectors(["nope", "test"]) == ["nope"]
    reg.add_check(needs_quick, "again")
    assert any("duplicates" in e for e in reg.load_errors)
    assert len([p for p in reg.probes if p.name == "quick"]) == 1


def test_registry_rejects_malformed_specs():
    reg = Registry()

    @check(id="bad id", slug="Bad Slug", title="", tags=(), what="", why="", fix="")
    def broken(facts):
        return passed("x")

    reg.add_check(broken, "test")
    assert reg.checks == []
    assert "ID 'bad id'" in reg.load_errors[0] and "explanation section 'what'" in reg.load_errors[0]
