"""The placement tab: its numbers against independent computations, its controls, its background jobs."""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

import perfkit
from perfkit import text
from perfkit.placement.network import Network
from perfkit.placement.predict import predict_placement, run_seconds
from perfkit.widgets import offloop
from perfkit.widgets import placement as tab
from perfkit.widgets.placement import PlacementResult, placement_view, run_traffic
from perfkit.widgets.ranks import rank_state

DATA = Path(__file__).resolve().parents[2] / "data"
RUN = DATA / "synthetic" / "96" / "slt.mpinside"
LULESH = DATA / "real" / "matrices" / "MapLib_lulesh_64_p2p.size.csv"
#: A closed loop recorded on the testbed (8 nodes x 2 cores, 200 Mbit/s links): before.mpinside and re-runs.
LOOP = DATA / "cluster" / "stencil2d-shuffled"


@pytest.fixture(scope="module")
def run96():
    return perfkit.open_profile(RUN)


@pytest.fixture(scope="module")
def series():
    return perfkit.open_runs([DATA / "synthetic" / n / "slt.mpinside" for n in ("48", "96")])


def dense_bytes(ds) -> np.ndarray:
    traffic = ds["traffic"].sel(quantity="bytes").isel(run=0)
    values = traffic.data.todense() if hasattr(traffic.data, "todense") else np.asarray(traffic.data)
    return np.nan_to_num(np.asarray(values, dtype=float))


def label(ds) -> str:
    return str(ds["run"].values[0])


def inter_node(matrix: np.ndarray, node: np.ndarray) -> float:
    """Bytes between ranks on different nodes, straight from the dense matrix."""
    return float(matrix[node[:, None] != node[None, :]].sum())


def test_tab_numbers_match_the_matrix(run96):
    view = placement_view(run96)
    result = view.wait()
    assert result is not None, view.status.object
    assert (view.state.nodes, view.state.cores, view.state.sockets) == (4, 24, 2)  # the run's own nodes x ppn
    matrix = dense_bytes(run96)
    table = result.table.set_index("measure")
    assert table.loc["inter-node bytes", "block"] == pytest.approx(inter_node(matrix, np.arange(96) // 24))
    assert table.loc["inter-node bytes", "Scotch"] == pytest.approx(inter_node(matrix, result.placed.node))
    assert table.loc["inter-node bytes", "vs block"] == pytest.approx(
        inter_node(matrix, result.placed.node) / inter_node(matrix, np.arange(96) // 24))
    shown = view.table.object.set_index("measure")  # in words, as the tab shows it
    assert shown.loc["inter-node bytes", "block"] == text.nbytes(inter_node(matrix, np.arange(96) // 24))
    assert shown.loc["inter-node share of bytes", "Scotch"] == text.percent(
        inter_node(matrix, result.placed.node) / matrix[~np.eye(96, dtype=bool)].sum())
    assert shown.loc["bytes across switches", "vs block"] == "–"  # one switch: 0 B under both, no ratio
    assert not text.unreadable(shown.to_string()), text.unreadable(shown.to_string())
    before, after = result.node_traffic
    assert float(np.asarray(before.data).sum()) == pytest.approx(matrix.sum())  # self-sends kept on the diagonal
    blocks = matrix.reshape(4, 24, 4, 24).sum(axis=(1, 3))
    np.testing.assert_allclose(np.asarray(before.data), blocks)
    moved = np.asarray(after.data)
    assert moved.sum() - np.trace(moved) == pytest.approx(inter_node(matrix, result.placed.node))
    frames = tab.heatmap_frames(result)
    assert frames[0][2] == frames[1][2]  # one colour scale for both heatmaps
    assert result.placed.info["decision"] in view.decision.object  # the library's own words, as the CLI prints


def test_prediction_is_the_network_aware_model_with_its_interval(run96):
    view = placement_view(run96)
    result = view.wait()
    pred = result.prediction
    assert pred.as_dict() == predict_placement(run96, result.placed).as_dict()
    assert pred.elapsed_before == pytest.approx(run_seconds(run96, label(run96))[0])
    assert pred.elapsed_after_low <= pred.elapsed_after <= pred.elapsed_after_high
    matrix = dense_bytes(run96)
    assert pred.inter_node_bytes_before == pytest.approx(inter_node(matrix, np.arange(96) // 24))
    assert pred.inter_node_bytes_after == pytest.approx(inter_node(matrix, result.placed.node))
    said = view.prediction.object
    assert f"{text.seconds(pred.elapsed_before, digits=4)} -> **{tab.elapsed(pred.elapsed_after)}**" in said
    assert f"interval {tab.elapsed(pred.elapsed_after_low)} .. {tab.elapsed(pred.elapsed_after_high)}" in said
    assert not text.unreadable(said)  # no exponent, no NaN
    assert "link rate **unknown**" in said
    table = tab.prediction_table(result).set_index("")
    assert list(table.columns) == ["before", "predicted", "interval"]  # nothing measured yet
    assert table.loc["inter-node bytes", "predicted"] == text.nbytes(pred.inter_node_bytes_after)
    assert re.fullmatch(r"\d{1,3}(\.\d+)? [kMGT]?B", table.loc["inter-node bytes", "predicted"])  # 414 MB
    assert view.forecast.visible and view.measured.object == ""


def test_link_rate_narrows_the_interval_without_mapping_again(run96):
    view = placement_view(run96)
    unknown = view.wait()
    view.state.link_rate = "1gbit"
    described = view.wait()
    assert described.placed is unknown.placed  # the placement is kept, only the prediction is new
    expected = predict_placement(run96, described.placed, Network.described(1e9))
    assert described.prediction.as_dict() == expected.as_dict()
    wide, narrow = (r.prediction.elapsed_after_high - r.prediction.elapsed_after_low for r in (unknown, described))
    assert narrow <= wide
    assert "links of 1.00 Gbit/s (described)" in view.prediction.object
    view.state.link_rate = "fast"
    refused = view.wait()
    assert refused.prediction is None and view.results.visible and not view.forecast.visible
    assert view.prediction.object.startswith("No prediction: link rate 'fast'")


def relabelled(ds, label: str):
    """``ds`` (one run) as the run ``label``."""
    return ds.assign_coords(run=[label], label=("run", [label]))


def test_rerun_is_set_against_the_prediction(run96):
    rerun = relabelled(run96, "scotch")  # a stand-in: the numbers are checked, not the model
    view = placement_view(run96, rerun=rerun, link_rate="1gbit")
    result = view.wait()
    assert result.placed.strategy == "scotch"
    row = result.comparison
    assert row["elapsed_measured"] == pytest.approx(run_seconds(rerun, "scotch")[0])
    assert row["bytes_measured"] == pytest.approx(inter_node(dense_bytes(rerun), result.placed.node))
    assert row == result.prediction.compare(row["elapsed_measured"], row["bytes_measured"])
    table = tab.prediction_table(result).set_index("")
    assert table.loc["elapsed", "measured (re-run)"] == tab.elapsed(row["elapsed_measured"])
    assert table.loc["elapsed", "error"] == f"{row['elapsed_error_pct']:+.1f} %"
    assert table.loc["elapsed", "in interval"] == (tab.INSIDE if row["in_interval"] else tab.OUTSIDE)
    assert "`scotch`" in view.measured.object and "no host names" in view.measured.object
    view.state.strategy = "round_robin"  # the re-run is Scotch's: nothing to compare with
    assert view.wait().comparison is None and "measured (re-run)" not in tab.prediction_table(view.result)
    view.state.param.update(strategy="scotch", nodes=8, cores=12)
    assert view.wait().comparison is None and "ran on 4 nodes" in view.measured.object


def test_rerun_host_names_place_its_ranks(run96):
    result = placement_view(run96).wait()
    hosts = [f"node{n:03d}" for n in (result.placed.node + 1) % 4]  # the same groups, other node numbers
    rerun = relabelled(run96, "after").assign(host=(("run", "rank"), [hosts]))
    view = placement_view(run96, rerun=rerun)
    compared = view.wait()
    assert compared.comparison["bytes_measured"] == pytest.approx(
        inter_node(dense_bytes(rerun), result.placed.node))
    assert "host names say" in view.measured.object
    moved = rerun.assign(host=(("run", "rank"), [[f"node{r // 24:03d}" for r in range(96)]]))  # block
    view = placement_view(run96, rerun=moved)
    assert view.wait().comparison is None and "other nodes than the placement shown" in view.measured.object


def test_reruns_labelled_with_their_strategy(run96):
    data = xr.Dataset(coords={"run": ["a/before", "a/scotch", "b/scotch", "a/round_robin", "a/mine"]})
    assert tab.labelled_reruns(data, "a/before") == {"scotch": "a/scotch", "round_robin": "a/round_robin"}
    assert tab.labelled_reruns(data, "a/scotch") == {}  # a re-run is not re-run itself
    two = xr.concat([relabelled(run96, "x"), relabelled(run96, "y")], "run")
    with pytest.raises(ValueError, match="label each with the strategy"):
        tab.rerun_strategies(two, None)
    assert list(tab.rerun_strategies(relabelled(run96, "x"), "random")) == ["random"]


@pytest.mark.skipif(not LOOP.exists(), reason=f"{LOOP} not recorded yet")
def test_recorded_closed_loop_in_one_dataset():
    runs = perfkit.open_runs(sorted(LOOP.glob("*.mpinside")))
    assert "before" in runs["run"].values
    view = placement_view(runs, run="before", link_rate="200mbit")
    result = view.wait()
    assert (result.placed.topology.nodes, result.placed.topology.cores) == (8, 2)
    before = perfkit.open_profile(LOOP / "before.mpinside")
    after = perfkit.open_profile(LOOP / "scotch.mpinside")
    expected = predict_placement(before, result.placed, Network.described(200e6))
    row = result.comparison
    assert row["elapsed_predicted"] == pytest.approx(expected.elapsed_after)
    assert row["elapsed_measured"] == pytest.approx(run_seconds(after, "scotch")[0])
    assert abs(row["bytes_error_pct"]) < 3  # bytes are predicted from the same pattern


def test_controls_change_the_placement_and_the_launch_files_read_back(run96, tmp_path):
    view = placement_view(run96)
    view.wait()
    view.state.param.update(nodes=8, cores=12, strategy="round_robin")
    result = view.wait()
    assert result.placed.topology.nodes == 8 and result.placed.strategy == "round_robin"
    np.testing.assert_array_equal(result.placed.node, np.arange(96) % 8)
    from perfkit.placement.launch import FORMATS, read_launch

    for fmt in FORMATS:
        path = tmp_path / fmt
        path.write_text(view.launch_file(fmt).read())
        again = read_launch(path, fmt, result.placed.topology)
        np.testing.assert_array_equal(again.node, result.placed.node)
        if fmt not in ("machinefile", "mpt"):  # those carry no core numbers
            np.testing.assert_array_equal(again.core, result.placed.core)


def test_host_list_names_the_nodes(run96):
    view = placement_view(run96)
    view.wait()
    view.state.param.update(hosts="a 24, b 24, c 24, d 24", strategy="block")
    view.wait()
    lines = view.launch_file("rankfile").read().splitlines()
    assert lines[0] == "rank 0=a slot=0:0" and lines[-1] == "rank 95=d slot=1:11"
    pred = view.result.prediction  # block again: the profile ran block-placed
    assert pred.inter_node_bytes_after == pytest.approx(pred.inter_node_bytes_before)


def test_impossible_topology_is_reported_not_raised(run96):
    view = placement_view(run96)
    view.wait()
    view.state.cores = 7  # not a multiple of 2 sockets
    assert view.wait() is None
    assert "multiple of sockets" in view.status.object and not view.results.visible
    assert all(button.disabled for button in view.downloads)
    view.state.param.update(cores=8, sockets=1)  # 4 x 8 cores cannot hold 96 ranks
    assert view.wait() is None and "do not fit" in view.status.object


def test_run_follows_the_explorer_and_is_cut_to_its_ranks(series, run96):
    cut = run_traffic(series, "48/slt")
    assert cut.sizes["sender"] == 48 and cut.sizes["rank"] == 48 and list(cut["run"].values) == ["48/slt"]
    np.testing.assert_array_equal(dense_bytes(run_traffic(series, "96/slt")), dense_bytes(run96))
    state = rank_state(series, "96/slt")
    view = placement_view(series, state)
    assert view.wait().placed.nranks == 96
    state.run = "48/slt"
    result = view.wait()
    assert result.placed.nranks == 48 and (view.state.nodes, view.state.cores) == (2, 24)


def test_bare_matrix_has_no_prediction():
    matrix = perfkit.open_matrix(LULESH, orientation="sender_receiver")
    view = placement_view(matrix)
    result = view.wait()
    assert result.placed.nranks == 64 and (view.state.nodes, view.state.cores) == (4, 16)
    assert result.prediction is None and "bare matrix" in view.prediction.object


def wait_for(condition, timeout: float = 10.0) -> None:
    done = threading.Event()
    for _ in range(int(timeout / 0.05)):
        if condition():
            return
        done.wait(0.05)
    raise AssertionError("condition not met")


def join_jobs() -> None:
    for thread in threading.enumerate():
        if thread.name == "perfkit-placement":
            thread.join(30)


def test_stale_and_cancelled_results_are_discarded(run96, monkeypatch):
    view = placement_view(run96)
    view.wait()
    release = threading.Event()
    compute = tab.compute_result

    def slow(data, topology, strategy, **kwargs):
        if strategy == "random":
            release.wait(30)
        return compute(data, topology, strategy, **kwargs)

    monkeypatch.setattr(tab, "compute_result", slow)
    view.state.strategy = "random"  # blocks until released
    wait_for(lambda: view.progress.visible and view.cancel.visible and "Mapping with random" in view.status.object)
    view.state.strategy = "round_robin"  # supersedes it
    assert view.wait().placed.strategy == "round_robin"
    release.set()
    join_jobs()  # the stale job ends now and must not overwrite the table
    assert view.result.placed.strategy == "round_robin" and "round-robin" in view.decision.object

    release.clear()
    view.state.param.update(strategy="random", nodes=8)  # not seen yet (seen ones come from the tab's cache)
    view.cancel_job()
    assert not view.progress.visible and "Cancelled" in view.status.object
    release.set()
    join_jobs()
    assert view.result.placed.strategy == "round_robin"


def test_a_map_arriving_after_its_prediction_is_dropped(run96, monkeypatch):
    """Callbacks scheduled from the job's thread reached a served page in reverse order under load: the map
    without its prediction must not replace the whole result shown before it."""
    view = placement_view(run96, link_rate="1gbit")
    view.wait()
    queued = []
    monkeypatch.setattr(view, "_schedule", queued.append)
    view.state.strategy = "round_robin"
    finishes = lambda: [c for c in queued if c.func.__name__ == "_finish"]  # noqa: E731
    wait_for(lambda: len(finishes()) == 2)
    for callback in reversed(finishes()):
        callback()
    assert view.result.placed.strategy == "round_robin" and view.result.prediction is not None
    assert view.forecast.visible and view.prediction.object.startswith("**Predicted elapsed time** placed by")
    assert view._settled.is_set() and not view.progress.visible


def test_in_a_kernel_the_page_changes_on_the_loop_thread_only(run96, monkeypatch):
    """In a notebook kernel (a running event loop) the job's results reach the page from the loop's thread:
    a Voila page took no further change after parts of two messages sent from two threads interleaved."""
    monkeypatch.setattr(offloop, "in_kernel", lambda: True)

    async def kernel() -> tuple[int, set[int], list[str]]:
        view = placement_view(run96, link_rate="1gbit")
        changed_by: set[int] = set()
        for pane in (view.status, view.decision, view.prediction):
            pane.param.watch(lambda _: changed_by.add(threading.get_ident()), "object")
        first = view.wait()  # a cell that waits: blocks the loop, so it applies the changes itself
        view.state.strategy = "round_robin"  # a control changed from the page: the loop runs on
        for _ in range(600):
            await asyncio.sleep(0.05)
            if view._settled.is_set():
                break
        return threading.get_ident(), changed_by, [first.placed.strategy, view.result.placed.strategy,
                                                   view.prediction.object]

    loop_thread, changed_by, (first, second, prediction) = in_own_loop(kernel())
    assert changed_by == {loop_thread}
    assert (first, second) == ("scotch", "round_robin") and prediction.startswith("**Predicted elapsed time**")


def test_outside_a_kernel_a_running_loop_is_not_taken_for_one(run96):
    """A script's loop marked running in its thread (a browser driver's) serves no callbacks while the script
    runs: outside a kernel the job's results are shown from its own thread, as in any script."""
    async def script() -> PlacementResult:
        view = placement_view(run96)
        view.state.strategy = "round_robin"
        assert view._settled.wait(60)  # blocks the loop: results that waited for it would never come
        return view.result

    assert in_own_loop(script()).placed.strategy == "round_robin"


def in_own_loop(coroutine: Any) -> Any:
    """``coroutine``'s result, run by an event loop in a thread of its own: this thread may already be marked
    as running a loop (a browser driver's), where ``asyncio.run`` is refused."""
    ran: list = []
    thread = threading.Thread(target=lambda: ran.append(asyncio.run(coroutine)))
    thread.start()
    thread.join(120)
    return ran[0]


def test_dataset_without_traffic_is_refused(run96):
    with pytest.raises(ValueError, match="no 'traffic'"):
        placement_view(run96.drop_vars("traffic"))


def test_map_time_limit_stops_scotch(run96):
    view = placement_view(run96)
    view.wait()
    view.state.param.update(strategy="scotch_nodes", timeout=0.001)  # less than a worker takes to start
    assert view.wait() is None
    assert "Cannot place" in view.status.object and "0.001" in view.status.object, view.status.object
    view.state.timeout = 60.0  # a failed map is not remembered: the same configuration maps again
    assert view.wait().placed.strategy == "scotch_nodes"


def test_selected_ranks_are_located_under_both_placements(run96):
    state = rank_state(run96)
    view = placement_view(run96, state)
    result = view.wait()
    assert view.selection.object == ""
    state.param.update(selected=[0, 1, 2, 50], selection_label="box")
    text = view.selection.object
    block_nodes = np.unique(result.block.node[[0, 1, 2, 50]])
    placed_nodes = np.unique(result.placed.node[[0, 1, 2, 50]])
    assert text.startswith("**The 4 selected ranks** (box)")
    assert f"on nodes {tab.describe_ranks(block_nodes)} under block" in text
    assert f"on nodes {tab.describe_ranks(placed_nodes)} under" in text
    state.selected = None
    assert view.selection.object == ""


def test_node_heatmaps_colour_bar_ticks_carry_the_unit():
    from bokeh.models import ColorBar

    from perfkit.plots.axes import log_unit_formatter

    for fig in tab.NodeHeatmaps().figures:  # a log scale over decades: each tick its own prefix (5 MB, 20 MB)
        (bar,) = [item for item in fig.right if isinstance(item, ColorBar)]
        assert bar.formatter.code == log_unit_formatter("B").code and bar.title == "bytes"
