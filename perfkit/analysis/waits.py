"""Where each rank's time goes: compute, transfer, late-sender wait, collective wait, I/O, other.

``wait_split`` splits the time of every MPI call into *transfer* (moving data, plus library
overhead) and *wait* (blocked until another rank arrives), per run and rank:

* **measured** when the run has wait columns for the call (MPInside ``w_MPI_Recv`` = send-late
  time, ``b_MPI_Bcast`` = collective wait): wait = the ``wait_*`` functions of the call,
  transfer = the ``transfer`` functions of the call;
* **estimated** otherwise, for the calls that can block on a partner (receives, waits,
  collectives): a call's per-call time on the fastest rank is taken as its transfer time and
  everything above it as waiting,
  ``wait_r = calls_r * (t_r / calls_r - min_q t_q / calls_q)`` (plain ``t_r - min_q t_q`` when
  the format has no call counts); for collectives with a ``time_min`` metric (mpiP: the
  shortest single call) the shortest call over all ranks is the per-call transfer time when it
  is smaller. A run of one rank has no wait. Such
  numbers are flagged ``estimated=True``. They miss the waiting of the fastest rank itself (when
  different ranks are late in different steps, it waited too: an underestimate) and count
  genuine transfer-time differences (near and far partners, larger messages) as waiting (an
  overestimate). On the synthetic series the estimate finds
  about 85-90 % of the true wait (``docs/imbalance.md``).

``breakdown`` sums this per rank into the six kinds of ``perfkit.model.KINDS``. Scalasca's
wait-state names map as follows: late-sender wait (``w_`` columns) = *Late Sender*; collective
wait (``b_`` columns) before a reduction/all-to-all = *Wait at N x N*, before ``MPI_Barrier`` =
*Wait at Barrier*, before a rooted broadcast/scatter = *Late Broadcast* (root late) and before a
gather/reduce = *Early Reduce*. MPInside's receive-late time (*Late Receiver*) is not separated.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

#: MPI calls whose waiting is collective (all ranks wait for the last to arrive).
COLLECTIVES = frozenset({
    "MPI_Allreduce", "MPI_Bcast", "MPI_Barrier", "MPI_Reduce", "MPI_Alltoall", "MPI_Alltoallv",
    "MPI_Alltoallw", "MPI_Allgather", "MPI_Allgatherv", "MPI_Gather", "MPI_Gatherv", "MPI_Scatter",
    "MPI_Scatterv", "MPI_Reduce_scatter", "MPI_Reduce_scatter_block", "MPI_Scan", "MPI_Exscan",
})
#: Point-to-point calls that block until a partner's message arrives.
RECEIVES = frozenset({
    "MPI_Recv", "MPI_Wait", "MPI_Waitall", "MPI_Waitany", "MPI_Waitsome", "MPI_Sendrecv",
    "MPI_Sendrecv_replace", "MPI_Probe", "MPI_Test", "MPI_Testall", "MPI_Testany", "MPI_Testsome",
})
PARTS = ("transfer", "wait")
WAIT_KINDS = ("wait_late_sender", "wait_collective")
#: Scalasca's names for the wait states perfkit reports.
SCALASCA_NAMES = {
    "wait_late_sender": "Late Sender",
    "wait_collective": "Wait at N x N / Wait at Barrier / Late Broadcast / Early Reduce",
}


def _mpi_calls(ds: xr.Dataset) -> xr.DataArray:
    """Boolean mask on ``function``: MPI communication (transfer or wait kind)."""
    return ds["kind"].isin(("transfer", *WAIT_KINDS))


def wait_split(ds: xr.Dataset) -> xr.Dataset:
    """Transfer and wait time [s] of every MPI call, per run and rank (see the module docstring).

    Returns a Dataset with ``time`` (run, rank, call, part) for part in ("transfer", "wait"),
    ``estimated`` (run, call): True where the wait is estimated, and the ``wait_kind`` coordinate on
    ``call`` ("wait_collective" or "wait_late_sender").
    """
    comm = ds.sel(function=_mpi_calls(ds))
    time = comm["profile"].sel(metric="time", drop=True)
    is_wait = comm["kind"].isin(WAIT_KINDS)
    transfer = time.where(~is_wait).groupby("call").sum(skipna=True, min_count=1)
    waited = time.where(is_wait).groupby("call").sum(skipna=True, min_count=1)
    calls = comm["profile"].sel(metric="calls", drop=True).where(~is_wait).groupby("call").sum(
        skipna=True, min_count=1)
    shortest = _shortest_call(comm, is_wait)
    measured = waited.notnull().any("rank")
    estimable = transfer["call"].isin(sorted(COLLECTIVES | RECEIVES))
    several = transfer.notnull().sum("rank") > 1
    guess = _estimate(transfer, calls, shortest).where(estimable & several, 0.0)
    wait = xr.where(measured, waited.fillna(0.0), guess).where(transfer.notnull() | waited.notnull())
    moved = xr.where(measured, transfer.fillna(0.0), transfer - guess).where(wait.notnull())
    out = xr.concat([moved, wait], dim=xr.DataArray(list(PARTS), dims="part", name="part"))
    wait_kind = np.where(np.isin(out["call"].values, list(COLLECTIVES)), "wait_collective", "wait_late_sender")
    estimated = (~measured & estimable & (guess > 0).any("rank")).transpose("run", "call")
    result = xr.Dataset({"time": out.transpose("run", "rank", "call", "part"), "estimated": estimated})
    result = result.assign_coords(wait_kind=("call", wait_kind))
    result["time"].attrs["units"] = "s"
    return result


def _shortest_call(comm: xr.Dataset, is_wait: xr.DataArray) -> xr.DataArray | None:
    """Shortest single call per (run, call) over ranks [s] from a ``time_min`` metric, if any."""
    if "time_min" not in comm["metric"].values:
        return None
    fastest = comm["profile"].sel(metric="time_min", drop=True).where(~is_wait)
    return fastest.groupby("call").min(skipna=True).min("rank", skipna=True)


def _estimate(transfer: xr.DataArray, calls: xr.DataArray, shortest: xr.DataArray | None) -> xr.DataArray:
    """Time above the fastest per-call time [s] (per rank total), the estimated wait."""
    has_calls = ((calls > 0) | transfer.isnull()).all("rank")
    per_call = transfer / calls.where(calls > 0)
    floor = per_call.min("rank", skipna=True)
    if shortest is not None:
        collective = transfer["call"].isin(sorted(COLLECTIVES))
        floor = xr.where(collective, np.fmin(floor, shortest), floor)
    above_per_call = (per_call - floor) * calls
    above_total = transfer - transfer.min("rank", skipna=True)
    usable = has_calls & per_call.notnull().any("rank")
    return xr.where(usable, above_per_call, above_total).fillna(0.0).clip(min=0.0)


def breakdown(ds: xr.Dataset) -> xr.Dataset:
    """Each rank's time [s] per kind (compute, transfer, waits, io, other), dims (run, rank, kind).

    Returns a Dataset with ``time`` (run, rank, kind), ``total`` (run, rank) and ``estimated``
    (run): True where some wait of the run is estimated rather than measured (see ``wait_split``).
    Absent ranks are NaN.
    """
    split = wait_split(ds)
    plain = ds["profile"].sel(metric="time", drop=True).where(~_mpi_calls(ds))
    by_kind = plain.groupby("kind").sum(skipna=True, min_count=1)
    transfer = split["time"].sel(part="transfer").sum("call", skipna=True, min_count=1)
    waits = split["time"].sel(part="wait").groupby("wait_kind").sum(skipna=True, min_count=1)
    parts = [by_kind.sel(kind=k, drop=True) if k in by_kind["kind"] else None for k in ("compute", "io", "other")]
    pieces = {"compute": parts[0], "transfer": transfer, "io": parts[1], "other": parts[2]}
    for kind in WAIT_KINDS:
        pieces[kind] = waits.sel(wait_kind=kind, drop=True) if kind in waits["wait_kind"] else None
    exists = ds["profile"].sel(metric="time", drop=True).notnull().any("function")
    order = ("compute", "transfer", "wait_late_sender", "wait_collective", "io", "other")
    stacked = xr.concat([_on_ranks(pieces[k], exists) for k in order],
                        dim=xr.DataArray(list(order), dims="kind", name="kind"))
    stacked = stacked.transpose("run", "rank", "kind")
    result = xr.Dataset({"time": stacked, "total": stacked.sum("kind", skipna=True).where(exists),
                         "estimated": split["estimated"].any("call").reset_coords(drop=True)})
    result = result.assign_coords({name: ds[name] for name in ds.coords if ds[name].dims == ("run",)})
    result["time"].attrs["units"] = "s"
    result["total"].attrs["units"] = "s"
    return result


def _on_ranks(part: xr.DataArray | None, exists: xr.DataArray) -> xr.DataArray:
    """``part`` with 0 for existing ranks without a value (or an all-zero array when None)."""
    if part is None:
        return xr.zeros_like(exists, dtype=float).where(exists).reset_coords(drop=True)
    return part.fillna(0.0).where(exists).reset_coords(drop=True)


def call_wait_share(ds: xr.Dataset, split: xr.Dataset | None = None) -> xr.Dataset:
    """Per (run, call): ``wait`` and ``transfer`` summed over ranks [s], ``share`` = wait / total.

    Also ``mean_wait`` (per-rank mean wait [s]), ``estimated`` and the ``wait_kind`` coordinate.
    ``split`` is ``wait_split(ds)`` when already computed.
    """
    split = wait_split(ds) if split is None else split
    totals = split["time"].sum("rank", skipna=True, min_count=1)
    ranks = split["time"].sel(part="wait").notnull().sum("rank")
    wait, transfer = totals.sel(part="wait", drop=True), totals.sel(part="transfer", drop=True)
    share = (wait / (wait + transfer)).where(wait + transfer > 0)
    return xr.Dataset({"wait": wait, "transfer": transfer, "share": share,
                       "mean_wait": (wait / ranks.where(ranks > 0)), "estimated": split["estimated"]})


def merge_wait_modes(slt: xr.Dataset, collective: xr.Dataset) -> xr.Dataset:
    """One run with both wait splits from an MPInside ``slt`` run and a ``collective_wait`` run.

    The columns of the calls split in ``collective`` (``b_MPI_Bcast`` and ``MPI_Bcast``...) replace
    those calls' columns of ``slt``; the result is labelled like ``slt`` with mode
    ``slt+collective_wait`` (what MPInside reports with both modes on). Both runs must have the
    same ranks; only ``profile`` is kept.
    """
    from perfkit.model import make_run

    one, other = slt.isel(run=0), collective.isel(run=0)
    split_calls = set(other["call"].values[other["kind"].values == "wait_collective"])
    mine = one.sel(function=~one["call"].isin(sorted(split_calls)))
    theirs = other.sel(function=other["call"].isin(sorted(split_calls)))
    theirs = theirs.sel(rank=mine["rank"], metric=mine["metric"])
    profile = np.concatenate([mine["profile"].transpose("rank", "function", "metric").values,
                              theirs["profile"].transpose("rank", "function", "metric").values], axis=1)
    meta = {name: one[name].item() for name in ("label", "nprocs", "nodes", "ppn", "threads", "system",
                                                "format", "source", "elapsed")}
    columns = {name: [*mine[name].values, *theirs[name].values] for name in ("function", "call", "kind")}
    return make_run(profile, ranks=mine["rank"].values, functions=columns["function"], calls=columns["call"],
                    kinds=columns["kind"], metrics=list(mine["metric"].values),
                    extra_units=dict(zip(map(str, one["metric"].values), map(str, one["units"].values))),
                    run={**meta, "mode": "slt+collective_wait"}, reader=slt.attrs.get("reader", ""))
