"""The POP efficiency hierarchy as a table (POP's layout and colours) and across a scaling series.

* ``pop_table``: rows indented by depth in the hierarchy, one column per run, values 0-1
  (``efficiency``, ``depth``, ``label`` columns name each row);
* ``pop_styler``: that table as a ``pandas`` Styler coloured on POP's scale: green >= 0.8, amber
  0.6-0.8, red < 0.6; ``m`` after a value marks it modelled, ``n/a`` unavailable (notes in the
  caption);
* ``pop_plot``: each efficiency against the process count, one line per metric (holoviews).
"""

from __future__ import annotations

import html

import holoviews as hv
import numpy as np
import pandas as pd
import xarray as xr
from bokeh.palettes import Dark2
from pandas.io.formats.style import Styler

from perfkit.analysis.pop import HIERARCHY, LABELS
from perfkit.plots.axes import log_formatter, log_ticker

#: POP's traffic-light scale: (lower bound, colour); values below the last bound are red.
GREEN, AMBER = 0.8, 0.6
COLOURS = {"green": "#9be39b", "amber": "#ffd27f", "red": "#ff9b9b", "none": "#e6e6e6"}
INDENT = "\u00a0\u00a0\u00a0\u00a0"
#: One colour per efficiency (the same in every POP plot), not the traffic-light colours of the bands.
METRIC_COLOURS = dict(zip((name for name, _ in HIERARCHY), ("#000000", *Dark2[8])))


def pop_table(pop: xr.Dataset) -> pd.DataFrame:
    """Efficiencies (rows, top down, indented label) x runs (columns), from ``pop_metrics``."""
    runs = [str(r) for r in pop["run"].values]
    rows = {INDENT * depth + LABELS[name]: pop[name].values.astype(float) for name, depth in HIERARCHY}
    return pd.DataFrame.from_dict(rows, orient="index", columns=runs).rename_axis("efficiency")


def colour(value: float) -> str:
    """POP colour name of an efficiency: green >= 0.8, amber >= 0.6, red below, none for NaN."""
    if not np.isfinite(value):
        return "none"
    return "green" if value >= GREEN else "amber" if value >= AMBER else "red"


def pop_styler(pop: xr.Dataset) -> Styler:
    """The POP table coloured red-amber-green, modelled values marked ``m``, unavailable ``n/a``."""
    table = pop_table(pop)
    names = [name for name, _ in HIERARCHY]
    evidence = pop["evidence"].sel(efficiency=names).transpose("efficiency", "run").values
    shown = pd.DataFrame([[_cell(v, e) for v, e in zip(row, ev)] for row, ev in zip(table.values, evidence)],
                         index=table.index, columns=table.columns)
    background = table.map(lambda v: f"background-color: {COLOURS[colour(v)]}; text-align: center")
    caption = _caption(pop)
    return (shown.style.apply(lambda _: background, axis=None)
            .set_caption(caption)
            .set_table_styles([{"selector": "th.row_heading", "props": "text-align: left; white-space: pre"},
                               {"selector": "caption", "props": "caption-side: bottom; text-align: left"}]))


def _cell(value: float, evidence: str) -> str:
    if evidence == "unavailable" or not np.isfinite(value):
        return "n/a"
    return f"{value:.2f}" + (" m" if evidence == "modelled" else "")


def _caption(pop: xr.Dataset) -> str:
    """Legend and the distinct notes of modelled and unavailable values."""
    notes: dict[str, list[str]] = {}
    for run in pop["run"].values:
        for name, _ in HIERARCHY:
            source = str(pop["evidence"].sel(run=run, efficiency=name).item())
            if source != "measured":
                note = f"{source}: {pop['note'].sel(run=run, efficiency=name).item()}"
                notes.setdefault(note, []).append(f"{run} {LABELS[name].lower()}")
    legend = "green >= 0.8, amber 0.6-0.8, red < 0.6; m = modelled, n/a = unavailable."
    lines = [legend] + [f"{note} ({len(where)} values)" for note, where in notes.items()]
    return "<br>".join(html.escape(line) for line in lines)


def pop_plot(pop: xr.Dataset, metrics: tuple[str, ...] | None = None) -> hv.Overlay:
    """Efficiencies against the process count across the runs (a scaling series), one curve each."""
    metrics = metrics or tuple(name for name, _ in HIERARCHY)
    nprocs = pop["nprocs"].values.astype(float) if "nprocs" in pop.coords else np.arange(pop.sizes["run"]) + 1.0
    order = np.argsort(nprocs, kind="stable")
    curves = []
    for name in metrics:
        values = pop[name].values.astype(float)[order]
        frame = pd.DataFrame({"nprocs": nprocs[order], "efficiency": values, "metric": LABELS[name]})
        curve = hv.Curve(frame, "nprocs", ["efficiency", "metric"], label=LABELS[name]).opts(
            color=METRIC_COLOURS[name])
        curves.append(curve * hv.Scatter(curve).opts(size=6, color=METRIC_COLOURS[name]))
    values = np.concatenate([pop[name].values.astype(float) for name in metrics])
    top = max(1.05, float(np.nanmax(values, initial=0.0)) * 1.04)  # computation scalability may exceed 1
    bands = hv.HSpan(GREEN, top).opts(color=COLOURS["green"], alpha=0.25) * \
        hv.HSpan(AMBER, GREEN).opts(color=COLOURS["amber"], alpha=0.25) * \
        hv.HSpan(0, AMBER).opts(color=COLOURS["red"], alpha=0.2)
    return (bands * hv.Overlay(curves)).opts(
        hv.opts.Curve(logx=True, ylim=(0, top), tools=["hover"], xlabel="processes", ylabel="efficiency"),
        hv.opts.Overlay(legend_position="right", title="POP efficiencies across the series", responsive=True,
                        min_width=400, height=380, logx=True, xticks=log_ticker(nprocs, at_values=True),
                        xformatter=log_formatter(), padding=(0.04, 0), show_grid=True))
