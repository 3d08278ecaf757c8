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

``breakdown`` sums this per rank into the seven kinds of ``perfkit.model.KINDS``. Scalasca's
wait-state names map as follows: late-sender wait (``w_`` columns) = *Late Sender*; collective
wait (``b_`` columns) before a reduction/all-to-all = *Wait at N x N*, before ``MPI_Barrier`` =
*Wait at Barrier*, before a rooted broadcast/scatter = *Late Broadcast* (root late) and before a
gather/reduce = *Early Reduce*; late-receiver wait (``r_`` columns, from traces) = *Late Receiver*.
MPInside's receive-late time is not separated.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
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
WAIT_KINDS = ("wait_late_sender", "wait_late_receiver", "wait_collective")
#: Scalasca's names for the wait states perfkit reports.
SCALASCA_NAMES = {
    "wait_late_sender": "Late Sender",
    "wait_late_receiver": "Late Receiver",
    "wait_collective": "Wait at N x N / Wait at Barrier / Late Broadcast / Early Reduce",
}


def _only_late_receiver(ds: xr.Dataset, calls: np.ndarray) -> np.ndarray:
    """Per call of ``calls``: True where all its wait functions are late-receiver waits (e.g. ``r_MPI_Send``)."""
    kinds, call_of = ds["kind"].values, ds["call"].values
    waits = np.isin(kinds, WAIT_KINDS)
    return np.array([bool((waits & (call_of == c)).any())
                     and bool((kinds[waits & (call_of == c)] == "wait_late_receiver").all()) for c in calls],
                    dtype=bool)


def _mpi_calls(ds: xr.Dataset) -> np.ndarray:
    """Boolean mask on ``function``: MPI communication (transfer or wait kind)."""
    return np.isin(ds["kind"].values, ("transfer", *WAIT_KINDS))


def wait_split(ds: xr.Dataset) -> xr.Dataset:
    """Transfer and wait time [s] of every MPI call, per run and rank (see the module docstring).

    Returns a Dataset with ``time`` (run, rank, call, part) for part in ("transfer", "wait"),
    ``estimated`` (run, call): True where the wait is estimated, and the ``wait_kind`` coordinate on
    ``call`` ("wait_collective" or "wait_late_sender"). A dask-backed cube is read twice, block by
    block of ranks: once for the fastest rank of every call, once for the split.
    """
    return split_and_breakdown(ds, kinds=False)[0]


class _Calls:
    """The MPI calls of a cube and, per block of ranks, their transfer and wait time (see ``wait_split``)."""

    def __init__(self, ds: xr.Dataset) -> None:
        self.ds = ds
        self.comm = _mpi_calls(ds)
        self.call_of = ds["call"].values[self.comm]
        self.is_wait = np.isin(ds["kind"].values[self.comm], WAIT_KINDS)
        self.names = np.unique(self.call_of)
        self.collective = np.isin(self.names, sorted(COLLECTIVES))
        self.estimable = np.isin(self.names, sorted(COLLECTIVES | RECEIVES))
        receiver_late = _only_late_receiver(ds, self.names)
        self.wait_kind = np.where(self.collective, "wait_collective",
                                  np.where(receiver_late, "wait_late_receiver", "wait_late_sender"))
        self.metrics = ["time", "calls"] + (["time_min"] if "time_min" in ds["metric"].values else [])

    def sums(self, block: np.ndarray) -> np.ndarray:
        """Transfer time, wait time, transfer calls [and shortest call], (run, rank, call, 3 or 4)."""
        time, calls = block[..., 0], block[..., 1]
        parts = [group_sum(np.where(self.is_wait, np.nan, time), self.call_of)[1],
                 group_sum(np.where(self.is_wait, time, np.nan), self.call_of)[1],
                 group_sum(np.where(self.is_wait, np.nan, calls), self.call_of)[1]]
        if block.shape[-1] > 2:
            parts.append(group_min(np.where(self.is_wait, np.nan, block[..., 2]), self.call_of)[1])
        return np.stack(parts, axis=-1)

    def over_ranks(self) -> dict[str, np.ndarray]:
        """Per (run, call), over ranks: what the estimate of ``_estimate`` needs (one read of the cube)."""
        sums = per_rank(self.ds, self.sums, self.metrics, self.comm)
        transfer, waited, calls = sums[..., 0], sums[..., 1], sums[..., 2]
        per_call = transfer / np.where(calls > 0, calls, np.nan)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # calls without values on any rank: NaN
            reductions = {
                "measured": (~np.isnan(waited)).any(axis=1), "values": (~np.isnan(transfer)).sum(axis=1),
                "has_calls": ((calls > 0) | np.isnan(transfer)).all(axis=1),
                "any_per_call": (~np.isnan(per_call)).any(axis=1),
                "floor": np.nanmin(per_call, axis=1), "lowest": np.nanmin(transfer, axis=1),
            }
            if len(self.metrics) > 2:
                reductions["shortest"] = np.nanmin(sums[..., 3], axis=1)
            return dict(zip(reductions, evaluate(*reductions.values()), strict=True))

    def split(self, block: np.ndarray, floors: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Moved and waited time [s] per (run, rank, call) of a block of ranks."""
        sums = self.sums(block)
        transfer, waited = sums[..., 0], sums[..., 1]
        guess = np.where((self.estimable & (floors["values"] > 1))[:, None],
                         _estimate(transfer, sums[..., 2], floors, self.collective), 0.0)
        return _parts(transfer, waited, guess, floors["measured"])

    def estimated(self, wait: np.ndarray, floors: dict[str, np.ndarray]) -> np.ndarray:
        """Where a wait is estimated, from the waits (run, rank, call) of ``split``: a call without wait
        columns that can block, with a wait above 0 (so the estimate found one).
        """
        return (wait > 0) & ~floors["measured"][:, None] & self.estimable

    def per_kind(self, block: np.ndarray, floors: dict[str, np.ndarray]) -> np.ndarray:
        """Per (run, rank) of a block: transfer, each ``WAIT_KINDS`` wait [s], 1 where a wait is estimated."""
        moved, wait = self.split(block, floors)
        waits = [_sum_of(wait, self.wait_kind == kind) for kind in WAIT_KINDS]
        return np.stack([np.nansum(moved, axis=-1), *waits, self.estimated(wait, floors).any(axis=-1)], axis=-1)


def split_and_breakdown(ds: xr.Dataset, *, split: bool = True,
                        kinds: bool = True) -> tuple[xr.Dataset | None, xr.Dataset | None]:
    """``wait_split(ds)`` and ``breakdown(ds)`` (each when asked), reading a dask-backed cube twice for both.

    Only what is asked is held: ``breakdown`` alone keeps a few values per rank, not every call's.
    """
    ds = with_loaded_coords(ds)
    calls = _Calls(ds)
    floors = calls.over_ranks()
    blocks = []
    if split:
        parts = per_rank(ds, lambda block, runs: np.stack(calls.split(block, runs), axis=-1), calls.metrics,
                         calls.comm, per_run=floors)
        blocks.append(parts.transpose(3, 2, 0, 1))  # (part, call, run, rank), ranks contiguous: see ``_split_of``
    if kinds:
        blocks += [per_rank(ds, calls.per_kind, calls.metrics, calls.comm, per_run=floors), _kind_sums(ds)]
    computed = list(evaluate(*blocks))
    out = _split_of(ds, calls, floors, computed.pop(0)) if split else None
    if not kinds:
        return out, None
    comm, kind_sums = computed
    return out, _breakdown_of(ds, comm[..., :-1], kind_sums, (comm[..., -1] > 0).any(axis=1))


def lazy_breakdown(ds: xr.Dataset) -> xr.Dataset:
    """``breakdown(ds)``, dask-backed on a dask-backed cube (chunked as the cube along run and rank).

    The cube is read once here for the fastest rank of every call; reduce the result over ranks
    and pass the reductions to ``cube.evaluate``, which reads it a second time, a block at a time.
    """
    ds = with_loaded_coords(ds)
    calls = _Calls(ds)
    comm = per_rank(ds, calls.per_kind, calls.metrics, calls.comm, per_run=calls.over_ranks())
    return _breakdown_of(ds, comm[..., :-1], _kind_sums(ds), (comm[..., -1] > 0).any(axis=1))


def _split_of(ds: xr.Dataset, calls: _Calls, floors: dict[str, np.ndarray], parts: np.ndarray) -> xr.Dataset:
    """``wait_split`` from the moved and waited time of ``_Calls.split``, (part, call, run, rank).

    Stored part- then call-major with ranks contiguous, so that sums over ranks (``call_wait_share``)
    add in numpy's pairwise order, as they did when xarray built this array.
    """
    time = np.ascontiguousarray(parts).transpose(2, 3, 1, 0)
    return xr.Dataset({
        "time": (("run", "rank", "call", "part"), time, {"units": "s"}),
        "estimated": (("run", "call"), calls.estimated(time[..., 1], floors).any(axis=1)),
    }, coords={**run_coords(ds), "rank": ds.variables["rank"], "call": calls.names, "part": list(PARTS),
               "wait_kind": ("call", calls.wait_kind)})


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


def _estimate(transfer: np.ndarray, calls: np.ndarray, floors: dict[str, np.ndarray],
              collective: np.ndarray) -> np.ndarray:
    """Time above the fastest per-call time [s] (per rank total), the estimated wait, (run, rank, call).

    ``transfer`` and ``calls`` are per (run, rank, call), ``floors`` per (run, call) over all ranks
    (``_Calls.over_ranks``), ``collective`` per call.
    """
    per_call = transfer / np.where(calls > 0, calls, np.nan)
    floor = floors["floor"]
    if "shortest" in floors:
        floor = np.where(collective, np.fmin(floor, floors["shortest"]), floor)
    above_per_call = (per_call - floor[:, None]) * calls
    above_total = transfer - floors["lowest"][:, None]
    usable = floors["has_calls"] & floors["any_per_call"]
    return np.clip(zero_nan(np.where(usable[:, None], above_per_call, above_total)), 0.0, None)


def breakdown(ds: xr.Dataset, split: xr.Dataset | None = None) -> xr.Dataset:
    """Each rank's time [s] per kind (compute, transfer, waits, io, other), dims (run, rank, kind).

    Returns a Dataset with ``time`` (run, rank, kind), ``total`` (run, rank) and ``estimated``
    (run): True where some wait of the run is estimated rather than measured (see ``wait_split``).
    Absent ranks are NaN. ``split`` is ``wait_split(ds)`` when already computed; without it a
    dask-backed cube is read twice and only per-rank values are held.
    """
    if split is None:
        return split_and_breakdown(ds, split=False)[1]
    ds = with_loaded_coords(ds)
    moved, waited = (split["time"].sel(part=part).values for part in PARTS)
    waits = [_sum_of(waited, split["wait_kind"].values == kind) for kind in WAIT_KINDS]
    comm = np.stack([np.nansum(moved, axis=-1), *waits], axis=-1)
    return _breakdown_of(ds, comm, *evaluate(_kind_sums(ds)), split["estimated"].values.any(axis=1))


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


def _breakdown_of(ds: xr.Dataset, comm: np.ndarray, kind_sums: np.ndarray, estimated: np.ndarray) -> xr.Dataset:
    """``breakdown`` from per-rank transfer and wait times (run, rank, 3), the sums of ``_kind_sums``
    and whether some wait of a run is estimated.
    """
    pieces = {kind: kind_sums[..., i] for i, kind in enumerate(("compute", "io", "other"))}
    pieces.update({kind: comm[..., i] for i, kind in enumerate(("transfer", *WAIT_KINDS))})
    exists = kind_sums[..., 3] > 0
    stacked = np.where(exists[..., None], np.stack([pieces[kind] for kind in KINDS], axis=-1), np.nan)
    return xr.Dataset({
        "time": (("run", "rank", "kind"), stacked, {"units": "s"}),
        "total": (("run", "rank"), np.where(exists, np.nansum(stacked, axis=-1), np.nan), {"units": "s"}),
        "estimated": ("run", estimated),
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
    transfer, wait = _over_ranks_by_call(moved), _over_ranks_by_call(waited)
    ranks = _over_ranks_by_call(waited, lambda part, axis: (~np.isnan(part)).sum(axis=axis))
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(wait + transfer > 0, wait / (wait + transfer), np.nan)
        mean_wait = wait / np.where(ranks > 0, ranks, np.nan)
    dims, seconds = ("run", "call"), {"units": "s"}
    coords = {name: var for name, var in split.coords.variables.items() if set(var.dims) <= set(dims)}
    return xr.Dataset({"wait": (dims, wait, seconds), "transfer": (dims, transfer, seconds), "share": (dims, share),
                       "mean_wait": (dims, mean_wait, seconds), "estimated": split["estimated"].variable},
                      coords=coords)


def _over_ranks_by_call(values: np.ndarray, reduce: Callable[[np.ndarray], np.ndarray] = nan_sum) -> np.ndarray:
    """``reduce(part, axis=1)`` of (run, rank, call) values, one call at a time (no copy of them all)."""
    runs, _, calls = values.shape
    return np.array([reduce(values[:, :, j], axis=1) for j in range(calls)]).reshape(calls, runs).T


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
