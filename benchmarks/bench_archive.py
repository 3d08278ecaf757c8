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
* ``place``: ``perfkit.place`` (Scotch) of the largest run with a matrix, named by its label in the whole
  lazy store (only that run's block of pairs is read); the Scotch worker's own peak is reported beside;
* ``place_large``: the same on one run of ``--large-ranks`` ranks (``synthetic.generate_run``, sparse,
  2 steps) saved alone with ``perfkit.save``, without files (reading MPInside's per-rank size tables
  costs about 3.5 ms a rank); its generation and save times and store size are reported.

The store's size is compared with the files' (MPInside files and their sidecars).

``--store STORE`` measures the steps on a store written before (e.g. the 100 runs x 100,000 ranks that
``bench_explorer_browser.py --only per_rank_100k`` builds): nothing is generated or converted.

Run: ``nice -n 19 python benchmarks/bench_archive.py [--runs 20] [--max-ranks 16384] [--matrices-up-to 16384]``.
The results are rewritten after each step, so a run that is stopped keeps what it measured.
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
STEPS = ("open_runs", "convert", "load", "scaling", "pop_metrics", "imbalance", "diagnose", "place", "place_large")
FILE_STEPS = STEPS[:-1]  # the steps on the study's files and their store
RANK_CHUNK = 4096

MEASURE = """
import json, sys, time
import perfkit
from perfkit.placement.topology import Topology
from timing import PeakRss
step, files, store, place_ranks = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
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
    label = str(ds["run"].values[list(ds["nprocs"].values).index(place_ranks)])
    topology = Topology(nodes=-(-place_ranks // ppn), cores=ppn)
    placement = perfkit.place(ds, topology, "scotch", run=label, timeout=3000)
    out.update(run=label, ranks=placement.nranks, route=placement.info["route"],
               kept_block=placement.info["kept_block"], map_s=placement.info["wall_time_s"],
               inter_node_fraction=float(placement.cost().inter_node_fraction))
seconds = time.perf_counter() - start
memory.stop()
if step == "open_runs":
    out["runs"] = out["runs"].sizes["run"]
if step == "place":
    out["worker_peak_mib"] = memory.children_maxrss / 2**20
out.update(step=step, wall_s=seconds, rss_before_mib=memory.base / 2**20, peak_increase_mib=memory.increase / 2**20)
print(json.dumps(out))
"""


def rank_counts(runs: int, low: int, high: int, ppn: int) -> list[int]:
    """``runs`` distinct rank counts spread geometrically from ``low`` to ``high``: multiples of ``ppn`` without
    a prime factor above 7 (``synthetic.process_grid`` cuts its mesh into such counts of blocks), each the
    nearest to its target that an earlier target did not take.
    """
    candidates = np.arange(-(-low // ppn), high // ppn + 1) * ppn
    rest = candidates.copy()
    for prime in (2, 3, 5, 7):
        while (done := rest % prime == 0).any():
            rest = np.where(done, rest // prime, rest)
    smooth = candidates[rest == 1]
    if smooth.size < runs:
        raise SystemExit(f"{runs} distinct rank counts do not fit between {low} and {high} ranks")
    free = np.ones(smooth.size, dtype=bool)
    for target in np.geomspace(low, high, runs):  # the nearest count not taken yet
        free[np.flatnonzero(free)[np.argmin(np.abs(np.log(smooth[free] / target)))]] = False
    return [int(n) for n in smooth[~free]]


def folder_bytes(paths: list[Path]) -> int:
    """Bytes of ``paths``' files, folders walked."""
    total = 0
    for path in paths:
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        total += sum(p.stat().st_size for p in files)
    return total


def measure(step: str, files: list[str], store: Path, place_ranks: int, ppn: int) -> dict:
    """The numbers of ``MEASURE`` for ``step`` from a fresh process."""
    return run_script(MEASURE, step, json.dumps(files), store, place_ranks, ppn, RANK_CHUNK)


def save_large(ranks: int, store: Path) -> dict:
    """Generate one sparse synthetic run of ``ranks`` ranks and save it alone at ``store``; its numbers."""
    from perfkit import save, synthetic

    start = time.perf_counter()
    run, _ = synthetic.generate_run(ranks, "slt", steps=2)
    generated = time.perf_counter() - start
    pairs = int(run["traffic"].data.nnz // run.sizes["quantity"])
    start = time.perf_counter()
    save(run, store)
    return {"ranks": ranks, "pairs": pairs, "generate_s": generated, "save_s": time.perf_counter() - start,
            "store_mib": folder_bytes([store]) / 2**20}


def table(summary: dict) -> str:
    """The markdown table of ``summary``."""
    store = (f"files {summary['files_mib']:.1f} MiB, store {summary['store_mib']:.1f} MiB "
             f"({summary['store_over_files']:.2f}x)" if "store_mib" in summary else "")
    generated = (f"generated in {summary['generate_s']:.0f} s" if "generate_s" in summary
                 else "files written beforehand (--files)")
    lines = [f"# Archive benchmark: {summary['runs']} runs of {summary['ranks'][0]:,}-{summary['ranks'][-1]:,} ranks",
             "", f"MPInside `slt`, {summary['steps']} steps, {sum(summary['ranks']):,} ranks in all, matrices up to "
             f"{summary['matrices_up_to']:,} ranks; {store}; {generated}; "
             f"placement on the run of {summary['place_ranks']:,} ranks; load average at the end "
             f"{summary['load_average'][0]:.1f}.", "",
             "| step | wall time [s] | peak memory increase [MiB] | files/s | ranks/s |", "|---|---|---|---|---|"]
    for row in summary["results"]:
        rate = (f"{row['files_per_s']:.2f} | {row['ranks_per_s']:,.0f}" if "files_per_s" in row else " | ")
        lines.append(f"| {row['step']} | {row['wall_s']:.2f} | {row['peak_increase_mib']:.0f} | {rate} |")
    for row in summary["results"]:
        if row["step"] in ("place", "place_large"):
            lines += ["", f"{row['step']}: Scotch's {row['route']} route on {row['ranks']:,} ranks ({row['run']}), "
                      f"mapping "
                      f"{row['map_s']:.1f} s, inter-node share of bytes {row['inter_node_fraction']:.0%}"
                      f"{' (block kept)' if row['kept_block'] else ''}; the Scotch worker's peak "
                      f"{row['worker_peak_mib']:.0f} MiB."]
    if "large" in summary:
        large = summary["large"]
        lines += ["", f"place_large's run: {large['ranks']:,} ranks, {large['pairs']:,} pairs, generated in "
                  f"{large['generate_s']:.1f} s, saved in {large['save_s']:.1f} s, store {large['store_mib']:.1f} MiB."]
    if "incomplete" in summary:
        lines += ["", f"Incomplete: {summary['incomplete']}."]
    return "\n".join(lines) + "\n"


def measure_store(args: argparse.Namespace) -> None:
    """The steps of ``args.only`` on ``args.store`` (from ``load`` on; ``place`` when it holds traffic)."""
    import xarray as xr

    opened = xr.open_zarr(args.store, consolidated=True)
    counts = sorted(int(n) for n in opened["nprocs"].values)
    with_traffic = "traffic" in opened or "traffic_value" in opened
    steps = [step for step in FILE_STEPS[2:] if step in args.only and (step != "place" or with_traffic)]
    summary: dict = {"runs": len(counts), "ranks": counts, "store": str(args.store), "rank_chunk": RANK_CHUNK,
                     "store_mib": folder_bytes([args.store]) / 2**20, "place_ranks": counts[-1], "results": []}
    for step in steps:
        row = measure(step, [], args.store, counts[-1], args.ppn)
        summary["results"].append(row)
        print(json.dumps(row), flush=True)
        summary["load_average"] = os.getloadavg()
        args.output.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--min-ranks", type=int, default=240)
    parser.add_argument("--max-ranks", type=int, default=16_384)
    parser.add_argument("--matrices-up-to", type=int, default=16_384)
    parser.add_argument("--steps", type=int, default=10, help="time steps of each synthetic run")
    parser.add_argument("--ppn", type=int, default=24)
    parser.add_argument("--large-ranks", type=int, default=100_000, help="ranks of place_large's run")
    parser.add_argument("--only", nargs="+", choices=STEPS, default=list(STEPS))
    parser.add_argument("--output", type=Path, default=RESULTS / "archive")
    parser.add_argument("--files", type=Path, help="a study written before by write_series (<ranks>/slt.mpinside "
                        "folders): measured as it is, nothing generated")
    parser.add_argument("--store", type=Path, help="a store written before: only the steps on it are measured")
    args = parser.parse_args()
    if args.store:
        measure_store(args)
        return
    from perfkit import synthetic

    given = sorted(args.files.glob("*/slt.mpinside"), key=lambda p: int(p.parent.name)) if args.files else []
    counts = [int(p.parent.name) for p in given] or rank_counts(args.runs, args.min_ranks, args.max_ranks, args.ppn)
    args.runs = len(counts)
    summary: dict = {"runs": args.runs, "ranks": counts, "steps": args.steps, "ppn": args.ppn,
                     "matrices_up_to": args.matrices_up_to, "rank_chunk": RANK_CHUNK,
                     "place_ranks": max(n for n in counts if n <= args.matrices_up_to), "results": []}

    def report(incomplete: str = "") -> None:  # after each step: a stopped run keeps what it measured
        summary.update(load_average=os.getloadavg(), **({"incomplete": incomplete} if incomplete else {}))
        if not incomplete:
            summary.pop("incomplete", None)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")
        args.output.with_suffix(".md").write_text(table(summary))

    with tempfile.TemporaryDirectory(prefix="archive-") as tmp:
        store = Path(tmp) / "study.zarr"
        needed = set(args.only) | ({"convert"} if set(args.only) & set(FILE_STEPS[2:]) else set())  # the store
        steps = [step for step in STEPS if step in needed]
        start = time.perf_counter()
        if given:
            written = [q for p in given for q in (p, p.with_name(p.name + ".perfkit.json")) if q.exists()]
        else:
            written = [] if not set(steps) & set(FILE_STEPS) else synthetic.write_series(
                Path(tmp) / "files", counts, modes=("slt",), ppn=args.ppn, steps=args.steps,
                matrices_up_to=args.matrices_up_to)
            summary["generate_s"] = time.perf_counter() - start
        print(f"{len(counts)} runs, {sum(counts):,} ranks; generated in {summary.get('generate_s', 0):.0f} s",
              flush=True)
        files = sorted(str(p) for p in written if p.suffix == ".mpinside")
        sidecars = [p for p in written if p.name.endswith(".perfkit.json")]
        for k, step in enumerate(steps):
            report(f"running {step}; not measured: {', '.join(steps[k:])}")
            if step == "place_large":
                store = Path(tmp) / "large.zarr"
                summary["large"] = save_large(args.large_ranks, store)
                row = measure("place", [], store, args.large_ranks, args.ppn) | {"step": step}
            else:
                row = measure(step, files, store, summary["place_ranks"], args.ppn)
            if step in ("open_runs", "convert"):
                row.update(files_per_s=len(files) / row["wall_s"], ranks_per_s=sum(counts) / row["wall_s"])
            if step == "convert":
                files_bytes, store_bytes = folder_bytes([Path(f) for f in files] + sidecars), folder_bytes([store])
                summary.update(files_mib=files_bytes / 2**20, store_mib=store_bytes / 2**20,
                               store_over_files=store_bytes / files_bytes)
            summary["results"].append(row)
            print(json.dumps(row), flush=True)
    report()
    print(table(summary))


if __name__ == "__main__":
    main()
