"""Load imbalance across ranks: statistics per run and group, outlier ranks, slow nodes, MPI share.

For one run and one group ``g`` (a function, a ``kind`` or a ``call``), let ``x_r`` be rank ``r``'s
total of the metric (seconds for ``time``) over the ``N`` ranks that exist in the run:

* ``max = max_r x_r``, ``mean = (1/N) sum_r x_r``, ``min = min_r x_r``, ``rank_of_max = argmax_r x_r``;
* ``max_over_mean = max / mean``: 1 is perfect balance;
* ``percent_imbalance = 100 (max - mean) / max`` [%]: the share of the slowest rank's time that
  the others do not need;
* ``imbalance_time = max - mean`` [metric units, s for time]: what the slowest rank spends beyond
  the average rank; with a synchronisation after the group, the time perfect balance could save;
* ``load_balance = mean / max`` (POP load-balance efficiency), in (0, 1], 1 is perfect balance.

Ranks that do not exist in a run (NaN on every function) are left out. A rank that exists but has
no value for a group that other ranks of the run have is counted as 0 (it did not call it).

``outlier_ranks`` flags ranks by a robust z-score ``z = 0.6745 (x - median) / MAD``
(``MAD = median |x - median|``), per run, and counts in how many runs each rank is an outlier;
``by_node`` groups ranks by node (``rank // ppn`` or a mapping) to tell a slow node from slow
ranks; ``mpi_share`` and ``size_summary`` give the share of MPI time per call and message-size
summaries. The formulas are also in ``docs/imbalance.md``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Literal

import numpy as np
import pandas as pd
import xarray as xr

from perfkit.analysis.cube import (
    evaluate,
    group_sum,
    nan_sum,
    over_ranks,
    per_rank,
    run_coords,
    with_loaded_coords,
    zero_nan,
)
from perfkit.analysis.pop import STARTUP

Group = Literal["function", "kind", "call"]
#: Robust z-score above which a rank is an outlier (Iglewicz and Hoaglin).
Z_OUTLIER = 3.5
#: Messages below this size [B] count as small (latency-bound).
SMALL_MESSAGE = 1024


def grouped(ds: xr.Dataset, by: Group = "function", metric: str = "time") -> xr.DataArray:
    """Per-rank totals of ``metric`` per ``by`` group, dims (run, rank, group); NaN for absent ranks.

    Absent ranks (NaN everywhere in a run) stay NaN; an existing rank without a value for a group
    that the run has is 0. On a dask-backed cube the totals stay lazy, chunked as the cube along
    run and rank, the cube being read once here for the groups each run has.
    """
    ds = with_loaded_coords(ds)
    values = ds["profile"].sel(metric=metric).transpose("run", "rank", "function")
    if by != "function":
        labels = ds[by].values
        groups = np.unique(labels)
        sums = per_rank(ds, lambda block: group_sum(block[..., 0], labels)[1], [metric])
        coords = {name: var for name, var in values.coords.variables.items() if "function" not in var.dims}
        values = xr.DataArray(sums, dims=("run", "rank", by), coords={**coords, by: groups}, name=values.name)
    data = values.data
    present = ~np.isnan(data)
    in_run = evaluate(present.any(axis=1))[0][:, None, :]
    missing = ~present & present.any(axis=2, keepdims=True) & in_run
    return values.copy(data=np.where(missing, 0.0, data))


def imbalance(ds: xr.Dataset, by: Group = "function", metric: str = "time") -> xr.Dataset:
    """Imbalance statistics over ranks per run and ``by`` group (see the module docstring).

    Returns a Dataset with dims (run, ``by``) and variables ``max``, ``mean``, ``min``,
    ``rank_of_max``, ``max_over_mean``, ``percent_imbalance`` [%], ``imbalance_time`` and
    ``load_balance``; NaN where the group has no data in a run. A dask-backed cube is reduced
    over ranks block by block.
    """
    chunks = ds.variables["profile"].chunks
    if chunks is not None and len(chunks[0]) > 1:  # one chunk of runs at a time: memory flat in runs
        bounds = np.cumsum((0, *chunks[0]))
        return xr.concat([imbalance(ds.isel(run=slice(start, stop)), by, metric)
                          for start, stop in pairwise(bounds)], dim="run", data_vars="all", coords="minimal",
                         compat="override", join="override")
    return stats_over_ranks(grouped(ds, by, metric), _unit(ds, metric))


def stats_over_ranks(values: xr.DataArray, unit: str) -> xr.Dataset:
    """The statistics of ``imbalance`` of per-rank totals ``values`` (run, rank[, group]), numpy- or dask-backed.

    ``unit`` is the totals' unit (``s`` for time).
    """
    data, axis = values.data, values.get_axis_num("rank")
    present = ~np.isnan(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # groups without values: NaN
        vmax, vmin, total, count, where_max = evaluate(
            np.nanmax(data, axis=axis), np.nanmin(data, axis=axis), np.sum(np.where(present, data, 0.0), axis=axis),
            present.sum(axis=axis), np.argmax(np.where(present, data, -np.inf), axis=axis))
    with np.errstate(divide="ignore", invalid="ignore"):
        vmean = total / count
        stats = {
            "max": vmax, "mean": vmean, "min": vmin,
            "rank_of_max": np.where(np.isnan(vmax), np.nan, values["rank"].values[where_max]),
            "max_over_mean": np.where(vmean > 0, vmax / vmean, np.nan),
            "percent_imbalance": np.where(vmax > 0, 100.0 * (vmax - vmean) / vmax, np.nan),
            "imbalance_time": vmax - vmean,
            "load_balance": np.where(vmax > 0, vmean / vmax, np.nan),
        }
    attrs = {**{name: {"units": unit} for name in ("max", "mean", "min", "imbalance_time")},
             "percent_imbalance": {"units": "%"},
             "load_balance": {"description": "POP load-balance efficiency, mean / max"}}
    dims = tuple(dim for dim in values.dims if dim != "rank")
    coords = {name: var for name, var in values.coords.variables.items() if "rank" not in var.dims}
    return xr.Dataset({name: (dims, stat, attrs.get(name, {})) for name, stat in stats.items()}, coords=coords)


def _unit(ds: xr.Dataset, metric: str) -> str:
    return str(ds["units"].sel(metric=metric).values.item()) if "units" in ds.coords else ""


def rank_values(ds: xr.Dataset, by: Group = "kind", group: str = "compute", metric: str = "time") -> xr.DataArray:
    """Per-rank total of one group (default: compute time [s]), dims (run, rank), in memory."""
    return grouped(ds, by, metric).sel({by: group}, drop=True).compute()


def robust_z(values: xr.DataArray, dim: str = "rank") -> xr.DataArray:
    """Robust z-score ``0.6745 (x - median) / MAD`` along ``dim``; NaN stays NaN.

    When the MAD is 0 the mean absolute deviation times 1.2533 is used; when that is 0 too, z is 0.
    """
    median = values.median(dim, skipna=True)
    dev = abs(values - median)
    mad = dev.median(dim, skipna=True)
    scale = xr.where(mad > 0, mad / 0.6745, dev.mean(dim, skipna=True) * 1.2533)
    return ((values - median) / scale.where(scale > 0)).fillna(0.0).where(values.notnull())


def outlier_ranks(ds: xr.Dataset, *, by: Group = "kind", group: str = "compute", metric: str = "time",
                  threshold: float = Z_OUTLIER, side: Literal["high", "low", "both"] = "high") -> pd.DataFrame:
    """Ranks whose ``group`` total is an outlier by robust z-score, one row per (run, rank).

    Columns: run, rank, value, median, excess (value / median - 1), z, n_runs (in how many runs
    the rank is an outlier: recurring outliers are the ones to look at). Sorted by run, then z.
    """
    values = rank_values(ds, by, group, metric)
    z = robust_z(values)
    flag = {"high": z > threshold, "low": z < -threshold, "both": abs(z) > threshold}[side]
    median = values.median("rank", skipna=True)
    table = xr.Dataset({"value": values, "median": median.broadcast_like(values), "z": z,
                        "flag": flag}).to_dataframe().reset_index()
    table = table[table["flag"]].drop(columns="flag")
    table["excess"] = table["value"] / table["median"] - 1.0
    table["n_runs"] = table.groupby("rank")["run"].transform("count")
    columns = ["run", "rank", "value", "median", "excess", "z", "n_runs"]
    return table[columns].sort_values(["run", "z"], ascending=[True, False]).reset_index(drop=True)


def slow_ranks(ds: xr.Dataset, run: str, *, threshold: float = 0.10, by: Group = "kind",
               group: str = "compute", metric: str = "time", values: xr.DataArray | None = None) -> pd.DataFrame:
    """Ranks of ``run`` whose ``group`` total exceeds the mean by more than ``threshold``.

    Columns rank, value, excess (value / mean - 1), most loaded first. ``values`` is
    ``rank_values(ds, by, group, metric)`` when already computed (else only ``run`` is read).
    """
    values = rank_values(ds.sel(run=[run]), by, group, metric) if values is None else values
    values = values.sel(run=run).dropna("rank")
    excess = values / values.mean() - 1.0
    table = pd.DataFrame({"rank": values["rank"].values, "value": values.values, "excess": excess.values})
    return table[table["excess"] > threshold].sort_values("excess", ascending=False).reset_index(drop=True)


def node_of(ds: xr.Dataset, mapping: Mapping[int, int] | Sequence[int] | None = None) -> xr.DataArray:
    """Node of every rank per run, dims (run, rank): ``mapping[rank]`` or ``rank // ppn``; -1 unknown."""
    ranks = ds["rank"].values
    if mapping is not None:
        lookup = pd.Series(mapping if isinstance(mapping, Mapping) else dict(enumerate(mapping)), dtype="float64")
        nodes = lookup.reindex(ranks).fillna(-1).to_numpy(dtype=np.int64)
        return xr.DataArray(np.broadcast_to(nodes, (ds.sizes["run"], ranks.size)).copy(),
                            dims=("run", "rank"), coords={"run": ds["run"], "rank": ranks})
    ppn = np.nan_to_num(ds["ppn"].values, nan=0.0).astype(int)[:, None]
    nodes = np.where(ppn > 0, ranks // np.where(ppn > 0, ppn, 1), -1)
    return xr.DataArray(nodes, dims=("run", "rank"), coords={**run_coords(ds), "rank": ds.variables["rank"]},
                        name="node")


def by_node(ds: xr.Dataset, *, nodes: Mapping[int, int] | Sequence[int] | None = None,
            by: Group = "kind", group: str = "compute", metric: str = "time",
            values: xr.DataArray | None = None) -> pd.DataFrame:
    """Per-node statistics of one group's per-rank totals (default compute time [s]).

    One row per (run, node): first_rank, last_rank, n_ranks, mean, min, max, ``excess`` (node mean
    / mean over ranks - 1) and ``floor_excess`` (node minimum / median of the node minima - 1;
    with two nodes, over the smaller minimum).
    A node whose *fastest* rank is still slow (high ``floor_excess``) is uniformly slow: a slow
    node, not a few slow ranks on it. Nodes come from ``rank // ppn`` or ``nodes`` (rank -> node).
    ``values`` is ``rank_values(ds, by, group, metric)`` when already computed.
    """
    values = rank_values(ds, by, group, metric) if values is None else values
    runs, ranks = values["run"].values, values["rank"].values
    # rows rank-major, as before: pandas' group means depend on the row order in their last bits
    frame = pd.DataFrame({"run": np.tile(runs, ranks.size), "rank": np.repeat(ranks, runs.size),
                          "value": values.transpose("rank", "run").values.ravel(),
                          "node": node_of(ds, nodes).transpose("rank", "run").values.ravel()})
    frame = frame[frame["value"].notnull() & (frame["node"] >= 0)]
    run_mean = frame.groupby("run")["value"].mean()
    per_node = frame.groupby(["run", "node"])
    rank, value = per_node["rank"], per_node["value"]
    table = pd.DataFrame({"first_rank": rank.min(), "last_rank": rank.max(), "n_ranks": rank.size(),
                          "mean": value.mean(), "min": value.min(), "max": value.max()}).reset_index()
    table["excess"] = table["mean"] / run_mean.reindex(table["run"]).to_numpy() - 1.0
    typical = table.groupby("run")["min"].transform(lambda m: m.median() if len(m) > 2 else m.min())
    table["floor_excess"] = table["min"] / typical - 1.0
    return table


def mpi_share(ds: xr.Dataset) -> pd.DataFrame:
    """Share of MPI time and calls per MPI call and run, summed over ranks.

    One row per (run, call): time [s], calls (``calls_sent + calls_recv`` when the format has no
    call count), bytes (sent + received) [B], ``time_share`` (of all
    MPI time), ``call_share`` (of all MPI calls), ``elapsed_share`` (time / total time of all
    functions on all ranks), ``mean_bytes`` per call. Sorted by run, then time. Start-up and
    shut-down (``pop.STARTUP``: ``MPI_Init``, ``MPI_Init_thread``, ``MPI_Finalize``) are left out of
    the calls and of the total time, as mpiP's MPI% and POP leave them out: a trace, which times
    ``MPI_Finalize``, and a profile of the same run, which does not, then state the same share.
    """
    ds = with_loaded_coords(ds)
    sums = evaluate(over_ranks(ds)[0])[0]
    names, per_call = _mpi_totals(ds, sums)
    runs = ds["run"].values
    frame = pd.DataFrame({"run": np.repeat(runs, names.size), "call": np.tile(names, runs.size),
                          **{metric: per_call[..., i].ravel() for i, metric in enumerate(ds["metric"].values)}})
    frame = frame.rename(columns={"time": "time_s"})
    startup = np.isin(ds["call"].values.astype(str), STARTUP)
    total = np.sum(zero_nan(sums[:, ~startup, ds.indexes["metric"].get_loc("time")]), axis=1)
    frame["bytes"] = frame["bytes_sent"].fillna(0) + frame["bytes_recv"].fillna(0)
    frame["calls"] = frame["calls"].fillna(frame["calls_sent"].fillna(0) + frame["calls_recv"].fillna(0))
    frame["time_share"] = frame["time_s"] / frame.groupby("run")["time_s"].transform("sum")
    frame["call_share"] = frame["calls"] / frame.groupby("run")["calls"].transform("sum")
    frame["elapsed_share"] = frame["time_s"] / np.repeat(total, names.size)
    frame["mean_bytes"] = frame["bytes"] / frame["calls"].where(frame["calls"] > 0)
    columns = ["run", "call", "time_s", "calls", "bytes", "time_share", "call_share", "elapsed_share", "mean_bytes"]
    return frame[columns].rename(columns={"time_s": "time"}).sort_values(
        ["run", "time"], ascending=[True, False]).reset_index(drop=True)


def _mpi_totals(ds: xr.Dataset, sums: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """MPI calls (sorted, without start-up and shut-down) and each one's totals over ranks, (run, call, metric).

    ``sums`` is the profile summed over ranks, (run, function, metric) (``cube.over_ranks``). A
    total is NaN where the call has no value on any rank of the run.
    """
    call_of = ds["call"].values.astype(str)
    mpi = np.char.startswith(call_of, "MPI_") & ~np.isin(call_of, STARTUP)
    names, inverse = np.unique(call_of[mpi], return_inverse=True)
    totals = [nan_sum(sums[:, mpi][:, inverse == i], axis=1) for i in range(names.size)]
    return names, np.stack(totals, axis=1)


def size_summary(ds: xr.Dataset, small: float = SMALL_MESSAGE) -> pd.DataFrame:
    """Message-size summary per (run, function) from ``ds["sizes"]`` (empty without it).

    Columns: messages, time [s], ``small_share`` (share of messages in bins below ``small`` bytes),
    ``small_time`` [s] (time in those bins, summed over ranks), ``median_bin`` [B] (lower bound of
    the bin holding the median message).
    """
    if "sizes" not in ds.data_vars:
        return pd.DataFrame(columns=["run", "function", "messages", "time", "small_share", "small_time",
                                     "median_bin"])
    hist = ds["sizes"].sum("rank", skipna=True)
    hist = hist.drop_vars([c for c in hist.coords if c not in hist.dims]).compute()
    count, time = hist.sel(stat="count", drop=True), hist.sel(stat="time", drop=True)
    is_small = ds["size_bin"] < small
    messages = count.sum("size_bin")
    cumulative = count.cumsum("size_bin") / messages.where(messages > 0)
    median_pos = (cumulative < 0.5).sum("size_bin").clip(max=ds.sizes["size_bin"] - 1)
    out = xr.Dataset({
        "messages": messages, "time": time.sum("size_bin"),
        "small_share": count.where(is_small, 0).sum("size_bin") / messages.where(messages > 0),
        "small_time": time.where(is_small, 0).sum("size_bin"),
        "median_bin": xr.DataArray(ds["size_bin"].values[median_pos.values], dims=median_pos.dims,
                                   coords=median_pos.coords).where(messages > 0),
    })
    frame = out.drop_vars([c for c in out.coords if c not in out.dims]).to_dataframe().reset_index()
    frame = frame[frame["messages"] > 0]
    return frame[["run", "function", "messages", "time", "small_share", "small_time", "median_bin"]].reset_index(
        drop=True)
