"""Costs of placements side by side: ``compare`` runs strategies and tabulates their cost.

The cost model itself (``PlacementCost``, ``placement_cost``: bytes per topology level,
hop-bytes, link loads, a time estimate) lives in ``perfkit.placement.cost_model``, below the
strategies; it is re-exported here so ``from perfkit.placement.cost import placement_cost`` works.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from perfkit.placement.cost_model import PlacementCost, placement_cost
from perfkit.placement.strategies import place
from perfkit.placement.topology import Topology

__all__ = ["PlacementCost", "compare", "placement_cost"]


def compare(
    matrix: Any,
    topology: Topology,
    strategies: Sequence[str] = ("block", "round_robin", "random", "scotch"),
    *,
    seed: int = 0,
    run: int | str | None = None,
    quantity: str = "bytes",
    balance: float = 0.05,
    timeout: float | None = 300.0,
) -> pd.DataFrame:
    """One row per strategy: the ``PlacementCost`` fields, map time [s], whether the strategy kept
    block placement, and bytes relative to block."""
    rows = []
    for name in strategies:
        placement = place(
            matrix, topology, strategy=name, seed=seed, run=run, quantity=quantity, balance=balance, timeout=timeout
        )
        info = placement.info
        rows.append({
            "strategy": name,
            **placement.cost().as_dict(),
            "map_time_s": info.get("map_time_s", 0.0),
            "kept_block": bool(info.get("kept_block", False)),
        })
    table = pd.DataFrame(rows).set_index("strategy")
    block = place(matrix, topology, strategy="block", run=run, quantity=quantity).cost()
    for field in ("inter_node_bytes", "hop_bytes"):
        base = getattr(block, field)
        table[f"{field}_vs_block"] = table[field] / base if base else np.nan
    return table
