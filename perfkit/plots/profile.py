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
    starts = np.arange(0, values.shape[0], step)
    present = ~np.isnan(values)
    sums = np.add.reduceat(np.where(present, values, 0.0), starts, axis=0) if starts.size else values[:0]
    counts = np.add.reduceat(present, starts, axis=0) if starts.size else values[:0]
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
