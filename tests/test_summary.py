"""``ds.perf.summary()``: one row per run, counts as integers, shares of time checked by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import perfkit
from tests.helpers import ROOT, two_small_runs


def test_counts_missing_metadata_and_shares_by_hand():
    a, b = two_small_runs()
    ds = perfkit.combine_runs([a, b])
    table = ds.perf.summary()
    assert table.index.tolist() == ["a", "b"]
    assert table["ranks"].tolist() == [4, 8] and str(table["ranks"].dtype) == "Int64"
    assert table["nodes"].isna().tolist() == [True, False] and table.loc["b", "nodes"] == 2
    assert table["mode"].tolist() == ["slt", ""]
    for run, one in (("a", a), ("b", b)):
        seconds = one["profile"].sel(metric="time").isel(run=0).values  # rank x (Compute, MPI_Recv, w_MPI_Recv)
        row = table.loc[run]
        assert row["time per rank [s]"] == pytest.approx(seconds.sum() / seconds.shape[0])
        for column, part in (("compute %", 0), ("transfer %", 1), ("waiting %", 2)):
            assert row[column] == pytest.approx(100 * seconds[:, part].sum() / seconds.sum())
        assert row["I/O and other %"] == 0
    shares = table[["compute %", "transfer %", "waiting %", "I/O and other %"]].sum(axis=1)
    assert np.allclose(shares, 100)


def test_a_bundled_series_reads_as_its_metadata():
    runs = perfkit.open_runs(str(ROOT / "data" / "synthetic" / "*" / "slt.mpinside"))
    table = runs.perf.summary()
    assert table["ranks"].tolist() == [48, 96, 192, 384, 768, 2048]
    assert (table["ranks per node"] == 24).all() and table["mode"].eq("slt").all()
    pd.testing.assert_index_equal(table.index, pd.Index(runs["run"].values.astype(str), name="run"))
    assert np.allclose(table["elapsed [s]"].astype(float), runs["elapsed"].values)
