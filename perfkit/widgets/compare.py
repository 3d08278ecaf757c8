"""Run against run: two runs of the same ranks (before and after a placement, two MPI libraries) side by side.

For runs A and B, per group (function, call or kind) the difference A - B of the mean per rank, and per
rank the difference of the per-rank totals (the tops of the per-rank stacks,
:func:`perfkit.analysis.cube.rank_totals`; beyond 2,000 ranks the largest and smallest per bin of consecutive
ranks, :func:`drawn_ranks`), with a table of each run's totals and the change in
percent of B. Groups are named in words and keep their colours (:mod:`perfkit.plots.palette`) and their stack order
(:func:`perfkit.plots.profile.band_order`); numbers in words by :mod:`perfkit.text`.
"""

from __future__ import annotations

from collections.abc import Callable

import holoviews as hv
import numpy as np
import pandas as pd
import panel as pn
import xarray as xr
from holoviews.core.util import dimension_sanitizer

from perfkit import text as fmt
from perfkit.analysis.cube import rank_totals
from perfkit.plots.axes import integer_ticker, unit_formatter, unit_ticker
from perfkit.plots.palette import REFERENCE, label, labelled_colours
from perfkit.plots.profile import band_order
from perfkit.plots.rank_figure import bin_size, envelope
from perfkit.widgets.ranks import WIDGET_WIDTH, RankState
from perfkit.widgets.study_summary import StudySummary, summarise

#: Colours of the per-rank difference: A above B, A below B.
MORE, LESS = "#d62728", "#2ca02c"


def comparable_pairs(ds: xr.Dataset, summary: StudySummary | None = None) -> list[tuple[str, str]]:
    """Pairs of runs (A, B) of ``ds`` over the same ranks (same first and last rank and count), in run order.

    From ``summary`` (``ds``'s :func:`perfkit.widgets.study_summary.summarise`, read once for the explorer) when
    it covers the runs of ``ds``, else from one read of ``ds``."""
    summary = _summary_of(ds, summary)
    keys = [(bounds, int(row.sum())) for bounds, row in zip(summary.bounds().values(), summary.exists)]
    runs = list(summary.runs)
    return [(a, b) for i, a in enumerate(runs) for j, b in enumerate(runs) if i < j and keys[i] == keys[j]]


def _summary_of(ds: xr.Dataset, summary: StudySummary | None) -> StudySummary:
    """``summary`` when it is of the runs of ``ds``, else ``summarise(ds)``."""
    runs = tuple(str(r) for r in ds["run"].values)
    return summary if summary is not None and summary.runs == runs else summarise(ds)


def difference(ds: xr.Dataset, a: str, b: str, *, by: str = "function", metric: str = "time",
               summary: StudySummary | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per group: the mean per rank of A and B and ``A - B``; per rank: the totals of A and B and ``A - B``.

    Both in the units of ``metric``; a group or rank missing from one run counts as 0 there. Groups in
    stack order (:func:`perfkit.plots.profile.band_order`; ``summary``'s when given), ranks ascending.
    """
    left, right = rank_totals(ds, a, by=by, metric=metric), rank_totals(ds, b, by=by, metric=metric)
    stack = band_order(ds, by, metric) if summary is None else _summary_of(ds, summary).order(by, metric)
    order = [g for g in stack if g in left.columns or g in right.columns]
    left, right = (t.reindex(columns=order).fillna(0.0) for t in (left, right))
    groups = pd.DataFrame({"A": left.mean(), "B": right.mean()}).rename_axis(by)
    groups["A - B"] = groups["A"] - groups["B"]
    ranks = pd.DataFrame({"A": left.sum(axis=1), "B": right.sum(axis=1)}).fillna(0.0).rename_axis("rank")
    ranks["A - B"] = ranks["A"] - ranks["B"]
    return groups, ranks


def in_words(unit: str) -> Callable[[float], str]:
    """Writes a signed difference in ``unit`` in words: ``+12.3 ms``, ``-4.1 MB``, ``+1.2 k`` (:mod:`perfkit.text`)."""
    writer = fmt.UNIT_WRITERS.get(unit)
    if writer is not None:
        return lambda value: writer(value, signed=True)
    suffix = "" if unit in ("", "1") else f" {unit}"
    return lambda value: fmt.significant(value, signed=True) + suffix


def summary(ranks: pd.DataFrame, unit: str) -> pd.DataFrame:
    """The totals of A and B over their ranks (sum, mean and largest per rank), ``A - B`` and its percent of B,
    in words (:mod:`perfkit.text`); ``ranks`` is the per-rank table of :func:`difference`."""
    value = fmt.UNIT_WRITERS.get(unit, fmt.number)
    signed = fmt.UNIT_WRITERS.get(unit)
    rows = {"sum over ranks": ranks[["A", "B"]].sum(), "mean per rank": ranks[["A", "B"]].mean(),
            "largest rank": ranks[["A", "B"]].max()}
    out = []
    for name, (a, b) in rows.items():
        change = fmt.percent((a - b) / b, signed=True) if b else "B is 0"
        delta = signed(a - b, signed=True) if signed else fmt.number(a - b)
        out.append({"": name, "A": value(a), "B": value(b), "A - B": delta, "A - B [% of B]": change})
    return pd.DataFrame(out)


def compare_view(ds: xr.Dataset, a: str, b: str, *, by: str = "function", metric: str = "time",
                 study: StudySummary | None = None,
                 differences: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> pn.Column:
    """A against B: the table of :func:`summary`, ``A - B`` per group (bars) and per rank (spikes); ``study``:
    ``ds``'s :func:`perfkit.widgets.study_summary.summarise` when known (else ``ds`` is read for it);
    ``differences``: :func:`difference` of A and B when already computed (else they are read for it)."""
    unit = str(ds["units"].sel(metric=metric).item())
    quantity, words = metric, in_words(unit)  # the ticks carry the unit (``10 ms``), the hover each value in words
    if a == b:
        return pn.Column(pn.pane.Markdown("A and B are the same run: pick two runs."))
    study = _summary_of(ds, study)
    if (a, b) not in comparable_pairs(ds, study):
        return pn.Column(pn.pane.Markdown(f"{a} and {b} do not hold the same ranks: compare runs of the same ranks."))
    groups, ranks = difference(ds, a, b, by=by, metric=metric, summary=study) if differences is None else differences
    named = groups.reset_index().assign(**{by: lambda f: f[by].map(label)})  # groups in words
    named["change"] = [words(v) for v in named["A - B"].to_numpy()]
    mean = hv.Dimension("A - B", label=f"A - B, mean per rank of {quantity}")
    bar_hover = [(by, f"@{{{dimension_sanitizer(by)}}}"), (mean.label, "@{change}")]
    bars = hv.Bars(named, by, [mean, "change"]).opts(
        color=by, cmap=labelled_colours(ds[by].values), show_legend=False, xrotation=30, tools=["hover"],
        hover_tooltips=bar_hover,
        show_grid=True, responsive=True, min_width=400, height=320, yformatter=unit_formatter(unit),
        yticks=unit_ticker(unit),
        title=f"{a} - {b}: {metric} per {by}")
    frame, step = drawn_ranks(ranks)
    binned = f" (largest and smallest A - B of every {step} ranks)" if step > 1 else ""
    delta, bins = hv.Dimension("A - B", label=f"A - B of the rank's {quantity}"), ["of ranks"] if step > 1 else []
    frame["change"] = [words(v) for v in frame["A - B"].to_numpy()]
    hover = [(name, f"@{{{dimension_sanitizer(field)}}}")  # the colour left out
             for name, field in [("rank", "rank"), (delta.label, "change")] + [(b, b) for b in bins]]
    spikes = hv.Spikes(frame, "rank", [delta, "colour", "change", *bins]).opts(
        color="colour", line_width=2 if len(frame) < 400 else 1, tools=["hover"], hover_tooltips=hover,
        show_grid=True, responsive=True,
        min_width=400, height=300, yformatter=unit_formatter(unit), yticks=unit_ticker(unit), xticks=integer_ticker(),
        title=f"{a} - {b}: {metric} per rank{binned}")
    zero = hv.HLine(0).opts(color=REFERENCE, line_width=1)
    note = pn.pane.Markdown(f"**A** = {a}, **B** = {b}: {metric} over {fmt.plural(len(ranks), 'rank')}. "
                            "Positive: A takes more than B (per rank: red where A takes more, green where less).",
                            sizing_mode="stretch_width")
    table = pn.pane.DataFrame(summary(ranks, unit), index=False, justify="left", sizing_mode="stretch_width",
                              max_width=800)
    return pn.Column(note, table, pn.pane.HoloViews(bars, sizing_mode="stretch_width"),
                     pn.pane.HoloViews(spikes * zero, sizing_mode="stretch_width"), sizing_mode="stretch_width")


def drawn_ranks(ranks: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The ranks drawn of ``ranks`` (the per-rank table of :func:`difference`) and the ranks per bin: every rank
    (1) up to :data:`perfkit.plots.rank_figure.MAX_MARKERS`, else per bin of consecutive ranks the two of the
    largest and the smallest ``A - B`` (:func:`perfkit.plots.rank_figure.envelope`), with the bin's first and
    last rank (``of ranks``). Spikes rise from 0, so these two cover every spike of their bin: the extremes stay
    exact and named, and 100,000 ranks draw as 2,000 spikes."""
    delta = ranks["A - B"].to_numpy()
    step, keep = bin_size(delta.size), envelope(delta)
    frame = ranks.iloc[keep].reset_index()
    frame["colour"] = np.where(frame["A - B"].to_numpy() >= 0, MORE, LESS)
    if step > 1:
        index, first = ranks.index.to_numpy(), keep // step * step
        last = np.minimum(first + step, delta.size) - 1
        frame["of ranks"] = [f"{index[f]} to {index[t]}" for f, t in zip(first, last)]
    return frame, step


def default_pair(ds: xr.Dataset, run: str | None = None, summary: StudySummary | None = None) -> tuple[str, str]:
    """A and B shown first: ``run`` (or the first run that has a partner) and the first run of the same ranks
    after it, a placement's re-run before any other (see :func:`perfkit.widgets.placement.labelled_reruns`)."""
    from perfkit.widgets.placement import labelled_reruns

    pairs = comparable_pairs(ds, summary)
    first = run if run is not None and any(run in p for p in pairs) else pairs[0][0]
    partners = [b if a == first else a for a, b in pairs if first in (a, b)]
    reruns = set(labelled_reruns(ds, first).values())
    return first, next((p for p in partners if p in reruns), partners[0])


def compare_controls(ds: xr.Dataset, state: RankState) -> tuple[pn.widgets.Select, pn.widgets.Select]:
    """Selects of run A and run B (every run of ``ds`` that has a partner over the same ranks)."""
    summary = _summary_of(ds, state.summary)
    pairs = comparable_pairs(ds, summary)
    runs = [str(r) for r in ds["run"].values if any(str(r) in p for p in pairs)]
    a, b = default_pair(ds, state.run, summary)
    return (pn.widgets.Select(label="run A", options=runs, value=a, width=WIDGET_WIDTH),
            pn.widgets.Select(label="run B", options=runs, value=b, width=WIDGET_WIDTH))


def with_rerun(ds: xr.Dataset, rerun: xr.Dataset | None) -> xr.Dataset:
    """``ds`` and the runs of ``rerun`` (not already in ``ds``) as one Dataset of profiles (traffic left out)."""
    from perfkit.model import combine_runs

    profiles = ds.drop_vars("traffic", errors="ignore")
    if rerun is None:
        return profiles
    extra = [str(r) for r in rerun["run"].values if str(r) not in set(map(str, ds["run"].values))]
    if not extra:
        return profiles
    return combine_runs([profiles, rerun.drop_vars("traffic", errors="ignore").sel(run=extra)])


def has_comparison(ds: xr.Dataset, summary: StudySummary | None = None) -> bool:
    """Whether two runs of ``ds`` hold the same ranks."""
    return ds.sizes["run"] >= 2 and bool(comparable_pairs(ds, summary))
