"""The analyses on a lazy (dask-backed) cube: the in-memory results, with memory bounded by a few chunks.

A cube of a few hundred MB (3 runs x 60,000 ranks x 31 functions x 7 metrics, dense) is generated
block by block of ranks, written to a zarr store and opened with ``perfkit.load(store,
chunks={"rank": ...})``: neither the test nor the analyses ever hold it. Peak memory is measured
with ``tracemalloc`` (numpy's buffers are traced) under dask's synchronous scheduler (one block at
a time), and must stay below ``K_CHUNKS`` chunks plus the per-rank arrays each analysis keeps
(``VECTORS``, in units of one float per run and rank).
"""

from __future__ import annotations

import tracemalloc
import warnings
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import dask.callbacks
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import perfkit
from perfkit import synthetic
from perfkit.analysis import diagnosis
from perfkit.analysis.cube import rank_totals
from perfkit.analysis.diagnosis import diagnose
from perfkit.analysis.imbalance import imbalance
from perfkit.analysis.pop import pop_metrics
from perfkit.analysis.scaling import scaling
from perfkit.analysis.waits import split_and_breakdown
from perfkit.analysis.whatif import SCENARIOS, whatif
from perfkit.model import METRICS, make_run
from perfkit.plots.profile import rank_table
from perfkit.storage import load, save

#: Calls with a measured wait column (``w_`` late sender, ``b_`` collective wait) and calls without.
WAITED = {"MPI_Recv": "w_", "MPI_Waitall": "w_", "MPI_Wait": "w_", "MPI_Sendrecv": "w_", "MPI_Bcast": "b_",
          "MPI_Allreduce": "b_", "MPI_Barrier": "b_", "MPI_Reduce": "b_", "MPI_Alltoall": "b_", "MPI_Allgather": "b_"}
PLAIN = ("MPI_Isend", "MPI_Irecv", "MPI_Send", "MPI_Waitany", "MPI_Alltoallv", "MPI_Scatter", "MPI_Gather", "MPI_Test")
COLUMNS = [("Compute", "Compute", "compute"), ("MPI_Init", "MPI_Init", "other"),
           ("MPI_Finalize", "MPI_Finalize", "other"), *((call, call, "transfer") for call in PLAIN),
           *(column for call, prefix in WAITED.items() for column in (
               (prefix + call, call, "wait_late_sender" if prefix == "w_" else "wait_collective"),
               (call, call, "transfer")))]
N_CALLS = len(PLAIN) + len(WAITED)
CALL_METRICS = [*METRICS, "time_min"]
#: Compute time per rank is uniform on this interval [s]; every other function's time on [0, 1] s.
COMPUTE = (50.0, 60.0)
ELAPSED = 120.0
BIG_RANKS, BIG_CHUNK = 60_000, 3_000
#: Peak memory bound: this many chunks (the block being read, its compressed bytes, the metrics and
#: functions an analysis selects from it, their temporaries) ...
K_CHUNKS = 5
#: ... plus this many per-rank arrays of one float per run and rank: the per-rank results each
#: analysis keeps (diagnose keeps the wait split, two per call, and its sums over ranks).
VECTORS = {"imbalance": 10, "imbalance by kind": 20, "pop_metrics": 20, "whatif": 40, "scaling": 10,
           "diagnose": 4 * N_CALLS + 30, "rank_totals": 10}


def _block(nprocs: tuple[int, ...], block_info: dict[Any, Any] | None = None) -> np.ndarray:
    """One block of the generated profile (run, rank, function, metric), drawn from its first rank."""
    info = block_info[None]
    (first, last), shape = info["array-location"][1], info["chunk-shape"]
    rng = np.random.default_rng([7, first])
    out = np.empty(shape)
    out[:, :, 0, 0] = rng.uniform(*COMPUTE, shape[:2])
    out[:, :, 1:, 0] = rng.uniform(0.0, 1.0, (*shape[:2], shape[2] - 1))
    out[:, :, 0, 1:] = np.nan
    out[:, :, 1:, 1:] = rng.integers(1, 1000, (*shape[:2], shape[2] - 1, shape[3] - 1))
    out[:, :, 1:, -1] = out[:, :, 1:, 0] / out[:, :, 1:, 1] * rng.uniform(0.2, 1.0, (*shape[:2], shape[2] - 1))
    out[np.asarray(nprocs)[:, None] <= np.arange(first, last)[None, :]] = np.nan  # ranks beyond a run's size
    return out


def generated_cube(nranks: int, chunk: int) -> xr.Dataset:
    """A canonical cube of 3 runs (nranks / 4, / 2 and all ranks) whose profile is a lazy dask array."""
    nprocs = (nranks // 4, nranks // 2, nranks)
    runs = [make_run(np.zeros((1, len(COLUMNS), len(CALL_METRICS))), ranks=[0], functions=[c[0] for c in COLUMNS],
                     calls=[c[1] for c in COLUMNS], kinds=[c[2] for c in COLUMNS], metrics=CALL_METRICS,
                     extra_units={"time_min": "s"},
                     run={"label": f"generated-{n}", "nprocs": n, "elapsed": ELAPSED, "ppn": 100}) for n in nprocs]
    template = perfkit.combine_runs(runs)
    ranks = tuple(min(chunk, nranks - start) for start in range(0, nranks, chunk))
    profile = da.map_blocks(partial(_block, nprocs), dtype=np.float64,
                            chunks=((len(nprocs),), ranks, (len(COLUMNS),), (len(CALL_METRICS),)))
    coords = {name: coord for name, coord in template.coords.items() if "rank" not in coord.dims}
    return xr.Dataset({"profile": (("run", "rank", "function", "metric"), profile)},
                      coords={**coords, "rank": np.arange(nranks)}, attrs=template.attrs)


@pytest.fixture(autouse=True)
def one_block_at_a_time() -> Iterator[None]:
    with dask.config.set(scheduler="synchronous"), warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The specified chunks separate", UserWarning)
        yield


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with dask.config.set(scheduler="synchronous"):
        return save(generated_cube(3_000, 500), tmp_path_factory.mktemp("lazy") / "small.zarr")


@pytest.fixture(scope="module")
def synthetic_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Synthetic MPInside runs (measured and estimated waits, size histograms, traffic), 48 and 96 ranks."""
    runs = [synthetic.generate_run(n, mode, steps=20)[0] for n in (48, 96) for mode in ("slt", "collective_wait",
                                                                                        "basic")]
    return save(perfkit.combine_runs(runs), tmp_path_factory.mktemp("lazy") / "synthetic.zarr")


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with dask.config.set(scheduler="synchronous"):
        return save(generated_cube(BIG_RANKS, BIG_CHUNK), tmp_path_factory.mktemp("lazy") / "big.zarr")


@pytest.mark.parametrize("store", ["small_store", "synthetic_store"])
def test_lazy_results_equal_the_in_memory_ones(store: str, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(store)
    memory, lazy = load(path), load(path, chunks={"rank": 32 if store == "synthetic_store" else 500})
    assert lazy["profile"].chunks is not None and len(lazy["profile"].chunks[1]) > 2
    for by in ("function", "kind", "call"):
        result = imbalance(lazy, by=by)
        assert all(var.chunks is None for var in result.variables.values())
        xr.testing.assert_allclose(imbalance(memory, by=by), result, rtol=1e-12)
    xr.testing.assert_allclose(pop_metrics(memory), pop_metrics(lazy), rtol=1e-12)
    for scenario in SCENARIOS:
        xr.testing.assert_allclose(whatif(memory, scenario), whatif(lazy, scenario), rtol=1e-12)
    for group in (None, "kind", "function"):
        pd.testing.assert_frame_equal(scaling(memory, group=group), scaling(lazy, group=group), rtol=1e-12)
    pd.testing.assert_frame_equal(diagnose(memory), diagnose(lazy), rtol=1e-12)


def test_rank_totals_are_the_plotted_table(synthetic_store: Path) -> None:
    memory, lazy = load(synthetic_store), load(synthetic_store, chunks={"rank": 32})
    for run in map(str, memory["run"].values):
        for by in ("function", "kind", "call"):
            for ranks in (None, (10, 70)):
                expected = rank_table(memory, run, by=by, ranks=ranks, max_points=10**9)
                pd.testing.assert_frame_equal(rank_totals(lazy, run, by=by, ranks=ranks), expected)


ANALYSES: dict[str, Callable[[xr.Dataset], Any]] = {
    "imbalance": imbalance, "imbalance by kind": lambda ds: imbalance(ds, by="kind"), "pop_metrics": pop_metrics,
    "whatif": lambda ds: whatif(ds, "balance"), "scaling": scaling, "diagnose": diagnose,
    "rank_totals": lambda ds: rank_totals(ds, f"generated-{BIG_RANKS}", by="kind"),
}


@pytest.mark.parametrize("name", list(ANALYSES))
def test_lazy_peak_memory_is_a_few_chunks(name: str, big_store: Path) -> None:
    ds = load(big_store, chunks={"rank": BIG_CHUNK})
    dense = ds["profile"].nbytes
    chunk = dense * BIG_CHUNK / BIG_RANKS
    vector = ds.sizes["run"] * ds.sizes["rank"] * 8
    assert dense > 250e6 and ds["profile"].data.numblocks[1] == BIG_RANKS // BIG_CHUNK
    tracemalloc.start()
    try:
        result = ANALYSES[name](ds)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    bound = K_CHUNKS * chunk + VECTORS[name] * vector
    print(f"{name}: peak {peak / 1e6:.1f} MB, bound {bound / 1e6:.1f} MB, chunk {chunk / 1e6:.1f} MB, "
          f"per-rank array {vector / 1e6:.2f} MB, dense cube {dense / 1e6:.0f} MB")
    assert peak < bound
    assert peak < dense / 2
    if name == "imbalance by kind":  # what the generator drew: compute uniform on COMPUTE, on every rank of a run
        compute = result.sel(kind="compute")
        np.testing.assert_allclose(compute["mean"], np.mean(COMPUTE), atol=0.1)
        assert (compute["max"] <= COMPUTE[1]).all() and (compute["min"] >= COMPUTE[0]).all()


def test_diagnose_peak_memory_does_not_grow_with_runs(big_store: Path) -> None:
    """Three runs of 60,000 ranks are diagnosed with about the peak memory of one: a chunk of runs at a time."""
    ds = load(big_store, chunks={"rank": BIG_CHUNK})
    peaks = {}
    for runs, label in ((1, f"generated-{BIG_RANKS}"), (3, None)):
        tracemalloc.start()
        try:
            diagnose(ds, run=label)
            peaks[runs] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    split = N_CALLS * 2 * BIG_RANKS * 8  # one run's wait split (rank x call x part)
    print(f"diagnose: peak {peaks[1] / 1e6:.1f} MB for 1 run, {peaks[3] / 1e6:.1f} MB for 3; "
          f"one run's wait split {split / 1e6:.1f} MB")
    # holding every run's split would add two splits (the old code: +27 MB); one chunk of runs at a time adds
    # none, plus what the threads' order leaves alive at the peak (up to +12 MB in a full run under load)
    assert peaks[3] < peaks[1] + split


def test_diagnose_splits_one_chunk_of_runs_at_a_time(small_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-rank wait split and breakdown are computed and held for one chunk of runs at a time."""
    ds = load(small_store, chunks={"rank": 500})
    held: list[int] = []

    def recording(sub: xr.Dataset, **kwargs: bool) -> tuple[xr.Dataset | None, xr.Dataset | None]:
        split, parts = split_and_breakdown(sub, **kwargs)
        held.append(split.sizes["run"])
        return split, parts

    monkeypatch.setattr(diagnosis, "split_and_breakdown", recording)
    found = diagnose(ds)
    assert held == [1, 1, 1]
    pd.testing.assert_frame_equal(found, diagnose(load(small_store)), rtol=1e-12)


@pytest.mark.parametrize("name", ["imbalance", "imbalance by kind", "pop_metrics", "scaling", "whatif", "diagnose"])
def test_no_task_holds_more_than_one_chunk_of_runs(name: str, small_store: Path) -> None:
    """Every task of the analysis outputs at most one run (the store's run chunk) and at most one
    block of ranks' worth of the cube: memory follows the chunk, whatever the number of runs.
    """
    ds = load(small_store, chunks={"rank": 500})
    runs, chunk = ds.sizes["run"], 500 * ds.sizes["function"] * ds.sizes["metric"] * 8
    assert runs == 3 and ds["profile"].chunks[0] == (1, 1, 1)
    outputs: list[tuple[str, tuple[int, ...], int]] = []

    def record(key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        if isinstance(result, np.ndarray) and result.ndim >= 2:
            outputs.append((str(key), result.shape, result.nbytes))

    with dask.callbacks.Callback(posttask=record):
        result = ANALYSES[name](ds)
    assert outputs, "the analysis computed nothing lazily"
    assert max(shape[0] for _, shape, _ in outputs) == 1, [o for o in outputs if o[1][0] > 1][:3]
    assert max(nbytes for *_, nbytes in outputs) <= chunk
    reference = ANALYSES[name](load(small_store))
    if isinstance(result, pd.DataFrame):
        pd.testing.assert_frame_equal(result, reference, rtol=1e-12)
    else:
        xr.testing.assert_allclose(result, reference, rtol=1e-12)
