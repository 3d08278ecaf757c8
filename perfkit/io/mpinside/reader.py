"""Reader for MPInside text output (per-rank tables, size histograms, transfer matrices).

The layout understood here is documented, with every assumption marked, in
``docs/formats/mpinside.md``. In short: a run is one text file of blocks, each opened by a
``>>>> Title <<<<`` line; a block's first line names its columns.

The file is read block by block (one block's bytes in memory at a time) and line numbers are
counted only when a message needs one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pandas as pd
import xarray as xr

from perfkit.errors import PerfkitFormatError
from perfkit.io.mpinside.cpu import is_rank_cpu, read_rank_cpu
from perfkit.io.mpinside.names import column_function
from perfkit.io.mpinside.sizes import SizeTables, check_not_cut, size_array
from perfkit.io.mpinside.tables import (
    MAX_RANK,
    Block,
    Lines,
    check_columns,
    header_title,
    is_text,
    iter_blocks,
    parse_numbers,
    rank_column,
    split_header,
)
from perfkit.model import (
    COLLECTIVE_BYTES,
    CPU_TIME,
    METRICS,
    TRAFFIC_QUANTITIES,
    dense_traffic,
    flat_coo,
    make_run,
    summed_entries,
)
from perfkit.options import too_big

#: The comment lines before the first table are read up to this size [B] (100,000 ranks' host names
#: of 8 characters, listed one by one: 1.2 MB).
MAX_PREAMBLE = 1 << 26
#: Host names are at most this long [characters] (a DNS name's limit).
MAX_HOST_NAME = 255
_SNIFF = re.compile(rb"(?m)^[ \t]*>{3,}[ \t]*(Communication\s+time\s+totals|Bytes\s+sent|Calls\s+sending\s+data|"
                    rb"Bytes\s+received|Calls\s+receiving\s+data|Rank\s+\d+\s+Sizes?\s+distribution)", re.I)
_RANK_TABLES = {
    "communication time totals": "time",
    "bytes sent": "bytes_sent",
    "calls sending data": "calls_sent",
    "bytes received": "bytes_recv",
    "calls receiving data": "calls_recv",
    "number of calls": "calls",  # perfkit's extension (written by perfkit collect); absent in MPInside: NaN
    "cpu time totals": CPU_TIME,  # perfkit's extension: a metric only when the table is there
}
_SIZES = re.compile(r"^rank\s+(\d+)\s+size(s)?\s+distribution(\s+times)?$", re.I)
_MATRIX = re.compile(r"^(?:.*\b)?(COLLECTIVE_SIZE|TIME|SIZE|REQUEST)\s*\(\s*i\s*,\s*j\s*\)", re.I)
_MATRIX_QUANTITY = {"SIZE": "bytes", "REQUEST": "count", "TIME": "time"}
#: perfkit's extension (``perfkit collect``): collective bytes per pair, the optional quantity ``collective_bytes``
_OPTIONAL_MATRIX = {"COLLECTIVE_SIZE": COLLECTIVE_BYTES}


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
        what = "binary data" if not is_text(text[:4096]) else repr(text[:40].decode("latin-1"))
        raise PerfkitFormatError(path, number, f"expected a '>>>> title <<<<' table header, found {what}")


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
    columns, rest, lines = split_header(block, path)
    if columns[0].upper() != "CPU":
        raise PerfkitFormatError(path, lines(-1), f"table '{block.title}': expected first column 'CPU', "
                                                  f"found {columns[0]!r}")
    check_columns(columns, lines, block.title)
    dups = {c for c in columns if columns.count(c) > 1}
    if dups:
        raise PerfkitFormatError(path, lines(-1), f"table '{block.title}': duplicated columns {sorted(dups)}")
    values = parse_numbers(rest, len(columns), lines, f"table '{block.title}'")
    ranks = rank_column(values[:, 0], lines, rest, f"table '{block.title}'")
    return RankTable(metric, columns[1:], ranks, values[:, 1:], block)


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
    columns, rest, lines = split_header(block, path)
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
    rows = rank_column(values[:, 0], lines, rest, what)
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
    sizes = SizeTables()
    pending: list[tuple[Block, re.Match[str]]] = []  # consecutive size tables, read together
    matrices: dict[str, Entries] = {}
    warnings: list[str] = []
    cpu_block: Block | None = None
    for block in blocks:
        title = " ".join(block.title.lower().split())
        if match := _SIZES.match(title):
            pending.append((block, match))
            continue
        if pending:
            sizes.read(path, pending)
            pending = []
        key = next((m for t, m in _RANK_TABLES.items() if title.startswith(t)), None)
        if key is not None:
            if key in tables:
                raise PerfkitFormatError(path, block.line, f"table '{block.title}' appears twice "
                                                           f"(first on line {tables[key].line})")
            tables[key] = _read_rank_table(block, key, path)
        elif is_rank_cpu(title):
            if cpu_block is not None:
                raise PerfkitFormatError(path, block.line, f"table '{block.title}' appears twice "
                                                           f"(first on line {cpu_block.line})")
            cpu_block = block
        elif _MATRIX.match(block.title):
            name, entries = _read_matrix(block, path)
            if name in matrices:
                raise PerfkitFormatError(path, block.line, f"matrix {name}(i,j) appears twice")
            matrices[name] = entries
        else:
            warnings.append(f"line {block.line}: skipped unknown block '{block.title}'")
    last_is_size = bool(pending)
    if pending:
        sizes.read(path, pending)
    if "time" not in tables:
        raise PerfkitFormatError(path, None, "no '>>>> Communication time totals (s) <<<<' table found")
    if last_is_size:
        check_not_cut(path, sizes, tables["time"].ranks)
    rank_cpu = None if cpu_block is None else read_rank_cpu(cpu_block, path, tables["time"].ranks, warnings)
    return _build(path, tables, sizes, matrices, warnings, meta, hosts, rank_cpu)


def _build(path: Path, tables: dict[str, RankTable], sizes: SizeTables,
           matrices: dict[str, Entries], warnings: list[str],
           meta: dict[str, Any], hosts: HostRuns | None, rank_cpu: np.ndarray | None) -> xr.Dataset:
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
    for part in sizes.parts:
        for name in part.functions:
            functions.setdefault(name, column_function(name)[1:])
    names = list(functions)
    fidx = {f: k for k, f in enumerate(names)}
    # without a "Number of calls" table, calls stay NaN; cpu_time is a metric only where its table is
    metrics = [*METRICS, *([CPU_TIME] if CPU_TIME in tables else [])]
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
    size_arr, bins = size_array(sizes, ranks, fidx, path, warnings)
    return make_run(profile, ranks=ranks, functions=names, calls=[functions[f][0] for f in names],
                    kinds=[functions[f][1] for f in names], metrics=metrics, run=run, traffic=traffic,
                    sizes=size_arr, size_bins=bins, warnings=warnings, reader="perfkit.io.mpinside",
                    hosts=None if hosts is None else hosts.expand(path, ranks.size), rank_cpu=rank_cpu)


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
    shape = (n, n, len(quantities))
    flat, summed = summed_entries(np.concatenate(coords, axis=1), np.concatenate(data), shape)
    if dense_traffic(n, flat.size):  # without sparse, which imports numba (0.14-0.5 s)
        dense = np.zeros(shape)
        dense.flat[flat] = summed
        for name in absent:
            dense[:, :, TRAFFIC_QUANTITIES.index(_MATRIX_QUANTITY[name])] = np.nan
        if absent:
            warnings.append(f"no {', '.join(absent)} matrix in the file: traffic "
                            f"{', '.join(_MATRIX_QUANTITY[a] for a in absent)} is NaN")
        return dense
    if absent:
        warnings.append(f"no {', '.join(absent)} matrix in the file: those traffic quantities read as 0 "
                        "in the sparse matrix")
    return flat_coo(flat, summed, shape)

