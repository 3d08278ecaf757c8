"""A thin panel to explore scaling: runs, metric, function, base, normalisation and model.

A Dataset's scaling tables are kept with it (:func:`perfkit.widgets.kept.kept_with`), the last ``KEPT_TABLES``
choices: on a lazily opened store each one is a pass over the cube (100 runs of 100,000 ranks: about a minute), so
that the explorer prepares the first view's table in the background (:func:`prepare`) and a choice made again is
not read again. A table asked for while another thread computes it is waited for, not computed twice; a table
not kept yet is computed in a worker thread while the panel shows a placeholder
(:class:`perfkit.widgets.offloop.OffLoop`): the page's other controls work meanwhile.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import panel as pn
import xarray as xr

from perfkit.analysis import models
from perfkit.analysis.scaling import scaling
from perfkit.plots import scaling as plots
from perfkit.plots.palette import label
from perfkit.widgets.kept import Once, kept_with, pending
from perfkit.widgets.offloop import OffLoop, Redraw

MODELS = {"none": None, "Amdahl": models.fit_amdahl, "comm": models.fit_comm_model, "PMNF": models.fit_pmnf}
ALL = "(whole run)"
#: Scaling tables kept per Dataset (each a row per run).
KEPT_TABLES = 32


def scaling_panel(data: xr.Dataset | pd.DataFrame, *, by: str = "system") -> pn.Column:
    """Widgets + plots over a multi-run Dataset (or a DataFrame with nprocs/elapsed columns).

    The plots (time, speedup, efficiency against processes) fill the width, one under the other.
    """
    is_ds = isinstance(data, xr.Dataset)
    labels, metrics = _choices(data, by)
    systems = pn.widgets.MultiChoice(label=by, options=labels, value=labels)
    functions = {ALL: ALL, **{label(f): str(f) for f in data["function"].values}} if is_ds else [ALL]
    metric = pn.widgets.Select(label="metric", options=metrics)
    function = pn.widgets.Select(label="function", options=functions)
    base = pn.widgets.TextInput(label="base (process count or run label; empty = smallest)")
    normalise = pn.widgets.Checkbox(label="normalise to the slowest base time")
    model = pn.widgets.Select(label="model", options=list(MODELS))

    def draw(args: tuple, model_name: str) -> Any:
        try:
            table = _table(*args)
            several = bool(labels) and len(args[2]) > 1
            fit = MODELS[model_name](table) if MODELS[model_name] and not several else None
        except ValueError as exc:
            return pn.pane.Alert(str(exc), alert_type="warning")
        text = _fit_note(fit) if fit else f"Choose one {by} to fit a model." if several and MODELS[model_name] else ""
        note = pn.pane.Markdown(text, sizing_mode="stretch_width")
        plotted = [plots.time_vs_procs(table, fit=fit)]
        if args[3] == "time":
            plotted += [plots.speedup_vs_procs(table, normalised=args[5]), plots.efficiency_vs_procs(table)]
        return pn.Column(note, *map(_pane, plotted), sizing_mode="stretch_width")

    def view(chosen, metric_name, function_name, base_text, norm, model_name, _redraws):
        args = (data, by if labels else None, chosen, metric_name, function_name, base_text, norm)
        return later.view(lambda: draw(args, model_name), pending(_kept(*args)))

    redraw = Redraw()
    later = OffLoop(redraw.again, "the scaling table")
    controls = pn.Row(pn.Column(systems, metric, function), pn.Column(base, normalise, model))
    return pn.Column(controls, pn.panel(pn.bind(view, systems, metric, function, base, normalise, model,
                                                redraw.param.count), sizing_mode="stretch_width"),
                     sizing_mode="stretch_width")


def prepare(data: xr.Dataset, *, by: str = "system") -> None:
    """Compute the table :func:`scaling_panel` first shows for ``data`` (every run, its first metric, the whole
    run, no base, not normalised), kept for the panel; a table that cannot be computed is left for the panel,
    which says why."""
    labels, metrics = _choices(data, by)
    try:
        _table(data, by if labels else None, labels, metrics[0], ALL, "", False)
    except ValueError:
        pass


def _choices(data: xr.Dataset | pd.DataFrame, by: str) -> tuple[list[str], list[str]]:
    """The ``by`` labels and the metrics the panel offers, in its order."""
    is_ds = isinstance(data, xr.Dataset)
    labels = sorted({str(v) for v in (data[by].values if by in (data.coords if is_ds else data.columns) else [])})
    return labels, list(map(str, data["metric"].values)) if is_ds else ["time"]


def _pane(plot: Any) -> pn.pane.HoloViews:
    """A plot that fills the width it is given."""
    return pn.pane.HoloViews(plot, sizing_mode="stretch_width", backend="bokeh")


def _table(data, by, chosen, metric, function, base_text, norm) -> pd.DataFrame:
    """The scaling table for the current widget values (a copy of the one kept with a Dataset)."""
    kept = _kept(data, by, chosen, metric, function, base_text, norm)
    if kept is not None:
        return kept().copy()
    frame = data[data[by].astype(str).isin(chosen)] if by else data
    return scaling(frame, by=by, base=_base(base_text), normalise=norm)


def _kept(data, by, chosen, metric, function, base_text, norm) -> Once[pd.DataFrame] | None:
    """The scaling table of a Dataset for these widget values, as kept with it (None for a DataFrame)."""
    if not isinstance(data, xr.Dataset):
        return None
    base = _base(base_text)

    def compute() -> pd.DataFrame:
        ds = data.isel(run=[str(v) in chosen for v in data[by].values]) if by else data
        if function != ALL:
            ds = ds.sel(function=[function])
        return scaling(ds, by=by, base=base, metric=metric, normalise=norm and metric == "time")

    return kept_with(data, "scaling tables", KEPT_TABLES).cell((by, tuple(chosen), metric, function, base, norm),
                                                               compute)


def _base(text: str) -> float | str | None:
    """The base typed: a process count, a run label, or None (empty: the smallest)."""
    return None if not text.strip() else float(text) if _is_number(text) else text.strip()


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _fit_note(fit) -> str:
    """One line per fit: formula, quality numbers, warnings."""
    q = fit.quality
    lines = [f"**{fit.name}**: T(N) = {fit.formula} s; R^2 = {q.r2:.3f}, LOO error = {q.loo_rel_error:.1%}"]
    if hasattr(fit, "p"):
        lines.append(f"P = {fit.p:.4f} (95% CI {fit.p_ci[0]:.4f}-{fit.p_ci[1]:.4f})")
    lines += [f"- {w}" for w in q.warnings]
    return "\n\n".join(lines)
