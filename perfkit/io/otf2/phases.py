"""Phases of a trace: the stretches between a rank's synchronising MPI calls, compared across ranks.

A *synchronising* call is an MPI call instance that completed a receive or a collective (where a
rank can wait for another). Phase k of a rank is its compute from the end of its (k-1)-th
synchronising call to the enter of its k-th; phase k of the run holds phase k of every rank (only
phases every rank has). Per phase: its start [s] from the run's start (the earliest enter of its
synchronising calls), the most and the mean compute over ranks [s], the rank that computed most
(``late_rank``, NaN when every rank computed the same) and the mean wait in the synchronising
calls [s]. A phase is labelled by the call that ends it on rank 0 and its occurrence,
``MPI_Waitall#3``.
"""

from __future__ import annotations

import numpy as np

from perfkit.io.otf2.waits import Records, Waits

#: The statistics of each phase (``phase_stat`` labels).
STATS = ("start", "compute_max", "compute_mean", "late_rank", "wait_mean")


def phase_table(rec: Records, waits: Waits, call_of_region: dict[int, str], nranks: int, start: int,
                resolution: int) -> tuple[list[str], np.ndarray]:
    """Phase labels and their (phase, ``STATS``) values; ``call_of_region``: the call name of each region
    reference."""
    sync = np.zeros(rec.inst_rank.size, dtype=bool)
    sync[rec.recv_inst] = True
    sync[rec.coll_inst] = True
    idx = np.flatnonzero(sync)
    idx = idx[np.lexsort((rec.inst_enter[idx], rec.inst_rank[idx]))]
    ranks = rec.inst_rank[idx]
    counts = np.bincount(ranks, minlength=nranks)[:nranks]
    n = int(counts.min()) if counts.size else 0
    if n == 0:
        return [], np.zeros((0, len(STATS)))
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    table = idx[first[:, None] + np.arange(n)[None, :]]  # (rank, phase) instance ids
    before = rec.inst_compute[table]
    compute = np.diff(before, axis=1, prepend=0) / resolution
    wait = (waits.late_sender[table] + waits.late_receiver[table] + waits.collective[table]) / resolution
    top, mean = compute.max(axis=0), compute.mean(axis=0)
    late = np.where(top - compute.min(axis=0) > 0, compute.argmax(axis=0), np.nan)
    begin = (rec.inst_enter[table].min(axis=0) - start) / resolution
    values = np.stack([begin, top, mean, late, wait.mean(axis=0)], axis=1)
    seen: dict[str, int] = {}
    labels = []
    for call in (call_of_region[ref] for ref in rec.inst_region[table[0]].tolist()):
        labels.append(f"{call}#{seen.get(call, 0)}")
        seen[call] = seen.get(call, 0) + 1
    return labels, values
