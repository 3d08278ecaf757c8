"""Lossless round trips to netCDF and zarr."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import sparse
import xarray as xr

import perfkit
from perfkit import synthetic
from perfkit.model import make_run
from perfkit.placement.topology import Topology
from tests.helpers import ROOT, small_run


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_round_trip_is_lossless(tmp_path, two_runs, suffix):
    ds = perfkit.combine_runs(two_runs)
    back = perfkit.load(perfkit.save(ds, tmp_path / f"cube{suffix}"))
    xr.testing.assert_identical(back, ds)


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_round_trip_of_a_read_file(tmp_path, suffix):
    ds = perfkit.open_profile(ROOT / "data" / "seed" / "mpinside_seed_tables.txt")
    back = perfkit.load(perfkit.save(ds, tmp_path / f"seed{suffix}"))
    xr.testing.assert_identical(back, ds)
    assert back.attrs["warnings"] == ds.attrs["warnings"]


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_round_trip_keeps_host_names(tmp_path, two_runs, suffix):
    """Text per rank, "" for ranks a run lacks and runs without names; fixed width, eagerly and lazily."""
    hosts = ["n1", "n1", "node-long.example", "é-host"]
    ds = perfkit.combine_runs([two_runs[0].assign(host=(("run", "rank"), np.array([hosts]))), two_runs[1]])
    path = perfkit.save(ds, tmp_path / f"cube{suffix}")
    back = perfkit.load(path)
    xr.testing.assert_identical(back, ds)
    assert back["host"].dtype == ds["host"].dtype
    assert back["host"].sel(run="a").values.tolist() == [*hosts, "", "", "", ""]
    lazy = perfkit.load(path, chunks={})
    assert lazy["host"].chunks is not None and lazy["host"].dtype == ds["host"].dtype
    xr.testing.assert_identical(lazy.load(), ds)


def _sparse_run(label: str = "s") -> xr.Dataset:
    """Two ranks; pair 0->1 with time not measured (NaN), pair 1->0 with bytes only, 1->1 NaN alone."""
    coords = np.array([[0, 0, 0, 1, 1], [1, 1, 1, 0, 1], [0, 1, 2, 0, 2]])
    coo = sparse.COO(coords, np.array([5.0, 2.0, np.nan, 7.0, np.nan]), shape=(2, 2, 3))
    return make_run(np.ones((2, 1, 6)), ranks=[0, 1], functions=["Compute"], run={"label": label}, traffic=coo)


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_sparse_traffic_is_stored_as_pairs_and_read_back_sparse(tmp_path, suffix):
    ds = _sparse_run()
    path = perfkit.save(ds, tmp_path / f"s{suffix}")
    raw = xr.open_zarr(path) if suffix == ".zarr" else xr.open_dataset(path, engine="h5netcdf")
    assert "traffic" not in raw and raw.sizes["nnz"] == 2  # the pairs 0->1 and 1->0; 1->1 holds no value
    assert raw["traffic_sender"].dtype == np.int32 and raw["traffic_nnz"].values.tolist() == [2]
    expected = np.array([[[0, 0, 0], [5, 2, np.nan]], [[7, 0, 0], [0, 0, 0]]])
    eager = perfkit.load(path)["traffic"]
    assert isinstance(eager.data, sparse.COO) and eager.data.fill_value == 0
    np.testing.assert_array_equal(eager.data.todense()[0], expected)
    lazy = perfkit.load(path, chunks={})["traffic"]
    assert isinstance(lazy.data._meta, sparse.COO) and lazy.data.chunks[0] == (1,)
    np.testing.assert_array_equal(lazy.data.compute().todense()[0], expected)
    xr.testing.assert_identical(perfkit.load(path).drop_vars("traffic"), ds.drop_vars("traffic"))


def test_a_run_without_matrices_reads_zero_in_sparse_traffic_and_says_so(tmp_path):
    ds = perfkit.combine_runs([_sparse_run("s"), small_run("none", 2, traffic=False)])
    back = perfkit.load(perfkit.save(ds, tmp_path / "s.zarr"), chunks={})
    assert back["traffic"].sizes["run"] == 2
    assert back["traffic"].isel(run=1).data.compute().nnz == 0
    assert any("'none'" in w and "read as 0" in w for w in perfkit.model.read_warnings(back))
    np.testing.assert_array_equal(back["traffic"].isel(run=0).data.compute().todense(),
                                  ds["traffic"].isel(run=0).data.todense())


def test_a_lazy_sparse_store_saves_again_run_by_run(tmp_path):
    ds = perfkit.combine_runs([_sparse_run("s"), _sparse_run("t")])
    lazy = perfkit.load(perfkit.save(ds, tmp_path / "a.zarr"), chunks={})
    again = perfkit.load(perfkit.save(lazy, tmp_path / "b.nc"))
    np.testing.assert_array_equal(again["traffic"].data.todense(), ds["traffic"].data.todense())


def test_a_20k_rank_stencil_matrix_is_stored_in_o_nnz_never_n_by_n(tmp_path):
    """20,000 ranks, 6 face partners: the store is a few MB and no step allocates an N x N array
    (which would be 3.2 GB of float64: the traced peak stays far below one)."""
    run, _ = synthetic.generate_run(20_000, "slt", steps=2)
    tracemalloc.start()
    try:
        path = perfkit.save(run, tmp_path / "big.zarr")
        lazy = perfkit.load(path, chunks={})
        placed = perfkit.place(lazy, Topology(nodes=20_000 // 32, cores=32), "block")
        cost = placed.cost(lazy["traffic"].isel(run=0).sel(quantity="bytes"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 400e6
    assert sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) < 20e6
    back = lazy["traffic"].data.compute()
    assert back.shape == (1, 20_000, 20_000, 3) and back.nnz == run["traffic"].data.nnz
    np.testing.assert_array_equal(back.coords, run["traffic"].data.coords)
    np.testing.assert_array_equal(back.data, run["traffic"].data.data)
    assert 0 < cost.inter_node_fraction < 1


def test_lazy_load(tmp_path, two_runs):
    path = perfkit.save(perfkit.combine_runs(two_runs), tmp_path / "cube.zarr")
    lazy = perfkit.load(path, chunks={"rank": 4})
    assert lazy["profile"].chunks is not None
    np.testing.assert_array_equal(lazy["profile"].values, perfkit.combine_runs(two_runs)["profile"].values)


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_an_existing_output_is_replaced_only_with_overwrite(tmp_path, two_runs, suffix):
    from tests.kill_harness import tree_hash

    path = perfkit.save(two_runs[0], tmp_path / f"cube{suffix}")
    before = tree_hash(path)
    with pytest.raises(FileExistsError, match="overwrite=True replaces it"):
        perfkit.save(two_runs[1], path)
    assert tree_hash(path) == before
    xr.testing.assert_identical(perfkit.load(perfkit.save(two_runs[1], path, overwrite=True)), two_runs[1])
    assert sorted(tmp_path.iterdir()) == [path]  # no temporary left


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_a_failed_save_leaves_the_old_file_byte_for_byte(tmp_path, two_runs, suffix, monkeypatch):
    from tests.kill_harness import tree_hash

    path = perfkit.save(two_runs[0], tmp_path / f"cube{suffix}")
    before = tree_hash(path)

    def fail(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(perfkit.storage, "mark_complete", fail)  # everything written but the mark
    with pytest.raises(OSError, match="disk full"):
        perfkit.save(two_runs[1], path, overwrite=True)
    assert tree_hash(path) == before and sorted(tmp_path.iterdir()) == [path]


def test_a_store_without_the_completeness_mark_is_refused(tmp_path, two_runs):
    """The mark is written last: a store written up to it but not it (or written by other software) is refused."""
    import zarr

    ds = perfkit.combine_runs(two_runs)
    store = perfkit.save(ds, tmp_path / "cube.zarr")
    group = zarr.open_group(str(store), mode="r+", zarr_format=2)
    group.attrs[perfkit.storage.COMPLETE] = 1  # says one run, holds two
    zarr.consolidate_metadata(str(store))
    with pytest.raises(perfkit.PerfkitFormatError, match="says 1 runs, the store holds 2"):
        perfkit.load(store)
    del group.attrs[perfkit.storage.COMPLETE]
    zarr.consolidate_metadata(str(store))
    for chunks in (None, {}):
        with pytest.raises(perfkit.PerfkitFormatError, match=r"no completeness mark \(attribute 'perfkit_complete'"):
            perfkit.load(store, chunks=chunks)
    (store / ".zmetadata").unlink()
    with pytest.raises(perfkit.PerfkitFormatError, match=r"no consolidated metadata \(.zmetadata\)"):
        perfkit.load(store)
    ds.to_netcdf(tmp_path / "plain.nc", engine="h5netcdf")
    with pytest.raises(perfkit.PerfkitFormatError, match=r"plain\.nc: no completeness mark"):
        perfkit.load(tmp_path / "plain.nc")


@pytest.mark.parametrize("suffix", [".zarr", ".nc"])
def test_lazy_load_reads_one_run_per_chunk_unless_told(tmp_path, two_runs, suffix):
    path = perfkit.save(perfkit.combine_runs(two_runs), tmp_path / f"runs{suffix}")
    lazy = perfkit.load(path, chunks={"rank": 2})
    assert lazy["profile"].chunks[0] == (1, 1)
    assert lazy["profile"].chunks[1][0] == 2
    assert perfkit.load(path, chunks={"run": 2})["profile"].chunks[0] == (2,)
    xr.testing.assert_identical(lazy.load(), perfkit.load(path))
