"""What a person sees, through the real things people look with (tests/e2e/test_personas.py).

- ``screen``: a command run in a real pseudo-terminal of a given size, its output fed to pyte's VT100 screen: the
  lines an 80x24 terminal shows when the command ends (wrapping, scrolling and colour codes as a terminal does them).
- ``browser_measure``: a report page in headless Chromium at a window width, with a measuring script added to a copy
  (the page itself allows no script): what the layout engine computed (widths, colours, the order of things).
- ``gfm``: Markdown through GitHub's own cmark-gfm (the cmarkgfm bindings), as GitHub renders a comment.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import shutil
import struct
import subprocess
import termios
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass
class Screen:
    returncode: int
    raw: str            # what the program wrote, colour codes and all (the terminal's line ends as \r\n)
    lines: List[str]    # what the terminal shows at the end, one entry per row, trailing blanks stripped
    cols: int
    rows: int

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def printed(self) -> List[str]:
        """Every line the program printed, colour codes removed (before the terminal wrapped them)."""
        return [ANSI.sub("", l) for l in self.raw.replace("\r\n", "\n").split("\n")]

    def last_line(self) -> str:
        shown = [l for l in self.lines if l.strip()]
        return shown[-1] if shown else ""


def screen(argv: Sequence[str], cols: int = 80, rows: int = 24, env: Optional[Dict[str, str]] = None,
           cwd: Optional[Path] = None, timeout: float = 120) -> Screen:
    """Run ``argv`` on a pseudo-terminal of ``cols`` x ``rows`` (the kernel's window size, as a terminal emulator
    sets it; no COLUMNS or LINES in the environment) and read it to the end."""
    import pyte

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    environ = dict(env if env is not None else os.environ)
    environ.pop("COLUMNS", None)
    environ.pop("LINES", None)
    environ.setdefault("TERM", "xterm-256color")
    proc = subprocess.Popen(list(argv), stdin=slave, stdout=slave, stderr=slave, env=environ,
                            cwd=str(cwd) if cwd else None, start_new_session=True)
    os.close(slave)
    chunks: List[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every holder of the terminal's other side has closed it
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
    raw = b"".join(chunks).decode("utf-8", "replace")
    term = pyte.Screen(cols, rows)
    pyte.Stream(term).feed(raw)
    return Screen(proc.returncode, raw, [l.rstrip() for l in term.display], cols, rows)


def chromium() -> Optional[str]:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# Added to a copy of the page, after its content: it writes what the layout engine computed into the DOM, which
# --dump-dom then prints. Only the copy has a script; the page's own policy forbids any.
MEASURE = """
<script>
(function () {
  function box(el) {
    var s = getComputedStyle(el), r = el.getBoundingClientRect();
    return {text: (el.innerText || '').trim().slice(0, 200), cls: el.className, color: s.color,
            background: s.backgroundColor, border: s.borderLeftColor + ' ' + s.borderLeftWidth + ' ' +
            s.borderLeftStyle, top: r.top + window.scrollY, left: r.left, width: r.width,
            visible: r.width > 0 && r.height > 0};
  }
  var out = {innerWidth: window.innerWidth, scrollWidth: document.documentElement.scrollWidth,
             marks: {}};
  var sel = JSON.parse(document.getElementById('dld-measure-selectors').textContent);
  Object.keys(sel).forEach(function (k) {
    out.marks[k] = Array.prototype.map.call(document.querySelectorAll(sel[k]), box);
  });
  var host = window.parent && window.parent !== window ? window.parent.document : document;
  var pre = host.createElement('pre');
  pre.id = 'dld-measured';
  pre.textContent = JSON.stringify(out);
  host.body.appendChild(pre);
})();
</script>
"""


def browser_measure(html: str, selectors: Dict[str, str], width: int, tmp: Path, height: int = 1600) -> Dict:
    """The page at ``width`` CSS pixels in headless Chromium: the viewport and document widths and, for each named
    CSS selector, every element it selects (text, class, computed colours, left border, position)."""
    page = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html, count=1)
    addition = (f'<script type="application/json" id="dld-measure-selectors">{json.dumps(selectors)}</script>'
                + MEASURE)
    page = page.replace("</body>", addition + "</body>") if "</body>" in page else page + addition
    if width < 500:
        # a desktop Chromium window is at least 500 px wide: a phone's width is an iframe of that width, whose
        # document lays out at it (its viewport is the frame), as a phone's browser lays out the page
        import html as htmllib

        page = (f'<!doctype html><html><body style="margin:0"><iframe style="border:0;width:{width}px;'
                f'height:{height}px" srcdoc="{htmllib.escape(page, quote=True)}"></iframe></body></html>')
    copy = tmp / f"measure-{width}.html"
    copy.write_text(page, encoding="utf-8")
    argv = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp / f'profile-{width}'}",
            f"--window-size={width},{height}", "--virtual-time-budget=5000", "--dump-dom", copy.as_uri()]
    dom = subprocess.run(argv, capture_output=True, text=True, timeout=120).stdout
    found = re.search(r'<pre id="dld-measured">(.*?)</pre>', dom, re.S)
    assert found, f"the measuring script did not run: {dom[-500:]}"
    import html as htmllib

    return json.loads(htmllib.unescape(found.group(1)))


def screenshot(html_path: Path, width: int, out: Path, tmp: Path, height: int = 1600) -> Path:
    subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp / f'shot-{width}'}",
                    f"--window-size={width},{height}", f"--screenshot={out}", html_path.as_uri()],
                   capture_output=True, timeout=120)
    return out


def gfm(markdown: str) -> str:
    """Markdown as GitHub renders it (cmark-gfm with GitHub's extensions: tables, autolinks, strikethrough)."""
    import cmarkgfm
    from cmarkgfm.cmark import Options

    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE * 0)
