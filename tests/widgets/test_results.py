"""The results the explorer's tabs draw from: the same numbers as computing them directly, kept per choice."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import perfkit
from perfkit.widgets.compare import difference
from perfkit.widgets.results import ACROSS_RUNS, TabResults
from tests.helpers import ROOT


@pytest.fixture(scope="module")
def series():
    runs = [ROOT / "data" / "synthetic" / n / "slt.mpinside" for n in ("48", "96")]
    return perfkit.open_runs(runs).drop_vars("traffic")


def test_each_result_is_what_perfkit_computes_and_is_kept(series):
    results = TabResults(series)
    pop = results.pop()
    assert float(pop["load_balance"].sel(run="96/slt")) == pytest.approx(
        float(perfkit.pop_metrics(series)["load_balance"].sel(run="96/slt")))
    ranks = np.array([3, 4, 5, 40])
    part = results.part("96/slt", ranks)
    assert results.part("96/slt", ranks.copy()) is part  # the same ranks again: kept
    assert results.part("96/slt", None) is None and results.part("96/slt", ranks[:0]) is None
    direct = perfkit.pop_metrics(series.sel(run=["96/slt"], rank=ranks))
    assert float(part()["load_balance"].squeeze()) == pytest.approx(float(direct["load_balance"].squeeze()))
    assert all(np.isnan(part()[name]).all() for name in ACROSS_RUNS)  # not defined on a subset of one run
    found = results.diagnosis("48/slt", None)()
    pd.testing.assert_frame_equal(found, pd.DataFrame(perfkit.diagnose(series, run="48/slt")))


def test_runs_of_other_ranks_are_not_read_for_a_difference():
    from tests.helpers import small_run

    same = perfkit.combine_runs([small_run("a", 8, seed=1), small_run("b", 8, seed=2), small_run("c", 6, seed=3)])
    results = TabResults(same)
    assert results.difference("a", "c", "function", "time") is None
    groups, ranks = results.difference("a", "b", "function", "time")()
    expected_groups, expected_ranks = difference(same, "a", "b")
    pd.testing.assert_frame_equal(groups, expected_groups)
    pd.testing.assert_frame_equal(ranks, expected_ranks)
