"""Cost model: bytes and messages per level, hop-bytes, link loads, time estimate, comparison table."""

from __future__ import annotations

import math

import numpy as np
import pytest
import xarray as xr

from perfkit.placement.cost import compare, placement_cost
from perfkit.placement.placement import Placement
from perfkit.placement.topology import Topology
from tests.placement.placement_data import maplib


def test_costs_by_hand() -> None:
    topo = Topology(nodes=2, cores=2, sockets=2)
    traffic = np.zeros((4, 4))
    traffic[0, 1], traffic[0, 2], traffic[2, 3], traffic[3, 3] = 10, 100, 1, 7  # the self-send is ignored
    counts = np.zeros((4, 4))
    counts[0, 1], counts[0, 2] = 1, 2
    cost = Placement.from_slots(np.arange(4), topo, traffic=traffic, counts=counts).cost()
    assert (cost.bytes_total, cost.bytes_socket, cost.bytes_node, cost.bytes_switch, cost.bytes_network) == (
        111, 0, 11, 100, 0)
    assert (cost.messages_node, cost.messages_switch) == (1, 2)
    assert cost.inter_node_bytes == 100 and cost.inter_node_fraction == pytest.approx(100 / 111)
    assert cost.hop_bytes == 200 and cost.max_nic_bytes == 100 and math.isnan(cost.max_uplink_bytes)
    assert cost.weighted_cost == 11 * 2 + 100 * 10
    # rank 0: 10 B at node level, 100 B at switch level, 1 + 2 messages
    assert cost.time_s == pytest.approx(10 / 10e9 + 100 / 12.5e9 + 0.6e-6 + 2 * 1.5e-6)


def test_switch_uplinks_and_hops() -> None:
    topo = Topology(nodes=4, cores=1, switch_size=2)
    traffic = np.zeros((4, 4))
    traffic[0, 2], traffic[1, 3], traffic[3, 0] = 50, 20, 5
    cost = placement_cost(np.arange(4), np.zeros(4, dtype=int), topo, traffic)
    assert cost.bytes_network == 75 and cost.max_uplink_bytes == 70
    assert cost.hop_bytes == 4 * 75 and cost.max_nic_bytes == 50
    assert math.isnan(cost.messages_network)


def test_cost_needs_matching_sizes() -> None:
    with pytest.raises(ValueError, match="3 ranks, the placement 4"):
        placement_cost(np.arange(4), np.zeros(4, dtype=int), Topology(nodes=4, cores=1), np.ones((3, 3)))
    with pytest.raises(ValueError, match="no traffic matrix"):
        Placement.from_slots(np.arange(4), Topology(nodes=4, cores=1)).cost()


def test_placement_rejects_double_booking_and_bad_ranges() -> None:
    topo = Topology(nodes=2, cores=2)
    with pytest.raises(ValueError, match="same core"):
        Placement(node=np.array([0, 0]), core=np.array([1, 1]), topology=topo)
    with pytest.raises(ValueError, match="outside the topology"):
        Placement(node=np.array([0, 2]), core=np.array([0, 0]), topology=topo)
    frame = Placement.from_slots(np.array([3, 0]), topo).to_frame(hosts=["a", "b"])
    assert frame["host"].tolist() == ["b", "a"] and frame["core"].tolist() == [1, 0]


def test_compare_table() -> None:
    table = compare(maplib("lulesh"), Topology(nodes=4, cores=16), strategies=["block", "random", "scotch"])
    assert list(table.index) == ["block", "random", "scotch"]
    assert table.loc["block", "inter_node_bytes_vs_block"] == 1.0
    assert table.loc["scotch", "inter_node_bytes_vs_block"] < 1.0 < table.loc["random", "inter_node_bytes_vs_block"]
    assert {"hop_bytes", "max_nic_bytes", "time_s", "map_time_s", "messages_switch"} <= set(table.columns)


def test_cost_takes_the_dataset_place_takes() -> None:
    """``cost(ds)`` reads the matrix and its message counts from a canonical Dataset, as ``place`` does."""
    sizes, counts = maplib("lulesh"), maplib("lulesh", "count")
    runs = np.stack([np.stack([sizes, counts], axis=-1), np.stack([2 * sizes, counts], axis=-1)])
    ds = xr.Dataset({"traffic": (("run", "sender", "receiver", "quantity"), runs)},
                    coords={"run": ["a", "b"], "quantity": ["bytes", "count"]})
    topo = Topology(nodes=4, cores=16, sockets=2)
    placement = Placement.from_slots(np.random.default_rng(1).permutation(64), topo)
    by_hand = placement.cost(sizes, counts)
    from_ds = placement.cost(ds, run="a")
    assert from_ds.inter_node_bytes == by_hand.inter_node_bytes > 0
    assert from_ds.messages_switch == by_hand.messages_switch > 0 and from_ds.time_s == by_hand.time_s
    assert placement.cost(ds, run="b").inter_node_bytes == 2 * by_hand.inter_node_bytes
    assert placement.cost(ds["traffic"].sel(run="a"), counts=counts).time_s == by_hand.time_s
    with pytest.raises(ValueError, match="run"):
        placement.cost(ds)
