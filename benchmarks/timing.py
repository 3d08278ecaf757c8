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


class PeakRss:
    """Peak resident memory of a process while a block runs (``with PeakRss() as mem: ...``). Linux.

    A thread reads ``/proc/<pid>/statm`` every ``interval`` s from entry to exit; ``pid`` is this
    process (``"self"``) or a child's. After the block: ``base`` (resident size on entry), ``peak``
    (the largest sample, the exit's included) and ``increase`` (peak - base) [B]; for this process also
    ``maxrss`` and ``children_maxrss``, the kernel's peaks (``ru_maxrss``) of it and of its waited-for
    children over their whole life [B].
    """

    def __init__(self, pid: int | str = "self", interval: float = 0.002) -> None:
        import os
        import threading

        self._path, self._interval = f"/proc/{pid}/statm", interval
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._done, self._thread = threading.Event(), threading.Thread(target=self._sample, daemon=True)
        self._self = pid == "self"
        self.base = self.peak = self.maxrss = self.children_maxrss = 0

    def rss(self) -> int:
        """The resident size now [B] (0 once the process is gone)."""
        try:
            with open(self._path) as fh:
                return int(fh.read().split()[1]) * self._page
        except (FileNotFoundError, ProcessLookupError):
            return 0

    def _sample(self) -> None:
        while not self._done.wait(self._interval):
            self.peak = max(self.peak, self.rss())

    def __enter__(self) -> PeakRss:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> PeakRss:
        """Start sampling (what entering the ``with`` block does)."""
        self.base = self.peak = self.rss()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling and read the peaks (what leaving the ``with`` block does)."""
        import resource

        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss())
        if self._self:
            self.maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            self.children_maxrss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024

    @property
    def increase(self) -> int:
        """Peak over the resident size on entry [B]."""
        return self.peak - self.base


def run_script(script: str, *args: object, path: str | None = None) -> dict:
    """The last line of ``python -c script args`` in a fresh interpreter, read as JSON; ``script`` may
    ``from timing import PeakRss`` (this folder is on its path, after ``path`` when given: another perfkit tree,
    then also the working folder, which ``-c`` puts first).
    """
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    folders = [*([path] if path else []), str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(f for f in folders if f)}
    out = subprocess.run([sys.executable, "-c", script, *map(str, args)], check=True, capture_output=True, text=True,
                         env=env, cwd=path)
    return json.loads(out.stdout.strip().splitlines()[-1])
