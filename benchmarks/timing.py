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


def alternating_medians(funcs: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median wall time [s] of each function, the functions called in turn ``repeats`` times after a warm-up round.

    Alternating keeps a slow spell of a shared machine from landing on one side of a ratio only.
    """
    times: dict[str, list[float]] = {name: [] for name in funcs}
    for func in funcs.values():
        func()
    for _ in range(repeats):
        for name, func in funcs.items():
            start = time.perf_counter()
            func()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


_PEAK = """
import json, tracemalloc
{setup}
def status(key):
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(key + ":"))
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")  # the peak resident size restarts from the current one
base = status("VmRSS")
{statement}
rss = status("VmHWM") - base
tracemalloc.start()
{statement}
print(json.dumps({{"rss": rss, "traced": tracemalloc.get_traced_memory()[1]}}))
"""


def peak_memory(setup: str, statement: str) -> dict[str, int]:
    """Peak memory [B] of ``statement`` run in a fresh interpreter after ``setup`` (imports, paths). Linux.

    ``rss``: the peak resident size over the resident size after ``setup`` (``VmHWM`` reset, then
    read, in ``/proc/self``; ``ru_maxrss`` would carry the parent's peak across ``exec``);
    ``traced``: tracemalloc's peak for a second run (Python and numpy allocations, not C libraries').
    """
    import json
    import subprocess
    import sys

    code = _PEAK.format(setup=setup, statement=statement)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])
