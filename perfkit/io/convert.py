"""``convert``: read many profiles in parallel into one zarr store, one run at a time.

Each file is read by a worker (the active ``dask.distributed`` client's, else a local process
pool, else a thread of this process) and written, compressed and chunked as the store, to its own
temporary zarr group; the worker returns only the group's path and the run's coordinates, opened
lazily here (a small run, up to ``SMALL_RUN`` bytes, comes back in memory, up to
``HELD_SMALL_RUNS`` bytes of them in all; small files are read a few to a task). The union of the
runs' coordinates is then known without holding any large run, and the final store is laid out
with it (all cells NaN: metadata only, no chunk written). A variable of a group whose labels line
up with the store's chunks is moved in by renaming its chunk files (``perfkit.io.convert_chunks``:
no byte rewritten); the others are reindexed and written by region along ``run``, in this process, at most
``BATCH_CELLS`` cells at a time. Peak memory therefore does not grow with the number of runs.
"""

from __future__ import annotations

import ctypes
import gc
import json
import multiprocessing
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures import as_completed as pool_completed
from contextlib import closing, contextmanager
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pandas as pd
import xarray as xr

from perfkit import atomic, sparse_traffic
from perfkit.errors import ContractError, PerfkitFormatError, PerfkitWarning
from perfkit.io import convert_chunks
from perfkit.io.cluster import active_client
from perfkit.io.open import (
    Metadata,
    Refusal,
    expand_paths,
    merge_duplicates,
    metadata_for,
    open_profile,
    refused_files,
    unique_labels,
)
from perfkit.io.registry import FORMATS
from perfkit.model import (
    DENSE_TRAFFIC_LIMIT,
    TEXT_VARIABLES,
    TRAFFIC_DIMS,
    combine_coord_attrs,
    combined_attrs,
    combined_coords,
    read_warnings,
    sparse_traffic_notes,
    text_dtype,
    validate,
    variable_dims,
)
from perfkit.signals import deferred, ignored_by_children
from perfkit.storage import COMPLETE, RUN_CHUNK, load, mark_complete, save, stored

#: Output kinds ``convert`` writes: a zarr store (lazy loading, appending) or a netCDF-4 file.
SUFFIXES = (".zarr", ".nc")
#: zarr chunk length along ``rank``, ``sender`` and ``receiver`` (other dims: whole, ``run``: ``RUN_CHUNK``).
RANK_CHUNK = 4096
#: Runs are written into the store in batches of at most this many cells (float64: 16 MiB).
BATCH_CELLS = 2**21
_RANK_DIMS = ("rank", "sender", "receiver")
#: Partners a rank is assumed to have when sizing batches of runs with sparse traffic.
PARTNERS_PER_RANK = 32
#: A run of at most this many bytes comes back from its worker in memory, not through a temporary part.
SMALL_RUN = 2**20
#: At most this many bytes of such small runs are kept in memory; the following ones go to parts.
HELD_SMALL_RUNS = 2**27
#: On a pool or a cluster, files of at most this many bytes in all are read by one task (a task costs a round
#: trip between processes: 300 mpiP reports of a few kB, one a task, spent more time in them than in reading; and
#: a worker gives its memory back after each task, faulted in again by the next: 16 MPInside files of 16,384 ranks,
#: 4 MB each, on a LocalCluster of 2 took 0.85-0.89 s of the workers' CPU in tasks of 2 files, 0.91-0.99 s alone).
TASK_BYTES = 2**24
#: Bytes of memory a worker needs per byte of a file it parses (a 16,384-rank MPInside file of 4 MB: 9 MB in memory,
#: about 3 times that while parsed), when it decides how many files to read at a time.
PARSE_BYTES = 8
#: A process reads several files at a time, in threads, only when their median size is at least this many bytes:
#: parsing a small file holds the GIL, and two threads of one process took longer than one (100 MPInside files of
#: 300 ranks, 72 kB each: 0.44 s against 0.34 s); larger files gain (1 MB, 4,096 ranks: 0.39 against 0.40 s; 4 MB,
#: 16,384 ranks: 0.35 against 0.44 s). ``open_runs`` likewise read 300-rank files faster in one thread.
THREADED_FROM = 2**20
#: Without a client and ``workers``, a local process pool is started for more files than this (fewer are read in
#: this process's threads: a pool's readers, forked or not, pay a first read's imports and caches each).
LOCAL_POOL_FROM = 20
#: ``Dataset.encoding`` key of a run read from a temporary group: the group's path.
PART = "perfkit_part"
#: ``Dataset.encoding`` key of a run read from a group written flat (``convert_chunks.write_group``): its arrays'
#: metadata, as ``convert_chunks.array_metadata`` would read it from a group's folders (folder -> (``.zarray``, dims)).
PART_ARRAYS = "perfkit_part_arrays"


def convert(
    paths_or_glob: str | PathLike | Iterable[str | PathLike],
    output: str | PathLike,
    format: str | None = None,
    metadata: Metadata = None,
    *,
    errors: str = "raise",
    append: bool = False,
    workers: int | None = None,
    progress: bool | None = None,
    overwrite: bool = False,
) -> Path:
    """Read profiles into one store at ``output`` (``*.zarr`` or ``*.nc``); return its path.

    Files are read in parallel: on the active ``dask.distributed`` client when there is one, else
    in ``workers`` local processes, else in this process's threads, one a core, as ``open_runs``
    (``workers=1``). The default is what was fastest here: one process per core for more than
    ``LOCAL_POOL_FROM`` files (on 2 cores, 300 mpiP reports, whose parsing holds the GIL, read
    faster in processes; MPInside files within 10% either way), else this process. The readers
    are forked from this process when it runs no other thread (the ``perfkit`` command: 10 ms,
    no import), else from a server process that imports perfkit once a process (a notebook's
    first pool pays that, 2 s of CPU); they are kept for the next call of the same size. Each run is
    written as soon as it is read, so memory holds a few runs at most, whatever their number; open
    the result lazily with ``perfkit.load(output, chunks={...})``.
    The store holds what ``perfkit.open_runs`` on the same files returns (same layout, coordinates, warnings):
    the rank axis is the union of the runs' ranks, NaN outside each run's.

    ``append=True`` adds the runs to an existing zarr store (their labels must be new); the
    union of functions, ranks and metrics may grow, the store is then rewritten run by run.
    ``errors`` is ``open_runs``'s policy (``"raise"``, ``"warn"``, ``"skip"``); refused files are
    recorded in the store's ``attrs["refused"]``. ``traffic`` is stored as ``open_runs`` would hold
    it: sparse (when a run's matrix is, or runs x ranks² x quantities exceeds
    ``perfkit.model.DENSE_TRAFFIC_LIMIT``) as pair tables appended run by run
    (``perfkit.sparse_traffic``, O(non-zeros), never densified), else densely per run (chunks of
    ``RANK_CHUNK`` x ``RANK_CHUNK`` ranks). ``progress`` shows a bar (default: more than 20 files),
    a widget in Jupyter and text in a terminal.

    The output is written all or nothing: the new store is written beside ``output`` under a
    temporary name (``.NAME.perfkit-tmp-<pid>``), marked complete, then swapped in; a run that fails
    or is stopped leaves ``output`` as it was (see ``perfkit.atomic``). An existing ``output`` is
    replaced only with ``overwrite=True`` (appending needs none); the output's folder must exist.
    Temporaries of earlier runs that were killed are removed first, with a warning.
    """
    output = Path(output)
    if output.suffix not in SUFFIXES:
        raise ValueError(f"output {str(output)!r} must end in .zarr (a zarr store) or .nc (netCDF-4)")
    if errors not in ("raise", "warn", "skip"):
        raise ValueError(f"errors must be 'raise', 'warn' or 'skip', got {errors!r}")
    if append and output.suffix != ".zarr":
        raise ValueError("runs can only be added to a .zarr store")
    paths = expand_paths(paths_or_glob)
    missing = next((path for path in paths if not path.exists()), None) if errors == "raise" else None
    if missing is not None:
        raise FileNotFoundError(2, "No such file or directory", str(missing))
    removed = atomic.sweep(output.parent)  # first: a store a killed writer moved aside is back in place
    if removed:
        warnings.warn(f"removed {len(removed)} temporary file(s) left by an earlier run that was killed: "
                      f"{', '.join(p.name for p in removed)}", PerfkitWarning, stacklevel=2)
    appending = append and (output.exists() or output.is_symlink())
    atomic.check_output(output, overwrite=overwrite or appending, inputs=paths, store=output.suffix == ".zarr",
                        option="overwrite=True")
    existing = load(output, chunks={}) if appending else None
    labels = unique_labels(paths)
    tasks = [(path, format, {"label": label, **metadata_for(path, metadata)}) for path, label in zip(paths, labels)]
    if existing is not None:
        taken = set(map(str, existing["run"].values)) & {str(meta["label"]) for _, _, meta in tasks}
        if taken:
            raise ContractError(f"runs {sorted(taken)} are already in {output}")
    try:
        with atomic.writing(output, "parts") as work:
            work.mkdir()
            show = len(paths) > 20 if progress is None else progress
            results = _read_all(tasks, work, errors, workers, show)
            refused = [r for r in results if isinstance(r, Refusal)]
            runs = merge_duplicates([r for r in results if not isinstance(r, Refusal)])
            if not runs and existing is None:
                raise refused[0].error
            sources = [existing, *runs] if existing is not None else runs
            attrs = _store_attrs(existing, runs, refused)
            if output.suffix == ".nc":
                save(load(write_runs(sources, work / "study.zarr", attrs, progress=show), chunks={}), output,
                     overwrite=True)
            else:
                with atomic.writing(output) as store:
                    write_runs(sources, store, attrs, progress=show)
                    atomic.put_in_place(store, output)
            atomic.remove(work)
    except Exception as exc:
        exc.add_note(f"{output} {'left as it was' if appending or output.exists() else 'not written'}")
        raise
    if refused and errors == "warn":
        lines = "\n".join(f"  {r.error}" for r in refused)
        warnings.warn(f"{len(refused)} of {len(results)} files could not be read and were left out of {output}:"
                      f"\n{lines}", PerfkitWarning, stacklevel=2)
    return output


def _store_attrs(existing: xr.Dataset | None, runs: Sequence[xr.Dataset], refused: Sequence[Refusal]) -> dict[str, Any]:
    """Attributes of the store: shared attrs, provenance, warnings and refused files (old ones kept)."""
    attrs = combined_attrs(runs) if runs else {}
    if existing is not None:
        attrs = {**combined_attrs([existing, *runs]), "warnings": json.dumps(
            [*read_warnings(existing), *json.loads(attrs.get("warnings", "[]"))])}
        attrs.pop("refused", None)
    listed = [*(refused_files(existing) if existing is not None else []), *(r.as_dict() for r in refused)]
    if listed:
        attrs["refused"] = json.dumps(listed)
    return attrs


@dataclass(frozen=True)
class Written:
    """A run a reader wrote to the temporary zarr group ``part``: what comes back from a worker instead of
    the run (a path, and the run without its data variables: coordinates and attributes)."""

    part: str
    shell: xr.Dataset
    #: Variables ``convert_chunks.write_group`` wrote flat (chunk files only): name -> (dims, shape, chunk shape,
    #: attributes); ``None`` when the group was written by xarray.
    arrays: dict[str, tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...], dict[str, Any]]] | None = None

    def opened(self) -> xr.Dataset:
        """The run, its data variables read lazily from the group."""
        if self.arrays is not None:  # known: no metadata read (none was written)
            arrays = {}
            for name, (dims, shape, chunk, attrs) in self.arrays.items():
                folder, prefix = convert_chunks.chunk_files(Path(self.part), name, True)
                arrays[name] = (dims, convert_chunks.lazy_array(folder, shape, chunk, prefix), attrs)
            lazy = self.shell.assign(arrays)
            lazy.encoding[PART_ARRAYS] = {
                Path(self.part) / name: (convert_chunks.zarray(shape, chunk), list(dims))
                for name, (dims, shape, chunk, _) in self.arrays.items()}
        else:
            lazy = xr.open_zarr(self.part, consolidated=True, chunks={})
            lazy = sparse_traffic.decode(lazy.assign_coords(self.shell.coords).assign_attrs(self.shell.attrs))
        lazy.encoding[PART] = self.part
        return lazy


def read_part(path: Path, format: str | None, meta: dict[str, Any], part: Path,
              errors: str) -> xr.Dataset | Written | Refusal:
    """Read one profile in a worker process; a run of at most ``SMALL_RUN`` bytes is returned in memory,
    a larger one is written to the zarr group ``part`` (``Written``), then what the read left is freed
    (``_collected``), so that a worker stays at the size of one run.

    With ``errors`` other than ``"raise"`` a file that cannot be read gives a ``Refusal``.
    """
    with _collected() as large:
        with _heap_reused():
            result = _read(path, format, meta, part, errors)
        if isinstance(result, Written):
            large.append(True)
    return result


def _read(path: Path, format: str | None, meta: dict[str, Any], part: Path,
          errors: str) -> xr.Dataset | Written | Refusal:
    """``read_part`` without freeing memory."""
    try:
        ds = open_profile(path, format, **meta)
    except (PerfkitFormatError, OSError) as exc:
        if errors == "raise":
            raise
        return Refusal(str(path), exc)
    return ds if ds.nbytes <= SMALL_RUN else write_part(ds, part)


def write_part(ds: xr.Dataset, part: Path) -> Written:
    """``ds``'s data variables written to the temporary zarr group ``part``, compressed and chunked as the
    store (so that their chunk files can be moved into it)."""
    ds = stored(validate(ds))
    data = ds.drop_vars(list(ds.coords)).drop_attrs(deep=False)  # the coordinates stay in memory
    if convert_chunks.writable(data):
        chunks = convert_chunks.write_group(data, part, dict.fromkeys(_RANK_DIMS, RANK_CHUNK), flat=True)
        return Written(str(part), ds.drop_vars(list(ds.data_vars)), {
            name: (var.dims, var.shape, chunks[name], dict(var.attrs))
            for name, var in ((str(n), v) for n, v in data.data_vars.items())})
    encoding = _encoding(data, {name: {"chunks": tuple(min(n, RANK_CHUNK) if dim in _RANK_DIMS else n
                                                       for dim, n in var.sizes.items())}
                                for name, var in data.data_vars.items()})
    with deferred():
        data.to_zarr(part, mode="w", consolidated=True, zarr_format=2, encoding=encoding)
    return Written(str(part), ds.drop_vars(list(ds.data_vars)))


def to_part(ds: xr.Dataset, part: Path) -> xr.Dataset:
    """``ds`` written to the temporary zarr group ``part`` (``write_part``), returned with its data variables
    read lazily from there (its coordinates and attributes in memory, as they were)."""
    return write_part(ds, part).opened()


def _encoding(ds: xr.Dataset, encoding: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``encoding`` with the pair tables' chunks and ``convert_chunks.COMPRESSOR`` for float64 variables, as in
    the runs' groups (so that their chunks can be moved into the store)."""
    out = {name: dict(encoding.get(name, {})) for name in ds.data_vars}
    for name, pairs in sparse_traffic.encoding(ds).items():
        out[name].update(pairs)
    for name, var in ds.data_vars.items():
        if var.dtype == np.float64:
            out[name]["compressors"] = (convert_chunks.COMPRESSOR,)
    return {name: value for name, value in out.items() if value}


@contextmanager
def _frozen() -> Iterator[None]:
    """The objects alive before the block are frozen meanwhile (``gc.freeze``), so that a collection
    (``_free``) walks only the block's: a full one walks every object of the process (0.26 s after
    perfkit's imports here, as long as parsing a 40,000-rank run)."""
    freeze = gc.get_freeze_count() == 0  # someone else's freeze is left alone
    if freeze:
        gc.freeze()
    try:
        yield
    finally:
        if freeze:
            gc.unfreeze()


#: A process gives the memory its reads freed back to the operating system once its resident memory has grown by
#: more than this many bytes since it last did: below, the next read reuses it instead of faulting it in again (a
#: 16,384-rank MPInside file, about 25 MB parsed: 5,300-6,400 minor faults in a worker that gave it back after each
#: task, 1,400-1,900 in one that kept it); above (a 40,000-rank run: about 100 MiB), it is given back after each.
KEEP_FREED = 2**26


def _free() -> None:
    """Free what is no longer referenced (cycles included; inside ``_frozen``, so that only the block's objects
    are walked), then give the freed memory back to the operating system (glibc keeps it otherwise) if the
    process has grown by more than ``KEEP_FREED`` bytes since it last did (or since it was smallest)."""
    gc.collect()
    libc, resident = _glibc(), _resident()
    if libc is None:
        return
    if resident is not None and _SMALLEST and resident - _SMALLEST[0] <= KEEP_FREED:
        _SMALLEST[0] = min(_SMALLEST[0], resident)  # kept for the next read
        return
    libc.malloc_trim(0)
    after = _resident()
    _SMALLEST[:] = [] if after is None else [after]


#: Resident bytes of this process after it last gave memory back (or the least seen since), empty before.
_SMALLEST: list[int] = []


def _resident() -> int | None:
    """Resident bytes of this process (``/proc/self/statm``), ``None`` where that cannot be read."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _glibc() -> Any:
    """The C library if it is glibc, else ``None``."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


#: glibc's ``mallopt`` parameters, its largest mmap threshold on 64 bits and its smallest (the default).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _MMAP_MOST, _MMAP_LEAST = -1, -3, 2**25, 2**17


@contextmanager
def _heap_reused() -> Iterator[None]:
    """In a process started with ``MALLOC_TRIM_THRESHOLD_`` (dask's nanny sets 65,536 for its workers), glibc
    maps every block of 128 KiB or more afresh and unmaps it when freed, so each of a parser's temporaries
    faults its pages in again: reading a 40,000-rank MPInside run took 0.6-1.2 s in such a worker against 0.25-0.4 s
    here. Inside the block, blocks up to 32 MiB come from the heap and it is not trimmed; the process's
    settings are restored after (``_free`` then gives the memory back)."""
    trim, libc = os.environ.get("MALLOC_TRIM_THRESHOLD_"), _glibc()
    if trim is None or libc is None:  # glibc's own dynamic thresholds already reuse the heap
        yield
        return
    libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_MOST)
    libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1)
    try:
        yield
    finally:
        libc.mallopt(_M_TRIM_THRESHOLD, int(trim))
        libc.mallopt(_M_MMAP_THRESHOLD, int(os.environ.get("MALLOC_MMAP_THRESHOLD_", _MMAP_LEAST)))


@contextmanager
def _collected() -> Iterator[list[bool]]:
    """Once something is appended to the list it gives, free what the block left (``_free``) at its end;
    the objects alive before it frozen meanwhile (``_frozen``)."""
    release: list[bool] = []
    with _frozen():
        try:
            yield release
        finally:
            if release:
                _free()


def _read_all(tasks: Sequence[tuple[Path, str | None, dict[str, Any]]], work: Path, errors: str,
              workers: int | None, show: bool) -> list[xr.Dataset | Refusal]:
    """``read_part`` of every task, in parallel; results in task order, runs written to groups opened lazily."""
    calls = [(path, fmt, meta, work / f"{k}.zarr", errors) for k, (path, fmt, meta) in enumerate(tasks)]
    results: list[Any] = [None] * len(calls)
    held = 0  # bytes of small runs kept in memory; beyond HELD_SMALL_RUNS they go to parts too
    client = active_client()
    n = _local_workers(len(calls), workers)
    threads = client is None and n <= 1
    if client is not None:
        source = _on_client(calls, client)
    elif threads:
        source = _in_threads(calls)
    else:  # the pool's readers started here, before the progress bar's thread
        source = _pool_results(_submitted(calls, n))
    with closing(source) as completed:  # closed at once on error: no read goes on
        for k, result in _progress(completed, len(calls), show, "reading"):
            if isinstance(result, Written) and not threads:  # while the workers read on
                result = result.opened()
            elif isinstance(result, xr.Dataset) and not _is_lazy(result):
                size = result.nbytes
                held += size
                if held > HELD_SMALL_RUNS:
                    result = write_part(result, calls[k][3])
                    held -= size
            results[k] = result
    # in threads, opened once every read has ended: zarr's calls wait for its event loop's thread, which
    # readers holding the GIL held up (40 ms a run, against 6 ms after)
    return [result.opened() if isinstance(result, Written) else result for result in results]


def _is_lazy(ds: xr.Dataset) -> bool:
    variables = ds.variables  # not ds.data_vars' values: no DataArray built
    return any(hasattr(variables[name].data, "dask") for name in ds.data_vars)


def _on_client(calls: Sequence[tuple[Any, ...]], client: Any) -> Iterator[tuple[int, Any]]:
    """(task index, result) as the distributed ``client``'s tasks complete (small files a few to a task)."""
    from distributed import as_completed

    workers = client.scheduler_info().get("workers", {})
    slots = sum(w.get("nthreads", 1) for w in workers.values())
    largest = max((_size(call[0]) for call in calls), default=0)
    threads = _parse_threads(calls, lambda: _threads_per_slot(client, workers, largest))
    groups = _grouped(calls, max(slots, 1), threads)
    futures = client.map(read_parts, [[calls[k] for k in group] for group in groups], [threads] * len(groups),
                         pure=False)  # one message
    index = {future.key: group for future, group in zip(futures, groups)}
    try:  # results fetched as tasks end, not one round trip after another
        for future, results in as_completed(futures, with_results=True):
            yield from zip(index[future.key], results)
    finally:
        client.cancel(futures)


def _submitted(calls: Sequence[tuple[Any, ...]], n: int) -> dict[Any, list[int]]:
    """The calls submitted to the local pool of ``n`` readers (small files a few to a task): future -> positions.
    Called before anything of this call starts a thread (the progress bar's monitor), so that the readers can be
    forked (``start_method``)."""
    with ignored_by_children():  # the readers are started by the first submits; this process stops them
        pool = _local_pool(n)
        return {pool.submit(read_parts, [calls[k] for k in group]): group for group in _grouped(calls, n)}


def _pool_results(pending: dict[Any, list[int]]) -> Iterator[tuple[int, Any]]:
    """(task index, result) of the local pool's ``pending`` tasks as they complete; on error or stop the tasks not
    started are cancelled and the readers shut down."""
    done = False
    try:
        for future in pool_completed(pending):
            yield from zip(pending[future], future.result())
        done = True
    finally:
        for future in pending:
            future.cancel()
        if not done:  # an error, or a stop: the readers are shut down (after the reads under way)
            _drop_pool()


def read_parts(calls: Sequence[tuple[Any, ...]], threads: int = 1) -> list[xr.Dataset | Written | Refusal]:
    """``read_part`` of each call, in a worker process; with ``threads`` > 1, that many files at a time in threads
    of the worker (parsing and compression release the GIL), what they left freed at the end."""
    if threads <= 1 or len(calls) <= 1:
        return [read_part(*call) for call in calls]
    with _collected() as large, _heap_reused(), ThreadPoolExecutor(min(threads, len(calls))) as pool:
        results = list(pool.map(lambda call: _read(*call), calls))
        large.append(True)
    return results


def _threads_per_slot(client: Any, workers: dict[str, dict[str, Any]], largest: int) -> int:
    """Files a task of the distributed ``client`` reads at a time: the cores its workers' hosts have per worker
    thread (a cluster of fewer single-threaded workers than cores leaves the others idle otherwise), at least 1,
    at most what each worker's memory limit holds of ``largest``-byte files being parsed (``PARSE_BYTES`` a
    byte)."""
    if not workers:
        return 1
    key = (id(client), frozenset(workers))
    if not _CORES or _CORES[0][0] != key:  # asked once for a set of workers (a round trip)
        _CORES[:] = [(key, _worker_cores(client))]
    cores = _CORES[0][1]
    by_host: dict[str, list[str]] = {}
    for address, info in workers.items():
        by_host.setdefault(info.get("host", address), []).append(address)
    spare = min(max(cores.get(a, 1) for a in addresses) // sum(workers[a].get("nthreads", 1) for a in addresses)
                for addresses in by_host.values())
    memory = min((info["memory_limit"] for info in workers.values() if info.get("memory_limit")), default=0)
    if memory and largest:
        spare = min(spare, memory // (PARSE_BYTES * largest))
    return max(1, spare)


def _worker_cores(client: Any) -> dict[str, int]:
    """Cores each worker of ``client`` may run on (its affinity: what a batch job was given), by address."""
    if hasattr(os, "sched_getaffinity"):
        return {address: len(cores) for address, cores in client.run(os.sched_getaffinity, 0).items()}
    return client.run(os.cpu_count)


#: The cores of the last distributed client's workers: [((id of the client, worker addresses), address -> cores)].
_CORES: list[tuple[tuple[int, frozenset[str]], dict[str, int]]] = []


def _size(path: Path) -> int:
    """Bytes of ``path``, 0 if it cannot be read (its task refuses it or raises)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _grouped(calls: Sequence[tuple[Any, ...]], slots: int, threads: int = 1) -> list[list[int]]:
    """Positions of ``calls`` by task: consecutive files of at most ``TASK_BYTES`` in all, at most a quarter of
    an even share of ``slots`` workers (so that their loads stay balanced); a larger file alone. A task read in
    ``threads`` threads takes ``threads`` times as many (at least ``threads`` files)."""
    most = max(threads, -(-len(calls) // (4 * slots)))
    groups: list[list[int]] = []
    size = 0
    for k, call in enumerate(calls):
        bytes_ = _size(call[0])
        if not groups or size + bytes_ > TASK_BYTES * threads or len(groups[-1]) >= most:
            groups.append([])
            size = 0
        groups[-1].append(k)
        size += bytes_
    return groups


def _local_workers(files: int, workers: int | None) -> int:
    """Processes of the local pool reading ``files`` files (1: this process)."""
    return min(files, workers or (os.cpu_count() or 1 if files > LOCAL_POOL_FROM else 1))


def _parse_threads(calls: Sequence[tuple[Any, ...]], most: Callable[[], int]) -> int:
    """Files a process reads at a time: ``most()`` if the files' median size is at least ``THREADED_FROM``, else 1
    (``most`` not called)."""
    sizes = sorted(_size(call[0]) for call in calls)
    return most() if sizes and sizes[len(sizes) // 2] >= THREADED_FROM else 1


def _in_threads(calls: Sequence[tuple[Any, ...]]) -> Iterator[tuple[int, Any]]:
    """(task index, result) as reads complete in this process: one thread a core, as ``open_runs``, for files of
    ``THREADED_FROM`` bytes and more (their parsing and compression release the GIL for a part: 16 runs of 16,384
    ranks read in 0.8 s on 2 cores against 1.45 s one after another), else one thread; what a run left is freed at
    the end. On error or stop the reads under way end first."""
    with _frozen(), ThreadPoolExecutor(_parse_threads(calls, lambda: min(len(calls), os.cpu_count() or 1))) as pool:
        pending = {pool.submit(_read, *call): k for k, call in enumerate(calls)}
        try:
            for future in pool_completed(pending):
                yield pending[future], future.result()
        finally:
            for future in pending:
                future.cancel()
        _free()


#: The local pool of reader processes, (size, pool), kept for the next call.
_POOL: list[tuple[int, ProcessPoolExecutor]] = []


def start_method() -> str:
    """How the local pool starts its readers: ``"fork"`` when this process runs no thread but its main one (a
    reader is then a copy of this process, perfkit imported: 10 ms, where a spawned reader starts an interpreter
    and imports perfkit, 1.6-1.8 s of CPU each here), else ``"forkserver"`` with this module preloaded (a fork
    while other threads run may copy a lock one of them holds; the server, started once a process, imports perfkit
    once, with the readers' modules, and forks each reader from that), else ``"spawn"`` (platforms without fork)."""
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and sys.platform == "linux" and threading.active_count() == 1:
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


def reader_modules() -> list[str]:
    """This module and the formats' readers: what a reader process imports on its first read (1.6-1.8 s of CPU
    here). A local pool's forkserver imports them once; a cluster's workers can import them as they start:
    ``LocalCluster(..., preload=reader_modules())`` (``preload`` of ``distributed`` workers)."""
    return [__name__, *sorted({fmt.module for fmt in FORMATS.values()})]

def _local_pool(n: int) -> ProcessPoolExecutor:
    """The kept pool if it has ``n`` processes, else a new one (the old one shut down), its readers started at
    once (``start_method``)."""
    if _POOL and _POOL[0][0] == n:
        return _POOL[0][1]
    _drop_pool()
    method = start_method()
    context = multiprocessing.get_context(method)
    if method == "forkserver":  # the readers' modules too, imported on a first read otherwise (by each reader)
        context.set_forkserver_preload(reader_modules())
    pool = ProcessPoolExecutor(n, mp_context=context)
    _POOL.append((n, pool))
    return pool


def _drop_pool() -> None:
    """Shut the kept pool down (its processes end once their reads under way are done)."""
    while _POOL:
        _POOL.pop()[1].shutdown(wait=True, cancel_futures=True)


def _progress(items: Iterable[Any], total: int, show: bool, desc: str, unit: str = "file") -> Iterator[Any]:
    if not show:
        yield from items
        return
    from tqdm.auto import tqdm

    with tqdm(total=total, desc=desc, unit=unit) as bar:
        for item in items:
            yield item
            bar.update()


def write_runs(sources: Sequence[xr.Dataset], target: Path, attrs: dict[str, Any], *, progress: bool = False) -> Path:
    """Write the combination of ``sources`` along ``run`` to the zarr store ``target``, a batch of runs at a time.

    The store is first laid out (coordinates written, every cell NaN); a run's variable that lines up
    with the store's chunks in its temporary group is moved in (``convert_chunks``), any other is
    reindexed to the union of labels and written into its region along ``run``.
    """
    coords = combined_coords(sources)
    dims_of = variable_dims(sources)
    sizes = {dim: len(coords[dim]) for dims in dims_of.values() for dim in dims[1:]}
    chunks = {"run": RUN_CHUNK, **{dim: min(n, RANK_CHUNK) if dim in _RANK_DIMS else n for dim, n in sizes.items()}}
    n_runs = len(coords["run"])
    pairs = "traffic" in dims_of and _sparse_store(sources, n_runs, sizes)
    if pairs:
        del dims_of["traffic"]
        attrs = {**attrs, "warnings": json.dumps([*json.loads(attrs.get("warnings", "[]")),
                                                  *sparse_traffic_notes(sources, coords["quantity"])])}
    dtypes = {name: text_dtype(s[name] for s in sources if name in s) if name in TEXT_VARIABLES
              else np.dtype(np.float64) for name in dims_of}
    template = {name: (dims, _nothing((n_runs, *(sizes[d] for d in dims[1:])), dtypes[name]))
                for name, dims in dims_of.items()}
    if pairs:
        template.update(_empty_pairs(n_runs, sizes["sender"], sizes["quantity"]))
    layout = validate(combine_coord_attrs(xr.Dataset(template, coords=coords, attrs=attrs), sources))
    blank = [name for name in dims_of if dtypes[name] == np.float64]  # their metadata only, as xarray would write it
    encoded, group_attrs = xr.conventions.encode_dataset_coordinates(layout)  # (the "coordinates" attribute)
    with deferred():  # text variables: every chunk is the fill value, none is written
        if pairs or not convert_chunks.write_layout(target, encoded, group_attrs, {
                name: tuple(chunks[d] for d in dims) for name, dims in dims_of.items()}):
            _write_layout(layout, target, dims_of, chunks, blank, encoded)
    index = {dim: pd.Index(coords[dim]) for dims in dims_of.values() for dim in dims[1:]}  # the union's labels, once
    with deferred():
        moved = _move_aligned(sources, target, index, dims_of, chunks)
    cells = {name: int(np.prod([sizes[d] for d in dims[1:]])) for name, dims in dims_of.items()}
    if pairs:  # a run's pairs are not known before they are read: counted as PARTNERS_PER_RANK a rank
        cells["traffic"] = PARTNERS_PER_RANK * sizes["sender"] * sizes["quantity"]

    def to_write(position: int, run: xr.Dataset) -> tuple[str, ...]:
        # what a run lacks is NaN in the laid-out store already; text is written ("" where unknown)
        return tuple(name for name in dims_of if name not in moved.get(position, ())
                     and (name in run.data_vars or name in TEXT_VARIABLES))

    batches = [batch for batch in _batches(sources, cells, to_write, pairs) if batch[2] or pairs]
    written = 0  # pairs in the store
    # here, not on a cluster: one batch in memory, no transfers; threads of our own, so that an interrupted
    # write waits for the chunks being written (none is written after this returns or raises)
    pool = ThreadPoolExecutor(os.cpu_count() or 1)
    try:
        with dask.config.set(scheduler="threads", pool=pool):
            for start, parts, names in _progress(batches, len(batches), progress, "writing", "batch"):
                some = {name: dims_of[name] for name in names}
                if not names:  # every variable moved: only the pair tables' offsets
                    block = xr.Dataset()
                elif any(_is_lazy(part) for part in parts):
                    block = xr.concat([_aligned(part, coords, some, dtypes, chunks) for part in parts], dim="run",
                                      join="exact")
                    block = block.chunk({dim: chunks[dim] for dim in block.dims})
                else:  # small runs held in memory
                    block = _filled(parts, index, some, dtypes)
                tables = _run_pairs(parts, coords, written) if pairs else xr.Dataset()
                with deferred():
                    if pairs:  # the runs' pairs appended along nnz, their offsets written with the runs
                        tables.drop_dims("run").assign_attrs(layout.attrs).to_zarr(  # (attrs: kept, not emptied)
                            target, append_dim=sparse_traffic.PAIR_DIM, zarr_format=2)
                        block = block.assign(tables.drop_dims(sparse_traffic.PAIR_DIM).data_vars)
                        written += tables.sizes[sparse_traffic.PAIR_DIM]
                    if not _is_lazy(block):  # float64 arrays' chunks compressed and written here, not by zarr
                        block = block.drop_vars([name for name, var in block.data_vars.items()
                                                 if convert_chunks.write_region(target, str(name), var.values, start)])
                    if block.data_vars:
                        block.to_zarr(target, region={"run": slice(start, start + len(parts))}, zarr_format=2)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    with deferred():  # the completeness mark, last; pair tables appended: their shapes consolidated again
        if pairs:
            mark_complete(target, n_runs)
        else:
            convert_chunks.add_attrs(target, {COMPLETE: n_runs})
    return target


def _write_layout(layout: xr.Dataset, target: Path, dims_of: dict[str, tuple[str, ...]], chunks: dict[str, int],
                  blank: Sequence[str], encoded: dict[str, xr.Variable]) -> None:
    """The store's layout written through xarray and zarr (what ``convert_chunks.write_layout`` does not write: pair
    tables, other dtypes), the float64 ``blank`` variables' metadata only."""
    layout.drop_vars(blank).to_zarr(target, mode="w", consolidated=True, zarr_format=2, write_empty_chunks=False,
                                    encoding=_encoding(layout.drop_vars(blank), {
                                        name: {"chunks": tuple(chunks[d] for d in dims)}
                                        for name, dims in dims_of.items() if name not in blank}))
    convert_chunks.add_blank_arrays(target, {
        name: (layout[name].shape, tuple(chunks[d] for d in dims_of[name]),
               {"_ARRAY_DIMENSIONS": list(dims_of[name]), **encoded[name].attrs}) for name in blank})


def _move_aligned(sources: Sequence[xr.Dataset], target: Path, labels: dict[str, pd.Index],
                  dims_of: dict[str, tuple[str, ...]], chunks: dict[str, int]) -> dict[int, set[str]]:
    """Move into ``target`` (whose labels along each dim but ``run`` are ``labels``) the variables of runs read to
    temporary groups that line up with its chunks; the names moved, by run position in the store."""
    moved: dict[int, set[str]] = {}
    position = 0
    # the store's arrays' metadata read once, not once a run
    stores = {target / name: convert_chunks.array_metadata(target / name) for name in dims_of}
    for source in sources:
        part = source.encoding.get(PART)
        if part is not None and source.sizes["run"] == 1:
            known = {**stores, **source.encoding.get(PART_ARRAYS, {})}
            for name in source.data_vars:
                if name not in dims_of:
                    continue
                offsets = convert_chunks.chunk_offsets(source, labels, dims_of[name], chunks)
                if offsets is not None and convert_chunks.move(Path(part), target, str(name), position, offsets,
                                                               known, flat=PART_ARRAYS in source.encoding):
                    moved.setdefault(position, set()).add(str(name))
        position += source.sizes["run"]
    return moved


def _sparse_store(sources: Sequence[xr.Dataset], n_runs: int, sizes: dict[str, int]) -> bool:
    """Whether the store's traffic is sparse: ``combine_runs``'s rule (a sparse run, or too many elements)."""
    elements = n_runs * sizes["sender"] * sizes["receiver"] * sizes["quantity"]
    return elements > DENSE_TRAFFIC_LIMIT or any(
        sparse_traffic.is_sparse(s["traffic"].data) for s in sources if "traffic" in s)


def _empty_pairs(n_runs: int, n_ranks: int, n_quantities: int) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
    """The pair tables with no pair yet (appended batch by batch), their per-run offsets 0."""
    empty = np.empty(0, dtype=np.int64)
    return sparse_traffic.tables(empty, empty, np.empty((0, n_quantities)), np.zeros(n_runs, dtype=np.int64), n_ranks)


def _run_pairs(runs: Sequence[xr.Dataset], coords: dict[str, Any], first: int) -> xr.Dataset:
    """The pair tables of one-run Datasets, senders and receivers as positions in the union ``coords``,
    their first pair at position ``first`` of the store's pairs."""
    ranks, quantities = pd.Index(coords["sender"]), pd.Index(coords["quantity"])
    senders, receivers, values, counts = [np.empty(0, np.int64)], [np.empty(0, np.int64)], [], []
    for run in runs:
        if "traffic" not in run:
            counts.append(0)
            continue
        traffic = run["traffic"].transpose(*TRAFFIC_DIMS)
        _, sender, receiver, value = sparse_traffic.pairs(traffic.data)
        sender = ranks.get_indexer(traffic["sender"].values)[sender]
        receiver = ranks.get_indexer(traffic["receiver"].values)[receiver]
        order = np.lexsort((receiver, sender))  # positions in the union need not keep the run's order
        full = np.zeros((order.size, len(quantities)))  # a quantity the run lacks reads 0, as in combine_runs
        full[:, quantities.get_indexer(traffic["quantity"].values)] = value[order]
        senders.append(sender[order])
        receivers.append(receiver[order])
        values.append(full)
        counts.append(order.size)
    out = sparse_traffic.tables(np.concatenate(senders), np.concatenate(receivers),
                                np.concatenate([np.empty((0, len(quantities))), *values]),
                                np.asarray(counts, dtype=np.int64), len(ranks))
    out["traffic_start"] = (("run",), out["traffic_start"][1] + first)
    return xr.Dataset(out)


def _batches(sources: Sequence[xr.Dataset], cells: dict[str, int],
             to_write: Callable[[int, xr.Dataset], tuple[str, ...]],
             pairs: bool) -> Iterator[tuple[int, list[xr.Dataset], tuple[str, ...]]]:
    """(first run position, one-run Datasets, the variables to write) in store order: consecutive runs
    whose variables ``to_write(position, run)`` are the same, at most ``BATCH_CELLS`` cells a batch
    (``pairs``: the runs' sparse traffic counted too)."""
    start, batch, size, names, position = 0, [], 0, (), 0
    for source in sources:
        for j in range(source.sizes["run"]):
            run_names = to_write(position, source)
            per_run = sum(cells[name] for name in run_names) + (cells["traffic"] if pairs and "traffic" in source
                                                                 else 0)
            if batch and (run_names != names or size + per_run > BATCH_CELLS):
                yield start, batch, names
                start, batch, size = position, [], 0
            names = run_names
            batch.append(source if source.sizes["run"] == 1 else source.isel(run=slice(j, j + 1)))
            size += per_run
            position += 1
    if batch:
        yield start, batch, names


def _filled(runs: Sequence[xr.Dataset], index: dict[str, pd.Index], dims_of: dict[str, tuple[str, ...]],
            dtypes: dict[str, np.dtype]) -> xr.Dataset:
    """In-memory one-run Datasets' ``dims_of`` variables on the union labels ``index`` (by dim), stacked along
    ``run``, without coordinates (NaN, or "" for text, where a run has none): numpy index arithmetic, one copy
    of each run; a run's positions along a dim found once for all its variables."""
    positions: list[dict[str, np.ndarray]] = [{} for _ in runs]

    def at(k: int, dim: str) -> np.ndarray:
        if dim not in positions[k]:
            variables = runs[k].variables
            positions[k][dim] = (index[dim].get_indexer(variables[dim].values) if dim in variables
                                 else np.arange(runs[k].sizes[dim]))
        return positions[k][dim]

    out = {}
    for name, dims in dims_of.items():
        data = np.full((len(runs), *(len(index[dim]) for dim in dims[1:])), "" if name in TEXT_VARIABLES else np.nan,
                       dtype=dtypes[name])
        for k, run in enumerate(runs):
            variables = run.variables  # not run[...]: no DataArray built
            if name in variables:
                data[np.ix_([k], *(at(k, dim) for dim in dims[1:]))] = np.asarray(variables[name].values,
                                                                                  dtype=dtypes[name])
        out[name] = (dims, data)
    return xr.Dataset(out)


def _aligned(run: xr.Dataset, coords: dict[str, Any], dims_of: dict[str, tuple[str, ...]],
             dtypes: dict[str, np.dtype], chunks: dict[str, int]) -> xr.Dataset:
    """One run's data variables on the union labels, without coordinates, as ``dtypes`` (NaN, or "" for text,
    where it has none)."""
    run = run.drop_vars([name for name in run.data_vars if name not in dims_of])  # sparse traffic: pair tables
    unlabelled = {dim: np.arange(run.sizes[dim]) for dim in run.dims if dim not in run.indexes}  # by position
    index = {dim: coords[dim] for dim in run.dims if dim != "run"}
    fill = {name: "" if name in TEXT_VARIABLES else np.nan for name in run.data_vars}
    data = run.assign_coords(unlabelled).reindex(index, fill_value=fill)
    data = data.drop_vars(list(data.coords))
    data = data.assign({name: var.astype(dtypes[name]) for name, var in data.data_vars.items()})
    for name, dims in dims_of.items():
        if name not in data:
            shape = tuple(1 if d == "run" else len(coords[d]) for d in dims)
            data[name] = (dims, _blank(shape, dtypes[name], tuple(min(chunks[d], n) for d, n in zip(dims, shape))))
    return data


def _nothing(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A read-only array of ``shape`` holding "no value" ("" for text, else NaN) in one element's memory: the layout's
    variables, laid out without a dask graph (whose finalisation imports dask.distributed: 1.6-2 s of a first
    ``convert`` in a process)."""
    return np.broadcast_to(np.array("" if dtype.kind == "U" else np.nan, dtype=dtype), shape)


def _blank(shape: tuple[int, ...], dtype: np.dtype, chunks: tuple[int, ...]) -> da.Array:
    """A dask array of ``shape`` holding "no value": "" for text, else NaN."""
    return da.full(shape, "" if dtype.kind == "U" else np.nan, dtype=dtype, chunks=chunks)
