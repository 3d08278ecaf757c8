"""Format registry: which reader handles which file, and content sniffing."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

import xarray as xr

from perfkit.errors import PerfkitFormatError

SNIFF_BYTES = 64 * 1024


@dataclass(frozen=True)
class Format:
    """A profile format: its name, the module holding ``read`` and ``sniff``."""

    name: str
    module: str

    def reader(self) -> Callable[..., xr.Dataset]:
        """The module's ``read(path, **run_metadata) -> Dataset``."""
        return importlib.import_module(self.module).read

    def sniff(self, path: Path, head: bytes) -> bool:
        """True if the file looks like this format (``head`` = its first bytes)."""
        return bool(importlib.import_module(self.module).sniff(path, head))


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("mpinside", "perfkit.io.mpinside"),
        Format("mpip", "perfkit.io.mpip"),
        Format("ipm", "perfkit.io.ipm"),
        Format("cube", "perfkit.io.cube"),
    )
}


def available_formats() -> list[str]:
    """Names of the formats whose reader module is installed in this version."""
    names = []
    for name, fmt in FORMATS.items():
        try:
            importlib.import_module(fmt.module)
        except ModuleNotFoundError:
            continue
        names.append(name)
    return names


def sniff_format(path: str | PathLike) -> str:
    """Name of the format of ``path``, judged from its content."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(path)
    head = b""
    if path.is_file():
        with open(path, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
        if not head:
            raise PerfkitFormatError(path, None, "the file is empty")
    tried = available_formats()
    for name in tried:
        if FORMATS[name].sniff(path, head):
            return name
    raise PerfkitFormatError(path, None, f"not a recognised profile format (tried: {', '.join(tried)})")


def get_format(name: str) -> Format:
    """The ``Format`` called ``name`` (ValueError listing the known ones otherwise)."""
    if name not in available_formats():
        raise ValueError(f"unknown format {name!r}; known formats: {available_formats()}")
    return FORMATS[name]
