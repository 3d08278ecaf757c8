"""``perfkit report`` opened from disk in Chromium: nothing fetched from anywhere, every plot drawn."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfkit.cli import main
from tests.helpers import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

#: The bokeh plots (root figures) of the page, those that have drawn a canvas of non-zero size, and their titles.
DRAWN_JS = """() => {
  const plots = [...Bokeh.index.roots].filter((v) => v.model.type === 'Figure');
  const drawn = plots.filter((v) => v.canvas_view && v.canvas_view.bbox.width > 0 && v.canvas_view.bbox.height > 0
                                    && v.canvas_view.el.shadowRoot.querySelector('canvas'));
  return {plots: plots.length, drawn: drawn.length, titles: plots.map((v) => v.model.title ? v.model.title.text : '')};
}"""
ALL_DRAWN_JS = f"() => {{ const found = ({DRAWN_JS})(); return found.plots > 0 && found.drawn === found.plots; }}"


def _open(browser, path: Path, artifacts: Path, name: str) -> tuple[dict, list[str]]:
    """Load ``path`` with file://, refusing and listing every request not to file: or data:."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    elsewhere: list[str] = []

    def route(request_route) -> None:
        url = request_route.request.url
        if url.startswith(("file:", "data:")):
            request_route.continue_()
        else:
            elsewhere.append(url)
            request_route.abort()

    context.route("**/*", route)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(path.as_uri())
    page.wait_for_function("() => window.Bokeh !== undefined && Bokeh.index !== undefined", timeout=60_000)
    page.wait_for_function(ALL_DRAWN_JS, timeout=60_000)
    page.wait_for_timeout(500)
    found = page.evaluate(DRAWN_JS)
    page.screenshot(path=artifacts / f"report-{name}.png", full_page=True)
    context.close()
    assert not errors, errors
    return found, elsewhere


@pytest.mark.parametrize(("name", "files", "plots"), [
    # two runs of one process count: POP table, findings, stacked profiles, no scaling plots
    ("lab", sorted((ROOT / "data" / "lab").glob("*.mpinside")), 2),
    # a strong-scaling series of five process counts: scaling plots and one stacked profile per run
    ("hpccg", sorted((ROOT / "data" / "real" / "mpiP" / "HPCCG-strong").glob("*/*")), 4 + 5),
    # a run with traffic matrices: its heatmap beside the stacked profiles
    ("cluster", [ROOT / "data" / "cluster" / "network-x4" / "before.mpinside"], 2),
])
def test_report_loads_offline_and_draws_every_plot(browser, artifacts, tmp_path: Path, name: str, files: list[Path],
                                                   plots: int) -> None:
    out = tmp_path / "report.html"
    assert main(["report", *map(str, files), "-o", str(out)]) == 0
    found, elsewhere = _open(browser, out, artifacts, name)
    assert elsewhere == []
    assert found["plots"] == found["drawn"] == plots, found
