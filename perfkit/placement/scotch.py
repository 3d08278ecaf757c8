"""Adapter over ``scotchpy`` (package scotchpy64): checked arrays in, a static mapping out.

Every array is validated here in numpy before libscotch sees it (bad input there can crash the
process), and the mapping itself runs in a spawned worker process with one Scotch thread and a
fixed random seed, so it is deterministic, killable on timeout, and a crash surfaces as
``ScotchError`` in the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sps

from perfkit.placement import scotch_worker
from perfkit.placement.traffic import check_matrix
from perfkit.placement.worker import WorkerError, WorkerTimeout, run_isolated

#: Largest integer edge load handed to Scotch (loads are rescaled so the heaviest edge gets it).
LOAD_MAX = 1 << 20
ARCH_KINDS = ("tleaf", "torus", "hcub")
STRAT_DEFAULT = 0x0
STRAT_QUALITY = 0x1
WORKER_ENV = {"SCOTCH_PTHREAD_NUMBER": "1"}


class ScotchError(RuntimeError):
    """Scotch failed, or the worker process running it crashed."""


class ScotchTimeout(ScotchError, TimeoutError):
    """The mapping took longer than its timeout; the worker was killed."""


@dataclass(frozen=True)
class ArchSpec:
    """A Scotch target architecture: ``tleaf`` (sizes, links per level), ``torus`` (sizes = dims)
    or ``hcub`` (sizes = (dimension,)), optionally restricted to the terminals listed in ``sub``."""

    kind: str
    sizes: tuple[int, ...]
    links: tuple[int, ...] = ()
    sub: np.ndarray | None = None

    @property
    def full_size(self) -> int:
        return 2 ** self.sizes[0] if self.kind == "hcub" else int(np.prod(self.sizes))

    @property
    def terminals(self) -> int:
        """Number of target terminals the graph is mapped onto."""
        return self.full_size if self.sub is None else len(self.sub)

    def validate(self) -> None:
        """Raise ``ValueError`` if libscotch would be given inconsistent architecture arrays."""
        if self.kind not in ARCH_KINDS:
            raise ValueError(f"unknown architecture {self.kind!r}; expected one of {ARCH_KINDS}")
        if not self.sizes or min(self.sizes) < (0 if self.kind == "hcub" else 1):
            raise ValueError(f"architecture sizes must be positive, got {self.sizes}")
        if self.kind == "tleaf" and (len(self.links) != len(self.sizes) or min(self.links) < 1):
            raise ValueError(f"tleaf needs one link cost >= 1 per level, got sizes {self.sizes} links {self.links}")
        if self.kind == "hcub" and len(self.sizes) != 1:
            raise ValueError(f"hcub takes one dimension, got {self.sizes}")
        if self.sub is not None:
            sub = np.asarray(self.sub)
            if sub.ndim != 1 or sub.size == 0 or sub.dtype != np.int64:
                raise ValueError("sub-architecture terminals must be a non-empty 1D int64 array")
            if sub.min() < 0 or sub.max() >= self.full_size or (np.diff(sub) <= 0).any():
                raise ValueError(f"sub-architecture terminals must be distinct, sorted, in [0, {self.full_size})")


class ScotchGraph(NamedTuple):
    """Compact CSR graph as Scotch wants it (base 0, int64, contiguous, symmetric, no loops)."""

    verttab: np.ndarray
    edgetab: np.ndarray
    edlotab: np.ndarray

    @property
    def vertices(self) -> int:
        return len(self.verttab) - 1


class MapResult(NamedTuple):
    terminal: np.ndarray
    seconds: float


def graph_from_matrix(matrix: Any) -> ScotchGraph:
    """Symmetrised (W + W^T, zero diagonal) integer-weighted graph of a traffic matrix."""
    csr = check_matrix(matrix)
    sym = (csr + csr.T).tocsr()
    sym.setdiag(0)
    sym.eliminate_zeros()
    sym.sort_indices()
    loads = sym.data
    if loads.size:
        loads = np.maximum(1.0, np.rint(loads * (LOAD_MAX / loads.max())))
    graph = ScotchGraph(
        np.ascontiguousarray(sym.indptr, dtype=np.int64),
        np.ascontiguousarray(sym.indices, dtype=np.int64),
        np.ascontiguousarray(loads, dtype=np.int64),
    )
    validate_graph(graph)
    return graph


def validate_graph(graph: ScotchGraph) -> None:
    """Raise ``ValueError`` unless the CSR arrays are safe to hand to ``SCOTCH_graphBuild``."""
    vert, edge, load = graph
    for name, arr in zip(ScotchGraph._fields, graph):
        if not isinstance(arr, np.ndarray) or arr.dtype != np.int64 or arr.ndim != 1 or not arr.flags.c_contiguous:
            raise ValueError(f"{name} must be a 1D C-contiguous int64 numpy array")
    n = len(vert) - 1
    if n < 1 or vert[0] != 0 or vert[-1] != len(edge) or (np.diff(vert) < 0).any():
        raise ValueError("verttab must start at 0, be non-decreasing and end at the edge count")
    if len(load) != len(edge):
        raise ValueError("edlotab and edgetab lengths differ")
    if edge.size:
        if edge.min() < 0 or edge.max() >= n:
            raise ValueError(f"edgetab holds vertex numbers outside [0, {n})")
        if load.min() < 1 or load.max() > LOAD_MAX:
            raise ValueError(f"edge loads must lie in [1, {LOAD_MAX}]")
    adjacency = sps.csr_matrix((load, edge, vert), shape=(n, n))
    if not adjacency.has_canonical_format:
        raise ValueError("edgetab has unsorted or duplicate neighbours")
    if adjacency.diagonal().any():
        raise ValueError("the graph has self loops")
    if (adjacency != adjacency.T).nnz:
        raise ValueError("the graph is not symmetric")


def map_graph(
    graph: ScotchGraph,
    arch: ArchSpec,
    *,
    seed: int = 0,
    balance: float = 0.0,
    quality: bool = False,
    timeout: float | None = 300.0,
) -> MapResult:
    """Map ``graph`` onto ``arch`` with Scotch in a worker process; return terminal per vertex.

    ``balance`` is Scotch's allowed load imbalance ratio; ``timeout`` [s] bounds the wall time
    (``ScotchTimeout``). Results may double-book a terminal; see ``perfkit.placement.repair``.
    """
    validate_graph(graph)
    arch.validate()
    if not 0.0 <= balance < 1.0:
        raise ValueError(f"balance must lie in [0, 1), got {balance}")
    if not 0 <= int(seed) < 2**31:
        raise ValueError(f"seed must lie in [0, 2**31), got {seed}")
    spec = (arch.kind, arch.sizes, arch.links, arch.sub)
    flags = STRAT_QUALITY if quality else STRAT_DEFAULT
    try:
        terminal, seconds = run_isolated(
            scotch_worker.map_arrays, *graph, spec, arch.terminals, int(seed), float(balance), flags,
            timeout=timeout, env=WORKER_ENV,
        )
    except WorkerTimeout as exc:
        raise ScotchTimeout(f"Scotch mapping of {graph.vertices} vertices timed out: {exc}") from exc
    except WorkerError as exc:
        raise ScotchError(f"Scotch mapping of {graph.vertices} vertices failed: {exc}") from exc
    terminal = np.asarray(terminal, dtype=np.int64)
    if terminal.shape != (graph.vertices,) or terminal.min() < 0 or terminal.max() >= arch.terminals:
        raise ScotchError(f"Scotch returned terminals outside [0, {arch.terminals})")
    return MapResult(terminal, float(seconds))
