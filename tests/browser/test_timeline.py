"""The explorer's timeline tab under ``panel serve`` in headless Chromium, on the bundled Score-P fan-in."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.browser.helpers import BIN, REPO, free_port, wait_for_new_picture, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

FAN_IN = REPO / "tests" / "data" / "otf2" / "casita-10-mpi-tags" / "traces.otf2"
APP = f"""
import perfkit
from perfkit.widgets.explorer import explore
explore(perfkit.open_profile({str(FAN_IN)!r}, timeline_bins=60)).servable()
"""


#: The text of the tooltips shown (bokeh draws them in the shadow DOM of its views).
TOOLTIP_TEXT = """() => {
  const found = [];
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.classList && [...el.classList].some((c) => c.toLowerCase().includes('tooltip'))
          && el.offsetParent !== null && el.innerText) found.push(el.innerText);
      if (el.shadowRoot) walk(el.shadowRoot);
    }
  };
  walk(document);
  return found.join('\\n');
}"""


def _tooltip(page, canvas, fx: float, fy: float) -> str:
    """The hover text at the fraction (``fx``, ``fy``) of the canvas ('' when none shows)."""
    box = canvas.bounding_box()
    page.mouse.move(box["x"] + box["width"] * fx, box["y"] + box["height"] * fy)
    page.wait_for_timeout(300)
    return page.evaluate(TOOLTIP_TEXT)


def test_timeline_tab_under_panel_serve(page, serve, artifacts, tmp_path: Path):
    app = tmp_path / "timeline_app.py"
    app.write_text(APP)
    port = free_port()
    serve([str(BIN / "panel"), "serve", str(app), f"--port={port}", "--address=127.0.0.1",
           f"--allow-websocket-origin=127.0.0.1:{port}"], port)
    page.goto(f"http://127.0.0.1:{port}/timeline_app", timeout=120_000)
    page.locator(".bk-tab", has_text=re.compile("^timeline$")).click(timeout=120_000)
    page.locator("text=/what each rank did most in/ >> visible=true").first.wait_for(timeout=60_000)
    canvas = page.locator(".bk-Canvas >> visible=true").last
    canvas.wait_for(timeout=30_000)
    page.screenshot(path=artifacts / "panel-serve-timeline.png", full_page=True)

    # rank 0 (bottom row) waits for its late senders through most of the run's second half
    texts = [_tooltip(page, canvas, fx / 40, fy) for fy in (0.83, 0.8) for fx in range(20, 37)]
    said = [t for t in texts if re.search(r"did most:?\s*late-sender wait", t)]
    assert said, texts
    assert re.search(r"rank:?\s*0\b", said[0]) and re.search(r"time:?\s*[\d.]+ - [\d.]+ s", said[0]), said[0]
    page.screenshot(path=artifacts / "panel-serve-timeline-hover.png", full_page=True)

    before = wait_until(canvas.screenshot, 10, "a picture of the timeline")
    page.locator("select >> visible=true").last.select_option("6")
    wait_for_new_picture(canvas, before, 60, "the timeline at 6 columns")
    page.locator("text=/did most in 108 ms/ >> visible=true").first.wait_for(timeout=30_000)
    page.screenshot(path=artifacts / "panel-serve-timeline-6.png", full_page=True)
    assert page.offsite == [], f"the app asked the internet for {page.offsite}"
