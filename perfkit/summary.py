"""One row per run of a canonical Dataset, in words a reader scans first: ``ds.perf.summary()``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

#: The summary's shares of time [%], each the sum of these kinds (``perfkit.model.KINDS``).
SHARES = {
    "compute %": ("compute",),
    "transfer %": ("transfer",),
    "waiting %": ("wait_late_sender", "wait_late_receiver", "wait_collective"),
    "I/O and other %": ("io", "other"),
}


def summary(ds: xr.Dataset) -> pd.DataFrame:
    """Per run: ranks, nodes and ranks per node (integers, ``<NA>`` where the file does not say), the
    profiling mode, the elapsed time [s] and the mean time per rank [s] over all functions, and the
    share of all ranks' time [%] in compute, transfer, waiting and I/O with other calls."""
    time = ds["profile"].sel(metric="time")
    by_kind = time.groupby("kind").sum().sum("rank").reindex(kind=[k for ks in SHARES.values() for k in ks],
                                                             fill_value=0.0)
    total = by_kind.sum("kind").values
    ranks = ds["profile"].sel(metric="time").notnull().any("function").sum("rank").values
    table = pd.DataFrame({
        "ranks": _integers(ds["nprocs"].values if "nprocs" in ds.coords else ranks),
        "nodes": _integers(ds["nodes"].values) if "nodes" in ds.coords else pd.NA,
        "ranks per node": _integers(ds["ppn"].values) if "ppn" in ds.coords else pd.NA,
        "mode": ds["mode"].values.astype(str) if "mode" in ds.coords else "",
        "elapsed [s]": pd.array(ds["elapsed"].values, dtype="Float64") if "elapsed" in ds.coords else pd.NA,
        "time per rank [s]": total / np.maximum(ranks, 1),
    }, index=pd.Index(ds["run"].values.astype(str), name="run"))
    for column, kinds in SHARES.items():
        part = by_kind.sel(kind=list(kinds)).sum("kind").values
        table[column] = np.divide(100 * part, total, out=np.full(total.shape, np.nan), where=total > 0)
    return table


def _integers(values: np.ndarray) -> pd.api.extensions.ExtensionArray:
    """Counts as integers, ``<NA>`` where unknown (never ``48.0`` or ``NaN``)."""
    return pd.array(np.asarray(values, dtype=float), dtype="Float64").round().astype("Int64")
