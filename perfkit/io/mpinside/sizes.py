"""MPInside's per-rank message-size tables (``Rank N Sizes distribution``, ``Rank N Size distribution times``).

A file holds two such tables per rank, one after the other. Consecutive tables are read together, up
to ``BATCH`` bytes at a time: the rows of every table with the same column line are joined and parsed
in one ``parse_numbers`` call, then split by each table's count of non-blank lines. When anything in a
batch is not as it should be, its tables are read again one by one (``read_table``), which raises the
error naming the table's file line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from perfkit.errors import PerfkitFormatError
from perfkit.io.mpinside.names import column_function
from perfkit.io.mpinside.tables import MAX_RANK, Block, Lines, check_columns, line_at, parse_numbers, split_header
from perfkit.model import SIZE_STATS

#: Bytes of consecutive size tables read and parsed together.
BATCH = 1 << 23
_BLANK = np.zeros(256, dtype=bool)
_BLANK[list(b" \t\n\r\v\f")] = True


@dataclass
class Part:
    """Rows of size tables sharing their columns: the table of each row, its size bin and its values."""

    functions: list[str]
    table: np.ndarray  # index of the row's table in ``SizeTables`` (file order)
    bins: np.ndarray
    values: np.ndarray  # rows x functions


@dataclass
class SizeTables:
    """Every size table of a file, in file order: each one's rank and statistic, their rows in parts."""

    rank: list[int] = field(default_factory=list)
    stat: list[int] = field(default_factory=list)  # index in ``SIZE_STATS``
    parts: list[Part] = field(default_factory=list)

    def ranks(self) -> np.ndarray:
        """The tables' ranks as int64 (a rank beyond any MPI rank as ``MAX_RANK``)."""
        return np.fromiter((min(r, MAX_RANK) for r in self.rank), dtype=np.int64, count=len(self.rank))

    def read(self, path: Path, blocks: list[tuple[Block, re.Match[str]]]) -> None:
        """Add consecutive size tables (blocks and their title matches), ``BATCH`` bytes at a time."""
        start = 0
        for k, (block, _) in enumerate(blocks):
            if block.end is None or block.end - blocks[start][0].header_offset >= BATCH or k == len(blocks) - 1:
                self._read_batch(path, blocks[start:k + 1])
                start = k + 1

    def _read_batch(self, path: Path, blocks: list[tuple[Block, re.Match[str]]]) -> None:
        first, last = blocks[0][0], blocks[-1][0]
        first.fh.seek(first.header_offset)
        data = first.fh.read(last.end - first.header_offset if last.end is not None else -1)
        parts = _parse_batch(path, data, first.header_offset, blocks, len(self.rank))
        if parts is None:  # one by one: the table at fault raises, naming its line
            parts = []
            for block, match in blocks:
                table = read_table(block, match, path)
                parts.append(Part(table.functions, np.full(table.bins.size, len(self.rank) + len(parts)),
                                  table.bins, table.values))
        self.rank.extend(int(match.group(1)) for _, match in blocks)
        self.stat.extend(SIZE_STATS.index(_stat(match)) for _, match in blocks)
        self.parts.extend(parts)


def _stat(match: re.Match[str]) -> str:
    return "time" if match.group(3) else "count"


def _parse_batch(path: Path, data: bytes, base: int, blocks: list[tuple[Block, re.Match[str]]],
                 first: int) -> list[Part] | None:
    """The parts of the size tables in ``data`` (``path``'s bytes from offset ``base``), tables numbered from
    ``first``; None when a table is not exactly as expected."""
    groups: dict[bytes, list[tuple[int, memoryview]]] = {}
    view = memoryview(data)
    for k, (block, _) in enumerate(blocks):
        pos, end = block.body_offset - base, len(data) if block.end is None else block.end - base
        while pos < end:  # the column line: the first non-blank one, as ``split_header`` finds it
            nl = data.find(b"\n", pos, end)
            stop = end if nl < 0 else nl + 1
            if data[pos:stop].strip() or nl < 0:
                break
            pos = stop
        else:
            return None
        groups.setdefault(data[pos:stop], []).append((first + k, view[stop:end]))
    parts = []
    for line, tables in groups.items():
        part = _parse_group(path, line, tables)
        if part is None:
            return None
        parts.append(part)
    return parts


def _parse_group(path: Path, line: bytes, tables: list[tuple[int, memoryview]]) -> Part | None:
    """The rows of ``tables`` (table index, rows' bytes) under one column ``line``, parsed together."""
    columns = line.decode("ascii", "replace").split()
    if not columns or columns[0].lower() not in ("sizes", "size"):
        return None
    raw = b"".join(rows for _, rows in tables)
    lines = Lines(path, 0)  # messages are not kept: the tables are read again one by one
    try:
        check_columns(columns, lines, "")
        values = parse_numbers(raw, len(columns), lines, "")
    except PerfkitFormatError:
        return None
    counts = _rows_per_table(raw, np.cumsum([0] + [len(rows) for _, rows in tables[:-1]]), len(tables))
    if counts.sum() != len(values) or not counts.all():
        return None
    table = np.repeat(np.array([k for k, _ in tables]), counts)
    bins = values[:, 0]
    order = np.lexsort((bins, table))
    if np.isnan(bins).any() or np.any((np.diff(table[order]) == 0) & (np.diff(bins[order]) == 0)):
        return None  # a bin twice in a table
    return Part([column_function(c)[0] for c in columns[1:]], table, bins, values[:, 1:])


def _rows_per_table(raw: bytes, starts: np.ndarray, n: int) -> np.ndarray:
    """Non-blank lines of ``raw`` in each of its ``n`` pieces, which begin at byte offsets ``starts``."""
    arr = np.frombuffer(raw, dtype=np.uint8)
    if not arr.size:
        return np.zeros(n, dtype=np.int64)
    line_starts = np.r_[0, np.flatnonzero(arr == 10) + 1]
    line_starts = line_starts[line_starts < arr.size]
    filled = np.logical_or.reduceat(~_BLANK[arr], line_starts)
    piece = np.searchsorted(starts, line_starts[filled], side="right") - 1
    return np.bincount(piece, minlength=n)


@dataclass
class SizeTable:
    """One rank's message-size histogram (count or time) per function."""

    rank: int
    stat: str
    functions: list[str]
    bins: np.ndarray
    values: np.ndarray


def read_table(block: Block, match: re.Match[str], path: Path) -> SizeTable:
    """One size table read on its own, every check naming its file line."""
    columns, rest, lines = split_header(block, path)
    if columns[0].lower() not in ("sizes", "size"):
        raise PerfkitFormatError(path, lines(-1), f"table '{block.title}': expected first column 'Sizes', "
                                                  f"found {columns[0]!r}")
    check_columns(columns, lines, block.title)
    values = parse_numbers(rest, len(columns), lines, f"table '{block.title}'")
    bins = values[:, 0]
    if np.unique(bins).size != bins.size:
        raise PerfkitFormatError(path, lines(), f"table '{block.title}': a size bin appears twice")
    return SizeTable(int(match.group(1)), _stat(match), [column_function(c)[0] for c in columns[1:]], bins,
                     values[:, 1:])


def check_not_cut(path: Path, tables: SizeTables, ranks: np.ndarray) -> None:
    """Refuse a file that ends inside its per-rank size distributions: MPInside writes them rank by rank
    before its matrices, so a file ending after those of its first ranks (two or more, in order), with
    ranks left or the last rank lacking a statistic the others have, was cut."""
    rank, stat = tables.ranks(), np.asarray(tables.stat)
    order = pd.unique(rank)
    if order.size < 2 or not np.array_equal(order, ranks[: order.size]):
        return
    pairs = np.unique(rank * len(SIZE_STATS) + stat).size
    if order.size == ranks.size and pairs == order.size * np.unique(stat).size:
        return
    line = line_at(path, max(path.stat().st_size - 1, 0))
    raise PerfkitFormatError(path, line, f"truncated at line {line}: the file ends inside the size distributions "
                                         f"(after rank {order[-1]}'s; {order.size} of {ranks.size} ranks have "
                                         "one)")


def size_array(tables: SizeTables, ranks: np.ndarray, fidx: dict[str, int], path: Path,
               warnings: list[str]) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(rank, function, size_bin, stat) histograms of ``tables`` (NaN where none) and the size bins [B]."""
    if not tables.rank:
        return None, None
    bins = np.unique(np.concatenate([p.bins for p in tables.parts]))
    rank, stat = tables.ranks(), np.asarray(tables.stat)
    where = pd.Index(ranks).get_indexer(rank)
    bad = (where < 0) | pd.Index(rank * len(SIZE_STATS) + stat).duplicated()
    if bad.any():
        t = int(np.argmax(bad))
        if where[t] < 0:
            raise PerfkitFormatError(path, None, f"size distribution for rank {tables.rank[t]}, which is not in "
                                                 "the tables")
        raise PerfkitFormatError(path, None, f"size distribution ({SIZE_STATS[stat[t]]}) of rank {tables.rank[t]} "
                                             "appears twice")
    out = np.full((ranks.size, len(fidx), bins.size, len(SIZE_STATS)), np.nan)
    for part in tables.parts:
        f = np.array([fidx[name] for name in part.functions], dtype=np.int64)
        b = np.searchsorted(bins, part.bins)
        out[where[part.table][:, None], f[None, :], b[:, None], stat[part.table][:, None]] = part.values
    covered = np.unique(rank).size
    if covered < ranks.size:
        warnings.append(f"size distributions cover {covered} of {ranks.size} ranks; the rest are NaN")
    return out, bins
