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

from perfkit import text as fmt
from perfkit.placement.cost_model import PlacementCost, placement_cost
from perfkit.placement.strategies import place
from perfkit.placement.topology import Topology

__all__ = ["PlacementCost", "compare", "cost_text", "placement_cost", "readable_costs"]

#: A cost table's cell where the value is not defined (a ratio to a block cost of 0, no switches).
UNDEFINED = "–"


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


def cost_text(column: str, value: Any) -> str:
    """One cell of a cost table in words, by its column (a ``PlacementCost`` field, ``map_time_s``, ``kept_block``,
    ``<field>_vs_block``, ``vs_block``): bytes with SI prefixes (``6.94 GB``; weighted and hop-bytes too), the
    inter-node share as a percentage, times with a unit, messages as counts, ratios to two decimals;
    :data:`UNDEFINED` for NaN."""
    if column == "kept_block":
        return "yes" if value else "no"
    if fmt.missing(value):
        return UNDEFINED
    if column.endswith("vs_block"):
        return fmt.ratio(value)
    if column == "inter_node_fraction":
        return fmt.percent(value)
    if column.endswith("_s"):
        return fmt.seconds(value)
    if column.startswith("messages_"):
        return fmt.count(value)
    return fmt.nbytes(value)


def readable_costs(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`compare`'s table (all or some of its columns) in words, each cell by :func:`cost_text`."""
    return table.apply(lambda column: column.map(lambda value: cost_text(str(column.name), value)))
