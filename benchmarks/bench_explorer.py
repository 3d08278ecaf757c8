"""Explorer interaction speed at 2,048 ranks. Writes ``benchmarks/results/explorer.json``.

An interaction is the server-side callback of one widget change in ``perfkit.explore``, with the
layout already rendered to bokeh models (as in a notebook, Voila or ``panel serve``): the new data
is computed and pushed into the existing plot. Timed on the bundled 2,048-rank synthetic run in
two MPInside modes (``slt`` and ``basic``): moving the rank slider, changing run, changing the
grouping and the metric (target: under 200 ms each; each also against the per-rank view alone,
``rank_explorer``, and against the per-rank table alone, the numbers any view of that change must compute
(``data_only``: ``rank_totals`` and its binning), in the same process, the three alternated); also the first
render, a run change while the findings tab (``perfkit.diagnose``) is shown, a box selection of ranks in the
per-rank plot (the outline a released box sends: state, markers and selection line updated), and a box
selection while the findings tab is shown (``diagnose`` on the selected ranks).

Run: ``python benchmarks/bench_explorer.py [--repeats 7]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections.abc import Callable
from pathlib import Path

import holoviews as hv
import numpy as np
import panel as pn
import param
from bokeh.models import ColumnDataSource
from timing import alternating_medians, median_seconds

import perfkit
from perfkit.analysis.cube import rank_totals
from perfkit.plots.profile import bin_ranks
from perfkit.plots.rank_figure import GEOMETRY, OUTLINE
from perfkit.widgets.explorer import explore
from perfkit.widgets.ranks import rank_explorer

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "explorer.json"
RUNS = [ROOT / "data" / "synthetic" / "2048" / f"{mode}.mpinside" for mode in ("slt", "basic")]
TARGET_MS = 200


def widget(layout: pn.Column, kind: type, name: str):
    return next(w for w in layout.select(kind) if w.label == name)


def cycle(target, values) -> Callable[[], None]:
    """A function that sets ``target.value`` to the next of ``values`` on each call (a slider as its release
    does: ``value`` and ``value_throttled``, which the explorer follows)."""
    values = itertools.cycle(values)
    return lambda: release(target, next(values))


def release(target, value) -> None:
    """Set ``target``'s value; a slider's ``value_throttled`` too, as when its handle is released."""
    target.value = value
    if "value_throttled" in target.param:
        with param.edit_constant(target):
            target.value_throttled = value


def plotted_ranks(root) -> float:
    """Largest rank drawn in the per-rank view (to check that an interaction reached the plot)."""
    return max(float(np.max(s.data["x"])) for s in root.select({"type": ColumnDataSource, "name": OUTLINE}))


def boxes(geometry: ColumnDataSource, spans) -> Callable[[], None]:
    """A function that sends the next box of ``spans`` (first, last rank; every total) on each call, as the page
    does when a box is released over the per-rank plot (into its ``geometry`` source)."""
    spans = itertools.cycle(spans)

    def send() -> None:
        lo, hi = next(spans)
        geometry.data = {"x": [lo - 0.5, hi + 0.5], "y": [-1.0, 1e30]}

    return send


def data_only(runs, label: str, values) -> Callable[[], None]:
    """The reference: the per-rank table the plot draws after the next value of ``values`` (no view), for the
    state a change of that control would give."""
    state = {"run": str(runs["run"].values[0]), "metric": "time", "by": "function", "ranks": (0, 2047)}
    key = {"ranks": "ranks", "run": "run", "group by": "by", "metric": "metric"}[label]
    values = itertools.cycle(values)

    def compute() -> None:
        state[key] = next(values)
        table = rank_totals(runs, state["run"], by=state["by"], metric=state["metric"], ranks=tuple(state["ranks"]))
        bin_ranks(table)

    return compute


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    repeats = parser.parse_args().repeats
    hv.extension("bokeh", inline=True)
    runs = perfkit.open_runs(RUNS)
    start = time.perf_counter()
    layout = explore(runs)
    root = layout.get_root()
    first_render = time.perf_counter() - start
    run = widget(layout, pn.widgets.Select, "run")
    labels = [str(r) for r in runs["run"].values]
    release(widget(layout, pn.widgets.IntRangeSlider, "ranks"), (0, 999))
    assert plotted_ranks(root) <= 999, "the slider did not reach the plot"
    # reference in the same process: the per-rank view alone (bands only: no selection markers, no tabs),
    # each interaction alternated between the two so that load from other processes hits both alike
    alone = rank_explorer(runs)
    alone.get_root()
    result = {"ranks": int(runs.sizes["rank"]), "runs": labels, "target_ms": TARGET_MS, "repeats": repeats,
              "first_render_ms": 1e3 * first_render}
    steps = {"rank_slider": (pn.widgets.IntRangeSlider, "ranks", [(0, 1023), (512, 2047), (100, 1900)]),
             "run_change": (pn.widgets.Select, "run", labels[::-1]),
             "grouping_change": (pn.widgets.RadioButtonGroup, "group by", ["kind", "call", "function"]),
             "metric_change": (pn.widgets.Select, "metric", ["calls", "time"])}
    for name, (kind, label, values) in steps.items():
        funcs = {view: cycle(widget(shown, kind, label), values)
                 for view, shown in (("explore", layout), ("alone", alone))}
        funcs["data"] = data_only(runs, label, values)
        medians = alternating_medians(funcs, repeats)
        result[f"{name}_ms"] = 1e3 * medians["explore"]
        result[f"{name}_bands_only_ms"] = 1e3 * medians["alone"]
        result[f"{name}_data_only_ms"] = 1e3 * medians["data"]
        result[f"{name}_over_bands_only"] = medians["explore"] / medians["alone"]
        result[f"{name}_over_data_only"] = medians["explore"] / medians["data"]
    spans = [(100, 400), (1000, 1900), (0, 2047)]
    (geometry,) = root.select({"type": ColumnDataSource, "name": GEOMETRY})  # in the page while its tab is shown
    result["box_selection_ms"] = 1e3 * median_seconds(boxes(geometry, spans), repeats)
    tabs = layout.select(pn.Tabs)[0]
    names = list(tabs._names)
    tabs.active = names.index("findings")
    result["box_selection_findings_tab_ms"] = 1e3 * median_seconds(boxes(geometry, spans), max(3, repeats // 2))
    widget(layout, pn.widgets.Button, "clear selection").clicks += 1  # the run changes below are on every rank
    result["run_change_findings_tab_ms"] = 1e3 * median_seconds(cycle(run, labels), max(3, repeats // 2))
    result["within_target"] = all(result[k] < TARGET_MS for k in
                                  ("rank_slider_ms", "run_change_ms", "grouping_change_ms", "metric_change_ms"))
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
