"""Rank selection in the explorer under ``panel serve``, in headless Chromium: a box dragged over the per-rank
plot selects ranks, and the findings, traffic and efficiency tabs follow; a screenshot of every tab."""

from __future__ import annotations

import re

import pytest

from tests.browser.helpers import BIN, free_port, wait_for_new_picture, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

#: Seconds for the server to read the bundled series and send the first page.
RENDER_TIMEOUT = 120
#: Texts of the bokeh titles in the page (plot titles are drawn on a canvas, not in the DOM).
TITLES_JS = "() => [...Bokeh.documents[0].all_models].filter(m => m.type === 'Title').map(m => m.text)"


def drag_box(page, canvas, start: float, end: float) -> None:
    """Drag a box over ``canvas`` from ``start`` to ``end`` (fractions of its width), from low in the plot
    (a drag must start inside the frame) to above its top (the box stops at the frame)."""
    box = canvas.bounding_box()
    x0, x1 = box["x"] + start * box["width"], box["x"] + end * box["width"]
    page.mouse.move(x0, box["y"] + 0.8 * box["height"])
    page.mouse.down()
    page.mouse.move(x1, box["y"] + 2, steps=10)
    page.mouse.up()


def show_tab(page, name: str) -> None:
    page.locator(".bk-tab", has_text=re.compile(f"^{name}$")).click()


def test_box_selection_filters_the_tabs(page, serve, artifacts):
    port = free_port()
    serve([str(BIN / "panel"), "serve", "perfkit/widgets/explorer_app.py", f"--port={port}", "--address=127.0.0.1",
           f"--allow-websocket-origin=127.0.0.1:{port}"], port)
    page.goto(f"http://127.0.0.1:{port}/explorer_app", timeout=RENDER_TIMEOUT * 1000)
    plot = page.locator(".bk-Canvas").first
    plot.wait_for(timeout=RENDER_TIMEOUT * 1000)
    status = page.locator("p", has_text=re.compile(r"^selection\b")).first
    wait_until(lambda: "none, every rank" in status.inner_text(), 30, "the selection line")
    first = wait_until(plot.screenshot, 10, "a picture of the plot")
    page.locator("select").first.select_option("96/slt")
    wait_until(lambda: "0 .. 95" in page.locator(".bk-slider-title").first.inner_text(), 30, "run 96/slt")
    wait_for_new_picture(plot, first, 30, "the plot to show run 96/slt")

    drag_box(page, plot, 0.3, 0.5)
    line = wait_until(lambda: "box/lasso in the per-rank plot" in (text := status.inner_text()) and text, 30,
                      "the box to select ranks")
    count, ranks = re.search(r"(\d+) ranks?: ([\d, -]+)", line).groups()
    assert 5 < int(count) < 60, line
    page.screenshot(path=artifacts / "selection-per-rank.png")

    show_tab(page, "findings")
    page.get_by_text(f"Findings for 96/slt on {count} ranks in view ({ranks.strip()})").wait_for(timeout=60_000)
    page.screenshot(path=artifacts / "selection-findings.png", full_page=True)

    show_tab(page, "traffic")
    wait_until(lambda: any(f"between the {count} selected ranks" in t for t in page.evaluate(TITLES_JS)), 60,
               "the traffic heatmap to keep the selected ranks")
    page.screenshot(path=artifacts / "selection-traffic.png")

    show_tab(page, "efficiency")
    page.get_by_text(f"96/slt [{count} ranks]").first.wait_for(timeout=60_000)
    page.screenshot(path=artifacts / "selection-efficiency.png", full_page=True)
    for tab in ("scaling", "placement"):
        if page.locator(".bk-tab", has_text=re.compile(f"^{tab}$")).count():
            show_tab(page, tab)
            page.locator(".bk-Canvas >> visible=true").first.wait_for(timeout=60_000)
            page.screenshot(path=artifacts / f"selection-{tab}.png", full_page=True)

    page.get_by_role("button", name="clear selection").click()
    wait_until(lambda: "none, every rank" in status.inner_text(), 30, "the selection to clear")
    show_tab(page, "findings")
    page.get_by_text("Findings for 96/slt on every rank").wait_for(timeout=60_000)
    assert page.offsite == [], f"the app asked the internet for {page.offsite}"
