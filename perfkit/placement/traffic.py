"""Turn user input (numpy, pydata sparse, DataArray, canonical Dataset) into a checked rank-to-rank matrix."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sps
import xarray as xr

from perfkit.analysis.traffic import pick_run
from perfkit.runs import run_labels, select_one
from perfkit.sparse_traffic import is_sparse


def check_matrix(matrix: Any, name: str = "traffic matrix") -> sps.csr_matrix:
    """Return ``matrix`` as float64 CSR (sender x receiver) after checking it is a usable traffic matrix.

    Raises ``ValueError`` unless it is 2D, square, non-empty, finite and non-negative.
    """
    if isinstance(matrix, xr.DataArray):
        matrix = matrix.data
    if hasattr(matrix, "dask"):  # e.g. one run of a lazily loaded store: its sparse (or dense) block
        matrix = matrix.compute()
    if hasattr(matrix, "tocsr") and not sps.issparse(matrix):  # pydata sparse
        if np.asarray(matrix.fill_value) != 0:
            raise ValueError(f"{name}: sparse fill value must be 0, got {matrix.fill_value}")
        matrix = matrix.tocsr()
    if sps.issparse(matrix):
        csr = sps.csr_matrix(matrix, dtype=np.float64)
    else:
        dense = np.asarray(matrix)
        if dense.dtype.kind not in "biuf":
            raise ValueError(f"{name}: expected numbers, got dtype {dense.dtype}")
        if dense.ndim != 2:
            raise ValueError(f"{name}: expected a 2D matrix, got shape {dense.shape}")
        dense = dense.astype(np.float64)
        if not np.isfinite(dense).all():
            raise ValueError(f"{name}: contains NaN or infinite values")
        csr = sps.csr_matrix(dense)
    if csr.ndim != 2 or csr.shape[0] != csr.shape[1] or csr.shape[0] == 0:
        raise ValueError(f"{name}: expected a non-empty square matrix, got shape {csr.shape}")
    if not np.isfinite(csr.data).all():
        raise ValueError(f"{name}: contains NaN or infinite values")
    if (csr.data < 0).any():
        raise ValueError(f"{name}: contains negative values (minimum {csr.data.min():g})")
    csr.sum_duplicates()
    csr.eliminate_zeros()
    return csr


def select_traffic(
    data: Any, *, run: int | str | None = None, quantity: str = "bytes"
) -> tuple[sps.csr_matrix, sps.csr_matrix | None]:
    """Pick the ``quantity`` matrix (and the message ``count`` matrix when known) from ``data``.

    ``data`` is a 2D array, a ``sparse.COO``, a DataArray with dims (sender, receiver), or a
    canonical Dataset with a ``traffic`` variable (dims run, sender, receiver, quantity); ``run``
    is a run label or position, needed when the Dataset holds several runs. Ranks absent from the
    chosen run (all-NaN row and column) are dropped.
    """
    if isinstance(data, xr.Dataset):
        if "traffic" not in data:
            raise ValueError("Dataset has no 'traffic' variable (rank-to-rank matrices)")
        data = data["traffic"]
    if not isinstance(data, xr.DataArray):
        return check_matrix(data), None
    if is_sparse(data.data) and {"sender", "receiver", "quantity"} <= set(data.dims):
        return _from_sparse(data, run, quantity)
    if "run" in data.dims:
        data = pick_run(data, run)
    if "quantity" not in data.dims:
        return _from_dataarray(data, None)
    quantities = [str(q) for q in data["quantity"].values]
    if quantity not in quantities:
        raise ValueError(f"quantity {quantity!r} not in traffic quantities {quantities}")
    counts = data.sel(quantity="count") if quantity != "count" and "count" in quantities else None
    if counts is not None and hasattr(counts.data, "dask"):
        counts = counts.copy(data=counts.data.compute())
    if counts is not None and isinstance(counts.data, np.ndarray) and np.isnan(counts.data).any():
        counts = None  # message counts not measured (e.g. a bytes-only matrix file)
    return _from_dataarray(data.sel(quantity=quantity), counts)


#: The traffic quantity of collectives' bytes per pair (``perfkit.model.COLLECTIVE_BYTES``).
_COLLECTIVE = "collective_bytes"


def wire_traffic(data: xr.Dataset, *, run: int | str | None = None) -> tuple[sps.csr_matrix, sps.csr_matrix | None]:
    """Bytes between each pair of ranks on the wire [B]: point to point plus collectives' bytes by their arguments
    (``collective_bytes``, ``perfkit collect --matrices``) where the run has them, and the point-to-point message
    counts. A code whose collectives move data (an FFT's all-to-all) sends them between nodes too: GROMACS on 4 x 2
    emulated nodes, round-robin, moved 157.5 MB through the links, 109.7 MB of it point to point and 46.9 MB its
    collectives' (the rest headers)."""
    traffic, counts = select_traffic(data, run=run, quantity="bytes")
    if "traffic" not in data or _COLLECTIVE not in [str(q) for q in data["quantity"].values]:
        return traffic, counts
    try:
        collective, _ = select_traffic(data, run=run, quantity=_COLLECTIVE)
    except ValueError:  # not measured in this run of a combined study (NaN): point to point alone
        return traffic, counts
    if collective.shape != traffic.shape:
        return traffic, counts
    return (traffic + collective).tocsr(), counts


def _from_dataarray(
    matrix: xr.DataArray, counts: xr.DataArray | None
) -> tuple[sps.csr_matrix, sps.csr_matrix | None]:
    if set(matrix.dims) != {"sender", "receiver"}:
        raise ValueError(f"traffic DataArray needs dims (sender, receiver), got {matrix.dims}")
    matrix = matrix.transpose("sender", "receiver")
    values = _dense_or_sparse(matrix.data)
    present = _present_ranks(values)
    chosen = check_matrix(values[present][:, present])
    if counts is None:
        return chosen, None
    count_values = _dense_or_sparse(counts.transpose("sender", "receiver").data)
    return chosen, check_matrix(count_values[present][:, present], "message-count matrix")


def _from_sparse(
    data: xr.DataArray, run: int | str | None, quantity: str
) -> tuple[sps.csr_matrix, sps.csr_matrix | None]:
    """The ``quantity`` and message-count matrices of one run of sparse traffic (pydata ``sparse``, or dask
    blocks of it as ``perfkit.load`` reads a store), from the coordinates of the block holding the run.

    pydata ``sparse``'s own indexing compiles numba code on first use (25-32 s at load 3 for a run and a
    quantity, minutes on a busy machine), so the run and quantities are picked with numpy instead. Ranks
    beyond the run's ``nprocs`` (the union of the runs' ranks) are dropped: sparse padding reads 0, not NaN.
    """
    quantities = [str(q) for q in data["quantity"].values]
    if quantity not in quantities:
        raise ValueError(f"quantity {quantity!r} not in traffic quantities {quantities}")
    position = select_one(run_labels(data), run) if "run" in data.dims else None
    block, offset = _block_of(data, position)
    if np.asarray(block.fill_value) != 0:
        raise ValueError(f"traffic matrix: sparse fill value must be 0, got {block.fill_value}")
    coords = {dim: block.coords[axis] for axis, dim in enumerate(data.dims)}
    keep = coords["run"] == offset if position is not None else np.ones(block.nnz, dtype=bool)
    n = data.sizes["sender"]
    nprocs = _nprocs(data, position)
    if np.isfinite(nprocs) and 0 < nprocs < n:
        n = int(nprocs)
        keep &= (coords["sender"] < n) & (coords["receiver"] < n)

    def matrix(name: str) -> sps.csr_matrix:
        chosen = keep & (coords["quantity"] == quantities.index(name))
        values = np.asarray(block.data[chosen], dtype=np.float64)
        return sps.csr_matrix((values, (coords["sender"][chosen], coords["receiver"][chosen])), shape=(n, n))

    chosen = check_matrix(matrix(quantity))
    if quantity == "count" or "count" not in quantities:
        return chosen, None
    counts = matrix("count")
    if np.isnan(counts.data).any():
        return chosen, None  # message counts not measured
    return chosen, check_matrix(counts, "message-count matrix")


def _nprocs(data: xr.DataArray, position: int | None) -> float:
    """The ``nprocs`` coordinate of run ``position`` (NaN when unknown), read without touching the data."""
    if "nprocs" not in data.coords:
        return np.nan
    nprocs = data["nprocs"]
    if nprocs.dims == ("run",) and position is not None:
        return float(nprocs.values[position])
    return float(nprocs.values) if nprocs.ndim == 0 else np.nan


def _block_of(data: xr.DataArray, position: int | None) -> tuple[Any, int]:
    """The in-memory ``sparse.COO`` holding run ``position`` (all of ``data`` when None) and the run's offset
    in it; for dask, only the block(s) along ``run`` that hold it are read, without slicing them."""
    values = data.data
    if not hasattr(values, "dask"):
        return values, position or 0
    if position is None:
        return values.compute(), 0
    axis = data.get_axis_num("run")
    starts = np.cumsum((0, *values.chunks[axis]))
    chunk = int(np.searchsorted(starts, position, side="right")) - 1
    index = tuple(chunk if k == axis else slice(None) for k in range(values.ndim))
    return values.blocks[index].compute(), position - int(starts[chunk])


def _dense_or_sparse(values: Any) -> Any:
    if hasattr(values, "dask"):  # lazily loaded: this run's block only
        values = values.compute()
    if isinstance(values, np.ndarray):
        return values
    if hasattr(values, "tocsr"):
        return values.tocsr()
    return np.asarray(values)


def _present_ranks(values: Any) -> np.ndarray:
    """Ranks whose whole row and column are not NaN (padding from combining runs)."""
    if sps.issparse(values):
        return np.arange(values.shape[0])
    nan = np.isnan(np.asarray(values, dtype=np.float64))
    absent = nan.all(axis=1) & nan.all(axis=0)
    return np.flatnonzero(~absent)
