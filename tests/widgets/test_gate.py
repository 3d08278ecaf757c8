"""Background computations pause while the user acts: between their dask tasks, in their thread only."""

from __future__ import annotations

import threading
import time

import dask.array as da
import numpy as np
from bokeh.document import Document
from bokeh.models import Slider

from perfkit.widgets import gate
from perfkit.widgets.warmup import Warmup

TASKS = 300


def _recorded_sum(starts: list[float], n: int = TASKS, in_flight: list[int] | None = None) -> da.Array:
    """A dask sum of ``n`` small tasks (2 ms each) that append their start time to ``starts`` and, given
    ``in_flight``, how many of them run at that time."""
    running = [0]

    def task(block: np.ndarray) -> np.ndarray:
        if block.size:  # not dask's call on an empty block, for the result's type
            running[0] += 1
            starts.append(time.monotonic())
            if in_flight is not None:
                in_flight.append(running[0])
            time.sleep(0.002)
            running[0] -= 1
        return block

    return da.ones(n, chunks=1).map_blocks(task, dtype=float).sum()


def test_background_computations_pause_between_their_tasks_while_the_user_acts_and_resume_after():
    # two background threads, each computing many small dask graphs one after another (as the tabs read a lazy
    # store a run at a time), beside the event loop's thread
    background: list[float] = []
    in_flight: list[int] = []
    jobs = [Warmup(delay_s=0.0) for _ in range(2)]
    for job in jobs:
        job.add(lambda: [_recorded_sum(background, 10, in_flight).compute(scheduler="threads")
                         for _ in range(TASKS // 10)])
        job.start()
    deadline = time.monotonic() + 30
    while len(background) < 40 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert 40 <= len(background) < 2 * TASKS, "the computations should be under way"

    # the user acts (a mark every 50 ms) while the event loop's own computation runs: it is not held up
    acting = threading.Event()
    marks: list[float] = []

    def act() -> None:
        while not acting.is_set():
            gate.interaction()
            marks.append(time.monotonic())
            time.sleep(0.05)

    marker = threading.Thread(target=act)
    marker.start()
    time.sleep(0.1)
    own: list[float] = []
    assert _recorded_sum(own, 100).compute(scheduler="threads", num_workers=2) == 100
    time.sleep(0.2)
    acting.set()
    marker.join()

    # a task submitted before the first mark may still start (one worker each); none after
    during = [t for t in background if marks[0] < t <= marks[-1]]
    assert len(during) <= len(jobs) * gate.WORKERS == 2
    assert len(own) == 100
    assert all(job.done.wait(30) for job in jobs)
    assert len(background) == 2 * TASKS  # resumed once quiet
    after = [t for t in background if t > marks[-1]]
    assert after and min(after) >= marks[-1] + 0.9 * gate.QUIET_S
    assert max(in_flight) <= len(jobs)  # one task of each at a time (dask's pool for a thread: 6 workers)


def test_a_change_made_by_the_page_marks_an_interaction_and_one_made_by_the_server_does_not(monkeypatch):
    marked: list[float] = []
    monkeypatch.setattr(gate, "interaction", lambda: marked.append(time.monotonic()))
    doc = Document()
    slider = Slider(start=0, end=10, value=1)
    doc.add_root(slider)
    gate.watch_page(doc)
    slider.value = 2  # the server's own change (a redraw)
    assert marked == []
    slider.update(value=3)
    slider.set_from_json("value", 4, setter="the page")  # as a patch from the page arrives
    assert len(marked) == 1


def test_wait_quiet_returns_at_once_without_an_interaction_and_after_the_quiet_time_with_one(monkeypatch):
    monkeypatch.setattr(gate, "_last", [float("-inf")])
    assert gate.wait_quiet() == 0.0
    gate.interaction()
    assert gate.wait_quiet() > 0.0
    assert gate.wait_quiet() == 0.0
