"""A run moved into a ``convert`` store by renaming its compressed zarr chunks instead of rewriting them.

A worker writes the run it read to a temporary zarr group (format 2) with the store's encoding
and chunk shape, or only that group's chunk files (``write_group(..., flat=True)``, their metadata
kept in memory). Where a variable of that group lines up with the store (same dims, dtype,
compressor, filters, fill value, chunk shape; along each dimension the run's labels are the
store's labels at consecutive positions from a chunk boundary), each chunk file of the group
holds exactly the bytes of the store's chunk at the run's place: it is renamed into the store
(zarr format 2 names a chunk by its indices, ``i.j.k``). The padding after a run's last rank
is the fill value (NaN) in both; a chunk that is all fill value is absent in both.

A run whose data variables are all float64 arrays in memory is written to its group here
(``write_group``: each chunk compressed with ``COMPRESSOR`` and written as a file, the metadata
as the zarr format 2 specification gives it), not through xarray and zarr, whose metadata
handling took 30-55 ms a run against 15 ms for compressing a 16,384-rank run's chunks. Such a
group is read back lazily the same way (``lazy_array``: a dask array of its chunk files, no zarr
metadata read until a chunk is), where opening it with ``xarray.open_zarr`` took 5-25 ms a run.

The store itself is laid out here as well (``write_layout``: coordinates whole, data variables' metadata only) and
marked complete (``add_attrs``): zarr does each file operation on its event-loop thread, and each hand-over to it
waited for a core and the GIL after the reads (55 of them for a layout: 150-230 ms at load 3-4, 14-45 ms here).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dask.array as da
import numcodecs
import numpy as np
import pandas as pd
import xarray as xr

#: ``.zarray`` keys that must be equal for a chunk file to mean the same in the group and the store.
SAME_KEYS = ("chunks", "dtype", "compressor", "filters", "fill_value", "order", "dimension_separator", "zarr_format")
#: Compressor of a convert store's float64 arrays and of the runs' groups: blosc lz4 level 5 without shuffle. A
#: 16,384-rank MPInside run (8.7 MB, NaN and zeros where a function has no value for a metric) compressed in 3.4 ms
#: to 1.15 MB, against 9.1 ms and 3.0 MB with zarr's byte shuffle; a real CloverLeaf mpiP report stretched to
#: 16,384 ranks with random per-rank factors in 4.0 ms to 5.6 MB, against 6.5 ms and 6.3 MB (docs/scale.md).
COMPRESSOR = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.NOSHUFFLE)
#: zarr's default compressor for format 2 (blosc lz4 level 5, byte shuffle): the layout's coordinates and text
#: variables, as xarray writes them.
ZARR_DEFAULT = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)


def chunk_offsets(run: xr.Dataset, coords: Mapping[str, Any], dims: tuple[str, ...],
                  chunks: Mapping[str, int]) -> tuple[int, ...] | None:
    """Where the one-run ``run``'s block of a variable with ``dims`` (``run`` first) starts in the store, in
    chunks along each dim after ``run``; ``None`` unless its labels are the store's ``coords`` at consecutive
    positions from a chunk boundary. ``coords`` may hold ``pd.Index`` objects: used as they are (their hash tables
    built once for many runs)."""
    out = []
    for dim in dims[1:]:
        n = run.sizes[dim]
        labels = run.indexes[dim] if dim in run.indexes else pd.RangeIndex(n)
        union = coords[dim] if isinstance(coords[dim], pd.Index) else pd.Index(coords[dim])
        if n == 0 or n > len(union):
            return None
        first = int(union.get_indexer(labels[:1])[0])
        if first < 0 or first % chunks[dim] or first + n > len(union) or not union[first:first + n].equals(labels):
            return None
        out.append(first // chunks[dim])
    return tuple(out)


def move(part: Path, store: Path, name: str, position: int, offsets: tuple[int, ...],
         known: Mapping[Path, tuple[dict[str, Any], list[str]] | None] | None = None, *, flat: bool = False) -> bool:
    """Rename the chunk files of variable ``name`` of the one-run group ``part`` into ``store`` at run
    ``position`` and chunk ``offsets``; ``False`` (nothing moved) when the two arrays' metadata differ.
    ``known``: the metadata of array folders (``array_metadata``) known already, by folder (``part / name`` of a
    part written ``flat``, which has none; the store's arrays, for many runs); the others are read. ``flat``: the
    part was written so (``write_group``), its chunk files are found with ``chunk_files``."""
    source, target = part / name, store / name
    known = known or {}
    meta, into = (known[folder] if folder in known else array_metadata(folder) for folder in (source, target))
    if meta is None or into is None or any(meta[0].get(k) != into[0].get(k) for k in SAME_KEYS):
        return False
    if meta[1] != into[1] or meta[0]["shape"][0] != 1 or meta[0].get("dimension_separator", ".") != ".":
        return False
    folder, prefix = chunk_files(part, name, flat)
    grid = [-(-n // c) for n, c in zip(meta[0]["shape"], meta[0]["chunks"])]
    for index in np.ndindex(*grid):  # a chunk of fill value only has no file
        new = (position, *(i + o for i, o in zip(index[1:], offsets)))
        try:
            os.rename(folder / f"{prefix}{'.'.join(map(str, index))}", target / ".".join(map(str, new)))
        except FileNotFoundError:
            continue
    return True


def chunk_files(part: Path, name: str, flat: bool) -> tuple[Path, str]:
    """(folder, file-name prefix) of the chunk files of variable ``name`` of the group ``part``: ``part/name/<key>``
    in a zarr group; ``<part>.<name>.<key>`` beside where the group would be when written ``flat``."""
    return (part.parent, f"{part.name}.{name}.") if flat else (part / name, "")


def array_metadata(folder: Path) -> tuple[dict[str, Any], list[str]] | None:
    """(``.zarray``, dimension names) of a zarr format 2 array folder, ``None`` if it is not one."""
    try:
        meta = json.loads((folder / ".zarray").read_text())
        dims = json.loads((folder / ".zattrs").read_text()).get("_ARRAY_DIMENSIONS")
    except (OSError, ValueError):
        return None
    return meta, dims


def writable(ds: xr.Dataset) -> bool:
    """Whether ``write_group`` can write ``ds``: every data variable float64 in memory (numpy), not empty,
    with attributes JSON can hold as they are."""
    try:
        json.dumps([var.attrs for var in ds.data_vars.values()])
    except TypeError:
        return False
    return all(type(var.data) is np.ndarray and var.dtype == np.float64 and var.size
               for var in ds.data_vars.values())


def write_group(ds: xr.Dataset, part: Path, chunks: Mapping[str, int], *,
                flat: bool = False) -> dict[str, tuple[int, ...]]:
    """Write ``ds``'s data variables (``writable``) to the new zarr format 2 group ``part``, as
    ``Dataset.to_zarr`` with ``COMPRESSOR`` would: chunks of ``chunks[dim]`` (whole along other dims),
    chunk files of fill value (NaN) only left out, consolidated metadata; coordinates and the
    Dataset's attributes are not written. A group left at ``part`` (a task run again) is replaced.
    Returns each variable's chunk shape.

    ``flat=True`` writes the chunk files only, beside where the group would be (``chunk_files``: no folder, none of
    the five metadata files): a ``convert`` reader's part, whose metadata is known from what this returns (``zarray``;
    read back with ``lazy_array``, moved by ``move`` with it ``known``). Each folder or file created cost 0.05-1.7 ms
    here (a 16,384-rank run's group 5-15 ms, of which 11 folders and files), and each folder removed 2.6 ms. A chunk
    file left by an earlier attempt is written again (the same chunks, the same bytes)."""
    written = {str(name): tuple(min(chunks.get(dim, n), n) for dim, n in zip(var.dims, var.shape))
               for name, var in ds.data_vars.items()}
    if flat:
        for name, var in ds.data_vars.items():
            folder, prefix = chunk_files(part, str(name), True)
            _write_chunks(np.asarray(var.data), written[str(name)], folder, prefix=prefix)
        return written
    if part.exists():
        shutil.rmtree(part)
    part.mkdir()
    meta: dict[str, Any] = {".zgroup": {"zarr_format": 2}, ".zattrs": {}}
    for name, var in ds.data_vars.items():
        meta[f"{name}/.zarray"] = zarray(var.shape, written[str(name)])
        meta[f"{name}/.zattrs"] = {"_ARRAY_DIMENSIONS": list(var.dims), **var.attrs}
        (part / name).mkdir()
        _write_chunks(np.asarray(var.data), written[str(name)], part / name)
    _put_metadata(part, meta, {"metadata": {}, "zarr_consolidated_format": 1})
    return written


def zarray(shape: tuple[int, ...], chunk: tuple[int, ...]) -> dict[str, Any]:
    """The ``.zarray`` metadata (zarr format 2) of a float64 array of ``shape`` in chunks of ``chunk``, fill value
    NaN, ``COMPRESSOR``."""
    return {"shape": list(shape), "chunks": list(chunk), "dtype": "<f8", "fill_value": "NaN", "order": "C",
            "filters": None, "dimension_separator": ".", "compressor": COMPRESSOR.get_config(), "zarr_format": 2}


def add_blank_arrays(store: Path,
                     arrays: Mapping[str, tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]]) -> None:
    """Add to the zarr format 2 ``store`` the float64 arrays ``name -> (shape, chunk, attributes)`` with no chunk
    written (every element the fill value, NaN), and add them to its consolidated metadata: what
    ``Dataset.to_zarr(compute=False)`` writes for dask arrays, without building a dask graph."""
    entries = {}
    for name, (shape, chunk, attrs) in arrays.items():
        (store / name).mkdir()
        entries.update({f"{name}/.zarray": zarray(shape, chunk), f"{name}/.zattrs": attrs})
    _put_metadata(store, entries)


def _put_metadata(store: Path, entries: Mapping[str, Any], consolidated: dict[str, Any] | None = None) -> None:
    """Write each ``key -> value`` of ``entries`` as the JSON file ``store/key``, then the store's consolidated
    metadata (``.zmetadata``, read from the store unless given) with them recorded."""
    if consolidated is None:
        consolidated = json.loads((store / ".zmetadata").read_text())
    for key, value in entries.items():
        (store / key).write_text(json.dumps(value, indent=2))
        consolidated["metadata"][key] = value
    (store / ".zmetadata").write_text(json.dumps(consolidated, indent=2))


def write_layout(store: Path, variables: Mapping[str, xr.Variable], attrs: Mapping[str, Any],
                 chunks: Mapping[str, tuple[int, ...]]) -> bool:
    """Write the new zarr format 2 group ``store`` as ``Dataset.to_zarr(mode="w", consolidated=True,
    write_empty_chunks=False)`` writes a ``convert`` store's layout, each file written here rather than through
    zarr's event-loop thread (55 hand-overs for 16 runs of 16,384 ranks: 60 ms on a quiet machine, 150-230 ms at
    load 3-4, where readers or a cluster's scheduler hold the GIL and the cores). ``variables`` and ``attrs`` are
    the layout's as ``xarray.conventions.encode_dataset_coordinates`` gives them. The variables named in
    ``chunks`` (the data variables, every element "no value": NaN, or "" for text) get their metadata only, in
    chunks of that shape; the others (coordinates) are written whole, one chunk each. Returns ``False``, nothing
    written, unless every variable is one it writes: one-dimensional if a coordinate, float64, int64, fixed-width
    unicode or strings, with attributes JSON holds as they are."""
    meta: dict[str, Any] = {".zgroup": {"zarr_format": 2}, ".zattrs": _json_attrs(attrs)}
    data = {}
    for name, var in variables.items():
        kind = _kind(var, name in chunks)
        var_attrs = _json_attrs(var.attrs)
        if kind is None or var_attrs is None:
            return False
        meta[f"{name}/.zarray"] = {**zarray(var.shape, chunks.get(name, var.shape)), **kind}
        meta[f"{name}/.zattrs"] = {"_ARRAY_DIMENSIONS": list(var.dims), **var_attrs}
        if name not in chunks:
            data[name] = np.asarray(var.values)
    if meta[".zattrs"] is None:
        return False
    store.mkdir()
    for name, values in data.items():
        (store / name).mkdir()
        if values.dtype.kind in "fiU" and (np.isnan(values) if values.dtype.kind == "f"
                                           else values == values.dtype.type()).all():
            continue  # every element the fill value (NaN, 0, ""): no chunk, as zarr writes it
        encoded = _VLEN_UTF8.encode(values) if values.dtype == object else np.ascontiguousarray(values)
        (store / name / ".".join(["0"] * values.ndim)).write_bytes(ZARR_DEFAULT.encode(encoded))
    for name in chunks:
        (store / name).mkdir()
    _put_metadata(store, meta, {"metadata": {}, "zarr_consolidated_format": 1})
    return True


def add_attrs(store: Path, attrs: Mapping[str, Any]) -> None:
    """Add ``attrs`` (JSON values) to the attributes of the zarr format 2 group ``store`` and to its consolidated
    metadata, in that order, as ``zarr`` and ``zarr.consolidate_metadata`` would (without their event-loop
    thread: 10-90 ms for a completeness mark at load 3-4)."""
    consolidated = json.loads((store / ".zmetadata").read_text())
    _put_metadata(store, {".zattrs": {**consolidated["metadata"][".zattrs"], **attrs}}, consolidated)


def _kind(var: xr.Variable, blank: bool) -> dict[str, Any] | None:
    """The ``.zarray`` keys of ``var`` that differ from a float64 array's (``zarray``); ``None`` if ``write_layout``
    does not write such a variable. Only ``blank`` float64 arrays (data variables) have ``COMPRESSOR``."""
    if not blank and (var.ndim != 1 or var.size == 0):
        return None
    default = {"compressor": ZARR_DEFAULT.get_config()}
    if var.dtype == np.float64:
        return {} if blank else default
    if var.dtype == np.int64 and not blank:
        return {"dtype": "<i8", "fill_value": None, **default}
    if var.dtype.kind == "U":
        return {"dtype": var.dtype.str, "fill_value": None, **default}
    if var.dtype == object and not blank and all(type(v) is str for v in np.asarray(var.values)):
        return {"dtype": "|O", "fill_value": None, "filters": [_VLEN_UTF8.get_config()], **default}
    return None


def _json_attrs(attrs: Mapping[str, Any]) -> dict[str, Any] | None:
    """``attrs`` as zarr stores them (numpy values as lists and scalars); ``None`` if JSON cannot hold them as
    they are (non-finite floats, other objects)."""
    out = {str(key): value.tolist() if isinstance(value, np.ndarray | np.generic) else value
           for key, value in attrs.items()}
    try:
        json.dumps(out, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return out


_VLEN_UTF8 = numcodecs.VLenUTF8()


def write_region(store: Path, name: str, data: np.ndarray, first: int) -> bool:
    """Write the float64 ``data`` into the runs ``first``, ``first + 1``... of the array ``name`` of the zarr
    format 2 ``store`` (laid out, those runs' chunks not written yet), whole along its other dims, as
    ``write_group`` writes chunks; ``False`` (nothing written) unless the array is one it writes: float64,
    fill value NaN, ``COMPRESSOR``, one run a chunk, the same shape after ``run``."""
    meta = array_metadata(store / name)
    if meta is None or data.dtype != np.float64:
        return False
    zarray = meta[0]
    expected = {"dtype": "<f8", "fill_value": "NaN", "order": "C", "filters": None, "dimension_separator": ".",
                "compressor": COMPRESSOR.get_config(), "zarr_format": 2}
    if any(zarray.get(k) != v for k, v in expected.items()) or zarray["chunks"][0] != 1:
        return False
    if list(data.shape[1:]) != zarray["shape"][1:] or first + data.shape[0] > zarray["shape"][0]:
        return False
    _write_chunks(data, tuple(zarray["chunks"]), store / name, first)
    return True


def lazy_array(folder: Path, shape: tuple[int, ...], chunk: tuple[int, ...], prefix: str = "") -> da.Array:
    """The float64 array of shape ``shape`` that ``write_group`` wrote to ``folder`` in chunks of ``chunk`` (their
    file names after ``prefix``: ``chunk_files``), as a dask array of one block a chunk file (NaN where a chunk file
    is absent), read when computed."""
    name = f"perfkit-part-{os.fspath(folder)}-{prefix}-{os.getpid()}-{next(_LAZY_IDS)}"  # unique: no data hashed
    return da.from_array(_ChunkFiles(folder, shape, chunk, prefix), chunks=chunk, name=name, asarray=False,
                         fancy=False, meta=np.empty((0,) * len(shape)))


class _ChunkFiles:
    """Array-like view of a ``write_group`` array folder for ``da.from_array``: indexed by slices, it reads and
    decompresses the chunk files it covers."""

    def __init__(self, folder: Path, shape: tuple[int, ...], chunk: tuple[int, ...], prefix: str = "") -> None:
        self.folder, self.shape, self.chunk, self.prefix = folder, shape, chunk, prefix
        self.dtype, self.ndim = np.dtype(np.float64), len(shape)

    def __getitem__(self, key: tuple[slice, ...]) -> np.ndarray:
        key = key if isinstance(key, tuple) else (key,)
        bounds = [s.indices(n)[:2] for s, n in zip((*key, *[slice(None)] * (self.ndim - len(key))), self.shape)]
        out = np.full([stop - start for start, stop in bounds], np.nan)
        first = [start // c for (start, _), c in zip(bounds, self.chunk)]
        last = [-(-stop // c) for (_, stop), c in zip(bounds, self.chunk)]
        for index in np.ndindex(*[b - a for a, b in zip(first, last)]):
            at = [a + i for a, i in zip(first, index)]
            path = self.folder / f"{self.prefix}{'.'.join(map(str, at))}"
            if not path.exists():
                continue
            block = np.frombuffer(COMPRESSOR.decode(path.read_bytes()), dtype=np.float64).reshape(self.chunk)
            lo = [max(start, i * c) for (start, _), i, c in zip(bounds, at, self.chunk)]
            hi = [min(stop, (i + 1) * c) for (_, stop), i, c in zip(bounds, at, self.chunk)]
            out[tuple(slice(a - s, b - s) for a, b, (s, _) in zip(lo, hi, bounds))] = \
                block[tuple(slice(a - i * c, b - i * c) for a, b, i, c in zip(lo, hi, at, self.chunk))]
        return out


_LAZY_IDS = itertools.count()


def _write_chunks(data: np.ndarray, chunk: tuple[int, ...], folder: Path, first: int = 0, prefix: str = "") -> None:
    """The chunk files of ``data`` in ``folder`` (their names after ``prefix``): each block of shape ``chunk``
    (padded with NaN at the far edges), compressed; blocks of NaN only are not written. ``first``: the chunk
    index of ``data``'s first block along the first dim."""
    counts = [-(-n // c) for n, c in zip(data.shape, chunk)]
    for index in np.ndindex(*counts):
        block = data[tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, chunk))]
        if np.isnan(block).all():
            continue
        if block.shape != chunk:
            block = np.pad(block, [(0, c - n) for c, n in zip(chunk, block.shape)], constant_values=np.nan)
        key = ".".join(map(str, (index[0] + first, *index[1:])))
        (folder / f"{prefix}{key}").write_bytes(COMPRESSOR.encode(np.ascontiguousarray(block)))
