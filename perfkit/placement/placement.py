"""``Placement``: where each MPI rank runs (node, socket, core), with its cost and launch files."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from os import PathLike
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from perfkit import atomic
from perfkit.placement.cost_model import PlacementCost, placement_cost
from perfkit.placement.launch_format import format_positions, host_names
from perfkit.placement.topology import Topology
from perfkit.placement.traffic import select_traffic


@dataclass(frozen=True, eq=False)
class Placement:
    """Rank r runs on node ``node[r]``, socket ``socket[r]``, core ``core[r]`` (core index within
    the node, 0 .. cores-1; the socket is ``core // cores_per_socket``).

    ``traffic`` / ``counts`` are the matrices the placement was made for (used by ``cost()``);
    ``info`` holds strategy details (seed, map time [s], ranks moved by the repair...).
    """

    node: np.ndarray
    core: np.ndarray
    topology: Topology
    strategy: str = ""
    traffic: Any = None
    counts: Any = None
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        node = np.asarray(self.node)
        core = np.asarray(self.core)
        if node.ndim != 1 or node.shape != core.shape or node.size == 0:
            raise ValueError(f"node and core must be equal-length, non-empty 1D arrays; got {node.shape}, {core.shape}")
        if node.dtype.kind not in "iu" or core.dtype.kind not in "iu":
            raise ValueError("node and core must be integer arrays")
        topo = self.topology
        if node.min() < 0 or node.max() >= topo.nodes or core.min() < 0 or core.max() >= topo.cores:
            raise ValueError(f"placement outside the topology ({topo.nodes} nodes x {topo.cores} cores)")
        slot = node.astype(np.int64) * topo.cores + core
        if np.unique(slot).size != slot.size:
            raise ValueError("placement puts two ranks on the same core")
        object.__setattr__(self, "node", node.astype(np.int64))
        object.__setattr__(self, "core", core.astype(np.int64))

    @classmethod
    def from_slots(cls, slot: np.ndarray, topology: Topology, **kwargs: Any) -> Placement:
        """Placement from global core numbers ``slot[r] = node * cores + core``."""
        slot = np.asarray(slot, dtype=np.int64)
        return cls(node=slot // topology.cores, core=slot % topology.cores, topology=topology, **kwargs)

    @property
    def nranks(self) -> int:
        return int(self.node.size)

    @property
    def socket(self) -> np.ndarray:
        return self.core // self.topology.cores_per_socket

    @property
    def slot(self) -> np.ndarray:
        """Global core number of each rank (node-major)."""
        return self.node * self.topology.cores + self.core

    def cost(self, traffic: Any = None, counts: Any = None, *, run: int | str | None = None,
             quantity: str = "bytes") -> PlacementCost:
        """Cost for ``traffic`` (default: the matrix the placement was made for): anything ``place``
        accepts, a canonical Dataset included (``run`` and ``quantity`` select its matrix, whose
        message counts are used unless ``counts`` is given)."""
        if traffic is None:
            if self.traffic is None:
                raise ValueError("this placement carries no traffic matrix; pass one to cost()")
            traffic, counts = self.traffic, self.counts if counts is None else counts
        elif isinstance(traffic, (xr.Dataset, xr.DataArray)):
            traffic, selected = select_traffic(traffic, run=run, quantity=quantity)
            counts = selected if counts is None else counts
        return placement_cost(self.node, self.socket, self.topology, traffic, counts)

    def to_frame(self, hosts: Sequence[str] | None = None) -> pd.DataFrame:
        """One row per rank: host, node, socket, core."""
        names = np.asarray(host_names(self.topology.nodes, hosts if hosts is not None else self.topology.hosts or None))
        return pd.DataFrame(
            {"host": names[self.node], "node": self.node, "socket": self.socket, "core": self.core},
            index=pd.RangeIndex(self.nranks, name="rank"),
        )

    def write(self, fmt: str, path: str | PathLike | None = None, hosts: Sequence[str] | None = None, *,
              overwrite: bool = False) -> str:
        """Launch file text in ``fmt`` (see ``perfkit.placement.launch.FORMATS``); also written to ``path``,
        atomically (a temporary beside it, renamed). An existing ``path`` is replaced only with
        ``overwrite=True`` (``FileExistsError`` otherwise, before anything is written)."""
        text = format_positions(
            self.node, self.core, self.topology, fmt, hosts=hosts if hosts is not None else self.topology.hosts or None
        )
        if path is not None:
            atomic.check_output(path, overwrite=overwrite, option="overwrite=True")
            atomic.write_text(path, text)
        return text
