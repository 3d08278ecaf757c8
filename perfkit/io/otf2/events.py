"""Stream one rank's OTF2 events into per-region reductions and per-message records.

Nothing here keeps an event: each callback updates the rank's region stack, its per-region sums
(exclusive ticks, visits, bytes and messages) and, for the events of a message or a collective,
appends one record. A record points at the *instance* (one Enter..Leave of an MPI region) it
happened in, whose enter and leave ticks are kept so that wait states can be computed after
every rank is read (``perfkit.io.otf2.waits``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfkit.errors import PerfkitFormatError
from perfkit.io.otf2.definitions import EXPECTED, Definitions, region_kinds
from perfkit.io.otf2.timeline import NONE, RankTimeline
from perfkit.model import KINDS

#: Events asked from the library per call (bounds the reader's own buffering).
BATCH = 65536
COMPUTE_KIND = KINDS.index("compute")


def _int(value: Any) -> int:
    """An OTF2 enum callback argument (a ctypes value) as int."""
    return int(getattr(value, "value", value))


@dataclass
class RankEvents:
    """What one rank's events reduce to. Times are integer ticks; instance ids are local to the rank.

    ``region_*`` are per region reference: exclusive ticks, visits, bytes and messages sent and
    received in that region. ``inst_*`` describe the MPI region instances that held a message or
    collective event (``inst_compute``: the rank's compute ticks before the instance's enter).
    ``send_*``/``recv_*``/``coll_*`` are the records (peer = world rank).
    """

    rank: int
    region_ticks: dict[int, int] = field(default_factory=dict)
    region_visits: dict[int, int] = field(default_factory=dict)
    region_bytes_sent: dict[int, int] = field(default_factory=dict)
    region_msgs_sent: dict[int, int] = field(default_factory=dict)
    region_bytes_recv: dict[int, int] = field(default_factory=dict)
    region_msgs_recv: dict[int, int] = field(default_factory=dict)
    first: int = -1
    last: int = -1
    inst_region: list[int] = field(default_factory=list)
    inst_enter: list[int] = field(default_factory=list)
    inst_leave: list[int] = field(default_factory=list)
    inst_compute: list[int] = field(default_factory=list)
    sends: list[tuple[int, int, int, int, int, int]] = field(default_factory=list)
    recvs: list[tuple[int, int, int, int, int, int, int]] = field(default_factory=list)
    colls: list[tuple[int, int, int, int, int, int]] = field(default_factory=list)
    unbalanced: int = 0
    unmapped: int = 0

    def arrays(self) -> dict[str, np.ndarray]:
        """The records as int64 arrays: ``inst`` (n, 4) region/enter/leave/compute, ``send`` (n, 6)
        peer/comm/tag/bytes/instance/nonblocking, ``recv`` (n, 7) peer/comm/tag/bytes/instance/post/seq,
        ``coll`` (n, 6) comm/op/root/sent/received/instance.
        """
        def table(rows: list[Any], ncols: int) -> np.ndarray:
            return np.asarray(rows, dtype=np.int64).reshape(-1, ncols)

        return {"inst": table(list(zip(self.inst_region, self.inst_enter, self.inst_leave, self.inst_compute)), 4),
                "send": table(self.sends, 6), "recv": table(self.recvs, 7), "coll": table(self.colls, 6)}


class RankStream:
    """OTF2 event-reader callbacks that reduce one location's events into a ``RankEvents``.

    One object serves every rank in turn (``start``, ``finish``). ``callbacks`` maps each OTF2 event
    name to its own method (the library must never get one function for two event types). With a
    ``timeline``, every change of the innermost region's kind (``kinds``: region reference -> ``KINDS``
    index) is marked on it.
    """

    def __init__(self, defs: Definitions, timeline: RankTimeline | None = None,
                 kinds: dict[int, int] | None = None) -> None:
        self.defs = defs
        self.timeline = timeline
        self.kinds = region_kinds(defs) if kinds is None else kinds
        self._compute = {ref for ref, kind in self.kinds.items() if kind == COMPUTE_KIND}
        self._computed = 0
        self._kind = NONE
        self.out = RankEvents(-1)
        self._stack: list[list[int]] = []
        self._requests: dict[int, tuple[int, int]] = {}
        self._post_seq = 0
        self.error: Exception | None = None
        self.callbacks = {
            "Enter": self.enter, "Leave": self.leave, "MpiSend": self.mpi_send, "MpiIsend": self.mpi_isend,
            "MpiIrecvRequest": self.mpi_irecv_request, "MpiRecv": self.mpi_recv, "MpiIrecv": self.mpi_irecv,
            "MpiRequestCancelled": self.mpi_request_cancelled, "MpiCollectiveEnd": self.mpi_collective_end,
        }

    def start(self, rank: int) -> None:
        """Begin the events of world rank ``rank``."""
        self.out = RankEvents(rank)
        self._stack = []
        self._requests = {}
        self._post_seq = 0
        self._computed = 0
        self._kind = NONE
        if self.timeline is not None:
            self.timeline.start(rank)

    def finish(self) -> RankEvents:
        """The reductions of the rank just read (regions still open are closed at its last event)."""
        out = self.out
        while self._stack:
            self._close(out.last)
            out.unbalanced += 1
        if self.timeline is not None:
            self._mark(out.last)
            self.timeline.flush()
        return out

    # --- regions ---------------------------------------------------------------------------

    def _advance(self, time: int) -> None:
        out = self.out
        if self._stack:
            region = self._stack[-1][0]
            ticks = out.region_ticks
            ticks[region] = ticks.get(region, 0) + time - out.last
            if region in self._compute:
                self._computed += time - out.last
        elif out.first < 0:
            out.first = time
        out.last = time

    def enter(self, location: int, time: int, position: int, user: Any, attributes: Any, region: int) -> None:
        """Enter event: push the region."""
        self._advance(time)
        visits = self.out.region_visits
        visits[region] = visits.get(region, 0) + 1
        self._stack.append([region, time, -1, self._computed])
        if self.timeline is not None:
            self._mark(time)

    def leave(self, location: int, time: int, position: int, user: Any, attributes: Any, region: int) -> None:
        """Leave event: pop the region (a Leave without its Enter is counted, not trusted)."""
        self._advance(time)
        if not self._stack or self._stack[-1][0] != region:
            self.out.unbalanced += 1
            if not self._stack:
                return
        self._close(time)
        if self.timeline is not None:
            self._mark(time)

    def _close(self, time: int) -> None:
        frame = self._stack.pop()
        if frame[2] >= 0:
            self.out.inst_leave[frame[2]] = time

    def _mark(self, time: int) -> None:
        """Mark the kind of the innermost open region from ``time`` on, when it changed."""
        kind = self.kinds.get(self._stack[-1][0], NONE) if self._stack else NONE
        if kind != self._kind:
            self._kind = kind
            timeline = self.timeline
            timeline.times.append(time)  # RankTimeline.mark, inlined: this runs for most events
            timeline.kinds.append(kind)
            if len(timeline.times) >= timeline.batch:
                timeline.flush(keep_last=True)

    def _instance(self) -> tuple[int, int, int]:
        """(instance id, region, enter tick) of the innermost open region, which becomes an instance."""
        if not self._stack:
            self._stack.append([-1, self.out.last, -1, self._computed])  # an event outside any region: its own instance
            self.out.unbalanced += 1
        frame = self._stack[-1]
        if frame[2] < 0:
            out = self.out
            frame[2] = len(out.inst_enter)
            out.inst_region.append(frame[0])
            out.inst_enter.append(frame[1])
            out.inst_leave.append(frame[1])
            out.inst_compute.append(frame[3])
        return frame[2], frame[0], frame[1]

    # --- point to point ----------------------------------------------------------------------

    def _peer(self, comm: int, local: int) -> int:
        """World rank of communicator-local rank ``local`` of ``comm`` (-1 when not defined)."""
        members = self.defs.comm_ranks.get(comm)
        if members is None or (members.size and not 0 <= local < members.size):
            self.out.unmapped += 1
            return -1
        return int(members[local]) if members.size else self.out.rank

    def _sent(self, time: int, receiver: Any, comm: Any, tag: Any, length: Any, nonblocking: int) -> None:
        self._advance(time)
        inst, region, _ = self._instance()
        self.out.sends.append((self._peer(comm, receiver), comm, tag, length, inst, nonblocking))
        out = self.out
        out.region_bytes_sent[region] = out.region_bytes_sent.get(region, 0) + length
        out.region_msgs_sent[region] = out.region_msgs_sent.get(region, 0) + 1

    def mpi_send(self, location: int, time: int, position: int, user: Any, attributes: Any,
                 receiver: Any, comm: Any, tag: Any, length: Any) -> None:
        """MpiSend event: a blocking send's message record."""
        self._sent(time, receiver, comm, tag, length, 0)

    def mpi_isend(self, location: int, time: int, position: int, user: Any, attributes: Any,
                  receiver: Any, comm: Any, tag: Any, length: Any, request: Any) -> None:
        """MpiIsend event: a non-blocking send's message record."""
        self._sent(time, receiver, comm, tag, length, 1)

    def mpi_irecv_request(self, location: int, time: int, position: int, user: Any, attributes: Any,
                          request: Any) -> None:
        """MpiIrecvRequest event: remember when the receive was posted, and in which order."""
        self._advance(time)
        _, _, enter = self._instance()
        self._requests[request] = (enter, self._post_seq)
        self._post_seq += 1

    def mpi_request_cancelled(self, location: int, time: int, position: int, user: Any, attributes: Any,
                              request: Any) -> None:
        """MpiRequestCancelled event: forget the request."""
        self._advance(time)
        self._requests.pop(request, None)

    def _received(self, time: int, sender: Any, comm: Any, tag: Any, length: Any, request: int | None) -> None:
        self._advance(time)
        inst, region, enter = self._instance()
        if request is None or request not in self._requests:
            post, seq = enter, self._post_seq
            self._post_seq += 1
        else:
            post, seq = self._requests.pop(request)
        self.out.recvs.append((self._peer(comm, sender), comm, tag, length, inst, post, seq))
        out = self.out
        out.region_bytes_recv[region] = out.region_bytes_recv.get(region, 0) + length
        out.region_msgs_recv[region] = out.region_msgs_recv.get(region, 0) + 1

    def mpi_recv(self, location: int, time: int, position: int, user: Any, attributes: Any,
                 sender: Any, comm: Any, tag: Any, length: Any) -> None:
        """MpiRecv event: a blocking receive's message record."""
        self._received(time, sender, comm, tag, length, None)

    def mpi_irecv(self, location: int, time: int, position: int, user: Any, attributes: Any,
                  sender: Any, comm: Any, tag: Any, length: Any, request: Any) -> None:
        """MpiIrecv event: a non-blocking receive completed."""
        self._received(time, sender, comm, tag, length, request)

    # --- collectives -------------------------------------------------------------------------

    def mpi_collective_end(self, location: int, time: int, position: int, user: Any, attributes: Any,
                           op: Any, comm: Any, root: Any, sent: Any, received: Any) -> None:
        """MpiCollectiveEnd event: the collective's record (root as world rank, -1 when none)."""
        self._advance(time)
        inst, region, _ = self._instance()
        members = self.defs.comm_ranks.get(comm)
        if members is not None and members.size and 0 <= root < members.size:
            root_world = int(members[root])
        elif members is not None and not members.size and root == 0:
            root_world = self.out.rank
        else:
            root_world = -1
        self.out.colls.append((comm, _int(op), root_world, sent, received, inst))
        out = self.out
        out.region_bytes_sent[region] = out.region_bytes_sent.get(region, 0) + sent
        out.region_bytes_recv[region] = out.region_bytes_recv.get(region, 0) + received


def stream_ranks(trace: Any, defs: Definitions, timeline: RankTimeline | None = None,
                 kinds: dict[int, int] | None = None) -> Iterator[RankEvents]:
    """Read the events of every MPI rank of the opened ``trace``, one rank after the other (marking
    region kinds on ``timeline``, see ``RankStream``).

    Local definitions (mapping tables, clock offsets) of a rank are read before its events; a
    missing or truncated events file raises ``PerfkitFormatError`` naming it.
    """
    import _otf2

    handle = trace.handle
    locations = sorted(defs.world, key=defs.world.__getitem__)
    for ref in locations:
        _otf2.Reader_SelectLocation(handle, ref)
    stream = RankStream(defs, timeline, kinds)
    callbacks = _otf2.EvtReaderCallbacks_New()
    try:
        pointers = [_register(callbacks, name, _guarded(stream, function))
                    for name, function in stream.callbacks.items()]
        try:
            _otf2.Reader_OpenDefFiles(handle)
            local_defs = True
        except _otf2.Error:
            local_defs = False
        try:
            _otf2.Reader_OpenEvtFiles(handle)
        except _otf2.Error as exc:
            raise PerfkitFormatError(defs.path, None, f"cannot open the events files ({exc}); expected {EXPECTED}") \
                from exc
        for ref in locations:
            stream.start(defs.world[ref])
            _read_location(defs, handle, ref, callbacks, local_defs, stream)
            yield stream.finish()
        if local_defs:
            _otf2.Reader_CloseDefFiles(handle)
        del pointers
    finally:
        _otf2.EvtReaderCallbacks_Delete(callbacks)


def _guarded(stream: RankStream, function: Any) -> Any:
    """``function`` returning OTF2's success code, or its interrupt code after keeping the exception in
    ``stream.error`` (an exception must not cross the C library).
    """
    def callback(*args: Any) -> int:
        try:
            function(*args)
        except Exception as exc:
            stream.error = exc
            return 1
        return 0

    return callback


def _register(callbacks: Any, name: str, function: Any) -> Any:
    """Set ``function`` as the raw C callback for OTF2 event ``name``; returns the function pointer,
    which must stay referenced while events are read.

    The bindings' own registration wraps every call in Python code costing more than the event's
    handling; the raw pointer receives plain integers (the collective operation as a ctypes enum).
    """
    import importlib

    from _otf2.Config import conf

    module = importlib.import_module("_otf2.EvtReaderCallbacks")

    pointer_type = getattr(module, f"_EvtReaderCallback_FP_{name}")
    setter = getattr(conf.lib, f"OTF2_EvtReaderCallbacks_Set{name}Callback")
    setter.argtypes = [ctypes.POINTER(module.EvtReaderCallbacks), pointer_type]
    setter.restype = ctypes.c_int
    pointer = pointer_type(function)
    if setter(callbacks, pointer) != 0:
        raise RuntimeError(f"the OTF2 library refused a callback for {name} events")
    return pointer


def _read_location(defs: Definitions, handle: Any, ref: int, callbacks: Any, local_defs: bool,
                   stream: RankStream) -> None:
    """Feed the events of location ``ref`` to ``callbacks`` (its local definitions first)."""
    import _otf2

    member = _events_member(defs.path, ref)
    try:
        if local_defs:
            def_reader = _otf2.Reader_GetDefReader(handle, ref)
            if def_reader:
                _otf2.Reader_ReadAllLocalDefinitions(handle, def_reader)
                _otf2.Reader_CloseDefReader(handle, def_reader)
        evt_reader = _otf2.Reader_GetEvtReader(handle, ref)
        _otf2.EvtReader_SetCallbacks(evt_reader, callbacks, None)
        while _otf2.EvtReader_ReadEvents(evt_reader, BATCH) == BATCH and stream.error is None:
            pass
        if stream.error is not None:
            raise stream.error
        _otf2.Reader_CloseEvtReader(handle, evt_reader)
    except _otf2.Error as exc:
        if stream.error is not None:
            raise stream.error from exc
        raise PerfkitFormatError(defs.path, None, f"cannot read the events of rank {defs.world[ref]} ({exc}); "
                                 f"expected a complete {member}", member=member) from exc


def _events_member(anchor: Path, ref: int) -> str:
    """The events file of location ``ref`` beside the anchor file, as Score-P names it."""
    return f"{anchor.stem}/{ref}.evt"
