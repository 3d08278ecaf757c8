"""How much other work on a machine delays the ranks of a run, measured without MPI or the collector.

The lab's realised truth absorbs late wake-ups from the compute sleeps, but not the time a rank
polling for a message or a collective spends without a core: on a loaded machine that lands in the
measured waits and nowhere in the truth, so timing-truth checks cannot hold there.

``scheduling_noise`` measures that delay directly: one process per core alternates a sleep and a
barrier it polls while yielding the CPU (as MPI ranks do on shared cores); a process's delay at a
step is the time from the last arrival at the barrier to its leaving it. On an idle machine it is
at most a few hundred microseconds; busy processes on the same cores raise it to milliseconds.
``exchange_delay`` reads the same delay off a lab run itself, from the compute intervals its ranks
recorded (not from the collector): how much later each compute started than the truth's zero-cost
model lets it.
"""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from perfkit.collect.lab import LabRun
from perfkit.collect.lab.simulate import simulate
from perfkit.collect.lab.truth import get_scenario, read_record, realise

#: What each probe process runs: argv = shared file, processes, index, steps, sleep [s].
#: Slot ``step * processes + index`` of the first half holds its arrival time, of the second half
#: its departure time [s, CLOCK_MONOTONIC]; the first step only brings the processes together.
_PROCESS = """
import mmap, os, sys, time
path, n, i, steps, sleep = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
with open(path, "r+b") as fh:
    shared = mmap.mmap(fh.fileno(), 0)
t = memoryview(shared).cast("d")
for k in range(steps):
    if k:
        time.sleep(sleep)
    t[k * n + i] = time.monotonic()
    row = range(k * n, k * n + n)
    while any(t[j] == 0.0 for j in row):
        os.sched_yield()
    t[steps * n + k * n + i] = time.monotonic()
t.release()
shared.close()
"""


class NoiseProbeError(RuntimeError):
    """A probe process failed or did not finish in time."""


def cores() -> int:
    """Cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def scheduling_noise(processes: int | None = None, *, steps: int = 21, sleep_seconds: float = 0.005,
                     timeout: float = 60) -> float:
    """The machine's scheduling noise [s per step]: the worst probe process's mean delay per step.

    ``processes`` (default: one per core) run ``steps - 1`` steps of a ``sleep_seconds`` [s] sleep
    then a barrier polled with ``sched_yield``; a delay runs from the last arrival at a barrier to
    the process's leaving it. Takes about ``steps * sleep_seconds`` plus the processes' start.
    """
    n = cores() if processes is None else processes
    if n < 1 or steps < 2:
        raise ValueError(f"need at least 1 process and 2 steps, got {n} and {steps}")
    shared_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.NamedTemporaryFile(prefix="perfkit-noise-", dir=shared_dir) as fh:
        fh.truncate(8 * 2 * steps * n)
        fh.flush()
        _probe(fh.name, n, steps, sleep_seconds, timeout)
        with mmap.mmap(fh.fileno(), 0) as shared:
            times = np.frombuffer(shared, dtype=np.float64).reshape(2, steps, n).copy()
    arrival, departure = times[0, 1:], times[1, 1:]
    delay = departure - arrival.max(axis=1, keepdims=True)
    return float(delay.mean(axis=0).max())


def _probe(path: str, processes: int, steps: int, sleep_seconds: float, timeout: float) -> None:
    """Run the probe processes on the shared file ``path``; an error when one fails or is late."""
    procs = [subprocess.Popen([sys.executable, "-I", "-S", "-c", _PROCESS, path, str(processes), str(i), str(steps),
                               repr(float(sleep_seconds))], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for i in range(processes)]
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            _, err = p.communicate(timeout=max(0.0, deadline - time.monotonic()))
            if p.returncode:
                raise NoiseProbeError(f"noise probe process exited with {p.returncode}: "
                                      f"{err.decode(errors='replace').strip()[-300:]}")
    except subprocess.TimeoutExpired:
        raise NoiseProbeError(f"noise probe of {processes} processes did not finish in {timeout} s") from None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def exchange_delay(run: LabRun) -> float:
    """How much longer the MPI calls between computes of ``run`` took than the truth's zero-cost
    model [s per step]: the worst rank's mean, over its computes after the first, of the recorded
    start minus the start the realised truth's simulation gives; NaN when the run recorded nothing."""
    record = run.path.with_suffix(".compute") if run.path is not None else None
    intervals = read_record(record, run.nprocs) if record is not None else None
    if intervals is None or not any(len(r) > 1 for r in intervals):
        return float("nan")
    simulated = simulate(realise(get_scenario(run.scenario).program(run.nprocs, dict(run.params)), intervals))
    origin = min(start for rank in intervals for start, _ in rank)
    late = [np.mean([(start - origin) - sim for (start, _), (sim, _) in zip(got[1:], sim_rank[1:])])
            for got, sim_rank in zip(intervals, simulated.compute_intervals) if len(got) > 1]
    return float(max(late))
