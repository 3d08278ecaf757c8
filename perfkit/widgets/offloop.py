"""A view whose computation runs off the session's event loop: a placeholder at once, the view when its result
is ready.

Served by panel, a callback that computes holds the server's event loop: every control of the page waits
for it (at 100,000 ranks x 100 runs a tab's first table is a pass over the cube, about a minute). An
:class:`OffLoop` view is drawn at once when its result is there; otherwise it shows a placeholder, computes the
result in a worker thread and asks to be drawn again, on the session's own thread, when the result is there
(:class:`Session`): no panel, holoviews or bokeh object is made in the worker thread. The worker pauses while the
user acts (:mod:`perfkit.widgets.gate`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import panel as pn
import param
from panel.io.state import set_curdoc

from perfkit.widgets.gate import behind_controls
from perfkit.widgets.kept import Once


class Session:
    """Where the page of the session that makes this object may be changed, reachable from any thread: the
    server's event loop (served by panel), a notebook kernel's loop thread (a notebook, Voila), else the caller's
    thread (a script, no page)."""

    def __init__(self) -> None:
        doc = pn.state.curdoc
        self.doc = doc if doc is not None and doc.session_context is not None else None
        self.loop = kernel_loop() if self.doc is None else None

    @property
    def looping(self) -> bool:
        """Whether the session runs an event loop (served, or in a kernel): else nothing waits for this thread."""
        return self.doc is not None or (self.loop is not None and not self.loop.is_closed())

    def call(self, callback: Callable[[], None]) -> None:
        """Run ``callback()`` on the session's thread (soon; at once where there is no loop)."""
        if self.doc is not None:
            doc = self.doc

            def on_loop() -> None:
                with set_curdoc(doc):
                    callback()

            doc.add_next_tick_callback(on_loop)
        elif self.looping:
            self.loop.call_soon_threadsafe(callback)
        else:
            callback()


class Redraw(param.Parameterized):
    """A view's redraws asked for so far: each one a new value of ``count`` (a view bound to it is drawn again)."""

    count = param.Integer(default=0)

    def again(self) -> None:
        """Draw the view again."""
        self.count += 1


class OffLoop:
    """Draws a view with :meth:`view` (on the session's thread); ``redraw()`` asks for it to be drawn again, once
    the result it waited for is there. ``what``: what is computed, for the placeholder (``the scaling table``)."""

    def __init__(self, redraw: Callable[[], None], what: str) -> None:
        self.redraw = redraw
        self.what = what
        self._asked = 0  # the views asked for so far: a result arriving for an earlier one draws nothing
        self._failed: tuple[Once[Any], BaseException] | None = None

    def view(self, draw: Callable[[], Any], pending: Once[Any] | None) -> Any:
        """``draw()`` when nothing is ``pending`` (the result ``draw`` needs, not yet computed); else a placeholder
        while ``pending()`` runs in a worker thread, and :attr:`redraw` called on the session's thread when it ends
        (without an event loop, in a script: ``pending()`` here, then ``draw()``). A result whose computation failed
        is shown as the error (once: the next view computes it again)."""
        self._asked += 1
        if pending is None:
            return draw()
        if self._failed is not None and self._failed[0] is pending:
            problem, self._failed = self._failed[1], None
            return self._error(problem)
        asked, session = self._asked, Session()
        if not session.looping:
            try:
                pending()
            except Exception as problem:  # shown in the view
                return self._error(problem)
            return draw()
        started = pending.started or time.time()
        threading.Thread(target=self._compute, args=(asked, pending, session), name="perfkit-tab",
                         daemon=True).start()
        return placeholder(self.what, started)

    def _error(self, problem: BaseException) -> pn.pane.Alert:
        return pn.pane.Alert(f"Could not compute {self.what}: {problem}", alert_type="danger")

    def _compute(self, asked: int, pending: Once[Any], session: Session) -> None:
        try:
            with behind_controls():  # the controls first (perfkit.widgets.gate)
                pending()
        except Exception as problem:  # shown in the view
            self._failed = (pending, problem)
        session.call(lambda: self._done(asked))

    def _done(self, asked: int) -> None:
        if asked == self._asked:
            self.redraw()


def placeholder(what: str, started: float) -> pn.Row:
    """A spinner and ``Computing <what> (started at hh:mm:ss)``; ``started`` in seconds since the epoch."""
    at = time.strftime("%H:%M:%S", time.localtime(started))
    note = f"Computing {what} (started at {at}): shown here when ready; the other controls work meanwhile."
    return pn.Row(pn.indicators.LoadingSpinner(value=True, size=24, margin=(10, 10)),
                  pn.pane.Markdown(note, sizing_mode="stretch_width"), sizing_mode="stretch_width")


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread (a Jupyter kernel's, a server's), or None."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def kernel_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop of the Jupyter kernel this runs in (None outside a kernel: a script's loop, such as a
    browser driver's, may be marked running in this thread without serving callbacks while the script runs)."""
    return running_loop() if in_kernel() else None


def in_kernel() -> bool:
    """Whether this runs in a Jupyter kernel (an IPython shell with a kernel)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return hasattr(get_ipython(), "kernel")
