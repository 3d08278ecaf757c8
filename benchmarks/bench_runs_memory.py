"""Peak memory of ``pop_metrics`` + ``imbalance``, and of ``diagnose``, on a lazy store against its number of runs.

Writes ``benchmarks/results/runs_memory.json``. Stores of 6, 12, 24 and 48 runs of 16,384 ranks
each are laid out as ``perfkit.convert`` writes them (1 run x 4,096 ranks per chunk). Every run is
the real CloverLeaf mpiP report of 16 ranks (``tests/data/mpip/real``) stretched to 16,384 ranks:
rank ``r`` holds the values of report rank ``r mod 16``, its times and bytes scaled by a random
factor (gamma, mean 1) per rank and function; the functions, metrics and NaN pattern are the
report's. Each measurement runs in a fresh process: ``perfkit.load(store, chunks={"rank": 4096})``
then ``pop_metrics`` and ``imbalance`` (or, in another process, ``diagnose``) under dask's default
(threaded) scheduler, reporting the
peak increase of resident memory over the process after the imports and the ``load`` (sampled
every 2 ms), the process's peak (``ru_maxrss``, mostly the imports) and the peak of
``tracemalloc`` (numpy's buffers are traced); the smallest increase of ``--repeats`` processes
(``timing.PeakRss``). The result itself (the findings table's deep size, or the two Datasets'
bytes: ``result_mib``) must grow with the runs; the working memory, the increase minus the result,
must not: ``working_increase_ratio_last_first`` is the flat quantity, ``result_mib_per_run`` the
result's size per run.
``--perfkit DIR`` runs the analyses of another perfkit source tree (e.g. an older commit exported with ``git archive``).

Run: ``nice -n 19 python benchmarks/bench_runs_memory.py [--runs 6 12 24 48] [--repeats 2]
[--analyses pop+imbalance diagnose]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from timing import run_script

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "runs_memory.json"
REPORT = ROOT / "tests" / "data" / "mpip" / "real" / "CloverLeaf-strong" / "16" / "clover_leaf.16.29054.1.mpiP"
RANKS, CHUNK = 16_384, 4_096
ANALYSES = ("pop+imbalance", "diagnose")

MEASURE = """
import json, sys, tracemalloc
import perfkit
from perfkit.analysis.diagnosis import diagnose
from perfkit.analysis.imbalance import imbalance
from perfkit.analysis.pop import pop_metrics
from timing import PeakRss
ds = perfkit.load(sys.argv[1], chunks={"rank": int(sys.argv[2])})
with PeakRss() as memory:
    tracemalloc.start()
    if sys.argv[3] == "diagnose":
        found = diagnose(ds)
        check = {"findings": len(found), "efficiency_findings": int((found["category"] == "efficiency").sum()),
                 "result_mib": float(found.memory_usage(deep=True).sum()) / 2**20}
    else:
        pop, imb = pop_metrics(ds), imbalance(ds)
        check = {"load_balance_mean": float(pop["load_balance"].mean()),
                 "max_over_mean_compute": float(imb["max_over_mean"].sel(function="Compute").mean()),
                 "result_mib": (pop.nbytes + imb.nbytes) / 2**20}
    traced = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
print(json.dumps({"analysis": sys.argv[3], "runs": ds.sizes["run"], "profile_chunks_run": max(ds["profile"].chunks[0]),
                  "rss_before_mib": memory.base / 2**20, "rss_increase_mib": memory.increase / 2**20,
                  "ru_maxrss_mib": memory.maxrss / 2**20, "traced_peak_mib": traced / 2**20, **check}))
"""


def write_store(path: Path, n_runs: int) -> None:
    """A store of ``n_runs`` stretched CloverLeaf runs (module docstring), chunked as ``convert`` does."""
    import dask
    import dask.array as da
    import numpy as np
    import xarray as xr

    import perfkit

    report = perfkit.open_runs([REPORT])
    values = report["profile"].isel(run=0).transpose("rank", "function", "metric").values
    scaled = np.isin(report["metric"].values, ["time", "bytes_sent", "bytes_recv", "time_max", "time_min"])

    def block(block_info: dict | None = None) -> np.ndarray:
        (run, _), (first, last) = block_info[None]["array-location"][:2]
        rng = np.random.default_rng([run, first])
        out = values[np.arange(first, last) % values.shape[0]][None].copy()
        factor = rng.gamma(8.0, 1 / 8.0, (1, last - first, values.shape[1], 1))
        out[..., scaled] *= factor
        return out

    chunks = ((1,) * n_runs, (CHUNK,) * (RANKS // CHUNK), (values.shape[1],), (values.shape[2],))
    profile = da.map_blocks(block, dtype=np.float64, chunks=chunks)
    labels = [f"cloverleaf-{i:03d}" for i in range(n_runs)]
    run_coords = {name: ("run", np.repeat(report[name].values, n_runs)) for name in report.coords
                  if report[name].dims == ("run",) and name != "run"}
    run_coords.update(label=("run", labels), nprocs=("run", np.full(n_runs, RANKS)))
    coords = {name: report[name].variable for name in report.coords if "run" not in report[name].dims
              and "rank" not in report[name].dims}
    ds = xr.Dataset({"profile": (("run", "rank", "function", "metric"), profile)},
                    coords={**coords, **run_coords, "run": labels, "rank": np.arange(RANKS)}, attrs=report.attrs)
    with dask.config.set(scheduler="threads"):
        perfkit.save(ds, path)


def measure(store: Path, analysis: str, perfkit_dir: Path | None) -> dict:
    """The numbers of ``MEASURE`` for ``analysis`` (``pop+imbalance`` or ``diagnose``) from a fresh process."""
    return run_script(MEASURE, store, CHUNK, analysis, path=str(perfkit_dir) if perfkit_dir else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[6, 12, 24, 48])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--analyses", nargs="+", default=list(ANALYSES), choices=ANALYSES)
    parser.add_argument("--perfkit", type=Path, default=None, help="source tree holding the perfkit to measure")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    results: dict[str, list[dict]] = {analysis: [] for analysis in args.analyses}
    with tempfile.TemporaryDirectory(prefix="runs-memory-") as tmp:
        for n_runs in args.runs:
            store = Path(tmp) / f"runs{n_runs}.zarr"
            write_store(store, n_runs)
            for analysis in args.analyses:
                trials = [measure(store, analysis, args.perfkit) for _ in range(args.repeats)]
                best = min(trials, key=lambda t: t["rss_increase_mib"])
                best["rss_increase_mib_trials"] = [round(t["rss_increase_mib"], 1) for t in trials]
                results[analysis].append(best)
                print(json.dumps(best), flush=True)
            shutil.rmtree(store)
    summary = {"ranks": RANKS, "rank_chunk": CHUNK, "report": str(REPORT.relative_to(ROOT)),
               "perfkit": str(args.perfkit or "this tree"), "analyses": {}}
    for analysis, rows in results.items():
        first, last = rows[0], rows[-1]
        summary["analyses"][analysis] = {
            "results": rows, "ru_maxrss_ratio_last_first": last["ru_maxrss_mib"] / first["ru_maxrss_mib"],
            "rss_increase_ratio_last_first": last["rss_increase_mib"] / first["rss_increase_mib"],
            "traced_peak_ratio_last_first": last["traced_peak_mib"] / first["traced_peak_mib"],
            "working_increase_ratio_last_first": ((last["rss_increase_mib"] - last["result_mib"])
                                                  / (first["rss_increase_mib"] - first["result_mib"])),
            "result_mib_per_run": last["result_mib"] / last["runs"]}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({name: {k: v for k, v in one.items() if k != "results"}
                      for name, one in summary["analyses"].items()}, indent=2))


if __name__ == "__main__":
    main()
