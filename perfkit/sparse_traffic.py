"""``traffic`` on disk as pair tables (COO): written and read without an N x N array.

A store's sparse traffic is five variables instead of ``traffic``:

* ``traffic_sender``, ``traffic_receiver`` (dim ``nnz``, int32, or int64 beyond 2**31 ranks):
  positions in the ``sender`` / ``receiver`` coordinates;
* ``traffic_value`` (dims ``nnz, quantity``, float64): the pair's bytes [B], count and time [s];
* ``traffic_start``, ``traffic_nnz`` (dim ``run``, int64): where each run's pairs begin and how many.

A run's pairs are sorted by (sender, receiver). A pair is stored when one of its quantities is
finite and non-zero; its other quantities are stored as they are (NaN: not measured). A pair not
stored reads 0 (no message): the fill value of the ``sparse.COO`` it reads back as. A run without
a matrix has no pairs and reads 0 too; the store's warnings say which runs these are.
"""

from __future__ import annotations

from typing import Any

import dask
import dask.array as da
import numpy as np
import xarray as xr

from perfkit.model import TRAFFIC_DIMS

#: The variables holding sparse traffic on disk, in place of ``traffic``.
SPARSE_VARS = ("traffic_sender", "traffic_receiver", "traffic_value", "traffic_start", "traffic_nnz")
PAIR_DIM = "nnz"
#: zarr chunk length along ``nnz`` [pairs] (a chunk of values: 3 x 8 MiB).
PAIR_CHUNK = 2**20


def is_sparse(data: Any) -> bool:
    """Whether an array is pydata-sparse, or a dask array of pydata-sparse blocks."""
    meta = getattr(data, "_meta", data)
    return hasattr(meta, "todense") and not isinstance(meta, np.ndarray) and hasattr(meta, "fill_value")


def pairs(values: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(run, sender, receiver, values (pairs x quantity)) of a (run, sender, receiver, quantity) array.

    ``values`` is numpy, ``sparse.COO`` or dask (computed). Pairs sorted by (run, sender, receiver);
    a pair is kept when one of its quantities is finite and non-zero.
    """
    if hasattr(values, "dask"):
        values = values.compute()
    if isinstance(values, np.ndarray):
        good = (np.isfinite(values) & (values != 0)).any(axis=3)
        run, sender, receiver = np.nonzero(good)
        return run, sender, receiver, np.asarray(values[run, sender, receiver, :], dtype=np.float64)
    import sparse

    coo = values if isinstance(values, sparse.COO) else sparse.COO(values)
    if np.asarray(coo.fill_value) != 0:
        raise ValueError(f"sparse traffic must have fill value 0, got {coo.fill_value}")
    _, n_send, n_recv, n_q = coo.shape
    run, sender, receiver, quantity = coo.coords.astype(np.int64)
    key = (run * n_send + sender) * n_recv + receiver
    data = np.asarray(coo.data, dtype=np.float64)
    kept = np.unique(key[np.isfinite(data) & (data != 0)])
    at = np.minimum(np.searchsorted(kept, key), max(kept.size - 1, 0))
    found = kept[at] == key if kept.size else np.zeros(key.size, bool)
    out = np.zeros((kept.size, n_q))
    out[at[found], quantity[found]] = data[found]
    return kept // (n_send * n_recv), kept // n_recv % n_send, kept % n_recv, out


def encode(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with ``traffic`` replaced by the pair tables (numpy), run by run when it is dask-backed."""
    traffic = ds["traffic"].transpose(*TRAFFIC_DIMS)
    n_runs = traffic.sizes["run"]
    if hasattr(traffic.data, "dask"):
        parts = [pairs(traffic.data[k:k + 1]) for k in range(n_runs)]
        counts = np.array([p[0].size for p in parts], dtype=np.int64)
        sender, receiver, value = (np.concatenate([p[i] for p in parts]) for i in (1, 2, 3))
        value = value.reshape(-1, traffic.sizes["quantity"])
    else:
        run, sender, receiver, value = pairs(traffic.data)
        counts = np.bincount(run, minlength=n_runs).astype(np.int64)
    return ds.drop_vars("traffic").assign(tables(sender, receiver, value, counts, traffic.sizes["sender"]))


def tables(sender: np.ndarray, receiver: np.ndarray, value: np.ndarray, counts: np.ndarray,
           n_ranks: int) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
    """The five pair-table variables from the pairs of every run (in run order) and ``counts`` per run."""
    index = np.int32 if n_ranks < 2**31 else np.int64
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    return {"traffic_sender": ((PAIR_DIM,), np.asarray(sender, dtype=index)),
            "traffic_receiver": ((PAIR_DIM,), np.asarray(receiver, dtype=index)),
            "traffic_value": ((PAIR_DIM, "quantity"), np.asarray(value, dtype=np.float64)),
            "traffic_start": (("run",), starts),
            "traffic_nnz": (("run",), np.asarray(counts, dtype=np.int64))}


def encoding(ds: xr.Dataset) -> dict[str, dict[str, Any]]:
    """zarr chunks of the pair tables: ``PAIR_CHUNK`` pairs."""
    out = {}
    for name in SPARSE_VARS:
        if name in ds and PAIR_DIM in ds[name].dims:
            out[name] = {"chunks": tuple(min(PAIR_CHUNK, n or PAIR_CHUNK) if d == PAIR_DIM else n
                                         for d, n in ds[name].sizes.items())}
    return out


def decode(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with the pair tables turned back into ``traffic``: a ``sparse.COO`` (run, sender,
    receiver, quantity) when they are in memory, else a dask array of one ``sparse.COO`` block per run."""
    if "traffic_value" not in ds:
        return ds
    starts = np.asarray(ds["traffic_start"].values, dtype=np.int64)
    counts = np.asarray(ds["traffic_nnz"].values, dtype=np.int64)
    shape = (ds.sizes["sender"], ds.sizes["receiver"], ds.sizes["quantity"])
    sender, receiver = ds["traffic_sender"].data, ds["traffic_receiver"].data
    value = ds["traffic_value"].transpose(PAIR_DIM, "quantity").data
    if hasattr(value, "dask"):
        blocks = [da.from_delayed(dask.delayed(run_block)(sender[a:a + n], receiver[a:a + n], value[a:a + n], shape),
                                  shape=(1, *shape), dtype=np.float64, meta=_meta())
                  for a, n in zip(starts, counts)]
        traffic: Any = da.concatenate(blocks, axis=0) if blocks else da.zeros((0, *shape), chunks=(1, *shape))
    else:
        run = np.repeat(np.arange(counts.size), counts)
        traffic = coo(run, np.asarray(sender), np.asarray(receiver), np.asarray(value), (counts.size, *shape))
    return ds.drop_vars(list(SPARSE_VARS)).assign(traffic=(TRAFFIC_DIMS, traffic))


def run_block(sender: np.ndarray, receiver: np.ndarray, value: np.ndarray, shape: tuple[int, int, int]) -> Any:
    """One run's pairs as a (1, sender, receiver, quantity) ``sparse.COO``."""
    return coo(np.zeros(len(sender), dtype=np.int64), np.asarray(sender), np.asarray(receiver), np.asarray(value),
               (1, *shape))


def coo(run: np.ndarray, sender: np.ndarray, receiver: np.ndarray, value: np.ndarray, shape: tuple[int, ...]) -> Any:
    """A ``sparse.COO`` of ``shape`` from sorted pairs and their values (pairs x quantity), zeros left out."""
    import sparse

    n_q = shape[-1]
    flat = value.reshape(-1)
    keep = flat != 0
    coords = np.empty((4, flat.size), dtype=np.int64)
    coords[0] = np.repeat(run, n_q)
    coords[1] = np.repeat(sender, n_q)
    coords[2] = np.repeat(receiver, n_q)
    coords[3] = np.tile(np.arange(n_q), len(sender))
    return sparse.COO(coords[:, keep], flat[keep], shape=shape, has_duplicates=False, sorted=True, fill_value=0.0)


def _meta() -> Any:
    import sparse

    return sparse.COO.from_numpy(np.zeros((0, 0, 0, 0)))
