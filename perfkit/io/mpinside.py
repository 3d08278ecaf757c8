"""Reader for MPInside text output (per-rank tables, size histograms, transfer matrices).

The layout understood here is documented, with every assumption marked, in
``docs/formats/mpinside.md``. In short: a run is one text file of blocks, each opened by a
``>>>> Title <<<<`` line; a block's first line names its columns.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from io import BytesIO
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from perfkit.errors import PerfkitFormatError
from perfkit.io.mpinside_names import column_function
from perfkit.model import SIZE_STATS, TRAFFIC_QUANTITIES, make_run
from perfkit.options import too_big

PLACEHOLDER = b"-----"
#: Ranks, and rank indices of matrices, are below this (MPI ranks are C ints).
MAX_RANK = 2**31
_HEADER = re.compile(rb"^[ \t]*>{3,}[ \t]*(.*?)[ \t]*<{3,}[ \t]*\r?$", re.M)
_SNIFF = re.compile(rb"(?m)^[ \t]*>{3,}[ \t]*(Communication\s+time\s+totals|Bytes\s+sent|Calls\s+sending\s+data|"
                    rb"Bytes\s+received|Calls\s+receiving\s+data|Rank\s+\d+\s+Sizes?\s+distribution)", re.I)
_RANK_TABLES = {
    "communication time totals": "time",
    "bytes sent": "bytes_sent",
    "calls sending data": "calls_sent",
    "bytes received": "bytes_recv",
    "calls receiving data": "calls_recv",
    "number of calls": "calls",  # perfkit's extension (written by perfkit collect); absent in MPInside: NaN
}
_SIZES = re.compile(r"^rank\s+(\d+)\s+size(s)?\s+distribution(\s+times)?$", re.I)
_MATRIX = re.compile(r"^(?:.*\b)?(TIME|SIZE|REQUEST)\s*\(\s*i\s*,\s*j\s*\)", re.I)
_MATRIX_QUANTITY = {"SIZE": "bytes", "REQUEST": "count", "TIME": "time"}
_TEXT_BYTES = bytes(range(32, 127)) + b" \t\r\n\v\f"
_COLUMN = re.compile(r"^\w+$", re.ASCII)


@dataclass
class Block:
    """One ``>>>> title <<<<`` block: its title, body bytes and the file line of its header."""

    title: str
    body: bytes
    line: int

    @property
    def body_line(self) -> int:
        """File line number of the first body line."""
        return self.line + 1


def sniff(path: Path, head: bytes) -> bool:
    """True if ``head`` holds an MPInside table header."""
    return bool(_SNIFF.search(head))


def iter_blocks(path: Path, data: bytes) -> Iterator[Block]:
    """Split the file into blocks; text before the first header must be blank or ``#`` comments."""
    start, line = _skip_preamble(path, data)
    headers = _iter_headers(data, start)
    match = next(headers, None)
    while match is not None:
        following = next(headers, None)
        end = following.start() if following is not None else len(data)
        body = data[match.end() + 1:end] if match.end() < end else b""
        yield Block(match.group(1).decode("ascii", "replace").strip(), body, line)
        line += 1 + body.count(b"\n")
        match = following


def _iter_headers(data: bytes, start: int) -> Iterator[re.Match[bytes]]:
    """Header lines from ``start`` on, found by searching for ``>>>`` (much faster than a regex scan)."""
    pos = start
    while (pos := data.find(b">>>", pos)) >= 0:
        line_start = data.rfind(b"\n", 0, pos) + 1
        if not data[line_start:pos].strip(b" \t") and (match := _HEADER.match(data, line_start)):
            yield match
            pos = match.end()
        else:
            pos += 3


def _skip_preamble(path: Path, data: bytes) -> tuple[int, int]:
    """Offset and line number of the first table header; fails at the first line that is not one."""
    pos, number = 0, 1
    while pos < len(data):
        nl = data.find(b"\n", pos)
        end = len(data) if nl < 0 else nl
        raw = data[pos:min(end, pos + 65536)]
        text = raw.strip()
        if _HEADER.match(raw):
            return pos, number
        if text and not text.startswith(b"#"):
            what = "binary data" if not _is_text(text[:4096]) else repr(text[:40].decode("latin-1"))
            raise PerfkitFormatError(path, number, f"expected a '>>>> title <<<<' table header, found {what}")
        pos, number = end + 1, number + 1
    raise PerfkitFormatError(path, None, "no '>>>> title <<<<' table header found")


def _is_text(raw: bytes) -> bool:
    return not raw.translate(None, _TEXT_BYTES)


def _split_header(block: Block, path: Path) -> tuple[list[str], bytes, int]:
    """Column names, the remaining body and the file line of the first data row."""
    body = block.body
    offset = 0
    while True:
        nl = body.find(b"\n", offset)
        line = body[offset: nl if nl >= 0 else len(body)]
        if line.strip() or nl < 0:
            break
        offset = nl + 1
    skipped = body[:offset].count(b"\n")
    columns = line.decode("ascii", "replace").split()
    if not columns:
        raise PerfkitFormatError(path, block.body_line + skipped,
                                 f"table '{block.title}' has no column header line")
    rest = body[nl + 1:] if nl >= 0 else b""
    return columns, rest, block.body_line + skipped + 1


def parse_numbers(raw: bytes, ncols: int, path: Path, first_line: int, what: str) -> np.ndarray:
    """Parse a whitespace table of ``ncols`` numbers per line (``-----`` -> NaN) strictly."""
    if not raw.strip():
        raise PerfkitFormatError(path, first_line, f"{what}: expected rows of {ncols} columns, found none")
    if raw.translate(None, _TEXT_BYTES):
        row = _first_binary_line(raw)
        raise PerfkitFormatError(path, first_line + row, f"{what}: binary data where numbers were expected")
    try:
        values = pd.read_csv(BytesIO(raw), sep=r"\s+", header=None, engine="c", dtype=np.float64,
                             na_values=[PLACEHOLDER.decode()], keep_default_na=False).to_numpy()
    except ValueError:  # a row with a different field count, or text where a number belongs
        _raise_on_bad_row(raw, ncols, path, first_line, what)
        row, token = _first_bad_token(raw)
        raise PerfkitFormatError(path, first_line + row,
                                 f"{what}: expected a number or '-----', found {token!r}") from None
    # pandas pads short rows with NaN: more NaN than placeholders means a row lacks fields
    if values.shape[1] != ncols or np.count_nonzero(np.isnan(values)) != raw.count(PLACEHOLDER):
        _raise_on_bad_row(raw, ncols, path, first_line, what)
        row, token = _first_bad_token(raw)
        raise PerfkitFormatError(path, first_line + row, f"{what}: expected a number or '-----', found {token!r}")
    _check_values(values, raw, path, first_line, what)
    return values


def _check_values(values: np.ndarray, raw: bytes, path: Path, first_line: int, what: str) -> None:
    """No table holds a negative or infinite number (times, bytes, calls, ranks, sizes): the line is named."""
    bad = np.isinf(values) | (values < 0)
    if not bad.any():
        return
    row = int(np.argmax(bad.any(axis=1)))
    col = int(np.argmax(bad[row]))
    why = "is negative" if values[row, col] < 0 else "is infinite (or beyond the float range)"
    raise PerfkitFormatError(path, _row_line(raw, first_line, row),
                             f"{what}: column {col + 1} holds {values[row, col]!r}, which {why}; MPInside "
                             "measures no negative or infinite time, byte count or call count")


def _row_line(raw: bytes, first_line: int, row: int) -> int:
    """File line of the ``row``-th non-blank line of ``raw`` (error path only)."""
    seen = -1
    for number, text in enumerate(raw.splitlines()):
        seen += bool(text.strip())
        if seen == row:
            return first_line + number
    return first_line + row


def _raise_on_bad_row(raw: bytes, ncols: int, path: Path, first_line: int, what: str) -> None:
    """Find the first row whose field count differs from ``ncols`` (only called on bad input)."""
    lines = raw.splitlines()
    for row, line in enumerate(lines):
        count = len(line.split())
        if count not in (0, ncols):
            truncated = " (truncated table?)" if row == len(lines) - 1 else ""
            raise PerfkitFormatError(path, first_line + row,
                                     f"{what}: expected {ncols} columns as in its header, found {count}{truncated}")


def _first_bad_token(raw: bytes) -> tuple[int, str]:
    for row, line in enumerate(raw.splitlines()):
        for token in line.split():
            if token == PLACEHOLDER:
                continue
            try:
                if float(token) != float(token):  # nan, NaN: a token MPInside does not write
                    return row, token.decode("latin-1")
            except ValueError:
                return row, token.decode("latin-1")
    return 0, "?"


def _first_binary_line(raw: bytes) -> int:
    for row, line in enumerate(raw.splitlines()):
        if not _is_text(line):
            return row
    return 0


def _rank_column(values: np.ndarray, path: Path, first_line: int, what: str) -> np.ndarray:
    bad = np.flatnonzero(~np.isfinite(values) | (values < 0) | (values != np.round(values)) | (values >= MAX_RANK))
    if bad.size:
        raise PerfkitFormatError(path, first_line + int(bad[0]), f"{what}: CPU must be a rank number in "
                                                                 f"0..{MAX_RANK - 1}")
    ranks = values.astype(np.int64)
    if ranks.size < 2 or np.all(ranks[1:] > ranks[:-1]):  # the usual case: increasing ranks
        return ranks
    uniq, counts = np.unique(ranks, return_counts=True)
    if np.any(counts > 1):
        dup = int(uniq[counts > 1][0])
        second = int(np.flatnonzero(ranks == dup)[1])
        raise PerfkitFormatError(path, first_line + second, f"{what}: rank {dup} appears twice")
    return ranks


def _check_columns(columns: list[str], path: Path, line: int, title: str) -> None:
    """Column names are function names: letters, digits and '_' (no control bytes or punctuation)."""
    odd = next((c for c in columns if not _COLUMN.match(c)), None)
    if odd is not None:
        raise PerfkitFormatError(path, line, f"table '{title}': column name {odd!r} is not a function name "
                                             "(letters, digits, '_')")


@dataclass
class RankTable:
    """A per-rank table: its metric, columns (file spelling), ranks and values."""

    metric: str
    columns: list[str]
    ranks: np.ndarray
    values: np.ndarray
    line: int


def _read_rank_table(block: Block, metric: str, path: Path) -> RankTable:
    columns, rest, first = _split_header(block, path)
    if columns[0].upper() != "CPU":
        raise PerfkitFormatError(path, first - 1, f"table '{block.title}': expected first column 'CPU', "
                                                  f"found {columns[0]!r}")
    _check_columns(columns, path, first - 1, block.title)
    dups = {c for c in columns if columns.count(c) > 1}
    if dups:
        raise PerfkitFormatError(path, first - 1, f"table '{block.title}': duplicated columns {sorted(dups)}")
    values = parse_numbers(rest, len(columns), path, first, f"table '{block.title}'")
    ranks = _rank_column(values[:, 0], path, first, f"table '{block.title}'")
    return RankTable(metric, columns[1:], ranks, values[:, 1:], block.line)


@dataclass
class SizeTable:
    """One rank's message-size histogram (count or time) per function."""

    rank: int
    stat: str
    functions: list[str]
    bins: np.ndarray
    values: np.ndarray


def _read_size_table(block: Block, match: re.Match[str], path: Path) -> SizeTable:
    columns, rest, first = _split_header(block, path)
    if columns[0].lower() not in ("sizes", "size"):
        raise PerfkitFormatError(path, first - 1, f"table '{block.title}': expected first column 'Sizes', "
                                                  f"found {columns[0]!r}")
    _check_columns(columns, path, first - 1, block.title)
    values = parse_numbers(rest, len(columns), path, first, f"table '{block.title}'")
    bins = values[:, 0]
    if np.unique(bins).size != bins.size:
        raise PerfkitFormatError(path, first, f"table '{block.title}': a size bin appears twice")
    stat = "time" if match.group(3) else "count"
    return SizeTable(int(match.group(1)), stat, [column_function(c)[0] for c in columns[1:]], bins, values[:, 1:])


def _read_matrix(block: Block, path: Path) -> tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(quantity, row index i, column index j, value, file line) of a TIME/SIZE/REQUEST(i,j) block."""
    name = _MATRIX.match(block.title).group(1).upper()
    columns, rest, first = _split_header(block, path)
    what = f"matrix '{block.title}'"
    if [c.lower() for c in columns] == ["i", "j", "value"]:
        if not rest.strip():
            empty = np.zeros(0, dtype=np.int64)
            return name, empty, empty, np.zeros(0), empty
        values = parse_numbers(rest, 3, path, first, what)
        i = _index_column(values[:, 0], path, first, what)
        j = _index_column(values[:, 1], path, first, what)
        return name, i, j, values[:, 2], first + np.arange(i.size)
    if columns[0].upper() != "CPU":
        raise PerfkitFormatError(path, first - 1, f"{what}: expected a 'CPU 0 1 ...' or 'i j value' header")
    cols = np.asarray(_index_column(np.asarray(columns[1:], dtype=object), path, first - 1, what))
    values = parse_numbers(rest, len(columns), path, first, what)
    rows = _rank_column(values[:, 0], path, first, what)
    ii, jj = np.nonzero(values[:, 1:])
    return name, rows[ii], cols[jj], values[:, 1:][ii, jj], first + ii


def _index_column(values: np.ndarray, path: Path, line: int, what: str) -> np.ndarray:
    try:
        as_float = np.asarray(values, dtype=np.float64)
    except ValueError:
        raise PerfkitFormatError(path, line, f"{what}: rank indices must be integers") from None
    if np.any(~np.isfinite(as_float) | (as_float < 0) | (as_float != np.round(as_float)) | (as_float >= MAX_RANK)):
        raise PerfkitFormatError(path, line, f"{what}: rank indices must be integers in 0..{MAX_RANK - 1}")
    return as_float.astype(np.int64)


def read(path: str | PathLike, **run_metadata: Any) -> xr.Dataset:
    """Read one MPInside run (a text file of tables) into the canonical Dataset."""
    path = Path(path)
    with open(path, "rb") as fh:
        head = fh.read(65536)
        if not head:
            raise PerfkitFormatError(path, None, "the file is empty")
        if b"\x00" in head:
            raise PerfkitFormatError(path, 1, "binary data, expected MPInside text tables")
        _skip_preamble(path, head[: head.rfind(b"\n") + 1] or head)  # fail on junk before reading it all
        refusal = too_big(2.0 * path.stat().st_size, "holding this MPInside file and its tables")
        if refusal:
            raise PerfkitFormatError(path, None, refusal)
        fh.seek(0)
        data = fh.read()
    return _assemble(path, iter_blocks(path, data), {**_preamble_metadata(path, data), **run_metadata})


_RUN_COMMENT = re.compile(rb"^[ \t]*#[ \t]*perfkit-run:[ \t]*(.*?)[ \t]*\r?$", re.M)


def _preamble_metadata(path: Path, data: bytes) -> dict[str, Any]:
    """Run metadata from a ``# perfkit-run: {json}`` comment before the first table (``perfkit collect`` writes one)."""
    start, _ = _skip_preamble(path, data[:65536])
    match = _RUN_COMMENT.search(data, 0, start)
    if match is None:
        return {}
    line = data.count(b"\n", 0, match.start()) + 1
    try:
        meta = json.loads(match.group(1))
    except ValueError as exc:
        raise PerfkitFormatError(path, line, f"'# perfkit-run:' must be followed by a JSON object ({exc})") from exc
    if not isinstance(meta, dict):
        raise PerfkitFormatError(path, line, "'# perfkit-run:' must be followed by a JSON object")
    return meta


def _assemble(path: Path, blocks: Iterator[Block], meta: dict[str, Any]) -> xr.Dataset:
    tables: dict[str, RankTable] = {}
    sizes: list[SizeTable] = []
    matrices: dict[str, tuple[np.ndarray, ...]] = {}
    warnings: list[str] = []
    for block in blocks:
        title = " ".join(block.title.lower().split())
        key = next((m for t, m in _RANK_TABLES.items() if title.startswith(t)), None)
        if key is not None:
            if key in tables:
                raise PerfkitFormatError(path, block.line, f"table '{block.title}' appears twice "
                                                           f"(first on line {tables[key].line})")
            tables[key] = _read_rank_table(block, key, path)
        elif match := _SIZES.match(title):
            sizes.append(_read_size_table(block, match, path))
        elif _MATRIX.match(block.title):
            name, i, j, v, lines = _read_matrix(block, path)
            if name in matrices:
                raise PerfkitFormatError(path, block.line, f"matrix {name}(i,j) appears twice")
            matrices[name] = (i, j, v, lines)
        else:
            warnings.append(f"line {block.line}: skipped unknown block '{block.title}'")
    if "time" not in tables:
        raise PerfkitFormatError(path, None, "no '>>>> Communication time totals (s) <<<<' table found")
    return _build(path, tables, sizes, matrices, warnings, meta)


def _build(path: Path, tables: dict[str, RankTable], sizes: list[SizeTable],
           matrices: dict[str, tuple[np.ndarray, ...]], warnings: list[str],
           meta: dict[str, Any]) -> xr.Dataset:
    ranks = tables["time"].ranks
    for table in tables.values():
        if np.array_equal(table.ranks, ranks):
            continue
        extra = np.setdiff1d(table.ranks, ranks)
        if extra.size:
            raise PerfkitFormatError(path, table.line, f"table for {table.metric} has ranks {extra[:5].tolist()} "
                                                       "that the time table lacks")
        missing = np.setdiff1d(ranks, table.ranks)
        if missing.size:
            warnings.append(f"line {table.line}: {table.metric} table has no rows for {missing.size} ranks "
                            f"(e.g. {missing[:5].tolist()}); their values are NaN")
    functions: dict[str, tuple[str, str]] = {}
    for table in tables.values():
        for col in table.columns:
            name, call, kind = column_function(col)
            functions.setdefault(name, (call, kind))
    table_functions = set(functions)
    for st in sizes:
        for name in st.functions:
            functions.setdefault(name, column_function(name)[1:])
    names = list(functions)
    fidx = {f: k for k, f in enumerate(names)}
    metrics = list(_RANK_TABLES.values())  # without a "Number of calls" table, calls stay NaN
    profile = np.full((ranks.size, len(names), len(metrics)), np.nan)
    for table in tables.values():
        cols = [fidx[column_function(c)[0]] for c in table.columns]
        target = profile[:, :, metrics.index(table.metric)]
        if np.array_equal(table.ranks, ranks) and cols == list(range(len(cols))):
            target[:, : len(cols)] = table.values
        else:
            target[np.ix_(pd.Index(ranks).get_indexer(table.ranks), cols)] = table.values
        missing_cols = table_functions - {column_function(c)[0] for c in table.columns}
        if missing_cols and table.metric != "time":
            warnings.append(f"line {table.line}: {table.metric} table lacks columns {sorted(missing_cols)[:5]}")
    mode = _infer_mode([functions[f][1] for f in names], meta.get("mode"), path)
    time_totals = np.nansum(profile[:, :, 0], axis=1)
    run = {"format": "mpinside", "mode": mode, **{k: v for k, v in meta.items() if k != "mode"}}
    nprocs = meta.get("nprocs")
    if nprocs is not None and float(nprocs) < ranks.size:
        raise PerfkitFormatError(path, None, f"run metadata says nprocs={nprocs} but the tables have "
                                             f"{ranks.size} ranks")
    if nprocs is not None and float(nprocs) > ranks.size:
        warnings.append(f"the tables have rows for {ranks.size} of nprocs={nprocs} ranks")
    run.setdefault("nprocs", ranks.size)
    if meta.get("elapsed") is None:
        run["elapsed"] = float(np.max(time_totals))
    traffic = _traffic(matrices, ranks, path, warnings)
    size_arr, bins = _sizes(sizes, ranks, fidx, path, warnings)
    return make_run(profile, ranks=ranks, functions=names, calls=[functions[f][0] for f in names],
                    kinds=[functions[f][1] for f in names], metrics=metrics, run=run, traffic=traffic,
                    sizes=size_arr, size_bins=bins, warnings=warnings, reader="perfkit.io.mpinside")


def _infer_mode(kinds: list[str], given: str | None, path: Path) -> str:
    """Profiling mode from the wait columns present; ``given`` (metadata) must not contradict them."""
    has_w = "wait_late_sender" in kinds
    has_b = "wait_collective" in kinds
    inferred = "slt+collective_wait" if has_w and has_b else "slt" if has_w else "collective_wait" if has_b else ""
    if not given:
        return inferred or "basic"
    if given in ("basic", "perfect") and inferred and given == "basic":
        raise PerfkitFormatError(path, None, f"metadata says mode 'basic' but the tables have wait columns "
                                             f"(mode {inferred!r})")
    if given in ("slt", "collective_wait", "slt+collective_wait") and inferred and \
            set(inferred.split("+")) - set(given.split("+")):
        # a mode may name a measurement that found nothing (no receive completed: no w_ column)
        raise PerfkitFormatError(path, None, f"metadata says mode {given!r}, the columns say {inferred!r}")
    return given


def _traffic(matrices: dict[str, tuple[np.ndarray, ...]], ranks: np.ndarray, path: Path,
             warnings: list[str]) -> np.ndarray | None:
    if not matrices:
        return None
    import sparse

    n = ranks.size
    index = pd.Index(ranks)  # rank -> position, without an array as long as the largest rank
    coords, data = [], []
    for name, (i, j, v, lines) in matrices.items():
        pi, pj = index.get_indexer(i), index.get_indexer(j)
        if np.any(pi < 0) or np.any(pj < 0):
            k = int(np.argmax((pi < 0) | (pj < 0)))
            raise PerfkitFormatError(path, int(lines[k]), f"matrix {name}(i,j): entry ({i[k]}, {j[k]}) names a rank "
                                                          "that is not in the tables")
        # TIME(i,j) is the time i spent receiving from j: sender j -> receiver i.
        sender, receiver = (pj, pi) if name == "TIME" else (pi, pj)
        q = TRAFFIC_QUANTITIES.index(_MATRIX_QUANTITY[name])
        coords.append(np.stack([sender, receiver, np.full(sender.size, q)]))
        data.append(v)
    absent = [q for q, n_ in _MATRIX_QUANTITY.items() if q not in matrices]
    arr = sparse.COO(np.concatenate(coords, axis=1), np.concatenate(data), shape=(n, n, len(TRAFFIC_QUANTITIES)),
                     fill_value=0.0)
    if n <= 4096:
        dense = arr.todense()
        for name in absent:
            dense[:, :, TRAFFIC_QUANTITIES.index(_MATRIX_QUANTITY[name])] = np.nan
        if absent:
            warnings.append(f"no {', '.join(absent)} matrix in the file: traffic "
                            f"{', '.join(_MATRIX_QUANTITY[a] for a in absent)} is NaN")
        return dense
    if absent:
        warnings.append(f"no {', '.join(absent)} matrix in the file: those traffic quantities read as 0 "
                        "in the sparse matrix")
    return arr


def _sizes(tables: list[SizeTable], ranks: np.ndarray, fidx: dict[str, int], path: Path,
           warnings: list[str]) -> tuple[np.ndarray | None, np.ndarray | None]:
    if not tables:
        return None, None
    bins = np.unique(np.concatenate([t.bins for t in tables]))
    rank_index = {int(r): k for k, r in enumerate(ranks)}
    out = np.full((ranks.size, len(fidx), bins.size, len(SIZE_STATS)), np.nan)
    seen: set[tuple[int, str]] = set()
    for t in tables:
        if t.rank not in rank_index:
            raise PerfkitFormatError(path, None, f"size distribution for rank {t.rank}, which is not in the tables")
        if (t.rank, t.stat) in seen:
            raise PerfkitFormatError(path, None, f"size distribution ({t.stat}) of rank {t.rank} appears twice")
        seen.add((t.rank, t.stat))
        b = np.searchsorted(bins, t.bins)
        f = [fidx[name] for name in t.functions]
        out[np.ix_([rank_index[t.rank]], f, b, [SIZE_STATS.index(t.stat)])] = t.values.T[None, :, :, None]
    covered = len({r for r, _ in seen})
    if covered < ranks.size:
        warnings.append(f"size distributions cover {covered} of {ranks.size} ranks; the rest are NaN")
    return out, bins
