"""A panel explorer of the per-rank profile: run, rank range, grouping and metric selectors."""

from __future__ import annotations

import panel as pn
import xarray as xr

from perfkit.plots.profile import stacked_ranks

GROUPINGS = ("function", "call", "kind")


def rank_explorer(ds: xr.Dataset, run: str | None = None) -> pn.Column:
    """Stacked per-rank area of one run with widgets to pick run, rank range, grouping and metric."""
    runs = [str(r) for r in ds["run"].values]
    ranks = ds["rank"].values
    run_select = pn.widgets.Select(name="run", options=runs, value=run or runs[0])
    by_select = pn.widgets.RadioButtonGroup(name="group by", options=list(GROUPINGS), value="function")
    metric_select = pn.widgets.Select(name="metric", options=[str(m) for m in ds["metric"].values], value="time")
    rank_slider = pn.widgets.IntRangeSlider(name="ranks", start=int(ranks.min()), end=int(ranks.max()),
                                            value=(int(ranks.min()), int(ranks.max())), step=1)

    def view(run: str, by: str, metric: str, rank_range: tuple[int, int]) -> pn.pane.HoloViews:
        return pn.pane.HoloViews(stacked_ranks(ds, run, by=by, metric=metric, ranks=rank_range))

    plot = pn.bind(view, run_select, by_select, metric_select, rank_slider)
    controls = pn.Row(run_select, metric_select, by_select)
    return pn.Column(controls, rank_slider, plot, sizing_mode="stretch_width")
