"""Findings on the synthetic series (against truth.json), the seed tables and real mpiP runs."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import perfkit
from perfkit.analysis.diagnosis import (
    COLUMNS,
    NODE_SCATTER,
    _floor_beyond_trend,
    _scatter_without_each,
    diagnose,
    format_ranks,
)
from perfkit.analysis.imbalance import by_node
from perfkit.analysis.waits import breakdown, call_wait_share, wait_split
from perfkit.text import seconds
from tests.helpers import ROOT

SYNTH = ROOT / "data" / "synthetic"
MPIP = ROOT / "tests" / "data" / "mpip" / "real"


def test_format_ranks():
    assert format_ranks([5, 1, 2, 3, 9, 10]) == "1-3, 5, 9-10"
    assert format_ranks([]) == "none"
    assert format_ranks(range(0, 40, 2), limit=3) == "0, 2, 4 and 17 more ranges"
    assert format_ranks([1, 3], limit=1) == "1 and 1 more range"


@pytest.fixture(scope="module")
def n96():
    return perfkit.open_runs(str(SYNTH / "96" / "*.mpinside"))


def test_bcast_collective_wait_found(n96):
    found = diagnose(n96, run="collective_wait")
    row = found[found["title"] == "MPI_Bcast: collective wait"].iloc[0]
    truth = json.loads((SYNTH / "96" / "truth.json").read_text())["split"]["measured"]["MPI_Bcast"]
    share = sum(truth["wait"]) / (sum(truth["wait"]) + sum(truth["transfer"]))
    assert f"{100 * share:.0f}% of MPI_Bcast time is collective wait (measured)" in row["text"]
    assert row["seconds"] == pytest.approx(np.mean(truth["wait"]), rel=1e-3)
    assert "load imbalance" in row["text"] and row["severity"] == "high"
    assert list(found.columns) == COLUMNS
    assert found["seconds"].is_monotonic_decreasing


def test_slow_ranks_and_node_named(n96):
    found = diagnose(n96, run="slt")
    text = found.loc[found["category"] == "load_imbalance", "text"].item()
    assert "ranks 41-42, 45-46, 49-51, 53 is 12-30% above the mean" in text
    node = found[found["category"] == "slow_node"]
    assert list(node["title"]) == ["Slow node 2"] and "ranks 48-71" in node["text"].item()


def test_basic_mode_waits_are_estimated(n96):
    share = call_wait_share(n96)
    assert bool(share["estimated"].sel(run="basic", call="MPI_Bcast"))
    assert not bool(share["estimated"].sel(run="collective_wait", call="MPI_Bcast"))
    truth = json.loads((SYNTH / "96" / "truth.json").read_text())["split"]["measured"]
    for call in ("MPI_Bcast", "MPI_Recv"):
        est = float(share["wait"].sel(run="basic", call=call))
        assert 0.8 < est / sum(truth[call]["wait"]) <= 1.0
        measured = wait_split(n96)["time"].sel(run="collective_wait" if call == "MPI_Bcast" else "slt",
                                                call=call, part="wait")
        np.testing.assert_allclose(measured, truth[call]["wait"], atol=2e-6)
    found = diagnose(n96, run="basic")
    assert "estimated" in found.loc[found["title"] == "MPI_Bcast: collective wait", "text"].item()


def test_breakdown_adds_up(n96):
    parts = breakdown(n96)
    total = n96["profile"].sel(metric="time").sum("function")
    np.testing.assert_allclose(parts["total"], total, rtol=1e-9)
    assert set(parts["kind"].values) == set(perfkit.KINDS)


def test_communication_share_rises_across_series():
    ds = perfkit.open_runs(str(SYNTH / "*" / "collective_wait.mpinside"))
    found = diagnose(ds)
    trend = found[found["category"] == "scaling"]
    assert len(trend) == 1 and "26% at 48" in trend["text"].item()
    nodes = found[found["category"] == "slow_node"]
    expected = {f"{n}/collective_wait": json.loads((SYNTH / str(n) / "truth.json").read_text())["slow_node"]["node"]
                for n in (48, 96, 192, 384, 768, 2048)}
    assert {r: int(t.split()[-1]) for r, t in zip(nodes["run"], nodes["title"])} == expected


def test_seed_tables():
    found = diagnose(perfkit.open_profile(ROOT / "data" / "seed" / "mpinside_seed_tables.txt"))
    titles = list(found["title"])
    assert "Network transfer time" in titles and "Compute load imbalance" in titles
    assert "rank 0 computes 14.5 min" in found.loc[found["title"] == "Compute load imbalance", "text"].item()
    assert not found["title"].str.contains("MPI_Recv: late-sender").any()  # w_MPI_Recv is 0: no send-late time


@pytest.mark.parametrize("app, top_call", [("HPCCG-strong", "MPI_Allreduce"), ("CloverLeaf-strong", "MPI_Waitall")])
def test_real_mpip(app, top_call):
    ds = perfkit.open_runs(str(MPIP / app / "*" / "*.mpiP"))
    found = diagnose(ds)
    assert found["seconds"].notna().all() and (found["seconds"] >= 0).all()
    biggest = found[found["run"] == ds["run"].values[-1]]
    assert f"{top_call} (" in biggest.loc[biggest["category"] == "mpi_share", "text"].item()
    assert (found["category"] == "scaling").any()


def test_lazy_cube_gives_the_same_findings(n96, tmp_path):
    perfkit.save(n96, tmp_path / "n96.zarr")
    lazy = perfkit.load(tmp_path / "n96.zarr", chunks={"rank": 32})
    assert lazy["profile"].chunks is not None
    label = str(n96["run"].values[0])
    pd.testing.assert_frame_equal(diagnose(lazy, run=label), diagnose(n96, run=label))


IPM = ROOT / "tests" / "data" / "ipm" / "real"
REAL = [str(MPIP / app / "*" / "*.mpiP") for app in ("HPCCG-strong", "CloverLeaf-strong")] + [
    str(IPM / app / "*" / "*.ipm.xml") for app in ("HPCCG-strong", "CloverLeaf-strong")]


def claims_imbalance(row) -> bool:
    """Whether a finding attributes time to load imbalance (a number of seconds of it is no claim)."""
    return (row["category"] == "load_imbalance" or "load imbalance" in row["title"].lower()
            or "load imbalance (load balance" in row["text"] or "i.e. load imbalance" in row["text"])


@pytest.fixture(scope="module")
def real_runs():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [perfkit.open_runs(pattern) for pattern in REAL]


def test_balanced_real_runs_claim_no_load_imbalance(real_runs):
    balanced = 0
    for ds in real_runs:
        found = diagnose(ds)
        balance = perfkit.pop_metrics(ds)["load_balance"].to_series()
        for run in balance.index[(balance >= 0.95) & (ds["nprocs"].to_series() > 1)]:
            balanced += 1
            rows = found[found["run"] == run]
            assert not any(claims_imbalance(r) for _, r in rows.iterrows()), rows["text"].tolist()
            first = rows.iloc[0]
            assert first["category"] == "efficiency" and "load balance" in first["text"]
            assert "measured" in first["text"]
    assert balanced >= 3  # HPCCG mpiP 2 and 4 ranks, HPCCG IPM 2 ranks


def test_unexplained_waits_say_what_they_could_be(real_runs):
    found = diagnose(real_runs[0], run="test_HPCCG.4")  # load balance 0.98, MPI 36 %
    first = found.iloc[0]
    assert first["category"] == "efficiency" and "cannot tell" in first["title"]
    for cause in ("serialisation", "interference", "ranks sharing cores", "network", "trace", "perfkit collect --slt"):
        assert cause in first["text"]
    waits = found[found["category"] == "unexplained_wait"].iloc[0]
    assert "not load imbalance" in waits["text"] and "modelled" in waits["text"]


def test_imbalanced_real_run_names_the_ranks(real_runs):
    found = diagnose(real_runs[1], run="clover_leaf.16")  # load balance 0.59
    row = found[found["category"] == "load_imbalance"].iloc[0]
    assert row["text"].startswith("Load balance 0.59") and "ranks " in row["text"]


def test_efficiency_summary_comes_first_and_adds_up(n96):
    found = diagnose(n96, run="collective_wait")
    first = found.iloc[0]
    assert first["category"] == "efficiency"
    pop = perfkit.pop_metrics(n96.sel(run=["collective_wait"]))
    lost = float(pop["elapsed"][0] - pop["useful_mean"][0])
    assert first["seconds"] == pytest.approx(lost)
    parts = [float(pop["useful_max"][0] - pop["useful_mean"][0]), float(pop["ideal_elapsed"][0] - pop["useful_max"][0]),
             float(pop["elapsed"][0] - pop["ideal_elapsed"][0])]
    assert sum(parts) == pytest.approx(lost)
    assert f"load imbalance {seconds(parts[0])}" in first["text"]


def test_an_all_nan_run_is_reported_empty_never_as_measured():
    from perfkit import combine_runs
    from tests.helpers import small_run

    good = small_run("good", 4, nprocs=4)
    blank = small_run("blank", 4, seed=1, nprocs=4)
    blank["profile"][:] = np.nan
    findings = diagnose(combine_runs([good, blank]))
    empty = findings[findings["run"] == "blank"]
    assert list(empty["category"]) == ["empty"] and empty["severity"].iloc[0] == "info"
    assert "no measured time" in empty["text"].iloc[0]
    assert not findings["text"].str.contains("nan").any()
    assert (findings["run"] == "good").any()
    only = diagnose(blank)
    assert list(only["category"]) == ["empty"]


def test_a_gradient_of_compute_over_the_ranks_is_no_slow_node():
    """The lab's collective-imbalance program, run on 4 nodes x 2 ranks: each rank computes 10 ms more per step
    than the rank before it (a known cause). Nodes 2 and 3's fastest ranks compute 17% and 43% more than the
    typical node's, yet no node is slow: the later nodes sit on the line the gradient draws."""
    ds = perfkit.open_profile(ROOT / "data" / "lab" / "traces" / "collective_imbalance-np8.mpinside.otf2")
    nodes = by_node(ds)
    assert nodes["floor_excess"].round(2).tolist()[2:] == [0.17, 0.43]
    found = diagnose(ds)
    assert "slow_node" not in set(found["category"])
    assert "rank 7 computes" in found.loc[found["category"] == "load_imbalance", "lead"].item()


@settings(max_examples=60, deadline=None)
@given(n_nodes=st.integers(5, 40), base=st.floats(0.1, 100), slope=st.floats(-0.02, 0.5),
       slow=st.integers(0, 39), factor=st.floats(1.1, 3.0))
def test_a_slow_node_stands_off_the_line_and_a_gradient_stays_on_it(n_nodes, base, slope, slow, factor):
    nodes = pd.DataFrame({"node": np.arange(n_nodes), "min": base * (1 + slope * np.arange(n_nodes))})
    assert np.allclose(_floor_beyond_trend(nodes), 0, atol=1e-9)
    k = slow % n_nodes  # one node off the line: most pairs of nodes still give the slope, and their median
    raised = nodes.assign(min=nodes["min"].where(nodes["node"] != k, nodes["min"] * factor))
    excess = _floor_beyond_trend(raised)
    assert excess.iloc[k] == pytest.approx(factor - 1, rel=1e-6)
    assert np.allclose(excess.drop(k), 0, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(size=st.integers(3, 60), seed=st.integers(0, 2**32 - 1))
def test_the_scatter_without_each_node_is_that_of_the_others(size, seed):
    beyond = pd.Series(np.random.default_rng(seed).normal(0, 0.1, size))
    expected = [1.4826 * np.median(np.abs(beyond.drop(i))) for i in beyond.index]
    np.testing.assert_allclose(_scatter_without_each(beyond), expected, rtol=1e-12)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), spread=st.floats(0.02, 0.2), slow=st.integers(0, 1023))
def test_nodes_that_vary_by_chance_are_not_slow_but_one_far_off_is(seed, spread, slow):
    """1,024 nodes whose fastest ranks scatter by chance (normal, ``spread`` of the line, cut at 4 ``spread``): with
    a spread of 0.2 some 80% stand more than 5% off the line, yet none is 5 times the others' scatter off; one
    node 8 ``spread`` off is."""
    floors = 10.0 * (1 + spread * np.random.default_rng(seed).normal(0, 1, 1024).clip(-4, 4))
    nodes = pd.DataFrame({"node": np.arange(1024), "min": floors})
    beyond = _floor_beyond_trend(nodes)
    assert not (beyond > NODE_SCATTER * _scatter_without_each(beyond)).any()
    raised = nodes.assign(min=nodes["min"].where(nodes["node"] != slow, 10.0 * (1 + 8 * spread)))
    beyond = _floor_beyond_trend(raised)
    assert (beyond > NODE_SCATTER * _scatter_without_each(beyond)).tolist() == [n == slow for n in range(1024)]
