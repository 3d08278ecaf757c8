"""The explorer's plots as a reader sees them in Chromium: the scaling tab's plots fill the page."""

from __future__ import annotations

import re

import pytest

from tests.browser.helpers import open_explorer_app, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

#: Smallest share of the page width the data area (frame) of each scaling plot must take.
MIN_SHARE = 0.4
SCALING_TITLES = ("elapsed vs processes", "speedup", "parallel efficiency")

#: Title, frame (data area) width and left edge [px], visibility, and the labelled ticks of every bokeh plot shown.
PLOTS_JS = """() => {
  const plots = [];
  for (const view of Bokeh.index.query((v) => v.frame != null && v.model.title != null)) {
    const box = view.el.getBoundingClientRect();
    plots.push({title: view.model.title.text, frame: view.frame.bbox.width, left: box.left,
                visible: box.width > 0 && view.el.offsetParent !== null});
  }
  return {page: document.documentElement.clientWidth, plots: plots};
}"""


def test_scaling_tab_plots_fill_the_page(page, serve, artifacts):
    open_explorer_app(page, serve)
    page.wait_for_timeout(500)
    page.screenshot(path=artifacts / "plots-per-rank-tab.png")
    page.locator(".bk-tab", has_text=re.compile("^scaling$")).click()

    def scaling_plots():
        found = page.evaluate(PLOTS_JS)
        shown = [p for p in found["plots"] if p["visible"] and p["title"].split("\n")[0] in SCALING_TITLES]
        return (found["page"], shown) if len(shown) == len(SCALING_TITLES) and all(p["frame"] > 0 for p in shown) \
            else None

    width, shown = wait_until(scaling_plots, 60, "the three scaling plots")
    page.wait_for_timeout(500)  # let the last layout pass settle before the picture
    width, shown = scaling_plots()
    page.screenshot(path=artifacts / "plots-scaling-tab.png", full_page=True)
    for plot in shown:
        assert plot["frame"] >= MIN_SHARE * width, f"{plot['title']!r}: {plot['frame']:.0f} px of {width} px"
