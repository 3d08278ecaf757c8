"""A 100,000-rank synthetic run in memory and its placement: time and peak memory.

Writes ``benchmarks/results/synthetic_scale.json``.

Each measurement runs in a fresh process reporting its wall time and the peak increase of its
resident memory over the process after the imports (sampled every 2 ms), and its CPU time (the
machine is shared: wall times stretch with its load, CPU times less so):

* ``generate``: ``perfkit.synthetic.generate_run(ranks, "slt", steps=...)`` with its traffic matrix
  (a ``sparse.COO``: the 3-D stencil's partners, no N x N array) and size histograms;
* ``place``: the same run generated, then ``perfkit.place(run, Topology(nodes, ppn), "scotch")``
  (the node route above ``CORE_LEVEL_MAX_RANKS`` ranks) on the run's traffic, never densified;
  Scotch maps in a worker process, whose peak resident memory is reported beside.

Run: ``nice -n 19 python benchmarks/bench_synthetic_scale.py [--ranks 100000] [--steps 20]``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from timing import run_script

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "synthetic_scale.json"

MEASURE = """
import json, sys, time
import perfkit
from perfkit import synthetic
from perfkit.placement.topology import Topology
from timing import PeakRss
what, ranks, steps, ppn = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
with PeakRss() as memory:
    start, cpu = time.perf_counter(), time.process_time()
    run, _ = synthetic.generate_run(ranks, "slt", ppn=ppn, steps=steps)
    generated, generated_cpu = time.perf_counter() - start, time.process_time() - cpu
    out = {"ranks": ranks, "steps": steps, "generate_s": generated, "generate_cpu_s": generated_cpu,
           "traffic_type": type(run["traffic"].data).__name__,
           "traffic_nnz": int(getattr(run["traffic"].data, "nnz", 0)), "run_nbytes_mib": run.nbytes / 2**20}
    if what == "place":
        start, cpu = time.perf_counter(), time.process_time()
        placement = perfkit.place(run, Topology(nodes=-(-ranks // ppn), cores=ppn), "scotch", timeout=3000)
        out.update(place_s=time.perf_counter() - start, place_cpu_s_this_process=time.process_time() - cpu,
                   route=placement.info.get("route"),
                   inter_node_fraction=placement.cost().inter_node_fraction)
if what == "place":
    out.update(mapping_process_peak_rss_mib=memory.children_maxrss / 2**20)
out.update(what=what, rss_increase_mib=memory.increase / 2**20)
print(json.dumps(out))
"""


def measure(what: str, ranks: int, steps: int, ppn: int) -> dict:
    """The numbers of ``MEASURE`` from a fresh process."""
    return run_script(MEASURE, what, ranks, steps, ppn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--ppn", type=int, default=48)
    args = parser.parse_args()
    results = {}
    for what in ("generate", "place"):
        results[what] = measure(what, args.ranks, args.steps, args.ppn)
        print(json.dumps(results[what]), flush=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
