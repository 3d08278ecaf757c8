"""A trace's timeline as a rank x time picture: per cell, what the rank did most in that time.

The reader's ``timeline`` (seconds per rank, time bin and kind; ``perfkit.io.otf2.timeline``) is
summed over blocks of consecutive bins (the resolution the user picks) and, when there are more
ranks than ``MAX_ROWS``, over blocks of consecutive ranks, so that 10,000 ranks x 1,000 bins draw
as one image of at most ``MAX_ROWS`` rows (an ``hv.Image``: one rectangle of pixels, not one glyph
per cell). Each cell is coloured by its dominant kind (the colours of ``perfkit.plots.palette``);
hovering it gives its ranks, time range, the dominant kind in words (:func:`perfkit.plots.palette.label`)
and every kind's share [%].
An empty cell (no region open) is blank.
"""

from __future__ import annotations

from dataclasses import dataclass

import holoviews as hv
import numpy as np
import xarray as xr
from bokeh.models import CustomJSHover, FixedTicker, HoverTool

from perfkit.plots.palette import KIND_COLOURS, label

#: Rows of the picture at most: more ranks are summed in blocks of consecutive ranks.
MAX_ROWS = 512


@dataclass
class Cells:
    """The timeline summed into cells: ``seconds`` (row, column, kind), the first rank of each row
    block of ``rank_step`` ranks, the start [s] of each column of ``width`` seconds."""

    seconds: np.ndarray
    ranks: np.ndarray
    rank_step: int
    starts: np.ndarray
    width: float
    kinds: tuple[str, ...]

    @property
    def dominant(self) -> np.ndarray:
        """Per cell, the index of the kind with most seconds (NaN: nothing happened)."""
        top = self.seconds.argmax(axis=2).astype(np.float64)
        top[self.seconds.max(axis=2) <= 0] = np.nan
        return top

    @property
    def shares(self) -> np.ndarray:
        """Per cell and kind, its share [%] of the cell's time (rows x ranks of the block x width)."""
        whole = self.width * self.rank_step
        return 100 * self.seconds / whole


def cells(timeline: xr.DataArray, width: float, bins: int | None = None, max_rows: int = MAX_ROWS) -> Cells:
    """``timeline`` (rank, time_bin, timeline_kind) [s] of one run, in bins of ``width`` seconds, summed
    into ``bins`` columns (a divisor of its bins: each column sums ``time_bin`` / ``bins`` of them;
    default all) and at most ``max_rows`` rows of consecutive ranks."""
    values = timeline.transpose("rank", "time_bin", "timeline_kind").values  # no copy when already in this order
    nranks, nbins, nkinds = values.shape
    bins = nbins if bins is None else int(bins)
    if bins < 1 or nbins % bins:
        raise ValueError(f"bins must divide the timeline's {nbins} bins, got {bins}")
    step = -(-nranks // max_rows)
    blocks = values
    if step > 1:  # whole blocks by a reshape (reduceat over the first axis is ~8x slower), then the last, short one
        whole = nranks // step * step
        blocks = np.empty((-(-nranks // step), nbins, nkinds))
        blocks[:whole // step] = values[:whole].reshape(whole // step, step, nbins, nkinds).sum(axis=1)
        if whole < nranks:
            blocks[-1] = values[whole:].sum(axis=0)
    seconds = blocks.reshape(blocks.shape[0], bins, nbins // bins, nkinds).sum(axis=2, dtype=np.float64)
    ranks = np.asarray(timeline["rank"].values)[::step]
    column = width * (nbins // bins)
    kinds = tuple(str(k) for k in timeline["timeline_kind"].values)
    return Cells(seconds, ranks, step, column * np.arange(bins), column, kinds)


def timeline_image(c: Cells, title: str = "") -> hv.Image:
    """The picture of ``c``: x time [s], y rank (rank 0 at the bottom), coloured by dominant kind."""
    times = c.starts + c.width / 2
    ranks = c.ranks + (c.rank_step - 1) / 2
    shares = c.shares
    layers = [c.dominant] + [shares[..., k] for k in range(len(c.kinds))]
    vdims = [hv.Dimension("kind", label="did most")] + [
        hv.Dimension(f"share_{k}", label=label(k)) for k in c.kinds]
    image = hv.Image((times, ranks, *layers), kdims=[hv.Dimension("time", unit="s"), "rank"], vdims=vdims)
    colours = [KIND_COLOURS.get(k, "#7f7f7f") for k in c.kinds]
    return image.opts(
        cmap=colours, clim=(-0.5, len(c.kinds) - 0.5), color_levels=len(c.kinds), colorbar=True,
        colorbar_opts={"major_label_overrides": {i: label(k) for i, k in enumerate(c.kinds)},
                       "ticker": FixedTicker(ticks=list(range(len(c.kinds)))), "title": "did most"},
        tools=[_hover(c)], default_tools=["save", "pan", "wheel_zoom", "box_zoom", "reset"],
        title=title, responsive=True, min_height=360, xlabel="time [s]", ylabel="rank")


def _hover(c: Cells) -> HoverTool:
    """Rank (block), time range, dominant kind in words and each kind's share."""
    words = [label(k) for k in c.kinds]
    kind = CustomJSHover(code=f"const w = {words!r}; return Number.isNaN(value) ? 'nothing' : w[value];")
    step, width = c.rank_step, c.width
    first = int(c.ranks[0])
    rank = CustomJSHover(code=f"const s = {step}; const a = {first} + Math.floor((value - {first} + 0.5) / s) * s; "
                              "return s > 1 ? a + '-' + (a + s - 1) : String(a);")
    time = CustomJSHover(code=f"const w = {width!r}; const a = Math.floor(value / w) * w; "
                              "const f = (x) => x.toPrecision(3); return f(a) + ' - ' + f(a + w) + ' s';")
    tooltips = [("rank", "$y{custom}"), ("time", "$x{custom}"), ("did most", "@image{custom}")]
    tooltips += [(word, f"@share_{k}{{0.0}} %") for k, word in zip(c.kinds, words)]
    return HoverTool(tooltips=tooltips, formatters={"$y": rank, "$x": time, "@image": kind})
