"""Streaming one rank's events: what is kept per event, per message and per rank."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import otf2
import pytest

import perfkit
from perfkit.io.otf2.definitions import read_definitions
from perfkit.io.otf2.events import RankStream, stream_ranks
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
    assert len(rank0.inst_enter) == 1 and len(rank0.sends) == 1 and not rank0.recvs
    peer, _, tag, nbytes = rank1.recvs[0][:4]
    assert (peer, tag, nbytes) == (0, 0, 8)
    assert sorted(rank0.region_visits.values()) == [1, 1, 50]
    assert rank0.first == 0 and rank0.last == 2000


def test_memory_does_not_grow_with_events_without_messages(tmp_path: Path) -> None:
    def peak(n: int) -> int:
        calls = [Call("MPI_Comm_rank", 10 + 10 * k, 15 + 10 * k) for k in range(n)]
        anchor = write_trace(tmp_path / str(n), Trace({0: calls}, end=10 * n + 100))
        tracemalloc.start()
        perfkit.open_profile(anchor)
        size = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return size

    small, large = peak(500), peak(10_000)
    assert large < 1.5 * small + 200_000


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


def test_an_error_in_a_callback_is_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    anchor = write_trace(tmp_path, Trace({0: [Call("MPI_Barrier", 10, 20)]}, end=100))

    def broken(self: RankStream, *args: object) -> None:
        raise ZeroDivisionError("in the callback")

    monkeypatch.setattr(RankStream, "leave", broken)
    with pytest.raises(ZeroDivisionError, match="in the callback"):
        _ranks(anchor)


def test_peers_outside_the_communicator_are_counted(tmp_path: Path) -> None:
    """A message to a rank its communicator does not have is kept out of traffic, with a warning."""
    anchor = write_trace(tmp_path, Trace({0: [Call("MPI_Send", 10, 20, send=[(5, 0, 8)])], 1: []}, end=100))
    ds = perfkit.open_profile(anchor)
    assert ds["traffic"].sum().item() == 0
    assert any("communicator rank" in w for w in read_warnings(ds))
    np.testing.assert_array_equal(ds["profile"].isel(run=0).sel(function="MPI_Send", metric="bytes_sent"), [8, 0])
