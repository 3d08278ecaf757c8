"""xarray backend entry points: ``xr.open_dataset(path, engine="mpinside" | "mpip" | ...)``."""

from __future__ import annotations

from os import PathLike
from pathlib import Path
from typing import Any

import xarray as xr
from xarray.backends import BackendEntrypoint

from perfkit.errors import PerfkitFormatError
from perfkit.io.registry import FORMATS, SNIFF_BYTES


class _PerfkitBackend(BackendEntrypoint):
    """Reads one profile of ``format_name`` into the canonical Dataset."""

    format_name = ""
    open_dataset_parameters = ("filename_or_obj", "drop_variables")
    url = "https://github.com/perfkit/perfkit/blob/main/docs/formats"

    def open_dataset(self, filename_or_obj: Any, *, drop_variables: Any = None, **run_metadata: Any) -> xr.Dataset:
        from perfkit.io.open import open_profile

        ds = open_profile(filename_or_obj, format=self.format_name, **run_metadata)
        return ds.drop_vars(drop_variables or [], errors="ignore")

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        if not isinstance(filename_or_obj, (str, PathLike)):
            return False
        path = Path(filename_or_obj)
        try:
            head = path.open("rb").read(SNIFF_BYTES) if path.is_file() else b""
            return FORMATS[self.format_name].sniff(path, head)
        except (OSError, PerfkitFormatError, ModuleNotFoundError):
            return False


class MPInsideBackend(_PerfkitBackend):
    """MPInside text tables (``engine="mpinside"``)."""

    format_name = "mpinside"
    description = "MPInside per-rank tables, size histograms and transfer matrices (perfkit)"


class MpiPBackend(_PerfkitBackend):
    """mpiP text reports (``engine="mpip"``)."""

    format_name = "mpip"
    description = "mpiP text reports (perfkit)"


class IPMBackend(_PerfkitBackend):
    """IPM XML logs (``engine="ipm"``)."""

    format_name = "ipm"
    description = "IPM XML profiles (perfkit)"


class CubeBackend(_PerfkitBackend):
    """Score-P CUBE4 ``.cubex`` profiles (``engine="cube"``)."""

    format_name = "cube"
    description = "Score-P CUBE4 profiles via pycubexr (perfkit)"


class OTF2Backend(_PerfkitBackend):
    """OTF2 traces (``engine="otf2"``): the anchor file ``traces.otf2``."""

    format_name = "otf2"
    description = "OTF2 traces (Score-P, perfkit collect --trace) with wait states (perfkit)"
