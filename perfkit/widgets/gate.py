"""Controls before background work: the explorer's computations off the event loop pause while the user acts.

The tabs' computations (:mod:`perfkit.widgets.offloop`, :mod:`perfkit.widgets.warmup`) run in threads beside the
server's event loop; over a lazily opened store they are dask computations of many small tasks, which took both
cores and the interpreter from the loop while it answered a control (at 100,000 ranks a slider step 160 ms idle,
360 ms beside them). Each change made in the page (:func:`watch_page`) or of the shown view marks an interaction
(:func:`interaction`); a computation run :func:`behind_controls` starts, and submits each of its dask tasks, only
once no interaction has been marked for :data:`QUIET_S` (:func:`wait_quiet`). Tasks already running finish: such
a computation runs its tasks :data:`WORKERS` at a time (dask's own pool for a thread other than the main one has
the cores + 4 workers: 6 tasks of each computation in flight, each reading a chunk through the same zarr reader as
the per-rank view, went on after an interaction).

The gate is one per process: under ``panel serve`` a user's action pauses the background work of every session.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import dask.threaded

#: Background work waits this long after the last interaction [s]: an action's answer (the page's change
#: received, the plot's new data computed and sent) takes 0.1-0.2 s at 100,000 ranks.
QUIET_S = 0.3
#: dask tasks of a computation behind the controls in flight at a time.
WORKERS = 1

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


@contextmanager
def behind_controls() -> Iterator[None]:
    """Run the block (in a background thread) behind the controls: it starts after :func:`wait_quiet`, and each
    dask task it submits to dask's threaded scheduler waits for a quiet moment too, with :data:`WORKERS` tasks in
    flight at most."""
    wait_quiet()
    thread = threading.current_thread()
    with dask.threaded.pools_lock:
        pools = dask.threaded.pools[thread]
        own = None if None in pools else pools.setdefault(None, _GatedPool(WORKERS, "perfkit-background"))
    try:
        yield
    finally:
        if own is not None:
            with dask.threaded.pools_lock:
                if dask.threaded.pools.get(thread, {}).get(None) is own:
                    del dask.threaded.pools[thread][None]
            own.shutdown(wait=False)


class _GatedPool(ThreadPoolExecutor):
    """The pool dask's threaded scheduler runs a thread's computations on (those without a pool or worker count of
    their own: dask keeps one per thread), given beforehand: each task waits for :func:`wait_quiet` before it is
    submitted, in the thread that computes. (A dask callback's ``_pretask`` would do so too, but dask takes the
    registered callbacks away while a computation runs, for every thread: one computing left the others none.)"""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        wait_quiet()
        return super().submit(fn, *args, **kwargs)


def watch_page(doc: Any) -> None:
    """Mark an interaction on each change the page makes to ``doc`` (a served bokeh Document): a control's
    value, a box drawn. Marked as the change arrives, before panel hands it on to the widgets' watchers."""

    def on_change(event: Any) -> None:
        if getattr(event, "setter", None) is not None:  # made by the page (the server's own changes: None)
            interaction()

    doc.on_change(on_change)
