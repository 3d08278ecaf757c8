"""Per-rank views of the profile cube (the stacked "time by function across ranks" area plot)."""

from __future__ import annotations

import holoviews as hv
import numpy as np
import pandas as pd
import xarray as xr

from perfkit.analysis.cube import rank_totals
from perfkit.plots.palette import colours

#: Above this many ranks in view, ranks are binned (mean per bin) so the plot stays responsive.
MAX_POINTS = 2000


def rank_table(ds: xr.Dataset, run: str, *, by: str = "function", metric: str = "time",
               ranks: tuple[int, int] | None = None, max_points: int = MAX_POINTS) -> pd.DataFrame:
    """Per-rank totals of ``metric`` grouped by ``by`` ("function", "call" or "kind") for one run.

    Columns are the groups, the index is the rank (or the first rank of each bin when binned).
    Groups that are NaN on every rank are left out; NaN counts as 0 in the stack.
    """
    table = rank_totals(ds, run, by=by, metric=metric, ranks=ranks)
    if len(table) > max_points:
        step = int(np.ceil(len(table) / max_points))
        first_ranks = table.index.to_numpy()
        table = table.groupby(np.arange(len(table)) // step * step).mean()
        table.index = first_ranks[table.index]
    table.index.name = "rank"
    return table


def stacked_ranks(ds: xr.Dataset, run: str | None = None, *, by: str = "function", metric: str = "time",
                  ranks: tuple[int, int] | None = None, max_points: int = MAX_POINTS) -> hv.Overlay:
    """Stacked area of ``metric`` per rank, one band per ``by`` group (seconds for time).

    Each group keeps its colour (:mod:`perfkit.plots.palette`); the plot fills its container's width.
    """
    run = run if run is not None else str(ds["run"].values[0])
    table = rank_table(ds, run, by=by, metric=metric, ranks=ranks, max_points=max_points).fillna(0.0)
    order = table.sum().sort_values(ascending=False).index
    unit = str(ds["units"].sel(metric=metric).item())
    tints = colours(ds[by].values)
    areas = [hv.Area((table.index, table[col]), "rank", hv.Dimension(metric, unit=unit), label=str(col)).opts(
        color=tints[str(col)]) for col in order]
    binned = len(table) < len(ds["profile"].sel(run=run).dropna("rank", how="all")["rank"]) and ranks is None
    title = f"{run}: {metric} per rank by {by}" + (" (ranks binned, mean per bin)" if binned else "")
    return hv.Area.stack(hv.Overlay(areas)).opts(
        hv.opts.Area(alpha=0.85, line_width=0, tools=["hover"]),
        hv.opts.Overlay(title=title, responsive=True, min_width=400, height=380, legend_position="right",
                        show_grid=True),
    )
