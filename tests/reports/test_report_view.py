"""The report a person reads: the stack picture, problem-first cards and terminal blocks, and the Markdown summary
for tickets, checked with GitHub's own Markdown renderer (cmark-gfm, through the cmarkgfm bindings from PyPI) and
with headless Chromium."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess

import pytest

from dl_doctor.reports import markdown, present, stack

HOSTILE = ("```\n</details><img src=x onerror=alert(1)> @octocat ![x](http://evil.example/i.png) "
           "[click](http://evil.example) https://evil.example/a www.evil.example ops@evil.example | a | b "
           "# heading $x^2$ <script>alert(1)</script> &amp; ~~gone~~ **bold** `tick` ``` ~~~")


def _gfm(text: str) -> str:
    cmarkgfm = pytest.importorskip("cmarkgfm")
    from cmarkgfm.cmark import Options

    # UNSAFE: raw HTML passes through, so what the test sees is what our escaping let through (GitHub would
    # additionally filter tags; the summary must not depend on that)
    return cmarkgfm.github_flavored_markdown_to_html(text, options=Options.CMARK_OPT_UNSAFE)


@pytest.fixture(scope="module")
def dlami_report(tmp_path_factory, request):
    from conftest import CliRunner
    from elfkit import dlami as _dlami

    root = _dlami(tmp_path_factory.mktemp("dlami"), "libcudnn.so.9.0.0")
    out = tmp_path_factory.mktemp("out")
    r = CliRunner(tmp_path_factory.mktemp("cli"), request)(
        "run", "--sysroot", str(root), "--fail-on", "never", "--json", str(out / "r.json"), "--html",
        str(out / "r.html"), "--markdown", str(out / "r.md"), timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads((out / "r.json").read_text()), out


def test_the_stack_model_says_which_cudnn_torch_loads_and_that_it_is_wrong(dlami_report):
    report, _ = dlami_report
    model = stack.build(report)
    [env] = [e for e in model["environments"] if e["frameworks"]]
    [torch] = env["frameworks"]
    libs = {l["soname"]: l for l in torch["libraries"]}
    cudnn = libs["libcudnn.so.9"]
    assert cudnn["state"] == "wrong" and cudnn["version"] == "9.0.0" and cudnn["via"] == "LD_LIBRARY_PATH"
    assert cudnn["path"] == "/usr/local/cuda-12.4/lib64/libcudnn.so.9.0.0" and "9.1.0.70" in cudnn["note"]
    assert cudnn["finding"] == "DLD-PY-004"
    # a newer same-major copy serves the build: ✓, with the note saying which copy loads and why it serves
    assert libs["libcudart.so.12"]["state"] == "other" and "newer" in libs["libcudart.so.12"]["note"]
    assert libs["libcublas.so.12"]["state"] == "ok" and libs["libcublas.so.12"]["finding"] is None
    assert torch["libraries"][0]["soname"] == "libcudnn.so.9"  # the broken link first
    assert env["bad"] == 1 and model["counts"]["broken"] == 1


def test_problem_cards_lead_with_the_problem_and_the_stack_marks_the_wrong_copy(dlami_report):
    _, out = dlami_report
    html = (out / "r.html").read_text()
    card = html[html.index('<article class="finding fail" id="DLD-PY-004">'):]
    card = card[:card.index("</article>")]
    h3 = re.sub(r"<[^>]+>", "", card[card.index("<h3>"):card.index("</h3>")]).strip()
    assert h3 == "✖ fail torch in pytorch loads libcudnn.so.9 9.0.0 via LD_LIBRARY_PATH, not its own 9.1.0.70"
    assert '<p class="check">The CUDA libraries that load serve' in card and "DLD-PY-004" in card
    section = html[html.index('<section id="stack">'):html.index('<section id="checks">')]
    row = re.search(r'<tr class="lib-wrong">.*?</tr>', section, re.S).group(0)
    assert "libcudnn.so.9" in row and "<strong>9.0.0</strong>" in row and 'href="#DLD-PY-004"' in row
    assert "/<wbr>usr/<wbr>local/<wbr>cuda-12.4/<wbr>lib64/<wbr>libcudnn.so.9.0.0" in row
    # no file a finding names is marked fine: one wrong copy, the newer cudart that serves, and two own copies
    assert section.count('class="lib-ok"') == 2 and section.count('class="lib-other"') == 1
    assert section.count('class="lib-wrong"') == 1


def test_a_finding_about_several_items_is_a_list():
    f = {"status": "fail", "message": "torch in a (/a): libcudnn.so.9 resolves to /x (9.0); "
                                      "torch in b (/b): libcudnn.so.9 resolves to /y (9.0)", "title": "T"}
    assert present.items(f) == ["torch in a (/a): libcudnn.so.9 resolves to /x (9.0)",
                                "torch in b (/b): libcudnn.so.9 resolves to /y (9.0)"]
    assert present.items({"message": "one thing; short"}) == ["one thing; short"]
    whole = ("frameworks built for different CUDA majors in one environment (each needs its own runtime; keep them "
             "in separate processes or environments): env (/e): onnxruntime-gpu (CUDA 12), torch (CUDA 13)")
    assert present.items({"message": whole}) == [whole]  # a '; ' inside parentheses does not split
    assert present.heading({"status": "pass", "title": "T", "headline": "H"}) == "T"
    assert present.heading({"status": "warn", "title": "T", "headline": "H"}) == "H"


def test_the_terminal_leads_with_the_problem_and_wraps_paths_at_the_width(dlami_report):
    from dl_doctor.reports import terminal

    report, _ = dlami_report
    text = terminal.render(report, width=72)
    block = text[text.index("FAIL  torch in pytorch loads libcudnn"):]
    block = block[:block.index("\n\n")]
    lines = block.splitlines()
    assert lines[0] == "FAIL  torch in pytorch loads libcudnn.so.9 9.0.0 via LD_LIBRARY_PATH,"
    assert lines[1] == "      not its own 9.1.0.70 · DLD-PY-004"
    # commands are never wrapped, so that they paste (the tree is an image: they are "# boot the image, then:" lines)
    commands = [l for l in lines if l.startswith("        ")]
    assert commands and all(c.lstrip().startswith("#") for c in commands)
    assert all(len(l) <= 72 for l in lines if l not in commands)
    # the long site-packages path broke after a '/', not in the middle of a name
    assert any(l.rstrip().endswith("/") for l in lines)
    # the stack block names torch's build and the cuDNN it loads, marked with the finding
    stack = text[text.index("Stack: "):text.index("Checks: ")]
    assert "pytorch torch 2.5.1+cu124 for CUDA 12.4 (cuDNN 9.0.0 ✗ DLD-PY-004, NCCL 2.21.5) · Python 3.11" in \
        " ".join(stack.split()), stack
    assert terminal.render(report, width=72, verbose=True).count("\n      DLD-PY-004 checks: The CUDA libraries") == 1


def test_the_markdown_summary_renders_as_github_would(dlami_report):
    _, out = dlami_report
    text = (out / "r.md").read_text()
    html = _gfm(text)
    assert html.count("<table>") == 2  # the stack, and the passed/skipped checks
    stack_table = html[:html.index("</table>")]
    torch_row = next(r for r in re.findall(r"<tr>.*?</tr>", stack_table, re.S) if "torch" in r)
    assert "<code>libcudnn.so.9</code> <code>9.0.0</code> ❌" in torch_row
    assert "<code>libcublas.so.12</code> <code>12.4.5.8</code>" in torch_row  # a four-part version is not an address
    assert len(re.findall(r"<h4>", html)) == 1 and "<h4>❌ FAIL: torch in pytorch loads libcudnn.so.9" in html
    assert html.count("<details>") == html.count("</details>") == 2
    # the tree is an image: what changes a session's environment waits for its boot
    assert re.search(r'<pre(?: lang="sh")?><code(?: class="language-sh")?># boot the image, then: echo \$LD_LIBRARY_PATH',
                     html)
    facts = json.loads(re.search(r'<pre lang="json"><code>(.*?)</code></pre>', html, re.S).group(1)
                       .replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
    cudnn = next(l for l in facts["environments"][0]["frameworks"][0]["libraries"] if l["soname"] == "libcudnn.so.9")
    assert cudnn == {"soname": "libcudnn.so.9", "version": "9.0.0", "state": "wrong", "via": "LD_LIBRARY_PATH",
                     "path": "/usr/local/cuda-12.4/lib64/libcudnn.so.9.0.0"}


def _hostile_report(report):
    rep = copy.deepcopy(report)
    f = next(f for f in rep["findings"] if f["id"] == "DLD-PY-004")
    f["headline"] = HOSTILE
    f["message"] = HOSTILE + "; " + HOSTILE
    f["fix"]["commands"] = [HOSTILE]
    env = rep["facts"]["python_envs"]["environments"][0]
    env["name"] = HOSTILE
    env["consumers"][0]["version"] = HOSTILE
    rep["host"]["os"] = HOSTILE
    return rep


def test_a_hostile_value_cannot_break_out_mention_link_or_inject(dlami_report):
    report, _ = dlami_report
    text = markdown.render(_hostile_report(report))
    html = _gfm(text)
    assert "<img" not in html and "<script" not in html and "<a " not in html  # no image, no link, no HTML
    assert html.count("<details>") == html.count("</details>") == 2  # no block closed early
    assert "<h1" not in html and "<h2" not in html and "<del>" not in html and "<strong>bold" not in html
    plain = re.sub(r"<code>.*?</code>|<pre.*?</pre>", "", html, flags=re.S)
    assert not re.search(r"@[A-Za-z0-9]", plain)  # a word joiner follows every '@': no mention, no e-mail link
    assert "evil.example/i.png" in html  # the text is all there, as text
    stack_table = html[:html.index("</table>")]
    assert all(r.count("<td>") == 2 for r in re.findall(r"<tr>.*?</tr>", stack_table, re.S)[1:])  # no cell split


# what GFM's autolink extension and CommonMark link: www., URL schemes, e-mail addresses (bare and with mailto: or
# xmpp:), <scheme:...> autolinks; with the punctuation that starts one mid-word ('_', '*', '~', '(')
AUTOLINKS = ["www.x.org", "x_www.example.org", "Www.Example.org", "x*www.x.org", "(WWW.X.ORG)", "~www.x.org",
             "http://x.org/a", "see https://x.org/a?b=c", "HTTPS://X.ORG", "ftp://x.org", "x_http://x.org",
             "user@example.com", "first.last+tag@sub.example.co.uk", "mailto:a@b.co", "xmpp:foo@bar.baz",
             "<http://x>", "<user@example.com>", "[x](http://x.org)", "![x](http://x.org/i.png)"]
BEFORE = ["", "_", "__", "*", "**", "~", "~~", "(", "-", ".", ":", "/", "\\", "`", "&", "<", "[", "!", "x", " ", "@"]
LINKS = ["www.x.org", "WWW.X.ORG", "http://x.org/a", "https://x.org", "ftp://x.org", "a@b.co", "mailto:a@b.co",
         "xmpp:a@b.co"]
AFTER = ["", ")", ".", "_", "*", ">", "/b"]


def _visible(html: str) -> str:
    """The text a reader sees in rendered HTML (tags dropped, entities decoded, invisible word joiners removed)."""
    import html as html_module

    return html_module.unescape(re.sub(r"<[^>]*>", "", html)).replace("\u2060", "").strip()


def _with_values(report, value):
    """``report`` with ``value`` everywhere a machine value reaches the summary's text, tables and code spans."""
    rep = copy.deepcopy(report)
    f = next(f for f in rep["findings"] if f["id"] == "DLD-PY-004")
    f["headline"] = f["title"] = f["message"] = f["fix"]["summary"] = value
    passed = next(f for f in rep["findings"] if f["status"] == "pass")
    passed["message"] = value
    env = rep["facts"]["python_envs"]["environments"][0]
    env["name"] = value
    env["consumers"][0]["version"] = value
    rep["host"]["os"] = rep["host"]["hostname"] = value
    rep["tool"]["version"] = value
    return rep


@pytest.mark.parametrize("value", AUTOLINKS)
def test_no_machine_value_becomes_a_link_and_every_character_is_still_read(value):
    for md in (markdown.text(value), markdown.code(value), markdown.code(value, in_table=True)):
        html = _gfm(md)
        assert "<a" not in html and "<img" not in html, (md, html)
        assert _visible(html) == value, (md, html)  # the escapes render invisibly: nothing lost, no case changed


@pytest.mark.parametrize("value", AUTOLINKS)
def test_the_summary_of_a_report_links_no_machine_value(dlami_report, value):
    html = _gfm(markdown.render(_with_values(dlami_report[0], value)))
    assert "<a" not in html and "<img" not in html


def test_a_link_behind_any_punctuation_never_links_in_the_summary(dlami_report):
    """Every link form behind and before each character that can start or end one mid-word (GFM starts a www. link
    after '_', '*', '~' or '('), through the text, the code spans and the whole summary."""
    for value in (b + link + a for b in BEFORE for link in LINKS for a in AFTER):
        assert "<a" not in _gfm(markdown.text(value)) and "<a" not in _gfm(markdown.code(value)), value
        assert _visible(_gfm(markdown.text(value))) == " ".join(value.split()), value
        html = _gfm(markdown.render(_with_values(dlami_report[0], value)))
        assert "<a" not in html, value


def test_control_and_bidi_characters_are_shown_escaped_on_every_html_page(dlami_report):
    """A bidirectional override makes a path read as another on the page and a control character can hide text:
    both are shown as their escapes, in the template's values, the stack picture and the fleet page alike."""
    from dl_doctor.integrations import fleet
    from dl_doctor.reports import html as html_report

    evil = "/opt/\u202eos.bin\x1b[8m/venv"
    page = html_report.render(_with_values(dlami_report[0], evil))
    assert "\u202e" not in page and "\x1b" not in page
    stack_part = page[page.index('<section id="stack">'):page.index('<section id="checks">')]
    assert "\\u202eos.bin\\x1b[8m/" in stack_part.replace("<wbr>", "")  # the environment's name in the picture
    assert page.replace("<wbr>", "").count("\\u202eos.bin\\x1b[8m/") >= 6
    failing = [{"id": "DLD-GPU-001", "status": "fail", "headline": evil}]
    nodes = [fleet.Node(evil, "r", {"version": "1", "identity": {}, "compare": {}, "failing": failing, "warnings": 0})]
    page = html_report.render_fleet(fleet.compare(fleet.Fleet(nodes=nodes)))
    assert "\u202e" not in page and "\x1b" not in page and "\\u202eos.bin\\x1b[8m/" in page


def test_the_summary_stays_under_the_limit_and_never_leaves_a_block_open(dlami_report):
    report, _ = dlami_report
    big = copy.deepcopy(report)
    template = next(f for f in big["findings"] if f["id"] == "DLD-PY-012")
    for n in range(400):
        f = copy.deepcopy(template)
        f["id"] = f"DLD-PY-012:env{n}"
        f["message"] = "; ".join(f"torch in env{n}-{i} loads /very/long/path/number/{i}/libcudnn.so.9 (9.0.0)"
                                 for i in range(20))
        big["findings"].append(f)
    for limit in (markdown.GITHUB_LIMIT, 20000, 5000):
        text = markdown.render(big, limit)
        assert len(text) <= limit
        html = _gfm(text)
        assert html.count("<details>") == html.count("</details>")
        assert text.count("```") % 2 == 0
        assert "torch in pytorch loads libcudnn.so.9" in html  # the first problem's heading survives


def test_markdown_redacts_host_names_and_users_but_not_versions(run_cli, dlami_report, tmp_path):
    report, _ = dlami_report
    rep = copy.deepcopy(report)
    rep["facts"].setdefault("system", {})["hostname"] = "gpu-node-17.corp.example"
    rep["host"]["hostname"] = "gpu-node-17.corp.example"
    f = next(f for f in rep["findings"] if f["id"] == "DLD-PY-004")
    f["message"] += "; on gpu-node-17.corp.example at 10.20.30.40 the same cuDNN 9.1.0.70 is shadowed"
    path = tmp_path / "report.json"
    path.write_text(json.dumps(rep))
    r = run_cli("report", str(path), "--markdown", "-", timeout=120)
    assert r.returncode == 0, r.stderr
    assert "gpu-node-17" not in r.stdout and "10.20.30.40" not in r.stdout
    assert "[HOST-1]" in r.stdout and "[IP-1]" in r.stdout.replace("\\[", "[").replace("\\]", "]")
    assert "9.1.0.70" in r.stdout and "12.4.5.8" in r.stdout


def test_report_command_rerenders_a_bundle_and_refuses_bad_input(run_cli, dlami_report, tmp_path):
    report, out = dlami_report
    r = run_cli("report", str(out / "r.json"), "--html", str(tmp_path / "again.html"), "--markdown",
                str(tmp_path / "again.md"), "--json", str(tmp_path / "again.json"), timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"Report: {tmp_path / n}" for n in ("again.json", "again.md", "again.html")]
    again = json.loads((tmp_path / "again.json").read_text())  # the report as read and validated, written again
    assert [f["id"] for f in again["findings"]] == [f["id"] for f in report["findings"]]
    assert 'id="stack"' in (tmp_path / "again.html").read_text()
    bad = tmp_path / "bad.json"
    for content, words in (('{"findings": "x"}', "not a dl-doctor report"),
                           ('{"findings": [], "facts": {}, "schema_version": "1", "run": {"started_at": "2026-01-01T00:00:00Z", '
                            '"duration_s": "x"}, "host": "x", "summary": 7}', None),
                           ('{"findings": [], "facts": {}, "schema_version": "1", "run": {}}', "collected_at should be"),
                           ("[1, 2]", "not a dl-doctor report")):
        bad.write_text(content)
        r = run_cli("report", str(bad), "--markdown", "-", timeout=120)
        if words is None:  # a report with no findings and a bad duration still renders: its parts are rebuilt
            assert r.returncode == 0, r.stderr
            assert "no checks ran" in r.stdout
        else:
            assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr
    r = run_cli("report", str(out / "r.json"), timeout=120)
    assert r.returncode == 2 and "--html PATH, --markdown PATH|- and/or --json PATH|-" in r.stderr
    r = run_cli("check", str(out / "r.json"), "--json", "-", "--markdown", "-", timeout=120)
    assert r.returncode == 2 and "both want stdout" in r.stderr
    r = run_cli("check", str(out / "r.json"), "--json", "-", "--html", "-", timeout=120)
    assert r.returncode == 2 and "--json - and --html - both want stdout" in r.stderr
    # --html - is the page alone on stdout, like --json -: no file named "-" is written
    r = run_cli("check", str(out / "r.json"), "--html", "-", "--output-dir", str(tmp_path / "arch"), "--quiet",
                timeout=120)
    assert r.stdout.startswith("<!DOCTYPE html>") and r.stdout.rstrip().endswith("</html>"), r.stderr
    assert not (tmp_path / "-").exists()
    assert [p.suffix for p in (tmp_path / "arch").iterdir()] == [".json"]  # the JSON under its default name


def _many_environments(report):
    rep = copy.deepcopy(report)
    envs = rep["facts"]["python_envs"]["environments"]
    base = next(e for e in envs if e.get("consumers"))
    modelled = next(e for e in rep["loading"]["environments"] if e["prefix"] == base["prefix"])
    libs = modelled["consumers"][0]["libraries"]
    out, loading = [], []
    for n in range(8):
        env = copy.deepcopy(base)
        env["name"], env["prefix"] = f"env{n}", f"/opt/conda/envs/env{n}"
        out.append(env)
        m = copy.deepcopy(modelled)
        m["name"], m["prefix"] = env["name"], env["prefix"]
        for c in m["consumers"]:
            c["libraries"] = [dict(libs[i % len(libs)], soname=f"libfake{i}.so.{n}") for i in range(30)]
        loading.append(m)
    rep["facts"]["python_envs"]["environments"] = out
    rep["loading"]["environments"] = loading
    return rep


def test_eight_environments_of_thirty_libraries_stay_a_readable_page(dlami_report):
    from dl_doctor.reports import html as html_report

    page = html_report.render(_many_environments(dlami_report[0]))
    section = page[page.index('<section id="stack">'):page.index('<section id="checks">')]
    assert section.count('<details class="env') == 8
    assert section.count("<tr class=\"lib-") == 8 * 30
    assert len(page) < 2_000_000


def _chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(not _chromium(), reason="headless Chromium is not installed (Debian package 'chromium')")
def test_chromium_shows_the_stack_at_phone_width_and_prints_it(dlami_report, tmp_path):
    _, out = dlami_report
    flags = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", f"--user-data-dir={tmp_path / 'profile'}"]
    uri = (out / "r.html").as_uri()
    dom = subprocess.run(flags + ["--dump-dom", uri], capture_output=True, text=True, timeout=90).stdout
    dom = dom.replace("<wbr>", "")
    assert "/usr/local/cuda-12.4/lib64/libcudnn.so.9.0.0" in dom and 'class="lib-wrong"' in dom
    pdf = tmp_path / "r.pdf"
    subprocess.run(flags + [f"--print-to-pdf={pdf}", "--no-pdf-header-footer", uri], capture_output=True, timeout=90)
    assert pdf.read_bytes().startswith(b"%PDF")
    if shutil.which("pdftotext"):  # poppler-utils: the printed page holds the picture
        printed = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True, timeout=60).stdout
        assert "The stack" in printed and "libcudnn.so.9" in printed and "9.0.0" in printed
