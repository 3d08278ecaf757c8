"""The per-rank explorer (the tour's): state, widgets and plot follow each other."""

from __future__ import annotations

import holoviews as hv
import numpy as np
import panel as pn
import pytest
import xarray as xr
from bokeh.models import ColumnDataSource

import perfkit
from perfkit.widgets.ranks import rank_bands, rank_bounds, rank_explorer
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
    sources = [s for s in root.select({"type": ColumnDataSource}) if "xs" in s.data]
    xs = np.concatenate([np.ravel(x) for s in sources for x in s.data["xs"]])
    ys = np.concatenate([np.ravel(y) for s in sources for y in s.data["ys"]])
    return float(xs.min()), float(xs.max()), float(ys.max())


def test_rank_bounds_per_run(series):
    assert rank_bounds(series) == {"48/slt": (0, 47), "384/slt": (0, 383)}


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
    import perfkit.widgets.ranks as ranks

    calls: list[tuple[int, int]] = []
    table = ranks.rank_table

    def counted(*args, **kwargs):
        calls.append(tuple(kwargs["ranks"]))
        return table(*args, **kwargs)

    monkeypatch.setattr(ranks, "rank_table", counted)
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
