"""Holoviews views of scaling tables and fitted models (no computation of their own).

Every function takes the result of :func:`perfkit.analysis.scaling.scaling` (a tidy table whose
``attrs`` name the value column and the curve keys), a fitted model from
:mod:`perfkit.analysis.models`, or a :func:`~perfkit.analysis.models.karp_flatt` table.
"""

from __future__ import annotations

from typing import Any

import holoviews as hv
import numpy as np
import pandas as pd

from perfkit.plots.axes import log_formatter, log_ticker
from perfkit.plots.palette import FIT, REFERENCE, colour, colours, label, labelled_colours

#: Plots fill the width of their container; heights in px.
SIZE = {"responsive": True, "height": 340, "min_width": 320}
#: Room around the data, as a fraction of each axis (keeps the end ticks and markers inside).
PADDING = (0.04, 0.08)


def _keys(table: pd.DataFrame) -> list[str]:
    """Columns that tell curves apart: the ``by`` keys and the group column."""
    group = table.attrs.get("group", "")
    return [*table.attrs.get("by", []), *([group] if group else [])]


def _curves(table: pd.DataFrame) -> list[tuple[str, pd.DataFrame, str]]:
    """(label, rows, colour) of each curve: the key in words (:func:`perfkit.plots.palette.label`), its colour
    from :mod:`perfkit.plots.palette` by the key."""
    keys = _keys(table)
    groups = [("runs", table)] if not keys else [
        (" ".join(map(str, np.atleast_1d(k))), sub) for k, sub in table.groupby(keys, sort=False)]
    tints = colours(key for key, _ in groups)
    return [(label(key), sub, tints[key]) for key, sub in groups]


def _line(sub: pd.DataFrame, y: str, name: str, ylabel: str, tint: str) -> hv.Overlay:
    """Curve and markers of one group (legend ``name``) in its colour."""
    ordered = sub.sort_values("nprocs")
    curve = hv.Curve(ordered, "nprocs", (y, ylabel), label=name).opts(color=tint)
    return curve * hv.Scatter(ordered, "nprocs", (y, ylabel), label=name).opts(size=6, color=tint)


def _log_axes(nprocs: Any, values: Any | None = None) -> dict[str, Any]:
    """Options of a plot against processes: log x ticked at the process counts, log y (if ``values``) 1-2-5."""
    opts: dict[str, Any] = {"logx": True, "xticks": log_ticker(nprocs, at_values=True),
                            "xformatter": log_formatter(), "xlabel": "processes",
                            "padding": PADDING}
    if values is not None:
        opts.update(logy=True, yticks=log_ticker(values), yformatter=log_formatter())
    return opts


def time_vs_procs(table: pd.DataFrame, *, fit: Any = None, ideal: bool = True, level: float = 0.95) -> hv.Overlay:
    """Log-log time [s] (or the metric) vs processes per curve, ideal line and optional fit band.

    The fitted formula goes in the title, not in the legend.
    """
    value = table.attrs.get("value_column", "elapsed")
    ylabel = f"{value} [{table.attrs.get('units', 's')}]"
    layers = []
    shown = [table[value].to_numpy(dtype=float)]
    for name, sub, tint in _curves(table):
        layers.append(_line(sub, value, name, ylabel, tint))
        if ideal and "ideal_speedup" in sub:
            perfect = sub["base_value"] / (sub["ideal_speedup"] if table.attrs.get("kind") == "strong" else 1)
            ideal_df = pd.DataFrame({"nprocs": sub["nprocs"], value: perfect}).sort_values("nprocs")
            shown.append(ideal_df[value].to_numpy(dtype=float))
            layers.append(hv.Curve(ideal_df, "nprocs", (value, ylabel), label=f"{name} ideal").opts(
                line_dash="dashed", color=tint, alpha=0.7))
    title = f"{value} vs processes"
    if fit is not None:
        layers.append(fit_band(fit, level=level, value=value, ylabel=ylabel))
        title += f"\n{fit.name}: T(N) = {fit.formula}"
    axes = _log_axes(table["nprocs"], np.concatenate(shown))
    return (
        hv.Overlay(layers)
        .opts(hv.opts.Curve(**SIZE), hv.opts.Scatter(logx=True, logy=True), hv.opts.Area(logx=True, logy=True))
        .opts(title=title, legend_position="right", show_grid=True, **axes, **SIZE)
    )


def fit_band(fit: Any, *, level: float = 0.95, value: str = "elapsed", ylabel: str = "elapsed [s]") -> hv.Overlay:
    """A fitted model's curve and its ``level`` confidence band over the fitted range."""
    grid = np.geomspace(fit.nprocs.min(), fit.nprocs.max(), 200)
    lo, hi = fit.interval(grid, level=level)
    frame = pd.DataFrame({"nprocs": grid, value: fit.predict(grid), "lo": lo, "hi": hi})
    band = hv.Area(frame, "nprocs", ["lo", "hi"], label=f"{fit.name} {level:.0%} band").opts(alpha=0.2, color=FIT)
    return band * hv.Curve(frame, "nprocs", (value, ylabel), label=f"{fit.name} fit").opts(color=FIT)


def efficiency_vs_procs(table: pd.DataFrame) -> hv.Overlay:
    """Parallel efficiency vs processes per curve, with the ideal 1.0."""
    layers = [_line(sub, "efficiency", name, "efficiency", tint) for name, sub, tint in _curves(table)]
    return (
        hv.Overlay([*layers, hv.HLine(1.0).opts(color=REFERENCE, line_dash="dashed")])
        .opts(hv.opts.Curve(**SIZE), hv.opts.Scatter(logx=True))
        .opts(title="parallel efficiency", legend_position="right", show_grid=True, **_log_axes(table["nprocs"]),
              **SIZE)
    )


def speedup_vs_procs(table: pd.DataFrame, *, normalised: bool = False) -> hv.Overlay:
    """Speedup (or speedup normalised to the slowest base time) vs processes, ideal dashed."""
    column = "normalised_speedup" if normalised else "speedup"
    layers = [_line(sub, column, name, column.replace("_", " "), tint) for name, sub, tint in _curves(table)]
    ideal = table[["nprocs", "ideal_speedup"]].drop_duplicates().sort_values("nprocs")
    layers.append(
        hv.Curve(ideal, "nprocs", ("ideal_speedup", column.replace("_", " ")), label="ideal").opts(
            line_dash="dashed", color=REFERENCE
        )
    )
    axes = _log_axes(table["nprocs"], np.concatenate([table[column].to_numpy(dtype=float),
                                                       ideal["ideal_speedup"].to_numpy(dtype=float)]))
    return (
        hv.Overlay(layers)
        .opts(hv.opts.Curve(**SIZE), hv.opts.Scatter(logx=True, logy=True))
        .opts(title=column.replace("_", " "), legend_position="right", show_grid=True, **axes, **SIZE)
    )


def stacked_time(table: pd.DataFrame) -> hv.Bars:
    """Time per function / kind / call stacked per process count (a grouped scaling table), groups in words."""
    group = table.attrs.get("group", "")
    if not group:
        raise ValueError("stacked_time needs a table made with group='function', 'kind' or 'call'")
    value = table.attrs.get("value_column", "elapsed")
    frame = table.assign(procs=table["nprocs"].map(lambda n: f"{n:g}"), **{group: table[group].map(label)})
    order = sorted(frame["procs"].unique(), key=float)
    return (
        hv.Bars(frame, ["procs", group], (value, f"{value} [{table.attrs.get('units', 's')}]"))
        .opts(stacked=True, tools=["hover"], xlabel="processes", title=f"{value} per {group}",
              cmap=labelled_colours(table[group].unique()), legend_position="right", show_grid=True, **SIZE)
        .redim.values(procs=order)
    )


def serial_fraction_vs_procs(kf: pd.DataFrame) -> hv.Overlay:
    """Karp-Flatt serial fraction vs processes: flat = Amdahl, rising = growing overhead."""
    known = kf.dropna(subset=["serial_fraction"])
    line = _line(known, "serial_fraction", "Karp-Flatt", "serial fraction", colour("Karp-Flatt"))
    return line.opts(hv.opts.Curve(**SIZE), hv.opts.Scatter(logx=True)).opts(
        title="Karp-Flatt metric", show_grid=True, **_log_axes(known["nprocs"]), **SIZE)
