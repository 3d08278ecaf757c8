"""Stand-alone rank-to-rank communication matrices: dense CSV, ``.npy``/``.npz``, MatrixMarket.

``open_matrix`` returns a ``traffic`` DataArray with dims ``(sender, receiver, quantity)`` over
``TRAFFIC_QUANTITIES`` (bytes, count, time), so ``make_run(traffic=m.data)`` and
``matrix_to_dataset(m)`` use it as is. See ``docs/formats/matrix.md``.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from io import BytesIO
from os import PathLike
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pandas as pd
import scipy.sparse
import sparse
import xarray as xr

from perfkit.errors import PerfkitFormatError
from perfkit.model import TRAFFIC_QUANTITIES, TRAFFIC_UNITS, make_run
from perfkit.options import max_bytes, too_big

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
        raise FileNotFoundError(f"no such file: {path}")
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


def _read_csv(path: Path) -> tuple[np.ndarray, list[int] | None]:
    """Dense rows of a headerless CSV (comma or whitespace separated) and their line numbers (None: all good).

    pandas reads the file in one go; a file it cannot read exactly, or whose values break the
    contract, is read again line by line to name the line at fault.
    """
    dense = _read_csv_fast(path)
    return (dense, None) if dense is not None else _read_csv_lines(path)


def _read_csv_fast(path: Path) -> np.ndarray | None:
    """The square, finite, non-negative matrix of a well-formed CSV, else None (``_read_csv_lines`` decides).

    numpy's C ``loadtxt`` reads the file a chunk at a time into one growing array (the file's bytes
    are held only when a '#' is there to check).
    """
    size = path.stat().st_size
    if too_big(3.0 * size, "a text matrix"):
        return None
    with open(path, "rb") as fh:
        head = fh.read(1 << 16)
        first = next((t for t in (raw.strip() for raw in head.split(b"\n")[:-1]) if t and not t.startswith(b"#")),
                     None)
        if first is None:
            return None
        comma = b"," in first
        n = len(first.split(b",") if comma else first.split())
        if too_big(8.0 * n * n * 4, "a dense matrix"):
            return None
        source: BinaryIO = fh
        if _holds(fh, b"#"):
            fh.seek(0)
            source = BytesIO(fh.read())
            if _MID_LINE_HASH.search(source.getbuffer()):  # '#' starts comment lines only
                return None
        source.seek(0)
        try:
            dense = np.loadtxt(source, delimiter="," if comma else None, dtype=np.float64, comments="#", ndmin=2,
                               encoding="latin-1")
        except ValueError:  # a row of other length, a cell that is not a number
            return None
    if dense.shape != (n, n) or not np.isfinite(dense).all() or (dense < 0).any():
        return None
    return dense


def _holds(fh: BinaryIO, byte: bytes) -> bool:
    """True if the file holds ``byte`` (read a chunk at a time)."""
    fh.seek(0)
    return any(byte in chunk for chunk in iter(lambda: fh.read(_CHUNK), b""))


def _read_csv_lines(path: Path) -> tuple[np.ndarray, list[int]]:
    """Dense rows of a headerless CSV (comma or whitespace separated) and their line numbers, line by line."""
    rows: list[np.ndarray] = []
    lines: list[int] = []
    comma: bool | None = None
    # the longest row a matrix within max_bytes can have (64 characters a cell): longer is refused unread
    longest = 64 * int((max_bytes() / 32) ** 0.5) + 1024
    try:
        with open(path, encoding="utf-8") as fh:
            for number, text in enumerate(iter(lambda: fh.readline(longest), ""), start=1):
                if len(text) >= longest and not text.endswith("\n"):
                    raise PerfkitFormatError(path, number, f"a row longer than {longest:,} characters; "
                                                           f"{too_big(float('inf'), 'a matrix that wide')}")
                text = text.strip()
                if not text or text.startswith("#"):
                    continue
                comma = ("," in text) if comma is None else comma
                row = _parse_row(path, number, text, comma)
                if not rows:
                    refusal = too_big(8.0 * row.size * row.size * 4, f"a dense {row.size:,} x {row.size:,} matrix")
                    if refusal:  # checked on the first row, before the rest of the file is read
                        raise PerfkitFormatError(path, number, refusal)
                elif len(rows) == rows[0].size:
                    raise PerfkitFormatError(path, number, f"more rows than the {rows[0].size} columns of the "
                                                           "first row; expected a square matrix")
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
    """A 2-D numeric ``.npy`` array; its declared shape is checked against the bytes present first."""
    try:
        with open(path, "rb") as fh:
            _check_npy_header(path, fh, path.stat().st_size, "the array")
            fh.seek(0)
            return np.asarray(np.load(fh, allow_pickle=False), dtype=np.float64)
    except PerfkitFormatError:
        raise
    except MemoryError:
        raise
    except Exception as exc:  # numpy's header parser raises ValueError, SyntaxError, TokenError...
        raise PerfkitFormatError(path, None, f"not a readable .npy array of numbers ({_short(exc)})") from exc


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


def _check_npy_header(
    path: Path, fh: Any, size: int, what: str, kinds: str = "biuf"
) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype from an ``.npy`` header; refuses sizes larger than the data present or the limit."""
    from numpy.lib import format as npformat

    version = npformat.read_magic(fh)
    if version not in ((1, 0), (2, 0), (3, 0)):
        raise PerfkitFormatError(path, None, f"{what}: unknown .npy version {version}")
    reader = npformat.read_array_header_1_0 if version == (1, 0) else npformat.read_array_header_2_0
    shape, _fortran, dtype = reader(fh, max_header_size=10_000)
    if dtype.hasobject or dtype.kind not in kinds or dtype.fields is not None:
        raise PerfkitFormatError(path, None, f"{what} has dtype {dtype}; expected numbers")
    count = int(np.prod(shape, dtype=object))
    needed = count * max(dtype.itemsize, 8)
    if count * dtype.itemsize > size - fh.tell():
        raise PerfkitFormatError(path, None, f"{what} declares shape {shape} ({count * dtype.itemsize:,} B) but "
                                             f"only {max(size - fh.tell(), 0):,} B follow the header (truncated?)")
    refusal = too_big(needed, f"{what} of shape {shape}")
    if refusal:
        raise PerfkitFormatError(path, None, refusal)
    return shape, dtype


def _read_npz(path: Path, quantity: str) -> Matrix:
    """A scipy ``save_npz`` matrix, the only array of the archive, or the array named ``quantity``.

    Every member's declared size and ``.npy`` header are checked before it is inflated; sparse
    matrices are rebuilt from validated coordinates (never handed unchecked to compiled code).
    """
    try:
        with zipfile.ZipFile(path) as archive:
            infos = {i.filename.removesuffix(".npy"): i for i in archive.infolist()}
            for key, info in infos.items():
                refusal = too_big(info.file_size, f"member {key!r} inflated")
                if refusal:
                    raise PerfkitFormatError(path, None, refusal)
                with archive.open(info) as fh:
                    kinds = "biufSU" if key == "format" else "biuf"
                    _check_npy_header(path, fh, info.file_size, f"member {key!r}", kinds)
            keys = list(infos)
            if {"format", "shape", "data"} <= set(keys):
                return _sparse_npz(path, archive)
            key = quantity if quantity in keys else (keys[0] if len(keys) == 1 else None)
            if key is None:
                raise PerfkitFormatError(path, None, f"holds arrays {keys}; expected one array or one named "
                                                     f"{quantity!r}")
            return np.asarray(_npz_member(archive, infos[key]), dtype=np.float64)
    except PerfkitFormatError:
        raise
    except MemoryError:
        raise
    except Exception as exc:  # zipfile, zlib, numpy's header parser: any of their exception types
        raise PerfkitFormatError(path, None, f"not a readable .npz archive of a matrix ({_short(exc)})") from exc


def _npz_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    with archive.open(info) as fh:
        return np.lib.format.read_array(fh, allow_pickle=False)


def _sparse_npz(path: Path, archive: zipfile.ZipFile) -> sparse.COO:
    """A scipy ``save_npz`` matrix (csr, csc or coo), its index arrays validated in numpy."""
    member = {i.filename.removesuffix(".npy"): i for i in archive.infolist()}
    fmt_value = _npz_member(archive, member["format"])
    kind = fmt_value.item().decode() if isinstance(fmt_value.item(), bytes) else str(fmt_value.item())
    shape = np.asarray(_npz_member(archive, member["shape"]))
    if shape.shape != (2,) or shape.dtype.kind not in "iu" or (shape < 0).any():
        raise PerfkitFormatError(path, None, f"sparse matrix shape {shape.tolist()} is not two sizes")
    n, m = (int(v) for v in shape)
    _check_square(path, (n, m))
    data = np.asarray(_npz_member(archive, member["data"]))
    if data.ndim != 1 or data.dtype.kind not in "biuf":
        raise PerfkitFormatError(path, None, f"sparse matrix data has dtype {data.dtype}; expected real numbers")

    def index(name: str, size: int | None, bound: int) -> np.ndarray:
        if name not in member:
            raise PerfkitFormatError(path, None, f"{kind} sparse matrix without member {name!r}")
        arr = np.asarray(_npz_member(archive, member[name]))
        if arr.ndim != 1 or arr.dtype.kind not in "iu" or (size is not None and arr.size != size):
            raise PerfkitFormatError(path, None, f"sparse member {name!r} is not {size or 'a vector of'} integers")
        if arr.size and (arr.min() < 0 or arr.max() > bound):
            raise PerfkitFormatError(path, None, f"sparse member {name!r} holds an index outside 0..{bound}")
        return arr.astype(np.int64)

    if kind == "coo":
        rows, cols = index("row", data.size, n - 1), index("col", data.size, n - 1)
    elif kind in ("csr", "csc"):
        ptr = index("indptr", n + 1, data.size)
        if ptr[0] != 0 or ptr[-1] != data.size or np.any(np.diff(ptr) < 0):
            raise PerfkitFormatError(path, None, f"{kind} member 'indptr' is not a non-decreasing 0..{data.size}")
        minor = index("indices", data.size, n - 1)
        major = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))
        rows, cols = (major, minor) if kind == "csr" else (minor, major)
    else:
        raise PerfkitFormatError(path, None, f"sparse format {kind!r}; expected csr, csc or coo")
    coo = scipy.sparse.coo_matrix((data.astype(np.float64), (rows, cols)), shape=(n, n))
    return _from_scipy(path, coo)


# --- MatrixMarket: a validating parser (grammar checked in Python before numbers are converted) -------

_MID_LINE_HASH = re.compile(rb"(?m)^[ \t]*[^#\s][^\n]*#")
_MM_HEADER = re.compile(rb"%%MatrixMarket[ \t]+(\w+)[ \t]+(\w+)[ \t]+([\w-]+)[ \t]+([\w-]+)[ \t]*", re.I)
_MM_INT = rb"\d{1,18}"
_MM_REAL = rb"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d{1,5})?"
_MM_VALUE = {"real": _MM_REAL, "double": _MM_REAL, "integer": rb"[-+]?\d{1,30}"}
_BLANK = rb"[ \t]*\r?\n"
_MM_ALPHABET = b"0123456789.eE+- \t\r\n"
_MM_BLANK = np.zeros(256, dtype=bool)
_MM_BLANK[np.frombuffer(b" \t\r\n", dtype=np.uint8)] = True
#: Fewest bytes one entry takes: "1 1 1\n" (coordinate), "1\n" (array).
_MIN_ENTRY = {"coordinate": 6, "array": 2}
#: MPI numbers ranks with a C int: larger declared sizes are refused.
MAX_RANKS = 2**31
_CHUNK = 1 << 22


def _read_mtx(path: Path, quantity: str) -> Matrix:
    """A MatrixMarket ``coordinate`` (-> sparse) or ``array`` (-> dense) matrix of real or integer values.

    The header, the size line and every entry line are checked against the format's grammar, the
    declared sizes against the bytes present and ``max_bytes``, before any number is converted.
    Symmetric files must list the lower triangle only; ``pattern``, ``complex``, ``hermitian`` and
    ``skew-symmetric`` are refused (they cannot hold non-negative traffic). The entries are parsed
    from the file as it is read (the file's bytes are not held); the bytes are read again only to
    name the line of an error.
    """
    size = path.stat().st_size
    refusal = too_big(size * 4, "holding this MatrixMarket file decoded")
    if refusal:
        raise PerfkitFormatError(path, None, refusal)
    with open(path, "rb") as fh:
        layout, field_, symmetry, tokens, line = _mm_preamble(path, fh)
        start = fh.tell()
        return _mm_entries(path, fh, start, size - start, layout, field_, symmetry, tokens, line)


def _mm_preamble(path: Path, fh: BinaryIO) -> tuple[str, str, str, list[bytes], int]:
    """Layout, field, symmetry, size-line tokens and the size line's number; ``fh`` is left after it."""
    header = fh.readline(1 << 16).rstrip(b"\r\n")
    m = _MM_HEADER.fullmatch(header)
    if not m:
        raise PerfkitFormatError(path, 1, "expected the header '%%MatrixMarket matrix coordinate|array "
                                          "real|integer general|symmetric'")
    obj, layout, field_, symmetry = (g.decode().lower() for g in m.groups())
    if obj != "matrix" or layout not in _MIN_ENTRY:
        raise PerfkitFormatError(path, 1, f"MatrixMarket '{obj} {layout}': expected 'matrix coordinate' or "
                                          "'matrix array'")
    if field_ not in _MM_VALUE:
        raise PerfkitFormatError(path, 1, f"MatrixMarket field '{field_}': expected real or integer (traffic "
                                          "needs non-negative real values)")
    if symmetry not in ("general", "symmetric"):
        raise PerfkitFormatError(path, 1, f"MatrixMarket symmetry '{symmetry}': expected general or symmetric")
    line = 1
    for raw in iter(fh.readline, b""):  # comments, then the size line
        line += 1
        text = raw.strip()
        if text and not text.startswith(b"%"):
            break
    else:
        raise PerfkitFormatError(path, None, "no size line after the MatrixMarket header (truncated?)")
    wanted = 3 if layout == "coordinate" else 2
    tokens = text.split()
    if len(tokens) != wanted or not all(re.fullmatch(_MM_INT, t) for t in tokens):
        shape = "'rows columns entries'" if layout == "coordinate" else "'rows columns'"
        raise PerfkitFormatError(path, line, f"expected the size line {shape} (integers), found "
                                             f"{text[:60].decode('latin-1')!r}")
    return layout, field_, symmetry, tokens, line


def _mm_entries(path: Path, fh: BinaryIO, start: int, length: int, layout: str, field_: str, symmetry: str,
                tokens: list[bytes], line: int) -> Matrix:
    """The entries after the size line (on ``line``), from byte ``start`` of ``fh`` on (``length`` bytes)."""
    rows, cols = int(tokens[0]), int(tokens[1])
    if rows != cols or rows == 0:
        raise PerfkitFormatError(path, line, f"declares {rows} rows x {cols} columns; expected a square matrix")
    n = rows
    if n > MAX_RANKS:
        raise PerfkitFormatError(path, line, f"declares {n:,} ranks; MPI numbers at most {MAX_RANKS:,}")
    if layout == "coordinate":
        entries = int(tokens[2])
        needed = entries * 8 * 12 + n * 16 if n > SPARSE_ABOVE else 8 * n * n * 5 + entries * 8 * 12
    else:
        entries = n * n if symmetry == "general" else n * (n + 1) // 2
        needed = 8 * n * n * 5
    if entries * _MIN_ENTRY[layout] > length + 1:
        raise PerfkitFormatError(path, line, f"declares {entries:,} entries, but only {length:,} bytes follow "
                                             "(truncated, or a wrong size line)")
    refusal = too_big(needed, f"a {n:,} x {n:,} matrix with {entries:,} entries")
    if refusal:
        raise PerfkitFormatError(path, line, refusal)
    if entries == 0 and _blank_from(fh, start):
        return sparse.COO(np.zeros((2, 0), dtype=np.int64), np.zeros(0), shape=(n, n))
    table = _mm_table(fh, start, layout == "coordinate")
    if table is None:
        _mm_raise_at_bad_line(path, _mm_body(path, start), line + 1, layout, field_)
    values = table[-1]
    if values.size != entries:
        found = values.size
        body = _mm_body(path, start)
        at = _entry_line(body, line + 1, entries) if found > entries else line + 1 + body.count(b"\n")
        raise PerfkitFormatError(path, at, f"the size line declares {entries:,} entries, the file has "
                                           f"{found:,}" + (" (truncated?)" if found < entries else ""))
    checks = [(~np.isfinite(values), "is not finite"), (values < 0, "is negative")]
    if field_ == "integer":
        checks.append((values != np.round(values), "is not an integer (the header says integer)"))
    for bad, what in checks:
        if bad.any():
            k = int(np.argmax(bad))
            line_k = _entry_line(_mm_body(path, start), line + 1, k)
            where = f"row {table[0][k]}, column {table[1][k]}: " if len(table) == 3 else ""
            raise PerfkitFormatError(path, line_k, f"{where}value {float(values[k])!r} {what}")
    if layout == "array":
        return _mm_array(values, n, symmetry)
    i, j = table[0], table[1]  # 1-based
    above = (i < j) if symmetry == "symmetric" else np.zeros(i.size, dtype=bool)
    for bad, what in ((i < 1, "row index 0 (indices start at 1)"),
                      (j < 1, "column index 0 (indices start at 1)"), (i > n, f"row index above {n}"),
                      (j > n, f"column index above {n}"),
                      (above, "above the diagonal in a symmetric file (only the lower triangle is stored)")):
        if bad.any():
            k = int(np.argmax(bad))
            line_k = _entry_line(_mm_body(path, start), line + 1, k)
            raise PerfkitFormatError(path, line_k, f"entry ({i[k]}, {j[k]}): {what}")
    del table, above
    if symmetry == "symmetric":
        off = i != j
        i, j, values = np.concatenate([i, j[off]]), np.concatenate([j, i[off]]), np.concatenate([values, values[off]])
        del off
    linear = i * n  # row-major position of each entry (n <= MAX_RANKS keeps n * n within int64)
    linear += j
    linear -= n + 1  # indices are 1-based
    del i, j
    parts = [linear, values]
    del linear, values
    return _coo(parts, n)


def _coo(parts: list[np.ndarray], n: int) -> sparse.COO:
    """An (n, n) ``sparse.COO`` of entries at row-major positions ``parts[0]`` with values ``parts[1]``.

    Duplicates are summed; entries already in row-major order without repeats (the usual case)
    are taken as they are. The arrays are taken out of ``parts`` so that each is freed as soon as
    its sorted copy exists.
    """
    linear, values = parts
    parts.clear()
    if linear.size > 1 and not np.all(linear[1:] > linear[:-1]):
        order = np.argsort(linear)
        linear = linear[order]
        values = values[order]
        del order
        starts = np.flatnonzero(np.concatenate([[True], linear[1:] != linear[:-1]]))
        if starts.size < linear.size:
            linear, values = linear[starts], np.add.reduceat(values, starts)
    coords = np.empty((2, linear.size), dtype=np.int64)
    np.divmod(linear, n, out=(coords[0], coords[1]))
    del linear
    if not values.flags.writeable:  # pandas' column views are read-only
        values = values.copy()
    return sparse.COO(coords, values, shape=(n, n), has_duplicates=False, sorted=True)


def _blank_from(fh: BinaryIO, start: int) -> bool:
    """True if nothing but whitespace follows byte ``start``."""
    fh.seek(start)
    return all(not chunk.strip() for chunk in iter(lambda: fh.read(_CHUNK), b""))


def _mm_body(path: Path, start: int) -> bytes:
    """The bytes after the size line, ending with a newline (error messages only)."""
    with open(path, "rb") as fh:
        fh.seek(start)
        body = fh.read()
    return body + b"\n" if body and not body.endswith(b"\n") else body


def _mm_raise_at_bad_line(path: Path, body: bytes, first_line: int, layout: str, field_: str) -> None:
    """Name the first line of ``body`` that breaks the MatrixMarket entry grammar (error path only)."""
    entry = rb"[ \t]*" + (_MM_INT + rb"[ \t]+" + _MM_INT + rb"[ \t]+" if layout == "coordinate" else b"")
    grammar = re.compile(rb"(?:" + entry + _MM_VALUE[field_] + rb"[ \t]*\r?\n|" + _BLANK + rb")*")
    end = grammar.match(body).end()
    bad_line = first_line + body.count(b"\n", 0, end)
    found = body[end: body.find(b"\n", end)].strip()[:60].decode("latin-1")
    what = "'row column value'" if layout == "coordinate" else "one value"
    raise PerfkitFormatError(path, bad_line, f"expected {what} ({field_}) per line, found {found!r}")


def _mm_table(fh: BinaryIO, start: int, coordinate: bool) -> list[np.ndarray] | None:
    """Columns (row, column, value or just value) of the MatrixMarket entry lines from byte ``start`` of ``fh``.

    None when malformed. Only bytes of the number alphabet reach pandas' C tokenizer (checked a
    chunk at a time first); indices are int64 (at most 18 digits pass the grammar), values float64.
    Single spaces between fields are tried first (pandas' quickest path), any whitespace after.
    """
    if not _number_bytes_only(fh, start):  # letters other than e/E: inf, nan, 0x1F, 12abc, 1,5 ...
        return None
    ncols = 3 if coordinate else 1
    dtype = {0: np.int64, 1: np.int64, 2: np.float64} if coordinate else {0: np.float64}
    for sep in (" ", r"\s+"):
        fh.seek(start)
        try:
            frame = pd.read_csv(fh, sep=sep, header=None, engine="c", dtype=dtype, na_filter=False)
        except (ValueError, OverflowError, pd.errors.ParserError, pd.errors.EmptyDataError):
            continue
        if frame.shape[1] != ncols:
            continue
        columns = [frame[c].to_numpy() for c in range(ncols)]
        del frame
        if columns[-1].dtype == np.float64 and not np.isnan(columns[-1]).any():
            return columns
    return None


def _number_bytes_only(fh: BinaryIO, start: int) -> bool:
    """True if every byte from ``start`` on is a digit, '.', 'e', 'E', a sign or whitespace."""
    fh.seek(start)
    buf = bytearray(max(1, min(_CHUNK, os.fstat(fh.fileno()).st_size - start)))
    while got := fh.readinto(buf):
        if (buf if got == len(buf) else buf[:got]).translate(None, _MM_ALPHABET):
            return False
    return True


def _entry_line(body: bytes, first_line: int, k: int) -> int | None:
    """File line of the k-th (0-based) non-blank line of ``body`` (which starts on ``first_line``), or None.

    Error path only; works through ``body`` in chunks so its memory stays small.
    """
    chunk = 1 << 24
    pos, line, seen = 0, first_line, 0
    while pos < len(body):
        stop = body.find(b"\n", min(pos + chunk, len(body)) - 1)
        stop = len(body) if stop < 0 else stop + 1
        raw = np.frombuffer(body, dtype=np.uint8, count=stop - pos, offset=pos)
        ends = np.flatnonzero(raw == 10)
        starts = np.concatenate([[0], ends[:-1] + 1])
        filled = np.concatenate([[0], np.cumsum(~_MM_BLANK[raw], dtype=np.int32)])
        nonblank = np.flatnonzero(filled[ends + 1] > filled[starts])
        if seen + nonblank.size > k:
            return line + int(nonblank[k - seen])
        seen += nonblank.size
        pos, line = stop, line + ends.size
    return None


def _mm_array(values: np.ndarray, n: int, symmetry: str) -> np.ndarray:
    """Column-major values (the lower triangle for symmetric) as a dense (n, n) matrix."""
    if symmetry == "general":
        return values.reshape(n, n, order="F").copy()
    out = np.zeros((n, n))
    cols, rows = np.triu_indices(n)  # column-major lower triangle = row-major upper of the transpose
    out[rows, cols] = values
    return np.where(out != 0, out, out.T)


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
