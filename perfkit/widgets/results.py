"""The results the explorer's tabs draw from: the series' POP efficiencies, those of the ranks in view, the
findings of the ranks in view and run A against run B.

Each is a :class:`perfkit.widgets.kept.Once`, computed by whoever asks first (the background preparation,
:mod:`perfkit.widgets.warmup`, or the thread of a tab shown before it, :mod:`perfkit.widgets.offloop`) and kept:
the last ``KEPT`` of each kind, so that a selection or a choice made again is not computed again.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from perfkit.analysis.diagnosis import diagnose
from perfkit.analysis.pop import pop_metrics
from perfkit.widgets.compare import comparable_pairs, difference
from perfkit.widgets.kept import Kept, Once
from perfkit.widgets.study_summary import StudySummary

#: Results kept of each kind (a selection's efficiencies, findings, differences).
KEPT = 8
#: Efficiencies that compare runs of a series: not defined for a subset of one run's ranks.
ACROSS_RUNS = ("global_efficiency", "computation_scalability")


class TabResults:
    """The results of ``profiles`` (a canonical Dataset without traffic); ``compared``: the runs the compare tab
    pairs (``profiles`` with a placement's re-run), ``summary`` the study's (the per-rank view's)."""

    def __init__(self, profiles: xr.Dataset, compared: xr.Dataset | None = None,
                 summary: StudySummary | None = None) -> None:
        self.profiles = profiles
        self.compared = profiles if compared is None else compared
        self.summary = summary
        #: Every run's POP efficiencies (:func:`perfkit.pop_metrics`).
        self.pop: Once[xr.Dataset] = Once(lambda: pop_metrics(profiles))
        self._parts: Kept[xr.Dataset] = Kept(KEPT)
        self._diagnoses: Kept[pd.DataFrame] = Kept(KEPT)
        self._differences: Kept[tuple[pd.DataFrame, pd.DataFrame]] = Kept(KEPT)

    def part(self, run: str, ranks: np.ndarray | None) -> Once[xr.Dataset] | None:
        """The POP efficiencies of ``ranks`` of ``run`` (:func:`subset_pop`); None for every rank (None) or none."""
        if ranks is None or ranks.size == 0:
            return None
        return self._parts.cell((run, ranks.tobytes()),
                                lambda: subset_pop(self.profiles.sel(run=[run], rank=ranks)))

    def diagnosis(self, run: str, ranks: np.ndarray | None) -> Once[pd.DataFrame]:
        """The findings of :func:`perfkit.diagnose` for ``run`` on ``ranks`` (None: every rank) as a table."""
        chosen = self.profiles if ranks is None else self.profiles.sel(rank=ranks)
        return self._diagnoses.cell((run, None if ranks is None else ranks.tobytes()),
                                    lambda: pd.DataFrame(diagnose(chosen, run=run)))

    def difference(self, a: str, b: str, by: str, metric: str) -> Once[tuple[pd.DataFrame, pd.DataFrame]] | None:
        """Run ``a`` against run ``b`` (:func:`perfkit.widgets.compare.difference`); None where they do not hold
        the same ranks (nothing to read: the compare tab says so)."""
        if (a, b) not in comparable_pairs(self.compared, self.summary):
            return None
        return self._differences.cell((a, b, by, metric), lambda: difference(
            self.compared, a, b, by=by, metric=metric, summary=self.summary))


def subset_pop(ds: xr.Dataset) -> xr.Dataset:
    """:func:`perfkit.pop_metrics` of one run's subset of ranks, the across-runs efficiencies unavailable."""
    pop = pop_metrics(ds)
    evidence, note = pop["evidence"].astype(object), pop["note"].astype(object)
    evidence.loc[{"efficiency": list(ACROSS_RUNS)}] = "unavailable"
    note.loc[{"efficiency": list(ACROSS_RUNS)}] = "compares the runs of a series, not computed on a subset of ranks"
    return pop.assign({name: pop[name] * np.nan for name in ACROSS_RUNS}).assign(evidence=evidence, note=note)
