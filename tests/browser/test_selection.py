"""Rank selection in the explorer in headless Chromium: a box dragged over the per-rank plot selects ranks, and
the tabs follow. Under ``panel serve``: findings, traffic, efficiency, and a screenshot of every tab; in JupyterLab
(a notebook of its own, in a temporary directory): findings. Voila's is in ``test_voila.py``."""

from __future__ import annotations

import json
import os
import re
import secrets

import pytest

from tests.browser.helpers import BIN, REPO, free_port, open_explorer_app, wait_for_new_picture, wait_until
from tests.browser.test_jupyterlab import all_cells_ran, lab_settings

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

#: Texts of the bokeh titles in the page (plot titles are drawn on a canvas, not in the DOM).
TITLES_JS = "() => [...Bokeh.documents[0].all_models].filter(m => m.type === 'Title').map(m => m.text)"
#: Ranks of the per-rank view's markers in the page, per source of markers (each rank's total; the selected).
MARKERS_JS = """() => Bokeh.documents.flatMap(doc => [...doc.all_models]).filter(
  m => m.type === "ColumnDataSource" && m.data.total !== undefined).map(m => Array.from(m.data.rank))"""


def marked(page, ranks: str) -> bool:
    """Whether the page draws, in crimson, markers at exactly the ``ranks`` (as the selection line lists them)."""
    expected = sorted(r for part in ranks.split(", ") for r in
                      (range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1)))
    return any(sorted(source) == expected for source in page.evaluate(MARKERS_JS))


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
    plot = open_explorer_app(page, serve)
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
    wait_until(lambda: marked(page, ranks.strip()), 30, "the selected ranks' markers in the plot")
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


def test_box_selection_in_jupyterlab(page, serve, artifacts, tmp_path):
    root = tmp_path / "notebooks"
    root.mkdir()
    series = str(REPO / "data" / "synthetic" / "*" / "slt.mpinside")
    cells = ["import perfkit\nperfkit.setup_notebook()", f"runs = perfkit.open_runs({series!r})\nperfkit.explore(runs)"]
    notebook = {"cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
                           "source": source} for i, source in enumerate(cells)],
                "metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                                            "name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}
    (root / "explore.ipynb").write_text(json.dumps(notebook))
    workspaces = tmp_path / "workspaces"
    workspaces.mkdir()
    port, token = free_port(), secrets.token_hex(16)
    command = [str(BIN / "jupyter"), "lab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
               "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
               f"--LabApp.user_settings_dir={lab_settings(tmp_path)}", f"--LabApp.workspaces_dir={workspaces}"]
    serve(command + (["--allow-root"] if os.geteuid() == 0 else []), port)
    page.goto(f"http://127.0.0.1:{port}/lab/tree/explore.ipynb?reset&token={token}", timeout=60_000)
    page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=60_000)
    page.locator(".jp-StatusBar-Widget", has_text=re.compile(r"Python 3 \(ipykernel\) \| Idle")).first.wait_for(
        timeout=90_000)
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
    wait_until(lambda: all_cells_ran(page), 150, "every cell to run", interval=1)

    explorer = page.locator(".jp-OutputArea-output").filter(has=page.locator(".noUi-handle")).first
    explorer.scroll_into_view_if_needed()
    plot = explorer.locator(".bk-Canvas").first
    plot.wait_for(timeout=30_000)
    status = explorer.locator("p", has_text=re.compile(r"^selection\b")).first
    wait_until(lambda: "none, every rank" in status.inner_text(), 30, "the selection line")
    drag_box(page, plot, 0.3, 0.5)
    line = wait_until(lambda: "box/lasso in the per-rank plot" in (text := status.inner_text()) and text, 30,
                      "the box to select ranks (through the notebook's comms)")
    count, ranks = re.search(r"(\d+) ranks?: ([\d, -]+)", line).groups()
    wait_until(lambda: marked(page, ranks.strip()), 30, "the selected ranks' markers (after a change made in the page)")
    explorer.locator(".bk-tab", has_text=re.compile("^findings$")).click()
    explorer.get_by_text(f"Findings for 48/slt on {count} ranks in view ({ranks.strip()})").wait_for(timeout=60_000)
    page.screenshot(path=artifacts / "jupyterlab-selection-findings.png")
    assert page.locator('[data-mime-type="application/vnd.jupyter.error"]').count() == 0, "a cell raised"
