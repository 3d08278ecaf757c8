"""Every plot names functions and kinds in words: no ``w_MPI_Recv``, ``b_MPI_Allreduce`` or ``wait_late_sender`` in a
legend, an axis of categories, a colour bar or the data its hover text reads, on bundled runs that have waits."""

from __future__ import annotations

import re

import holoviews as hv
import numpy as np
import pandas as pd
import panel as pn
import pytest
import xarray as xr
from bokeh.models import ColorBar, ColumnDataSource, FactorRange, Legend, Model

import perfkit
from perfkit.analysis.imbalance import imbalance
from perfkit.analysis.pop import pop_metrics
from perfkit.analysis.scaling import scaling
from perfkit.analysis.whatif import whatif
from perfkit.model import KINDS
from perfkit.plots import scaling as scaling_plots
from perfkit.plots.imbalance import imbalance_bars, stacked_by_mode, whatif_bars
from perfkit.plots.palette import colour, label
from perfkit.plots.pop import pop_plot
from perfkit.plots.profile import stacked_ranks
from perfkit.plots.timeline import cells, timeline_image
from perfkit.widgets.compare import compare_view
from perfkit.widgets.explorer import findings_view
from perfkit.widgets.ranks import rank_bands
from tests.helpers import ROOT

hv.extension("bokeh")

#: An identifier a reader should not see: a wait part of a call or a kind's name.
IDENTIFIER = re.compile(r"(?<![A-Za-z0-9])(?:[wbr]_MPI_\w+|wait_\w+)")


@pytest.fixture(scope="module")
def runs() -> xr.Dataset:
    """Synthetic MPInside runs with measured waits (late sender and collective) at 48 and 96 ranks."""
    return perfkit.open_runs([ROOT / "data" / "synthetic" / n / f"{mode}.mpinside"
                              for n in ("48", "96") for mode in ("slt", "collective_wait")])


def shown(element: object) -> list[str]:
    """The text a rendered plot can show of its categories: legend labels (given, or read from the data),
    categorical axis factors, colour-bar labels, and every string in its data sources (what hover reads)."""
    root: Model = element if isinstance(element, Model) else hv.render(element)
    texts: list[str] = []
    for legend in root.select({"type": Legend}):
        for item in legend.items:
            given, field = getattr(item.label, "value", None), getattr(item.label, "field", None)
            if given is not None:
                texts.append(str(given))
            else:
                texts += [str(v) for r in item.renderers for v in r.data_source.data[field]]
    for factors in root.select({"type": FactorRange}):
        texts += [str(part) for factor in factors.factors for part in np.atleast_1d(factor)]
    for bar in root.select({"type": ColorBar}):
        texts += [str(v) for v in (bar.major_label_overrides or {}).values()]
    for source in root.select({"type": ColumnDataSource}):
        for values in source.data.values():
            texts += [v for v in np.asarray(values, dtype=object).ravel() if isinstance(v, str)]
    return texts


def identifiers(element: object) -> list[str]:
    return sorted({m.group(0) for text in shown(element) for m in IDENTIFIER.finditer(text)})


def test_the_runs_have_wait_parts_and_their_words(runs):
    names = set(map(str, runs["function"].values))
    assert {"w_MPI_Recv", "b_MPI_Allreduce"} <= names  # what the checks below must not find drawn
    assert set(map(str, runs["kind"].values)) >= {"wait_late_sender", "wait_collective"}
    late, collective = stacked_ranks(runs, "48/slt"), stacked_ranks(runs, "48/collective_wait")
    assert identifiers(late) == identifiers(collective) == []
    assert "MPI_Recv (late-sender wait)" in shown(late) and "MPI_Bcast (collective wait)" in shown(collective)


def test_the_check_finds_identifiers_when_drawn(runs):
    frame = pd.DataFrame({"function": ["w_MPI_Recv", "Compute"], "time": [1.0, 2.0]})
    assert identifiers(hv.Bars(frame, "function", "time")) == ["w_MPI_Recv"]


@pytest.mark.parametrize("by", ["function", "kind", "call"])
def test_per_rank_stacks(runs, by):
    for run in ("48/slt", "96/collective_wait"):
        assert identifiers(stacked_ranks(runs, run, by=by)) == []
        bands = rank_bands(runs, run, by=by)
        assert identifiers(bands) == []
    assert identifiers(stacked_by_mode(runs, ["48/slt", "48/collective_wait"], by=by)) == []


def test_per_rank_stack_keeps_each_names_colour(runs):
    bands = rank_bands(runs, "48/slt", by="function")
    mapping = bands.opts.get().kwargs["cmap"]
    assert mapping[label("w_MPI_Recv")] == colour("w_MPI_Recv") != colour("MPI_Recv") == mapping["MPI_Recv"]


@pytest.mark.parametrize("by", ["function", "kind"])
def test_compare(runs, by):
    view = compare_view(runs, "48/slt", "48/collective_wait", by=by)
    plots = [pane.object for pane in view.select(pn.pane.HoloViews)]
    assert len(plots) == 2
    assert all(identifiers(plot) == [] for plot in plots)
    bars = plots[0]
    assert label("b_MPI_Allreduce" if by == "function" else "wait_collective") in set(bars.data[by])


def test_timeline():
    kinds = xr.DataArray(list(KINDS), dims="timeline_kind")
    seconds = np.random.default_rng(3).random((8, 20, len(KINDS))) * 1e-3
    timeline = xr.DataArray(seconds, dims=("rank", "time_bin", "timeline_kind"),
                            coords={"rank": np.arange(8), "timeline_kind": kinds})
    image = timeline_image(cells(timeline, 1e-3))
    assert identifiers(image) == []
    assert "late-sender wait" in shown(image)


@pytest.mark.parametrize("by", ["function", "kind"])
def test_findings(runs, by):
    one = runs.sel(run=["48/slt"])
    assert identifiers(imbalance_bars(imbalance(one, by=by), "48/slt")) == []
    view = findings_view(one, "48/slt", by=by)
    (table,) = (pane.object for pane in view.select(pn.pane.DataFrame))
    assert not any(IDENTIFIER.search(str(v)) for v in table[by])
    assert identifiers(whatif_bars(whatif(one, "balance"))) == []


def test_pop(runs):
    assert identifiers(pop_plot(pop_metrics(runs.sel(run=["48/slt", "96/slt"])))) == []


@pytest.mark.parametrize("group", ["function", "kind"])
def test_scaling(runs, group):
    series = runs.sel(run=["48/slt", "96/slt"])
    table = scaling(series, group=group)
    assert identifiers(scaling_plots.stacked_time(table)) == []
    assert identifiers(scaling_plots.time_vs_procs(table)) == []
    assert identifiers(scaling_plots.efficiency_vs_procs(table)) == []
    assert identifiers(scaling_plots.speedup_vs_procs(table)) == []
