"""Closing the placement loop: predicted elapsed time under a new placement, and the check against a run."""

from __future__ import annotations

import numpy as np
import pytest

import perfkit
from perfkit.placement.predict import compare_measured, predict_elapsed
from perfkit.placement.strategies import place
from tests.helpers import ROOT


@pytest.fixture(scope="module")
def run():
    return perfkit.open_profile(ROOT / "data" / "synthetic" / "96" / "slt.mpinside")


def test_same_placement_predicts_no_change(run):
    topo = perfkit.Topology(nodes=4, cores=24)
    block = place(run, topo, strategy="block")
    prediction = predict_elapsed(run, block, old=block)
    assert prediction.attrs["network_factor"] == pytest.approx(1.0)
    np.testing.assert_allclose(prediction["elapsed_after"].values, prediction["elapsed_before"].values)


def test_cheaper_placement_predicts_a_faster_run(run):
    topo = perfkit.Topology(nodes=4, cores=24)
    shuffled = place(run, topo, strategy="random", seed=1)
    better = place(run, topo, strategy="scotch")
    prediction = predict_elapsed(run, better, old=shuffled)
    assert prediction.attrs["comm_time_new_s"] < prediction.attrs["comm_time_old_s"]
    assert float(prediction["elapsed_after"].values[0]) < float(prediction["elapsed_before"].values[0])
    table = compare_measured(prediction, run)
    assert table["measured_s"].iloc[0] == pytest.approx(float(run["elapsed"].values[0]))
    row = table.iloc[0]
    assert row["error_pct"] == pytest.approx(100 * (row["predicted_s"] / row["measured_s"] - 1))
