"""The canonical Dataset contract: construction, validation, combining runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import perfkit
from perfkit.model import METRICS, make_run, read_warnings, run_coords
from tests.helpers import ROOT, small_run


def test_make_run_pads_base_metrics_and_units():
    ds = make_run(np.ones((2, 1, 1)), ranks=[0, 1], functions=["Compute"], metrics=["time"])
    assert list(ds["metric"].values) == list(METRICS)
    assert ds["units"].sel(metric="time").item() == "s"
    assert np.isnan(ds["profile"].sel(metric="bytes_sent")).all()
    assert ds["profile"].dims == ("run", "rank", "function", "metric")
    perfkit.validate(ds)


def test_unknown_run_values_are_nan_not_invented():
    meta = run_coords(label="x")
    assert np.isnan(meta["nodes"]) and np.isnan(meta["elapsed"]) and meta["system"] == ""
    with pytest.raises(perfkit.ContractError, match="not a number"):
        run_coords(nodes="many")
    with pytest.raises(perfkit.ContractError, match="unknown run metadata"):
        run_coords(colour="red")
    with pytest.raises(perfkit.ContractError, match="mode"):
        run_coords(mode="fast")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda ds: ds.assign(profile=ds["profile"].transpose("rank", "run", "function", "metric")), "profile dims"),
        (lambda ds: ds.assign(profile=ds["profile"].astype("float32")), "float64"),
        (lambda ds: ds.drop_vars("kind"), "'kind'"),
        (lambda ds: ds.assign_coords(kind=("function", ["compute", "waiting", "transfer"])), "kind values"),
        (lambda ds: ds.sel(metric=["time", "calls"]), "lacks base metrics"),
        (lambda ds: ds.drop_vars("nodes"), "'nodes'"),
        (lambda ds: ds.drop_vars("profile"), "no 'profile'"),
        (lambda ds: ds.assign_coords(function=["Compute", "Recv", "w_MPI_Recv"]), "MPI_Xxx"),
        (lambda ds: ds.assign_coords(rank=[0, 0, 1, 2]), "rank labels are not unique"),
    ],
)
def test_validate_names_what_is_wrong(mutate, message):
    with pytest.raises(perfkit.ContractError, match=message):
        perfkit.validate(mutate(small_run("a", 4)))


def test_combine_runs_of_different_rank_counts(two_runs):
    ds = perfkit.combine_runs(two_runs)
    assert ds.sizes["run"] == 2 and ds.sizes["rank"] == 8
    a = ds["profile"].sel(run="a")
    assert np.isnan(a.sel(rank=slice(4, 7))).all()
    np.testing.assert_array_equal(a.sel(rank=slice(0, 3)).values, two_runs[0]["profile"].isel(run=0).values)
    assert np.isnan(ds["traffic"].sel(run="b")).all()
    assert np.isnan(ds["traffic"].sel(run="a", sender=5)).all()
    assert list(ds["mode"].values) == ["slt", ""]
    assert ds["nodes"].sel(run="b") == 2 and np.isnan(ds["nodes"].sel(run="a"))
    assert ds["call"].sel(function="w_MPI_Recv").item() == "MPI_Recv"


def test_combine_union_of_functions_keeps_call_and_kind():
    a = small_run("a", 2)
    b = make_run(np.ones((2, 2, 6)), ranks=[0, 1], functions=["Compute", "b_MPI_Bcast"],
                 calls=["Compute", "MPI_Bcast"], kinds=["compute", "wait_collective"], run={"label": "b"})
    ds = perfkit.combine_runs([a, b])
    assert list(ds["function"].values) == ["Compute", "MPI_Recv", "w_MPI_Recv", "b_MPI_Bcast"]
    assert ds["kind"].sel(function="b_MPI_Bcast").item() == "wait_collective"
    assert np.isnan(ds["profile"].sel(run="a", function="b_MPI_Bcast")).all()


def test_combine_refuses_ambiguity():
    with pytest.raises(perfkit.ContractError, match="more than once"):
        perfkit.combine_runs([small_run("a", 2), small_run("a", 3)])
    relabelled = perfkit.combine_runs([small_run("a", 2), small_run("a", 3)], labels=["x", "y"])
    assert list(relabelled["label"].values) == ["x", "y"]
    other = small_run("b", 2).assign_coords(kind=("function", ["compute", "transfer", "transfer"]))
    with pytest.raises(perfkit.ContractError, match="different kind in different runs"):
        perfkit.combine_runs([small_run("a", 2), other])
    with pytest.raises(perfkit.ContractError, match="no runs"):
        perfkit.combine_runs([])


def test_combine_keeps_each_runs_warnings():
    a = make_run(np.ones((1, 1, 6)), ranks=[0], functions=["Compute"], run={"label": "a"}, warnings=["odd"])
    ds = perfkit.combine_runs([a, small_run("b", 1)])
    assert read_warnings(ds) == ["a: odd"]


def test_large_combined_traffic_stays_sparse(monkeypatch, two_runs):
    monkeypatch.setattr(perfkit.model, "DENSE_TRAFFIC_LIMIT", 10)
    ds = perfkit.combine_runs(two_runs)
    traffic = ds["traffic"].data
    assert not isinstance(traffic, np.ndarray)
    dense = traffic.todense()
    np.testing.assert_allclose(dense[0, :4, :4], two_runs[0]["traffic"].values[0])
    assert dense[1].sum() == 0 and dense[0, 4:].sum() == 0
    assert any("no traffic matrices" in w for w in read_warnings(ds))


def test_hosts_are_text_per_rank():
    ds = make_run(np.ones((3, 1, 6)), ranks=[0, 1, 2], functions=["Compute"], hosts=["n1", "n1", ""])
    assert ds["host"].dims == ("run", "rank") and ds["host"].dtype.kind == "U"
    assert ds["host"].isel(run=0).values.tolist() == ["n1", "n1", ""]
    with pytest.raises(perfkit.ContractError, match="2 host names for 3 ranks"):
        make_run(np.ones((3, 1, 6)), ranks=[0, 1, 2], functions=["Compute"], hosts=["n1", "n1"])
    with pytest.raises(perfkit.ContractError, match="host dtype is float64, expected text"):
        perfkit.validate(ds.assign(host=ds["host"].copy(data=np.zeros((1, 3)))))
    with pytest.raises(perfkit.ContractError, match="host dims"):
        perfkit.validate(ds.assign(host=ds["host"].transpose()))


def test_combine_runs_with_and_without_hosts(two_runs):
    a, b = two_runs  # 4 and 8 ranks
    a = a.assign(host=(("run", "rank"), np.array([["n1", "n1", "node-two", "node-two"]])))
    c = small_run("c", 2, seed=3).assign(host=(("run", "rank"), np.array([["x", "y"]])))
    ds = perfkit.combine_runs([a, b, c])
    assert ds["host"].dtype == np.dtype("<U8")  # the widest name, fixed width: never NaN, never object
    assert ds["host"].sel(run="a").values.tolist() == ["n1", "n1", "node-two", "node-two", *[""] * 4]
    assert ds["host"].sel(run="b").values.tolist() == [""] * 8
    assert ds["host"].sel(run="c").values.tolist() == ["x", "y", *[""] * 6]
    assert "host" not in perfkit.combine_runs([b])
    assert perfkit.combine_runs([b, c])["host"].sel(run="b").values.tolist() == [""] * 8


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 5), st.integers(0, 2),
                          st.one_of(st.floats(-1e6, 1e6), st.just(float("nan")))), max_size=40))
def test_sorted_coo_is_sparse_own_construction(entries):
    """Duplicates summed and coordinates sorted with numpy give the array sparse's own checks and sorting give."""
    import sparse

    from perfkit.model import sorted_coo

    coords = np.array([e[:3] for e in entries], dtype=np.int64).reshape(-1, 3).T
    data = np.array([e[3] for e in entries], dtype=np.float64)
    ours = sorted_coo(coords, data, (5, 6, 3))
    theirs = sparse.COO(coords, data, shape=(5, 6, 3), fill_value=0.0)
    np.testing.assert_array_equal(ours.coords, theirs.coords)
    np.testing.assert_allclose(ours.data, theirs.data, rtol=1e-12, equal_nan=True)
    np.testing.assert_allclose(ours.todense(), theirs.todense(), rtol=1e-12, equal_nan=True)


@pytest.mark.parametrize("profile", [ROOT / "data" / "synthetic" / "768" / "slt.mpinside",
                                     ROOT / "tests" / "data" / "ipm" / "real" / "HPCCG-strong" / "16" /
                                     "unknown.1795313459.30979.ipm.xml",
                                     ROOT / "tests" / "data" / "otf2" / "casita-10-mpi-tags" / "traces.otf2"],
                         ids=["mpinside", "ipm", "otf2"])
def test_reading_a_profile_with_a_matrix_compiles_no_numba_code(profile: Path) -> None:
    """sparse's checks compile numba code on first use (2.7 s in a fresh process): the readers go around them
    (every matrix read sparse here, however small; the OTF2 reader's own wait-state kernels are compiled code of
    its own, not counted); nor does a read import dask.distributed to look for a client."""
    import subprocess
    import sys

    script = ("import sys, numba.core.dispatcher as d, sparse, perfkit, perfkit.model\n"
              "perfkit.model.DENSE_TRAFFIC_BYTES = 0\n"
              "compiled = []\n"
              "real = d.Dispatcher._compile_for_args\n"
              "d.Dispatcher._compile_for_args = lambda self, *a, **k: (self.py_func.__module__.startswith('sparse') "
              "and compiled.append(self.py_func.__name__)) or real(self, *a, **k)\n"
              f"ds = perfkit.open_runs({str(profile)!r})\n"
              "print(compiled, 'distributed' in sys.modules, type(ds['traffic'].data).__name__)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] False COO"
