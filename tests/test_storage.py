"""Lossless round trips to netCDF and zarr."""

from __future__ import annotations

import numpy as np
import pytest
import sparse
import xarray as xr

import perfkit
from perfkit.model import make_run
from tests.helpers import ROOT


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


def test_sparse_traffic_is_stored_densely(tmp_path):
    coo = sparse.COO(np.array([[0, 1], [1, 0], [0, 0]]), np.array([5.0, 7.0]), shape=(2, 2, 3))
    ds = make_run(np.ones((2, 1, 6)), ranks=[0, 1], functions=["Compute"], run={"label": "s"}, traffic=coo)
    back = perfkit.load(perfkit.save(ds, tmp_path / "s.nc"))
    assert back["traffic"].sel(sender=0, receiver=1, quantity="bytes") == 5
    assert back["traffic"].sel(sender=1, receiver=0, quantity="bytes") == 7


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
