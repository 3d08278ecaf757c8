"""The placement tab: map a run's own traffic onto a cluster, compare with block, download launch files.

:func:`placement_panel` takes a canonical Dataset with ``traffic`` (MPInside, IPM, or a matrix
through :func:`perfkit.io.matrix.matrix_to_dataset`) or a bare matrix. Its controls (nodes, cores
per node, sockets, leaf switch size or a host list; the strategy; the map time limit) change one
:class:`PlacementState`. Each change starts :func:`perfkit.place` in a background thread (Scotch
itself runs in a killable worker process, stopped at the time limit) while a progress bar and a
Cancel button show; a result that arrives after the controls changed again, or after Cancel, is
discarded. The view shows the cost of the placement against block, the node x node traffic before
and after on one colour scale, the predicted elapsed time with its interval
(:func:`perfkit.placement.predict.predict_elapsed`) and one download button per launch format.
"""

from __future__ import annotations

import io
import math
import threading
from collections import OrderedDict
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import panel as pn
import param
import sparse
import xarray as xr
from bokeh.models import BasicTicker, ColorBar, ColumnDataSource, FixedTicker, HoverTool, LogColorMapper, Range1d
from bokeh.palettes import Viridis256
from bokeh.plotting import figure

import perfkit
from perfkit.analysis.traffic import aggregate, inter_group_share
from perfkit.plots.axes import si_formatter
from perfkit.widgets.ranks import WIDGET_WIDTH, RankState
from perfkit.widgets.selection import describe_ranks

if TYPE_CHECKING:
    from perfkit.placement.placement import Placement
    from perfkit.placement.topology import Topology

#: The strategies offered (``perfkit.place``) and what their buttons say.
#: The cost table's first column (what is measured) reads left-aligned, its numbers right-aligned.
MEASURE_CSS = ".panel-df td:first-child, .panel-df th:first-child { text-align: left; }"
STRATEGY_LABELS = {"block": "block", "round_robin": "round-robin", "random": "random", "scotch": "Scotch",
                   "scotch_nodes": "Scotch node-level"}
#: File name offered by each launch format's download button.
FILENAMES = {"permutation": "mpiplace_perm", "rankfile": "rankfile", "machinefile": "machinefile",
             "mpt": "mpt_hosts", "cray": "MPICH_RANK_ORDER"}
#: Rows of the cost table: ``PlacementCost`` field -> label with unit.
COST_ROWS = {
    "inter_node_bytes": "inter-node bytes [B]",
    "inter_node_fraction": "inter-node share of bytes",
    "bytes_socket": "bytes within a socket [B]",
    "bytes_node": "bytes between sockets of a node [B]",
    "bytes_switch": "bytes between nodes of a leaf switch [B]",
    "bytes_network": "bytes across switches [B]",
    "hop_bytes": "hop-bytes [B x links]",
    "max_nic_bytes": "busiest node's network bytes [B]",
    "weighted_cost": "Scotch objective (weighted bytes)",
    "time_s": "estimated comm time [s]",
}
#: Seconds a map runs before the progress bar and Cancel show (quick answers come without flicker).
BUSY_DELAY_S = 0.4
#: Up to this many nodes, the heatmaps label every node.
MAX_NODE_TICKS = 16
#: What the what-if line says while the prediction is computed.
PREDICTING = "Predicting the elapsed time..."
#: Placements remembered per view (switching back to a topology and strategy seen is instant).
CACHE_SIZE = 32


class PlacementState(param.Parameterized):
    """The placement controls: one change per user action, watched by the view."""

    run = param.String(default="")
    nodes = param.Integer(default=4, bounds=(1, None))
    cores = param.Integer(default=16, bounds=(1, None), doc="cores per node")
    sockets = param.Integer(default=1, bounds=(1, None), doc="sockets per node")
    switch_size = param.Integer(default=0, bounds=(0, None), doc="nodes per leaf switch; 0: one switch")
    hosts = param.String(default="", doc="node list 'n001 24, n002 24' (overrides nodes and cores)")
    strategy = param.Selector(default="scotch", objects=list(STRATEGY_LABELS))
    timeout = param.Number(default=60.0, bounds=(0, None), inclusive_bounds=(False, True), doc="map time limit [s]")

    def topology(self) -> Topology:
        """The cluster the controls describe (``ValueError`` when they contradict each other)."""
        extra: dict[str, Any] = {"sockets": self.sockets, "switch_size": self.switch_size or None}
        if self.hosts.strip():
            return perfkit.Topology.from_nodelist(self.hosts, **extra)
        return perfkit.Topology(nodes=self.nodes, cores=self.cores, **extra)


@dataclass(frozen=True)
class PlacementResult:
    """Everything the tab shows for one topology and strategy."""

    block: Placement
    placed: Placement
    table: pd.DataFrame
    node_traffic: tuple[xr.DataArray, xr.DataArray]
    prediction: xr.Dataset | None
    prediction_note: str


def run_ranks(ds: xr.Dataset, run: str) -> int:
    """Number of ranks of ``run``: ``nprocs`` when known, else ranks with a profile value, else the matrix size."""
    if "nprocs" in ds.coords:
        nprocs = float(ds["nprocs"].sel(run=run).values)
        if math.isfinite(nprocs) and nprocs > 0:
            return int(nprocs)
    if "profile" in ds and ds.sizes.get("function", 0):
        exists = ds["profile"].sel(run=run).notnull().any(("function", "metric")).values
        if exists.any():
            return int(np.flatnonzero(exists).max()) + 1
    return int(ds.sizes["sender"])


def run_traffic(data: Any, run: str | None) -> Any:
    """The data of one run to place: a one-run Dataset cut to its own ranks, or ``data`` as given.

    Runs combined by ``perfkit.open_runs`` share a rank axis as long as the largest run; the
    placement needs the run's own ranks only. Sparse traffic is cut on its coordinates.
    """
    if not isinstance(data, xr.Dataset) or "run" not in data.dims:
        return data
    label = run if run else str(data["run"].values[0])
    n = run_ranks(data, label)
    cut = {dim: slice(0, n) for dim in ("rank", "sender", "receiver") if dim in data.dims}
    one = data.drop_vars("traffic").sel(run=[label]).isel(cut)
    traffic = data["traffic"]
    if not isinstance(traffic.data, sparse.SparseArray):
        return one.assign(traffic=traffic.sel(run=[label]).isel(sender=slice(0, n), receiver=slice(0, n)))
    coo = traffic.data if isinstance(traffic.data, sparse.COO) else sparse.COO(traffic.data)
    axis = {dim: k for k, dim in enumerate(traffic.dims)}
    coords = coo.coords
    keep = coords[axis["run"]] == int(np.flatnonzero(data["run"].values == label)[0])
    keep &= (coords[axis["sender"]] < n) & (coords[axis["receiver"]] < n)
    kept = coords[:, keep]
    kept[axis["run"]] = 0
    shape = tuple(one.sizes[dim] for dim in traffic.dims)
    cut_traffic = sparse.COO(kept, coo.data[keep], shape=shape, fill_value=coo.fill_value, has_duplicates=False)
    return one.assign(traffic=(traffic.dims, cut_traffic, traffic.attrs))


def default_topology(data: Any, run: str | None) -> dict[str, int]:
    """Nodes, cores and sockets to start from: the run's own ``nodes`` x ``ppn`` when recorded, else 16-core nodes."""
    if isinstance(data, xr.Dataset):
        label = run if run else str(data["run"].values[0])
        n = run_ranks(data, label)
        if "nodes" in data.coords and "ppn" in data.coords:
            nodes, ppn = (float(data[name].sel(run=label).values) for name in ("nodes", "ppn"))
            if math.isfinite(nodes) and math.isfinite(ppn) and nodes * ppn >= n > 0:
                return {"nodes": int(nodes), "cores": int(ppn), "sockets": 2 if int(ppn) % 2 == 0 else 1}
    else:
        n = int(np.shape(data)[0])
    return {"nodes": max(1, math.ceil(n / 16)), "cores": 16, "sockets": 2}


def cost_table(block: Placement, placed: Placement) -> pd.DataFrame:
    """Cost of ``placed`` next to block placement, with the ratio (strategy / block; NaN when block is 0)."""
    before, after = block.cost().as_dict(), placed.cost().as_dict()
    label = STRATEGY_LABELS.get(placed.strategy, placed.strategy)
    column = label if label != "block" else "block (again)"
    rows = [(text, before[key], after[key]) for key, text in COST_ROWS.items()
            if not (math.isnan(before[key]) and math.isnan(after[key]))]
    frame = pd.DataFrame(rows, columns=["measure", "block", column])
    with np.errstate(divide="ignore", invalid="ignore"):
        frame["vs block"] = np.where(frame["block"] != 0, frame[column] / frame["block"], np.nan)
    return frame


def compute_result(data: Any, topology: Topology, strategy: str, *, timeout: float | None = 60.0,
                   cache: OrderedDict | None = None, predict: bool = True) -> PlacementResult:
    """Place ``data`` (one run, see :func:`run_traffic`) with block and ``strategy`` and gather the tab's numbers.

    ``cache`` (optional) keeps placements by (topology, strategy) between calls. ``predict=False``
    leaves the what-if prediction to :func:`with_prediction`.
    """
    block = _placement(data, topology, "block", timeout, cache)
    if not block.cost().bytes_total > 0:
        raise ValueError("no traffic recorded for this run: nothing to place")
    placed = _placement(data, topology, strategy, timeout, cache)
    node_traffic = (aggregate(block.traffic, block), aggregate(placed.traffic, placed))
    result = PlacementResult(block, placed, cost_table(block, placed), node_traffic, None, PREDICTING)
    return with_prediction(data, result) if predict else result


def with_prediction(data: Any, result: PlacementResult) -> PlacementResult:
    """``result`` with the predicted elapsed time of the run placed anew (or the reason there is none)."""
    prediction, note = None, ""
    if not isinstance(data, xr.Dataset) or not data.sizes.get("function", 0):
        note = "No prediction: a bare matrix has no profile to feed the what-if model (open the run's profile)."
    elif result.placed.strategy == "block":
        note = "Block is the reference: no change to predict."
    else:
        from perfkit.placement.predict import predict_elapsed

        try:
            prediction = predict_elapsed(data, result.placed, old=result.block)
        except ValueError as problem:
            note = f"No prediction: {problem}."
    return replace(result, prediction=prediction, prediction_note=note)


def _placement(data: Any, topology: Topology, strategy: str, timeout: float | None,
               cache: OrderedDict | None) -> Placement:
    key = (topology, strategy)
    if cache is not None and key in cache:
        cache.move_to_end(key)
        return cache[key]
    placed = perfkit.place(data, topology, strategy=strategy, timeout=timeout)
    if cache is not None:
        cache[key] = placed
        while len(cache) > CACHE_SIZE:
            cache.popitem(last=False)
    return placed


def prediction_text(result: PlacementResult) -> str:
    """The what-if line: elapsed before -> after [s], the change [%] and its interval."""
    if result.prediction is None:
        return result.prediction_note
    pred = result.prediction
    before = float(pred["elapsed_before"].values.squeeze())
    after = float(pred["elapsed_after"].values.squeeze())
    low = before / float(pred["speedup_high"].values.squeeze())
    high = before / float(pred["speedup_low"].values.squeeze())
    change = 100 * (after / before - 1)
    return (f"**Predicted elapsed time** (what-if `network` model, k = {pred.attrs['network_factor']:.3g}: "
            f"estimated comm time {1e3 * pred.attrs['comm_time_old_s']:.3g} ms -> "
            f"{1e3 * pred.attrs['comm_time_new_s']:.3g} ms): {before:.4g} s -> **{after:.4g} s** "
            f"({change:+.1f} %), interval {low:.4g} .. {high:.4g} s "
            f"({100 * (low / before - 1):+.1f} .. {100 * (high / before - 1):+.1f} %). "
            "First order: contention the cost model does not see is not in it.")


def selection_text(result: PlacementResult, selected: list[int] | None, label: str = "") -> str:
    """Where the selected ranks (rank numbers of the run) sit under block and under the placement shown."""
    if not selected:
        return ""
    ranks = np.asarray(selected, dtype=np.int64)
    ranks = ranks[(ranks >= 0) & (ranks < result.placed.nranks)]
    if ranks.size == 0:
        return ""
    how = f" ({label})" if label else ""
    strategy = STRATEGY_LABELS.get(result.placed.strategy, result.placed.strategy)
    return (f"**The {ranks.size} selected ranks**{how}: on nodes {describe_ranks(result.block.node[ranks])} "
            f"under block, on nodes {describe_ranks(result.placed.node[ranks])} under {strategy}.")


def decision_text(result: PlacementResult) -> str:
    """What ``perfkit.place`` decided (``info["decision"]``: kept block or not, and why) and how long mapping took."""
    info = result.placed.info
    label = STRATEGY_LABELS.get(result.placed.strategy, result.placed.strategy)
    topo = result.placed.topology
    switches = f"{topo.switch_size} nodes per switch" if topo.switch_size else "one switch"
    parts = [f"{result.placed.nranks} ranks on {topo.nodes} nodes x {topo.cores} cores "
             f"({topo.sockets} socket{'s' * (topo.sockets > 1)}, {switches}), {label}"]
    decision = info.get("decision")  # the library's keep-block rule, as ``perfkit place`` prints it
    if decision is None and "kept_block" in info:
        decision = "kept block" if info["kept_block"] else "chose " + result.placed.strategy
    if decision:
        parts.append(f"**{decision}**" if info.get("kept_block") else decision)
    if info.get("moved"):
        parts.append(f"{info['moved']} ranks moved off over-full cores or nodes")
    if "wall_time_s" in info:
        parts.append(f"placed in {info['wall_time_s']:.3g} s")
    return "; ".join(parts) + "."


class NodeHeatmaps:
    """Node x node heatmaps (before, after) on one logarithmic colour scale, updated in place.

    Plain bokeh figures whose image, ranges, ticks and titles are replaced on each result: a new
    placement costs one small message, not a new plot. Pairs that exchange nothing stay white.
    """

    def __init__(self, count: int = 2) -> None:
        self.mapper = LogColorMapper(palette=Viridis256, nan_color="white", low=1.0, high=10.0)
        self.sources = [ColumnDataSource({"image": [np.full((1, 1), np.nan)], "x": [-0.5], "y": [-0.5],
                                          "dw": [1], "dh": [1]}) for _ in range(count)]
        self.figures = [self._figure(source) for source in self.sources]

    def _figure(self, source: ColumnDataSource) -> Any:
        fig = figure(width=440, height=400, x_range=Range1d(-0.5, 0.5), y_range=Range1d(0.5, -0.5),
                     x_axis_label="receiver node", y_axis_label="sender node", tools="pan,wheel_zoom,reset,save",
                     toolbar_location="right")
        renderer = fig.image(image="image", x="x", y="y", dw="dw", dh="dh", source=source, color_mapper=self.mapper)
        fig.add_tools(HoverTool(renderers=[renderer], tooltips=[("sender node", "$y{0}"), ("receiver node", "$x{0}"),
                                                                ("bytes", "@image{0.000a}")]))
        fig.add_layout(ColorBar(color_mapper=self.mapper, title="bytes [B]", width=14, formatter=si_formatter()),
                       "right")
        fig.grid.visible = False
        return fig

    def update(self, frames: list[tuple[xr.DataArray, str, tuple[float, float] | None]]) -> None:
        """Show ``(aggregated, title, clim)`` per figure; ``clim`` of the first is the common colour range."""
        clim = frames[0][2] or (1.0, 10.0)
        self.mapper.update(low=clim[0], high=max(clim[1], clim[0] * 1.0001))
        for fig, source, (aggregated, title, _) in zip(self.figures, self.sources, frames):
            matrix = np.asarray(aggregated.data.todense() if hasattr(aggregated.data, "todense") else aggregated.data,
                                dtype=float)
            n = matrix.shape[0]
            source.data = {"image": [np.where(matrix > 0, matrix, np.nan)], "x": [-0.5], "y": [-0.5],
                           "dw": [n], "dh": [n]}
            fig.x_range.update(start=-0.5, end=n - 0.5)
            fig.y_range.update(start=n - 0.5, end=-0.5)  # node 0 on top, as in the traffic heatmap
            ticker = FixedTicker(ticks=list(range(n))) if n <= MAX_NODE_TICKS else BasicTicker()
            fig.xaxis.ticker = ticker
            fig.yaxis.ticker = ticker
            fig.title.text = title


def heatmap_frames(result: PlacementResult) -> list[tuple[xr.DataArray, str, tuple[float, float] | None]]:
    """Before and after node x node matrices with their titles and one shared colour range."""
    values = np.concatenate([np.asarray(m.data.todense() if hasattr(m.data, "todense") else m.data).ravel()
                             for m in result.node_traffic])
    positive = values[values > 0]
    clim = (float(positive.min()), float(positive.max())) if positive.size else None
    labels = ("block", STRATEGY_LABELS.get(result.placed.strategy, result.placed.strategy))
    return [(m, f"{label}: {inter_group_share(m):.1%} of bytes between nodes", clim)
            for m, label in zip(result.node_traffic, labels)]


class PlacementView:
    """Widgets, background mapping and result panes of one placement tab (see :func:`placement_panel`)."""

    def __init__(self, data: Any, state: PlacementState, follow: RankState | None = None) -> None:
        self.data, self.state = data, state
        self._generation = 0
        self._lock = threading.Lock()
        self._caches: dict[str, OrderedDict] = {}
        self._runs: dict[str, Any] = {}
        self._results: dict[str, OrderedDict] = {}
        self.result: PlacementResult | None = None
        self._current_ok = False
        self._settled = threading.Event()
        self._answered = 0  # the last job generation that has shown something
        self._doc = pn.state.curdoc
        self.controls = self._controls()
        self.progress = pn.indicators.Progress(value=-1, active=False, visible=False, width=160, margin=(14, 10))
        self.cancel = pn.widgets.Button(label="Cancel", color="warning", visible=False, width=90)
        self.cancel.on_click(lambda _: self.cancel_job())
        self.status = pn.pane.Markdown("", sizing_mode="stretch_width")
        self.decision = pn.pane.Markdown("", sizing_mode="stretch_width")
        self.table = pn.pane.DataFrame(pd.DataFrame(), index=False, float_format="{:.4g}".format,
                                       stylesheets=[MEASURE_CSS], sizing_mode="stretch_width", max_width=900)
        self.prediction = pn.pane.Markdown("", sizing_mode="stretch_width")
        self.follow = follow
        self.selection = pn.pane.Markdown("", sizing_mode="stretch_width")
        self.node_maps = NodeHeatmaps()
        self.heatmaps = pn.FlexBox(*(pn.pane.Bokeh(fig) for fig in self.node_maps.figures),
                                   sizing_mode="stretch_width")
        from perfkit.placement.launch import FORMATS  # after perfkit.place: the package resolves its own imports

        self.downloads = [pn.widgets.FileDownload(callback=partial(self.launch_file, fmt), filename=FILENAMES[fmt],
                                                  label=_download_label(fmt), embed=False, disabled=True,
                                                  color="primary", width=200) for fmt in FORMATS]
        self.results = pn.Column(
            self.decision, self.table, self.prediction, self.selection, self.heatmaps,
            pn.pane.Markdown("**Launch files** of the placement shown (hosts from the host list, else node000...):"),
            pn.FlexBox(*self.downloads), sizing_mode="stretch_width", visible=False)
        state.param.watch(lambda *_: self.start(), ["run", "nodes", "cores", "sockets", "switch_size", "hosts",
                                                   "strategy", "timeout"])
        if follow is not None:
            follow.param.watch(lambda event: self.follow_run(event.new), "run")
            follow.param.watch(lambda *_: self._show_selection(), ["selected", "selection_label"])
        self.panel = pn.Column(*self.controls, pn.Row(self.progress, self.cancel, self.status,
                                                      sizing_mode="stretch_width"),
                               self.results, sizing_mode="stretch_width")
        self.start()

    def _controls(self) -> list[Any]:
        """Topology and strategy widgets, bound both ways to the state (numbers apply on Enter and on change)."""
        state = self.state
        number = {"width": 150}
        nodes = pn.widgets.IntInput.from_param(state.param.nodes, label="nodes", **number)
        cores = pn.widgets.IntInput.from_param(state.param.cores, label="cores per node", **number)
        sockets = pn.widgets.IntInput.from_param(state.param.sockets, label="sockets per node", **number)
        switch = pn.widgets.IntInput.from_param(state.param.switch_size, label="nodes per switch", **number)
        timeout = pn.widgets.FloatInput.from_param(state.param.timeout, label="map time limit [s]", **number)
        hosts = pn.widgets.TextInput(label="host list (overrides nodes, cores)", value=state.hosts,
                                     placeholder="n001 24, n002 24, ...", width=WIDGET_WIDTH + 80)
        hosts.param.watch(lambda event: setattr(state, "hosts", event.new), "value")
        strategy = pn.widgets.RadioButtonGroup(value=state.strategy, options={
            label: s for s, label in STRATEGY_LABELS.items()})
        strategy.param.watch(lambda event: setattr(state, "strategy", event.new), "value")
        state.param.watch(lambda event: setattr(strategy, "value", event.new), "strategy")
        state.param.watch(lambda event: setattr(hosts, "value", event.new), "hosts")
        note = pn.pane.Markdown("Placement of this run's ranks on a cluster, compared with **block** "
                                "(`perfkit.place`; numbers apply on Enter).", sizing_mode="stretch_width")
        return [note, pn.FlexBox(nodes, cores, sockets, switch, hosts, timeout),
                pn.Row(pn.pane.Markdown("strategy", width=70), strategy)]

    def follow_run(self, run: str) -> None:
        """Show ``run``: its own node count and cores per node when recorded."""
        self.state.param.update(run=run, **default_topology(self.data, run))

    def start(self) -> None:
        """Start mapping the current state in the background; the previous job's result will be discarded."""
        with self._lock:
            self._generation += 1
            generation = self._generation
            self._settled.clear()
        state = self.state
        try:
            topology = state.topology()
        except ValueError as problem:
            with self._hold():
                self._show_error(problem)
            return
        seen = self._results.get(state.run, {}).get((topology, state.strategy))
        if seen is not None:  # shown at once, without a round through a thread and the event loop
            self._finish(generation, seen)
            return
        busy = f"Mapping with {STRATEGY_LABELS[state.strategy]} on {topology.nodes} x {topology.cores} cores..."
        timer = threading.Timer(BUSY_DELAY_S, lambda: self._schedule(partial(self._busy, generation, busy)))
        timer.daemon = True
        timer.start()
        job = partial(self._job, generation, state.run, topology, state.strategy, state.timeout)
        threading.Thread(target=job, name="perfkit-placement", daemon=True).start()

    def cancel_job(self) -> None:
        """Stop waiting for the running map (its Scotch worker still ends at the time limit)."""
        with self._lock:
            self._generation += 1
        with self._hold():
            self._idle("Cancelled: change a control to map again.")

    def launch_file(self, fmt: str) -> io.StringIO:
        """The launch file of the placement shown, in ``fmt``."""
        if self.result is None:
            raise ValueError("no placement yet")
        return io.StringIO(self.result.placed.write(fmt))

    def wait(self, timeout: float = 120.0) -> PlacementResult | None:
        """Block until the current job ends (for scripts and tests): its result, or None after an error or Cancel."""
        self._settled.wait(timeout)
        return self.result if self._current_ok else None

    # --- background job -----------------------------------------------------------------------

    def _job(self, generation: int, run: str, topology: Topology, strategy: str, timeout: float) -> None:
        results = self._results.setdefault(run, OrderedDict())
        outcome: PlacementResult | Exception | None = results.get((topology, strategy))
        try:
            if outcome is None:
                if run not in self._runs:
                    self._runs[run] = run_traffic(self.data, run or None)
                cache = self._caches.setdefault(run, OrderedDict())
                shown = compute_result(self._runs[run], topology, strategy, timeout=timeout, cache=cache,
                                       predict=False)
                self._schedule(partial(self._finish, generation, shown))  # the what-if line follows
                outcome = with_prediction(self._runs[run], shown)
                results[(topology, strategy)] = outcome
                while len(results) > CACHE_SIZE:
                    results.popitem(last=False)
        except Exception as problem:  # shown in the tab: a failed map must not take the dashboard down
            outcome = problem
        self._schedule(partial(self._finish, generation, outcome))

    def _busy(self, generation: int, message: str) -> None:
        """Show the progress bar and Cancel, if the job ``generation`` is still running."""
        with self._lock:
            running = generation == self._generation != self._answered and not self._settled.is_set()
        if running:
            with self._hold():
                self.status.object = message
                self.progress.param.update(visible=True, active=True)
                self.cancel.visible = True

    def _served(self) -> bool:
        """Whether the tab lives in a page served by panel's server (not a notebook)."""
        return self._doc is not None and self._doc.session_context is not None

    def _hold(self) -> Any:
        """Collect the page changes made inside into one message to a served page (one layout pass there)."""
        return pn.io.hold(self._doc) if self._served() else nullcontext()

    def _schedule(self, callback: Any) -> None:
        """Run ``callback`` where the page may be changed: the server's event loop, or here in a notebook."""
        if self._served():
            self._doc.add_next_tick_callback(callback)
        else:
            callback()

    def _finish(self, generation: int, outcome: PlacementResult | Exception) -> None:
        with self._lock:
            stale = generation != self._generation
        if stale:
            return
        self._answered = generation
        with self._hold():
            if isinstance(outcome, Exception):
                self._show_error(outcome)
            else:
                self._show(outcome)

    def _show(self, outcome: PlacementResult) -> None:
        if self._current_ok and self.result is not None and self.result.placed is outcome.placed:
            self.result = outcome  # the same placement, now with its prediction
            self.prediction.object = prediction_text(outcome)
            self._idle("")
            return
        self.result, self._current_ok = outcome, True
        self.decision.object = decision_text(outcome)
        self.table.object = outcome.table
        self.prediction.object = prediction_text(outcome)
        self._show_selection()
        frames = heatmap_frames(outcome)
        self.node_maps.update(frames)
        if not self._served():  # in a notebook, changes made to plain bokeh figures are sent explicitly
            pn.io.push_notebook(*self.heatmaps)
        for button in self.downloads:
            button.disabled = False
        self.results.visible = True
        self._idle("", settled=outcome.prediction_note != PREDICTING)

    def _show_selection(self) -> None:
        """The nodes of the dashboard's selected ranks under block and under the placement shown."""
        if self.follow is None or self.result is None:
            return
        self.selection.object = selection_text(self.result, self.follow.selected, self.follow.selection_label)

    def _show_error(self, problem: Exception) -> None:
        self._current_ok = False
        self.results.visible = False
        for button in self.downloads:
            button.disabled = True
        self._idle(f"**Cannot place:** {problem}")

    def _idle(self, message: str, settled: bool = True) -> None:
        if settled:
            self._settled.set()
        self.progress.param.update(active=False, visible=False)
        self.cancel.visible = False
        self.status.object = message


def _download_label(fmt: str) -> str:
    return fmt if FILENAMES[fmt] == fmt else f"{fmt} ({FILENAMES[fmt]})"


def placement_view(data: Any, state: RankState | None = None, *, run: str | None = None) -> PlacementView:
    """The placement tab's object (its ``panel``, ``state``, ``result`` and ``wait()``); see :func:`placement_panel`."""
    if isinstance(data, xr.Dataset) and "traffic" not in data:
        raise ValueError("the Dataset has no 'traffic' (rank-to-rank matrices): nothing to place")
    label = state.run if state is not None else (run or (str(data["run"].values[0])
                                                          if isinstance(data, xr.Dataset) and "run" in data.dims
                                                          else ""))
    pstate = PlacementState(run=label, **default_topology(data, label or None))
    return PlacementView(data, pstate, follow=state)


def placement_panel(data: Any, state: RankState | None = None, *, run: str | None = None) -> pn.Column:
    """The placement tab for ``data`` (Dataset with ``traffic``, or a matrix); follows ``state.run`` when given."""
    return placement_view(data, state, run=run).panel
