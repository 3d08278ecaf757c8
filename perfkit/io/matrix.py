"""Stand-alone rank-to-rank communication matrices: dense CSV, ``.npy``/``.npz``, MatrixMarket.

``open_matrix`` returns a ``traffic`` DataArray with dims ``(sender, receiver, quantity)`` over
``TRAFFIC_QUANTITIES`` (bytes, count, time), so ``make_run(traffic=m.data)`` and
``matrix_to_dataset(m)`` use it as is. See ``docs/formats/matrix.md``.
"""

from __future__ import annotations

import json
import zipfile
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import scipy.io
import scipy.sparse
import sparse
import xarray as xr

from perfkit.errors import PerfkitFormatError
from perfkit.model import TRAFFIC_QUANTITIES, TRAFFIC_UNITS, make_run

READER = "perfkit.io.matrix"
ORIENTATIONS = ("sender_receiver", "receiver_sender")
FORMATS = ("csv", "npy", "npz", "mtx")
#: Above this many ranks a dense input is stored as ``sparse.COO``.
SPARSE_ABOVE = 4096
_SUFFIX_FORMAT = {
    ".csv": "csv", ".txt": "csv", ".dat": "csv", ".tsv": "csv",
    ".npy": "npy", ".npz": "npz", ".mtx": "mtx", ".mm": "mtx",
}

Matrix = np.ndarray | sparse.COO


def open_matrix(
    path: str | PathLike,
    *,
    orientation: str = "sender_receiver",
    quantity: str = "bytes",
    fmt: str | None = None,
    count_path: str | PathLike | None = None,
) -> xr.DataArray:
    """Read a square rank-to-rank matrix into a ``traffic`` DataArray (sender, receiver, quantity).

    ``orientation`` says what the file's rows are: ``"sender_receiver"`` (row i, column j = what
    rank i sent to rank j) or ``"receiver_sender"`` (what rank i received from rank j; transposed
    on read). ``quantity`` names what the file holds: ``bytes`` [B], ``count`` [messages] or
    ``time`` [s]. ``count_path`` adds a message-count matrix of the same shape and orientation.
    Quantities not read are NaN where a read quantity is non-zero, 0 elsewhere. ``fmt`` (csv, npy,
    npz, mtx) is taken from the suffix or the content when None. Backed by ``sparse.COO`` when
    the input is sparse or has more than ``SPARSE_ABOVE`` ranks, else by numpy.
    """
    if orientation not in ORIENTATIONS:
        raise ValueError(f"orientation must be one of {ORIENTATIONS}, got {orientation!r}")
    if quantity not in TRAFFIC_QUANTITIES:
        raise ValueError(f"quantity must be one of {TRAFFIC_QUANTITIES}, got {quantity!r}")
    if count_path is not None and quantity == "count":
        raise ValueError("quantity='count' and count_path both give the message counts; pass one")
    slabs = {quantity: read_matrix(path, fmt=fmt, quantity=quantity)}
    if count_path is not None:
        slabs["count"] = read_matrix(count_path, fmt=fmt, quantity="count")
        _check_same_shape(Path(count_path), slabs[quantity].shape, slabs["count"].shape)
    if orientation == "receiver_sender":
        slabs = {q: m.T for q, m in slabs.items()}
    n = slabs[quantity].shape[0]
    use_sparse = n > SPARSE_ABOVE or any(isinstance(m, sparse.COO) for m in slabs.values())
    data = _stack(slabs, use_sparse)
    sources = [str(path)] + ([str(count_path)] if count_path is not None else [])
    return _traffic_array(data, slabs, quantity, orientation, sources, _format_of(Path(path), fmt))


def read_matrix(path: str | PathLike, *, fmt: str | None = None, quantity: str = "bytes") -> Matrix:
    """One validated square, finite, non-negative matrix as stored (rows as in the file).

    numpy float64 for dense inputs, ``sparse.COO`` for sparse ones (MatrixMarket coordinate,
    scipy ``save_npz``) or above ``SPARSE_ABOVE`` ranks. ``quantity`` picks the array of a
    multi-array ``.npz``.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(path)
    if path.stat().st_size == 0:
        raise PerfkitFormatError(path, None, "the file is empty, expected a square matrix")
    kind = _format_of(path, fmt)
    if kind == "csv":
        dense, lines = _read_csv(path)
        _validate_dense(path, dense, lines)
        return sparse.COO.from_numpy(dense) if dense.shape[0] > SPARSE_ABOVE else dense
    matrix = {"npy": _read_npy, "npz": _read_npz, "mtx": _read_mtx}[kind](path, quantity)
    if isinstance(matrix, sparse.COO):
        _validate_sparse(path, matrix)
        return matrix
    _validate_dense(path, matrix, None)
    return sparse.COO.from_numpy(matrix) if matrix.shape[0] > SPARSE_ABOVE else matrix


def matrix_to_dataset(matrix: xr.DataArray, **run_metadata: Any) -> xr.Dataset:
    """A one-run canonical Dataset holding only ``matrix`` as ``traffic`` (no functions).

    ``nprocs`` is the matrix size; ``format`` is ``"matrix"``; other run metadata as given.
    """
    ranks = matrix["sender"].values
    run = {"format": "matrix", "source": matrix.attrs.get("source", ""), **run_metadata,
           "nprocs": len(ranks)}
    return make_run(
        np.empty((len(ranks), 0, 6)), ranks=ranks, functions=[], run=run, traffic=matrix.data,
        warnings=json.loads(matrix.attrs.get("warnings", "[]")), reader=READER,
    )


# --- formats ----------------------------------------------------------------------------------------


def _format_of(path: Path, fmt: str | None) -> str:
    if fmt is not None:
        if fmt not in FORMATS:
            raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
        return fmt
    if path.suffix.lower() in _SUFFIX_FORMAT:
        return _SUFFIX_FORMAT[path.suffix.lower()]
    with open(path, "rb") as fh:
        head = fh.read(16)
    if head.startswith(b"%%MatrixMarket"):
        return "mtx"
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    if head.startswith(b"PK"):
        return "npz"
    return "csv"


def _read_csv(path: Path) -> tuple[np.ndarray, list[int]]:
    """Dense rows of a headerless CSV (comma or whitespace separated) and their line numbers."""
    rows: list[np.ndarray] = []
    lines: list[int] = []
    comma: bool | None = None
    try:
        with open(path, encoding="utf-8") as fh:
            for number, text in enumerate(fh, start=1):
                text = text.strip()
                if not text or text.startswith("#"):
                    continue
                comma = ("," in text) if comma is None else comma
                row = _parse_row(path, number, text, comma)
                if rows and row.size != rows[0].size:
                    raise PerfkitFormatError(path, number, f"row has {row.size} columns, but the first row "
                                                           f"(line {lines[0]}) has {rows[0].size}")
                rows.append(row)
                lines.append(number)
    except UnicodeDecodeError as exc:
        raise PerfkitFormatError(path, None, f"not a text file ({exc.reason}); expected a dense CSV matrix") from exc
    if not rows:
        raise PerfkitFormatError(path, None, "no matrix rows (only blank or comment lines)")
    return np.vstack(rows), lines


def _parse_row(path: Path, number: int, text: str, comma: bool) -> np.ndarray:
    cells = [c.strip() for c in text.split(",")] if comma else text.split()
    try:
        return np.array(cells, dtype=np.float64)
    except ValueError:
        for column, cell in enumerate(cells, start=1):
            try:
                float(cell)
            except ValueError:
                shown = repr(cell) if cell else "an empty cell"
                raise PerfkitFormatError(path, number, f"column {column}: {shown} is not a number "
                                                       "(the matrix has no header)") from None
        raise PerfkitFormatError(path, number, "the row is not a list of numbers") from None


def _read_npy(path: Path, quantity: str) -> np.ndarray:
    try:
        return np.asarray(np.load(path, allow_pickle=False), dtype=np.float64)
    except (ValueError, OSError, TypeError, EOFError) as exc:
        raise PerfkitFormatError(path, None, f"not a readable .npy array of numbers ({exc})") from exc


def _read_npz(path: Path, quantity: str) -> Matrix:
    """A scipy ``save_npz`` matrix, the only array of the archive, or the array named ``quantity``."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            keys = list(archive.files)
            if {"format", "shape", "data"} <= set(keys):
                return _from_scipy(path, scipy.sparse.load_npz(path))
            key = quantity if quantity in keys else (keys[0] if len(keys) == 1 else None)
            if key is None:
                raise PerfkitFormatError(path, None, f"holds arrays {keys}; expected one array or one named "
                                                     f"{quantity!r}")
            return np.asarray(archive[key], dtype=np.float64)
    except PerfkitFormatError:
        raise
    except (ValueError, OSError, TypeError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        raise PerfkitFormatError(path, None, f"not a readable .npz archive of a matrix ({exc})") from exc


def _read_mtx(path: Path, quantity: str) -> Matrix:
    try:
        loaded = scipy.io.mmread(path)
    except (ValueError, OSError, TypeError, IndexError, EOFError) as exc:
        raise PerfkitFormatError(path, None, f"not a readable MatrixMarket file ({exc})") from exc
    if scipy.sparse.issparse(loaded):
        return _from_scipy(path, loaded)
    return np.asarray(loaded, dtype=np.float64)


def _from_scipy(path: Path, matrix: Any) -> sparse.COO:
    """pydata-sparse COO (duplicates summed) of a scipy sparse matrix."""
    if np.iscomplexobj(matrix.data):
        raise PerfkitFormatError(path, None, "holds complex numbers; expected real, non-negative values")
    coo = scipy.sparse.coo_matrix(matrix, dtype=np.float64)
    coo.sum_duplicates()
    return sparse.COO.from_scipy_sparse(coo)


# --- validation -----------------------------------------------------------------------------------------


def _check_square(path: Path, shape: tuple[int, ...]) -> None:
    if len(shape) != 2:
        raise PerfkitFormatError(path, None, f"has {len(shape)} dimensions {shape}; expected a square 2-D matrix")
    if shape[0] != shape[1] or shape[0] == 0:
        raise PerfkitFormatError(path, None, f"is {shape[0]} rows x {shape[1]} columns; expected a square matrix")


def _validate_dense(path: Path, matrix: np.ndarray, lines: list[int] | None) -> None:
    """Square, finite, non-negative; errors name the file line (CSV) or the row/column."""
    if np.iscomplexobj(matrix):
        raise PerfkitFormatError(path, None, "holds complex numbers; expected real, non-negative values")
    _check_square(path, matrix.shape)
    for bad, what in ((~np.isfinite(matrix), "is not finite"), (matrix < 0, "is negative")):
        if bad.any():
            row, col = (int(i) for i in np.argwhere(bad)[0])
            line = lines[row] if lines is not None else None
            where = f"column {col + 1}" if line is not None else f"row {row + 1}, column {col + 1}"
            raise PerfkitFormatError(path, line, f"{where}: value {matrix[row, col]!r} {what}")


def _validate_sparse(path: Path, matrix: sparse.COO) -> None:
    _check_square(path, matrix.shape)
    for bad, what in ((~np.isfinite(matrix.data), "is not finite"), (matrix.data < 0, "is negative")):
        if bad.any():
            k = int(np.argmax(bad))
            row, col = (int(c) for c in matrix.coords[:, k])
            raise PerfkitFormatError(path, None, f"row {row + 1}, column {col + 1}: value {matrix.data[k]!r} {what}")


def _check_same_shape(path: Path, expected: tuple[int, ...], got: tuple[int, ...]) -> None:
    if expected != got:
        raise PerfkitFormatError(path, None, f"count matrix is {got}, but the main matrix is {expected}")


# --- assembly ---------------------------------------------------------------------------------------------


def _stack(slabs: dict[str, Matrix], use_sparse: bool) -> Matrix:
    """(sender, receiver, quantity) over ``TRAFFIC_QUANTITIES``; unread = NaN where traffic, else 0."""
    if use_sparse:
        return _stack_sparse({q: _to_scipy(m) for q, m in slabs.items()})
    read = {q: np.asarray(m, dtype=np.float64) for q, m in slabs.items()}
    any_traffic = np.any([m != 0 for m in read.values()], axis=0)
    unread = np.where(any_traffic, np.nan, 0.0)
    return np.stack([read.get(q, unread) for q in TRAFFIC_QUANTITIES], axis=2)


def _stack_sparse(read: dict[str, scipy.sparse.coo_matrix]) -> sparse.COO:
    """The sparse (n, n, 3) stack, built from coordinates (no element-wise sparse arithmetic)."""
    n = next(iter(read.values())).shape[0]
    pattern = sum((abs(m) for m in read.values()), start=scipy.sparse.csr_matrix((n, n))).tocoo()
    unread = scipy.sparse.coo_matrix((np.full(pattern.nnz, np.nan), (pattern.row, pattern.col)), shape=(n, n))
    rows, cols, quantities, values = [], [], [], []
    for k, q in enumerate(TRAFFIC_QUANTITIES):
        slab = read.get(q, unread)
        rows.append(slab.row)
        cols.append(slab.col)
        quantities.append(np.full(slab.nnz, k))
        values.append(slab.data)
    coords = np.vstack([np.concatenate(rows), np.concatenate(cols), np.concatenate(quantities)]).astype(np.int64)
    return sparse.COO(coords, np.concatenate(values), shape=(n, n, len(TRAFFIC_QUANTITIES)), has_duplicates=False)


def _to_scipy(matrix: Matrix) -> scipy.sparse.coo_matrix:
    """scipy COO without explicit zeros (scipy sparse arithmetic needs no compilation)."""
    if isinstance(matrix, sparse.COO):
        coo = scipy.sparse.coo_matrix((matrix.data, (matrix.coords[0], matrix.coords[1])), shape=matrix.shape)
    else:
        coo = scipy.sparse.coo_matrix(matrix)
    coo.eliminate_zeros()
    return coo


def _traffic_array(
    data: Matrix, slabs: dict[str, Matrix], quantity: str, orientation: str, sources: list[str], kind: str
) -> xr.DataArray:
    n = data.shape[0]
    ranks = np.arange(n, dtype=np.int64)
    warnings = _diagonal_warnings(slabs[quantity], quantity)
    main = slabs[quantity]
    return xr.DataArray(
        data,
        dims=("sender", "receiver", "quantity"),
        coords={
            "sender": ranks,
            "receiver": ranks,
            "quantity": list(TRAFFIC_QUANTITIES),
            "quantity_units": ("quantity", [TRAFFIC_UNITS[q] for q in TRAFFIC_QUANTITIES]),
        },
        name="traffic",
        attrs={
            "source": ";".join(sources),
            "format": kind,
            "file_orientation": orientation,
            "quantities_read": ",".join(q for q in TRAFFIC_QUANTITIES if q in slabs),
            "self_traffic": float(_diagonal(main).sum()),
            "symmetric": int(_is_symmetric(main)),
            "reader": READER,
            "warnings": json.dumps(warnings),
        },
    )


def _diagonal(matrix: Matrix) -> np.ndarray:
    if isinstance(matrix, sparse.COO):
        on_diag = matrix.coords[0] == matrix.coords[1]
        out = np.zeros(matrix.shape[0])
        out[matrix.coords[0][on_diag]] = matrix.data[on_diag]
        return out
    return np.diagonal(matrix).astype(np.float64)


def _is_symmetric(matrix: Matrix) -> bool:
    if isinstance(matrix, sparse.COO):
        csr = _to_scipy(matrix).tocsr()
        return (csr != csr.T).nnz == 0
    return bool(np.array_equal(matrix, matrix.T))


def _diagonal_warnings(matrix: Matrix, quantity: str) -> list[str]:
    """A note when ranks send to themselves (kept, not dropped)."""
    diag = _diagonal(matrix)
    if not diag.any():
        return []
    total = float(matrix.data.sum() if isinstance(matrix, sparse.COO) else matrix.sum())
    share = 100.0 * float(diag.sum()) / total if total else 0.0
    return [f"the diagonal holds self-traffic on {int(np.count_nonzero(diag))} ranks: {diag.sum():g} "
            f"{TRAFFIC_UNITS[quantity]} ({share:.1f}% of the {quantity} total); kept as is"]
