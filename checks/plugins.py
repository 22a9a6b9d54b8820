"""dl-doctor's own integrity: every installed probe and check plugin loaded."""

from __future__ import annotations

from typing import List, Optional

from dl_doctor.model import Fix, Result, check, error, passed, skip


@check(
    id="DLD-PLUGIN-001",
    remedy="repair-software", drain=False,
    problem="A probe or check plugin did not load",
    slug="plugin-failed-to-load",
    title="Every installed probe and check plugin loaded",
    tags=("dl-doctor", "plugin"),
    what="""Whether every probe and check registered under the entry-point groups dl_doctor.probes and
        dl_doctor.checks loaded, and whether every check's requires= names facts that some probe provides.""",
    why="""A plugin that fails to import, or a check whose requires= has a typo, would otherwise vanish from the run
        without a word: an image bake with --fail-on fail would pass while the checks it relies on never ran.""",
    fix="""Read the error: reinstall the plugin's package (pip install --force-reinstall NAME), fix the import error,
        or correct the fact path in requires= (dl-doctor list --json shows every check's requires, docs/facts.md
        every fact).""",
)
def plugin_failed_to_load(load_errors: Optional[List[str]] = None) -> Result:
    if load_errors is None:
        return skip("not checked: the registry's load errors are not known here (judged from a saved report?)")
    if not load_errors:
        return passed("every registered probe and check loaded")
    return error(f"{len(load_errors)} plugin problem{'s' if len(load_errors) != 1 else ''}: {load_errors[0]}",
                 {"load_errors": list(load_errors)},
                 Fix("Fix or reinstall the plugin named in the error, then run dl-doctor list",
                     ("dl-doctor list", "python3 -m pip check")))
