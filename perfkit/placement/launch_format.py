"""Launch file text from rank positions (node and core per rank); see ``perfkit.placement.launch``.

Works on plain arrays so that ``Placement.write`` can use it without importing the readers,
which build ``Placement`` objects (imports point one way: this module, then ``placement``, then
``launch``).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby

import numpy as np

from perfkit.placement.topology import Topology

FORMATS = ("permutation", "rankfile", "machinefile", "mpt", "cray")


def host_names(nodes: int, hosts: Sequence[str] | None = None) -> list[str]:
    """Host name of each node: the first ``nodes`` of ``hosts``, or ``node000``, ``node001``..."""
    if hosts is None:
        return [f"node{i:03d}" for i in range(nodes)]
    names = [str(h).strip() for h in hosts if str(h).strip()]
    if len(names) < nodes:
        raise ValueError(f"{len(names)} host names given for {nodes} nodes")
    if len(set(names[:nodes])) != nodes:
        raise ValueError("host names must be distinct")
    return names[:nodes]


def check_format(fmt: str) -> None:
    """Raise ``ValueError`` unless ``fmt`` is one of ``FORMATS``."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown launch format {fmt!r}; expected one of {FORMATS}")


def _slot_order(slot: np.ndarray) -> np.ndarray:
    """Ranks sorted by core number; requires the placement to fill the first N cores."""
    if slot.max() != slot.size - 1:
        raise ValueError("this format needs ranks on the first N cores of the node list (a packed placement)")
    return np.argsort(slot)


def _ranges(ranks: Sequence[int]) -> str:
    """'0-3,7,9-10' for [0, 1, 2, 3, 7, 9, 10]."""
    parts = []
    index = np.arange(len(ranks))
    for _, run in groupby(zip(index, ranks), key=lambda pair: pair[1] - pair[0]):
        values = [v for _, v in run]
        parts.append(f"{values[0]}-{values[-1]}" if len(values) > 1 else f"{values[0]}")
    return ",".join(parts)


def format_positions(
    node: np.ndarray,
    core: np.ndarray,
    topology: Topology,
    fmt: str,
    hosts: Sequence[str] | None = None,
    compact: bool = False,
) -> str:
    """Launch file text in format ``fmt`` for rank r on ``node[r]``, core ``core[r]`` (within the node)."""
    check_format(fmt)
    node, core = np.asarray(node, dtype=np.int64), np.asarray(core, dtype=np.int64)
    names = host_names(topology.nodes, hosts)
    per_rank = [names[n] for n in node]
    if fmt == "permutation":
        return "".join(f"{r}\n" for r in _slot_order(node * topology.cores + core))
    if fmt == "cray":
        order = _slot_order(node * topology.cores + core)
        step = topology.cores
        lines = [_ranges([int(r) for r in order[i : i + step]]) for i in range(0, order.size, step)]
        return "\n".join(lines) + "\n"
    if fmt == "rankfile":
        cps = topology.cores_per_socket
        return "".join(f"rank {r}={per_rank[r]} slot={c // cps}:{c % cps}\n" for r, c in enumerate(core))
    runs = [(host, len(list(group))) for host, group in groupby(per_rank)] if compact else [(h, 1) for h in per_rank]
    if fmt == "machinefile":
        return "".join(f"{h}:{n}\n" if compact else f"{h}\n" for h, n in runs)
    return ", ".join(f"{h} {n}" for h, n in runs) + "\n"
