"""Placement benchmark: Scotch's two routes vs block on 3D 26-point stencils, 48 cores per node.

For 4,096 to 65,536 ranks, with natural and randomly renumbered rank numbering, run block, the
core-level route (Scotch maps onto single cores), the node route (``scotch_nodes``: Scotch maps
onto node parts of ``GROUP_CORES`` cores, then cores in rank order) and, for reference, the node
route onto whole nodes, and report wall time, inter-node bytes and hop-bytes. Times are also given
as ratios to the core-level route's, measured in the same process on the same matrix. The
crossover is the smallest size from which the node route is both faster than the core-level
route and within 2% of its inter-node bytes, for both numberings; ``place(strategy="scotch")``
switches route above ``CORE_LEVEL_MAX_RANKS``. Writes ``benchmarks/results/placement.json``.

    python benchmarks/bench_placement.py [--sizes 4096 16384 65536] [--core-timeout 300]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from perfkit.placement import strategies
from perfkit.placement import topology as topology_module
from perfkit.placement.scotch import ScotchTimeout
from perfkit.placement.strategies import place
from perfkit.placement.synthetic import renumber, stencil_3d
from perfkit.placement.topology import Topology

CORES_PER_NODE = 48
SHAPES = {
    2048: (16, 16, 8), 4096: (16, 16, 16), 8192: (32, 16, 16), 16384: (32, 32, 16), 32768: (32, 32, 32),
    65536: (64, 32, 32),
}
TOLERANCE = 0.02
RESULTS = Path(__file__).resolve().parent / "results" / "placement.json"
TARGETS = (
    "scotch (default route), 65,536 ranks: place() < 5 s wall",
    "scotch (default route), 65,536 ranks: place() < 5 s CPU (this process and the Scotch worker)",
    "above CORE_LEVEL_MAX_RANKS: node route inter-node bytes within 2% of core level",
    "renumbered stencils: scotch inter-node bytes >= 50% below block",
)
#: name in the results -> (strategy, core-level limit, smallest node part in cores)
VARIANTS = {
    "block": ("block", None, None),
    "core_route": ("scotch", sys.maxsize, None),
    "node_route": ("scotch_nodes", None, None),
    "whole_nodes": ("scotch_nodes", None, CORES_PER_NODE),
}


def cpu_seconds() -> float:
    """CPU time [s] of this process plus its finished children (the Scotch workers): unlike wall
    time, it barely moves when other jobs share the machine."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


@contextmanager
def variant(core_limit: int | None, group_cores: int | None):
    """Temporarily force the core-level route or whole-node targets."""
    saved = strategies.CORE_LEVEL_MAX_RANKS, topology_module.GROUP_CORES
    if core_limit is not None:
        strategies.CORE_LEVEL_MAX_RANKS = core_limit
    if group_cores is not None:
        topology_module.GROUP_CORES = group_cores
    try:
        yield
    finally:
        strategies.CORE_LEVEL_MAX_RANKS, topology_module.GROUP_CORES = saved


def run_case(ranks: int, numbering: str, core_timeout: float) -> list[dict]:
    matrix = stencil_3d(SHAPES[ranks])
    if numbering == "renumbered":
        matrix = renumber(matrix, seed=1)
    topology = Topology(nodes=-(-ranks // CORES_PER_NODE), cores=CORES_PER_NODE)
    rows = []
    block = None
    for name, (strategy, core_limit, group_cores) in VARIANTS.items():
        start, cpu_start = time.perf_counter(), cpu_seconds()
        try:
            with variant(core_limit, group_cores):
                placement = place(matrix, topology, strategy, timeout=core_timeout)
        except ScotchTimeout:
            rows.append({"ranks": ranks, "numbering": numbering, "variant": name, "timed_out": core_timeout})
            continue
        wall, cpu = time.perf_counter() - start, cpu_seconds() - cpu_start
        cost = placement.cost()
        block = block or cost
        info = placement.info
        rows.append({
            "ranks": ranks,
            "numbering": numbering,
            "variant": name,
            "strategy": strategy,
            "nodes": topology.nodes,
            "groups_per_node": info.get("groups_per_node", 0),
            "map_time_s": info.get("map_time_s", 0.0),
            "split_time_s": info.get("split_time_s", 0.0),
            "place_wall_s": wall,
            "place_cpu_s": cpu,
            "repaired_ranks": info.get("moved", 0),
            "kept_block": info.get("kept_block", False),
            "inter_node_bytes": cost.inter_node_bytes,
            "inter_node_fraction": cost.inter_node_fraction,
            "inter_node_vs_block": cost.inter_node_bytes / block.inter_node_bytes,
            "hop_bytes": cost.hop_bytes,
            "hop_bytes_vs_block": cost.hop_bytes / block.hop_bytes,
            "max_nic_bytes": cost.max_nic_bytes,
        })
    core = next((r for r in rows if r["variant"] == "core_route" and "timed_out" not in r), None)
    for row in rows:
        if core and "timed_out" not in row:
            row["wall_vs_core_route"] = row["place_wall_s"] / core["place_wall_s"]
            row["cpu_vs_core_route"] = row["place_cpu_s"] / core["place_cpu_s"]
            row["inter_node_vs_core_route"] = row["inter_node_bytes"] / core["inter_node_bytes"]
        print(_format_row(row), flush=True)
    return rows


def _format_row(row: dict) -> str:
    head = f"{row['ranks']:>6d} {row['numbering']:>10s} {row['variant']:>11s}"
    if "timed_out" in row:
        return f"{head}   timed out after {row['timed_out']:g} s"
    return (
        f"{head} {row['map_time_s']:8.2f} {row['place_wall_s']:8.2f} {row['place_cpu_s']:7.2f} "
        f"{row.get('cpu_vs_core_route', np.nan):7.3f} "
        f"{100 * row['inter_node_fraction']:7.2f}% {row['inter_node_vs_block']:7.3f} "
        f"{row.get('inter_node_vs_core_route', np.nan):8.4f} {row['repaired_ranks']:6d}"
    )


def _find(rows: list[dict], ranks: int, numbering: str, name: str) -> dict | None:
    match = [r for r in rows if (r["ranks"], r["numbering"], r["variant"]) == (ranks, numbering, name)]
    return match[0] if match and "timed_out" not in match[0] else None


def crossover(rows: list[dict]) -> dict[str, object]:
    """Per size: node route cheaper in CPU time than core level and within 2% of its inter-node
    bytes, for both numberings."""
    verdict = {}
    for ranks in sorted({r["ranks"] for r in rows}):
        pairs = [(_find(rows, ranks, n, "node_route"), _find(rows, ranks, n, "core_route"))
                 for n in ("natural", "renumbered")]
        if not all(a and b for a, b in pairs):
            verdict[ranks] = None
            continue
        verdict[ranks] = all(a["place_cpu_s"] < b["place_cpu_s"]
                             and a["inter_node_bytes"] <= (1 + TOLERANCE) * b["inter_node_bytes"] for a, b in pairs)
    sizes = sorted(verdict)
    pays = [s for i, s in enumerate(sizes) if all(verdict[t] for t in sizes[i:])]
    return {"node_route_pays": {str(k): v for k, v in verdict.items()},
            "smallest_size_from_which_node_route_pays": pays[0] if pays else None,
            "CORE_LEVEL_MAX_RANKS": strategies.CORE_LEVEL_MAX_RANKS}


def check_targets(rows: list[dict], default_wall: dict[str, float]) -> dict[str, bool | None]:
    keys = list(TARGETS)
    targets: dict[str, bool | None] = dict.fromkeys(keys)
    if default_wall:
        targets[keys[0]] = all(w < 5 for k, w in default_wall.items() if not k.endswith("_cpu"))
        targets[keys[1]] = all(w < 5 for k, w in default_wall.items() if k.endswith("_cpu"))
    pairs = [(_find(rows, r, n, "node_route"), _find(rows, r, n, "core_route"))
             for r in sorted({row["ranks"] for row in rows}) if r > strategies.CORE_LEVEL_MAX_RANKS
             for n in ("natural", "renumbered")]
    pairs = [(a, b) for a, b in pairs if a and b]
    if pairs:
        targets[keys[2]] = all(a["inter_node_bytes"] <= (1 + TOLERANCE) * b["inter_node_bytes"] for a, b in pairs)
    chosen = "node_route" if max(r["ranks"] for r in rows) > strategies.CORE_LEVEL_MAX_RANKS else "core_route"
    renumbered = [r for r in rows if r["numbering"] == "renumbered" and r["variant"] == chosen and "timed_out" not in r]
    if renumbered:
        targets[keys[3]] = all(r["inter_node_vs_block"] <= 0.5 for r in renumbered)
    return targets


def default_route_wall(ranks: int) -> dict[str, float]:
    """Wall and CPU time [s] of ``place(strategy="scotch")`` as shipped (its own route choice)."""
    walls = {}
    for numbering in ("natural", "renumbered"):
        matrix = stencil_3d(SHAPES[ranks])
        if numbering == "renumbered":
            matrix = renumber(matrix, seed=1)
        topology = Topology(nodes=-(-ranks // CORES_PER_NODE), cores=CORES_PER_NODE)
        start, cpu_start = time.perf_counter(), cpu_seconds()
        placement = place(matrix, topology, "scotch")
        walls[numbering] = time.perf_counter() - start
        walls[f"{numbering}_cpu"] = cpu_seconds() - cpu_start
        print(f"{ranks:>6d} {numbering:>10s} scotch (route {placement.info['route']}): {walls[numbering]:.2f} s wall, "
              f"{walls[f'{numbering}_cpu']:.2f} s CPU, load {os.getloadavg()[0]:.1f}")
    return walls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192, 16384, 32768, 65536],
                        choices=sorted(SHAPES))
    parser.add_argument("--core-timeout", type=float, default=300.0, help="time limit per Scotch map [s]")
    args = parser.parse_args()
    print(f"{'ranks':>6s} {'numbering':>10s} {'variant':>11s} {'map[s]':>8s} {'wall[s]':>8s} {'cpu[s]':>7s} "
          f"{'cpu/core':>7s} "
          f"{'inter%':>8s} {'inter/bl':>7s} {'in/core':>8s} {'moved':>6s}")
    rows = [row for ranks in args.sizes for numbering in ("natural", "renumbered")
            for row in run_case(ranks, numbering, args.core_timeout)]
    default_wall = default_route_wall(65536) if 65536 in args.sizes else {}
    targets = check_targets(rows, default_wall)
    found = crossover(rows)
    print(json.dumps(found))
    for name, ok in targets.items():
        print(f"{'PASS' if ok else 'n/a ' if ok is None else 'FAIL'}  {name}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "benchmark": "3D 26-point stencil placement, 48 cores per node: Scotch core-level vs node route",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
                    "load_average_at_end": os.getloadavg()},
        "rows": rows,
        "scotch_default_route_65536_wall_s": default_wall,
        "crossover": found,
        "targets": targets,
    }, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
