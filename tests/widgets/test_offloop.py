"""Views computed off the event loop: placeholder, drawing on the loop's thread, failures, views asked for since."""

from __future__ import annotations

import asyncio
import threading
import time

import panel as pn

from perfkit.widgets import offloop
from perfkit.widgets.kept import Once, pending
from perfkit.widgets.offloop import OffLoop, Redraw


def bound(later: OffLoop, redraw: Redraw, cell: Once) -> pn.viewable.Viewable:
    """A pane drawing ``cell``'s result through ``later`` (as the explorer's tabs do)."""
    return pn.panel(pn.bind(lambda _: later.view(lambda: pn.pane.Markdown(f"result {cell()}"), pending(cell)),
                            redraw.param.count))


async def until(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


def text(pane: pn.viewable.Viewable) -> str:
    """The text ``pane`` shows (an alert is a Markdown pane)."""
    return " ".join(str(p.object) for p in pane.select(pn.pane.Markdown))


def test_the_result_is_drawn_on_the_loops_thread_and_a_failure_shown_then_tried_again(monkeypatch):
    monkeypatch.setattr(offloop, "in_kernel", lambda: True)  # this test's event loop plays a kernel's
    outcomes = iter(["fails", "made"])
    drawn_in: list[str] = []

    def compute():
        if next(outcomes) == "fails":
            raise ValueError("no data")
        return 42

    async def session():
        redraw = Redraw()
        later = OffLoop(lambda: drawn_in.append(threading.current_thread().name) or redraw.again(), "the answer")
        cell = Once(compute)
        pane = bound(later, redraw, cell)
        pane.get_root()
        seen = [text(pane)]
        await until(lambda: drawn_in)
        seen.append(text(pane))
        redraw.again()  # shown again: computed again
        seen.append(text(pane))
        await until(lambda: len(drawn_in) == 2)
        seen.append(text(pane))
        return seen, threading.current_thread().name

    ran = []
    thread = threading.Thread(target=lambda: ran.append(asyncio.run(session())), name="loop")
    thread.start()
    thread.join(60)
    (first, failed, again, made), loop = ran[0]
    assert first.startswith("Computing the answer (started at ")
    assert failed == "Could not compute the answer: no data"
    assert again.startswith("Computing the answer")
    assert made == "result 42"
    assert drawn_in == [loop, loop]


def test_a_result_for_a_view_asked_for_before_the_last_draws_nothing(monkeypatch):
    monkeypatch.setattr(offloop, "in_kernel", lambda: True)
    gate = threading.Event()
    redraws: list[int] = []

    async def session():
        later = OffLoop(lambda: redraws.append(1), "the answer")
        slow = Once(lambda: gate.wait(10))
        later.view(lambda: None, slow)  # computing in a worker thread
        later.view(lambda: "drawn", None)  # asked for since: drawn at once
        gate.set()
        await until(lambda: slow.ready())
        await asyncio.sleep(0.2)  # the worker's callback has had its turn on the loop

    thread = threading.Thread(target=lambda: asyncio.run(session()))
    thread.start()
    thread.join(60)
    assert redraws == []


def test_without_an_event_loop_the_result_is_computed_at_once():
    later = OffLoop(lambda: None, "the answer")
    assert later.view(lambda: "drawn", Once(lambda: 42)) == "drawn"
