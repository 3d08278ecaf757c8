"""A run moved into a ``convert`` store by renaming its compressed zarr chunks instead of rewriting them.

A worker writes the run it read to a temporary zarr group (format 2) with the store's encoding
and chunk shape. Where a variable of that group lines up with the store (same dims, dtype,
compressor, filters, fill value, chunk shape; along each dimension the run's labels are the
store's labels at consecutive positions from a chunk boundary), each chunk file of the group
holds exactly the bytes of the store's chunk at the run's place: it is renamed into the store
(zarr format 2 names a chunk by its indices, ``i.j.k``). The padding after a run's last rank
is the fill value (NaN) in both; a chunk that is all fill value is absent in both.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

#: ``.zarray`` keys that must be equal for a chunk file to mean the same in the group and the store.
SAME_KEYS = ("chunks", "dtype", "compressor", "filters", "fill_value", "order", "dimension_separator", "zarr_format")


def chunk_offsets(run: xr.Dataset, coords: Mapping[str, Any], dims: tuple[str, ...],
                  chunks: Mapping[str, int]) -> tuple[int, ...] | None:
    """Where the one-run ``run``'s block of a variable with ``dims`` (``run`` first) starts in the store, in
    chunks along each dim after ``run``; ``None`` unless its labels are the store's ``coords`` at consecutive
    positions from a chunk boundary."""
    out = []
    for dim in dims[1:]:
        n = run.sizes[dim]
        labels = run.indexes[dim] if dim in run.indexes else pd.RangeIndex(n)
        union = pd.Index(coords[dim])
        if n == 0 or n > len(union):
            return None
        first = int(union.get_indexer(labels[:1])[0])
        if first < 0 or first % chunks[dim] or first + n > len(union) or not union[first:first + n].equals(labels):
            return None
        out.append(first // chunks[dim])
    return tuple(out)


def move(part: Path, store: Path, name: str, position: int, offsets: tuple[int, ...]) -> bool:
    """Rename the chunk files of variable ``name`` of the one-run group ``part`` into ``store`` at run
    ``position`` and chunk ``offsets``; ``False`` (nothing moved) when the two arrays' metadata differ."""
    source, target = part / name, store / name
    meta, into = (_metadata(folder) for folder in (source, target))
    if meta is None or into is None or any(meta[0].get(k) != into[0].get(k) for k in SAME_KEYS):
        return False
    if meta[1] != into[1] or meta[0]["shape"][0] != 1 or meta[0].get("dimension_separator", ".") != ".":
        return False
    keys = [entry.name for entry in os.scandir(source) if not entry.name.startswith(".")]
    if not keys:
        return True
    index = np.array([key.split(".") for key in keys], dtype=np.int64)
    index[:, 0] = position
    index[:, 1:] += np.asarray(offsets, dtype=np.int64)
    for key, new in zip(keys, index):
        os.rename(source / key, target / ".".join(map(str, new)))
    return True


def _metadata(folder: Path) -> tuple[dict[str, Any], list[str]] | None:
    """(``.zarray``, dimension names) of a zarr format 2 array folder, ``None`` if it is not one."""
    try:
        meta = json.loads((folder / ".zarray").read_text())
        dims = json.loads((folder / ".zattrs").read_text()).get("_ARRAY_DIMENSIONS")
    except (OSError, ValueError):
        return None
    return meta, dims
