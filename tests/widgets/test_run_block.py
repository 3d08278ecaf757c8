"""The shown run's values in memory: its per-rank tables equal ``rank_totals`` read from the cube."""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perfkit
from perfkit.analysis.cube import rank_totals
from perfkit.model import make_run
from perfkit.widgets.run_block import RunBlock

FUNCTIONS = ["Compute", "MPI_Send", "w_MPI_Recv", "MPI_Recv", "MPI_Bcast"]
CALLS = ["Compute", "MPI_Send", "MPI_Recv", "MPI_Recv", "MPI_Bcast"]
KINDS = ["compute", "transfer", "wait_late_sender", "transfer", "transfer"]


@st.composite
def studies(draw) -> xr.Dataset:
    """Two or three runs over parts of up to 40 ranks, values with NaN (whole ranks, whole functions, single
    cells), some functions missing from a run."""
    runs = []
    for i in range(draw(st.integers(2, 3))):
        ranks = sorted(draw(st.sets(st.integers(0, 39), min_size=1, max_size=40)))
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        keep = sorted(draw(st.sets(st.integers(0, len(FUNCTIONS) - 1), min_size=1)))
        values = rng.exponential(1.0, (len(ranks), len(keep), len(perfkit.METRICS)))
        values[rng.random(values.shape) < draw(st.sampled_from([0.0, 0.3, 0.9]))] = np.nan
        values[rng.random(len(ranks)) < 0.2] = np.nan
        runs.append(make_run(values, ranks=ranks, functions=[FUNCTIONS[k] for k in keep],
                             calls=[CALLS[k] for k in keep], kinds=[KINDS[k] for k in keep],
                             run={"label": f"run{i}"}))
    return perfkit.combine_runs(runs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(studies(), st.sampled_from(["function", "call", "kind"]), st.sampled_from(["time", "calls", "bytes_sent"]),
       st.one_of(st.none(), st.tuples(st.integers(-2, 42), st.integers(-2, 42))), st.booleans())
def test_tables_equal_rank_totals(ds, by, metric, ranks, lazy):
    if lazy:
        ds = ds.chunk({"run": 1, "rank": 7})
    block = RunBlock(ds, keep=1)
    for run in [str(r) for r in ds["run"].values] * 2:  # each run read again after the other pushed it out
        expected = rank_totals(ds, run, by=by, metric=metric, ranks=ranks)
        got = block.table(run, by=by, metric=metric, ranks=ranks)
        pd.testing.assert_frame_equal(got, expected, check_index_type=False)


def test_a_run_is_read_once_while_kept():
    ds = perfkit.combine_runs([make_run(np.ones((4, 1, len(perfkit.METRICS))), ranks=range(4), functions=["Compute"],
                                        run={"label": label}) for label in ("a", "b", "c")])
    block = RunBlock(ds, keep=2)
    first = block.values("a")
    block.values("b")
    assert block.values("a") is first  # kept
    block.values("c")  # pushes out b, the least recently shown
    assert list(block._runs) == ["a", "c"]


def test_a_store_as_opened_is_read_from_its_array(tmp_path):
    ds = perfkit.combine_runs(
        [make_run(np.where(np.arange(60).reshape(10, 1, 6) % 7 == 0, np.nan, np.arange(60.0).reshape(10, 1, 6) + i),
                  ranks=range(i, 10 + i), functions=["Compute"], run={"label": f"r{i}"}) for i in range(3)])
    store = perfkit.save(ds, tmp_path / "study.zarr")
    lazy = perfkit.load(store, chunks={"rank": 4})
    block = RunBlock(lazy.drop_vars("traffic", errors="ignore"))
    assert block.stored is not None
    for run in ("r0", "r2"):
        pd.testing.assert_frame_equal(block.table(run, ranks=(3, 11)), rank_totals(ds, run, ranks=(3, 11)),
                                      check_index_type=False)
    assert RunBlock(lazy.sel(run=["r2", "r0"])).stored is None  # a part of it: read through xarray
    assert RunBlock(lazy * 2).stored is None
    assert RunBlock(ds).stored is None


def test_a_run_read_in_the_background_is_not_read_again(monkeypatch):
    ds = perfkit.combine_runs([make_run(np.arange(24.0).reshape(4, 1, 6) + i, ranks=range(4), functions=["Compute"],
                                        run={"label": label}) for i, label in enumerate("ab")])
    block = RunBlock(ds)
    expected = ds["profile"].sel(run="b", metric="calls").values
    reads = []
    select = xr.DataArray.sel

    def counted(self, *args, **kwargs):
        reads.append(kwargs.get("run"))
        return select(self, *args, **kwargs)

    monkeypatch.setattr(xr.DataArray, "sel", counted)
    block.prefetch("b", "calls").join()
    values = block.metric_values("b", "calls")
    np.testing.assert_array_equal(values, expected)
    assert reads == ["b"] and block.metric_values("b", "calls") is values
