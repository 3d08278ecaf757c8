"""Placement strategies: block, round-robin, random, Scotch (core level) and Scotch at node level + split.

Every strategy places N ranks on the first N cores of the topology (node-major), so their costs
compare like for like and the result can be written as an mpiplace permutation file.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import numpy as np
import scipy.sparse as sps

from perfkit.placement.cost import placement_cost
from perfkit.placement.placement import Placement
from perfkit.placement.repair import repair
from perfkit.placement.scotch import graph_from_matrix, map_graph
from perfkit.placement.topology import Topology
from perfkit.placement.traffic import select_traffic

STRATEGIES = ("block", "round_robin", "random", "scotch", "scotch_nodes")


def place(
    data: Any,
    topology: Topology,
    strategy: str = "scotch",
    *,
    seed: int = 0,
    run: int | str | None = None,
    quantity: str = "bytes",
    balance: float = 0.05,
    timeout: float | None = 300.0,
) -> Placement:
    """Place the ranks of a traffic matrix on ``topology``.

    ``data``: 2D array / ``sparse.COO`` / DataArray (sender, receiver) / canonical Dataset with
    ``traffic`` (``run`` and ``quantity`` select the matrix). ``strategy``:

    * ``block``: rank r on core r; ``round_robin``: rank r on node r mod nodes;
    * ``random``: a random permutation (``seed``);
    * ``scotch``: Scotch static mapping of the symmetrised matrix onto the core-level tree
      (tleaf); on torus and hypercube topologies the node-level mapping below;
    * ``scotch_nodes``: Scotch maps ranks to nodes (capacity = cores per node), then each node's
      ranks are split over its sockets by greedy graph growing. For very large rank counts.

    ``balance`` is the load imbalance Scotch may use to cut less traffic (0.05: a core or node
    may get 5% more than its share); the few over-full cores or nodes are then repaired by moving
    the least attached ranks to free cores. Scotch runs in a worker process, killed after
    ``timeout`` seconds (``ScotchTimeout``). Its heuristic result is replaced by the block
    placement when that costs less in Scotch's own objective (``weighted_cost``);
    ``info["kept_block"]`` says so.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; expected one of {STRATEGIES}")
    traffic, counts = select_traffic(data, run=run, quantity=quantity)
    n = traffic.shape[0]
    if n > topology.capacity:
        raise ValueError(
            f"{n} ranks do not fit on {topology.nodes} nodes x {topology.cores} cores = {topology.capacity} cores"
        )
    info: dict[str, Any] = {"seed": seed, "balance": balance}
    start = time.perf_counter()
    if strategy == "block":
        slot = np.arange(n, dtype=np.int64)
    elif strategy == "round_robin":
        slot = np.arange(n, dtype=np.int64)
        slot = slot[np.lexsort((slot // topology.cores, slot % topology.cores))]
    elif strategy == "random":
        slot = np.random.default_rng(seed).permutation(n).astype(np.int64)
    else:
        if strategy == "scotch" and topology.shape == "tree":
            slot = _scotch_cores(traffic, topology, seed, balance, timeout, info)
        else:
            slot = _scotch_nodes(traffic, topology, seed, balance, timeout, info)
        slot = _not_worse_than_block(slot, traffic, topology, info)
    info["wall_time_s"] = time.perf_counter() - start
    return Placement.from_slots(slot, topology, strategy=strategy, traffic=traffic, counts=counts, info=info)


def _not_worse_than_block(
    slot: np.ndarray, traffic: sps.csr_matrix, topology: Topology, info: dict[str, Any]
) -> np.ndarray:
    """Keep the block placement when Scotch's heuristic result costs more in its own objective."""
    block = np.arange(slot.size, dtype=np.int64)
    found, default = (
        placement_cost(topology.node_of(s), topology.socket_of(s), topology, traffic).weighted_cost
        for s in (slot, block)
    )
    info["kept_block"] = bool(default < found)
    return block if default < found else slot


def _symmetric(traffic: sps.csr_matrix) -> sps.csr_matrix:
    sym = (traffic + traffic.T).tocsr()
    sym.setdiag(0)
    sym.eliminate_zeros()
    return sym


def _scotch_cores(
    traffic: sps.csr_matrix,
    topology: Topology,
    seed: int,
    balance: float,
    timeout: float | None,
    info: dict[str, Any],
) -> np.ndarray:
    """Core-level Scotch map onto the first N cores, double-booked cores repaired."""
    n = traffic.shape[0]
    arch = topology.scotch_arch(n)
    result = map_graph(graph_from_matrix(traffic), arch, seed=seed, balance=balance, timeout=timeout)
    slot_node = topology.node_of(np.arange(n, dtype=np.int64))
    slot, moved = repair(result.terminal, np.ones(n, dtype=np.int64), _symmetric(traffic), slot_node, topology.hops)
    info.update(map_time_s=result.seconds, moved=moved)
    return slot


def _scotch_nodes(
    traffic: sps.csr_matrix,
    topology: Topology,
    seed: int,
    balance: float,
    timeout: float | None,
    info: dict[str, Any],
) -> np.ndarray:
    """Node-level Scotch map (capacity = cores per node) followed by a split inside each node."""
    n = traffic.shape[0]
    nodes = -(-n // topology.cores)
    capacity = np.full(nodes, topology.cores, dtype=np.int64)
    capacity[-1] = n - (nodes - 1) * topology.cores
    sym = _symmetric(traffic)
    arch = topology.scotch_node_arch(nodes)
    result = map_graph(graph_from_matrix(traffic), arch, seed=seed, balance=balance, timeout=timeout)
    node, moved = repair(result.terminal, capacity, sym, np.arange(nodes), topology.hops)
    info.update(map_time_s=result.seconds, moved=moved)
    split_start = time.perf_counter()
    core = split_nodes(node, sym, topology)
    info["split_time_s"] = time.perf_counter() - split_start
    return node * topology.cores + core


def split_nodes(node: np.ndarray, weights: sps.csr_matrix, topology: Topology) -> np.ndarray:
    """Core within its node for each rank, grouping heavily communicating ranks on one socket.

    Greedy graph growing per node: start a socket from the unassigned rank with the least traffic
    to the others, then add the rank with the most traffic to that socket until it is full.
    With one socket all cores are equivalent and ranks take them in rank order.
    """
    order = np.argsort(node, kind="stable")
    bounds = np.searchsorted(node[order], np.arange(node.max() + 2))
    core = np.empty(node.size, dtype=np.int64)
    cps = topology.cores_per_socket
    for lo, hi in itertools.pairwise(bounds):
        members = order[lo:hi]
        if topology.sockets == 1 or members.size <= 1:
            core[members] = np.arange(members.size)
            continue
        local = weights[members][:, members].toarray()
        free = np.ones(members.size, dtype=bool)
        sequence = []
        while free.any():
            gain = np.where(free, -local[:, free].sum(axis=1), -np.inf)
            pick = int(np.argmax(gain))
            group_gain = np.zeros(members.size)
            for _ in range(min(cps, int(free.sum()))):
                free[pick] = False
                sequence.append(pick)
                group_gain += local[pick]
                if free.any():
                    pick = int(np.argmax(np.where(free, group_gain, -np.inf)))
        core[members[sequence]] = np.arange(members.size)
    return core
