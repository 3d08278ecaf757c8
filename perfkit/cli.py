"""The ``perfkit`` command line: one subcommand per capability, for batch use.

Subcommands are registered with ``@command(name, help)`` on a function that receives the
subparser to configure and returns the function that runs the command (it gets the parsed
arguments and returns an exit status). Heavy imports belong inside the run function so that
``perfkit --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

Runner = Callable[[argparse.Namespace], int]
Configure = Callable[[argparse.ArgumentParser], Runner]

_COMMANDS: dict[str, tuple[str, Configure]] = {}


def command(name: str, help: str) -> Callable[[Configure], Configure]:
    """Register a subcommand: ``configure(parser) -> run(args) -> exit status``."""

    def register(configure: Configure) -> Configure:
        _COMMANDS[name] = (help, configure)
        return configure

    return register


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="perfkit", description="MPI performance analysis and rank placement.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_text, configure) in _COMMANDS.items():
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(run=configure(sub))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``perfkit`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"perfkit {args.command}: error: {exc}", file=sys.stderr)
        return 1


def read_dense_matrix(path: str | Path) -> np.ndarray:
    """A square matrix from ``.npy`` or a delimited text file (comma, or whitespace, no header)."""
    path = Path(path)
    if path.suffix == ".npy":
        return np.load(path, allow_pickle=False)
    with path.open() as handle:
        first = handle.readline()
    return np.loadtxt(path, delimiter="," if "," in first else None, ndmin=2)


@command("place", "Profile-guided rank placement: write a launch file for a rank-to-rank traffic matrix.")
def _configure_place(parser: argparse.ArgumentParser) -> Runner:
    from perfkit.placement.launch import FORMATS
    from perfkit.placement.strategies import STRATEGIES

    parser.add_argument("matrix", help="traffic matrix, sender x receiver bytes (.csv / .txt / .npy)")
    parser.add_argument("--nodes", type=int, required=True, help="number of nodes")
    parser.add_argument("--ppn", type=int, required=True, help="cores (ranks) per node")
    parser.add_argument("--sockets", type=int, default=1, help="sockets per node (default 1)")
    parser.add_argument("--switch-size", type=int, default=None, help="nodes per leaf switch (default: one switch)")
    parser.add_argument("--strategy", choices=STRATEGIES, default="scotch")
    parser.add_argument("--format", choices=FORMATS, default="rankfile", help="launch file format")
    parser.add_argument("--hosts", help="file with one host name per line (default node000, node001, ...)")
    parser.add_argument("--seed", type=int, default=0, help="Scotch random seed (same seed, same placement)")
    parser.add_argument("--balance", type=float, default=0.05, help="Scotch load imbalance tolerance (default 0.05)")
    parser.add_argument("--timeout", type=float, default=300.0, help="Scotch time limit [s]")
    parser.add_argument("-o", "--output", help="launch file to write (default: standard output)")
    return _run_place


def _run_place(args: argparse.Namespace) -> int:
    from perfkit.placement.launch import read_hosts
    from perfkit.placement.strategies import place
    from perfkit.placement.topology import Topology

    topology = Topology(nodes=args.nodes, cores=args.ppn, sockets=args.sockets, switch_size=args.switch_size)
    hosts = read_hosts(args.hosts) if args.hosts else None
    matrix = read_dense_matrix(args.matrix)
    placement = place(
        matrix, topology, strategy=args.strategy, seed=args.seed, balance=args.balance, timeout=args.timeout
    )
    text = placement.write(args.format, args.output, hosts=hosts)
    if args.output is None:
        sys.stdout.write(text)
    block = place(matrix, topology, strategy="block")
    print(_summary(args.strategy, placement.cost(), block.cost(), placement.info), file=sys.stderr)
    return 0


def _summary(strategy: str, cost: Any, block: Any, info: dict[str, Any]) -> str:
    rows = [
        ("inter-node bytes", "inter_node_bytes"),
        ("hop-bytes", "hop_bytes"),
        ("max NIC bytes", "max_nic_bytes"),
        ("est. comm time [s]", "time_s"),
    ]
    lines = [f"{'':20s} {strategy:>14s} {'block':>14s} {'change':>8s}"]
    for label, field in rows:
        mine, base = getattr(cost, field), getattr(block, field)
        change = f"{100 * (mine / base - 1):+7.1f}%" if base else "     n/a"
        lines.append(f"{label:20s} {mine:14.4g} {base:14.4g} {change}")
    lines.append(f"inter-node share: {100 * cost.inter_node_fraction:.1f}% ({strategy}) vs "
                 f"{100 * block.inter_node_fraction:.1f}% (block)")
    if info.get("kept_block"):
        lines.append("Scotch found nothing better than block placement; block placement written.")
    return "\n".join(lines)
