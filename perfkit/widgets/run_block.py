"""The shown run's values in memory, so that the per-rank view reads the cube once per run.

:meth:`RunBlock.table` gives what :func:`perfkit.analysis.cube.rank_totals` gives (per-rank totals of a metric
per group, over a rank range) from one run's (rank, function, metric) values held in memory: a change of rank
range, grouping or metric is computed from memory, only a change of run reads the cube (of a lazily opened
store, that run's chunks alone). The last :data:`KEEP` runs shown are kept (100,000 ranks x 13 functions x 6
metrics: 62 MB a run). :meth:`RunBlock.prefetch` reads a run in a background thread; a reader meanwhile waits
for it instead of reading the run again.

A cube opened lazily from a zarr store as it is there (``perfkit.load(store, chunks=...)``, not a part of it
nor computed from it) is read from the store's array directly, a run at a time: through dask a run of 100,000
ranks (25 chunks) took 210-340 ms, from the zarr array 60-130 ms.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from perfkit.analysis.cube import group_sum

#: Runs kept in memory (the last shown).
KEEP = 2


class RunBlock:
    """Per-rank tables of the runs of ``ds``, each run read once (the last :data:`KEEP` kept)."""

    def __init__(self, ds: xr.Dataset, keep: int = KEEP) -> None:
        self.ds = ds
        self.keep = keep
        self.ranks = np.asarray(ds["rank"].values)
        self.sorted = bool(np.all(self.ranks[1:] >= self.ranks[:-1]))
        self.metrics = {str(m): i for i, m in enumerate(ds["metric"].values)}
        self.labels = {by: np.asarray(ds[by].values) for by in ("function", "call", "kind")}
        self.stored = stored_profile(ds)
        self.positions = {str(r): i for i, r in enumerate(ds["run"].values)}
        self._runs: OrderedDict[str, np.ndarray] = OrderedDict()
        self._metrics: dict[tuple[str, str], np.ndarray] = {}
        self._lock = threading.RLock()

    def prefetch(self, run: str, metric: str, delay: float = 0.0) -> threading.Thread:
        """Read ``run``'s values of ``metric`` (:meth:`metric_values`) in a background thread, ``delay`` seconds
        from now."""
        thread = threading.Timer(delay, self.metric_values, args=(run, metric))
        thread.daemon = True
        thread.start()
        return thread

    def values(self, run: str) -> np.ndarray:
        """``run``'s profile as (rank, function, metric), read on first use."""
        with self._lock:
            return self._values(run)

    def _values(self, run: str) -> np.ndarray:
        if run in self._runs:
            self._runs.move_to_end(run)
            return self._runs[run]
        if self.stored is not None:
            block = self.stored[self.positions[run]]
        else:
            block = self.ds["profile"].sel(run=run).transpose("rank", "function", "metric").values
        self._runs[run] = np.asarray(block, dtype=np.float64)
        while len(self._runs) > self.keep:
            self._runs.popitem(last=False)
        return self._runs[run]

    def metric_values(self, run: str, metric: str) -> np.ndarray:
        """``run``'s values of ``metric`` as a contiguous (rank, function) array, made once per run and metric."""
        key = (run, metric)
        with self._lock:
            if key not in self._metrics:
                values = self._values(run)
                self._metrics = {k: v for k, v in self._metrics.items() if k[0] in self._runs}
                self._metrics[key] = np.ascontiguousarray(values[..., self.metrics[metric]])
            return self._metrics[key]

    def arrays(self, run: str, *, by: str = "function", metric: str = "time",
               ranks: tuple[int, int] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`table` as arrays: its ranks, its groups and its (rank, group) values."""
        values, labels = self.metric_values(run, metric), self.ranks
        if ranks is not None:
            if self.sorted:
                part = slice(np.searchsorted(labels, ranks[0], "left"), np.searchsorted(labels, ranks[1], "right"))
            else:
                part = (labels >= ranks[0]) & (labels <= ranks[1])
            values, labels = values[part], labels[part]
        if by == "function":
            groups = self.labels[by]
        else:
            groups, values = group_sum(values, self.labels[by])
        missing = np.isnan(values)
        exists = ~missing.all(axis=1)
        columns = ~missing[exists].all(axis=0)
        if exists.all() and columns.all():
            return labels, np.asarray(groups), values
        return labels[exists], np.asarray(groups)[columns], values[np.ix_(exists, columns)]

    def table(self, run: str, *, by: str = "function", metric: str = "time",
              ranks: tuple[int, int] | None = None) -> pd.DataFrame:
        """Per-rank totals of ``metric`` per ``by`` group of ``run``, as :func:`perfkit.analysis.cube.rank_totals`:
        indexed by rank (``ranks[0]`` to ``ranks[1]`` inclusive when given), ranks and groups without any
        value left out, NaN where a rank has no value for a group."""
        labels, groups, values = self.arrays(run, by=by, metric=metric, ranks=ranks)
        return pd.DataFrame(values, index=pd.Index(labels, name="rank"),
                            columns=pd.Index(groups, name=by, dtype=object))


def stored_profile(ds: xr.Dataset) -> Any:
    """The zarr array ``ds``'s profile was opened from, when ``ds`` holds it as stored (dims run, rank, function,
    metric, same labels), else None."""
    data = ds["profile"].data
    source = ds.encoding.get("source")
    if not (isinstance(source, str) and source.endswith(".zarr") and getattr(data, "name", "").startswith(
            "open_dataset-profile-") and ds["profile"].dims == ("run", "rank", "function", "metric")):
        return None
    import zarr

    try:
        group = zarr.open_group(source, mode="r")
        array = group["profile"]
        same = all(np.asarray(group[dim][:]).tolist() == np.asarray(ds[dim].values).tolist()
                   for dim in ("run", "rank", "function", "metric"))
    except (OSError, KeyError, ValueError):
        return None
    dims = array.attrs.get("_ARRAY_DIMENSIONS")
    as_stored = not {"scale_factor", "add_offset"} & set(array.attrs) and (
        array.fill_value is None or np.isnan(array.fill_value))  # read as xarray decodes it: NaN stays NaN
    return array if same and as_stored and list(dims or []) == ["run", "rank", "function", "metric"] else None
