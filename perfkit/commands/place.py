"""``perfkit place``'s help on each placement strategy, and the run it places from a store."""

from __future__ import annotations

import textwrap
from os import PathLike
from pathlib import Path

import xarray as xr

from perfkit.placement.decision import MIN_GAIN
from perfkit.placement.strategies import CORE_LEVEL_MAX_RANKS

#: One paragraph per strategy of ``perfkit.placement.strategies.STRATEGIES``: what it does, when to use it.
STRATEGY_HELP = {
    "block": "rank r on core r: consecutive ranks fill a node before the next (most launchers' default); "
             "the reference every other strategy is compared with.",
    "round_robin": "rank r on node r mod nodes, dealt like cards; spreads neighbouring ranks over the nodes, "
                   "which helps memory-bound codes and hurts ones that talk to their neighbours.",
    "random": "a random permutation of the cores (--seed); a baseline of what ignoring the traffic costs.",
    "scotch": "Scotch maps the rank-to-rank traffic onto the machine's tree (nodes, sockets, cores) so that "
              "heavy pairs share a socket or node; block is kept unless Scotch lowers its weighted cost by "
              f"more than {MIN_GAIN:.0%}. Above {CORE_LEVEL_MAX_RANKS:,} ranks, and on torus and hypercube "
              "machines, it takes the scotch_nodes route.",
    "scotch_nodes": "Scotch maps ranks onto nodes (each split into its sockets), then each part's ranks take "
                    "its cores in rank order; much faster for tens of thousands of ranks, nearly as good.",
}


def strategies_epilog(width: int = 100) -> str:
    """The strategies, one indented paragraph each, for the end of ``perfkit place --help``."""
    lines = ["strategies (--strategy):"]
    for name, text in STRATEGY_HELP.items():
        lines += textwrap.wrap(text, width, initial_indent=f"  {name:14s}", subsequent_indent=" " * 16)
    lines += ["", "The cost summary against block goes to standard output, or to standard error when the launch",
              "file does (no -o)."]
    return "\n".join(lines)


def store_run(path: str | PathLike, run: str | None) -> xr.Dataset:
    """Run ``run`` (a label or a glob pattern naming one run, ``perfkit.runs``) of the store ``perfkit convert``
    wrote at ``path``, read lazily, as a Dataset of one run; ``run`` may be None only when the store holds one
    run. ``ValueError`` naming the runs otherwise, and when the run has no rank-to-rank traffic."""
    from perfkit.runs import run_labels, select_one
    from perfkit.storage import load

    ds = load(Path(path), chunks={})
    k = select_one(run_labels(ds), run, str(path), "the one to place with --run LABEL")
    one = ds.isel(run=slice(k, k + 1))  # a slice keeps the lazy blocks; a list goes through sparse's indexing
    if "traffic" not in one:
        raise ValueError(f"{path} holds no rank-to-rank traffic; place needs runs converted with their matrices")
    return one
