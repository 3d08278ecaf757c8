"""NumPy views of the profile cube and reductions over its ``function`` axis by a label per function.

``group_sum`` and ``group_min`` give what ``DataArray.groupby(label).sum(skipna=True, min_count=1)``
and ``.min(skipna=True)`` give over ``function`` (labels sorted, each label's functions taken in
their order), on plain arrays whose last axis is ``function``, without xarray's per-group cost.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import xarray as xr


def metric_values(ds: xr.Dataset, metric: str) -> np.ndarray:
    """``profile`` values of one metric as an array (run, rank, function), in the metric's units."""
    values = ds.variables["profile"].isel(metric=ds.indexes["metric"].get_loc(metric))
    return values.transpose("run", "rank", "function").values


def run_coords(ds: xr.Dataset) -> dict[str, xr.Variable]:
    """The coordinates of ``ds`` on ``run`` alone (run label, nprocs, elapsed...)."""
    return {name: variable for name, variable in ds.coords.variables.items() if variable.dims == ("run",)}


def zero_nan(values: np.ndarray) -> np.ndarray:
    """``values`` with NaN replaced by 0 (infinities kept)."""
    return np.where(np.isnan(values), 0.0, values)


def nan_sum(values: np.ndarray, axis: int | tuple[int, ...]) -> np.ndarray:
    """Sum over ``axis`` ignoring NaN; NaN where every value is NaN (``min_count=1``)."""
    return np.where(np.isnan(values).all(axis=axis), np.nan, np.sum(zero_nan(values), axis=axis))


def group_sum(values: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct ``labels`` and the sum over the last axis per label, NaN where a label has no value."""
    return _per_label(values, labels, nan_sum)


def group_min(values: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct ``labels`` and the smallest value over the last axis per label, ignoring NaN."""
    return _per_label(values, labels, np.fmin.reduce)


def _per_label(values: np.ndarray, labels: np.ndarray,
               reduce: Callable[..., np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct ``labels`` and ``reduce(part, axis=-1)`` of each label's part of the last axis."""
    groups, inverse = np.unique(labels, return_inverse=True)
    if groups.size == 0:  # no function carries a label (e.g. a run without blocking MPI calls)
        return groups, np.empty((*values.shape[:-1], 0), dtype=np.float64)
    return groups, np.stack([reduce(values[..., inverse == g], axis=-1) for g in range(groups.size)], axis=-1)
