"""The text layer of MPInside files: ``>>>> title <<<<`` blocks found and read, whitespace tables parsed strictly.

Line numbers are counted only when a message needs one (``line_at``, ``Lines``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from io import BytesIO
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pandas as pd

from perfkit.errors import PerfkitFormatError

PLACEHOLDER = b"-----"
#: Ranks, and rank indices of matrices, are below this (MPI ranks are C ints).
MAX_RANK = 2**31
#: Bytes read at a time while looking for table headers.
CHUNK = 1 << 22
#: Tables longer than this [B] are parsed with inferred column types (int64 columns parse faster).
_INFER_ABOVE = 1 << 20
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


def is_text(raw: bytes) -> bool:
    return not raw.translate(None, _TEXT_BYTES)


def split_header(block: Block, path: Path) -> tuple[list[str], bytes, Lines]:
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


#: No number MPInside writes reaches this: its counters are 64-bit integers, its times seconds. Larger
#: numbers are corrupt, and summing or squaring them would overflow.
TOO_LARGE = 2.0**63


def _check_values(values: np.ndarray, raw: bytes, lines: Lines, what: str) -> None:
    """No table holds a negative, infinite or too large number (times, bytes, calls, ranks, sizes): the line
    and the token read are named."""
    bad = (values < 0) | (values >= TOO_LARGE)  # NaN ('-----') is neither
    if not bad.any():
        return
    row = int(np.argmax(bad.any(axis=1)))
    col = int(np.argmax(bad[row]))
    line = _row_line(raw, row)
    token = raw.splitlines()[line].split()[col].decode("latin-1")
    beyond = "" if values[row, col] < 0 or np.isinf(values[row, col]) else " (beyond 2**63: corrupt)"
    raise PerfkitFormatError(lines.path, lines(line), f"{_not_a(what, col)}, found {token!r}{beyond}")


def _not_a(what: str, col: int) -> str:
    """'<what>: column N: expected a non-negative time' (or byte count, call count, number, by the title)."""
    title = what.lower()
    kind = ("time" if "time" in title else "byte count" if "bytes" in title else
            "call count" if "calls" in title else "number")
    return f"{what}: column {col + 1}: expected a non-negative {kind}"


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
        row = next(k for k, line in enumerate(raw.splitlines()) if not is_text(line))
        raise PerfkitFormatError(lines.path, lines(row), f"{what}: binary data where numbers were expected")
    rows = raw.splitlines()
    for row, line in enumerate(rows):
        count = len(line.split())
        if count not in (0, ncols):
            truncated = " (truncated table?)" if row == len(rows) - 1 else ""
            raise PerfkitFormatError(lines.path, lines(row),
                                     f"{what}: expected {ncols} columns as in its header, found {count}{truncated}")
    row, col, token = _first_bad_token(rows)
    if _number(token) is not None:  # nan, NaN: a number, but no measurement
        raise PerfkitFormatError(lines.path, lines(row), f"{_not_a(what, col)}, found {token!r}")
    raise PerfkitFormatError(lines.path, lines(row), f"{what}: expected a number or '-----', found {token!r}")


def _number(token: str) -> float | None:
    """``token`` as the C parser reads a number (no '_' digit separators, unlike Python's ``float``), else None."""
    try:
        return None if "_" in token else float(token)
    except ValueError:
        return None


def _first_bad_token(rows: list[bytes]) -> tuple[int, int, str]:
    """Row, column and text of the first field that is neither '-----' nor a number (NaN included)."""
    for row, line in enumerate(rows):
        for col, field in enumerate(line.split()):
            token = field.decode("latin-1")
            value = _number(token)
            if field != PLACEHOLDER and (value is None or value != value):
                return row, col, token
    raise AssertionError("no bad token in a table the parser refused")


def rank_column(values: np.ndarray, lines: Lines, raw: bytes, what: str) -> np.ndarray:
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


def check_columns(columns: list[str], lines: Lines, title: str) -> None:
    """Column names are function names: letters, digits and '_' (no control bytes or punctuation)."""
    odd = next((c for c in columns if not _COLUMN.match(c)), None)
    if odd is not None:
        raise PerfkitFormatError(lines.path, lines(-1), f"table '{title}': column name {odd!r} is not a function "
                                                        "name (letters, digits, '_')")
