"""Lossless storage of canonical Datasets in zarr stores and netCDF-4 files."""

from __future__ import annotations

from os import PathLike
from pathlib import Path

import numpy as np
import xarray as xr

from perfkit.model import densify, validate

_TEXT_COORDS = ("function", "call", "kind", "metric", "units", "run", "label", "system", "mode",
                "format", "source", "quantity", "quantity_units", "stat")


def save(ds: xr.Dataset, path: str | PathLike) -> Path:
    """Write ``ds`` to ``path``: a zarr store if it ends in ``.zarr``, else netCDF-4 (h5netcdf).

    Sparse variables are written densely; dask-backed cubes are written chunk by chunk.
    """
    path = Path(path)
    ds = densify(validate(ds))
    if path.suffix == ".zarr":
        ds.to_zarr(path, mode="w", consolidated=True, zarr_format=2)
    else:
        ds.to_netcdf(path, engine="h5netcdf", mode="w")
    return path


def load(path: str | PathLike, chunks: dict[str, int] | None = None) -> xr.Dataset:
    """Read a Dataset written by ``save`` or ``perfkit.convert``.

    With ``chunks`` (e.g. ``{"rank": 16384}``; ``{}``: the store's own chunks) the data variables
    are dask arrays read on demand (lazy; coordinates are read at once).
    """
    path = Path(path)
    if path.suffix == ".zarr":
        ds = xr.open_zarr(path, consolidated=True, chunks=chunks)
    else:
        ds = xr.open_dataset(path, engine="h5netcdf", chunks=chunks)
    if chunks is None:
        ds = ds.load()
    else:  # coordinates are small: in memory, so that selecting by label never computes
        ds = ds.assign_coords({name: ds[name].variable.load() for name in ds.coords if name not in ds.indexes})
    # text coordinates come back as fixed-width or object strings depending on the engine
    updates = {name: ds[name].astype(object) for name in _TEXT_COORDS if name in ds.coords}
    ds = ds.assign_coords({k: v if v.dims != (k,) else np.asarray(v.values, dtype=object) for k, v in updates.items()})
    return validate(ds)
