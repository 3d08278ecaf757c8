"""The per-rank explorer (the tour's): state, widgets and plot follow each other; the figure's axes, legend,
colours, hover and binning at 2,048 ranks."""

from __future__ import annotations

import holoviews as hv
import numpy as np
import pandas as pd
import panel as pn
import param
import pytest
import xarray as xr
from bokeh.models import ColumnDataSource, HoverTool

import perfkit
from perfkit.plots.palette import label
from perfkit.plots.profile import band_order
from perfkit.plots.rank_figure import MAX_MARKERS, OUTLINE
from perfkit.widgets.ranks import rank_bands, rank_explorer, rank_state
from tests.helpers import ROOT
from tests.widgets.sliders import drag

hv.extension("bokeh")


@pytest.fixture(scope="module")
def series() -> xr.Dataset:
    return perfkit.open_runs([ROOT / "data" / "synthetic" / n / "slt.mpinside" for n in ("48", "384")])


def widget(layout: pn.Column, kind: type, name: str):
    return next(w for w in layout.select(kind) if w.label == name)


def drawn(root) -> tuple[float, float, float]:
    """Smallest and largest rank drawn by the patches, and the top of the stack."""
    xs = np.concatenate([s.data["x"] for s in root.select({"type": ColumnDataSource, "name": OUTLINE})])
    ys = np.concatenate([np.ravel(y) for s in root.select({"type": ColumnDataSource}) if "ys" in s.data
                         for y in s.data["ys"]])
    return float(xs.min()), float(xs.max()), float(ys.max())


def test_rank_bounds_per_run(series):
    assert rank_state(series).bounds == {"48/slt": (0, 47), "384/slt": (0, 383)}


def test_rank_bands_stack_to_the_rank_totals(series):
    bands = rank_bands(series, "48/slt", by="kind")
    top = max(np.max(p["value"]) for p in bands.split(datatype="columns"))
    totals = series["profile"].sel(run="48/slt", metric="time").sum("function").dropna("rank")
    assert top == pytest.approx(float(totals.max()))


def test_widgets_drive_the_plot_in_place(series):
    layout = rank_explorer(series, run="384/slt")
    root = layout.get_root()
    sources = {id(s) for s in root.select({"type": ColumnDataSource})}
    assert drawn(root)[:2] == (0, 383)
    drag(widget(layout, pn.widgets.IntRangeSlider, "ranks"), (20, 99))
    low, high, _ = drawn(root)
    assert (low, high) == (20, 99)
    widget(layout, pn.widgets.Select, "run").value = "48/slt"
    slider = widget(layout, pn.widgets.IntRangeSlider, "ranks")
    assert (slider.end, slider.value) == (47, (0, 47))
    low, high, top = drawn(root)
    assert (low, high) == (0, 47)
    totals = series["profile"].sel(run="48/slt", metric="time").sum("function")
    assert top == pytest.approx(float(totals.max()))
    assert {id(s) for s in root.select({"type": ColumnDataSource})} == sources, "the plot was rebuilt"


def test_a_drag_recomputes_once_on_release(series, monkeypatch):
    from perfkit.widgets.run_block import RunBlock

    calls: list[tuple[int, int]] = []
    table = RunBlock.arrays

    def counted(self, *args, **kwargs):
        calls.append(tuple(kwargs["ranks"]))
        return table(self, *args, **kwargs)

    monkeypatch.setattr(RunBlock, "arrays", counted)
    layout = rank_explorer(series, run="384/slt")
    root = layout.get_root()
    calls.clear()
    slider = widget(layout, pn.widgets.IntRangeSlider, "ranks")
    steps = [(0, 383 - k) for k in range(1, 200)]
    for step in steps[:-1]:  # handle held: nothing recomputed, the plot unchanged
        slider.value = step
    assert calls == [] and drawn(root)[:2] == (0, 383)
    drag(slider, *steps)
    assert calls == [(0, 184)] and drawn(root)[:2] == (0, 184)


def test_same_range_after_a_run_change_is_applied(series):
    layout = rank_explorer(series, run="384/slt")
    root = layout.get_root()
    slider = widget(layout, pn.widgets.IntRangeSlider, "ranks")
    drag(slider, (10, 40))
    widget(layout, pn.widgets.Select, "run").value = "48/slt"
    assert drawn(root)[:2] == (0, 47)
    drag(slider, (10, 40))
    assert drawn(root)[:2] == (10, 40)


def figure_of(layout: pn.Column):
    return layout.select(pn.pane.Bokeh)[0].object


def test_axes_title_and_legend_follow_the_state(series):
    layout = rank_explorer(series, run="48/slt")
    root = layout.get_root()
    fig = figure_of(layout)
    formatter, ticker = fig.yaxis[0].formatter, fig.yaxis[0].ticker
    assert fig.title.text == "48/slt: time per rank by function" and fig.yaxis[0].axis_label == "time"
    assert "ms" in formatter.code and (fig.x_range.start, fig.x_range.end) == (-0.5, 47.5)
    totals = series["profile"].sel(run="48/slt", metric="time").sum("function")
    assert fig.y_range.start == 0 and fig.y_range.end == pytest.approx(1.05 * float(totals.max()))
    (legend,) = fig.right
    assert [item.label.field for item in legend.items] == ["group"]
    bands = next(s for s in root.select({"type": ColumnDataSource}) if "ys" in s.data)
    order = [label(name) for name in band_order(series)]
    assert bands.data["group"] == [name for name in order if name in bands.data["group"]]
    assert bands.data["group"][0] == "Compute" and label("w_MPI_Recv") in bands.data["group"]
    drag(widget(layout, pn.widgets.IntRangeSlider, "ranks"), (5, 20))
    assert (fig.yaxis[0].formatter, fig.yaxis[0].ticker) == (formatter, ticker), "new tick models, same unit"
    widget(layout, pn.widgets.Select, "metric").value = "calls"
    assert fig.yaxis[0].formatter is not formatter and fig.yaxis[0].axis_label == "calls"
    assert fig.title.text == "48/slt: calls per rank by function"
    hover = next(t for t in fig.tools if isinstance(t, HoverTool))
    assert [name for name, _ in hover.tooltips] == ["group", "rank", "value"]


def test_many_ranks_are_binned_and_the_markers_keep_each_bins_extremes():
    from perfkit.widgets.ranks import rank_state
    from perfkit.widgets.selection import selection_pane

    ds = perfkit.open_runs([ROOT / "data" / "synthetic" / "2048" / "slt.mpinside"])
    pane = selection_pane(ds, rank_state(ds))
    root = pane.get_root()
    fig = pane.object
    bands = next(s for s in root.select({"type": ColumnDataSource}) if "ys" in s.data)
    assert len(bands.data["ys"][0]) == 2 * 1024 and set(bands.data["step"]) == {2}  # 2,048 ranks, 2 a bin
    assert "(bins of 2 ranks)" in fig.title.text
    totals = ds["profile"].sel(run="slt", metric="time").sum("function").to_series()
    marks = next(s for s in root.select({"type": ColumnDataSource}) if "total" in s.data and len(s.data["rank"]))
    assert len(marks.data["rank"]) <= MAX_MARKERS
    bins = totals.groupby(np.arange(totals.size) // 3)  # 1,000 bins: ceil(2,048 / 1,000) ranks each
    drawn = pd.Series(marks.data["total"], index=marks.data["rank"])
    assert drawn.max() == pytest.approx(totals.max()) and drawn.min() == pytest.approx(totals.min())
    assert np.allclose(drawn.groupby(np.asarray(marks.data["rank"]) // 3).max(), bins.max())
    assert np.allclose(drawn.groupby(np.asarray(marks.data["rank"]) // 3).min(), bins.min())


def test_changes_reach_the_documents_listeners_outside_a_server(series):
    """As in Voila, where ipywidgets hand a document's changes to the page: a run change reaches them (panel's
    hold outside a server session drops them)."""
    from bokeh.document import Document

    layout = rank_explorer(series, run="48/slt")
    doc = Document()
    root = layout.get_root(doc)
    doc.add_root(root)
    bands = next(s for s in root.select({"type": ColumnDataSource}) if "ys" in s.data)
    seen = []
    doc.on_change(lambda event: seen.append((getattr(event, "model", None), getattr(event, "attr", None))))
    widget(layout, pn.widgets.Select, "run").value = "384/slt"
    assert (bands, "data") in seen and drawn(root)[:2] == (0, 383)


def test_a_view_over_all_ranks_drawn_from_the_summary_equals_the_one_drawn_from_the_run(monkeypatch):
    """Over all of a run's ranks the view is drawn from the study summary, without reading the run: the same
    bands, markers, ranges and title as drawn from the run's values (a summary without views)."""
    import dataclasses

    from perfkit.widgets.run_block import RunBlock
    from perfkit.widgets.selection import selection_pane

    ds = perfkit.open_runs([ROOT / "data" / "synthetic" / "2048" / f"{mode}.mpinside" for mode in ("slt", "basic")])
    from_summary = rank_state(ds)
    from_run = rank_state(ds)
    with param.edit_constant(from_run):
        from_run.summary = dataclasses.replace(from_run.summary, views={})
    reads: list[tuple[str, str]] = []
    arrays = RunBlock.arrays

    def counted(self, run, **kwargs):
        reads.append((run, kwargs.get("metric")))
        return arrays(self, run, **kwargs)

    monkeypatch.setattr(RunBlock, "arrays", counted)
    panes = [selection_pane(ds, state) for state in (from_summary, from_run)]
    for run, metric, by in [("basic", "time", "function"), ("basic", "calls", "kind"), ("slt", "bytes_sent", "call"),
                            ("slt", "time", "kind")]:
        reads.clear()
        for state in (from_summary, from_run):
            state.param.update(run=run, ranks=state.bounds[run], metric=metric, by=by)
        assert reads == [(run, metric)], "only the view without a summary read the run"
        sources = [[s.data for s in (fig.select_one({"name": OUTLINE}), *(r.data_source for r in fig.renderers))]
                   for fig in (pane.object for pane in panes)]  # outline, bands, totals, selected
        for got, expected in zip(*sources, strict=True):
            assert got.keys() == expected.keys()
            for key in got:
                assert len(got[key]) == len(expected[key])
                if key == "group":
                    assert list(got[key]) == list(expected[key])
                    continue
                for a, b in zip(got[key], expected[key]):
                    np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=1e-12)
        figures = [pane.object for pane in panes]
        assert figures[0].title.text == figures[1].title.text
        assert "(bins of 2 ranks)" in figures[0].title.text or metric == "calls"  # 2,048 ranks (calls: fewer)
        for axis in ("x_range", "y_range"):
            ranges = [getattr(f, axis) for f in figures]
            assert ranges[0].start == ranges[1].start
            assert ranges[0].end == pytest.approx(ranges[1].end, rel=1e-12)
