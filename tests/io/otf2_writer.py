"""Write small OTF2 traces with exactly known timestamps (``otf2.writer``), for the reader's tests.

A trace is given per rank as a list of ``Call``: one MPI region instance with its enter and leave
ticks and the MPI events inside it. Every rank runs inside a ``main`` region from tick 0 to
``end`` (one tick for every rank, or one per rank); the time outside MPI calls is compute.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import otf2
from otf2.enums import CollectiveOp, GroupType, Paradigm, RegionRole, Type

RESOLUTION = 10**6  # ticks per second
UNDEFINED_ROOT = 2**32 - 1  # OTF2_UNDEFINED_UINT32: a collective without root

ROLES = {"MPI_Barrier": RegionRole.BARRIER, "MPI_Bcast": RegionRole.COLL_ONE2ALL,
         "MPI_Reduce": RegionRole.COLL_ALL2ONE, "MPI_Allreduce": RegionRole.COLL_ALL2ALL,
         "MPI_Alltoall": RegionRole.COLL_ALL2ALL, "MPI_Gather": RegionRole.COLL_ALL2ONE,
         "MPI_Scatter": RegionRole.COLL_ONE2ALL, "MPI_Scan": RegionRole.COLL_OTHER}
OPS = {"MPI_Barrier": CollectiveOp.BARRIER, "MPI_Bcast": CollectiveOp.BCAST, "MPI_Reduce": CollectiveOp.REDUCE,
       "MPI_Allreduce": CollectiveOp.ALLREDUCE, "MPI_Alltoall": CollectiveOp.ALLTOALL,
       "MPI_Gather": CollectiveOp.GATHER, "MPI_Scatter": CollectiveOp.SCATTER, "MPI_Scan": CollectiveOp.SCAN}


@dataclass
class Call:
    """One MPI call: region name, enter and leave ticks, and its message events.

    ``send``/``recv``: (peer, tag, bytes) with peer a rank of ``comm``; ``isend``: (peer, tag, bytes,
    request); ``irecv_request``: a request id posted here; ``irecv``: (peer, tag, bytes, request)
    completed here; ``root``/``sent``/``received`` for a collective (root a rank of ``comm``).
    """

    region: str
    enter: int
    leave: int
    send: Sequence[tuple[int, int, int]] = ()
    recv: Sequence[tuple[int, int, int]] = ()
    isend: Sequence[tuple[int, int, int, int]] = ()
    irecv_request: Sequence[int] = ()
    irecv: Sequence[tuple[int, int, int, int]] = ()
    root: int | None = None
    sent: int = 0
    received: int = 0
    comm: str = "MPI_COMM_WORLD"


@dataclass
class Trace:
    """Per world rank its calls; ``comms`` maps extra communicator names to their world ranks."""

    calls: Mapping[int, Sequence[Call]]
    end: int | Mapping[int, int]
    comms: Mapping[str, Sequence[int]] = field(default_factory=dict)
    properties: Mapping[int, Mapping[str, int]] = field(default_factory=dict)  # per rank, location properties


def write_trace(directory: Path, trace: Trace) -> Path:
    """Write ``trace`` as ``directory/traces.otf2`` (+ ``traces.def``, ``traces/``); return the anchor."""
    nranks = len(trace.calls)
    with otf2.writer.open(str(directory), timer_resolution=RESOLUTION) as archive:
        defs = archive.definitions
        node = defs.system_tree_node("node0")
        groups = [defs.location_group(f"MPI Rank {r}", system_tree_parent=node) for r in range(nranks)]
        locations = [defs.location("Master thread", group=g) for g in groups]
        defs.group("", group_type=GroupType.COMM_LOCATIONS, paradigm=Paradigm.MPI, members=locations)
        comms = {"MPI_COMM_WORLD": range(nranks), **trace.comms}
        comm_defs = {}
        for name, members in comms.items():
            group = defs.group(name, group_type=GroupType.COMM_GROUP, paradigm=Paradigm.MPI,
                               members=[locations[m] for m in members])
            comm_defs[name] = defs.comm(name, group=group)
        for rank, properties in trace.properties.items():
            for name, value in properties.items():
                defs.location_property(locations[rank], name, Type.UINT64, value)
        main = defs.region("main", region_role=RegionRole.FUNCTION, paradigm=Paradigm.USER)
        regions: dict[str, object] = {}
        for rank in range(nranks):
            writer = archive.event_writer_from_location(locations[rank])
            writer.enter(0, main)
            for call in sorted(trace.calls[rank], key=lambda c: c.enter):
                _write_call(writer, defs, regions, comm_defs, call)
            writer.leave(trace.end if isinstance(trace.end, int) else trace.end[rank], main)
    return Path(directory) / "traces.otf2"


def pipeline_trace(nranks: int, compute: int, delay: int) -> tuple[Trace, int]:
    """Rank r receives from r-1, computes ``compute`` ticks, sends to r+1; each message arrives
    ``delay`` ticks after its send began. Returns the trace and its real runtime."""
    calls: dict[int, list[Call]] = {r: [] for r in range(nranks)}
    end: dict[int, int] = {}
    ready = 0  # when rank r starts computing
    for r in range(nranks):
        if r:
            calls[r].append(Call("MPI_Recv", 0, ready, recv=[(r - 1, 0, 8)]))
        send = ready + compute
        if r < nranks - 1:
            calls[r].append(Call("MPI_Send", send, send + 1, send=[(r + 1, 0, 8)]))
        end[r] = send + (r < nranks - 1)
        ready = send + delay
    return Trace(calls, end=end), end[nranks - 1]


def exchange_trace(nranks: int, steps: int, compute: int, delay: int) -> Trace:
    """Every step each rank computes, MPI_Isend to both neighbours (no time) and MPI_Recv from both,
    the messages taking ``delay`` ticks: balanced, slowed by transfers only."""
    calls: dict[int, list[Call]] = {r: [] for r in range(nranks)}
    step = compute + delay
    for r in range(nranks):
        left, right = (r - 1) % nranks, (r + 1) % nranks
        for k in range(steps):
            t = k * step + compute
            calls[r].append(Call("MPI_Isend", t, t, isend=[(right, 0, 64, 2 * k), (left, 1, 64, 2 * k + 1)]))
            calls[r].append(Call("MPI_Recv", t, t + delay, recv=[(left, 0, 64), (right, 1, 64)]))
    return Trace(calls, end=steps * step)


def _write_call(writer: object, defs: object, regions: dict[str, object], comms: dict[str, object],
                call: Call) -> None:
    if call.region not in regions:
        regions[call.region] = defs.region(call.region, region_role=ROLES.get(call.region, RegionRole.POINT2POINT),
                                           paradigm=Paradigm.MPI)
    region, comm = regions[call.region], comms[call.comm]
    writer.enter(call.enter, region)
    for peer, tag, nbytes in call.send:
        writer.mpi_send(call.enter, peer, comm, tag, nbytes)
    for peer, tag, nbytes, request in call.isend:
        writer.mpi_isend(call.enter, peer, comm, tag, nbytes, request)
    for request in call.irecv_request:
        writer.mpi_irecv_request(call.enter, request)
    if call.region in OPS:
        writer.mpi_collective_begin(call.enter)
        root = UNDEFINED_ROOT if call.root is None else call.root
        writer.mpi_collective_end(call.leave, OPS[call.region], comm, root, call.sent, call.received)
    for peer, tag, nbytes in call.recv:
        writer.mpi_recv(call.leave, peer, comm, tag, nbytes)
    for peer, tag, nbytes, request in call.irecv:
        writer.mpi_irecv(call.leave, peer, comm, tag, nbytes, request)
    writer.leave(call.leave, region)
