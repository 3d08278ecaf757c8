"""The explorer's hidden tabs prepared ahead: their computations run in a background thread once the first
plot is up, so that a tab's first visit only draws.

Only computations run there (imports of a tab's modules, ``pop_metrics``, ``diagnose``): no panel or
holoviews object is made outside the session's own thread, and the work pauses while the user acts
(:mod:`perfkit.widgets.gate`). A result is shared as a
:class:`perfkit.widgets.kept.Once`: a tab shown while its result is being prepared shows a placeholder and waits
for it in a thread of its own (:class:`perfkit.widgets.offloop.OffLoop`), never on the event loop, rather than
computing it a second time. A computation that fails in the background is left for the tab, which computes it
again when shown and shows the error there.

In a notebook or Voila (widgets through ipywidgets), the dashboard is drawn only once the page has loaded
its scripts and asked the kernel for the widgets' state: in Voila 3-5 s after the notebook has run. The
background work waits for the page to show the dashboard (:func:`shown_through_ipywidgets`), so that it
does not compete with the kernel's answers to the page and with the page's own drawing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from perfkit.widgets.gate import behind_controls

#: Seconds from the dashboard's first rendering to the start of the background work (the first plot's
#: models reach the page in that time: the work would otherwise compete with them for the interpreter).
START_DELAY_S = 2.0
#: Longest wait for a page to show the dashboard before the background work starts anyway [s] (a notebook run
#: without a browser never shows it).
SHOWN_TIMEOUT_S = 30.0
#: Interval between two looks at whether the page shows the dashboard [s].
POLL_S = 0.1


class Warmup:
    """Tasks run one after another in a daemon thread, ``delay_s`` seconds after :meth:`start` and, given
    ``shown``, after ``shown()`` is first true (at most ``SHOWN_TIMEOUT_S`` later)."""

    def __init__(self, delay_s: float | None = None, shown: Callable[[], bool] | None = None) -> None:
        self.delay_s = START_DELAY_S if delay_s is None else delay_s
        self.shown = shown
        self.tasks: list[Callable[[], Any]] = []
        self.done = threading.Event()
        self._stopped = threading.Event()
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

    def stop(self) -> None:
        """Run no further task: a thread still waiting (for the page, or the delay) ends at once, one running a
        task after it; :attr:`done` is set then."""
        self._stopped.set()

    def _run(self) -> None:
        deadline = time.monotonic() + SHOWN_TIMEOUT_S
        while self.shown is not None and time.monotonic() < deadline and not self.shown():
            if self._stopped.wait(POLL_S):
                break
        self._stopped.wait(self.delay_s)
        for task in self.tasks:
            if self._stopped.is_set():
                break
            try:
                with behind_controls():  # each task, and each of its dask tasks, after the controls' changes
                    task()
            except Exception:  # the tab computes it again when shown and shows the error)
                continue
        self.done.set()


def shown_through_ipywidgets(view: Any) -> bool:
    """Whether a page shows the panel object ``view`` through an ipywidget (jupyter_bokeh's ``BokehModel``,
    as panel displays it with ipywidgets comms) that has a view in the page. Only reads: safe in any thread."""
    try:
        from ipywidgets.widgets.widget import _instances
    except ImportError:
        return False
    roots = set(view._models)  # ids of the root models panel made for view
    return any(type(widget).__name__ == "BokehModel" and getattr(widget, "_view_count", None)
               and getattr(getattr(widget, "_model", None), "id", None) in roots
               for widget in list(_instances.values()))
