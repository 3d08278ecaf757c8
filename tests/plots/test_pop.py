"""The POP table and plot: layout, colours on POP's scale, evidence marks."""

from __future__ import annotations

import holoviews as hv
import numpy as np
import pytest

import perfkit
from perfkit.plots.pop import COLOURS, colour, pop_plot, pop_styler, pop_table
from tests.helpers import ROOT

hv.extension("bokeh")


@pytest.fixture(scope="module")
def pop():
    return perfkit.pop_metrics(perfkit.open_runs(str(ROOT / "data" / "synthetic" / "*" / "basic.mpinside")))


@pytest.mark.parametrize("value, name", [(0.95, "green"), (0.8, "green"), (0.79, "amber"), (0.6, "amber"),
                                         (0.59, "red"), (np.nan, "none")])
def test_colour_scale(value, name):
    assert colour(value) == name


def test_table_layout(pop):
    table = pop_table(pop)
    assert list(table.columns) == [str(r) for r in pop["run"].values]
    labels = list(table.index)
    assert labels[0] == "Global efficiency" and labels[-1].strip() == "Computation scalability"
    depth = [len(label) - len(label.lstrip("\u00a0")) for label in labels]
    assert depth == [0, 4, 8, 8, 12, 12, 4]
    np.testing.assert_allclose(table.iloc[2], pop["load_balance"])


def test_styler_colours_and_marks(pop):
    html = pop_styler(pop).to_html()
    lb = float(pop["load_balance"][0])
    assert f"{lb:.2f}" in html
    assert COLOURS[colour(float(pop["parallel_efficiency"].min()))] in html
    serialisation = f"{float(pop['serialisation_efficiency'][0]):.2f} m"  # basic mode: waits estimated
    assert serialisation in html and "modelled: ideal-network elapsed" in html


def test_plot_has_a_curve_per_efficiency(pop):
    plot = pop_plot(pop)
    curves = plot.select(hv.Curve)
    assert len(curves.traverse(lambda c: c, [hv.Curve])) == 7
    hv.renderer("bokeh").get_plot(plot)
