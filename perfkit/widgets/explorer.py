"""The perfkit explorer: one dashboard over a canonical Dataset.

Shared controls (run, metric, grouping, rank range) drive the tabs: the stacked per-rank profile,
the scaling views (two or more runs with known ``nprocs``), the POP efficiencies (coloured table,
and across the series), imbalance findings and, when the
Dataset has ``traffic``, a sender x receiver heatmap. The same layout works in a notebook, in
Voila and under ``panel serve`` (see :mod:`perfkit.widgets.explorer_app`).

The controls and the per-rank view are those of :func:`perfkit.widgets.ranks.rank_explorer`: one
state changed once per user action, a plot whose data is replaced rather than rebuilt. Tabs other
than the first compute only while they are shown.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import holoviews as hv
import numpy as np
import pandas as pd
import panel as pn
import param
import sparse
import xarray as xr

from perfkit.analysis.diagnosis import diagnose
from perfkit.analysis.imbalance import imbalance
from perfkit.analysis.pop import pop_metrics
from perfkit.model import TRAFFIC_DIMS
from perfkit.plots.pop import pop_plot, pop_styler
from perfkit.widgets.ranks import WIDGET_WIDTH, rank_controls, rank_pane, rank_state
from perfkit.widgets.scaling import scaling_panel

#: Largest side of the traffic heatmap: bigger matrices are summed over square blocks of ranks.
MAX_CELLS = 256


def explore(ds: xr.Dataset, run: str | None = None) -> pn.Column:
    """The explorer dashboard for ``ds``: controls on top, one tab per view."""
    state = rank_state(ds, run)
    controls = rank_controls(ds, state)
    # selecting runs of a sparse traffic cube by a list is slow: views that do not draw traffic go without it
    profiles = ds.drop_vars("traffic", errors="ignore")
    tabs = pn.Tabs(("per rank", rank_pane(ds, state)), sizing_mode="stretch_width")
    if has_scaling(ds):
        _add_tab(tabs, "scaling", _once(lambda: scaling_panel(profiles)))
    _add_tab(tabs, "efficiency", _once(lambda: efficiency_view(profiles)))
    _add_tab(tabs, "findings", lambda run, by, metric: findings_view(profiles, run, by, metric),
             state.param.run, state.param.by, state.param.metric)
    if "traffic" in ds:
        quantity = pn.widgets.Select(label="quantity", options=[str(q) for q in ds["quantity"].values],
                                     value=str(ds["quantity"].values[0]), width=WIDGET_WIDTH)
        _add_tab(tabs, "traffic", lambda run, q, ranks: traffic_view(ds, run, q, ranks),
                 state.param.run, quantity, state.param.ranks, header=quantity)
    n_runs = ds.sizes["run"]
    title = pn.pane.Markdown(f"### perfkit explorer: {n_runs} run{'s' * (n_runs > 1)}")
    return pn.Column(title, *controls, tabs, sizing_mode="stretch_width")


def has_scaling(ds: xr.Dataset) -> bool:
    """Whether ``ds`` holds at least two runs with a known process count."""
    return "nprocs" in ds.coords and int(np.isfinite(ds["nprocs"].values.astype(float)).sum()) >= 2


def efficiency_view(ds: xr.Dataset) -> pn.Column:
    """The POP efficiencies of every run (:func:`perfkit.pop_metrics`) as a coloured table, and across
    the series when there is one."""
    pop = pop_metrics(ds)
    note = ("POP efficiencies per run (`perfkit.pop_metrics`): parallel efficiency = load balance x "
            "communication efficiency = load balance x serialisation x transfer efficiency.")
    parts: list[Any] = [pn.pane.Markdown(note), pn.pane.HTML(pop_styler(pop).to_html(), sizing_mode="stretch_width")]
    if has_scaling(ds):
        parts.append(pn.pane.HoloViews(pop_plot(pop), backend="bokeh"))
    return pn.Column(*parts, sizing_mode="stretch_width")


def findings_view(ds: xr.Dataset, run: str, by: str = "function", metric: str = "time") -> pn.Column:
    """Findings of :func:`perfkit.diagnose` for ``run`` (largest first), then the imbalance of ``metric`` per group."""
    findings = pd.DataFrame(diagnose(ds, run=run))
    note = f"Imbalance of {metric} per {by} across the ranks of {run} (largest max - mean first)."
    return pn.Column(*_table(f"Findings for {run} (`perfkit.diagnose`).", findings),
                     *_table(note, imbalance_table(ds, run, by=by, metric=metric)), sizing_mode="stretch_width")


def imbalance_table(ds: xr.Dataset, run: str, *, by: str = "function", metric: str = "time") -> pd.DataFrame:
    """Max, mean and max / mean over the ranks of ``run`` per group, largest ``max - mean`` first.

    The numbers of :func:`perfkit.imbalance`; groups without a value in the run are left out.
    """
    stats = imbalance(ds.sel(run=[run]), by=by, metric=metric).isel(run=0, drop=True)
    frame = stats[["max", "mean", "rank_of_max", "max_over_mean", "imbalance_time"]].to_pandas()
    frame = frame.rename(columns={"imbalance_time": "max_minus_mean"}).dropna(subset=["max"])
    frame["rank_of_max"] = frame["rank_of_max"].astype("int64")
    return frame.sort_values("max_minus_mean", ascending=False).rename_axis(by).reset_index()


def _table(note: str, frame: pd.DataFrame) -> tuple[pn.pane.Markdown, pn.pane.DataFrame]:
    return pn.pane.Markdown(note), pn.pane.DataFrame(frame, index=False, float_format="{:.4g}".format,
                                                     sizing_mode="stretch_width")


def traffic_view(ds: xr.Dataset, run: str, quantity: str, ranks: tuple[int, int] | None = None) -> Any:
    """Heatmap of ``traffic`` (sender x receiver) for one run and quantity, block-summed when large."""
    senders = ds["sender"].values
    lo, hi = ranks if ranks is not None else (int(senders.min()), int(senders.max()))
    first, last = np.searchsorted(senders, lo), np.searchsorted(senders, hi, side="right")
    rows, cols, values = traffic_entries(ds, run, quantity, first, last)
    cells, step = block_sum(rows, cols, values, last - first)
    if values.size == 0 or not np.any(cells > 0):
        return pn.pane.Markdown(f"No {quantity} traffic recorded for run {run} (ranks {lo}-{hi}).")
    centres = senders[first] + step * np.arange(cells.shape[0]) + (step - 1) / 2
    unit = str(ds["quantity_units"].sel(quantity=quantity).item()) if "quantity_units" in ds.coords else ""
    label = f"{quantity} [{unit}]" if unit not in ("", "1") else quantity
    note = f", summed over blocks of {step} x {step} ranks" if step > 1 else ""
    image = hv.Image((centres, centres, np.where(cells > 0, cells, np.nan)), ["receiver", "sender"],
                     hv.Dimension(quantity, label=label))
    return image.opts(cmap="viridis", logz=True, colorbar=True, invert_yaxis=True, tools=["hover"],
                      width=560, height=500, title=f"{run}: {quantity} sender -> receiver{note}")


def traffic_entries(ds: xr.Dataset, run: str, quantity: str, first: int = 0,
                    last: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Non-zero finite entries (row, column, value) of one run's matrix between positions ``first:last``.

    Sparse traffic is filtered on its coordinates, never densified.
    """
    data = ds["traffic"].transpose(*TRAFFIC_DIMS).data
    i_run = int(np.flatnonzero(ds["run"].values == run)[0])
    i_q = int(np.flatnonzero(ds["quantity"].values == quantity)[0])
    last = data.shape[1] if last is None else last
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


def _add_tab(tabs: pn.Tabs, name: str, view: Callable[..., Any], *deps: Any, header: Any = None) -> None:
    """Append a tab whose ``view(*deps)`` is computed only while the tab is the active one.

    While another tab is shown, changes leave the tab's last view untouched (nothing is computed
    or sent to the browser); showing the tab again brings it up to date.
    """
    index = len(tabs)

    def render(active: int, *values: Any) -> Any:
        if active != index:
            raise param.Skip
        return view(*values)

    body = pn.panel(pn.bind(render, tabs.param.active, *deps), lazy=True)
    tabs.append((name, pn.Column(header, body) if header is not None else body))


def _once(build: Callable[[], Any]) -> Callable[[], Any]:
    """``build`` called on first use only (keeps a tab's own widget state across visits)."""
    made: list[Any] = []

    def get() -> Any:
        if not made:
            made.append(build())
        return made[0]

    return get
