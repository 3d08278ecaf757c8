"""Call sites as horizontal bars: the sites with most MPI time, most at the top, coloured by their MPI function.

Takes the table of :func:`perfkit.widgets.callsites.site_table` (one row per site, most time first); no computation
of its own. Colours are the function's everywhere (:mod:`perfkit.plots.palette`, the per-rank view's); the legend
names the functions in words; hovering a bar gives its time, share of MPI time, calls and imbalance in words
(:mod:`perfkit.text`).
"""

from __future__ import annotations

import holoviews as hv
import pandas as pd
from bokeh.models import HoverTool

from perfkit import text as fmt
from perfkit.plots.axes import time_ticker, unit_formatter
from perfkit.plots.palette import label, labelled_colours

#: Sites drawn at most.
TOP = 20
#: Height of one bar's row and of the plot's frame, title and axis around the bars [px].
ROW, FRAME = 26, 110


def callsite_bars(table: pd.DataFrame, *, title: str = "", top: int = TOP,
                  cmap: dict[str, str] | None = None) -> hv.Bars:
    """The ``top`` first sites of ``table`` as bars of their time [s], the first at the top, coloured by MPI function
    (``cmap``: colours keyed by the function in words, :func:`perfkit.plots.palette.labelled_colours`; default those
    of the functions drawn)."""
    shown = table.head(top)
    frame = pd.DataFrame({
        "site": shown["site"].astype(str), "time": shown["time"].astype(float),
        "function": shown["function"].map(label),
        "time_words": shown["time"].map(fmt.seconds), "share_words": shown["share"].map(fmt.percent),
        "calls_words": shown["calls"].map(fmt.count), "imbalance_words": shown["imbalance"].map(fmt.ratio),
    })
    hover = HoverTool(tooltips=[("site", "@site"), ("MPI function", "@function"), ("time", "@time_words"),
                                ("share of MPI time", "@share_words"), ("calls", "@calls_words"),
                                ("max / mean per rank", "@imbalance_words")])
    vdims = [hv.Dimension("time", label="MPI time", unit="s"), "function", "time_words", "share_words",
             "calls_words", "imbalance_words"]
    bars = hv.Bars(frame, hv.Dimension("site", label="call site"), vdims)
    return bars.redim.values(site=frame["site"].tolist()[::-1]).opts(  # bokeh lays categories out bottom up
        invert_axes=True, color="function", cmap=cmap or labelled_colours(shown["function"]), show_legend=True,
        legend_position="right", tools=[hover], default_tools=["save", "pan", "wheel_zoom", "box_zoom", "reset"],
        responsive=True, min_width=500, height=FRAME + ROW * len(frame), show_grid=True, title=title,
        xformatter=unit_formatter("s"), xticks=time_ticker(), xlabel="", ylabel="MPI time", padding=(0, (0, 0.05)))
