"""Rank selection shared by the explorer's tabs: box/lasso in the per-rank plot, a node, slow ranks, outliers.

The selection lives on :class:`perfkit.widgets.ranks.RankState` (``selected``, ``selection_label``);
every tab applies :func:`view_ranks` of the state: the ranks of the rank range that are also in the
selection. Ways to select:

* box or lasso in the per-rank plot, over the markers of each rank's total (top of the stack): the
  ranks whose exact total lies inside it, also where bands and markers are binned (above 2,000
  ranks the markers are each bin's highest and lowest total, :mod:`perfkit.plots.rank_figure`);
  an empty box leaves the selection unchanged (clear it with the button);
* a node: ranks ``node * ppn .. node * ppn + ppn - 1`` (:func:`perfkit.analysis.imbalance.node_of`);
  disabled, saying why, when the run's ``ppn`` is unknown;
* slow ranks: compute time above the run's mean by more than :data:`SLOW_EXCESS`
  (:func:`perfkit.analysis.imbalance.slow_ranks`);
* outliers: compute time with a robust z-score above :data:`perfkit.analysis.imbalance.Z_OUTLIER`
  (:func:`perfkit.analysis.imbalance.outlier_ranks`, high side).

A run change clears the selection (slow ranks and nodes are per run).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import panel as pn
import param
import xarray as xr

from perfkit.analysis.imbalance import Z_OUTLIER, outlier_ranks, slow_ranks
from perfkit.widgets.ranks import WIDGET_WIDTH, RankState, rank_pane

#: A rank is slow when its compute time exceeds the run's mean by more than this fraction.
SLOW_EXCESS = 0.10
#: How a box or lasso selection is named.
BOX = "box/lasso in the per-rank plot"
NO_NODE = "(no node)"


def view_ranks(ranks: np.ndarray, rank_range: tuple[int, int], selected: list[int] | None,
               run_bounds: tuple[int, int] | None = None) -> np.ndarray | None:
    """The ranks of ``ranks`` in ``rank_range`` and in ``selected``.

    None when that is every rank: all of ``ranks`` or, when given, every rank between the run's first
    and last (``run_bounds``, the run's ranks are a part of ``ranks`` when runs differ in size).
    """
    if selected is None and run_bounds is not None and rank_range[0] <= run_bounds[0] \
            and rank_range[1] >= run_bounds[1]:
        return None
    ranks = np.asarray(ranks)
    keep = (ranks >= rank_range[0]) & (ranks <= rank_range[1])
    if selected is not None:
        keep &= np.isin(ranks, selected)
    return None if keep.all() else ranks[keep]


def describe_ranks(ranks: Any, limit: int = 12) -> str:
    """Ranks as sorted runs of consecutive ranks, ``0-3, 7, 10-12``; at most ``limit`` runs, then a count."""
    ranks = np.unique(np.asarray(ranks, dtype=np.int64))
    if ranks.size == 0:
        return "none"
    breaks = np.flatnonzero(np.diff(ranks) != 1) + 1
    starts, ends = ranks[np.r_[0, breaks]], ranks[np.r_[breaks - 1, ranks.size - 1]]
    parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in zip(starts[:limit].tolist(), ends[:limit].tolist())]
    more = f", ... ({starts.size - limit} more runs of ranks)" if starts.size > limit else ""
    return ", ".join(parts) + more


def node_ranks(ds: xr.Dataset, run: str, ranks: np.ndarray | None = None) -> dict[int, np.ndarray]:
    """Existing ranks of ``run`` per node, ``rank // ppn`` as :func:`perfkit.analysis.imbalance.node_of`;
    empty when the run's ``ppn`` is unknown. ``ranks``: the run's existing ranks when known (else read)."""
    ppn = float(ds["ppn"].sel(run=run)) if "ppn" in ds.coords else math.nan
    if not ppn > 0:
        return {}
    if ranks is None:
        exists = ds["profile"].sel(run=run).notnull().any(("function", "metric")).transpose("rank").values
        ranks = ds["rank"].values[exists]
    ranks = np.sort(ranks)
    nodes = ranks // int(ppn)
    starts = np.r_[0, np.flatnonzero(np.diff(nodes)) + 1]
    return dict(zip(nodes[starts].tolist(), np.split(ranks, starts[1:])))


def selection_pane(ds: xr.Dataset, state: RankState) -> pn.pane.Bokeh:
    """The per-rank view (:func:`perfkit.widgets.ranks.rank_pane`) with each rank's total as markers and the
    selected ranks in crimson: a box or lasso sets ``state.selected`` to the ranks whose total lies inside it."""
    return rank_pane(ds, state, on_select=lambda ranks: select(state, ranks, BOX))


def select(state: RankState, ranks: Any, how: str) -> None:
    """Set ``state``'s selection to ``ranks`` (any order, duplicates allowed), saying ``how`` it was made."""
    state.param.update(selected=[int(r) for r in np.unique(np.asarray(ranks, dtype=np.int64))], selection_label=how)


def selection_controls(ds: xr.Dataset, state: RankState) -> pn.Row:
    """Node, slow-ranks, outliers and clear widgets and a line saying what is selected, wired to ``state``."""
    status = pn.pane.Markdown(sizing_mode="stretch_width", margin=(5, 10))
    node = pn.widgets.Select(label="node", width=WIDGET_WIDTH)
    slow = pn.widgets.Button(label="slow ranks", color="default", align="end",
                             description=f"ranks whose compute time exceeds the run's mean by more than "
                                         f"{SLOW_EXCESS:.0%} (perfkit.analysis.imbalance.slow_ranks)")
    outliers = pn.widgets.Button(label="outliers", color="default", align="end",
                                 description=f"ranks whose compute time has a robust z-score above {Z_OUTLIER} "
                                             "(perfkit.analysis.imbalance.outlier_ranks)")
    clear = pn.widgets.Button(label="clear selection", color="warning", align="end")
    nodes: dict[str, np.ndarray] = {}
    per_run: dict[tuple[float, bytes], dict[str, np.ndarray]] = {}  # by ppn and ranks: runs of one size share them
    syncing: list[bool] = []
    notes: list[str] = []

    def show_nodes(run: str) -> None:
        ranks = state.summary.ranks_of(run) if state.summary is not None else None
        key = (float(ds["ppn"].sel(run=run)) if "ppn" in ds.coords else math.nan,
               ranks.tobytes() if ranks is not None else run.encode())
        if key not in per_run:
            per_run[key] = {f"node {n}: ranks {describe_ranks(r)}": r for n, r in node_ranks(ds, run, ranks).items()}
        nodes.clear()
        nodes.update(per_run[key])
        syncing.append(True)
        try:
            options = [NO_NODE, *nodes]
            if nodes and node.options == options and not node.disabled:  # runs of one size: 4,167 nodes at 100k
                node.value = NO_NODE
            elif nodes:
                node.param.update(options=options, value=NO_NODE, disabled=False,
                                  description="select the ranks of one node (rank // ppn)")
            else:
                node.param.update(options=[NO_NODE], value=NO_NODE, disabled=True,
                                  description=f"node of a rank unknown: run {run} has no ppn "
                                              "(processes per node, see docs/contract.md)")
        finally:
            syncing.pop()

    def show_status(*_: Any) -> None:
        note = f" ({notes.pop()})" if notes else ""
        if state.selected is None:
            status.object = f"**selection**: none, every rank in the range{note}"
        else:
            lo, hi = state.ranks
            picked = np.asarray(state.selected)
            inside = int(np.count_nonzero((picked >= lo) & (picked <= hi)))
            outside = f", {inside} in the rank range" if inside != len(state.selected) else ""
            status.object = (f"**selection** ({state.selection_label}): {len(state.selected)} "
                             f"rank{'s' * (len(state.selected) != 1)}{outside}: {describe_ranks(state.selected)}{note}")
        clear.disabled = state.selected is None
        if state.selected is None or not state.selection_label.startswith("node"):
            syncing.append(True)
            try:
                node.value = NO_NODE
            finally:
                syncing.pop()

    def on_node(event: param.parameterized.Event) -> None:
        if syncing:
            return
        if event.new in nodes:
            select(state, nodes[event.new], event.new.split(":")[0])
        else:
            state.param.update(selected=None, selection_label="")

    def on_slow(_: Any) -> None:
        table = slow_ranks(ds, state.run, threshold=SLOW_EXCESS)
        if len(table):
            select(state, table["rank"], f"slow ranks: compute > mean + {SLOW_EXCESS:.0%}")
        else:
            notes.append(f"no rank of {state.run} computes more than the mean + {SLOW_EXCESS:.0%}")
            show_status()

    def on_outliers(_: Any) -> None:
        table = outlier_ranks(ds.sel(run=[state.run]))
        if len(table):
            select(state, table["rank"], f"outliers: compute robust z > {Z_OUTLIER}")
        else:
            notes.append(f"no compute outlier in {state.run} (robust z > {Z_OUTLIER})")
            show_status()

    node.param.watch(on_node, "value")
    slow.on_click(on_slow)
    outliers.on_click(on_outliers)
    clear.on_click(lambda _: state.param.update(selected=None, selection_label=""))
    state.param.watch(lambda e: show_nodes(e.new), "run")
    state.param.watch(show_status, ["selected", "selection_label", "ranks"])
    show_nodes(state.run)
    show_status()
    return pn.Row(node, slow, outliers, clear, status, sizing_mode="stretch_width")
