"""POP serialisation and transfer efficiencies of traces, replayed on an ideal network.

Each written trace has its ideal-network runtime known by construction (zero-time messages and
calls, the same compute); the bundled Score-P traces are checked for consistency.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perfkit
from perfkit.analysis.pop import pop_metrics
from tests.io.otf2_writer import RESOLUTION, Call, Trace, exchange_trace, pipeline_trace, write_trace

FIXTURES = Path("/work/shared/fixtures/otf2")
BUNDLED = sorted(Path(__file__).resolve().parents[1].joinpath("data", "otf2").glob("*/traces.otf2"))


def _pop(anchor: Path) -> dict[str, float]:
    pop = pop_metrics(perfkit.open_profile(anchor))
    names = ("serialisation_efficiency", "transfer_efficiency", "load_balance", "parallel_efficiency",
             "communication_efficiency", "ideal_elapsed", "elapsed")
    return {name: float(pop[name].item()) for name in names} | {"evidence": str(
        pop["evidence"].sel(efficiency="transfer_efficiency").item())}


@pytest.mark.parametrize("nranks", [2, 4, 7])
def test_a_pipeline_serialises(tmp_path: Path, nranks: int) -> None:
    """Only one rank computes at a time: on an ideal network the runtime is every rank's compute in
    turn, so SerE = 1/n; the real runtime adds one delay per hop and the sends' ticks."""
    compute, delay = 1000, 30
    trace, real = pipeline_trace(nranks, compute, delay)
    pop = _pop(write_trace(tmp_path, trace))
    assert pop["elapsed"] == pytest.approx(real / RESOLUTION)
    assert pop["ideal_elapsed"] == pytest.approx(nranks * compute / RESOLUTION)
    assert pop["serialisation_efficiency"] == pytest.approx(1 / nranks)
    assert pop["transfer_efficiency"] == pytest.approx(nranks * compute / real)
    assert pop["evidence"] == "measured"


@pytest.mark.parametrize(("delay", "nranks"), [(0, 2), (25, 2), (100, 4), (400, 3)])
def test_a_balanced_exchange_with_slow_transfers(tmp_path: Path, delay: int, nranks: int) -> None:
    """SerE = 1 (nothing waits for a computation), TrE = compute / (compute + delay)."""
    compute, steps = 200, 5
    pop = _pop(write_trace(tmp_path, exchange_trace(nranks, steps, compute, delay)))
    assert pop["ideal_elapsed"] == pytest.approx(steps * compute / RESOLUTION)
    assert pop["serialisation_efficiency"] == pytest.approx(1.0)
    assert pop["transfer_efficiency"] == pytest.approx(compute / (compute + delay))
    assert pop["load_balance"] == pytest.approx(1.0)


@pytest.mark.parametrize("collective", ["MPI_Barrier", "MPI_Allreduce"])
def test_an_imbalance_is_not_serialisation(tmp_path: Path, collective: str) -> None:
    """Ranks compute 100, 200, 300 ticks then meet in a collective that ends 5 ticks after the last
    enters: the ideal runtime is the slowest rank's compute per step, LB = 2/3, SerE = 1,
    TrE = 300 / 305."""
    steps, slow = 4, 300
    calls = {r: [Call(collective, k * (slow + 5) + 100 * (r + 1), (k + 1) * (slow + 5)) for k in range(steps)]
             for r in range(3)}
    pop = _pop(write_trace(tmp_path, Trace(calls, end=steps * (slow + 5))))
    assert pop["load_balance"] == pytest.approx(2 / 3)
    assert pop["serialisation_efficiency"] == pytest.approx(1.0)
    assert pop["transfer_efficiency"] == pytest.approx(slow / (slow + 5))


def test_broadcast_waits_for_its_root_only(tmp_path: Path) -> None:
    """A late root serialises a broadcast: non-roots end when the root enters, the root does not wait."""
    calls = {0: [Call("MPI_Bcast", 500, 510, root=0)], 1: [Call("MPI_Bcast", 100, 510, root=0)]}
    pop = _pop(write_trace(tmp_path, Trace(calls, end={0: 510, 1: 610})))
    # ideal: rank 0 computes 500, rank 1 computes 100, waits for the root (500), computes 100 more
    assert pop["ideal_elapsed"] == pytest.approx(600 / RESOLUTION)


def test_a_late_receiver_holds_a_blocking_send(tmp_path: Path) -> None:
    """A synchronous send that waited for its receiver still waits on the ideal network."""
    calls = {0: [Call("MPI_Send", 10, 220, send=[(1, 0, 8)])], 1: [Call("MPI_Recv", 200, 215, recv=[(0, 0, 8)])]}
    pop = _pop(write_trace(tmp_path, Trace(calls, end={0: 300, 1: 215})))
    # ideal: rank 0's send ends when rank 1 posts its receive (200), then it computes 80 more
    assert pop["ideal_elapsed"] == pytest.approx(280 / RESOLUTION)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(nranks=st.integers(2, 5), steps=st.integers(1, 4), data=st.data())
def test_efficiencies_are_bounded_and_multiply(tmp_path_factory: pytest.TempPathFactory, nranks: int, steps: int,
                                               data: st.DataObject) -> None:
    """Any exchange: 0 < SerE, TrE <= 1, the ideal runtime at least the longest compute, and
    LB x SerE x TrE = PE."""
    compute = data.draw(st.lists(st.integers(1, 500), min_size=nranks, max_size=nranks))
    delay = data.draw(st.integers(0, 200))
    calls: dict[int, list[Call]] = {r: [] for r in range(nranks)}
    t0 = 0
    for k in range(steps):
        enter = [t0 + c for c in compute]
        leave = max(enter) + delay
        for r in range(nranks):
            calls[r].append(Call("MPI_Isend", enter[r], enter[r], isend=[((r + 1) % nranks, k, 8, k)]))
            calls[r].append(Call("MPI_Recv", enter[r], leave, recv=[((r - 1) % nranks, k, 8)]))
        t0 = leave
    pop = _pop(write_trace(tmp_path_factory.mktemp("t"), Trace(calls, end=t0)))
    for name in ("serialisation_efficiency", "transfer_efficiency"):
        assert 0 < pop[name] <= 1 + 1e-12
    assert pop["ideal_elapsed"] >= steps * max(compute) / RESOLUTION - 1e-12
    assert pop["load_balance"] * pop["serialisation_efficiency"] * pop["transfer_efficiency"] == pytest.approx(
        pop["parallel_efficiency"])


@pytest.mark.parametrize("anchor", BUNDLED, ids=lambda p: p.parent.name)
def test_bundled_traces(anchor: Path) -> None:
    """Score-P traces: efficiencies in (0, 1], their product with load balance the parallel efficiency."""
    pop = _pop(anchor)
    for name in ("serialisation_efficiency", "transfer_efficiency"):
        assert 0 < pop[name] <= 1
    assert pop["serialisation_efficiency"] * pop["transfer_efficiency"] == pytest.approx(
        pop["communication_efficiency"])
    assert pop["load_balance"] * pop["serialisation_efficiency"] * pop["transfer_efficiency"] == pytest.approx(
        pop["parallel_efficiency"])
    assert pop["evidence"] == "measured"


def test_profiles_keep_the_modelled_ideal_network() -> None:
    """A profile (no replay) keeps the model: ideal elapsed = longest rank without transfers."""
    ds = perfkit.open_profile(BUNDLED[0])
    pop = pop_metrics(ds.drop_vars("replay_elapsed"))
    assert pop["ideal_elapsed"].item() != pytest.approx(ds["replay_elapsed"].item())
    assert "replaying" not in str(pop["note"].sel(efficiency="transfer_efficiency").item())
    assert np.isfinite(pop["transfer_efficiency"].item())


def test_a_trace_without_messages_replays_to_its_longest_compute(tmp_path: Path) -> None:
    calls = {0: [Call("MPI_Comm_rank", 10, 15)], 1: []}
    ds = perfkit.open_profile(write_trace(tmp_path, Trace(calls, end={0: 100, 1: 70})))
    assert ds["replay_elapsed"].item() == pytest.approx(95 / RESOLUTION)


def test_the_fan_in_replays_short_of_its_elapsed_by_its_start_up() -> None:
    """The bundled fan-in's ideal runtime is 6.0 ms below POP's elapsed time (TrE 0.982), though its
    messages take microseconds: the shortfall is start-up the ideal network does not have, not
    transfer. The rank that computes most (4) left ``MPI_Init`` 5.67 ms after rank 0 (Init's own
    work, no time on an ideal network) and rank 0 computed 0.25 ms more before ``MPI_Init`` than
    rank 4; what is left, 0.08 ms, is the messages and calls on the critical path. The 2.90 ms
    POP's elapsed keeps outside every rank's span (ranks launched at different times) are in the
    ideal runtime too, as in the model's: no network makes them shorter."""
    import otf2

    anchor = next(p for p in BUNDLED if p.parent.name == "casita-10-mpi-tags")
    ds = perfkit.open_profile(anchor)
    pop = _pop(anchor)
    time = ds["profile"].isel(run=0).sel(metric="time")
    late = int(np.argmax(time.sel(function="Compute").values))
    first: dict[int, int] = {}
    init: dict[tuple[int, str], int] = {}
    with otf2.reader.open(str(anchor)) as trace:
        resolution = trace.definitions.clock_properties.timer_resolution
        for location, event in trace.events:
            rank = int(location.group.name.split()[-1])
            first.setdefault(rank, event.time)
            if isinstance(event, otf2.events.Enter | otf2.events.Leave) and event.region.name == "MPI_Init":
                init[rank, type(event).__name__] = event.time
    init_skew = (init[late, "Leave"] - init[0, "Leave"]) / resolution
    outside = ds["elapsed"].item() - time.sum("function").max().item()
    before_init = ((init[0, "Enter"] - first[0]) - (init[late, "Enter"] - first[late])) / resolution
    gap = pop["elapsed"] - pop["ideal_elapsed"]
    assert late == 4
    assert gap == pytest.approx(6.00e-3, abs=0.01e-3)
    assert init_skew == pytest.approx(5.67e-3, abs=0.01e-3)
    assert outside == pytest.approx(2.90e-3, abs=0.01e-3)
    assert pop["ideal_elapsed"] == pytest.approx(ds["replay_elapsed"].item() + outside)
    assert before_init == pytest.approx(0.25e-3, abs=0.01e-3)
    assert 0 < gap - init_skew - before_init < 0.1e-3
