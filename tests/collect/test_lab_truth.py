"""The lab's ground truth (perfkit.collect.lab): the zero-cost simulator against hand-derived results."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfkit.collect import lab
from perfkit.collect.lab.scenarios import SCENARIOS
from perfkit.collect.lab.simulate import (
    ANY_SOURCE,
    Collective,
    Compute,
    Recv,
    Send,
    SimulationError,
    simulate,
)

SECONDS = st.floats(0.0, 0.05, allow_nan=False).map(lambda x: round(x, 4))
RANKS = st.integers(2, 9)
STEPS = st.integers(0, 12)
EXAMPLES = settings(max_examples=40, deadline=None)


def _slt(t):
    return t["send_late"].sum("function").values


def _cw(t):
    return t["collective_wait"].fillna(0.0).sum("function").values


def _ring(a: int, b: int, n: int) -> int:
    return min(abs(a - b), n - abs(a - b))


@EXAMPLES
@given(n=RANKS, steps=STEPS, c=SECONDS, b=st.integers(0, 4096))
def test_balanced_nobody_waits(n, steps, c, b):
    t = lab.truth("balanced", n, steps=steps, step_seconds=c, bytes=b)
    np.testing.assert_allclose(t["compute_time"], steps * c)
    np.testing.assert_allclose(_slt(t), 0.0, atol=1e-12)
    np.testing.assert_allclose(_cw(t), 0.0, atol=1e-12)
    np.testing.assert_allclose(t["end"], steps * c)
    assert t.attrs["cause"] == "balanced"


@EXAMPLES
@given(n=RANKS, steps=STEPS, c=SECONDS, d=SECONDS, data=st.data())
def test_static_imbalance_spreads_one_hop_per_step(n, steps, c, d, data):
    # The delay of rank L reaches ring distance j >= 1 after j - 1 steps: SLT_j = max(0, S - j + 1) d.
    late = data.draw(st.integers(0, n - 1))
    t = lab.truth("static_imbalance", n, steps=steps, step_seconds=c, extra_seconds=d, late_rank=late)
    dist = np.array([_ring(r, late, n) for r in range(n)])
    want = np.where(dist == 0, 0.0, np.maximum(0, steps - dist + 1) * d)
    np.testing.assert_allclose(_slt(t), want, atol=1e-12)
    np.testing.assert_allclose(t["compute_time"], steps * c + (dist == 0) * steps * d)
    assert float(t["end"].max()) == pytest.approx(steps * (c + d))


@EXAMPLES
@given(ppn=st.integers(1, 4), nodes=st.integers(2, 4), steps=STEPS, c=SECONDS, d=SECONDS, data=st.data())
def test_static_imbalance_of_a_node(ppn, nodes, steps, c, d, data):
    k = data.draw(st.integers(0, nodes - 1))
    n = ppn * nodes
    t = lab.truth("static_imbalance", n, steps=steps, step_seconds=c, extra_seconds=d, ppn=ppn, late_node=k)
    late = np.arange(n) // ppn == k
    np.testing.assert_allclose(t["compute_time"], steps * c + late * steps * d)
    # the node's inner ranks have only late neighbours, its edge ranks see their late neighbour in time
    np.testing.assert_allclose(_slt(t)[late], 0.0, atol=1e-12)
    assert float(t["end"].max()) == pytest.approx(steps * (c + d))


@EXAMPLES
@given(n=st.integers(2, 3), rounds=st.integers(0, 4), c=SECONDS, d=SECONDS)
def test_dynamic_imbalance_small_rings(n, rounds, c, d):
    # With at most 3 ranks everyone neighbours everyone: every step ends at (k + 1)(c + d) for all.
    steps = rounds * n
    t = lab.truth("dynamic_imbalance", n, steps=steps, step_seconds=c, extra_seconds=d)
    np.testing.assert_allclose(t["compute_time"], steps * c + rounds * d)
    np.testing.assert_allclose(_slt(t), steps * (c + d) - (steps * c + rounds * d), atol=1e-12)


@EXAMPLES
@given(n=RANKS, rounds=st.integers(0, 3), c=SECONDS, d=SECONDS)
def test_dynamic_imbalance_is_balanced_on_average(n, rounds, c, d):
    t = lab.truth("dynamic_imbalance", n, steps=rounds * n, step_seconds=c, extra_seconds=d)
    np.testing.assert_allclose(t["compute_time"], rounds * n * c + rounds * d)
    assert float(t["end"].max()) <= rounds * n * (c + d) + 1e-12


@EXAMPLES
@given(n=RANKS, steps=st.integers(1, 12), c=SECONDS)
def test_pipeline_serialises(n, steps, c):
    # Rank 0 waits (n-1)c per step; rank i waits ic to fill the ring, then (n-1)c per later step.
    t = lab.truth("pipeline", n, steps=steps, step_seconds=c)
    want = [steps * (n - 1) * c] + [i * c + (steps - 1) * (n - 1) * c for i in range(1, n)]
    np.testing.assert_allclose(_slt(t), want, atol=1e-12)
    np.testing.assert_allclose(t["compute_time"], steps * c)
    assert float(t["end"][0]) == pytest.approx(steps * n * c)
    assert t.attrs["cause"] == "serialisation"


@EXAMPLES
@given(n=RANKS, steps=st.integers(1, 12), c=SECONDS, d=SECONDS, e=SECONDS)
def test_collective_imbalance_waits(n, steps, c, d, e):
    t = lab.truth("collective_imbalance", n, steps=steps, step_seconds=c, extra_seconds=d, root_extra_seconds=e)
    r = np.arange(n)
    cw = t["collective_wait"]
    np.testing.assert_allclose(cw.sel(function="MPI_Allreduce"), steps * d * (n - 1 - r) / (n - 1), atol=1e-12)
    np.testing.assert_allclose(cw.sel(function="MPI_Bcast"), np.where(r == 0, 0.0, steps * e), atol=1e-12)
    assert np.isnan(cw.sel(function="MPI_Barrier")).all()  # start-up skew is not prescribed
    np.testing.assert_allclose(_slt(t), 0.0, atol=1e-12)
    np.testing.assert_allclose(t["end"], steps * (c + d + e))


@EXAMPLES
@given(n=RANKS, steps=STEPS, c=SECONDS, d=SECONDS)
def test_any_source_gather(n, steps, c, d):
    # Rank 0's ANY_SOURCE receives wait, in total, for the latest sender: d per step.
    t = lab.truth("any_source", n, steps=steps, step_seconds=c, extra_seconds=d)
    r = np.arange(1, n)
    slt = _slt(t)
    assert slt[0] == pytest.approx(steps * d)
    np.testing.assert_allclose(slt[1:], steps * d * (r - 1) / (n - 1), atol=1e-12)
    np.testing.assert_allclose(t["traffic_count"][1:, 0], steps)
    np.testing.assert_allclose(t["traffic_count"][0, 1:], steps)


@EXAMPLES
@given(n=RANKS, steps=st.integers(1, 12), c=SECONDS, d=SECONDS, data=st.data())
def test_fortran_halo_waits(n, steps, c, d, data):
    late = data.draw(st.integers(0, n - 1))
    t = lab.truth("fortran_halo", n, steps=steps, step_seconds=c, extra_seconds=d, late_rank=late)
    dist = np.array([_ring(r, late, n) for r in range(n)])
    np.testing.assert_allclose(_slt(t), (dist == 1) * steps * d, atol=1e-12)
    np.testing.assert_allclose(_cw(t), (dist >= 2) * steps * d, atol=1e-12)
    np.testing.assert_allclose(t["calls"].sel(function="MPI_Allreduce"), steps)
    np.testing.assert_allclose(t["calls"].sel(function="MPI_Waitall"), steps)


@EXAMPLES
@given(name=st.sampled_from(sorted(SCENARIOS)), n=RANKS, steps=STEPS, c=SECONDS, b=st.integers(0, 4096))
def test_conservation(name, n, steps, c, b):
    t = lab.truth(name, n, steps=steps, step_seconds=c, bytes=b)
    tb, tc = t["traffic_bytes"].values, t["traffic_count"].values
    assert tb.sum() == t["bytes_sent"].sum() == t["bytes_recv"].sum()
    np.testing.assert_array_equal(tb.sum(axis=1), t["bytes_sent"])
    np.testing.assert_array_equal(tb, tc * b)  # every lab message has the same size
    calls = t["calls"]
    sent = sum(calls.sel(function=f) for f in ("MPI_Send", "MPI_Isend") if f in calls["function"])
    np.testing.assert_array_equal(tc.sum(axis=1), sent if not np.isscalar(sent) else np.zeros(n))
    for f in ("MPI_Init", "MPI_Finalize", "MPI_Barrier", "MPI_Comm_rank", "MPI_Comm_size"):
        np.testing.assert_array_equal(calls.sel(function=f), 1)
    if SCENARIOS[name].wall_time_prescribed:
        # every rank's time is either computing or waiting
        np.testing.assert_allclose(t["end"], t["compute_time"] + _slt(t) + _cw(t), atol=1e-9)
        assert (t["send_late"] >= 0).all() and (t["collective_wait"].fillna(0) >= 0).all()


def test_oversubscribed_has_no_wall_time_truth():
    t = lab.truth("oversubscribed", 8, steps=5, work=1000)
    for name in ("compute_time", "end", "send_late", "collective_wait"):
        assert np.isnan(t[name]).all(), name
    assert "busy loop" in t.attrs["unavailable"]
    assert t.attrs["cause"] == "oversubscribed"
    np.testing.assert_array_equal(t["calls"].sel(function="MPI_Waitall"), 5)
    np.testing.assert_array_equal(t["traffic_count"].sum("receiver"), 10)


@pytest.mark.parametrize("name", ["abort", "segfault"])
def test_failing_scenarios_cover_the_steps_before_the_failure(name):
    t = lab.truth(name, 4, steps=10, step_seconds=0.01, fail_rank=2, fail_step=3)
    assert t.attrs["cause"] == name
    assert "rank 2" in t.attrs["outcome"] and "MPI_Finalize" in t.attrs["outcome"]
    np.testing.assert_allclose(t["compute_time"], 0.03)


def test_cause_is_balanced_without_imbalance():
    assert lab.truth("static_imbalance", 4, extra_seconds=0.0).attrs["cause"] == "balanced"
    assert lab.truth("collective_imbalance", 4, extra_seconds=0, root_extra_seconds=0).attrs["cause"] == "balanced"
    assert lab.truth("static_imbalance", 4).attrs["cause"] == "static_imbalance"


def test_parameters_are_checked():
    with pytest.raises(TypeError, match="no parameter"):
        lab.truth("balanced", 4, extra_seconds=0.1)
    with pytest.raises(KeyError, match="known"):
        lab.truth("nonsense", 4)
    with pytest.raises(ValueError, match="at least 2"):
        lab.truth("balanced", 1)
    with pytest.raises(ValueError, match="interface"):
        lab.truth("fortran_halo", 2, interface="mpi_f08")


def test_any_source_matches_the_earliest_sender():
    prog = [
        [Recv(ANY_SOURCE, 0, 8), Recv(ANY_SOURCE, 0, 8)],
        [Compute(0.3), Send(0, 0, 8)],
        [Compute(0.1), Send(0, 0, 8)],
    ]
    tr = simulate(prog)
    assert tr.send_late[0, "MPI_Recv"] == pytest.approx(0.3)
    assert tr.end[0] == pytest.approx(0.3)


def test_any_source_waits_for_a_slower_runnable_rank():
    # rank 2's message is already there, but rank 1 (still computing) sends earlier in time
    prog = [
        [Compute(0.5), Recv(ANY_SOURCE, 0, 8), Recv(ANY_SOURCE, 0, 8)],
        [Compute(0.2), Send(0, 0, 1)],
        [Compute(0.4), Send(0, 0, 2)],
    ]
    tr = simulate(prog)
    assert tr.send_late[0, "MPI_Recv"] == 0.0
    assert tr.traffic_bytes[1, 0] == 1 and tr.traffic_bytes[2, 0] == 2


def test_deadlock_and_mismatched_collectives_are_refused():
    with pytest.raises(SimulationError, match="deadlock"):
        simulate([[Recv(1, 0, 8)], [Recv(0, 0, 8)]])
    with pytest.raises(SimulationError, match="disagree"):
        simulate([[Collective("MPI_Bcast")], [Collective("MPI_Allreduce")]])


def test_nan_compute_propagates():
    tr = simulate([[Compute(math.nan), Send(1, 0, 8)], [Recv(0, 0, 8)]])
    assert math.isnan(tr.end[1]) and math.isnan(tr.send_late[1, "MPI_Recv"])


def test_truth_round_trip(tmp_path):
    t = lab.truth("collective_imbalance", 4, steps=3)
    profile = tmp_path / "run.mpinside"
    path = lab.save_truth(t, profile)
    assert path == tmp_path / "run.mpinside.truth.nc"
    back = lab.load_truth(profile)
    assert back.identical(t) or back.equals(t)
    assert back.attrs["cause"] == "collective_imbalance"
    assert back.attrs["parameters"] == t.attrs["parameters"]


def test_every_scenario_is_listed_with_an_explanation():
    names = lab.scenarios()
    assert set(names) >= {"balanced", "static_imbalance", "dynamic_imbalance", "pipeline",
                          "collective_imbalance", "oversubscribed", "abort", "segfault", "any_source",
                          "fortran_halo"}
    for name in names:
        assert lab.truth(name, 3).attrs["explanation"]


@EXAMPLES
@given(name=st.sampled_from(["balanced", "static_imbalance", "pipeline", "collective_imbalance", "any_source"]),
       n=st.integers(2, 6), steps=st.integers(1, 6), c=SECONDS, shift=st.floats(0, 100))
def test_realised_truth_of_an_ideal_run_is_the_prescribed_truth(name, n, steps, c, shift):
    # An ideal run's compute intervals, replayed with absolute times, give back the prescribed truth.
    prescribed = lab.truth(name, n, steps=steps, step_seconds=c)
    sc = SCENARIOS[name]
    ideal = simulate(sc.program(n, sc.params(steps=steps, step_seconds=c)))
    intervals = [[(a + shift, b + shift) for a, b in rank] for rank in ideal.compute_intervals]
    realised = lab.truth(name, n, realised=intervals, steps=steps, step_seconds=c)
    assert realised.attrs["basis"] == "realised"
    for var in ("compute_time", "send_late", "calls", "traffic_bytes"):
        np.testing.assert_allclose(realised[var], prescribed[var], atol=1e-9, err_msg=var)
    np.testing.assert_allclose(realised["collective_wait"].fillna(0), prescribed["collective_wait"].fillna(0),
                               atol=1e-9)


def test_realised_late_wakeup_becomes_a_wait_of_the_neighbours():
    # balanced, 3 ranks, 1 step of 10 ms, but rank 1 woke 4 ms late: its neighbours wait 4 ms for it
    realised = [[(0.0, 0.010)], [(0.0, 0.014)], [(0.0, 0.010)]]
    t = lab.truth("balanced", 3, steps=1, step_seconds=0.01, realised=realised)
    np.testing.assert_allclose(t["compute_time"], [0.010, 0.014, 0.010])
    np.testing.assert_allclose(t["send_late"].sel(function="MPI_Waitall"), [0.004, 0.0, 0.004], atol=1e-12)
    with pytest.raises(ValueError, match="intervals"):
        lab.truth("balanced", 3, steps=2, realised=realised)
