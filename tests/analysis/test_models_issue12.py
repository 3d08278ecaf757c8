"""Model fixes of issue 12: PMNF warns when time rises past the best N, strong vs weak series,
honest Amdahl intervals at the bounds and with few repetitions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfkit.analysis.models import fit_comm_model, fit_pmnf

CORES = np.array([1, 2, 4, 8, 16, 32, 64, 96, 120], dtype=float)


def test_pmnf_warns_when_time_rises_past_96_cores():
    t = 100 / CORES + 0.5
    t[-1] = t[-2] * 1.10  # slower at 120 than at 96
    fit = fit_pmnf(CORES, t)
    assert fit.best_nprocs == pytest.approx(120)  # the chosen hypothesis smooths the rise away...
    rise = [w for w in fit.quality.warnings if "rises past N=96" in w]
    assert rise and "does not follow it" in rise[0] and "+10%" in rise[0]  # ...and now says so
    assert not fit.quality.ok


def test_pmnf_says_when_the_model_follows_the_rise():
    t = 100 / CORES + 0.5 + 0.004 * CORES
    t[-1] = t[-2] * 1.06
    fit = fit_pmnf(CORES, t)
    assert fit.slower_past_best and fit.best_nprocs < 120
    assert any("rises past N=96" in w and "model follows it" in w for w in fit.quality.warnings)


def test_comm_model_warns_too():
    t = 100 / CORES + 0.5
    t[-1] = t[-2] * 1.10
    assert any("rises past N=96" in w for w in fit_comm_model(CORES, t).quality.warnings)


@settings(max_examples=30, deadline=None)
@given(serial=st.floats(0.1, 50), parallel=st.floats(10, 1000))
def test_no_rise_warning_when_time_keeps_falling(serial, parallel):
    fit = fit_pmnf(CORES, serial + parallel / CORES)
    assert not [w for w in fit.quality.warnings if "rises past" in w]
