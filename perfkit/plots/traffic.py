"""Holoviews views of traffic matrices: rank x rank and node x node heatmaps, locality bars.

Heatmaps use a log colour scale with zero pairs left blank. Up to ``MAX_DENSE`` ranks a matrix
is drawn cell by cell (``hv.Image``); above, its non-zero pairs are rasterised by datashader
into a fixed-size image (summing the pairs that share a pixel), so nothing N x N is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import holoviews as hv
import numpy as np
import pandas as pd
import scipy.sparse as sps
import xarray as xr

from perfkit.analysis.traffic import Locality, inter_group_share, traffic_matrix
from perfkit.model import TRAFFIC_UNITS
from perfkit.plots.axes import PREFIXED, integer_ticker, log_ticker, log_unit_formatter

MAX_DENSE = 2048
#: Size of the data area [px] (square, whatever the width of the colour bar's labels).
SIZE = {"frame_width": 340, "frame_height": 340}
UNITS = {"bytes": "B", "count": "messages", "time": "s"}


def _window(ranks: slice | tuple[int, int] | None, n: int) -> tuple[int, int]:
    if ranks is None:
        return 0, n
    lo, hi, step = (ranks if isinstance(ranks, slice) else slice(*ranks)).indices(n)
    if step != 1 or hi <= lo:
        raise ValueError(f"ranks must be a non-empty contiguous range, got {ranks}")
    return lo, hi


def _image(matrix: sps.csr_matrix, lo: int, kdims: list[str], vdim: str, pixels: int) -> hv.Element:
    """Matrix rows on the y axis (top = first row), columns on x; zeros blank."""
    n = matrix.shape[0]
    bounds = (lo - 0.5, lo - 0.5, lo + n - 0.5, lo + n - 0.5)
    if n <= MAX_DENSE:
        dense = matrix.toarray()
        dense[dense == 0] = np.nan
        return hv.Image(np.flipud(dense), bounds=bounds, kdims=kdims, vdims=[vdim])
    import datashader as ds
    from holoviews.operation.datashader import rasterize

    coo = matrix.tocoo()
    frame = pd.DataFrame({kdims[0]: coo.col + lo, kdims[1]: coo.row + lo, vdim: coo.data})
    points = hv.Points(frame, kdims=kdims, vdims=[vdim])
    image = rasterize(
        points,
        aggregator=ds.sum(vdim),
        width=pixels,
        height=pixels,
        x_range=(bounds[0], bounds[2]),
        y_range=(bounds[1], bounds[3]),
        dynamic=False,
    )
    return image.redim(**{image.vdims[0].name: vdim})


def style_heatmap(element: hv.Element, title: str, clabel: str, clim: tuple[float, float] | None) -> hv.Element:
    """A traffic heatmap's look: log colour (a bar labelled in the quantity's unit, ``10 MB``), first row on top,
    ticks at whole ranks or groups only.

    A matrix whose non-zero values are all equal is coloured on a decade either side of that value.
    """
    low, high = element.range(element.vdims[0])
    if clim is None and low is not None and np.isfinite(low) and low == high and low > 0:
        clim = (low / 10, high * 10)
    opts: dict[str, Any] = {"clim": clim} if clim else {}
    shown = clim or (low, high)
    if shown[0] is not None and np.all(np.isfinite(shown)):
        opts["cticks"] = log_ticker(shown)
    return element.opts(
        cformatter=log_unit_formatter(TRAFFIC_UNITS.get(element.vdims[0].name, "")),
        xticks=integer_ticker(),
        yticks=integer_ticker(),
        logz=True,
        colorbar=True,
        cmap="viridis",
        invert_yaxis=True,
        tools=["hover"],
        title=title,
        clabel=clabel,
        clipping_colors={"NaN": "white"},
        **opts,
        **SIZE,
    )


def colour_label(quantity: str) -> str:
    """The colour bar's title: the quantity alone where its ticks carry the unit (``10 MB``), else with its unit
    (``count [messages]``)."""
    return quantity if TRAFFIC_UNITS.get(quantity) in PREFIXED else f"{quantity} [{UNITS.get(quantity, '')}]"


def heatmap(
    traffic: Any,
    *,
    ranks: slice | tuple[int, int] | None = None,
    run: int | str | None = None,
    quantity: str = "bytes",
    pixels: int = 400,
    title: str = "",
) -> hv.Element:
    """Sender x receiver heatmap (log colour), optionally of the contiguous rank range ``ranks``.

    The axes span ``ranks`` only, also beside another heatmap (no axes shared in a layout).
    Above ``MAX_DENSE`` ranks the non-zero pairs are rasterised into ``pixels`` x ``pixels``.
    Raises ValueError when no pair in view has a non-zero value (nothing to colour).
    """
    matrix = traffic_matrix(traffic, run=run, quantity=quantity)
    lo, hi = _window(ranks, matrix.shape[0])
    matrix = matrix[lo:hi][:, lo:hi]
    if matrix.nnz == 0 or not np.any(matrix.data):
        where = f"run {run}" if run is not None else "the matrix"
        raise ValueError(f"no {quantity} between ranks {lo}-{hi - 1} in {where} to draw: every pair is 0 or the "
                         "profile holds no transfer matrix for it")
    element = _image(matrix, lo, ["receiver", "sender"], quantity, pixels)
    label = title or f"{quantity} sent, ranks {lo}-{hi - 1}"
    return style_heatmap(element, label, colour_label(quantity), None).opts(shared_axes=False, axiswise=True)


def group_heatmap(aggregated: xr.DataArray, *, title: str = "", clim: tuple[float, float] | None = None) -> hv.Element:
    """Heatmap of an aggregated matrix (``perfkit.analysis.traffic.aggregate``), e.g. node x node."""
    level = aggregated.attrs.get("level", "group")
    quantity = aggregated.attrs.get("quantity", "bytes")
    matrix = traffic_matrix(aggregated.data)
    element = _image(matrix, 0, [f"receiver_{level}", f"sender_{level}"], quantity, 400)
    label = title or f"{quantity} {level} to {level}"
    return style_heatmap(element, label, colour_label(quantity), clim)


def before_after(matrices: Sequence[xr.DataArray], labels: Sequence[str] = ("before", "after")) -> hv.Layout:
    """Aggregated matrices side by side on one colour scale, titled with their share between groups."""
    positive = [m.data[m.data > 0] for m in (traffic_matrix(a.data) for a in matrices)]
    values = np.concatenate(positive) if positive else np.empty(0)
    clim = (float(values.min()), float(values.max())) if values.size else None
    panels = []
    for label, aggregated in zip(labels, matrices):
        level = aggregated.attrs.get("level", "group")
        share = inter_group_share(aggregated)
        panels.append(group_heatmap(aggregated, title=f"{label}: {share:.1%} between {level}s", clim=clim))
    return hv.Layout(panels).cols(len(panels))


def locality_bars(result: Locality) -> hv.Bars:
    """Share of traffic per rank-distance bin |i - j| (0 = self-sends)."""
    frame = result.histogram.reset_index()
    return hv.Bars(frame, "distance", ("share", "share of traffic")).opts(
        tools=["hover"],
        xlabel="rank distance |sender - receiver|",
        ylim=(0, 1),
        title=f"locality: {result.share_within_k:.1%} within ±{result.k} ranks",
        **SIZE,
    )
