"""``perfkit testbed``: run a command on an emulated cluster and report what crossed its links."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

EPILOG = """\
The command follows '--' and runs on node000 with the environment set so that Open MPI's mpirun
and MPICH's mpiexec.hydra start ranks across the nodes (a launch agent that enters each node's
namespaces, a host file with CORES slots per node, messages between nodes over each node's shaped
link). Its output passes through; the exit status is the command's. Needs root.

examples:
  perfkit testbed --nodes 4 --cores 2 -- mpirun -np 8 ./app
  perfkit testbed --nodes 8 --cores 2 --bandwidth 200mbit --latency 50us --report tb.json -- \\
      perfkit collect -o run.mpinside --matrices -- mpirun -np 16 ./app
  perfkit testbed --nodes 8 --cores 2 --switch-size 4 -- mpirun -np 16 --rankfile ranks.txt ./app
  perfkit testbed --nodes 4 --cores 2 -- mpiexec.hydra -n 8 ./app            (MPICH)
  perfkit testbed --nodes 8 --cores 2 --dilation auto --report tb.json -- mpirun -np 16 ./app

Time dilation k (--dilation): each node computes on CORES / k of this machine's cores (a CPU quota)
and its link runs at RATE / k, so the emulated cluster is the real one k times slower; the report
gives wall_s (measured) and cluster_s = wall_s / k. Default: auto when NODES x CORES exceeds this
machine's cores (the smallest k at which they fit), else 1.
See docs/testbed.md.
"""


def _strategy(name: str) -> str:
    """A placement strategy's name, checked before anything runs (an unknown one is a usage error)."""
    from perfkit.placement.strategies import STRATEGIES

    if name not in STRATEGIES:
        raise argparse.ArgumentTypeError(f"unknown strategy {name!r}; expected one of {', '.join(STRATEGIES)}")
    return name


def _positive_int(text: str) -> int:
    """A count option's value: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number of at least 1")
    return value


def configure(parser: argparse.ArgumentParser) -> None:
    """Options of ``perfkit testbed``."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.usage = ("perfkit testbed --nodes N --cores C [--bandwidth RATE] [--latency L] [--switch-size K] "
                    "[--uplink RATE] [--clock-skew S] [--dilation auto|K] [--report FILE] -- COMMAND...")
    parser.add_argument("--nodes", type=_positive_int, required=True,
                        help="number of emulated nodes (node000, node001, ...)")
    parser.add_argument("--cores", type=_positive_int, required=True, help="cores (MPI slots) per node")
    parser.add_argument("--bandwidth", default="200mbit", metavar="RATE",
                        help="each node's link rate, both ways (default 200mbit; e.g. 20mbit, 1gbit)")
    parser.add_argument("--latency", default="0", metavar="L",
                        help="one-way latency node to node (default 0; e.g. 50us, 1ms)")
    parser.add_argument("--switch-size", type=_positive_int, default=None, metavar="K",
                        help="nodes per leaf switch (default: all nodes on one switch)")
    parser.add_argument("--uplink", default=None, metavar="RATE",
                        help="each leaf switch's uplink rate (default: --bandwidth)")
    parser.add_argument("--clock-skew", type=_skew, default=0, metavar="S",
                        help="node i's monotonic clock reads i x S whole seconds ahead (default 0: one clock), "
                             "as unsynchronised nodes' clocks do; 0 to 3600")
    _dilation_option(parser)
    parser.add_argument("--report", default=None, metavar="FILE",
                        help="write JSON: parameters, exit_status, wall_s, dilation, cluster_s, and per node the "
                             "link's bytes and packets and the CPU quota's throttling")
    parser.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="stop the command after S seconds (exit status 124)")
    parser.add_argument("launch", nargs=argparse.REMAINDER, metavar="COMMAND", help="the command, after '--'")


def _dilation_option(parser: argparse.ArgumentParser) -> None:
    """``--dilation auto|K``, shared by ``perfkit testbed`` and ``perfkit loop``."""
    parser.add_argument("--dilation", type=_dilation, default=None, metavar="auto|K",
                        help="run the emulated cluster K times slower: each node's CPU quota CORES / K of this "
                             "machine's cores, links at RATE / K (default: auto when NODES x CORES exceeds this "
                             "machine's cores, else 1)")


def _dilation(text: str) -> str | float:
    """``--dilation``: ``auto`` or a factor from 1 to 1000."""
    if text == "auto":
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected 'auto' or a factor from 1 to 1000") from None
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r}: expected 'auto' or a factor from 1 to 1000")
    return value


def _skew(text: str) -> int:
    """``--clock-skew``: whole seconds, 0 to 3600."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected whole seconds") from None
    if not 0 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r}: expected 0 to 3600 s")
    return value


def run(args: argparse.Namespace) -> int:
    """Build the testbed, run the command on node000, write the report, tear everything down."""
    from perfkit.collect.testbed import Testbed, why_unavailable

    command = args.launch[1:] if args.launch[:1] == ["--"] else args.launch
    if not command:
        raise ValueError("nothing to run: give the command after '--', e.g. -- mpirun -np 8 ./app")
    if args.timeout is not None and not args.timeout > 0:
        raise ValueError(f"--timeout {args.timeout:g}: expected a positive number of seconds")
    report = Path(args.report) if args.report else None
    if report is not None and (report.is_dir() or not report.parent.exists()):
        raise ValueError(f"--report {report}: expected a file in an existing folder")
    why = why_unavailable()
    if why:
        raise RuntimeError(why)
    try:
        with Testbed(args.nodes, args.cores, bandwidth=args.bandwidth, latency=args.latency,
                     switch_size=args.switch_size, uplink=args.uplink, clock_skew=args.clock_skew,
                     dilation=args.dilation) as testbed:
            for note in testbed.notes:
                print(f"perfkit testbed: {note}", file=sys.stderr)
            result = testbed.run(command, timeout=args.timeout)
    except KeyboardInterrupt as exc:
        return _stopped("testbed", exc)
    if report is not None:
        tmp = report.with_name(f".{report.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(result, indent=2) + "\n")
        os.replace(tmp, report)
    return result["exit_status"]


LOOP_EPILOG = """\
The program follows '--' without its launcher (mpirun or mpiexec.hydra is added, with the launch
file for the re-run). It is profiled under block placement on a testbed, placed with STRATEGY, the
re-run predicted (inter-node bytes, elapsed time with an interval), re-run with the launch file and
measured. DIR receives the profiles, launch files and loop.json (predicted against measured). Root only.
On a dilated testbed (--dilation K; default auto when NODES x CORES exceeds this machine's cores)
every time in loop.json is the testbed's, K times the cluster's, and the prediction is made for links
at RATE / K, the rate they run at: predicted and measured are compared in one time frame.

example:
  perfkit loop --nodes 8 --cores 2 --bandwidth 200mbit --strategy scotch round_robin -o loop/ -- \\
      ./app input.txt
"""


def configure_loop(parser: argparse.ArgumentParser) -> None:
    """Options of ``perfkit loop``."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = LOOP_EPILOG
    parser.add_argument("--nodes", type=_positive_int, required=True, help="emulated nodes")
    parser.add_argument("--cores", type=_positive_int, required=True, help="cores (ranks) per node")
    parser.add_argument("--bandwidth", default="200mbit", metavar="RATE",
                        help="each node's link rate (default 200mbit)")
    parser.add_argument("--switch-size", type=_positive_int, default=None, metavar="K", help="nodes per leaf switch")
    parser.add_argument("--strategy", nargs="+", default=["scotch"], type=_strategy,
                        help="placement strategies to try (default scotch): block, round_robin, random, scotch, "
                             "scotch_nodes")
    parser.add_argument("--mpi", choices=("openmpi", "mpich"), default="openmpi", help="launcher (default openmpi)")
    _dilation_option(parser)
    parser.add_argument("-o", "--output", required=True, metavar="DIR", help="folder for profiles and loop.json")
    parser.add_argument("--timeout", type=float, default=600.0, metavar="S", help="time limit per run [s]")
    parser.add_argument("--runs", type=_positive_int, default=1, metavar="R",
                        help="run the profile and every re-run R times and use the median run of each "
                             "(default 1; 3 keeps one noisy run from deciding)")
    parser.add_argument("launch", nargs=argparse.REMAINDER, metavar="PROGRAM", help="the program, after '--'")



def run_loop(args: argparse.Namespace) -> int:
    """Profile, place, predict, re-run, measure; print and write predicted against measured."""
    from perfkit.collect.testbed import why_unavailable
    from perfkit.collect.testbed.loop import place_and_rerun

    program = args.launch[1:] if args.launch[:1] == ["--"] else args.launch
    if not program:
        raise ValueError("nothing to run: give the program after '--', e.g. -- ./app input.txt")
    why = why_unavailable()
    if why:
        raise RuntimeError(why)
    out = Path(args.output)
    if out.exists() and not out.is_dir():
        raise ValueError(f"-o {out}: expected a folder")
    try:
        rows = place_and_rerun(program, nodes=args.nodes, cores=args.cores, bandwidth=args.bandwidth,
                               strategies=args.strategy, switch_size=args.switch_size, mpi=args.mpi, workdir=out,
                               timeout=args.timeout, repeats=args.runs, dilation=args.dilation)
    except KeyboardInterrupt as exc:
        return _stopped("loop", exc)
    (out / "loop.json").write_text(json.dumps(rows, indent=1) + "\n")
    if rows and rows[0]["dilation"] > 1:
        print(f"times are the testbed's, dilated {rows[0]['dilation']:g}x (links at "
              f"{rows[0]['link_bit_s'] / 1e6:.4g} Mbit/s): cluster time = time / {rows[0]['dilation']:g}")
    for r in rows:
        print(f"{r['strategy']}: inter-node bytes predicted {r['bytes_predicted'] / 1e6:.2f} MB, measured "
              f"{r['bytes_measured'] / 1e6:.2f} MB ({r['bytes_error_pct']:+.2f}%); elapsed "
              f"{r['elapsed_before_measured']:.3f} s before, predicted {r['elapsed_predicted']:.3f} s "
              f"[{r['elapsed_low']:.3f}, {r['elapsed_high']:.3f}], "
              f"measured {r['elapsed_measured']:.3f} s ({r['elapsed_error_pct']:+.1f}%, "
              f"{'inside' if r['in_interval'] else 'OUTSIDE'} the interval)")
    return 0


def _stopped(command: str, exc: KeyboardInterrupt) -> int:
    """Say which signal stopped ``perfkit COMMAND`` and return its conventional exit status."""
    name = str(exc) or "SIGINT"
    print(f"perfkit {command}: stopped by {name}; every node removed", file=sys.stderr)
    return {"SIGTERM": 143, "SIGHUP": 129}.get(name, 130)
