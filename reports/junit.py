"""JUnit XML: one test case per finding, so Packer, EC2 Image Builder, Jenkins and GitLab show results natively.

fail -> <failure>, error -> <error>, skip -> <skipped>; warn is a <failure> when the run used --fail-on warn and a
passing case with the warning in <system-out> otherwise, so the XML agrees with the exit code.
"""

from __future__ import annotations

import re
from typing import Any, Dict
from xml.etree import ElementTree as ET

# XML 1.0 cannot carry most control characters (an ANSI colour code from a command's output, say); ElementTree
# would write them and the consumer would reject the whole file.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(text: Any) -> str:
    return _NOT_XML.sub("\ufffd", str(text))


def _details(f: Dict[str, Any]) -> str:
    lines = [_clean(f["message"])]
    fix = f.get("fix")
    if fix:
        lines += ["", "Fix: " + _clean(fix["summary"])] + [f"  $ {_clean(c)}" for c in fix.get("commands", [])]
    return "\n".join(lines)


def render(report: Dict[str, Any]) -> str:
    findings = report.get("findings", [])
    warn_fails = (report.get("run", {}).get("options") or {}).get("fail_on") == "warn"
    counts = {"failures": 0, "errors": 0, "skipped": 0}
    cases = []
    for f in findings:
        case = ET.Element("testcase", {"name": _clean(f"{f['id']} {f.get('slug', '')}: {f['title']}"),
                                       "classname": f"dl-doctor.{(f.get('tags') or ['general'])[0]}", "time": "0"})
        status = f["status"]
        if status == "fail" or (status == "warn" and warn_fails):
            el = ET.SubElement(case, "failure", {"message": _clean(f["message"][:1000]), "type": status})
            el.text = _details(f)
            counts["failures"] += 1
        elif status == "error":
            el = ET.SubElement(case, "error", {"message": _clean(f["message"][:1000]), "type": "error"})
            el.text = _details(f)
            counts["errors"] += 1
        elif status == "skip":
            ET.SubElement(case, "skipped", {"message": _clean(f["message"][:1000])})
            counts["skipped"] += 1
        else:
            out = ET.SubElement(case, "system-out")
            out.text = f"WARNING: {_details(f)}" if status == "warn" else _clean(f["message"])
        cases.append(case)
    run = report.get("run", {})
    attrs = {"name": "dl-doctor", "tests": str(len(findings)), "failures": str(counts["failures"]),
             "errors": str(counts["errors"]), "skipped": str(counts["skipped"]),
             "time": f"{run.get('duration_s', 0):.3f}"}
    root = ET.Element("testsuites", {k: v for k, v in attrs.items() if k != "skipped"})
    host = _clean(report.get("host", {}).get("hostname") or "")
    suite = ET.SubElement(root, "testsuite", {**attrs, "name": f"dl-doctor {host}".strip(),
                                              "timestamp": run.get("started_at", ""),
                                              "hostname": _clean(report.get("host", {}).get("hostname") or "unknown")})
    suite.extend(cases)
    if hasattr(ET, "indent"):  # Python 3.9+
        ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
