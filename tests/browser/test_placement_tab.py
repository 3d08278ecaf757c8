"""The explorer's placement tab under ``panel serve`` in headless Chromium, on a bundled MPInside run."""

from __future__ import annotations

import re

import numpy as np
import pytest

import perfkit
from perfkit.placement.launch import read_launch
from perfkit.placement.network import Network
from perfkit.placement.predict import predict_placement, run_seconds
from tests.browser.helpers import BIN, REPO, free_port, open_explorer_app, wait_for_new_picture, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

#: Voila runs the whole explorer notebook (imports, reading six runs) before the dashboard appears.
VOILA_TIMEOUT = 150
#: Seconds for a map (the first one also cuts the run out of the combined series).
MAP_TIMEOUT = 90
#: A closed loop recorded on the testbed: before.mpinside and its re-runs scotch/round_robin.mpinside.
LOOP = REPO / "data" / "cluster" / "stencil2d-shuffled"


def number_input(page, label: str):
    """The text box of the numeric input titled ``label``."""
    group = page.locator(".bk-input-group", has=page.locator("label", has_text=re.compile(f"^{re.escape(label)}$")))
    return group.locator("input").first


def shows(page, text: str) -> bool:
    return page.locator(f"text={text} >> visible=true").count() == 1


def table_text(page) -> str:
    return page.locator("table >> visible=true", has_text="inter-node bytes").first.inner_text()


def test_placement_tab_under_panel_serve(page, serve, artifacts, tmp_path):
    open_explorer_app(page, serve)
    page.locator("select").first.select_option("96/slt")

    page.locator(".bk-tab", has_text=re.compile("^placement$")).click()
    shown = page.locator("text=/Mapping with Scotch|inter-node bytes/ >> visible=true").first
    shown.wait_for(timeout=30_000)
    if "Mapping" in shown.inner_text():  # the first map also cuts the run out of the series: usually seconds
        page.screenshot(path=artifacts / "panel-serve-placement-mapping.png")  # progress bar and Cancel
    page.locator("text=inter-node bytes >> visible=true").first.wait_for(timeout=MAP_TIMEOUT * 1000)
    first_table = table_text(page)
    assert "Scotch" in first_table and "vs block" in first_table, first_table
    assert shows(page, "96 ranks on 4 nodes x 24 cores (2 sockets, one switch), Scotch;")
    page.locator("text=Predicted elapsed time >> visible=true").first.wait_for(timeout=30_000)  # follows the table
    heatmaps = page.locator(".bk-Canvas >> visible=true")
    wait_until(lambda: heatmaps.count() >= 2, 30, "the two node x node heatmaps")
    before_after = wait_until(heatmaps.nth(1).screenshot, 10, "a picture of the 'after' heatmap")
    _fits_the_page(page)
    page.screenshot(path=artifacts / "panel-serve-placement.png", full_page=True)

    # topology: 8 nodes of 12 cores, applied on Enter (no blur)
    nodes, cores = number_input(page, "nodes"), number_input(page, "cores per node")
    cores.fill("12")
    cores.press("Enter")
    nodes.fill("8")
    nodes.press("Enter")
    wait_until(lambda: shows(page, "96 ranks on 8 nodes x 12 cores (2 sockets, one switch), Scotch;"), MAP_TIMEOUT,
               "the placement on 8 nodes x 12 cores")
    eight_nodes = wait_until(lambda: (text := table_text(page)) != first_table and text, 30, "a new cost table")
    after_8 = wait_for_new_picture(heatmaps.nth(1), before_after, 30, "the heatmap of 8 nodes")

    # strategy: round-robin
    page.locator(".bk-btn", has_text=re.compile("^round-robin$")).click()
    wait_until(lambda: shows(page, "96 ranks on 8 nodes x 12 cores (2 sockets, one switch), round-robin;"),
               MAP_TIMEOUT, "the round-robin placement")
    assert "round-robin" in table_text(page) and table_text(page) != eight_nodes
    wait_for_new_picture(heatmaps.nth(1), after_8, 30, "the round-robin heatmap")
    page.screenshot(path=artifacts / "panel-serve-placement-round-robin.png", full_page=True)

    # the rankfile download reads back as the placement shown
    with page.expect_download(timeout=30_000) as download:
        page.locator(".bk-btn", has_text="rankfile").click()
    saved = tmp_path / "rankfile"
    download.value.save_as(saved)
    topology = perfkit.Topology(nodes=8, cores=12, sockets=2)
    placed = read_launch(saved, "rankfile", topology)
    np.testing.assert_array_equal(placed.node, np.arange(96) % 8)  # round-robin: rank r on node r mod 8
    assert placed.nranks == 96
    assert page.offsite == [], f"the app asked the internet for {page.offsite}"


def forecast_text(page) -> str:
    return page.locator("table >> visible=true", has_text=re.compile(r"predicted\s+interval")).first.inner_text()


@pytest.mark.skipif(not LOOP.exists(), reason=f"{LOOP} not recorded yet")
def test_placement_tab_sets_the_rerun_against_the_prediction(page, serve, artifacts):
    """The explorer app on a recorded closed loop: the placement tab shows predicted against measured."""
    port = free_port()
    serve([str(BIN / "panel"), "serve", "perfkit/widgets/explorer_app.py", f"--port={port}", "--address=127.0.0.1",
           f"--allow-websocket-origin=127.0.0.1:{port}", "--args", *map(str, sorted(LOOP.glob("*.mpinside"))),
           "--link-rate", "200mbit"], port)
    page.goto(f"http://127.0.0.1:{port}/explorer_app", timeout=120_000)
    page.locator(".bk-Canvas").first.wait_for(timeout=120_000)
    page.locator(".bk-tab", has_text=re.compile("^placement$")).click()
    wait_until(lambda: shows(page, "16 ranks on 8 nodes x 2 cores (2 sockets, one switch), Scotch;"), MAP_TIMEOUT,
               "the Scotch placement of the run before")
    wait_until(lambda: "measured (re-run)" in forecast_text(page), 30, "the re-run against the prediction")
    expected = predict_placement(perfkit.open_profile(LOOP / "before.mpinside"),
                                 read_launch(LOOP / "scotch.rankfile", "rankfile", perfkit.Topology(nodes=8, cores=2)),
                                 Network.described(200e6))
    measured = run_seconds(perfkit.open_profile(LOOP / "scotch.mpinside"), "scotch")[0]
    text = forecast_text(page)
    for number in (expected.elapsed_before, expected.elapsed_after, expected.elapsed_after_low,
                   expected.elapsed_after_high, measured):
        assert perfkit.text.seconds(number, digits=4) in text, (number, text)
    verdict = "inside" if expected.elapsed_after_low <= measured <= expected.elapsed_after_high else "OUTSIDE"
    assert verdict in text and f"{100 * (expected.elapsed_after / measured - 1):+.1f} %" in text
    assert page.locator("text=links of 200 Mbit/s (described) >> visible=true").count() == 1
    assert page.locator("text=Measured re-run >> visible=true").count() == 1
    _fits_the_page(page)
    page.screenshot(path=artifacts / "panel-serve-placement-rerun.png", full_page=True)

    rate = page.locator(".bk-input-group", has=page.locator("label", has_text="link rate")).locator("input").first
    rate.fill("")
    rate.press("Enter")
    wait_until(lambda: page.locator("text=link rate unknown >> visible=true").count() == 1, 30,
               "the prediction for an unknown link rate")
    assert "measured (re-run)" in forecast_text(page)
    page.locator(".bk-btn", has_text=re.compile("^round-robin$")).click()
    measured_line = page.locator("p:has-text('Measured re-run') >> visible=true").first
    wait_until(lambda: "re-run round_robin:" in measured_line.inner_text(), MAP_TIMEOUT,
               "the round-robin re-run against its prediction")
    page.screenshot(path=artifacts / "panel-serve-placement-rerun-round-robin.png", full_page=True)
    assert page.offsite == [], f"the app asked the internet for {page.offsite}"


def _fits_the_page(page) -> None:
    """Nothing of the placement tab runs off the right edge of the 1,400 px page."""
    width = page.viewport_size["width"]
    overflow = page.evaluate("""(width) => {
      const out = [];
      const visit = (root) => {
        for (const el of root.querySelectorAll('*')) {
          const box = el.getBoundingClientRect();
          const past = box.width > 0 && box.right > width + 1 && el.checkVisibility();
          if (past) out.push(`${el.tagName}.${el.className} ${box.right}`);
          if (el.shadowRoot) visit(el.shadowRoot);
        }
      };
      visit(document);
      return out.slice(0, 5);
    }""", width)
    assert overflow == [], f"elements past the right edge: {overflow}"


def test_placement_tab_in_voila(page, serve, artifacts):
    """The same tab through Jupyter comms (explorer notebook in Voila): results from the mapping thread arrive."""
    port = free_port()
    serve([str(BIN / "voila"), "notebooks/explorer.ipynb", "--no-browser", f"--port={port}",
           "--Voila.ip=127.0.0.1"], port)
    page.goto(f"http://127.0.0.1:{port}/", timeout=VOILA_TIMEOUT * 1000)
    page.locator(".bk-Canvas").first.wait_for(timeout=VOILA_TIMEOUT * 1000)

    page.locator(".bk-tab", has_text=re.compile("^placement$")).click()
    wait_until(lambda: shows(page, "48 ranks on 2 nodes x 24 cores (2 sockets, one switch), Scotch;"), MAP_TIMEOUT,
               "the first placement")
    first_table = table_text(page)
    heatmaps = page.locator(".bk-Canvas >> visible=true")
    wait_until(lambda: heatmaps.count() >= 2, 30, "the two node x node heatmaps")
    before = wait_until(heatmaps.nth(1).screenshot, 10, "a picture of the 'after' heatmap")

    nodes, cores = number_input(page, "nodes"), number_input(page, "cores per node")
    cores.fill("12")
    cores.press("Enter")
    nodes.fill("4")
    nodes.press("Enter")
    wait_until(lambda: shows(page, "48 ranks on 4 nodes x 12 cores (2 sockets, one switch), Scotch;"), MAP_TIMEOUT,
               "the placement on 4 nodes of 12 cores")
    assert table_text(page) != first_table
    wait_for_new_picture(heatmaps.nth(1), before, 30, "the heatmap of 4 nodes")
    page.screenshot(path=artifacts / "voila-placement.png", full_page=True)
