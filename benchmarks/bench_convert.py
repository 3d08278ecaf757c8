"""``perfkit.convert`` throughput: files/s against worker count. Writes ``benchmarks/results/convert.json``.

Sets of files, each converted to a fresh zarr store:

* ``mpip``: ``--files`` copies of the real HPCCG mpiP reports (1 to 16 ranks, a few kB each),
  the many-small-files case;
* ``mpinside_<ranks>``: for each of ``--ranks`` (default 300, 16,384 and 40,000), ``--copies`` copies
  of one synthetic MPInside run of that many ranks (no matrices).

For each set: ``open_runs`` (threads, everything in memory; the reference, same process, same
bytes), then ``convert`` in this process (``workers=1``), in a local process pool of 2, and on a
``distributed.LocalCluster`` of 1 and 2 process workers; the pool and the clusters are started, and
every setup warmed up on a few files (imports), before timing. Each setup is timed ``--repeat``
times and its best rate kept; the machine is shared, so read the ratios to ``open_runs`` and the
speed-up from 1 to 2 workers, not the absolute rates.

Run: ``python benchmarks/bench_convert.py [--files 300] [--ranks 300 16384 40000] [--copies 100 16 8]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import distributed

import perfkit
from perfkit import synthetic
from perfkit.io.mpinside import write

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "convert.json"
HPCCG = sorted((ROOT / "tests" / "data" / "mpip" / "real" / "HPCCG-strong").glob("*/*.mpiP"))


def copies(sources: list[Path], n: int, folder: Path) -> list[Path]:
    """``n`` files in ``folder``, copies of ``sources`` in turn (distinct names, hence distinct runs)."""
    folder.mkdir(parents=True)
    out = []
    for k in range(n):
        src = sources[k % len(sources)]
        out.append(folder / f"{k:05d}_{src.name}")
        shutil.copy(src, out[-1])
    return out


def rate(func: Callable[[], object], n_files: int, repeat: int) -> float:
    """Files per second of the fastest of ``repeat`` calls of ``func``."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - start)
    return n_files / best


def size_mb(path: Path) -> float:
    """Bytes [MB] of the files under ``path``."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def measure(files: list[Path], work: Path, repeat: int) -> dict[str, object]:
    """files/s of open_runs and of convert with each worker setup, the speed-up from 1 to 2 workers,
    and the sizes of the files and of a store."""
    stores = iter(range(10**6))

    def convert(paths: list[Path] = files, **kw: object) -> Path:
        out = work / f"s{next(stores)}.zarr"
        perfkit.convert(paths, out, progress=False, **kw)
        return out

    perfkit.open_runs(files[:2], progress=False)  # warm-up: imports (zarr's among them), caches
    convert(workers=1, paths=files[:2])
    convert(workers=2, paths=files[:2])  # starts the local pool of 2, kept for the timed call
    out = {"open_runs_threads": rate(lambda: perfkit.open_runs(files, progress=False), len(files), repeat),
           "convert_in_process": rate(lambda: convert(workers=1), len(files), repeat),
           "convert_process_pool_2": rate(lambda: convert(workers=2), len(files), repeat)}
    for n in (1, 2):
        cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
        with cluster, distributed.Client(cluster) as client:
            client.run(__import__, "perfkit.io.convert")
            perfkit.convert(files[:4], work / f"warm{n}.zarr", progress=False)
            out[f"convert_localcluster_{n}_workers"] = rate(convert, len(files), repeat)
    ref = out["open_runs_threads"]
    store = convert(workers=1)
    result = {"load_average_after": [round(x, 1) for x in os.getloadavg()],
              "files": len(files), "files_mb": round(sum(f.stat().st_size for f in files) / 1e6, 1),
              "store_mb": round(size_mb(store), 1),
              "files_per_s": {k: round(v, 1) for k, v in out.items()},
              "ratio_to_open_runs": {k: round(v / ref, 2) for k, v in out.items()},
              "speedup_1_to_2_workers": {
                  "process_pool": round(out["convert_process_pool_2"] / out["convert_in_process"], 2),
                  "localcluster": round(out["convert_localcluster_2_workers"] / out["convert_localcluster_1_workers"],
                                        2)}}
    for path in work.glob("*.zarr"):
        shutil.rmtree(path)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=300, help="mpiP files")
    parser.add_argument("--ranks", type=int, nargs="+", default=[300, 16_384, 40_000], help="ranks of MPInside runs")
    parser.add_argument("--copies", type=int, nargs="+", default=[100, 16, 8], help="files of each rank count")
    parser.add_argument("--repeat", type=int, default=1, help="timed calls per setup (the best is kept)")
    args = parser.parse_args()
    if len(args.copies) != len(args.ranks):
        parser.error("--copies needs one count per --ranks")
    warnings.simplefilter("ignore", perfkit.PerfkitWarning)
    results: dict[str, object] = {
        "machine_note": f"2 cores shared with other jobs; best of {args.repeat} timed call(s) per setup",
        "load_average_before": [round(x, 1) for x in os.getloadavg()]}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        results["mpip"] = measure(copies(HPCCG, args.files, work / "mpip"), work, args.repeat)
        for ranks, n in zip(args.ranks, args.copies):
            sim = synthetic.simulate(ranks, steps=2)
            one = write(synthetic.to_dataset(sim, "slt", matrices=False, sizes=False), work / f"{ranks}.mpinside")
            files = copies([one], n, work / f"mpinside_{ranks}")
            results[f"mpinside_{ranks}"] = {"ranks": ranks, **measure(files, work, args.repeat)}
            shutil.rmtree(work / f"mpinside_{ranks}")
    results["load_average_after"] = [round(x, 1) for x in os.getloadavg()]
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
