"""The tests mirror the layers: every test module lives in one of seven folders, with a name no other module has."""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
LAYERS = ("host", "probes", "checks", "judge", "reports", "integrations", "e2e")
# not dl-doctor's tests: the helper scripts, and the sample plugin's own package (tests/e2e/test_plugins.py runs it)
EXCEPT = ("tools", "plugin_sample")


def _modules(root: Path = TESTS):
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in EXCEPT or "__pycache__" in rel.parts:
            continue
        if path.name.startswith("test_") or path.name.endswith("_test.py"):
            yield rel


def _misplaced(root: Path = TESTS):
    return [str(rel) for rel in _modules(root) if len(rel.parts) != 2 or rel.parts[0] not in LAYERS]


def test_every_test_module_lives_in_a_layer_folder():
    misplaced = _misplaced()
    assert not misplaced, f"put these in tests/{{{','.join(LAYERS)}}}/: {misplaced}"


def test_the_layer_folders_hold_modules_and_no_package_markers():
    """pytest's default (prepend) import mode imports a test module by its name from its folder: with no __init__.py
    the names must be unique across the folders, and the helpers beside conftest.py stay importable."""
    modules = list(_modules())
    assert {rel.parts[0] for rel in modules} == set(LAYERS)
    assert not [str(p.relative_to(TESTS)) for p in TESTS.glob("*/__init__.py") if p.parent.name in LAYERS]
    twice = [name for name, n in Counter(rel.name for rel in modules).items() if n > 1]
    assert not twice, f"test module names used twice: {twice}"


def test_the_guard_names_a_misplaced_module(tmp_path):
    """A module at the top of tests/, in a folder that is no layer, or deeper inside a layer is named; a layer's
    module and the helper scripts in tools/ are not."""
    for rel in ("checks/test_ok.py", "test_flat.py", "misc/test_other.py", "e2e/deeper/test_deep.py",
                "tools/test_helper_script.py", "plugin_sample/tests/test_acme.py", "checks/helper.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert sorted(_misplaced(tmp_path)) == ["e2e/deeper/test_deep.py", "misc/test_other.py", "test_flat.py"]
