"""The closed loop in numbers: predictions against their re-runs on the testbed.

A grid of cases (communication patterns: 2-D and 3-D stencils with shuffled and natural numbering, a
ring, a sparse random pattern, an all-to-all; 4-16 nodes of 1-2 cores; 20-200 Mbit/s links; with and
without leaf switches; block, round-robin and Scotch placement; links k times faster; the lab's static
imbalance balanced). Each case
profiles a run of the lab's exchange program under the collector, predicts, re-runs and measures:
inter-node bytes by the kernel's link counters, elapsed time by the profile (end of MPI_Init to start
of MPI_Finalize). Every profile and re-run is run ``--runs`` times (3) and the median run used, on both
sides of the comparison. Writes ``results/closed_loop.json`` and prints the table docs/placement.md quotes.

``--busy`` runs the grid of programs that compute instead (``BUSY``): the exchange with a CPU spin for
compute (``tests/placement/programs/spin_compute.c``; rank 0 optionally several times the work of the
others) on more ranks than this machine's cores, undilated (the ranks wait for cores) and dilated; the
profile and every re-run by rankfile, alternated (``tests.placement.busy_support.busy_loop``); each row
holds the prediction with the CPU evidence and the one the model made without it. Writes
``results/closed_loop_busy.json``.

Needs root (the testbed) and Open MPI. Run: ``python benchmarks/bench_closed_loop.py [--quick] [--busy]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfkit.collect.lab import patterns  # noqa: E402
from perfkit.collect.lab.build import exchange_binary  # noqa: E402
from perfkit.collect.testbed import why_unavailable  # noqa: E402
from perfkit.collect.testbed.loop import balance, faster_network, place_and_rerun  # noqa: E402
from tests.placement.busy_support import busy_exchange_binary, busy_loop  # noqa: E402

RESULTS = Path(__file__).with_name("results") / "closed_loop.json"
BUSY_RESULTS = RESULTS.with_name("closed_loop_busy.json")
STEP_NETWORK_S = 0.08  # the busiest link's time per step under block placement at the link rate [s]
STEPS, COMPUTE_S = 15, 0.02


def _pattern(name: str, nranks: int) -> np.ndarray:
    dims2 = {8: (2, 4), 16: (4, 4), 32: (4, 8)}[nranks]
    dims3 = {8: (2, 2, 2), 16: (2, 2, 4), 32: (2, 4, 4)}[nranks]
    make = {
        "stencil2d-shuffled": lambda: patterns.shuffled(patterns.stencil(dims2, 1), seed=1),
        "stencil2d-natural": lambda: patterns.stencil(dims2, 1),
        "stencil3d-shuffled": lambda: patterns.shuffled(patterns.stencil(dims3, 1), seed=2),
        "ring-shuffled": lambda: patterns.shuffled(patterns.ring(nranks, 1), seed=3),
        "ring-natural": lambda: patterns.ring(nranks, 1),
        "sparse-random": lambda: patterns.sparse_random(nranks, 3, 1, seed=4),
        "alltoall": lambda: patterns.alltoall(nranks, 1),
    }
    return make[name]()


def _scaled(pattern: np.ndarray, cores: int, rate_bit_s: float, step_s: float = STEP_NETWORK_S) -> np.ndarray:
    """The pattern with a message size that keeps the busiest node link busy ``step_s`` per step (block)."""
    node = np.arange(pattern.shape[0]) // cores
    cross = node[:, None] != node[None, :]
    per_node = max(np.bincount(node, weights=(pattern * cross).sum(1)).max(),
                   np.bincount(node, weights=(pattern * cross).sum(0)).max())
    size = int(rate_bit_s / 8 * step_s / max(per_node, 1))
    return pattern * max(size, 1024)


PLACEMENTS = [  # (pattern, nodes, cores, rate, switch size, strategies)
    ("stencil2d-shuffled", 8, 2, 200e6, None, ("scotch", "round_robin")),
    ("stencil2d-natural", 8, 2, 200e6, None, ("scotch", "round_robin")),
    ("stencil3d-shuffled", 8, 2, 200e6, None, ("scotch", "round_robin")),
    ("ring-shuffled", 8, 2, 100e6, None, ("scotch", "round_robin")),
    ("sparse-random", 8, 2, 100e6, None, ("scotch", "round_robin")),
    ("alltoall", 8, 2, 200e6, None, ("scotch",)),
    ("stencil2d-shuffled", 8, 2, 50e6, 4, ("scotch", "round_robin", "block")),
    ("stencil3d-shuffled", 8, 2, 50e6, 4, ("scotch",)),
    ("sparse-random", 8, 2, 50e6, 4, ("scotch",)),
    ("stencil2d-shuffled", 4, 2, 20e6, None, ("scotch", "round_robin")),
    ("ring-shuffled", 4, 2, 20e6, None, ("scotch",)),
    ("stencil2d-shuffled", 16, 1, 100e6, None, ("scotch", "round_robin")),
    ("sparse-random", 16, 1, 100e6, None, ("scotch",)),
    ("stencil2d-shuffled", 16, 2, 200e6, 4, ("scotch", "round_robin")),
]
NETWORKS = [  # (pattern, nodes, cores, rate, switch size, k)
    ("stencil2d-shuffled", 8, 2, 50e6, None, 4.0),
    ("sparse-random", 8, 2, 50e6, None, 2.0),
    ("stencil2d-natural", 4, 2, 20e6, None, 10.0),
    ("stencil3d-shuffled", 16, 1, 50e6, None, 4.0),
]

BUSY_STEPS, BUSY_NETWORK_S = 10, 0.03  # steps; the busiest link's time per step under block placement [s]
BUSY = [  # (pattern, nodes, cores, rate, rank 0's work / the others', CPU work per step [s], dilation, strategies)
    ("ring-natural", 4, 2, 200e6, 8, 0.01, 1, ("round_robin", "scotch")),
    ("stencil2d-shuffled", 4, 2, 200e6, 4, 0.02, 1, ("round_robin", "scotch")),
    ("stencil2d-natural", 4, 2, 200e6, 1, 0.02, 1, ("round_robin", "scotch")),
    ("ring-natural", 4, 2, 200e6, 1, 0.02, 1, ("round_robin", "scotch")),
    ("sparse-random", 4, 2, 100e6, 4, 0.02, 1, ("round_robin", "scotch")),
    ("stencil3d-shuffled", 4, 2, 200e6, 8, 0.01, 1, ("round_robin", "scotch")),
    ("stencil2d-shuffled", 4, 2, 200e6, 1, 0.05, 1, ("round_robin", "scotch")),
    ("alltoall", 4, 2, 200e6, 4, 0.02, 1, ("round_robin",)),
    ("ring-shuffled", 8, 1, 100e6, 8, 0.01, 1, ("scotch", "random")),
    ("stencil2d-shuffled", 8, 1, 100e6, 4, 0.02, 1, ("scotch", "random")),
    ("ring-natural", 8, 2, 200e6, 8, 0.005, 1, ("round_robin", "scotch")),
    ("stencil2d-shuffled", 8, 2, 200e6, 1, 0.01, 1, ("round_robin", "scotch")),
    ("ring-natural", 4, 2, 200e6, 8, 0.01, "auto", ("round_robin", "scotch")),
    ("stencil2d-shuffled", 4, 2, 200e6, 4, 0.02, "auto", ("round_robin", "scotch")),
    ("stencil2d-natural", 4, 2, 200e6, 1, 0.02, "auto", ("round_robin", "scotch")),
    ("sparse-random", 4, 2, 100e6, 4, 0.02, "auto", ("round_robin", "scotch")),
]

BALANCES = [  # (nodes, cores, late rank's extra compute per step [s])
    (4, 2, 0.03),
    (8, 1, 0.02),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the first two placement rows and one network row")
    parser.add_argument("--keep", help="folder to keep the profiles in (default: a temporary one)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="re-runs of one case, nothing changed, for the run-to-run spread (default 5)")
    parser.add_argument("--runs", type=int, default=3,
                        help="runs of every profile and re-run, the median one used (default 3)")
    parser.add_argument("--busy", action="store_true", help="the grid of programs that compute (BUSY) instead")
    parser.add_argument("--cases", type=int, help="with --busy: only the first CASES entries of BUSY")
    args = parser.parse_args()
    why = why_unavailable()
    if why:
        print(f"skipped: {why}")
        return 0
    if args.busy:
        return busy(BUSY[: args.cases], Path(args.keep or tempfile.mkdtemp(prefix="perfkit-bench-busy-")), args.runs)
    exe = str(exchange_binary())
    work = Path(args.keep or tempfile.mkdtemp(prefix="perfkit-bench-loop-"))
    work.mkdir(parents=True, exist_ok=True)
    placements, networks = (PLACEMENTS[:2], NETWORKS[:1]) if args.quick else (PLACEMENTS, NETWORKS)
    rows = []
    started = time.time()
    spread = repeatability(exe, work / "repeat", args.repeats)
    print(f"run-to-run spread of {args.repeats} unchanged re-runs: {json.dumps(spread)}", flush=True)
    for i, (name, nodes, cores, rate, switch, strategies) in enumerate(placements):
        pattern = _scaled(_pattern(name, nodes * cores), cores, rate)
        file = patterns.write_pattern(pattern, work / f"p{i}.txt")
        load = os.getloadavg()[0]
        for row in place_and_rerun([exe, str(file), f"steps={STEPS}", f"step={COMPUTE_S}"], nodes=nodes,
                                   cores=cores, bandwidth=rate, strategies=strategies, switch_size=switch,
                                   workdir=work / f"p{i}", repeats=args.runs):
            leaf = f" K={switch}" if switch else ""
            rows.append({"case": f"{name} {nodes}x{cores} {rate / 1e6:g}Mbit/s{leaf} {row['strategy']}",
                         "pattern": name, "load_average": load, **row})
            _print(rows[-1])
    for i, (name, nodes, cores, rate, switch, k) in enumerate(networks):
        pattern = _scaled(_pattern(name, nodes * cores), cores, rate)
        file = patterns.write_pattern(pattern, work / f"n{i}.txt")
        load = os.getloadavg()[0]
        row = faster_network([exe, str(file), f"steps={STEPS}", f"step={COMPUTE_S}"], nodes=nodes, cores=cores,
                             bandwidth=rate, k=k, switch_size=switch, workdir=work / f"n{i}", repeats=args.runs)
        rows.append({"case": f"{name} {nodes}x{cores} {rate / 1e6:g}Mbit/s network x{k:g}", "pattern": name,
                     "strategy": f"network x{k:g}", "load_average": load, **row})
        _print(rows[-1])
    for i, (nodes, cores, extra) in enumerate(BALANCES[: 1 if args.quick else None]):
        load = os.getloadavg()[0]
        row = balance(nodes=nodes, cores=cores, extra_s=extra, workdir=work / f"b{i}", repeats=args.runs)
        rows.append({"case": f"static imbalance {nodes}x{cores} +{extra * 1e3:g} ms balanced", "pattern": "lab halo",
                     "load_average": load, **row})
        _print(rows[-1])
    summary = _summary(rows)
    summary["wall_s"] = time.time() - started
    summary["repeatability"] = spread
    summary["runs_per_measurement"] = args.runs
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"summary": summary, "rows": rows, "steps": STEPS, "compute_s": COMPUTE_S,
                                   "step_network_s": STEP_NETWORK_S}, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    print(table(rows))
    return 0


def busy(cases: list[tuple], work: Path, runs: int) -> int:
    """The BUSY grid: rows of predicted (with and without the CPU evidence) against measured, to BUSY_RESULTS."""
    rows, started = [], time.time()
    for i, (name, nodes, cores, rate, late, step, dilation, strategies) in enumerate(cases):
        folder = work / f"busy{i}"
        folder.mkdir(parents=True, exist_ok=True)
        pattern = _scaled(_pattern(name, nodes * cores), cores, rate, BUSY_NETWORK_S)
        program = [str(busy_exchange_binary(late_factor=float(late))),
                   str(patterns.write_pattern(pattern, folder / "pattern.txt")), f"steps={BUSY_STEPS}", f"step={step}"]
        load = os.getloadavg()[0]
        for row in busy_loop(program, pattern, nodes=nodes, cores=cores, bandwidth=rate, strategies=strategies,
                             work=folder, repeats=runs, dilation=dilation):
            p, old = row.pop("prediction"), row.pop("prediction_without_cpu")
            row.pop("runs")
            rows.append({"case": f"{name} {nodes}x{cores} {rate / 1e6:g}Mbit/s rank0 x{late:g} {step * 1e3:g} ms "
                                 f"k={row['dilation']:.2f} {row['strategy']}", "pattern": name, "load_average": load,
                         "late_factor": late, "cpu_step_s": step, **row, "prediction": p.as_dict(),
                         "prediction_without_cpu": old.as_dict()})
            _print(rows[-1])
    summary = _summary(rows)
    errors = [abs(r["without_cpu_error_pct"]) for r in rows]
    inside = [bool(r["without_cpu_low"] <= r["elapsed_measured"] <= r["without_cpu_high"]) for r in rows]
    summary.update(wall_s=time.time() - started, runs_per_measurement=runs, without_cpu_in_interval=sum(inside),
                   without_cpu_median_abs_error_pct=statistics.median(errors),
                   without_cpu_max_abs_error_pct=max(errors))
    BUSY_RESULTS.parent.mkdir(exist_ok=True)
    BUSY_RESULTS.write_text(json.dumps({"summary": summary, "rows": rows, "steps": BUSY_STEPS,
                                        "step_network_s": BUSY_NETWORK_S}, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    print(busy_table(rows))
    return 0


def busy_table(rows: list[dict]) -> str:
    """Markdown: one line per busy case, with the prediction the model made without the CPU evidence."""
    lines = ["| case | elapsed before | predicted [interval] | measured | error | in | without CPU: predicted "
             "[interval], error |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['elapsed_before_measured']:.2f} s | {r['elapsed_predicted']:.2f} s "
                     f"[{r['elapsed_low']:.2f}, {r['elapsed_high']:.2f}] | {r['elapsed_measured']:.2f} s | "
                     f"{r['elapsed_error_pct']:+.1f}% | {'yes' if r['in_interval'] else 'no'} | "
                     f"{r['without_cpu_predicted']:.2f} s [{r['without_cpu_low']:.2f}, {r['without_cpu_high']:.2f}], "
                     f"{r['without_cpu_error_pct']:+.1f}% |")
    return "\n".join(lines)


def repeatability(exe: str, work: Path, repeats: int) -> dict:
    """Elapsed time of one case (the first placement row, block placement) re-run ``repeats`` times:
    the spread an interval must allow for when nothing changes."""
    from perfkit.collect.testbed import Testbed
    from perfkit.collect.testbed.loop import mpi_launch, profiled_run

    name, nodes, cores, rate, switch, _ = PLACEMENTS[0]
    work.mkdir(parents=True, exist_ok=True)
    file = patterns.write_pattern(_scaled(_pattern(name, nodes * cores), cores, rate), work / "pattern.txt")
    with Testbed(nodes, cores, bandwidth=rate, switch_size=switch) as tb:
        times = [profiled_run(tb, mpi_launch("openmpi", nodes * cores, [exe, str(file), f"steps={STEPS}",
                                                                      f"step={COMPUTE_S}"]),
                               work / f"run{i}.mpinside", 600)["elapsed"] for i in range(repeats)]
    median = statistics.median(times)
    return {"case": f"{name} {nodes}x{cores} {rate / 1e6:g}Mbit/s block", "elapsed_s": times,
            "largest_deviation_from_median": max(abs(t / median - 1) for t in times),
            "load_average": os.getloadavg()[0]}


def _print(row: dict) -> None:
    print(f"{row['case']:55s} bytes {row['bytes_error_pct']:+6.2f}%  elapsed pred {row['elapsed_predicted']:.3f} "
          f"[{row['elapsed_low']:.3f}, {row['elapsed_high']:.3f}] meas {row['elapsed_measured']:.3f} "
          f"({row['elapsed_error_pct']:+.1f}%) {'in' if row['in_interval'] else 'OUT'}", flush=True)


def _summary(rows: list[dict]) -> dict:
    errors = [abs(r["elapsed_error_pct"]) for r in rows]
    return {"cases": len(rows), "bytes_within_3pct": sum(abs(r["bytes_error_pct"]) <= 3 for r in rows),
            "bytes_max_error_pct": max(abs(r["bytes_error_pct"]) for r in rows),
            "elapsed_in_interval": sum(r["in_interval"] for r in rows),
            "elapsed_median_abs_error_pct": statistics.median(errors), "elapsed_max_abs_error_pct": max(errors),
            "interval_median_width_pct": statistics.median(_width(r) for r in rows),
            "load_average_median": statistics.median(r["load_average"] for r in rows)}


def _width(row: dict) -> float:
    """The interval's width relative to the point prediction [%]."""
    return 100 * (row["elapsed_high"] - row["elapsed_low"]) / row["elapsed_predicted"]


def table(rows: list[dict]) -> str:
    """Markdown: one line per case."""
    lines = ["| case | inter-node bytes predicted / measured | error | elapsed before | predicted [interval] | "
             "measured | error | in interval | width |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['bytes_predicted'] / 1e6:.1f} MB / {r['bytes_measured'] / 1e6:.1f} MB | "
                     f"{r['bytes_error_pct']:+.2f}% | {r['elapsed_before_measured']:.2f} s | "
                     f"{r['elapsed_predicted']:.2f} s [{r['elapsed_low']:.2f}, {r['elapsed_high']:.2f}] | "
                     f"{r['elapsed_measured']:.2f} s | {r['elapsed_error_pct']:+.1f}% | "
                     f"{'yes' if r['in_interval'] else 'no'} | {_width(r):.0f}% |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
