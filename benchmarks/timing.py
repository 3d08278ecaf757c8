"""Timing helper shared by the benchmark scripts (run them as ``python benchmarks/bench_<name>.py``)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_seconds(func: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``func()`` over ``repeats`` calls after one warm-up call [s]."""
    func()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
