"""Collector overhead: the lab's balanced halo exchange (1 ms compute steps) with and without the collector.

Each configuration (uninstrumented; basic; --slt; --collective-wait; --matrices; all three) is run
in this one process on the same program and parameters. A launch's wall time includes mpirun's
start-up and MPI_Init, so the time of the steps is the wall time of a run with STEPS steps minus
that of a run with no steps, the configurations interleaved, the median over REPEATS rounds; the
overhead is its ratio to the uninstrumented one's. Run: ``python benchmarks/bench_collector.py [--nprocs N]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from perfkit.collect import lab

STEPS = 2000
STEP_SECONDS = 0.001
REPEATS = 5
CONFIGS = {
    "basic": {"slt": False, "collective_wait": False, "matrices": False},
    "slt": {"slt": True, "collective_wait": False, "matrices": False},
    "collective_wait": {"slt": False, "collective_wait": True, "matrices": False},
    "matrices": {"slt": False, "collective_wait": False, "matrices": True},
    "all": {"slt": True, "collective_wait": True, "matrices": True},
}


def _wall(nprocs: int, steps: int, options: dict[str, bool] | None, workdir: Path) -> float:
    """Wall time [s] of one launch (uninstrumented when ``options`` is None)."""
    if options is None:
        run = lab.run_uninstrumented("balanced", nprocs, steps=steps, step_seconds=STEP_SECONDS)
    else:
        run = lab.run("balanced", nprocs, steps=steps, step_seconds=STEP_SECONDS, workdir=workdir, **options)
    if run.returncode != 0:
        raise RuntimeError(f"lab run failed: {getattr(run, 'message', '')}")
    return run.wall_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nprocs", type=int, default=2)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "collector.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        lab.run("balanced", args.nprocs, steps=1, step_seconds=STEP_SECONDS, workdir=work)  # build once
        configs = {"uninstrumented": None, **CONFIGS}
        samples: dict[str, list[float]] = {name: [] for name in configs}
        for _ in range(REPEATS):  # configurations interleaved, so a change of load hits them all alike
            for name, options in configs.items():
                samples[name].append(_wall(args.nprocs, STEPS, options, work) - _wall(args.nprocs, 0, options, work))
        steps_time = {name: statistics.median(values) for name, values in samples.items()}
    reference = steps_time["uninstrumented"]
    result = {
        "program": f"lab balanced halo exchange, {args.nprocs} ranks, {STEPS} steps of {STEP_SECONDS * 1e3:g} ms",
        "repeats": REPEATS,
        "steps_seconds": {k: round(v, 4) for k, v in steps_time.items()},
        "overhead_percent": {k: round(100 * (v / reference - 1), 2) for k, v in steps_time.items()
                             if k != "uninstrumented"},
    }
    print(json.dumps(result, indent=2))
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
