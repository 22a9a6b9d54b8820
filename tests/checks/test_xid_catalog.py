"""The Xid table against its sources: every code of the driver's enumeration (open-gpu-kernel-modules nverror.h at
the release tests/fixtures/xid_source_codes.json names) and of NVIDIA's Xid catalog, nothing else; the catalog's
buckets verbatim; kind, points_at, remedy and drain that agree with each other; DLD-GPU-008 and DLD-VER-006 on
what the table now says."""

import json

import pytest

from conftest import FIXTURES
from dl_doctor import compat_matrix, testing
from dl_doctor.model import REMEDIES
from dl_doctor.registry import load_registry

M = compat_matrix.load(site=False)
SOURCE = json.loads((FIXTURES / "xid_source_codes.json").read_text(encoding="utf-8"))
DRIVER = {c["code"]: c for c in SOURCE["driver"]["codes"]}
CATALOG = {c["code"]: c for c in SOURCE["docs_catalog"]["codes"]}
TABLE = {e["code"]: e for e in M.xids()}
SPECS = {s.id: s for s in load_registry().checks}


# -- counted against the sources --------------------------------------------------------------------------------

def test_the_fixture_names_its_release_and_counts_itself():
    assert SOURCE["driver"]["release"] == "595.45.04"
    assert SOURCE["driver"]["source"].endswith("/595.45.04/src/common/sdk/nvidia/inc/nverror.h")
    assert SOURCE["driver"]["count"] == len(DRIVER) == 133
    assert SOURCE["docs_catalog"]["count"] == len(CATALOG) == 172
    assert sorted(CATALOG) == list(range(1, 173))


def test_every_code_the_driver_enumerates_is_in_the_table_with_its_name():
    missing = sorted(set(DRIVER) - set(TABLE))
    assert not missing, missing
    for code, row in DRIVER.items():
        assert TABLE[code]["mnemonic"] == row["name"], code
        assert "ogkm_nverror" in TABLE[code]["source"], code


def test_nothing_beyond_the_enumeration_unless_the_catalog_lists_it():
    invented = sorted(set(TABLE) - set(DRIVER) - set(CATALOG))
    assert not invented, invented
    for code in set(TABLE) - set(DRIVER):
        assert "xid_catalog" in TABLE[code]["source"] and TABLE[code]["mnemonic"] == CATALOG[code]["mnemonic"], code
    assert len(TABLE) == len(set(DRIVER) | set(CATALOG)) == 176


def test_the_catalogs_buckets_and_products_are_copied_verbatim():
    for code, row in CATALOG.items():
        entry = TABLE[code]
        assert "xid_catalog" in entry["source"], code
        assert entry.get("resolution", "") == row["immediate"], code
        investigatory = "" if row["investigatory"].startswith("N/A") else row["investigatory"]
        assert entry.get("investigation", "") == investigatory, code
        assert entry["applies_to"] == row["applies_to"], code


def test_since_is_the_first_release_that_defines_the_code():
    first_open = SOURCE["driver"]["first_open_release"]
    for code, entry in TABLE.items():
        row = DRIVER.get(code)
        if row is None or row["first_release"] == first_open:
            assert "since" not in entry, code
        else:
            assert entry["since"] == row["first_release"], code
    assert TABLE[154]["since"] == "565.57.01" and TABLE[144]["since"] == "550.40.63"


@pytest.mark.parametrize("code", [8, 68, 69, 109, 119, 120, 136, 140, 143, 144, 145, 146, 147, 148, 149, 150, 154,
                                  155, 48, 63, 64, 92, 94, 95, 74, 121, 137, 159, 173])
def test_the_codes_a_ticket_names_are_there(code):
    entry = M.xid(code)
    assert entry and entry["name"] and entry["action"] and entry["sources"], code


def test_a_code_no_source_describes_takes_its_name_from_the_enumeration_and_says_so():
    for code in set(DRIVER) - set(CATALOG):           # 173-176 at 595.45.04
        entry = TABLE[code]
        assert entry["name"] == DRIVER[code]["name"] and entry["kind"] == "unknown", code
        assert "action" in entry["unverified"] and "points_at" in entry["unverified"], code
        assert "remedy" not in entry and "drain" not in entry, code
    for code, row in CATALOG.items():
        if row["description"] == "Unused" and not row["applies_to"] and code != 61:
            assert TABLE[code]["name"] == TABLE[code]["mnemonic"] and TABLE[code]["kind"] == "unknown", code


# -- the fields agree with each other ---------------------------------------------------------------------------

BUCKET_REMEDY = {"RESTART_APP": ("restart-application", False), "IGNORE": ("none", False),
                 "RESET_GPU": ("reset-gpu", True), "RESTART_BM": ("reboot", True),
                 "WORKFLOW_XID_48": ("reset-gpu", True), "WORKFLOW_XID_45": ("none", False)}


def test_remedy_and_drain_follow_the_immediate_bucket_where_it_names_one():
    for code, entry in TABLE.items():
        want = BUCKET_REMEDY.get(entry.get("resolution"))
        if want and not {"remedy", "drain"} & set(entry.get("unverified", [])):
            assert (entry["remedy"], entry["drain"]) == want, code


def test_kind_points_at_remedy_and_drain_are_consistent():
    for code, entry in TABLE.items():
        kind, points_at = entry["kind"], entry.get("points_at")
        assert ("remedy" in entry) == ("drain" in entry), code
        assert entry.get("remedy", "none") in REMEDIES, code
        if entry.get("drain"):
            assert points_at != "application" and kind not in ("application", "informational"), code
        if kind == "application":
            assert points_at == "application" and entry.get("remedy") in ("none", "restart-application"), code
        if kind == "informational":
            assert entry.get("drain") is False, code
        if points_at is None:
            assert "points_at" in entry.get("unverified", []), code
        if entry.get("resolution") == "IGNORE":
            assert kind in ("informational", "application", "hardware") and not entry["drain"], code


def test_the_ecc_and_row_remap_family():
    dbe = M.xid(48)
    assert (dbe["kind"], dbe["points_at"], dbe["remedy"], dbe["drain"]) == ("hardware", "gpu", "reset-gpu", True)
    assert M.xid(95)["drain"] and M.xid(95)["remedy"] == "reset-gpu"
    assert (M.xid(94)["remedy"], M.xid(94)["drain"]) == ("restart-application", False)      # contained to one app
    assert M.xid(64)["remedy"] == "reset-gpu" and M.xid(140)["drain"]
    for code in (63, 92):                                   # the catalog: IGNORE
        assert M.xid(code)["kind"] == "informational" and M.xid(code)["points_at"] == "gpu", code
    for code in (74, 136, 121, *range(144, 151)):
        assert M.xid(code)["points_at"] == "fabric", code
    for code in (13, 31, 43, 137):
        assert M.xid(code)["points_at"] == "application", code


# -- the schema and the command line ----------------------------------------------------------------------------

def test_the_schema_rejects_a_bad_points_at(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('schema_version = 1\n[[xid]]\ncode = 48\nname = "x"\nkind = "hardware"\naction = "a"\n'
                   'points_at = "the moon"\nsince = "R565"\nsource = ["xid_catalog"]\n')
    errors = compat_matrix.validate_files([str(bad)])
    assert any("field 'points_at'" in e for e in errors) and any("field 'since'" in e for e in errors), errors


def test_validate_and_the_xid_query(run_cli):
    assert run_cli("matrix", "validate").returncode == 0
    r = run_cli("matrix", "xid", "48", "--json", "-")
    assert r.returncode == 0
    got = json.loads(r.stdout)
    assert got["mnemonic"] == "ROBUST_CHANNEL_GPU_ECC_DBE" and got["resolution"] == "WORKFLOW_XID_48"
    assert any("open-gpu-kernel-modules/blob/595.45.04" in s for s in got["sources"])
    human = run_cli("matrix", "xid", "176")
    assert human.returncode == 0 and "PCIE_CORRECTABLE_ERROR_FAULT" in human.stdout and "unverified" in human.stdout
    assert run_cli("matrix", "xid", "999").returncode == 1
    bad = run_cli("matrix", "xid", "forty-eight")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


# -- the checks that read the table -----------------------------------------------------------------------------

def _xids(*codes):
    return {"kernel_log": {"xids": [{"code": c, "bus": "0000:10:1c", "line": f"NVRM: Xid (PCI:0000:10:1c): {c}"}
                                    for c in codes], "source": "/dev/kmsg"}}


def _gpu008(*codes):
    base = testing.load_cases(FIXTURES / "checks" / "DLD-GPU-008.json")[1]["facts"]
    facts = testing.deep_merge(base, _xids(*codes))
    return testing.run_case(SPECS["DLD-GPU-008"], {"name": str(codes), "facts": facts}, M)


@pytest.mark.parametrize("codes", [(63,), (92,), (63, 92), (154,), (121,)])
def test_informational_xids_alone_pass_with_a_note(codes):
    # NVIDIA's catalog gives these no immediate action (IGNORE / XID_154); 63 and 92 failed before the catalog
    # was read row by row (a row marked for remapping stays in this boot's log after the reset that applied it)
    f = _gpu008(*codes)
    assert f.status.value == "pass" and "only informational Xids" in f.message, f.message


def test_an_informational_xid_beside_an_application_one_keeps_the_application_wording():
    f = _gpu008(13, 63)
    assert f.status.value == "pass" and "only application-level Xids" in f.message


@pytest.mark.parametrize("codes,remedy,drain", [
    ((48, 63), "reset-gpu", True),
    ((8,), "restart-application", False),          # GPU stopped processing: RESTART_APP, not attributed
    ((173,), "reset-gpu", True),                   # no source describes it: the check's default
    ((94,), "restart-application", False),
    ((79, 13), "reboot", True),
])
def test_serious_xids_fail_with_the_tables_remedy(codes, remedy, drain):
    f = _gpu008(*codes)
    assert f.status.value == "fail", f.message
    assert f.remediation["action"] == remedy and f.remediation["drain"] is drain, f.remediation


def test_an_unattributed_code_reads_as_unknown_not_as_missing():
    f = _gpu008(143)
    assert f.status.value == "fail" and "GPU Initialization Error, unknown" in f.message, f.message
    assert "not in dl-doctor's Xid table" not in f.message


# -- the tool that rebuilds the fixture ---------------------------------------------------------------------------

def test_the_fixture_tool_reads_defines_not_aliases_or_markers():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_xid_source_codes",
                                                  FIXTURES.parent / "tools" / "make_xid_source_codes.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    header = ("#define ROBUST_CHANNEL_GR_EXCEPTION   (13)\n#define INFOROM_PAGE_RETIREMENT_EVENT (63)\n"
              "#define INFOROM_DRAM_RETIREMENT_EVENT INFOROM_PAGE_RETIREMENT_EVENT\n"
              "#define PCIE_CORRECTABLE_ERROR_FAULT  (176) \n#define ROBUST_CHANNEL_LAST_ERROR     (176)\n"
              "#define ROBUST_CHANNEL_ERROR_RECOVERY_LEVEL_FATAL (2)\n")
    assert tool.codes(header) == {13: "ROBUST_CHANNEL_GR_EXCEPTION", 63: "INFOROM_PAGE_RETIREMENT_EVENT",
                                  176: "PCIE_CORRECTABLE_ERROR_FAULT"}
    # the committed fixture is in the tool's own format (one line per code)
    assert tool.dump(SOURCE) == (FIXTURES / "xid_source_codes.json").read_text(encoding="utf-8")
