"""The explorer's timeline tab: a trace's ranks x time picture at a resolution the user picks.

Shown for a Dataset with a ``timeline`` variable (``perfkit.io.otf2``). The resolution control offers
the divisors of the stored number of time bins (each column then sums consecutive bins; reading the
trace again with a larger ``timeline_bins`` gives finer ones); the picture is
:func:`perfkit.plots.timeline.timeline_image`, of cells (:func:`timeline_cells`) the explorer sums off its event
loop.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import panel as pn
import xarray as xr

from perfkit.plots.timeline import Cells, cells, timeline_image
from perfkit.text import seconds
from perfkit.widgets.ranks import WIDGET_WIDTH


def resolutions(nbins: int) -> list[int]:
    """Column counts the timeline can be shown at: the divisors of its ``nbins`` bins, most first."""
    return [d for d in range(nbins, 0, -1) if nbins % d == 0]


def timeline_control(ds: xr.Dataset) -> pn.widgets.Select:
    """The resolution control: how many time columns to draw (default: every stored bin)."""
    options = resolutions(ds.sizes["time_bin"])
    return pn.widgets.Select(label="time columns", options=options, value=options[0], width=WIDGET_WIDTH)


def timeline_view(ds: xr.Dataset, run: str, columns: int) -> Any:
    """The timeline of ``run`` in ``columns`` time columns, with a sentence saying what a cell is."""
    return timeline_plot(timeline_cells(ds, run, columns), run)


def timeline_cells(ds: xr.Dataset, run: str, columns: int) -> Cells | str:
    """What :func:`timeline_view` draws: ``run``'s timeline summed into cells (:func:`perfkit.plots.timeline.cells`;
    no panel or holoviews object: any thread may compute it), or a sentence saying why there is none."""
    timeline = ds["timeline"].sel(run=run)
    if not np.isfinite(timeline.values).any():
        return f"Run {run} has no timeline (it was not read from a trace)."
    width = float(ds["time_bin_width"].sel(run=run))
    return cells(timeline.dropna("rank", how="all"), width, columns)


def timeline_plot(found: Cells | str, run: str) -> Any:
    """The picture of :func:`timeline_cells`' result for ``run`` with its sentence, or the sentence alone."""
    if isinstance(found, str):
        return pn.pane.Markdown(found)
    block = f"blocks of {found.rank_step:,} ranks" if found.rank_step > 1 else "each rank"
    note = (f"Each cell: what {block} did most in {seconds(found.width)}; hover a cell for every kind's share "
            "of its time.")
    image = timeline_image(found, f"{run}: ranks over time")
    return pn.Column(pn.pane.Markdown(note), pn.pane.HoloViews(image, sizing_mode="stretch_width"),
                     sizing_mode="stretch_width")
