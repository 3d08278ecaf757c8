"""Fixtures shared by the test suite."""

from __future__ import annotations

import pytest
import xarray as xr

from tests.helpers import two_small_runs


@pytest.fixture
def two_runs() -> list[xr.Dataset]:
    return two_small_runs()
