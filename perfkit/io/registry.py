"""Format registry: which reader handles which file, and content sniffing."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from perfkit.errors import PerfkitFormatError
from perfkit.io.compressed import compression, decompressed_head, encoding_refusal

SNIFF_BYTES = 64 * 1024


@dataclass(frozen=True)
class Format:
    """A profile format: its name, the module holding ``read`` and ``sniff``; ``packed``: its reader
    takes compressed files itself (a CUBE ``.tar.gz``), else they are decompressed for it."""

    name: str
    module: str
    packed: bool = False

    def reader(self) -> Callable[..., xr.Dataset]:
        """The module's ``read(path, **run_metadata) -> Dataset``, its result checked by ``check_values``."""
        read = importlib.import_module(self.module).read

        @functools.wraps(read)
        def checked(path: str | PathLike, *args: Any, **kwargs: Any) -> xr.Dataset:
            return check_values(path, read(path, *args, **kwargs))

        return checked

    def sniff(self, path: Path, head: bytes) -> bool:
        """True if the file looks like this format (``head`` = its first bytes)."""
        return bool(importlib.import_module(self.module).sniff(path, head))


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("mpinside", "perfkit.io.mpinside"),
        Format("mpip", "perfkit.io.mpip"),
        Format("ipm", "perfkit.io.ipm"),
        Format("cube", "perfkit.io.cube", packed=True),
        Format("otf2", "perfkit.io.otf2"),
    )
}


def check_values(path: str | PathLike, ds: xr.Dataset) -> xr.Dataset:
    """``ds`` unchanged if it holds no value a profiler cannot produce, else a ``PerfkitFormatError``.

    Times [s], byte counts [B] and call or message counts are never negative or infinite, in the
    profile, the traffic matrices and the size histograms (NaN, "not measured", is fine). The
    readers refuse such values themselves, naming the line where the format is text; this is the
    guarantee for every reader, naming the rank, function and metric instead. The Dataset must also
    pass ``perfkit.validate`` (e.g. function names with control bytes are refused here, with the file).
    """
    from perfkit.errors import ContractError
    from perfkit.model import validate

    try:
        validate(ds)
    except ContractError as exc:
        raise PerfkitFormatError(path, None, f"what the file holds breaks the data contract: {exc}") from exc
    for name in ("profile", "traffic", "sizes"):
        if name not in ds:
            continue
        var = ds[name]
        data = var.data
        is_coo = type(data).__name__ == "COO"  # pydata sparse, not imported here (slow to import)
        values = np.asarray(data.data if is_coo else data)
        bad = np.isinf(values) | (values < 0)
        if not bad.any():
            continue
        k = int(np.argmax(bad.ravel()))
        if is_coo:
            where = dict(zip(var.dims, (int(c) for c in data.coords[:, k]), strict=True))
        else:
            where = dict(zip(var.dims, (int(i) for i in np.unravel_index(k, values.shape)), strict=True))
        labels = ", ".join(f"{dim} {var[dim].values[i]}" for dim, i in where.items() if dim in var.coords)
        why = "negative" if values.ravel()[k] < 0 else "infinite"
        raise PerfkitFormatError(path, None, f"{name} at {labels} is {values.ravel()[k]!r} ({why}); no profiler "
                                             "measures a negative or infinite time, byte count or call count")
    for name in ("size_bin", "elapsed", "nprocs", "nodes", "ppn", "threads"):
        if name in ds.coords:
            values = np.asarray(ds[name].values, dtype=np.float64)
            if np.isinf(values).any() or (values < 0).any():
                raise PerfkitFormatError(path, None, f"{name} is {values.tolist()[:5]}: negative or infinite")
    return ds


def available_formats() -> list[str]:
    """Names of the formats whose reader module is installed in this version."""
    return [name for name in FORMATS if installed(name)]


def installed(name: str) -> bool:
    """Whether the reader module of format ``name`` imports."""
    try:
        importlib.import_module(FORMATS[name].module)
    except ModuleNotFoundError:
        return False
    return True


def sniff_format(path: str | PathLike) -> str:
    """Name of the format of ``path``, judged from its content: as it is first (a CUBE ``.tar.gz`` is read
    so), then decompressed when it is gzip, bzip2 or xz data; UTF-16 text or a byte-order mark refused,
    saying so."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    head = b""
    if path.is_file():
        with open(path, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
        if not head:
            raise PerfkitFormatError(path, None, "the file is empty")
    name = claimed(path, head) if not encoding_refusal(head) else None
    packed = compression(head)
    if packed and not name:
        head = decompressed_head(path, head, SNIFF_BYTES)
        if not head:
            raise PerfkitFormatError(path, None, f"the file is empty once {packed}-decompressed")
    refusal = encoding_refusal(head)
    if refusal:
        raise PerfkitFormatError(path, 1, refusal)
    name = name or claimed(path, head)
    if name:
        return name
    raise PerfkitFormatError(path, None, f"not a recognised profile format (tried: {', '.join(available_formats())})")


def claimed(path: Path, head: bytes) -> str | None:
    """The first format whose sniffer takes ``path`` with first bytes ``head``, or None. A format's module is
    imported only when the formats before it decline the file (an MPInside table imports no OTF2 or CUBE reader)."""
    return next((name for name in FORMATS if installed(name) and FORMATS[name].sniff(path, head)), None)


def get_format(name: str) -> Format:
    """The ``Format`` called ``name`` (ValueError listing the known ones otherwise)."""
    if name not in FORMATS or not installed(name):
        raise ValueError(f"unknown format {name!r}; known formats: {available_formats()}")
    return FORMATS[name]
