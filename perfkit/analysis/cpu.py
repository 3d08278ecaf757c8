"""CPU time beside wall time: how long each rank ran on a core, and how long it waited for one.

A profile from ``perfkit collect`` holds, beside each function's wall time ``time``, the CPU time
(user + system) of the rank's main thread in it, the metric ``cpu_time`` [s] (on ``Compute``:
outside MPI; NaN on the wait entries ``w_MPI_*`` / ``b_MPI_*``, a call's CPU time being all on its
main entry), and per rank the variable ``rank_cpu`` (``run, rank, cpu_stat``): ``cores_allowed`` and
``cores_online`` [1], ``run_delay`` [s] (time the main thread was runnable but waiting for a core,
the kernel's schedstat), ``voluntary_switches`` and ``involuntary_switches`` [1] and
``process_cpu_time`` [s], over the parallel region (from MPI_Init's end to MPI_Finalize), and
``node_cores_allowed`` [1] (CPUs allowed to any rank of the node) and ``cpu_quota`` [cores] (the
cgroup's quota, NaN when unlimited). A rank bound to one core has ``cores_allowed`` 1 whether or not
its node's other ranks have cores of their own: only the node's union tells.

Per (run, rank), ``cpu_usage`` gives

* ``compute_wall``, ``compute_cpu`` [s]: ``Compute``'s wall and CPU time (measured);
* ``mpi_wall``, ``mpi_cpu`` [s]: the same over every other function but start-up and shut-down
  (``pop.STARTUP``), so ``compute_wall + mpi_wall`` is the rank's parallel region ``region`` [s];
* ``run_delay`` [s] (measured) and its split ``delay_compute`` + ``delay_mpi`` [s] (**modelled**):
  a runnable thread sharing a core waits in proportion to the CPU time it uses (fair sharing), so
  ``run_delay`` is split in proportion to ``compute_cpu`` and ``mpi_cpu``, each part kept within
  that part's ``wall - cpu`` (a thread cannot wait for a core while it runs on one): busy compute
  with sleeping MPI puts the delay in compute, sleeping compute (the lab) with busy-polling MPI in MPI;
* ``voluntary_switches``, ``involuntary_switches`` [1];
* ``ranks_on_host`` [1] (ranks sharing the rank's host name; the ``ppn`` run coordinate where host
  names are unknown), ``cores`` [1] (cores the host's ranks could run on: the least of the node's
  online CPUs ``cores_online``, the CPUs of the union of its ranks' affinity masks
  ``node_cores_allowed`` and their cgroup CPU quota ``cpu_quota`` [cores], those stated),
  ``oversubscription`` [1] = ``ranks_on_host / cores``: above 1, ranks share cores;
* ``cpu_availability`` [1] = ``compute_cpu / compute_wall``: the share of the useful compute's wall
  time spent on a core (1: never without one; a compute that sleeps or waits for I/O is below 1
  without any ``run_delay``, so only ``run_delay`` shows ranks without a core).

Everything is NaN where CPU was not measured (a run without ``cpu_time`` or ``rank_cpu``, a rank
that does not exist).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import xarray as xr

from perfkit.analysis.cube import evaluate, nan_sum, per_rank, with_loaded_coords
from perfkit.analysis.pop import CPU_METRIC, STARTUP

__all__ = ["CPU_METRIC", "cpu_summary", "cpu_usage", "has_cpu", "host_counts"]

_UNITS = {"compute_wall": "s", "compute_cpu": "s", "mpi_wall": "s", "mpi_cpu": "s", "region": "s", "run_delay": "s",
          "delay_compute": "s", "delay_mpi": "s", "voluntary_switches": "1", "involuntary_switches": "1",
          "ranks_on_host": "1", "cores": "1", "oversubscription": "1", "cpu_availability": "1"}


def has_cpu(ds: xr.Dataset) -> bool:
    """Whether ``ds`` holds CPU measurements: the ``cpu_time`` metric and the ``rank_cpu`` variable."""
    return "metric" in ds.indexes and CPU_METRIC in ds.indexes["metric"] and "rank_cpu" in ds.data_vars


def cpu_usage(ds: xr.Dataset) -> xr.Dataset:
    """Wall and CPU time, time without a core and cores per host, per (run, rank) (module docstring).

    The cube is read once, block by block on a dask-backed one; the result is in memory.
    """
    ds = with_loaded_coords(ds)
    runs, ranks = ds["run"].values, ds["rank"].values
    if not has_cpu(ds):
        nan = np.full((runs.size, ranks.size), np.nan)
        return _dataset(ds, {name: nan for name in _UNITS})
    stats = ds["rank_cpu"].transpose("run", "rank", "cpu_stat")
    sums, stat = evaluate(_rank_sums(ds), stats.data)
    stat = dict(zip(map(str, stats["cpu_stat"].values), np.moveaxis(np.asarray(stat, np.float64), -1, 0)))
    nan = np.full((runs.size, ranks.size), np.nan)
    compute_wall, compute_cpu, region, busy_cpu = (sums[..., k] for k in range(4))
    delay = stat.get("run_delay", nan)
    measured = ~np.isnan(busy_cpu) | ~np.isnan(delay)  # cpu_time, or the counters (a kernel without schedstat: NaN)
    mpi_wall, mpi_cpu = region - compute_wall, busy_cpu - np.nan_to_num(compute_cpu)
    delay_compute = _delay_in_compute(delay, compute_wall, compute_cpu, mpi_wall, mpi_cpu)
    exists = ~np.isnan(region)
    codes = _host_codes(ds, exists)
    on_host = _ranks_on_host(ds, codes, exists)
    cores = _host_cores(codes, stat, nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        values = {"compute_wall": np.where(measured, compute_wall, np.nan), "compute_cpu": compute_cpu,
                  "mpi_wall": np.where(measured, mpi_wall, np.nan), "mpi_cpu": mpi_cpu,
                  "region": np.where(measured, region, np.nan), "run_delay": delay, "delay_compute": delay_compute,
                  "delay_mpi": delay - delay_compute,
                  "voluntary_switches": stat.get("voluntary_switches", nan),
                  "involuntary_switches": stat.get("involuntary_switches", nan),
                  "ranks_on_host": np.where(measured, on_host, np.nan), "cores": np.where(measured, cores, np.nan),
                  "oversubscription": np.where(measured, on_host / cores, np.nan),
                  "cpu_availability": compute_cpu / compute_wall}
    return _dataset(ds, values)


def _dataset(ds: xr.Dataset, values: dict[str, np.ndarray]) -> xr.Dataset:
    """The (run, rank) variables of ``cpu_usage`` with their units."""
    coords = {"run": ds["run"].values, "rank": ds["rank"].values}
    return xr.Dataset({name: (("run", "rank"), np.asarray(v, np.float64), {"units": _UNITS[name]})
                       for name, v in values.items()}, coords=coords)


def _rank_sums(ds: xr.Dataset) -> object:
    """Per (run, rank): compute wall, compute CPU, the parallel region's wall and CPU time [s], (run, rank, 4)."""
    compute = ds["kind"].values == "compute"
    region = ~np.isin(ds["call"].values, STARTUP)

    def sums(block: np.ndarray) -> np.ndarray:
        wall, cpu = block[..., 0], block[..., 1]
        return np.stack([nan_sum(wall[..., compute], axis=2), nan_sum(cpu[..., compute], axis=2),
                         nan_sum(wall[..., region], axis=2), nan_sum(cpu[..., region], axis=2)], axis=-1)

    return per_rank(ds, sums, ["time", CPU_METRIC])


def _delay_in_compute(delay: np.ndarray, compute_wall: np.ndarray, compute_cpu: np.ndarray, mpi_wall: np.ndarray,
                      mpi_cpu: np.ndarray) -> np.ndarray:
    """The part of ``run_delay`` [s] spent in compute (modelled, see the module docstring); NaN where not measured."""
    off_compute = np.fmax(compute_wall - compute_cpu, 0.0)
    off_mpi = np.fmax(mpi_wall - np.nan_to_num(mpi_cpu), 0.0)
    cpu = compute_cpu + np.nan_to_num(mpi_cpu)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.nan_to_num(np.where(cpu > 0, compute_cpu / cpu, compute_wall / (compute_wall + mpi_wall)))
    inside = np.fmin(np.fmax(delay * share, delay - off_mpi), off_compute).clip(0.0, None)
    return np.where(np.isnan(delay), np.nan, inside)


def _host_codes(ds: xr.Dataset, exists: np.ndarray) -> np.ndarray:
    """Per (run, rank): the number of its (run, host name) pair, -1 for an absent rank or an unknown host."""
    if "host" not in ds.data_vars:
        return np.full(exists.shape, -1)
    hosts = np.asarray(ds["host"].transpose("run", "rank").values).astype(str)
    known = exists & (hosts != "")
    names, inverse = np.unique(hosts, return_inverse=True)
    pair = np.arange(hosts.shape[0])[:, None] * names.size + inverse.reshape(hosts.shape)
    _, codes = np.unique(pair[known], return_inverse=True)
    out = np.full(hosts.shape, -1)
    out[known] = codes
    return out


def _ranks_on_host(ds: xr.Dataset, codes: np.ndarray, exists: np.ndarray) -> np.ndarray:
    """Per (run, rank): how many existing ranks of the run share its host; ``ppn`` where the host is unknown."""
    ppn = ds["ppn"].values.astype(float)[:, None] if "ppn" in ds.coords else np.nan
    out = np.where(exists, ppn, np.nan)
    known = codes >= 0
    out[known] = np.bincount(codes[known])[codes[known]]
    return out


def _host_cores(codes: np.ndarray, stat: dict[str, np.ndarray], nan: np.ndarray) -> np.ndarray:
    """Per (run, rank): the cores its host's ranks could run on, the least of ``cores_online``,
    ``node_cores_allowed`` and ``cpu_quota`` stated (each the largest over the host's ranks; a rank's own for a
    rank whose host is unknown), NaN where none is."""
    limits = np.stack([stat.get(name, nan) for name in ("cores_online", "node_cores_allowed", "cpu_quota")])
    known = codes >= 0
    if known.any():
        per_host = pd.DataFrame(limits[:, known].T).groupby(codes[known]).max().to_numpy()
        limits[:, known] = per_host[codes[known]].T
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a rank with none of them: NaN
        return np.nanmin(limits, axis=0)


def host_counts(ds: xr.Dataset, exists: np.ndarray) -> np.ndarray:
    """Per run: the number of distinct host names of its ``exists`` ranks (run, rank); 0 where some has none."""
    codes = _host_codes(ds, exists)
    known = np.where(exists, codes >= 0, True).all(axis=1)
    distinct = [np.unique(row[row >= 0]).size for row in codes]
    return np.where(known, distinct, 0)


def cpu_summary(usage: xr.Dataset) -> xr.Dataset:
    """Per run, from ``cpu_usage``: the means over ranks of its times [s] and switches [1], ``cpu_availability``
    (total compute CPU / total compute wall time), the largest ``oversubscription`` and ``measured`` (some rank's
    ``run_delay`` is known)."""
    means = usage.drop_vars(["cpu_availability", "oversubscription"]).mean("rank", skipna=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        availability = usage["compute_cpu"].sum("rank", min_count=1) / usage["compute_wall"].sum("rank", min_count=1)
    return means.assign(cpu_availability=availability.assign_attrs(units="1"),
                        oversubscription=usage["oversubscription"].max("rank", skipna=True).assign_attrs(units="1"),
                        measured=usage["run_delay"].notnull().any("rank"))
