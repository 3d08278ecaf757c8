"""The perfkit explorer: one dashboard over a canonical Dataset.

Shared controls (run, metric, grouping, rank range, rank selection) drive the tabs: the stacked
per-rank profile, the scaling views (two or more runs with known ``nprocs``), the POP efficiencies
(coloured table, and across the series), imbalance findings and, when the Dataset has ``traffic``,
a sender x receiver heatmap and the placement tab (given a measured re-run, its prediction against
the re-run: ``rerun=`` or a run labelled with the strategy's name, see
:mod:`perfkit.widgets.placement`), when two runs hold the same ranks (or with ``rerun=``) run A
against run B (:mod:`perfkit.widgets.compare`), and when a run was read from an mpiP report or a CUBE
profile, its call sites (:mod:`perfkit.widgets.callsites`). Findings select the ranks they name
(:mod:`perfkit.widgets.findings`). The same layout works in a notebook, in Voila and under
``panel serve`` (see :mod:`perfkit.widgets.explorer_app`).

Ranks are selected by box or lasso in the per-rank plot, by node, or as the slow ranks or the
outliers of the run (:mod:`perfkit.widgets.selection`); the selection and the rank range together
are the ranks in view, and every tab follows them: findings and imbalance are computed on those
ranks, the traffic heatmap keeps only their senders and receivers, the efficiency tab adds the POP
efficiencies of those ranks beside the whole run's.

The controls and the per-rank view are those of :func:`perfkit.widgets.ranks.rank_explorer`: one
state changed once per user action, a plot whose data is replaced rather than rebuilt. Tabs other
than the first compute only while they are shown. Their results (the scaling tables, the POP efficiencies, the
findings, run A against run B) are computed off the event loop, in the background once the first plot is up
(:mod:`perfkit.widgets.warmup`) or when the tab is shown before; the traffic, call-site and timeline tabs read
their run off the loop when shown. Such a tab shows a placeholder meanwhile and is drawn when its result is there
(:mod:`perfkit.widgets.offloop`), every control working in between: those computations pause while the user acts
(:mod:`perfkit.widgets.gate`).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import holoviews as hv
import numpy as np
import pandas as pd
import panel as pn
import param
import sparse
import xarray as xr

from perfkit import text as fmt
from perfkit.analysis.diagnosis import diagnose
from perfkit.analysis.imbalance import imbalance
from perfkit.analysis.pop import pop_metrics
from perfkit.model import TRAFFIC_DIMS
from perfkit.plots.canvas import use_canvas
from perfkit.plots.palette import label
from perfkit.plots.pop import pop_plot, pop_styler
from perfkit.plots.traffic import colour_label, style_heatmap
from perfkit.widgets.callsites import callsite_tab, has_callsites
from perfkit.widgets.compare import compare_controls, compare_view, has_comparison, with_rerun
from perfkit.widgets.findings import findings_list
from perfkit.widgets.gate import interaction, watch_page
from perfkit.widgets.kept import Kept, Once, pending
from perfkit.widgets.offloop import OffLoop, Redraw
from perfkit.widgets.ranks import WIDGET_WIDTH, RankState, rank_controls, rank_state
from perfkit.widgets.results import KEPT, TabResults, subset_pop
from perfkit.widgets.selection import describe_ranks, selection_controls, selection_pane, view_ranks
from perfkit.widgets.warmup import Warmup, shown_through_ipywidgets

#: Largest side of the traffic heatmap: bigger matrices are summed over square blocks of ranks.
MAX_CELLS = 256


def explore(ds: xr.Dataset, run: str | None = None, *, rerun: xr.Dataset | None = None,
            link_rate: str = "") -> pn.Column:
    """The explorer dashboard for ``ds``: controls on top, one tab per view. ``rerun`` (the measured re-run
    of a placement) and ``link_rate`` (``"200mbit"``; empty: unknown) go to the placement tab."""
    use_canvas()
    state = rank_state(ds, run)
    controls = rank_controls(ds, state)
    # selecting runs of a sparse traffic cube by a list is slow: views that do not draw traffic go without it
    profiles = ds.drop_vars("traffic", errors="ignore")
    all_ranks = ds["rank"].values

    def in_view(run: str, rank_range: tuple[int, int], selected: list[int] | None) -> np.ndarray | None:
        return view_ranks(all_ranks, rank_range, selected, state.bounds[run])

    tabs = pn.Tabs(("per rank", selection_pane(profiles, state)), dynamic=True, sizing_mode="stretch_width")
    in_state = (state.param.run, state.param.ranks, state.param.selected)
    n_runs = ds.sizes["run"]
    title = pn.pane.Markdown(f"### perfkit explorer: {n_runs} run{'s' * (n_runs > 1)}")
    dashboard = pn.Column(title, *controls, selection_controls(profiles, state), tabs, sizing_mode="stretch_width")
    # the hidden tabs' computations, in the background once the first plot is up: served, the page's load
    # starts them (pn.state.onload); in a notebook or Voila, the page's view of the dashboard's widget
    shown = (lambda: shown_through_ipywidgets(dashboard)) if pn.config.comms == "ipywidgets" else None
    warmup = Warmup(shown=None if pn.state.curdoc is not None else shown)
    # the controls before the tabs' computations: these pause while the user acts (served: as the page's change
    # arrives; elsewhere as the view changes)
    if pn.state.curdoc is not None and pn.state.curdoc.session_context is not None:
        watch_page(pn.state.curdoc)

        def closed(session_context: Any) -> None:  # the page is gone: its tabs are prepared for nobody
            warmup.stop()

        pn.state.curdoc.on_session_destroyed(closed)
    state.param.watch(lambda *_: interaction(), ["run", "metric", "by", "ranks", "selected"])
    # a tab's results are computed off the event loop (in the background, or when the tab is shown early)
    results = TabResults(profiles, with_rerun(profiles, rerun), state.summary)
    if has_scaling(ds):
        first_table = Once(lambda: importlib.import_module("perfkit.widgets.scaling").prepare(profiles))
        _add_tab(tabs, "scaling", _once(lambda: _scaling_panel(profiles)), needs=lambda: pending(first_table),
                 what="the scaling table of every run")
        warmup.add(first_table)
    warmup.add(results.pop)
    series = _once(lambda: efficiency_view(profiles, results.pop()))

    def efficiency(run: str, rr: tuple[int, int], sel: list[int] | None) -> pn.Column:
        ranks = in_view(run, rr, sel)
        part = results.part(run, ranks)
        return efficiency_tab(profiles, run, ranks, results.pop(), series(), part=None if part is None else part())

    _add_tab(tabs, "efficiency", efficiency, *in_state, what="the POP efficiencies",
             needs=lambda run, rr, sel: pending(results.pop, results.part(run, in_view(run, rr, sel))))

    def findings(run: str, rr: tuple[int, int], sel: list[int] | None, by: str, metric: str) -> pn.Column:
        return findings_view(profiles, run, by, metric, ranks=in_view(run, rr, sel), state=state,
                             diagnosed=lambda run, ranks: results.diagnosis(run, ranks)())

    def findings_needs(run: str, rr: tuple[int, int], sel: list[int] | None, *_: Any) -> Once[Any] | None:
        ranks = in_view(run, rr, sel)
        return None if ranks is not None and ranks.size == 0 else pending(results.diagnosis(run, ranks))

    _add_tab(tabs, "findings", findings, *in_state, state.param.by, state.param.metric, needs=findings_needs,
             what="the findings")
    warmup.add(lambda: results.diagnosis(state.run, in_view(state.run, state.ranks, state.selected))())
    if has_comparison(results.compared, state.summary):  # the study's summary, read once for the per-rank view
        run_a, run_b = compare_controls(results.compared, state)

        def compare(a: str, b: str, by: str, metric: str) -> pn.Column:
            found = results.difference(a, b, by, metric)
            return compare_view(results.compared, a, b, by=by, metric=metric, study=state.summary,
                                differences=None if found is None else found())

        _add_tab(tabs, "compare", compare, run_a, run_b, state.param.by, state.param.metric,
                 header=pn.Row(run_a, run_b), needs=lambda *choice: pending(results.difference(*choice)),
                 what="run A against run B")
    if "traffic" in ds:
        quantity = pn.widgets.Select(label="quantity", options=[str(q) for q in ds["quantity"].values],
                                     value=str(ds["quantity"].values[0]), width=WIDGET_WIDTH)
        matrices: Kept[TrafficCells | str] = Kept(KEPT)

        def traffic_of(run: str, rr: tuple[int, int], sel: list[int] | None, q: str) -> Once[TrafficCells | str]:
            key = (run, tuple(rr), None if sel is None else tuple(sel), q)
            return matrices.cell(key, lambda: traffic_cells(ds, run, q, rr, selected=sel))

        _add_tab(tabs, "traffic", lambda *choice: traffic_plot(traffic_of(*choice)()), *in_state, quantity,
                 header=quantity, needs=lambda *choice: pending(traffic_of(*choice)),
                 what="the traffic between the ranks in view")
        from perfkit.widgets.placement import placement_panel  # the placement tab lives in its own module

        _add_tab(tabs, "placement", _once(lambda: placement_panel(ds, state, rerun=rerun, link_rate=link_rate)))
    if has_callsites(ds):
        sites, sites_needs = callsite_tab(profiles, in_view)
        _add_tab(tabs, "call sites", sites, *in_state, needs=sites_needs, what="the call sites of the run")
    if "timeline" in ds:
        from perfkit.widgets.timeline import timeline_cells, timeline_control, timeline_plot  # a trace's tab

        columns = timeline_control(ds)
        pictures: Kept[Any] = Kept(KEPT)

        def picture_of(run: str, n: int) -> Once[Any]:
            return pictures.cell((run, n), lambda: timeline_cells(ds, run, n))

        _add_tab(tabs, "timeline", lambda run, n: timeline_plot(picture_of(run, n)(), run), state.param.run, columns,
                 header=columns, needs=lambda run, n: pending(picture_of(run, n)), what="the timeline of the run")
    pn.state.onload(warmup.start)  # served: once the page is up; in a notebook at once (the thread waits)
    return dashboard


def _scaling_panel(ds: xr.Dataset) -> pn.Column:
    """The scaling tab, imported when first shown: its model fits need scipy.stats, whose import (2.5 s
    here) would otherwise delay the first plot."""
    from perfkit.widgets.scaling import scaling_panel

    return scaling_panel(ds)


def has_scaling(ds: xr.Dataset) -> bool:
    """Whether ``ds`` holds at least two runs with a known process count."""
    return "nprocs" in ds.coords and int(np.isfinite(ds["nprocs"].values.astype(float)).sum()) >= 2


def efficiency_view(ds: xr.Dataset, pop: xr.Dataset | None = None) -> pn.Column:
    """The POP efficiencies of every run (:func:`perfkit.pop_metrics`, or ``pop`` when already computed) as
    a coloured table, and across the series when there is one."""
    pop = pop_metrics(ds) if pop is None else pop
    note = ("POP efficiencies per run (`perfkit.pop_metrics`): parallel efficiency = load balance x "
            "communication efficiency = load balance x serialisation x transfer efficiency.")
    parts: list[Any] = [pn.pane.Markdown(note), pn.pane.HTML(pop_styler(pop).to_html(), sizing_mode="stretch_width")]
    if has_scaling(ds):
        parts.append(pn.pane.HoloViews(pop_plot(pop), backend="bokeh"))
    return pn.Column(*parts, sizing_mode="stretch_width")


def efficiency_tab(ds: xr.Dataset, run: str, ranks: np.ndarray | None, pop: xr.Dataset,
                   series: pn.Column, part: xr.Dataset | None = None) -> pn.Column:
    """``series`` (:func:`efficiency_view`), after the POP efficiencies of ``ranks`` of ``run`` beside the whole
    run's (from ``pop``, every run's) when ``ranks`` is a subset (None: every rank); ``part``: those of the subset
    (:func:`perfkit.widgets.results.subset_pop`) when already computed."""
    if ranks is None:
        return series
    if ranks.size == 0:
        return pn.Column(pn.pane.Markdown(f"No rank of {run} in view: nothing to compute on."), series,
                         sizing_mode="stretch_width")
    part = subset_pop(ds.sel(run=[run], rank=ranks)) if part is None else part
    part = part.assign_coords(run=[f"{run} [{ranks.size} ranks]"])
    table = pop_styler(xr.concat([pop.sel(run=[run]), part], "run", data_vars="all", coords="minimal",
                                 compat="override")).to_html()
    note = (f"POP efficiencies of {run} on the ranks in view ({ranks.size}: {describe_ranks(ranks)}) beside all "
            "its ranks: load balance is among these ranks, elapsed is the run's.")
    return pn.Column(pn.pane.Markdown(note), pn.pane.HTML(table), series, sizing_mode="stretch_width")


def findings_view(ds: xr.Dataset, run: str, by: str = "function", metric: str = "time",
                  ranks: np.ndarray | None = None, state: RankState | None = None,
                  diagnosed: Callable[[str, np.ndarray | None], pd.DataFrame] | None = None) -> pn.Column:
    """Findings of :func:`perfkit.diagnose` for ``run`` (largest first, :func:`perfkit.widgets.findings.findings_list`:
    with ``state``, each selects the ranks it names), then the imbalance of ``metric`` per group.

    Both on ``ranks`` only when given (the ranks in view), else on every rank of the run. ``diagnosed(run, ranks)``:
    the findings as a table when already computed (:meth:`perfkit.widgets.results.TabResults.diagnosis`).
    """
    where = "every rank" if ranks is None else f"{fmt.plural(ranks.size, 'rank')} in view ({describe_ranks(ranks)})"
    if ranks is not None:
        if ranks.size == 0:
            return pn.Column(pn.pane.Markdown(f"Findings for {run}: no rank in view (range and selection)."))
        ds = ds.sel(rank=ranks)
    findings = pd.DataFrame(diagnose(ds, run=run)) if diagnosed is None else diagnosed(run, ranks)
    unit = str(ds["units"].sel(metric=metric).item())
    note = f"Imbalance of {metric} per {by} across the ranks in view of {run} (largest max - mean first)."
    return pn.Column(pn.pane.Markdown(f"Findings for {run} on {where} (`perfkit.diagnose`), most time at stake "
                                      "first; open one for its details."), findings_list(ds, findings, state),
                     *_table(note, readable_imbalance(imbalance_table(ds, run, by=by, metric=metric), unit)),
                     sizing_mode="stretch_width")


def imbalance_table(ds: xr.Dataset, run: str, *, by: str = "function", metric: str = "time") -> pd.DataFrame:
    """Max, mean and max / mean over the ranks of ``run`` per group, largest ``max - mean`` first.

    The numbers of :func:`perfkit.imbalance`; groups without a value in the run are left out.
    """
    stats = imbalance(ds.sel(run=[run]), by=by, metric=metric).isel(run=0, drop=True)
    frame = stats[["max", "mean", "rank_of_max", "max_over_mean", "imbalance_time"]].to_pandas()
    frame = frame.rename(columns={"imbalance_time": "max_minus_mean"}).dropna(subset=["max"])
    frame["rank_of_max"] = frame["rank_of_max"].astype("int64")
    return frame.sort_values("max_minus_mean", ascending=False).rename_axis(by).reset_index()


def readable_imbalance(frame: pd.DataFrame, unit: str) -> pd.DataFrame:
    """:func:`imbalance_table` in words (:mod:`perfkit.text`): groups named as legends name them
    (:func:`perfkit.plots.palette.label`), values in ``unit`` (``s``: a time unit that fits, ``B``: SI bytes, else
    counts), max / mean as a ratio."""
    value = fmt.UNIT_WRITERS.get(unit, fmt.number)
    shown = frame.copy()
    shown[frame.columns[0]] = frame[frame.columns[0]].map(label)
    for column in ("max", "mean", "max_minus_mean"):
        shown[column] = frame[column].map(value)
    shown["max_over_mean"] = frame["max_over_mean"].map(fmt.ratio)
    shown["rank_of_max"] = frame["rank_of_max"].map(fmt.count)
    shown = shown[[frame.columns[0], "max", "mean", "rank_of_max", "max_over_mean", "max_minus_mean"]]
    return shown.rename(columns={"max_minus_mean": "max - mean", "max_over_mean": "max / mean",
                                 "rank_of_max": "rank of max"})


#: Table cells left-aligned and at the top, long text wrapped.
TABLE_CSS = ".panel-df th { text-align: left; vertical-align: bottom; } .panel-df td { vertical-align: top; }"


def _table(note: str, frame: pd.DataFrame) -> tuple[pn.pane.Markdown, pn.pane.DataFrame]:
    return pn.pane.Markdown(note), pn.pane.DataFrame(frame, index=False, justify="left", text_align="start",
                                                     stylesheets=[TABLE_CSS], sizing_mode="stretch_width")


def traffic_view(ds: xr.Dataset, run: str, quantity: str, ranks: tuple[int, int] | None = None,
                 selected: list[int] | None = None) -> Any:
    """Heatmap of ``traffic`` (sender x receiver) for one run and quantity, block-summed when large.

    ``ranks`` is a range of ranks (first, last); with ``selected`` (ranks), only messages between two
    selected ranks of the range are kept, drawn between the first and last of them (others blank).
    """
    return traffic_plot(traffic_cells(ds, run, quantity, ranks, selected))


@dataclass(frozen=True)
class TrafficCells:
    """One run's traffic ready to draw (:func:`traffic_cells`): ``cells`` sender x receiver, summed over square
    blocks of ranks, the rank at each block's centre, the quantity, its label with the unit, the heatmap's title."""

    cells: np.ndarray
    centres: np.ndarray
    quantity: str
    label: str
    title: str


def traffic_cells(ds: xr.Dataset, run: str, quantity: str, ranks: tuple[int, int] | None = None,
                  selected: list[int] | None = None) -> TrafficCells | str:
    """What :func:`traffic_view` draws, read and block-summed (no panel or holoviews object: any thread may
    compute it); a sentence saying why when there is nothing to draw."""
    senders = ds["sender"].values
    lo, hi = ranks if ranks is not None else (int(senders.min()), int(senders.max()))
    chosen = ""
    if selected is not None:
        picked = np.asarray(selected, dtype=np.int64)
        picked = picked[(picked >= lo) & (picked <= hi)]
        if picked.size == 0:
            return f"No selected rank in the range {lo}-{hi}: no traffic to show."
        lo, hi = int(picked.min()), int(picked.max())
        chosen = f", between the {picked.size} selected ranks"
    first, last = np.searchsorted(senders, lo), np.searchsorted(senders, hi, side="right")
    rows, cols, values = traffic_entries(ds, run, quantity, first, last)
    if selected is not None:
        keep = np.isin(senders[first:last], picked)
        between = keep[rows] & keep[cols]
        rows, cols, values = rows[between], cols[between], values[between]
    cells, step = block_sum(rows, cols, values, last - first)
    if values.size == 0 or not np.any(cells > 0):
        return f"No {quantity} traffic recorded for run {run} (ranks {lo}-{hi}{chosen})."
    centres = senders[first] + step * np.arange(cells.shape[0]) + (step - 1) / 2
    unit = str(ds["quantity_units"].sel(quantity=quantity).item()) if "quantity_units" in ds.coords else ""
    label = f"{quantity} [{unit}]" if unit not in ("", "1") else quantity
    note = chosen + (f", summed over blocks of {step} x {step} ranks" if step > 1 else "")
    return TrafficCells(cells, centres, quantity, label, f"{run}: {quantity} sender -> receiver{note}")


def traffic_plot(found: TrafficCells | str) -> Any:
    """The heatmap of :func:`traffic_cells`' result (blank where nothing was sent), or its sentence."""
    if isinstance(found, str):
        return pn.pane.Markdown(found)
    image = hv.Image((found.centres, found.centres, np.where(found.cells > 0, found.cells, np.nan)),
                     ["receiver", "sender"], hv.Dimension(found.quantity, label=found.label))
    return style_heatmap(image, found.title, colour_label(found.quantity), None).opts(frame_width=420,
                                                                                      frame_height=420)


def traffic_entries(ds: xr.Dataset, run: str, quantity: str, first: int = 0,
                    last: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Non-zero finite entries (row, column, value) of one run's matrix between positions ``first:last``.

    Sparse traffic (also dask of sparse blocks, as a lazily loaded store holds it) is filtered on its
    coordinates, never densified.
    """
    data = ds["traffic"].transpose(*TRAFFIC_DIMS).data
    i_run = int(np.flatnonzero(ds["run"].values == run)[0])
    i_q = int(np.flatnonzero(ds["quantity"].values == quantity)[0])
    last = data.shape[1] if last is None else last
    if hasattr(data, "dask"):  # a lazily loaded store: this run's block only (sparse.COO when stored sparse)
        data, i_run = data[i_run:i_run + 1].compute(), 0
    if isinstance(data, sparse.SparseArray):
        coo = data if isinstance(data, sparse.COO) else sparse.COO(data)
        run_of, rows, cols, q_of = coo.coords
        keep = (run_of == i_run) & (q_of == i_q)
        keep &= (rows >= first) & (rows < last) & (cols >= first) & (cols < last)
        rows, cols, values = rows[keep] - first, cols[keep] - first, coo.data[keep]
    else:
        block = np.asarray(data[i_run, first:last, first:last, i_q], dtype=float)
        rows, cols = np.nonzero(np.nan_to_num(block))
        values = block[rows, cols]
    keep = np.isfinite(values) & (values != 0)
    return rows[keep], cols[keep], values[keep].astype(float)


def block_sum(rows: np.ndarray, cols: np.ndarray, values: np.ndarray, n: int,
              max_cells: int = MAX_CELLS) -> tuple[np.ndarray, int]:
    """An ``n x n`` matrix given by its entries, summed over ``step x step`` blocks, at most ``max_cells`` a side.

    Returns the block matrix and ``step``.
    """
    step = max(1, math.ceil(n / max_cells))
    size = max(1, math.ceil(n / step))
    flat = (np.asarray(rows) // step) * size + np.asarray(cols) // step
    return np.bincount(flat, weights=values, minlength=size * size).reshape(size, size), step


def _add_tab(tabs: pn.Tabs, name: str, view: Callable[..., Any], *deps: Any, header: Any = None,
             needs: Callable[..., Once[Any] | None] | None = None, what: str = "") -> None:
    """Append a tab whose ``view(*deps)`` is computed only while the tab is the active one.

    ``deps``: parameters (``state.param.run``) or widgets (their value). While another tab is shown,
    their changes only mark the tab out of date: nothing is computed or sent to the browser, not even
    its loading indicator (each one a layout pass of the whole page there); showing the tab brings it
    up to date. ``needs(*deps)``: a result ``view`` needs that is not computed yet (None: none), computed
    in a worker thread while the tab shows a placeholder saying it computes ``what``
    (:class:`perfkit.widgets.offloop.OffLoop`): the event loop, and every control, stay free.
    """
    index = len(tabs)
    refresh = Redraw()
    parameters = [dep.param.value if isinstance(dep, pn.widgets.Widget) else dep for dep in deps]
    stale = [True]  # changed since last computed (never computed yet)

    def on_change(*_: Any) -> None:
        if tabs.active == index:
            refresh.again()
        else:
            stale[0] = True

    def on_shown(event: param.parameterized.Event) -> None:
        if event.new == index and stale[0]:
            refresh.again()

    later = OffLoop(on_change, what or f"the {name} tab")

    def render(_count: int) -> Any:
        if tabs.active != index:  # the page's first rendering of the hidden tab
            raise param.Skip
        stale[0] = False
        values = [getattr(p.owner, p.name) for p in parameters]
        return later.view(lambda: view(*values), None if needs is None else needs(*values))

    owners: dict[int, tuple[Any, list[str]]] = {}
    for parameter in parameters:  # one watcher per object: a change of several of its values is one change
        owners.setdefault(id(parameter.owner), (parameter.owner, []))[1].append(parameter.name)
    for owner, names in owners.values():
        owner.param.watch(on_change, names)
    tabs.param.watch(on_shown, "active")
    body = pn.panel(pn.bind(render, refresh.param.count), lazy=True, loading_indicator=True)
    tabs.append((name, pn.Column(header, body, sizing_mode="stretch_width") if header is not None else body))


def _once(build: Callable[[], Any]) -> Callable[[], Any]:
    """``build`` called on first use only (keeps a tab's own widget state across visits)."""
    made: list[Any] = []

    def get() -> Any:
        if not made:
            made.append(build())
        return made[0]

    return get
