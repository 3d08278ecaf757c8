"""Imbalance statistics: formulas on hand-made runs, properties, and the synthetic slow ranks/node."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import perfkit
from perfkit.analysis.imbalance import by_node, imbalance, mpi_share, outlier_ranks, robust_z, size_summary, slow_ranks
from perfkit.model import combine_runs, make_run
from tests.helpers import ROOT

FUNCS = ["Compute", "MPI_Recv", "w_MPI_Recv", "b_MPI_Bcast"]
CALLS = ["Compute", "MPI_Recv", "MPI_Recv", "MPI_Bcast"]
KINDS = ["compute", "transfer", "wait_late_sender", "wait_collective"]
SYNTH = ROOT / "data" / "synthetic"


def run_of(times: np.ndarray, label: str, **meta) -> xr.Dataset:
    """A run whose time table is ``times`` (rank, function) over FUNCS; other metrics 0."""
    prof = np.zeros((times.shape[0], len(FUNCS), 6))
    prof[:, :, 0] = times
    return make_run(prof, ranks=range(times.shape[0]), functions=FUNCS, calls=CALLS, kinds=KINDS,
                    run={"label": label, "nprocs": times.shape[0], **meta})


@pytest.fixture
def two() -> xr.Dataset:
    a = np.array([[1.0, 1, 0, 3], [2, 1, 0, 2], [3, 1, 1, 1], [6, 1, 0, 0]])
    b = np.array([[2.0, 0, 0, 1], [4, 0, 1, 0]])
    return combine_runs([run_of(a, "a"), run_of(b, "b")])


def test_formulas_per_function(two):
    s = imbalance(two).sel(run="a", function="Compute")
    assert float(s["max"]) == 6 and float(s["mean"]) == 3 and float(s["min"]) == 1
    assert int(s["rank_of_max"]) == 3
    assert float(s["max_over_mean"]) == pytest.approx(2.0)
    assert float(s["percent_imbalance"]) == pytest.approx(50.0)
    assert float(s["imbalance_time"]) == pytest.approx(3.0)
    assert float(s["load_balance"]) == pytest.approx(0.5)


def test_absent_ranks_are_excluded(two):
    s = imbalance(two).sel(run="b", function="Compute")
    assert float(s["mean"]) == 3.0 and float(s["min"]) == 2.0 and int(s["rank_of_max"]) == 1


def test_group_by_kind_and_call(two):
    by_call = imbalance(two, by="call").sel(run="a", call="MPI_Recv")
    assert float(by_call["max"]) == 2.0 and float(by_call["mean"]) == 1.25
    by_kind = imbalance(two, by="kind").sel(run="a", kind="wait_collective")
    assert float(by_kind["load_balance"]) == pytest.approx(1.5 / 3)


def test_missing_function_on_existing_rank_counts_as_zero():
    a = np.array([[1.0, 1, 0, 3], [2, np.nan, 0, 2]])
    s = imbalance(run_of(a, "a")).sel(run="a", function="MPI_Recv")
    assert float(s["min"]) == 0.0 and float(s["mean"]) == 0.5


def test_all_zero_group_has_nan_ratios(two):
    s = imbalance(two).sel(run="b", function="MPI_Recv")
    assert float(s["imbalance_time"]) == 0.0 and np.isnan(float(s["load_balance"]))


positive = arrays(np.float64, st.tuples(st.integers(2, 12), st.just(4)),
                  elements=st.floats(0.01, 1e4, allow_nan=False))


@settings(max_examples=40, deadline=None)
@given(times=positive, seed=st.integers(0, 1000))
def test_properties(times, seed):
    stats = imbalance(run_of(times, "p"))
    lb = stats["load_balance"].values
    assert np.all((lb > 0) & (lb <= 1 + 1e-12))
    assert np.all(stats["imbalance_time"].values >= -1e-9)
    assert np.all((stats["percent_imbalance"].values >= -1e-9) & (stats["percent_imbalance"].values < 100))
    perm = np.random.default_rng(seed).permutation(times.shape[0])
    shuffled = imbalance(run_of(times[perm], "p"))
    for name in ("max", "mean", "min", "load_balance", "imbalance_time"):
        np.testing.assert_allclose(shuffled[name].values, stats[name].values, rtol=1e-12)
    where = shuffled["rank_of_max"].values[0].astype(int)
    np.testing.assert_array_equal(times[perm][where, np.arange(4)], stats["max"].values[0])


def test_robust_z_and_recurring_outliers():
    rng = np.random.default_rng(0)
    runs = []
    for k in range(3):
        t = np.column_stack([rng.normal(10, 0.1, 40), np.ones(40), np.zeros(40), np.zeros(40)])
        t[7, 0] = 13.0  # always slow
        t[20 + k, 0] = 12.0  # slow once
        runs.append(run_of(t, f"r{k}"))
    out = outlier_ranks(combine_runs(runs))
    assert set(out.loc[out["n_runs"] == 3, "rank"]) == {7}
    assert set(out["rank"]) == {7, 20, 21, 22}
    flat = xr.DataArray([1.0, 1, 1, 1, 5], dims="rank")
    assert float(robust_z(flat)[-1]) > 3.5 and float(robust_z(flat)[0]) == 0.0


def test_by_node_mapping_and_ppn():
    t = np.column_stack([np.r_[np.full(4, 1.0), np.full(4, 1.2), np.full(4, 1.0)], np.ones(12), np.zeros((12, 2))])
    ds = run_of(t, "n", ppn=4)
    nodes = by_node(ds)
    assert nodes.loc[nodes["floor_excess"].idxmax(), "node"] == 1
    assert nodes.loc[nodes["node"] == 1, "floor_excess"].item() == pytest.approx(0.2)
    mapped = by_node(ds, nodes=[0, 1] * 6)
    assert list(mapped["n_ranks"]) == [6, 6]


def test_mpi_share_sums_to_one(two):
    share = mpi_share(two)
    assert share.groupby("run")["time_share"].sum().to_numpy() == pytest.approx([1.0, 1.0])
    assert share.loc[share["run"] == "a", "call"].iloc[0] == "MPI_Bcast"


def test_mpi_share_with_object_labels(two):
    """Labels read back from a store are object arrays, not fixed-width strings."""
    stored = two.assign_coords(call=("function", two["call"].values.astype(object)))
    assert mpi_share(stored).equals(mpi_share(two))


@pytest.fixture(scope="module")
def slt_series() -> xr.Dataset:
    return perfkit.open_runs(str(SYNTH / "*" / "slt.mpinside"))


@pytest.mark.parametrize("n", [48, 96, 192, 384, 768, 2048])
def test_synthetic_slow_ranks_match_truth(slt_series, n):
    truth = json.loads((SYNTH / str(n) / "truth.json").read_text())
    found = slow_ranks(slt_series, f"{n}/slt", threshold=truth["imbalance"]["threshold"])
    expected = dict(zip(truth["imbalance"]["slow_ranks"], truth["imbalance"]["slow_excess_over_mean"]))
    common = set(found["rank"]) & set(expected)
    assert len(common) >= 0.95 * len(expected) and len(found) <= 1.05 * len(expected) + 1
    excess = found.set_index("rank")["excess"]
    assert max(abs(excess[r] - expected[r]) for r in common) < 0.02


def test_synthetic_slow_node_found(slt_series):
    nodes = by_node(slt_series)
    for n in (48, 96, 192, 384, 768, 2048):
        truth = json.loads((SYNTH / str(n) / "truth.json").read_text())["slow_node"]
        table = nodes[nodes["run"] == f"{n}/slt"]
        top = table.loc[table["floor_excess"].idxmax()]
        assert int(top["node"]) == truth["node"]
        assert top["floor_excess"] == pytest.approx(truth["factor"] - 1, abs=0.035)


def test_size_summary_small_messages():
    ds = perfkit.open_profile(SYNTH / "48" / "basic.mpinside")
    sizes = size_summary(ds).set_index("function")
    assert sizes.loc["MPI_Bcast", "small_share"] == 1.0
    assert sizes.loc["MPI_Bcast", "messages"] == 48 * 300
    assert size_summary(ds.drop_vars("sizes")).empty


def test_a_trace_and_the_profile_of_one_run_state_the_same_mpi_share():
    """The collector's profile does not time MPI_Finalize, its trace does; start-up and shut-down are left
    out of both, so both state the MPI share between them (the lab run traced across 4 testbed nodes)."""
    run = ROOT / "data" / "lab" / "traces" / "dynamic_imbalance-np8.mpinside"
    profile, trace = mpi_share(perfkit.open_profile(run)), mpi_share(perfkit.open_profile(f"{run}.otf2"))
    assert "MPI_Finalize" in perfkit.open_profile(f"{run}.otf2")["call"].values
    for share in (profile, trace):
        assert not share["call"].isin(["MPI_Init", "MPI_Init_thread", "MPI_Finalize"]).any()
    assert trace["elapsed_share"].sum() == pytest.approx(profile["elapsed_share"].sum(), abs=1e-3)
    assert 0.3 < profile["elapsed_share"].sum() < 0.5


def test_slow_ranks_reads_only_its_run(two):
    import dask
    import dask.array as da

    @dask.delayed
    def unreadable() -> np.ndarray:
        raise AssertionError("run b was read")

    lazy = two.copy()
    b = da.from_delayed(unreadable(), shape=(1, *two["profile"].shape[1:]), dtype=float)
    lazy["profile"] = (two["profile"].dims, da.concatenate([da.from_array(two["profile"].values[:1]), b]))
    found = slow_ranks(lazy, "a", threshold=0.1, by="function", group="Compute")
    expected = slow_ranks(two, "a", threshold=0.1, by="function", group="Compute")
    assert found.equals(expected) and found["rank"].tolist() == [3]  # 6 against a mean of 3
