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

from typing import Any

import numpy as np
import xarray as xr

from perfkit.analysis.cube import (
    evaluate,
    group_min,
    group_sum,
    nan_sum,
    per_rank,
    run_coords,
    with_loaded_coords,
    zero_nan,
)
from perfkit.model import KINDS

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


def _mpi_calls(ds: xr.Dataset) -> np.ndarray:
    """Boolean mask on ``function``: MPI communication (transfer or wait kind)."""
    return np.isin(ds["kind"].values, ("transfer", *WAIT_KINDS))


def wait_split(ds: xr.Dataset) -> xr.Dataset:
    """Transfer and wait time [s] of every MPI call, per run and rank (see the module docstring).

    Returns a Dataset with ``time`` (run, rank, call, part) for part in ("transfer", "wait"),
    ``estimated`` (run, call): True where the wait is estimated, and the ``wait_kind`` coordinate on
    ``call`` ("wait_collective" or "wait_late_sender"). A dask-backed cube is read block by block.
    """
    ds = with_loaded_coords(ds)
    return _split_of(ds, *evaluate(_call_sums(ds)))


def _call_sums(ds: xr.Dataset) -> Any:
    """Per (run, rank, call) of the MPI calls: transfer time, wait time, transfer calls [and shortest call].

    A (run, rank, call, 3 or 4) array, lazy on a dask-backed cube; the shortest single call [s]
    comes from a ``time_min`` metric when there is one.
    """
    comm = _mpi_calls(ds)
    call_of = ds["call"].values[comm]
    is_wait = np.isin(ds["kind"].values[comm], WAIT_KINDS)
    metrics = ["time", "calls"] + (["time_min"] if "time_min" in ds["metric"].values else [])

    def sums(values: np.ndarray) -> np.ndarray:
        time, calls = values[..., 0], values[..., 1]
        parts = [group_sum(np.where(is_wait, np.nan, time), call_of)[1],
                 group_sum(np.where(is_wait, time, np.nan), call_of)[1],
                 group_sum(np.where(is_wait, np.nan, calls), call_of)[1]]
        if values.shape[-1] > 2:
            parts.append(group_min(np.where(is_wait, np.nan, values[..., 2]), call_of)[1])
        return np.stack(parts, axis=-1)

    return per_rank(ds, sums, metrics, comm)


def _split_of(ds: xr.Dataset, sums: np.ndarray) -> xr.Dataset:
    """``wait_split`` from the per-rank call sums of ``_call_sums`` (in memory)."""
    calls = np.unique(ds["call"].values[_mpi_calls(ds)])
    transfer, waited, counts = sums[..., 0], sums[..., 1], sums[..., 2]
    shortest = np.fmin.reduce(sums[..., 3], axis=1) if sums.shape[-1] > 3 else None
    collective = np.isin(calls, sorted(COLLECTIVES))
    measured = ~np.isnan(waited).all(axis=1)
    estimable = np.isin(calls, sorted(COLLECTIVES | RECEIVES))
    several = (~np.isnan(transfer)).sum(axis=1) > 1
    guess = np.where((estimable & several)[:, None], _estimate(transfer, counts, shortest, collective), 0.0)
    moved, wait = _parts(transfer, waited, guess, measured)
    return xr.Dataset({
        "time": (("run", "rank", "call", "part"), _by_part(moved, wait), {"units": "s"}),
        "estimated": (("run", "call"), ~measured & estimable & (guess > 0).any(axis=1)),
    }, coords={**run_coords(ds), "rank": ds.variables["rank"], "call": calls, "part": list(PARTS),
               "wait_kind": ("call", np.where(collective, "wait_collective", "wait_late_sender"))})


def _parts(transfer: np.ndarray, waited: np.ndarray, guess: np.ndarray,
           measured: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Transfer and wait time [s] per (run, rank, call) from the call's transfer and wait columns.

    Where the run has wait columns for the call (``measured``, per (run, call)) they are the wait;
    elsewhere ``guess`` (the estimated wait) is moved from the transfer time to the wait.
    """
    wait = np.where(measured[:, None], zero_nan(waited), guess)
    wait = np.where(np.isnan(transfer) & np.isnan(waited), np.nan, wait)
    moved = np.where(measured[:, None], zero_nan(transfer), transfer - guess)
    return np.where(np.isnan(wait), np.nan, moved), wait


def _by_part(moved: np.ndarray, wait: np.ndarray) -> np.ndarray:
    """``moved`` and ``wait`` (run, rank, call) as one array (run, rank, call, part).

    Stored part- then call-major with ranks contiguous, so that sums over ranks (``call_wait_share``)
    add in numpy's pairwise order, as they did when xarray built this array.
    """
    return np.ascontiguousarray(np.stack([moved, wait]).transpose(0, 3, 1, 2)).transpose(2, 3, 1, 0)


def _estimate(transfer: np.ndarray, calls: np.ndarray, shortest: np.ndarray | None,
              collective: np.ndarray) -> np.ndarray:
    """Time above the fastest per-call time [s] (per rank total), the estimated wait, (run, rank, call).

    ``transfer`` and ``calls`` are per (run, rank, call), ``shortest`` per (run, call), ``collective``
    per call.
    """
    has_calls = ((calls > 0) | np.isnan(transfer)).all(axis=1)
    per_call = transfer / np.where(calls > 0, calls, np.nan)
    floor = np.fmin.reduce(per_call, axis=1)
    if shortest is not None:
        floor = np.where(collective, np.fmin(floor, shortest), floor)
    above_per_call = (per_call - floor[:, None]) * calls
    above_total = transfer - np.fmin.reduce(transfer, axis=1)[:, None]
    usable = has_calls & ~np.isnan(per_call).all(axis=1)
    return np.clip(zero_nan(np.where(usable[:, None], above_per_call, above_total)), 0.0, None)


def breakdown(ds: xr.Dataset, split: xr.Dataset | None = None) -> xr.Dataset:
    """Each rank's time [s] per kind (compute, transfer, waits, io, other), dims (run, rank, kind).

    Returns a Dataset with ``time`` (run, rank, kind), ``total`` (run, rank) and ``estimated``
    (run): True where some wait of the run is estimated rather than measured (see ``wait_split``).
    Absent ranks are NaN. ``split`` is ``wait_split(ds)`` when already computed (else both are
    computed in one read of a dask-backed cube).
    """
    if split is None:
        return split_and_breakdown(ds)[1]
    ds = with_loaded_coords(ds)
    return _breakdown_of(ds, split, *evaluate(_kind_sums(ds)))


def split_and_breakdown(ds: xr.Dataset) -> tuple[xr.Dataset, xr.Dataset]:
    """``wait_split(ds)`` and ``breakdown(ds)``, reading a dask-backed cube once for both."""
    ds = with_loaded_coords(ds)
    sums, kinds = evaluate(_call_sums(ds), _kind_sums(ds))
    split = _split_of(ds, sums)
    return split, _breakdown_of(ds, split, kinds)


def _kind_sums(ds: xr.Dataset) -> Any:
    """Per (run, rank): time [s] in compute, io and other functions (0 when none) and 1 where the rank exists.

    A (run, rank, 4) array, lazy on a dask-backed cube.
    """
    kinds = ds["kind"].values

    def sums(values: np.ndarray) -> np.ndarray:
        time = values[..., 0]
        pieces = [_sum_of(time, kinds == kind) for kind in ("compute", "io", "other")]
        return np.stack([*pieces, ~np.isnan(time).all(axis=-1)], axis=-1)

    return per_rank(ds, sums, ["time"])


def _breakdown_of(ds: xr.Dataset, split: xr.Dataset, kind_sums: np.ndarray) -> xr.Dataset:
    """``breakdown`` from ``wait_split`` and the per-rank sums of ``_kind_sums`` (in memory)."""
    moved, waited = (split["time"].sel(part=part).values for part in PARTS)
    wait_kind = split["wait_kind"].values
    pieces = {kind: kind_sums[..., i] for i, kind in enumerate(("compute", "io", "other"))}
    pieces["transfer"] = np.nansum(moved, axis=-1)
    pieces.update({kind: _sum_of(waited, wait_kind == kind) for kind in WAIT_KINDS})
    exists = kind_sums[..., 3] > 0
    stacked = np.where(exists[..., None], np.stack([pieces[kind] for kind in KINDS], axis=-1), np.nan)
    return xr.Dataset({
        "time": (("run", "rank", "kind"), stacked, {"units": "s"}),
        "total": (("run", "rank"), np.where(exists, np.nansum(stacked, axis=-1), np.nan), {"units": "s"}),
        "estimated": ("run", split["estimated"].values.any(axis=1)),
    }, coords={**run_coords(ds), "rank": ds.variables["rank"], "kind": list(KINDS)})


def _sum_of(values: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """Sum over the selected ``columns`` of the last axis, ignoring NaN (0 when none is selected)."""
    return np.nansum(values[..., columns], axis=-1)


def call_wait_share(ds: xr.Dataset, split: xr.Dataset | None = None) -> xr.Dataset:
    """Per (run, call): ``wait`` and ``transfer`` summed over ranks [s], ``share`` = wait / total.

    Also ``mean_wait`` (per-rank mean wait [s]), ``estimated`` and the ``wait_kind`` coordinate.
    ``split`` is ``wait_split(ds)`` when already computed.
    """
    split = wait_split(ds) if split is None else split
    moved, waited = (split["time"].sel(part=part).values for part in PARTS)
    transfer, wait = nan_sum(moved, axis=1), nan_sum(waited, axis=1)
    ranks = (~np.isnan(waited)).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(wait + transfer > 0, wait / (wait + transfer), np.nan)
        mean_wait = wait / np.where(ranks > 0, ranks, np.nan)
    dims, seconds = ("run", "call"), {"units": "s"}
    coords = {name: var for name, var in split.coords.variables.items() if set(var.dims) <= set(dims)}
    return xr.Dataset({"wait": (dims, wait, seconds), "transfer": (dims, transfer, seconds), "share": (dims, share),
                       "mean_wait": (dims, mean_wait, seconds), "estimated": split["estimated"].variable},
                      coords=coords)


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
