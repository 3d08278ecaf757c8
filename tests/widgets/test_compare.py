"""Run against run: a placement's before and after runs (bundled) and synthetic runs of known difference."""

from __future__ import annotations

import holoviews as hv
import numpy as np
import pandas as pd
import panel as pn
import pytest
import xarray as xr

import perfkit
from perfkit import text as fmt
from perfkit.model import make_run
from perfkit.plots.palette import label
from perfkit.widgets.compare import comparable_pairs, compare_view, default_pair, difference, summary, with_rerun
from perfkit.widgets.explorer import explore
from tests.helpers import ROOT

hv.extension("bokeh")

CLUSTER = ROOT / "data" / "cluster" / "stencil2d-shuffled"


@pytest.fixture(scope="module")
def placed() -> xr.Dataset:
    return perfkit.open_runs([CLUSTER / f"{name}.mpinside" for name in ("before", "round_robin", "scotch")])


def synthetic(label: str, compute: np.ndarray, wait: np.ndarray) -> xr.Dataset:
    """A run whose ranks compute ``compute`` [s] and wait in MPI_Recv ``wait`` [s]."""
    values = np.zeros((compute.size, 2, 6))
    values[:, 0, 0], values[:, 1, 0] = compute, wait
    return make_run(values, ranks=range(compute.size), functions=["Compute", "MPI_Recv"],
                    run={"label": label, "nprocs": compute.size})


def test_synthetic_difference_is_exact():
    rng = np.random.default_rng(3)
    ca, wa, cb, wb = rng.uniform(1, 2, (4, 12))
    ds = perfkit.model.combine_runs([synthetic("a", ca, wa), synthetic("b", cb, wb)])
    groups, ranks = difference(ds, "a", "b")
    assert groups.loc["Compute", "A - B"] == pytest.approx(ca.mean() - cb.mean())
    assert groups.loc["MPI_Recv", "A - B"] == pytest.approx(wa.mean() - wb.mean())
    np.testing.assert_allclose(ranks["A - B"].to_numpy(), (ca + wa) - (cb + wb))
    table = summary(ranks, "s").set_index("")
    change = ((ca + wa).sum() - (cb + wb).sum()) / (cb + wb).sum()
    assert table.loc["sum over ranks", "A - B [% of B]"] == perfkit.text.percent(change, signed=True)
    assert table.loc["mean per rank", "A"] == perfkit.text.seconds((ca + wa).mean())


def spikes_of(view: pn.Column) -> hv.Spikes:
    """The per-rank spikes of a compare view."""
    return [pane.object for pane in view.select(pn.pane.HoloViews)][1].get(0)


def hovered(view: pn.Column) -> list[tuple[str, str]]:
    """The hover's lines of the per-rank spikes (name, field), each field checked to be a column of their data."""
    from bokeh.models import ColumnDataSource, HoverTool

    root = view.get_root()
    source = next(s for s in root.select({"type": ColumnDataSource}) if "rank" in s.data)
    lines = next(h.tooltips for h in root.select({"type": HoverTool}) if h.tooltips[0][0] == "rank")
    assert all(field.strip("@{}") in source.data for _, field in lines)
    return lines


def test_many_ranks_draw_each_bins_extremes_exactly():
    rng = np.random.default_rng(5)
    n, step = 5003, 6  # bins of 6 consecutive ranks (1,000 bins at most), the last one of 5
    ca, wa, cb, wb = rng.uniform(1, 2, (4, n))
    exact = (ca + wa) - (cb + wb)  # independent of the view, and of difference() too
    ds = perfkit.model.combine_runs([synthetic("a", ca, wa), synthetic("b", cb, wb)])
    np.testing.assert_allclose(difference(ds, "a", "b")[1]["A - B"].to_numpy(), exact)
    spikes = spikes_of(compare_view(ds, "a", "b"))
    drawn = spikes.data
    assert len(drawn) <= 2000 and f"of every {step} ranks" in spikes.opts.get().kwargs["title"]
    np.testing.assert_allclose(drawn["A - B"].to_numpy(), exact[drawn["rank"].to_numpy()])
    for first in range(0, n, step):
        inside = drawn[(drawn["rank"] >= first) & (drawn["rank"] < first + step)]
        assert inside["A - B"].max() == exact[first:first + step].max()
        assert inside["A - B"].min() == exact[first:first + step].min()
        assert set(inside["of ranks"]) == {f"{first} to {min(first + step, n) - 1}"}  # hover names the bin
    assert drawn["A - B"].max() == exact.max() and drawn["A - B"].min() == exact.min()
    assert drawn.loc[drawn["A - B"].idxmax(), "rank"] == exact.argmax()  # the rank named is the rank's own
    view = compare_view(ds, "a", "b")
    hover = hovered(view)
    assert [name for name, _ in hover] == ["rank", "A - B of the rank's time", "of ranks"]
    drawn = spikes_of(view).data  # the hover writes each difference in words, as the ticks write the axis
    assert drawn["change"].tolist() == [fmt.seconds(v, signed=True) for v in drawn["A - B"]]


def test_few_ranks_draw_every_rank():
    rng = np.random.default_rng(6)
    ca, wa, cb, wb = rng.uniform(1, 2, (4, 2000))
    spikes = spikes_of(compare_view(perfkit.model.combine_runs([synthetic("a", ca, wa), synthetic("b", cb, wb)]),
                                    "a", "b"))
    assert spikes.data["rank"].tolist() == list(range(2000))
    np.testing.assert_allclose(spikes.data["A - B"].to_numpy(), (ca + wa) - (cb + wb))
    assert spikes.opts.get().kwargs["title"] == "a - b: time per rank" and "of ranks" not in spikes.data
    view = compare_view(perfkit.model.combine_runs([synthetic("a", ca, wa), synthetic("b", cb, wb)]), "a", "b")
    assert [name for name, _ in hovered(view)] == ["rank", "A - B of the rank's time"]


def test_runs_of_other_ranks_are_not_compared():
    ds = perfkit.model.combine_runs([synthetic("a", np.ones(8), np.ones(8)), synthetic("b", np.ones(4), np.ones(4))])
    assert comparable_pairs(ds) == []
    assert "compare" not in explore(ds).select(pn.Tabs)[0]._names
    assert "same ranks" in compare_view(ds, "a", "b").objects[0].object


def test_placement_before_against_its_rerun(placed):
    assert default_pair(placed) == ("before", "round_robin")  # the first re-run of the folder
    _, ranks = difference(placed, "before", "scotch")
    time = placed["profile"].sel(metric="time").sum("function")
    expected = (time.sel(run="before") - time.sel(run="scotch")).to_series()
    np.testing.assert_allclose(ranks["A - B"].to_numpy(), expected.loc[ranks.index].to_numpy())
    view = compare_view(placed, "before", "scotch")
    bars, spikes = (pane.object for pane in view.select(pn.pane.HoloViews))
    assert set(bars.data["function"]) <= {label(f) for f in placed["function"].values}  # in words
    assert spikes.get(0).data["rank"].tolist() == ranks.index.tolist()


def test_explore_compares_with_a_rerun_and_follows_grouping(placed):
    before = placed.sel(run=["before"])
    layout = explore(before, rerun=placed.sel(run=["scotch"]))
    tabs = layout.select(pn.Tabs)[0]
    assert "compare" in tabs._names
    tabs.active = tabs._names.index("compare")
    layout.get_root()
    a, b = (w for w in layout.select(pn.widgets.Select) if w.label in ("run A", "run B"))
    assert (a.value, b.value) == ("before", "scotch")
    by = next(w for w in layout.select(pn.widgets.RadioButtonGroup) if w.label == "group by")
    by.value = "kind"
    bars = next(p.object for p in tabs[tabs.active].select(pn.pane.HoloViews))
    assert set(bars.data["kind"]) <= {label(k) for k in perfkit.KINDS}  # kinds in words
    assert with_rerun(before, None).sizes["run"] == 1


def test_the_explorers_study_summary_spares_reading_the_cube(placed, monkeypatch):
    """Given the study's summary (read once by the per-rank view), pairing runs and ordering groups read no
    cube (at 100 runs x 100,000 ranks each read of it took 15 s), with the same answers as reading it."""
    import perfkit.widgets.compare as compare
    from perfkit.widgets.study_summary import summarise

    mixed = perfkit.model.combine_runs([placed, synthetic("other", np.ones(4), np.ones(4))])
    study = summarise(mixed)
    pairs, (groups, ranks) = comparable_pairs(mixed), difference(mixed, "before", "scotch")
    monkeypatch.setattr(compare, "summarise", lambda ds: pytest.fail("read the cube for its summary"))
    monkeypatch.setattr(compare, "band_order", lambda *a: pytest.fail("read the cube for the stack order"))
    assert comparable_pairs(mixed, study) == pairs and ("before", "other") not in pairs
    given_groups, given_ranks = difference(mixed, "before", "scotch", summary=study)
    pd.testing.assert_frame_equal(given_groups, groups)
    pd.testing.assert_frame_equal(given_ranks, ranks)
    assert compare_view(mixed, "before", "scotch", study=study).objects


def test_hover_and_axes_write_the_difference_in_its_unit():
    n = 8
    ds = perfkit.model.combine_runs([synthetic("a", np.full(n, 1.0123), np.full(n, 0.5)),
                                     synthetic("b", np.full(n, 1.0), np.full(n, 0.5))])
    view = compare_view(ds, "a", "b")
    assert set(spikes_of(view).data["change"]) == {"+12.3 ms"}  # 1.0123 s - 1.0 s per rank
    bars = next(pane.object for pane in view.select(pn.pane.HoloViews))
    assert "+12.3 ms" in set(bars.data["change"])  # the compute group's mean per rank
    labels = [d.pprint_label for d in bars.vdims[:1] + spikes_of(view).vdims[:1]]
    assert labels == ["A - B, mean per rank of time", "A - B of the rank's time"]  # the ticks say ms, not [s]
