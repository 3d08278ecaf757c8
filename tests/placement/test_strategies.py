"""place(): every strategy, every input kind; Scotch beats block on real and synthetic traffic."""

from __future__ import annotations

import numpy as np
import pytest
import sparse
import xarray as xr

import perfkit
from perfkit.model import TRAFFIC_QUANTITIES, make_run
from perfkit.placement import scotch
from perfkit.placement.strategies import STRATEGIES, place
from perfkit.placement.synthetic import renumber, stencil_3d
from perfkit.placement.topology import Topology
from tests.placement.placement_data import APPS, maplib

MAPLIB_TOPOLOGY = Topology(nodes=4, cores=16)


@pytest.mark.parametrize("app", APPS)
def test_scotch_never_sends_more_between_nodes_than_block(app: str) -> None:
    matrix = maplib(app)
    block = place(matrix, MAPLIB_TOPOLOGY, "block").cost()
    for strategy in ("scotch", "scotch_nodes"):
        found = place(matrix, MAPLIB_TOPOLOGY, strategy).cost()
        assert found.inter_node_bytes <= block.inter_node_bytes, (app, strategy)


def test_scotch_improves_maplib_where_block_is_not_optimal() -> None:
    for app in ("amg", "lulesh"):
        placement = place(maplib(app), MAPLIB_TOPOLOGY)
        block = place(maplib(app), MAPLIB_TOPOLOGY, "block")
        assert placement.cost().inter_node_bytes < 0.8 * block.cost().inter_node_bytes
        assert placement.info["kept_block"] is False


def test_shuffled_stencil_scotch_halves_inter_node_bytes() -> None:
    matrix = renumber(stencil_3d((8, 8, 8)), seed=7)
    topology = Topology(nodes=8, cores=64, sockets=2)
    block = place(matrix, topology, "block").cost().inter_node_bytes
    for strategy in ("scotch", "scotch_nodes"):
        assert place(matrix, topology, strategy).cost().inter_node_bytes <= 0.5 * block, strategy


def test_same_seed_same_placement() -> None:
    matrix = renumber(stencil_3d((8, 8, 4)), seed=1)
    topology = Topology(nodes=4, cores=64, sockets=2)
    for strategy in ("scotch", "scotch_nodes", "random"):
        first, again = (place(matrix, topology, strategy, seed=5) for _ in range(2))
        assert np.array_equal(first.slot, again.slot), strategy


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_core_used_at_most_once(strategy: str) -> None:
    topology = Topology(nodes=5, cores=16, sockets=2, switch_size=2)
    placement = place(maplib("btmz"), topology, strategy)
    assert np.unique(placement.slot).size == 64
    assert placement.slot.max() == 63  # the first 64 cores, as block placement uses
    assert np.array_equal(placement.socket, placement.core // 8)


def test_block_and_round_robin_layouts() -> None:
    topology = Topology(nodes=3, cores=2)
    matrix = np.ones((5, 5))
    assert place(matrix, topology, "block").node.tolist() == [0, 0, 1, 1, 2]
    robin = place(matrix, topology, "round_robin")
    assert robin.node.tolist() == [0, 1, 2, 0, 1] and robin.core.tolist() == [0, 0, 0, 1, 1]


@pytest.mark.parametrize("topology", [Topology.torus((2, 2), cores=16), Topology.hypercube(2, cores=16)])
def test_direct_networks_use_node_level_scotch(topology: Topology) -> None:
    matrix = maplib("lulesh")
    placement = place(matrix, topology)
    assert np.unique(placement.slot).size == 64
    assert placement.cost().hop_bytes <= place(matrix, topology, "block").cost().hop_bytes


def test_too_many_ranks_rejected_before_scotch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scotch, "run_isolated", None)
    with pytest.raises(ValueError, match="65 ranks do not fit on 4 nodes x 16 cores"):
        place(np.ones((65, 65)), MAPLIB_TOPOLOGY)
    with pytest.raises(ValueError, match="negative"):
        place(-np.ones((4, 4)), MAPLIB_TOPOLOGY)
    with pytest.raises(ValueError, match="unknown strategy"):
        place(np.ones((4, 4)), MAPLIB_TOPOLOGY, "best")


def test_dataset_dataarray_and_sparse_inputs() -> None:
    size, count = maplib("amg"), maplib("amg", "count")
    traffic = np.stack([size, count, np.zeros_like(size)], axis=-1)
    ds = make_run(np.zeros((64, 1, 6)), ranks=range(64), functions=["Compute"], traffic=traffic,
                  run={"label": "amg64"})
    assert list(ds["quantity"].values) == list(TRAFFIC_QUANTITIES)
    from_ds = place(ds, MAPLIB_TOPOLOGY, "block")
    assert from_ds.counts is not None
    assert from_ds.cost().messages_switch == pytest.approx(place(count, MAPLIB_TOPOLOGY, "block").cost().bytes_switch)
    by_count = place(ds, MAPLIB_TOPOLOGY, "block", quantity="count", run="amg64")
    assert by_count.cost().bytes_total == pytest.approx(count.sum() - np.trace(count))
    expected = place(size, MAPLIB_TOPOLOGY, "block").cost()
    array = xr.DataArray(size.T, dims=("receiver", "sender"))
    assert place(array, MAPLIB_TOPOLOGY, "block").cost().bytes_switch == expected.bytes_switch
    coo = sparse.COO.from_numpy(size)
    assert place(coo, MAPLIB_TOPOLOGY, "block").cost().bytes_switch == expected.bytes_switch
    with pytest.raises(ValueError, match="quantity 'volume'"):
        place(ds, MAPLIB_TOPOLOGY, quantity="volume")
    with pytest.raises(ValueError, match="run 'other'"):
        place(ds, MAPLIB_TOPOLOGY, run="other")


def test_combined_runs_drop_absent_ranks() -> None:
    traffic = np.full((1, 64, 64, 1), np.nan)  # a 16-rank run combined with a 64-rank one
    traffic[0, :16, :16, 0] = maplib("cg")[:16, :16]
    ds = xr.Dataset(
        {"traffic": (("run", "sender", "receiver", "quantity"), traffic)},
        coords={"run": ["a"], "quantity": ["bytes"]},
    )
    assert place(ds, Topology(nodes=1, cores=16), "block").nranks == 16


def test_public_entry_points() -> None:
    assert perfkit.place is place
    assert perfkit.Topology is Topology


@pytest.mark.parametrize("numbering", ["natural", "renumbered"])
def test_scotch_takes_the_node_route_above_the_threshold(numbering: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from perfkit.placement import strategies

    matrix = stencil_3d((16, 16, 16))
    matrix = renumber(matrix, seed=1) if numbering == "renumbered" else matrix
    topology = Topology(nodes=86, cores=48)
    monkeypatch.setattr(strategies, "CORE_LEVEL_MAX_RANKS", 4096)
    core = place(matrix, topology, "scotch")
    monkeypatch.setattr(strategies, "CORE_LEVEL_MAX_RANKS", 4095)
    nodes = place(matrix, topology, "scotch")
    assert (core.info["route"], nodes.info["route"]) == ("cores", "nodes")
    assert np.array_equal(nodes.slot, place(matrix, topology, "scotch_nodes").slot)
    assert nodes.info["groups_per_node"] == 8  # parts of 6 cores
    assert nodes.cost().inter_node_bytes <= 1.02 * core.cost().inter_node_bytes


def test_node_route_parts_follow_sockets() -> None:
    topology = Topology(nodes=8, cores=24, sockets=2)
    placement = place(renumber(stencil_3d((8, 8, 3)), seed=3), topology, "scotch_nodes")
    assert placement.info["groups_per_node"] == 4  # 2 sockets x 2 parts of 6 cores
    assert np.unique(placement.slot).size == 192 and placement.slot.max() == 191
    assert np.array_equal(placement.socket, placement.core // 12)
