"""The per-rank explorer: run, metric, grouping and rank-range selectors over a stacked per-rank profile.

Every user action updates one :class:`RankState`; the plot is one bokeh figure with a single patch
glyph for the bands (:mod:`perfkit.plots.rank_figure`), so moving the slider or changing run, grouping or
metric replaces the data of the plot instead of rebuilding it. :func:`perfkit.explore` builds its dashboard
on the same pieces.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import holoviews as hv
import numpy as np
import pandas as pd
import panel as pn
import param
import xarray as xr
from panel.io import hold, push_notebook

from perfkit.plots.axes import unit_formatter, unit_ticker
from perfkit.plots.palette import label, labelled_colours
from perfkit.plots.profile import band_order, bin_groups, bin_means, bin_step, means_of, rank_table, row_totals
from perfkit.plots.rank_figure import RankFigure, ranks_inside
from perfkit.widgets.run_block import RunBlock
from perfkit.widgets.study_summary import StudySummary, summarise

GROUPINGS = ("function", "call", "kind")
#: A view drawn from the study summary has its run read in the background this long after [s]: once the update
#: has reached the page and been drawn (0.1-0.2 s at 100,000 ranks), which the read would slow down.
PREFETCH_DELAY = 0.3
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
    #: First and last rank that exist in each run (``summary.bounds()``), where the rank range resets on a run change.
    bounds = param.Dict(default={}, constant=True)
    #: Which ranks each run has and the stack order of the groups (:func:`perfkit.widgets.study_summary.summarise`).
    summary = param.ClassSelector(class_=StudySummary, default=None, allow_None=True, constant=True)


def rank_explorer(ds: xr.Dataset, run: str | None = None) -> pn.Column:
    """Stacked per-rank profile of one run with widgets to pick run, rank range, grouping and metric."""
    state = rank_state(ds, run)
    return pn.Column(*rank_controls(ds, state), rank_pane(ds, state), sizing_mode="stretch_width")


def rank_state(ds: xr.Dataset, run: str | None = None) -> RankState:
    """The initial state: ``run`` (default the first) over all its ranks, time by function."""
    label = run if run is not None else str(ds["run"].values[0])
    summary = summarise(ds)
    bounds = summary.bounds()
    return RankState(run=label, ranks=bounds[label], bounds=bounds, summary=summary)


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


def rank_pane(ds: xr.Dataset, state: RankState, *,
              on_select: Callable[[np.ndarray], None] | None = None) -> pn.pane.Bokeh:
    """The per-rank view following ``state``: one bokeh figure (:class:`perfkit.plots.rank_figure.RankFigure`)
    whose data is replaced on each change of run, metric, grouping or rank range.

    The bands are :func:`rank_bands`' numbers (binned above :data:`perfkit.plots.profile.MAX_POINTS` ranks, mean
    per bin). With ``on_select``, each rank's total is drawn as markers and the ranks of ``state.selected`` in
    crimson; a box or lasso calls ``on_select`` with the ranks whose total lies inside it (none: not called).
    """
    view = RankFigure(selectable=on_select is not None)
    pane = pn.pane.Bokeh(view.figure, sizing_mode="stretch_width")
    block = RunBlock(ds)
    summary = state.summary if state.summary is not None else summarise(ds)
    bounds = summary.bounds()
    position = {str(name): i for i, name in enumerate(block.labels["function"])}
    orders: dict[tuple[str, str], list[str]] = {}
    tints: dict[str, dict[str, str]] = {}
    #: The view shown, and its ranks and their totals (None until needed when drawn from the summary).
    shown: dict[str, Any] = {"key": None, "exact": None}

    def exact() -> tuple[np.ndarray, np.ndarray]:
        """The ranks shown and each one's total, exact (from the run's values, read if not yet there)."""
        if shown["exact"] is None:
            run, metric, _, ranks = shown["key"]
            x, _, values = block.arrays(run, metric=metric, ranks=ranks)
            shown["exact"] = (x, rank_sums(values))
        return shown["exact"]

    def bands(run: str, metric: str, by: str, ranks: tuple[int, int]) -> dict[str, Any]:
        """What the view draws: bins' first ranks, groups, means, step, span, markers (ranks, totals), top total;
        over all of a run's ranks from the summary (``exact`` None: the run is read in the background once the
        update has gone, :data:`PREFETCH_DELAY`), else from the run."""
        if ranks == bounds.get(run) and (run, metric) in summary.views:
            whole, groups, means = summary.view(run, metric, by)
            return {"first": whole.first, "groups": groups, "means": means, "step": whole.step, "last": whole.last,
                    "span": whole.span, "marks": (whole.marks, whole.marked), "top": whole.top, "exact": None}
        x, functions, values = block.arrays(run, metric=metric, ranks=ranks)
        step = bin_step(len(x))
        if by == "function":
            groups, means = functions, bin_means(values, step) if step > 1 else values
        else:
            groups, sums, counts = bin_groups(values, block.labels[by][[position[str(f)] for f in functions]], step)
            means = means_of(sums, counts)
        totals = rank_sums(values)
        span = (float(x.min()), float(x.max())) if x.size else (0.0, 1.0)
        return {"first": x[::step], "groups": groups, "means": means, "step": step, "last": int(x[-1]) if x.size else 0,
                "span": span, "marks": (x, totals), "top": float(totals.max()) if totals.size else 0.0,
                "exact": (x, totals)}

    def redraw(run: str, metric: str, by: str, ranks: tuple[int, int]) -> None:
        """Bands, markers of the totals and ranges of that view."""
        if (by, metric) not in orders:
            orders[by, metric] = summary.order(by, metric)
        if by not in tints:
            tints[by] = labelled_colours(ds[by].values)
        got = bands(run, metric, by, ranks)
        where = {str(name): i for i, name in enumerate(got["groups"])}
        order = [name for name in orders[by, metric] if name in where]
        step = got["step"]
        table = pd.DataFrame(got["means"][:, [where[name] for name in order]],
                             index=pd.Index(got["first"], name="rank"), columns=[label(name) for name in order])
        unit = str(ds["units"].sel(metric=metric).item())
        binned = f" (bins of {step} ranks)" if step > 1 else ""
        view.show_bands(table, step=step, last=got["last"], colours=tints[by], unit=unit,
                        title=f"{run}: {metric} per rank by {by}{binned}", ylabel=axis_label(metric, unit))
        top = float(np.nansum(table.to_numpy(), axis=1).max()) if len(table) else 0.0
        view.show_totals(*got["marks"], max(top, got["top"] if on_select else 0.0), span=got["span"])
        shown.update(key=(run, metric, by, ranks), exact=got["exact"])

    def draw(*_: Any) -> None:
        key = (state.run, state.metric, state.by, tuple(state.ranks))
        changed = shown["key"] != key
        with batched(pane):
            if changed:
                redraw(*key)
            if on_select is not None:
                if state.selected is None:
                    view.show_selected(np.empty(0, dtype=np.int64), np.empty(0))
                else:
                    ranks, totals = exact()
                    keep = np.isin(ranks, state.selected)
                    view.show_selected(ranks[keep], totals[keep])
        if changed and shown["exact"] is None:
            block.prefetch(state.run, state.metric, PREFETCH_DELAY)

    def on_geometry(attr: str, old: Any, new: dict[str, Any]) -> None:
        if len(new["x"]) == 0 or on_select is None:
            return
        with batched(pane):
            view.geometry.data = {"x": [], "y": []}  # the same box drawn again is a change again
            picked = ranks_inside(*exact(), new["x"], new["y"])
            if picked.size:
                on_select(picked)

    state.param.watch(draw, ["run", "metric", "by", "ranks", "selected"])
    view.geometry.on_change("data", on_geometry)
    draw()
    return pane


@contextmanager
def batched(pane: pn.pane.Bokeh) -> Iterator[None]:
    """Changes made to ``pane``'s bokeh models in the block reach the page together, wherever it is shown.

    Under panel serve as one message (panel applies a widget's change there without holding the document:
    each model change went as a message of its own); in a notebook with panel's comm they are pushed at the end
    (panel does so itself only after its widgets' changes, not after a change made in the page to a bokeh model,
    such as a box drawn); elsewhere (Voila's widgets) the document hands them on when released.
    """
    doc = pane.object.document
    if doc is None:
        yield
    elif doc.session_context is not None:
        with hold(doc):
            yield
    else:
        held = doc.callbacks.hold_value
        doc.hold("combine")
        try:
            yield
            push_notebook(pane)
        finally:
            if not held:
                doc.unhold()


def rank_sums(values: np.ndarray) -> np.ndarray:
    """Each row's sum of ``values`` (rank x group), NaN as 0."""
    return row_totals(np.where(np.isnan(values), 0.0, values))


def axis_label(metric: str, unit: str) -> str:
    """The value axis's label: ``metric`` alone, its tick labels carry the unit (``500 ms``, ``20 MB``:
    :func:`perfkit.plots.axes.unit_formatter`), which a ``[s]`` beside ``ms`` ticks contradicted."""
    return metric


def rank_bands(ds: xr.Dataset, run: str, *, by: str = "function", metric: str = "time",
               ranks: tuple[int, int] | None = None, order: list[str] | None = None) -> hv.Polygons:
    """The stacked per-rank profile as a holoviews element, one polygon per group (for a notebook's own overlays
    and layouts; the explorer draws the same numbers with :func:`rank_pane`).

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
    ylabel = axis_label(metric, unit)
    title = f"{run}: {metric} per rank by {by}"
    return hv.Polygons(bands, ["rank", hv.Dimension("value", label=ylabel)], vdims=[by], label=title).opts(
        color=by, cmap=labelled_colours(ds[by].values), line_width=0, alpha=0.9, tools=["hover"], show_legend=True,
        legend_position="right", show_grid=True, framewise=True, responsive=True, height=420, padding=(0, 0.05),
        title="{label}", ylabel=ylabel, yformatter=unit_formatter(unit), yticks=unit_ticker(unit),
    )
