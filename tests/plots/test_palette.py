"""One colour per name: fixed for kinds and common calls, stable across processes, runs and views."""

from __future__ import annotations

import os
import subprocess
import sys

import holoviews as hv
import numpy as np
import pytest
from bokeh.models import CategoricalColorMapper, GlyphRenderer, Legend

import perfkit
from perfkit.model import KINDS
from perfkit.plots.palette import HASHED, KIND_COLOURS, colour, colours, label, labelled_colours, lighten
from perfkit.plots.profile import stacked_ranks
from perfkit.widgets.ranks import rank_bands
from tests.helpers import ROOT

hv.extension("bokeh")


@pytest.fixture(scope="module")
def series():
    """The same function set at 48 and 2,048 ranks (the runs where Compute changed colour)."""
    return perfkit.open_runs([ROOT / "data" / "synthetic" / n / "slt.mpinside" for n in ("48", "2048")])


def band_colours(element) -> dict[str, str]:
    """Group -> colour of a rendered rank_bands plot (its categorical colour mapper)."""
    mapper = next(iter(hv.render(element).select({"type": CategoricalColorMapper})))
    return dict(zip(mapper.factors, mapper.palette))


def area_colours(element) -> dict[str, str]:
    """Legend label -> fill colour of a rendered stacked_ranks plot."""
    legend = next(iter(hv.render(element).select({"type": Legend})))
    out = {}
    for item in legend.items:
        glyph = next(r for r in item.renderers if isinstance(r, GlyphRenderer)).glyph
        out[item.label["value"]] = glyph.fill_color
    return out


def test_every_kind_has_its_own_fixed_colour():
    assert set(KIND_COLOURS) == set(KINDS)
    assert len(set(KIND_COLOURS.values())) == len(KINDS)
    assert colour("Compute") == colour("compute")


def test_a_colour_does_not_depend_on_the_other_names():
    alone = colours(["MPI_Recv"])["MPI_Recv"]
    among = colours(["Compute", "w_MPI_Recv", "MPI_Recv", "MPI_Bcast", "my_region"])["MPI_Recv"]
    assert alone == among == colour("MPI_Recv")
    assert colour("w_MPI_Recv") == lighten(colour("MPI_Recv")) != colour("MPI_Recv")


def test_hashed_colours_are_the_same_in_another_process():
    names = ["my_region", "solver", "synthetic crash model", "w_MPI_Foo"]
    code = f"from perfkit.plots.palette import colour; print([colour(n) for n in {names!r}])"
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert seen == {f"{[colour(n) for n in names]}\n"}


def test_names_drawn_together_get_distinct_colours():
    names = [f"region {i}" for i in range(len(HASHED))]
    assert len(set(colours(names).values())) == len(names)
    assert not set(colours(names).values()) & set(KIND_COLOURS.values())


def test_compute_keeps_its_colour_across_runs_and_views(series):
    small = band_colours(rank_bands(series, "48/slt"))
    large = band_colours(rank_bands(series, "2048/slt"))
    tour = area_colours(stacked_ranks(series, "2048/slt"))
    assert small["Compute"] == large["Compute"] == tour["Compute"] == colour("Compute")
    names = sorted(set(tour))
    assert [small[n] for n in names] == [large[n] for n in names] == [tour[n] for n in names]


def test_kind_colours_are_the_same_in_the_tour_and_the_dashboard(series):
    tour = area_colours(stacked_ranks(series, "48/slt", by="kind", ranks=(0, 20)))
    dashboard = band_colours(rank_bands(series, "48/slt", by="kind"))
    kinds = [k for k in KIND_COLOURS if label(k) in tour]
    assert len(kinds) == len(tour) >= 3
    assert all(tour[label(k)] == dashboard[label(k)] == KIND_COLOURS[k] for k in kinds)


def test_lighten_mixes_with_white():
    assert lighten("#000000") == "#808080" and lighten("#ff7f0e", 0) == "#ff7f0e"
    assert np.isclose(int(lighten("#204060", 1.0)[1:3], 16), 255)


def test_the_dashboard_plot_recolours_in_place_when_the_grouping_changes(series):
    import panel as pn

    from perfkit.widgets.ranks import rank_explorer

    layout = rank_explorer(series, run="48/slt")
    root = layout.get_root()
    mapper = next(iter(root.select({"type": CategoricalColorMapper})))
    assert dict(zip(mapper.factors, mapper.palette))["Compute"] == colour("Compute")
    by = next(w for w in layout.select(pn.widgets.RadioButtonGroup) if "kind" in w.options)
    by.value = "kind"
    mapper = next(iter(root.select({"type": CategoricalColorMapper})))
    shown = dict(zip(mapper.factors, mapper.palette))
    assert all(shown[label(k)] == KIND_COLOURS[k] for k in ("compute", "transfer", "wait_late_sender"))


@pytest.mark.parametrize(("name", "words"), [
    ("w_MPI_Recv", "MPI_Recv (late-sender wait)"), ("b_MPI_Allreduce", "MPI_Allreduce (collective wait)"),
    ("r_MPI_Send", "MPI_Send (late-receiver wait)"), ("wait_late_sender", "late-sender wait"),
    ("wait_collective", "collective wait"), ("wait_late_receiver", "late-receiver wait"), ("io", "I/O"),
    ("other", "other MPI"), ("MPI_Recv", "MPI_Recv"), ("Compute", "Compute"), ("w_", "w_"), ("my_region", "my_region")])
def test_names_in_words(name, words):
    assert label(name) == words


def test_labelled_colours_keep_each_names_colour():
    names = ["Compute", "w_MPI_Recv", "MPI_Recv", "b_MPI_Bcast", "r_MPI_Send", "wait_collective", "my_region"]
    by_words = labelled_colours(names)
    assert by_words == {label(n): c for n, c in colours(names).items()} and len(by_words) == len(names)
    assert by_words["MPI_Bcast (collective wait)"] == lighten(colour("MPI_Bcast"))
    assert colour("r_MPI_Send") == lighten(colour("MPI_Send"))  # every wait part is a lighter shade of its call
