"""Placement strategies: block, round-robin, random, and Scotch by two routes (core level; nodes first).

Every strategy places N ranks on the first N cores of the topology (node-major), so their costs
compare like for like and the result can be written as an mpiplace permutation file.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import numpy as np
import scipy.sparse as sps

from perfkit.placement.cost_model import placement_cost
from perfkit.placement.decision import DECIDED, decide
from perfkit.placement.placement import Placement
from perfkit.placement.repair import repair
from perfkit.placement.scotch import graph_from_matrix, map_graph
from perfkit.placement.topology import Topology
from perfkit.placement.traffic import select_traffic

STRATEGIES = ("block", "round_robin", "random", "scotch", "scotch_nodes")
#: Above this many ranks ``strategy="scotch"`` takes the node route: core-level mapping time grows
#: super-linearly while the node route keeps inter-node bytes within 2% (benchmarks/bench_placement.py).
CORE_LEVEL_MAX_RANKS = 8192


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
      (tleaf) up to ``CORE_LEVEL_MAX_RANKS`` ranks; above that, and on torus and hypercube
      topologies, the node route below (``info["route"]`` says which: ``"cores"`` or ``"nodes"``);
    * ``scotch_nodes``: the node route: Scotch maps ranks onto the nodes, each split into
      ``topology.groups_per_node()`` parts (its sockets, or two halves of a one-socket node;
      capacity = cores per part), and each part's ranks take its cores in rank order (on torus
      and hypercube targets: onto whole nodes, then a greedy split over the sockets).

    ``balance`` is the load imbalance Scotch may use to cut less traffic (0.05: a core or node
    may get 5% more than its share); the few over-full cores or nodes are then repaired by moving
    the least attached ranks to free cores. Scotch runs in a worker process, killed after
    ``timeout`` seconds (``ScotchTimeout``). Scotch's result replaces block placement only when
    it lowers Scotch's own objective (``weighted_cost``) by more than
    ``perfkit.placement.decision.MIN_GAIN``; ``info["kept_block"]`` says whether block was kept
    and ``info["decision"]`` says why, in one line.
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
    block = np.arange(n, dtype=np.int64)
    if strategy == "block":
        slot = block
    elif strategy == "round_robin":
        slot = block[np.lexsort((block // topology.cores, block % topology.cores))]
    elif strategy == "random":
        slot = np.random.default_rng(seed).permutation(n).astype(np.int64)
    else:
        core_level = strategy == "scotch" and topology.shape == "tree" and n <= CORE_LEVEL_MAX_RANKS
        info["route"] = "cores" if core_level else "nodes"
        route = _scotch_cores if core_level else _scotch_nodes
        slot = route(traffic, topology, seed, balance, timeout, info)
    if strategy in DECIDED:
        found, default = (
            placement_cost(topology.node_of(s), topology.socket_of(s), topology, traffic) for s in (slot, block)
        )
        decision = decide(strategy, found, default)
        info.update(kept_block=decision.kept_block, decision=decision.message)
        slot = block if decision.kept_block else slot
    info["wall_time_s"] = time.perf_counter() - start
    return Placement.from_slots(slot, topology, strategy=strategy, traffic=traffic, counts=counts, info=info)


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
    """Scotch map onto node parts (capacity = cores per part), then cores within each part."""
    n = traffic.shape[0]
    per_node = topology.groups_per_node()
    size = topology.cores // per_node
    groups = -(-n // size)
    capacity = np.full(groups, size, dtype=np.int64)
    capacity[-1] = n - (groups - 1) * size
    sym = _symmetric(traffic)
    arch = topology.scotch_group_arch(groups)
    result = map_graph(graph_from_matrix(traffic), arch, seed=seed, balance=balance, timeout=timeout)
    group_node = np.arange(groups) // per_node
    group, moved = repair(result.terminal, capacity, sym, group_node, topology.hops)
    info.update(map_time_s=result.seconds, moved=moved, groups_per_node=per_node)
    split_start = time.perf_counter()
    if per_node > 1:
        order = np.argsort(group, kind="stable")
        first = np.searchsorted(group[order], np.arange(groups))
        within = np.empty(n, dtype=np.int64)
        within[order] = np.arange(n) - first[group[order]]
        core = (group % per_node) * size + within
    else:
        core = split_nodes(group, sym, topology)
    info["split_time_s"] = time.perf_counter() - split_start
    return group_node[group] * topology.cores + core


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
