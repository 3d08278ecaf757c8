"""What the per-rank view needs of every run of a study, from one read of the cube.

The view needs, of every run, which ranks exist (where the rank range resets on a run change, the node
selector's ranks), for the stack order of its bands each function's total of every metric over every run and
rank (:func:`perfkit.plots.profile.stack_order`), and, so that a run change draws without reading the run, the
run's view over all its ranks (:class:`RunView`: its bins' sums per function and metric, and the rank totals
drawn as markers). On a lazily opened store each of these read alone is a pass over the whole cube (100 runs of
100,000 ranks: 6 GB of values, tens of seconds); :func:`summarise` reads it once, a run at a time (two at once),
for all of them, and keeps the result with the Dataset. The views of 100 runs of 100,000 ranks, 13 functions
and 6 metrics take about 145 MB (2,000 bins).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import xarray as xr

from perfkit.plots.profile import (
    bin_add,
    bin_presence,
    bin_step,
    group_columns,
    group_members,
    means_of,
    row_totals,
    stack_order,
)
from perfkit.plots.rank_figure import envelope
from perfkit.widgets.kept import kept_with
from perfkit.widgets.run_block import stored_profile

GROUPINGS = ("function", "call", "kind")


@dataclass(frozen=True)
class RunView:
    """One run's per-rank view of one metric over all its ranks, binned as the view bins it
    (:func:`perfkit.plots.profile.bin_step` of the ranks with a value of the metric)."""

    #: First rank of each bin (each rank when ``step`` is 1).
    first: np.ndarray
    #: Ranks per bin; the number of ranks with a value and the last of them.
    step: int
    size: int
    last: int
    #: The smallest and the largest rank with a value.
    span: tuple[float, float]
    #: (bin, function): sum of the values, NaN skipped, in the metric's units.
    sums: np.ndarray
    #: Per grouping, (bin, group): the number of ranks with a value (groups as :func:`bin_groups` sorts them;
    #: for ``function`` the functions in their order); None where each bin's every rank has one.
    counts: dict[str, np.ndarray | None]
    #: Ranks drawn as markers of their total (:func:`perfkit.plots.rank_figure.envelope`) and those totals.
    marks: np.ndarray
    marked: np.ndarray
    #: The highest rank total.
    top: float

    @property
    def nbytes(self) -> int:
        """Memory held [bytes]."""
        held = [self.first, self.sums, self.marks, self.marked, *(c for c in self.counts.values() if c is not None)]
        return sum(a.nbytes for a in held)


@dataclass(frozen=True)
class StudySummary:
    """Per run: which ranks exist and its views; per function and metric: the total over every run and rank."""

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
    #: (run, metric): the run's view over all its ranks.
    views: dict[tuple[str, str], RunView]

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

    def view(self, run: str, metric: str, by: str) -> tuple[RunView, np.ndarray, np.ndarray]:
        """``run``'s view of ``metric`` over all its ranks, its ``by`` groups with a value and their (bin, group)
        means: the bins the per-rank view draws from ``run``'s values read (:meth:`RunBlock.arrays` and
        :func:`perfkit.plots.profile.bin_groups`), the same numbers."""
        view = self.views[run, metric]
        if by == "function":
            groups, sums = self.labels[by], view.sums
        else:
            groups, members = group_members(self.labels[by])
            sums = group_columns(view.sums, members)
        counts = view.counts[by]
        if counts is None:
            counts = np.broadcast_to(full_counts(view.step, view.size)[:, None], sums.shape)
        shown = counts.any(axis=0)
        return view, np.asarray(groups)[shown], means_of(sums[:, shown], counts[:, shown])


def full_counts(step: int, size: int) -> np.ndarray:
    """Ranks in each bin of ``step`` of ``size`` ranks (the last holds those left)."""
    return np.minimum(step, size - step * np.arange(-(-size // step)))


def summarise(ds: xr.Dataset) -> StudySummary:
    """The :class:`StudySummary` of ``ds``, read once per Dataset object (kept while ``ds`` lives; asked for from
    two threads at once, read once)."""
    return kept_with(ds, "study summary")((), lambda: read_summary(ds))


def read_summary(ds: xr.Dataset) -> StudySummary:
    """The :class:`StudySummary` of ``ds``, read from its cube."""
    runs = tuple(str(r) for r in ds["run"].values)
    metrics = tuple(str(m) for m in ds["metric"].values)
    ranks = np.asarray(ds["rank"].values)
    labels = {by: np.asarray(ds[by].values).astype(str) for by in GROUPINGS}
    stored = stored_profile(ds)
    profile = ds["profile"].transpose("run", "rank", "function", "metric")

    def digest(i: int) -> tuple[np.ndarray, np.ndarray, list[RunView]]:
        block = np.asarray(stored[i] if stored is not None else profile[i].values, dtype=np.float64)
        present = ~np.isnan(block)
        zeroed = np.where(present, block, 0.0)
        return present.any(axis=(1, 2)), zeroed.sum(axis=0), run_views(block, present, zeroed, ranks, labels)

    exists = np.zeros((len(runs), ranks.size), dtype=bool)
    totals = np.zeros((labels["function"].size, len(metrics)))
    views = {}
    with ThreadPoolExecutor(2) as pool:  # one run read while another is binned (zarr and numpy release the GIL)
        for i, (present, sums, shown) in enumerate(pool.map(digest, range(len(runs)))):
            exists[i], totals = present, totals + sums
            views.update({(runs[i], metric): v for metric, v in zip(metrics, shown)})
    return StudySummary(runs=runs, ranks=ranks, exists=exists, totals=totals, metrics=metrics, labels=labels,
                        views=views)


def run_views(block: np.ndarray, present: np.ndarray, zeroed: np.ndarray, ranks: np.ndarray,
              labels: dict[str, np.ndarray]) -> list[RunView]:
    """The :class:`RunView` of each metric of one run's (rank, function, metric) ``block`` (``present``: not NaN,
    ``zeroed``: NaN as 0), ``ranks`` its rank labels: every metric binned at once (a pass over the block for
    each sum) where each has a value on the same ranks, else one at a time."""
    exists = present.any(axis=1)
    if not (exists == exists[:, :1]).all():
        return [run_view(np.ascontiguousarray(block[..., m]), ranks, labels) for m in range(block.shape[2])]
    if not exists[:, 0].all():
        present, zeroed, ranks = present[exists[:, 0]], zeroed[exists[:, 0]], ranks[exists[:, 0]]
    step = bin_step(ranks.size)
    sums = bin_add(zeroed, step)
    totals = row_totals(zeroed)
    counts = {"function": bin_add(present, step, np.int64)}
    for by in GROUPINGS[1:]:
        counts[by] = bin_presence(present, group_members(labels[by])[1], step)
    return [finish(ranks, step, np.ascontiguousarray(sums[..., m]), {by: c[..., m] for by, c in counts.items()},
                   totals[:, m]) for m in range(block.shape[2])]


def finish(ranks: np.ndarray, step: int, sums: np.ndarray, counts: dict[str, np.ndarray],
           totals: np.ndarray) -> RunView:
    """The :class:`RunView` of one metric from its bins' ``sums`` and ``counts`` per grouping and each rank's total."""
    full = full_counts(step, ranks.size)[:, None]
    small = np.min_scalar_type(step)
    keep = envelope(totals)
    return RunView(first=ranks[::step].copy(), step=step, size=ranks.size, last=int(ranks[-1]) if ranks.size else 0,
                   sums=sums, span=(float(ranks.min()), float(ranks.max())) if ranks.size else (0.0, 1.0),
                   counts={by: None if (c == full).all() else np.ascontiguousarray(c, dtype=small)
                           for by, c in counts.items()},
                   marks=ranks[keep], marked=totals[keep], top=float(totals.max()) if totals.size else 0.0)


def run_view(values: np.ndarray, ranks: np.ndarray, labels: dict[str, np.ndarray]) -> RunView:
    """The :class:`RunView` of one run's (rank, function) values of a metric, ``ranks`` their labels."""
    exists = ~np.isnan(values).all(axis=1)
    if not exists.all():
        values, ranks = values[exists], ranks[exists]
    step = bin_step(ranks.size)
    present = ~np.isnan(values)
    zeroed = np.where(present, values, 0.0)
    counts = {"function": bin_add(present, step, np.int64)}
    for by in GROUPINGS[1:]:
        counts[by] = bin_presence(present, group_members(labels[by])[1], step)
    return finish(ranks, step, bin_add(zeroed, step), counts, row_totals(zeroed))
