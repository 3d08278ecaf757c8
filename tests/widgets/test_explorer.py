"""perfkit.explore without a browser: layout, callbacks reaching the plot, traffic heatmap, findings."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import holoviews as hv
import numpy as np
import panel as pn
import pytest
import sparse
import xarray as xr
from bokeh.models import ColumnDataSource, RangeSlider, Title

import perfkit
from perfkit import text as fmt
from perfkit.model import make_run
from perfkit.plots.palette import label
from perfkit.widgets.explorer import block_sum, explore, findings_view, imbalance_table, traffic_view
from tests.helpers import ROOT, small_run
from tests.widgets.sliders import drag

hv.extension("bokeh")

MPIP = ROOT / "data" / "real" / "mpiP" / "HPCCG-strong" / "16" / "test_HPCCG.16.27942.1.mpiP"


@pytest.fixture(scope="module")
def series() -> xr.Dataset:
    """Three runs of the bundled synthetic series; 2048/slt has no traffic matrices."""
    return perfkit.open_runs([ROOT / "data" / "synthetic" / n / "slt.mpinside" for n in ("48", "96", "2048")])


def tab_names(layout: pn.Column) -> list[str]:
    return list(layout.select(pn.Tabs)[0]._names)


def widget(layout: pn.Column, kind: type, name: str):
    return next(w for w in layout.select(kind) if w.label == name)


def drawn_ranks(root) -> tuple[float, float]:
    """Smallest and largest rank drawn by the per-rank view's patches."""
    xs = np.concatenate([s.data["x"] for s in root.select({"type": ColumnDataSource}) if s.name == "rank outline"])
    return float(xs.min()), float(xs.max())


def test_series_layout_has_every_view(series):
    layout = explore(series)
    assert tab_names(layout)[:5] == ["per rank", "scaling", "efficiency", "findings", "traffic"]
    assert widget(layout, pn.widgets.Select, "run").options == ["48/slt", "96/slt", "2048/slt"]
    slider = widget(layout, pn.widgets.IntRangeSlider, "ranks")
    assert (slider.start, slider.end, slider.value) == (0, 47, (0, 47))


def test_single_mpip_run_has_no_scaling_or_traffic():
    ds = perfkit.open_profile(MPIP)
    layout = explore(ds)
    assert tab_names(layout) == ["per rank", "efficiency", "findings", "call sites"]
    assert drawn_ranks(layout.get_root()) == (0, 15)


def test_callbacks_reach_the_plot(series):
    layout = explore(series, run="2048/slt")
    root = layout.get_root()
    assert drawn_ranks(root) == (0, 2046)  # 2,048 ranks > MAX_POINTS: pairs of ranks, drawn at the first
    drag(widget(layout, pn.widgets.IntRangeSlider, "ranks"), (100, 899))
    low, high = drawn_ranks(root)
    assert 100 <= low < 110 and 890 < high <= 899

    widget(layout, pn.widgets.Select, "run").value = "96/slt"
    slider = widget(layout, pn.widgets.IntRangeSlider, "ranks")
    assert (slider.end, slider.value) == (95, (0, 95))
    assert drawn_ranks(root) == (0, 95)

    widget(layout, pn.widgets.RadioButtonGroup, "group by").value = "kind"
    drawn_kinds = {k for s in root.select({"type": ColumnDataSource}) for k in s.data.get("group", [])}
    assert drawn_kinds and drawn_kinds <= {label(k) for k in perfkit.KINDS}  # kinds in words
    widget(layout, pn.widgets.Select, "metric").value = "calls"
    assert [t.text for t in root.select({"type": Title})] == ["96/slt: calls per rank by kind"]


def test_traffic_heatmap_only_where_traffic_exists(series):
    image = traffic_view(series, "96/slt", "bytes")
    assert isinstance(image, hv.Image)
    total = np.nansum(series["traffic"].sel(run="96/slt", quantity="bytes").data.sum())
    assert np.nansum(image.dimension_values(2)) == pytest.approx(float(total))
    assert isinstance(traffic_view(series, "2048/slt", "bytes"), pn.pane.Markdown)
    windowed = traffic_view(series, "96/slt", "count", ranks=(10, 29))
    assert windowed.range("sender") == windowed.range("receiver") == (9.5, 29.5)  # cell edges


def test_large_sparse_traffic_is_block_summed_without_densifying():
    n, rng = 60_000, np.random.default_rng(3)
    senders = rng.integers(0, n, 200_000)
    coords = np.stack([senders, (senders + rng.integers(1, 50, senders.size)) % n, rng.integers(0, 3, senders.size)])
    traffic = sparse.COO(coords, rng.uniform(1, 1e6, senders.size), shape=(n, n, 3))
    ds = make_run(np.ones((n, 1, 6)), ranks=range(n), functions=["Compute"], traffic=traffic,
                  run={"label": "big", "nprocs": n})
    assert isinstance(ds["traffic"].data, sparse.COO)
    image = traffic_view(ds, "big", "time")
    rows, cols = image.dimension_values(2, flat=False).shape
    assert rows == cols <= 256
    expected = traffic.data[traffic.coords[2] == 2].sum()
    assert np.nansum(image.dimension_values(2)) == pytest.approx(expected)
    assert "traffic" in tab_names(explore(ds))


def test_block_sum():
    cells, step = block_sum(np.array([0, 9, 9]), np.array([1, 0, 9]), np.array([1.0, 2.0, 3.0]), 10, max_cells=4)
    assert step == 3 and cells.shape == (4, 4)
    assert cells[0, 0] == 1 and cells[3, 0] == 2 and cells[3, 3] == 3 and cells.sum() == 6


def test_findings_show_rows_then_the_imbalance_in_words(series):
    profiles = series.drop_vars("traffic")
    view = findings_view(profiles, "96/slt", by="kind")
    assert len(view.select(pn.layout.Card)) == len(perfkit.diagnose(profiles, run="96/slt"))
    (table,) = (pane.object for pane in view.select(pn.pane.DataFrame))
    assert set(table["kind"]) <= {label(k) for k in perfkit.KINDS}  # kinds in words, as legends name them
    assert not table["kind"].str.contains("_").any()
    numbers = imbalance_table(profiles, "96/slt", by="kind")
    assert table["max"].tolist() == [fmt.seconds(v) for v in numbers["max"]]
    assert not any(fmt.unreadable(str(v)) for v in table.to_numpy().ravel())


def test_imbalance_table_is_the_imbalance_of_the_run():
    ds = small_run("a", 6, seed=4, traffic=False)
    table = imbalance_table(ds, "a").set_index("function")
    time = ds["profile"].sel(run="a", metric="time").to_pandas()
    assert table.loc["Compute", "max"] == pytest.approx(time["Compute"].max())
    assert table.loc["Compute", "max_over_mean"] == pytest.approx(time["Compute"].max() / time["Compute"].mean())
    assert table["max_minus_mean"].is_monotonic_decreasing


def test_hidden_tabs_compute_nothing(series, monkeypatch):
    from perfkit.widgets import explorer as module

    calls = []
    monkeypatch.setattr(module, "traffic_cells", lambda ds, *args, **kw: calls.append(args) or "traffic")
    monkeypatch.setattr(module, "findings_view",
                        lambda ds, *args, **kw: calls.append(args) or pn.pane.Markdown("findings"))
    layout = explore(series)
    layout.get_root()
    drag(widget(layout, pn.widgets.IntRangeSlider, "ranks"), (5, 20))
    widget(layout, pn.widgets.Select, "run").value = "96/slt"
    assert calls == []
    tabs = layout.select(pn.Tabs)[0]
    tabs.active = tab_names(layout).index("traffic")
    assert calls == [("96/slt", "bytes", (0, 95))]
    tabs.active = 0
    drag(widget(layout, pn.widgets.IntRangeSlider, "ranks"), (10, 30))
    assert len(calls) == 1
    tabs.active = tab_names(layout).index("traffic")
    assert calls[-1] == ("96/slt", "bytes", (10, 30))
    tabs.active = 0
    tabs.active = tab_names(layout).index("traffic")  # nothing changed while hidden: the last view stays
    assert len(calls) == 2
    widget(layout, pn.widgets.Select, "run").value = "48/slt"  # run, range and selection: one update
    assert calls[2:] == [("48/slt", "bytes", (0, 47))]


def test_hidden_tabs_send_no_loading_indicator(series):
    """A tab's loading indicator is a layout pass of the whole page in the browser: only a computing tab shows it."""
    layout = explore(series)
    layout.get_root()
    toggles = []
    for part in layout.select():
        part.param.watch(lambda event: toggles.append(event.new), "loading")
    drag(widget(layout, pn.widgets.IntRangeSlider, "ranks"), (5, 20))
    widget(layout, pn.widgets.Select, "metric").value = "calls"
    assert toggles == []
    tabs = layout.select(pn.Tabs)[0]
    tabs.active = tab_names(layout).index("findings")
    assert toggles[-1:] == [False]  # the findings tab computed, its indicator off


def test_efficiency_tab_shows_the_pop_table_and_the_series(series):
    from perfkit.widgets.explorer import efficiency_view

    view = efficiency_view(series.drop_vars("traffic"))
    html = view.select(pn.pane.HTML)[0].object
    pop = perfkit.pop_metrics(series)
    for run in series["run"].values:
        assert str(run) in html
    assert f"{float(pop['load_balance'].sel(run='96/slt')):.2f}" in html
    assert "Serialisation efficiency" in html and "m = modelled" in html
    assert len(view.select(pn.pane.HoloViews)) == 1


def test_per_rank_view_reads_profiles_without_traffic(series, monkeypatch):
    """Selecting ranks of a sparse traffic cube compiles numba kernels (90 s on a loaded 2-core machine):
    the per-rank view is drawn from the profiles alone."""
    import perfkit.widgets.ranks as ranks

    assert "traffic" in series
    seen = []
    block = ranks.RunBlock
    monkeypatch.setattr(ranks, "RunBlock", lambda ds, *a, **kw: seen.append("traffic" in ds) or block(ds, *a, **kw))
    explore(series).get_root()
    assert seen == [False]


def test_a_tab_shown_before_its_result_is_ready_leaves_the_event_loop_free(series, monkeypatch):
    """The efficiency tab shown while ``pop_metrics`` still computes: a placeholder at once, the session's event
    loop (here a kernel's) runs other callbacks and controls meanwhile, and the tab is drawn with the real
    efficiencies, on the loop's thread, once they are there."""
    from perfkit.widgets import offloop, results, warmup

    monkeypatch.setattr(offloop, "in_kernel", lambda: True)  # this test's event loop plays a kernel's
    monkeypatch.setattr(warmup, "START_DELAY_S", 600.0)  # no background preparation: the tab asks first
    released, real = threading.Event(), results.pop_metrics

    def blocked_pop_metrics(ds):  # released by a callback of the event loop only
        if not released.wait(15):
            raise TimeoutError("pop_metrics never released: the event loop was held")
        return real(ds)

    monkeypatch.setattr(results, "pop_metrics", blocked_pop_metrics)

    seen = shown_early(series, "efficiency", pn.pane.HTML, released)
    assert seen["at_once"].startswith("Computing the POP efficiencies")
    assert seen["tab"] == seen["at_once"]  # the loop ran another callback while the tab computed
    assert seen["title"] == ["96/slt: calls per rank by function"]  # and a control's change reached the plot
    pop = perfkit.pop_metrics(series.drop_vars("traffic"))
    (table,) = seen["drawn"]
    for run in series["run"].values:
        assert f"{float(pop['load_balance'].sel(run=run)):.2f}" in table


def test_the_traffic_tab_reads_its_run_off_the_event_loop(series, monkeypatch):
    """The traffic tab shown while its run's matrix is read: a placeholder at once, a control of the per-rank view
    works meanwhile, and the heatmap is drawn, on the loop's thread, once the matrix is there."""
    from perfkit.widgets import explorer as module
    from perfkit.widgets import offloop, warmup

    monkeypatch.setattr(offloop, "in_kernel", lambda: True)  # this test's event loop plays a kernel's
    monkeypatch.setattr(warmup, "START_DELAY_S", 600.0)
    released, real, reading = threading.Event(), module.traffic_cells, []

    def blocked_traffic_cells(ds, *args, **kwargs):  # released by a callback of the event loop only
        reading.append(threading.current_thread())
        if not released.wait(15):
            raise TimeoutError("the traffic read was never released: the event loop was held")
        return real(ds, *args, **kwargs)

    monkeypatch.setattr(module, "traffic_cells", blocked_traffic_cells)

    seen = shown_early(series, "traffic", pn.pane.HoloViews, released)
    assert seen["at_once"].startswith("Computing the traffic between the ranks in view")
    assert seen["tab"] == seen["at_once"]
    assert seen["title"] == ["96/slt: calls per rank by function"]
    assert reading and seen["loop_thread"] not in reading  # read in a worker thread
    (image,) = seen["drawn"]
    expected = traffic_view(series, "96/slt", "bytes", ranks=(0, 95))  # the same, drawn on this thread
    assert np.array_equal(image.dimension_values(2), expected.dimension_values(2), equal_nan=True)


def shown_early(series: xr.Dataset, tab: str, drawn: type, released: threading.Event) -> dict[str, Any]:
    """The explorer's ``tab`` shown, in an event loop of its own, while its computation waits for ``released``:
    what the tab showed at once (``at_once``), what it showed (``tab``) and the per-rank plot's titles (``title``)
    when another callback of the loop changed the metric and then released the computation, the objects of the
    ``drawn`` panes once the tab shows them (``drawn``), and the loop's thread (``loop_thread``)."""

    async def session():
        loop, seen = asyncio.get_running_loop(), {}
        layout = explore(series, run="96/slt")
        titles = layout.get_root().select({"type": Title})  # the per-rank plot's, kept while another tab shows
        tabs = layout.select(pn.Tabs)[0]

        def meanwhile():  # another callback of the loop, while the tab computes
            seen["tab"] = tabs[tabs.active].select(pn.pane.Markdown)[0].object
            widget(layout, pn.widgets.Select, "metric").value = "calls"  # a control, from the page
            seen["title"] = [t.text for t in titles]
            released.set()

        loop.call_later(0.3, meanwhile)
        tabs.active = tab_names(layout).index(tab)
        seen["at_once"] = tabs[tabs.active].select(pn.pane.Markdown)[0].object
        deadline = time.monotonic() + 60
        while not tabs[tabs.active].select(drawn) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        seen["drawn"] = [pane.object for pane in tabs[tabs.active].select(drawn)]
        seen["loop_thread"] = threading.current_thread()
        return seen

    return in_own_loop(session())


def in_own_loop(coroutine):
    """``coroutine``'s result, run by an event loop in a thread of its own (this thread may be marked as running a
    browser driver's loop, where ``asyncio.run`` is refused)."""
    ran = []
    thread = threading.Thread(target=lambda: ran.append(asyncio.run(coroutine)))
    thread.start()
    thread.join(120)
    return ran[0]


def test_a_served_page_marks_its_changes_and_its_closing_stops_the_background_preparation(series, monkeypatch):
    import weakref

    from bokeh.document import Document
    from panel.io.state import set_curdoc

    from perfkit.widgets import explorer as module
    from perfkit.widgets import gate

    stopped, marked = [], []
    monkeypatch.setattr(module.Warmup, "stop", lambda self: stopped.append(self))
    monkeypatch.setattr(gate, "interaction", lambda: marked.append(1))

    class Session:  # what a served document knows of its session
        id = "a-session"
        request = type("Request", (), {"arguments": {}, "cookies": {}, "headers": {}})()

    session, doc = Session(), Document()
    doc._session_context = weakref.ref(session)
    with set_curdoc(doc):
        layout = explore(series)
        doc.add_root(layout.get_root(doc))
    slider = next(iter(doc.roots[0].select({"type": RangeSlider})))
    slider.set_from_json("value", [5, 20], setter="the page")  # a change the page makes
    assert marked
    assert stopped == []
    for closed in list(doc.session_destroyed_callbacks):
        closed(session)
    assert len(stopped) == 1
