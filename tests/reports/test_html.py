"""The HTML report: self-contained, escaped, problems first; and as Chromium renders it."""

import re
import shutil
import subprocess

import pytest

import trees

EVIL = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>"


def _env_block(env):
    return b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())


@pytest.fixture
def docker_report(run_cli, tree):
    spec = trees.g4dn_docker_64m()
    spec["proc/self/environ"] = _env_block({"PATH": "/usr/bin", "EVIL": EVIL})
    spec["proc/sys/kernel/hostname"] = "evil<b>host</b>\n"
    r = run_cli("run", "--sysroot", str(tree(spec)))
    [html] = r.reports("html")
    return html, r


def test_self_contained_no_external_assets_no_script(docker_report):
    html, _ = docker_report
    text = html.read_text()
    assert "<script" not in text.replace("&lt;script", "")
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", text)
    assert not re.search(r"url\(\s*['\"]?(?:https?:)?//", text)
    assert "<link" not in text
    assert "<style>" in text and '<meta name="viewport"' in text and "@media print" in text


def test_every_value_is_escaped(docker_report):
    text = docker_report[0].read_text()
    assert EVIL not in text and "evil<b>host</b>" not in text
    assert "&lt;script&gt;document.title=" in text
    assert "evil&lt;b&gt;host&lt;/b&gt;" in text


def test_problems_first_with_fix_and_evidence_then_inventory_then_raw_facts(docker_report):
    text = docker_report[0].read_text()
    order = [text.index(s) for s in ('id="problems"', "DLD-MEM-001", "docker run --gpus all --shm-size=",
                                     'id="checks"', "DLD-SYS-001", 'id="inventory"', 'id="facts"')]
    assert order == sorted(order)
    assert "<details>" in text and "<summary>Evidence</summary>" in text
    assert "535.104.05 (proprietary)" in text  # the version inventory


def _chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.mark.skipif(not _chromium(), reason="headless Chromium is not installed (Debian package 'chromium')")
def test_chromium_renders_the_report_as_a_person_sees_it(docker_report, tmp_path):
    html, _ = docker_report
    common = [_chromium(), *CHROME_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(common + ["--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=90).stdout
    dom = dom.replace("<wbr>", "")  # the break opportunities long paths get after each '/'
    # the planted script did not run, and the failure with its fix is on the page
    assert "<title>dl-doctor report" in dom and "pwned" not in dom.split("</title>")[0]
    assert "/dev/shm is only 64.0 MiB" in dom and "--shm-size=" in dom
    shot = tmp_path / "phone.png"
    subprocess.run(common + ["--window-size=390,1200", f"--screenshot={shot}", html.as_uri()],
                   capture_output=True, timeout=90)
    assert shot.exists() and shot.stat().st_size > 10_000
    pdf = tmp_path / "report.pdf"
    subprocess.run(common + [f"--print-to-pdf={pdf}", "--no-pdf-header-footer", html.as_uri()],
                   capture_output=True, timeout=90)
    assert pdf.exists() and pdf.read_bytes().startswith(b"%PDF")


def test_the_template_compiled_ahead_of_time_is_fresh_and_used(tmp_path):
    """The committed module is what Jinja makes of today's template (regenerate: tests/tools/make_compiled_template.py);
    a run uses it, and a stale stamp makes the run compile the template instead of using an outdated module."""
    import json
    import sys
    from pathlib import Path

    import jinja2

    from dl_doctor.reports import html

    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "tests" / "tools"))
    import make_compiled_template

    make_compiled_template.build(tmp_path)
    committed = root / "reports" / "templates_compiled"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in committed.iterdir()
                                                               if p.name != "__pycache__")
    for p in tmp_path.iterdir():
        assert p.read_text() == (committed / p.name).read_text(), f"{p.name} is stale: run make_compiled_template.py"
    loader = html._environment().loader
    assert isinstance(loader, jinja2.ChoiceLoader) and isinstance(loader.loaders[0], jinja2.ModuleLoader)
    stamp = json.loads((committed / "stamp.json").read_text())
    real = jinja2.__version__
    try:
        jinja2.__version__ = "0.0-other"
        assert html._compiled_loader() is None  # another Jinja: compile the template instead
    finally:
        jinja2.__version__ = real
    assert stamp["jinja2"] == real


CSP = ('<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'; '
       'img-src data:; form-action \'none\'; base-uri \'none\'">')


def _assert_csp_in_head(page: str, where: str) -> None:
    """The policy is in <head> once, right after the charset and before the style sheet it allows: a browser then
    refuses any script, frame, fetch or form a value might still smuggle past the escaping."""
    head = page[page.index("<head>"):page.index("</head>")]
    assert page.count(CSP) == 1 and CSP in head, where
    assert head.index('<meta charset="utf-8">') < head.index(CSP) < head.index("<style>"), where


def test_every_html_page_carries_the_content_security_policy(docker_report, run_cli, tmp_path):
    import json
    import tarfile

    html, r = docker_report
    _assert_csp_in_head(html.read_text(), "run --html")
    [report] = r.reports("json")
    out = run_cli("report", str(report), "--html", str(tmp_path / "again.html"))
    assert out.returncode == 0, out.stderr
    _assert_csp_in_head((tmp_path / "again.html").read_text(), "report --html")
    out = run_cli("fleet", str(report), "--html", str(tmp_path / "fleet.html"))
    assert out.returncode in (0, 1), out.stderr
    _assert_csp_in_head((tmp_path / "fleet.html").read_text(), "fleet --html")
    out = run_cli("bundle", "--sysroot", str(tmp_path / "root"), "-o", str(tmp_path / "b.tar.gz"))
    assert out.returncode in (0, 1), out.stderr
    with tarfile.open(tmp_path / "b.tar.gz") as tar:
        [member] = [m for m in tar.getmembers() if m.name.endswith("report.html")]
        _assert_csp_in_head(tar.extractfile(member).read().decode(), "bundle report.html")
    assert json.loads(report.read_text())["findings"]
