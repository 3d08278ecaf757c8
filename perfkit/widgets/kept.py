"""Results computed once and kept, shared between threads: the explorer's session thread, its background
preparation (:mod:`perfkit.widgets.warmup`) and the threads its tabs compute in.

A result is a :class:`Once`: whoever asks first computes it, in whatever thread, and a second caller waits for
that result rather than computing it again; a failed computation is not kept (the next call tries again). A
:class:`Kept` holds the last few results by key, and :func:`kept_with` the results kept with a Dataset (dropped
with it).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Once(Generic[T]):
    """``compute()`` on the first call only; :attr:`started` is the wall-clock time [s since the epoch] the
    computation began (None before it began, or after it failed)."""

    def __init__(self, compute: Callable[[], T]) -> None:
        self.compute: Callable[[], T] | None = compute
        self.started: float | None = None
        self._made: list[T] = []
        self._lock = threading.Lock()

    def __call__(self) -> T:
        with self._lock:
            if not self._made:
                self.started = time.time()
                try:
                    self._made.append(self.compute())  # type: ignore[misc]
                except BaseException:
                    self.started = None
                    raise
                self.compute = None  # what it held (the Dataset a result is kept with) may go
            return self._made[0]

    def ready(self) -> bool:
        """Whether the result is there (a call returns at once)."""
        return bool(self._made)


class Kept(Generic[T]):
    """The last ``size`` results by key, each a :class:`Once`."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._cells: OrderedDict[Hashable, Once[T]] = OrderedDict()
        self._lock = threading.Lock()

    def cell(self, key: Hashable, compute: Callable[[], T]) -> Once[T]:
        """The result under ``key``, computed by ``compute()`` when first called; the most recent from now on."""
        with self._lock:
            if key not in self._cells:
                self._cells[key] = Once(compute)
                while len(self._cells) > self.size:
                    self._cells.popitem(last=False)
            self._cells.move_to_end(key)
            return self._cells[key]

    def __call__(self, key: Hashable, compute: Callable[[], T]) -> T:
        return self.cell(key, compute)()


_WITH: dict[int, tuple[weakref.ref, dict[str, Kept[Any]]]] = {}
_WITH_LOCK = threading.Lock()


def kept_with(owner: Any, name: str, size: int = 1) -> Kept[Any]:
    """The results called ``name`` kept with ``owner`` (a Dataset: any object with weak references), the last
    ``size`` of them; dropped with ``owner``."""
    key = id(owner)
    with _WITH_LOCK:
        ref, named = _WITH.get(key, (None, None))
        if ref is None or ref() is not owner:
            named = {}
            _WITH[key] = (weakref.ref(owner, lambda _, key=key: _WITH.pop(key, None)), named)
        return named.setdefault(name, Kept(size))


def pending(*results: Once[Any] | None) -> Once[Any] | None:
    """The first of ``results`` not yet computed (None where there is none: everything is there)."""
    return next((result for result in results if result is not None and not result.ready()), None)
