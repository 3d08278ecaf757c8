"""One rule for keeping block placement, applied by place() and reported in one line."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from perfkit.placement.cost_model import PlacementCost
from perfkit.placement.decision import MIN_GAIN, decide
from perfkit.placement.strategies import place
from perfkit.placement.topology import Topology
from tests.placement.placement_data import maplib

ZERO = PlacementCost(**{f.name: 0.0 for f in dataclasses.fields(PlacementCost)})


def cost(weighted: float, inter: float) -> PlacementCost:
    return dataclasses.replace(ZERO, weighted_cost=weighted, inter_node_bytes=inter)


@pytest.mark.parametrize(("weighted", "kept"), [(100.0, True), (99.1, True), (98.9, False), (60.0, False)])
def test_block_kept_unless_scotch_gains_more_than_min_gain(weighted: float, kept: bool) -> None:
    assert MIN_GAIN == 0.01
    decision = decide("scotch", cost(weighted, 50.0), cost(100.0, 80.0))
    assert decision.kept_block is kept
    if kept:
        assert decision.message.startswith("kept block: scotch does not beat it by more than 1%")
    else:
        assert decision.message.startswith("chose scotch: -37.5% inter-node bytes")


def test_strategies_asked_for_are_never_replaced() -> None:
    for strategy in ("round_robin", "random"):
        decision = decide(strategy, cost(300.0, 160.0), cost(100.0, 80.0))
        assert not decision.kept_block and "+100.0% inter-node bytes" in decision.message
    assert decide("block", ZERO, ZERO).message == "block placement, as asked"


@pytest.mark.parametrize("sockets", [1, 2])
def test_cg_on_4x16_keeps_block(sockets: int) -> None:
    # Scotch's CG mapping only permutes ranks at the same cost: block placement is written.
    placement = place(maplib("cg"), Topology(nodes=4, cores=16, sockets=sockets), "scotch")
    assert placement.info["kept_block"] is True
    assert np.array_equal(placement.slot, np.arange(64))
    assert placement.info["decision"].startswith("kept block")


def test_lulesh_decision_reports_the_measured_change() -> None:
    topology = Topology(nodes=4, cores=16)
    placement = place(maplib("lulesh"), topology, "scotch")
    block = place(maplib("lulesh"), topology, "block").cost()
    change = placement.cost().inter_node_bytes / block.inter_node_bytes - 1
    assert placement.info["kept_block"] is False
    assert placement.info["decision"].startswith(f"chose scotch: {change:+.1%} inter-node bytes")
