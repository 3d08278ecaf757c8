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
