"""The placement tab: its numbers against independent computations, its controls, its background jobs."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import perfkit
from perfkit.widgets import placement as tab
from perfkit.widgets.placement import placement_view, run_traffic
from perfkit.widgets.ranks import rank_state

DATA = Path(__file__).resolve().parents[2] / "data"
RUN = DATA / "synthetic" / "96" / "slt.mpinside"
LULESH = DATA / "real" / "matrices" / "MapLib_lulesh_64_p2p.size.csv"


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
    assert table.loc["inter-node bytes [B]", "block"] == pytest.approx(inter_node(matrix, np.arange(96) // 24))
    assert table.loc["inter-node bytes [B]", "Scotch"] == pytest.approx(inter_node(matrix, result.placed.node))
    assert table.loc["inter-node bytes [B]", "vs block"] == pytest.approx(
        inter_node(matrix, result.placed.node) / inter_node(matrix, np.arange(96) // 24))
    before, after = result.node_traffic
    assert float(np.asarray(before.data).sum()) == pytest.approx(matrix.sum())  # self-sends kept on the diagonal
    blocks = matrix.reshape(4, 24, 4, 24).sum(axis=(1, 3))
    np.testing.assert_allclose(np.asarray(before.data), blocks)
    moved = np.asarray(after.data)
    assert moved.sum() - np.trace(moved) == pytest.approx(inter_node(matrix, result.placed.node))
    frames = tab.heatmap_frames(result)
    assert frames[0][2] == frames[1][2]  # one colour scale for both heatmaps
    assert result.placed.info["decision"] in view.decision.object  # the library's own words, as the CLI prints


def test_prediction_interval_brackets_the_estimate(run96):
    result = placement_view(run96).wait()
    pred = result.prediction
    before, after = float(pred["elapsed_before"].values.squeeze()), float(pred["elapsed_after"].values.squeeze())
    assert before == pytest.approx(float(run96["elapsed"].values.squeeze()), rel=1e-6)
    low = before / float(pred["speedup_high"].values.squeeze())
    high = before / float(pred["speedup_low"].values.squeeze())
    assert low <= after <= high <= before
    text = tab.prediction_text(result)
    assert f"{before:.4g} s" in text and f"{after:.4g} s" in text and f"{low:.4g} .. {high:.4g} s" in text


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
    assert view.prediction.object.startswith("Block is the reference")


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
