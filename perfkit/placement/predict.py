"""Close the placement loop: predict a run's elapsed time under a new placement, then check it.

Model (stated once): the run's *transfer* time scales with the cost model's estimated
communication time of its own traffic (``PlacementCost.time_s``, per-level latency and bandwidth)
under the new placement relative to the old one; compute and waits follow the bulk-synchronous
what-if model of ``perfkit.analysis.whatif`` (scenario ``network`` with ``k = old / new``).
This is a first-order estimate: it ignores contention changes that the cost model does not see.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import xarray as xr

from perfkit.analysis.whatif import whatif
from perfkit.placement.placement import Placement
from perfkit.placement.strategies import place


def predict_elapsed(ds: xr.Dataset, new: Placement, *, old: Placement | None = None, run: str | None = None,
                    quantity: str = "bytes") -> xr.Dataset:
    """What-if result for running ``run`` of ``ds`` placed as ``new`` instead of ``old`` (default: block).

    Returns the ``whatif`` Dataset (``elapsed_before``, ``elapsed_after`` [s], ...) with attributes
    ``comm_time_old_s``, ``comm_time_new_s`` (cost-model estimates) and ``network_factor``.
    """
    run = run if run is not None else _single_run(ds)
    if old is None:
        old = place(ds, new.topology, strategy="block", run=run, quantity=quantity)
    traffic = ds["traffic"].sel(run=run, quantity=quantity)
    before, after = old.cost(traffic).time_s, new.cost(traffic).time_s
    if not after > 0:
        raise ValueError("the new placement has no inter-rank communication cost; nothing to scale")
    result = whatif(ds, "network", k=before / after, run=run)
    return result.assign_attrs(comm_time_old_s=before, comm_time_new_s=after, network_factor=before / after)


def compare_measured(prediction: xr.Dataset, measured: xr.Dataset, run: str | None = None) -> pd.DataFrame:
    """Predicted vs measured elapsed time [s] of the re-placed run, with the prediction error [%]."""
    run = run if run is not None else _single_run(measured)
    elapsed = float(measured["elapsed"].sel(run=run).values)
    if elapsed != elapsed:  # NaN: fall back on the slowest rank's total time
        elapsed = float(measured["profile"].sel(run=run, metric="time").sum("function").max().values)
    row: dict[str, Any] = {
        "elapsed_before_s": float(prediction["elapsed_before"].values.squeeze()),
        "predicted_s": float(prediction["elapsed_after"].values.squeeze()),
        "measured_s": elapsed,
    }
    row["error_pct"] = 100 * (row["predicted_s"] / elapsed - 1)
    return pd.DataFrame([row], index=[run])


def _single_run(ds: xr.Dataset) -> str:
    runs = [str(r) for r in ds["run"].values]
    if len(runs) != 1:
        raise ValueError(f"the data hold {len(runs)} runs {runs}; choose one with run=...")
    return runs[0]
