"""The explorer served by Voila (notebooks/explorer.ipynb) in headless Chromium: renders, answers the widgets.

Set ``PERFKIT_UPDATE_SCREENSHOT=1`` to also refresh the README picture ``docs/img/explorer.png``.
"""

from __future__ import annotations

import os
import re
from urllib.parse import urlparse

import pytest

from tests.browser.helpers import BIN, REPO, drag_upper_handle, free_port, wait_for_new_picture, wait_until
from tests.browser.test_selection import drag_box

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

#: Voila runs the whole notebook (imports, reading six runs) before the dashboard appears.
RENDER_TIMEOUT = 150
README_PICTURE = REPO / "docs" / "img" / "explorer.png"


def offsite(urls: list[str]) -> list[str]:
    """The URLs that ask another machine: all but this one's (127.0.0.1, localhost) and data: or blob: URLs."""
    return [url for url in urls if urlparse(url).scheme not in ("data", "blob")
            and urlparse(url).hostname not in ("127.0.0.1", "localhost")]


def test_explorer_in_voila(page, serve, artifacts):
    port = free_port()
    serve([str(BIN / "voila"), "notebooks/explorer.ipynb", "--no-browser", f"--port={port}",
           "--Voila.ip=127.0.0.1"], port)
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(f"http://127.0.0.1:{port}/", timeout=RENDER_TIMEOUT * 1000)

    plot = page.locator(".bk-Canvas").first
    plot.wait_for(timeout=RENDER_TIMEOUT * 1000)
    # Voila started from the repository root takes its configuration there (voila.json): the page template
    # perfkit, which links no stylesheet from a CDN (Voila's lab template links Font Awesome's).
    assert requests and offsite(requests) == [], f"opening the explorer asked another machine for {offsite(requests)}"
    title = page.locator(".bk-slider-title").filter(has_text="ranks")
    title.wait_for(timeout=30_000)
    assert re.search(r"ranks: 0 \.\. 47", title.inner_text()), title.inner_text()
    first = wait_until(plot.screenshot, 10, "a picture of the plot")

    page.locator("select").first.select_option("384/slt")
    wait_until(lambda: "0 .. 383" in title.inner_text(), 30, "the rank slider to follow the run")
    whole_run = wait_for_new_picture(plot, first, 30, "the plot to show run 384/slt")
    page.screenshot(path=artifacts / "voila-explorer.png")
    if os.environ.get("PERFKIT_UPDATE_SCREENSHOT"):
        page.locator(".jp-OutputArea-output").filter(has=plot).first.screenshot(path=README_PICTURE)

    drag_upper_handle(page, page, -600)
    wait_until(lambda: not title.inner_text().endswith("383"), 10, "the slider to move")
    wait_for_new_picture(plot, whole_run, 30, "the plot to follow the rank range")
    page.screenshot(path=artifacts / "voila-explorer-ranks.png")

    status = page.locator("p", has_text=re.compile(r"^selection\b")).first
    drag_box(page, plot, 0.3, 0.5)
    line = wait_until(lambda: "box/lasso in the per-rank plot" in (text := status.inner_text()) and text, 30,
                      "the box to select ranks (through the ipywidgets comms)")
    count, ranks = re.search(r"(\d+) ranks?: ([\d, -]+)", line).groups()
    page.screenshot(path=artifacts / "voila-explorer-selection.png")
    page.locator(".bk-tab", has_text=re.compile("^findings$")).click()
    page.get_by_text(f"Findings for 384/slt on {count} ranks in view ({ranks.strip()})").wait_for(timeout=60_000)
    # nothing, not even a stylesheet of a view first built after the page loaded (a tab's first visit)
    assert page.offsite == [], f"the dashboard asked the internet for {page.offsite}"
