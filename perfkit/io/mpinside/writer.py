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

from perfkit.io.mpinside.names import column_name

TABLES = (
    ("time", "Communication time totals (s)", "%.6f"),
    ("bytes_sent", "Bytes sent", "%.0f"),
    ("calls_sent", "Calls sending data", "%.0f"),
    ("bytes_recv", "Bytes received", "%.0f"),
    ("calls_recv", "Calls receiving data", "%.0f"),
    ("calls", "Number of calls", "%.0f"),  # perfkit's extension, written only when known
)
MATRICES = (("SIZE", "bytes", "%.0f"), ("REQUEST", "count", "%.0f"), ("TIME", "time", "%.6f"),
            ("COLLECTIVE_SIZE", "collective_bytes", "%.0f"))  # perfkit's extension, written only when known


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
    in_tables = ~np.all(np.isnan(profile.sel(metric=[m for m, _, _ in TABLES]).values), axis=(0, 2))
    columns = [column_name(str(f), str(k)) for f, k in
               zip(one["function"].values[in_tables], one["kind"].values[in_tables])]
    profile = profile.isel(function=in_tables)
    ranks = one["rank"].values
    tables = [t for t in TABLES if with_calls or t[0] != "calls"]
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
    if "sizes" in one:
        _sizes(fh, one)
    if "traffic" in one:
        _matrices(fh, one, matrix_layout)


def _table(fh: TextIO, title: str, header: list[str], index: np.ndarray, values: np.ndarray, fmt: str) -> None:
    fh.write(f">>>> {title} <<<<\n{' '.join(header)}\n")
    frame = pd.DataFrame(values, index=index)
    frame.to_csv(fh, sep=" ", header=False, na_rep="-----", float_format=fmt, lineterminator="\n")


def _sizes(fh: TextIO, one: xr.Dataset) -> None:
    sizes = one["sizes"]
    for r in one["rank"].values:
        per_rank = sizes.sel(rank=r)
        used = ~np.all(np.isnan(per_rank.values), axis=(1, 2))
        if not used.any():
            continue
        funcs = [str(f).removeprefix("MPI_") for f in one["function"].values[used]]
        for stat, title, fmt in (("count", "Sizes distribution", "%.0f"), ("time", "Size distribution times", "%.6f")):
            values = per_rank.sel(stat=stat).values[used].T[::-1]
            _table(fh, f"Rank {r} {title}", ["Sizes", *funcs], one["size_bin"].values[::-1].astype(np.int64),
                   values, fmt)


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
            frame = pd.DataFrame({"i": ranks[i[order]], "j": ranks[j[order]], "v": v[order]})
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
        frame = pd.DataFrame({"i": ranks[i], "j": ranks[j], "v": m[i, j]})
        frame.to_csv(fh, sep=" ", header=False, index=False, float_format=fmt, lineterminator="\n")
