"""The placement tab: map a run's own traffic onto a cluster, compare with block, download launch files.

:func:`placement_panel` takes a canonical Dataset with ``traffic`` (MPInside, IPM, or a matrix
through :func:`perfkit.io.matrix.matrix_to_dataset`) or a bare matrix. Its controls (nodes, cores
per node, sockets, leaf switch size or a host list; the strategy; the map time limit) change one
:class:`PlacementState`. Each change starts :func:`perfkit.place` in a background thread (Scotch
itself runs in a killable worker process, stopped at the time limit) while a progress bar and a
Cancel button show; a result that arrives after the controls changed again, or after Cancel, is
discarded. The view shows the cost of the placement against block, the node x node traffic before
and after on one colour scale, the predicted elapsed time with its interval and the inter-node
bytes before and after (:func:`perfkit.placement.predict.predict_placement`, for the link rate
typed in the tab, or an unknown rate: a wider interval) and one download button per launch format.

Given the measured re-run, the tab sets the prediction against it: elapsed time from the end of
``MPI_Init`` to the start of ``MPI_Finalize`` (``run_seconds``) and inter-node bytes from the
re-run's traffic matrix, its ranks on the nodes its host names say (else on the nodes of the
placement shown). A re-run is ``placement_view(data, rerun=ds)``, or in the data itself a run
labelled with a strategy's name (``scotch``, ``round_robin``, ...; as ``perfkit loop`` writes
``<strategy>.mpinside``, also ``dir/scotch`` beside ``dir/before``): the re-run of the other runs
of its directory under that strategy, compared while that strategy is shown.
"""

from __future__ import annotations

import io
import math
import threading
import time
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
from perfkit import text as words
from perfkit.analysis.traffic import aggregate, inter_group_share
from perfkit.placement.cost import cost_text
from perfkit.plots.axes import log_unit_formatter
from perfkit.plots.traffic import colour_label
from perfkit.widgets import offloop
from perfkit.widgets.ranks import WIDGET_WIDTH, RankState
from perfkit.widgets.selection import describe_ranks

if TYPE_CHECKING:
    from perfkit.placement.network import Network
    from perfkit.placement.placement import Placement
    from perfkit.placement.predict import Prediction
    from perfkit.placement.topology import Topology

#: The strategies offered (``perfkit.place``) and what their buttons say.
#: The cost table's first column (what is measured) reads left-aligned, its numbers right-aligned.
MEASURE_CSS = ".panel-df td:first-child, .panel-df th:first-child { text-align: left; }"
STRATEGY_LABELS = {"block": "block", "round_robin": "round-robin", "random": "random", "scotch": "Scotch",
                   "scotch_nodes": "Scotch node-level"}
#: File name offered by each launch format's download button.
FILENAMES = {"permutation": "mpiplace_perm", "rankfile": "rankfile", "machinefile": "machinefile",
             "mpt": "mpt_hosts", "cray": "MPICH_RANK_ORDER"}
#: Rows of the cost table: ``PlacementCost`` field -> label (the cells carry the unit: ``6.94 GB``, ``185 ms``).
COST_ROWS = {
    "inter_node_bytes": "inter-node bytes",
    "inter_node_fraction": "inter-node share of bytes",
    "bytes_socket": "bytes within a socket",
    "bytes_node": "bytes between sockets of a node",
    "bytes_switch": "bytes between nodes of a leaf switch",
    "bytes_network": "bytes across switches",
    "hop_bytes": "hop-bytes (bytes x links crossed)",
    "max_nic_bytes": "busiest node's network bytes",
    "weighted_cost": "Scotch objective (weighted bytes)",
    "time_s": "estimated comm time",
}
#: Seconds a map runs before the progress bar and Cancel show (quick answers come without flicker).
BUSY_DELAY_S = 0.4
#: Up to this many nodes, the heatmaps label every node.
MAX_NODE_TICKS = 16
#: What the what-if line says while the prediction is computed.
PREDICTING = "Predicting the elapsed time..."
#: Rows of the prediction table: elapsed time and inter-node bytes.
ELAPSED_ROW, BYTES_ROW = "elapsed", "inter-node bytes"
#: An elapsed time inside the interval, or not, as the prediction table says it.
INSIDE, OUTSIDE = "inside", "OUTSIDE"
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
    link_rate = param.String(default="", doc="each node's link rate, '200mbit', '1gbit'; empty: unknown")

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
    prediction: Prediction | None
    prediction_note: str
    #: Predicted against the measured re-run (``Prediction.compare``), and where its numbers came from.
    comparison: dict[str, Any] | None = None
    comparison_note: str = ""


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


def readable_cost_table(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`cost_table` in words (:func:`perfkit.placement.cost.cost_text`): ``6.94 GB``, ``34%``, ``185 ms``,
    ``0.66`` against block, ``–`` where a ratio is not defined (block's cost is 0)."""
    field = {text: key for key, text in COST_ROWS.items()}
    shown = frame.astype(object)
    for index, measure in frame["measure"].items():
        for column in frame.columns[1:3]:
            shown.at[index, column] = cost_text(field[measure], frame.at[index, column])
        shown.at[index, "vs block"] = cost_text("vs_block", frame.at[index, "vs block"])
    return shown


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


def link_network(text: str, topology: Topology) -> Network | None:
    """The network each node's link rate ``text`` describes (``"200mbit"``, ``"1gbit"``, ``"25mbps"`` for
    bytes; leaf uplinks as fast), or None when ``text`` is empty (rate unknown)."""
    if not text.strip():
        return None
    from perfkit.placement.network import Network, parse_rate  # the rate syntax of perfkit testbed and place

    rate = parse_rate(text)
    return Network.described(rate, uplink_bit_s=rate if topology.switch_size else None)


def with_prediction(data: Any, result: PlacementResult, link_rate: str = "",
                    rerun: xr.Dataset | None = None) -> PlacementResult:
    """``result`` with the predicted elapsed time and inter-node bytes of the run placed anew for links at
    ``link_rate`` (empty: unknown), set against ``rerun`` (one run: the measured re-run) when given."""
    prediction, note = None, ""
    if not isinstance(data, xr.Dataset) or not data.sizes.get("function", 0):
        note = "No prediction: a bare matrix has no profile to feed the time model (open the run's profile)."
    else:
        from perfkit.placement.predict import predict_placement

        try:
            network = link_network(link_rate, result.placed.topology)
            prediction = predict_placement(data, result.placed, network)
        except ValueError as problem:
            note = f"No prediction: {str(problem).rstrip('.')}."
    comparison, why = (None, "")
    if prediction is not None and rerun is not None:
        comparison, why = compare_rerun(prediction, result.placed, rerun)
    return replace(result, prediction=prediction, prediction_note=note, comparison=comparison, comparison_note=why)


def compare_rerun(prediction: Prediction, placed: Placement, rerun: xr.Dataset) -> tuple[dict[str, Any] | None, str]:
    """Predicted against the measured re-run (one run): ``Prediction.compare`` of its elapsed time [s] and
    inter-node bytes [B], and where they came from (or None and why they cannot be compared)."""
    from perfkit.placement.predict import profile_nodes, run_seconds

    label = str(rerun["run"].values[0])
    nranks = int(rerun.sizes["sender"])
    if nranks != placed.nranks:
        return None, f"The re-run `{label}` has {nranks} ranks, the placement {placed.nranks}: not compared."
    topology = placed.topology
    if "host" in rerun:
        node, where = profile_nodes(rerun, label, topology)
        if where != "the profile's host names":
            return None, f"The re-run `{label}` has no host name for every rank: not compared."
        if not same_partition(node, placed.node):
            return None, (f"The re-run `{label}` put its ranks on other nodes than the placement shown "
                          "(its host names): not compared.")
        source = "its ranks on the nodes its host names say"
    else:
        recorded = float(rerun["nodes"].values[0]) if "nodes" in rerun.coords else math.nan
        if math.isfinite(recorded) and int(recorded) != topology.nodes:
            return None, (f"The re-run `{label}` ran on {int(recorded)} nodes, the placement shown on "
                          f"{topology.nodes}: set the nodes to compare.")
        node, source = placed.node, "its ranks on the nodes of the placement shown (it has no host names)"
    matrix = rerun["traffic"].sel(run=label, quantity="bytes")
    values = matrix.data.todense() if hasattr(matrix.data, "todense") else matrix.values
    values = np.nan_to_num(np.asarray(values, dtype=float))
    inter = float(values[node[:, None] != node[None, :]].sum())
    elapsed = run_seconds(rerun, label)[0]
    return prediction.compare(elapsed, inter), (
        f"**Measured re-run** `{label}`: elapsed from the end of `MPI_Init` to the start of `MPI_Finalize`; "
        f"inter-node bytes from its traffic matrix, {source}.")


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether node arrays ``a`` and ``b`` group the ranks alike (node numbers may differ)."""
    pairs = np.unique(np.column_stack([a, b]), axis=0)
    return len(np.unique(pairs[:, 0])) == len(pairs) == len(np.unique(pairs[:, 1]))


def strategy_of(label: str) -> str | None:
    """The strategy a run's label names (``scotch``, ``dir/round_robin``), else None."""
    name = label.rsplit("/", 1)[-1]
    return name if name in STRATEGY_LABELS else None


def labelled_reruns(data: Any, run: str) -> dict[str, str]:
    """Runs of ``data`` that are re-runs of ``run``: strategy -> label, for the runs of ``run``'s directory
    labelled with a strategy's name (none when ``run`` is itself so labelled)."""
    if not isinstance(data, xr.Dataset) or "run" not in data.dims or not run or strategy_of(run):
        return {}
    folder = run.rpartition("/")[0]
    return {strategy: label for label in map(str, data["run"].values)
            if label != run and (strategy := strategy_of(label)) and label.rpartition("/")[0] == folder}


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
    """The prediction in words: elapsed time before -> after with its interval, inter-node bytes, and the network
    it assumed with where its numbers came from (times and bytes with their units: :func:`elapsed`,
    :mod:`perfkit.text`)."""
    pred = result.prediction
    if pred is None:
        return result.prediction_note
    label = STRATEGY_LABELS.get(result.placed.strategy, result.placed.strategy)
    change = 100 * (pred.elapsed_after / pred.elapsed_before - 1)
    parts = [f"**Predicted elapsed time** placed by {label} (from the end of `MPI_Init` to the start of "
             f"`MPI_Finalize`): {elapsed(pred.elapsed_before)} -> **{elapsed(pred.elapsed_after)}** "
             f"({change:+.1f} %), interval {elapsed(pred.elapsed_after_low)} .. {elapsed(pred.elapsed_after_high)}; "
             f"inter-node bytes {words.nbytes(pred.inter_node_bytes_before)} -> "
             f"{words.nbytes(pred.inter_node_bytes_after)}. "
             f"Placed before: {pred.placement_before}."]
    sources = pred.network.sources
    if sources.get("node_link_Bps") == "described":
        parts.append(f"Network: links of {words.bitrate(pred.network.node_link_Bps * 8)} (described): the links need "
                     f"{words.seconds(pred.link_before['seconds'])} -> {words.seconds(pred.link_after['seconds'])} for "
                     f"the run's traffic, against the busiest rank's {words.seconds(pred.mpi_seconds)} of MPI time.")
    else:
        parts.append("Network: link rate **unknown** (type one, e.g. 200mbit, for a narrower interval): the "
                     f"network's time may be anything up to the busiest rank's {words.seconds(pred.mpi_seconds)} of "
                     "MPI time.")
    return " ".join(parts)


def prediction_table(result: PlacementResult) -> pd.DataFrame:
    """Elapsed time and inter-node bytes before, predicted (with the interval) and, given the re-run, measured, the
    prediction's error [%] and whether the measurement fell inside the interval; in words with their units."""
    pred = result.prediction
    if pred is None:
        return pd.DataFrame()
    rows = {ELAPSED_ROW: {"before": elapsed(pred.elapsed_before), "predicted": elapsed(pred.elapsed_after),
                          "interval": f"{elapsed(pred.elapsed_after_low)} .. {elapsed(pred.elapsed_after_high)}"},
            BYTES_ROW: {"before": words.nbytes(pred.inter_node_bytes_before),
                        "predicted": words.nbytes(pred.inter_node_bytes_after), "interval": ""}}
    row = result.comparison
    if row is not None:
        rows[ELAPSED_ROW].update({"measured (re-run)": elapsed(row["elapsed_measured"]),
                                  "error": f"{row['elapsed_error_pct']:+.1f} %",
                                  "in interval": INSIDE if row["in_interval"] else OUTSIDE})
        error = row["bytes_error_pct"]
        rows[BYTES_ROW].update({"measured (re-run)": words.nbytes(row["bytes_measured"]),
                                "error": f"{error:+.1f} %" if math.isfinite(error) else "",
                                "in interval": ""})
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("").reset_index()


def elapsed(value: float) -> str:
    """An elapsed time [s] in words to four significant digits, as a prediction is set against its re-run:
    ``1.358 s``, ``185.3 ms``."""
    return words.seconds(value, digits=4)


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
        fig.add_layout(ColorBar(color_mapper=self.mapper, title=colour_label("bytes"), width=14,
                                formatter=log_unit_formatter("B")), "right")  # 5 MB, as the traffic heatmaps
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

    def __init__(self, data: Any, state: PlacementState, follow: RankState | None = None,
                 reruns: dict[str, xr.Dataset] | None = None) -> None:
        self.data, self.state = data, state
        self.reruns = dict(reruns or {})  # strategy -> the measured re-run (one run), for every run shown
        self._generation = 0
        self._lock = threading.Lock()
        self._caches: dict[str, OrderedDict] = {}
        self._runs: dict[str, Any] = {}
        self._results: dict[str, OrderedDict] = {}
        self.result: PlacementResult | None = None
        self._current_ok = False
        self._settled = threading.Event()
        self._answered = 0  # the last job generation that has shown something
        self._completed = 0  # the last job generation whose whole result (with its prediction) has been shown
        self._doc = pn.state.curdoc
        self._loop = offloop.kernel_loop()  # in a notebook the page is changed from the kernel's loop thread only
        self._pending: list[Any] = []  # page changes from the job's thread, waiting for the loop
        self._delivered = threading.Event()
        self.controls = self._controls()
        self.progress = pn.indicators.Progress(value=-1, active=False, visible=False, width=160, margin=(14, 10))
        self.cancel = pn.widgets.Button(label="Cancel", color="warning", visible=False, width=90)
        self.cancel.on_click(lambda _: self.cancel_job())
        self.status = pn.pane.Markdown("", sizing_mode="stretch_width")
        self.decision = pn.pane.Markdown("", sizing_mode="stretch_width")
        self.table = pn.pane.DataFrame(pd.DataFrame(), index=False, stylesheets=[MEASURE_CSS],
                                       sizing_mode="stretch_width", max_width=900)
        self.prediction = pn.pane.Markdown("", sizing_mode="stretch_width")
        self.measured = pn.pane.Markdown("", sizing_mode="stretch_width")
        self.forecast = pn.pane.DataFrame(pd.DataFrame(), index=False, stylesheets=[MEASURE_CSS],
                                          sizing_mode="stretch_width", max_width=900, visible=False)
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
            self.decision, self.table, self.prediction, self.measured, self.forecast, self.selection, self.heatmaps,
            pn.pane.Markdown("**Launch files** of the placement shown (hosts from the host list, else node000...):"),
            pn.FlexBox(*self.downloads), sizing_mode="stretch_width", visible=False)
        state.param.watch(lambda *_: self.start(), ["run", "nodes", "cores", "sockets", "switch_size", "hosts",
                                                   "strategy", "timeout", "link_rate"])
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
        rate = pn.widgets.TextInput(label="link rate (empty: unknown)", value=state.link_rate,
                                    placeholder="200mbit, 10gbit, ...", width=WIDGET_WIDTH)
        rate.param.watch(lambda event: setattr(state, "link_rate", event.new.strip()), "value")
        state.param.watch(lambda event: setattr(rate, "value", event.new), "link_rate")
        strategy = pn.widgets.RadioButtonGroup(value=state.strategy, options={
            label: s for s, label in STRATEGY_LABELS.items()})
        strategy.param.watch(lambda event: setattr(state, "strategy", event.new), "value")
        state.param.watch(lambda event: setattr(strategy, "value", event.new), "strategy")
        state.param.watch(lambda event: setattr(hosts, "value", event.new), "hosts")
        note = pn.pane.Markdown("Placement of this run's ranks on a cluster, compared with **block** "
                                "(`perfkit.place`; numbers apply on Enter).", sizing_mode="stretch_width")
        return [note, pn.FlexBox(nodes, cores, sockets, switch, hosts, timeout, rate),
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
        seen = self._results.get(state.run, {}).get((topology, state.strategy, state.link_rate))
        if seen is not None:  # shown at once, without a round through a thread and the event loop
            self._finish(generation, seen)
            return
        busy = f"Mapping with {STRATEGY_LABELS[state.strategy]} on {topology.nodes} x {topology.cores} cores..."
        timer = threading.Timer(BUSY_DELAY_S, lambda: self._schedule(partial(self._busy, generation, busy)))
        timer.daemon = True
        timer.start()
        job = partial(self._job, generation, state.run, topology, state.strategy, state.timeout, state.link_rate)
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
        """Block until the current job ends (for scripts and tests): its result, or None after an error or Cancel.

        Called from a notebook cell (the kernel's loop thread, which it blocks), it applies the job's page
        changes itself."""
        deadline = time.monotonic() + timeout
        while not self._settled.is_set() and (left := deadline - time.monotonic()) > 0:
            if self._on_loop_thread() and not self._served():
                self._delivered.wait(left)
                self._run_pending()
            else:
                self._settled.wait(left)
        return self.result if self._current_ok else None

    # --- background job -----------------------------------------------------------------------

    def rerun(self, run: str, strategy: str) -> xr.Dataset | None:
        """The measured re-run of ``run`` under ``strategy`` (one run, cut to its ranks), if any."""
        if strategy in self.reruns:
            return self.reruns[strategy]
        label = labelled_reruns(self.data, run).get(strategy)
        if label is None:
            return None
        if label not in self._runs:
            self._runs[label] = run_traffic(self.data, label)
        return self._runs[label]

    def _job(self, generation: int, run: str, topology: Topology, strategy: str, timeout: float,
             link_rate: str) -> None:
        results = self._results.setdefault(run, OrderedDict())
        key = (topology, strategy, link_rate)
        outcome: PlacementResult | Exception | None = results.get(key)
        try:
            if outcome is None:
                if run not in self._runs:
                    self._runs[run] = run_traffic(self.data, run or None)
                cache = self._caches.setdefault(run, OrderedDict())
                shown = compute_result(self._runs[run], topology, strategy, timeout=timeout, cache=cache,
                                       predict=False)
                self._schedule(partial(self._finish, generation, shown, final=False))  # the what-if line follows
                outcome = with_prediction(self._runs[run], shown, link_rate, self.rerun(run, strategy))
                results[key] = outcome
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
        """Run ``callback`` where the page may be changed: the server's event loop, a notebook kernel's loop
        (messages to a notebook page sent from two threads at once interleave their parts, and the page
        then takes no further change), else here."""
        if self._served():
            self._doc.add_next_tick_callback(callback)
        elif self._loop is not None and not self._loop.is_closed() and not self._on_loop_thread():
            with self._lock:
                self._pending.append(callback)
            self._delivered.set()
            self._loop.call_soon_threadsafe(self._run_pending)
        else:
            callback()

    def _on_loop_thread(self) -> bool:
        return self._loop is not None and offloop.running_loop() is self._loop

    def _run_pending(self) -> None:
        """The page changes delivered so far, in order (on the kernel's loop thread)."""
        with self._lock:
            callbacks, self._pending = self._pending, []
            self._delivered.clear()
        for callback in callbacks:
            callback()

    def _finish(self, generation: int, outcome: PlacementResult | Exception, final: bool = True) -> None:
        """Show job ``generation``'s ``outcome``; ``final=False``: the map before its prediction. Callbacks
        scheduled from the job's thread may run out of order: a map arriving after its whole result is dropped."""
        with self._lock:
            stale = generation != self._generation or (not final and generation == self._completed)
            if not stale:
                self._answered = generation
                if final:
                    self._completed = generation
        if stale:
            return
        with self._hold():
            if isinstance(outcome, Exception):
                self._show_error(outcome)
            else:
                self._show(outcome)

    def _show(self, outcome: PlacementResult) -> None:
        if self._current_ok and self.result is not None and self.result.placed is outcome.placed:
            self.result = outcome  # the same placement, with its prediction (or for another link rate)
            self._show_prediction(outcome)
            self._idle("", settled=outcome.prediction_note != PREDICTING)
            return
        self.result, self._current_ok = outcome, True
        self.decision.object = decision_text(outcome)
        self.table.object = readable_cost_table(outcome.table)
        self._show_prediction(outcome)
        self._show_selection()
        frames = heatmap_frames(outcome)
        self.node_maps.update(frames)
        if not self._served():  # in a notebook, changes made to plain bokeh figures are sent explicitly
            pn.io.push_notebook(*self.heatmaps)
        for button in self.downloads:
            button.disabled = False
        self.results.visible = True
        self._idle("", settled=outcome.prediction_note != PREDICTING)

    def _show_prediction(self, outcome: PlacementResult) -> None:
        self.prediction.object = prediction_text(outcome)
        self.measured.object = outcome.comparison_note
        table = prediction_table(outcome)
        self.forecast.object = table
        self.forecast.visible = not table.empty

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


def placement_view(data: Any, state: RankState | None = None, *, run: str | None = None,
                   rerun: xr.Dataset | None = None, strategy: str | None = None,
                   link_rate: str = "") -> PlacementView:
    """The placement tab's object (its ``panel``, ``state``, ``result`` and ``wait()``); see :func:`placement_panel`.

    ``rerun``: the measured re-run (profile with ``traffic``); each of its runs labelled with a strategy's
    name is the re-run under that strategy, a single run otherwise the re-run under ``strategy``.
    ``strategy``: the one shown first (default: the re-run's, else Scotch). ``link_rate``: each node's
    link rate, ``"200mbit"`` (empty: unknown).
    """
    if isinstance(data, xr.Dataset) and "traffic" not in data:
        raise ValueError("the Dataset has no 'traffic' (rank-to-rank matrices): nothing to place")
    label = state.run if state is not None else (run or (str(data["run"].values[0])
                                                          if isinstance(data, xr.Dataset) and "run" in data.dims
                                                          else ""))
    reruns = rerun_strategies(rerun, strategy)
    first = strategy or next(iter(reruns), None) or PlacementState.param.strategy.default
    pstate = PlacementState(run=label, strategy=first, link_rate=link_rate, **default_topology(data, label or None))
    return PlacementView(data, pstate, follow=state, reruns=reruns)


def rerun_strategies(rerun: xr.Dataset | None, strategy: str | None) -> dict[str, xr.Dataset]:
    """Strategy -> re-run (one run, cut to its ranks) of the runs of ``rerun`` (see :func:`placement_view`)."""
    if rerun is None:
        return {}
    if "traffic" not in rerun:
        raise ValueError("the re-run has no 'traffic' (rank-to-rank matrices): nothing to compare the bytes with")
    labels = [str(r) for r in rerun["run"].values]
    named = {strategy_of(label): label for label in labels if strategy_of(label)}
    if len(labels) == 1 and (strategy or not named):
        named = {strategy or PlacementState.param.strategy.default: labels[0]}
    elif len(named) < len(labels):
        raise ValueError(f"the re-run holds runs {labels}: label each with the strategy it re-ran "
                         f"({', '.join(STRATEGY_LABELS)})")
    return {name: run_traffic(rerun, label) for name, label in named.items()}


def placement_panel(data: Any, state: RankState | None = None, *, run: str | None = None,
                    rerun: xr.Dataset | None = None, link_rate: str = "") -> pn.Column:
    """The placement tab for ``data`` (Dataset with ``traffic``, or a matrix); follows ``state.run`` when given.
    ``rerun`` and ``link_rate`` as in :func:`placement_view`."""
    return placement_view(data, state, run=run, rerun=rerun, link_rate=link_rate).panel
