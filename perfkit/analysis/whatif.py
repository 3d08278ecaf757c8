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
* ``balance``: ``C'_r = mean(C)`` on every rank, ``D' = D`` (the static imbalance goes; whether
  the dynamic one goes too is unknown, see below); ``max_r B'_r`` is capped at ``max_r B_r``
  (balancing cannot lengthen a synchronised run; a rank with little compute and a long "transfer"
  is a rank whose waiting the wait split left in transfer), so the saving is at most
  ``max_r C_r - mean_r C_r``;
* ``drop_slowest``: the ``k`` ranks with the most compute (or the given ``ranks``) are removed and
  their compute is spread evenly over the others; ``D' = D``.

The dynamic imbalance is the model's unknown: a profile cannot say whether it is compute that
moves between ranks from step to step, serialisation (ranks waiting on each other in turn),
interference, ranks sharing cores or transfers that vary. ``speedup`` is the estimate above;
``speedup_low`` and ``speedup_high`` take ``D'`` at the two ends of what the scenario could do to
it: ``D' = D`` (untouched) and ``D' = 0`` for ``balance`` and ``drop_slowest``,
``D' = D / k`` for ``compute``, ``D' = max(0, D - (1 - 1/k) max_r X_r)`` for ``network`` (and
``D - max_r X_r`` for ``perfect_network``: waits caused by transfers are taken to be at most the
busiest transferring rank's transfer time). Estimated waits (``estimated``) add the error of the
wait split, which the interval does not cover.

A trace answers ``perfect_network``, ``network`` (``k >= 1``) and ``balance`` by its replay
(``perfkit.io.otf2.replay``): its events replayed with every MPI call's own time (duration less
waits) scaled by ``1 / k`` (0 for a perfect network), or with every rank computing the mean, the
waits for a partner's compute kept where the trace put them. The saving is the replay as measured
less the replay of the scenario (``replay_network``, ``replay_balanced``). For the ``k`` the reader
replayed (1, 2, 4, 8, a perfect network) it is one answer (``speedup_low = speedup_high``); between
them the runtime, convex and non-decreasing in ``1 / k``, lies at or below the chord of its
neighbours (the point prediction, and the low end of the speed-up) and at or above the lines
through the neighbouring pairs (the high end). ``basis`` says ``replayed`` (``modelled`` for a
profile, a trace read before these replays, ``k < 1``, ``compute`` and ``drop_slowest``).

Limits: transfer time includes MPI's software overhead (a perfect network removes it too); no
change of the communication pattern, of message counts or of the critical path is modelled.
``docs/imbalance.md`` lists the prediction errors against the synthetic generator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import xarray as xr

from perfkit.analysis.cube import with_loaded_coords
from perfkit.analysis.waits import WAIT_KINDS, breakdown

Scenario = Literal["perfect_network", "network", "compute", "balance", "drop_slowest"]
SCENARIOS = ("perfect_network", "network", "compute", "balance", "drop_slowest")
BUSY = ("compute", "transfer", "io", "other")


def whatif(ds: xr.Dataset, scenario: Scenario, k: float = 2.0, *, run: str | Sequence[str] | None = None,
           ranks: Sequence[int] | None = None) -> xr.Dataset:
    """Predict elapsed time [s] and the per-rank breakdown under ``scenario`` (module docstring).

    Returns a Dataset with ``before`` and ``after`` (run, rank, kind) [s], ``elapsed_before``,
    ``elapsed_after``, ``saving`` [s], ``speedup``, ``speedup_low`` and ``speedup_high`` (run),
    ``dynamic_imbalance`` (run) [s],
    ``estimated`` (run: waits estimated, see ``waits.wait_split``) and ``basis`` (run: ``replayed`` where
    a trace's replay gave the answer, else ``modelled``). ``k`` is the factor of
    ``network`` and ``compute`` and the number of ranks for ``drop_slowest`` (unless ``ranks``).
    A dask-backed cube is reduced to the per-rank breakdown block by block.
    """
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; choose one of {SCENARIOS}")
    if scenario in ("network", "compute") and not k > 0:
        raise ValueError(f"k must be > 0 for scenario {scenario!r}, got {k}")
    ds = with_loaded_coords(ds)
    if run is not None:
        ds = ds.sel(run=[run] if isinstance(run, str) else list(run))
    parts = breakdown(ds)
    before = parts["time"]
    elapsed = _elapsed(ds, parts["total"])
    busy = before.sel(kind=list(BUSY)).sum("kind", skipna=True).where(parts["total"].notnull())
    dynamic = (elapsed - busy.max("rank")).clip(min=0.0)
    after_busy, after_dynamic = _apply(before, dynamic, scenario, k, ranks)
    busy_after = after_busy.sum("kind", skipna=True).where(after_busy.notnull().any("kind"))
    longest = busy_after.max("rank")
    if scenario == "balance":  # balancing cannot lengthen the run: a longer busiest rank is waiting counted as transfer
        longest = np.fmin(longest, np.fmin(busy.max("rank"), elapsed - after_dynamic))
    elapsed_after = longest + after_dynamic
    after = xr.concat([after_busy, _waits(before, elapsed_after - busy_after)], dim="kind").sel(kind=before["kind"])
    kept, gone = _dynamic_range(before, dynamic, scenario, k)
    low, high = elapsed / (longest + kept), elapsed / (longest + gone)
    replayed = _replayed(ds, scenario, k) if ranks is None else None
    exact = xr.zeros_like(elapsed, dtype=bool)
    if replayed is not None:
        point, slowest, fastest = (elapsed - saving for saving in replayed)  # elapsed after, and its two ends
        exact = point.notnull()
        elapsed_after = point.where(exact, elapsed_after)
        after = xr.concat([after_busy, _waits(before, elapsed_after - busy_after)], dim="kind").sel(kind=before["kind"])
        low, high = (elapsed / slowest).where(exact, low), (elapsed / fastest).where(exact, high)
    basis = xr.where(exact, "replayed", "modelled")
    result = xr.Dataset({
        "before": before, "after": after.transpose(*before.dims),
        "elapsed_before": elapsed, "elapsed_after": elapsed_after,
        "saving": elapsed - elapsed_after, "speedup": elapsed / elapsed_after,
        "speedup_low": low, "speedup_high": high,
        "dynamic_imbalance": dynamic, "estimated": parts["estimated"], "basis": basis,
    })
    for name in ("before", "after", "elapsed_before", "elapsed_after", "saving", "dynamic_imbalance"):
        result[name].attrs["units"] = "s"
    for name in ("speedup", "speedup_low", "speedup_high"):
        result[name].attrs["units"] = "1"
    result.attrs.update(scenario=scenario, k=float(k) if ranks is None else np.nan)
    return result


def _replayed(ds: xr.Dataset, scenario: str,
              k: float) -> tuple[xr.DataArray, xr.DataArray, xr.DataArray] | None:
    """Per run, the saving [s] a trace's replays give for ``scenario``: the point and the smallest and
    largest it can be (NaN for a run without replays); None when no replay answers the scenario."""
    if "replay_network" not in ds.data_vars or scenario not in ("perfect_network", "network", "balance"):
        return None
    times = ds["replay_network"]
    measured = times.sel(transfer_scale=1.0)
    if scenario == "balance":
        saving = measured - ds["replay_balanced"]
        return saving, saving, saving
    scale = 0.0 if scenario == "perfect_network" else 1.0 / k
    if not 0.0 <= scale <= 1.0:
        return None
    scales = times["transfer_scale"].values.astype(float)
    order = np.argsort(scales)
    s, t = scales[order], times.values[:, order]  # (run, scale), scales rising
    hi = int(np.clip(np.searchsorted(s, scale), 1, s.size - 1))
    lo = hi - 1
    if np.isclose(s[hi], scale) or np.isclose(s[lo], scale):
        at = t[:, hi if np.isclose(s[hi], scale) else lo]
        lowest = highest = at
    else:  # convex: at or below the chord, at or above the lines through the neighbouring pairs
        highest = t[:, lo] + (t[:, hi] - t[:, lo]) * (scale - s[lo]) / (s[hi] - s[lo])
        bounds = [t[:, lo]]
        if lo >= 1:
            bounds.append(t[:, lo] + (t[:, lo] - t[:, lo - 1]) * (scale - s[lo]) / (s[lo] - s[lo - 1]))
        if hi + 1 < s.size:
            bounds.append(t[:, hi] + (t[:, hi + 1] - t[:, hi]) * (scale - s[hi]) / (s[hi + 1] - s[hi]))
        lowest = np.minimum(np.max(bounds, axis=0), highest)
    def saving(after: np.ndarray) -> xr.DataArray:
        return measured - xr.DataArray(after, dims="run", coords={"run": times["run"]})
    return saving(highest), saving(highest), saving(lowest)


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
        return busy.where(busy["kind"] != "compute", mean.where(compute.notnull())), dynamic
    dropped = _dropped(compute, int(k), ranks)
    kept = compute.where(~dropped)
    extra = compute.where(dropped).sum("rank", skipna=True) / kept.notnull().sum("rank")
    busy = busy.where(busy["kind"] != "compute", kept + extra)
    return busy.where(~dropped), dynamic


def _dynamic_range(before: xr.DataArray, dynamic: xr.DataArray, scenario: str,
                   k: float) -> tuple[xr.DataArray, xr.DataArray]:
    """The dynamic imbalance [s] after ``scenario`` at the two ends of the unknown (run).

    Returns (D' if the scenario leaves it, D' if it goes with what the scenario changes): the low
    and the high end of the speed-up. A profile cannot say what the dynamic imbalance is made of
    (compute that moves between ranks, serialisation, interference, transfers that vary).
    """
    transfer = before.sel(kind="transfer").max("rank").fillna(0.0)
    if scenario == "perfect_network":
        return dynamic, (dynamic - transfer).clip(min=0.0)
    if scenario == "network":
        return dynamic, (dynamic - transfer * (1 - 1 / k)).clip(min=0.0)
    if scenario == "compute":
        return dynamic, dynamic / k
    return dynamic, dynamic * 0.0


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
        xr.DataArray([float(k == "wait_collective") for k in WAIT_KINDS], dims="kind",
                     coords={"kind": list(WAIT_KINDS)}))
    return (share * wait.clip(min=0.0)).where(wait.notnull())
