"""NumPy reductions by label against xarray's groupby, and the precomputed inputs of the analyses."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import perfkit
from perfkit.analysis.cube import group_min, group_sum, metric_values, nan_sum
from perfkit.analysis.imbalance import by_node, rank_values, slow_ranks
from perfkit.analysis.waits import breakdown, call_wait_share, wait_split
from tests.helpers import ROOT

LABELS = np.array(["b", "a", "b", "c", "a", "c"])


@pytest.fixture
def values() -> xr.DataArray:
    """(run, rank, function) values with NaN, an all-NaN label "c" on rank 1 and an all-NaN rank 2."""
    data = np.random.default_rng(3).uniform(0, 5, (2, 4, LABELS.size))
    data[:, 0, [0, 4]] = np.nan
    data[:, 1, [3, 5]] = np.nan
    data[:, 2, :] = np.nan
    return xr.DataArray(data, dims=("run", "rank", "function"), coords={"label": ("function", LABELS)})


def test_group_sum_is_groupby_sum(values):
    groups, sums = group_sum(values.values, LABELS)
    expected = values.groupby("label").sum(skipna=True, min_count=1).transpose("run", "rank", "label")
    assert list(groups) == ["a", "b", "c"]
    np.testing.assert_array_equal(sums, expected.values)
    assert np.isnan(sums[:, 1, 2]).all() and np.isnan(sums[:, 2]).all()


def test_group_min_is_groupby_min(values):
    smallest = group_min(values.values, LABELS)[1]
    expected = values.groupby("label").min(skipna=True).transpose("run", "rank", "label")
    np.testing.assert_array_equal(smallest, expected.values)


def test_nan_sum_keeps_all_nan_as_nan():
    np.testing.assert_array_equal(nan_sum(np.array([[1.0, np.nan], [np.nan, np.nan]]), axis=1), [1.0, np.nan])


@pytest.fixture(scope="module")
def n96() -> xr.Dataset:
    return perfkit.open_runs(str(ROOT / "data" / "synthetic" / "96" / "*.mpinside"))


def test_metric_values_is_profile_slice(n96):
    expected = n96["profile"].sel(metric="calls").transpose("run", "rank", "function").values
    np.testing.assert_array_equal(metric_values(n96, "calls"), expected)


def test_precomputed_inputs_give_the_same_results(n96):
    split, compute = wait_split(n96), rank_values(n96)
    xr.testing.assert_identical(breakdown(n96, split), breakdown(n96))
    xr.testing.assert_identical(call_wait_share(n96, split), call_wait_share(n96))
    assert by_node(n96, values=compute).equals(by_node(n96))
    assert slow_ranks(n96, "slt", values=compute).equals(slow_ranks(n96, "slt"))
