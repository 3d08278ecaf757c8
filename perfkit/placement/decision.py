"""When a computed placement replaces the launcher's block placement: one rule, one message.

Scotch is a heuristic and a permuted launch file has a price (a rankfile to carry, ranks that no
longer sit where the user expects), so ``place`` keeps block placement unless the strategy's
placement lowers Scotch's own objective, ``weighted_cost`` (bytes times link cost per level),
by more than ``MIN_GAIN``. The same ``Decision`` is what ``perfkit place`` prints.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfkit.placement.cost_model import PlacementCost

#: Smallest relative cut of ``weighted_cost`` below block for which a computed placement is kept.
MIN_GAIN = 0.01
#: Strategies whose result ``place`` may replace by block placement; the others are taken as asked.
DECIDED = ("scotch", "scotch_nodes")


@dataclass(frozen=True)
class Decision:
    """``kept_block``: block placement is used instead of the strategy's; ``message``: one line saying why."""

    strategy: str
    kept_block: bool
    weighted_change: float
    inter_node_change: float
    message: str


def _change(new: float, old: float) -> float:
    """Relative change new / old - 1; 0 when both are 0 (no traffic), inf when only old is 0."""
    if old == 0:
        return 0.0 if new == 0 else float("inf")
    return new / old - 1


def decide(strategy: str, found: PlacementCost, block: PlacementCost, min_gain: float = MIN_GAIN) -> Decision:
    """Whether ``strategy``'s placement (cost ``found``) replaces block placement (cost ``block``)."""
    weighted = _change(found.weighted_cost, block.weighted_cost)
    inter = _change(found.inter_node_bytes, block.inter_node_bytes)
    if strategy == "block":
        return Decision(strategy, False, 0.0, 0.0, "block placement, as asked")
    if strategy not in DECIDED:
        return Decision(strategy, False, weighted, inter,
                        f"{strategy} placement, as asked: {inter:+.1%} inter-node bytes vs block")
    if weighted < -min_gain:
        return Decision(strategy, False, weighted, inter,
                        f"chose {strategy}: {inter:+.1%} inter-node bytes, "
                        f"{weighted:+.1%} weighted cost (Scotch's objective) vs block")
    return Decision(strategy, True, weighted, inter,
                    f"kept block: {strategy} does not beat it by more than {min_gain:.0%} "
                    f"(weighted cost {weighted:+.1%}, inter-node bytes {inter:+.1%})")
