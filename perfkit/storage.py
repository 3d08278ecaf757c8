"""Lossless storage of canonical Datasets in zarr stores and netCDF-4 files, written all or nothing."""

from __future__ import annotations

import warnings
from contextlib import nullcontext
from os import PathLike
from pathlib import Path

import numpy as np
import xarray as xr

from perfkit import atomic, sparse_traffic
from perfkit.errors import PerfkitFormatError
from perfkit.model import densify, validate
from perfkit.signals import deferred

_TEXT_COORDS = ("function", "call", "kind", "metric", "units", "run", "label", "system", "mode",
                "format", "source", "quantity", "quantity_units", "stat")
#: zarr chunk length along ``run`` of the stores ``convert`` writes, and the runs per chunk ``load`` reads
#: (unless ``chunks`` gives ``run``): lazy analyses reduce a chunk at a time, so memory does not grow with runs.
RUN_CHUNK = 1
#: File name endings of the stores :func:`save` and ``perfkit convert`` write (zarr folders, netCDF files).
STORE_SUFFIXES = (".zarr", ".nc")
#: The completeness mark: a root attribute holding the number of runs, written after everything else.
COMPLETE = "perfkit_complete"


def save(ds: xr.Dataset, path: str | PathLike, *, overwrite: bool = False) -> Path:
    """Write ``ds`` to ``path``: a zarr store if it ends in ``.zarr``, else netCDF-4 (h5netcdf).

    Sparse ``traffic`` (pydata ``sparse``, or dask of sparse blocks as ``load`` returns it) is written
    as pair tables (``perfkit.sparse_traffic``: O(non-zeros), never densified), dense ``traffic`` as
    it is; dask-backed cubes are written chunk by chunk. The
    Dataset is written to a temporary beside ``path``, marked complete, then renamed to ``path``:
    an interrupted save leaves ``path`` as it was. An existing ``path`` is replaced only with
    ``overwrite=True`` (``FileExistsError`` otherwise, before anything is written).
    """
    path = Path(path)
    zarr_store = path.suffix == ".zarr"
    atomic.check_output(path, overwrite=overwrite, store=zarr_store, option="overwrite=True")
    ds = stored(validate(ds))
    with atomic.writing(path) as temp:
        # a stop waits for a store's write (zarr's I/O thread would go on writing into the removed temporary);
        # a netCDF file is written through its open handle: removing it is enough
        with deferred() if zarr_store else nullcontext():
            if zarr_store:
                ds.to_zarr(temp, mode="w", consolidated=True, zarr_format=2, encoding=sparse_traffic.encoding(ds))
            else:
                ds.to_netcdf(temp, engine="h5netcdf", mode="w")
            mark_complete(temp, ds.sizes.get("run", 0), zarr_store=zarr_store)
        atomic.put_in_place(temp, path)
    return path


def stored(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` as written to disk: sparse ``traffic`` as pair tables, any other sparse variable dense."""
    if "traffic" in ds and sparse_traffic.is_sparse(ds["traffic"].data):
        ds = sparse_traffic.encode(ds)
    return densify(ds)


def mark_complete(path: str | PathLike, runs: int, *, zarr_store: bool = True) -> None:
    """Write the completeness mark (``runs``, the number of runs) into the store or file at ``path``, last."""
    if zarr_store:
        import zarr

        zarr.open_group(str(path), mode="r+", zarr_format=2).attrs[COMPLETE] = int(runs)
        zarr.consolidate_metadata(str(path))
    else:
        import h5netcdf

        with h5netcdf.File(path, "a") as handle:
            handle.attrs[COMPLETE] = np.int64(runs)


def load(path: str | PathLike, chunks: dict[str, int] | None = None) -> xr.Dataset:
    """Read a Dataset written by ``save`` or ``perfkit.convert``.

    With ``chunks`` (e.g. ``{"rank": 16384}``; ``{}``: the store's own chunks) the data variables
    are dask arrays read on demand (lazy; coordinates are read at once), ``RUN_CHUNK`` runs per
    chunk unless ``chunks`` gives ``run``. A store without the
    completeness mark, or whose mark disagrees with its number of runs, is refused
    (``PerfkitFormatError``): it was not written to its end.
    """
    path = Path(path)
    if chunks is not None:
        chunks = {"run": RUN_CHUNK, **chunks}
    if path.suffix == ".zarr":
        if not path.exists():
            raise FileNotFoundError(2, "No such file or directory", str(path))
        if not (path / ".zmetadata").exists():
            raise PerfkitFormatError(path, None, "not a complete perfkit store: no consolidated metadata "
                                                 "(.zmetadata), which perfkit writes at its end")
        with warnings.catch_warnings():  # a store written by ``save`` may hold more runs per chunk: split on read
            warnings.filterwarnings("ignore", 'The specified chunks separate the stored chunks along dimension "run"')
            ds = xr.open_zarr(path, consolidated=True, chunks=chunks)
    else:
        ds = xr.open_dataset(path, engine="h5netcdf", chunks=chunks)
    _check_complete(ds, path)
    ds.attrs.pop(COMPLETE)
    if chunks is None:
        ds = sparse_traffic.decode(ds.load())
    else:
        # coordinates are small: in memory, so that selecting by label never computes
        ds = sparse_traffic.decode(ds)
        ds = ds.assign_coords({name: ds[name].variable.load() for name in ds.coords if name not in ds.indexes})
    # text coordinates come back as fixed-width or object strings depending on the engine
    updates = {name: ds[name].astype(object) for name in _TEXT_COORDS if name in ds.coords}
    ds = ds.assign_coords({k: v if v.dims != (k,) else np.asarray(v.values, dtype=object) for k, v in updates.items()})
    return validate(ds)


def _check_complete(ds: xr.Dataset, path: Path) -> None:
    if COMPLETE not in ds.attrs:
        ds.close()
        raise PerfkitFormatError(path, None, f"no completeness mark (attribute {COMPLETE!r}, written last by "
                                             "perfkit.save and perfkit.convert): the store was not written to "
                                             "its end, or not by this perfkit; write it again")
    runs = ds.sizes.get("run", 0)
    if int(ds.attrs[COMPLETE]) != runs:
        ds.close()
        raise PerfkitFormatError(path, None, f"the completeness mark says {int(ds.attrs[COMPLETE])} runs, "
                                             f"the store holds {runs}")
