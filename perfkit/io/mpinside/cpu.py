"""perfkit's CPU tables in MPInside text (written by ``perfkit collect``; absent from MPInside's own files).

``>>>> CPU time totals (s) <<<<`` is a per-rank table like the time table (metric ``cpu_time``; read by the
reader's table code). ``>>>> CPU per rank <<<<`` holds each rank's counters (``perfkit.model.CPU_STATS``,
one column each, units in ``docs/formats/mpinside.md``): the ``rank_cpu`` variable. A column it does not
know is an error; a known column it lacks is NaN, and the reader says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

import numpy as np
import pandas as pd

from perfkit.errors import PerfkitFormatError
from perfkit.io.mpinside.tables import Block, parse_numbers, rank_column, split_header
from perfkit.model import CPU_STATS

TITLE = "CPU per rank"


def is_rank_cpu(title: str) -> bool:
    """Whether a block's title (lower case, single spaces) is the per-rank CPU table."""
    return title == TITLE.lower()


def read_rank_cpu(block: Block, path: Path, ranks: np.ndarray, warnings: list[str]) -> np.ndarray:
    """(rank, cpu_stat) over ``ranks`` (the time table's) from the block; NaN where the table has no value."""
    columns, rest, lines = split_header(block, path)
    what = f"table '{block.title}'"
    if columns[0].upper() != "CPU":
        raise PerfkitFormatError(path, lines(-1), f"{what}: expected first column 'CPU', found {columns[0]!r}")
    unknown = [c for c in columns[1:] if c not in CPU_STATS]
    if unknown:
        raise PerfkitFormatError(path, lines(-1), f"{what}: column {unknown[0]!r} is none of {', '.join(CPU_STATS)}")
    if len(set(columns)) != len(columns):
        raise PerfkitFormatError(path, lines(-1), f"{what}: a column appears twice")
    values = parse_numbers(rest, len(columns), lines, what)
    table_ranks = rank_column(values[:, 0], lines, rest, what)
    position = pd.Index(ranks).get_indexer(table_ranks)
    if np.any(position < 0):
        extra = table_ranks[position < 0]
        raise PerfkitFormatError(path, block.line, f"{what} has ranks {extra[:5].tolist()} that the time table lacks")
    out = np.full((ranks.size, len(CPU_STATS)), np.nan)
    out[np.ix_(position, [CPU_STATS.index(c) for c in columns[1:]])] = values[:, 1:]
    absent = [c for c in CPU_STATS if c not in columns[1:]]
    if absent:
        warnings.append(f"line {block.line}: {what} lacks columns {absent}: NaN")
    if position.size < ranks.size:
        warnings.append(f"line {block.line}: {what} has no rows for {ranks.size - position.size} ranks: NaN")
    return out


def write_rank_cpu(fh: TextIO, ranks: np.ndarray, values: np.ndarray) -> None:
    """The per-rank CPU table of ``values`` (rank, cpu_stat); NaN as ``-----``."""
    fh.write(f">>>> {TITLE} <<<<\n{' '.join(['CPU', *CPU_STATS])}\n")
    frame = pd.DataFrame(values, index=ranks)
    frame.to_csv(fh, sep=" ", header=False, na_rep="-----", float_format="%.9g", lineterminator="\n")
