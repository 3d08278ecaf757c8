"""The ``xr.Dataset.perf`` accessor: the friendly front door, thin delegation to perfkit functions.

``import perfkit`` registers it; then ``ds.perf.summary()``, ``ds.perf.imbalance()``, ``ds.perf.pop_metrics()``,
``ds.perf.diagnose()``, ``ds.perf.whatif("perfect_network")``, ``ds.perf.scaling()``, ``ds.perf.fit_amdahl()``,
``ds.perf.place(topology)`` and ``ds.perf.validate()`` call the functions of the same name with the
Dataset as first argument.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import xarray as xr


@xr.register_dataset_accessor("perf")
class PerfAccessor:
    """perfkit analyses as methods of a canonical Dataset (see the module docstring)."""

    def __init__(self, ds: xr.Dataset) -> None:
        self._ds = ds

    def summary(self) -> pd.DataFrame:
        """One row per run: ranks, nodes, mode, elapsed and shares of time (``perfkit.summary.summary``)."""
        from perfkit.summary import summary

        return summary(self._ds)

    def imbalance(self, by: str = "function", metric: str = "time") -> xr.Dataset:
        """Imbalance statistics per run and group (``perfkit.analysis.imbalance.imbalance``)."""
        from perfkit.analysis.imbalance import imbalance

        return imbalance(self._ds, by=by, metric=metric)

    def pop_metrics(self, **kwargs: Any) -> xr.Dataset:
        """POP efficiency hierarchy per run (``perfkit.analysis.pop.pop_metrics``)."""
        from perfkit.analysis.pop import pop_metrics

        return pop_metrics(self._ds, **kwargs)

    def diagnose(self, run: str | None = None) -> pd.DataFrame:
        """Findings ranked by time at stake (``perfkit.analysis.diagnosis.diagnose``)."""
        from perfkit.analysis.diagnosis import diagnose

        return diagnose(self._ds, run=run)

    def whatif(self, scenario: str, k: float = 2.0, **kwargs: Any) -> xr.Dataset:
        """What-if prediction (``perfkit.analysis.whatif.whatif``)."""
        from perfkit.analysis.whatif import whatif

        return whatif(self._ds, scenario, k, **kwargs)

    def scaling(self, **kwargs: Any) -> pd.DataFrame:
        """Scaling table (``perfkit.analysis.scaling.scaling``)."""
        from perfkit.analysis.scaling import scaling

        return scaling(self._ds, **kwargs)

    def fit_amdahl(self, **kwargs: Any) -> Any:
        """Amdahl fit of the runs' elapsed times (``perfkit.analysis.models.fit_amdahl``)."""
        from perfkit.analysis.models import fit_amdahl

        return fit_amdahl(self._ds, **kwargs)

    def place(self, topology: Any, strategy: str = "scotch", **kwargs: Any) -> Any:
        """Rank placement from the traffic matrix (``perfkit.placement.strategies.place``)."""
        from perfkit.placement.strategies import place

        return place(self._ds, topology, strategy, **kwargs)

    def validate(self) -> xr.Dataset:
        """Check the Dataset against the contract (``perfkit.model.validate``)."""
        from perfkit.model import validate

        return validate(self._ds)
