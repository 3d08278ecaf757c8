"""Controls before background work: the explorer's computations off the event loop pause while the user acts.

The tabs' computations (:mod:`perfkit.widgets.offloop`, :mod:`perfkit.widgets.warmup`) run in threads beside the
server's event loop; over a lazily opened store they are dask computations of many small tasks, which took both
cores and the interpreter from the loop while it answered a control (at 100,000 ranks a slider step 160 ms idle,
360 ms beside them). Each change made in the page (:func:`watch_page`) or of the shown view marks an interaction
(:func:`interaction`); a computation run :func:`behind_controls` starts no dask task, and no step of its own
(:func:`wait_quiet`), until no interaction has been marked for :data:`QUIET_S`. Tasks already running finish.

The gate is one per process: under ``panel serve`` a user's action pauses the background work of every session.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dask.callbacks import Callback

#: Background work waits this long after the last interaction [s]: an action's answer (the page's change
#: received, the plot's new data computed and sent) takes 0.1-0.2 s at 100,000 ranks.
QUIET_S = 0.3

_last = [float("-inf")]  # time.monotonic() of the last interaction


def interaction() -> None:
    """Mark an interaction now: background work pauses until :data:`QUIET_S` after the last one."""
    _last[0] = time.monotonic()


def wait_quiet() -> float:
    """Return once no interaction has been marked for :data:`QUIET_S`; the seconds waited."""
    waited = 0.0
    while (left := _last[0] + QUIET_S - time.monotonic()) > 0:
        time.sleep(left)
        waited += left
    return waited


class _Gate(Callback):
    """Waits (:func:`wait_quiet`) before each dask task submitted by the thread that made it. dask's callbacks
    are process-wide while registered: a computation of another thread (the event loop's) passes through."""

    def __init__(self) -> None:
        super().__init__()
        self.thread = threading.get_ident()

    def _pretask(self, key: Any, dsk: Any, state: Any) -> None:
        if threading.get_ident() == self.thread:
            wait_quiet()


@contextmanager
def behind_controls() -> Iterator[None]:
    """Run the block (in a background thread) behind the controls: it starts after :func:`wait_quiet`, and each
    dask task it computes on a local scheduler waits for a quiet moment too."""
    wait_quiet()
    with _Gate():
        yield


def watch_page(doc: Any) -> None:
    """Mark an interaction on each change the page makes to ``doc`` (a served bokeh Document): a control's
    value, a box drawn. Marked as the change arrives, before panel hands it on to the widgets' watchers."""

    def on_change(event: Any) -> None:
        if getattr(event, "setter", None) is not None:  # made by the page (the server's own changes: None)
            interaction()

    doc.on_change(on_change)
