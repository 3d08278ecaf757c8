"""Streaming one rank's events: what is kept per event, per message and per rank."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import otf2
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perfkit
from perfkit.io.otf2 import events
from perfkit.io.otf2.definitions import read_definitions
from perfkit.io.otf2.events import stream_ranks
from perfkit.model import read_warnings
from tests.io.otf2_writer import RESOLUTION, Call, Trace, write_trace


def _ranks(anchor: Path) -> list:
    with otf2.reader.open(str(anchor)) as trace:
        defs = read_definitions(anchor, trace)
        return list(stream_ranks(trace, defs))


def test_records_only_for_calls_with_messages(tmp_path: Path) -> None:
    """Calls without message or collective events add to per-region sums only, never a record."""
    calls = [Call("MPI_Comm_rank", 10 + 10 * k, 15 + 10 * k) for k in range(50)]
    calls.append(Call("MPI_Send", 1000, 1010, send=[(1, 0, 8)]))
    anchor = write_trace(tmp_path, Trace({0: calls, 1: [Call("MPI_Recv", 900, 1020, recv=[(0, 0, 8)])]}, end=2000))
    rank0, rank1 = _ranks(anchor)
    assert rank0.inst.shape[0] == 1 and rank0.send.shape[0] == 1 and not rank0.recv.size
    peer, _, tag, nbytes = rank1.recv[0, :4].tolist()
    assert (peer, tag, nbytes) == (0, 0, 8)
    assert sorted(rank0.region_visits.values()) == [1, 1, 50]
    assert rank0.first == 0 and rank0.last == 2000


def test_memory_does_not_grow_with_events_without_messages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past one batch, more events without messages take no more memory (the batch buffer is fixed)."""
    def peak(n: int) -> int:
        calls = [Call("MPI_Comm_rank", 10 + 10 * k, 15 + 10 * k) for k in range(n)]
        anchor = write_trace(tmp_path / str(n), Trace({0: calls}, end=10 * n + 100))
        tracemalloc.start()
        perfkit.open_profile(anchor)
        size = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return size

    monkeypatch.setattr(events, "BATCH", 128)
    peak(300)  # imports and compiled callbacks loaded outside the measure
    small, large = peak(1_000), peak(8_000)
    assert large < 1.1 * small + 100_000


def test_unbalanced_leave_is_reported(tmp_path: Path) -> None:
    """A Leave of a region that is not open is counted and reported, not trusted."""
    with otf2.writer.open(str(tmp_path / "odd"), timer_resolution=RESOLUTION) as archive:
        defs = archive.definitions
        node = defs.system_tree_node("node0")
        location = defs.location("Master thread", group=defs.location_group("MPI Rank 0", system_tree_parent=node))
        defs.group("", group_type=otf2.GroupType.COMM_LOCATIONS, paradigm=otf2.Paradigm.MPI, members=[location])
        main = defs.region("main")
        other = defs.region("MPI_Barrier")
        writer = archive.event_writer_from_location(location)
        writer.enter(0, main)
        writer.leave(5, other)
        writer.leave(10, main)
    ds = perfkit.open_profile(tmp_path / "odd" / "traces.otf2")
    assert any("do not pair up" in w for w in read_warnings(ds))


def _nested_calls(draw: st.DrawFn, rank: int, nranks: int, steps: int) -> list[Call]:
    """A rank's calls: per step a receive posted early, a send to the next rank, a completion, some
    calls without messages, and a barrier now and then (times strictly increasing)."""
    calls, t = [], 1
    right, left = (rank + 1) % nranks, (rank - 1) % nranks
    for step in range(steps):
        t += draw(st.integers(1, 9))
        calls.append(Call("MPI_Irecv", t, t + 1, irecv_request=[step]))
        t += 2 + draw(st.integers(0, 9))
        calls.append(Call("MPI_Isend", t, t + 1, isend=[(right, step, 8 * step + 1, 1000 + step)]))
        for _ in range(draw(st.integers(0, 3))):
            t += 2 + draw(st.integers(0, 3))
            calls.append(Call("MPI_Comm_rank", t, t + 1))
        t += 2
        end = t + draw(st.integers(1, 30))
        calls.append(Call("MPI_Wait", t, end, irecv=[(left, step, 8 * step + 1, step)]))
        t = end
        if step % 3 == 2:
            t += 1
            calls.append(Call("MPI_Barrier", t, t + 5 + draw(st.integers(0, 9))))
            t = calls[-1].leave
    return calls


@st.composite
def _trace(draw: st.DrawFn) -> Trace:
    nranks, steps = draw(st.integers(2, 4)), draw(st.integers(1, 6))
    calls = {r: _nested_calls(draw, r, nranks, steps) for r in range(nranks)}
    end = max(c.leave for cs in calls.values() for c in cs) + 10
    return Trace(calls, end=end)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trace=_trace(), batch=st.integers(1, 12))
def test_any_batch_size_gives_the_same_dataset(tmp_path_factory: pytest.TempPathFactory, trace: Trace,
                                               batch: int) -> None:
    """Open regions, pending receive requests, compute ticks and the timeline carry across batches:
    reading a few events at a time gives the Dataset read in one batch."""
    anchor = write_trace(tmp_path_factory.mktemp("t"), trace)
    whole = perfkit.open_profile(anchor, timeline_bins=13)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(events, "BATCH", batch)
        xr.testing.assert_identical(perfkit.open_profile(anchor, timeline_bins=13), whole)


def test_request_completed_in_a_later_batch_keeps_its_post(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A receive posted (MPI_Irecv) several batches before it completes is late-sender from its post."""
    calls = {0: [Call("MPI_Irecv", 10, 11, irecv_request=[7])]
             + [Call("MPI_Comm_rank", 20 + 2 * k, 21 + 2 * k) for k in range(20)]
             + [Call("MPI_Wait", 100, 300, irecv=[(1, 0, 8, 7)])],
             1: [Call("MPI_Send", 250, 260, send=[(0, 0, 8)])]}
    anchor = write_trace(tmp_path, Trace(calls, end=400))
    monkeypatch.setattr(events, "BATCH", 4)
    (rank0, _) = _ranks(anchor)
    post, seq = rank0.recv[0, 5:].tolist()
    assert (post, seq) == (10, 0)
    ds = perfkit.open_profile(anchor)
    assert ds["wait_states"].sel(rank=0, state="late_sender").item() == pytest.approx(150 / RESOLUTION)


def test_peers_outside_the_communicator_are_counted(tmp_path: Path) -> None:
    """A message to a rank its communicator does not have is kept out of traffic, with a warning."""
    anchor = write_trace(tmp_path, Trace({0: [Call("MPI_Send", 10, 20, send=[(5, 0, 8)])], 1: []}, end=100))
    ds = perfkit.open_profile(anchor)
    assert ds["traffic"].sum().item() == 0
    assert any("communicator rank" in w for w in read_warnings(ds))
    np.testing.assert_array_equal(ds["profile"].isel(run=0).sel(function="MPI_Send", metric="bytes_sent"), [8, 0])


def test_messages_outside_any_region_are_read_with_a_warning(tmp_path: Path) -> None:
    """A rank whose events are messages outside any region (no frame to look them up in) is read, not a crash."""
    with otf2.writer.open(str(tmp_path / "lone"), timer_resolution=RESOLUTION) as archive:
        defs = archive.definitions
        node = defs.system_tree_node("node0")
        locations = [defs.location("Master thread", group=defs.location_group(f"MPI Rank {r}", system_tree_parent=node))
                     for r in range(2)]
        defs.group("", group_type=otf2.GroupType.COMM_LOCATIONS, paradigm=otf2.Paradigm.MPI, members=locations)
        world = defs.comm("MPI_COMM_WORLD", group=defs.group("MPI_COMM_WORLD", group_type=otf2.GroupType.COMM_GROUP,
                                                             paradigm=otf2.Paradigm.MPI, members=locations))
        archive.event_writer_from_location(locations[0]).mpi_send(5, 1, world, 0, 8)
        archive.event_writer_from_location(locations[1]).mpi_recv(6, 0, world, 0, 8)
    ds = perfkit.open_profile(tmp_path / "lone" / "traces.otf2")
    assert ds["traffic"].isel(run=0).sel(sender=0, receiver=1, quantity="bytes").item() == 8
    assert sum("do not pair up" in w for w in read_warnings(ds)) == 2
