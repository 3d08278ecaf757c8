"""The POP efficiency hierarchy per run, each number marked measured, modelled or unavailable.

With ``C_r`` the useful (``kind == "compute"``) time of rank ``r`` [s], ``T`` the elapsed time
and ``T_ideal`` the elapsed time on an ideal (instantaneous) network:

* ``load_balance`` ``LB = mean_r C_r / max_r C_r``;
* ``communication_efficiency`` ``CommE = max_r C_r / T``;
* ``serialisation_efficiency`` ``SerE = max_r C_r / T_ideal``;
* ``transfer_efficiency`` ``TrE = T_ideal / T`` (so ``CommE = SerE x TrE``);
* ``parallel_efficiency`` ``PE = LB x CommE = mean_r C_r / T``;
* ``computation_scalability`` ``CS = sum_r C_r(reference) / sum_r C_r`` (weak scaling: times
  ``nprocs / nprocs(reference)``), the reference being the run with the fewest ranks;
* ``global_efficiency`` ``GE = PE x CS``.

Start-up and shut-down (``MPI_Init``, ``MPI_Init_thread``, ``MPI_Finalize``, where a profile
has them) are not part of the parallel region: their time is left out of every rank's total, and
the elapsed time is shortened by the longest rank's share (``T = T_given - (max_r total_r -
max_r (total_r - startup_r)))``).

The ideal-network elapsed time removes every rank's transfer time ``X_r`` and keeps its waits
``W_r`` (late sender + collective wait) and I/O and other time ``O_r``:
``T_ideal = max_r (C_r + W_r + O_r) + (T - max_r total_r)`` (the last term is time outside the
profiled ranks' totals, kept). The waits are kept as they were on the real network, so waits a
rank spent for a partner's *transfer* stay in ``T_ideal``: ``TrE`` is then an upper bound and
``SerE`` a lower bound (the error is at most the transfer time on the critical path).

A trace (``replay_elapsed``, ``perfkit.io.otf2.replay``) gives ``T_ideal`` exactly instead: its events
replayed on an ideal network, the waits for a partner's transfer gone too. The replay starts every rank
at its first event, as the ranks' totals do, so the time outside them is added to it as to the model:
``T_ideal = replay_elapsed + (T - max_r total_r)`` (both ideal times on the basis of ``T``).

Sources (variable ``evidence``, dims ``run x efficiency``, with ``note`` saying why; the
``source`` run coordinate stays the file the run was read from):

* ``measured``: the waits of every blocking call were measured (MPInside ``slt`` and
  ``collective_wait`` columns, ``w_MPI_*`` / ``b_MPI_*``), or the run has one rank;
* ``modelled``: some waits come from ``perfkit.analysis.waits.wait_split``'s estimate (the fastest
  rank's per-call time is transfer, the rest waiting), named in ``note``;
* ``unavailable`` (NaN): the profile has no per-rank times (a concise mpiP report); its stated
  means still give ``parallel_efficiency`` (mean AppTime - mean MPI time over max AppTime).

``LB``, ``CommE`` and ``PE`` need only compute and elapsed time and are measured whenever the
profile has per-rank times.

Where the profile has CPU time (metric ``cpu_time``, ``perfkit collect``), the useful compute is also
stated as CPU time: ``useful_cpu_mean``, ``useful_cpu_max``, ``useful_cpu_total`` [s], and
``cpu_availability = useful_cpu_total / useful_total`` [1] between the two (1: compute always on a
core). The efficiencies stay on wall time; a rank waiting for a core inside its compute counts as
computing there, which ``cpu_availability`` (and ``diagnose``'s ``cpu`` finding) show.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import xarray as xr

from perfkit import text as fmt
from perfkit.analysis.cube import by_run_chunks, evaluate, nan_sum, over_ranks, per_rank, run_coords, with_loaded_coords
from perfkit.analysis.waits import COLLECTIVES, RECEIVES, WAIT_KINDS, lazy_breakdown
from perfkit.model import CPU_TIME
from perfkit.runs import select_one

#: The hierarchy, top down, with each metric's depth (for the indented POP table).
HIERARCHY: tuple[tuple[str, int], ...] = (
    ("global_efficiency", 0), ("parallel_efficiency", 1), ("load_balance", 2),
    ("communication_efficiency", 2), ("serialisation_efficiency", 3), ("transfer_efficiency", 3),
    ("computation_scalability", 1),
)
EFFICIENCIES = tuple(name for name, _ in HIERARCHY)
LABELS = {
    "global_efficiency": "Global efficiency", "parallel_efficiency": "Parallel efficiency",
    "load_balance": "Load balance", "communication_efficiency": "Communication efficiency",
    "serialisation_efficiency": "Serialisation efficiency", "transfer_efficiency": "Transfer efficiency",
    "computation_scalability": "Computation scalability",
}
SOURCES = ("measured", "modelled", "unavailable")
#: The profile metric of CPU time [s] (``perfkit collect``; ``perfkit.analysis.cpu``).
CPU_METRIC = CPU_TIME
#: Start-up and shut-down: not part of the parallel region the efficiencies describe.
STARTUP = ("MPI_Init", "MPI_Init_thread", "MPI_Finalize")
_NETWORK = ("serialisation_efficiency", "transfer_efficiency")
_COMPUTE_ONLY = ("load_balance", "communication_efficiency", "parallel_efficiency")


def pop_metrics(ds: xr.Dataset, *, reference: int | str | None = None, weak: bool | None = None) -> xr.Dataset:
    """The POP efficiencies of every run of ``ds`` (see the module docstring), dims ``run``.

    Returns one variable per efficiency (0-1, NaN when unavailable), ``evidence`` and ``note``
    (run, efficiency) saying where each number comes from, and the times behind them [s]:
    ``elapsed`` (the coordinate, else the longest rank's total), ``ideal_elapsed``, ``useful_max``,
    ``useful_mean``, ``useful_total``.
    ``reference`` names the run computation scalability is measured against (its label, a pattern naming
    one run, or its position: ``perfkit.runs``; default: the fewest ranks);
    ``weak`` marks a weak-scaling series (default: the ``scaling`` run coordinate when present).
    """
    ds = with_loaded_coords(ds.drop_vars("traffic", errors="ignore"))
    over = by_run_chunks(ds, lambda sub: _over_ranks(sub, lazy_breakdown(sub)))
    cpu = by_run_chunks(ds, _useful_cpu) if CPU_METRIC in ds.indexes["metric"] else None
    return _from_reductions(ds, over, cpu, reference=reference, weak=weak)


def pop_from_parts(ds: xr.Dataset, parts: xr.Dataset, *, reference: int | str | None = None,
                   weak: bool | None = None) -> xr.Dataset:
    """``pop_metrics`` from a ``breakdown`` of ``ds`` (in memory, or lazy: reduced over ranks block by block)."""
    ds = with_loaded_coords(ds)
    cpu = _useful_cpu(ds) if CPU_METRIC in ds.indexes["metric"] else None
    return _from_reductions(ds, _over_ranks(ds, parts), cpu, reference=reference, weak=weak)


def _from_reductions(ds: xr.Dataset, over: tuple[np.ndarray, ...], cpu: tuple[np.ndarray, ...] | None, *,
                     reference: int | str | None, weak: bool | None) -> xr.Dataset:
    """``pop_metrics`` from the per-run reductions of ``_over_ranks`` and, where CPU was measured, ``_useful_cpu``."""
    present, busy, per_rank, useful_max, useful_mean, count, longest, longest_full, longest_busy = over
    with np.errstate(invalid="ignore", divide="ignore"):
        useful_max, useful_mean = np.where(per_rank, useful_max, np.nan), np.where(per_rank, useful_mean, np.nan)
        useful_total = useful_mean * count
        elapsed = _elapsed(ds, longest_full) - (longest_full - longest)
        outside = np.fmax(elapsed - longest, 0.0)  # in the elapsed time, outside every rank's total [s]
        replayed = ds["replay_elapsed"].values if "replay_elapsed" in ds.data_vars else np.full(outside.shape, np.nan)
        ideal = np.where(np.isfinite(replayed), replayed, longest_busy) + outside
        values = {
            "load_balance": useful_mean / useful_max,
            "communication_efficiency": useful_max / elapsed,
            "serialisation_efficiency": useful_max / ideal,
            "transfer_efficiency": ideal / elapsed,
            "parallel_efficiency": useful_mean / elapsed,
        }
    labels = [str(r) for r in ds["run"].values]
    source = np.full((len(labels), len(EFFICIENCIES)), "measured", dtype=object)
    note = np.full(source.shape, "", dtype=object)
    column = {name: j for j, name in enumerate(EFFICIENCIES)}
    estimated = _estimated_calls(ds, present, busy)
    for i in range(len(labels)):
        if not per_rank[i]:
            for name in _COMPUTE_ONLY + _NETWORK:
                values[name][i] = np.nan
                source[i, column[name]], note[i, column[name]] = "unavailable", _NO_RANKS
            stated = _stated_parallel_efficiency(ds, i, elapsed[i])
            if np.isfinite(stated):
                values["parallel_efficiency"][i] = stated
                source[i, column["parallel_efficiency"]] = "measured"
                note[i, column["parallel_efficiency"]] = _STATED
            continue
        for name in _COMPUTE_ONLY:
            note[i, column[name]] = "compute time per rank and elapsed time from the profile"
        for name in _NETWORK:
            source[i, column[name]], note[i, column[name]] = (
                ("measured", _REPLAYED) if np.isfinite(replayed[i]) else _network_source(estimated[i], int(count[i])))
    scalability, scal_note = _scalability(ds, labels, useful_total, reference, weak)
    values["computation_scalability"] = scalability
    values["global_efficiency"] = values["parallel_efficiency"] * scalability
    for i in range(len(labels)):
        for name in ("computation_scalability", "global_efficiency"):
            j = column[name]
            if not np.isfinite(values[name][i]):
                source[i, j] = "unavailable"
                note[i, j] = _NO_RANKS if name == "computation_scalability" or not per_rank[i] else scal_note[i]
            else:
                note[i, j] = scal_note[i]
                if name == "global_efficiency" and source[i, column["parallel_efficiency"]] != "measured":
                    source[i, j] = source[i, column["parallel_efficiency"]]
    seconds = {"units": "s"}
    data = {name: ("run", values[name], {"long_name": LABELS[name], "units": "1"}) for name in EFFICIENCIES}
    data.update({
        "evidence": (("run", "efficiency"), source.astype(str)),
        "note": (("run", "efficiency"), note.astype(str)),
        "elapsed": ("run", elapsed, seconds), "ideal_elapsed": ("run", ideal, seconds),
        "useful_max": ("run", useful_max, seconds), "useful_mean": ("run", useful_mean, seconds),
        "useful_total": ("run", useful_total, seconds),
    })
    if cpu is not None:
        cpu_mean, cpu_max, cpu_total = cpu
        with np.errstate(invalid="ignore", divide="ignore"):
            data.update({"useful_cpu_mean": ("run", cpu_mean, seconds), "useful_cpu_max": ("run", cpu_max, seconds),
                         "useful_cpu_total": ("run", cpu_total, seconds),
                         "cpu_availability": ("run", cpu_total / useful_total,
                                              {"long_name": "CPU availability", "units": "1", "note": _AVAILABILITY})})
    coords = {name: var for name, var in run_coords(ds).items() if name != "elapsed"}
    return xr.Dataset(data, coords={**coords, "efficiency": list(EFFICIENCIES)})


def _useful_cpu(ds: xr.Dataset) -> tuple[np.ndarray, ...]:
    """Per run: the mean, largest and total over ranks of the CPU time of compute [s] (``cpu_time`` of the
    ``compute`` functions), NaN where no rank has it."""
    compute = ds["kind"].values == "compute"
    per = per_rank(ds, lambda block: nan_sum(block[..., compute, 0], axis=2), [CPU_METRIC])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # runs without CPU: NaN
        return evaluate(np.nanmean(per, axis=1), np.nanmax(per, axis=1),
                        np.where(np.isnan(per).all(axis=1), np.nan, np.nansum(per, axis=1)))


def _over_ranks(ds: xr.Dataset, parts: xr.Dataset) -> tuple[np.ndarray, ...]:
    """What ``pop_from_parts`` needs of the ranks, per run, in one read of a lazy cube.

    Per (run, function): some rank has a time, the time over ranks is above 0. Per run: whether
    every existing rank has a compute time, the largest and the mean compute time [s], the number
    of ranks, the largest total without start-up, with it, and without start-up and transfers [s].
    """
    time = parts["time"]
    compute, transfer = time.sel(kind="compute").data, time.sel(kind="transfer").data
    full = parts["total"].data
    exists = ~np.isnan(full)
    total = full - startup_per_rank(ds)
    useful = np.where(exists, compute, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # runs without per-rank values: NaN
        return evaluate(*_busy_functions(ds), exists.any(axis=1) & ~np.isnan(np.where(exists, compute, 0.0)).all(
            axis=1), np.nanmax(useful, axis=1), np.nanmean(useful, axis=1),
            exists.sum(axis=1), np.nanmax(total, axis=1), np.nanmax(full, axis=1), np.nanmax(total - transfer, axis=1))


_AVAILABILITY = ("useful compute's CPU time / its wall time over all ranks (useful_cpu_total / useful_total): "
                 "below 1, compute waited for a core, slept or waited for I/O; the efficiencies use wall time")
_REPLAYED = "ideal-network elapsed from replaying the trace's events (perfkit.io.otf2.replay)"
_NO_RANKS = "no per-rank times in the profile (e.g. a concise mpiP report states only means and maxima)"
_STATED = "from the report's stated means: (mean AppTime - mean MPI time) / max AppTime"


def startup_time(ds: xr.Dataset) -> np.ndarray:
    """Time [s] in start-up and shut-down calls (``STARTUP``) per (run, rank), 0 where there is none."""
    return evaluate(startup_per_rank(with_loaded_coords(ds)))[0]


def startup_per_rank(ds: xr.Dataset) -> Any:
    """``startup_time``, lazy (dask) on a dask-backed cube: pass it to ``cube.evaluate``."""
    columns = np.isin(ds["call"].values, STARTUP)
    return per_rank(ds, lambda values: np.nansum(values[..., columns, 0], axis=-1), ["time"])


def _busy_functions(ds: xr.Dataset) -> tuple[Any, Any]:
    """Per (run, function): whether some rank has a time, and whether the time summed over ranks is above 0."""
    sums, counts = over_ranks(ds, ["time"])
    return counts[..., 0] > 0, sums[..., 0] > 0


def _elapsed(ds: xr.Dataset, longest: np.ndarray) -> np.ndarray:
    """Elapsed time per run [s]: the ``elapsed`` coordinate, else (or when longer) the longest rank's total.

    A rank's total cannot exceed the elapsed time; when it does, the printed elapsed time was rounded.
    """
    given = ds["elapsed"].values.astype(float) if "elapsed" in ds.coords else np.full(longest.shape, np.nan)
    return np.fmax(given, longest)


def _estimated_calls(ds: xr.Dataset, present: np.ndarray, busy: np.ndarray) -> list[list[str]]:
    """Per run, the blocking calls (receives, waits, collectives) with time but no measured wait column.

    ``present`` and ``busy`` are per (run, function): some rank has a time; the time over ranks is above 0.
    """
    kinds, calls = ds["kind"].values, ds["call"].values
    blocking = np.isin(calls, sorted(COLLECTIVES | RECEIVES))
    waits = np.isin(kinds, WAIT_KINDS)
    out = []
    for i in range(present.shape[0]):
        measured = set(calls[waits & present[i]])
        candidates = present[i] & blocking & (kinds == "transfer") & busy[i]
        out.append(sorted(set(calls[candidates]) - measured))
    return out


def _network_source(estimated: list[str], nranks: int) -> tuple[str, str]:
    """Source and note of serialisation / transfer efficiency for one run."""
    ideal = "ideal-network elapsed = max over ranks of (compute + waits + I/O and other), transfers removed"
    if nranks <= 1:
        return "measured", "one rank: no waits, no transfers between ranks"
    if not estimated:
        return "measured", (f"{ideal}; waits measured (late sender and collective wait); waits for a partner's "
                            "transfer are kept, so transfer efficiency is an upper bound")
    return "modelled", (f"{ideal}; waits of {fmt.names(estimated, 4)} estimated by the wait split (the fastest "
                        "rank's per-call time taken as transfer, the rest as wait); measure them with "
                        "`perfkit collect --slt` or MPInside's slt and collective_wait modes")


def _stated_parallel_efficiency(ds: xr.Dataset, i: int, elapsed: float) -> float:
    """Parallel efficiency from a report's stated task means (mpiP concise ``task_time``), else NaN."""
    if "task_time" not in ds.data_vars:
        return np.nan
    task = ds["task_time"].isel(run=i)
    app, mpi = (float(task.sel(task_metric=m, task_stat="mean")) for m in ("app", "mpi"))
    top = float(task.sel(task_metric="app", task_stat="max"))
    return (app - mpi) / (top if np.isfinite(top) else elapsed)


def _scalability(ds: xr.Dataset, labels: list[str], useful_total: np.ndarray, reference: int | str | None,
                 weak: bool | None) -> tuple[np.ndarray, list[str]]:
    """Computation scalability per run and a note naming the reference run."""
    nprocs = ds["nprocs"].values.astype(float) if "nprocs" in ds.coords else np.full(len(labels), np.nan)
    usable = np.isfinite(useful_total)
    if not usable.any():
        return np.full(len(labels), np.nan), [_NO_RANKS] * len(labels)
    if reference is None:
        order = np.where(usable, np.nan_to_num(nprocs, nan=np.inf), np.inf)
        ref = int(np.argmin(order)) if np.isfinite(order).any() else int(np.flatnonzero(usable)[0])
    else:
        ref = select_one(labels, reference, choose="one reference run")
    if weak is None:
        weak = "scaling" in ds.coords and str(ds["scaling"].values[ref]) == "weak"
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = useful_total[ref] / useful_total
        if weak:
            ratio = ratio * nprocs / nprocs[ref]
    kind = "weak scaling: x nprocs / reference nprocs" if weak else "strong scaling"
    ranks = fmt.plural(int(nprocs[ref]), "rank") if np.isfinite(nprocs[ref]) else "ranks unknown"
    note = f"total compute of the reference run {labels[ref]} ({ranks}) / this run's ({kind})"
    return ratio, [note] * len(labels)
