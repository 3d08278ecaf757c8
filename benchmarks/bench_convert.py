"""``perfkit.convert`` throughput: files/s against worker count. Writes ``benchmarks/results/convert.json``.

Two sets of files, each converted to a fresh zarr store:

* ``mpip``: ``--files`` copies of the real HPCCG mpiP reports (1 to 16 ranks, a few kB each),
  the many-small-files case;
* ``mpinside``: ``--big`` copies of one synthetic MPInside run of ``--ranks`` ranks (no matrices).

For each set: ``open_runs`` (threads, everything in memory; the reference, same process, same
bytes), then ``convert`` in this process (``workers=1``), in a local process pool of 2, and on a
``distributed.LocalCluster`` of 1 and 2 process workers (started before timing). One timed call each
after a warm-up on a few files; the machine is shared, so read the ratios, not the absolute rates.

Run: ``python benchmarks/bench_convert.py [--files 400] [--big 20] [--ranks 50000]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
import warnings
from pathlib import Path

import distributed

import perfkit
from perfkit import synthetic
from perfkit.io.mpinside_writer import write

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


def rate(func, n_files: int) -> float:
    """Files per second of one call of ``func``."""
    start = time.perf_counter()
    func()
    return n_files / (time.perf_counter() - start)


def measure(files: list[Path], work: Path) -> dict[str, float]:
    """files/s of open_runs and of convert with each worker setup."""
    stores = iter(range(10**6))

    def convert(**kw):
        return perfkit.convert(files, work / f"s{next(stores)}.zarr", progress=False, **kw)

    out = {"open_runs_threads": rate(lambda: perfkit.open_runs(files, progress=False), len(files)),
           "convert_in_process": rate(lambda: convert(workers=1), len(files)),
           "convert_process_pool_2": rate(lambda: convert(workers=2), len(files))}
    for n in (1, 2):
        cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
        with cluster, distributed.Client(cluster) as client:
            client.run(__import__, "perfkit.io.convert")
            perfkit.convert(files[:4], work / f"warm{n}.zarr", progress=False)
            out[f"convert_localcluster_{n}_workers"] = rate(convert, len(files))
    return {k: round(v, 1) for k, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=400, help="mpiP files")
    parser.add_argument("--big", type=int, default=20, help="large MPInside files")
    parser.add_argument("--ranks", type=int, default=50_000, help="ranks of the large runs")
    args = parser.parse_args()
    warnings.simplefilter("ignore", perfkit.PerfkitWarning)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        small = copies(HPCCG, args.files, work / "mpip")
        sim = synthetic.simulate(args.ranks, steps=2)
        big_one = write(synthetic.to_dataset(sim, "slt", matrices=False, sizes=False), work / "big.mpinside")
        big = copies([big_one], args.big, work / "mpinside")
        results = {
            "machine_note": "2 cores shared with other jobs; one timed call per setup",
            "mpip": {"files": args.files, "files_per_s": measure(small, work)},
            "mpinside": {"files": args.big, "ranks": args.ranks, "mb_per_file": round(big_one.stat().st_size / 1e6, 1),
                         "files_per_s": measure(big, work)},
        }
    for name in ("mpip", "mpinside"):
        ref = results[name]["files_per_s"]["open_runs_threads"]
        results[name]["ratio_to_open_runs"] = {k: round(v / ref, 2) for k, v in results[name]["files_per_s"].items()}
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
