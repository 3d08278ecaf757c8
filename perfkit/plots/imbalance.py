"""Holoviews views of imbalance, wait-state findings and what-if results (no computation of their own).

* ``stacked_by_mode``: the seed's figures 11-14, the stacked per-rank time by function of each
  MPInside mode side by side (``perfkit.plots.profile.stacked_ranks``, binned above 2,000 ranks);
* ``rank_curve``: one group's per-rank values, rasterised with datashader above 2,000 ranks;
* ``imbalance_bars``: an imbalance statistic per group;
* ``findings_table``: the ``diagnose`` table;
* ``whatif_bars``: mean per-rank breakdown before and after a what-if scenario.
"""

from __future__ import annotations

import holoviews as hv
import pandas as pd
import xarray as xr

from perfkit.plots.profile import MAX_POINTS, stacked_ranks

LABELS = {"imbalance_time": "max - mean [s]", "load_balance": "load balance (mean/max)",
          "percent_imbalance": "(max - mean)/max [%]", "max_over_mean": "max / mean"}


def stacked_by_mode(ds: xr.Dataset, runs: list[str] | None = None, *, by: str = "function",
                    ranks: tuple[int, int] | None = None) -> hv.Layout:
    """Stacked per-rank time of each run in ``runs`` (default: all), one panel per run, one column."""
    runs = runs if runs is not None else [str(r) for r in ds["run"].values]
    panels = [stacked_ranks(ds, run, by=by, ranks=ranks) for run in runs]
    return hv.Layout(panels).cols(1).opts(shared_axes=True)


def rank_curve(values: xr.DataArray, *, label: str = "compute [s]", max_points: int = MAX_POINTS) -> hv.Element:
    """Per-rank values of one run (dims: rank) as a curve; rasterised above ``max_points`` ranks."""
    values = values.dropna("rank")
    curve = hv.Curve((values["rank"].values, values.values), "rank", label).opts(
        width=800, height=250, tools=["hover"], show_grid=True)
    if values.sizes["rank"] <= max_points:
        return curve
    from holoviews.operation.datashader import rasterize

    return rasterize(curve, line_width=1, width=800, height=250).opts(cmap="Blues", cnorm="eq_hist",
                                                                      width=800, height=250, colorbar=False)


def imbalance_bars(stats: xr.Dataset, run: str, *, stat: str = "imbalance_time") -> hv.Bars:
    """Bars of ``stat`` per group for one run, largest first (``stats`` from ``imbalance``)."""
    one = stats[stat].sel(run=run)
    group = one.dims[0]
    frame = one.to_series().dropna().sort_values(ascending=False).reset_index()
    return hv.Bars(frame, group, hv.Dimension(stat, label=LABELS.get(stat, stat))).opts(
        width=700, height=300, xrotation=45, tools=["hover"], title=f"{run}: {LABELS.get(stat, stat)}")


def findings_table(findings: pd.DataFrame) -> hv.Table:
    """The findings of ``diagnose`` as a table (seconds at stake rounded to ms)."""
    shown = findings.assign(seconds=findings["seconds"].round(3), share=(100 * findings["share"]).round(1))
    return hv.Table(shown[["run", "severity", "seconds", "share", "title", "text"]]).opts(width=1000, height=320)


def whatif_bars(result: xr.Dataset) -> hv.Bars:
    """Mean per-rank time by kind before and after a scenario, per run (``result`` from ``whatif``)."""
    both = xr.concat([result["before"], result["after"]], dim=pd.Index(["before", "after"], name="case"))
    frame = both.mean("rank").to_series().rename("seconds").reset_index()
    frame = frame[frame["seconds"] > 0].assign(case=lambda f: f["run"].astype(str) + " " + f["case"])
    title = f"what if: {result.attrs.get('scenario', '')}"
    return hv.Bars(frame, ["case", "kind"], "seconds").opts(
        stacked=True, width=800, height=340, tools=["hover"], title=title, xrotation=45, ylabel="mean per rank [s]")
