"""The canonical perfkit Dataset: names, vocabulary, construction, validation, combining.

Every reader returns, and every analysis accepts, an ``xarray.Dataset`` with

* ``profile``: float64 cube with dims ``(run, rank, function, metric)``; NaN where a value
  was not measured or the rank does not exist in that run;
* ``traffic`` (optional): dims ``(run, sender, receiver, quantity)``, sender -> receiver; numpy,
  or pydata ``sparse.COO`` with fill value 0 when large (``combine_runs``; a dask array of one
  ``sparse.COO`` block per run when loaded lazily). On disk sparse traffic is pair tables
  (``perfkit.sparse_traffic``): 0 is "no message", NaN a quantity not measured for a stored pair;
* ``sizes`` (optional): dims ``(run, rank, function, size_bin, stat)``;
* ``host`` (optional): each rank's host name, dims ``(run, rank)``, "" where unknown;
* ``timeline`` (optional, traces): dims ``(run, rank, time_bin, timeline_kind)`` [s], with the
  per-run bin centres ``time`` (``run, time_bin``) [s].

See ``docs/contract.md`` for the full description.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from perfkit.errors import ContractError

PROFILE_DIMS = ("run", "rank", "function", "metric")
TRAFFIC_DIMS = ("run", "sender", "receiver", "quantity")
SIZES_DIMS = ("run", "rank", "function", "size_bin", "stat")

#: Base metrics every profile carries (NaN when the format lacks them), with units.
METRIC_UNITS: dict[str, str] = {
    "time": "s",
    "calls": "1",
    "bytes_sent": "B",
    "calls_sent": "1",
    "bytes_recv": "B",
    "calls_recv": "1",
}
METRICS = tuple(METRIC_UNITS)
#: Optional metric: CPU time (user + system) of the rank's main thread in the function [s] (``perfkit collect``'s
#: profiles and OTF2 traces; on ``Compute`` outside MPI calls; NaN on ``w_``/``b_`` parts, whose call's CPU time
#: is on its main part).
CPU_TIME = "cpu_time"
OPTIONAL_METRIC_UNITS: dict[str, str] = {CPU_TIME: "s"}
#: ``rank_cpu`` (optional, ``perfkit collect``): each rank's CPU counters over the profiled interval (from the end
#: of MPI_Init to MPI_Finalize), dims ``(run, rank, cpu_stat)``, with units: cores in the rank's affinity mask,
#: the node's online cores, the main thread's time runnable but waiting for a core (schedstat run delay), its
#: voluntary and involuntary context switches, the CPU time of all the process's threads.
#: Then the distinct cores allowed to any rank of the rank's node (the union of their affinity masks) and the
#: rank's cgroup CPU quota [cores] (NaN: none).
CPU_STAT_UNITS: dict[str, str] = {"cores_allowed": "1", "cores_online": "1", "run_delay": "s",
                                  "voluntary_switches": "1", "involuntary_switches": "1", "process_cpu_time": "s",
                                  "node_cores_allowed": "1", "cpu_quota": "1"}
CPU_STATS = tuple(CPU_STAT_UNITS)
RANK_CPU_DIMS = ("run", "rank", "cpu_stat")
TRAFFIC_QUANTITIES = ("bytes", "count", "time")
#: Optional 4th traffic quantity: bytes of collectives per pair by their arguments (perfkit collect; docs/collector.md).
COLLECTIVE_BYTES = "collective_bytes"
TRAFFIC_UNITS = {"bytes": "B", "count": "1", "time": "s", COLLECTIVE_BYTES: "B"}
SIZE_STATS = ("count", "time")
#: Above this many elements, combined traffic is kept as a sparse array (absent runs read as 0).
DENSE_TRAFFIC_LIMIT = 2**25
#: One run's traffic is dense when its dense array is at most this size [B] (about 418 ranks)...
DENSE_TRAFFIC_BYTES = 1 << 22


def dense_traffic(nranks: int, nonzeros: int) -> bool:
    """Whether one run's (sender, receiver, quantity) traffic with ``nonzeros`` stored values is kept dense.

    Dense [8 B an element] when that is at most ``DENSE_TRAFFIC_BYTES`` or no larger than the
    ``sparse.COO`` [32 B a non-zero: three int64 coordinates and a float64], i.e. when at least a
    quarter of the elements are non-zero; by the non-zeros, whatever the rank count.
    """
    dense_bytes = 8 * nranks * nranks * len(TRAFFIC_QUANTITIES)
    return dense_bytes <= max(DENSE_TRAFFIC_BYTES, 32 * nonzeros)

#: What a function's time is: the ``kind`` coordinate vocabulary.
KINDS = ("compute", "transfer", "wait_late_sender", "wait_late_receiver", "wait_collective", "io", "other")
COMPUTE = "Compute"

#: ``host`` (optional): each rank's host name, "" where unknown; fixed-width unicode (numpy ``<U``).
HOST_DIMS = ("run", "rank")
#: Data variables holding text: "" where a run lacks them (never NaN).
TEXT_VARIABLES = ("host",)

#: Run-level coordinates; numeric ones are float64 so that "unknown" can be NaN.
RUN_NUMERIC = ("nprocs", "nodes", "ppn", "threads", "elapsed")
RUN_TEXT = ("label", "system", "mode", "format", "source")
RUN_FIELDS = RUN_TEXT + RUN_NUMERIC
MODES = ("basic", "slt", "collective_wait", "slt+collective_wait", "perfect", "")
#: Optional text run coordinates, present only when some run states them.
RUN_OPTIONAL = ("scaling", "detail", "selected_region")  # selected_region: IPM region read, "" = whole run
#: ``scaling`` values: fixed total problem (``strong``) or fixed work per process (``weak``).
SCALINGS = ("strong", "weak", "")
#: ``detail`` values: ``profile`` measured per rank (``per_rank``, also when absent or empty) or
#: NaN because the file states only statistics over ranks (``summary``, e.g. a concise mpiP report).
DETAILS = ("per_rank", "summary", "")

#: Function labels: MPI calls, their wait parts (w_ = late-sender wait, r_ = late-receiver wait,
#: b_ = collective wait).
FUNCTION_NAME = re.compile(r"^((w_|r_|b_)?MPI_\w+|Compute)$")
_IO_CALL = re.compile(r"^(MPI_File_\w+|read|write|open|close|fread|fwrite|pread|pwrite|lseek)$")
_OTHER_CALLS = {
    "MPI_Init", "MPI_Init_thread", "MPI_Finalize", "MPI_Comm_rank", "MPI_Comm_size",
    "MPI_Wtime", "MPI_Abort", "MPI_Initialized", "MPI_Finalized", "MPI_Get_count",
    "MPI_Get_processor_name", "MPI_Type_commit", "MPI_Type_free", "MPI_Comm_free",
    "MPI_Comm_dup", "MPI_Comm_split", "MPI_Comm_create", "MPI_Group_incl", "MPI_Comm_group",
    "MPI_Type_contiguous", "MPI_Type_vector", "MPI_Type_indexed", "MPI_Type_create_struct",
    "MPI_Op_create", "MPI_Op_free", "MPI_Request_free", "MPI_Cart_create", "MPI_Cart_shift",
    "MPI_Cart_coords", "MPI_Cart_rank", "MPI_Dims_create", "MPI_Pcontrol",
}


def default_kind(call: str) -> str:
    """The ``kind`` of a plain (not wait-split) function named ``call``."""
    if call == COMPUTE:
        return "compute"
    if _IO_CALL.match(call):
        return "io"
    if call in _OTHER_CALLS or not call.startswith("MPI_"):
        return "other"
    return "transfer"


def run_coords(**meta: Any) -> dict[str, Any]:
    """Normalise one run's metadata to the run coordinate fields (unknown -> NaN / "")."""
    unknown = set(meta) - set(RUN_FIELDS) - set(RUN_OPTIONAL)
    if unknown:
        raise ContractError(f"unknown run metadata {sorted(unknown)}; known: {[*RUN_FIELDS, *RUN_OPTIONAL]}")
    out: dict[str, Any] = {}
    for name in RUN_TEXT + tuple(n for n in RUN_OPTIONAL if meta.get(n) not in (None, "")):
        value = meta.get(name)
        out[name] = "" if value is None or (isinstance(value, float) and np.isnan(value)) else str(value)
    if out.get("scaling", "") not in SCALINGS:
        raise ContractError(f"run scaling {out['scaling']!r} is not one of {SCALINGS[:-1]}")
    if out.get("detail", "") not in DETAILS:
        raise ContractError(f"run detail {out['detail']!r} is not one of {DETAILS[:-1]}")
    for name in RUN_NUMERIC:
        value = meta.get(name)
        try:
            out[name] = np.nan if value is None or value == "" else float(value)
        except (TypeError, ValueError) as exc:
            raise ContractError(f"run metadata {name}={value!r} is not a number") from exc
    if out["mode"] not in MODES:
        raise ContractError(f"run mode {out['mode']!r} is not one of {MODES[:-1]}")
    return out


def make_run(
    profile: np.ndarray,
    *,
    ranks: Sequence[int],
    functions: Sequence[str],
    calls: Sequence[str] | None = None,
    kinds: Sequence[str] | None = None,
    metrics: Sequence[str] = METRICS,
    extra_units: Mapping[str, str] | None = None,
    run: Mapping[str, Any] | None = None,
    traffic: np.ndarray | Any | None = None,
    sizes: np.ndarray | None = None,
    size_bins: Sequence[float] | None = None,
    warnings: Iterable[str] = (),
    reader: str = "",
    hosts: Sequence[str] | None = None,
    rank_cpu: np.ndarray | None = None,
) -> xr.Dataset:
    """Build a one-run canonical Dataset.

    ``profile`` has shape (rank, function, metric) in the order given by ``metrics``; any base
    metric missing from ``metrics`` is added as NaN. ``traffic`` has shape
    (sender, receiver, quantity) over ``ranks`` x ``ranks`` x ``TRAFFIC_QUANTITIES`` (numpy or
    ``sparse.COO``), optionally followed by ``COLLECTIVE_BYTES``. ``sizes`` has shape (rank, function,
    size_bin, stat). ``hosts`` names each rank's host in ``ranks`` order ("" where unknown): the ``host`` variable.
    ``rank_cpu`` has shape (rank, cpu_stat) over ``CPU_STATS``: the ``rank_cpu`` variable.
    """
    profile = np.asarray(profile, dtype=np.float64)
    metrics = list(metrics)
    functions = [str(f) for f in functions]
    calls = list(calls) if calls is not None else list(functions)
    kinds = list(kinds) if kinds is not None else [default_kind(c) for c in calls]
    missing = [m for m in METRICS if m not in metrics]
    if missing:
        pad = np.full((*profile.shape[:2], len(missing)), np.nan)
        profile = np.concatenate([profile, pad], axis=2)
        metrics += missing
    units = {**METRIC_UNITS, **OPTIONAL_METRIC_UNITS, **(extra_units or {})}
    rank_index = np.asarray(ranks, dtype=np.int64)
    data_vars: dict[str, Any] = {
        "profile": (PROFILE_DIMS, profile[np.newaxis]),
    }
    coords: dict[str, Any] = {
        "rank": rank_index,
        "function": functions,
        "call": ("function", calls),
        "kind": ("function", kinds),
        "metric": metrics,
        "units": ("metric", [units.get(m, "") for m in metrics]),
    }
    meta = run_coords(**(run or {}))
    meta["label"] = meta["label"] or "run0"
    coords["run"] = [meta["label"]]
    for name, value in meta.items():
        coords[name] = ("run", [value])
    if hosts is not None:
        if len(hosts) != rank_index.size:
            raise ContractError(f"{len(hosts)} host names for {rank_index.size} ranks")
        data_vars["host"] = (HOST_DIMS, np.asarray([[str(h) for h in hosts]], dtype=str))
    if rank_cpu is not None:
        data_vars["rank_cpu"] = (RANK_CPU_DIMS, np.asarray(rank_cpu, dtype=np.float64)[np.newaxis])
        coords["cpu_stat"] = list(CPU_STATS)
        coords["cpu_stat_units"] = ("cpu_stat", list(CPU_STAT_UNITS.values()))
    if traffic is not None:
        quantities = traffic_quantities(traffic.shape[-1])
        data_vars["traffic"] = (TRAFFIC_DIMS, _expand_run(traffic))
        coords["sender"] = rank_index
        coords["receiver"] = rank_index
        coords["quantity"] = quantities
        coords["quantity_units"] = ("quantity", [TRAFFIC_UNITS[q] for q in quantities])
    if sizes is not None:
        data_vars["sizes"] = (SIZES_DIMS, np.asarray(sizes, dtype=np.float64)[np.newaxis])
        coords["size_bin"] = np.asarray(size_bins, dtype=np.float64)
        coords["stat"] = list(SIZE_STATS)
    ds = xr.Dataset(data_vars, coords=coords)
    if sizes is not None:
        ds["size_bin"].attrs.update(units="B", description="message-size bin label (bytes)")
    ds.attrs.update(provenance(reader=reader, warnings=list(warnings)))
    return ds


def traffic_quantities(n: int) -> list[str]:
    """The ``quantity`` labels of traffic with ``n`` quantities: ``TRAFFIC_QUANTITIES`` [+ ``COLLECTIVE_BYTES``]."""
    allowed = {len(TRAFFIC_QUANTITIES): list(TRAFFIC_QUANTITIES),
               len(TRAFFIC_QUANTITIES) + 1: [*TRAFFIC_QUANTITIES, COLLECTIVE_BYTES]}
    if n not in allowed:
        raise ContractError(f"traffic has {n} quantities, expected {TRAFFIC_QUANTITIES} [+ {COLLECTIVE_BYTES!r}]")
    return allowed[n]


def summed_entries(coords: np.ndarray, data: np.ndarray, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The sorted flat (C-order) indices within ``shape`` of the entries ``data`` [float] at ``coords`` (one row
    per axis), and their values [float64], duplicates summed."""
    linear = np.ravel_multi_index(np.asarray(coords, dtype=np.int64), shape)
    unique, inverse = np.unique(linear, return_inverse=True)
    return unique, np.bincount(inverse, weights=np.asarray(data, dtype=np.float64), minlength=unique.size)


def sorted_coo(coords: np.ndarray, data: np.ndarray, shape: tuple[int, ...]) -> Any:
    """``sparse.COO`` (fill 0) of ``data`` [float] at ``coords`` (one row per axis, within ``shape``; duplicates
    summed), its coordinates sorted and summed with numpy: sparse's own checking and sorting compile numba code
    the first time a process uses them (2.7 s before a first file is read)."""
    return flat_coo(*summed_entries(coords, data, shape), shape)


def flat_coo(flat: np.ndarray, values: np.ndarray, shape: tuple[int, ...]) -> Any:
    """``sparse.COO`` (fill 0) of ``values`` [float64] at the sorted, distinct flat indices ``flat`` within ``shape``
    (as :func:`summed_entries` gives them)."""
    import sparse

    return sparse.COO(np.stack(np.unravel_index(flat, shape)), values, shape=shape, fill_value=0.0,
                      has_duplicates=False, sorted=True)


def _expand_run(array: Any) -> Any:
    """Add a leading run axis to a numpy or pydata-sparse array (without sparse's slow indexing)."""
    if isinstance(array, np.ndarray):
        return np.asarray(array, dtype=np.float64)[np.newaxis]
    import sparse

    coo = sparse.COO(array)
    coords = np.vstack([np.zeros((1, coo.nnz), dtype=np.int64), coo.coords])
    return sparse.COO(coords, coo.data.astype(np.float64), shape=(1, *coo.shape), has_duplicates=False,
                      sorted=True, fill_value=coo.fill_value)


def provenance(reader: str, warnings: list[str]) -> dict[str, str]:
    """Dataset attributes recording who read the data and what went oddly (JSON list)."""
    from perfkit import __version__

    return {
        "perfkit_version": __version__,
        "reader": reader,
        "warnings": json.dumps(warnings),
    }


def read_warnings(ds: xr.Dataset) -> list[str]:
    """The warnings recorded in ``ds.attrs`` while reading."""
    return list(json.loads(ds.attrs.get("warnings", "[]")))


def validate(ds: xr.Dataset) -> xr.Dataset:
    """Raise ``ContractError`` naming every way ``ds`` breaks the contract; return ``ds``."""
    problems: list[str] = []
    if not isinstance(ds, xr.Dataset):
        raise ContractError(f"expected an xarray.Dataset, got {type(ds).__name__}")
    if "profile" not in ds:
        raise ContractError("Dataset has no 'profile' variable")
    prof = ds["profile"]
    if prof.dims != PROFILE_DIMS:
        problems.append(f"profile dims are {prof.dims}, expected {PROFILE_DIMS}")
    if prof.dtype != np.float64:
        problems.append(f"profile dtype is {prof.dtype}, expected float64")
    if "metric" in ds.coords:
        absent = [m for m in METRICS if m not in ds["metric"].values]
        if absent:
            problems.append(f"metric coordinate lacks base metrics {absent}")
        if "units" not in ds.coords or ds["units"].dims != ("metric",):
            problems.append("no 'units' coordinate on metric")
    for name in ("call", "kind"):
        if name not in ds.coords or ds[name].dims != ("function",):
            problems.append(f"no '{name}' coordinate on function")
    if "kind" in ds.coords:
        bad = sorted(set(map(str, ds["kind"].values)) - set(KINDS))
        if bad:
            problems.append(f"kind values {bad} are not in {KINDS}")
    if "function" in ds.coords:
        funcs = [str(f) for f in ds["function"].values]
        if len(set(funcs)) != len(funcs):
            problems.append("function labels are not unique")
        kinds = ds["kind"].values if "kind" in ds.coords else ["other"] * len(funcs)
        bad_names = [f for f, k in zip(funcs, kinds) if not FUNCTION_NAME.match(f) and k not in ("io", "other")]
        if bad_names:
            problems.append(f"functions {bad_names[:5]} are not named MPI_Xxx, w_MPI_Xxx, r_MPI_Xxx, b_MPI_Xxx "
                            "or Compute")
    for name in RUN_FIELDS:
        if name not in ds.coords or ds[name].dims != ("run",):
            problems.append(f"no run coordinate '{name}'")
    if "host" in ds.data_vars:
        if ds["host"].dims != HOST_DIMS:
            problems.append(f"host dims are {ds['host'].dims}, expected {HOST_DIMS}")
        if ds["host"].dtype.kind not in "UO":
            problems.append(f"host dtype is {ds['host'].dtype}, expected text")
    for dim in ("rank", "run"):
        if dim in ds.indexes and not ds.indexes[dim].is_unique:
            problems.append(f"{dim} labels are not unique")
    if "traffic" in ds:
        if ds["traffic"].dims != TRAFFIC_DIMS:
            problems.append(f"traffic dims are {ds['traffic'].dims}, expected {TRAFFIC_DIMS}")
        elif list(ds["quantity"].values) not in (list(TRAFFIC_QUANTITIES), [*TRAFFIC_QUANTITIES, COLLECTIVE_BYTES]):
            problems.append(f"traffic quantities are {list(ds['quantity'].values)}, expected {TRAFFIC_QUANTITIES} "
                            f"[+ {COLLECTIVE_BYTES!r}]")
    if "rank_cpu" in ds.data_vars:
        if ds["rank_cpu"].dims != RANK_CPU_DIMS:
            problems.append(f"rank_cpu dims are {ds['rank_cpu'].dims}, expected {RANK_CPU_DIMS}")
        elif ds["rank_cpu"].dtype != np.float64:
            problems.append(f"rank_cpu dtype is {ds['rank_cpu'].dtype}, expected float64")
        elif "cpu_stat_units" not in ds.coords or ds["cpu_stat_units"].dims != ("cpu_stat",):
            problems.append("no 'cpu_stat_units' coordinate on cpu_stat")
    if "sizes" in ds and ds["sizes"].dims != SIZES_DIMS:
        problems.append(f"sizes dims are {ds['sizes'].dims}, expected {SIZES_DIMS}")
    if problems:
        raise ContractError("Dataset breaks the perfkit contract:\n- " + "\n- ".join(problems))
    return ds


def combine_runs(datasets: Sequence[xr.Dataset], labels: Sequence[str] | None = None) -> xr.Dataset:
    """Concatenate canonical Datasets along ``run``; NaN outside each run's ranks/functions.

    Run labels must be unique; pass ``labels`` to rename. The union of functions keeps each
    function's ``call`` and ``kind`` (which must agree between runs). Every variable a run lacks
    is NaN for that run (``host`` and text run coordinates: empty). Filled with numpy index
    arithmetic, so combining a thousand runs costs little more than copying them.
    """
    if not datasets:
        raise ContractError("no runs to combine")
    datasets = [validate(d) for d in datasets]
    if labels is not None:
        datasets = [d.assign_coords(run=[lab], label=("run", [lab])) for d, lab in zip(datasets, labels, strict=True)]
    coords = combined_coords(datasets)
    labels_of = {dim: np.asarray(coords[dim]) for dim in coords if dim in combined_dims(datasets)}
    run_labels = coords["run"]
    with_traffic = [d for d in datasets if "traffic" in d]
    n_ranks = labels_of["rank"].size
    sparse_traffic = bool(with_traffic) and (
        len(run_labels) * n_ranks**2 * len(TRAFFIC_QUANTITIES) > DENSE_TRAFFIC_LIMIT
        or any(not isinstance(d["traffic"].data, np.ndarray) for d in with_traffic))
    offsets = np.cumsum([0] + [d.sizes["run"] for d in datasets])
    positions = [{dim: pd.Index(labels_of[dim]).get_indexer(d[dim].values) for dim in d.dims if dim != "run"}
                 for d in datasets]
    data_vars: dict[str, Any] = {}
    for name, dims in variable_dims(datasets).items():
        if name == "traffic" and sparse_traffic:
            data_vars[name] = (TRAFFIC_DIMS, _stack_sparse_traffic(datasets, labels_of["rank"], labels_of["quantity"]))
            continue
        text = name in TEXT_VARIABLES
        dtype = text_dtype(d[name] for d in datasets if name in d) if text else np.float64
        out = np.full([len(run_labels), *(labels_of[dim].size for dim in dims[1:])], "" if text else np.nan,
                      dtype=dtype)
        for k, d in enumerate(datasets):
            if name not in d:
                continue
            index = np.ix_(np.arange(offsets[k], offsets[k + 1]), *(positions[k][dim] for dim in dims[1:]))
            out[index] = np.asarray(d[name].values, dtype=dtype)
        data_vars[name] = (dims, out)
    out_ds = xr.Dataset(data_vars, coords=coords)
    extra = sparse_traffic_notes(datasets, labels_of["quantity"]) if sparse_traffic else []
    out_ds.attrs.update(combined_attrs(datasets, extra))
    return validate(combine_coord_attrs(out_ds, datasets))


def sparse_traffic_notes(datasets: Sequence[xr.Dataset], quantities: Sequence[str]) -> list[str]:
    """Warnings of combined sparse traffic (over ``quantities``): runs whose absent matrices or quantities read 0."""
    extra = []
    absent = [str(r) for d in datasets if "traffic" not in d for r in d["run"].values]
    if absent:
        extra.append(f"runs {absent} have no traffic matrices; in the sparse traffic array they read as 0")
    without = [str(r) for d in datasets if "traffic" in d and COLLECTIVE_BYTES not in d["quantity"].values
               for r in d["run"].values]
    if COLLECTIVE_BYTES in quantities and without:
        extra.append(f"runs {without} have no {COLLECTIVE_BYTES}; in the sparse traffic array they read as 0")
    return extra


def text_dtype(arrays: Iterable[xr.DataArray]) -> np.dtype:
    """The fixed-width unicode dtype (``<U``, at least 1 character) that holds every string of ``arrays``."""
    width = 1
    for array in arrays:
        if array.dtype.kind != "U":
            array = np.asarray(array.values).astype(str)
        width = max(width, array.dtype.itemsize // 4)
    return np.dtype(f"<U{width}")


def combined_dims(datasets: Sequence[xr.Dataset]) -> list[str]:
    """The non-run dimensions of the combination of ``datasets``, in first-seen order."""
    return _ordered_union([dim for dim in d.dims if dim != "run"] for d in datasets)


def variable_dims(datasets: Sequence[xr.Dataset]) -> dict[str, tuple[str, ...]]:
    """Dims of every data variable of the combination (an error if two runs disagree)."""
    out: dict[str, tuple[str, ...]] = {}
    for d in datasets:
        for name, var in d.data_vars.items():
            if out.setdefault(str(name), var.dims) != var.dims:
                raise ContractError(f"variable {name!r} has dims {var.dims} in one run and {out[name]} in another")
            if var.dims[:1] != ("run",):
                raise ContractError(f"variable {name!r} has dims {var.dims}; every variable starts with 'run'")
    return out


def combined_coords(datasets: Sequence[xr.Dataset]) -> dict[str, Any]:
    """Coordinates of ``datasets`` combined along ``run``, without reading any data variable.

    Raises ``ContractError`` for repeated run labels or functions whose call/kind differ.
    """
    run_labels = [str(v) for d in datasets for v in d.variables["run"].values]  # variables: no DataArray built
    counts = pd.Series(run_labels).value_counts()
    if (counts > 1).any():
        raise ContractError(f"run labels {sorted(counts[counts > 1].index)} occur more than once; "
                            "pass labels=... to name runs uniquely")
    labels_of = _dim_labels(datasets)
    for name, dim in (("call", "function"), ("kind", "function")):
        _coord_map(datasets, name, dim, strict=True)
    coords: dict[str, Any] = {dim: values for dim, values in labels_of.items()}
    coords["run"] = run_labels
    for name in _ordered_union([n for n, c in d.coords.variables.items() if c.dims == ("run",) and n != "run"]
                               for d in datasets):
        coords[name] = ("run", _run_coord(datasets, name))
    labelled = {n: c.dims[0] for d in datasets for n, c in d.coords.variables.items()
                if len(c.dims) == 1 and c.dims[0] not in ("run", n)}
    for name, dim in labelled.items():
        mapping = _coord_map(datasets, name, dim, strict=False)
        coords[name] = (dim, [mapping.get(v, "") for v in labels_of[dim].tolist()])
    per_run = {n: c.dims for d in datasets for n, c in d.coords.variables.items()
               if len(c.dims) == 2 and c.dims[0] == "run"}
    for name, dims in per_run.items():
        coords[name] = (dims, _run_table(datasets, name, dims[1], labels_of[dims[1]]), _attrs_of(datasets, name))
    return coords


def _run_table(datasets: Sequence[xr.Dataset], name: str, dim: str, labels: np.ndarray) -> np.ndarray:
    """A numeric (run, ``dim``) coordinate across runs over the union ``labels`` (NaN where a run lacks it)."""
    out = np.full((sum(d.sizes["run"] for d in datasets), labels.size), np.nan)
    row = 0
    for d in datasets:
        if name in d.coords:
            out[row:row + d.sizes["run"], pd.Index(labels).get_indexer(d[dim].values)] = d[name].values
        row += d.sizes["run"]
    return out


def _attrs_of(datasets: Sequence[xr.Dataset], name: str) -> dict[str, Any]:
    """The attributes of coordinate ``name`` in the first dataset that has it."""
    return next(dict(d[name].attrs) for d in datasets if name in d.coords)


def combine_coord_attrs(out: xr.Dataset, datasets: Sequence[xr.Dataset]) -> xr.Dataset:
    """``out`` with the attributes of its dimension coordinates (``size_bin`` units) taken from ``datasets``."""
    for name in ("size_bin",):
        if name in out.coords:
            out[name].attrs.update(next(d[name].attrs for d in datasets if name in d.coords))
    return out


def combined_attrs(datasets: Sequence[xr.Dataset], extra_warnings: Sequence[str] = ()) -> dict[str, Any]:
    """Attributes of the combination: those all runs share, provenance, every run's warnings prefixed by its label."""
    warnings = [f"{r}: {w}" for d in datasets for r in map(str, d["run"].values) for w in read_warnings(d)]
    readers = ",".join(sorted({d.attrs.get("reader", "") for d in datasets}))
    return {**_common_attrs(datasets), **provenance(reader=readers, warnings=[*warnings, *extra_warnings])}


#: Dims whose labels are numbers, combined as a sorted union (as is any dim whose labels are numbers in
#: every run, e.g. mpiP's ``comm_bin``); other labelled dims keep first-seen order, as text.
_SORTED_DIMS = ("rank", "sender", "receiver", "size_bin")


def _dim_labels(datasets: Sequence[xr.Dataset]) -> dict[str, np.ndarray]:
    """The union of labels of every non-run dimension (positions for dims without labels)."""
    dims = _ordered_union([dim for dim in d.dims if dim != "run"] for d in datasets)
    out: dict[str, np.ndarray] = {}
    for dim in dims:
        having = [d for d in datasets if dim in d.dims]
        if not all(dim in d.indexes for d in having):
            out[dim] = np.arange(max(d.sizes[dim] for d in having))
        elif dim in _SORTED_DIMS or all(d.variables[dim].dtype.kind in "iuf" for d in having):
            out[dim] = np.unique(np.concatenate([d.variables[dim].values for d in having]))
        else:
            out[dim] = np.asarray(_ordered_union(d.variables[dim].values for d in having), dtype=object)
    if "sender" in out:
        out["sender"] = out["receiver"] = out["rank"]
    return out


def _coord_map(datasets: Sequence[xr.Dataset], name: str, dim: str, *, strict: bool) -> dict[Any, Any]:
    """Label of ``dim`` -> value of coordinate ``name``; ``strict``: disagreeing runs are an error."""
    mapping: dict[Any, Any] = {}
    for d in datasets:
        if name not in d.coords:
            continue
        labels = d.variables[dim].values if dim in d.variables else np.arange(d.sizes[dim])  # as d[dim]
        for label, value in zip(labels.tolist(), d.variables[name].values.tolist()):
            if mapping.setdefault(label, value) != value and strict:
                raise ContractError(f"{dim} {label!r} has different {name} in different runs "
                                    f"({mapping[label]!r} and {value!r}); call/kind must agree")
    return mapping


def _run_coord(datasets: Sequence[xr.Dataset], name: str) -> np.ndarray:
    """A run coordinate across runs (NaN or "" for runs that lack it)."""
    parts = []
    numeric = any(np.issubdtype(d.variables[name].dtype, np.number) for d in datasets if name in d.coords)
    for d in datasets:
        if name in d.coords:
            parts.append(d.variables[name].values)
        else:
            parts.append(np.full(d.sizes["run"], np.nan if numeric else ""))
    return np.concatenate(parts)


def _common_attrs(datasets: Sequence[xr.Dataset]) -> dict[str, Any]:
    """Attributes that every dataset holds, all with the same value.

    An attribute only some runs carry (e.g. an mpiP report's ``mpip_command`` beside an IPM run)
    describes those runs, not the combination, so it is left out.
    """
    out: dict[str, Any] = {}
    conflicting: set[str] = set()
    for d in datasets:
        for key, value in d.attrs.items():
            if key in out and not np.array_equal(np.asarray(out[key], dtype=object), np.asarray(value, dtype=object)):
                conflicting.add(key)
            out.setdefault(key, value)
    partial = {key for key in out if any(key not in d.attrs for d in datasets)}
    return {k: v for k, v in out.items() if k not in conflicting | partial}


def _stack_sparse_traffic(datasets: Sequence[xr.Dataset], ranks: np.ndarray, quantities: np.ndarray) -> Any:
    """One sparse (run, sender, receiver, quantity) array over the union of ``ranks`` and ``quantities``."""
    import sparse

    coords, data = [], []
    for k, d in enumerate(datasets):
        if "traffic" not in d:
            continue
        pos = np.searchsorted(ranks, d["rank"].values)
        q = pd.Index(quantities).get_indexer(d["quantity"].values)
        coo = sparse.COO(d["traffic"].data)
        keep = ~np.isnan(coo.data)
        c = coo.coords[:, keep]
        coords.append(np.vstack([np.full(c.shape[1], k), pos[c[1]], pos[c[2]], q[c[3]]]))
        data.append(coo.data[keep])
    shape = (len(datasets), ranks.size, ranks.size, quantities.size)
    return sorted_coo(np.hstack(coords), np.concatenate(data), shape)


def _ordered_union(arrays: Iterable[Iterable[Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for values in arrays:
        for v in values:
            seen.setdefault(str(v), None)
    return list(seen)


def densify(ds: xr.Dataset) -> xr.Dataset:
    """Return ``ds`` with any pydata-sparse variables converted to numpy (for netCDF/zarr)."""
    out = ds.copy()
    for name, var in ds.data_vars.items():
        if hasattr(var.data, "todense") and not isinstance(var.data, np.ndarray):
            out[name] = var.copy(data=var.data.todense())
    return out
