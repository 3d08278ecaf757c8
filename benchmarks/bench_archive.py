"""A centre's archive end to end: synthetic study -> files -> store -> lazy analyses -> placement.

Writes ``benchmarks/results/archive.json`` and ``archive.md``. ``perfkit.synthetic.write_series``
writes ``--runs`` MPInside runs (mode ``slt``, ``--steps`` steps, one seed) whose rank counts are
spread geometrically from ``--min-ranks`` to ``--max-ranks`` (multiples of ``--ppn``), with their
traffic matrices up to ``--matrices-up-to`` ranks. Then each step runs in a fresh process that
reports its wall time and the peak increase of its resident memory over the process after its
imports (and, for the analyses, after ``perfkit.load``), sampled every 2 ms:

* ``open_runs``: every file read into memory (the reference for files/s);
* ``convert``: every file into one zarr store (``perfkit.convert``, its default local pool);
* ``load``: ``perfkit.load(store, chunks={"rank": 4096})``, lazy;
* ``scaling``, ``pop_metrics``, ``imbalance``, ``diagnose``: on that lazy cube;
* ``place``: ``perfkit.place`` (Scotch) of the largest run with a matrix, read from the store.

The store's size is compared with the files' (MPInside files and their sidecars).

Run: ``nice -n 19 python benchmarks/bench_archive.py [--runs 20] [--max-ranks 16384] [--matrices-up-to 4096]``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from timing import run_script

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
STEPS = ("open_runs", "convert", "load", "scaling", "pop_metrics", "imbalance", "diagnose", "place")
RANK_CHUNK = 4096

MEASURE = """
import json, sys, time
import perfkit
from perfkit.placement.topology import Topology
from timing import PeakRss
step, files, store, place_run = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
ppn, chunk = int(sys.argv[5]), int(sys.argv[6])
ds = perfkit.load(store, chunks={"rank": chunk}) if step not in ("open_runs", "convert", "load") else None
memory = PeakRss().start()
start = time.perf_counter()
out = {}
if step == "open_runs":
    out["runs"] = perfkit.open_runs(files)
elif step == "convert":
    perfkit.convert(files, store)
elif step == "load":
    ds = perfkit.load(store, chunks={"rank": chunk})
    out["runs"], out["ranks"] = ds.sizes["run"], ds.sizes["rank"]
elif step == "scaling":
    out["rows"] = len(perfkit.scaling(ds))
elif step == "pop_metrics":
    out["parallel_efficiency_mean"] = float(perfkit.pop_metrics(ds)["parallel_efficiency"].mean())
elif step == "imbalance":
    out["max_over_mean_mean"] = float(perfkit.imbalance(ds)["max_over_mean"].mean())
elif step == "diagnose":
    out["findings"] = len(perfkit.diagnose(ds))
elif step == "place":
    run = ds.sel(run=[place_run])
    nprocs = int(run["nprocs"].values[0])
    placement = perfkit.place(run, Topology(nodes=-(-nprocs // ppn), cores=ppn), "scotch", timeout=3000)
    out["inter_node_fraction"] = float(placement.cost().inter_node_fraction)
    out["ranks"] = nprocs
seconds = time.perf_counter() - start
memory.stop()
if step == "open_runs":
    out["runs"] = out["runs"].sizes["run"]
out.update(step=step, wall_s=seconds, rss_before_mib=memory.base / 2**20, peak_increase_mib=memory.increase / 2**20)
print(json.dumps(out))
"""


def rank_counts(runs: int, low: int, high: int, ppn: int) -> list[int]:
    """``runs`` distinct rank counts spread geometrically from ``low`` to ``high``: multiples of ``ppn`` without
    a prime factor above 7 (``synthetic.process_grid`` cuts its mesh into such counts of blocks).
    """
    candidates = np.arange(-(-low // ppn), high // ppn + 1) * ppn
    rest = candidates.copy()
    for prime in (2, 3, 5, 7):
        while (done := rest % prime == 0).any():
            rest = np.where(done, rest // prime, rest)
    smooth = candidates[rest == 1]
    picks = np.unique([smooth[np.argmin(np.abs(np.log(smooth / target)))] for target in np.geomspace(low, high, runs)])
    if picks.size != runs:
        raise SystemExit(f"{runs} distinct rank counts do not fit between {low} and {high} ranks")
    return [int(n) for n in picks]


def folder_bytes(paths: list[Path]) -> int:
    """Bytes of ``paths``' files, folders walked."""
    total = 0
    for path in paths:
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        total += sum(p.stat().st_size for p in files)
    return total


def measure(step: str, files: list[str], store: Path, place_run: str, ppn: int) -> dict:
    """The numbers of ``MEASURE`` for ``step`` from a fresh process."""
    return run_script(MEASURE, step, json.dumps(files), store, place_run, ppn, RANK_CHUNK)


def table(summary: dict) -> str:
    """The markdown table of ``summary``."""
    lines = [f"# Archive benchmark: {summary['runs']} runs of {summary['ranks'][0]:,}-{summary['ranks'][-1]:,} ranks",
             "", f"MPInside `slt`, {summary['steps']} steps, matrices up to {summary['matrices_up_to']:,} ranks; "
             f"files {summary['files_mib']:.1f} MiB, store {summary['store_mib']:.1f} MiB "
             f"({summary['store_over_files']:.2f}x); generated in {summary['generate_s']:.0f} s; "
             f"placement on the run of {summary['place_ranks']:,} ranks.", "",
             "| step | wall time [s] | peak memory increase [MiB] | files/s |", "|---|---|---|---|"]
    for row in summary["results"]:
        rate = f"{row['files_per_s']:.2f}" if "files_per_s" in row else ""
        lines.append(f"| {row['step']} | {row['wall_s']:.2f} | {row['peak_increase_mib']:.0f} | {rate} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--min-ranks", type=int, default=240)
    parser.add_argument("--max-ranks", type=int, default=16_384)
    parser.add_argument("--matrices-up-to", type=int, default=4_096)
    parser.add_argument("--steps", type=int, default=20, help="time steps of each synthetic run")
    parser.add_argument("--ppn", type=int, default=24)
    parser.add_argument("--only", nargs="+", choices=STEPS, default=list(STEPS))
    parser.add_argument("--output", type=Path, default=RESULTS / "archive")
    args = parser.parse_args()
    from perfkit import synthetic

    counts = rank_counts(args.runs, args.min_ranks, args.max_ranks, args.ppn)
    with tempfile.TemporaryDirectory(prefix="archive-") as tmp:
        start = time.perf_counter()
        written = synthetic.write_series(Path(tmp) / "files", counts, modes=("slt",), ppn=args.ppn, steps=args.steps,
                                         matrices_up_to=args.matrices_up_to)
        generated = time.perf_counter() - start
        files = sorted(str(p) for p in written if p.suffix == ".mpinside")
        sidecars = [p for p in written if p.name.endswith(".perfkit.json")]
        place_ranks = max(n for n in counts if n <= args.matrices_up_to)
        place_run = synthetic.run_label(place_ranks, "slt")
        store = Path(tmp) / "study.zarr"
        results = []
        needed = set(args.only) | ({"convert"} if set(args.only) - {"open_runs"} else set())  # the store
        for step in (step for step in STEPS if step in needed):
            row = measure(step, files, store, place_run, args.ppn)
            if step in ("open_runs", "convert"):
                row["files_per_s"] = len(files) / row["wall_s"]
            results.append(row)
            print(json.dumps(row), flush=True)
        files_bytes = folder_bytes([Path(f) for f in files] + sidecars)
        store_bytes = folder_bytes([store])
    summary = {"runs": args.runs, "ranks": counts, "steps": args.steps, "ppn": args.ppn,
               "matrices_up_to": args.matrices_up_to, "rank_chunk": RANK_CHUNK, "generate_s": generated,
               "place_ranks": place_ranks, "files_mib": files_bytes / 2**20, "store_mib": store_bytes / 2**20,
               "store_over_files": store_bytes / files_bytes, "load_average": os.getloadavg(), "results": results}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")
    args.output.with_suffix(".md").write_text(table(summary))
    print(table(summary))


if __name__ == "__main__":
    main()
