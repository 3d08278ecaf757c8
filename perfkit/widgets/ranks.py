"""The per-rank explorer: run, metric, grouping and rank-range selectors over a stacked per-rank profile.

Every user action updates one :class:`RankState`; the plot is a DynamicMap over a single patch
glyph, so moving the slider or changing run, grouping or metric replaces the data of the plot
instead of rebuilding it. :func:`perfkit.explore` builds its dashboard on the same pieces.
"""

from __future__ import annotations

from typing import Any

import holoviews as hv
import numpy as np
import panel as pn
import param
import xarray as xr

from perfkit.plots.axes import unit_formatter, unit_ticker
from perfkit.plots.palette import label, labelled_colours
from perfkit.plots.profile import band_order, rank_table

GROUPINGS = ("function", "call", "kind")
#: Widget width of the selectors [px].
WIDGET_WIDTH = 220


class RankState(param.Parameterized):
    """What the views show: changed once per user action, watched by every view.

    A view shows the ranks of ``run`` in the range ``ranks`` that are also in ``selected``, the
    rank selection (a sorted list of ranks; None when nothing is selected): every tab of
    :func:`perfkit.explore` applies it, with :func:`perfkit.widgets.selection.view_ranks`
    (``view_ranks(ds["rank"].values, state.ranks, state.selected)``). ``selection_label`` says
    how it was made. A run change resets the range and clears the selection.
    """

    run = param.String(default="")
    metric = param.String(default="time")
    by = param.Selector(default="function", objects=list(GROUPINGS))
    ranks = param.Range(default=(0, 0))
    #: Selected ranks (sorted), None when nothing is selected (every rank of the range).
    selected = param.List(default=None, allow_None=True, item_type=int)
    #: How the selection was made (box in the per-rank plot, node, slow ranks, outliers).
    selection_label = param.String(default="")
    #: First and last rank of each run (:func:`rank_bounds`), where the rank range resets on a run change.
    bounds = param.Dict(default={}, constant=True)


def rank_explorer(ds: xr.Dataset, run: str | None = None) -> pn.Column:
    """Stacked per-rank profile of one run with widgets to pick run, rank range, grouping and metric."""
    state = rank_state(ds, run)
    return pn.Column(*rank_controls(ds, state), rank_pane(ds, state), sizing_mode="stretch_width")


def rank_state(ds: xr.Dataset, run: str | None = None) -> RankState:
    """The initial state: ``run`` (default the first) over all its ranks, time by function."""
    label = run if run is not None else str(ds["run"].values[0])
    bounds = rank_bounds(ds)
    return RankState(run=label, ranks=bounds[label], bounds=bounds)


def rank_bounds(ds: xr.Dataset) -> dict[str, tuple[int, int]]:
    """First and last rank that exist (have any value) in each run."""
    exists = ds["profile"].notnull().any(("function", "metric")).transpose("run", "rank").values
    ranks = ds["rank"].values
    out = {}
    for run, row in zip(ds["run"].values, exists):
        present = ranks[row] if row.any() else ranks
        out[str(run)] = (int(present.min()), int(present.max()))
    return out


def rank_controls(ds: xr.Dataset, state: RankState) -> list[Any]:
    """The run, metric, grouping and rank widgets, wired to ``state`` (one update per action: the rank slider
    sets the range when its handle is released, not on each value it passes while dragged)."""
    runs = [str(r) for r in ds["run"].values]
    bounds = state.bounds
    run_select = pn.widgets.Select(label="run", options=runs, value=state.run, width=WIDGET_WIDTH)
    metric_select = pn.widgets.Select(label="metric", options=[str(m) for m in ds["metric"].values],
                                      value=state.metric, width=WIDGET_WIDTH)
    by_select = pn.widgets.RadioButtonGroup(label="group by", options=list(GROUPINGS), value=state.by)
    lo, hi = bounds[state.run]
    slider = pn.widgets.IntRangeSlider(label="ranks", start=lo, end=max(hi, lo + 1), value=(lo, hi), step=1,
                                       tooltips=False, sizing_mode="stretch_width")
    syncing = []

    def on_run(event: param.parameterized.Event) -> None:
        lo, hi = bounds[event.new]
        syncing.append(True)
        try:
            slider.param.update(start=lo, end=max(hi, lo + 1), value=(lo, hi))
            with param.edit_constant(slider):  # a drag back to the last released range is a change again
                slider.value_throttled = (lo, hi)
        finally:
            syncing.pop()
        state.param.update(run=event.new, ranks=(lo, hi), selected=None, selection_label="")

    def on_ranks(event: param.parameterized.Event) -> None:
        if not syncing:
            state.ranks = tuple(event.new)

    run_select.param.watch(on_run, "value")
    slider.param.watch(on_ranks, "value_throttled")  # once per drag, on release
    metric_select.param.watch(lambda e: setattr(state, "metric", e.new), "value")
    by_select.param.watch(lambda e: setattr(state, "by", e.new), "value")
    return [pn.Row(run_select, metric_select, pn.Column(pn.pane.Markdown("group by"), by_select)), slider]


def view_stream(state: RankState) -> hv.streams.Params:
    """A stream of ``state``'s run, metric, grouping and rank range; DynamicMaps overlaid on the per-rank
    view share one, so that an action refreshes the plot once."""
    return hv.streams.Params(state, ["run", "metric", "by", "ranks"])


def rank_pane(ds: xr.Dataset, state: RankState, *overlays: hv.DynamicMap,
              stream: hv.streams.Params | None = None) -> pn.pane.HoloViews:
    """The per-rank view: a DynamicMap of :func:`rank_bands` following ``state`` (through ``stream``, a
    :func:`view_stream` of it shared with ``overlays``), under ``overlays``."""
    orders: dict[tuple[str, str], list[str]] = {}

    def frame(run: str, metric: str, by: str, ranks: tuple[int, int]) -> hv.Polygons:
        if (by, metric) not in orders:
            orders[by, metric] = band_order(ds, by, metric)
        bands = rank_bands(ds, run, by=by, metric=metric, ranks=ranks, order=orders[by, metric])
        if overlays:  # in an overlay a label would be a second legend entry beside the groups': it is the title
            title = bands.label
            with param.edit_constant(bands):  # in place: a relabelled copy re-validates every polygon
                bands.label = ""
            bands.opts(title=title)
        return bands

    plot = hv.DynamicMap(frame, streams=[stream or view_stream(state)])
    for overlay in overlays:
        plot = plot * overlay
    return pn.pane.HoloViews(plot, sizing_mode="stretch_width")


def rank_bands(ds: xr.Dataset, run: str, *, by: str = "function", metric: str = "time",
               ranks: tuple[int, int] | None = None, order: list[str] | None = None) -> hv.Polygons:
    """The stacked per-rank profile as one polygon per group (one glyph, so groups may change).

    Same numbers, stack order and colours as :func:`perfkit.plots.profile.stacked_ranks`: the groups in
    ``order`` (:func:`perfkit.plots.profile.band_order` when None: compute at the bottom, the same for
    every run and rank range), one colour per name of ``ds[by]`` (:mod:`perfkit.plots.palette`); each polygon's
    ``by`` value is its group in words (:func:`perfkit.plots.palette.label`), as legend and hover show it.
    """
    table = rank_table(ds, run, by=by, metric=metric, ranks=ranks).fillna(0.0)
    order = band_order(ds, by, metric) if order is None else order
    table = table[[name for name in order if name in table.columns]]
    top = table.to_numpy().cumsum(axis=1)
    bottom = top - table.to_numpy()
    x = table.index.to_numpy(dtype=float)
    outline = np.concatenate([x, x[::-1]])
    bands = [{"rank": outline, "value": np.concatenate([top[:, i], bottom[::-1, i]]), by: label(name)}
             for i, name in enumerate(table.columns)]
    unit = str(ds["units"].sel(metric=metric).item())
    ylabel = f"{metric} [{unit}]" if unit not in ("", "1") else metric
    title = f"{run}: {metric} per rank by {by}"
    return hv.Polygons(bands, ["rank", hv.Dimension("value", label=ylabel)], vdims=[by], label=title).opts(
        color=by, cmap=labelled_colours(ds[by].values), line_width=0, alpha=0.9, tools=["hover"], show_legend=True,
        legend_position="right", show_grid=True, framewise=True, responsive=True, height=420, padding=(0, 0.05),
        title="{label}", ylabel=ylabel, yformatter=unit_formatter(unit), yticks=unit_ticker(unit),
    )
