"""perfkit: MPI performance analysis on xarray cubes (run x rank x function x metric)."""

from __future__ import annotations

import importlib
from typing import Any

import perfkit.signals  # first: run as the ``perfkit`` command, Ctrl-C during the imports below is one line

__version__ = "0.1.0"

import perfkit.accessor  # registers the ds.perf accessor
import perfkit.imports  # noqa: F401  (dask.array without sparse, numba and scipy, before xarray imports it with them)
from perfkit.errors import ContractError, PerfkitFormatError, PerfkitWarning
from perfkit.io.open import open_profile, open_runs
from perfkit.model import KINDS, METRICS, combine_runs, validate
from perfkit.options import get_options, set_options

# Public names that live in heavier modules, imported on first use.
_LAZY = {
    "convert": "perfkit.io.convert",
    "load": "perfkit.storage",
    "save": "perfkit.storage",
    "open_matrix": "perfkit.io.matrix",
    "scaling": "perfkit.analysis.scaling",
    "fit_amdahl": "perfkit.analysis.models",
    "fit_gustafson": "perfkit.analysis.models",
    "karp_flatt": "perfkit.analysis.models",
    "imbalance": "perfkit.analysis.imbalance",
    "pop_metrics": "perfkit.analysis.pop",
    "diagnose": "perfkit.analysis.diagnosis",
    "whatif": "perfkit.analysis.whatif",
    "Topology": "perfkit.placement.topology",
    "place": "perfkit.placement.strategies",
    "explore": "perfkit.widgets.explorer",
    "setup_notebook": "perfkit.plots.offline",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'perfkit' has no attribute {name!r}")


__all__ = [
    "ContractError", "KINDS", "METRICS", "PerfkitFormatError", "PerfkitWarning", "combine_runs", "get_options",
    "load", "open_profile", "open_runs", "save", "set_options", "validate", *_LAZY,
]
