"""Model fits against the synthetic MPInside series, whose ground truth is known."""

from __future__ import annotations

import json

import numpy as np
import pytest

import perfkit
from perfkit.analysis.models import fit_amdahl
from tests.helpers import ROOT

SERIES = ROOT / "data" / "synthetic"


@pytest.fixture(scope="module")
def series():
    ds = perfkit.open_runs(str(SERIES / "*" / "basic.mpinside"))
    truth = json.loads((SERIES / "48" / "truth.json").read_text())["scaling"]
    return ds, truth


def test_amdahl_on_compute_recovers_the_models_serial_work(series):
    ds, truth = series
    compute = ds["profile"].sel(metric="time", function="Compute").mean("rank").values
    fit = fit_amdahl(ds["nprocs"].values, compute)
    # the model's one-rank time, within the few percent its injected imbalance adds
    assert fit.predict(1)[0] == pytest.approx(truth["one_rank_time"], rel=0.03)
    assert fit.p >= 0.9999 and truth["parallel_fraction"] >= 0.9999
    assert fit.quality.r2 > 0.99


def test_amdahl_on_elapsed_says_it_does_not_fit(series):
    """Elapsed time carries communication that Amdahl's law does not model: the fit must say so."""
    ds, _ = series
    fit = fit_amdahl(ds["nprocs"].values, ds["elapsed"].values)
    assert fit.quality.loo_rel_error > 0.10
    assert any("unreliable" in w for w in fit.quality.warnings)
    assert np.isfinite(fit.p)
