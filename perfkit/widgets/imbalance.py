"""A panel explorer of imbalance: run, rank range and grouping selectors over the imbalance plots.

The per-rank stacked view is ``perfkit.widgets.ranks.rank_explorer``; this adds the imbalance
statistics of the chosen ranks, the per-rank compute curve and the findings
(:func:`perfkit.widgets.findings.findings_list`).
"""

from __future__ import annotations

import panel as pn
import xarray as xr

from perfkit.analysis.diagnosis import diagnose
from perfkit.analysis.imbalance import imbalance, rank_values
from perfkit.plots.imbalance import imbalance_bars, rank_curve
from perfkit.widgets.findings import findings_list
from perfkit.widgets.ranks import GROUPINGS, rank_explorer

STATS = ("imbalance_time", "load_balance", "percent_imbalance", "max_over_mean")


def imbalance_view(ds: xr.Dataset, run: str, by: str, stat: str, rank_range: tuple[int, int]) -> pn.Column:
    """Imbalance bars and the per-rank compute curve of ``run`` restricted to ``rank_range``."""
    sub = ds.sel(run=[run], rank=slice(*rank_range))
    stats = imbalance(sub, by=by)
    return pn.Column(pn.pane.HoloViews(imbalance_bars(stats, run, stat=stat), sizing_mode="stretch_width"),
                     pn.pane.HoloViews(rank_curve(rank_values(sub).sel(run=run)), sizing_mode="stretch_width"),
                     sizing_mode="stretch_width")


def imbalance_explorer(ds: xr.Dataset, run: str | None = None) -> pn.Tabs:
    """Tabs: imbalance (run, grouping, statistic, rank range), per-rank stack, findings of the run."""
    runs = [str(r) for r in ds["run"].values]
    ranks = ds["rank"].values
    run_select = pn.widgets.Select(name="run", options=runs, value=run or runs[0])
    by_select = pn.widgets.RadioButtonGroup(name="group by", options=list(GROUPINGS), value="kind")
    stat_select = pn.widgets.Select(name="statistic", options=list(STATS), value="imbalance_time")
    rank_slider = pn.widgets.IntRangeSlider(name="ranks", start=int(ranks.min()), end=int(ranks.max()),
                                            value=(int(ranks.min()), int(ranks.max())), step=1,
                                            tooltips=False)
    view = pn.bind(lambda r, b, s, rr: imbalance_view(ds, r, b, s, rr), run_select, by_select, stat_select,
                   rank_slider.param.value_throttled)
    findings = pn.bind(lambda r: findings_list(ds, diagnose(ds, run=r)), run_select)
    controls = pn.Column(pn.Row(run_select, stat_select, by_select), rank_slider)
    return pn.Tabs(("imbalance", pn.Column(controls, view, sizing_mode="stretch_width")),
                   ("per rank", rank_explorer(ds, run)),
                   ("findings", pn.Column(run_select, findings, sizing_mode="stretch_width")),
                   sizing_mode="stretch_width")
