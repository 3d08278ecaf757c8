"""A 100,000-rank run with a 6-partner traffic matrix: stored sparse, then placed from the store.

Writes ``benchmarks/results/sparse_store.json``.

The run is ``perfkit.synthetic``'s 3-D stencil (``slt``), its matrix kept to the 6 face partners
of each rank (a ``sparse.COO``; no N x N array: dense it would be 240 GB). Each step runs in a
fresh process reporting its wall time, its peak resident memory (absolute and above the process
after its imports, sampled every 2 ms, and ``ru_maxrss``), and that of its child processes:

* ``save``: generate the run, ``perfkit.save`` it to a zarr store (pair tables, O(non-zeros));
  the store's size on disk;
* ``convert`` (with ``--convert``): the same run written as an MPInside file (sparse matrix
  layout), then ``perfkit.convert`` of that file (one process) into a store; both sizes;
* ``place``: ``perfkit.load(store, chunks={})`` (traffic: a dask array of one ``sparse.COO`` block)
  of the saved store and ``perfkit.place(..., "scotch")`` on it; Scotch maps in a worker process, whose peak
  resident memory is ``children_maxrss_mib``.

Run: ``nice -n 19 python benchmarks/bench_sparse_store.py [--ranks 100000] [--ppn 32] [--convert]``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from timing import run_script

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "sparse_store.json"

MEASURE = """
import json, sys, time, warnings
from pathlib import Path
import numpy as np
import sparse
import perfkit
from perfkit import synthetic
from perfkit.placement.topology import Topology
from timing import PeakRss
warnings.simplefilter("ignore", perfkit.PerfkitWarning)
what, ranks, ppn, work = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
memory = PeakRss().start()
def size(path):
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size
def six_partner_run():
    sim = synthetic.simulate(ranks, ppn=ppn, steps=2)
    run = synthetic.to_dataset(sim, "slt")
    coo = run["traffic"].data
    lay = sim.layout
    rows, faces = np.nonzero(lay.nb[:, lay.faces] >= 0)
    face_pairs = np.unique(rows * ranks + lay.nb[rows, lay.faces[faces]])
    keep = np.isin(coo.coords[1] * ranks + coo.coords[2], face_pairs)
    traffic = sparse.COO(coo.coords[:, keep], coo.data[keep], shape=coo.shape, sorted=True, has_duplicates=False)
    return run.assign(traffic=(run["traffic"].dims, traffic))
out = {"what": what, "ranks": ranks}
start = time.perf_counter()
if what == "save":
    run = six_partner_run()
    coo = run["traffic"].data
    out.update(generate_s=time.perf_counter() - start, traffic_values=int(coo.nnz),
               pairs=int(np.unique(coo.coords[1] * ranks + coo.coords[2]).size),
               max_partners=int(np.bincount(coo.coords[1][coo.coords[3] == 0]).max()))
    start = time.perf_counter()
    perfkit.save(run, work / "saved.zarr")
    out.update(save_s=time.perf_counter() - start, store_mb=size(work / "saved.zarr") / 1e6)
elif what == "convert":
    from perfkit.io.mpinside import write
    write(six_partner_run(), work / "run.mpinside")
    out.update(write_file_s=time.perf_counter() - start, file_mb=size(work / "run.mpinside") / 1e6)
    start = time.perf_counter()
    perfkit.convert([work / "run.mpinside"], work / "converted.zarr", workers=1, progress=False)
    out.update(convert_s=time.perf_counter() - start, store_mb=size(work / "converted.zarr") / 1e6)
else:
    ds = perfkit.load(work / "saved.zarr", chunks={})
    block = ds["traffic"].isel(run=0).data
    out.update(traffic_lazy=type(block).__name__, block_type=type(block._meta).__name__)
    placement = perfkit.place(ds, Topology(nodes=-(-ranks // ppn), cores=ppn), "scotch", timeout=3000)
    out.update(place_s=time.perf_counter() - start, route=placement.info.get("route"),
               inter_node_fraction=placement.cost().inter_node_fraction)
memory.stop()
out.update(peak_rss_mib=memory.peak / 2**20, rss_increase_mib=memory.increase / 2**20,
           maxrss_mib=memory.maxrss / 2**20, children_maxrss_mib=memory.children_maxrss / 2**20)
print(json.dumps(out))
"""


def measure(what: str, ranks: int, ppn: int, work: Path) -> dict:
    """One step in a fresh process (its JSON line)."""
    return run_script(MEASURE, what, ranks, ppn, work)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=100_000)
    parser.add_argument("--ppn", type=int, default=32, help="ranks per node (the run's layout and the topology)")
    parser.add_argument("--convert", action="store_true", help="also write the MPInside file and convert it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        steps = {what: measure(what, args.ranks, args.ppn, Path(tmp))
                 for what in ("save", *(("convert",) if args.convert else ()), "place")}
    results = {"load_average_1min_at_end": os.getloadavg()[0],
               "limits": {"store_mb": 50, "place_peak_rss_mib": 2048}, **steps}
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
