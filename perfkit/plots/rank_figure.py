"""The per-rank view as one bokeh figure made once and updated in place: stacked bands and each rank's total.

A change of run, metric, grouping, rank range or selection replaces the data of the figure's column data
sources (one message to the page) instead of building a plot: through holoviews, building and validating
the polygons, the overlay's subplots and bokeh's recompute of the document took 130-220 ms of server time per
change at 2,048 ranks.

* Bands: one ``patches`` glyph, one polygon per group (its outline: the top of the band from the first rank to
  the last, then its bottom back). One glyph holds any number of groups, so a change of grouping is a change of
  data; ``varea_stack`` draws one renderer per group, which a change of grouping would add and remove. Colours
  come from a categorical colour mapper over the group names in words (:mod:`perfkit.plots.palette`), legend
  entries from the ``group`` column in stack order. The ranks of the outline, the same for every band, are sent
  once (:attr:`RankFigure.outline`; each band's ``xs`` refers to them in the page, :data:`SHARED_X_JS`): at
  100,000 ranks in 13 bands an update was 0.62 MB, of which 0.19 MB the same ranks 12 times more.
* Totals: each rank's total as a marker; at more ranks than :data:`MAX_MARKERS`, per bin of consecutive
  ranks the highest and the lowest total only (:func:`envelope`), so that an update never ships 100k points.
* Box and lasso (box active) report their outline in data coordinates (:data:`GEOMETRY_JS`, into the
  :attr:`RankFigure.geometry` source): the ranks selected are those whose total lies inside it
  (:func:`ranks_inside`), exactly, also where the markers are binned.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Any

import numpy as np
import pandas as pd
from bokeh.events import SelectionGeometry
from bokeh.models import (
    CategoricalColorMapper,
    ColumnDataSource,
    CustomJS,
    CustomJSExpr,
    CustomJSHover,
    CustomJSTickFormatter,
    HoverTool,
    Legend,
    LegendItem,
    Range1d,
)
from bokeh.plotting import figure

from perfkit.plots.axes import integer_ticker, unit_formatter, unit_ticker

#: At most this many markers of rank totals (more ranks: the highest and lowest total per bin of ranks).
MAX_MARKERS = 2000
#: Height of the figure [px] (its width follows its container).
HEIGHT = 420
#: Colour of the selected ranks' markers.
SELECTED_COLOUR = "crimson"
#: Name of the column data source a box or lasso writes its outline into (``x``, ``y`` in data coordinates:
#: two corners for a box, the vertices for a lasso).
GEOMETRY = "rank selection geometry"
#: Name of the column data source of the bands' outline ranks (``x``).
OUTLINE = "rank outline"
#: Written into :data:`GEOMETRY` when a box or lasso is released.
GEOMETRY_JS = """
if (!cb_obj.final) return;
const g = cb_obj.geometry;
if (g.type === "rect") target.data = {x: [g.x0, g.x1], y: [g.y0, g.y1]};
else if (g.type === "poly") target.data = {x: Array.from(g.x), y: Array.from(g.y)};
"""
#: Value with its unit (``format``; ``-`` for none): seconds as µs/ms/s/min/h, others with an SI prefix.
VALUE_JS = """
const unit = format === "-" ? "" : format;
const v = Number(value), a = Math.abs(v);
if (unit === "s") {
  const [scale, name] = a >= 7200 ? [3600, "h"] : a >= 120 ? [60, "min"] : a >= 1 || a === 0 ? [1, "s"]
    : a >= 1e-3 ? [1e-3, "ms"] : [1e-6, "µs"];
  return Number((v / scale).toPrecision(3)) + " " + name;
}
const [scale, prefix] = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"], [1, ""]].find(
  ([s]) => a >= s) || [1, ""];
const text = String(Number((v / scale).toPrecision(3)));
return unit || prefix ? text + " " + prefix + unit : text;
"""
#: Each band's ``xs``: the outline's ranks (one array for all bands).
SHARED_X_JS = "const x = outline.data.x; return this.data.group.map(() => x);"
#: Rank tick labels: whole thousands as ``20k`` (millions as ``2M``) from 10,000 up when every tick is one, else
#: the rank itself (``60000`` read ``60k``; zoomed in, ``60125`` stays exact).
RANK_TICKS_JS = """
const top = Math.max(...ticks.map(Math.abs));
const [scale, suffix] = top >= 1e6 && ticks.every(t => t % 1e6 === 0) ? [1e6, "M"]
  : top >= 1e4 && ticks.every(t => t % 1e3 === 0) ? [1e3, "k"] : [1, ""];
return tick === 0 ? "0" : String(tick / scale) + suffix;
"""
#: Index ``j`` of the band point under the cursor: the last rank (or bin) at or left of it.
_POINT_JS = """
const i = special_vars.index, xs = outline.data.x, ys = source.data.ys[i], n = xs.length / 2;
let lo = 0, hi = n - 1;
while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (xs[mid] <= special_vars.x) lo = mid; else hi = mid - 1; }
const j = lo;
"""
#: The rank under the cursor in a band (a bin of ranks when binned).
RANK_JS = _POINT_JS + """
const step = source.data.step[i];
if (step <= 1) return String(xs[j]);
const last = j + 1 < n ? xs[j + 1] - 1 : source.data.last[i];
return `${xs[j]}-${last} (mean of ${step})`;
"""
#: The value of the group under the cursor at that rank: the band's thickness.
BAND_VALUE_JS = _POINT_JS + "value = ys[j] - ys[2 * n - 1 - j];\n" + VALUE_JS


class RankFigure:
    """The figure and its sources; :meth:`show_bands`, :meth:`show_totals` and :meth:`show_selected` replace
    their data. ``selectable``: with each rank's total as markers, box/lasso selectable, and the selected ranks."""

    def __init__(self, selectable: bool = False) -> None:
        self.unit: str | None = None
        self.colours: dict[str, str] = {}
        #: The ranks of the bands' outline (there and back), and the bands: per group its outline's values.
        self.outline = ColumnDataSource({"x": []}, name=OUTLINE)
        self.bands = ColumnDataSource({"ys": [], "group": [], "step": [], "last": []})
        self.totals = ColumnDataSource({"rank": [], "total": []})
        self.selected = ColumnDataSource({"rank": [], "total": []})
        self.geometry = ColumnDataSource({"x": [], "y": []}, name=GEOMETRY)
        self.mapper = CategoricalColorMapper(factors=[], palette=[])
        tools = "pan,wheel_zoom,box_zoom,reset,save"
        self.figure = figure(height=HEIGHT, sizing_mode="stretch_width", tools=tools, x_range=Range1d(0, 1),
                             y_range=Range1d(0, 1), x_axis_label="rank", output_backend="canvas",
                             toolbar_location="right")
        self.figure.xaxis.ticker = integer_ticker()
        self.figure.xaxis.formatter = CustomJSTickFormatter(code=RANK_TICKS_JS)
        shared_x = {"expr": CustomJSExpr(args={"outline": self.outline}, code=SHARED_X_JS)}
        patches = self.figure.patches(shared_x, "ys", source=self.bands, line_width=0, fill_alpha=0.9,
                                      fill_color={"field": "group", "transform": self.mapper})
        sources = {"source": self.bands, "outline": self.outline}
        self.band_hover = HoverTool(renderers=[patches], tooltips=self._band_tips("-"), formatters={
            "@step": CustomJSHover(code=RANK_JS, args=sources), "@ys": CustomJSHover(code=BAND_VALUE_JS, args=sources)})
        self.figure.add_tools(self.band_hover)
        items = [LegendItem(label={"field": "group"}, renderers=[patches])]
        self.total_hover: HoverTool | None = None
        if selectable:
            marks = self.figure.scatter("rank", "total", source=self.totals, size=3, color="black", alpha=0.6,
                                        selection_alpha=0.6, nonselection_alpha=0.6)
            chosen = self.figure.scatter("rank", "total", source=self.selected, size=7, color=SELECTED_COLOUR,
                                         line_color="white")
            self.total_hover = HoverTool(renderers=[marks, chosen], tooltips=self._total_tips("-"),
                                         formatters={"@total": CustomJSHover(code=VALUE_JS)})
            self.figure.add_tools(self.total_hover)
            self.figure.add_tools("box_select", "lasso_select")
            box, lasso = self.figure.tools[-2:]
            box.update(renderers=[marks], continuous=False)
            lasso.update(renderers=[marks], continuous=False)
            self.figure.toolbar.active_drag = box
            self.figure.js_on_event(SelectionGeometry, CustomJS(args={"target": self.geometry}, code=GEOMETRY_JS))
            items += [LegendItem(label="rank total", renderers=[marks]),
                      LegendItem(label="selected", renderers=[chosen])]
        self.figure.add_layout(Legend(items=items, location="top_left"), "right")

    @staticmethod
    def _band_tips(unit: str) -> list[tuple[str, str]]:
        return [("group", "@group"), ("rank", "@step{rank}"), ("value", f"@ys{{{unit}}}")]

    @staticmethod
    def _total_tips(unit: str) -> list[tuple[str, str]]:
        return [("rank", "@rank"), ("total", f"@total{{{unit}}}")]

    def show_bands(self, table: pd.DataFrame, *, step: int, last: int, colours: dict[str, str], title: str,
                   unit: str, ylabel: str) -> None:
        """Stack ``table`` (rank or first rank of each bin x group in words, bottom group first, NaN as 0) in
        ``colours`` (group in words -> colour); ``step`` ranks a bin, ``last`` the last rank in view."""
        outline, bands = stack_patches(table, step=step, last=last)
        if len(outline) != len(self.outline.data["x"]) or not np.array_equal(outline, self.outline.data["x"]):
            self.outline.data = {"x": outline}  # before the bands: the page draws them with these ranks
        self.bands.data = bands
        if colours != self.colours:
            self.colours = colours
            self.mapper.update(factors=list(colours), palette=list(colours.values()))
        self.figure.title.text = title
        if unit != self.unit:  # new tick models only when the unit changes
            self.unit = unit
            tip = unit if unit not in ("", "1") else "-"
            doc = self.figure.document
            # a model set walks every model of the document (bokeh's recompute): once for both, not per model
            with doc.models.freeze() if doc is not None else nullcontext():
                self.figure.yaxis.update(formatter=unit_formatter(unit), ticker=unit_ticker(unit),
                                         axis_label=ylabel)
            self.band_hover.tooltips = self._band_tips(tip)
            if self.total_hover is not None:
                self.total_hover.tooltips = self._total_tips(tip)
        elif self.figure.yaxis[0].axis_label != ylabel:
            self.figure.yaxis.axis_label = ylabel

    def show_totals(self, ranks: np.ndarray, totals: np.ndarray, top: float,
                    span: tuple[float, float] | None = None) -> None:
        """Markers of ``totals`` per rank (:func:`envelope` of them), and ranges over ``span`` (smallest and largest
        rank in view; default those of ``ranks``) and 0 .. ``top`` (the highest point of bands and totals)."""
        if len(self.totals.selected.indices):
            self.totals.selected.indices = []
        if self.total_hover is not None:
            keep = envelope(totals)
            self.totals.data = {"rank": ranks[keep], "total": totals[keep]}
        if span is None:
            span = (float(ranks.min()), float(ranks.max())) if ranks.size else (0.0, 1.0)
        lo, hi = span
        pad = max(0.5, 0.01 * (hi - lo))
        self.figure.x_range.update(start=lo - pad, end=hi + pad, reset_start=lo - pad, reset_end=hi + pad)
        high = 1.05 * top if top > 0 else 1.0
        self.figure.y_range.update(start=0.0, end=high, reset_start=0.0, reset_end=high)

    def show_selected(self, ranks: np.ndarray, totals: np.ndarray) -> None:
        """Markers of the selected ranks (:func:`envelope` of them)."""
        if ranks.size == 0 and len(self.selected.data["rank"]) == 0:
            return
        keep = envelope(totals)
        self.selected.data = {"rank": ranks[keep], "total": totals[keep]}


def stack_patches(table: pd.DataFrame, *, step: int = 1,
                  last: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """The bands' outline, the ranks of ``table`` (rows) there and back, and the data of the bands' ``patches``: per
    column of ``table`` (groups bottom first) ``ys``, the band's top there and its bottom back (NaN as 0)."""
    values = np.nan_to_num(table.to_numpy(dtype=float))
    top = values.cumsum(axis=1)
    bottom = top - values
    x = table.index.to_numpy(dtype=np.float32)  # ranks (first of a bin): exact up to 2^24, half the bytes sent
    outline = np.concatenate([x, x[::-1]])
    groups = [str(g) for g in table.columns]
    last = int(x[-1]) if last is None and x.size else (last or 0)
    ys = [np.concatenate([top[:, i], bottom[::-1, i]]) for i in range(len(groups))]
    return outline, {"ys": ys, "group": groups, "step": [int(step)] * len(groups), "last": [int(last)] * len(groups)}


def envelope(values: np.ndarray, max_markers: int = MAX_MARKERS) -> np.ndarray:
    """Indices of ``values`` to draw: every one up to ``max_markers``, else per bin of consecutive values
    (``2 * len / max_markers`` of them, rounded up) the highest and the lowest, in order."""
    n = values.size
    step = bin_size(n, max_markers)
    if step == 1:
        return np.arange(n)
    pad = (-n) % step
    starts = np.arange(0, n, step)
    high = np.pad(values, (0, pad), constant_values=-np.inf).reshape(-1, step).argmax(axis=1)
    low = np.pad(values, (0, pad), constant_values=np.inf).reshape(-1, step).argmin(axis=1)
    return np.unique(np.concatenate([starts + high, starts + low]))


def bin_size(n: int, max_markers: int = MAX_MARKERS) -> int:
    """Consecutive values per bin of :func:`envelope` of ``n`` values (1: every one drawn)."""
    return 1 if n <= max_markers else math.ceil(n / (max_markers // 2))


def ranks_inside(ranks: np.ndarray, totals: np.ndarray, x: Any, y: Any) -> np.ndarray:
    """The ``ranks`` whose point (rank, total) lies inside a box (``x``, ``y``: two corners) or a lasso (its
    vertices, three or more), in data coordinates."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size < 2 or x.size != y.size:
        return ranks[:0]
    px, py = ranks.astype(float), np.asarray(totals, dtype=float)
    inside = (px >= x.min()) & (px <= x.max()) & (py >= y.min()) & (py <= y.max())
    if x.size > 2:
        inside[inside] = in_polygon(px[inside], py[inside], x, y)
    return ranks[inside]


def in_polygon(px: np.ndarray, py: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Whether each point (``px``, ``py``) lies inside the polygon of vertices (``x``, ``y``) (even-odd rule: a
    ray to the right crosses its edges an odd number of times); vectorised over the points, one pass per edge."""
    inside = np.zeros(px.size, dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in range(x.size):
            x0, y0, x1, y1 = x[i - 1], y[i - 1], x[i], y[i]
            crosses = (y1 > py) != (y0 > py)
            inside ^= crosses & (px < x0 + (py - y0) * (x1 - x0) / (y1 - y0))
    return inside
