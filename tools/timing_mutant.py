"""Do the timing-truth tests catch a collector that mis-times by 10 %? Run them against mutants.

A mutant rescales one kind of time the collector's library measured, as ``perfkit.collect`` reads it
back (``perfkit.collect.run.read_raw``): the waits (send-late ``w_`` and collective-wait ``b_``
entries) by 1.1 or 0.9, Compute by 1.1, or every time (a clock running 10 % fast). The timing-truth
tests of the lab and the collector run once unmutated and once per mutant, each in a pytest of its
own. A mutant is caught when one of them fails; on a machine too noisy to hold the truth they skip
(saying the measured noise) and nothing is shown.

    python tools/timing_mutant.py                # the unmutated collector and every mutant
    python tools/timing_mutant.py waits+10%      # one of them
    python tools/timing_mutant.py -k "send_late_time and np2" waits+10%   # a few of the tests
    python tools/timing_mutant.py none --repeat 10 --busy 2   # the unmutated collector 10 times beside 2 busy loops

With ``--busy K`` K processes spin on the CPU while the tests run (a loaded machine): the unmutated
collector must then pass or skip for noise, never fail.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import xarray as xr

ROOT = Path(__file__).resolve().parents[1]
#: Mutant -> (what it rescales, factor).
MUTANTS: dict[str, tuple[str, float]] = {
    "none": ("waits", 1.0),
    "waits+10%": ("waits", 1.1),
    "waits-10%": ("waits", 0.9),
    "compute+10%": ("compute", 1.1),
    "clock+10%": ("clock", 1.1),
}
#: The timing-truth tests (pytest node ids and -k expression).
TESTS = ["tests/collect/test_lab_measured.py", "tests/collect/test_collector.py", "tests/analysis/test_pop_lab.py"]
SELECT = "compute_time or send_late or collective_wait or basic_mode or late_sender or pop_metrics or first_finding"


def mutate(ds: xr.Dataset, what: str, factor: float) -> xr.Dataset:
    """``ds`` (a run read by ``read_raw``) with the time [s] of ``what`` scaled by ``factor``: ``waits``
    (the ``w_`` and ``b_`` entries), ``compute`` (Compute) or ``clock`` (every entry)."""
    prof = ds["profile"]
    data = prof.values.copy()
    view = np.moveaxis(data, (prof.dims.index("function"), prof.dims.index("metric")), (-2, -1))
    t = view[..., list(prof["metric"].values).index("time")]  # (..., function), a view into data
    kinds = [str(k) for k in prof["kind"].values]
    chosen = {"waits": [k in ("wait_late_sender", "wait_collective") for k in kinds],
              "compute": [k == "compute" for k in kinds], "clock": [True] * len(kinds)}[what]
    t[..., np.array(chosen)] *= factor
    return ds.assign(profile=prof.copy(data=data))


def run_mutated(name: str, pytest_args: list[str]) -> int:
    """Run pytest in this process with the collector's output read through mutant ``name``."""
    import pytest

    import perfkit.collect.run as collect_run

    what, factor = MUTANTS[name]
    original = collect_run.read_raw
    collect_run.read_raw = lambda *a, **k: mutate(original(*a, **k), what, factor)
    return pytest.main(pytest_args)


def summary(output: str) -> dict[str, int]:
    """Counts of pytest's last summary line ('3 failed, 40 passed, 2 skipped in ...')."""
    last = [line for line in output.splitlines() if re.search(r"\d+ (passed|failed|skipped)", line)]
    return {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|error)", last[-1] if last else "")}


def run_one(name: str, select: str) -> bool:
    """Run the timing tests once through mutant ``name`` and print the outcome; whether it is as it must be
    (the unmutated collector: no failure; a mutant: caught by a failure)."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--pytest", name, *TESTS, "-k", select, "-q", "-rfs",
                           "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True)
    counts = summary(proc.stdout)
    failed = sorted(set(re.findall(r"^FAILED (\S+)", proc.stdout, re.M)))
    noise = re.findall(r"scheduling noise ([\d.]+) ms per step", proc.stdout)
    # unmutated: pytest's status 0 (no failure, no error, something collected); a mutant: a test failed
    ok = proc.returncode == 0 and counts.get("passed", 0) + counts.get("skipped", 0) > 0 if name == "none" \
        else proc.returncode == 1 and bool(failed)
    verdict = ("passes" if ok else "FAILS") if name == "none" else ("caught" if ok else "NOT caught")
    print(f"{name:12s} {verdict:10s} passed {counts.get('passed', 0):3d}  failed {counts.get('failed', 0):3d}  "
          f"skipped {counts.get('skipped', 0):3d} ({len(noise)} for noise, up to "
          f"{max(map(float, noise), default=0):.2f} ms per step)  {time.perf_counter() - t0:.0f} s  "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    for test in failed[:8]:
        print(f"    {test}")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = ", ".join(MUTANTS).replace("%", "%%")  # argparse formats help with %
    parser.add_argument("mutants", nargs="*", metavar="MUTANT", help=f"of {names} (default: all)")
    parser.add_argument("-k", dest="select", default=SELECT, help="pytest -k expression (default: every timing test)")
    parser.add_argument("--repeat", type=int, default=1, metavar="N", help="run each mutant N times (default 1)")
    parser.add_argument("--busy", type=int, default=0, metavar="K", help="K busy-loop processes beside the tests")
    parser.add_argument("--pytest", metavar="MUTANT", choices=MUTANTS, help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args(argv)
    if args.pytest:  # the test files arrive as the positional arguments, the -k expression as args.select
        return run_mutated(args.pytest, [*args.mutants, "-k", args.select, *rest])
    unknown = sorted(set(args.mutants) - set(MUTANTS))
    if unknown or rest:
        parser.error(f"unknown mutant or option: {' '.join(unknown + rest)}")
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        shown = all([run_one(name, args.select) for name in args.mutants or list(MUTANTS) for _ in range(args.repeat)])
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    return 0 if shown else 1


if __name__ == "__main__":
    sys.exit(main())
