"""Tests of the synthetic MPInside generator (perfkit.synthetic) against its own ground truth."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import perfkit
from perfkit import synthetic
from perfkit.model import validate

BUNDLE = Path(__file__).resolve().parents[1] / "data" / "synthetic"
WRITTEN = ("time", "bytes_sent", "calls_sent", "bytes_recv", "calls_recv")
STEPS = 60


@pytest.fixture(scope="module")
def sim() -> synthetic.Simulation:
    return synthetic.simulate(96, seed=3, steps=STEPS)


@pytest.fixture(scope="module")
def runs(sim):
    return {mode: synthetic.to_dataset(sim, mode) for mode in synthetic.MODES}


def _time(ds, function):
    return ds["profile"].isel(run=0).sel(metric="time", function=function).values


def test_datasets_follow_the_contract(runs):
    for mode, ds in runs.items():
        validate(ds)
        assert str(ds["mode"].values[0]) == mode
        assert str(ds["system"].values[0]) == synthetic.SYSTEM


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    a = synthetic.write_series(tmp_path / "a", nprocs=(32,), modes=("slt",), steps=20, seed=5)
    b = synthetic.write_series(tmp_path / "b", nprocs=(32,), modes=("slt",), steps=20, seed=5)
    c = synthetic.write_series(tmp_path / "c", nprocs=(32,), modes=("slt",), steps=20, seed=6)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    assert a[0].read_bytes() != c[0].read_bytes()


def test_columns_add_up_to_elapsed(runs):
    for ds in runs.values():
        total = ds["profile"].isel(run=0).sel(metric="time").sum("function").values
        np.testing.assert_allclose(total, float(ds["elapsed"][0]), rtol=1e-12)


def test_bytes_sent_equal_bytes_received(runs):
    for ds in runs.values():
        prof = ds["profile"].isel(run=0)
        assert float(prof.sel(metric="bytes_sent").sum()) == float(prof.sel(metric="bytes_recv").sum())
        p2p = prof.sel(function=["MPI_Irecv", "MPI_Isend", "MPI_Send", "MPI_Recv"])
        assert float(p2p.sel(metric="calls_sent").sum()) == float(p2p.sel(metric="calls_recv").sum())


def test_traffic_matches_point_to_point_tables(runs):
    for ds in runs.values():
        prof = ds["profile"].isel(run=0)
        traffic = ds["traffic"].isel(run=0)
        p2p = ["MPI_Isend", "MPI_Send"]
        np.testing.assert_array_equal(traffic.sel(quantity="bytes").sum("receiver").values,
                                      prof.sel(metric="bytes_sent", function=p2p).sum("function").values)
        np.testing.assert_array_equal(traffic.sel(quantity="count").sum("receiver").values,
                                      prof.sel(metric="calls_sent", function=p2p).sum("function").values)
        np.testing.assert_array_equal(traffic.sel(quantity="bytes").sum("sender").values,
                                      prof.sel(metric="bytes_recv", function=["MPI_Irecv", "MPI_Recv"])
                                      .sum("function").values)
        recv_calls = [f for f in ds["function"].values if ds["call"].sel(function=f) in ("MPI_Recv", "MPI_Waitall")]
        np.testing.assert_allclose(traffic.sel(quantity="time").sum("sender").values,
                                   prof.sel(metric="time", function=recv_calls).sum("function").values, rtol=1e-12)


def test_size_histograms_sum_to_the_tables(runs):
    for ds in runs.values():
        sizes = ds["sizes"].isel(run=0).sum("size_bin", skipna=False)
        prof = ds["profile"].isel(run=0)
        for f in synthetic.SIZED:
            np.testing.assert_array_equal(sizes.sel(function=f, stat="count").values,
                                          prof.sel(function=f, metric="calls").values)
            np.testing.assert_allclose(sizes.sel(function=f, stat="time").values,
                                       prof.sel(function=f, metric="time").values, rtol=1e-9, atol=1e-15)


def test_slt_and_collective_wait_split_the_basic_call_time(runs):
    basic, slt, cw = runs["basic"], runs["slt"], runs["collective_wait"]
    for call in ("MPI_Recv", "MPI_Waitall"):
        np.testing.assert_allclose(_time(slt, "w_" + call) + _time(slt, call), _time(basic, call), rtol=1e-12)
        assert np.all(_time(slt, "w_" + call) >= 0) and np.all(_time(slt, call) > 0)
    for call in ("MPI_Bcast", "MPI_Allreduce"):
        np.testing.assert_allclose(_time(cw, "b_" + call) + _time(cw, call), _time(basic, call), rtol=1e-12)
    bcast_wait = _time(cw, "b_MPI_Bcast").sum() / _time(basic, "MPI_Bcast").sum()
    assert bcast_wait > 0.95  # the broadcast is mostly barrier wait, as in the LS-DYNA case study


def test_perfect_interconnect_keeps_waits_and_drops_transfer(sim, runs):
    basic, perfect = runs["basic"], runs["perfect"]
    truth = synthetic.truth(sim)
    for call in ("MPI_Recv", "MPI_Waitall"):
        transfer = np.asarray(truth["split"]["perfect"][call]["transfer"])
        wait = np.asarray(truth["split"]["perfect"][call]["wait"])
        assert transfer.sum() < 0.01 * _time(basic, call).sum()  # only call overheads remain
        np.testing.assert_allclose(_time(perfect, call), transfer + wait, atol=2e-6)
        assert wait.sum() > 0.5 * _time(perfect, call).sum()
    assert _time(perfect, "MPI_Bcast").sum() > 0.9 * _time(basic, "MPI_Bcast").sum()
    assert float(perfect["elapsed"][0]) <= float(basic["elapsed"][0])
    assert truth["elapsed"]["perfect"] <= truth["elapsed"]["basic"] == truth["elapsed"]["slt"]


def test_truth_slow_ranks_have_the_highest_compute(sim, runs):
    truth = synthetic.truth(sim)
    slow = truth["imbalance"]["slow_ranks"]
    assert slow
    compute = _time(runs["basic"], "Compute")
    top = set(np.argsort(-compute)[: len(slow)].tolist())
    assert len(top & set(slow)) >= 0.9 * len(slow)
    assert np.corrcoef(compute, truth["imbalance"]["expected_compute"])[0, 1] > 0.99
    excess = np.asarray(truth["imbalance"]["slow_excess_over_mean"])
    np.testing.assert_allclose(compute[slow] / compute.mean() - 1, excess, atol=0.03)
    np.testing.assert_allclose(truth["compute"], compute, atol=1e-6)


def test_contact_work_moves_and_slow_node_is_recorded(sim):
    truth = synthetic.truth(sim)
    assert truth["contact"]["first"] != truth["contact"]["last"]
    node = truth["slow_node"]
    assert node["ranks"] == list(range(node["node"] * 24, min(node["node"] * 24 + 24, 96)))
    assert 0 < truth["scaling"]["parallel_fraction"] < 1
    assert truth["synthetic"] is True


def test_written_files_read_back_equal(tmp_path, runs):
    synthetic.write_series(tmp_path, nprocs=(96,), seed=3, steps=STEPS)
    for mode, ds in runs.items():
        back = perfkit.open_profile(tmp_path / "96" / f"{mode}.mpinside")
        assert str(back["mode"].values[0]) == mode
        assert float(back["elapsed"][0]) == pytest.approx(float(ds["elapsed"][0]), abs=1e-6)
        assert list(back["function"].values) == list(ds["function"].values)
        assert list(back["kind"].values) == list(ds["kind"].values)
        for metric in WRITTEN:
            atol = 6e-7 if metric == "time" else 0
            np.testing.assert_allclose(back["profile"].sel(metric=metric).values,
                                       ds["profile"].sel(metric=metric).values, rtol=0, atol=atol)
        for name, atol in (("traffic", 6e-7), ("sizes", 6e-7)):
            np.testing.assert_allclose(np.asarray(back[name].values), ds[name].values, rtol=0, atol=atol)
        np.testing.assert_array_equal(back["size_bin"].values, ds["size_bin"].values)


def test_cli_writes_a_series(tmp_path):
    synthetic.main(["--out", str(tmp_path), "--nprocs", "32", "64", "--steps", "10", "--modes", "basic"])
    truth = json.loads((tmp_path / "64" / "truth.json").read_text())
    assert truth["nprocs"] == 64 and truth["steps"] == 10
    meta = json.loads((tmp_path / "32" / "basic.mpinside.perfkit.json").read_text())
    assert meta["system"] == synthetic.SYSTEM and meta["nodes"] == 2 and meta["threads"] == 1


@pytest.mark.parametrize("nprocs", [48, 96])
def test_bundled_data_is_what_the_generator_writes(tmp_path, nprocs):
    folder = BUNDLE / str(nprocs)
    if not folder.is_dir():
        pytest.skip("data/synthetic is not bundled")
    synthetic.write_series(tmp_path, nprocs=(nprocs,))
    made = sorted(p.name for p in (tmp_path / str(nprocs)).iterdir())
    assert made == sorted(p.name for p in folder.iterdir())
    for name in made:
        assert (tmp_path / str(nprocs) / name).read_bytes() == (folder / name).read_bytes(), name


def test_block_node_of_equals_the_default():
    default = synthetic.simulate(48, seed=2, steps=10)
    explicit = synthetic.simulate(48, seed=2, steps=10, node_of=np.arange(48) // 24)
    assert explicit.measured.elapsed == default.measured.elapsed
    np.testing.assert_array_equal(explicit.layout.level, default.layout.level)
    assert synthetic.truth(explicit) == synthetic.truth(default)


def test_slow_node_follows_the_placement():
    node_of = np.arange(48) % 2
    sim = synthetic.simulate(48, seed=2, steps=10, node_of=node_of)
    assert synthetic.truth(sim)["slow_node"]["ranks"] == np.flatnonzero(node_of == sim.slow_node).tolist()
    plus_x = sim.layout.nb[:, 21]  # direction (1, 0, 0): rank r + 1, on the other node
    assert np.all(sim.layout.level[plus_x >= 0, 21] == 1)


@pytest.mark.parametrize("node_of", [np.zeros(47, int), np.full(48, -1), np.full(48, 0.5), np.zeros(48, int)])
def test_bad_node_of_is_rejected(node_of):
    with pytest.raises(ValueError, match="node_of"):
        synthetic.simulate(48, steps=2, node_of=node_of)


def _dense_traffic(sim: synthetic.Simulation) -> np.ndarray:
    """The traffic of ``sim`` accumulated into a dense N x N x 3 array, contribution by contribution."""
    lay, timing = sim.layout, sim.measured
    out = np.zeros((lay.nprocs, lay.nprocs, 3))
    rows, dirs = np.nonzero(lay.nb >= 0)
    nbr = lay.nb[rows, dirs]
    np.add.at(out, (rows, nbr, 0), sim.steps * lay.halo[rows, dirs])
    np.add.at(out, (rows, nbr, 1), sim.steps)
    np.add.at(out, (nbr, rows, 2), timing.halo_time[rows, dirs])
    rows, faces = np.nonzero(lay.nb[:, lay.faces] >= 0)
    nbr = lay.nb[rows, lay.faces[faces]]
    np.add.at(out, (rows, nbr, 0), timing.contact_bytes[rows, faces])
    np.add.at(out, (rows, nbr, 1), sim.steps)
    np.add.at(out, (nbr, rows, 2), timing.contact_time[rows, faces])
    return out


@pytest.mark.parametrize("nprocs", [8, 27, 96, 500])
def test_sparse_traffic_equals_the_dense_accumulation_exactly(nprocs):
    sim = synthetic.simulate(nprocs, seed=2, steps=5)
    matrix = synthetic.traffic_matrix(sim, sim.measured)
    np.testing.assert_array_equal(matrix.todense(), _dense_traffic(sim))
    assert matrix.nnz == np.count_nonzero(_dense_traffic(sim))
    traffic = synthetic.to_dataset(sim, "slt")["traffic"]
    assert isinstance(traffic.data, np.ndarray) == (nprocs <= 96)  # 500 ranks: 6 MB dense, sparse
    np.testing.assert_array_equal(np.asarray(traffic.isel(run=0).data.todense() if nprocs > 96
                                             else traffic.isel(run=0).values), _dense_traffic(sim))
