"""Reduce one rank's OTF2 events, a batch at a time, into per-region sums and per-message records.

The events arrive as integer rows (``perfkit.io.otf2.batches``); each batch is reduced with numpy
and dropped, so nothing per event outlives its batch. What carries from one batch to the next is
small: the open regions (the stack), the receive requests still pending, the last tick, the
compute ticks so far and the timeline's open transition. The region stack is found without a loop:
the depth after each event is a cumulative sum of +1 (Enter) and -1 (Leave) floored at 0, the
innermost open region after an event is the latest Enter at that depth, and a region closes at the
first Leave after its Enter that brings the depth below its own.

Per region: exclusive ticks, visits, bytes and messages sent and received, and with a CPU time metric
(``cpu_time`` just before every Enter and Leave, as ``perfkit collect --trace`` writes it) exclusive
CPU seconds: each Enter's and Leave's reading less the previous one, to the region open between them,
as ticks are. For the events of a
message or a collective, one record, pointing at the *instance* (one Enter..Leave of an MPI region)
it happened in, whose enter and leave ticks are kept so that wait states can be computed after
every rank is read (``perfkit.io.otf2.waits``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfkit.errors import PerfkitFormatError
from perfkit.io.otf2 import layout as b
from perfkit.io.otf2.definitions import EXPECTED, CpuMetric, Definitions, region_kinds
from perfkit.io.otf2.heap import give_back
from perfkit.io.otf2.timeline import NONE, Bins
from perfkit.model import KINDS

COMPUTE_KIND = KINDS.index("compute")
#: Events reduced per batch (at most ``batches.BATCH``).
BATCH = 65536
_EMPTY = np.zeros(0, dtype=np.int64)


def _kinds(*kinds: int) -> np.ndarray:
    """A lookup: True at the event kinds given (``layout``)."""
    table = np.zeros(16, dtype=bool)
    table[list(kinds)] = True
    return table


def _frame(values: np.ndarray, frames: np.ndarray) -> np.ndarray:
    """``values`` of each frame in ``frames``, any value where a frame is -1 (none; there may be no frame at all)."""
    return values[np.maximum(frames, 0)] if values.size else np.zeros(frames.size, dtype=values.dtype)


#: Events that belong to an instance (messages, requests, collectives), and those naming a request.
_HOLDS = _kinds(b.SEND, b.ISEND, b.IRECV_REQUEST, b.RECV, b.IRECV, b.COLL_END)
_REQUESTS = _kinds(b.IRECV_REQUEST, b.IRECV, b.CANCELLED)


@dataclass
class RankEvents:
    """What one rank's events reduce to. Times are integer ticks; instance ids are local to the rank.

    ``region_*`` map a region reference (-1: no or an undefined region) to exclusive ticks, visits,
    bytes and messages sent and received in it. ``inst`` (n, 4): region, enter, leave and the
    rank's compute ticks before the enter of each MPI region instance that held a message or
    collective event. ``send`` (n, 6): peer (world rank, -1 if unknown), comm, tag, bytes,
    instance, nonblocking; ``recv`` (n, 7): peer, comm, tag, bytes, instance, post (tick the
    receive was posted), seq (its posting order); ``coll`` (n, 6): comm, op, root (world rank or
    -1), bytes sent, bytes received, instance. ``computed``: the rank's compute ticks in all.
    ``region_cpu``: exclusive CPU time [s] per region (empty without a CPU metric, or with ``cpu_problem``, what
    made the rank's CPU metric unreadable).
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
    inst: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), dtype=np.int64))
    send: np.ndarray = field(default_factory=lambda: np.zeros((0, 6), dtype=np.int64))
    recv: np.ndarray = field(default_factory=lambda: np.zeros((0, 7), dtype=np.int64))
    coll: np.ndarray = field(default_factory=lambda: np.zeros((0, 6), dtype=np.int64))
    unbalanced: int = 0
    unmapped: int = 0
    computed: int = 0
    region_cpu: dict[int, float] = field(default_factory=dict)
    cpu_problem: str = ""


class RankReducer:
    """Reduces the event batches of world rank ``rank`` (``add``) into a ``RankEvents`` (``finish``).

    ``kinds`` maps region references to ``KINDS`` indices; with ``bins``, the time of each kind of
    the innermost open region is added to the rank's timeline bins.
    """

    def __init__(self, defs: Definitions, rank: int, kinds: dict[int, int] | None = None,
                 bins: Bins | None = None) -> None:
        kinds = region_kinds(defs) if kinds is None else kinds
        self.defs, self.rank, self.bins = defs, rank, bins
        self.slots = max([-1, *defs.regions]) + 2  # the last slot: no or an undefined region
        self.kind_of = np.full(self.slots, NONE, dtype=np.int64)
        for ref, kind in kinds.items():
            if 0 <= ref < self.slots - 1:
                self.kind_of[ref] = kind
        self.sums = np.zeros((6, self.slots), dtype=np.int64)  # ticks, visits, bytes/msgs sent, bytes/msgs recv
        self.first = self.last = -1
        self.computed = self.post_seq = self.n_inst = self.unbalanced = self.unmapped = 0
        # open frames: slot, enter tick, instance (-1: none yet), compute ticks at enter
        self.stack = np.zeros((4, 0), dtype=np.int64)
        self.pending = np.zeros((3, 0), dtype=np.int64)  # request, post, seq
        self.mark = (0, NONE)  # the timeline's open transition (tick, kind)
        self.tables: dict[str, list[np.ndarray]] = {"inst": [], "send": [], "recv": [], "coll": []}
        self.leaves: list[np.ndarray] = []  # (instance, leave tick) of instances closed after their batch
        self.cpu = CpuReducer(defs.cpu, self.slots) if defs.cpu is not None else None

    def _slot(self, refs: np.ndarray) -> np.ndarray:
        return np.where((refs >= 0) & (refs < self.slots - 1), refs, self.slots - 1)

    def add(self, rows: np.ndarray) -> None:
        """Reduce one batch of events (``batches`` layout: (field, event), in time order)."""
        if self.cpu is None:
            self._reduce(rows)
            return
        events = np.flatnonzero(rows[b.KIND] != b.METRIC)  # metrics are the CPU reducer's alone
        slot_before = np.full(rows.shape[1], -1, dtype=np.int64)
        slot_before[events] = self._reduce(rows[:, events])
        self.cpu.add(rows, slot_before)

    def _reduce(self, rows: np.ndarray) -> np.ndarray:
        """Reduce a batch of events other than metrics; the region slot open before each event (-1: none)."""
        n = rows.shape[1]
        if not n:
            return _EMPTY
        kind, t = rows[b.KIND], rows[b.TIME]
        if self.first < 0:
            self.first = self.last = int(t[0])
        dt = np.diff(t, prepend=self.last)
        is_enter, is_leave = kind == b.ENTER, kind == b.LEAVE
        p = self.stack.shape[1]
        walk = p + np.cumsum(is_enter.astype(np.int64) - is_leave)
        depth = walk - np.minimum(np.minimum.accumulate(walk), 0)  # after each event, floored at 0
        before = np.concatenate([[p], depth[:-1]])
        popped = is_leave & (before > 0)

        # frames: the open ones carried in, then one per Enter of this batch
        enters = np.flatnonzero(is_enter)
        f_slot = np.concatenate([self.stack[0], self._slot(rows[b.A][enters])])
        f_enter = np.concatenate([self.stack[1], t[enters]])
        top = self._innermost(depth, is_enter, p)  # frame on top after each event (-1: none)
        top_before = np.concatenate([[p - 1], top[:-1]])

        # exclusive ticks and compute ticks: the time since the last event belongs to the innermost region
        inside = top_before >= 0
        slot_before = np.where(inside, _frame(f_slot, top_before), self.slots - 1)
        self.sums[0] += np.bincount(slot_before[inside], weights=dt[inside], minlength=self.slots).astype(np.int64)
        compute_dt = np.where(inside & (self.kind_of[slot_before] == COMPUTE_KIND), dt, 0)
        computed = self.computed + np.cumsum(compute_dt)
        f_computed = np.concatenate([self.stack[3], computed[enters]])
        self.sums[1] += np.bincount(f_slot[p:], minlength=self.slots)
        self.unbalanced += int((is_leave & (before == 0)).sum())
        self.unbalanced += int((popped & (self._slot(rows[b.A]) != slot_before)).sum())

        # where each frame closes: at the Leave that pops it
        f_close = np.full(f_slot.size, -1, dtype=np.int64)
        f_close[top_before[popped]] = t[popped]

        # instances: the frames holding a message or collective event
        f_inst = np.concatenate([self.stack[2], np.full(enters.size, -1, dtype=np.int64)])
        held = _HOLDS[kind]
        events = np.flatnonzero(held)
        frame = top_before[events]
        outside = frame < 0  # an event outside any region: an instance of its own, not trusted
        self.unbalanced += int(outside.sum())
        holds = np.zeros(f_slot.size, dtype=bool)
        holds[frame[~outside]] = True
        fresh = np.flatnonzero(holds & (f_inst < 0))
        f_inst[fresh] = self.n_inst + np.arange(fresh.size)
        self.n_inst += fresh.size
        lone = self.n_inst + np.arange(int(outside.sum()))
        self.n_inst += lone.size
        ev_inst = np.where(outside, 0, _frame(f_inst, frame))
        ev_inst[outside] = lone
        ev_slot = np.where(outside, self.slots - 1, _frame(f_slot, frame))
        ev_enter = np.where(outside, t[events], _frame(f_enter, frame))
        ref = np.where(f_slot[fresh] == self.slots - 1, -1, f_slot[fresh])
        leave = np.where(f_close[fresh] >= 0, f_close[fresh], f_enter[fresh])
        self.tables["inst"].append(np.column_stack([ref, f_enter[fresh], leave, f_computed[fresh]]))
        self.tables["inst"].append(np.column_stack([np.full(lone.size, -1), t[events][outside],
                                                    t[events][outside], computed[events][outside]]))
        carried_closed = (np.arange(f_slot.size) < p) & (f_close >= 0) & (f_inst >= 0)
        self.leaves.append(np.column_stack([f_inst[carried_closed], f_close[carried_closed]]))

        self._messages(rows, events, ev_inst, ev_slot)
        self._receives(rows, events, ev_inst, ev_slot, ev_enter)
        if self.bins is not None:
            self._timeline(t, is_enter | popped, np.where(top >= 0, _frame(f_slot, top), -1))

        still = f_close < 0
        self.stack = np.stack([f_slot[still], f_enter[still], f_inst[still], f_computed[still]])
        self.computed = int(computed[-1])
        self.last = int(t[-1])
        return np.where(inside, slot_before, -1)

    @staticmethod
    def _innermost(depth: np.ndarray, is_enter: np.ndarray, p: int) -> np.ndarray:
        """Frame index of the innermost open region after each event: the latest Enter at the event's
        depth, else the carried frame of that depth (-1 at depth 0). Frames: ``p`` carried, then one
        per Enter."""
        n = depth.size
        order = np.argsort(depth.astype(np.int16 if depth.max(initial=0) < 2**15 else np.int64), kind="stable")
        span = n + 1
        key = np.where(is_enter, depth * span + np.arange(n), -1)[order]
        latest = np.maximum.accumulate(key)  # by depth, then event order: the latest Enter so far
        found = np.empty(n, dtype=bool)
        found[order] = (latest >= 0) & (latest // span == depth[order])
        enter_at = np.empty(n, dtype=np.int64)
        enter_at[order] = latest % span
        ordinal = np.cumsum(is_enter) - 1  # Enter ordinal of each Enter event
        frame = np.where(found, p + ordinal[np.where(found, enter_at, 0)], depth - 1)
        return np.where(depth > 0, frame, -1)

    def _world(self, comms: np.ndarray, local: np.ndarray, count: bool) -> np.ndarray:
        """World ranks of communicator-local ranks (-1 when the trace does not define them)."""
        world = np.full(local.size, -1, dtype=np.int64)
        small = comms.size and comms.max() < 2**16
        for comm in (np.flatnonzero(np.bincount(comms)) if small else np.unique(comms)).tolist():
            sel = comms == comm
            members = self.defs.comm_ranks.get(comm)
            if members is None:
                continue
            if not members.size:  # MPI_COMM_SELF
                world[sel] = self.rank if count else np.where(local[sel] == 0, self.rank, -1)
                continue
            ok = sel & (local >= 0) & (local < members.size)
            world[ok] = members[local[ok]]
        if count:
            self.unmapped += int((world < 0).sum())
        return world

    def _messages(self, rows: np.ndarray, events: np.ndarray, inst: np.ndarray, slot: np.ndarray) -> None:
        """Send and collective records of the batch's message events (``inst``, ``slot``: their instance
        and region slot)."""
        kind = rows[b.KIND][events]
        a, comm, tag, size, e = (rows[c][events] for c in (b.A, b.B, b.C, b.D, b.E))
        sums = self.sums

        s = (kind == b.SEND) | (kind == b.ISEND)
        self.tables["send"].append(np.column_stack([self._world(comm[s], a[s], True), comm[s], tag[s], size[s],
                                                    inst[s], (kind[s] == b.ISEND).astype(np.int64)]))
        sums[2] += np.bincount(slot[s], weights=size[s], minlength=self.slots).astype(np.int64)
        sums[3] += np.bincount(slot[s], minlength=self.slots)

        c = kind == b.COLL_END
        root = self._world(comm[c], tag[c], False)
        self.tables["coll"].append(np.column_stack([comm[c], a[c], root, size[c], e[c], inst[c]]))
        sums[2] += np.bincount(slot[c], weights=size[c], minlength=self.slots).astype(np.int64)
        sums[4] += np.bincount(slot[c], weights=e[c], minlength=self.slots).astype(np.int64)

    def _receives(self, rows: np.ndarray, events: np.ndarray, inst: np.ndarray, slot: np.ndarray,
                  enter: np.ndarray) -> None:
        """Receive records: a completed MPI_Irecv takes the post tick and posting order of its request
        (the latest MpiIrecvRequest of its request id not yet completed or cancelled), others their own."""
        n, shift = rows.shape[1], self.pending.shape[1]
        kind, request = rows[b.KIND], rows[b.E]
        post_row = np.zeros(n, dtype=np.int64)
        post_row[events] = enter
        idx = np.flatnonzero(_REQUESTS[kind])
        ids = np.concatenate([self.pending[0], request[idx]])
        pos = np.concatenate([np.arange(-shift, 0), idx])
        is_request = np.concatenate([np.ones(shift, dtype=bool), kind[idx] == b.IRECV_REQUEST])
        order = np.lexsort((pos, ids))
        ids, pos, is_request = ids[order], pos[order], is_request[order]
        matched = np.zeros(ids.size, dtype=bool)
        irecv = (pos >= 0) & (kind[np.maximum(pos, 0)] == b.IRECV)
        matched[1:] = (ids[1:] == ids[:-1]) & is_request[:-1] & irecv[1:]
        completes = np.full(n, -shift - 1, dtype=np.int64)  # row -> position of its request
        completes[pos[1:][matched[1:]]] = pos[:-1][matched[1:]]
        received = (kind == b.RECV) | (kind == b.IRECV)
        done = completes >= -shift
        step = (kind == b.IRECV_REQUEST) | (received & ~done)
        seq = self.post_seq + np.cumsum(step) - 1
        self.post_seq += int(step.sum())
        post_of = np.concatenate([self.pending[1], post_row])  # by position + shift
        seq_of = np.concatenate([self.pending[2], seq])
        post = np.where(done, post_of[completes + shift], post_row)
        seq = np.where(done, seq_of[completes + shift], seq)
        last = np.ones(ids.size, dtype=bool)
        last[:-1] = ids[1:] != ids[:-1]
        keep = last & is_request
        self.pending = np.stack([ids[keep], post_of[pos[keep] + shift], seq_of[pos[keep] + shift]])
        r = np.flatnonzero(received[events])
        rr = events[r]
        self.tables["recv"].append(np.column_stack([self._world(rows[b.B][rr], rows[b.A][rr], True), rows[b.B][rr],
                                                    rows[b.C][rr], rows[b.D][rr], inst[r], post[rr], seq[rr]]))
        self.sums[4] += np.bincount(slot[r], weights=rows[b.D][rr], minlength=self.slots).astype(np.int64)
        self.sums[5] += np.bincount(slot[r], minlength=self.slots)

    def _timeline(self, t: np.ndarray, changes: np.ndarray, slot_after: np.ndarray) -> None:
        """Add to the bins the intervals between changes of the innermost region's kind."""
        idx = np.flatnonzero(changes)
        kinds = np.where(slot_after[idx] >= 0, self.kind_of[np.maximum(slot_after[idx], 0)], NONE)
        prev = np.concatenate([[self.mark[1]], kinds[:-1]])
        new = kinds != prev
        times = np.concatenate([[self.mark[0]], t[idx][new]])
        marks = np.concatenate([[self.mark[1]], kinds[new]])
        self.bins.add(self.rank, times[:-1], times[1:], marks[:-1])
        self.mark = (int(times[-1]), int(marks[-1]))

    def finish(self) -> RankEvents:
        """The reductions of the rank (regions still open are closed at its last event)."""
        open_inst = self.stack[2][self.stack[2] >= 0]
        self.leaves.append(np.column_stack([open_inst, np.full(open_inst.size, self.last)]))
        self.unbalanced += self.stack.shape[1]
        if self.bins is not None and self.mark[1] != NONE:
            self.bins.add(self.rank, np.array([self.mark[0]]), np.array([self.last]), self.mark[1])
        tables = {name: np.concatenate(parts).astype(np.int64) if parts else _EMPTY
                  for name, parts in self.tables.items()}
        widths = {"inst": 4, "send": 6, "recv": 7, "coll": 6}
        tables = {name: table.reshape(-1, widths[name]) for name, table in tables.items()}
        inst = tables["inst"]  # row = instance id: ids are given in row order
        patches = np.concatenate(self.leaves).reshape(-1, 2)
        inst[patches[:, 0], 2] = patches[:, 1]
        refs = np.arange(self.slots)
        refs[-1] = -1
        sums = self.sums

        def table(values: np.ndarray, keep: np.ndarray) -> dict[int, int]:
            return dict(zip(refs[keep].tolist(), values[keep].tolist()))

        seen = (sums[0] > 0) | (sums[1] > 0)
        cpu, problem = self.cpu.finish() if self.cpu is not None else (None, "")
        return RankEvents(
            self.rank, region_ticks=table(sums[0], seen), region_visits=table(sums[1], sums[1] > 0),
            region_bytes_sent=table(sums[2], sums[2] > 0), region_msgs_sent=table(sums[3], sums[3] > 0),
            region_bytes_recv=table(sums[4], sums[4] > 0), region_msgs_recv=table(sums[5], sums[5] > 0),
            first=self.first, last=self.last, inst=inst, send=tables["send"], recv=tables["recv"],
            coll=tables["coll"], unbalanced=self.unbalanced, unmapped=self.unmapped, computed=self.computed,
            region_cpu={} if cpu is None else dict(zip(refs[seen].tolist(), cpu[seen].tolist())), cpu_problem=problem)


class CpuReducer:
    """Exclusive CPU time per region slot from a rank's ``cpu_time`` metric (``metric``), batch by batch.

    The metric must come just before every Enter and Leave, at its tick, and only there (other metrics are
    ignored); its values must be numbers that never decrease. Otherwise the earliest event that breaks this is
    named (``problem``) and the rank's CPU time is not read further.
    """

    def __init__(self, metric: CpuMetric, slots: int) -> None:
        self.metric, self.slots = metric, slots
        self.sums = np.zeros(slots)  # the metric's units
        self.last = np.nan  # the reading of the last Enter or Leave
        self.pending: tuple[int, int, float] | None = None  # a batch's last event, a metric: tick, position, value
        self.problem = ""

    def add(self, rows: np.ndarray, slot_before: np.ndarray) -> None:
        """Reduce one batch, given the region slot open before each event (-1: none)."""
        if self.problem:
            return
        kind = rows[b.KIND]
        is_metric, marks = kind == b.METRIC, (kind == b.ENTER) | (kind == b.LEAVE)
        ours = is_metric & (rows[b.A] == self.metric.ref)
        seq = np.flatnonzero(~is_metric | ours)  # the events in question: other metrics are not among them
        lead = int(self.pending is not None)  # the sequence starts with the carried metric, if any
        if not seq.size and not lead:
            return
        tick, position, value = self.pending or (0, 0, np.nan)
        t = np.concatenate([[tick], rows[b.TIME][seq]])[1 - lead:]
        pos = np.concatenate([[position], rows[b.E][seq]])[1 - lead:]
        metric = np.concatenate([[True], ours[seq]])[1 - lead:]
        mark = np.concatenate([[False], marks[seq]])[1 - lead:]
        values = np.full(t.size, value)
        values[lead:] = np.nan
        values[lead:][ours[seq]] = self._values(rows, seq[ours[seq]])
        same_tick = t[1:] == t[:-1]
        after_metric = np.concatenate([[False], metric[:-1] & same_tick])
        before_mark = np.concatenate([mark[1:] & same_tick, [True]])  # the last: carried to the next batch
        readings = np.flatnonzero(metric)
        backwards = np.zeros(t.size, dtype=bool)
        backwards[readings] = np.diff(np.concatenate([[self.last], values[readings]])) < 0
        self._name_first(pos, t, (
            (mark & ~after_metric, "an Enter or Leave without its cpu_time metric"),
            (metric & ~before_mark, "a cpu_time metric not followed by an Enter or Leave at its tick"),
            (metric & ~np.isfinite(values), "a cpu_time metric that is not a number (or not one value of its type)"),
            (backwards, "cpu_time goes backwards")))
        if self.problem:
            return
        self.pending = (int(t[-1]), int(pos[-1]), float(values[-1])) if metric[-1] else None
        at = np.flatnonzero(mark)  # each Enter and Leave reads the metric just before it
        delta = np.diff(np.concatenate([[self.last], values[at - 1]]))
        slot = slot_before[seq[at - lead]]
        held = slot >= 0
        self.sums += np.bincount(slot[held], weights=delta[held], minlength=self.slots)
        if at.size:
            self.last = float(values[at[-1] - 1])

    def _values(self, rows: np.ndarray, at: np.ndarray) -> np.ndarray:
        """The metric's values at rows ``at`` as numbers; NaN where the event has not one member of its type."""
        raw, kind = rows[b.D][at], self.metric.value_type
        values = raw.view(np.float64) if kind == b.DOUBLE else raw.view(np.uint64) if kind == b.UINT64 else raw
        return np.where((rows[b.B][at] == 1) & (rows[b.C][at] == kind), values.astype(np.float64), np.nan)

    def _name_first(self, pos: np.ndarray, t: np.ndarray, problems: tuple[tuple[np.ndarray, str], ...]) -> None:
        """Name the earliest event with one of ``problems`` (where, what), if any."""
        found = [(int(pos[hit[0]]), int(t[hit[0]]), text) for bad, text in problems
                 if (hit := np.flatnonzero(bad)).size]
        if found:
            position, tick, text = min(found)
            self.problem = f"{text} (event {position}, tick {tick})"

    def finish(self) -> tuple[np.ndarray | None, str]:
        """Exclusive CPU time [s] per region slot, or None and the problem that made the rank's unreadable."""
        if not self.problem and self.pending is not None:
            tick, position, _ = self.pending
            self._name_first(np.array([position]), np.array([tick]), (
                (np.array([True]), "a cpu_time metric not followed by an Enter or Leave at its tick"),))
        return (None, self.problem) if self.problem else (self.sums * self.metric.scale, "")


def stream_ranks(trace: Any, defs: Definitions, bins: Bins | None = None,
                 kinds: dict[int, int] | None = None, batch: int | None = None) -> Iterator[RankEvents]:
    """Read the events of every MPI rank of the opened ``trace``, one rank after the other, ``batch``
    events at a time (default ``BATCH``; adding region kinds to the timeline ``bins``, see ``RankReducer``).

    Local definitions (mapping tables, clock offsets) of a rank are read before its events; a
    missing or truncated events file raises ``PerfkitFormatError`` naming it.
    """
    import _otf2

    from perfkit.io.otf2.batches import EventsError, new_callbacks, read_batches

    handle = trace.handle
    locations = sorted(defs.world, key=defs.world.__getitem__)
    for ref in locations:
        _otf2.Reader_SelectLocation(handle, ref)
    callbacks = new_callbacks(metrics=defs.cpu is not None)
    try:
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
            reducer = RankReducer(defs, defs.world[ref], kinds, bins)
            member = events_member(defs.path, ref)
            try:
                if local_defs:
                    def_reader = _otf2.Reader_GetDefReader(handle, ref)
                    if def_reader:
                        _otf2.Reader_ReadAllLocalDefinitions(handle, def_reader)
                        _otf2.Reader_CloseDefReader(handle, def_reader)
                batches = 0
                for rows in read_batches(handle, ref, callbacks, batch or BATCH):
                    reducer.add(rows)
                    batches += 1
            except (_otf2.Error, EventsError) as exc:
                raise PerfkitFormatError(defs.path, None, f"cannot read the events of rank {defs.world[ref]} "
                                         f"({exc}); expected a complete {member}", member=member) from exc
            events = reducer.finish()
            if batches > 1:  # the batches' temporaries: back to the system, not kept for the records
                give_back()
            yield events
        if local_defs:
            _otf2.Reader_CloseDefFiles(handle)
    finally:
        _otf2.EvtReaderCallbacks_Delete(callbacks)


def events_member(anchor: Any, ref: int) -> str:
    """The events file of location ``ref`` beside the anchor file, as Score-P names it."""
    return f"{anchor.stem}/{ref}.evt"
