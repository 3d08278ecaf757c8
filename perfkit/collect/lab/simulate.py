"""Event times of a lab program with zero-cost messages: the semantics its truth comes from.

A program is one list of operations per rank, in program order (``scenarios.py`` writes the lists
that mirror ``programs/lab.c`` and ``programs/lab.F90`` call for call). The simulation assumes:

- ``Compute(s)`` takes exactly ``s`` seconds (a sleep); NaN when not prescribed (busy loops).
- Every MPI call costs nothing; a message takes no time to travel; sends are eager (``MPI_Send`` and
  ``MPI_Isend`` return at once, their requests complete at once).
- A receive completes when its matching send has started (or at once if it already had). Matching
  follows MPI: per (source, tag) in posting order; ``MPI_ANY_SOURCE`` takes the message sent
  earliest (ties: the lower rank).
- ``MPI_Waitall`` completes the requests posted since the previous ``MPI_Waitall``.
- A collective completes when the last rank enters it (what the collector's inserted barrier makes
  true for every collective; the lab programs are written so that it holds without it too).

Measured as MPInside defines them:

- send-late time of a receive: ``max(0, send start - receive call start)`` clipped to the call's
  duration; for ``MPI_Waitall``, from its entry until the last matching sender started.
- collective wait: from entering the collective until the last rank entered it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

#: The ``source`` of a receive that accepts any sender.
ANY_SOURCE = -1


@dataclass(frozen=True)
class Compute:
    """Computation of ``seconds`` [s] (NaN: not prescribed in wall time).

    ``until`` [s]: when it ended in a real run (realised truth); the rank's clock jumps there, so
    the waits that follow are measured on the run's own event times.
    """

    seconds: float
    until: float | None = None


@dataclass(frozen=True)
class Call:
    """An MPI call that neither communicates nor waits (``MPI_Init``, ``MPI_Comm_rank``...)."""

    name: str


@dataclass(frozen=True)
class Isend:
    """``MPI_Isend`` of ``nbytes`` [B] to ``dest``."""

    dest: int
    tag: int
    nbytes: int


@dataclass(frozen=True)
class Send:
    """``MPI_Send`` of ``nbytes`` [B] to ``dest`` (eager)."""

    dest: int
    tag: int
    nbytes: int


@dataclass(frozen=True)
class Irecv:
    """``MPI_Irecv`` of ``nbytes`` [B] from ``source`` (a rank; ANY_SOURCE is not modelled here)."""

    source: int
    tag: int
    nbytes: int


@dataclass(frozen=True)
class Recv:
    """``MPI_Recv`` of ``nbytes`` [B] from ``source`` (a rank or ``ANY_SOURCE``)."""

    source: int
    tag: int
    nbytes: int


@dataclass(frozen=True)
class Waitall:
    """``MPI_Waitall`` on every request posted since the previous one."""


@dataclass(frozen=True)
class Collective:
    """A collective over all ranks (``MPI_Allreduce``, ``MPI_Bcast``, ``MPI_Barrier``).

    ``prescribed=False``: its wait is not set by the program's parameters (the start-up barrier
    absorbs the ranks' start-up skew), so its collective wait is reported as NaN.
    """

    name: str
    prescribed: bool = True


Op = Compute | Call | Isend | Send | Irecv | Recv | Waitall | Collective


class SimulationError(RuntimeError):
    """The program cannot run to its end (a deadlock, or a pattern the model does not cover)."""


@dataclass
class Trace:
    """What the simulation found, per rank (times [s] from leaving ``MPI_Init``)."""

    nprocs: int
    compute: np.ndarray
    end: np.ndarray
    calls: dict[tuple[int, str], int] = field(default_factory=lambda: defaultdict(int))
    send_late: dict[tuple[int, str], float] = field(default_factory=lambda: defaultdict(float))
    collective_wait: dict[tuple[int, str], float] = field(default_factory=lambda: defaultdict(float))
    traffic_bytes: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    traffic_count: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    #: per rank, the (start, end) [s] of each Compute, in program order
    compute_intervals: list[list[tuple[float, float]]] = field(default_factory=list)

    @property
    def functions(self) -> list[str]:
        """MPI functions called by any rank, sorted."""
        return sorted({f for _, f in self.calls})


def _tmax(*xs: float) -> float:
    """max() that returns NaN when any argument is NaN (Python's max does not)."""
    return math.nan if any(math.isnan(x) for x in xs) else max(xs)


@dataclass
class _Message:
    source: int
    tag: int
    time: float
    nbytes: int
    taken: bool = False


@dataclass
class _Rank:
    ops: Sequence[Op]
    pc: int = 0
    t: float = 0.0
    pending: list[Irecv] = field(default_factory=list)
    collectives_done: int = 0
    entered: bool = False

    @property
    def done(self) -> bool:
        return self.pc >= len(self.ops)


class _Simulation:
    def __init__(self, program: Sequence[Sequence[Op]]) -> None:
        n = len(program)
        self.ranks = [_Rank(ops) for ops in program]
        self.inbox: list[list[_Message]] = [[] for _ in range(n)]
        self.entries: dict[int, dict[int, tuple[str, float]]] = defaultdict(dict)
        self.trace = Trace(n, np.zeros(n), np.zeros(n), traffic_bytes=np.zeros((n, n)),
                           traffic_count=np.zeros((n, n)), compute_intervals=[[] for _ in range(n)])

    def run(self) -> Trace:
        while not all(r.done for r in self.ranks):
            progressed = False
            for rank in range(len(self.ranks)):
                progressed |= self._advance(rank)
            if not progressed:
                stuck = {i: self.ranks[i].ops[self.ranks[i].pc] for i in range(len(self.ranks))
                         if not self.ranks[i].done}
                raise SimulationError(f"deadlock: ranks blocked at {stuck}")
        self.trace.end = np.array([r.t for r in self.ranks])
        return self.trace

    # -- matching ---------------------------------------------------------------------------
    def _find(self, rank: int, source: int, tag: int, skip: int = 0) -> _Message | None:
        """The (skip+1)-th untaken message to ``rank`` from ``source`` with ``tag``."""
        for m in self.inbox[rank]:
            if not m.taken and m.source == source and m.tag == tag:
                if skip == 0:
                    return m
                skip -= 1
        return None

    def _blocked_on(self, q: int, r: int) -> bool:
        """Whether rank q cannot pass its current operation before rank r acts."""
        st = self.ranks[q]
        if st.done:
            return False
        op = st.ops[st.pc]
        if isinstance(op, Recv) and op.source == r:
            return self._find(q, r, op.tag) is None
        if isinstance(op, Waitall):
            return any(p.source == r for p in st.pending) and self._match_pending(q) is None
        if isinstance(op, Collective):
            return st.entered and r not in self.entries[st.collectives_done]
        return False

    def _any_source(self, rank: int, tag: int) -> _Message | None:
        """The message an ``MPI_ANY_SOURCE`` receive matches now, or None if not yet decidable."""
        cands = [m for m in self.inbox[rank] if not m.taken and m.tag == tag]
        if not cands:
            return None
        best = min(cands, key=lambda m: (m.time, m.source))
        for q, st in enumerate(self.ranks):
            if q != rank and not st.done and not self._blocked_on(q, rank) and not st.t >= best.time:
                return None  # q may still send something earlier
        return best

    def _match_pending(self, rank: int) -> list[_Message] | None:
        """The messages matching every pending Irecv of ``rank``, or None if one is missing."""
        seen: dict[tuple[int, int], int] = defaultdict(int)
        out = []
        for p in self.ranks[rank].pending:
            m = self._find(rank, p.source, p.tag, seen[p.source, p.tag])
            if m is None:
                return None
            seen[p.source, p.tag] += 1
            out.append(m)
        return out

    # -- execution --------------------------------------------------------------------------
    def _post(self, rank: int, dest: int, tag: int, nbytes: int) -> None:
        self.inbox[dest].append(_Message(rank, tag, self.ranks[rank].t, nbytes))
        self.trace.traffic_bytes[rank, dest] += nbytes
        self.trace.traffic_count[rank, dest] += 1

    def _advance(self, rank: int) -> bool:
        st, tr = self.ranks[rank], self.trace
        progressed = False
        while not st.done:
            op = st.ops[st.pc]
            name = None
            if isinstance(op, Compute):
                start = st.t
                st.t = st.t + op.seconds if op.until is None else op.until
                tr.compute_intervals[rank].append((start, st.t))
                tr.compute[rank] += op.seconds
            elif isinstance(op, Call):
                name = op.name
            elif isinstance(op, (Isend, Send)):
                name = "MPI_Isend" if isinstance(op, Isend) else "MPI_Send"
                self._post(rank, op.dest, op.tag, op.nbytes)
            elif isinstance(op, Irecv):
                if op.source == ANY_SOURCE:
                    raise SimulationError("MPI_Irecv from MPI_ANY_SOURCE is not modelled")
                name = "MPI_Irecv"
                st.pending.append(op)
            elif isinstance(op, Recv):
                if op.source == ANY_SOURCE:
                    m = self._any_source(rank, op.tag)
                else:
                    if any((p.source, p.tag) == (op.source, op.tag) for p in st.pending):
                        raise SimulationError("MPI_Recv overtaking a pending MPI_Irecv is not modelled")
                    m = self._find(rank, op.source, op.tag)
                if m is None:
                    return progressed
                m.taken = True
                name = "MPI_Recv"
                end = _tmax(st.t, m.time)
                tr.send_late[rank, name] += end - st.t
                st.t = end
            elif isinstance(op, Waitall):
                ms = self._match_pending(rank)
                if ms is None:
                    return progressed
                name = "MPI_Waitall"
                end = _tmax(st.t, *(m.time for m in ms))
                for m in ms:
                    m.taken = True
                tr.send_late[rank, name] += end - st.t
                st.t = end
                st.pending.clear()
            elif isinstance(op, Collective):
                inst = self.entries[st.collectives_done]
                if not st.entered:
                    inst[rank] = (op.name, st.t)
                    st.entered = True
                if len(inst) < len(self.ranks):
                    return progressed
                names = {nm for nm, _ in inst.values()}
                if len(names) != 1:
                    raise SimulationError(f"ranks disagree on collective #{st.collectives_done}: {names}")
                name = op.name
                end = _tmax(*(t for _, t in inst.values()))
                tr.collective_wait[rank, name] += (end - st.t) if op.prescribed else math.nan
                st.t = end
                st.entered = False
                st.collectives_done += 1
            if name is not None:
                tr.calls[rank, name] += 1
            st.pc += 1
            progressed = True
        return progressed


def simulate(program: Sequence[Sequence[Op]]) -> Trace:
    """Run ``program`` (one operation list per rank) under the zero-cost model; see the module doc."""
    if not program:
        raise ValueError("a program needs at least one rank")
    return _Simulation(program).run()
