"""Wait states of traces written with exactly known timestamps: each equals its definition to the tick."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perfkit
from perfkit.analysis.waits import breakdown
from tests.io.otf2_writer import RESOLUTION, Call, Trace, write_trace


def _read(tmp: Path, trace: Trace) -> xr.Dataset:
    return perfkit.open_profile(write_trace(tmp, trace))


def _ticks(ds: xr.Dataset, function: str, metric: str = "time") -> list[int]:
    """Per rank, ``metric`` of ``function`` (time in ticks)."""
    values = ds["profile"].isel(run=0).sel(function=function, metric=metric).values
    return np.rint(values * (RESOLUTION if metric == "time" else 1)).astype(int).tolist()


def _state(ds: xr.Dataset, state: str) -> list[int]:
    return np.rint(ds["wait_states"].isel(run=0).sel(state=state).values * RESOLUTION).astype(int).tolist()


def test_late_sender_blocking_and_nonblocking(tmp_path: Path) -> None:
    """MPI_Recv entered at 100, send entered at 400: 300 ticks; MPI_Wait of an MPI_Irecv likewise."""
    trace = Trace({
        0: [Call("MPI_Send", 400, 450, send=[(1, 7, 64)]), Call("MPI_Isend", 1000, 1010, isend=[(1, 8, 32, 5)])],
        1: [Call("MPI_Recv", 100, 600, recv=[(0, 7, 64)]), Call("MPI_Irecv", 700, 705, irecv_request=[9]),
            Call("MPI_Wait", 800, 1100, irecv=[(0, 8, 32, 9)])],
    }, end=2000)
    ds = _read(tmp_path, trace)
    assert _ticks(ds, "w_MPI_Recv") == [0, 300]
    assert _ticks(ds, "MPI_Recv") == [0, 200]
    assert _ticks(ds, "w_MPI_Wait") == [0, 200]
    assert _ticks(ds, "MPI_Wait") == [0, 100]
    assert _state(ds, "late_sender") == [0, 500]
    assert _state(ds, "late_receiver") == [0, 0]
    assert ds["kind"].sel(function="w_MPI_Wait").item() == "wait_late_sender"
    assert ds["call"].sel(function="w_MPI_Wait").item() == "MPI_Wait"


def test_late_receiver_only_where_the_send_blocked(tmp_path: Path) -> None:
    """A send still inside MPI_Send/MPI_Ssend when the receive is posted waited until then; an eager
    send that returned before the receive was posted did not wait.
    """
    trace = Trace({
        0: [Call("MPI_Send", 100, 700, send=[(1, 1, 4096)]),      # blocked until the receive at 400
            Call("MPI_Send", 800, 850, send=[(1, 2, 8)]),         # eager: left before the receive at 900
            Call("MPI_Ssend", 1000, 1600, send=[(1, 3, 8)])],     # blocked until the MPI_Irecv at 1300
        1: [Call("MPI_Recv", 400, 700, recv=[(0, 1, 4096)]), Call("MPI_Recv", 900, 910, recv=[(0, 2, 8)]),
            Call("MPI_Irecv", 1300, 1310, irecv_request=[4]), Call("MPI_Wait", 1500, 1600, irecv=[(0, 3, 8, 4)])],
    }, end=2000)
    ds = _read(tmp_path, trace)
    assert _ticks(ds, "r_MPI_Send") == [300, 0]
    assert _ticks(ds, "r_MPI_Ssend") == [300, 0]
    assert _ticks(ds, "r_MPI_Send", "calls") == [1, 0]
    assert _ticks(ds, "MPI_Send") == [350, 0]
    assert _state(ds, "late_receiver") == [600, 0]
    assert _state(ds, "late_sender") == [0, 0]
    assert ds["kind"].sel(function="r_MPI_Send").item() == "wait_late_receiver"
    parts = breakdown(ds)["time"].isel(run=0)
    assert np.rint(parts.sel(kind="wait_late_receiver").values * RESOLUTION).tolist() == [600, 0]


@pytest.mark.parametrize("call", ["MPI_Barrier", "MPI_Allreduce", "MPI_Alltoall"])
def test_wait_at_barrier_and_nxn(tmp_path: Path, call: str) -> None:
    enters = [100, 250, 400]
    trace = Trace({r: [Call(call, e, 450)] for r, e in enumerate(enters)}, end=500)
    ds = _read(tmp_path, trace)
    assert _ticks(ds, f"b_{call}") == [300, 150, 0]
    assert _ticks(ds, call) == [50, 50, 50]
    assert _state(ds, "wait_barrier" if call == "MPI_Barrier" else "wait_nxn") == [300, 150, 0]
    assert ds["kind"].sel(function=f"b_{call}").item() == "wait_collective"


@pytest.mark.parametrize("call", ["MPI_Bcast", "MPI_Scatter"])
def test_late_broadcast(tmp_path: Path, call: str) -> None:
    """Root 1 enters at 500: rank 0 (entered 100) waits 400, rank 2 (300) waits 200, the root none."""
    enters = [100, 500, 300]
    trace = Trace({r: [Call(call, e, 600, root=1)] for r, e in enumerate(enters)}, end=700)
    ds = _read(tmp_path, trace)
    assert _ticks(ds, f"b_{call}") == [400, 0, 200]
    assert _state(ds, "late_broadcast") == [400, 0, 200]


@pytest.mark.parametrize("call", ["MPI_Reduce", "MPI_Gather"])
def test_early_reduce(tmp_path: Path, call: str) -> None:
    """Root 0 enters at 100, the first other rank at 300: the root waits 200, the others none."""
    enters = [100, 400, 300]
    trace = Trace({r: [Call(call, e, 500, root=0)] for r, e in enumerate(enters)}, end=600)
    ds = _read(tmp_path, trace)
    assert _ticks(ds, f"b_{call}") == [200, 0, 0]
    assert _state(ds, "early_reduce") == [200, 0, 0]


def test_early_scan(tmp_path: Path) -> None:
    enters = [300, 100, 200]
    trace = Trace({r: [Call("MPI_Scan", e, 500)] for r, e in enumerate(enters)}, end=600)
    ds = _read(tmp_path, trace)
    assert _ticks(ds, "b_MPI_Scan") == [0, 200, 100]


def test_late_sender_wrong_order(tmp_path: Path) -> None:
    """Rank 0 waits for rank 1's message (sent at 500) while rank 2's, sent at 200, is queued."""
    trace = Trace({
        0: [Call("MPI_Recv", 100, 600, recv=[(1, 0, 8)]), Call("MPI_Recv", 600, 610, recv=[(2, 0, 8)]),
            Call("MPI_Recv", 700, 900, recv=[(1, 1, 8)])],
        1: [Call("MPI_Send", 500, 510, send=[(0, 0, 8)]), Call("MPI_Send", 800, 810, send=[(0, 1, 8)])],
        2: [Call("MPI_Send", 200, 210, send=[(0, 0, 8)])],
    }, end=1000)
    ds = _read(tmp_path, trace)
    assert _state(ds, "late_sender") == [500, 0, 0]
    assert _state(ds, "late_sender_wrong_order") == [400, 0, 0]
    assert _ticks(ds, "w_MPI_Recv") == [500, 0, 0]
    assert _ticks(ds, "w_MPI_Recv", "calls") == [2, 0, 0]


def test_sub_communicator_ranks_are_world_ranks(tmp_path: Path) -> None:
    """On a communicator of world ranks (2, 0), local rank 0 is world rank 2: traffic and roots in world ranks."""
    comm = "odd_order"
    trace = Trace({
        0: [Call("MPI_Send", 100, 110, send=[(0, 5, 1000)], comm=comm), Call("MPI_Bcast", 300, 400, root=0, comm=comm)],
        1: [],
        2: [Call("MPI_Recv", 50, 150, recv=[(1, 5, 1000)], comm=comm), Call("MPI_Bcast", 350, 400, root=0, comm=comm)],
    }, end=500, comms={comm: [2, 0]})
    ds = _read(tmp_path, trace)
    traffic = ds["traffic"].isel(run=0).sel(quantity="bytes").values
    expected = np.zeros((3, 3))
    expected[0, 2] = 1000
    np.testing.assert_array_equal(traffic, expected)
    assert _ticks(ds, "w_MPI_Recv") == [0, 0, 50]
    assert _ticks(ds, "b_MPI_Bcast") == [50, 0, 0]  # the root is world rank 2, entered at 350
    sizes = ds["sizes"].isel(run=0).sel(stat="count")
    assert sizes.sel(rank=0, function="MPI_Send", size_bin=1024.0).item() == 1
    assert sizes.sel(rank=2, function="MPI_Recv", size_bin=1024.0).item() == 1


def test_each_rank_time_adds_up(tmp_path: Path) -> None:
    """Compute + every call + every wait = the time each rank spent in main."""
    trace = Trace({
        0: [Call("MPI_Send", 100, 700, send=[(1, 1, 8)]), Call("MPI_Barrier", 800, 950)],
        1: [Call("MPI_Recv", 400, 700, recv=[(0, 1, 8)]), Call("MPI_Barrier", 900, 950)],
    }, end=1000)
    ds = _read(tmp_path, trace)
    total = ds["profile"].isel(run=0).sel(metric="time").sum("function").values
    np.testing.assert_allclose(total * RESOLUTION, [1000, 1000])


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(enters=st.lists(st.integers(0, 10_000), min_size=2, max_size=6), extra=st.integers(1, 1000))
def test_barrier_wait_is_last_enter_minus_own(enters: list[int], extra: int) -> None:
    leave = max(enters) + extra
    trace = Trace({r: [Call("MPI_Barrier", e + 1, leave + 1)] for r, e in enumerate(enters)}, end=leave + 10)
    with tempfile.TemporaryDirectory() as tmp:
        ds = _read(Path(tmp), trace)
    assert _ticks(ds, "b_MPI_Barrier") == [max(enters) - e for e in enters]


@settings(max_examples=20, deadline=None)
@given(recv_enter=st.integers(1, 5000), send_enter=st.integers(1, 5000), recv_len=st.integers(1, 5000),
       send_len=st.integers(1, 5000))
def test_point_to_point_waits_follow_their_definitions(recv_enter: int, send_enter: int, recv_len: int,
                                                       send_len: int) -> None:
    """Late sender = min(send enter, receive leave) - receive enter; late receiver (blocking send) =
    receive enter - send enter when the send left after the receive was entered; never both.
    """
    recv_leave, send_leave = recv_enter + recv_len, send_enter + send_len
    trace = Trace({0: [Call("MPI_Send", send_enter, send_leave, send=[(1, 0, 8)])],
                   1: [Call("MPI_Recv", recv_enter, recv_leave, recv=[(0, 0, 8)])]}, end=20_000)
    with tempfile.TemporaryDirectory() as tmp:
        ds = _read(Path(tmp), trace)
    late_sender = max(min(send_enter, recv_leave) - recv_enter, 0)
    late_receiver = recv_enter - send_enter if send_enter < recv_enter < send_leave else 0
    assert _ticks(ds, "w_MPI_Recv") == [0, late_sender]
    assert _ticks(ds, "r_MPI_Send") == [late_receiver, 0]


def test_wait_rows_survive_mpinside_tables(tmp_path: Path) -> None:
    """A trace's Dataset written as MPInside tables reads back with its w_, r_ and b_ rows and kinds."""
    from perfkit.io import mpinside

    trace = Trace({
        0: [Call("MPI_Send", 100, 700, send=[(1, 1, 4096)]), Call("MPI_Barrier", 800, 950)],
        1: [Call("MPI_Recv", 400, 700, recv=[(0, 1, 4096)]), Call("MPI_Barrier", 900, 950)],
    }, end=1000)
    ds = _read(tmp_path, trace)
    back = perfkit.open_profile(mpinside.write(ds, tmp_path / "tables.txt"), format="mpinside")
    for function in ("r_MPI_Send", "w_MPI_Recv", "b_MPI_Barrier"):
        assert back["kind"].sel(function=function).item() == ds["kind"].sel(function=function).item()
        np.testing.assert_allclose(back["profile"].isel(run=0).sel(function=function, metric="time"),
                                   ds["profile"].isel(run=0).sel(function=function, metric="time"), atol=1e-6)


@settings(max_examples=15, deadline=None)
@given(enters=st.lists(st.integers(1, 10_000), min_size=2, max_size=5), data=st.data(),
       call=st.sampled_from(["MPI_Bcast", "MPI_Reduce"]))
def test_rooted_collective_waits_follow_their_definitions(enters: list[int], data: st.DataObject, call: str) -> None:
    """Late broadcast: a non-root rank waits for the root's enter; early reduce: the root waits for the
    first other rank's enter (each at most until it leaves).
    """
    root = data.draw(st.integers(0, len(enters) - 1))
    leave = max(enters) + 100
    trace = Trace({r: [Call(call, e, leave, root=root)] for r, e in enumerate(enters)}, end=leave + 10)
    with tempfile.TemporaryDirectory() as tmp:
        ds = _read(Path(tmp), trace)
    if call == "MPI_Bcast":
        expected = [0 if r == root else max(enters[root] - e, 0) for r, e in enumerate(enters)]
    else:
        first = min(e for r, e in enumerate(enters) if r != root)
        expected = [max(first - e, 0) if r == root else 0 for r, e in enumerate(enters)]
    assert _ticks(ds, f"b_{call}") == expected
