"""Placement benchmark: Scotch vs block on 3D 26-point stencils, 48 cores per node.

For 2,048, 16,384 and 65,536 ranks, with natural and randomly renumbered rank numbering, run
block, core-level ``scotch`` and node-level ``scotch_nodes`` placement and report map time,
inter-node bytes and hop-bytes relative to block. Writes ``benchmarks/results/placement.json``
and prints a table; the targets checked are listed in ``TARGETS``.

    python benchmarks/bench_placement.py [--sizes 2048 16384 65536] [--core-timeout 300]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from perfkit.placement.scotch import ScotchTimeout
from perfkit.placement.strategies import place
from perfkit.placement.synthetic import renumber, stencil_3d
from perfkit.placement.topology import Topology

CORES_PER_NODE = 48
SHAPES = {2048: (16, 16, 8), 16384: (32, 32, 16), 65536: (64, 32, 32)}
RESULTS = Path(__file__).resolve().parent / "results" / "placement.json"
TARGETS = (
    "core-level scotch, 16,384 ranks: map < 3 s",
    "scotch_nodes, 65,536 ranks: map + split < 10 s",
    "scotch_nodes, 65,536 ranks: hop-bytes within 10% of core-level",
    "renumbered stencils: scotch inter-node bytes >= 50% below block",
)


def run_case(ranks: int, numbering: str, core_timeout: float) -> list[dict]:
    matrix = stencil_3d(SHAPES[ranks])
    if numbering == "renumbered":
        matrix = renumber(matrix, seed=1)
    topology = Topology(nodes=-(-ranks // CORES_PER_NODE), cores=CORES_PER_NODE)
    rows = []
    block = None
    for strategy in ("block", "scotch_nodes", "scotch"):
        start = time.perf_counter()
        try:
            placement = place(matrix, topology, strategy, timeout=core_timeout)
        except ScotchTimeout:
            rows.append({"ranks": ranks, "numbering": numbering, "strategy": strategy, "timed_out": core_timeout})
            continue
        wall = time.perf_counter() - start
        cost = placement.cost()
        block = block or cost
        info = placement.info
        rows.append({
            "ranks": ranks,
            "numbering": numbering,
            "strategy": strategy,
            "nodes": topology.nodes,
            "map_time_s": info.get("map_time_s", 0.0),
            "split_time_s": info.get("split_time_s", 0.0),
            "place_wall_s": wall,
            "repaired_ranks": info.get("moved", 0),
            "kept_block": info.get("kept_block", False),
            "inter_node_bytes": cost.inter_node_bytes,
            "inter_node_fraction": cost.inter_node_fraction,
            "inter_node_vs_block": cost.inter_node_bytes / block.inter_node_bytes,
            "hop_bytes": cost.hop_bytes,
            "hop_bytes_vs_block": cost.hop_bytes / block.hop_bytes,
            "max_nic_bytes": cost.max_nic_bytes,
        })
        print(_format_row(rows[-1]), flush=True)
    return rows


def _format_row(row: dict) -> str:
    head = f"{row['ranks']:>6d} {row['numbering']:>10s} {row['strategy']:>13s}"
    if "timed_out" in row:
        return f"{head}   timed out after {row['timed_out']:g} s"
    return (
        f"{head} {row['map_time_s']:8.2f} "
        f"{row['split_time_s']:7.2f} {row['place_wall_s']:8.2f} {100 * row['inter_node_fraction']:7.1f}% "
        f"{row['inter_node_vs_block']:7.3f} {row['hop_bytes_vs_block']:7.3f} {row['repaired_ranks']:6d}"
    )


def check_targets(rows: list[dict]) -> dict[str, bool | None]:
    def find(ranks: int, numbering: str, strategy: str) -> dict | None:
        match = [r for r in rows if (r["ranks"], r["numbering"], r["strategy"]) == (ranks, numbering, strategy)]
        return match[0] if match and "timed_out" not in match[0] else None

    keys = list(TARGETS)
    targets: dict[str, bool | None] = dict.fromkeys(keys)
    core16 = [find(16384, n, "scotch") for n in ("natural", "renumbered")]
    if all(core16):
        targets[keys[0]] = all(r["map_time_s"] < 3 for r in core16)
    nodes64 = [find(65536, n, "scotch_nodes") for n in ("natural", "renumbered")]
    if all(nodes64):
        targets[keys[1]] = all(r["map_time_s"] + r["split_time_s"] < 10 for r in nodes64)
    pairs = [(find(65536, n, "scotch_nodes"), find(65536, n, "scotch")) for n in ("natural", "renumbered")]
    pairs = [(a, b) for a, b in pairs if a and b]
    if pairs:
        targets[keys[2]] = all(a["hop_bytes"] <= 1.1 * b["hop_bytes"] for a, b in pairs)
    renumbered = [
        r for r in rows if r["numbering"] == "renumbered" and r["strategy"] != "block" and "timed_out" not in r
    ]
    if renumbered:
        targets[keys[3]] = all(r["inter_node_vs_block"] <= 0.5 for r in renumbered)
    return targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=sorted(SHAPES), choices=sorted(SHAPES))
    parser.add_argument("--core-timeout", type=float, default=300.0, help="time limit per Scotch map [s]")
    args = parser.parse_args()
    print(f"{'ranks':>6s} {'numbering':>10s} {'strategy':>13s} {'map[s]':>8s} {'split[s]':>7s} {'wall[s]':>8s} "
          f"{'inter%':>8s} {'inter/bl':>7s} {'hop/bl':>7s} {'moved':>6s}")
    rows = [row for ranks in args.sizes for numbering in ("natural", "renumbered")
            for row in run_case(ranks, numbering, args.core_timeout)]
    targets = check_targets(rows)
    for name, ok in targets.items():
        print(f"{'PASS' if ok else 'n/a ' if ok is None else 'FAIL'}  {name}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "benchmark": "3D 26-point stencil placement, 48 cores per node",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "numpy": np.__version__},
        "rows": rows,
        "targets": targets,
    }, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
