"""Built-in checks, one module per area.

Checks are pure: nothing here opens files, runs commands or loads libraries
(``tests/checks/test_conformance.py`` enforces it).  Each module is registered in
``setup.cfg`` under the ``dl_doctor.checks`` entry-point group, exactly like a
third-party plugin.
"""
