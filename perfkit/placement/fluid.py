"""How long a set of simultaneous transfers takes on shared links: a fluid model with max-min fair
sharing (each link's rate split evenly among the flows it limits, as TCP flows with equal round-trip
times share a bottleneck).

Every flow starts at once (a bulk-synchronous exchange step: all sends posted, then wait for all); a
flow crosses its sender node's link out and its receiver node's link in (and the leaf uplinks when
the nodes hang from different switches). Rates are recomputed each time a flow ends. Scaling every
flow's bytes by c scales the result by c, so the total traffic of a run gives the run's network time
when each step repeats the same pattern.
"""

from __future__ import annotations

import numpy as np

#: Above this many flows the makespan is bounded by the busiest link instead (the fluid model costs
#: one max-min allocation per finishing flow).
MAX_FLOWS = 20_000


def max_min_rates(links: np.ndarray, capacity: np.ndarray, active: np.ndarray) -> np.ndarray:
    """Max-min fair rate of each flow [bytes/s]; ``links`` (flows x hops) holds link indices (-1: none)."""
    rate = np.zeros(links.shape[0])
    left = capacity.astype(float).copy()
    free = active.copy()
    while free.any():
        used = links[free]
        counts = np.bincount(used[used >= 0], minlength=capacity.size)
        share = np.where(counts > 0, left / np.maximum(counts, 1), np.inf)
        bottleneck = share.min()
        saturated = np.isclose(share, bottleneck, rtol=1e-12, atol=0) & (counts > 0)
        fixed = free & np.isin(links, np.flatnonzero(saturated)).any(axis=1)
        rate[fixed] = bottleneck
        np.subtract.at(left, links[fixed][links[fixed] >= 0], bottleneck)
        left = np.maximum(left, 0.0)
        free &= ~fixed
    return rate


def makespan(nbytes: np.ndarray, links: np.ndarray, capacity: np.ndarray) -> float:
    """Seconds until every flow (``nbytes`` each, crossing ``links``) has finished."""
    remaining = np.asarray(nbytes, dtype=float).copy()
    active = remaining > 0
    now = 0.0
    while active.any():
        rate = max_min_rates(links, capacity, active)
        with np.errstate(divide="ignore", invalid="ignore"):
            finish = np.where(active, remaining / rate, np.inf)
        dt = finish.min()
        now += dt
        remaining = np.where(active, remaining - rate * dt, 0.0)
        active &= remaining > remaining.max() * 1e-12 + 1e-9
    return now
