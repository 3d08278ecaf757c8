"""The timeline tab: cells summed from a trace's timeline, the picture, its hover, the explorer's tab."""

from __future__ import annotations

from pathlib import Path

import holoviews as hv
import numpy as np
import panel as pn
import pytest
import xarray as xr
from bokeh.models import HoverTool
from hypothesis import given, settings
from hypothesis import strategies as st

import perfkit
from perfkit.model import KINDS
from perfkit.plots.palette import KIND_COLOURS, KIND_WORDS
from perfkit.plots.timeline import MAX_ROWS, cells, timeline_image
from perfkit.widgets.explorer import explore
from perfkit.widgets.timeline import resolutions, timeline_view

hv.extension("bokeh")

FAN_IN = Path(__file__).resolve().parents[1] / "data" / "otf2" / "casita-10-mpi-tags" / "traces.otf2"


def _timeline(values: np.ndarray) -> xr.DataArray:
    nranks, nbins, _ = values.shape
    return xr.DataArray(values, dims=("rank", "time_bin", "timeline_kind"),
                        coords={"rank": np.arange(nranks), "time_bin": np.arange(nbins), "timeline_kind": list(KINDS)})


@pytest.fixture(scope="module")
def fan_in() -> xr.Dataset:
    return perfkit.open_profile(FAN_IN, timeline_bins=60)


def test_resolutions_are_the_divisors_most_first():
    assert resolutions(12) == [12, 6, 4, 3, 2, 1]
    assert resolutions(1) == [1]


@settings(max_examples=25, deadline=None)
@given(nranks=st.integers(1, 40), nbins=st.sampled_from([1, 4, 6, 12]), max_rows=st.integers(1, 16), data=st.data())
def test_cells_keep_every_second(nranks: int, nbins: int, max_rows: int, data: st.DataObject):
    """Summing bins into columns and ranks into blocks loses and invents nothing; the blocks are
    consecutive ranks, at most ``max_rows`` of them."""
    columns = data.draw(st.sampled_from(resolutions(nbins)))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    values = rng.random((nranks, nbins, len(KINDS))) * (rng.random((nranks, nbins, 1)) < 0.7)
    c = cells(_timeline(values), 0.5, columns, max_rows=max_rows)
    assert c.seconds.shape[0] <= max_rows and c.seconds.shape[1] == columns
    assert c.seconds.sum() == pytest.approx(values.sum())
    np.testing.assert_allclose(c.seconds.sum(axis=(0, 1)), values.sum(axis=(0, 1)))
    assert c.width == 0.5 * (nbins // columns)
    np.testing.assert_array_equal(c.ranks, np.arange(0, nranks, c.rank_step))
    first = values[:c.rank_step].reshape(min(c.rank_step, nranks), columns, -1, len(KINDS)).sum(axis=(0, 2))
    np.testing.assert_allclose(c.seconds[0], first)


def test_each_cell_is_coloured_by_what_it_did_most():
    values = np.zeros((3, 4, len(KINDS)))
    values[0, :, KINDS.index("compute")] = 1.0
    values[1, 2, KINDS.index("wait_late_sender")] = 0.7
    values[1, 2, KINDS.index("compute")] = 0.3
    values[2, 3, KINDS.index("wait_collective")] = 0.1
    c = cells(_timeline(values), 1.0)
    top = c.dominant
    assert (top[0] == KINDS.index("compute")).all()
    assert top[1, 2] == KINDS.index("wait_late_sender") and np.isnan(top[1, :2]).all()
    assert top[2, 3] == KINDS.index("wait_collective")
    assert c.shares[1, 2, KINDS.index("wait_late_sender")] == pytest.approx(70.0)
    with pytest.raises(ValueError, match="must divide"):
        cells(_timeline(values), 1.0, 3)


def test_the_picture_uses_the_palette_and_words():
    values = np.zeros((2, 2, len(KINDS)))
    values[:, :, 0] = 1.0
    image = timeline_image(cells(_timeline(values), 1.0))
    plot = hv.renderer("bokeh").get_plot(image)
    mapper = plot.handles["color_mapper"]
    assert list(mapper.palette) == [KIND_COLOURS[k] for k in KINDS]
    colorbar = plot.handles["colorbar"]
    assert colorbar.major_label_overrides == {i: KIND_WORDS[k] for i, k in enumerate(KINDS)}
    hover = next(t for t in plot.state.tools if isinstance(t, HoverTool))
    labels = [label for label, _ in hover.tooltips]
    assert labels[:3] == ["rank", "time", "did most"]
    assert labels[3:] == [KIND_WORDS[k] for k in KINDS]


def test_ten_thousand_ranks_draw_as_one_image_of_at_most_max_rows():
    values = np.zeros((10_000, 200, len(KINDS)), dtype=np.float32)
    values[:, :, 0] = 1.0
    values[5000:5020, 100:150, 0] = 0.0
    values[5000:5020, 100:150, KINDS.index("wait_collective")] = 1.0
    c = cells(_timeline(values), 1e-3)
    assert c.rank_step == 20 and c.seconds.shape == (500, 200, len(KINDS)) and 500 <= MAX_ROWS
    assert (c.dominant[250, 100:150] == KINDS.index("wait_collective")).all()  # ranks 5000-5019
    assert (c.dominant[249, 100:150] == KINDS.index("compute")).all()
    plot = hv.renderer("bokeh").get_plot(timeline_image(c))
    assert plot.handles["source"].data["image"][0].shape == (500, 200)


def test_the_fan_in_shows_rank_0_waiting_for_late_senders(fan_in):
    view = timeline_view(fan_in, str(fan_in["run"].values[0]), 30)
    image = view.select(pn.pane.HoloViews)[0].object
    assert image.data["kind"].shape == (10, 30)
    c = cells(fan_in["timeline"].isel(run=0), float(fan_in["time_bin_width"].item()), 30)
    late = KINDS.index("wait_late_sender")
    assert (c.dominant[0] == late).any()  # rank 0 waits for its senders
    assert not (c.dominant[1:] == late).any()  # the senders never do
    waited = fan_in["wait_states"].isel(run=0).sel(rank=0, state="late_sender").item()
    assert c.seconds[0, :, late].sum() == pytest.approx(waited)
    assert "each rank did most in" in view.objects[0].object


def test_a_run_without_a_timeline_says_so(fan_in):
    ds = fan_in.copy()
    ds["timeline"] = ds["timeline"] * np.nan
    view = timeline_view(ds, str(ds["run"].values[0]), 60)
    assert "no timeline" in view.object


def test_the_explorer_has_a_timeline_tab_only_for_traces(fan_in):
    tabs = explore(fan_in).select(pn.Tabs)[0]
    assert "timeline" in tabs._names
    assert "timeline" not in explore(fan_in.drop_vars("timeline")).select(pn.Tabs)[0]._names
