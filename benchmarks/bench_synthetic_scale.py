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
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "synthetic_scale.json"

MEASURE = """
import json, os, resource, sys, threading, time
import perfkit
from perfkit import synthetic
from perfkit.placement.topology import Topology
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page
what, ranks, steps, ppn = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
base, peak, done = rss(), [0], threading.Event()
def sample():
    while not done.wait(0.002):
        peak[0] = max(peak[0], rss())
sampler = threading.Thread(target=sample)
sampler.start()
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
               inter_node_fraction=placement.cost().inter_node_fraction,
               mapping_process_peak_rss_mib=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
done.set()
sampler.join()
out.update(what=what, rss_increase_mib=(max(peak[0], rss()) - base) / 2**20)
print(json.dumps(out))
"""


def measure(what: str, ranks: int, steps: int, ppn: int) -> dict:
    """The numbers of ``MEASURE`` from a fresh process."""
    out = subprocess.run([sys.executable, "-c", MEASURE, what, str(ranks), str(steps), str(ppn)], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


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
