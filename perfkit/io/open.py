"""Public entry points: ``open_profile`` (one run) and ``open_runs`` (many runs, via dask)."""

from __future__ import annotations

import glob as globlib
import json
import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any

import dask
import dask.threaded
import numpy as np
import xarray as xr

from perfkit.errors import PerfkitFormatError, PerfkitWarning
from perfkit.io.cluster import active_client
from perfkit.io.compressed import compression, decompressed, plain_name
from perfkit.io.mpip import run_stem
from perfkit.io.registry import SNIFF_BYTES, claimed, get_format, sniff_format
from perfkit.model import RUN_FIELDS, RUN_OPTIONAL, combine_runs, read_warnings

SIDECAR_SUFFIX = ".perfkit.json"

Metadata = Mapping[str, Mapping[str, Any]] | Callable[[Path], Mapping[str, Any]] | None


def sidecar_metadata(path: str | PathLike) -> dict[str, Any]:
    """Run metadata from ``<file>.perfkit.json`` (or ``<dir>/perfkit.json``) beside a profile (for
    ``r.mpiP.gz``, ``r.mpiP.gz.perfkit.json`` or else ``r.mpiP.perfkit.json``)."""
    path = Path(path)
    candidates = [path.with_name(name + SIDECAR_SUFFIX) for name in dict.fromkeys((path.name, plain_name(path)))]
    if path.is_dir():
        candidates.append(path / "perfkit.json")
    for cand in candidates:
        if cand.is_file():
            try:
                meta = json.loads(cand.read_text())
            except json.JSONDecodeError as exc:
                raise PerfkitFormatError(cand, exc.lineno, f"sidecar is not valid JSON: {exc.msg}") from exc
            if not isinstance(meta, dict):
                raise PerfkitFormatError(cand, 1, "sidecar must hold a JSON object of run metadata")
            unknown = set(meta) - set(RUN_FIELDS) - set(RUN_OPTIONAL)
            if unknown:
                raise PerfkitFormatError(cand, None, f"unknown run metadata {sorted(unknown)}; "
                                         f"known: {[*RUN_FIELDS, *RUN_OPTIONAL]}")
            return meta
    return {}


def open_profile(path: str | PathLike, format: str | None = None, **run_metadata: Any) -> xr.Dataset:
    """Read one run's profile into the canonical Dataset.

    ``format`` is sniffed from content when None. A gzip, bzip2 or xz file is read as the text it
    holds (``r.mpiP.gz`` as ``r.mpiP``); UTF-16 text is refused, saying so. Metadata precedence: what the file states,
    then ``run_metadata``, then a sidecar ``<file>.perfkit.json``; nothing is invented.
    """
    path = Path(path)
    meta = {**sidecar_metadata(path), **run_metadata}
    meta.setdefault("source", str(path))
    head = b""
    if path.is_file():
        with open(path, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
    raw = get_format(format).packed if format else claimed(path, head) is not None
    if compression(head) and not raw:  # gzip, bzip2, xz text: read from a decompressed temporary copy
        with decompressed(path, head) as plain:
            meta.setdefault("label", run_stem(plain))
            return get_format(format or sniff_format(plain)).reader()(plain, **meta)
    name = format or sniff_format(path)
    meta.setdefault("label", run_stem(path) if path.is_file() else path.name)
    return get_format(name).reader()(path, **meta)


def natural_key(text: str) -> list[Any]:
    """Sort key putting ``run2`` before ``run10`` (digit runs compare as numbers)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def expand_paths(paths_or_glob: str | PathLike | Iterable[str | PathLike]) -> list[Path]:
    """Sorted list of files from a glob pattern, a path, or an iterable of paths."""
    if isinstance(paths_or_glob, (str, PathLike)):
        text = str(paths_or_glob)
        found = sorted(globlib.glob(text, recursive=True), key=natural_key) if any(c in text for c in "*?[") else [text]
    else:
        found = [str(p) for p in paths_or_glob]
    if not found:
        raise FileNotFoundError(f"no files match {paths_or_glob!r}")
    return [Path(p) for p in found]


def metadata_for(path: Path, metadata: Metadata) -> dict[str, Any]:
    """The run metadata ``metadata`` (mapping or callable, see :func:`open_runs`) gives ``path``."""
    if metadata is None:
        return {}
    if callable(metadata):
        return dict(metadata(path))
    return dict(metadata.get(str(path), metadata.get(path.name, {})))


def unique_labels(paths: Sequence[Path]) -> list[str]:
    """Shortest distinguishing labels: file stems, else with as many parent folders as needed; an mpiP
    report's stem loses its process id and index (:func:`perfkit.io.mpip.run_stem`) unless only they
    tell the runs apart."""
    for stem in (run_stem, lambda path: path.stem):
        for depth in range(1, max(len(p.parts) for p in paths) + 1):
            labels = ["/".join((*p.parts[-depth:-1], stem(p))) for p in paths]
            if len(set(labels)) == len(labels):
                return labels
    return [str(p) for p in paths]


def open_runs(
    paths_or_glob: str | PathLike | Iterable[str | PathLike],
    format: str | None = None,
    metadata: Metadata = None,
    *,
    chunks: Mapping[str, int] | None = None,
    progress: bool | None = None,
    errors: str = "raise",
) -> xr.Dataset:
    """Read many runs in parallel with dask and combine them along ``run``.

    ``errors`` says what a file that cannot be read does: ``"raise"`` (default: its
    ``PerfkitFormatError`` or ``OSError`` propagates, so no study silently loses a run),
    ``"warn"`` (the readable runs come back; one ``PerfkitWarning`` names every refused file
    and why) or ``"skip"`` (the same without the Python warning). Either way the refused files
    are listed with their error, line and archive member in ``attrs["refused"]`` (JSON; see
    :func:`refused_files`). If no file can be read, the first error is raised.

    ``metadata`` maps a path (or file name) to run metadata, or is a callable path -> mapping.
    Uses the active ``dask.distributed`` client when there is one, else dask's default
    scheduler. Every file is read into memory: ``chunks`` (e.g. ``{"rank": 4096}``) only chunks
    the cube afterwards (dask-backed, but not lazy). A study larger than memory is converted once
    with :func:`perfkit.convert` and opened lazily with ``perfkit.load(store, chunks=...)``.
    ``progress`` shows a progress bar (default: when more than 20 files): a widget in Jupyter, text
    in a terminal. Files that are reports of
    the same run (mpiP: same command, start time and collector PID, e.g. the concise and the
    verbose report ``mpiP -v`` writes) become one run, with a warning (see :func:`merge_duplicates`).
    """
    paths = expand_paths(paths_or_glob)
    labels = unique_labels(paths)
    tasks = []
    for path, label in zip(paths, labels):
        meta = {"label": label, **metadata_for(path, metadata)}
        opener = open_profile if errors == "raise" else _open_or_refusal
        tasks.append(dask.delayed(opener, pure=True)(path, format, **meta))
    if errors not in ("raise", "warn", "skip"):
        raise ValueError(f"errors must be 'raise', 'warn' or 'skip', got {errors!r}")
    show = len(paths) > 20 if progress is None else progress
    results = _compute(tasks, show)
    refused = [r for r in results if isinstance(r, Refusal)]
    if refused and len(refused) == len(results):
        raise refused[0].error
    runs = merge_duplicates([r for r in results if not isinstance(r, Refusal)])
    ds = combine_runs(runs)
    if refused:
        ds.attrs["refused"] = json.dumps([r.as_dict() for r in refused])
        if errors == "warn":
            lines = "\n".join(f"  {r.error}" for r in refused)
            warnings.warn(f"{len(refused)} of {len(results)} files could not be read and were left out:\n{lines}",
                          PerfkitWarning, stacklevel=2)
    if chunks:
        ds = ds.chunk(dict(chunks))
    return ds


@dataclass(frozen=True)
class Refusal:
    """A file ``open_runs`` could not read (``errors="warn"|"skip"``) and its error."""

    path: str
    error: Exception

    def as_dict(self) -> dict[str, Any]:
        """``path``, ``error`` (the message), ``line`` and ``member`` (None when unknown)."""
        return {"path": self.path, "error": str(self.error), "line": getattr(self.error, "line", None),
                "member": getattr(self.error, "member", None)}


def _open_or_refusal(path: Path, format: str | None, **meta: Any) -> xr.Dataset | Refusal:
    try:
        return open_profile(path, format, **meta)
    except (PerfkitFormatError, OSError) as exc:  # what a reader raises for a file it cannot read
        return Refusal(str(path), exc)


def refused_files(ds: xr.Dataset) -> list[dict[str, Any]]:
    """The files ``open_runs(..., errors="warn"|"skip")`` left out, each with its error (empty if none)."""
    return json.loads(ds.attrs.get("refused", "[]"))


def run_identity(ds: xr.Dataset) -> tuple[str, ...] | None:
    """What identifies the run a one-run Dataset was read from, or None when the file does not say.

    mpiP: command, start time and collector PID from the report header.
    """
    keys = ("mpip_command", "mpip_start", "mpip_pid")
    if all(ds.attrs.get(k) for k in keys):
        return ("mpip", *(str(ds.attrs[k]) for k in keys))
    return None


def merge_duplicates(runs: Sequence[xr.Dataset]) -> list[xr.Dataset]:
    """One Dataset per run: reports of the same run (:func:`run_identity`) are combined.

    The verbose (per-rank) report is kept and filled from the others: variables it lacks (a
    concise report's ``task_time``, ``summary``...), NaN cells of its profile, unknown run
    coordinates. A warning (Python and read warning of the kept run) names the files.
    """
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, ds in enumerate(runs):
        key = run_identity(ds)
        if key is not None:
            groups.setdefault(key, []).append(i)
    dropped: set[int] = set()
    out = list(runs)
    for key, members in groups.items():
        if len(members) < 2:
            continue
        order = sorted(members, key=lambda i: (runs[i].attrs.get("mpip_style") != "verbose", i))
        keep, rest = order[0], order[1:]
        merged = runs[keep]
        for i in rest:
            merged = _fill_from(merged, runs[i])
        names = [_where(runs[i]) for i in order]
        note = (f"{len(order)} files are reports of the same run (command {key[1]!r}, start {key[2]}, collector "
                f"PID {key[3]}): {', '.join(names)}; combined into one run, {names[0]} kept, gaps filled from "
                f"{', '.join(names[1:])}")
        warnings.warn(note, PerfkitWarning, stacklevel=3)
        merged.attrs["warnings"] = json.dumps([*read_warnings(merged), note])
        out[keep] = merged
        dropped.update(rest)
    return [ds for i, ds in enumerate(out) if i not in dropped]


def _where(ds: xr.Dataset) -> str:
    source = str(ds["source"].values[0]) if "source" in ds.coords else ""
    style = ds.attrs.get("mpip_style", "")
    return f"{source or ds['run'].values[0]}" + (f" ({style})" if style else "")


#: Run coordinates that describe the file, not the run: never filled from a duplicate.
_OWN_COORDS = ("label", "source", "detail")


def _with_functions_of(primary: xr.Dataset, other: xr.Dataset) -> xr.Dataset:
    """``primary`` extended (NaN) by the functions only ``other`` has, their coordinates (call, kind,
    ...) taken from ``other``."""
    have = set(map(str, primary["function"].values))
    extra = [f for f in map(str, other["function"].values) if f not in have]
    if not extra:
        return primary
    out = primary.reindex(function=[*map(str, primary["function"].values), *extra])
    for name, coord in primary.coords.items():
        if coord.dims == ("function",) and name != "function" and name in other.coords:
            values = [*coord.values.tolist(), *other[name].sel(function=extra).values.tolist()]
            out = out.assign_coords({name: ("function", np.array(values))})
    return out


def _fill_from(primary: xr.Dataset, other: xr.Dataset) -> xr.Dataset:
    """``primary`` with its NaN profile cells, missing variables and unknown run coordinates
    taken from ``other`` (a report of the same run)."""
    label = primary["run"].values
    other = other.assign_coords(run=label)
    primary = _with_functions_of(primary, other)
    shared = {dim: primary[dim].values for dim in ("rank", "function", "metric") if dim in primary.dims}
    out = primary.copy()
    out["profile"] = primary["profile"].fillna(other["profile"].reset_coords(drop=True).reindex(shared))
    for name, var in other.data_vars.items():
        if name in out:
            continue
        var = var.reset_coords(drop=True)  # its run coordinates are the other file's
        out[name] = var.reindex({dim: values for dim, values in shared.items() if dim in var.dims})
    for name, coord in other.coords.items():
        if coord.dims != ("run",) or name in _OWN_COORDS or name == "run":
            continue
        mine = out[name].values if name in out.coords else None
        theirs = coord.values
        if mine is None:
            out = out.assign_coords({name: ("run", theirs)})
        elif mine.dtype.kind == "f":
            out = out.assign_coords({name: ("run", np.where(np.isnan(mine), theirs, mine))})
        else:
            out = out.assign_coords({name: ("run", np.where(mine == "", theirs, mine))})
    return out


def _compute(tasks: list[Any], show_progress: bool) -> list[xr.Dataset]:
    client = active_client()
    if client is not None:
        futures = client.compute(tasks)
        if show_progress:
            from distributed import as_completed
            from tqdm.auto import tqdm

            with tqdm(total=len(futures), desc="reading", unit="file") as bar:
                for _ in as_completed(futures):
                    bar.update()
        return client.gather(futures)
    # dask's threads given as the function, not by name: a name makes dask import distributed to look for a
    # client (0.4 s of a first read)
    if show_progress:
        from tqdm.dask import TqdmCallback

        with TqdmCallback(desc="reading", unit="task"):
            return list(dask.compute(*tasks, scheduler=dask.threaded.get))
    return list(dask.compute(*tasks, scheduler=dask.threaded.get))
