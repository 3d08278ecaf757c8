"""The explorer's call-site tab under ``panel serve`` in headless Chromium, on the bundled mpiP reports of HPCCG."""

from __future__ import annotations

import re

import pytest

import perfkit
from perfkit.plots.callsites import TOP
from perfkit.widgets.callsites import read_callsites, run_ranks, site_table
from tests.browser.helpers import APP_RENDER_TIMEOUT, BIN, REPO, free_port, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

REPORTS = "tests/data/mpip/real/HPCCG-strong/*/*.mpiP"
#: The call sites drawn: the ``site`` column of the bars' data source in the page's document.
BARS_JS = """
() => typeof Bokeh !== "undefined" && Bokeh.documents.length > 0 && [...Bokeh.documents[0].all_models]
  .filter(m => m.data && m.data.site && m.data.time_words).map(m => Array.from(m.data.site))
"""


def test_call_site_tab_draws_the_sites_of_an_mpip_report(page, serve, artifacts):
    runs = perfkit.open_runs(str(REPO / REPORTS))
    run = next(str(r) for r in runs["run"].values if float(runs["nprocs"].sel(run=r)) == 16)
    path, form = str(runs["source"].sel(run=run).values), str(runs["format"].sel(run=run).values)
    expected = site_table(read_callsites(path, form, run_ranks(runs, run)))["site"].head(TOP).tolist()

    port = free_port()
    serve([str(BIN / "panel"), "serve", "perfkit/widgets/explorer_app.py", f"--port={port}", "--address=127.0.0.1",
           f"--allow-websocket-origin=127.0.0.1:{port}", "--args", REPORTS], port)
    page.goto(f"http://127.0.0.1:{port}/explorer_app", timeout=APP_RENDER_TIMEOUT * 1000)
    page.locator(".bk-Canvas").first.wait_for(timeout=APP_RENDER_TIMEOUT * 1000)
    page.locator("select").first.select_option(run)
    page.locator(".bk-tab", has_text=re.compile("^call sites$")).click()
    page.locator("text=/Where MPI time goes in/ >> visible=true").first.wait_for(timeout=60_000)
    drawn = wait_until(lambda: [s for s in page.evaluate(BARS_JS) or [] if s], 60, "the call-site bars")
    assert sorted(drawn[-1]) == sorted(expected) and len(expected) > 5, (drawn, expected)
    canvas = page.locator(".bk-Canvas >> visible=true").first
    canvas.wait_for(timeout=30_000)
    assert canvas.bounding_box()["height"] > 300
    page.locator(".tabulator >> visible=true").first.wait_for(timeout=30_000)
    assert page.locator(".tabulator-row >> visible=true").count() > 5
    page.screenshot(path=artifacts / "panel-serve-callsites.png", full_page=True)
    assert page.offsite == []
