"""Phases of a traced run: which rank was late in each, and how much of the waiting that explains.

Reads the ``phases`` variable of a trace (``perfkit.io.otf2.phases``): per phase (the compute
between consecutive synchronising calls, labelled ``MPI_Waitall#3``) the most and mean compute
over ranks [s] and the rank that computed most. The *excess* of a phase is its most minus mean
compute [s]: what the late rank costs the others there. Summed over phases it is the imbalance
the run shows phase by phase; the load imbalance of the totals (max - mean compute per rank) is
the part of it that is static, the rest is dynamic. Waits that no phase's excess explains come
from ranks waiting in turn (serialisation).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xarray as xr

#: A call's phases are late on one rank when that rank is the late one in at least this share of them.
SAME_RANK = 0.8


@dataclass(frozen=True)
class CallPhases:
    """The phases ending in one MPI call: labels, late rank of each (-1: none) and excess [s]."""

    call: str
    labels: list[str]
    late: np.ndarray
    excess: np.ndarray

    @property
    def mode(self) -> tuple[int, float]:
        """The rank most often late and the share of the call's phases it is late in."""
        late = self.late[self.late >= 0]
        if not late.size:
            return -1, 0.0
        values, counts = np.unique(late, return_counts=True)
        return int(values[np.argmax(counts)]), float(counts.max() / self.late.size)

    @property
    def static(self) -> bool:
        """Whether the same rank is late in (nearly) every phase of the call."""
        return self.mode[1] >= SAME_RANK


def has_phases(ds: xr.Dataset, run: str) -> bool:
    """Whether ``run`` has phases from a trace."""
    return "phases" in ds and bool(ds["phases"].sel(run=run).notnull().any())


def call_phases(ds: xr.Dataset, run: str) -> list[CallPhases]:
    """The phases of ``run`` grouped by the call that ends them, in order of first appearance."""
    table = ds["phases"].sel(run=run).to_pandas().dropna(how="all")
    table = table.assign(call=[str(label).split("#")[0] for label in table.index])
    out = []
    for call, rows in table.groupby("call", sort=False):
        late = rows["late_rank"].fillna(-1).to_numpy(np.int64)
        out.append(CallPhases(str(call), [str(x) for x in rows.index], late,
                              (rows["compute_max"] - rows["compute_mean"]).to_numpy()))
    return out


def phase_excess(ds: xr.Dataset, run: str) -> float:
    """Sum over ``run``'s phases of most minus mean compute [s]."""
    return float(sum(c.excess.sum() for c in call_phases(ds, run)))


def late_rank_list(phases: CallPhases, limit: int = 12) -> str:
    """``MPI_Waitall#0: rank 0, #1: rank 1, ...`` for the phases with a late rank (at most ``limit``)."""
    named = [(label, int(rank)) for label, rank in zip(phases.labels, phases.late) if rank >= 0]
    parts = [f"{label if i == 0 else '#' + label.split('#')[1]}: rank {rank}"
             for i, (label, rank) in enumerate(named[:limit])]
    more = len(named) - limit
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


def send_chain(ds: xr.Dataset, run: str, start: int = 0) -> list[int]:
    """Ranks in the order messages flow from ``start``: each rank's main receiver (by bytes), until a repeat."""
    if "traffic" not in ds:
        return []
    traffic = ds["traffic"].sel(run=run, quantity="bytes")
    bytes_ = np.nan_to_num(np.asarray(traffic.values, dtype=np.float64))
    ranks = traffic["sender"].values
    chain = [start]
    while True:
        row = bytes_[int(np.flatnonzero(ranks == chain[-1])[0])]
        if not row.max() > 0:
            return chain
        nxt = int(ranks[int(np.argmax(row))])
        chain.append(nxt)
        if nxt in chain[:-1]:
            return chain
