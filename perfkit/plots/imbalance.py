"""Holoviews views of imbalance, wait-state findings and what-if results (no computation of their own).

* ``stacked_by_mode``: the seed's figures 11-14, the stacked per-rank time by function of each
  MPInside mode side by side (``perfkit.plots.profile.stacked_ranks``, binned above 2,000 ranks);
* ``rank_curve``: one group's per-rank values, rasterised with datashader above 2,000 ranks;
* ``imbalance_bars``: an imbalance statistic per group;
* ``findings_table``: the ``diagnose`` table, long text wrapped and left-aligned;
* ``whatif_bars``: mean per-rank breakdown before and after a what-if scenario, and its change.

Groups keep their colours everywhere (:mod:`perfkit.plots.palette`); plots fill their container's width.
"""

from __future__ import annotations

import html

import holoviews as hv
import pandas as pd
import xarray as xr
from pandas.io.formats.style import Styler

from perfkit import text as fmt
from perfkit.plots.palette import KIND_COLOURS, label, labelled_colours
from perfkit.plots.profile import MAX_POINTS, stacked_ranks

#: Plots fill the width of their container; heights in px.
SIZE = {"responsive": True, "min_width": 400}
#: Severity colours of the findings table (background of the severity cell).
SEVERITY = {"high": "#ff9b9b", "medium": "#ffd27f", "low": "#e6e6e6", "info": "#ffffff"}

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
        color=KIND_COLOURS["compute"], height=250, tools=["hover"], show_grid=True, **SIZE)
    if values.sizes["rank"] <= max_points:
        return curve
    from holoviews.operation.datashader import rasterize

    return rasterize(curve, line_width=1, width=800, height=250).opts(cmap="Blues", cnorm="eq_hist",
                                                                      height=250, colorbar=False, **SIZE)


def imbalance_bars(stats: xr.Dataset, run: str, *, stat: str = "imbalance_time") -> hv.Bars:
    """Bars of ``stat`` per group (in words) for one run, largest first (``stats`` from ``imbalance``)."""
    one = stats[stat].sel(run=run)
    group = one.dims[0]
    frame = one.to_series().dropna().sort_values(ascending=False).reset_index()
    named = frame.assign(**{group: frame[group].map(label)})
    return hv.Bars(named, group, hv.Dimension(stat, label=LABELS.get(stat, stat))).opts(
        color=group, cmap=labelled_colours(frame[group]), show_legend=False, height=300, xrotation=45, tools=["hover"],
        title=f"{run}: {LABELS.get(stat, stat)}", show_grid=True, **SIZE)


def findings_table(findings: pd.DataFrame) -> Styler:
    """The findings of ``diagnose`` as an HTML table: time at stake with its unit (``61 µs``, ``1.93 s``),
    share of the run, severity coloured, title and text wrapped and left-aligned."""
    shown = pd.DataFrame({
        "run": findings["run"].astype(str), "severity": findings["severity"].astype(str),
        "time at stake": findings["seconds"].map(fmt.seconds),
        "share of the run": findings["share"].map(fmt.percent),
        "title": findings["title"].map(html.escape), "text": findings["text"].map(html.escape)})
    return (shown.style.hide(axis="index")
            .map(lambda v: f"background-color: {SEVERITY.get(v, '#ffffff')}", subset=["severity"])
            .set_properties(**{"text-align": "right"}, subset=["time at stake", "share of the run"])
            .set_properties(**{"text-align": "left", "white-space": "normal"},
                            subset=["run", "severity", "title", "text"])
            .set_properties(**{"min-width": "14em", "max-width": "24em"}, subset=["title"])
            .set_properties(**{"min-width": "24em", "max-width": "60em"}, subset=["text"])
            .set_table_styles([{"selector": "td", "props": "vertical-align: top; padding: 3px 8px"},
                               {"selector": "th", "props": "text-align: left; padding: 3px 8px"}], overwrite=False))


def whatif_bars(result: xr.Dataset) -> hv.Layout:
    """What a scenario changes, per run (``result`` from ``whatif``): the mean per-rank time by kind
    (in words) before and after, stacked [s], and the change of each kind [s] (after - before) on its own scale,
    so that a small change is visible. The title gives the elapsed time before and after and the speedup."""
    both = xr.concat([result["before"], result["after"]], dim=pd.Index(["before", "after"], name="case"))
    frame = both.mean("rank").to_series().rename("seconds").reset_index()
    frame = frame[frame["seconds"] > 0].assign(case=lambda f: f["run"].astype(str) + " " + f["case"])
    change = (result["after"] - result["before"]).mean("rank").to_series().rename("change").reset_index()
    change = change[change["kind"].isin(frame["kind"])]
    order = [k for k in KIND_COLOURS if k in set(frame["kind"])]
    order += [k for k in frame["kind"].unique() if k not in KIND_COLOURS]
    tints = labelled_colours(order)
    frame, change = (f.assign(kind=f["kind"].map(label)) for f in (frame, change))  # kinds in words
    stacked = hv.Bars(frame, ["case", "kind"], "seconds").opts(
        stacked=True, height=340, tools=["hover"], title=_whatif_title(result), ylabel="mean per rank [s]",
        xlabel="", cmap=tints, legend_position="right", show_grid=True, padding=(0, (0, 0.05)), **SIZE)
    delta = hv.Bars(change, ["run", "kind"], hv.Dimension("change", label="after - before [s]")).opts(
        height=340, tools=["hover"], title="change of the mean per-rank time", color="kind", cmap=tints,
        show_legend=False, xrotation=30, show_grid=True, **SIZE)
    return (stacked.redim.values(kind=list(tints)) + delta.redim.values(kind=list(tints))).cols(2)


def _whatif_title(result: xr.Dataset) -> str:
    """Scenario, elapsed before -> after (with a unit) and speedup (with its interval) of each run."""
    lines = [f"what if: {result.attrs.get('scenario', '')}"]
    for run in result["run"].values:
        one = result.sel(run=run)
        low, high = fmt.ratio(one["speedup_low"]), fmt.ratio(one["speedup_high"])
        lines.append(f"{run}: elapsed {fmt.seconds(one['elapsed_before'])} -> {fmt.seconds(one['elapsed_after'])}, "
                     f"speedup {fmt.ratio(one['speedup'])} ({low}-{high})")
    return "\n".join(lines)
