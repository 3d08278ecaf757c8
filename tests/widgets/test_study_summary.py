"""The study's summary from one read: each run's ranks and bounds, and the stack order, as read from the cube."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perfkit
from perfkit.analysis.cube import rank_totals
from perfkit.model import METRICS, make_run
from perfkit.plots.profile import band_order
from perfkit.plots.rank_figure import envelope
from perfkit.widgets.run_block import stored_profile
from perfkit.widgets.study_summary import summarise
from tests.widgets.test_run_block import CALLS, FUNCTIONS, KINDS, studies


def expected_exists(ds: xr.Dataset) -> np.ndarray:
    return ds["profile"].notnull().any(("function", "metric")).transpose("run", "rank").values


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(studies(), st.booleans())
def test_summary_equals_the_cube(ds, lazy):
    if lazy:
        ds = ds.chunk({"run": 1, "rank": 5})
    summary = summarise(ds)
    exists = expected_exists(ds)
    ranks = ds["rank"].values
    for i, run in enumerate(str(r) for r in ds["run"].values):
        np.testing.assert_array_equal(summary.ranks_of(run), ranks[exists[i]])
        present = ranks[exists[i]] if exists[i].any() else ranks
        assert summary.bounds()[run] == (int(present.min()), int(present.max()))
    for by in ("function", "call", "kind"):
        for metric in ("time", "calls"):
            assert summary.order(by, metric) == band_order(ds, by, metric)


def test_read_once_per_dataset():
    ds = make_run(np.ones((3, 1, len(METRICS))), ranks=range(3), functions=["Compute"], run={"label": "a"})
    first = summarise(ds)
    assert summarise(ds) is first
    assert summarise(ds.copy()) is not first  # another Dataset object: read for itself


@st.composite
def wide_studies(draw) -> xr.Dataset:
    """One or two runs of up to 6,001 ranks (binned in twos to fours above 2,000), NaN in cells, whole ranks and
    whole functions."""
    runs = []
    for i in range(draw(st.integers(1, 2))):
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        size = draw(st.sampled_from([1, 7, 2000, 2001, 4500, 6001]))
        ranks = np.sort(rng.choice(8000, size, replace=False))
        keep = sorted(draw(st.sets(st.integers(0, len(FUNCTIONS) - 1), min_size=1)))
        values = rng.exponential(1.0, (size, len(keep), len(METRICS)))
        values[rng.random(values.shape) < draw(st.sampled_from([0.0, 0.3, 0.95]))] = np.nan
        values[rng.random(size) < 0.2] = np.nan
        runs.append(make_run(values, ranks=ranks, functions=[FUNCTIONS[k] for k in keep],
                             calls=[CALLS[k] for k in keep], kinds=[KINDS[k] for k in keep], run={"label": f"r{i}"}))
    return perfkit.combine_runs(runs)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wide_studies())
def test_views_are_the_bin_means_of_the_runs_read_directly(ds):
    summary = summarise(ds)
    for run in (str(r) for r in ds["run"].values):
        for metric in ("time", "calls", "bytes_sent"):
            for by in ("function", "call", "kind"):
                view, groups, means = summary.view(run, metric, by)
                table = rank_totals(ds, run, by=by, metric=metric)
                assert view.step == max(1, -(-len(table) // 2000))
                assert list(groups) == list(table.columns)
                assert view.first.tolist() == table.index[::view.step].tolist()
                if table.empty:
                    assert means.size == 0
                    continue
                assert (view.last, view.span) == (table.index[-1], (table.index.min(), table.index.max()))
                expected = table.groupby(np.arange(len(table)) // view.step).mean().to_numpy()
                np.testing.assert_allclose(means, expected, rtol=1e-12, atol=1e-15)
                totals = table.fillna(0.0).sum(axis=1)
                np.testing.assert_array_equal(view.marks, totals.index[envelope(totals.to_numpy())])
                np.testing.assert_allclose(view.marked, totals.loc[view.marks].to_numpy(), rtol=1e-12)
                assert view.top == pytest.approx(totals.max(), rel=1e-12)


def test_a_store_is_summarised_from_its_array_as_in_memory(tmp_path):
    rng = np.random.default_rng(3)
    values = rng.exponential(1.0, (4500, 3, len(METRICS)))
    values[rng.random(values.shape) < 0.1] = np.nan
    runs = [make_run(values * (i + 1), ranks=range(4500), functions=FUNCTIONS[:3], calls=CALLS[:3], kinds=KINDS[:3],
                     run={"label": f"r{i}"}) for i in range(3)]
    ds = perfkit.combine_runs(runs)
    lazy = perfkit.load(perfkit.save(ds, tmp_path / "study.zarr"), chunks={})
    assert stored_profile(lazy) is not None
    stored, direct = summarise(lazy), summarise(ds)
    np.testing.assert_array_equal(stored.exists, direct.exists)
    np.testing.assert_allclose(stored.totals, direct.totals, rtol=1e-12)
    for key, view in direct.views.items():
        np.testing.assert_array_equal(stored.views[key].sums, view.sums)
        np.testing.assert_array_equal(stored.views[key].marks, view.marks)
