"""select_traffic on sparse traffic read from a store: one run's matrices without pydata sparse's indexing."""

from __future__ import annotations

import numpy as np
import pytest
import sparse
import xarray as xr

import perfkit
from perfkit import synthetic
from perfkit.placement.topology import Topology
from perfkit.placement.traffic import select_traffic


def _sparse_study() -> tuple[xr.Dataset, dict[str, xr.Dataset]]:
    """Synthetic runs of 48 and 96 ranks with their traffic as ``sparse.COO``, combined along ``run``."""
    runs = {}
    for n in (48, 96):
        run, _ = synthetic.generate_run(n, "slt", steps=2, seed=n)
        runs[str(run["run"].values[0])] = run.assign(traffic=run["traffic"].copy(data=sparse.COO.from_numpy(
            run["traffic"].values)))
    return perfkit.combine_runs(list(runs.values())), runs


def refuse_sparse_indexing(monkeypatch: pytest.MonkeyPatch) -> None:
    """pydata sparse's indexing compiles numba code on first use (tens of seconds): refuse it from now on."""
    def refused(self, index):
        raise AssertionError(f"sparse.COO indexed with {index!r}")
    monkeypatch.setattr(sparse.COO, "__getitem__", refused)


@pytest.mark.parametrize("chunks", [None, {}, {"run": 2}])
def test_a_run_of_a_sparse_store_is_read_without_sparse_indexing_and_without_the_other_runs_ranks(
        tmp_path, chunks, monkeypatch):
    """In memory, lazily one run a block, and lazily both runs in one block."""
    study, runs = _sparse_study()
    stored = perfkit.load(perfkit.save(study, tmp_path / "s.zarr"), chunks=chunks and {})
    if chunks:
        stored = stored.chunk(chunks)
        assert stored["traffic"].data.numblocks[0] == 1
    assert sparse_traffic_meta(stored) and stored.sizes["sender"] == 96
    refuse_sparse_indexing(monkeypatch)
    for label, run in runs.items():
        n = int(run["nprocs"].values[0])
        matrix, counts = select_traffic(stored, run=label)
        truth = run["traffic"].data.todense()[0]
        assert matrix.shape == counts.shape == (n, n)
        np.testing.assert_array_equal(matrix.toarray(), truth[:, :, 0])
        np.testing.assert_array_equal(counts.toarray(), truth[:, :, 1])
        times, no_counts = select_traffic(stored, run=label, quantity="time")
        np.testing.assert_array_equal(times.toarray(), truth[:, :, 2])
        assert no_counts is not None  # the counts come with any quantity but count itself
        assert select_traffic(stored, run=label, quantity="count")[1] is None


def test_placing_a_small_run_of_a_sparse_store_equals_placing_the_run_itself(tmp_path, monkeypatch):
    study, runs = _sparse_study()
    stored = perfkit.load(perfkit.save(study, tmp_path / "s.zarr"), chunks={})
    refuse_sparse_indexing(monkeypatch)
    label = next(label for label, run in runs.items() if int(run["nprocs"].values[0]) == 48)
    topology = Topology(nodes=4, cores=12)
    from_store = perfkit.place(stored, topology, "scotch", run=label)
    own = perfkit.place(runs[label]["traffic"].data.todense()[0, :, :, 0], topology, "scotch")
    np.testing.assert_array_equal(from_store.slot, own.slot)
    assert from_store.cost().inter_node_fraction == pytest.approx(own.cost().inter_node_fraction)


def test_an_unknown_quantity_or_run_is_refused_naming_what_there_is(tmp_path):
    study, _ = _sparse_study()
    stored = perfkit.load(perfkit.save(study, tmp_path / "s.zarr"), chunks={})
    with pytest.raises(ValueError, match="not in traffic quantities"):
        select_traffic(stored, run=0, quantity="flops")
    with pytest.raises(ValueError, match="synthetic-48-slt"):
        select_traffic(stored, run="nope")


def sparse_traffic_meta(ds: xr.Dataset) -> bool:
    """Whether ``ds``'s traffic reads back as pydata sparse (eagerly or in dask blocks)."""
    return isinstance(getattr(ds["traffic"].data, "_meta", ds["traffic"].data), sparse.COO)
