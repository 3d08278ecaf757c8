"""What-if predictions: elapsed time and per-rank breakdown under a better network, CPU or balance.

The model is bulk-synchronous. From ``perfkit.analysis.waits.breakdown`` each rank ``r`` of a run
has compute ``C_r``, transfer ``X_r``, I/O and other time ``O_r`` (together its *busy* time
``B_r = C_r + X_r + O_r``) and wait ``W_r``; ranks synchronise (collectives wait for the slowest
rank, a receive for its sender), so every rank ends at the elapsed time ``T`` and
``W_r = T - B_r``. The busiest rank is not idle for ``max_r B_r`` only: when the late rank changes
from step to step, even it waits. That remainder is the *dynamic imbalance*
``D = T - max_r B_r >= 0``. A scenario changes ``C``, ``X`` and ``D`` and the prediction is

    T' = max_r B'_r + D',        W'_r = T' - B'_r  (split between late-sender and collective
                                                    wait in each rank's measured proportion)

Scenarios (``k`` is a factor > 0):

* ``perfect_network``: ``X' = 0``, ``D' = D`` (MPInside's perfect interconnect: transfers vanish,
  waits remain);
* ``network``: ``X' = X / k`` (latency and bandwidth both ``k`` times better), ``D' = D``;
* ``compute``: ``C' = C / k``, ``D' = D / k`` (the dynamic imbalance is compute that differs
  between ranks, so it shrinks with it);
* ``balance``: ``C'_r = mean(C)`` on every rank and ``D' = 0`` (perfectly balanced in every step);
* ``drop_slowest``: the ``k`` ranks with the most compute (or the given ``ranks``) are removed and
  their compute is spread evenly over the others; ``D' = D``.

Limits: transfer time includes MPI's software overhead (a perfect network removes it too); no
change of the communication pattern, of message counts or of the critical path is modelled.
``docs/imbalance.md`` lists the prediction errors against the synthetic generator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import xarray as xr

from perfkit.analysis.waits import WAIT_KINDS, breakdown

Scenario = Literal["perfect_network", "network", "compute", "balance", "drop_slowest"]
SCENARIOS = ("perfect_network", "network", "compute", "balance", "drop_slowest")
BUSY = ("compute", "transfer", "io", "other")


def whatif(ds: xr.Dataset, scenario: Scenario, k: float = 2.0, *, run: str | Sequence[str] | None = None,
           ranks: Sequence[int] | None = None) -> xr.Dataset:
    """Predict elapsed time [s] and the per-rank breakdown under ``scenario`` (module docstring).

    Returns a Dataset with ``before`` and ``after`` (run, rank, kind) [s], ``elapsed_before``,
    ``elapsed_after``, ``saving`` [s] and ``speedup`` (run), ``dynamic_imbalance`` (run) [s] and
    ``estimated`` (run: waits estimated, see ``waits.wait_split``). ``k`` is the factor of
    ``network`` and ``compute`` and the number of ranks for ``drop_slowest`` (unless ``ranks``).
    """
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; choose one of {SCENARIOS}")
    if scenario in ("network", "compute") and not k > 0:
        raise ValueError(f"k must be > 0 for scenario {scenario!r}, got {k}")
    if run is not None:
        ds = ds.sel(run=[run] if isinstance(run, str) else list(run))
    parts = breakdown(ds)
    before = parts["time"]
    elapsed = _elapsed(ds, parts["total"])
    busy = before.sel(kind=list(BUSY)).sum("kind", skipna=True).where(parts["total"].notnull())
    dynamic = (elapsed - busy.max("rank")).clip(min=0.0)
    after_busy, after_dynamic = _apply(before, dynamic, scenario, k, ranks)
    busy_after = after_busy.sum("kind", skipna=True).where(after_busy.notnull().any("kind"))
    elapsed_after = busy_after.max("rank") + after_dynamic
    after = xr.concat([after_busy, _waits(before, elapsed_after - busy_after)], dim="kind").sel(kind=before["kind"])
    result = xr.Dataset({
        "before": before, "after": after.transpose(*before.dims),
        "elapsed_before": elapsed, "elapsed_after": elapsed_after,
        "saving": elapsed - elapsed_after, "speedup": elapsed / elapsed_after,
        "dynamic_imbalance": dynamic, "estimated": parts["estimated"],
    })
    for name in ("before", "after", "elapsed_before", "elapsed_after", "saving", "dynamic_imbalance"):
        result[name].attrs["units"] = "s"
    result.attrs.update(scenario=scenario, k=float(k) if ranks is None else np.nan)
    return result


def _elapsed(ds: xr.Dataset, total: xr.DataArray) -> xr.DataArray:
    """Elapsed time per run [s]: the ``elapsed`` coordinate, else the largest per-rank total."""
    longest = total.max("rank")
    if "elapsed" not in ds.coords:
        return longest
    return ds["elapsed"].where(ds["elapsed"].notnull(), longest).reset_coords(drop=True)


def _apply(before: xr.DataArray, dynamic: xr.DataArray, scenario: str, k: float,
           ranks: Sequence[int] | None) -> tuple[xr.DataArray, xr.DataArray]:
    """Busy parts (run, rank, kind in BUSY) and dynamic imbalance after ``scenario``."""
    busy = before.sel(kind=list(BUSY))
    compute = busy.sel(kind="compute")
    if scenario == "perfect_network":
        return busy.where(busy["kind"] != "transfer", 0.0).where(busy.notnull()), dynamic
    if scenario == "network":
        return busy.where(busy["kind"] != "transfer", busy / k), dynamic
    if scenario == "compute":
        return busy.where(busy["kind"] != "compute", busy / k), dynamic / k
    if scenario == "balance":
        mean = compute.mean("rank", skipna=True)
        return busy.where(busy["kind"] != "compute", mean.where(compute.notnull())), dynamic * 0.0
    dropped = _dropped(compute, int(k), ranks)
    kept = compute.where(~dropped)
    extra = compute.where(dropped).sum("rank", skipna=True) / kept.notnull().sum("rank")
    busy = busy.where(busy["kind"] != "compute", kept + extra)
    return busy.where(~dropped), dynamic


def _dropped(compute: xr.DataArray, count: int, ranks: Sequence[int] | None) -> xr.DataArray:
    """Boolean (run, rank): the ``ranks`` given, else the ``count`` ranks with most compute per run."""
    if ranks is not None:
        return compute["rank"].isin(list(ranks)).broadcast_like(compute)
    position = xr.apply_ufunc(lambda a: np.argsort(np.argsort(-a, axis=-1, kind="stable"), axis=-1),
                              compute.fillna(-np.inf), input_core_dims=[["rank"]], output_core_dims=[["rank"]])
    return (position < count) & compute.notnull()


def _waits(before: xr.DataArray, wait: xr.DataArray) -> xr.DataArray:
    """Split ``wait`` (run, rank) between the wait kinds in each rank's measured proportion."""
    measured = before.sel(kind=list(WAIT_KINDS))
    total = measured.sum("kind")
    share = (measured / total.where(total > 0)).fillna(
        xr.DataArray([0.0, 1.0], dims="kind", coords={"kind": list(WAIT_KINDS)}))
    return (share * wait.clip(min=0.0)).where(wait.notnull())
