"""NumPy views of the profile cube and reductions over its ``function`` axis by a label per function.

On a dask-backed cube (``perfkit.load(store, chunks={"rank": n})``) the analyses never hold the
cube: ``per_rank`` reduces it one block of runs x ranks at a time to small per-rank arrays,
``over_ranks`` sums it over ranks, and ``evaluate`` computes several such reductions in one read of
the cube. No block spans more runs than a chunk of the cube: memory follows the chunk, not the
number of runs.

``group_sum`` and ``group_min`` give what ``DataArray.groupby(label).sum(skipna=True, min_count=1)``
and ``.min(skipna=True)`` give over ``function`` (labels sorted, each label's functions taken in
their order), on plain arrays whose last axis is ``function``, without xarray's per-group cost.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise
from typing import Any

import dask
import dask.array
import numpy as np
import pandas as pd
import xarray as xr

from perfkit.io.cluster import active_client


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


def with_loaded_coords(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with every coordinate in memory (they are small; a lazily opened store keeps them as dask)."""
    lazy = {name: var.compute() for name, var in ds.coords.variables.items() if var.chunks is not None}
    return ds.assign_coords(lazy) if lazy else ds


def per_rank(ds: xr.Dataset, reduce: Callable[..., np.ndarray], metrics: Sequence[str],
             functions: np.ndarray | None = None, per_run: Mapping[str, np.ndarray] | None = None) -> Any:
    """``reduce`` applied to the profile, one block of runs x ranks at a time: a small per-rank result.

    ``reduce`` takes a (run, rank, function, metric) array of ``metrics`` (in that order; only the
    ``functions`` selected by the boolean mask, default all) and returns (run, rank, ...), each
    rank's result depending on that rank's values in that run alone. With ``per_run`` (arrays whose
    first axis is ``run``, e.g. values reduced over ranks beforehand) it is called as
    ``reduce(block, parts)``, ``parts`` holding those arrays restricted to the block's runs.
    On a dask-backed cube the result is a dask array chunked as the cube along ``run`` and
    ``rank`` (``perfkit.load`` reads ``RUN_CHUNK`` runs per chunk), computed block by block: reduce
    it further or pass it to ``evaluate``; otherwise a numpy array.
    """
    index = [ds.indexes["metric"].get_loc(metric) for metric in metrics]
    profile = ds.variables["profile"].transpose("run", "rank", "function", "metric")[..., index]
    if functions is not None:
        profile = profile[:, :, np.flatnonzero(functions)]
    if profile.chunks is None:
        values = np.asarray(profile.values)
        return reduce(values) if per_run is None else reduce(values, per_run)
    data = profile.data.rechunk({2: -1, 3: -1})

    def block_reduce(block: np.ndarray, block_info: dict[Any, Any] | None = None) -> np.ndarray:
        if per_run is None:
            return reduce(block)
        start, stop = block_info[0]["array-location"][0] if block_info else (0, block.shape[0])
        return reduce(block, {name: values[start:stop] for name, values in per_run.items()})

    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sample = block_reduce(np.zeros((data.shape[0], 1, *data.shape[2:])))
    trailing = sample.shape[2:]
    layout = {"drop_axis": list(range(2 + len(trailing), 4))} if len(trailing) < 2 else {
        "new_axis": list(range(4, 2 + len(trailing)))}
    return data.map_blocks(block_reduce, dtype=sample.dtype, meta=np.empty((0,) * (2 + len(trailing)), sample.dtype),
                           chunks=(*data.chunks[:2], *((n,) for n in trailing)), **layout)


def over_ranks(ds: xr.Dataset, metrics: Sequence[str] | None = None) -> tuple[Any, Any]:
    """Sum over ranks ignoring NaN (NaN where every rank is NaN) and the number of values, (run, function, metric).

    Only ``metrics`` (in that order) when given, else every metric. Lazy (dask) on a dask-backed
    cube: pass both to ``evaluate``.
    """
    profile = ds["profile"].transpose("run", "rank", "function", "metric").variable
    if metrics is not None:
        profile = profile[..., [ds.indexes["metric"].get_loc(metric) for metric in metrics]]
    return profile.sum("rank", min_count=1).data, profile.count("rank").data


def evaluate(*arrays: Any) -> tuple[Any, ...]:
    """``arrays`` in memory, dask ones computed together (the cube is read once for all of them).

    Each dask array is written block by block into its own numpy array, so that a large per-rank
    result is never held twice (as blocks and then joined). When every dask array is chunked alike
    along its first axis (``run`` in the analyses), they are computed one chunk of it at a time:
    only the tasks of those runs are built and held, so memory does not grow with the number of
    runs. On a ``dask.distributed`` client the workers cannot write into this process's arrays:
    the results are computed there and gathered.
    """
    lazy = [i for i, array in enumerate(arrays) if isinstance(array, dask.array.Array)]
    if not lazy:
        return arrays
    out = list(arrays)
    if active_client() is not None:
        for i, value in zip(lazy, dask.compute(*[arrays[i] for i in lazy])):
            out[i] = value
        return tuple(out)
    for i in lazy:
        out[i] = np.empty(arrays[i].shape, dtype=arrays[i].dtype)
    firsts = {arrays[i].chunks[0] if arrays[i].ndim else () for i in lazy}
    bounds = np.cumsum((0, *next(iter(firsts)))) if len(firsts) == 1 and len(next(iter(firsts))) > 1 else None
    if bounds is None:
        dask.array.store([arrays[i] for i in lazy], [out[i] for i in lazy], lock=False)
        return tuple(out)
    for start, stop in pairwise(bounds):
        dask.array.store([arrays[i][start:stop] for i in lazy], [out[i][start:stop] for i in lazy], lock=False)
    return tuple(out)


def run_chunks(ds: xr.Dataset) -> list[xr.Dataset]:
    """``ds`` cut along ``run`` as its profile is chunked: one Dataset per chunk of runs (``[ds]`` in memory)."""
    chunks = ds.variables["profile"].chunks
    if chunks is None or len(chunks[0]) < 2:
        return [ds]
    bounds = np.cumsum((0, *chunks[0]))
    return [ds.isel(run=slice(start, stop)) for start, stop in pairwise(bounds)]


def by_run_chunks(ds: xr.Dataset, compute: Callable[[xr.Dataset], tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    """``compute(ds)``, on a dask-backed cube one chunk of runs at a time, its arrays joined along their first axis.

    ``compute`` returns arrays whose first axis is ``run``, each run's values depending on that run
    alone. Only the tasks of one chunk of runs are ever built, so memory does not grow with runs.
    """
    parts = [compute(sub) for sub in run_chunks(ds)]
    if len(parts) == 1:
        return parts[0]
    return tuple(np.concatenate(arrays, axis=0) for arrays in zip(*parts, strict=True))


def rank_totals(ds: xr.Dataset, run: str, *, by: str = "function", metric: str = "time",
                ranks: tuple[int, int] | None = None) -> pd.DataFrame:
    """Per-rank totals of ``metric`` per ``by`` group ("function", "call" or "kind") of one run, in its units.

    A table indexed by rank (from ``ranks[0]`` to ``ranks[1]`` inclusive when given), one column per
    group: the values of a per-rank plot. Ranks without any value of the metric are left out, and
    groups without a value on any of them; NaN where a rank has no value for a group. A lazy cube
    is read block by block, only this run's values of ``metric``.
    """
    sub = ds.sel(run=[run]) if ranks is None else ds.sel(run=[run], rank=slice(*ranks))
    sub = with_loaded_coords(sub)
    labels = sub[by].values
    if by == "function":
        groups, values = labels, evaluate(per_rank(sub, lambda block: block[..., 0], [metric]))[0][0]
    else:
        groups = np.unique(labels)
        values = evaluate(per_rank(sub, lambda block: group_sum(block[..., 0], labels)[1], [metric]))[0][0]
    exists = ~np.isnan(values).all(axis=1)
    table = pd.DataFrame(values[exists], index=pd.Index(sub["rank"].values[exists], name="rank"),
                         columns=pd.Index(groups, name=by, dtype=object))
    return table.dropna(axis=1, how="all")
