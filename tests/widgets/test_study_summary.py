"""The study's summary from one read: each run's ranks and bounds, and the stack order, as read from the cube."""

from __future__ import annotations

import numpy as np
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfkit.model import METRICS, make_run
from perfkit.plots.profile import band_order
from perfkit.widgets.study_summary import summarise
from tests.widgets.test_run_block import studies


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
