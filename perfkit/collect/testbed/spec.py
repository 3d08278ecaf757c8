"""What an emulated cluster is made of: nodes, cores, link rate and latency, leaf switches, and the
time dilation that lets its nodes' cores share this machine's."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from perfkit.placement.network import parse_rate, parse_time


@dataclass(frozen=True)
class TestbedSpec:
    """An emulated cluster: ``nodes`` × ``cores``, each node's link shaped to ``bandwidth`` [bit/s] and
    ``latency`` [s, one way node to node]; with ``switch_size`` K, nodes hang in groups of K from leaf
    switches whose uplinks run at ``uplink`` [bit/s] (default: ``bandwidth``). ``clock_skew`` [whole s]:
    node ``i``'s monotonic clock reads ``i × clock_skew`` ahead of this machine's, as the clocks of nodes
    booted at different times differ (0: every node reads the machine's clock). ``dilation`` k (>= 1): the
    emulated cluster runs k times slower than the real one would: each node computes on ``cores / k``
    of this machine's cores and its links run at ``bandwidth / k`` with ``latency × k``."""

    __test__ = False  # a name pytest would otherwise collect

    nodes: int
    cores: int
    bandwidth: float = 200e6
    latency: float = 0.0
    switch_size: int | None = None
    uplink: float | None = None
    clock_skew: int = 0
    dilation: float = 1.0

    def __post_init__(self) -> None:
        if not 1 <= self.nodes <= 250:
            raise ValueError(f"--nodes {self.nodes}: expected 1 to 250")
        if not 1 <= self.cores <= 1024:
            raise ValueError(f"--cores {self.cores}: expected 1 to 1024")
        if self.switch_size is not None and not 1 <= self.switch_size <= self.nodes:
            raise ValueError(f"--switch-size {self.switch_size}: expected 1 to the number of nodes ({self.nodes})")
        parse_rate(self.bandwidth)
        parse_time(self.latency)
        if self.uplink is not None:
            parse_rate(self.uplink)
        if not (isinstance(self.clock_skew, int) and 0 <= self.clock_skew <= 3600):
            raise ValueError(f"--clock-skew {self.clock_skew!r}: expected whole seconds, 0 to 3600")
        if not (isinstance(self.dilation, (int, float)) and 1 <= self.dilation <= 1000):
            raise ValueError(f"--dilation {self.dilation!r}: expected 'auto' or a factor from 1 to 1000")

    @property
    def link_rate(self) -> float:
        """The rate the nodes' links are shaped to [bit/s]: ``bandwidth / dilation``."""
        return self.bandwidth / self.dilation

    @property
    def uplink_rate(self) -> float:
        """The rate the leaf switches' uplinks are shaped to [bit/s]: ``uplink`` (or ``bandwidth``) / dilation."""
        return (self.uplink if self.uplink is not None else self.bandwidth) / self.dilation

    @property
    def link_latency(self) -> float:
        """The one-way latency node to node the links are given [s]: ``latency × dilation``."""
        return self.latency * self.dilation

    @property
    def node_cpu(self) -> float:
        """Each node's CPU quota [cores of this machine]: ``cores / dilation``."""
        return self.cores / self.dilation

    @property
    def node_names(self) -> list[str]:
        """``node000``, ``node001``, ...: the host names ``perfkit place`` writes by default."""
        return [f"node{i:03d}" for i in range(self.nodes)]

    @property
    def switches(self) -> int:
        """Number of leaf switches (0: every node on one switch)."""
        return 0 if self.switch_size is None else -(-self.nodes // self.switch_size)

    def switch_of(self, node: int) -> int | None:
        """Leaf switch of node index ``node`` (None without leaf switches)."""
        return None if self.switch_size is None else node // self.switch_size

    def clock_offset(self, node: int) -> int:
        """How far node index ``node``'s monotonic clock reads ahead of this machine's [s]."""
        return node * self.clock_skew

    def address(self, node: int) -> str:
        """The node's address (inside its own namespace only): 198.18.0.1, 198.18.0.2, ..."""
        return f"198.18.0.{node + 1}"

    def as_dict(self) -> dict[str, Any]:
        """Parameters for a report: the emulated cluster's rates in bit/s and latency in s, and what the
        links were shaped to (``link_rate``, ``link_latency``: dilated)."""
        out = asdict(self)
        out["uplink"] = self.uplink if self.uplink is not None else (self.bandwidth if self.switch_size else None)
        out.update(link_rate=self.link_rate, link_latency=self.link_latency, node_cpu=self.node_cpu)
        return out


#: Cores of this machine kept for what runs outside every node and is not the links' work: the
#: testbed's own process and the machine's other processes, which the nodes' heavy weights otherwise
#: leave only what the quotas do not take [cores]
HEADROOM_CORES = 0.1
#: The kernel's work per bit/s a shaped link carries, in soft interrupts, outside every quota (the token
#: buckets release queued frames from a timer) [cores per bit/s]: 0.34-0.50 cores per Gbit/s (median 0.42)
#: at 0.2 Gbit/s between two nodes, 0.32-0.38 at 1 Gbit/s, 0.04 at 4 Gbit/s, where the buckets rarely
#: hold frames back (benchmarks/bench_dilation.py)
NETWORK_CORES_PER_BIT_S = 0.45e-9


def auto_dilation(nodes: int, cores: int, machine_cores: int, bandwidth: float, *,
                  headroom: float = HEADROOM_CORES, network: float = NETWORK_CORES_PER_BIT_S) -> float:
    """The smallest k (>= 1, rounded up to 0.01) at which ``nodes`` nodes fit in ``machine_cores`` less
    ``headroom`` [cores], each node asking ``cores`` for its ranks and ``network × bandwidth`` for the
    kernel's work on its link [bit/s], both k times slower: k = nodes × (cores + network × bandwidth) /
    (machine_cores − headroom). The nodes' quotas (cores / k each) then leave the kernel what their links
    need at their dilated rate (bandwidth / k) on top of the headroom."""
    usable = machine_cores - headroom
    if usable <= 0:
        raise ValueError(f"{machine_cores} core(s) leave nothing beside a headroom of {headroom} cores")
    return max(1.0, math.ceil(nodes * (cores + network * bandwidth) / usable * 100 - 1e-9) / 100)
