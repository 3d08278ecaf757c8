"""The imbalance explorer: its rank slider applies on release, its findings are rows in words."""

from __future__ import annotations

import holoviews as hv
import panel as pn

import perfkit
from perfkit.widgets.imbalance import imbalance_explorer
from tests.helpers import ROOT
from tests.widgets.sliders import drag

hv.extension("bokeh")


def test_slider_applies_on_release_and_findings_are_rows():
    ds = perfkit.open_runs([ROOT / "data" / "synthetic" / "48" / "slt.mpinside"]).drop_vars("traffic")
    tabs = imbalance_explorer(ds)
    view = tabs[0][1]  # the bound imbalance view, after the controls
    slider = tabs.select(pn.widgets.IntRangeSlider)[0]
    shown = view._pane
    slider.value = (0, 10)  # handle held: the view is as before
    assert view._pane is shown
    drag(slider, (0, 12), (0, 9))
    assert view._pane is not shown
    cards = tabs[2].select(pn.layout.Card)
    assert len(cards) == len(perfkit.diagnose(ds, run=str(ds["run"].values[0])))
