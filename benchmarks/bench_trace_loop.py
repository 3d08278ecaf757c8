"""The closed loop for traces: predict a faster network by replaying a trace, re-run on it, measure.

Writes ``benchmarks/results/trace_loop.json``. Each case runs the pattern-driven exchange program on the
testbed under ``perfkit collect --trace`` at a link rate, predicts the saving on links ``k`` times
faster twice — by the trace's replay (``whatif`` on the trace: each call's own time scaled by ``1/k``)
and by the profile model (``whatif`` on the profile of the same run, with its interval) — then re-runs on
a testbed at ``k`` times the rate and measures the saving. Savings are of the parallel region (POP's
elapsed: from the end of ``MPI_Init`` to ``MPI_Finalize``), each side the median of ``--runs`` runs.

Run as root: ``python benchmarks/bench_trace_loop.py [--runs 3] [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import perfkit  # noqa: E402
from perfkit.analysis.pop import pop_metrics  # noqa: E402
from perfkit.collect.lab import patterns  # noqa: E402
from perfkit.collect.lab.build import exchange_binary  # noqa: E402
from perfkit.collect.launch import mpirun_command  # noqa: E402
from perfkit.collect.testbed import Testbed  # noqa: E402
from perfkit.collect.testbed.collector import collect_on  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "trace_loop.json"
STEPS, COMPUTE_S = 15, 0.02
#: (pattern, nodes, cores, link rate [bit/s], message size [B], k)
CASES = [
    ("stencil2d-natural", 4, 2, 50e6, 64 * 1024, 4.0),
    ("ring-shuffled", 4, 2, 50e6, 128 * 1024, 2.0),
    ("stencil2d-natural", 4, 2, 20e6, 32 * 1024, 8.0),
]


def _pattern(name: str, nranks: int, size: int):
    make = {"stencil2d-natural": lambda: patterns.stencil((2, nranks // 2), 1),
            "ring-shuffled": lambda: patterns.shuffled(patterns.ring(nranks, 1), seed=3)}
    return make[name]() * size


def _runs(tb: Testbed, launch: list[str], work: Path, tag: str, runs: int) -> tuple[list[float], Path]:
    """Parallel-region elapsed [s] of each of ``runs`` traced runs, and the trace of the median one."""
    collect = collect_on(tb)
    found = []
    for i in range(runs):
        out = work / f"{tag}-{i}.mpinside"
        result = collect(launch, out, matrices=True, trace=True, timeout=600, overwrite=True)
        if result.output is None or result.trace is None:
            raise RuntimeError(f"{tag} run {i}: {result.message[-2000:]}")
        found.append((float(pop_metrics(perfkit.open_profile(result.trace))["elapsed"].isel(run=0)), out))
    found.sort()
    return [t for t, _ in found], found[(runs - 1) // 2][1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="the first case only")
    args = parser.parse_args()
    rows = []
    work = Path(tempfile.mkdtemp(prefix="perfkit-trace-loop-"))
    for i, (name, nodes, cores, rate, size, k) in enumerate(CASES[: 1 if args.quick else None]):
        nranks = nodes * cores
        pattern = patterns.write_pattern(_pattern(name, nranks, size), work / f"p{i}.txt")
        launch = mpirun_command(nranks, [str(exchange_binary()), str(pattern), f"steps={STEPS}", f"step={COMPUTE_S}"])
        load = os.getloadavg()[0]
        with Testbed(nodes, cores, bandwidth=rate) as tb:
            before_all, before = _runs(tb, launch, work, f"c{i}-before", args.runs)
        with Testbed(nodes, cores, bandwidth=rate * k) as tb:
            after_all, _ = _runs(tb, launch, work, f"c{i}-after", args.runs)
        trace = perfkit.open_profile(f"{before}.otf2")
        replayed = perfkit.whatif(trace, "network", k).isel(run=0)
        modelled = perfkit.whatif(perfkit.open_profile(before), "network", k).isel(run=0)
        elapsed = statistics.median(before_all)
        measured = elapsed - statistics.median(after_all)
        replay_1 = float(trace["replay_network"].isel(run=0).sel(transfer_scale=1.0))

        def interval(w):
            e = float(w["elapsed_before"])
            return [e - e / float(w["speedup_low"]), e - e / float(w["speedup_high"])]

        row = {"case": f"{name} {nodes}x{cores} {rate / 1e6:g} Mbit/s network x{k:g}", "k": k,
               "message_bytes": size, "load_average": load, "elapsed_before_s": elapsed,
               "elapsed_before_all": before_all, "elapsed_after_all": after_all,
               "replay_as_measured_s": replay_1, "replay_error_pct": 100 * (replay_1 / elapsed - 1),
               "saving_measured_s": measured,
               "saving_replayed_s": float(replayed["saving"]), "saving_replayed_range_s": interval(replayed),
               "saving_modelled_s": float(modelled["saving"]), "saving_modelled_range_s": interval(modelled),
               "replayed_error_pct_of_elapsed": 100 * (float(replayed["saving"]) - measured) / elapsed,
               "modelled_error_pct_of_elapsed": 100 * (float(modelled["saving"]) - measured) / elapsed}
        rows.append(row)
        print(json.dumps(row), flush=True)
    RESULTS.write_text(json.dumps({"steps": STEPS, "compute_s": COMPUTE_S, "runs": args.runs, "rows": rows},
                                  indent=1) + "\n")


if __name__ == "__main__":
    main()
