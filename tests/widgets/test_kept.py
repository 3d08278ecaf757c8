"""Results computed once and kept: sharing between threads, failures, the last few per key, kept with a Dataset."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import xarray as xr

from perfkit.widgets.kept import Kept, Once, kept_with, pending


def test_a_second_caller_waits_for_the_first_result_instead_of_computing_again():
    calls = []
    gate = threading.Event()

    def compute():
        calls.append(1)
        gate.wait(5)
        return object()

    get = Once(compute)
    results = []
    threads = [threading.Thread(target=lambda: results.append(get())) for _ in range(3)]
    before = time.time()
    for thread in threads:
        thread.start()
    time.sleep(0.2)
    assert not get.ready() and before <= get.started <= time.time()
    gate.set()
    for thread in threads:
        thread.join(5)
    assert len(calls) == 1 and len(results) == 3 and len({id(r) for r in results}) == 1
    assert get.ready()


def test_a_failed_computation_is_tried_again():
    outcomes = iter([ZeroDivisionError, "made"])

    def compute():
        outcome = next(outcomes)
        if outcome is ZeroDivisionError:
            raise outcome
        return outcome

    get = Once(compute)
    try:
        get()
    except ZeroDivisionError:
        pass
    assert not get.ready() and get.started is None
    assert get() == "made"


def test_kept_by_key_the_oldest_forgotten():
    calls = []
    kept = Kept(2)

    def compute(key):
        return lambda: calls.append(key) or len(calls)

    assert kept("a", compute("a")) == 1 and kept("a", compute("a")) == 1
    assert kept("b", compute("b")) == 2
    assert kept("c", compute("c")) == 3  # three keys kept two at a time: "a" is forgotten
    assert kept("a", compute("a")) == 4
    assert calls == ["a", "b", "c", "a"]


def test_pending_is_the_first_result_not_computed_yet():
    done, waiting = Once(lambda: 1), Once(lambda: 2)
    done()
    assert pending(done, None, waiting) is waiting
    waiting()
    assert pending(done, None, waiting) is None


def test_results_are_kept_with_their_dataset_and_go_with_it():
    def total(data):
        return lambda: float(data["x"].sum())

    ds = xr.Dataset({"x": ("i", [1.0, 2.0])})
    first = kept_with(ds, "sums")((), total(ds))
    assert first == 3.0
    assert kept_with(ds, "sums")((), lambda: 0.0) == 3.0  # kept
    assert kept_with(ds.copy(), "sums")((), lambda: 0.0) == 0.0  # another Dataset object: its own
    gone = weakref.ref(ds)
    del ds
    gc.collect()
    assert gone() is None  # a computed result holds no reference to its Dataset
