"""The explorer as an app under ``panel serve`` in headless Chromium: renders offline, answers the widgets."""

from __future__ import annotations

import re

import pytest

from tests.browser.helpers import drag_upper_handle, open_explorer_app, wait_for_new_picture, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]


def test_explorer_under_panel_serve(page, serve, artifacts):
    plot = open_explorer_app(page, serve)
    title = page.locator(".bk-slider-title").filter(has_text="ranks")
    assert re.search(r"ranks: 0 \.\. 47", title.inner_text()), title.inner_text()
    first = wait_until(plot.screenshot, 10, "a picture of the plot")

    page.locator("select").first.select_option("96/slt")
    wait_until(lambda: "0 .. 95" in title.inner_text(), 30, "the rank slider to follow the run")
    whole_run = wait_for_new_picture(plot, first, 30, "the plot to show run 96/slt")

    drag_upper_handle(page, page, -600)
    wait_until(lambda: not title.inner_text().endswith("95"), 10, "the slider to move")
    wait_for_new_picture(plot, whole_run, 30, "the plot to follow the rank range")
    page.screenshot(path=artifacts / "panel-serve-explorer.png")

    for tab, shows in (("scaling", ".bk-Canvas"), ("findings", "text=Findings for 96/slt"), ("traffic", ".bk-Canvas")):
        page.locator(".bk-tab", has_text=re.compile(f"^{tab}$")).click()
        page.locator(f"{shows} >> visible=true").first.wait_for(timeout=30_000)
        page.screenshot(path=artifacts / f"panel-serve-{tab}.png")
    assert page.offsite == [], f"the app asked the internet for {page.offsite}"
