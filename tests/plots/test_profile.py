"""Stack order of the per-rank bands: compute at the bottom and the same order for every run and rank range."""

from __future__ import annotations

import holoviews as hv
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import perfkit
from perfkit.analysis.cube import group_sum
from perfkit.model import combine_runs, make_run
from perfkit.plots.palette import label
from perfkit.plots.profile import band_order, bin_groups, bin_means, bin_step, means_of, stacked_ranks
from perfkit.widgets.ranks import rank_bands
from tests.helpers import ROOT

hv.extension("bokeh")


@pytest.fixture(scope="module")
def series() -> xr.Dataset:
    return perfkit.open_runs([ROOT / "data" / "synthetic" / n / "slt.mpinside" for n in ("384", "2048")])


def test_compute_at_the_bottom_then_largest_total_first():
    values = np.zeros((4, 3, 6))
    values[:, 0, 0], values[:, 1, 0], values[:, 2, 0] = 1.0, 5.0, 3.0  # compute smallest, MPI_Recv largest
    ds = make_run(values, ranks=range(4), functions=["Compute", "MPI_Recv", "MPI_Send"], run={"label": "a"})
    assert band_order(ds) == ["Compute", "MPI_Recv", "MPI_Send"]
    assert band_order(ds, "kind")[0] == "compute"


def test_the_same_order_in_every_run_and_range(series):
    order = [label(name) for name in band_order(series)]  # bands and legends name each group in words
    assert order[0] == "Compute"
    drawn = [[p["function"].iloc[0] for p in rank_bands(series, run, ranks=ranks).split(datatype="dataframe")]
             for run in map(str, series["run"].values) for ranks in (None, (0, 40))]
    for bands in drawn:
        assert bands == [name for name in order if name in bands]
    for run in map(str, series["run"].values):
        areas = [area.label for area in stacked_ranks(series, run)]
        assert areas == [name for name in order if name in areas]


def test_order_does_not_depend_on_which_runs_come_first():
    def run(label: str, scale: float) -> xr.Dataset:
        values = np.zeros((3, 2, 6))
        values[:, 0, 0], values[:, 1, 0] = 1.0 * scale, 2.0
        return make_run(values, ranks=range(3), functions=["Compute", "MPI_Wait"], run={"label": label})

    one, two = run("a", 1.0), run("b", 10.0)
    assert band_order(combine_runs([one, two])) == band_order(combine_runs([two, one])) == ["Compute", "MPI_Wait"]


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 60), st.integers(1, 4), st.integers(1, 9), st.integers(0, 2**32 - 1),
       st.sampled_from([0.0, 0.4, 1.0]))
def test_bin_means_equal_pandas_groupby_mean(rows, columns, step, seed, holes):
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(rows, columns))
    values[rng.random(values.shape) < holes] = np.nan
    expected = pd.DataFrame(values).groupby(np.arange(rows) // step).mean().to_numpy()
    np.testing.assert_allclose(bin_means(values, step), expected.reshape(-1, columns), rtol=1e-12, atol=1e-15)


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 60), st.lists(st.sampled_from("abc"), min_size=1, max_size=6), st.integers(1, 9),
       st.integers(0, 2**32 - 1), st.sampled_from([0.0, 0.4, 1.0]))
def test_bin_groups_are_the_bin_means_of_the_group_sums(rows, labels, step, seed, holes):
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(rows, len(labels)))
    values[rng.random(values.shape) < holes] = np.nan
    groups, sums, counts = bin_groups(values, np.array(labels), step)
    expected_groups, per_row = group_sum(values, np.array(labels))
    assert groups.tolist() == expected_groups.tolist() == sorted(set(labels))
    expected = pd.DataFrame(per_row).groupby(np.arange(rows) // step).mean().to_numpy().reshape(-1, groups.size)
    np.testing.assert_allclose(means_of(sums, counts), expected, rtol=1e-12, atol=1e-15)
    assert counts.tolist() == pd.DataFrame(per_row).notna().groupby(np.arange(rows) // step).sum().to_numpy(
        ).reshape(-1, groups.size).tolist()


def test_bin_step_keeps_at_most_max_points():
    assert bin_step(2000) == 1 and bin_step(2001) == 2 and bin_step(100_000) == 50
    assert -(-100_000 // bin_step(100_000)) <= 2000
