"""Machine topology: nodes x sockets x cores, optional leaf switches, torus or hypercube networks.

A *slot* is one core, numbered node-major: ``slot = node * cores + socket * cores_per_socket + c``
where ``cores`` is the number of cores per node. Communication between two slots happens at one
of four *levels*: ``socket`` (same socket), ``node`` (same node, other socket), ``switch`` (other
node behind the same leaf switch) and ``network`` (across switches). In a tree without
``switch_size`` every node hangs off one switch; in a torus or hypercube every node-to-node
message is ``network`` traffic and travels ``hops`` links.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perfkit.placement.scotch import ArchSpec

LEVELS = ("socket", "node", "switch", "network")
SHAPES = ("tree", "torus", "hypercube")
#: Smallest node part (cores) the node route of Scotch placement maps onto; see ``Topology.group_levels``.
GROUP_CORES = 6


def _per_level(values: Sequence[float], name: str, *, positive: bool = True) -> tuple[float, ...]:
    out = tuple(float(v) for v in values)
    if len(out) != len(LEVELS):
        raise ValueError(f"{name} needs one value per level {LEVELS}, got {len(out)}")
    if not all(np.isfinite(out)) or (positive and min(out) <= 0):
        raise ValueError(f"{name} values must be finite and positive, got {out}")
    return out


@dataclass(frozen=True)
class Topology:
    """A cluster: ``nodes`` nodes of ``sockets`` sockets sharing ``cores`` cores per node.

    ``link_cost`` (dimensionless, integers >= 1) is the Scotch cost of one unit of traffic per
    level; ``latency_s`` [s] and ``bandwidth_Bps`` [bytes/s] per level feed the time estimate.
    Levels are ordered ``("socket", "node", "switch", "network")``.
    """

    nodes: int
    cores: int
    sockets: int = 1
    switch_size: int | None = None
    shape: str = "tree"
    dims: tuple[int, ...] = ()
    link_cost: tuple[float, ...] = (1, 2, 10, 30)
    latency_s: tuple[float, ...] = (0.3e-6, 0.6e-6, 1.5e-6, 2.5e-6)
    bandwidth_Bps: tuple[float, ...] = (20e9, 10e9, 12.5e9, 12.5e9)
    hosts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("nodes", "cores", "sockets"):
            value = getattr(self, name)
            if int(value) != value or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.cores % self.sockets:
            raise ValueError(f"cores per node ({self.cores}) must be a multiple of sockets ({self.sockets})")
        if self.shape not in SHAPES:
            raise ValueError(f"shape must be one of {SHAPES}, got {self.shape!r}")
        if self.switch_size is not None and (self.shape != "tree" or self.switch_size < 1):
            raise ValueError("switch_size (nodes per leaf switch) is a positive integer, for tree shapes only")
        if self.shape == "torus" and (not self.dims or int(np.prod(self.dims)) != self.nodes or min(self.dims) < 1):
            raise ValueError(f"torus dims {self.dims} must multiply to nodes={self.nodes}")
        if self.shape == "hypercube" and (self.nodes & (self.nodes - 1)):
            raise ValueError(f"a hypercube needs a power-of-two node count, got {self.nodes}")
        costs = _per_level(self.link_cost, "link_cost")
        if any(c != int(c) for c in costs):
            raise ValueError(f"link_cost values must be integers (Scotch link weights), got {costs}")
        object.__setattr__(self, "link_cost", costs)
        object.__setattr__(self, "latency_s", _per_level(self.latency_s, "latency_s", positive=False))
        object.__setattr__(self, "bandwidth_Bps", _per_level(self.bandwidth_Bps, "bandwidth_Bps"))
        object.__setattr__(self, "dims", tuple(int(d) for d in self.dims))
        object.__setattr__(self, "hosts", tuple(str(h) for h in self.hosts))
        if self.hosts and (len(self.hosts) != self.nodes or len(set(self.hosts)) != self.nodes):
            raise ValueError(f"hosts must name each of the {self.nodes} nodes once, got {len(self.hosts)} names")

    @classmethod
    def from_nodelist(cls, nodelist: str, **kwargs: object) -> Topology:
        """A tree from a node list with multiplicities, as mpiplace took it: ``"n001 24, n002 24"``.

        Entries are separated by commas or new lines; ``host:24`` works too. Every node must offer
        the same number of cores (uneven nodes are refused, not rounded).
        """
        entries = [e.strip() for e in re.split(r"[,\n]", nodelist) if e.strip() and not e.strip().startswith("#")]
        parsed = [re.fullmatch(r"(\S+?)(?:[\s:]+(\d+))?", e) for e in entries]
        bad = [e for e, m in zip(entries, parsed) if m is None]
        if bad or not entries:
            raise ValueError(f"expected 'host cores' entries, could not read {bad[:3] or nodelist!r}")
        hosts = [m.group(1) for m in parsed]
        counts = {int(m.group(2) or 1) for m in parsed}
        if len(counts) != 1:
            raise ValueError(f"nodes offer different core counts {sorted(counts)}; perfkit needs uniform nodes")
        return cls(nodes=len(hosts), cores=counts.pop(), hosts=tuple(hosts), **kwargs)

    @classmethod
    def torus(cls, dims: Sequence[int], cores: int, **kwargs: object) -> Topology:
        """A 2D/3D (or higher) torus of nodes, ``cores`` cores per node."""
        dims = tuple(int(d) for d in dims)
        return cls(nodes=int(np.prod(dims)), cores=cores, shape="torus", dims=dims, **kwargs)

    @classmethod
    def hypercube(cls, dimension: int, cores: int, **kwargs: object) -> Topology:
        """A hypercube of ``2**dimension`` nodes, ``cores`` cores per node."""
        return cls(nodes=2 ** int(dimension), cores=cores, shape="hypercube", **kwargs)

    @property
    def capacity(self) -> int:
        """Number of cores (slots) in the machine."""
        return self.nodes * self.cores

    @property
    def cores_per_socket(self) -> int:
        return self.cores // self.sockets

    def node_of(self, slot: np.ndarray) -> np.ndarray:
        return np.asarray(slot) // self.cores

    def socket_of(self, slot: np.ndarray) -> np.ndarray:
        return (np.asarray(slot) % self.cores) // self.cores_per_socket

    def switch_of(self, node: np.ndarray) -> np.ndarray:
        """Leaf switch of each node (in a torus/hypercube each node is its own router)."""
        node = np.asarray(node)
        if self.shape != "tree":
            return node
        return node // self.switch_size if self.switch_size else np.zeros_like(node)

    def level(self, slot_a: np.ndarray, slot_b: np.ndarray) -> np.ndarray:
        """Index into ``LEVELS`` of the link class joining each pair of slots."""
        node_a, node_b = self.node_of(slot_a), self.node_of(slot_b)
        same_socket = self.socket_of(slot_a) == self.socket_of(slot_b)
        return self.node_level(node_a, node_b, same_socket)

    def node_level(self, node_a: np.ndarray, node_b: np.ndarray, same_socket: np.ndarray) -> np.ndarray:
        """Level index for pairs given by nodes and a same-socket flag."""
        node_a, node_b = np.asarray(node_a), np.asarray(node_b)
        out = np.where(self.switch_of(node_a) == self.switch_of(node_b), 2, 3)
        out = np.where(node_a == node_b, np.where(same_socket, 0, 1), out)
        return out.astype(np.int8)

    def hops(self, node_a: np.ndarray, node_b: np.ndarray) -> np.ndarray:
        """Network links crossed between nodes: 0 on-node, 2 via a leaf switch, 4 via the spine;
        torus: shortest wrapped Manhattan distance; hypercube: Hamming distance."""
        node_a, node_b = np.asarray(node_a, dtype=np.int64), np.asarray(node_b, dtype=np.int64)
        if self.shape == "hypercube":
            diff = np.bitwise_xor(node_a, node_b)
            return sum((diff >> bit) & 1 for bit in range(self.nodes.bit_length()))
        if self.shape == "torus":
            total = np.zeros(np.broadcast(node_a, node_b).shape, dtype=np.int64)
            ca, cb = np.unravel_index(node_a, self.dims), np.unravel_index(node_b, self.dims)
            for a, b, size in zip(ca, cb, self.dims):
                d = np.abs(a - b)
                total += np.minimum(d, size - d)
            return total
        same_switch = self.switch_of(node_a) == self.switch_of(node_b)
        return np.where(node_a == node_b, 0, np.where(same_switch, 2, 4)).astype(np.int64)

    def scotch_arch(self, slots: int) -> ArchSpec:
        """Core-level Scotch target (tree shapes) restricted to the first ``slots`` cores."""
        if self.shape != "tree":
            raise ValueError("core-level Scotch targets exist for tree topologies only; use the node-level target")
        sizes, links = self._tree_levels()
        sizes += [self.sockets, self.cores_per_socket] if self.sockets > 1 else [self.cores]
        links += [self.link_cost[1], self.link_cost[0]] if self.sockets > 1 else [self.link_cost[1]]
        padded = int(np.prod(sizes))
        sub = None if slots == padded else np.arange(slots, dtype=np.int64)
        return ArchSpec("tleaf", tuple(sizes), tuple(int(c) for c in links), sub)

    def scotch_node_arch(self, nodes: int) -> ArchSpec:
        """Node-level Scotch target restricted to the first ``nodes`` nodes."""
        if self.shape == "torus":
            kind, sizes, links, padded = "torus", self.dims, (), self.nodes
        elif self.shape == "hypercube":
            kind, sizes, links, padded = "hcub", (self.nodes.bit_length() - 1,), (), self.nodes
        else:
            tree_sizes, tree_links = self._tree_levels()
            kind, sizes, links, padded = "tleaf", tuple(tree_sizes), tuple(tree_links), int(np.prod(tree_sizes))
        sub = None if nodes == padded else np.arange(nodes, dtype=np.int64)
        return ArchSpec(kind, tuple(int(s) for s in sizes), tuple(int(c) for c in links), sub)

    def group_levels(self) -> tuple[int, int]:
        """(sockets, parts per socket) of the node parts the node route maps onto.

        Each socket is cut into parts of at least ``GROUP_CORES`` cores (the smallest divisor of
        the cores per socket that is that large): a target finer than whole nodes lets Scotch cut
        less traffic between nodes, and much cheaper than single cores (``docs/placement.md``).
        Torus and hypercube targets stop at the node: (1, 1).
        """
        if self.shape != "tree":
            return 1, 1
        cps = self.cores_per_socket
        size = next(d for d in range(min(GROUP_CORES, cps), cps + 1) if cps % d == 0)
        return self.sockets, cps // size

    def groups_per_node(self) -> int:
        """Number of node parts the node route maps onto (1: whole nodes)."""
        sockets, parts = self.group_levels()
        return sockets * parts

    def scotch_group_arch(self, groups: int) -> ArchSpec:
        """Scotch target of the node parts (``group_levels``), restricted to the first ``groups``."""
        sockets, parts = self.group_levels()
        if sockets * parts == 1:
            return self.scotch_node_arch(groups)
        sizes, links = self._tree_levels()
        if sockets > 1:
            sizes.append(sockets)
            links.append(int(self.link_cost[1]))
        if parts > 1:
            sizes.append(parts)
            links.append(int(self.link_cost[0]))
        padded = int(np.prod(sizes))
        sub = None if groups == padded else np.arange(groups, dtype=np.int64)
        return ArchSpec("tleaf", tuple(sizes), tuple(links), sub)

    def _tree_levels(self) -> tuple[list[int], list[int]]:
        """tleaf sizes and link costs above the node (switches padded to full width)."""
        if self.switch_size and self.switch_size < self.nodes:
            switches = -(-self.nodes // self.switch_size)
            return [switches, self.switch_size], [int(self.link_cost[3]), int(self.link_cost[2])]
        return [self.nodes], [int(self.link_cost[2])]
