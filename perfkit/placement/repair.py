"""Repair over-full targets in a Scotch mapping with the fewest moves.

Scotch balances loads within a tolerance, so a core can receive two ranks (and a node more ranks
than it has cores). ``repair`` moves exactly the excess ranks, each to a target with free
capacity: the ranks that exchange least with the other ranks on their node move, each to a free
target on the node it exchanges most with, then to the topologically closest one.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.sparse as sps


def repair(
    target: np.ndarray,
    capacity: np.ndarray,
    weights: sps.csr_matrix,
    target_node: np.ndarray,
    node_distance: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> tuple[np.ndarray, int]:
    """Return (repaired target per rank, number of ranks moved).

    ``target[r]`` is rank r's target (a core or a node), ``capacity[t]`` how many ranks target t
    may hold, ``weights`` the symmetric rank-to-rank traffic, ``target_node[t]`` the node of
    target t and ``node_distance(a, b)`` a distance between node arrays (e.g. hops).
    """
    target = np.array(target, dtype=np.int64)
    capacity = np.asarray(capacity, dtype=np.int64)
    load = np.bincount(target, minlength=len(capacity))
    if load.sum() > capacity.sum():
        raise ValueError(f"{load.sum()} ranks do not fit in {capacity.sum()} places")
    over = np.flatnonzero(load > capacity)
    if over.size == 0:
        return target, 0
    nodes = int(target_node.max()) + 1
    moved = 0
    for t in over:
        members = np.flatnonzero(target == t)
        on_node = (target_node[target] == target_node[t]).astype(np.float64)
        attachment = weights[members] @ on_node
        for rank in members[np.argsort(attachment, kind="stable")[: load[t] - capacity[t]]]:
            free = np.flatnonzero(load < capacity)
            row = weights.getrow(rank)
            affinity = np.bincount(target_node[target[row.indices]], weights=row.data, minlength=nodes)
            dest_nodes = target_node[free]
            distance = node_distance(np.full(free.size, target_node[t]), dest_nodes)
            best = free[np.lexsort((distance, -affinity[dest_nodes]))[0]]
            target[rank] = best
            load[t] -= 1
            load[best] += 1
            moved += 1
    return target, moved
