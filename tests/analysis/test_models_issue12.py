"""Model fixes of issue 12: PMNF warns when time rises past the best N, strong vs weak series,
honest Amdahl intervals at the bounds and with few repetitions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import perfkit
from perfkit.analysis.models import fit_amdahl, fit_comm_model, fit_pmnf

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


# ---------------------------------------------------------------- strong vs weak series

DATA = Path(__file__).resolve().parents[1] / "data"
LULESH_WEAK = sorted((DATA / "cube").glob("extrap_perftaint_lulesh.p*.cubex"))  # size 30 per rank
HPCCG_STRONG = sorted((DATA / "mpip" / "real" / "HPCCG-strong").glob("*/*.mpiP"))


@pytest.fixture(scope="module")
def weak_runs():
    return perfkit.open_runs(LULESH_WEAK, metadata=lambda path: {"scaling": "weak"})


def test_weak_series_is_refused_by_amdahl_and_karp_flatt(weak_runs):
    assert weak_runs["scaling"].values.tolist() == ["weak"] * 3
    for fit in (perfkit.fit_amdahl, perfkit.karp_flatt):
        with pytest.raises(ValueError, match=r"weak-scaling series .*run metadata.*fit_gustafson"):
            fit(weak_runs)
        with pytest.raises(ValueError, match="weak-scaling series"):
            fit(perfkit.scaling(weak_runs))
    with pytest.raises(ValueError, match=r"weak-scaling series \(argument\)"):
        fit_amdahl([1, 2, 4, 8], [10, 10.5, 11, 12], scaling="weak")


def test_gustafson_is_public_and_takes_the_weak_series(weak_runs):
    fit = perfkit.fit_gustafson(weak_runs)
    assert fit.nprocs.tolist() == [125, 27, 64] or sorted(fit.nprocs.tolist()) == [27, 64, 125]
    assert 0 < fit.p < 1 and fit.p_ci[0] < fit.p < fit.p_ci[1]
    table = perfkit.scaling(weak_runs)
    assert table.attrs["kind"] == "weak" and table.attrs["kind_source"] == "run metadata"
    assert table["efficiency"].iloc[-1] == pytest.approx(table["elapsed"].iloc[0] / table["elapsed"].iloc[-1])
    with pytest.raises(ValueError, match="strong-scaling series"):
        perfkit.fit_gustafson([1, 2, 4], [10, 6, 4], scaling="strong")


def test_stated_kind_and_argument_must_agree(weak_runs):
    with pytest.raises(ValueError, match="kind='strong' given, but the runs state scaling='weak'"):
        perfkit.scaling(weak_runs, kind="strong")
    with pytest.raises(ValueError, match="kind='strong' given"):
        fit_amdahl(weak_runs, scaling="strong")


def test_mixed_series_is_an_error_naming_the_runs(weak_runs):
    strong = perfkit.open_runs(HPCCG_STRONG, metadata=lambda path: {"scaling": "strong"})
    both = perfkit.combine_runs([strong, weak_runs])
    with pytest.raises(ValueError, match="mix strong and weak"):
        perfkit.scaling(both)
    table = perfkit.scaling(both, by="scaling")
    assert table.attrs["kind"] == "mixed" and set(table["scaling"]) == {"strong", "weak"}
    assert fit_amdahl(strong).name == "amdahl"  # stated strong: accepted


def test_unstated_series_defaults_to_strong_and_fits_as_before():
    runs = perfkit.open_runs(HPCCG_STRONG)
    assert "scaling" not in runs.coords
    table = perfkit.scaling(runs)
    assert table.attrs["kind"] == "strong" and table.attrs["kind_source"].startswith("default")
    fit_amdahl(runs)
    perfkit.fit_gustafson(runs)  # nothing stated: the user decides


def test_scaling_in_a_sidecar(tmp_path):
    import json
    import shutil

    copy = shutil.copy(LULESH_WEAK[0], tmp_path / LULESH_WEAK[0].name)
    Path(str(copy) + ".perfkit.json").write_text(json.dumps({"scaling": "weak"}))
    assert perfkit.open_profile(copy)["scaling"].values.tolist() == ["weak"]
    Path(str(copy) + ".perfkit.json").write_text(json.dumps({"scaling": "sideways"}))
    with pytest.raises(perfkit.ContractError, match="scaling 'sideways'"):
        perfkit.open_profile(copy)


# ---------------------------------------------------------------- honest Amdahl intervals

RISING = ([1, 2, 4, 8, 16], [7.21, 9.56, 10.1, 9.65, 9.66])  # the series: P = 0 at the bound
N5 = np.array([1, 2, 4, 8, 16], dtype=float)
B = 10 * (0.1 + 0.9 / N5) * (1 + np.array([0.02, -0.015, 0.01, -0.02, 0.015]))  # P = 0.9, ~2 % noise


def test_interval_at_the_bound_is_not_a_point():
    fit = fit_amdahl(*RISING)
    assert fit.p == 0.0
    assert fit.p_ci[0] == 0.0 and fit.p_ci[1] == pytest.approx(0.3307, abs=1e-3)  # was (0.0, 0.0)
    assert fit_amdahl(*RISING, ci="delta").p_ci == (0.0, 0.0)  # the delta method collapses here
    lo, hi = fit_amdahl(*RISING, ci="bootstrap", n_boot=500).p_ci
    assert lo == 0.0 and 0 < hi < 0.33


def test_a_noisier_repetition_widens_the_interval():
    base = fit_amdahl(N5, B)
    noisy_repeat = fit_amdahl(np.r_[N5, 4], np.r_[B, 3.5237])  # 2x the series' scatter, at N = 4
    width = np.diff(base.p_ci)[0]
    assert np.diff(noisy_repeat.p_ci)[0] > 1.4 * width  # 0.0279 -> 0.0450 (bootstrap before: 0.0016)
    assert noisy_repeat.p_ci[0] < noisy_repeat.p < noisy_repeat.p_ci[1]


@pytest.mark.parametrize("p", [0.9, 0.999])
def test_coverage_near_nominal_also_at_the_bound(p):
    rng = np.random.default_rng(11)
    hits = 0
    for _ in range(120):
        fit = fit_amdahl(N5, 10 * ((1 - p) + p / N5) * (1 + 0.03 * rng.standard_normal(5)))
        hits += fit.p_ci[0] <= p <= fit.p_ci[1]
    assert hits / 120 >= 0.88  # delta method at p = 0.999: ~0.6


@settings(max_examples=40, deadline=None)
@given(times=st.lists(st.floats(0.1, 100), min_size=5, max_size=5), extra=st.floats(0.1, 100))
def test_interval_contains_the_estimate_and_stays_in_0_1(times, extra):
    fit = fit_amdahl(np.r_[N5, 8], np.r_[times, extra])
    assert 0 <= fit.p_ci[0] <= fit.p + 1e-9 and fit.p - 1e-9 <= fit.p_ci[1] <= 1


def test_unknown_ci_method_is_refused():
    with pytest.raises(ValueError, match="ci must be one of"):
        fit_amdahl(*RISING, ci="jackknife")
