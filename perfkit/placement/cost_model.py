"""Cost of a placement: traffic per topology level, hop-bytes, link loads and a time estimate.

For a placement (node and socket per rank) of a traffic matrix B (bytes, sender x receiver,
self-sends ignored) and optionally message counts C:

* ``bytes_<level>`` / ``messages_<level>``: sums of B / C over rank pairs whose cores meet at
  that level (``socket``, ``node``, ``switch``, ``network``; see ``perfkit.placement.topology``);
* ``inter_node_bytes``: bytes between different nodes (``switch`` + ``network``);
* ``weighted_cost``: sum of B times the ``link_cost`` of its level, the quantity Scotch minimises;
* ``hop_bytes``: sum of B times the network links crossed between the two nodes;
* ``max_nic_bytes``: the largest bytes one node sends or receives over its network link;
* ``max_uplink_bytes``: the largest bytes one leaf switch sends or receives across switches
  (NaN without switches);
* ``time_s``: max of (a) the busiest sender's serialised cost sum(C * latency + B / bandwidth)
  over its partners at their levels, (b) ``max_nic_bytes`` / switch-level bandwidth and (c)
  ``max_uplink_bytes`` / network-level bandwidth. A rough lower bound, for ranking placements.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import scipy.sparse as sps

from perfkit.placement.topology import LEVELS, Topology
from perfkit.placement.traffic import check_matrix


@dataclass(frozen=True)
class PlacementCost:
    """Communication cost of one placement; bytes in B, time in s (see module docstring)."""

    bytes_total: float
    bytes_socket: float
    bytes_node: float
    bytes_switch: float
    bytes_network: float
    messages_socket: float
    messages_node: float
    messages_switch: float
    messages_network: float
    inter_node_bytes: float
    inter_node_fraction: float
    weighted_cost: float
    hop_bytes: float
    max_nic_bytes: float
    max_uplink_bytes: float
    time_s: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def _pairs(matrix: sps.csr_matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    coo = matrix.tocoo()
    keep = coo.row != coo.col
    return coo.row[keep].astype(np.int64), coo.col[keep].astype(np.int64), coo.data[keep]


def _max_directional(src_group: np.ndarray, dst_group: np.ndarray, size: int, data: np.ndarray) -> float:
    """Largest bytes leaving or entering one group (node or switch)."""
    if data.size == 0:
        return 0.0
    out = np.bincount(src_group, weights=data, minlength=size)
    into = np.bincount(dst_group, weights=data, minlength=size)
    return float(max(out.max(), into.max()))


def placement_cost(
    node: np.ndarray,
    socket: np.ndarray,
    topology: Topology,
    traffic: Any,
    counts: Any | None = None,
) -> PlacementCost:
    """Cost of placing rank r on ``node[r]``, ``socket[r]`` for ``traffic`` bytes (and ``counts``)."""
    node, socket = np.asarray(node, dtype=np.int64), np.asarray(socket, dtype=np.int64)
    matrix = check_matrix(traffic)
    if matrix.shape[0] != node.size:
        raise ValueError(f"traffic matrix has {matrix.shape[0]} ranks, the placement {node.size}")
    src, dst, data = _pairs(matrix)
    level = topology.node_level(node[src], node[dst], socket[src] == socket[dst])
    by_level = np.bincount(level, weights=data, minlength=len(LEVELS))
    latency = np.asarray(topology.latency_s)
    bandwidth = np.asarray(topology.bandwidth_Bps)
    rank_time = np.bincount(src, weights=data / bandwidth[level], minlength=node.size)
    messages = np.full(len(LEVELS), np.nan)
    if counts is not None:
        count_matrix = check_matrix(counts, "message-count matrix")
        if count_matrix.shape != matrix.shape:
            raise ValueError(f"count matrix shape {count_matrix.shape} differs from traffic {matrix.shape}")
        csrc, cdst, cdata = _pairs(count_matrix)
        clevel = topology.node_level(node[csrc], node[cdst], socket[csrc] == socket[cdst])
        messages = np.bincount(clevel, weights=cdata, minlength=len(LEVELS))
        rank_time += np.bincount(csrc, weights=cdata * latency[clevel], minlength=node.size)
    inter = node[src] != node[dst]
    nic = _max_directional(node[src][inter], node[dst][inter], topology.nodes, data[inter])
    uplink = np.nan
    if topology.shape == "tree" and topology.switch_size:
        across = level == LEVELS.index("network")
        switch_src, switch_dst = topology.switch_of(node[src][across]), topology.switch_of(node[dst][across])
        switches = -(-topology.nodes // topology.switch_size)
        uplink = _max_directional(switch_src, switch_dst, switches, data[across])
    times = [rank_time.max(initial=0.0), nic / bandwidth[2]]
    if not np.isnan(uplink):
        times.append(uplink / bandwidth[3])
    total = float(data.sum())
    inter_bytes = float(data[inter].sum())
    return PlacementCost(
        bytes_total=total,
        **{f"bytes_{name}": float(v) for name, v in zip(LEVELS, by_level)},
        **{f"messages_{name}": float(v) for name, v in zip(LEVELS, messages)},
        inter_node_bytes=inter_bytes,
        inter_node_fraction=inter_bytes / total if total else 0.0,
        weighted_cost=float(by_level @ np.asarray(topology.link_cost)),
        hop_bytes=float((data * topology.hops(node[src], node[dst])).sum()),
        max_nic_bytes=nic,
        max_uplink_bytes=float(uplink),
        time_s=float(max(times)),
    )

