"""Array libraries kept off the first read's path until something needs them.

xarray looks for dask, pydata ``sparse`` and others as it makes its first variable and index: it imports
``dask.array`` (to tell dask arrays apart) and ``sparse`` (to tell sparse arrays apart), and ``dask.array``
imports every installed library whose arrays it takes as chunks: ``sparse`` (which imports numba),
``scipy.sparse`` (which imports ``numpy.f2py``) and ``scipy.fftpack`` (which imports ``scipy.special``). On this
project's reference machine that was 0.36-0.54 s of ``import dask.array`` (0.06-0.10 s without them) and
0.14-0.46 s of ``import sparse``, before the first profile could be read, though a small profile needs neither.

Here dask and xarray are given, for those libraries' types, stand-ins that check against the real types once
the library is imported by anyone (:func:`imported_types`): a sparse array is told apart exactly as before, and
nothing is imported to learn that an array is not one. Importing this module does it (``perfkit`` imports it
before anything makes an xarray variable).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from types import ModuleType
from typing import Any

#: The modules ``dask.array`` imports on import, when installed: chunk types, and ``scipy.fftpack`` for a check.
HELD_BACK = ("sparse", "scipy.sparse", "scipy.fftpack")


@contextmanager
def unimportable(name: str) -> Iterator[None]:
    """``import name`` raises ImportError inside the block, unless the module is imported already; afterwards it
    imports as before."""
    if name in sys.modules:
        yield
        return
    sys.modules[name] = None  # type: ignore[assignment]  (the import system's mark of a module that cannot import)
    try:
        yield
    finally:
        if sys.modules.get(name, ...) is None:
            del sys.modules[name]


class _Imported(type):
    """Classes standing for types of modules that may not be imported: ``issubclass(t, stand_in)`` is true when
    ``t`` subclasses one of the types whose module is imported (fully) at the time; ``isinstance`` likewise."""

    types: tuple[tuple[str, str], ...]

    def __instancecheck__(cls, obj: Any) -> bool:
        return cls.__subclasscheck__(type(obj))

    def __subclasscheck__(cls, sub: type) -> bool:
        return any(issubclass(sub, held) for held in cls.resolved())

    def resolved(cls) -> tuple[type, ...]:
        """The types stood for whose modules are imported."""
        found = (getattr(sys.modules.get(module), name, None) for module, name in cls.types)
        return tuple(held for held in found if isinstance(held, type))


def imported_types(name: str, *types: tuple[str, str]) -> type:
    """A stand-in class for the types ``(module, name)``, checked against them once their modules are imported."""
    return _Imported(name, (), {"types": types, "__doc__": f"Stands for {', '.join(map('.'.join, types))}."})


class _DeferredDuckArrayModule:
    """xarray's record of an array library (``xarray.namedarray.pycompat.DuckArrayModule``) whose ``type`` is a
    stand-in; anything else asked of it (``module``, ``version``, ``available``) imports the library."""

    def __init__(self, module: str, type_name: str) -> None:
        self._module = module
        self.type = (imported_types(type_name, (module, type_name)),)

    def __getattr__(self, attribute: str) -> Any:
        from xarray.namedarray.pycompat import DuckArrayModule

        return getattr(DuckArrayModule(self._module), attribute)


def import_dask_array() -> ModuleType:
    """``dask.array``, imported without :data:`HELD_BACK` if it is not imported yet; dask is told about their
    chunk types through a stand-in, and ``dask.array.fft`` holds ``scipy`` as it would have."""
    if "dask.array" in sys.modules:
        return sys.modules["dask.array"]
    held = [name for name in HELD_BACK if name not in sys.modules]
    with ExitStack() as stack:
        for name in held:
            stack.enter_context(unimportable(name))
        import dask.array
        import dask.array.fft
    if held:
        dask.array.register_chunk_type(imported_types(
            "ImportedChunkTypes", ("sparse", "SparseArray"), ("scipy.sparse", "spmatrix"), ("scipy.sparse", "sparray")))
    if dask.array.fft.scipy is None:  # only compared with None, to check functions from scipy.fftpack
        dask.array.fft.scipy = sys.modules.get("scipy")
    return dask.array


def defer_xarray_sparse() -> None:
    """Have xarray tell pydata sparse arrays apart without importing ``sparse`` (unless it is imported already).
    xarray keeps its records in a private cache: if that is gone, nothing changes (``sparse`` imports as before)."""
    from xarray.namedarray import pycompat

    cache = getattr(pycompat, "_cached_duck_array_modules", None)
    if isinstance(cache, dict) and "sparse" not in cache and "sparse" not in sys.modules:
        cache["sparse"] = _DeferredDuckArrayModule("sparse", "SparseArray")


import_dask_array()
defer_xarray_sparse()
