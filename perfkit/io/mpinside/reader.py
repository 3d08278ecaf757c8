"""Reader for MPInside text output (per-rank tables, size histograms, transfer matrices).

The layout understood here is documented, with every assumption marked, in
``docs/formats/mpinside.md``. In short: a run is one text file of blocks, each opened by a
``>>>> Title <<<<`` line; a block's first line names its columns.

The file is read block by block (one block's bytes in memory at a time) and line numbers are
counted only when a message needs one.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from io import BytesIO
from os import PathLike
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pandas as pd
import xarray as xr

from perfkit.errors import PerfkitFormatError
from perfkit.io.mpinside.names import column_function
from perfkit.model import COLLECTIVE_BYTES, SIZE_STATS, TRAFFIC_QUANTITIES, dense_traffic, make_run
from perfkit.options import too_big

PLACEHOLDER = b"-----"
#: Ranks, and rank indices of matrices, are below this (MPI ranks are C ints).
MAX_RANK = 2**31
#: Bytes read at a time while looking for table headers.
CHUNK = 1 << 22
#: The comment lines before the first table are read up to this size [B] (100,000 ranks' host names
#: of 8 characters, listed one by one: 1.2 MB).
MAX_PREAMBLE = 1 << 26
#: Host names are at most this long [characters] (a DNS name's limit).
MAX_HOST_NAME = 255
#: Tables longer than this [B] are parsed with inferred column types (int64 columns parse faster).
_INFER_ABOVE = 1 << 20
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
_MATRIX = re.compile(r"^(?:.*\b)?(COLLECTIVE_SIZE|TIME|SIZE|REQUEST)\s*\(\s*i\s*,\s*j\s*\)", re.I)
_MATRIX_QUANTITY = {"SIZE": "bytes", "REQUEST": "count", "TIME": "time"}
#: perfkit's extension (``perfkit collect``): collective bytes per pair, the optional quantity ``collective_bytes``
_OPTIONAL_MATRIX = {"COLLECTIVE_SIZE": COLLECTIVE_BYTES}
_TEXT_BYTES = bytes(range(32, 127)) + b" \t\r\n\v\f"
_COLUMN = re.compile(r"^\w+$", re.ASCII)


def line_at(path: Path, offset: int) -> int:
    """1-based number of the file line holding byte ``offset`` (reads the file up to it; messages only)."""
    count = 0
    with open(path, "rb") as fh:
        while offset > 0:
            chunk = fh.read(min(CHUNK, offset))
            if not chunk:
                break
            count += chunk.count(b"\n")
            offset -= len(chunk)
    return count + 1


@dataclass
class Lines:
    """The file lines from byte ``offset`` (a line start) on, numbered only when a message needs it."""

    path: Path
    offset: int

    @cached_property
    def first(self) -> int:
        return line_at(self.path, self.offset)

    def __call__(self, k: int = 0) -> int:
        """File line number of the ``k``-th line after ``offset`` (0: the line at ``offset``)."""
        return self.first + k


@dataclass
class Block:
    """One ``>>>> title <<<<`` block of an open file: its title and the file offsets of its header and body."""

    title: str
    path: Path
    fh: BinaryIO
    header_offset: int
    body_offset: int
    end: int | None  # offset of the next header line (None: the end of the file)

    @property
    def line(self) -> int:
        """File line number of the header line (counted when asked)."""
        return line_at(self.path, self.header_offset)

    def read(self, start: int) -> bytes:
        """The block's bytes from file offset ``start`` to its end."""
        self.fh.seek(start)
        return self.fh.read(self.end - start if self.end is not None else -1)


def sniff(path: Path, head: bytes) -> bool:
    """True if ``head`` holds an MPInside table header, or is comments with a ``# perfkit-run:`` line (that can
    be long) and the first table header after them is MPInside's."""
    if _SNIFF.search(head):
        return True
    if not _RUN_PREFIX.search(head):
        return False
    with open(path, "rb") as fh:
        fh.seek(len(head))
        try:
            start, _ = _first_table(path, fh, head)
        except PerfkitFormatError:
            return False
        fh.seek(start)
        return bool(_SNIFF.match(fh.readline(65536)))


def header_title(line: bytes) -> str | None:
    """The title of a ``>>>> title <<<<`` line (spaces or tabs around, one trailing CR), else None.

    Plain byte operations, linear in the line's length whatever it holds.
    """
    text = line[:-1] if line.endswith(b"\r") else line
    text = text.strip(b" \t")
    if not (text.startswith(b">>>") and text.endswith(b"<<<")):
        return None
    return text.lstrip(b">").rstrip(b"<").strip(b" \t").decode("ascii", "replace").strip()


def iter_blocks(path: Path, fh: BinaryIO, start: int) -> Iterator[Block]:
    """The blocks of an open file from byte ``start`` (its first header line) on, one at a time."""
    headers = _find_headers(fh, start)
    for k, (line_start, body_start, title) in enumerate(headers):
        end = headers[k + 1][0] if k + 1 < len(headers) else None
        yield Block(title, path, fh, line_start, body_start, end)


def _find_headers(fh: BinaryIO, start: int) -> list[tuple[int, int, str]]:
    """(offset of the line, offset after it, title) of every header line from ``start`` on.

    Reads ``CHUNK`` bytes at a time into one reused buffer (grown only for a longer line).
    """
    found: list[tuple[int, int, str]] = []
    buf = bytearray(max(1, min(CHUNK, os.fstat(fh.fileno()).st_size - start)))
    base, filled, pos = start, 0, 0  # file offset of buf[0]; bytes held; where the search resumes
    fh.seek(start)
    while True:
        if filled == len(buf):
            buf.extend(bytes(len(buf)))
        with memoryview(buf) as view:
            got = fh.readinto(view[filled:])
        filled += got
        final = got == 0
        limit = filled if final else buf.rfind(b"\n", 0, filled) + 1  # complete lines only, until the end
        while (hit := buf.find(b">>>", pos, limit)) >= 0:
            line_start = buf.rfind(b"\n", 0, hit) + 1
            line_end = buf.find(b"\n", hit, limit)
            line_end = limit if line_end < 0 else line_end
            title = header_title(bytes(buf[line_start:line_end])) if not buf[line_start:hit].strip(b" \t") else None
            if title is not None:
                found.append((base + line_start, base + line_end + 1, title))
            pos = line_end + 1
        if final:
            return found
        pos = max(pos, limit)
        if pos:  # keep the incomplete last line at the front of the buffer
            buf[: filled - pos] = buf[pos:filled]
            base, filled, pos = base + pos, filled - pos, 0


def _first_table(path: Path, fh: BinaryIO, head: bytes) -> tuple[int, bytes]:
    """Offset of the first table header and the bytes before it; ``head`` is the file's start.

    The lines before it must be blank or ``#`` comments; they are read on from ``fh`` (a ``# perfkit-run:``
    line naming every rank's host can be long), at most ``MAX_PREAMBLE`` bytes. Fails at the first line
    that is neither.
    """
    data, pos, number, final = bytearray(head), 0, 1, False
    while True:
        while (nl := data.find(b"\n", pos)) >= 0 or (final and pos < len(data)):
            end = len(data) if nl < 0 else nl
            raw = bytes(data[pos:min(end, pos + 65536)])
            if header_title(raw) is not None:
                return pos, bytes(data[:pos])
            _check_comment(path, raw, number)
            pos, number = end + 1, number + 1
        if final:
            raise PerfkitFormatError(path, None, "no '>>>> title <<<<' table header found")
        partial = bytes(data[pos:pos + 65536]).lstrip()
        if not partial.startswith(b">"):  # a header's start is checked when its line is complete
            _check_comment(path, partial, number)
        if len(data) >= MAX_PREAMBLE:
            raise PerfkitFormatError(path, number, f"more than {MAX_PREAMBLE} bytes of comments before the first "
                                                   "'>>>> title <<<<' table header")
        more = fh.read(min(len(data), MAX_PREAMBLE - len(data)))
        final = not more
        data += more


def _check_comment(path: Path, raw: bytes, number: int) -> None:
    """Fail unless line ``number`` (``raw``) before the first table is blank or a ``#`` comment."""
    text = raw.strip()
    if text and not text.startswith(b"#"):
        what = "binary data" if not _is_text(text[:4096]) else repr(text[:40].decode("latin-1"))
        raise PerfkitFormatError(path, number, f"expected a '>>>> title <<<<' table header, found {what}")


def _is_text(raw: bytes) -> bool:
    return not raw.translate(None, _TEXT_BYTES)


def _split_header(block: Block, path: Path) -> tuple[list[str], bytes, Lines]:
    """Column names (the first non-blank line), the rows' bytes and the file lines from the first row on."""
    pos = block.body_offset
    block.fh.seek(pos)
    while block.end is None or pos < block.end:
        line = block.fh.readline() if block.end is None else block.fh.readline(block.end - pos)
        if line.strip() or not line.endswith(b"\n"):
            break
        pos += len(line)
    else:
        line = b""
    columns = line.decode("ascii", "replace").split()
    if not columns:
        raise PerfkitFormatError(path, line_at(path, pos), f"table '{block.title}' has no column header line")
    pos += len(line)
    return columns, block.read(pos), Lines(path, pos)


def parse_numbers(raw: bytes, ncols: int, lines: Lines, what: str) -> np.ndarray:
    """Parse a whitespace table of ``ncols`` numbers per line (``-----`` -> NaN) strictly.

    A fast pass (single-space separators, column types inferred) is kept only when it provably
    read what the strict pass would: ``ncols`` numeric columns and no NaN but the placeholders.
    """
    if not raw or raw.isspace():
        raise PerfkitFormatError(lines.path, lines(), f"{what}: expected rows of {ncols} columns, found none")
    values = _fast_numbers(raw, ncols)
    if values is None:
        values = _strict_numbers(raw, ncols, lines, what)
    _check_values(values, raw, lines, what)
    return values


def _fast_numbers(raw: bytes, ncols: int) -> np.ndarray | None:
    """The table read with ``sep=" "`` (pandas' quickest path), or None when that is not exact."""
    # inferred column types parse faster; float64 throughout builds small frames faster
    dtype = None if len(raw) > _INFER_ABOVE else np.float64
    try:
        frame = pd.read_csv(BytesIO(raw), sep=" ", header=None, engine="c", dtype=dtype,
                            na_values=[PLACEHOLDER.decode()], keep_default_na=False)
    except (ValueError, OverflowError):
        return None
    if frame.shape[1] != ncols or any(dtype.kind not in "iuf" for dtype in frame.dtypes):
        return None  # a doubled, leading or trailing space, a tab, text: the strict pass decides
    values = frame.to_numpy(dtype=np.float64)
    return values if _nan_are_placeholders(values, raw) else None


def _nan_are_placeholders(values: np.ndarray, raw: bytes) -> bool:
    """No NaN but from ``-----``: pandas pads a short row with NaN, which always reaches its last column."""
    nan = np.isnan(values)
    count = np.count_nonzero(nan)
    if not count:
        return True
    if not nan[:, -1].any() and b"n" not in raw and b"N" not in raw:
        return True
    return count == raw.count(PLACEHOLDER)


def _strict_numbers(raw: bytes, ncols: int, lines: Lines, what: str) -> np.ndarray:
    """pandas with any whitespace as separator and float64 columns; on failure, the line that broke it."""
    try:
        values = pd.read_csv(BytesIO(raw), sep=r"\s+", header=None, engine="c", dtype=np.float64,
                             na_values=[PLACEHOLDER.decode()], keep_default_na=False).to_numpy()
    except ValueError:  # binary data, a row with a different field count, or text where a number belongs
        values = None
    if values is None or values.shape[1] != ncols or not _nan_are_placeholders(values, raw):
        _raise_on_bad_row(raw, ncols, lines, what)
    return values


def _check_values(values: np.ndarray, raw: bytes, lines: Lines, what: str) -> None:
    """No table holds a negative or infinite number (times, bytes, calls, ranks, sizes): the line is named."""
    bad = np.isinf(values) | (values < 0)
    if not bad.any():
        return
    row = int(np.argmax(bad.any(axis=1)))
    col = int(np.argmax(bad[row]))
    why = "is negative" if values[row, col] < 0 else "is infinite (or beyond the float range)"
    raise PerfkitFormatError(lines.path, lines(_row_line(raw, row)),
                             f"{what}: column {col + 1} holds {values[row, col]!r}, which {why}; MPInside "
                             "measures no negative or infinite time, byte count or call count")


def _row_line(raw: bytes, row: int) -> int:
    """Line of ``raw`` (0-based) holding its ``row``-th non-blank line (error path only)."""
    seen = -1
    for number, text in enumerate(raw.splitlines()):
        seen += bool(text.strip())
        if seen == row:
            return number
    return row


def _raise_on_bad_row(raw: bytes, ncols: int, lines: Lines, what: str) -> None:
    """Raise at the first line that is binary, has a field count other than ``ncols`` or a non-number."""
    if raw.translate(None, _TEXT_BYTES):
        row = next(k for k, line in enumerate(raw.splitlines()) if not _is_text(line))
        raise PerfkitFormatError(lines.path, lines(row), f"{what}: binary data where numbers were expected")
    rows = raw.splitlines()
    for row, line in enumerate(rows):
        count = len(line.split())
        if count not in (0, ncols):
            truncated = " (truncated table?)" if row == len(rows) - 1 else ""
            raise PerfkitFormatError(lines.path, lines(row),
                                     f"{what}: expected {ncols} columns as in its header, found {count}{truncated}")
    row, token = _first_bad_token(rows)
    raise PerfkitFormatError(lines.path, lines(row), f"{what}: expected a number or '-----', found {token!r}")


def _first_bad_token(rows: list[bytes]) -> tuple[int, str]:
    for row, line in enumerate(rows):
        for token in line.split():
            if token == PLACEHOLDER:
                continue
            try:
                if float(token) != float(token):  # nan, NaN: a token MPInside does not write
                    return row, token.decode("latin-1")
            except ValueError:
                return row, token.decode("latin-1")
    return 0, "?"


def _rank_column(values: np.ndarray, lines: Lines, raw: bytes, what: str) -> np.ndarray:
    bad = np.flatnonzero(~np.isfinite(values) | (values < 0) | (values != np.round(values)) | (values >= MAX_RANK))
    if bad.size:
        raise PerfkitFormatError(lines.path, lines(_row_line(raw, int(bad[0]))),
                                 f"{what}: CPU must be a rank number in 0..{MAX_RANK - 1}")
    ranks = values.astype(np.int64)
    if ranks.size < 2 or np.all(ranks[1:] > ranks[:-1]):  # the usual case: increasing ranks
        return ranks
    uniq, counts = np.unique(ranks, return_counts=True)
    if np.any(counts > 1):
        dup = int(uniq[counts > 1][0])
        second = int(np.flatnonzero(ranks == dup)[1])
        raise PerfkitFormatError(lines.path, lines(_row_line(raw, second)), f"{what}: rank {dup} appears twice")
    return ranks


def _check_columns(columns: list[str], lines: Lines, title: str) -> None:
    """Column names are function names: letters, digits and '_' (no control bytes or punctuation)."""
    odd = next((c for c in columns if not _COLUMN.match(c)), None)
    if odd is not None:
        raise PerfkitFormatError(lines.path, lines(-1), f"table '{title}': column name {odd!r} is not a function "
                                                        "name (letters, digits, '_')")


@dataclass
class RankTable:
    """A per-rank table: its metric, columns (file spelling), ranks and values."""

    metric: str
    columns: list[str]
    ranks: np.ndarray
    values: np.ndarray
    block: Block

    @property
    def line(self) -> int:
        """File line number of the table's header line."""
        return self.block.line


def _read_rank_table(block: Block, metric: str, path: Path) -> RankTable:
    columns, rest, lines = _split_header(block, path)
    if columns[0].upper() != "CPU":
        raise PerfkitFormatError(path, lines(-1), f"table '{block.title}': expected first column 'CPU', "
                                                  f"found {columns[0]!r}")
    _check_columns(columns, lines, block.title)
    dups = {c for c in columns if columns.count(c) > 1}
    if dups:
        raise PerfkitFormatError(path, lines(-1), f"table '{block.title}': duplicated columns {sorted(dups)}")
    values = parse_numbers(rest, len(columns), lines, f"table '{block.title}'")
    ranks = _rank_column(values[:, 0], lines, rest, f"table '{block.title}'")
    return RankTable(metric, columns[1:], ranks, values[:, 1:], block)


@dataclass
class SizeTable:
    """One rank's message-size histogram (count or time) per function."""

    rank: int
    stat: str
    functions: list[str]
    bins: np.ndarray
    values: np.ndarray


def _read_size_table(block: Block, match: re.Match[str], path: Path) -> SizeTable:
    columns, rest, lines = _split_header(block, path)
    if columns[0].lower() not in ("sizes", "size"):
        raise PerfkitFormatError(path, lines(-1), f"table '{block.title}': expected first column 'Sizes', "
                                                  f"found {columns[0]!r}")
    _check_columns(columns, lines, block.title)
    values = parse_numbers(rest, len(columns), lines, f"table '{block.title}'")
    bins = values[:, 0]
    if np.unique(bins).size != bins.size:
        raise PerfkitFormatError(path, lines(), f"table '{block.title}': a size bin appears twice")
    stat = "time" if match.group(3) else "count"
    return SizeTable(int(match.group(1)), stat, [column_function(c)[0] for c in columns[1:]], bins, values[:, 1:])


@dataclass
class Entries:
    """The non-zero entries of a TIME/SIZE/REQUEST(i,j) matrix: ranks i, j, values, and where they are."""

    i: np.ndarray
    j: np.ndarray
    values: np.ndarray
    lines: Lines
    rows: np.ndarray | None  # table row of each entry (None: entry k is row k)

    def line(self, k: int) -> int:
        """File line of entry ``k``."""
        return self.lines(int(self.rows[k]) if self.rows is not None else k)


def _read_matrix(block: Block, path: Path) -> tuple[str, Entries]:
    """The quantity (TIME, SIZE, REQUEST) and the entries of a matrix block."""
    name = _MATRIX.match(block.title).group(1).upper()
    columns, rest, lines = _split_header(block, path)
    what = f"matrix '{block.title}'"
    if [c.lower() for c in columns] == ["i", "j", "value"]:
        if not rest or rest.isspace():
            empty = np.zeros(0, dtype=np.int64)
            return name, Entries(empty, empty, np.zeros(0), lines, None)
        values = parse_numbers(rest, 3, lines, what)
        i = _index_column(values[:, 0], lines, 0, what)
        j = _index_column(values[:, 1], lines, 0, what)
        return name, Entries(i, j, values[:, 2], lines, None)
    if columns[0].upper() != "CPU":
        raise PerfkitFormatError(path, lines(-1), f"{what}: expected a 'CPU 0 1 ...' or 'i j value' header")
    cols = np.asarray(_index_column(np.asarray(columns[1:], dtype=object), lines, -1, what))
    values = parse_numbers(rest, len(columns), lines, what)
    rows = _rank_column(values[:, 0], lines, rest, what)
    ii, jj = np.nonzero(values[:, 1:])
    return name, Entries(rows[ii], cols[jj], values[:, 1:][ii, jj], lines, ii)


def _index_column(values: np.ndarray, lines: Lines, k: int, what: str) -> np.ndarray:
    """Rank indices as int64; a bad one is reported on line ``lines(k)``."""
    try:
        as_float = np.asarray(values, dtype=np.float64)
    except ValueError:
        raise PerfkitFormatError(lines.path, lines(k), f"{what}: rank indices must be integers") from None
    if np.any(~np.isfinite(as_float) | (as_float < 0) | (as_float != np.round(as_float)) | (as_float >= MAX_RANK)):
        raise PerfkitFormatError(lines.path, lines(k), f"{what}: rank indices must be integers in 0..{MAX_RANK - 1}")
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
        start, preamble = _first_table(path, fh, head)  # fail on junk before reading it all
        refusal = too_big(2.0 * path.stat().st_size, "holding this MPInside file and its tables")
        if refusal:
            raise PerfkitFormatError(path, None, refusal)
        meta = _preamble_metadata(path, preamble)
        hosts = meta.pop("hosts", None)
        return _assemble(path, iter_blocks(path, fh, start), {**meta, **run_metadata}, hosts)


_RUN_PREFIX = re.compile(rb"^[ \t]*#[ \t]*perfkit-run:", re.M)


@dataclass
class HostRuns:
    """The ranks' host names as a ``# perfkit-run:`` line states them: ``counts[k]`` consecutive ranks
    on ``names[k]``, on file line ``line``."""

    names: list[str]
    counts: list[int]
    line: int

    def expand(self, path: Path, nranks: int) -> np.ndarray:
        """One host name per rank (fixed-width unicode); an error unless the runs cover ``nranks`` ranks."""
        total = sum(self.counts)
        if total != nranks:
            raise PerfkitFormatError(path, self.line, f"'# perfkit-run:' hosts name {total} ranks, expected one "
                                                      f"per rank of the tables ({nranks})")
        return np.repeat(np.asarray(self.names, dtype=str), self.counts)


def _preamble_metadata(path: Path, preamble: bytes) -> dict[str, Any]:
    """Run metadata from a ``# perfkit-run: {json}`` comment before the first table (``perfkit collect`` writes one);
    its ``hosts`` entry as ``HostRuns``."""
    match = _RUN_PREFIX.search(preamble)
    if match is None:
        return {}
    line = preamble.count(b"\n", 0, match.start()) + 1
    end = preamble.find(b"\n", match.end())
    try:
        meta = json.loads(preamble[match.end():None if end < 0 else end].strip(b" \t\r"))
    except ValueError as exc:
        raise PerfkitFormatError(path, line, f"'# perfkit-run:' must be followed by a JSON object ({exc})") from exc
    if not isinstance(meta, dict):
        raise PerfkitFormatError(path, line, "'# perfkit-run:' must be followed by a JSON object")
    if "hosts" in meta:
        meta["hosts"] = _host_runs(path, line, meta["hosts"])
    return meta


def _host_runs(path: Path, line: int, entry: Any) -> HostRuns:
    """``entry`` (a list of host names, one rank each, and ``[host, count]`` pairs) checked, as ``HostRuns``."""
    expected = (f"'# perfkit-run:' hosts: expected a list of host names (at most {MAX_HOST_NAME} printable "
                f"characters) and [host, count] pairs (count at least 1), in rank order")
    if not isinstance(entry, list):
        raise PerfkitFormatError(path, line, f"{expected}; found {_short(entry)}")
    names, counts, total = [], [], 0
    for k, item in enumerate(entry):
        name, count = (item, 1) if isinstance(item, str) else item if isinstance(item, list) and len(item) == 2 \
            else (None, None)
        if not (isinstance(name, str) and len(name) <= MAX_HOST_NAME and name.isprintable()
                and type(count) is int and count >= 1):
            raise PerfkitFormatError(path, line, f"{expected}; item {k} is {_short(item)}")
        total += count
        if total > MAX_RANK:
            raise PerfkitFormatError(path, line, f"'# perfkit-run:' hosts name more than {MAX_RANK} ranks")
        names.append(name)
        counts.append(count)
    return HostRuns(names, counts, line)


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _assemble(path: Path, blocks: Iterator[Block], meta: dict[str, Any], hosts: HostRuns | None) -> xr.Dataset:
    tables: dict[str, RankTable] = {}
    sizes: list[SizeTable] = []
    matrices: dict[str, Entries] = {}
    warnings: list[str] = []
    last_is_size = False
    for block in blocks:
        title = " ".join(block.title.lower().split())
        last_is_size = False
        key = next((m for t, m in _RANK_TABLES.items() if title.startswith(t)), None)
        if key is not None:
            if key in tables:
                raise PerfkitFormatError(path, block.line, f"table '{block.title}' appears twice "
                                                           f"(first on line {tables[key].line})")
            tables[key] = _read_rank_table(block, key, path)
        elif match := _SIZES.match(title):
            sizes.append(_read_size_table(block, match, path))
            last_is_size = True
        elif _MATRIX.match(block.title):
            name, entries = _read_matrix(block, path)
            if name in matrices:
                raise PerfkitFormatError(path, block.line, f"matrix {name}(i,j) appears twice")
            matrices[name] = entries
        else:
            warnings.append(f"line {block.line}: skipped unknown block '{block.title}'")
    if "time" not in tables:
        raise PerfkitFormatError(path, None, "no '>>>> Communication time totals (s) <<<<' table found")
    if last_is_size:
        _check_not_cut(path, sizes, tables["time"].ranks)
    return _build(path, tables, sizes, matrices, warnings, meta, hosts)


def _check_not_cut(path: Path, sizes: list[SizeTable], ranks: np.ndarray) -> None:
    """Refuse a file that ends inside its per-rank size distributions: MPInside writes them rank by rank
    before its matrices, so a file ending after those of its first ranks (two or more, in order), with
    ranks left or the last rank lacking a statistic the others have, was cut."""
    order = list(dict.fromkeys(t.rank for t in sizes))
    stats = {(t.rank, t.stat) for t in sizes}
    kinds = {stat for _, stat in stats}
    if len(order) < 2 or order != ranks[: len(order)].tolist():
        return
    if len(order) == ranks.size and len(stats) == len(order) * len(kinds):
        return
    line = line_at(path, max(path.stat().st_size - 1, 0))
    raise PerfkitFormatError(path, line, f"truncated at line {line}: the file ends inside the size distributions "
                                         f"(after rank {order[-1]}'s; {len(order)} of {ranks.size} ranks have "
                                         "one)")


def _build(path: Path, tables: dict[str, RankTable], sizes: list[SizeTable],
           matrices: dict[str, Entries], warnings: list[str],
           meta: dict[str, Any], hosts: HostRuns | None) -> xr.Dataset:
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
    # filled metric by metric, each table let go once copied: the tables and the profile are not both held
    slabs = np.empty((len(metrics), ranks.size, len(names)))
    for target, metric in zip(slabs, metrics):
        table = tables.get(metric)
        if table is None:
            target.fill(np.nan)
            continue
        cols = [fidx[column_function(c)[0]] for c in table.columns]
        if np.array_equal(table.ranks, ranks) and cols == list(range(len(cols))):
            target[:, : len(cols)] = table.values
            target[:, len(cols):] = np.nan
        else:
            target.fill(np.nan)
            target[np.ix_(pd.Index(ranks).get_indexer(table.ranks), cols)] = table.values
        table.values = np.empty((0, len(cols)))
        missing_cols = table_functions - {column_function(c)[0] for c in table.columns}
        if missing_cols and metric != "time":
            warnings.append(f"line {table.line}: {metric} table lacks columns {sorted(missing_cols)[:5]}")
    profile = slabs.transpose(1, 2, 0)
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
                    sizes=size_arr, size_bins=bins, warnings=warnings, reader="perfkit.io.mpinside",
                    hosts=None if hosts is None else hosts.expand(path, ranks.size))


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


def _traffic(matrices: dict[str, Entries], ranks: np.ndarray, path: Path, warnings: list[str]) -> Any:
    """(sender, receiver, quantity) traffic, numpy or ``sparse.COO`` as ``perfkit.model.dense_traffic`` rules."""
    if not matrices:
        return None
    import sparse

    n = ranks.size
    index = pd.Index(ranks)  # rank -> position, without an array as long as the largest rank
    quantity_of = {**_MATRIX_QUANTITY, **_OPTIONAL_MATRIX}
    quantities = [*TRAFFIC_QUANTITIES, *(quantity_of[m] for m in _OPTIONAL_MATRIX if m in matrices)]
    coords, data = [], []
    for name, entries in matrices.items():
        i, j, v = entries.i, entries.j, entries.values
        pi, pj = index.get_indexer(i), index.get_indexer(j)
        if np.any(pi < 0) or np.any(pj < 0):
            k = int(np.argmax((pi < 0) | (pj < 0)))
            raise PerfkitFormatError(path, entries.line(k), f"matrix {name}(i,j): entry ({i[k]}, {j[k]}) names a "
                                                            "rank that is not in the tables")
        # TIME(i,j) is the time i spent receiving from j: sender j -> receiver i.
        sender, receiver = (pj, pi) if name == "TIME" else (pi, pj)
        q = quantities.index(quantity_of[name])
        coords.append(np.stack([sender, receiver, np.full(sender.size, q)]))
        data.append(v)
    absent = [q for q, n_ in _MATRIX_QUANTITY.items() if q not in matrices]
    arr = sparse.COO(np.concatenate(coords, axis=1), np.concatenate(data), shape=(n, n, len(quantities)),
                     fill_value=0.0)
    if dense_traffic(n, arr.nnz):
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
