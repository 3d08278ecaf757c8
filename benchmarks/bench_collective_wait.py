"""What ``--collective-wait`` costs a collective-heavy loop on the testbed.

The lab's exchange program (a shuffled 2-D halo exchange of small messages, then ``--allreduce`` 8-byte
``MPI_Allreduce`` calls, every step after ``--step`` of sleep) on 8 emulated nodes of 2 cores at
200 Mbit/s, run uninstrumented, under the collector in basic mode and with ``--collective-wait``; the
configurations alternate, their order rotated each round. Reports the program's own loop time (median
of the rounds) and the overhead of each configuration against the uninstrumented run, and the
collective wait the profile found. Writes ``results/collective_wait.json`` (``--out``).

Needs root (the testbed) and Open MPI. Run: ``python benchmarks/bench_collective_wait.py [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

RESULTS = Path(__file__).with_name("results")
NODES, CORES, BANDWIDTH = 8, 2, "200mbit"
CONFIGS = {"uninstrumented": None, "basic": [], "collective_wait": ["--collective-wait"]}


def _once(tb, exe: str, pattern: Path, config: str, args: argparse.Namespace, work: Path) -> dict:
    program = [exe, str(pattern), f"steps={args.steps}", f"step={args.step}", f"allreduce={args.allreduce}"]
    launch = ["mpirun", "-np", str(NODES * CORES), *program]
    out = work / f"{config}.mpinside"
    options = CONFIGS[config]
    command = launch if options is None else [str(Path(sys.executable).with_name("perfkit")), "collect", *options,
                                              "-o", str(out), "--", *launch]
    log = work / "run.out"
    with open(log, "w") as fh:
        report = tb.run(command, timeout=600, stdout=fh)
    text = log.read_text()
    loop = re.search(r"^exchange: loop_s ([0-9.]+)$", text, re.M)
    if report["exit_status"] != 0 or not loop:
        raise RuntimeError(f"{config}: the run failed (status {report['exit_status']})\n{text[-2000:]}")
    row = {"loop_s": float(loop.group(1)), "load_1min": round(os.getloadavg()[0], 2)}
    if config == "collective_wait":
        import perfkit

        ds = perfkit.open_profile(out)
        t = ds["profile"].isel(run=0).sel(metric="time")
        waits = t.isel(function=(ds["kind"] == "wait_collective").values).sum("function")
        row["collective_wait_max_s"] = float(waits.max())
        row["allreduce_s_max"] = float(t.sel(function="MPI_Allreduce").max())
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--step", type=float, default=0.01, help="sleep per step [s]")
    parser.add_argument("--allreduce", type=int, default=2, help="8-byte allreduces per step")
    parser.add_argument("--halo", type=int, default=20_000, help="bytes per halo message")
    parser.add_argument("--out", default=str(RESULTS / "collective_wait.json"))
    args = parser.parse_args()
    from perfkit.collect.lab import patterns
    from perfkit.collect.lab.build import exchange_binary
    from perfkit.collect.testbed import Testbed, why_unavailable

    why = why_unavailable()
    if why:
        print(f"skipped: {why}")
        return 0
    samples: dict[str, list[dict]] = {c: [] for c in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        pattern = patterns.write_pattern(patterns.shuffled(patterns.stencil((4, 4), args.halo), seed=1),
                                         work / "pattern.txt")
        exe = str(exchange_binary())
        with Testbed(NODES, CORES, bandwidth=BANDWIDTH) as tb:
            _once(tb, exe, pattern, "basic", argparse.Namespace(**{**vars(args), "steps": 1}), work)  # build
            names = list(CONFIGS)
            for r in range(args.rounds):
                for config in names[r % len(names):] + names[:r % len(names)]:
                    row = _once(tb, exe, pattern, config, args, work)
                    samples[config].append(row)
                    print(f"round {r} {config:16s} {json.dumps(row)}", flush=True)
    loop = {c: statistics.median(s["loop_s"] for s in rows) for c, rows in samples.items()}
    result = {
        "program": f"lab exchange: shuffled 2-D stencil (4x4) of {args.halo} B halos, then {args.allreduce} "
                   f"8-byte MPI_Allreduce, {args.steps} steps of {args.step * 1e3:g} ms sleep",
        "testbed": {"nodes": NODES, "cores": CORES, "bandwidth": BANDWIDTH}, "rounds": args.rounds,
        "loop_s_median": loop,
        "overhead_percent": {c: round(100 * (v / loop["uninstrumented"] - 1), 1) for c, v in loop.items()
                             if c != "uninstrumented"},
        "runs": samples}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
