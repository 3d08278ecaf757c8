"""open_profile / open_runs: sniffing, metadata, parallel reading, dask clusters, lazy cubes."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import xarray as xr

import perfkit
from perfkit.io.mpinside import write
from tests.helpers import ROOT, small_run


@pytest.fixture
def run_dir(tmp_path):
    for k, n in enumerate((2, 4, 8)):
        write(small_run(f"r{n}", n, seed=k), tmp_path / f"run{n}.txt")
    return tmp_path


def test_open_runs_from_glob(run_dir):
    ds = perfkit.open_runs(str(run_dir / "run*.txt"))
    assert list(ds["run"].values) == ["run2", "run4", "run8"]
    assert list(ds["nprocs"].values) == [2, 4, 8]
    assert np.isnan(ds["profile"].sel(run="run2", rank=5)).all()
    assert set(ds["format"].values) == {"mpinside"}


def test_open_runs_metadata_mapping_and_callable(run_dir):
    ds = perfkit.open_runs(sorted(run_dir.glob("*.txt")), metadata={"run4.txt": {"system": "A", "nodes": 1}})
    assert ds["system"].sel(run="run4") == "A" and ds["system"].sel(run="run2") == ""
    ds = perfkit.open_runs(sorted(run_dir.glob("*.txt")), metadata=lambda p: {"ppn": int(p.stem[3:])})
    assert list(ds["ppn"].values) == [2, 4, 8]


def test_same_file_names_in_different_folders_get_distinct_labels(tmp_path):
    for n in (2, 4):
        (tmp_path / str(n)).mkdir()
        write(small_run("x", n), tmp_path / str(n) / "stats.txt")
    ds = perfkit.open_runs(str(tmp_path / "*" / "stats.txt"))
    assert list(ds["run"].values) == ["2/stats", "4/stats"]


def test_open_runs_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        perfkit.open_runs(str(tmp_path / "*.none"))
    (tmp_path / "bad.txt").write_text("not a profile\n")
    with pytest.raises(perfkit.PerfkitFormatError, match=r"bad\.txt"):
        perfkit.open_runs([tmp_path / "bad.txt"])


def test_lazy_cube_chunked_along_rank(run_dir, tmp_path):
    ds = perfkit.open_runs(str(run_dir / "run*.txt"), chunks={"rank": 3})
    assert ds["profile"].chunks[1] == (3, 3, 2)
    path = perfkit.save(ds, tmp_path / "lazy.zarr")
    xr.testing.assert_identical(perfkit.load(path), perfkit.open_runs(str(run_dir / "run*.txt")))


def test_progress_bar(run_dir, capsys):
    perfkit.open_runs(str(run_dir / "run*.txt"), progress=True)


def test_distributed_cluster_gives_same_dataset(run_dir):
    distributed = pytest.importorskip("distributed")
    expected = perfkit.open_runs(str(run_dir / "run*.txt"))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl:
        with distributed.Client(cl):
            got = perfkit.open_runs(str(run_dir / "run*.txt"))
    xr.testing.assert_identical(got, expected)


def test_sidecar_metadata(tmp_path):
    src = ROOT / "data" / "seed" / "mpinside_seed_tables.txt"
    path = tmp_path / "seed.txt"
    shutil.copy(src, path)
    (tmp_path / "seed.txt.perfkit.json").write_text('{"nodes": 1, "ppn": 6, "system": "SGI ICE X"}')
    ds = perfkit.open_profile(path)
    assert ds["ppn"].item() == 6 and ds["system"].item() == "SGI ICE X"
    (tmp_path / "seed.txt.perfkit.json").write_text('{"colour": 1}')
    with pytest.raises(perfkit.PerfkitFormatError, match="unknown run metadata"):
        perfkit.open_profile(path)
    (tmp_path / "seed.txt.perfkit.json").write_text('{"nodes": ')
    with pytest.raises(perfkit.PerfkitFormatError, match="not valid JSON"):
        perfkit.open_profile(path)


def test_unknown_format_name():
    with pytest.raises(ValueError, match="known formats"):
        perfkit.open_profile(ROOT / "data" / "seed" / "mpinside_seed_tables.txt", format="nope")


def test_numeric_labels_of_a_reader_dim_stay_numbers_and_cells_stay_in_place():
    """mpiP's comm_bin (communicator size) differs between runs: every run's cells keep their bin."""
    import warnings

    files = sorted((ROOT / "tests" / "data" / "mpip" / "real" / "HPCCG-strong").glob("*/*.mpiP"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", perfkit.PerfkitWarning)
        ds = perfkit.open_runs(files)
        runs = [perfkit.open_profile(f) for f in files]
    assert ds["comm_bin"].values.tolist() == [0.0, 8.0, 16.0]
    for one in runs:
        share = one["coll_time_share"].isel(run=0)
        combined = ds["coll_time_share"].sel(run=one["run"].values[0]).sel(
            {dim: share[dim] for dim in share.dims})
        xr.testing.assert_equal(combined.reset_coords(drop=True), share.reset_coords(drop=True))
