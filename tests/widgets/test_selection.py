"""Rank selection in perfkit.explore without a browser: how ranks are selected, and every tab following it."""

from __future__ import annotations

import holoviews as hv
import numpy as np
import pandas as pd
import panel as pn
import pytest
import xarray as xr
from bokeh.models import ColumnDataSource

import perfkit
from perfkit import text as fmt
from perfkit.analysis.imbalance import node_of
from perfkit.plots.rank_figure import GEOMETRY
from perfkit.widgets.explorer import explore
from perfkit.widgets.selection import describe_ranks, node_ranks, view_ranks
from tests.helpers import ROOT, small_run
from tests.widgets.sliders import drag

hv.extension("bokeh")


@pytest.fixture(scope="module")
def series() -> xr.Dataset:
    return perfkit.open_runs([ROOT / "data" / "synthetic" / n / "slt.mpinside" for n in ("48", "96")])


def widget(layout: pn.Column, kind: type, name: str):
    return next(w for w in layout.select(kind) if getattr(w, "label", None) == name or getattr(w, "name", None) == name)


def outline(layout: pn.Column, x: list[float], y: list[float]) -> None:
    """What the page sends when a box (two corners) or lasso (its vertices) is released over the per-rank plot."""
    root = layout.get_root()
    (geometry,) = root.select({"type": ColumnDataSource, "name": GEOMETRY})
    geometry.data = {"x": x, "y": y}


def box(layout: pn.Column, ranks: list[int], high: float = 1e12) -> None:
    """A lasso around exactly ``ranks`` (any set): a comb whose teeth reach down over each run of consecutive ranks
    and whose back runs above ``high`` (above every total)."""
    ranks = sorted(ranks)
    if not ranks:
        return outline(layout, [1e6, 2e6], [0, high])
    breaks = [i for i in range(1, len(ranks)) if ranks[i] != ranks[i - 1] + 1]
    runs = [(ranks[a], ranks[b - 1]) for a, b in zip([0, *breaks], [*breaks, len(ranks)])]
    x, y = [runs[0][0] - 0.5], [2 * high]
    for lo, hi in runs:
        x += [lo - 0.5, lo - 0.5, hi + 0.5, hi + 0.5]
        y += [high, -1.0, -1.0, high]
    x.append(runs[-1][1] + 0.5)
    y.append(2 * high)
    outline(layout, x, y)


def status(layout: pn.Column) -> str:
    return next(str(m.object) for m in layout.select(pn.pane.Markdown) if "**selection**" in str(m.object))


def show(layout: pn.Column, tab: str) -> pn.viewable.Viewable:
    tabs = layout.select(pn.Tabs)[0]
    tabs.active = list(tabs._names).index(tab)
    return tabs[tabs.active]


def compute_time(ds: xr.Dataset, run: str) -> pd.Series:
    """Compute time [s] per existing rank, straight from the cube."""
    return ds["profile"].sel(run=run, metric="time", function="Compute").to_series().dropna()


def test_describe_and_view_ranks():
    assert describe_ranks([7, 0, 1, 2, 3, 10, 11, 12, 3]) == "0-3, 7, 10-12"
    assert describe_ranks([]) == "none"
    assert describe_ranks(np.arange(0, 40, 2), limit=2) == "0, 2, ... (18 more runs of ranks)"
    ranks = np.arange(10)
    assert view_ranks(ranks, (0, 9), None) is None
    assert view_ranks(ranks, (0, 4), None, run_bounds=(0, 4)) is None
    assert view_ranks(ranks, (2, 5), None).tolist() == [2, 3, 4, 5]
    assert view_ranks(ranks, (2, 5), [1, 3, 5, 8]).tolist() == [3, 5]


def test_box_in_the_per_rank_plot_filters_findings_traffic_and_pop(series):
    layout = explore(series, run="96/slt")
    layout.get_root()
    state_line = status(layout)
    assert "none" in state_line
    box(layout, [10, 11, 12, 40])
    assert "4 ranks: 10-12, 40" in status(layout) and "box" in status(layout)

    findings = show(layout, "findings")
    (table,) = [p.object.set_index("function") for p in findings.select(pn.pane.DataFrame)]
    compute = compute_time(series, "96/slt")
    assert table.loc["Compute", "max"] == fmt.seconds(compute.loc[[10, 11, 12, 40]].max())
    assert table.loc["Compute", "rank of max"] == fmt.count(compute.loc[[10, 11, 12, 40]].idxmax())
    assert table.loc["Compute", "max"] != fmt.seconds(compute.max())  # the run's slowest rank is not in the box

    image = show(layout, "traffic").select(pn.pane.HoloViews)[0].object
    matrix = series["traffic"].sel(run="96/slt", quantity="bytes").data
    dense = np.nan_to_num(matrix.todense() if hasattr(matrix, "todense") else np.asarray(matrix))
    picked = [10, 11, 12, 40]
    assert np.nansum(image.dimension_values(2)) == pytest.approx(dense[np.ix_(picked, picked)].sum())
    assert image.range("sender") == (9.5, 40.5)
    assert "between the 4 selected ranks" in image.opts.get().kwargs["title"]

    html = show(layout, "efficiency").select(pn.pane.HTML)[0].object
    assert "96/slt [4 ranks]" in html
    part = perfkit.pop_metrics(series.drop_vars("traffic").sel(run=["96/slt"], rank=picked))
    assert f"{float(part['load_balance'].squeeze()):.2f}" in html


def test_slow_ranks_outliers_node_and_clear(series):
    layout = explore(series)
    layout.get_root()
    compute = compute_time(series, "48/slt")
    widget(layout, pn.widgets.Button, "slow ranks").clicks += 1
    slow = compute.index[compute > 1.10 * compute.mean()].tolist()
    assert slow and f"{len(slow)} ranks: {describe_ranks(slow)}" in status(layout)

    widget(layout, pn.widgets.Button, "outliers").clicks += 1
    z = 0.6745 * (compute - compute.median()) / (compute - compute.median()).abs().median()
    if (z > 3.5).any():
        assert describe_ranks(compute.index[z > 3.5]) in status(layout)
    else:
        assert "no compute outlier in 48/slt" in status(layout) and describe_ranks(slow) in status(layout)

    node = widget(layout, pn.widgets.Select, "node")
    assert not node.disabled
    node.value = next(o for o in node.options if o.startswith("node 1:"))
    assert "(node 1): 24 ranks: 24-47" in status(layout)  # ppn 24
    findings = show(layout, "findings").select(pn.pane.Markdown)[0].object
    assert "24 ranks in view (24-47)" in findings

    widget(layout, pn.widgets.Button, "clear selection").clicks += 1
    assert "none" in status(layout) and node.value == "(no node)"
    assert "every rank" in show(layout, "findings").select(pn.pane.Markdown)[0].object


def test_a_run_change_clears_the_selection_and_the_range_narrows_it(series):
    layout = explore(series)
    layout.get_root()
    box(layout, list(range(5, 30)))
    drag(widget(layout, pn.widgets.IntRangeSlider, "ranks"), (0, 9))
    assert "25 ranks, 5 in the rank range" in status(layout)
    assert "5 ranks in view (5-9)" in show(layout, "findings").select(pn.pane.Markdown)[0].object
    widget(layout, pn.widgets.Select, "run").value = "96/slt"
    assert "none" in status(layout)
    assert "every rank" in show(layout, "findings").select(pn.pane.Markdown)[0].object


def test_the_selected_ranks_are_marked_in_the_per_rank_plot(series):
    layout = explore(series)
    root = layout.get_root()
    box(layout, [3, 4])
    totals = series["profile"].sel(run="48/slt", metric="time").sum("function")
    (marked,) = [s for s in root.select({"type": ColumnDataSource}) if "total" in s.data and len(s.data["rank"]) == 2]
    assert list(marked.data["rank"]) == [3, 4]
    assert marked.data["total"] == pytest.approx(totals.sel(rank=[3, 4]).values)
    box(layout, [])  # an empty box keeps the selection
    assert "2 ranks: 3-4" in status(layout)
    box(layout, [3, 4])  # the same box again, after a clear, selects again
    widget(layout, pn.widgets.Button, "clear selection").clicks += 1
    box(layout, [3, 4])
    assert "2 ranks: 3-4" in status(layout)


def test_a_box_selects_the_ranks_whose_total_it_covers_also_where_markers_are_binned():
    ds = perfkit.open_runs([ROOT / "data" / "synthetic" / "2048" / "slt.mpinside"])
    layout = explore(ds)
    layout.get_root()
    totals = ds["profile"].sel(run="slt", metric="time").sum("function").to_series()
    levels = np.unique(totals.round(9))  # a few levels 1 µs apart: thresholds between them, clear of rounding
    low, high = (levels[1] + levels[2]) / 2, (levels[-3] + levels[-2]) / 2
    outline(layout, [100.2, 1500.7], [low, high])
    inside = totals.index[(totals.index >= 101) & (totals.index <= 1500) & (totals >= low) & (totals <= high)]
    assert 100 < len(inside) < 1400
    assert f"{len(inside)} ranks: {describe_ranks(inside)}" in status(layout)


def test_node_filter_disabled_when_ppn_is_unknown():
    ds = small_run("a", 6, seed=4, traffic=False)
    layout = explore(ds)
    node = widget(layout, pn.widgets.Select, "node")
    assert node.disabled and "no ppn" in node.description


def test_tables_are_left_aligned_and_tabs_show_a_loading_indicator(series):
    layout = explore(series)
    layout.get_root()
    tables = show(layout, "findings").select(pn.pane.DataFrame)
    assert tables and all(t.text_align == "start" and t.justify == "left" for t in tables)
    assert all(p.loading_indicator for p in layout.select(pn.param.ParamFunction))


def test_node_ranks_agree_with_node_of():
    ds = perfkit.open_runs([ROOT / "data" / "synthetic" / n / "slt.mpinside" for n in ("48", "2048")])
    for run in ("48/slt", "2048/slt"):
        node = node_of(ds.sel(run=[run])).isel(run=0).values
        exists = ds["profile"].sel(run=run).notnull().any(("function", "metric")).values
        expected = {int(n): ds["rank"].values[exists & (node == n)] for n in np.unique(node[exists])}
        got = node_ranks(ds, run)
        assert list(got) == list(expected)
        assert all(np.array_equal(got[n], expected[n]) for n in expected)
