"""The ``ds.perf`` accessor delegates to the perfkit functions."""

from __future__ import annotations

import pandas as pd
import pytest
import xarray as xr

import perfkit.accessor  # noqa: F401  (registers ds.perf until perfkit/__init__ imports it)
from perfkit.analysis.diagnosis import diagnose
from perfkit.analysis.imbalance import imbalance
from perfkit.analysis.whatif import whatif
from perfkit.errors import ContractError
from tests.helpers import small_run


@pytest.fixture
def ds() -> xr.Dataset:
    return small_run("a", 6, seed=3, mode="slt", nodes=2, ppn=3, elapsed=40.0)


def test_analyses(ds):
    xr.testing.assert_identical(ds.perf.imbalance(by="kind"), imbalance(ds, by="kind"))
    pd.testing.assert_frame_equal(ds.perf.diagnose(), diagnose(ds))
    xr.testing.assert_identical(ds.perf.whatif("compute", 3), whatif(ds, "compute", 3))
    assert ds.perf.validate() is ds


def test_analyses_of_a_chunked_cube_are_computed(ds):
    lazy = ds.chunk({"rank": 2})
    assert lazy["profile"].chunks is not None
    stats = lazy.perf.imbalance(by="kind")
    assert all(var.chunks is None for var in stats.variables.values())
    xr.testing.assert_allclose(stats, imbalance(ds, by="kind"))
    pd.testing.assert_frame_equal(lazy.perf.diagnose(), diagnose(ds))
    xr.testing.assert_allclose(lazy.perf.whatif("compute", 3), whatif(ds, "compute", 3))
    xr.testing.assert_allclose(lazy.perf.pop_metrics(), ds.perf.pop_metrics())


def test_scaling_and_amdahl():
    from perfkit.model import combine_runs

    runs = combine_runs([small_run(f"n{n}", n, seed=n, traffic=False, elapsed=100 / n + 1) for n in (1, 2, 4, 8)])
    assert list(runs.perf.scaling()["nprocs"]) == [1, 2, 4, 8]
    assert 0.8 < runs.perf.fit_amdahl(n_boot=50).p <= 1.0


def test_validate_raises():
    with pytest.raises(ContractError):
        xr.Dataset({"profile": ("x", [1.0])}).perf.validate()


def test_place_delegates(ds, monkeypatch):
    import perfkit.placement.strategies as strategies

    seen = {}
    monkeypatch.setattr(strategies, "place", lambda data, topology, strategy, **kw: seen.update(
        data=data, topology=topology, strategy=strategy, **kw) or "placed")
    assert ds.perf.place("topo", "block", seed=3) == "placed"
    assert seen["data"] is ds and seen["topology"] == "topo" and seen["strategy"] == "block" and seen["seed"] == 3


def test_import_perfkit_registers_the_accessor():
    import subprocess
    import sys

    code = "import perfkit, xarray as xr; assert hasattr(xr.Dataset, 'perf')"
    subprocess.run([sys.executable, "-c", code], check=True)
