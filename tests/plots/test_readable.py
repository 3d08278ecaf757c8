"""Plots that read well, checked on the rendered bokeh models: sizes, ticks, legends, zoom, tables."""

from __future__ import annotations

import html
import re

import holoviews as hv
import numpy as np
import pytest
from bokeh.models import BasicTicker, Legend, Plot, PrintfTickFormatter

import perfkit
import perfkit.accessor  # ds.perf
from perfkit import text as fmt
from perfkit.analysis.diagnosis import diagnose
from perfkit.analysis.models import fit_amdahl
from perfkit.analysis.scaling import scaling
from perfkit.analysis.waits import merge_wait_modes
from perfkit.plots import scaling as plots
from perfkit.plots.axes import MIN_RATIO, log_ticker
from perfkit.plots.imbalance import findings_table, whatif_bars
from perfkit.plots.traffic import heatmap
from tests.helpers import ROOT

hv.extension("bokeh")


@pytest.fixture(scope="module")
def series():
    return perfkit.open_runs(str(ROOT / "data" / "synthetic" / "*" / "slt.mpinside"))


@pytest.fixture(scope="module")
def table(series):
    return scaling(series)


@pytest.fixture(scope="module")
def ninety_six():
    return perfkit.open_runs(str(ROOT / "data" / "synthetic" / "96" / "*.mpinside"))


@pytest.mark.parametrize("values", [[48, 96, 192, 384, 768, 2048], [1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16],
                                    list(2.0 ** np.arange(1, 16))])
def test_process_count_ticks_are_the_counts_and_never_crowd(values):
    ticks = log_ticker(values, at_values=True).ticks
    assert set(ticks) <= set(map(float, values)) and ticks[0] == min(values) and ticks[-1] == max(values)
    assert np.all(np.diff(np.log10(ticks)) >= np.log10(MIN_RATIO) - 1e-9)


def test_log_ticks_label_below_five_with_minor_ticks():
    ticker = log_ticker([0.9, 25.0])
    inside = [t for t in ticker.ticks if 0.9 <= t <= 25]
    assert inside == [1, 2, 5, 10, 20]
    assert {3.0, 4.0, 30.0} <= set(ticker.minor_ticks)
    wide = [t for t in log_ticker([1e-3, 1e3]).ticks if 1e-3 <= t <= 1e3]
    assert wide == [1e-3, 1e-2, 1e-1, 1, 10, 100, 1000]


@pytest.mark.parametrize("make", [lambda t: plots.time_vs_procs(t, fit=fit_amdahl(t)), plots.speedup_vs_procs,
                                  plots.efficiency_vs_procs])
def test_scaling_plots_fill_their_container_legend_outside(table, make):
    fig = hv.render(make(table))
    assert fig.sizing_mode == "stretch_width"
    assert fig.xaxis[0].ticker.ticks == [48, 96, 192, 384, 768, 2048]
    assert isinstance(fig.xaxis[0].formatter, PrintfTickFormatter)
    assert any(isinstance(r, Legend) for r in fig.right) and not any(isinstance(r, Legend) for r in fig.center)


def test_fit_formula_is_in_the_title_not_the_legend(table):
    fit = fit_amdahl(table)
    fig = hv.render(plots.time_vs_procs(table, fit=fit))
    legend = next(r for r in fig.right if isinstance(r, Legend))
    assert all(fit.formula not in item.label["value"] for item in legend.items)
    assert fit.formula in fig.title.text
    low = min(t for t in fig.yaxis[0].ticker.ticks if t >= float(table["elapsed"].min()) / 2)
    assert low < 5  # labels below 5 s


def test_heatmap_ranks_zooms_the_axes_beside_the_whole_matrix():
    matrix = perfkit.open_matrix(ROOT / "data" / "real" / "matrices" / "MapLib_lulesh_64_p2p.size.csv")
    layout = heatmap(matrix, title="whole") + heatmap(matrix, ranks=(0, 20), title="zoom")
    figures = {fig.title.text: fig for fig in hv.render(layout).select({"type": Plot})}
    whole, zoom = figures["whole"], figures["zoom"]
    assert (whole.x_range.start, whole.x_range.end) == (-0.5, 63.5)
    assert (zoom.x_range.start, zoom.x_range.end) == (-0.5, 19.5)
    assert (zoom.y_range.start, zoom.y_range.end) in ((19.5, -0.5), (-0.5, 19.5))


def test_heatmap_ticks_are_whole_ranks():
    fig = hv.render(heatmap(np.arange(16.0).reshape(4, 4) + 1))
    for axis in (fig.xaxis[0], fig.yaxis[0]):
        assert isinstance(axis.ticker, BasicTicker) and axis.ticker.min_interval == 1


def test_findings_table_wraps_full_text_left_aligned(ninety_six):
    found = diagnose(ninety_six, run="collective_wait")
    page = findings_table(found).to_html()
    assert all(text in html.unescape(page) for text in found["text"])  # nothing cut
    assert "white-space: normal" in page and "text-align: left" in page
    assert re.search(r"<th[^>]*>title</th>", page) and re.search(r"<th[^>]*>text</th>", page)
    shown = found.assign(time=found["seconds"].map(fmt.seconds), share=found["share"].map(fmt.percent))
    assert all(f">{t}</td>" in page and f">{s}</td>" in page for t, s in zip(shown["time"], shown["share"]))
    assert not re.search(r">\d+\.\d{3}</td>", page)  # no bare seconds with three decimals


def test_whatif_chart_shows_the_change_and_the_elapsed_times(ninety_six):
    full = merge_wait_modes(ninety_six.sel(run=["slt"]), ninety_six.sel(run=["collective_wait"]))
    result = full.perf.whatif("perfect_network")
    stacked, change = whatif_bars(result)
    expected = (result["after"] - result["before"]).mean("rank").sel(run="slt")
    drawn = change.dframe().set_index("kind")["change"]
    assert drawn["transfer"] == pytest.approx(float(expected.sel(kind="transfer")))
    assert drawn["transfer"] < 0
    title = stacked.opts.get().kwargs["title"]
    before, after = (fmt.seconds(result[k][0]) for k in ("elapsed_before", "elapsed_after"))
    assert f"{before} -> {after}" in title and re.search(r"\d s -> \d", title)
    assert "np.float64" not in title
    fig = hv.render(stacked)
    assert any(isinstance(r, Legend) for r in fig.right) and not any(isinstance(r, Legend) for r in fig.center)


def test_heatmap_colour_bar_of_equal_values_spans_a_decade_each_side():
    fig = hv.render(heatmap(np.where(np.eye(4, k=1) > 0, 4.9e6, 0.0)))
    mapper = fig.right[0].color_mapper
    assert (mapper.low, mapper.high) == pytest.approx((4.9e5, 4.9e7))
    assert [t for t in fig.right[0].ticker.ticks if 4.9e5 <= t <= 4.9e7] == [5e5, 1e6, 2e6, 5e6, 1e7, 2e7]
