"""A thin panel to explore scaling: runs, metric, function, base, normalisation and model.

A Dataset's scaling tables are kept with it (:func:`table_of`), the last ``KEPT_TABLES`` choices: on a lazily
opened store each one is a pass over the cube (100 runs of 100,000 ranks: about a minute), so that the
explorer prepares the first view's table in the background (:func:`prepare`) and a choice made again is not read
again. A table asked for while another thread computes it is waited for, not computed twice.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import pandas as pd
import panel as pn
import xarray as xr

from perfkit.analysis import models
from perfkit.analysis.scaling import scaling
from perfkit.plots import scaling as plots
from perfkit.plots.palette import label
from perfkit.widgets.warmup import shared

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

    def view(chosen, metric_name, function_name, base_text, norm, model_name):
        try:
            table = _table(data, by if labels else None, chosen, metric_name, function_name, base_text, norm)
            several = bool(labels) and len(chosen) > 1
            fit = MODELS[model_name](table) if MODELS[model_name] and not several else None
        except ValueError as exc:
            return pn.pane.Alert(str(exc), alert_type="warning")
        text = _fit_note(fit) if fit else f"Choose one {by} to fit a model." if several and MODELS[model_name] else ""
        note = pn.pane.Markdown(text, sizing_mode="stretch_width")
        plotted = [plots.time_vs_procs(table, fit=fit)]
        if metric_name == "time":
            plotted += [plots.speedup_vs_procs(table, normalised=norm), plots.efficiency_vs_procs(table)]
        return pn.Column(note, *map(_pane, plotted), sizing_mode="stretch_width")

    controls = pn.Row(pn.Column(systems, metric, function), pn.Column(base, normalise, model))
    return pn.Column(controls, pn.panel(pn.bind(view, systems, metric, function, base, normalise, model),
                                        sizing_mode="stretch_width"), sizing_mode="stretch_width")


def prepare(data: xr.Dataset, *, by: str = "system") -> None:
    """Compute the table :func:`scaling_panel` first shows for ``data`` (every run, its first metric, the whole
    run, no base, not normalised), kept for the panel (:func:`table_of`)."""
    labels, metrics = _choices(data, by)
    _table(data, by if labels else None, labels, metrics[0], ALL, "", False)


def _choices(data: xr.Dataset | pd.DataFrame, by: str) -> tuple[list[str], list[str]]:
    """The ``by`` labels and the metrics the panel offers, in its order."""
    is_ds = isinstance(data, xr.Dataset)
    labels = sorted({str(v) for v in (data[by].values if by in (data.coords if is_ds else data.columns) else [])})
    return labels, list(map(str, data["metric"].values)) if is_ds else ["time"]


_TABLES: dict[int, tuple[weakref.ref, OrderedDict[tuple, Callable[[], pd.DataFrame]]]] = {}
_TABLES_LOCK = threading.Lock()


def table_of(data: xr.Dataset, key: tuple, compute: Callable[[], pd.DataFrame]) -> pd.DataFrame:
    """A copy of ``compute()``, kept with ``data`` under ``key`` (the last ``KEPT_TABLES``); a second caller of the
    same key waits for the first's result."""
    with _TABLES_LOCK:
        for dead in [k for k, (ref, _) in _TABLES.items() if ref() is None]:
            del _TABLES[dead]
        ref, tables = _TABLES.get(id(data), (None, None))
        if ref is None or ref() is not data:
            tables = OrderedDict()
            _TABLES[id(data)] = (weakref.ref(data), tables)
        if key not in tables:
            tables[key] = shared(compute)
            while len(tables) > KEPT_TABLES:
                tables.popitem(last=False)
        tables.move_to_end(key)
        get = tables[key]
    return get().copy()


def _pane(plot: Any) -> pn.pane.HoloViews:
    """A plot that fills the width it is given."""
    return pn.pane.HoloViews(plot, sizing_mode="stretch_width", backend="bokeh")


def _table(data, by, chosen, metric, function, base_text, norm) -> pd.DataFrame:
    """The scaling table for the current widget values."""
    base = None if not base_text.strip() else float(base_text) if _is_number(base_text) else base_text.strip()
    if isinstance(data, xr.Dataset):
        def compute() -> pd.DataFrame:
            ds = data.isel(run=[str(v) in chosen for v in data[by].values]) if by else data
            if function != ALL:
                ds = ds.sel(function=[function])
            return scaling(ds, by=by, base=base, metric=metric, normalise=norm and metric == "time")

        return table_of(data, (by, tuple(chosen), metric, function, base, norm), compute)
    frame = data[data[by].astype(str).isin(chosen)] if by else data
    return scaling(frame, by=by, base=base, normalise=norm)


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
