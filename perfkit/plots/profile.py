"""Per-rank views of the profile cube (the stacked "time by function across ranks" area plot)."""

from __future__ import annotations

import holoviews as hv
import numpy as np
import pandas as pd
import xarray as xr

from perfkit.analysis.cube import rank_totals
from perfkit.plots.axes import unit_formatter, unit_ticker
from perfkit.plots.palette import KIND_COLOURS, colours, label

#: Above this many ranks in view, ranks are binned (mean per bin) so the plot stays responsive.
MAX_POINTS = 2000


def rank_table(ds: xr.Dataset, run: str, *, by: str = "function", metric: str = "time",
               ranks: tuple[int, int] | None = None, max_points: int = MAX_POINTS) -> pd.DataFrame:
    """Per-rank totals of ``metric`` grouped by ``by`` ("function", "call" or "kind") for one run.

    Columns are the groups, the index is the rank (or the first rank of each bin when binned).
    Groups that are NaN on every rank are left out; NaN counts as 0 in the stack.
    """
    return bin_ranks(rank_totals(ds, run, by=by, metric=metric, ranks=ranks), max_points)[0]


def bin_ranks(table: pd.DataFrame, max_points: int = MAX_POINTS) -> tuple[pd.DataFrame, int]:
    """``table`` (rank x group) with at most ``max_points`` rows: above that, the mean of each bin of ``step``
    consecutive rows (NaN skipped), indexed by the bin's first rank; returns it and ``step`` (1: unbinned)."""
    step = bin_step(len(table), max_points)
    if step > 1:
        means = bin_means(table.to_numpy(dtype=float), step)
        table = pd.DataFrame(means, index=table.index.to_numpy()[::step], columns=table.columns)
    table.index.name = "rank"
    return table, step


def bin_step(rows: int, max_points: int = MAX_POINTS) -> int:
    """Rows per bin so that ``rows`` rows make at most ``max_points`` bins (1: unbinned)."""
    return int(np.ceil(rows / max_points)) if rows > max_points else 1


def bin_means(values: np.ndarray, step: int) -> np.ndarray:
    """Mean of each bin of ``step`` consecutive rows of ``values`` (rows x columns), NaN skipped (NaN where a
    bin's column has no value); the last bin holds the rows left."""
    sums, counts = bin_sums(values, step)
    return means_of(sums, counts)


def bin_sums(values: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray]:
    """Sum (NaN skipped) and number of values of each bin of ``step`` consecutive rows of ``values`` (rows x
    columns); the last bin holds the rows left."""
    present = ~np.isnan(values)
    return bin_add(np.where(present, values, 0.0), step), bin_add(present, step, np.int64)


def bin_add(values: np.ndarray, step: int, dtype: type | None = None) -> np.ndarray:
    """Sum of each bin of ``step`` consecutive rows of ``values`` (the last bin holds the rows left), as ``dtype``.

    The rows are added in order within a bin (as ``np.add.reduceat``, which took 7 ms for 100,000 rows x 13
    columns against 1 ms for this sum over the middle axis of the rows cut into bins)."""
    full = values.shape[0] // step * step
    head = values[:full].reshape(full // step, step, *values.shape[1:]).sum(axis=1, dtype=dtype)
    if full == values.shape[0]:
        return head
    return np.concatenate([head, values[full:].sum(axis=0, dtype=dtype, keepdims=True)])


def bin_groups(values: np.ndarray, labels: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per bin of ``step`` consecutive rows of ``values`` (rows x columns, ``labels`` the group of each column)
    and per group (sorted, as :func:`numpy.unique`): the sum of its columns' values (NaN skipped) and the number
    of rows where one of its columns has a value. ``sums / counts`` is :func:`bin_means` of the per-row group
    sums (:func:`perfkit.analysis.cube.group_sum`)."""
    groups, members = group_members(labels)
    sums, _ = bin_sums(values, step)
    return groups, group_columns(sums, members), bin_presence(~np.isnan(values), members, step)


def group_members(labels: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Sorted distinct ``labels`` and the columns (indices into ``labels``) of each."""
    groups, inverse = np.unique(np.asarray(labels), return_inverse=True)
    return groups, [np.flatnonzero(inverse.reshape(-1) == g) for g in range(groups.size)]


def group_columns(sums: np.ndarray, members: list[np.ndarray]) -> np.ndarray:
    """Sum of each group's columns of ``sums`` (rows x columns), added in column order."""
    out = np.zeros((sums.shape[0], len(members)))
    for g, columns in enumerate(members):
        for column in columns:
            out[:, g] += sums[:, column]
    return out


def bin_presence(present: np.ndarray, members: list[np.ndarray], step: int) -> np.ndarray:
    """Per bin of ``step`` rows of ``present`` (rows x columns [x more]) and per group: the number of rows where
    one of the group's columns is present, (bin, group [, more])."""
    if not members:
        return np.zeros((-(-present.shape[0] // step), 0, *present.shape[2:]), dtype=np.int64)
    has = np.stack([present[:, columns].any(axis=1) for columns in members], axis=1)
    return bin_add(has, step, np.int64)


def row_totals(zeroed: np.ndarray) -> np.ndarray:
    """Sum over the second axis of ``zeroed`` (rows x columns [x more], no NaN), the columns added in order: the
    same numbers whichever columns of zeros are left out or the axes after it."""
    out = np.zeros((zeroed.shape[0], *zeroed.shape[2:]))
    for column in range(zeroed.shape[1]):
        out += zeroed[:, column]
    return out


def means_of(sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``sums / counts``, NaN where ``counts`` is 0."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


#: Groups at the bottom of every stack, in this order: compute, then the kinds in their usual order.
BOTTOM = ("Compute", *KIND_COLOURS)


def band_order(ds: xr.Dataset, by: str = "function", metric: str = "time") -> list[str]:
    """Every ``by`` group of ``ds`` in stack order, bottom first, the same for each run and rank range shown:
    :func:`stack_order` of the functions' totals of ``metric`` over every run and rank of ``ds``."""
    totals = ds["profile"].sel(metric=metric).sum(("run", "rank"), skipna=True).transpose("function").values
    return stack_order(ds[by].values, np.asarray(totals, dtype=float))


def stack_order(labels: np.ndarray, totals: np.ndarray) -> list[str]:
    """The distinct ``labels`` (one per function) in stack order, bottom first: compute first (then the kinds
    in :data:`BOTTOM` order), the others by the sum of their functions' ``totals``, largest first (ties by name)."""
    frame = pd.DataFrame({"group": np.asarray(labels).astype(str), "total": np.asarray(totals, dtype=float)})
    frame = frame.groupby("group", sort=False)["total"].sum().reset_index()
    frame["pinned"] = frame["group"].map({name: i for i, name in enumerate(BOTTOM)}).fillna(len(BOTTOM))
    frame = frame.sort_values(["pinned", "total", "group"], ascending=[True, False, True], kind="stable")
    return frame["group"].tolist()


def stacked_ranks(ds: xr.Dataset, run: str | None = None, *, by: str = "function", metric: str = "time",
                  ranks: tuple[int, int] | None = None, max_points: int = MAX_POINTS) -> hv.Overlay:
    """Stacked area of ``metric`` per rank, one band per ``by`` group (seconds for time).

    Each group keeps its colour (:mod:`perfkit.plots.palette`) and its place in the stack (:func:`band_order`,
    compute at the bottom), named in words in the legend (:func:`perfkit.plots.palette.label`); the plot fills
    its container's width.
    """
    run = run if run is not None else str(ds["run"].values[0])
    table = rank_table(ds, run, by=by, metric=metric, ranks=ranks, max_points=max_points).fillna(0.0)
    order = [name for name in band_order(ds, by, metric) if name in table.columns]
    unit = str(ds["units"].sel(metric=metric).item())
    tints = colours(ds[by].values)
    areas = [hv.Area((table.index, table[col]), "rank", hv.Dimension(metric, unit=unit), label=label(col)).opts(
        color=tints[str(col)]) for col in order]
    binned = len(table) < len(ds["profile"].sel(run=run).dropna("rank", how="all")["rank"]) and ranks is None
    title = f"{run}: {metric} per rank by {by}" + (" (ranks binned, mean per bin)" if binned else "")
    return hv.Area.stack(hv.Overlay(areas)).opts(
        hv.opts.Area(alpha=0.85, line_width=0, tools=["hover"]),
        hv.opts.Overlay(title=title, responsive=True, min_width=400, height=380, legend_position="right",
                        show_grid=True, yformatter=unit_formatter(unit), yticks=unit_ticker(unit)),
    )
