"""Write a one-run canonical Dataset as MPInside text tables (the layout ``perfkit.io.mpinside.read`` reads)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import pandas as pd
import xarray as xr

from perfkit.io.mpinside.cpu import write_rank_cpu
from perfkit.io.mpinside.names import column_name
from perfkit.model import CPU_TIME, SIZE_STATS

TABLES = (
    ("time", "Communication time totals (s)", "%.6f"),
    ("bytes_sent", "Bytes sent", "%.0f"),
    ("calls_sent", "Calls sending data", "%.0f"),
    ("bytes_recv", "Bytes received", "%.0f"),
    ("calls_recv", "Calls receiving data", "%.0f"),
    ("calls", "Number of calls", "%.0f"),  # perfkit's extension, written only when known
    (CPU_TIME, "CPU time totals (s)", "%.6f"),  # perfkit's extension, written when the profile has it
)
MATRICES = (("SIZE", "bytes", "%.0f"), ("REQUEST", "count", "%.0f"), ("TIME", "time", "%.6f"),
            ("COLLECTIVE_SIZE", "collective_bytes", "%.0f"))  # perfkit's extension, written only when known
SIZE_TABLES = (("count", "Sizes distribution", "%.0f"), ("time", "Size distribution times", "%.6f"))
#: Ranks whose size tables are formatted together (their text is held at once).
RANKS_AT_ONCE = 4096


def write(ds: xr.Dataset, path: str | PathLike | TextIO, *, matrix_layout: str = "sparse",
          with_calls: bool = False, preamble: str = "", run_metadata: Mapping[str, Any] | None = None) -> Path | None:
    """Write the single run in ``ds`` to ``path`` (or an open text file); NaN is written as ``-----``.

    ``matrix_layout`` is ``"sparse"`` (``i j value`` rows, non-zeros only) or ``"dense"``.
    ``with_calls`` adds perfkit's ``Number of calls`` table (metric ``calls``), absent from MPInside.
    ``preamble`` is written first (``#`` comment lines), then a ``# perfkit-run: {json}`` line with
    ``run_metadata`` and the ranks' host names (``host``, as ``host_runs``) when ``ds`` knows any.
    """
    if ds.sizes.get("run", 1) != 1:
        raise ValueError("write() takes a Dataset holding one run; select it with ds.isel(run=[k])")
    one = ds.isel(run=0)
    profile = one["profile"]
    metrics = set(map(str, profile["metric"].values))
    tables = [t for t in TABLES if (with_calls or t[0] != "calls") and t[0] in metrics]
    if CPU_TIME in metrics and np.all(np.isnan(profile.sel(metric=CPU_TIME).values)):
        tables = [t for t in tables if t[0] != CPU_TIME]  # a run of a combined study that did not measure CPU
    known = [m for m, _, _ in TABLES if m in metrics]
    in_tables = ~np.all(np.isnan(profile.sel(metric=known).values), axis=(0, 2))
    columns = [column_name(str(f), str(k)) for f, k in
               zip(one["function"].values[in_tables], one["kind"].values[in_tables])]
    profile = profile.isel(function=in_tables)
    ranks = one["rank"].values
    meta = dict(run_metadata or {})
    hosts = one["host"].values if "host" in one else np.array([""])
    if any(hosts):
        meta["hosts"] = host_runs(hosts)
    if meta:
        preamble += f"# perfkit-run: {json.dumps(meta)}\n"
    if hasattr(path, "write"):
        _write(path, one, profile, columns, ranks, tables, matrix_layout, preamble)
        return None
    path = Path(path)
    with open(path, "w") as fh:
        _write(fh, one, profile, columns, ranks, tables, matrix_layout, preamble)
    return path


def host_runs(hosts: Sequence[str]) -> list[str | list[str | int]]:
    """The host of each rank in order, compactly: ``[host, count]`` for ``count`` > 1 consecutive ranks on
    one host, the name alone for one rank (``perfkit.io.mpinside.read`` reads it back)."""
    hosts = np.asarray(hosts, dtype=str)
    if not hosts.size:
        return []
    starts = np.flatnonzero(np.r_[True, hosts[1:] != hosts[:-1]])
    counts = np.diff(np.r_[starts, hosts.size])
    return [[str(hosts[s]), int(c)] if c > 1 else str(hosts[s]) for s, c in zip(starts, counts)]


def _write(fh: TextIO, one: xr.Dataset, profile: xr.DataArray, columns: list[str], ranks: np.ndarray,
           tables: list[tuple[str, str, str]], matrix_layout: str, preamble: str) -> None:
    fh.write(preamble)
    for metric, title, fmt in tables:
        _table(fh, title, ["CPU", *columns], ranks, profile.sel(metric=metric).values, fmt)
    if "rank_cpu" in one and not np.all(np.isnan(one["rank_cpu"].values)):
        write_rank_cpu(fh, ranks, one["rank_cpu"].transpose("rank", "cpu_stat").values)
    if "sizes" in one:
        _sizes(fh, one)
    if "traffic" in one:
        _matrices(fh, one, matrix_layout)


def _table(fh: TextIO, title: str, header: list[str], index: np.ndarray, values: np.ndarray, fmt: str) -> None:
    fh.write(f">>>> {title} <<<<\n{' '.join(header)}\n")
    frame = pd.DataFrame(_as_written(values, fmt), index=index)
    frame.to_csv(fh, sep=" ", header=False, na_rep="-----", float_format=fmt, lineterminator="\n")


def _as_written(values: np.ndarray, fmt: str) -> np.ndarray:
    """``values`` as int64 when ``fmt`` is ``%.0f`` and they are integers that it prints as such (pandas writes
    int64 columns in C; each float goes through ``fmt`` in Python), else unchanged."""
    if fmt != "%.0f" or not values.size:
        return values
    with np.errstate(invalid="ignore"):
        exact = np.isfinite(values) & (np.abs(values) < 2.0**63) & (np.trunc(values) == values)
    if not exact.all() or np.signbit(values[values == 0]).any():  # NaN ("-----"), fractions, -0.0 ("-0")
        return values
    return values.astype(np.int64)


def _sizes(fh: TextIO, one: xr.Dataset) -> None:
    """Each rank's two size tables (counts, then times; functions it used, bins from the largest), written
    ``RANKS_AT_ONCE`` ranks at a time: the rows of ranks using the same functions formatted in one call."""
    sizes = one["sizes"].transpose("rank", "function", "size_bin", "stat").values
    ranks = one["rank"].values
    names = np.array([str(f).removeprefix("MPI_") for f in one["function"].values], dtype=object)
    bins = one["size_bin"].values[::-1].astype(np.int64)
    used = ~np.all(np.isnan(sizes), axis=(2, 3))  # rank x function
    written = np.flatnonzero(used.any(axis=1))
    for start in range(0, written.size, RANKS_AT_ONCE):
        batch = written[start:start + RANKS_AT_ONCE]
        lines = np.empty((batch.size, len(SIZE_TABLES), 2 + bins.size), dtype=object)
        patterns, group = np.unique(used[batch], axis=0, return_inverse=True)
        for pattern, members in zip(patterns, (np.flatnonzero(group.ravel() == g) for g in range(len(patterns)))):
            rows = sizes[batch[members]][:, pattern][:, :, ::-1]  # ranks x functions x bins (largest first) x stat
            for s, (stat, title, fmt) in enumerate(SIZE_TABLES):
                values = rows[..., SIZE_STATS.index(stat)].transpose(0, 2, 1).reshape(-1, int(pattern.sum()))
                text = pd.DataFrame(_as_written(values, fmt), index=np.tile(bins, members.size)).to_csv(
                    sep=" ", header=False, na_rep="-----", float_format=fmt, lineterminator="\n")
                lines[members, s, 2:] = np.array(text.split("\n")[:-1], dtype=object).reshape(members.size, -1)
                lines[members, s, 0] = [f">>>> Rank {r} {title} <<<<" for r in ranks[batch[members]]]
                lines[members, s, 1] = " ".join(["Sizes", *names[used[batch[members[0]]]]])
        fh.write("\n".join(lines.ravel()))
        fh.write("\n")


def _matrices(fh: TextIO, one: xr.Dataset, layout: str) -> None:
    ranks = one["rank"].values
    for name, quantity, fmt in MATRICES:
        if quantity not in one["quantity"].values:
            continue
        m = one["traffic"].sel(quantity=quantity).data
        if layout == "sparse" and hasattr(m, "coords"):  # sparse.COO: its non-zeros, never N x N
            i, j = (m.coords[1], m.coords[0]) if name == "TIME" else (m.coords[0], m.coords[1])
            keep = np.nan_to_num(m.data) != 0
            i, j, v = i[keep], j[keep], m.data[keep]
            fh.write(f">>>> {name}(i,j) <<<<\ni j value\n")
            order = np.lexsort((j, i))
            frame = pd.DataFrame({"i": ranks[i[order]], "j": ranks[j[order]], "v": _as_written(v[order], fmt)})
            frame.to_csv(fh, sep=" ", header=False, index=False, float_format=fmt, lineterminator="\n")
            continue
        m = m.todense() if hasattr(m, "todense") else np.asarray(m)
        if np.all(np.isnan(m)):
            continue
        if name == "TIME":  # TIME(i,j): time i spent receiving from j
            m = m.T
        if layout == "dense":
            _table(fh, f"{name}(i,j)", ["CPU", *map(str, ranks)], ranks, m, fmt)
            continue
        i, j = np.nonzero(np.nan_to_num(m))
        fh.write(f">>>> {name}(i,j) <<<<\ni j value\n")
        frame = pd.DataFrame({"i": ranks[i], "j": ranks[j], "v": _as_written(m[i, j], fmt)})
        frame.to_csv(fh, sep=" ", header=False, index=False, float_format=fmt, lineterminator="\n")
