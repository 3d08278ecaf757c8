"""The explorer's hidden tabs prepared ahead: their computations run in a background thread once the first
plot is up, so that a tab's first visit only draws.

Only computations run there (imports of a tab's modules, ``pop_metrics``, ``diagnose``): no panel or
holoviews object is made outside the session's own thread. A result is shared by :func:`shared` or
:class:`Memo`: a tab shown while its result is being prepared waits for it rather than computing it a
second time. A computation that fails in the background is left for the tab, which computes it again
when shown and shows the error there.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

import numpy as np

#: Seconds from the dashboard's first rendering to the start of the background work (the first plot's
#: models reach the page in that time: the work would otherwise compete with them for the interpreter).
START_DELAY_S = 2.0

T = TypeVar("T")


class Warmup:
    """Tasks run one after another in a daemon thread, ``delay_s`` seconds after :meth:`start`."""

    def __init__(self, delay_s: float | None = None) -> None:
        self.delay_s = START_DELAY_S if delay_s is None else delay_s
        self.tasks: list[Callable[[], Any]] = []
        self.done = threading.Event()
        self._started = False
        self._lock = threading.Lock()

    def add(self, task: Callable[[], Any]) -> None:
        """Run ``task()`` in the background (in the order added)."""
        self.tasks.append(task)

    def start(self) -> None:
        """Start the thread (once; later calls do nothing)."""
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._run, name="perfkit-warmup", daemon=True).start()

    def _run(self) -> None:
        time.sleep(self.delay_s)
        for task in self.tasks:
            try:
                task()
            except Exception:  # the tab computes it again when shown and shows the error)
                continue
        self.done.set()


def shared(compute: Callable[[], T]) -> Callable[[], T]:
    """``compute()`` on first use only, whatever the thread; a second caller waits for the first's result.
    A failed computation is not kept: the next call tries again."""
    made: list[T] = []
    lock = threading.Lock()

    def get() -> T:
        with lock:
            if not made:
                made.append(compute())
            return made[0]

    return get


class Memo(Generic[T]):
    """The last ``size`` results of ``compute(run, ranks)`` (``ranks`` an array of ranks or None), shared
    between threads as :func:`shared` shares one."""

    def __init__(self, compute: Callable[[str, np.ndarray | None], T], size: int = 8) -> None:
        self.compute = compute
        self.size = size
        self._results: OrderedDict[Hashable, T] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, run: str, ranks: np.ndarray | None = None) -> T:
        key = (run, None if ranks is None else np.asarray(ranks, dtype=np.int64).tobytes())
        with self._lock:
            if key not in self._results:
                self._results[key] = self.compute(run, ranks)
                while len(self._results) > self.size:
                    self._results.popitem(last=False)
            self._results.move_to_end(key)
            return self._results[key]
