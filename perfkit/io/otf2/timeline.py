"""A trace's timeline: per rank, the ticks of each ``kind`` in each time bin, accumulated while streaming.

The bins are ``nbins`` equal intervals of ``width`` integer ticks from the run's start ``start``
(the trace's global offset); they cover the trace's length (the last bin may reach past its end).
While a rank's events are read, a batch at a time, the intervals between changes of the innermost
region's kind are added to the bins (``perfkit.io.otf2.events``), so the memory does not grow with
the number of events. Wait states, known only once every rank is read,
are then moved out of their call's kind: each wait is the interval from its instance's enter to
enter + wait (``perfkit.io.otf2.waits``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfkit.model import KINDS

#: Kind code of "no region open" (time outside the rank's outermost region is no kind).
NONE = -1
#: Bins of the timeline when the user does not choose.
DEFAULT_BINS = 100


@dataclass
class Bins:
    """``nbins`` bins of ``width`` ticks from tick ``start``; ``ticks`` (rank, bin, kind) accumulates."""

    start: int
    width: int
    nbins: int
    ticks: np.ndarray

    @classmethod
    def over(cls, start: int, length: int, nbins: int, nranks: int) -> Bins:
        """Bins covering ``length`` ticks from ``start`` (integer width, rounded up)."""
        width = max(1, -(-max(length, 1) // nbins))
        return cls(start, width, nbins, np.zeros((nranks, nbins, len(KINDS)), dtype=np.int64))

    def add(self, rank: np.ndarray | int, begin: np.ndarray, end: np.ndarray, kind: np.ndarray | int,
            sign: int = 1) -> None:
        """Add (``sign`` -1: remove) the intervals [``begin``, ``end``) ticks of ``kind`` to ``rank``'s bins.

        Each interval adds its overlap with every bin; the parts outside the bins are dropped.
        """
        span = self.nbins * self.width
        a = np.clip(np.asarray(begin, dtype=np.int64) - self.start, 0, span)
        b = np.clip(np.asarray(end, dtype=np.int64) - self.start, 0, span)
        rank, kind = np.broadcast_to(rank, a.shape), np.broadcast_to(kind, a.shape)
        keep = (b > a) & (kind >= 0)
        a, b, rank, kind = a[keep], b[keep], rank[keep], kind[keep]
        if not a.size:
            return
        first, last = a // self.width, (b - 1) // self.width
        # head bin: up to its end or the interval's end; tail bin: from its start; full bins between
        head = np.minimum(b, (first + 1) * self.width) - a
        tail = np.where(last > first, b - last * self.width, 0)
        middle = np.maximum(last - first - 1, 0)
        rows = np.repeat(np.arange(a.size), middle)
        offsets = np.arange(rows.size) - np.repeat(np.cumsum(middle) - middle, middle)
        bins = np.concatenate([first, last, first[rows] + 1 + offsets])
        values = np.concatenate([head, tail, np.full(rows.size, self.width)])
        ranks, kinds = np.concatenate([rank, rank, rank[rows]]), np.concatenate([kind, kind, kind[rows]])
        flat = (ranks * self.nbins + bins) * len(KINDS) + kinds
        np.add.at(self.ticks.reshape(-1), flat, values if sign > 0 else -values)
