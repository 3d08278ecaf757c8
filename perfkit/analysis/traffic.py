"""Statistics of rank-to-rank traffic matrices W (sender x receiver), sparse all the way.

Every function accepts a 2D numpy array, a scipy or pydata ``sparse`` matrix, a DataArray with
dims (sender, receiver), or a canonical Dataset / ``traffic`` DataArray with ``run`` and
``quantity`` dims (pick them with ``run=`` and ``quantity=``). Internally the matrix is a scipy
CSR matrix, so nothing is ever densified to N x N: costs grow with the number of non-zero pairs.
NaN entries (quantities not measured, padding of combined runs) count as 0; in a Dataset run
with an ``nprocs`` coordinate, ranks beyond ``nprocs`` are dropped. Values are in the units of
the chosen quantity (bytes [B] by default). Definitions: ``docs/traffic.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sps
import xarray as xr

from perfkit.runs import run_labels, select_one

#: Aggregated matrices with more groups than this are returned sparse (``sparse.COO``).
DENSE_GROUPS = 4096
LEVELS = ("node", "socket", "switch")


# --- input --------------------------------------------------------------------------------------


def traffic_matrix(traffic: Any, *, run: int | str | None = None, quantity: str = "bytes") -> sps.csr_matrix:
    """``traffic`` as a float64 CSR matrix (sender x receiver), NaN as 0, explicit zeros removed.

    ``run`` is a run label or position (needed when several runs are present); ``quantity`` one
    of ``bytes`` [B], ``count`` [messages], ``time`` [s].
    """
    if isinstance(traffic, xr.Dataset):
        if "traffic" not in traffic:
            raise ValueError("Dataset has no 'traffic' variable (rank-to-rank matrices)")
        traffic = traffic["traffic"]
    if isinstance(traffic, xr.DataArray):
        traffic = _select(traffic, run, quantity)
        traffic = traffic.transpose("sender", "receiver").data
    return _to_csr(traffic)


def _select(traffic: xr.DataArray, run: int | str | None, quantity: str) -> xr.DataArray:
    if "run" in traffic.dims:
        traffic = pick_run(traffic, run)
    if "quantity" in traffic.dims:
        quantities = [str(q) for q in traffic["quantity"].values]
        if quantity not in quantities:
            raise ValueError(f"quantity {quantity!r} not in traffic quantities {quantities}")
        traffic = traffic.sel(quantity=quantity)
    if set(traffic.dims) != {"sender", "receiver"}:
        raise ValueError(f"traffic needs dims (sender, receiver), got {traffic.dims}")
    nprocs = float(traffic["nprocs"]) if "nprocs" in traffic.coords and traffic["nprocs"].ndim == 0 else np.nan
    if np.isfinite(nprocs) and 0 < nprocs < traffic.sizes["sender"]:
        traffic = traffic.isel(sender=slice(0, int(nprocs)), receiver=slice(0, int(nprocs)))
    return traffic


def pick_run(traffic: xr.DataArray, run: int | str | None) -> xr.DataArray:
    """One run of a traffic array: ``run`` a label, a glob pattern naming one run, or a position
    (``perfkit.runs``); ``None`` only when it holds one run."""
    return traffic.isel(run=select_one(run_labels(traffic), run))


def _to_csr(values: Any) -> sps.csr_matrix:
    if hasattr(values, "compute") and not isinstance(values, np.ndarray):  # dask
        values = values.compute()
    if hasattr(values, "tocsr") and not sps.issparse(values):  # pydata sparse
        if np.asarray(values.fill_value) != 0:
            raise ValueError(f"sparse fill value must be 0, got {values.fill_value}")
        values = values.tocsr()
    if sps.issparse(values):
        csr = sps.csr_matrix(values, dtype=np.float64, copy=True)
        csr.data = np.nan_to_num(csr.data, nan=0.0)
    else:
        dense = np.asarray(values, dtype=np.float64)
        if dense.ndim != 2:
            raise ValueError(f"expected a 2D matrix, got shape {dense.shape}")
        csr = sps.csr_matrix(np.nan_to_num(dense, nan=0.0))
    if csr.shape[0] != csr.shape[1]:
        raise ValueError(f"expected a square matrix, got shape {csr.shape}")
    if not np.isfinite(csr.data).all() or (csr.data < 0).any():
        raise ValueError("traffic must be finite and non-negative")
    csr.sum_duplicates()
    csr.eliminate_zeros()
    return csr


def _off_diagonal(matrix: sps.csr_matrix) -> sps.csr_matrix:
    coo = matrix.tocoo()
    keep = coo.row != coo.col
    return sps.csr_matrix((coo.data[keep], (coo.row[keep], coo.col[keep])), shape=matrix.shape)


def _rank_index(n: int) -> pd.RangeIndex:
    return pd.RangeIndex(n, name="rank")


# --- per-rank measures ------------------------------------------------------------------------------


def rank_totals(traffic: Any, *, run: int | str | None = None, quantity: str = "bytes") -> pd.DataFrame:
    """Per rank: ``sent`` (row sum) and ``received`` (column sum), self-sends included [quantity units]."""
    w = traffic_matrix(traffic, run=run, quantity=quantity)
    return pd.DataFrame(
        {"sent": np.asarray(w.sum(axis=1)).ravel(), "received": np.asarray(w.sum(axis=0)).ravel()},
        index=_rank_index(w.shape[0]),
    )


def partners(traffic: Any, *, run: int | str | None = None, quantity: str = "bytes") -> pd.DataFrame:
    """Per rank: number of distinct other ranks it sends to (``sent_to``) and receives from (``received_from``)."""
    w = _off_diagonal(traffic_matrix(traffic, run=run, quantity=quantity))
    return pd.DataFrame(
        {"sent_to": np.diff(w.indptr), "received_from": np.diff(w.tocsc().indptr)},
        index=_rank_index(w.shape[0]),
    )


@dataclass(frozen=True)
class SelfTraffic:
    """Traffic a rank sends to itself (the diagonal of W)."""

    total: float  #: sum of the diagonal [quantity units]
    fraction: float  #: ``total`` / sum of W (0 when W is empty)
    per_rank: pd.Series  #: diagonal value of the ranks that send to themselves, indexed by rank

    @property
    def ranks(self) -> np.ndarray:
        """Ranks with non-zero self-traffic."""
        return self.per_rank.index.to_numpy()


def self_traffic(traffic: Any, *, run: int | str | None = None, quantity: str = "bytes") -> SelfTraffic:
    """Diagonal total, its share of all traffic, and which ranks send to themselves."""
    w = traffic_matrix(traffic, run=run, quantity=quantity)
    diagonal = w.diagonal()
    ranks = np.flatnonzero(diagonal)
    total, everything = float(diagonal.sum()), float(w.sum())
    return SelfTraffic(
        total=total,
        fraction=total / everything if everything else 0.0,
        per_rank=pd.Series(diagonal[ranks], index=pd.Index(ranks, name="rank"), name=quantity),
    )


# --- whole-matrix measures ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Symmetry:
    """How far W is from symmetric, self-sends left out."""

    asymmetry: float  #: ||W - Wᵀ||₁ / ||W||₁ over off-diagonal entries: 0 symmetric, 2 all one-way
    pairs: pd.DataFrame  #: the most asymmetric rank pairs (a < b), largest |W[a,b] - W[b,a]| first


def symmetry(traffic: Any, *, top: int = 5, run: int | str | None = None, quantity: str = "bytes") -> Symmetry:
    """Asymmetry index ||W - Wᵀ||₁ / ||W||₁ (entrywise, off-diagonal) and the ``top`` most asymmetric pairs."""
    w = _off_diagonal(traffic_matrix(traffic, run=run, quantity=quantity))
    diff = (w - w.T).tocsr()
    total = float(w.sum())
    upper = sps.triu(diff, k=1).tocoo()
    order = np.argsort(-np.abs(upper.data), kind="stable")[: max(int(top), 0)]
    a, b = upper.row[order].astype(np.int64), upper.col[order].astype(np.int64)
    pairs = pd.DataFrame(
        {
            "rank_a": a,
            "rank_b": b,
            "a_to_b": np.asarray(w[a, b]).ravel() if a.size else np.empty(0),
            "b_to_a": np.asarray(w[b, a]).ravel() if a.size else np.empty(0),
            "difference": np.abs(upper.data[order]),
        }
    )
    return Symmetry(asymmetry=float(abs(diff).sum()) / total if total else 0.0, pairs=pairs)


@dataclass(frozen=True)
class Locality:
    """Traffic by rank distance |i - j| (0 is the diagonal)."""

    histogram: pd.DataFrame  #: one row per distance bin: ``lo``, ``hi`` (inclusive), ``value``, ``share``
    k: int  #: the half-width of the band used for ``share_within_k``
    share_within_k: float  #: share of W with |i - j| <= k
    mean_distance: float  #: traffic-weighted mean |i - j| [ranks]


def distance_bins(n: int) -> np.ndarray:
    """Default bin edges for ``n`` ranks: 0, 1, 2-3, 4-7, ... (powers of two), as left edges plus ``n``."""
    powers = 2 ** np.arange(max(int(n) - 1, 0).bit_length())
    return np.array([0, *powers, n], dtype=np.int64)


def locality(
    traffic: Any,
    *,
    k: int = 1,
    bins: np.ndarray | None = None,
    run: int | str | None = None,
    quantity: str = "bytes",
) -> Locality:
    """Histogram of W over the distance |i - j| from the diagonal, and the share within ±``k`` ranks.

    ``bins`` are increasing left edges of distance bins ending with an exclusive upper edge
    (default ``distance_bins(n)``: 0, 1, 2-3, 4-7, ...).
    """
    w = traffic_matrix(traffic, run=run, quantity=quantity).tocoo()
    n = w.shape[0]
    distance = np.abs(w.row.astype(np.int64) - w.col.astype(np.int64))
    edges = distance_bins(n) if bins is None else np.asarray(bins, dtype=np.int64)
    if edges.ndim != 1 or edges.size < 2 or (np.diff(edges) <= 0).any():
        raise ValueError(f"bins must be at least two increasing distance edges, got {edges}")
    which = np.searchsorted(edges, distance, side="right") - 1
    inside = (which >= 0) & (which < edges.size - 1)
    per_bin = np.bincount(which[inside], weights=w.data[inside], minlength=edges.size - 1)
    total = float(w.data.sum())
    lo, hi = edges[:-1], edges[1:] - 1
    labels = [str(a) if a == b else f"{a}-{b}" for a, b in zip(lo, hi)]
    histogram = pd.DataFrame(
        {"lo": lo, "hi": hi, "value": per_bin, "share": per_bin / total if total else np.zeros_like(per_bin)},
        index=pd.Index(labels, name="distance"),
    )
    return Locality(
        histogram=histogram,
        k=int(k),
        share_within_k=float(w.data[distance <= k].sum()) / total if total else 0.0,
        mean_distance=float(distance @ w.data) / total if total else 0.0,
    )


# --- aggregation under a placement ------------------------------------------------------------------


def groups_of(placement_or_mapping: Any, level: str = "node") -> tuple[np.ndarray, int]:
    """Group of each rank and the number of groups, from a ``Placement`` or a rank -> group array.

    With a ``Placement``: ``node`` = its node, ``socket`` = node * sockets + socket (a machine-wide
    socket number), ``switch`` = the node's leaf switch. An integer array is used as the groups,
    whatever ``level`` says.
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    if hasattr(placement_or_mapping, "topology"):
        topo, node = placement_or_mapping.topology, np.asarray(placement_or_mapping.node, dtype=np.int64)
        if level == "node":
            return node, int(topo.nodes)
        if level == "socket":
            return node * topo.sockets + np.asarray(placement_or_mapping.socket), int(topo.nodes * topo.sockets)
        switch = np.asarray(topo.switch_of(np.arange(topo.nodes)))
        return switch[node], int(switch.max()) + 1
    group = np.asarray(placement_or_mapping)
    if group.ndim != 1 or group.dtype.kind not in "iu" or group.size == 0 or group.min() < 0:
        raise ValueError("a mapping must be a non-empty 1D array of non-negative integer groups, one per rank")
    return group.astype(np.int64), int(group.max()) + 1


def aggregate(
    traffic: Any,
    placement_or_mapping: Any,
    level: str = "node",
    *,
    run: int | str | None = None,
    quantity: str = "bytes",
) -> xr.DataArray:
    """Group x group matrix of W under a placement: entry (a, b) = traffic from group a to group b.

    Dims ``(sender_<level>, receiver_<level>)``; the diagonal is traffic kept inside a group
    (self-sends included), so the total is preserved. Dense numpy up to ``DENSE_GROUPS`` groups,
    ``sparse.COO`` above.
    """
    w = traffic_matrix(traffic, run=run, quantity=quantity).tocoo()
    group, size = groups_of(placement_or_mapping, level)
    if group.size != w.shape[0]:
        raise ValueError(f"the mapping covers {group.size} ranks, the traffic matrix {w.shape[0]}")
    grouped = sps.coo_matrix((w.data, (group[w.row], group[w.col])), shape=(size, size)).tocsr()
    grouped.sum_duplicates()
    if size <= DENSE_GROUPS:
        data: Any = grouped.toarray()
    else:
        import sparse

        data = sparse.COO.from_scipy_sparse(grouped)
    dims = (f"sender_{level}", f"receiver_{level}")
    return xr.DataArray(
        data,
        dims=dims,
        coords={dims[0]: np.arange(size), dims[1]: np.arange(size)},
        name="traffic",
        attrs={"quantity": quantity, "level": level},
    )


def inter_group_share(aggregated: xr.DataArray) -> float:
    """Share of an aggregated matrix off its diagonal (e.g. inter-node bytes / all bytes)."""
    matrix = _to_csr(aggregated.data)
    total = float(matrix.sum())
    return (total - float(matrix.diagonal().sum())) / total if total else 0.0
