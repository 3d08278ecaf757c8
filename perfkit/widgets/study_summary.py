"""What the per-rank view needs of every run of a study, from one read of the cube.

The view needs, of every run, which ranks exist (where the rank range resets on a run change, the node
selector's ranks) and, for the stack order of its bands, each function's total of every metric over every run
and rank (:func:`perfkit.plots.profile.stack_order`). On a lazily opened store each of these read alone is a
pass over the whole cube (100 runs of 100,000 ranks: 6 GB of values, tens of seconds); :func:`summarise` reads
it once, a block of runs x ranks at a time, for all of them, and keeps the result with the Dataset.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np
import xarray as xr

from perfkit.analysis.cube import evaluate, over_ranks, per_rank
from perfkit.plots.profile import stack_order


@dataclass(frozen=True)
class StudySummary:
    """Per run: which ranks exist; per function and metric: the total over every run and rank."""

    runs: tuple[str, ...]
    #: Rank labels of the cube (the columns of ``exists``).
    ranks: np.ndarray
    #: (run, rank): whether the rank has any value in that run.
    exists: np.ndarray
    #: (function, metric): sum over runs and ranks, NaN skipped (0 where all are NaN), in each metric's units.
    totals: np.ndarray
    metrics: tuple[str, ...]
    #: Group of each function per grouping (``function``, ``call``, ``kind``).
    labels: dict[str, np.ndarray]

    def ranks_of(self, run: str) -> np.ndarray:
        """The ranks that exist in ``run``, ascending."""
        return self.ranks[self.exists[self.runs.index(run)]]

    def bounds(self) -> dict[str, tuple[int, int]]:
        """First and last rank that exist in each run (every rank of the cube for a run without any value)."""
        out = {}
        for run, row in zip(self.runs, self.exists):
            present = self.ranks[row] if row.any() else self.ranks
            out[run] = (int(present.min()), int(present.max()))
        return out

    def order(self, by: str, metric: str) -> list[str]:
        """The ``by`` groups in stack order for ``metric`` (:func:`perfkit.plots.profile.band_order`)."""
        return stack_order(self.labels[by], self.totals[:, self.metrics.index(metric)])


_SUMMARIES: dict[int, tuple[weakref.ref, StudySummary]] = {}


def summarise(ds: xr.Dataset) -> StudySummary:
    """The :class:`StudySummary` of ``ds``, read once per Dataset object (kept while ``ds`` lives)."""
    key = id(ds)
    if key in _SUMMARIES and _SUMMARIES[key][0]() is ds:
        return _SUMMARIES[key][1]
    metrics = [str(m) for m in ds["metric"].values]
    totals, _ = over_ranks(ds, metrics)
    exists = per_rank(ds, lambda block: ~np.isnan(block).all(axis=(2, 3)), metrics)
    totals, exists = evaluate(totals, exists)
    summary = StudySummary(
        runs=tuple(str(r) for r in ds["run"].values), ranks=ds["rank"].values, exists=np.asarray(exists, dtype=bool),
        totals=np.nansum(np.asarray(totals, dtype=float), axis=0), metrics=tuple(metrics),
        labels={by: np.asarray(ds[by].values).astype(str) for by in ("function", "call", "kind")})
    _SUMMARIES[key] = (weakref.ref(ds, lambda _, key=key: _SUMMARIES.pop(key, None)), summary)
    return summary
