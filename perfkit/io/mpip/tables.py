"""Fast reading of mpiP's large whitespace-separated tables with pandas' C parser.

The rows of a section (a byte range, see ``perfkit.io.mpip.scan``) are handed to
``pandas.read_csv`` as they are, without copying the file: the call name is text, the other
columns float64, ``*`` read as NaN in the column where mpiP writes it for its aggregate rows. The
result is None as soon as one row does not fit (a field too many or too few, text where a number
belongs, a note line, a fractional integer, a number mpiP does not print: NaN, negative, infinite or
``TOO_LARGE``), and for sections under ``FAST_FROM`` bytes: the
caller then reads the section line by line, which names the line of a bad row. Nothing is
accepted here that the line reading refuses, and both readings give the same values.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence

import numpy as np
import pandas as pd

from perfkit.io.mpip.scan import Section, Text

_EXTRA = "\x00extra"  # a column past the last expected one: any value in it means a row too long
#: Sections smaller than this [B] are read line by line: below it pandas' fixed cost per call dominates.
FAST_FROM = 1 << 16
#: No number mpiP prints reaches this (64-bit counters, times in s or ms): larger ones are corrupt, and
#: summing them could overflow.
TOO_LARGE = 2.0**63


class _Range:
    """A read-only binary file over ``data[start:stop]`` (chunks are copied, the whole never is)."""

    def __init__(self, data: Text, start: int, stop: int) -> None:
        self._view = memoryview(data)
        self._pos, self._stop = start, stop

    def read(self, size: int = -1) -> bytes:
        end = self._stop if size is None or size < 0 else min(self._stop, self._pos + size)
        chunk = bytes(self._view[self._pos:end])
        self._pos = end
        return chunk


def parse(section: Section, columns: Sequence[str], *, text: str | None = None, integers: Sequence[str] = (),
          star: str | None = None) -> pd.DataFrame | None:
    """The rows of ``section`` as a DataFrame (column ``text`` of str, the others float64), or None.

    ``integers`` must hold whole numbers; ``star`` names the column where ``*`` (NaN here) may
    stand. None when a row needs the line-by-line reading (see the module docstring).
    """
    if section.stop - section.start < max(FAST_FROM, 1) or _first_width(section) != len(columns):
        return None  # (pandas would take a long first row's extra fields as an index, with a warning)
    names = [*columns, _EXTRA]
    numeric = [name for name in columns if name != text]
    try:
        frame = pd.read_csv(
            _Range(section.source.bytes(), section.start, section.stop), sep=r"\s+", header=None, names=names,
            index_col=False, dtype={**dict.fromkeys(numeric, np.float64), _EXTRA: np.float64,
                                    **({text: object} if text else {})},
            na_values={_EXTRA: [""], **({star: ["*"]} if star else {})}, keep_default_na=False,
            quoting=csv.QUOTE_NONE, encoding="utf-8", encoding_errors="replace", engine="c")
    except (ValueError, TypeError, OverflowError, pd.errors.ParserError):
        return None
    if frame[_EXTRA].notna().any():
        return None
    for name in numeric:
        values = frame[name].to_numpy()
        if name == star:
            values = values[~np.isnan(values)]
        elif not ((values >= 0) & (values < TOO_LARGE)).all():  # NaN too
            return None
        if name in integers and (values != np.round(values)).any():
            return None
    return frame.drop(columns=_EXTRA)


def _first_width(section: Section) -> int:
    """Number of fields of the first non-blank row of ``section``."""
    data, start = section.source.bytes(), section.start
    while start < section.stop:
        end = data.find(b"\n", start, section.stop)
        fields = data[start:section.stop if end < 0 else end].split()
        if fields:
            return len(fields)
        start = section.stop if end < 0 else end + 1
    return 0
